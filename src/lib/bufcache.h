/*
 * bufcache.h - copy-mode buffers of --buffer-size kept for the next pass
 * (a context's: one per thread, no lock). A direction gives its buffer
 * back whenever it empties, so that an idle connection holds none;
 * without the cache every pass of a busy one would be a free and a
 * malloc. The copy backend, the pump and the spool's writers share it.
 * A leaf: it knows no other module.
 */
#ifndef ZP_BUFCACHE_H
#define ZP_BUFCACHE_H

#include <stddef.h>

#define ZP_BUFCACHE_MAX	32
struct zp_bufcache {
	size_t		 size;		/* the one size kept; 0: keep none */
	size_t		 n;
	char		*v[ZP_BUFCACHE_MAX];
};

/* A buffer of size bytes: from the cache when it keeps that size. */
char	*zp_buf_get(struct zp_bufcache *, size_t size);
/* Give it back: kept while there is room, else freed. NULL is fine. */
void	 zp_buf_put(struct zp_bufcache *, char *, size_t size);
/* Free what the cache keeps. */
void	 zp_bufcache_clear(struct zp_bufcache *);

#endif
