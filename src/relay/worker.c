/*
 * worker.c - --threads: a loop per thread, clients handed to the least
 * loaded one, messages from the root; each worker publishes a snapshot
 * of its counters, which the root sums without waiting for anyone.
 *
 * This file: the threads' lives (made, started, a death, stopped,
 * freed) and the root woken by what they do; the parts are named in
 * worker_int.h.
 */

#include <sys/queue.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>

#include "relay/ctx.h"
#include "relay/ring.h"
#include "lib/log.h"
#include "core/net.h"
#include "lib/pipepool.h"
#include "lib/thread.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "relay/worker_int.h"
#include "tls/tls.h"

/*
 * How often a worker publishes its snapshot unasked: how stale what a
 * passive reader (zp_ctx_totals alone: the status line) sees may be.
 */
#define ZP_SNAPSHOT_MS	1000

/*
 * On the root's thread: a worker's loop ended without being asked to.
 * It gets no more clients or messages (its counters are read here, its
 * thread being gone); what the root does then is the composition root's
 * (on_death: drain the others and exit non-zero).
 */
static void
root_deaths(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;
	int			 i;

	for (i = 1; i < ws->n; i++)
		if (__atomic_exchange_n(&ws->w[i]->died, 0, __ATOMIC_SEQ_CST)) {
			zp_log(root->log, ZP_LOG_ERROR, "thread %d: its event "
			    "loop ended; its %ld connections are stalled and "
			    "it gets no more clients", i,
			    worker_ctx_load(&ws->w[i]->ctx));
			if (ws->on_death != NULL)
				ws->on_death(root, i);
		}
}

/* On the root's thread: look at what the workers' changes allow. */
static void
root_changed(struct zp_ctx *root)
{
	if (root->workers != NULL &&
	    __atomic_exchange_n(&root->workers->shed, 0, __ATOMIC_RELAXED))
		(void)zp_ctx_hooks(root)->root_shed(root);
	if (root->workers != NULL &&
	    __atomic_exchange_n(&root->workers->dead, 0, __ATOMIC_SEQ_CST))
		root_deaths(root);
	zp_ctx_hooks(root)->root_changed(root);
	if (root->stopping && zp_ctx_drained(root))
		event_base_loopbreak(root->base);	/* drained */
}

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	root_changed(arg);
}

void
zp_ctx_changed(struct zp_ctx *ctx)
{
	if (ctx->root != NULL)
		zp_wake_post(ctx->root->wake, ctx->root->workers->wake);
	else
		root_changed(ctx);
}

void
zp_ctx_closed(struct zp_ctx *ctx)
{
	/*
	 * Not a wake-up of the root per connection: only while it waits
	 * for room (--max-conns) or for the drain's end.
	 */
	if (ctx->root == NULL || LOAD(ctx->root->close_wake))
		zp_ctx_changed(ctx);
}

int
zp_ctx_shed(struct zp_ctx *ctx)
{
	if (ctx->root == NULL)
		return zp_ctx_hooks(ctx)->root_shed(ctx);
	/* The configuration, not the root's pointer: that is its own. */
	if (!ctx->cfg->have_stats)
		return 0;
	__atomic_store_n(&ctx->root->workers->shed, 1, __ATOMIC_RELAXED);
	zp_wake_post(ctx->root->wake, ctx->root->workers->wake);
	return -1;
}

/* A client handed to this thread. */
void
wmsg_start(struct zp_worker *w, struct zp_wmsg *m)
{
	if (!w->exiting) {
		/* Counted in load by the root already. */
		(void)zp_ctx_hooks(&w->ctx)->pair_start(&w->ctx, m->fd,
		    (struct sockaddr *)&m->ss, m->len,
		    (unsigned)m->arg | ZP_START_COUNTED);
		return;
	}
	close(m->fd);
	ADD(w->ctx.load, -1);
	zp_ctx_closed(&w->ctx);
}

static void
wmsg_exit(struct zp_worker *w, struct zp_wmsg *m)
{
	w->exiting = 1;
	w->ctx.stopping = 1;
	zp_ctx_hooks(&w->ctx)->pairs_close(&w->ctx);
	event_base_loopbreak(w->ctx.base);
}

/*
 * A worker's loop ended without wmsg_exit (it failed): take no more
 * messages; clients queued for it are closed (they were never started:
 * their connect is the next one's), and the root is told, on its own
 * thread (root_deaths), and looks at its refreshes again (this one will
 * never answer: its counters are read directly now).
 */
static void
worker_died(struct zp_worker *w)
{
	struct zp_workers	*ws = w->ctx.root->workers;
	long			 dropped = 0;
	size_t			 i;

	pthread_mutex_lock(&w->mu);
	w->running = 0;
	for (i = 0; i < w->nq; i++)
		if (w->q[i].fn == wmsg_start) {
			close(w->q[i].fd);
			dropped++;
		} else if (w->q[i].drop != NULL)
			w->q[i].drop(&w->q[i]);
	w->nq = 0;
	pthread_mutex_unlock(&w->mu);
	ADD(w->ctx.load, -dropped);
	__atomic_store_n(&w->died_seen, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&w->died, 1, __ATOMIC_SEQ_CST);
	__atomic_store_n(&ws->dead, 1, __ATOMIC_SEQ_CST);
	zp_wake_post(w->ctx.root->wake, ws->wake);
	zp_wake_post(w->ctx.root->wake, ws->answer);
}

static void *
worker_main(void *arg)
{
	struct zp_worker	*w = arg;
	int			 asked;

	(void)zp_ctx_loop(&w->ctx, EVLOOP_NO_EXIT_ON_EMPTY);
	asked = w->exiting;
	/*
	 * --io-uring: only this thread may submit to its ring
	 * (SINGLE_ISSUER), so its pairs' cancels and the ring's last
	 * completions are done here, before the thread ends, also when the
	 * loop died (the root would close those pairs after the join).
	 */
	if (w->ctx.ring != NULL) {
		if (!asked) {
			w->exiting = 1;
			w->ctx.stopping = 1;
			zp_ctx_hooks(&w->ctx)->pairs_close(&w->ctx);
		}
		zp_ring_free(w->ctx.ring);
		w->ctx.ring = NULL;
	}
	if (!asked)
		worker_died(w);
	return NULL;
}

#ifdef ZP_DEBUG
/* How often a held thread looks whether the test let it go. */
#define ZP_TEST_HOLD_MS	100

/*
 * Debug builds, for the tests only: while the file $ZP_TEST_HOLD names
 * exists, thread 1 stays in this callback, as a worker busy in one long
 * callback (or stopped) would, so that a test can show what the root
 * does meanwhile.
 */
static void
worker_hold_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_worker	*w = arg;
	struct timespec		 ts = { 0, ZP_TEST_HOLD_MS * 1000000L };

	if (access(w->hold_path, F_OK) == -1)
		return;
	zp_log(w->ctx.log, ZP_LOG_NOTICE, "thread %d: held while %s exists "
	    "(ZP_TEST_HOLD)", w->ctx.thread, w->hold_path);
	while (access(w->hold_path, F_OK) == 0)
		(void)nanosleep(&ts, NULL);
	zp_log(w->ctx.log, ZP_LOG_NOTICE, "thread %d: let go (ZP_TEST_HOLD)",
	    w->ctx.thread);
}

/* Thread 1 looks for $ZP_TEST_HOLD every ZP_TEST_HOLD_MS. */
static int
worker_hold_new(struct zp_worker *w)
{
	struct timeval	tv = { 0, ZP_TEST_HOLD_MS * 1000 };

	if (w->ctx.thread != 1 || (w->hold_path = getenv("ZP_TEST_HOLD")) ==
	    NULL || *w->hold_path == '\0')
		return 0;
	if ((w->hold = event_new(w->ctx.base, -1, EV_PERSIST, worker_hold_cb,
	    w)) == NULL || event_add(w->hold, &tv) == -1)
		return -1;
	return 0;
}
#endif

/* Free one worker (its thread joined, or never started). */
static void
worker_free(struct zp_worker *w)
{
	struct zp_ctx	*ctx;

	if (w == NULL)
		return;
	ctx = &w->ctx;
	/*
	 * A thread that never ran (start-up failed after its context was
	 * made) still has what was set up for it: its UDP readers.
	 */
	if (!w->exiting)
		zp_ctx_hooks(ctx)->pairs_close(ctx);
	if (ctx->rebalance_timer != NULL)
		event_free(ctx->rebalance_timer);
	if (w->inbox != NULL)
		event_free(w->inbox);
	if (w->publish != NULL)
		event_free(w->publish);
#ifdef ZP_DEBUG
	if (w->hold != NULL)
		event_free(w->hold);
#endif
	/* Every pair is closed: wait for the last of their completions. */
	zp_ring_free(ctx->ring);
	ctx->ring = NULL;
	zp_pipepool_free(ctx->pool);
	zp_bufcache_clear(&ctx->bufs);
	zp_tls_cache_free(ctx->tls_cache);
	if (ctx->tee_pipe.rfd != -1) {
		close(ctx->tee_pipe.rfd);
		close(ctx->tee_pipe.wfd);
	}
	zp_wake_free(ctx->wake);
	if (ctx->base != NULL)
		event_base_free(ctx->base);
	/* Anything a message still held: a client never started. */
	while (w->nq > 0)
		if (w->q[--w->nq].fn == wmsg_start)
			close(w->q[w->nq].fd);
		else if (w->q[w->nq].drop != NULL)
			w->q[w->nq].drop(&w->q[w->nq]);
	free(w->q);
	pthread_mutex_destroy(&w->mu);
	free(ctx->cfg);		/* the copy only: its pointers are the root's */
	free(w);
}

/*
 * A worker's copy of the root's configuration (worker_int.h): zproxy
 * ctl reload changes the root's on the root's thread and hands each
 * worker a new copy, so that no thread reads a field another writes.
 */
struct zp_config *
worker_cfg(const struct zp_config *cfg)
{
	struct zp_config	*c;

	if ((c = malloc(sizeof(*c))) != NULL)
		memcpy(c, cfg, sizeof(*c));
	return c;
}

/* Thread i's context, from the root's. */
static struct zp_worker *
worker_new(struct zp_ctx *root, int i, char *err, size_t errlen)
{
	struct zp_worker	*w;
	struct zp_ctx		*ctx;
	struct zp_config	*cfg = root->cfg;
	struct timeval		 tv = zp_seconds_tv(ZP_SNAPSHOT_MS / 1000.0);
	int			 fds[2], shortage;

	if ((w = calloc(1, sizeof(*w))) == NULL) {
		snprintf(err, errlen, "thread %d: %s", i, strerror(errno));
		return NULL;
	}
	pthread_mutex_init(&w->mu, NULL);
	ctx = &w->ctx;
	ctx->tee_pipe.rfd = ctx->tee_pipe.wfd = -1;
	ctx->root = root;
	ctx->thread = i;
	if ((ctx->cfg = worker_cfg(cfg)) == NULL) {
		snprintf(err, errlen, "thread %d: %s", i, strerror(errno));
		pthread_mutex_destroy(&w->mu);
		free(w);
		return NULL;
	}
	ctx->log = root->log;
	ctx->ups = root->ups;
	ctx->mirrors = root->mirrors;
	ctx->tls_srv = root->tls_srv;
	ctx->tls_cli = root->tls_cli;
	ctx->tls_upstreams = root->tls_upstreams;
	ctx->spool = root->spool;
	TAILQ_INIT(&ctx->mirror_sets);
	ctx->devnull = root->devnull;
	ctx->pipes_roomy = root->pipes_roomy;
	ctx->daemon_fd = -1;
	TAILQ_INIT(&ctx->pairs);
	TAILQ_INIT(&ctx->handshakes);
	ctx->max_conns = root->max_conns;
	ctx->pipe_cap = root->pipe_cap;
	ctx->nofile = root->nofile;
	ctx->fd_reserve = root->fd_reserve;
	ctx->budget = root->budget;
	ctx->started = root->started;
	ctx->bufs.size = root->bufs.size;
	if ((ctx->base = event_base_new()) == NULL ||
	    (ctx->wake = zp_wake_new(ctx->base)) == NULL ||
	    (w->inbox = event_new(ctx->base, -1, 0, worker_inbox_cb, w)) == NULL ||
	    (w->publish = event_new(ctx->base, -1, EV_PERSIST, worker_publish_cb,
	    w)) == NULL || event_add(w->publish, &tv) == -1) {
		snprintf(err, errlen, "thread %d: cannot create its event "
		    "loop", i);
		goto fail;
	}
	/* --io-uring: its own ring, enabled by its own thread's loop. */
	if (cfg->io_uring && (ctx->ring = zp_ring_new(ctx->base,
	    ZP_RING_ENTRIES, err, errlen)) == NULL)
		goto fail;
#ifdef ZP_DEBUG
	if (worker_hold_new(w) == -1) {
		snprintf(err, errlen, "thread %d: cannot create its events", i);
		goto fail;
	}
#endif
	if (ctx->tls_cli != NULL &&
	    (ctx->tls_cache = zp_tls_cache_new()) == NULL) {
		snprintf(err, errlen, "thread %d: %s", i, strerror(ENOMEM));
		goto fail;
	}
	if (root->pool != NULL &&
	    (ctx->pool = zp_pipepool_new(cfg->pipe_size, root->pool_cap,
	    root->pool_prepare, &shortage, err, errlen)) == NULL &&
	    (ctx->pool = zp_pipepool_new(cfg->pipe_size, root->pool_cap, 0,
	    &shortage, err, errlen)) == NULL)
		goto fail;
	if (root->tee_pipe.rfd != -1) {
		if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
			snprintf(err, errlen, "pipe2: %s", strerror(errno));
			goto fail;
		}
		ctx->tee_pipe.rfd = fds[0];
		ctx->tee_pipe.wfd = fds[1];
	}
	/* Its first snapshot: its pipes, before its thread runs. */
	worker_publish(w);
	return w;
fail:
	worker_free(w);
	return NULL;
}

int
zp_workers_new(struct zp_ctx *root, int n, char *err, size_t errlen)
{
	struct zp_workers	*ws;
	int			 i;

	if ((ws = calloc(1, sizeof(*ws))) == NULL) {
		snprintf(err, errlen, "threads: %s", strerror(errno));
		return -1;
	}
	root->workers = ws;
	TAILQ_INIT(&ws->refreshes);
	if ((ws->wake = event_new(root->base, -1, 0, wake_cb, root)) ==
	    NULL || (ws->answer = event_new(root->base, -1, 0, worker_answer_cb,
	    ws)) == NULL) {
		snprintf(err, errlen, "threads: cannot create events");
		goto fail;
	}
	ws->n = 1;
	for (i = 1; i < n; i++) {
		if ((ws->w[i] = worker_new(root, i, err, errlen)) == NULL)
			goto fail;
		ws->n++;
	}
	return 0;
fail:
	zp_workers_free(root);
	return -1;
}

int
zp_workers_start(struct zp_ctx *root, char *err, size_t errlen)
{
	struct zp_workers	*ws = root->workers;
	sigset_t		 all, old;
	int			 i, rc = 0;

	if (ws == NULL)
		return 0;
	zp_thread_sigset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 1; i < ws->n; i++) {
		pthread_mutex_lock(&ws->w[i]->mu);
		ws->w[i]->running = 1;
		pthread_mutex_unlock(&ws->w[i]->mu);
		if ((rc = pthread_create(&ws->w[i]->tid, NULL, worker_main,
		    ws->w[i])) != 0) {
			pthread_mutex_lock(&ws->w[i]->mu);
			ws->w[i]->running = 0;
			pthread_mutex_unlock(&ws->w[i]->mu);
			snprintf(err, errlen, "thread %d: pthread_create: %s",
			    i, strerror(rc));
			break;
		}
		ws->w[i]->started = 1;
		zp_thread_name(ws->w[i]->tid, "zp-relay-%d", i);
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc == 0 ? 0 : -1;
}

void
zp_workers_stop(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;
	struct zp_wmsg		 m;
	int			 i;

	if (ws == NULL)
		return;
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_exit;
	for (i = 1; i < ws->n; i++) {
		if (!ws->w[i]->started)
			continue;
		if (wmsg_post(ws->w[i], &m) == -1)
			zp_ctx_loop_stop(&ws->w[i]->ctx);
		pthread_join(ws->w[i]->tid, NULL);
		ws->w[i]->started = 0;
		pthread_mutex_lock(&ws->w[i]->mu);
		ws->w[i]->running = 0;
		pthread_mutex_unlock(&ws->w[i]->mu);
		/* A loop that died left its pairs: they end here, joined. */
		if (!ws->w[i]->exiting) {
			ws->w[i]->exiting = 1;
			ws->w[i]->ctx.stopping = 1;
			zp_ctx_hooks(root)->pairs_close(&ws->w[i]->ctx);
		}
	}
	/* Every counter is read directly now: nobody is left to wait for. */
	worker_refresh_finish(ws, 1);
}

int
zp_ctx_drained(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;
	long			 hs = LOAD(root->nhandshakes);
	int			 i;

	/* tls@ handshakes under way are out of the load, not of the drain. */
	for (i = 1; ws != NULL && i < ws->n; i++)
		hs += LOAD(ws->w[i]->ctx.nhandshakes);
	return zp_ctx_open_all(root) == 0 && hs == 0 &&
	    LOAD(root->drain_holds) == 0;
}

struct zp_ctx *
zp_ctx_thread(struct zp_ctx *root, int t)
{
	if (t == 0)
		return root;
	if (root->workers == NULL || t < 0 || t >= root->workers->n)
		return NULL;
	return &root->workers->w[t]->ctx;
}

void
zp_workers_on_death(struct zp_ctx *root, void (*cb)(struct zp_ctx *, int))
{
	if (root->workers != NULL)
		root->workers->on_death = cb;
}

void
zp_workers_free(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;
	int			 i;

	if (ws == NULL)
		return;
	zp_workers_stop(root);
	for (i = 1; i < ZP_MAX_THREADS; i++)
		if (ws->w[i] != NULL)
			worker_free(ws->w[i]);
	/* The threads are gone: nothing posts these any more. */
	if (root->wake != NULL) {
		zp_wake_forget(root->wake, ws->wake);
		zp_wake_forget(root->wake, ws->answer);
	}
	if (ws->wake != NULL)
		event_free(ws->wake);
	if (ws->answer != NULL)
		event_free(ws->answer);
	free(ws);
	root->workers = NULL;
}
