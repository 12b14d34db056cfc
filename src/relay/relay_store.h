/*
 * relay_store.h - the buffer store that the copy and TLS backends share
 * (relay_copy.c): what they differ in is only how a half is read and
 * written, given here as functions.
 */
#ifndef ZP_RELAY_STORE_H
#define ZP_RELAY_STORE_H

#include <sys/types.h>
#include <stddef.h>

struct zp_ctx;
struct zp_dir;
struct zp_half;

/* recv(2)'s contract: bytes, 0 at the end, -1 with errno. */
typedef ssize_t	zp_half_read_fn(struct zp_half *, void *, size_t);
/* send(2)'s: bytes taken, -1 with errno. */
typedef ssize_t	zp_half_write_fn(struct zp_half *, const void *, size_t);

/*
 * Source -> buffer through rd, as relay.h's fill(). short_empty: a read
 * shorter than asked means the source is most likely empty (a TCP
 * socket hands over all it has; a TLS session one record at a time).
 */
ssize_t	zp_store_fill(struct zp_dir *, size_t max, zp_half_read_fn *rd,
	    int short_empty);

/*
 * Buffer -> destination through wr, as relay.h's flush(); at least
 * `atleast` bytes offered (a TLS write's retry), when the buffer has
 * them.
 */
ssize_t	zp_store_flush(struct zp_dir *, zp_half_write_fn *wr, size_t atleast);

size_t	zp_store_pending(const struct zp_dir *);
void	zp_store_release(struct zp_ctx *, struct zp_dir *);
void	zp_store_trim(struct zp_dir *);

/* The plain socket (or a UDP source's feed, before it). */
zp_half_read_fn		zp_half_recv;
zp_half_write_fn	zp_half_send;

#endif
