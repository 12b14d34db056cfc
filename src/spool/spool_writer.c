/*
 * spool_writer.c - a spooling pair's writer, on the pair's relay thread:
 * its life (zp_spool_writer_new/free), its files, asked of the I/O
 * thread and answered into its box (writer_io_cb), its timer (syncs, a
 * file's age, the room), the way back to a live upstream, and its pump:
 * the client's stream read into the open file (spliced blind when the
 * framing allows, else copied through a buffer and seen by the framer),
 * files ended at frame boundaries, and the stream held while a file is
 * being opened. Its only disk calls are writes into a file it has open:
 * into the page cache, which does not wait for the disk.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/config.h"
#include "core/upstream.h"
#include "lib/bufcache.h"
#include "lib/clock.h"
#include "lib/framing.h"
#include "lib/log.h"
#include "lib/pipepool.h"
#include "lib/wake.h"
#include "relay/ctx.h"
#include "spool/spool.h"
#include "spool/spool_int.h"
#include "tls/tls_io.h"

/*
 * Ask for the stream's next file (only when the spool has room, unless
 * room is 0). Returns 0, or -1 with errno.
 */
static int	spool_writer_open(struct zp_spool_writer *, int room);
/* The open file, if any, goes to the I/O thread to be done with. */
static void	spool_writer_close_file(struct zp_spool_writer *, int whole);
/*
 * The stream is over (err 0: the client's EOF). Returns 1 when done()
 * ran (w is gone: return at once), 0 when an answer is still due.
 */
static int	spool_writer_finish(struct zp_spool_writer *, int err);
/* At a boundary: the file goes to be sent, nothing more is read. */
static void	spool_writer_stop(struct zp_spool_writer *);
/* Is the stream at a frame boundary now? 1 or 0. */
static int	spool_writer_at_boundary(struct zp_spool_writer *);
/* Should the open file be closed at the next boundary? 1 or 0. */
static int	spool_writer_due(struct zp_spool_writer *);
/* Write n bytes into the open file: 0, or -1 with errno (w->disk set). */
static int	spool_writer_write(struct zp_spool_writer *, const char *b,
	    size_t n);
/*
 * n bytes of the stream for the file: written, or held while it is
 * being opened. Returns 0, or -1 with errno.
 */
static int	spool_writer_give(struct zp_spool_writer *, const char *b,
		    size_t n);
/* Read the client's socket (on: 1) or not (0). */
static void	spool_writer_want_read(struct zp_spool_writer *, int on);
/*
 * Move up to a budget of the stream into files; may end the writer
 * (spool_writer_finish()): the caller returns after it.
 */
static void	spool_writer_pump(struct zp_spool_writer *);
/* The client's socket's read callback (arg: the writer). */
static void	spool_writer_read_cb(evutil_socket_t, short, void *);

/* How often a writer looks at its file (sync, age) and at the room. */
#define SPOOL_TICK_MS		250

/* The spool of ctx's root (one for every thread). */
static struct zp_spool *
ctx_spool(struct zp_ctx *ctx)
{
	return zp_ctx_root(ctx)->spool;
}

/* A request of w's for the I/O thread, answered to its box; or NULL. */
static struct io_req *
writer_req(struct zp_spool_writer *w, enum io_kind kind)
{
	struct io_req	*r;

	if ((r = calloc(1, sizeof(*r))) == NULL) {
		errno = ENOMEM;
		return NULL;
	}
	r->kind = kind;
	r->box = w->box;
	r->fd = w->fd;
	return r;
}

/*
 * Ask for the stream's next file: only when the spool has room, but for
 * the rest of a read that a cut split (room: 0). It is made on the I/O
 * thread (a create waits for the disk like a sync does: the directory's
 * journal, NFS); what the stream gives until it is open waits in held.
 * Returns 0, or -1 with errno.
 */
static int
spool_writer_open(struct zp_spool_writer *w, int room)
{
	struct io_req	*r;
	int		 n;

	w->disk = 1;		/* until it is open */
	if (room && !spool_room(w->sp)) {
		errno = ENOSPC;
		return -1;
	}
	if ((r = writer_req(w, IO_OPEN)) == NULL)
		return -1;
	w->seq++;
	if (zp_spool_name(w->name, sizeof(w->name), w->hdr.started_ms,
	    &w->hdr.client, w->conn, w->seq, "open") == -1 ||
	    (n = zp_spool_hdr_format(&w->hdr, r->hdr, sizeof(r->hdr))) ==
	    -1) {
		free(r);
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(r->name, w->name, sizeof(r->name));
	r->hdrlen = n;
	w->fsize = w->hdrlen = 0;
	w->opening = 1;
	spool_io_post(w->sp, r);
	return 0;
}

/*
 * The open file goes to the I/O thread to be done with (io_close):
 * gone when it holds no client byte, else synced and renamed "spool"
 * (whole frames) or "partial". Its answer comes to writer_answer.
 */
static void
spool_writer_close_file(struct zp_spool_writer *w, int whole)
{
	struct io_req	*r = w->creq;

	if (w->fd == -1)
		return;
	assert(r != NULL);
	w->creq = NULL;
	r->kind = IO_CLOSE;
	r->box = w->box;
	r->fd = w->fd;
	r->whole = whole;
	r->fsize = w->fsize;
	r->fhdr = w->hdrlen;
	r->err = 0;
	w->fd = -1;
	w->dirty = 0;
	w->closing++;
	spool_io_post(w->sp, r);
}
/*
 * Has every closed file of the stream been delivered (is gone)? When it
 * is not known yet, the I/O thread is asked (it looks for the next
 * undelivered seq's file), and its answer takes the next step
 * (writer_answer, writer_live_step).
 */
static int
writer_delivered(struct zp_spool_writer *w)
{
	unsigned	 closed = w->fd != -1 || w->opening ? w->seq - 1 :
			     w->seq;
	struct io_req	*r;

	if (w->delivered >= closed)
		return 1;
	if (w->asking || (r = writer_req(w, IO_GONE)) == NULL)
		return 0;
	r->key = w->hdr;
	r->conn = w->conn;
	r->from = w->delivered + 1;
	r->to = closed;
	w->asking = 1;
	spool_io_post(w->sp, r);
	return 0;
}

/*
 * The way back to a live upstream, a step each tick: once one is up and
 * every closed file of the stream was delivered, end the open file at a
 * boundary (seeking one first) and read nothing more; once that file too
 * was delivered, hand the client back (ZP_SPOOL_LIVE). An upstream down
 * again meanwhile: spool on. Returns 1 when the writer is done.
 */
static int
writer_live_step(struct zp_spool_writer *w)
{
	if (!zp_upstreams_any_up(w->ctx->ups)) {
		if (w->phase != W_WRITING) {
			w->phase = W_WRITING;
			if (!w->paused)
				spool_writer_want_read(w, 1);
		}
		return 0;
	}
	/* A frame still being dropped must end first (writer_copy). */
	if (w->phase == W_SEEKING || w->skip || w->opening ||
	    !writer_delivered(w))
		return 0;
	if (w->phase == W_WRITING) {
		if (!spool_writer_at_boundary(w)) {
			/* The pump stops at the next one, full or not. */
			w->phase = W_SEEKING;
			spool_writer_want_read(w, 1);
			return 0;
		}
		spool_writer_stop(w);
		if (!writer_delivered(w))
			return 0;
	}
	/* Its last file's close must have gone well. */
	if (w->closing > 0)
		return 0;
	w->finished = 1;
	w->done(w->arg, ZP_SPOOL_LIVE, 0);
	return 1;
}
/*
 * The stream is over (err 0: the client's EOF): its file is closed, and
 * once the I/O thread has done so, the pair is told (the end says
 * whether it went well). Returns 1 when done() ran (w is gone), 0 when
 * an answer still has to come back.
 */
static int
spool_writer_finish(struct zp_spool_writer *w, int err)
{
	if (!w->ending) {
		w->ending = 1;
		w->end_err = err;
		w->end_disk = err != 0 && w->disk;
	}
	spool_writer_want_read(w, 0);
	/* Its file comes (writer_opened), and gets what was held. */
	if (w->opening)
		return 0;
	spool_writer_close_file(w, spool_writer_at_boundary(w));
	if (w->closing > 0)
		return 0;
	w->finished = 1;
	w->done(w->arg, w->end_err == 0 ? ZP_SPOOL_ENDED : w->end_disk ?
	    ZP_SPOOL_DISK_FAILED : ZP_SPOOL_CLIENT_FAILED, w->end_err);
	return 1;
}

/* At a boundary: the file goes to be sent, nothing more is read. */
static void
spool_writer_stop(struct zp_spool_writer *w)
{
	spool_writer_want_read(w, 0);
	w->phase = W_STOPPED;
	spool_writer_close_file(w, 1);
}
/* The file asked for is open: what waited for it goes in first. */
static int
writer_opened(struct zp_spool_writer *w, struct io_req *r)
{
	size_t	n = w->nheld;
	int	err = r->err;

	w->opening = 0;
	if (err != 0) {
		zp_log(w->ctx->log, ZP_LOG_WARN, "spool: cannot create %s: "
		    "%s", r->name, strerror(err));
		free(r);
		return spool_writer_finish(w, err);
	}
	w->creq = r;
	w->fd = r->fd;
	w->fsize = w->hdrlen = (uint64_t)r->hdrlen;
	zp_clock_now(&w->fopened);
	w->dirty = 1;
	w->disk = 0;
	w->nheld = 0;
	if (n > 0 && spool_writer_write(w, w->held, n) == -1)
		return spool_writer_finish(w, errno);
	if (w->ending)
		return spool_writer_finish(w, w->end_err);
	if (!w->paused && w->phase != W_STOPPED)
		spool_writer_want_read(w, 1);
	return 0;
}

/*
 * An answer of the I/O thread's for w (r is then w's: kept or freed).
 * Returns 1 when done() ran (w is gone).
 */
static int
writer_answer(struct zp_spool_writer *w, struct io_req *r)
{
	int	err = r->err;

	switch (r->kind) {
	case IO_OPEN:
		return writer_opened(w, r);
	case IO_SYNC:
		free(r);
		w->syncing = 0;
		if (err != 0 && !w->ending) {
			w->disk = 1;
			return spool_writer_finish(w, err);
		}
		return 0;
	case IO_CLOSE:
		free(r);
		w->closing--;
		if (err != 0 && !w->ending) {
			w->disk = 1;
			return spool_writer_finish(w, err);
		}
		/* The client's EOF, then a failed close: the spool's fault. */
		if (err != 0 && w->end_err == 0) {
			w->end_err = err;
			w->end_disk = 1;
		}
		return w->ending ? spool_writer_finish(w, w->end_err) : 0;
	case IO_GONE:
		w->asking = 0;
		w->delivered = r->from - 1 + r->gone;
		free(r);
		return w->ending ? 0 : writer_live_step(w);
	case IO_STOP:
		break;
	}
	free(r);
	return 0;
}

/* The I/O thread answered: in w's loop. */
static void
writer_io_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool_writer	*w = arg;
	struct io_req		*r;

	while ((r = spool_io_pop(&w->box->mu, &w->box->done)) != NULL) {
		/* The writer holds a reference too: never the last. */
		spool_io_box_put(w->box, 1);
		if (writer_answer(w, r))
			return;
	}
}

static void
writer_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool_writer	*w = arg;
	struct timeval		 now, dt, sync;
	struct io_req		*r;

	if (w->ending)
		return;
	zp_clock_now(&now);
	sync = zp_seconds_tv(w->ctx->cfg->spool_sync);
	timersub(&now, &w->synced, &dt);
	/* One sync at a time: a slow disk does not pile them up. */
	if (w->dirty && w->fd != -1 && !w->syncing &&
	    !timercmp(&dt, &sync, <) && (r = writer_req(w, IO_SYNC)) !=
	    NULL) {
		w->syncing = 1;
		w->dirty = 0;
		w->synced = now;
		spool_io_post(w->sp, r);
	}
	/* An idle stream's old file goes when it ends a frame. */
	if (spool_writer_due(w) && spool_writer_at_boundary(w))
		spool_writer_close_file(w, 1);
	if (writer_live_step(w))
		return;
	if (w->paused && w->phase != W_STOPPED && spool_room(w->sp)) {
		spool_writer_want_read(w, 1);
		spool_writer_pump(w);
	}
}

struct zp_spool_writer *
zp_spool_writer_new(struct zp_ctx *ctx, int fd, struct zp_tls *tls,
    uint64_t conn,
    const struct zp_addr *client, const struct zp_addr *dst, int framing,
    size_t max_frame, int dgram, zp_spool_done_fn done, void *arg)
{
	struct zp_spool_writer	*w;
	struct zp_spool		*sp = ctx_spool(ctx);
	struct timeval		 tv = { 0, SPOOL_TICK_MS * 1000 }, now;
	struct timeval		 sync = zp_seconds_tv(ctx->cfg->spool_sync);
	int			 err;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return NULL;
	w->ctx = ctx;
	w->sp = sp;
	w->sock = fd;
	w->tls = tls;
	w->fd = -1;
	w->pipe.rfd = w->pipe.wfd = -1;
	w->conn = conn;
	w->done = done;
	w->arg = arg;
	w->hdr.client = *client;
	w->hdr.dst = *dst;
	w->hdr.framing = framing;
	w->hdr.dgram = dgram;
	w->max_frame = max_frame;
	zp_clock_now(&w->synced);
	/* Wall time: the files' names and headers say when, for people. */
	gettimeofday(&now, NULL);
	w->hdr.started_ms = (uint64_t)now.tv_sec * 1000 +
	    (uint64_t)now.tv_usec / 1000;
	spool_add(&sp->streams, 1);
	if (zp_framer_init(&w->f, (enum zp_framing)framing, max_frame) == -1) {
		errno = EINVAL;
		goto fail;
	}
	if ((w->box = spool_io_box_new(ctx, writer_io_cb, w)) == NULL) {
		errno = ENOMEM;
		goto fail;
	}
	if (spool_writer_open(w, 1) == -1) {
		if (errno == ENOSPC)
			spool_add(&sp->refused, 1);
		goto fail;
	}
	/*
	 * No pipe to be had: read and write, as copy mode does; so too the
	 * bytes of a TLS session, which only OpenSSL can read.
	 */
	if (tls == NULL && ctx->pool != NULL &&
	    zp_pipepool_get(ctx->pool, &w->pipe) == -1)
		w->pipe.rfd = w->pipe.wfd = -1;
	if ((w->rev = event_new(ctx->base, fd, EV_READ | EV_PERSIST,
	    spool_writer_read_cb, w)) == NULL ||
	    (w->timer = event_new(ctx->base, -1, EV_PERSIST, writer_timer_cb,
	    w)) == NULL || event_add(w->timer, timercmp(&sync, &tv, <) ?
	    &sync : &tv) == -1) {
		errno = ENOMEM;
		goto fail;
	}
	/* The reading begins once the file is open (writer_opened). */
	return w;
fail:
	err = errno;
	zp_spool_writer_free(w);
	errno = err;
	return NULL;
}

int
zp_spool_writer_prefix(struct zp_spool_writer *w, const void *buf,
    size_t len, const struct zp_framer *cutting)
{
	if (cutting != NULL) {
		/* Nothing was held: the frame's rest is still in the socket. */
		assert(len == 0);
		w->f = *cutting;
		w->skip = 1;
		return 0;
	}
	if (len == 0)
		return 0;
	(void)zp_framer_feed(&w->f, buf, len);
	return spool_writer_give(w, buf, len);
}

uint64_t
zp_spool_writer_cut(const struct zp_spool_writer *w)
{
	return w->cut;
}

uint64_t
zp_spool_writer_bytes(const struct zp_spool_writer *w)
{
	return w->bytes;
}

/*
 * An answer that came back for a writer being freed: a file it asked
 * for gets what was held for it and goes to be closed.
 */
static void
writer_dispose(struct zp_spool_writer *w, struct io_req *r, int whole)
{
	size_t	n = 0;

	if (r->kind != IO_OPEN || r->err != 0) {
		free(r);
		return;
	}
	/* A write into an open file, as the writer's own. */
	if (w->nheld > 0 && spool_io_write(w->sp, r->fd, w->held, w->nheld,
	    1) == 0)
		n = w->nheld;
	r->kind = IO_CLOSE;
	r->box = NULL;
	r->whole = whole;
	r->fsize = (uint64_t)r->hdrlen + n;
	r->fhdr = (uint64_t)r->hdrlen;
	spool_io_post(w->sp, r);
}

void
zp_spool_writer_free(struct zp_spool_writer *w)
{
	struct io_box	*box;
	struct io_req	*r;
	struct event	*ev;
	int		 whole, n = 0, answered = 0;

	if (w == NULL)
		return;
	/* The stream ends where it is: what it gave is kept. */
	whole = spool_writer_at_boundary(w);
	if (!w->finished)
		spool_writer_close_file(w, whole);
	if ((box = w->box) != NULL) {
		/*
		 * Answers from now on are the I/O thread's to dispose of: a
		 * file still being opened gets what was held for it there,
		 * unless its answer is in already (then it is done here).
		 */
		pthread_mutex_lock(&box->mu);
		ev = box->ev;
		box->ev = NULL;
		STAILQ_FOREACH(r, &box->done, entry)
			if (r->kind == IO_OPEN)
				answered = 1;
		if (w->opening && !answered) {
			box->orphan = w->held;
			box->norphan = w->nheld;
			box->orphan_whole = whole;
			w->held = NULL;
			w->nheld = 0;
		}
		pthread_mutex_unlock(&box->mu);
		/* ev is NULL in the box: the I/O thread posts it no more. */
		zp_wake_forget(box->wake, ev);
		event_free(ev);
		while ((r = spool_io_pop(&box->mu, &box->done)) != NULL) {
			writer_dispose(w, r, whole);
			n++;
		}
		spool_io_box_put(box, 1 + n);
	}
	if (w->rev != NULL)
		event_free(w->rev);
	if (w->timer != NULL)
		event_free(w->timer);
	if (w->pipe.rfd != -1)
		zp_pipepool_put(w->ctx->pool, &w->pipe);
	zp_buf_put(&w->ctx->bufs, w->buf, w->bufsize);
	free(w->held);
	free(w->creq);
	spool_add(&w->sp->streams, -1);
	free(w);
}

/* ---- the pump: the stream read into the file ---------------------- */

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
static int
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
	    w->max_frame, zp_framer_offset(&w->f), 1);
	return 1;
}
/* Should the open file be closed at the next boundary? */
static int
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
	return zp_upstreams_any_up(w->ctx->ups);
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

static int
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
static int
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

/*
 * The client's bytes: recv(2)'s contract (flags 0 or MSG_PEEK), through
 * its TLS session if it has one.
 */
static ssize_t
writer_recv(struct zp_spool_writer *w, char *buf, size_t len, int flags)
{
	ssize_t	n;

	if (w->tls != NULL)
		return flags & MSG_PEEK ? zp_tls_peek(w->tls, buf, len) :
		    zp_tls_read(w->tls, buf, len);
	do {
		n = recv(w->sock, buf, len, flags);
	} while (n == -1 && errno == EINTR);
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

	if ((n = writer_recv(w, w->buf, w->bufsize, 0)) <= 0)
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

/*
 * What OpenSSL decrypted already no socket event announces: a reading
 * writer that leaves some is woken for it.
 */
static void
writer_tls_pending(struct zp_spool_writer *w)
{
	if (w->tls != NULL && w->ron && zp_tls_pending(w->tls) > 0)
		event_active(w->rev, EV_READ, 0);
}

static void
spool_writer_want_read(struct zp_spool_writer *w, int on)
{
	if (on == w->ron)
		return;
	if (on ? event_add(w->rev, NULL) : event_del(w->rev))
		return;
	w->ron = on;
	writer_tls_pending(w);
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

	if ((n = writer_recv(w, w->buf, w->bufsize, MSG_PEEK)) <= 0)
		return n;
	cut = zp_framer_next(&w->f, w->buf, (size_t)n);
	if ((n = writer_recv(w, w->buf, cut > 0 ? cut : (size_t)n, 0)) <= 0)
		return n;
	(void)zp_framer_feed(&w->f, w->buf, (size_t)n);
	if (spool_writer_give(w, w->buf, (size_t)n) == -1)
		return -1;
	if (cut > 0 && (size_t)n == cut)
		spool_writer_stop(w);
	return n;
}

static void
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
	/* The budget's end: live pairs come between, then the rest. */
	if (moved >= budget)
		w->ctx->pass_busy = 1;	/* no pause (--coalesce) */
	writer_tls_pending(w);
}

static void
spool_writer_read_cb(evutil_socket_t fd, short what, void *arg)
{
	spool_writer_pump(arg);
}
