/*
 * worker.h - --threads: the relay on every core.
 *
 * The main thread's context is the root and relays too (thread 0); each
 * other thread runs a loop of its own on a context made from the root's
 * (ctx.h says which fields are whose). The root's listeners accept and
 * hand each client to the thread with the fewest open pairs; the root
 * tells the others what concerns them all (an upstream went down, the
 * drain, the end, a --rebalance move) with messages. No thread ever waits
 * for another's loop: each worker publishes a snapshot of its counters,
 * taken on its own thread and copied in under a lock held for the copy
 * only, every second and whenever the root asks (zp_ctx_refresh); the
 * root reads the snapshots as they are (zp_ctx_totals), so that nothing
 * a pair does while it relays takes a lock, and a busy or stalled worker
 * stalls nothing but itself.
 *
 * The worker threads are a service below the pairs, the listeners and the
 * stats endpoint: what runs on a thread for them (a pair started, closed,
 * moved, counted; the root's listeners told a pair closed) goes through
 * the hooks the composition root wired into the root context (ctx.h,
 * struct zp_ctx_hooks; zproxy.c, zp_wire), so this module knows only
 * what sits below it.
 */
#ifndef ZP_WORKER_H
#define ZP_WORKER_H

#include <sys/socket.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "relay/ctx.h"
#include "lib/pipepool.h"

#define ZP_MAX_THREADS	ZP_THREADS_MAX

/* How long a refresh waits for the workers' answers, in milliseconds. */
#define ZP_REFRESH_MS	200

/*
 * Make the contexts of threads 1 to n-1 from the root's, each with its
 * event base and its share of the pipes (the pool is made here); the
 * threads start with zp_workers_start(). n must be 2 or
 * more, and evthread_use_pthreads() must have been called before any
 * base was made. Returns 0, or -1 with err filled.
 */
int	zp_workers_new(struct zp_ctx *root, int n, char *err, size_t errlen);

/* Start the threads: after --user, before the sandbox. */
int	zp_workers_start(struct zp_ctx *root, char *err, size_t errlen);

/*
 * End every thread's pairs (ZP_END_SHUTDOWN), stop the threads, join
 * them and free their contexts; refreshes still pending end (their
 * callbacks run, every counter now read directly). The counters stay
 * readable through zp_ctx_totals() until zp_workers_free(). Safe with no
 * workers.
 */
void	zp_workers_stop(struct zp_ctx *root);
void	zp_workers_free(struct zp_ctx *root);

/*
 * What the root does when a worker's loop ended without being asked to
 * (on the root's thread, once per worker, after that worker was taken
 * out of the hand-out of clients and its clients still queued closed):
 * zproxy drains the others and exits non-zero. The dead thread's pairs
 * are closed by zp_workers_stop().
 */
void	zp_workers_on_death(struct zp_ctx *root,
	    void (*cb)(struct zp_ctx *root, int thread));

/* How many threads relay (1 without workers). */
int	zp_ctx_threads(const struct zp_ctx *);

/*
 * Thread t's context (0: the root's), for what is set up on each thread
 * before the threads start (zp_workers_start); NULL for no such thread.
 */
struct zp_ctx *zp_ctx_thread(struct zp_ctx *root, int t);

/*
 * Start a pair for an accepted client on the least loaded thread (the
 * root's own pair starts at once); flags: ZP_START_TLS (ctx.h) or 0.
 * Takes fd in every case.
 */
void	zp_ctx_start_pair(struct zp_ctx *root, int fd,
	    const struct sockaddr *, socklen_t, unsigned flags);

/*
 * One step of --rebalance over every thread (pair.h says how); the main
 * thread's timer runs it. The step refreshes the snapshots first and
 * decides once they are in (so it may end after this returns), and asks
 * one thread for the move, which it makes if it still can. A step asked
 * for while the last one gathers, or whose refresh some live worker did
 * not answer in time, decides nothing: the next one will.
 */
void	zp_ctx_rebalance(struct zp_ctx *root);

/*
 * The root's configuration changed (zproxy ctl reload, on the root's
 * thread): every worker gets a copy of it, which replaces its own on its
 * thread. Returns 0, or -1 when a copy could not be made or sent (that
 * worker keeps the old one; logged by the caller).
 */
int	zp_ctx_set_cfg(struct zp_ctx *root);

/* On every thread: the health checks marked upstream idx down. */
void	zp_ctx_upstream_down(struct zp_ctx *root, int idx);

/*
 * On every thread: the drain began (stopping is set there, and the
 * drain hook runs: its UDP sockets read out, its framed streams wound
 * down).
 */
void	zp_ctx_drain(struct zp_ctx *root);

/* Open pairs of every thread, clients on their way to one included. */
long	zp_ctx_open_all(const struct zp_ctx *root);

/*
 * Is the drain over: no pair open, nothing else it waits for (the UDP
 * readers that have not read their queues out: root->drain_holds)?
 */
int	zp_ctx_drained(struct zp_ctx *root);

/*
 * A pair of ctx began or ended waiting for a local resource, or closed:
 * the root's listener may accept again, the drain may be over. From a
 * worker it wakes the root, which looks on its own thread.
 */
void	zp_ctx_changed(struct zp_ctx *);

/*
 * A pair of ctx closed (its load already lowered): zp_ctx_changed() when
 * the root asked to hear of closes (close_wake), on the root always.
 */
void	zp_ctx_closed(struct zp_ctx *);

/*
 * Out of descriptors: let the root's --stats clients give way. Returns
 * how many it closed now; -1 from a worker when the root was asked to
 * (it sheds on its own thread, in a moment); 0 when there is no --stats.
 */
int	zp_ctx_shed(struct zp_ctx *);

/*
 * Everything counted, summed over the threads, for reports: the root's
 * counters as they are, each live worker's last snapshot (a second old at
 * most; zp_ctx_refresh for fresh ones), and the counters of a worker
 * whose loop ended, read directly. Never waits.
 */
struct zp_totals {
	struct zp_stats		 stats;
	struct zp_pipepool_stats pool;
	struct zp_pair_modes	 modes;
	int			 threads;
	uint64_t		 open[ZP_MAX_THREADS];	/* each thread's */
};
void	zp_ctx_totals(struct zp_ctx *root, struct zp_totals *);

/*
 * Ask every live worker to publish its snapshot now; cb(arg) runs on the
 * root's loop once all have (or ended), or after ZP_REFRESH_MS with the
 * snapshots there are (a worker busy in one long callback answers late),
 * or from zp_workers_stop(). Returns the refresh, which is the root's
 * until cb runs or zp_ctx_refresh_cancel(); or NULL, cb not to be called,
 * when there is no worker to ask (the totals are fresh now) or no memory
 * (they are as fresh as they are): the caller goes on at once.
 */
struct zp_refresh;
struct zp_refresh *zp_ctx_refresh(struct zp_ctx *root, void (*cb)(void *),
	    void *arg);

/*
 * Ask every thread: fn(ctx, arg, out) runs on each thread with its own
 * context (the root's at once, the others' in their loops), writing its
 * part into out; arg is a copy of arglen bytes, the same for all, read
 * only. done(done_arg, parts, n) runs on the root's loop once every
 * thread answered, or after ZP_EACH_MS with the parts there are (a
 * thread that did not answer, or had no memory: NULL); parts[t] is
 * thread t's, n the threads. Returns the gathering, the root's until
 * done ran or zp_ctx_each_cancel(); NULL when out of memory (done will
 * not run).
 */
#define ZP_EACH_MS	500
struct evbuffer;
struct zp_each;
typedef void (*zp_each_fn)(struct zp_ctx *, const void *arg,
	    struct evbuffer *out);
typedef void (*zp_each_done)(void *done_arg, struct evbuffer **parts,
	    int n);
struct zp_each *zp_ctx_each(struct zp_ctx *root, zp_each_fn, const void *arg,
	    size_t arglen, zp_each_done, void *done_arg);

/* Forget a gathering before its done ran (it will not). Safe on NULL. */
void	zp_ctx_each_cancel(struct zp_each *);

/* Forget a refresh before its cb ran: cb will not be called. Safe on NULL. */
void	zp_ctx_refresh_cancel(struct zp_refresh *);

#endif
