/*
 * relay_ring.h - a pair's two directions relayed through the context's
 * io_uring (experimental, issue 30): the completion-driven counterpart of
 * zp_dir_pump() for plain copy-mode pairs.
 *
 * Which pairs: plain TCP on both sides in copy mode, and nothing that
 * looks at or keeps the bytes on their way: no TLS (OpenSSL reads and
 * writes the socket itself), no --mirror (the mirrors copy from the
 * buffer as it is filled, in the pump), no --framing (the framer, moves
 * and replay follow delivery call by call), no UDP source (its bytes
 * come in memory, not from the socket), no --spool. Those keep the epoll
 * path; the pair decides (pair_ring.c).
 *
 * The same rules as the pump (docs/DESIGN.md, "One direction"): a
 * direction reads only while its buffer has room at its tail; a short
 * send goes on from where it stopped; EOF is carried as shutdown(SHUT_WR)
 * of the destination once everything is sent (or left to close(2) when
 * the other way is over already); a failed source is read no more and
 * what it sent is delivered; a failed destination drops the store, and
 * the source is read and its bytes thrown away until EOF. Delivered
 * bytes go to d->bytes and d->tally[] as they are sent.
 *
 * Ownership: the buffers and the request records belong to a zp_rpair,
 * a separate allocation from the pair. While a recv or send is in
 * flight its buffer is the kernel's; zp_rpair_release() cancels what is
 * in flight and lets go of the pair's directions, and the zp_rpair frees
 * itself when its last completion (the cancels' too) was reaped.
 */
#ifndef ZP_RELAY_RING_H
#define ZP_RELAY_RING_H

#include <stddef.h>

struct zp_dir;
struct zp_ring;
struct zp_rpair;

/* The backend a ring direction shows to the rest of zproxy. */
extern const struct zp_relay_ops zp_relay_ring;

/*
 * Something happened on a direction (bytes moved, EOF, a failure):
 * the pair settles (timers, the end). rc: ZP_PUMP_DEAD when a half
 * died. May free the pair (and release the rpair).
 */
typedef void	zp_rpair_changed_fn(void *arg, int rc);

/*
 * Relay up and down (each other's reverse, ops set to copy and their
 * stores empty) through ring, with buffers of bufsize each. The first
 * recvs are queued at once; *rc has ZP_PUMP_DEAD when that failed (the
 * halves are dead: the caller settles the pair, as after a change).
 * NULL when out of memory (nothing changed).
 */
struct zp_rpair	*zp_rpair_new(struct zp_ring *, struct zp_dir *up,
		    struct zp_dir *down, size_t bufsize,
		    zp_rpair_changed_fn *, void *arg, int *rc);

/*
 * The pair is closing: cancel every request in flight and never touch
 * its directions again. The rpair frees itself once the kernel gave
 * back every buffer (its last completion); NULL is fine.
 */
void		 zp_rpair_release(struct zp_rpair *);

#endif
