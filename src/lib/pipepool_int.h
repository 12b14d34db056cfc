/*
 * pipepool_int.h - the fields of struct zp_pipepool, for pipepool.c and
 * the unit tests only: every other module goes through pipepool.h.
 */
#ifndef ZP_PIPEPOOL_INT_H
#define ZP_PIPEPOOL_INT_H

#include <stddef.h>

#include "lib/pipepool.h"

struct zp_pipepool {
	size_t		 size;		/* bytes per pipe, as asked */
	size_t		 cap;		/* most pipes alive at once */
	size_t		 keep;		/* empty pipes always kept (prepared) */
	struct zp_pipe	*free;		/* stack of empty pipes */
	size_t		 nfree;
	size_t		 nalive;	/* in the stack and handed out */
	int		 shortage;	/* enum zp_pipe_shortage, last failure */
	int		 last_errno;
	unsigned long	 created;
	unsigned long	 killed;	/* closed because they held bytes */
};

/*
 * zp_pipepool_new() on a pool the caller holds: 0, or -1 with err and
 * pool->shortage filled (the pool is then empty, nothing to clear).
 */
int	zp_pipepool_init(struct zp_pipepool *, size_t size, size_t cap,
	    size_t prepare, char *err, size_t errlen);

/* Close every pipe on the stack and free the stack (not the pool). */
void	zp_pipepool_clear(struct zp_pipepool *);

#endif
