/*
 * spool.c - --spool DIR: framed client streams kept in files while no
 * upstream answers, and sent on once one does (spool.h).
 *
 * Written socket -> pipe -> file with splice(2) (the file is created by
 * us alone and written at its own position: splice refuses O_APPEND
 * targets, and nothing else writes it), synced with fdatasync(2) at most
 * every --spool-sync seconds and before a file is renamed whole. Sent
 * file -> socket with sendfile(2), a file over a connection of its own,
 * and unlinked only once the upstream acknowledged every byte
 * (SIOCOUTQ 0 after our FIN) and closed: a failure or a crash before that
 * sends the whole file again (at least once).
 */
#include <sys/types.h>
#include <sys/queue.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "bufcache.h"
#include "clock.h"
#include "config.h"
#include "connect.h"
#include "ctx.h"
#include "framing.h"
#include "log.h"
#include "net.h"
#include "pipepool.h"
#include "proxyproto.h"
#include "spool.h"
#include "spool_int.h"
#include "upstream.h"
#include "wake.h"

/*
 * The parts (spool_int.h): the codec of a file's header and names
 * (spool_hdr.c), DIR and its room (spool_dir.c), the I/O thread
 * (spool_io.c), the writer (spool_writer.c, spool_pump.c) and the
 * senders (spool_sender.c). This file is the spool object: made, started
 * and ended here, and its tallies.
 */

void
zp_spool_tally(const struct zp_spool *sp, struct zp_spool_tally *t)
{
	memset(t, 0, sizeof(*t));
	if (sp == NULL)
		return;
	t->bytes = spool_ld(&sp->bytes);
	t->files = spool_ld(&sp->files);
	t->streams = spool_ld(&sp->streams);
	t->spooled = spool_ld(&sp->spooled);
	t->replayed = spool_ld(&sp->replayed);
	t->refused = spool_ld(&sp->refused);
	t->delivered = spool_ld(&sp->delivered);
}

/* Does some upstream look up (it may take files)? */
int
spool_upstream_up(struct zp_ctx *ctx)
{
	struct zp_upstream	u;
	size_t			i, n = zp_upstreams_count(ctx->ups);

	for (i = 0; i < n; i++) {
		zp_upstream_get(ctx->ups, i, &u);
		if (u.up)
			return 1;
	}
	return 0;
}


struct zp_spool *
zp_spool_new(struct zp_ctx *ctx, char *err, size_t errlen)
{
	const char		*dir = ctx->cfg->spool_dir;
	struct zp_spool		*sp;
	size_t			 i;
	int			 partial = 0, fd, busy;

	if ((sp = calloc(1, sizeof(*sp))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	sp->ctx = ctx;
	zp_connecting_init(&sp->probe);
	sp->free_bytes = UINT64_MAX;	/* until looked at */
	pthread_mutex_init(&sp->mu, NULL);
	STAILQ_INIT(&sp->q);
	if ((sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1) {
		snprintf(err, errlen, "--spool %s: %s", dir, strerror(errno));
		free(sp);
		return NULL;
	}
	if (spool_scan(sp) == -1) {
		snprintf(err, errlen, "--spool %s: cannot read it: %s", dir,
		    strerror(errno));
		zp_spool_free(sp);
		return NULL;
	}
	for (i = 0; i < sp->nnames; i++) {
		if (strcmp(spool_name_suffix(sp->names[i]), "open") != 0)
			continue;
		/* Still written: by the zproxy we take over from. */
		if ((fd = openat(sp->dirfd, sp->names[i], O_RDONLY |
		    O_CLOEXEC | O_NOFOLLOW)) == -1)
			continue;
		busy = spool_file_lock(fd) == -1;
		close(fd);
		/* Its writer died with the last run: it may end mid-frame. */
		if (!busy) {
			if (spool_rename(sp, sp->names[i], "partial") == -1) {
				snprintf(err, errlen, "--spool %s: cannot "
				    "rename %s: %s", dir, sp->names[i],
				    strerror(errno));
				zp_spool_free(sp);
				return NULL;
			}
			partial++;
		}
	}
	spool_names_clear(sp);
	if (sp->files > 0)
		zp_log(ctx->log, ZP_LOG_NOTICE, "spool %s: %llu files "
		    "(%llu bytes) found, %d of them cut short by the end "
		    "of a previous run: they are sent first", dir,
		    (unsigned long long)sp->files,
		    (unsigned long long)sp->bytes, partial);
	return sp;
}

int
zp_spool_start(struct zp_spool *sp, char *err, size_t errlen)
{
	struct zp_ctx	*ctx = sp->ctx;
	struct timeval	 tv = { SENDER_TICK_MS / 1000,
			    (SENDER_TICK_MS % 1000) * 1000 };
	struct timeval	 room = { 0, SPOOL_FREE_MS * 1000 };
	char		 probe[64];
	int		 fd;

	snprintf(probe, sizeof(probe), ".zproxy-probe.%ld", (long)getpid());
	if ((fd = openat(sp->dirfd, probe, O_WRONLY | O_CREAT | O_TRUNC |
	    O_CLOEXEC, 0600)) == -1) {
		snprintf(err, errlen, "--spool %s: cannot create a file "
		    "there: %s", ctx->cfg->spool_dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlinkat(sp->dirfd, probe, 0);
	spool_free_look(sp);
	if (spool_senders_new(sp) == -1)
		goto nomem;
	/* A persistent timer made active by hand loses its period. */
	if ((sp->base = event_base_new()) == NULL ||
	    (sp->wake = zp_wake_new(sp->base)) == NULL ||
	    (sp->inbox = event_new(sp->base, -1, 0, spool_io_inbox_cb, sp)) ==
	    NULL ||
	    (sp->room = event_new(sp->base, -1, EV_PERSIST, spool_free_cb,
	    sp)) == NULL || event_add(sp->room, &room) == -1 ||
	    (sp->tick = event_new(sp->base, -1, EV_PERSIST,
	    spool_sender_tick_cb, sp)) == NULL ||
	    event_add(sp->tick, &tv) == -1 ||
	    (sp->kick = event_new(sp->base, -1, 0, spool_sender_tick_cb,
	    sp)) == NULL)
		goto nomem;
	/* What a previous run left goes at once. */
	event_active(sp->kick, EV_TIMEOUT, 0);
	return spool_io_start(sp, err, errlen);
nomem:
	snprintf(err, errlen, "--spool: out of memory");
	return -1;
}

void
zp_spool_free(struct zp_spool *sp)
{
	if (sp == NULL)
		return;
	spool_io_stop(sp);
	spool_senders_free(sp);
	if (sp->tick != NULL)
		event_free(sp->tick);
	if (sp->kick != NULL)
		event_free(sp->kick);
	if (sp->room != NULL)
		event_free(sp->room);
	if (sp->inbox != NULL)
		event_free(sp->inbox);
	zp_connecting_cancel(&sp->probe);
	zp_wake_free(sp->wake);
	if (sp->base != NULL)
		event_base_free(sp->base);
	spool_names_clear(sp);
	free(sp->names);
	if (sp->dirfd != -1)
		close(sp->dirfd);
	pthread_mutex_destroy(&sp->mu);
	free(sp);
}

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
int
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
void
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
	if (!spool_upstream_up(w->ctx)) {
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
int
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
void
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
zp_spool_writer_new(struct zp_ctx *ctx, int fd, uint64_t conn,
    const struct zp_addr *client, const struct zp_addr *dst,
    zp_spool_done_fn done, void *arg)
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
	w->fd = -1;
	w->pipe.rfd = w->pipe.wfd = -1;
	w->conn = conn;
	w->done = done;
	w->arg = arg;
	w->hdr.client = *client;
	w->hdr.dst = *dst;
	w->hdr.framing = ctx->cfg->framing;
	zp_clock_now(&w->synced);
	/* Wall time: the files' names and headers say when, for people. */
	gettimeofday(&now, NULL);
	w->hdr.started_ms = (uint64_t)now.tv_sec * 1000 +
	    (uint64_t)now.tv_usec / 1000;
	spool_add(&sp->streams, 1);
	if (zp_framer_init(&w->f, (enum zp_framing)ctx->cfg->framing,
	    ctx->cfg->max_frame) == -1) {
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
	/* No pipe to be had: read and write, as copy mode does. */
	if (ctx->pool != NULL && zp_pipepool_get(ctx->pool, &w->pipe) == -1)
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

/* How often a closing upstream is looked at. */
#define SENDER_POLL_MS		20

enum sender_phase {
	SENDER_IDLE = 0,
	SENDER_CONNECTING,
	SENDER_SENDING,
	SENDER_CLOSING,		/* FIN sent: wait for the ack and theirs */
};

/* One file on its way to an upstream (the main thread's). */
struct zp_sender {
	struct zp_spool		*sp;
	enum sender_phase	 phase;
	char			 name[ZP_SPOOL_NAME_MAX];
	int			 file;
	struct zp_connecting	 conn;		/* while SENDER_CONNECTING */
	int			 sock;
	struct event		*ev;
	struct event		*timer;
	off_t			 off;
	off_t			 size;
	off_t			 hdrlen;
	off_t			 start;		/* this connection's first byte */
	/* Checkpoints: how far the upstream has it, to a boundary. */
	int			 ck_ok;		/* sent= can be written */
	int			 delim;		/* lf, nul; -1: the framer */
	off_t			 ck;		/* sent= says up to here */
	struct timeval		 ck_at;
	struct zp_framer	 fr;		/* octet, auto: fed up to fr_off */
	off_t			 fr_off;
	off_t			 fr_last;	/* its last boundary */
	int			 up_idx;
	struct zp_addr		 to;
	struct timeval		 since;		/* the phase began */
	int			 eof;		/* the upstream closed */
};

static void	sender_checkpoint(struct zp_sender *);
static void	sender_ck_cb(evutil_socket_t, short, void *);
static void	spool_probe(struct zp_spool *);

static int
sender_key_busy(const struct zp_spool *sp, const char *name)
{
	size_t	kl = spool_name_key_len(name);
	int	i;

	for (i = 0; i < sp->nsenders; i++)
		if (sp->senders[i].phase != SENDER_IDLE &&
		    spool_name_key_len(sp->senders[i].name) == kl &&
		    strncmp(sp->senders[i].name, name, kl) == 0)
			return 1;
	return 0;
}

static void
sender_reset(struct zp_sender *s)
{
	zp_connecting_cancel(&s->conn);
	if (s->ev != NULL)
		event_free(s->ev);
	if (s->timer != NULL)
		event_free(s->timer);
	s->ev = s->timer = NULL;
	if (s->sock != -1)
		close(s->sock);
	if (s->file != -1)
		close(s->file);
	s->sock = s->file = -1;
	s->phase = SENDER_IDLE;
	s->eof = 0;
}

static const char *
sender_to(struct zp_sender *s, char *buf, size_t len)
{
	return zp_addr_str(&s->to, buf, len);
}

/* Write sent= (file offset off, a boundary) and sync it. */
static int
sender_write_sent(struct zp_sender *s, off_t off)
{
	char	digits[ZP_SPOOL_SENT_DIGITS + 1];

	snprintf(digits, sizeof(digits), "%0*llu", ZP_SPOOL_SENT_DIGITS,
	    (unsigned long long)(off - s->hdrlen));
	if (pwrite(s->file, digits, ZP_SPOOL_SENT_DIGITS, s->hdrlen - 1 -
	    ZP_SPOOL_SENT_DIGITS) != ZP_SPOOL_SENT_DIGITS ||
	    fdatasync(s->file) == -1) {
		s->ck_ok = 0;
		return -1;
	}
	return 0;
}

/*
 * The file stays for the next try (another upstream, maybe), from where
 * this connection began: what this upstream's kernel acknowledged may
 * have died with it unread. (The checkpoints are for a zproxy that
 * dies, leaving its upstream to read what it has.)
 */
static void
sender_fail(struct zp_sender *s, int err, const char *what)
{
	struct zp_spool	*sp = s->sp;
	char		 to[ZP_ADDRSTRLEN];

	if (s->ck_ok && s->ck > s->start)
		(void)sender_write_sent(s, s->start);
	zp_clock_now(&sp->failed_at);
	if (s->phase == SENDER_CONNECTING)
		zp_upstream_report(sp->ctx->ups, (size_t)s->up_idx, 0, err,
		    &sp->failed_at);
	zp_log(sp->ctx->log, ZP_LOG_WARN, "spool: %s not delivered to %s "
	    "(%s: %s); kept for the next try", s->name,
	    sender_to(s, to, sizeof(to)), what, strerror(err));
	sender_reset(s);
}

static void
sender_delivered(struct zp_sender *s)
{
	struct zp_spool	*sp = s->sp;
	char		 to[ZP_ADDRSTRLEN];

	if (unlinkat(sp->dirfd, s->name, 0) == -1) {
		sender_fail(s, errno, "unlink");
		return;
	}
	spool_add(&sp->files, -1);
	spool_add(&sp->bytes, -(int64_t)s->size);
	spool_add(&sp->replayed, (int64_t)(s->size - s->start));
	spool_add(&sp->delivered, 1);
	zp_log(sp->ctx->log, ZP_LOG_NOTICE, "spool: %s delivered to %s "
	    "(%lld bytes)", s->name, sender_to(s, to, sizeof(to)),
	    (long long)(s->size - s->start));
	sender_reset(s);
	/* The stream's next file, or the next stream, without waiting. */
	event_active(sp->kick, EV_TIMEOUT, 0);
}

/*
 * Our FIN went: read (and drop) what the upstream says until it closes;
 * the file is delivered once it closed and acknowledged everything
 * (SIOCOUTQ 0, our FIN too). Its kernel's acknowledgement alone is not
 * enough (the collector may die before it reads): one that has not
 * closed within --linger-timeout failed, and the file is sent again.
 */
static void
sender_closing_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	struct timeval		 now, dt, lim;
	int			 outq, rc = 0;

	/* Bounded: an upstream that talks on must not hold the loop. */
	if (!s->eof && (rc = zp_sock_drain(s->sock, ZP_DRAIN_PASSES,
	    NULL)) == -1) {
		sender_fail(s, errno, "closing");
		return;
	}
	if (rc == 1) {
		s->eof = 1;
		event_del(s->ev);
	}
	if ((outq = zp_sock_outq(s->sock)) == 0 && s->eof) {
		sender_delivered(s);
		return;
	}
	/* All of it is in the socket; the upstream may still be slow. */
	sender_checkpoint(s);
	zp_clock_now(&now);
	timersub(&now, &s->since, &dt);
	lim = zp_seconds_tv(s->sp->ctx->cfg->linger_timeout);
	if (!timercmp(&dt, &lim, <))
		sender_fail(s, ETIMEDOUT, outq == 0 ? "the upstream's close" :
		    "acknowledgement");
}

static void
sender_send_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	struct zp_ctx		*ctx = s->sp->ctx;
	struct timeval		 tv = { 0, SENDER_POLL_MS * 1000 };
	size_t			 left = ctx->budget;
	ssize_t			 n;

	/* One budget a wake-up: live pairs come between. */
	while (s->off < s->size && left > 0) {
		n = sendfile(s->sock, s->file, &s->off,
		    (size_t)(s->size - s->off) < left ?
		    (size_t)(s->size - s->off) : left);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n <= 0) {
			sender_fail(s, n == 0 ? EIO : errno, "sendfile");
			return;
		}
		left -= (size_t)n;
	}
	sender_checkpoint(s);
	if (s->off < s->size)
		return;
	if (shutdown(s->sock, SHUT_WR) == -1) {
		sender_fail(s, errno, "shutdown");
		return;
	}
	event_free(s->ev);
	if (s->timer != NULL)
		event_free(s->timer);
	s->timer = NULL;
	s->phase = SENDER_CLOSING;
	zp_clock_now(&s->since);
	if ((s->ev = event_new(s->sp->base, s->sock, EV_READ | EV_PERSIST,
	    sender_closing_cb, s)) == NULL ||
	    (s->timer = event_new(s->sp->base, -1, EV_PERSIST,
	    sender_closing_cb, s)) == NULL || event_add(s->ev, NULL) == -1 ||
	    event_add(s->timer, &tv) == -1)
		sender_fail(s, ENOMEM, "events");
}

/*
 * File fd's offset just past the last delim in [lo, hi), or -1 when
 * there is none (or it could not be read).
 */
static off_t
delim_back(int fd, off_t lo, off_t hi, int delim)
{
	char		 b[64 * 1024];
	const char	*d;
	size_t		 m;

	for (; hi > lo; hi -= (off_t)m) {
		m = hi - lo < (off_t)sizeof(b) ? (size_t)(hi - lo) : sizeof(b);
		if (pread(fd, b, m, hi - (off_t)m) != (ssize_t)m)
			return -1;
		if ((d = memrchr(b, delim, m)) != NULL)
			return hi - (off_t)m + (d - b) + 1;
	}
	return -1;
}

/*
 * Feed framer fr file fd's bytes from *off up to to, moving *off on;
 * *last becomes the offset of the last boundary reached, when one is.
 * Stops at a framing error (zp_framer_error() tells).
 */
static void
frames_walk(int fd, struct zp_framer *fr, off_t *off, off_t to, off_t *last)
{
	char	b[64 * 1024];
	size_t	m, r;
	ssize_t	n;

	while (*off < to && zp_framer_error(fr, NULL) == NULL) {
		m = to - *off < (off_t)sizeof(b) ? (size_t)(to - *off) :
		    sizeof(b);
		if ((n = pread(fd, b, m, *off)) <= 0)
			break;
		if ((r = zp_framer_feed(fr, b, (size_t)n)) > 0)
			*last = *off + (off_t)r;
		*off += n;
	}
}

/* The boundary at or before sent= to resume at; see spool.h. */
uint64_t
zp_spool_resume(int fd, off_t data, uint64_t sent, int framing,
    uint64_t max_frame)
{
	struct zp_framer	fr;
	off_t			off = data, last = data, b;

	if (framing == ZP_FRAMING_LF || framing == ZP_FRAMING_NUL) {
		b = delim_back(fd, data, data + (off_t)sent,
		    framing == ZP_FRAMING_LF ? '\n' : '\0');
		return b == -1 ? 0 : (uint64_t)(b - data);
	}
	/* A length prefix is only known from the frame before it. */
	if (zp_framer_init(&fr, framing, max_frame) == -1)
		return 0;
	frames_walk(fd, &fr, &off, data + (off_t)sent, &last);
	return (uint64_t)(last - data);
}

/*
 * The last frame boundary at or before file offset `acked`, past the
 * last checkpoint; or the last checkpoint when none is known. Delimited
 * streams look back for a delimiter; octet (and auto) follow the frames
 * with a framer over what was sent, read again.
 */
static off_t
sender_boundary(struct zp_sender *s, off_t acked)
{
	off_t	b;

	if (s->delim != -1) {
		b = delim_back(s->file, s->ck, acked, s->delim);
		return b == -1 ? s->ck : b;
	}
	frames_walk(s->file, &s->fr, &s->fr_off, acked, &s->fr_last);
	/* A framing error: no boundary is known any more. */
	if (zp_framer_error(&s->fr, NULL) != NULL)
		s->ck_ok = 0;
	return s->fr_last > s->ck ? s->fr_last : s->ck;
}

/*
 * Write down, in the file's header, how far the upstream acknowledged
 * it, to a frame boundary, at most every --spool-sync: a send that fails
 * or a zproxy that dies resumes there, and what reaches the collector
 * twice is at most what came after.
 */
static void
sender_checkpoint(struct zp_sender *s)
{
	struct timeval	now, dt, every;
	off_t		acked, b;
	int		outq;

	if (!s->ck_ok)
		return;
	zp_clock_now(&now);
	timersub(&now, &s->ck_at, &dt);
	every = zp_seconds_tv(s->sp->ctx->cfg->spool_sync);
	if (timercmp(&dt, &every, <) || (outq = zp_sock_outq(s->sock)) < 0)
		return;
	s->ck_at = now;
	acked = s->off - outq;
	if (acked <= s->ck || (b = sender_boundary(s, acked)) <= s->ck ||
	    sender_write_sent(s, b) == -1)
		return;
	s->ck = b;
}

/* Connected: the PROXY header, then the file. */
static void
sender_connected(struct zp_sender *s)
{
	struct zp_spool		*sp = s->sp;
	struct zp_ctx		*ctx = sp->ctx;
	struct zp_spool_hdr	 h;
	char			 b[ZP_SPOOL_HDR_MAX], ph[ZP_PROXY_MAX];
	ssize_t			 n, w;
	struct timeval		 now, every;

	zp_clock_now(&now);
	zp_upstream_report(ctx->ups, (size_t)s->up_idx, 1, 0, &now);
	s->phase = SENDER_SENDING;
	if (ctx->cfg->send_proxy) {
		n = pread(s->file, b, sizeof(b), 0);
		if (n <= 0 || zp_spool_hdr_parse(b, (size_t)n, &h) <= 0 ||
		    (n = zp_proxy_header(ctx->cfg->send_proxy,
		    (struct sockaddr *)&h.client.ss,
		    (struct sockaddr *)&h.dst.ss, ph, sizeof(ph))) == -1) {
			sender_fail(s, EINVAL, "PROXY header");
			return;
		}
		w = send(s->sock, ph, (size_t)n, MSG_NOSIGNAL);
		if (w != n) {
			sender_fail(s, w == -1 ? errno : EAGAIN,
			    "PROXY header");
			return;
		}
	}
	/* A checkpoint also while the upstream reads too slowly to wake us. */
	every = zp_seconds_tv(ctx->cfg->spool_sync);
	if ((s->ev = event_new(s->sp->base, s->sock, EV_WRITE | EV_PERSIST,
	    sender_send_cb, s)) == NULL || event_add(s->ev, NULL) == -1 ||
	    (s->timer = event_new(s->sp->base, -1, EV_PERSIST, sender_ck_cb,
	    s)) == NULL || event_add(s->timer, &every) == -1)
		sender_fail(s, ENOMEM, "events");
}

static void
sender_ck_cb(evutil_socket_t fd, short what, void *arg)
{
	sender_checkpoint(arg);
}

static void
sender_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	int			 err = zp_connecting_result(&s->conn, what);

	if (err != 0)
		sender_fail(s, err, "connect");	/* its reset cancels conn */
	else {
		s->sock = zp_connecting_take(&s->conn);
		sender_connected(s);
	}
}

/*
 * Send file name (whole: its header checked) to the balancer's choice.
 * Returns 0 when it began, 1 when the file was skipped (gone, or set
 * aside: no header), -1 when no upstream could be tried (logged).
 */
static int
sender_start(struct zp_sender *s, const char *name)
{
	struct zp_spool		*sp = s->sp;
	struct zp_ctx		*ctx = sp->ctx;
	struct zp_spool_hdr	 h;
	struct stat		 st, cur;
	struct timeval		 now, tv;
	unsigned char		 tried[ZP_MAX_UPSTREAMS];
	char			 b[ZP_SPOOL_HDR_MAX];
	ssize_t			 n;
	size_t			 na;
	uint64_t		 at;
	int			 rc, hl;

	snprintf(s->name, sizeof(s->name), "%s", name);
	/*
	 * Another sender has it (a takeover's other zproxy), or it went
	 * between the listing and the lock: not ours now.
	 */
	if ((s->file = openat(sp->dirfd, name, O_RDWR | O_CLOEXEC |
	    O_NOFOLLOW)) == -1 || spool_file_lock(s->file) == -1 ||
	    fstat(s->file, &st) == -1 || fstatat(sp->dirfd, name, &cur,
	    AT_SYMLINK_NOFOLLOW) == -1 || cur.st_ino != st.st_ino ||
	    cur.st_dev != st.st_dev) {
		sender_reset(s);
		return 1;
	}
	s->size = st.st_size;
	n = pread(s->file, b, sizeof(b), 0);
	if (n < 0 || (hl = zp_spool_hdr_parse(b, (size_t)n, &h)) <= 0) {
		/* Not ours to send: set aside, no longer counted. */
		zp_log(ctx->log, ZP_LOG_WARN, "spool: %s has no valid "
		    "header; renamed .bad, not sent", name);
		if (spool_rename(sp, name, "bad") == 0) {
			spool_add(&sp->files, -1);
			spool_add(&sp->bytes, -(int64_t)s->size);
		}
		sender_reset(s);
		return 1;
	}
	s->hdrlen = s->off = hl;
	/*
	 * Acknowledged before: a failed send, or a run that died. sent= is
	 * only read, not trusted: a corrupted or edited one inside a
	 * message would send the collector a torn one, so the resume is at
	 * the boundary at or before it (a message twice rather than torn).
	 */
	if (h.sent > 0 && h.sent <= (uint64_t)(s->size - hl)) {
		at = zp_spool_resume(s->file, hl, h.sent, h.framing,
		    ctx->cfg->max_frame);
		s->off += (off_t)at;
		if (at != h.sent)
			zp_log(ctx->log, ZP_LOG_WARN, "spool: %s: sent=%llu "
			    "is not a message boundary; resumes after %llu "
			    "bytes, the boundary before it", name,
			    (unsigned long long)h.sent,
			    (unsigned long long)at);
		else
			zp_log(ctx->log, ZP_LOG_NOTICE, "spool: %s resumes "
			    "after the %llu bytes an upstream had already",
			    name, (unsigned long long)h.sent);
	}
	s->start = s->ck = s->fr_off = s->fr_last = s->off;
	zp_clock_now(&s->ck_at);
	s->delim = h.framing == ZP_FRAMING_LF ? '\n' :
	    h.framing == ZP_FRAMING_NUL ? '\0' : -1;
	s->ck_ok = h.sent_fixed && zp_framer_init(&s->fr, h.framing,
	    ctx->cfg->max_frame) == 0;
	memset(tried, 0, sizeof(tried));
	zp_clock_now(&now);
	s->since = now;
	if ((s->up_idx = zp_upstream_pick(ctx->ups, &h.client, tried,
	    &now)) < 0 || (na = zp_upstream_addr(ctx->ups,
	    (size_t)s->up_idx, 0, &s->to)) == 0) {
		sender_reset(s);
		return -1;
	}
	(void)zp_upstream_addr(ctx->ups, (size_t)s->up_idx,
	    sp->attempt++ % na, &s->to);
	s->phase = SENDER_CONNECTING;
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	if ((rc = zp_connecting_start(&s->conn, sp->base, &s->to, NULL, 0,
	    &tv, sender_connect_cb, s)) == -1) {
		sender_fail(s, errno, "connect");
		return -1;
	}
	if (rc == 0) {
		s->sock = zp_connecting_take(&s->conn);
		sender_connected(s);
	}
	return 0;
}

/* Is any upstream up, so that files may go; else one try now and then. */
static int
sender_may(struct zp_spool *sp, int *probe)
{
	struct zp_ctx		*ctx = sp->ctx;
	struct timeval		 now, dt, wait;

	*probe = 0;
	if (spool_upstream_up(ctx))
		return 1;
	zp_clock_now(&now);
	timersub(&now, &sp->failed_at, &dt);
	wait = zp_seconds_tv(ctx->cfg->fail_timeout);
	if (timercmp(&dt, &wait, <))
		return 0;
	*probe = 1;
	return 1;
}

static void
probe_done(struct zp_spool *sp, int err)
{
	struct timeval	now;

	zp_clock_now(&now);
	zp_upstream_report(sp->ctx->ups, (size_t)sp->probe_idx, err == 0, err,
	    &now);
	if (err != 0)
		sp->failed_at = now;
	zp_connecting_cancel(&sp->probe);
}

static void
probe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool	*sp = arg;

	probe_done(sp, zp_connecting_result(&sp->probe, what));
}

/* A connect to the balancer's choice, only to report how it went. */
static void
spool_probe(struct zp_spool *sp)
{
	struct zp_ctx	*ctx = sp->ctx;
	struct zp_addr	 any, a;
	struct timeval	 now, tv;
	unsigned char	 tried[ZP_MAX_UPSTREAMS];
	int		 rc;

	if (sp->probe.fd != -1)
		return;
	memset(&any, 0, sizeof(any));
	memset(tried, 0, sizeof(tried));
	zp_clock_now(&now);
	if ((sp->probe_idx = zp_upstream_pick(ctx->ups, &any, tried,
	    &now)) < 0 || zp_upstream_addr(ctx->ups, (size_t)sp->probe_idx,
	    0, &a) == 0)
		return;
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	if ((rc = zp_connecting_start(&sp->probe, sp->base, &a, NULL, 0, &tv,
	    probe_cb, sp)) == -1) {
		sp->failed_at = now;
		return;
	}
	if (rc == 0)
		probe_done(sp, 0);
}

/* Every second, and when a file was delivered: start what may start. */
void
spool_sender_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool	*sp = arg;
	size_t		 i, kl, okl = 0;
	const char	*other = NULL;
	int		 k, rc = 0, probe, started = 0;

	for (k = 0; k < sp->nsenders; k++)
		if (sp->senders[k].phase == SENDER_IDLE)
			break;
	/* The gauges are counted again, whatever happens next. */
	if (spool_scan(sp) == -1 || k == sp->nsenders || sp->nnames == 0 ||
	    !sender_may(sp, &probe)) {
		spool_names_clear(sp);
		return;
	}
	for (i = 0; i < sp->nnames && k < sp->nsenders; i++) {
		const char	*name = sp->names[i];

		kl = spool_name_key_len(name);
		/* Only a stream's first file left; none still written. */
		if ((other != NULL && kl == okl &&
		    strncmp(other, name, kl) == 0) ||
		    strcmp(spool_name_suffix(name), "open") == 0 ||
		    sender_key_busy(sp, name)) {
			other = name;
			okl = kl;
			continue;
		}
		other = name;
		okl = kl;
		if ((rc = sender_start(&sp->senders[k], name)) == 0)
			started++;
		/* A failed connect waits for the next tick. */
		if (rc == -1 || (probe && started > 0))
			break;
		while (k < sp->nsenders && sp->senders[k].phase !=
		    SENDER_IDLE)
			k++;
	}
	spool_names_clear(sp);
	/*
	 * Nothing to send yet (files still written) while every upstream
	 * looks down: see whether one is back, so that the writers may cut
	 * their files and go live; else nothing would ever tell.
	 */
	if (probe && started == 0 && rc != -1)
		spool_probe(sp);
}

int
spool_senders_new(struct zp_spool *sp)
{
	int	i;

	sp->nsenders = sp->ctx->cfg->spool_senders;
	if ((sp->senders = calloc((size_t)sp->nsenders,
	    sizeof(*sp->senders))) == NULL)
		return -1;
	for (i = 0; i < sp->nsenders; i++) {
		sp->senders[i].sp = sp;
		sp->senders[i].file = sp->senders[i].sock = -1;
		zp_connecting_init(&sp->senders[i].conn);
	}
	return 0;
}

void
spool_senders_free(struct zp_spool *sp)
{
	int	i;

	for (i = 0; i < sp->nsenders; i++)
		sender_reset(&sp->senders[i]);
	free(sp->senders);
}
