/*
 * worker_jobs.c - what the root has the workers do: a new client to the
 * least loaded thread, an upstream gone down, the drain, and --rebalance
 * (decided on the root from every thread's snapshot, made as a move on
 * one thread).
 */

#include <sys/socket.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/upstream.h"
#include "relay/worker.h"
#include "relay/worker_int.h"

static void
wmsg_upstream_down(struct zp_worker *w, struct zp_wmsg *m)
{
	(void)zp_ctx_hooks(&w->ctx)->pairs_upstream_down(&w->ctx,
	    (int)m->arg);
}

static void
wmsg_drain(struct zp_worker *w, struct zp_wmsg *m)
{
	struct zp_ctx	*ctx = &w->ctx;

	ctx->stopping = 1;
	zp_ctx_hooks(ctx)->drain(ctx);
}

/*
 * One --rebalance move from arg to arg2 here, for why (and, once it
 * began, a load move's line). The move's line follows the move: a thread
 * that cannot make it (no stream that may move any more, no descriptor)
 * says nothing.
 */
static int
move_here(struct zp_ctx *ctx, int hi, int lo, int why, const char *text)
{
	if (zp_ctx_hooks(ctx)->pairs_move_one(ctx, hi, lo, why) != 1)
		return 0;
	if (text != NULL)
		zp_log(ctx->log, ZP_LOG_NOTICE, "rebalance load: %s", text);
	return 1;
}

/* A --rebalance move the root decided (rebalance_decide). */
static void
wmsg_move(struct zp_worker *w, struct zp_wmsg *m)
{
	(void)move_here(&w->ctx, (int)m->arg, (int)m->arg2, m->why, m->ptr);
	free(m->ptr);
}

/* ... its thread ended first. */
static void
wmsg_move_drop(struct zp_wmsg *m)
{
	free(m->ptr);
}

/*
 * --rebalance, decided on the root from every thread's counters (its own,
 * and the workers' snapshots, which answered refresh seq: 0, none): the
 * move goes as a message to the first thread that had a stream to move,
 * which makes it if it still can. Nothing is decided unless every live
 * worker answered: a move asked for earlier and not in an older snapshot
 * would not be counted, and the same move could be asked of two threads;
 * a move ended since would count twice, the upstreams' counts being
 * live. (A worker answers its messages in order: one that answered saw
 * every move asked of it before.)
 */
static void
rebalance_decide(struct zp_ctx *root, uint64_t seq)
{
	struct zp_workers	*ws = root->workers;
	const struct zp_ctx_hooks *hk = zp_ctx_hooks(root);
	struct zp_upstream	 u;
	struct zp_snap		 sn;
	struct zp_wmsg		 m;
	long			 eff[ZP_MAX_UPSTREAMS];
	uint64_t		 has[ZP_MAX_UPSTREAMS];	/* a bit a thread */
	uint64_t		 hasl[ZP_MAX_UPSTREAMS];	/* ... for load */
	struct zp_up_load	 load[ZP_MAX_UPSTREAMS];
	char			 text[1024];
	struct timeval		 now;
	size_t			 i, n = zp_upstreams_count(root->ups);
	int			 t, live, hi, lo, why, load_move;

	_Static_assert(ZP_MAX_THREADS <= 64, "a thread is a bit of has[]");
	if (n < 2 || root->stopping)
		return;
	memset(load, 0, sizeof(load));
	for (i = 0; i < n; i++) {
		zp_upstream_get(root->ups, i, &u);
		eff[i] = (long)u.active;
		has[i] = hasl[i] = 0;
	}
	for (t = 0; t < zp_ctx_threads(root); t++) {
		live = worker_ctx_snap(root, t, &sn);
		if (t > 0 && live && sn.answered < seq)
			return;
		for (i = 0; i < n; i++) {
			eff[i] += sn.moving[i];
			if (live && sn.movable[i] > 0)
				has[i] |= (uint64_t)1 << t;
			if (live && sn.load[i].movable > 0)
				hasl[i] |= (uint64_t)1 << t;
			zp_up_load_add(&load[i], &sn.load[i]);
		}
	}
	zp_clock_now(&now);
	if (!hk->rebalance_choose(root, eff, load, &now, &hi, &lo, &why, text,
	    sizeof(text)))
		return;
	load_move = text[0] != '\0';	/* its figures to say */
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_move;
	m.drop = wmsg_move_drop;
	m.why = why;
	m.arg = hi;
	m.arg2 = lo;
	/* A load move takes what a load move may. */
	if (load_move)
		memcpy(has, hasl, sizeof(has));
	for (t = 0; t < zp_ctx_threads(root); t++) {
		if (!(has[hi] & ((uint64_t)1 << t)))
			continue;
		if (t == 0) {
			if (move_here(root, hi, lo, why, load_move ? text :
			    NULL))
				break;
			continue;
		}
		/* The line goes with the move, said where it is made. */
		m.ptr = load_move ? strdup(text) : NULL;
		if (wmsg_post(ws->w[t], &m) == 0)
			break;
		free(m.ptr);
	}
	/* Handed on: both wait for what it changes before the next. */
	if (t < zp_ctx_threads(root) && load_move)
		zp_loadbal_moved(root->loadbal, (size_t)hi, (size_t)lo, &now);
}

/* The step's snapshots are in (or some at their deadline): decide. */
static void
rebalance_refreshed_cb(void *arg)
{
	struct zp_ctx	*root = arg;

	root->workers->rebalancing = NULL;
	rebalance_decide(root, root->workers->rebalance_seq);
}

/* One --rebalance step: refresh, then decide; see worker.h. */
void
zp_ctx_rebalance(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;

	if (zp_upstreams_count(root->ups) < 2 || root->stopping)
		return;
	if (ws == NULL) {
		rebalance_decide(root, 0);
		return;
	}
	/* A step is gathering its counters still: it decides, not this. */
	if (ws->rebalancing != NULL)
		return;
	/*
	 * None asked: no worker is live (those that ended are read as they
	 * are), or no memory (a live one never answered this: no step).
	 */
	if ((ws->rebalancing = zp_ctx_refresh(root, rebalance_refreshed_cb,
	    root)) == NULL)
		rebalance_decide(root, UINT64_MAX);
	else
		ws->rebalance_seq = ws->rebalancing->seq;
}

void
zp_ctx_upstream_down(struct zp_ctx *root, int idx)
{
	struct zp_wmsg	m;

	(void)zp_ctx_hooks(root)->pairs_upstream_down(root, idx);
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_upstream_down;
	m.arg = idx;
	wmsg_post_all(root, &m);
}

/* A new copy of the root's configuration for a worker (m->ptr). */
static void
wmsg_cfg(struct zp_worker *w, struct zp_wmsg *m)
{
	free(w->ctx.cfg);
	w->ctx.cfg = m->ptr;
}

static void
wmsg_cfg_drop(struct zp_wmsg *m)
{
	free(m->ptr);
}

int
zp_ctx_set_cfg(struct zp_ctx *root)
{
	struct zp_workers	*ws = root->workers;
	struct zp_wmsg		 m;
	int			 i, n = 0;

	if (ws == NULL)
		return 0;
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_cfg;
	m.drop = wmsg_cfg_drop;
	for (i = 1; i < ws->n; i++) {
		if ((m.ptr = worker_cfg(root->cfg)) == NULL) {
			n = -1;
			continue;
		}
		if (wmsg_post(ws->w[i], &m) == -1) {
			free(m.ptr);
			if (errno != ESRCH)
				n = -1;
		}
	}
	return n;
}

void
zp_ctx_drain(struct zp_ctx *root)
{
	struct zp_wmsg	m;

	memset(&m, 0, sizeof(m));
	m.fn = wmsg_drain;
	wmsg_post_all(root, &m);
}

/* What the next client weighs a thread by: its pairs and handshakes. */
static long
ctx_busy(const struct zp_ctx *ctx)
{
	return worker_ctx_load(ctx) + LOAD(ctx->nhandshakes);
}

void
zp_ctx_start_pair(struct zp_ctx *root, int fd, const struct sockaddr *sa,
    socklen_t len, unsigned flags)
{
	struct zp_workers	*ws = root->workers;
	const struct zp_ctx_hooks *hk = zp_ctx_hooks(root);
	struct zp_worker	*w;
	struct zp_wmsg		 m;
	long			 least, l;
	int			 i, best = 0;

	if (ws == NULL) {
		(void)hk->pair_start(root, fd, sa, len, flags);
		return;
	}
	/*
	 * The fewest open pairs and handshakes (outside the load, but
	 * each thread holds its share of them); ties go to the lowest
	 * thread.
	 */
	least = ctx_busy(root);
	for (i = 1; i < ws->n; i++)
		if (!LOAD(ws->w[i]->died_seen) &&
		    (l = ctx_busy(&ws->w[i]->ctx)) < least) {
			least = l;
			best = i;
		}
	if (best == 0) {
		(void)hk->pair_start(root, fd, sa, len, flags);
		return;
	}
	w = ws->w[best];
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_start;
	m.fd = fd;
	m.arg = (long)flags;
	if (len > sizeof(m.ss))
		len = sizeof(m.ss);
	memcpy(&m.ss, sa, len);
	m.len = len;
	ADD(w->ctx.load, 1);	/* the pair keeps it: see wmsg_start */
	if (wmsg_post(w, &m) == -1) {
		ADD(w->ctx.load, -1);
		if (errno == ESRCH) {
			/* Its loop ended just now: the root takes it. */
			(void)hk->pair_start(root, fd, sa, len, flags);
			return;
		}
		zp_log(root->log, ZP_LOG_WARN, "dropping a client: %s",
		    strerror(errno));
		close(fd);
	}
}
