/*
 * relay.c - the relay loop for one direction, the same for every backend
 * and both directions.
 */

#include <sys/socket.h>
#include <errno.h>
#include <event2/event.h>

#include "ctx.h"
#include "relay.h"

/*
 * Add or delete the read event only when its state changes. A dead half
 * may still be read: what its kernel acknowledged before the reset waits
 * in its receive queue.
 */
void
zp_half_want_read(struct zp_half *h, int on)
{
	on = on && h->rev != NULL;
	if (on == h->ron)
		return;
	if (on)
		event_add(h->rev, NULL);
	else
		event_del(h->rev);
	h->ron = on;
}

/* Add or delete the write event only when its state changes. */
void
zp_half_want_write(struct zp_half *h, int on)
{
	on = on && !h->dead && h->wev != NULL;
	if (on == h->won)
		return;
	if (on)
		event_add(h->wev, NULL);
	else
		event_del(h->wev);
	h->won = on;
}

/* A socket failed: no more I/O on it, and remember why. */
static void
half_kill(struct zp_half *h, int err)
{
	if (h->dead)
		return;
	h->dead = 1;
	h->err = err;
	zp_half_want_read(h, 0);
	zp_half_want_write(h, 0);
}

/*
 * The destination is gone: drop the store, then read the source and throw
 * its bytes away until it says EOF or fails, at most `budget` per pass.
 * Returns ZP_PUMP_DEAD when the source failed too.
 */
static int
dir_discard(struct zp_ctx *ctx, struct zp_dir *d, size_t budget)
{
	size_t	moved = 0;
	ssize_t	n;
	int	rc = 0;

	if (!d->done) {
		zp_dir_release(ctx, d);
		d->done = 1;
	}
	while (!d->eof && moved < budget) {
		/* MSG_TRUNC: TCP drops the bytes without copying them. */
		n = recv(d->src->fd, NULL, budget - moved, MSG_TRUNC |
		    MSG_DONTWAIT);
		if (n > 0) {
			moved += n;
			d->discarded += n;
		} else if (n == 0)
			d->eof = 1;
		else if (errno == EINTR)
			continue;
		else {
			if (errno != EAGAIN) {
				rc = d->src->dead ? 0 : ZP_PUMP_DEAD;
				half_kill(d->src, errno);
				d->eof = 1;
			}
			break;
		}
	}
	zp_half_want_read(d->src, !d->eof);
	zp_half_want_write(d->dst, 0);
	return rc;
}

/* Splice was refused on this direction's sockets: carry on with copy. */
static void
dir_fall_back(struct zp_ctx *ctx, struct zp_dir *d)
{
	d->ops->release(ctx, d);
	d->ops = &zp_relay_copy;
	d->bufsize = ctx->cfg->buffer_size;
	d->full = 0;
	d->fellback = 1;
}

/*
 * A lazy direction saw bulk and its buffer is empty: from now on the
 * bytes go through a pipe. Short connections and quiet ones never get
 * here, so they cost no pipe and no splice calls on small payloads. The
 * buffer is flushed first, so no byte can overtake another. Returns
 * ZP_PUMP_NOPIPE when the pool had none: the direction copies for good.
 */
static int
dir_promote(struct zp_ctx *ctx, struct zp_dir *d)
{
	d->lazy = d->bulk = 0;
	if (zp_pipepool_get(&ctx->pool, &d->pipe) == -1) {
		d->fellback = 1;
		return ZP_PUMP_NOPIPE;
	}
	d->ops->release(ctx, d);
	d->ops = &zp_relay_splice;
	d->full = 0;
	return 0;
}

/*
 * Can the source be read now? Not after EOF or with the store full; nor
 * while a lazy direction that saw bulk still holds bytes: it must empty
 * its buffer to switch to the pipe, and a slow destination would keep a
 * buffer that is refilled on every pass from ever emptying.
 */
static int
dir_can_fill(const struct zp_dir *d)
{
	return !d->eof && !d->full && !(d->bulk && d->ops->pending(d) > 0);
}

/* Give back the store and clear the direction's events. */
void
zp_dir_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	if (d->ops != NULL)
		d->ops->release(ctx, d);
	d->full = 0;
}

/* Move bytes for one direction; see relay.h. */
int
zp_dir_pump(struct zp_ctx *ctx, struct zp_dir *d, size_t budget)
{
	size_t	moved = 0, ask, before;
	ssize_t	n;
	int	rc = 0, progress;

	if (d->dst->dead)
		return dir_discard(ctx, d, budget);	/* nobody to deliver to */
	if (d->done)
		return 0;

	/*
	 * d->drained stops a second read in one pass after a short one, and
	 * dst->wblocked a write after a short one, in this pass or since,
	 * until dst's write event clears it: either would only hear EAGAIN,
	 * and the level-triggered events tell when to go on. A slow reader
	 * behind zproxy (a collector that takes its bytes 128 at a time)
	 * would otherwise cost a failed write on every wake-up of the source.
	 */
	d->drained = 0;
	for (;;) {
		progress = 0;
		if (dir_can_fill(d) && !d->drained && moved < budget) {
			ask = budget - moved;
			n = d->ops->fill(d, ask);
			if (n > 0) {
				moved += n;
				progress = 1;
				/* A read that filled what it asked for had more. */
				if (d->lazy && ((size_t)n >= ctx->cfg->splice_min ||
				    !d->drained))
					d->bulk = 1;
				/*
				 * Short, but the FIN is queued behind: read it
				 * now rather than on the next wake-up.
				 */
				if (d->src->rdhup)
					d->drained = 0;
			} else if (n == 0) {
				d->eof = 1;
				progress = 1;
			} else if (n == ZP_FILL_FALLBACK) {
				dir_fall_back(ctx, d);
				rc |= ZP_PUMP_FELLBACK;
				continue;
			} else if (errno != EAGAIN) {
				if (!d->src->dead)
					rc |= ZP_PUMP_DEAD;
				half_kill(d->src, errno);
				d->eof = 1;
			} else if (d->src->dead && !d->full) {
				/* Read to the end of what the reset left. */
				d->eof = 1;
				progress = 1;
			}
		}
		if ((before = d->ops->pending(d)) > 0 && !d->dst->wblocked) {
			n = d->ops->flush(d);
			if (n > 0) {
				d->bytes += n;
				d->full = 0;
				progress = 1;
				if ((size_t)n < before)
					d->dst->wblocked = 1;
			} else if (errno == EAGAIN)
				d->dst->wblocked = 1;
			else {
				half_kill(d->dst, errno);
				rc |= ZP_PUMP_DEAD | dir_discard(ctx, d,
				    budget > moved ? budget - moved : 0);
				return rc;
			}
		}
		if (d->bulk && !d->eof && d->ops->pending(d) == 0) {
			rc |= dir_promote(ctx, d);
			progress = 1;
		}
		if (d->eof && d->ops->pending(d) == 0) {
			/*
			 * Everything is out: carry the FIN over. When the other
			 * way is over too, the pair closes both sockets now and
			 * close() sends it, after the queued bytes.
			 */
			if (!d->src->wshut) {
				if (shutdown(d->dst->fd, SHUT_WR) == 0)
					d->dst->fin = 1;
				else if (errno != ENOTCONN) {
					half_kill(d->dst, errno);
					rc |= ZP_PUMP_DEAD;
				}
			}
			d->dst->wshut = 1;
			d->shut = 1;
			d->done = 1;
			zp_dir_release(ctx, d);
			break;
		}
		if (!progress || moved >= budget)
			break;
	}
	if (d->ops->trim != NULL && d->ops->pending(d) == 0)
		d->ops->trim(d);
	zp_half_want_read(d->src, !d->done && dir_can_fill(d));
	zp_half_want_write(d->dst, !d->done && d->ops->pending(d) > 0);
	return rc;
}
