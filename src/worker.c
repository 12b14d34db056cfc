/*
 * worker.c - --threads: a loop per thread, clients handed to the least
 * loaded one, messages from the root; each worker publishes a snapshot
 * of its counters, which the root sums without waiting for anyone.
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

#include "ctx.h"
#include "log.h"
#include "net.h"
#include "pipepool.h"
#include "thread.h"
#include "wake.h"
#include "worker.h"

/*
 * How often a worker publishes its snapshot unasked: how stale what a
 * passive reader (zp_ctx_totals alone: the status line) sees may be.
 */
#define ZP_SNAPSHOT_MS	1000

struct zp_worker;

/* What the root asks of a worker, run on the worker's thread. */
struct zp_wmsg {
	void		(*fn)(struct zp_worker *, struct zp_wmsg *);
	int		 fd;		/* a client, for wmsg_start */
	long		 arg;		/* an upstream, the drain's wind, a
					   move's from */
	long		 arg2;		/* a move's to */
	uint64_t	 seq;		/* the refresh wmsg_publish answers */
	struct sockaddr_storage ss;
	socklen_t	 len;
};

/*
 * A thread's counters as it last published them: what zp_ctx_totals sums
 * and what a --rebalance step decides from.
 */
struct zp_snap {
	struct zp_stats		 stats;
	struct zp_pipepool_stats pool;
	struct zp_pair_modes	 modes;
	long			 moving[ZP_MAX_UPSTREAMS]; /* moves under way,
						   by upstream (pair.h) */
	long			 movable[ZP_MAX_UPSTREAMS]; /* streams that
						   could move, by upstream */
	uint64_t		 answered;	/* the last refresh answered */
};

/*
 * The root waits for the workers' answers to a refresh in its loop, never
 * on a lock: each answer makes ws->answer active, the deadline ends the
 * wait with the snapshots there are.
 */
struct zp_refresh {
	struct zp_workers	*ws;
	uint64_t		 seq;
	struct event		*deadline;
	void			(*cb)(void *);
	void			*arg;
	TAILQ_ENTRY(zp_refresh)	 entry;
};

TAILQ_HEAD(zp_refresh_list, zp_refresh);

struct zp_worker {
	struct zp_ctx	 ctx;
	pthread_t	 tid;
	int		 started;	/* pthread_create succeeded */
	int		 running;	/* under mu: its loop may still take
					   messages (0 once it died) */
	int		 died;		/* atomic: its loop ended unasked, and
					   the root was not told yet */
	int		 died_seen;	/* atomic: ... ever (no clients) */
	int		 exiting;	/* wmsg_exit ran: start nothing more */
	struct event	*inbox;
	struct event	*publish;	/* every ZP_SNAPSHOT_MS */
	pthread_mutex_t	 mu;		/* running, the queue, snap */
	struct zp_wmsg	*q;
	size_t		 nq, capq;
	struct zp_snap	 snap;		/* under mu: the last published */
	uint64_t	 answered;	/* its thread's: the last refresh */
#ifdef ZP_DEBUG
	struct event	*hold;		/* $ZP_TEST_HOLD: see worker_hold_cb */
	const char	*hold_path;
#endif
};

struct zp_workers {
	int		 n;		/* threads, the root's included */
	struct zp_worker *w[ZP_MAX_THREADS];	/* [0] unused: the root */
	struct event	*wake;		/* on the root's base: see changed */
	struct event	*answer;	/* ... a refresh was answered */
	int		 shed;		/* atomic: a worker is out of fds */
	int		 dead;		/* atomic: a worker died, not told */
	void		(*on_death)(struct zp_ctx *, int);
	struct zp_refresh_list refreshes; /* the root's, oldest first */
	uint64_t	 asked;		/* the last refresh's number */
	struct zp_refresh *rebalancing;	/* a --rebalance step's */
	uint64_t	 rebalance_seq;	/* ... and its number */
};

/*
 * Sequentially consistent: a worker's close lowers its load and then
 * reads close_wake; the root sets close_wake and then reads the loads.
 * One of them sees the other, so no close that frees room is missed.
 */
#define LOAD(x)		__atomic_load_n(&(x), __ATOMIC_SEQ_CST)
#define ADD(x, v)	__atomic_add_fetch(&(x), (v), __ATOMIC_SEQ_CST)

int
zp_ctx_threads(const struct zp_ctx *ctx)
{
	const struct zp_ctx *root = ctx->root != NULL ? ctx->root : ctx;

	return root->workers != NULL ? root->workers->n : 1;
}

/* Open pairs here, and clients on their way here. */
static long
ctx_load(const struct zp_ctx *ctx)
{
	return LOAD(ctx->load);
}

long
zp_ctx_open_all(const struct zp_ctx *root)
{
	long	n = ctx_load(root);
	int	i;

	if (root->workers != NULL)
		for (i = 1; i < root->workers->n; i++)
			n += ctx_load(&root->workers->w[i]->ctx);
	return n;
}

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
			    ctx_load(&ws->w[i]->ctx));
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
	if (root->stopping && zp_ctx_open_all(root) == 0)
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

/*
 * Queue a message for worker w and wake its loop. Returns 0, or -1 when
 * it could not be queued (ESRCH: its loop ended).
 */
static int
wmsg_post(struct zp_worker *w, const struct zp_wmsg *m)
{
	struct zp_wmsg	*q;
	size_t		 cap;

	pthread_mutex_lock(&w->mu);
	if (!w->running) {
		pthread_mutex_unlock(&w->mu);
		errno = ESRCH;
		return -1;
	}
	if (w->nq == w->capq) {
		cap = w->capq > 0 ? w->capq * 2 : 64;
		if ((q = realloc(w->q, cap * sizeof(*q))) == NULL) {
			pthread_mutex_unlock(&w->mu);
			return -1;
		}
		w->q = q;
		w->capq = cap;
	}
	w->q[w->nq++] = *m;
	pthread_mutex_unlock(&w->mu);
	zp_wake_post(w->ctx.wake, w->inbox);
	return 0;
}

/* The worker's loop: run what was queued, in order. */
static void
inbox_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_worker	*w = arg;
	struct zp_wmsg		 m;
	size_t			 i;

	/* One at a time: a message may queue none, but the root may. */
	for (i = 0;; i++) {
		pthread_mutex_lock(&w->mu);
		if (i >= w->nq) {
			w->nq = 0;
			pthread_mutex_unlock(&w->mu);
			return;
		}
		m = w->q[i];
		pthread_mutex_unlock(&w->mu);
		m.fn(w, &m);
	}
}

/* A client handed to this thread. */
static void
wmsg_start(struct zp_worker *w, struct zp_wmsg *m)
{
	if (!w->exiting) {
		/* Counted in load by the root already. */
		(void)zp_ctx_hooks(&w->ctx)->pair_start(&w->ctx, m->fd,
		    (struct sockaddr *)&m->ss, m->len, 1);
		return;
	}
	close(m->fd);
	ADD(w->ctx.load, -1);
	zp_ctx_closed(&w->ctx);
}

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
	if (m->arg)
		zp_ctx_hooks(ctx)->pairs_wind_down(ctx);
}

static void
wmsg_exit(struct zp_worker *w, struct zp_wmsg *m)
{
	w->exiting = 1;
	w->ctx.stopping = 1;
	zp_ctx_hooks(&w->ctx)->pairs_close(&w->ctx);
	event_base_loopbreak(w->ctx.base);
}

/* Take ctx's counters into sn (on ctx's thread, or with it gone). */
static void
snap_take(struct zp_ctx *ctx, struct zp_snap *sn)
{
	memset(sn, 0, sizeof(*sn));
	sn->stats = ctx->stats;
	if (ctx->pool != NULL)
		zp_pipepool_stats(ctx->pool, &sn->pool);
	zp_ctx_hooks(ctx)->pairs_modes(ctx, &sn->modes);
	if (ctx->cfg->rebalance)
		zp_ctx_hooks(ctx)->pairs_moving(ctx, sn->moving, sn->movable);
}

/*
 * Publish this worker's counters for the root: taken on its thread, then
 * copied in under mu, which is held for the copy only.
 */
static void
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
static void
publish_cb(evutil_socket_t fd, short what, void *arg)
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

/* A --rebalance move the root decided (rebalance_decide). */
static void
wmsg_move(struct zp_worker *w, struct zp_wmsg *m)
{
	(void)zp_ctx_hooks(&w->ctx)->pairs_move_one(&w->ctx, (int)m->arg,
	    (int)m->arg2);
}

/*
 * Thread i's counters into sn: the root's own, a live worker's last
 * snapshot, or, for a worker whose loop ended (or never began), its
 * context itself, which nothing changes any more. Returns 1 for a
 * snapshot (and a thread that can still take a move), else 0.
 */
static int
ctx_snap(struct zp_ctx *root, int i, struct zp_snap *sn)
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
		(void)ctx_snap(root, i, &sn);
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
static void
refresh_finish(struct zp_workers *ws, int all)
{
	struct zp_refresh	*r;

	while ((r = TAILQ_FIRST(&ws->refreshes)) != NULL &&
	    (all || refresh_done(r)))
		refresh_end(r);
}

/* A worker answered a refresh, or its loop ended. */
static void
answer_cb(evutil_socket_t fd, short what, void *arg)
{
	refresh_finish(arg, 0);
}

/* A worker did not answer within ZP_REFRESH_MS: go on with its last. */
static void
refresh_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	refresh_end(arg);
}

/* Post m to every worker; returns to how many it went. */
static int
post_all(struct zp_ctx *root, struct zp_wmsg *m)
{
	int	i, n = 0;

	if (root->workers == NULL)
		return 0;
	for (i = 1; i < root->workers->n; i++)
		if (wmsg_post(root->workers->w[i], m) == 0)
			n++;
		else if (errno != ESRCH)
			zp_log(root->log, ZP_LOG_ERROR, "thread %d: cannot "
			    "queue a message: %s", i, strerror(errno));
	return n;
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
	if (post_all(root, &m) == 0 || evtimer_add(r->deadline, &tv) == -1) {
		/* No worker to wait for, or no deadline: go on now. */
		event_free(r->deadline);
		free(r);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&ws->refreshes, r, entry);
	return r;
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
	size_t			 i, n = zp_upstreams_count(root->ups);
	int			 t, live, hi, lo;

	_Static_assert(ZP_MAX_THREADS <= 64, "a thread is a bit of has[]");
	if (n < 2 || root->stopping)
		return;
	for (i = 0; i < n; i++) {
		zp_upstream_get(root->ups, i, &u);
		eff[i] = (long)u.active;
		has[i] = 0;
	}
	for (t = 0; t < zp_ctx_threads(root); t++) {
		live = ctx_snap(root, t, &sn);
		if (t > 0 && live && sn.answered < seq)
			return;
		for (i = 0; i < n; i++) {
			eff[i] += sn.moving[i];
			if (live && sn.movable[i] > 0)
				has[i] |= (uint64_t)1 << t;
		}
	}
	if (!hk->rebalance_choose(root->ups, eff, &hi, &lo))
		return;
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_move;
	m.arg = hi;
	m.arg2 = lo;
	for (t = 0; t < zp_ctx_threads(root); t++) {
		if (!(has[hi] & ((uint64_t)1 << t)))
			continue;
		if (t == 0) {
			if (hk->pairs_move_one(root, hi, lo) == 1)
				return;
		} else if (wmsg_post(ws->w[t], &m) == 0)
			return;
	}
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
	post_all(root, &m);
}

void
zp_ctx_drain(struct zp_ctx *root, int wind)
{
	struct zp_wmsg	m;

	memset(&m, 0, sizeof(m));
	m.fn = wmsg_drain;
	m.arg = wind;
	post_all(root, &m);
}

void
zp_ctx_start_pair(struct zp_ctx *root, int fd, const struct sockaddr *sa,
    socklen_t len)
{
	struct zp_workers	*ws = root->workers;
	const struct zp_ctx_hooks *hk = zp_ctx_hooks(root);
	struct zp_worker	*w;
	struct zp_wmsg		 m;
	long			 least, l;
	int			 i, best = 0;

	if (ws == NULL) {
		(void)hk->pair_start(root, fd, sa, len, 0);
		return;
	}
	/* The fewest open pairs; ties go to the lowest thread. */
	least = ctx_load(root);
	for (i = 1; i < ws->n; i++)
		if (!LOAD(ws->w[i]->died_seen) &&
		    (l = ctx_load(&ws->w[i]->ctx)) < least) {
			least = l;
			best = i;
		}
	if (best == 0) {
		(void)hk->pair_start(root, fd, sa, len, 0);
		return;
	}
	w = ws->w[best];
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_start;
	m.fd = fd;
	if (len > sizeof(m.ss))
		len = sizeof(m.ss);
	memcpy(&m.ss, sa, len);
	m.len = len;
	ADD(w->ctx.load, 1);	/* the pair keeps it: see wmsg_start */
	if (wmsg_post(w, &m) == -1) {
		ADD(w->ctx.load, -1);
		if (errno == ESRCH) {
			/* Its loop ended just now: the root takes it. */
			(void)hk->pair_start(root, fd, sa, len, 0);
			return;
		}
		zp_log(root->log, ZP_LOG_WARN, "dropping a client: %s",
		    strerror(errno));
		close(fd);
	}
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
		}
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

	(void)event_base_loop(w->ctx.base, EVLOOP_NO_EXIT_ON_EMPTY);
	if (!w->exiting)
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
	zp_pipepool_free(ctx->pool);
	zp_bufcache_clear(&ctx->bufs);
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
	free(w->q);
	pthread_mutex_destroy(&w->mu);
	free(w);
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
	ctx->cfg = cfg;
	ctx->log = root->log;
	ctx->ups = root->ups;
	ctx->mirrors = root->mirrors;
	ctx->spool = root->spool;
	TAILQ_INIT(&ctx->mirror_sets);
	ctx->devnull = root->devnull;
	ctx->pipes_roomy = root->pipes_roomy;
	ctx->daemon_fd = -1;
	TAILQ_INIT(&ctx->pairs);
	ctx->max_conns = root->max_conns;
	ctx->pipe_cap = root->pipe_cap;
	ctx->nofile = root->nofile;
	ctx->fd_reserve = root->fd_reserve;
	ctx->budget = root->budget;
	ctx->started = root->started;
	ctx->bufs.size = root->bufs.size;
	if ((ctx->base = event_base_new()) == NULL ||
	    (ctx->wake = zp_wake_new(ctx->base)) == NULL ||
	    (w->inbox = event_new(ctx->base, -1, 0, inbox_cb, w)) == NULL ||
	    (w->publish = event_new(ctx->base, -1, EV_PERSIST, publish_cb,
	    w)) == NULL || event_add(w->publish, &tv) == -1) {
		snprintf(err, errlen, "thread %d: cannot create its event "
		    "loop", i);
		goto fail;
	}
#ifdef ZP_DEBUG
	if (worker_hold_new(w) == -1) {
		snprintf(err, errlen, "thread %d: cannot create its events", i);
		goto fail;
	}
#endif
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
	    NULL || (ws->answer = event_new(root->base, -1, 0, answer_cb,
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
			event_base_loopbreak(ws->w[i]->ctx.base);
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
	refresh_finish(ws, 1);
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
