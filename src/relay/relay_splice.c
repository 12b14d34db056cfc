/*
 * relay_splice.c - socket -> pipe -> socket, with splice(2).
 *
 * Nothing is copied through user space: the kernel moves page references
 * from the source socket's receive queue into the pipe and from the pipe
 * into the destination socket.
 */

#include <sys/socket.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "relay/ctx.h"
#include "relay/mirror.h"
#include "relay/relay.h"

/*
 * Never pass SPLICE_F_MORE: it becomes MSG_MORE and holds a small tail
 * back for ~200 ms. SPLICE_F_NONBLOCK covers the pipe side; the sockets
 * are non-blocking themselves.
 */
#define ZP_SPLICE_FLAGS	(SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

/*
 * Socket -> pipe. Returns bytes moved, 0 on EOF, -1 with errno, or
 * ZP_FILL_FALLBACK. EAGAIN is ambiguous: the socket is empty, or the pipe
 * is full - and a pipe is full by slots, not bytes, so its byte count
 * says nothing. Like HAProxy, take EAGAIN with bytes in the pipe as
 * "full": if the guess is wrong the next flush clears it at no cost.
 * With a FIN queued behind a full pipe splice says EAGAIN, not 0: the EOF
 * shows once the pipe is drained.
 */
static ssize_t
splice_in(struct zp_dir *d, size_t max)
{
	ssize_t	n;

	for (;;) {
		n = splice(d->src->fd, NULL, d->pipe.wfd, NULL, max,
		    ZP_SPLICE_FLAGS);
		if (n > 0) {
			/*
			 * Short means the socket ran dry, or the pipe ran out
			 * of slots; guessing "dry" costs at most one more
			 * wake-up of the level-triggered read event.
			 */
			d->pipe.data += n;
			if ((size_t)n < max)
				d->drained = 1;
			return n;
		}
		if (n == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			if (d->pipe.data > 0)
				d->full = 1;
			else
				d->drained = 1;
			return -1;
		}
		/*
		 * Refused before anything moved through the pipe: the kernel
		 * cannot splice these sockets (a sandbox, a socket type
		 * without splice_read). Nothing was consumed, and what a lazy
		 * direction copied before is delivered; copy on.
		 */
		if ((errno == EINVAL || errno == ENOSYS || errno == EPERM ||
		    errno == EBADF || errno == EOPNOTSUPP) && d->pipe.data == 0 &&
		    d->spliced == 0)
			return ZP_FILL_FALLBACK;
		return -1;
	}
}

/*
 * An octet-framed direction (or auto before its first byte): splice one
 * body at a time, exactly as long as its header says, and read only the
 * headers: peek at the next ZP_OCTET_HDR_MAX bytes, splice as many of
 * them as the header takes, and feed those to the framer. The end of
 * every body is marked, so a move knows the boundaries of what was
 * delivered without reading the pipe. With ZP_MARKS frames in the pipe
 * the store counts as full.
 */
static ssize_t
splice_octet_one(struct zp_dir *d, size_t max)
{
	struct zp_dframe	*fr = d->fr;
	struct zp_framer	*f = &fr->f, probe;
	unsigned char		 pk[ZP_OCTET_HDR_MAX];
	uint64_t		 left = zp_framer_body_left(f), want;
	ssize_t			 n, m;
	size_t			 h;

	if (fr->mcount == ZP_MARKS) {
		d->full = 1;
		errno = EAGAIN;
		return -1;
	}
	if (left > 0) {
		n = splice_in(d, left < max ? (size_t)left : max);
		if (n > 0) {
			(void)zp_framer_skip(f, (uint64_t)n);
			if (zp_framer_body_left(f) == 0)
				zp_dframe_mark(fr, zp_framer_offset(f));
		}
		return n;
	}
	do {
		m = recv(d->src->fd, pk, sizeof(pk), MSG_PEEK | MSG_DONTWAIT);
	} while (m == -1 && errno == EINTR);
	if (m <= 0) {
		if (m == -1 && errno == EAGAIN)
			d->drained = 1;
		return m;
	}
	probe = *f;
	h = zp_framer_feed_header(&probe, pk, (size_t)m);
	if (h == 0)
		h = (size_t)m;
	/*
	 * A whole header: splice it with its body in one call. A small
	 * frame at an empty pipe goes back to copy mode, which moves many
	 * at once; the next large one brings the pipe back (relay.c).
	 */
	want = h + zp_framer_body_left(&probe);
	if (zp_framer_body_left(&probe) > 0 && d->pipe.data == 0 &&
	    zp_framer_body_left(&probe) < zp_octet_splice_min(d))
		return ZP_FILL_LAZY;
	n = splice_in(d, want < max ? (size_t)want : max);
	if (n <= 0)
		return n;
	(void)zp_framer_feed_header(f, pk, (size_t)n < h ? (size_t)n : h);
	if ((size_t)n > h) {
		(void)zp_framer_skip(f, (uint64_t)n - h);
		if (zp_framer_body_left(f) == 0)
			zp_dframe_mark(fr, zp_framer_offset(f));
	}
	return n;
}

/*
 * Frame after frame, until the socket runs dry, the budget is spent, the
 * pipe or its ring of frame ends is full: one flush then moves them all,
 * as an unframed fill would be flushed (one frame per flush cost 2.8
 * times the TCP segments and 0.6 times the throughput).
 */
static ssize_t
splice_fill_octet(struct zp_dir *d, size_t max)
{
	size_t	total = 0;
	ssize_t	n;

	for (;;) {
		n = splice_octet_one(d, max - total);
		if (n <= 0)
			return total > 0 ? (ssize_t)total : n;
		total += (size_t)n;
		if (total >= max || d->drained || d->full ||
		    zp_framer_error(&d->fr->f, NULL) != NULL ||
		    zp_framer_kind(&d->fr->f) != ZP_FRAMING_OCTET)
			return (ssize_t)total;
	}
}

/*
 * Socket -> pipe, for a plain or a framed direction. Delimited frames are
 * spliced blind: the framer only learns that it lost the position.
 */
static ssize_t
splice_fill(struct zp_dir *d, size_t max)
{
	ssize_t			 n;
	enum zp_framing		 k;

	if (d->fr != NULL && zp_framer_error(&d->fr->f, NULL) == NULL) {
		k = zp_framer_kind(&d->fr->f);
		if (k == ZP_FRAMING_OCTET || k == ZP_FRAMING_AUTO)
			return splice_fill_octet(d, max);
	}
	n = splice_in(d, max);
	if (n > 0 && d->fr != NULL)
		(void)zp_framer_skip(&d->fr->f, (uint64_t)n);
	return n;
}

/*
 * A framed lf or nul direction whose source ran dry: its pipe's last byte
 * is the stream's last so far, and whether it is a delimiter tells if the
 * stream stopped at a boundary, which a move needs to know. Splice all
 * but that byte (held back with SPLICE_F_MORE), look at it through the
 * context's tee pipe (tee(2) copies the page reference, read(2) takes one
 * byte), then splice it, which pushes both out together. Returns bytes
 * moved, or -1 with errno when none did.
 */
static ssize_t
splice_flush_tail(struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	ssize_t			 n = 0, m;
	unsigned char		 c;

	if (d->pipe.data > 1) {
		do {
			n = splice(d->pipe.rfd, NULL, d->dst->fd, NULL,
			    d->pipe.data - 1, ZP_SPLICE_FLAGS | SPLICE_F_MORE);
		} while (n == -1 && errno == EINTR);
		if (n <= 0)
			return n == 0 ? (errno = EIO, -1) : -1;
		d->pipe.data -= n;
		d->spliced += n;
		zp_dframe_sent(fr, (size_t)n);
		if (d->pipe.data > 1)
			return n;	/* short: the rest when it can take it */
	}
	if (tee(d->pipe.rfd, fr->tee_wfd, 1, SPLICE_F_NONBLOCK) == 1 &&
	    read(fr->tee_rfd, &c, 1) == 1) {
		fr->tail_at = zp_framer_offset(&fr->f);
		fr->tail_delim = c == (zp_framer_kind(&fr->f) ==
		    ZP_FRAMING_NUL ? '\0' : '\n');
	}
	do {
		m = splice(d->pipe.rfd, NULL, d->dst->fd, NULL, 1,
		    ZP_SPLICE_FLAGS);
	} while (m == -1 && errno == EINTR);
	if (m <= 0)
		return n > 0 ? n : m == 0 ? (errno = EIO, -1) : -1;
	d->pipe.data -= m;
	d->spliced += m;
	zp_dframe_sent(fr, (size_t)m);
	return n + m;
}

/*
 * --replay-window: the pipe's head is kept (tee'd into the replay)
 * before it goes out. Returns how many bytes the flush may send: all of
 * them, or only those the replay took (the rest is tee'd once they are
 * out, since tee always starts at the head).
 */
static size_t
splice_keep(struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;

	if (fr == NULL || fr->rp == NULL)
		return d->pipe.data;
	assert(fr->teed <= d->pipe.data);
	if (fr->teed == 0)
		fr->teed = zp_replay_tee(fr->rp, d->pipe.rfd, d->pipe.data);
	return fr->teed > 0 ? fr->teed : d->pipe.data;
}

/* Pipe -> socket, at most len bytes. Returns bytes moved or -1. */
static ssize_t
splice_flush_once(struct zp_dir *d, size_t len)
{
	ssize_t		n;
	enum zp_framing	k;

	if (d->fr != NULL && d->fr->tee_wfd != -1 && d->drained &&
	    len == d->pipe.data && zp_framer_error(&d->fr->f, NULL) == NULL) {
		k = zp_framer_kind(&d->fr->f);
		if (k == ZP_FRAMING_LF || k == ZP_FRAMING_NUL)
			return splice_flush_tail(d);
	}

	do {
		n = splice(d->pipe.rfd, NULL, d->dst->fd, NULL, len,
		    ZP_SPLICE_FLAGS);
	} while (n == -1 && errno == EINTR);
	if (n > 0) {
		d->pipe.data -= n;
		d->spliced += n;
		if (d->fr != NULL)
			zp_dframe_sent(d->fr, (size_t)n);
	} else if (n == 0) {
		/* An empty pipe: cannot happen while pipe.data counts right. */
		errno = EIO;
		return -1;
	}
	return n;
}

/*
 * For the mirrors: how many of the n bytes just sent end at the last
 * message boundary among them, 0 when none is known: an octet frame's
 * end (the mark passed, `mark` the last one before), or for lf and nul
 * the delimiter seen last in a pipe that emptied (splice_flush_tail).
 */
static size_t
splice_whole(const struct zp_dir *d, size_t n, uint64_t mark)
{
	const struct zp_dframe	*fr = d->fr;
	uint64_t		 from;
	enum zp_framing		 k;

	if (fr == NULL || zp_framer_error(&fr->f, NULL) != NULL)
		return 0;
	from = fr->sent - n;
	k = zp_framer_kind(&fr->f);
	if (fr->last_mark != mark && fr->last_mark > from)
		return (size_t)(fr->last_mark - from);
	if ((k == ZP_FRAMING_LF || k == ZP_FRAMING_NUL) && fr->tail_delim &&
	    fr->tail_at == fr->sent)
		return n;
	return 0;
}

/*
 * Pipe -> socket. With a replay window a send may only take what the
 * replay kept (splice_keep), and with --mirror only what every mirror
 * stream took (tee(2) starts at the head, so the rest is tee'd once the
 * head is out); once all of that went, the rest is kept and sent in the
 * same flush, so that the cap is never taken for a full destination
 * (the pump waits for the write event after a short flush). Returns
 * bytes moved, or -1 with errno when none were.
 */
static ssize_t
splice_flush(struct zp_dir *d)
{
	ssize_t		n, total = 0;
	size_t		len;
	uint64_t	mark;

	for (;;) {
		len = splice_keep(d);
		if (d->mir != NULL)
			len = zp_mirror_tee(d->mir, d->pipe.rfd, len);
		mark = d->fr != NULL ? d->fr->last_mark : 0;
		n = splice_flush_once(d, len);
		if (n <= 0)
			return total > 0 ? total : n;
		if (d->mir != NULL)
			zp_mirror_sent(d->mir, (size_t)n,
			    splice_whole(d, (size_t)n, mark));
		total += n;
		if (((d->fr == NULL || d->fr->rp == NULL) && d->mir == NULL) ||
		    (size_t)n < len || d->pipe.data == 0)
			return total;
	}
}

static size_t
splice_pending(const struct zp_dir *d)
{
	return d->pipe.data;
}

/* The pipe goes back to the pool, or is closed if it holds bytes. */
static void
splice_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	zp_pipepool_put(ctx->pool, &d->pipe);
}

const struct zp_relay_ops zp_relay_splice = {
	.name = "splice",
	.piped = 1,
	.fill = splice_fill,
	.flush = splice_flush,
	.pending = splice_pending,
	.release = splice_release,
};
