/*
 * relay.c - the relay loop for one direction, the same for every backend
 * and both directions.
 */

#include <sys/socket.h>
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include <event2/buffer.h>
#include "lib/bufcache.h"
#include "relay/ctx.h"
#include "core/net.h"
#include "relay/relay.h"
#include "tls/tls_io.h"

/*
 * Does the direction keep its store for another destination when this one
 * fails? Only while its framing holds: after a framing error it is a
 * byte relay like any other.
 */
static int
dir_holds(const struct zp_dir *d)
{
	return d->fr != NULL && d->fr->hold &&
	    zp_framer_error(&d->fr->f, NULL) == NULL;
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
	(void)zp_half_want_write(h, 0);
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
		n = zp_sock_drop(d->src->fd, budget - moved);
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
	(void)zp_half_want_write(d->dst, 0);
	return rc;
}

/* The one place a direction changes backend; see relay.h. */
void
zp_dir_set_backend(struct zp_dir *d, const struct zp_relay_ops *ops)
{
	/* Never bytes in two stores: the one left behind is empty. */
	assert(d->ops == NULL || d->ops->pending(d) == 0);
	d->ops = ops;
}

/* Give back the store and copy from now on. */
static void
dir_to_copy(struct zp_ctx *ctx, struct zp_dir *d)
{
	/* Never bytes in both stores: the pipe given up is empty. */
	assert(d->pipe.data == 0 && d->len == 0);
	d->ops->release(ctx, d);
	zp_dir_set_backend(d, &zp_relay_copy);
	d->bufsize = ctx->cfg->buffer_size;
	d->full = 0;
	/* Copy mode shows the mirrors their boundaries from here. */
	if (d->mir != NULL && d->fr != NULL)
		zp_mirror_follow(d->mir, &d->fr->f);
}

/* Splice was refused on this direction's sockets: carry on with copy. */
static void
dir_fall_back(struct zp_ctx *ctx, struct zp_dir *d)
{
	dir_to_copy(ctx, d);
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
	/* Never bytes in both stores: the buffer given up is empty. */
	assert(d->pipe.data == 0 && d->len == 0);
	d->lazy = d->bulk = 0;
	if (zp_pipepool_get(ctx->pool, &d->pipe) == -1) {
		d->fellback = 1;
		return ZP_PUMP_NOPIPE;
	}
	d->ops->release(ctx, d);
	zp_dir_set_backend(d, &zp_relay_splice);
	d->full = 0;
	/* The framer passes from delivery to the pipe: here they meet. */
	if (d->fr != NULL && zp_framer_at_boundary(&d->fr->f))
		d->fr->last_mark = d->fr->sent;
	return 0;
}

/*
 * A framed splice direction at an empty pipe before a small frame: back
 * to its buffer, which moves many small frames per call where splice
 * would take two calls for each; lazy again, so that the next bulk read
 * brings a pipe back.
 */
static void
dir_demote(struct zp_ctx *ctx, struct zp_dir *d)
{
	dir_to_copy(ctx, d);
	d->lazy = 1;
	d->bulk = 0;
}

/*
 * Not the moment for a framed direction to take a pipe: while it drops
 * the rest of a frame after a move, or, octet framed, inside a header or
 * a body with less than --splice-min left (at a boundary the splice
 * backend looks at the next header and may give the pipe back). The
 * next bulk read asks again.
 */
static int
dir_frame_small(struct zp_dir *d)
{
	const struct zp_framer	*f;
	enum zp_framing		 k;

	if (d->fr == NULL)
		return 0;
	f = &d->fr->f;
	k = zp_framer_kind(f);
	if (zp_dframe_cutting(d->fr) || zp_dframe_seeking(d->fr) || (zp_framer_error(f, NULL) == NULL &&
	    (k == ZP_FRAMING_OCTET || k == ZP_FRAMING_AUTO) &&
	    !zp_framer_at_boundary(f) &&
	    zp_framer_body_left(f) < zp_octet_splice_min(d))) {
		d->bulk = 0;
		return 1;
	}
	return 0;
}

size_t
zp_octet_splice_min(const struct zp_dir *d)
{
	if (d->splice_min == 0)
		return 0;
	return d->splice_min > ZP_OCTET_SPLICE_MIN ? d->splice_min :
	    ZP_OCTET_SPLICE_MIN;
}

/*
 * A planned move waits for a boundary: may the direction read more? Copy
 * mode may (its flush stops at the boundary); splice mode ends the octet
 * frame it is in but starts no other, and a blind lf pipe takes nothing
 * more: it empties, and the direction copies on to find a newline.
 */
static int
dir_seek_fill(const struct zp_dir *d)
{
	enum zp_framing	k;

	if (d->fr == NULL || !zp_dframe_seeking(d->fr) || !d->ops->piped)
		return 1;
	k = zp_framer_kind(&d->fr->f);
	if (k == ZP_FRAMING_OCTET || k == ZP_FRAMING_AUTO)
		return !zp_framer_at_boundary(&d->fr->f);
	return 0;
}

/*
 * Spliced lf or nul, pipe empty: did the last byte (splice_flush_tail
 * looked at it) end a frame? Then the stream stands at a boundary.
 */
static int
dir_tail_delim(const struct zp_dir *d)
{
	const struct zp_dframe	*fr = d->fr;

	return fr->tail_delim && fr->tail_at == zp_framer_offset(&fr->f) &&
	    fr->tail_at > 0;
}

/*
 * How much a copy-mode flush may send while seeking: up to the boundary
 * ahead when the buffer holds it (all of it otherwise: the frame goes
 * on). 0: no limit.
 */
static size_t
dir_seek_cap(const struct zp_dir *d)
{
	if (d->fr == NULL || !zp_dframe_seeking(d->fr) || d->ops->piped ||
	    d->len == 0)
		return 0;
	return zp_framer_next(&d->fr->f, d->buf + d->off, d->len);
}

/*
 * Everything up to a boundary delivered, nothing after it: the copy
 * framer follows delivery, the splice one the pipe, which is then empty.
 */
static int
dir_seek_done(const struct zp_dir *d)
{
	if (!d->ops->piped)
		return zp_framer_at_boundary(&d->fr->f);
	return d->pipe.data == 0 && (zp_framer_at_boundary(&d->fr->f) ||
	    dir_tail_delim(d));
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
	return !d->eof && !d->full && !(d->bulk && d->ops->pending(d) > 0) &&
	    dir_seek_fill(d);
}

/* Give back the store and clear the direction's events. */
void
zp_dir_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	if (d->ops != NULL)
		d->ops->release(ctx, d);
	d->full = 0;
}

/* The direction's own counts, as a tally. */
static struct zp_tally
dir_counts(const struct zp_dir *d)
{
	struct zp_tally	t = { d->bytes, d->spliced,
			    d->fr != NULL ? d->fr->frames : 0 };

	return t;
}

/* At most n, and no more than have: a tally never goes below 0. */
static uint64_t
tally_cut(uint64_t have, uint64_t n)
{
	return n < have ? n : have;
}

/*
 * One read into the store, at most `ask` bytes. Returns 1 when it moved
 * something (bytes or the EOF), 0 when not, -1 when the direction
 * changed backend and the pass must begin again; ORs ZP_PUMP_* into *rc.
 */
static int
dir_fill_once(struct zp_ctx *ctx, struct zp_dir *d, size_t ask, size_t *moved,
    int *rc)
{
	ssize_t	n = d->ops->fill(d, ask);

	if (n > 0) {
		*moved += n;
		/* A read that filled what it asked for had more. */
		if (d->lazy && ((size_t)n >= ctx->cfg->splice_min ||
		    !d->drained))
			d->bulk = 1;
		/* Short, but the FIN is queued behind: read it now. */
		if (d->src->rdhup)
			d->drained = 0;
		return 1;
	}
	if (n == 0) {
		d->eof = 1;
		return 1;
	}
	if (n == ZP_FILL_FALLBACK) {
		dir_fall_back(ctx, d);
		*rc |= ZP_PUMP_FELLBACK;
		return -1;
	}
	if (n == ZP_FILL_LAZY) {
		dir_demote(ctx, d);
		return -1;
	}
	if (errno != EAGAIN) {
		if (!d->src->dead)
			*rc |= ZP_PUMP_DEAD;
		half_kill(d->src, errno);
		d->eof = 1;
	} else if (d->src->dead && !d->full) {
		/* Read to the end of what the reset left. */
		d->eof = 1;
		return 1;
	}
	return 0;
}

/*
 * One write from the store to the destination. Returns 1 when it moved
 * bytes, 0 when not, -1 when the destination failed and the pump is over
 * (*rc says what the pair must do); ORs ZP_PUMP_* into *rc.
 */
static int
dir_flush_once(struct zp_ctx *ctx, struct zp_dir *d, size_t left, int *rc)
{
	size_t	before = d->ops->pending(d);
	ssize_t	n;

	d->flush_max = dir_seek_cap(d);
	if (d->flush_max > 0 && d->flush_max < before)
		before = d->flush_max;
	n = d->ops->flush(d);
	d->flush_max = 0;
	if (n > 0) {
		d->bytes += n;
		d->full = 0;
		if ((size_t)n < before)
			d->dst->wblocked = 1;
		return 1;
	}
	if (errno == EAGAIN) {
		d->dst->wblocked = 1;
		return 0;
	}
	half_kill(d->dst, errno);
	if (dir_holds(d)) {
		zp_half_want_read(d->src, 0);
		*rc |= ZP_PUMP_DEAD | ZP_PUMP_MOVE;
	} else
		*rc |= ZP_PUMP_DEAD | dir_discard(ctx, d, left);
	return -1;
}

/*
 * Everything is out: carry the FIN over. When the other way is over too,
 * the pair closes both sockets now and close() sends it, after the queued
 * bytes. A TLS destination gets close_notify before either; when its
 * socket is full the direction waits for room (d->fin_wait) and is not
 * done yet. Returns ZP_PUMP_DEAD when the shutdown failed.
 */
static int
dir_carry_fin(struct zp_ctx *ctx, struct zp_dir *d)
{
	int	rc = 0;

	/*
	 * TLS: close_notify first, in every case (a close sends the FIN,
	 * not that); a full socket takes it once writable again.
	 */
	if (d->dst->tls != NULL && !d->dst->dead) {
		if (zp_tls_close_notify(d->dst->tls) == -1) {
			if (errno == EAGAIN) {
				d->fin_wait = 1;
				d->dst->wblocked = 1;
				return 0;
			}
			half_kill(d->dst, errno);
			rc = ZP_PUMP_DEAD;
		}
		d->fin_wait = 0;
	}
	if (rc == 0 && !d->src->wshut) {
		if (shutdown(d->dst->fd, SHUT_WR) == 0)
			d->dst->fin = 1;
		else if (errno != ENOTCONN) {
			half_kill(d->dst, errno);
			rc = ZP_PUMP_DEAD;
		}
	}
	d->dst->wshut = 1;
	d->shut = 1;
	d->done = 1;
	zp_dir_release(ctx, d);
	return rc;
}

/*
 * A seeking direction: ZP_PUMP_BOUNDARY when it stands at its boundary;
 * a blind pipe that emptied goes back to copy to find the newline.
 */
static int
dir_seek_step(struct zp_ctx *ctx, struct zp_dir *d)
{
	if (dir_seek_done(d))
		return ZP_PUMP_BOUNDARY;
	if (d->ops->piped && d->pipe.data == 0 && !dir_seek_fill(d))
		dir_demote(ctx, d);
	return 0;
}

static int
dir_pump(struct zp_ctx *ctx, struct zp_dir *d, size_t budget)
{
	size_t	moved = 0;
	int	rc = 0, progress, r;

	if (d->dst->dead) {
		if (dir_holds(d)) {
			zp_half_want_read(d->src, 0);
			return ZP_PUMP_MOVE;	/* the next one gets it */
		}
		return dir_discard(ctx, d, budget);	/* nobody to deliver to */
	}
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
		if (d->fr != NULL && zp_dframe_seeking(d->fr) &&
		    (rc |= dir_seek_step(ctx, d)) & ZP_PUMP_BOUNDARY)
			break;
		if (dir_can_fill(d) && !d->drained && moved < budget) {
			if ((r = dir_fill_once(ctx, d, budget - moved, &moved,
			    &rc)) == -1)
				continue;
			progress |= r;
		}
		if (d->ops->pending(d) > 0 && !d->dst->wblocked) {
			if ((r = dir_flush_once(ctx, d, budget > moved ?
			    budget - moved : 0, &rc)) == -1)
				return rc;
			progress |= r;
		}
		if (d->bulk && !d->eof && d->ops->pending(d) == 0 &&
		    !dir_frame_small(d)) {
			rc |= dir_promote(ctx, d);
			progress = 1;
		}
		if (d->eof && d->ops->pending(d) == 0) {
			if (d->hold_fin)
				rc |= ZP_PUMP_SRC_FIN;	/* the pair acts */
			else if (!d->fin_wait || !d->dst->wblocked)
				rc |= dir_carry_fin(ctx, d);
			break;
		}
		if (!progress || moved >= budget)
			break;
	}
	if (d->ops->trim != NULL && d->ops->pending(d) == 0) {
		d->ops->trim(d);
		d->bufsize = ctx->cfg->buffer_size;	/* after a move's */
	}
	zp_half_want_read(d->src, !d->done && dir_can_fill(d));
	/* The budget stopped it: the loop does not pause (--coalesce). */
	if (moved >= budget)
		ctx->pass_busy = 1;
	/*
	 * The budget stopped it with bytes in the feed or the TLS session:
	 * no socket will say so, so the pass comes again after the loop's
	 * other events.
	 */
	if (moved >= budget && d->src->ron && zp_half_holds(d->src))
		event_active(d->src->rev, EV_READ, 0);
	if (zp_half_want_write(d->dst, !d->done && (d->ops->pending(d) > 0 ||
	    d->fin_wait)) == -1) {
		half_kill(d->dst, errno);
		rc |= ZP_PUMP_DEAD;
	}
	/* A done direction waits for nothing. */
	assert(!d->done || (!d->src->ron && !d->dst->won));
	return rc;
}

/* Take back bytes a reset dropped; see relay.h. */
void
zp_dir_uncount(struct zp_dir *d, uint64_t n)
{
	struct zp_tally	was = dir_counts(d);
	size_t		i;

	d->bytes -= tally_cut(d->bytes, n);
	if (d->spliced > d->bytes)
		d->spliced = d->bytes;
	for (i = 0; i < ZP_DIR_TALLIES; i++) {
		if (d->tally[i] == NULL)
			continue;
		/* Part may have been an earlier upstream's. */
		d->tally[i]->bytes -= tally_cut(d->tally[i]->bytes,
		    was.bytes - d->bytes);
		d->tally[i]->spliced -= tally_cut(d->tally[i]->spliced,
		    was.spliced - d->spliced);
	}
}

/* Move bytes for one direction. */
/* Move bytes for one direction, counted; see relay.h. */
int
zp_dir_pump(struct zp_ctx *ctx, struct zp_dir *d, size_t budget)
{
	struct zp_tally	was = dir_counts(d), now;
	size_t		i;
	int		rc;

	rc = dir_pump(ctx, d, budget);
	now = dir_counts(d);
	for (i = 0; i < ZP_DIR_TALLIES; i++) {
		if (d->tally[i] == NULL)
			continue;
		d->tally[i]->bytes += now.bytes - was.bytes;
		d->tally[i]->spliced += now.spliced - was.spliced;
		d->tally[i]->frames += now.frames - was.frames;
	}
	return rc;
}

/* ---- framed streams (--framing) -------------------------------------- */

/* Drop n bytes from the front of a copy store; see relay.h. */
void
zp_dir_cut(struct zp_dir *d, size_t n)
{
	struct zp_dframe	*fr = d->fr;

	zp_framer_feed(&fr->f, d->buf + d->off, n);
	fr->sent += n;
	fr->cut += n;
	d->off += n;
	d->len -= n;
	if (d->len == 0)
		d->off = 0;
	if (fr->rp != NULL)
		zp_replay_reset(fr->rp, fr->sent, zp_framer_at_boundary(&fr->f));
}

/*
 * Splice store to copy store: read the pipe into a buffer that holds it
 * all. Returns 0, or -1 with errno.
 */
static int
dir_unpipe(struct zp_ctx *ctx, struct zp_dir *d)
{
	size_t	size = ctx->cfg->buffer_size, got = 0;
	ssize_t	n;
	char	*buf = NULL;

	if (d->pipe.data > size)
		size = d->pipe.data;
	if (d->pipe.data > 0 && (buf = malloc(size)) == NULL)
		return -1;
	while (got < d->pipe.data) {
		n = read(d->pipe.rfd, buf + got, d->pipe.data - got);
		if (n > 0)
			got += n;
		else if (n == -1 && errno == EINTR)
			continue;
		else {
			free(buf);
			errno = EIO;
			return -1;
		}
	}
	d->pipe.data = 0;
	zp_pipepool_put(ctx->pool, &d->pipe);
	/* What the mirrors have not tee'd yet, they get from the copy. */
	if (d->mir != NULL)
		zp_mirror_unpipe(d->mir, buf, got,
		    d->fr != NULL ? &d->fr->f : NULL);
	zp_dir_set_backend(d, &zp_relay_copy);
	d->buf = buf;
	d->off = 0;
	d->len = got;
	d->bufsize = size;
	return 0;
}

/*
 * --replay-window: make the store what the replay holds from its first
 * whole frame, then what the store held (the two meet where delivery
 * stopped), and follow the stream from that frame on. Returns 1 when
 * there was nothing to replay (the caller cuts as without a replay), 0,
 * or -1 with errno.
 */
static int
dir_replay(struct zp_ctx *ctx, struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	struct zp_framer	*f = &fr->f;
	enum zp_framing		 kind = zp_framer_kind(f);
	uint64_t		 from;
	size_t			 rlen, size;
	char			*rb, *nb;

	if (zp_framer_error(f, NULL) != NULL || (kind != ZP_FRAMING_LF &&
	    kind != ZP_FRAMING_OCTET && kind != ZP_FRAMING_NUL) ||
	    zp_replay_take(fr->rp, kind, fr->sent, &rb, &rlen, &from) == -1)
		return 1;
	if (d->ops->piped) {
		if (dir_unpipe(ctx, d) == -1) {
			free(rb);
			return -1;
		}
		d->lazy = !d->fellback && ctx->pool != NULL;
		d->bulk = 0;
	}
	fr->teed = 0;
	if (rlen > 0) {
		size = rlen + d->len;
		if (size < ctx->cfg->buffer_size)
			size = ctx->cfg->buffer_size;
		/* The replay's buffer becomes the store: one window, not two. */
		if ((nb = realloc(rb, size)) == NULL) {
			free(rb);
			errno = ENOMEM;
			return -1;
		}
		if (d->len > 0)
			memcpy(nb + rlen, d->buf + d->off, d->len);
		zp_buf_put(d->bufs, d->buf, d->bufsize);
		d->buf = nb;
		d->off = 0;
		d->len += rlen;
		d->bufsize = size;
	}
	(void)zp_framer_resume(f, kind, f->max_asked, from, 1);
	fr->sent = from;
	fr->mcount = 0;
	zp_dframe_cut(fr, 0);
	fr->replayed += rlen;
	return 0;
}

/* Send the replay window again, to the same destination; see relay.h. */
int
zp_dir_rewind(struct zp_ctx *ctx, struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	int			 rc;

	if (fr == NULL || fr->rp == NULL)
		return 1;
	if ((rc = dir_replay(ctx, d)) != 0)
		return rc;
	if (zp_framer_at_boundary(&fr->f))
		fr->last_mark = fr->sent;
	d->full = 0;
	d->drained = 0;
	return 0;
}

/*
 * A framed splice direction that moves: its pipe is read into a buffer,
 * and the framer, which stood where the pipe was filled, is put where
 * delivery stopped (what was cut to get there is counted). Returns 0, or
 * -1 with errno.
 */
static int
dir_move_unpipe(struct zp_ctx *ctx, struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	struct zp_framer	*f = &fr->f;
	enum zp_framing		 kind = zp_framer_kind(f);
	uint64_t		 at = fr->sent, end = zp_framer_offset(f);
	uint64_t		 max = f->max_asked;
	size_t			 k;
	int			 known;

	if (dir_unpipe(ctx, d) == -1)
		return -1;
	d->lazy = !d->fellback && ctx->pool != NULL;
	d->bulk = 0;
	/*
	 * The framer stood where the pipe was filled; the copy
	 * store needs it where delivery stopped.
	 */
	if (kind == ZP_FRAMING_OCTET) {
		if (at == 0 || at == fr->last_mark)
			(void)zp_framer_resume(f, kind, max, at, 1);
		else if (fr->mcount > 0) {
			k = (size_t)(fr->marks[fr->mhead] - at);
			fr->sent += k;
			fr->cut += k;
			d->off += k;
			d->len -= k;
			(void)zp_framer_resume(f, kind, max, fr->sent, 1);
		} else {
			/* The frame goes on past the pipe. */
			fr->sent = end;
			fr->cut += d->len;
			d->len = 0;
		}
	} else if (kind == ZP_FRAMING_LF || kind == ZP_FRAMING_NUL) {
		/*
		 * Spliced blind: whether delivery stopped at a
		 * boundary is known only if nothing was stored past
		 * a delimiter seen.
		 */
		known = at == 0 || (at == end &&
		    (zp_framer_at_boundary(f) || dir_tail_delim(d)));
		(void)zp_framer_resume(f, kind, max, at, known);
	}
	fr->mcount = 0;
	return 0;
}

/* Move a framed direction to another destination; see relay.h. */
int
zp_dir_move(struct zp_ctx *ctx, struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	struct zp_framer	*f = &fr->f;
	size_t			 k;

	if (fr->rp != NULL) {
		switch (dir_replay(ctx, d)) {
		case 0:
			goto moved;
		case -1:
			return -1;
		}
	}
	if (d->ops->piped && dir_move_unpipe(ctx, d) == -1)
		return -1;
	if (!zp_framer_at_boundary(f) && zp_framer_error(f, NULL) == NULL) {
		k = d->len > 0 ? zp_framer_next(f, d->buf + d->off, d->len) : 0;
		if (k > 0)
			zp_dir_cut(d, k);
		else {
			if (d->len > 0)
				zp_dir_cut(d, d->len);
			zp_dframe_cut(fr, zp_framer_error(f, NULL) == NULL);
		}
	}
	if (zp_framer_error(f, NULL) != NULL) {
		/* No boundary to cut at: the stream cannot go on whole. */
		errno = EPROTO;
		return -1;
	}
	if (fr->rp != NULL) {
		fr->teed = 0;
		zp_replay_reset(fr->rp, fr->sent, zp_framer_at_boundary(f));
	}
moved:
	if (zp_framer_at_boundary(f))
		fr->last_mark = fr->sent;
	if (d->len == 0 && d->buf != NULL) {
		zp_buf_put(d->bufs, d->buf, d->bufsize);
		d->buf = NULL;
		d->off = 0;
		d->bufsize = ctx->cfg->buffer_size;
	}
	d->full = 0;
	d->done = 0;
	d->shut = 0;
	d->drained = 0;
	return 0;
}
