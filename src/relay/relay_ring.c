/*
 * relay_ring.c - a pair's directions through the context's io_uring
 * (experimental, issue 30); see relay_ring.h.
 *
 * Each direction has at most one recv and one send in flight: the recv
 * fills the buffer's tail, the send drains its head, and the two never
 * overlap (sends take from the front, so the end of the unsent bytes,
 * where the recv writes, does not move while it is in flight). The
 * buffer is moved back to its start only when it is empty and no recv
 * is in flight.
 */

#ifdef ZP_HAVE_IO_URING
#include <sys/socket.h>
#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <liburing.h>

#include "relay/relay.h"
#include "relay/relay_ring.h"
#include "relay/ring.h"

struct rdir {
	struct zp_ring_op	 rop;		/* its recv's user_data */
	struct zp_ring_op	 sop;		/* its send's */
	struct zp_rpair		*rp;
	struct zp_dir		*d;		/* NULL once the pair let go */
	char			*buf;		/* in rp's allocation */
	unsigned		 reading:1;	/* a recv is in flight */
	unsigned		 sending:1;	/* a send is in flight */
};

struct zp_rpair {
	struct zp_ring		*ring;
	struct zp_ring_op	 cop;		/* the cancels' user_data */
	struct rdir		 dir[2];	/* up, down */
	size_t			 bufsize;
	unsigned long		 inflight;	/* requests not reaped */
	unsigned		 dying:1;	/* released: the pair is gone */
	unsigned		 in_cb:1;	/* a completion is being handled */
	zp_rpair_changed_fn	*changed;
	void			*arg;
};

/* The ops a ring direction shows: a buffer store the ring fills. */
static ssize_t
ring_fill(struct zp_dir *d, size_t max)
{
	/* Never pumped: the ring moves its bytes. */
	assert(!"a ring direction was pumped");
	errno = EINVAL;
	return -1;
}

static ssize_t
ring_flush(struct zp_dir *d)
{
	assert(!"a ring direction was pumped");
	errno = EINVAL;
	return -1;
}

static size_t
ring_pending(const struct zp_dir *d)
{
	return d->len;
}

/* The buffer is the rpair's: the direction only lets go of it. */
static void
ring_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	d->buf = NULL;
	d->off = d->len = 0;
}

const struct zp_relay_ops zp_relay_ring = {
	.name = "ring",
	.fill = ring_fill,
	.flush = ring_flush,
	.pending = ring_pending,
	.release = ring_release,
};

/* Free rp once nothing of it is the kernel's and nobody is in it. */
static void
rpair_maybe_free(struct zp_rpair *rp)
{
	if (rp->dying && rp->inflight == 0 && !rp->in_cb)
		free(rp);
}

/* A half failed: no more I/O on it, and remember why. */
static void
half_fail(struct zp_half *h, int err)
{
	if (h->dead)
		return;
	h->dead = 1;
	h->err = err;
}

/* The other direction of rd. */
static struct rdir *
rdir_other(struct rdir *rd)
{
	return rd == &rd->rp->dir[0] ? &rd->rp->dir[1] : &rd->rp->dir[0];
}

/*
 * Everything is sent after the source's EOF: carry the FIN (as
 * relay.c's dir_carry_fin, without TLS). Returns ZP_PUMP_DEAD when the
 * shutdown failed.
 */
static int
rdir_carry_fin(struct zp_dir *d)
{
	int	rc = 0;

	if (!d->src->wshut) {
		if (shutdown(d->dst->fd, SHUT_WR) == 0)
			d->dst->fin = 1;
		else if (errno != ENOTCONN) {
			half_fail(d->dst, errno);
			rc = ZP_PUMP_DEAD;
		}
	}
	d->dst->wshut = 1;
	d->shut = 1;
	d->done = 1;
	return rc;
}

/*
 * Queue what the direction can do now: a send of what waits, a recv
 * into the room left, the FIN. Returns ZP_PUMP_* bits.
 */
static int
rdir_step(struct rdir *rd)
{
	struct zp_rpair		*rp = rd->rp;
	struct zp_dir		*d = rd->d;
	struct io_uring_sqe	*sqe;
	size_t			 room;
	int			 rc = 0;

	if (d == NULL || rp->dying)
		return 0;
	/* Nobody to deliver to: drop the store, read on until EOF. */
	if (d->dst->dead && !d->done) {
		d->done = 1;
		/* A request in flight may still be on the buffer: skip past. */
		if (!rd->reading && !rd->sending)
			d->off = 0;
		else
			d->off += d->len;
		d->len = 0;
	}
	if (!rd->sending && d->len > 0 && !d->dst->dead) {
		if ((sqe = zp_ring_sqe(rp->ring, &rd->sop)) == NULL)
			goto nomem;
		io_uring_prep_send(sqe, d->dst->fd, rd->buf + d->off, d->len,
		    MSG_NOSIGNAL);
		rd->sending = 1;
		rp->inflight++;
	}
	/* Back to the start only with no request on the buffer. */
	if (d->len == 0 && !rd->reading && !rd->sending)
		d->off = 0;
	room = rp->bufsize - d->off - d->len;
	if (!rd->reading && !d->eof && room > 0) {
		if ((sqe = zp_ring_sqe(rp->ring, &rd->rop)) == NULL)
			goto nomem;
		io_uring_prep_recv(sqe, d->src->fd, rd->buf + d->off + d->len,
		    room, 0);
		rd->reading = 1;
		rp->inflight++;
	}
	if (d->eof && d->len == 0 && !rd->sending && !d->done)
		rc |= rdir_carry_fin(d);
	return rc;
nomem:
	/* No submission slot: as the pump does when out of memory. */
	half_fail(d->src, ENOMEM);
	half_fail(d->dst, ENOMEM);
	d->eof = 1;
	return ZP_PUMP_DEAD;
}

/*
 * Step rd, and the other direction when a half died (it may now have
 * nobody to deliver to, or nothing more to read); then tell the pair.
 * The pair may be freed by what it is told.
 */
static void
rdir_settle(struct rdir *rd, int rc)
{
	struct zp_rpair	*rp = rd->rp;

	rc |= rdir_step(rd);
	if (rc & ZP_PUMP_DEAD)
		rc |= rdir_step(rdir_other(rd));
	if (!rp->dying)
		rp->changed(rp->arg, rc);
}

/*
 * A request of rd's completed: one less in flight. 0 when the pair is
 * gone (rp freed if that was its last); else rd's completion may be
 * handled, and rdir_end() follows.
 */
static int
rdir_begin(struct rdir *rd)
{
	struct zp_rpair	*rp = rd->rp;

	rp->inflight--;
	if (rd->d == NULL || rp->dying) {
		rpair_maybe_free(rp);
		return 0;
	}
	rp->in_cb = 1;
	return 1;
}

/* Queue what rd can do next, tell the pair; rp is freed if it let go. */
static void
rdir_end(struct rdir *rd, int rc)
{
	struct zp_rpair	*rp = rd->rp;

	rdir_settle(rd, rc);
	rp->in_cb = 0;
	rpair_maybe_free(rp);
}

/* A recv completed: bytes into the store (or dropped), the EOF, a failure. */
static void
rdir_recv_done(struct zp_ring_op *op, int res)
{
	struct rdir	*rd = (struct rdir *)op;
	struct zp_dir	*d = rd->d;
	int		 rc = 0;

	rd->reading = 0;
	if (!rdir_begin(rd))
		return;
	if (res > 0) {
		if (d->dst->dead)
			d->discarded += (uint64_t)res;
		else
			d->len += (size_t)res;
	} else if (res == 0)
		d->eof = 1;
	else if (res != -EAGAIN && res != -EINTR) {
		/*
		 * A recv hands over what the kernel holds before it reports
		 * the reset: nothing is left to read after the error (the
		 * epoll path reads on until EAGAIN).
		 */
		if (!d->src->dead)
			rc |= ZP_PUMP_DEAD;
		half_fail(d->src, -res);
		d->eof = 1;
	}
	rdir_end(rd, rc);
}

/* A send completed: what it took is delivered; a short one goes on. */
static void
rdir_send_done(struct zp_ring_op *op, int res)
{
	struct rdir	*rd = (struct rdir *)((char *)op -
			    offsetof(struct rdir, sop));
	struct zp_dir	*d = rd->d;
	size_t		 i;
	int		 rc = 0;

	rd->sending = 0;
	if (!rdir_begin(rd))
		return;
	if (res > 0 && !d->dst->dead) {
		assert((size_t)res <= d->len);
		d->off += (size_t)res;
		d->len -= (size_t)res;
		d->bytes += (uint64_t)res;
		for (i = 0; i < ZP_DIR_TALLIES; i++)
			if (d->tally[i] != NULL)
				d->tally[i]->bytes += (uint64_t)res;
	} else if (res < 0 && res != -EAGAIN && res != -EINTR) {
		if (!d->dst->dead)
			rc |= ZP_PUMP_DEAD;
		half_fail(d->dst, -res);
	}
	rdir_end(rd, rc);
}

/* A cancel completed: it only counts. */
static void
rpair_cancel_done(struct zp_ring_op *op, int res)
{
	struct zp_rpair	*rp = (struct zp_rpair *)((char *)op -
			    offsetof(struct zp_rpair, cop));

	rp->inflight--;
	rpair_maybe_free(rp);
}

static void
rdir_init(struct zp_rpair *rp, struct rdir *rd, struct zp_dir *d, char *buf)
{
	assert(d->len == 0 && d->buf == NULL && d->pipe.data == 0);
	rd->rp = rp;
	rd->d = d;
	rd->buf = buf;
	rd->rop.done = rdir_recv_done;
	rd->sop.done = rdir_send_done;
	zp_dir_set_backend(d, &zp_relay_ring);
	d->buf = buf;
	d->bufsize = rp->bufsize;
	d->off = d->len = 0;
	d->lazy = d->bulk = 0;
}

struct zp_rpair *
zp_rpair_new(struct zp_ring *ring, struct zp_dir *up, struct zp_dir *down,
    size_t bufsize, zp_rpair_changed_fn *changed, void *arg, int *rc)
{
	struct zp_rpair	*rp;
	char		*bufs;

	/*
	 * One allocation: the records the kernel's completions point at
	 * and the buffers it writes to live and die together.
	 */
	if ((rp = calloc(1, sizeof(*rp) + 2 * bufsize)) == NULL)
		return NULL;
	bufs = (char *)(rp + 1);
	rp->ring = ring;
	rp->bufsize = bufsize;
	rp->changed = changed;
	rp->arg = arg;
	rp->cop.done = rpair_cancel_done;
	rdir_init(rp, &rp->dir[0], up, bufs);
	rdir_init(rp, &rp->dir[1], down, bufs + bufsize);
	*rc = rdir_step(&rp->dir[0]);
	*rc |= rdir_step(&rp->dir[1]);
	return rp;
}

/* Is this request's record one of rp's? (zp_ring_neuter's question) */
static int
rpair_owns(void *arg, uint64_t data)
{
	struct zp_rpair	*rp = arg;
	uintptr_t	 a = (uintptr_t)data, lo = (uintptr_t)rp;

	return a >= lo && a < lo + sizeof(*rp);
}

/* Cancel op when it is in flight. */
static void
rpair_cancel(struct zp_rpair *rp, struct zp_ring_op *op, int busy)
{
	struct io_uring_sqe	*sqe;

	if (!busy)
		return;
	/*
	 * By the record, not the descriptor: the pair closes its sockets
	 * before the cancel is submitted, and their numbers may be reused
	 * by then. No slot: the request holds its socket open until it
	 * completes, at the latest when the ring is torn down (which
	 * cancels everything), and rp is freed then.
	 */
	if ((sqe = zp_ring_sqe(rp->ring, &rp->cop)) == NULL)
		return;
	io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)op, 0);
	rp->inflight++;
}

void
zp_rpair_release(struct zp_rpair *rp)
{
	size_t	i;

	if (rp == NULL)
		return;
	assert(!rp->dying);
	rp->dying = 1;
	for (i = 0; i < 2; i++) {
		rpair_cancel(rp, &rp->dir[i].rop, rp->dir[i].reading);
		rpair_cancel(rp, &rp->dir[i].sop, rp->dir[i].sending);
		if (rp->dir[i].d != NULL)
			ring_release(NULL, rp->dir[i].d);
		rp->dir[i].d = NULL;
	}
	/*
	 * Now, not at the end of the pass: a queued request names its
	 * socket by number, and the kernel looks the number up only when
	 * the request is submitted. The pair closes its sockets next; a
	 * client accepted later in this pass would get the same numbers,
	 * and a recv or send of ours queued before the close would go to
	 * that client's socket (seen: bytes of one pair in another's
	 * stream). Submitted here, every request of ours holds its own
	 * socket, whatever becomes of the number. What the kernel did not
	 * take (out of memory) must not go later: made no-ops.
	 */
	if (zp_ring_submit(rp->ring) > 0)
		zp_ring_neuter(rp->ring, rpair_owns, rp);
	rpair_maybe_free(rp);
}

#else	/* !ZP_HAVE_IO_URING */

#include <stddef.h>

#include "relay/relay_ring.h"

/* Built without io_uring: no context has a ring, no pair asks. */
struct zp_rpair *
zp_rpair_new(struct zp_ring *ring, struct zp_dir *up, struct zp_dir *down,
    size_t bufsize, zp_rpair_changed_fn *changed, void *arg, int *rc)
{
	*rc = 0;
	return NULL;
}

void
zp_rpair_release(struct zp_rpair *rp)
{
}

#endif
