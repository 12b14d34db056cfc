/*
 * spool_pump.c - a writer's pump, on the pair's relay thread: the
 * client's stream read into the open file (spliced blind when the
 * framing allows, else copied through a buffer and seen by the framer),
 * files ended at frame boundaries, and the stream held while a file is
 * being opened. Its only disk calls are writes into a file it has open:
 * into the page cache, which does not wait for the disk.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/bufcache.h"
#include "lib/clock.h"
#include "core/config.h"
#include "relay/ctx.h"
#include "lib/framing.h"
#include "lib/pipepool.h"
#include "spool/spool.h"
#include "spool/spool_int.h"

/* The delimiter of a delimited framing, or -1. */
static int
writer_delim(const struct zp_spool_writer *w)
{
	switch (zp_framer_kind(&w->f)) {
	case ZP_FRAMING_LF:
		return '\n';
	case ZP_FRAMING_NUL:
		return '\0';
	default:
		return -1;
	}
}

/*
 * Is the stream at a frame boundary now? The framer knows when it saw
 * the bytes; after a spliced (blind) stretch of a delimited stream, its
 * last byte says (writer_splice keeps it): a delimiter ends a frame. A
 * stream whose framing failed is plain bytes: any point will do.
 */
int
spool_writer_at_boundary(struct zp_spool_writer *w)
{
	int	delim = writer_delim(w);
	int	some = w->fd != -1 ? w->fsize > w->hdrlen : w->nheld > 0;

	/* Dropping a frame's rest: what the file holds ends whole. */
	if (w->skip || zp_framer_error(&w->f, NULL) != NULL ||
	    zp_framer_at_boundary(&w->f))
		return 1;
	if (delim == -1 || !some || w->last != delim)
		return 0;
	/* Known again: follow it exactly from here. */
	(void)zp_framer_resume(&w->f, zp_framer_kind(&w->f),
	    w->ctx->cfg->max_frame, zp_framer_offset(&w->f), 1);
	return 1;
}
/* Should the open file be closed at the next boundary? */
int
spool_writer_due(struct zp_spool_writer *w)
{
	struct timeval	now, dt;

	if (w->fd == -1 || w->fsize <= w->hdrlen)
		return 0;
	if (w->fsize >= ZP_SPOOL_FILE_MAX)
		return 1;
	zp_clock_now(&now);
	timersub(&now, &w->fopened, &dt);
	if (dt.tv_sec * 1000 + dt.tv_usec / 1000 < ZP_SPOOL_FILE_AGE_MS)
		return 0;
	/* Old enough to send: worth closing if some upstream may take it. */
	return spool_upstream_up(w->ctx);
}
/* n bytes of the stream went into the file. */
static void
writer_wrote(struct zp_spool_writer *w, size_t n)
{
	w->fsize += n;
	w->bytes += n;
	w->dirty = 1;
	spool_add(&w->sp->bytes, (int64_t)n);
	spool_add(&w->sp->spooled, (int64_t)n);
}

int
spool_writer_write(struct zp_spool_writer *w, const char *b, size_t n)
{
	ssize_t	wr;

	while (n > 0) {
		if ((wr = write(w->fd, b, n)) == -1) {
			if (errno == EINTR)
				continue;
			w->disk = 1;
			return -1;
		}
		if (wr == 0) {
			errno = ENOSPC;
			w->disk = 1;
			return -1;
		}
		writer_wrote(w, (size_t)wr);
		b += wr;
		n -= (size_t)wr;
	}
	return 0;
}

/*
 * n bytes of the stream for the file: written, or held while the file
 * is being opened. Returns 0, or -1 with errno.
 */
int
spool_writer_give(struct zp_spool_writer *w, const char *b, size_t n)
{
	size_t	 cap;
	char	*h;

	if (n == 0)
		return 0;
	w->last = (unsigned char)b[n - 1];
	if (w->fd != -1)
		return spool_writer_write(w, b, n);
	assert(w->opening);
	if (w->nheld + n > w->heldcap) {
		cap = w->heldcap * 2 > w->nheld + n ? w->heldcap * 2 :
		    w->nheld + n;
		if ((h = realloc(w->held, cap)) == NULL)
			return -1;
		w->held = h;
		w->heldcap = cap;
	}
	memcpy(w->held + w->nheld, b, n);
	w->nheld += n;
	return 0;
}

/*
 * Splice what the socket holds (up to max) into the file, blind. Returns
 * the bytes moved, 0 at EOF, -1 with errno.
 */
static ssize_t
writer_splice(struct zp_spool_writer *w, size_t max)
{
	ssize_t		n, m;
	size_t		left, tail;
	unsigned char	c;

	n = splice(w->sock, NULL, w->pipe.wfd, NULL, max,
	    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n <= 0)
		return n;
	/*
	 * A delimited stream's last byte says whether it stopped at a
	 * boundary (spool_writer_at_boundary): it is taken out of the pipe and
	 * written, not read back from the file afterwards.
	 */
	tail = writer_delim(w) != -1 ? 1 : 0;
	for (left = (size_t)n; left > tail; left -= (size_t)m) {
		m = splice(w->pipe.rfd, NULL, w->fd, NULL, left - tail,
		    SPLICE_F_MOVE);
		if (m == -1 && errno == EINTR) {
			m = 0;
			continue;
		}
		if (m <= 0) {
			if (m == 0)
				errno = EIO;
			w->disk = 1;
			/* What the pipe still holds is lost: the stream ends. */
			w->pipe.data = left;
			return -1;
		}
		writer_wrote(w, (size_t)m);
	}
	if (tail) {
		do {
			m = read(w->pipe.rfd, &c, 1);
		} while (m == -1 && errno == EINTR);
		if (m != 1) {
			if (m == 0)
				errno = EIO;
			w->pipe.data = 1;
			return -1;
		}
		if (spool_writer_write(w, (const char *)&c, 1) == -1)
			return -1;
		w->last = c;
	}
	(void)zp_framer_skip(&w->f, (uint64_t)n);
	return n;
}

static int
writer_buf(struct zp_spool_writer *w)
{
	w->bufsize = w->ctx->cfg->buffer_size;
	if ((w->buf = zp_buf_get(&w->ctx->bufs, w->bufsize)) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/*
 * Read into the buffer and write it, seen by the framer; when the file
 * is due, close it at the first boundary within what was read (the rest
 * waits for the next file). Returns the bytes read, 0 at EOF, -1 with
 * errno.
 */
static ssize_t
writer_copy(struct zp_spool_writer *w, int due)
{
	ssize_t	n;
	size_t	cut = 0, drop = 0, len;
	char	*b;

	do {
		n = recv(w->sock, w->buf, w->bufsize, 0);
	} while (n == -1 && errno == EINTR);
	if (n <= 0)
		return n;
	if (w->skip) {
		/* The rest of a frame whose start went to an upstream. */
		if ((drop = zp_framer_next(&w->f, w->buf, (size_t)n)) == 0)
			drop = (size_t)n;
		else
			w->skip = 0;
		(void)zp_framer_feed(&w->f, w->buf, drop);
		w->cut += drop;
	}
	b = w->buf + drop;
	len = (size_t)n - drop;
	if (due && (cut = zp_framer_next(&w->f, b, len)) > 0) {
		(void)zp_framer_feed(&w->f, b, cut);
		if (spool_writer_give(w, b, cut) == -1)
			return -1;
		spool_writer_close_file(w, 1);
		if (spool_writer_open(w, 0) == -1)
			return -1;
	}
	(void)zp_framer_feed(&w->f, b + cut, len - cut);
	if (spool_writer_give(w, b + cut, len - cut) == -1)
		return -1;
	return n;
}

void
spool_writer_want_read(struct zp_spool_writer *w, int on)
{
	if (on == w->ron)
		return;
	if (on ? event_add(w->rev, NULL) : event_del(w->rev))
		return;
	w->ron = on;
}

/*
 * W_SEEKING: read exactly up to the next boundary (peeked first), and
 * stop there; what follows stays in the socket for the live upstream.
 * Returns the bytes read, 0 at EOF, -1 with errno.
 */
static ssize_t
writer_seek(struct zp_spool_writer *w)
{
	ssize_t	n;
	size_t	cut;

	do {
		n = recv(w->sock, w->buf, w->bufsize, MSG_PEEK);
	} while (n == -1 && errno == EINTR);
	if (n <= 0)
		return n;
	cut = zp_framer_next(&w->f, w->buf, (size_t)n);
	do {
		n = recv(w->sock, w->buf, cut > 0 ? cut : (size_t)n, 0);
	} while (n == -1 && errno == EINTR);
	if (n <= 0)
		return n;
	(void)zp_framer_feed(&w->f, w->buf, (size_t)n);
	if (spool_writer_give(w, w->buf, (size_t)n) == -1)
		return -1;
	if (cut > 0 && (size_t)n == cut)
		spool_writer_stop(w);
	return n;
}

void
spool_writer_pump(struct zp_spool_writer *w)
{
	size_t	moved = 0, budget = w->ctx->budget;
	ssize_t	n;
	int	due, blind;

	/* Seeking reads one message more at most, room or not. */
	if (w->phase != W_SEEKING && !spool_room(w->sp)) {
		/* Full: the client waits in its socket; the timer looks. */
		w->paused = 1;
		spool_writer_want_read(w, 0);
		return;
	}
	w->paused = 0;
	while (moved < budget && w->phase != W_STOPPED) {
		if ((due = spool_writer_due(w)) &&
		    spool_writer_at_boundary(w)) {
			spool_writer_close_file(w, 1);
			due = 0;
		}
		if (w->fd == -1) {
			if (!w->opening && spool_writer_open(w, 1) == -1) {
				if (errno == ENOSPC) {
					w->paused = 1;
					spool_writer_want_read(w, 0);
					return;
				}
				(void)spool_writer_finish(w, errno);
				return;
			}
			/* Its answer reads on (writer_opened). */
			spool_writer_want_read(w, 0);
			return;
		}
		blind = w->pipe.rfd != -1 && !due && !w->skip &&
		    (writer_delim(w) != -1 ||
		    zp_framer_error(&w->f, NULL) != NULL);
		if ((!blind || w->phase == W_SEEKING) && w->buf == NULL &&
		    writer_buf(w) == -1) {
			(void)spool_writer_finish(w, errno);
			return;
		}
		if (w->phase == W_SEEKING)
			n = writer_seek(w);
		else if (blind)
			n = writer_splice(w, budget - moved);
		else
			n = writer_copy(w, due);
		if (n > 0) {
			moved += (size_t)n;
			continue;
		}
		if (n == 0)
			(void)spool_writer_finish(w, 0);
		else if (errno != EAGAIN)
			(void)spool_writer_finish(w, errno);
		return;
	}
}

void
spool_writer_read_cb(evutil_socket_t fd, short what, void *arg)
{
	spool_writer_pump(arg);
}
