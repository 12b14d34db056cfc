/*
 * worker_snap.c - each worker publishes a snapshot of its counters (every
 * ZP_SNAPSHOT_MS, and when the root asks: a refresh), which the root sums
 * without waiting for anyone; a refresh the workers answer, or its
 * deadline, calls its owner back on the root's loop.
 */

#include <sys/queue.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "relay/ctx.h"
#include "core/upstream.h"
#include "lib/pipepool.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "relay/worker_int.h"

/* Take ctx's counters into sn (on ctx's thread, or with it gone). */
static void
snap_take(struct zp_ctx *ctx, struct zp_snap *sn)
{
	memset(sn, 0, sizeof(*sn));
	sn->stats = ctx->stats;
	if (ctx->pool != NULL)
		zp_pipepool_stats(ctx->pool, &sn->pool);
	zp_ctx_hooks(ctx)->pairs_modes(ctx, &sn->modes);
	if (ctx->cfg->rebalance || zp_upstreams_draining(ctx->ups) > 0)
		zp_ctx_hooks(ctx)->pairs_moving(ctx, sn->moving, sn->movable);
	if (ctx->cfg->rebalance == ZP_REBALANCE_LOAD)
		zp_ctx_hooks(ctx)->pairs_load(ctx, sn->load);
}

/*
 * Publish this worker's counters for the root: taken on its thread, then
 * copied in under mu, which is held for the copy only.
 */
void
worker_publish(struct zp_worker *w)
{
	struct zp_snap	sn;

	snap_take(&w->ctx, &sn);
	sn.answered = w->answered;
	pthread_mutex_lock(&w->mu);
	w->snap = sn;
	pthread_mutex_unlock(&w->mu);
}

/* Every ZP_SNAPSHOT_MS: what passive readers see is never older. */
void
worker_publish_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_publish(arg);
}

/* A refresh (zp_ctx_refresh): publish now and wake the root. */
static void
wmsg_publish(struct zp_worker *w, struct zp_wmsg *m)
{
	w->answered = m->seq;
	worker_publish(w);
	zp_wake_post(w->ctx.root->wake, w->ctx.root->workers->answer);
}

/*
 * Thread i's counters into sn: the root's own, a live worker's last
 * snapshot, or, for a worker whose loop ended (or never began), its
 * context itself, which nothing changes any more. Returns 1 for a
 * snapshot (and a thread that can still take a move), else 0.
 */
int
worker_ctx_snap(struct zp_ctx *root, int i, struct zp_snap *sn)
{
	struct zp_worker	*w;

	if (i == 0) {
		snap_take(root, sn);
		return 1;
	}
	w = root->workers->w[i];
	pthread_mutex_lock(&w->mu);
	if (w->running) {
		*sn = w->snap;
		pthread_mutex_unlock(&w->mu);
		return 1;
	}
	pthread_mutex_unlock(&w->mu);
	snap_take(&w->ctx, sn);
	return 0;
}

/* Every thread's counters, summed without waiting; see worker.h. */
void
zp_ctx_totals(struct zp_ctx *root, struct zp_totals *t)
{
	struct zp_snap	sn;
	const uint64_t	*src = (const uint64_t *)&sn.stats;
	uint64_t	*dst = (uint64_t *)&t->stats;
	size_t		 k;
	int		 i;

	/* struct zp_stats is counters only, every one a uint64_t. */
	_Static_assert(sizeof(struct zp_stats) % sizeof(uint64_t) == 0,
	    "struct zp_stats holds uint64_t counters only");
	memset(t, 0, sizeof(*t));
	t->threads = zp_ctx_threads(root);
	for (i = 0; i < t->threads; i++) {
		(void)worker_ctx_snap(root, i, &sn);
		for (k = 0; k < sizeof(sn.stats) / sizeof(uint64_t); k++)
			dst[k] += src[k];
		t->pool.alive += sn.pool.alive;
		t->pool.pooled += sn.pool.pooled;
		t->pool.created += sn.pool.created;
		t->pool.killed += sn.pool.killed;
		if (sn.pool.shortage != 0)
			t->pool.shortage = sn.pool.shortage;
		t->modes.splice += sn.modes.splice;
		t->modes.copy += sn.modes.copy;
		t->modes.mixed += sn.modes.mixed;
		t->modes.tls += sn.modes.tls;
		t->open[i] = sn.stats.conns_open;
	}
}

/* Has every worker answered r (or ended: it never will)? */
static int
refresh_done(const struct zp_refresh *r)
{
	struct zp_workers	*ws = r->ws;
	struct zp_worker	*w;
	int			 i, done = 1;

	for (i = 1; i < ws->n && done; i++) {
		w = ws->w[i];
		pthread_mutex_lock(&w->mu);
		done = !w->running || w->snap.answered >= r->seq;
		pthread_mutex_unlock(&w->mu);
	}
	return done;
}

/* Unlink r and free it; what it was for is its owner's; see worker.h. */
void
zp_ctx_refresh_cancel(struct zp_refresh *r)
{
	if (r == NULL)
		return;
	TAILQ_REMOVE(&r->ws->refreshes, r, entry);
	event_free(r->deadline);
	free(r);
}

/* r is over (answered, or at its deadline): free it, then tell its owner. */
static void
refresh_end(struct zp_refresh *r)
{
	void	(*cb)(void *) = r->cb;
	void	*arg = r->arg;

	zp_ctx_refresh_cancel(r);
	cb(arg);
}

/*
 * End the refreshes that every worker answered (all: every one, answered
 * or not). They are numbered in order, and a worker answers its messages
 * in order: the first one not answered ends the walk. An owner's callback
 * may begin another refresh or cancel one: the walk starts over.
 */
void
worker_refresh_finish(struct zp_workers *ws, int all)
{
	struct zp_refresh	*r;

	while ((r = TAILQ_FIRST(&ws->refreshes)) != NULL &&
	    (all || refresh_done(r)))
		refresh_end(r);
}

/* A worker answered a refresh, or its loop ended. */
void
worker_answer_cb(evutil_socket_t fd, short what, void *arg)
{
	worker_refresh_finish(arg, 0);
}

/* A worker did not answer within ZP_REFRESH_MS: go on with its last. */
static void
refresh_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	refresh_end(arg);
}

/* Ask every live worker for its counters now; see worker.h. */
struct zp_refresh *
zp_ctx_refresh(struct zp_ctx *root, void (*cb)(void *), void *arg)
{
	struct zp_workers	*ws = root->workers;
	struct zp_refresh	*r;
	struct zp_wmsg		 m;
	struct timeval		 tv = zp_seconds_tv(ZP_REFRESH_MS / 1000.0);

	if (ws == NULL || (r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	if ((r->deadline = evtimer_new(root->base, refresh_deadline_cb, r)) ==
	    NULL) {
		free(r);
		return NULL;
	}
	r->ws = ws;
	r->seq = ++ws->asked;
	r->cb = cb;
	r->arg = arg;
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_publish;
	m.seq = r->seq;
	if (wmsg_post_all(root, &m) == 0 || evtimer_add(r->deadline, &tv) == -1) {
		/* No worker to wait for, or no deadline: go on now. */
		event_free(r->deadline);
		free(r);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&ws->refreshes, r, entry);
	return r;
}
