/*
 * spool_io.c - the spool's I/O thread: every disk call of the spool after
 * start-up runs here, asked for by messages (struct io_req) and answered
 * into the asking writer's box (struct io_box), in its own loop; the
 * senders (spool_sender.c) run in this loop too.
 */
#include <sys/types.h>
#include <sys/stat.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "relay/ctx.h"
#include "lib/log.h"
#include "spool/spool.h"
#include "spool/spool_int.h"
#include "lib/thread.h"
#include "lib/wake.h"

/*
 * A relay thread waits only in its event loop: a disk call there (a
 * slow disk, a full journal, NFS) would stall every connection of its
 * thread. So the writers hand their files' creation, syncs, renames and
 * unlinks, and their look at what was delivered, to this thread as
 * requests, and get the answers back in their loop (struct io_box); the
 * sender and the scan of DIR run here altogether. A writer still
 * splices (or writes) into the file it has open: into the page cache,
 * which does not wait for the disk.
 */

/* Write n bytes at fd's position; what went is counted. Returns 0 or -1. */
int
spool_io_write(struct zp_spool *sp, int fd, const char *b, size_t n, int client)
{
	ssize_t	wr;

	while (n > 0) {
		if ((wr = write(fd, b, n)) == -1 && errno == EINTR)
			continue;
		if (wr <= 0) {
			if (wr == 0)
				errno = ENOSPC;
			return -1;
		}
		spool_add(&sp->bytes, wr);
		if (client)
			spool_add(&sp->spooled, wr);
		b += wr;
		n -= (size_t)wr;
	}
	return 0;
}

/*
 * A file is done: gone when it holds no client byte (fsize <= fhdr),
 * else synced and renamed "spool" (whole frames) or "partial"; closed in
 * any case. Returns 0 or an errno.
 */
static int
io_close(struct zp_spool *sp, int fd, const char *name, int whole,
    uint64_t fsize, uint64_t fhdr)
{
	int	err = 0;

	if (fsize <= fhdr) {
		unlinkat(sp->dirfd, name, 0);
		spool_add(&sp->files, -1);
		spool_add(&sp->bytes, -(int64_t)fsize);
	} else if (fdatasync(fd) == -1 || spool_rename(sp, name, whole ?
	    "spool" : "partial") == -1)
		err = errno;
	close(fd);
	return err;
}

/* Create a writer's next file, lock it and write its header. */
static void
io_open(struct zp_spool *sp, struct io_req *r)
{
	ssize_t	wr = 0;
	int	n = r->hdrlen;

	r->hdrlen = 0;
	if ((r->fd = openat(sp->dirfd, r->name, O_RDWR | O_CREAT | O_EXCL |
	    O_CLOEXEC, 0600)) == -1) {
		r->err = errno;
		return;
	}
	spool_add(&sp->files, 1);
	if (spool_file_lock(r->fd) == -1)
		r->err = errno;
	else if ((wr = write(r->fd, r->hdr, (size_t)n)) != n)
		r->err = wr >= 0 ? ENOSPC : errno;
	if (wr > 0)
		spool_add(&sp->bytes, wr);
	if (r->err == 0) {
		r->hdrlen = n;
		return;
	}
	/* No client byte in it: it goes, uncounted. */
	(void)io_close(sp, r->fd, r->name, 0, wr > 0 ? (uint64_t)wr : 0,
	    wr > 0 ? (uint64_t)wr : 0);
	r->fd = -1;
}

/* How many of a stream's files from seq r->from to r->to are gone. */
static void
io_gone(struct zp_spool *sp, struct io_req *r)
{
	static const char *const suffixes[] = { "spool", "partial" };
	char		name[ZP_SPOOL_NAME_MAX];
	struct stat	st;
	unsigned	seq;
	size_t		i;

	for (seq = r->from; seq <= r->to; seq++, r->gone++)
		for (i = 0; i < 2; i++)
			if (zp_spool_name(name, sizeof(name),
			    r->key.started_ms, &r->key.client, r->conn, seq,
			    suffixes[i]) == 0 &&
			    fstatat(sp->dirfd, name, &st, 0) == 0)
				return;
}

/*
 * An OPEN whose writer was freed before the answer came: the file gets
 * what the writer still held for it, and is done with.
 */
static void
io_orphan(struct zp_spool *sp, struct io_req *r, char *held, size_t n,
    int whole)
{
	uint64_t	fsize = (uint64_t)r->hdrlen;

	if (r->fd == -1)
		return;
	if (n > 0 && spool_io_write(sp, r->fd, held, n, 1) == 0)
		fsize += n;
	if ((r->err = io_close(sp, r->fd, r->name, whole, fsize,
	    (uint64_t)r->hdrlen)) != 0)
		zp_log(sp->ctx->log, ZP_LOG_WARN, "spool: %s: %s", r->name,
		    strerror(r->err));
	r->fd = -1;
}

/*
 * Answer r: into its writer's box, waking the writer's loop; or, the
 * writer gone (or none waiting), dispose of it here.
 */
static void
io_answer(struct zp_spool *sp, struct io_req *r)
{
	struct io_box	*box = r->box;
	char		*held = NULL;
	size_t		 n = 0;
	int		 whole = 0;

	if (box == NULL) {
		free(r);
		return;
	}
	pthread_mutex_lock(&box->mu);
	if (box->ev != NULL) {
		STAILQ_INSERT_TAIL(&box->done, r, entry);
		zp_wake_post(box->wake, box->ev);
		pthread_mutex_unlock(&box->mu);
		return;
	}
	if (r->kind == IO_OPEN) {
		held = box->orphan;
		n = box->norphan;
		whole = box->orphan_whole;
		box->orphan = NULL;
		box->norphan = 0;
	}
	pthread_mutex_unlock(&box->mu);
	if (r->kind == IO_OPEN)
		io_orphan(sp, r, held, n, whole);
	free(held);
	spool_io_box_put(box, 1);
	free(r);
}

/* Do what r asks (the I/O thread, or its caller once it ended). */
static void
io_run(struct zp_spool *sp, struct io_req *r)
{
	switch (r->kind) {
	case IO_OPEN:
		io_open(sp, r);
		break;
	case IO_SYNC:
		if (fdatasync(r->fd) == -1)
			r->err = errno;
		break;
	case IO_CLOSE:
		r->err = io_close(sp, r->fd, r->name, r->whole, r->fsize,
		    r->fhdr);
		break;
	case IO_GONE:
		io_gone(sp, r);
		break;
	case IO_STOP:
		if (sp->base != NULL)
			event_base_loopbreak(sp->base);
		break;
	}
	io_answer(sp, r);
}

/*
 * Queue r for the I/O thread and wake it (held: only to queue). Once it
 * ended (the end of zproxy: nothing relays any more) or before it runs,
 * r is done here.
 */
void
spool_io_post(struct zp_spool *sp, struct io_req *r)
{
	if (r->box != NULL) {
		pthread_mutex_lock(&r->box->mu);
		r->box->refs++;
		pthread_mutex_unlock(&r->box->mu);
	}
	pthread_mutex_lock(&sp->mu);
	if (sp->running) {
		STAILQ_INSERT_TAIL(&sp->q, r, entry);
		pthread_mutex_unlock(&sp->mu);
		zp_wake_post(sp->wake, sp->inbox);
		return;
	}
	pthread_mutex_unlock(&sp->mu);
	io_run(sp, r);
}

/* The first request of q (the I/O thread's queue, a box), or NULL. */
struct io_req *
spool_io_pop(pthread_mutex_t *mu, struct io_reqs *q)
{
	struct io_req	*r;

	pthread_mutex_lock(mu);
	if ((r = STAILQ_FIRST(q)) != NULL)
		STAILQ_REMOVE_HEAD(q, entry);
	pthread_mutex_unlock(mu);
	return r;
}

/* The I/O thread's loop: run what was queued, in order, one at a time. */
void
spool_io_inbox_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool	*sp = arg;
	struct io_req	*r;
	int		 stop;

	while ((r = spool_io_pop(&sp->mu, &sp->q)) != NULL) {
		stop = r->kind == IO_STOP;
		io_run(sp, r);
		if (stop)
			return;
	}
}

/* The I/O thread: its loop, until IO_STOP; then what came after. */
static void *
io_main(void *arg)
{
	struct zp_spool	*sp = arg;
	struct io_req	*r;

	(void)event_base_loop(sp->base, EVLOOP_NO_EXIT_ON_EMPTY);
	/* Asked after IO_STOP (nothing should be): done, then inline. */
	pthread_mutex_lock(&sp->mu);
	sp->running = 0;
	pthread_mutex_unlock(&sp->mu);
	while ((r = spool_io_pop(&sp->mu, &sp->q)) != NULL)
		io_run(sp, r);
	return NULL;
}

/* A new box for a writer of ctx's loop; NULL without memory. */
struct io_box *
spool_io_box_new(struct zp_ctx *ctx, event_callback_fn cb, void *arg)
{
	struct io_box	*box;

	if ((box = calloc(1, sizeof(*box))) == NULL)
		return NULL;
	box->wake = ctx->wake;
	if ((box->ev = event_new(ctx->base, -1, 0, cb, arg)) == NULL) {
		free(box);
		return NULL;
	}
	pthread_mutex_init(&box->mu, NULL);
	STAILQ_INIT(&box->done);
	box->refs = 1;
	return box;
}

/* Drop n references to box; the last one frees it. */
void
spool_io_box_put(struct io_box *box, int n)
{
	int	last;

	pthread_mutex_lock(&box->mu);
	last = (box->refs -= n) == 0;
	pthread_mutex_unlock(&box->mu);
	if (!last)
		return;
	assert(STAILQ_EMPTY(&box->done) && box->ev == NULL);
	free(box->orphan);
	pthread_mutex_destroy(&box->mu);
	free(box);
}

int
spool_io_start(struct zp_spool *sp, char *err, size_t errlen)
{
	sigset_t	all, old;
	int		e;

	zp_thread_sigset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&sp->mu);
	if ((e = pthread_create(&sp->tid, NULL, io_main, sp)) == 0) {
		sp->running = 1;
		zp_thread_name(sp->tid, "zp-spool-io");
	}
	pthread_mutex_unlock(&sp->mu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		snprintf(err, errlen, "--spool: its I/O thread: %s",
		    strerror(e));
		return -1;
	}
	return 0;
}

void
spool_io_stop(struct zp_spool *sp)
{
	struct io_req	*r;
	int		 running;

	/* Whatever the writers asked is done first: then the thread ends. */
	pthread_mutex_lock(&sp->mu);
	running = sp->running;
	pthread_mutex_unlock(&sp->mu);
	if (!running)
		return;
	if ((r = calloc(1, sizeof(*r))) != NULL) {
		r->kind = IO_STOP;
		r->fd = -1;
		spool_io_post(sp, r);
	} else
		event_base_loopbreak(sp->base);
	pthread_join(sp->tid, NULL);
}
