/*
 * worker_int.h - what the parts of the worker threads share, for them
 * only: every other module goes through worker.h.
 *
 * worker_msg.c: the service underneath, "run this on thread i" (a queue
 * of messages a thread runs in order), and the loads the root reads;
 * worker_snap.c: the counters each thread publishes, and the root's
 * refresh of them; worker.c: the threads' lives (made, started, a death,
 * stopped, freed), a client handed over, the root woken; worker_jobs.c:
 * what the root sends them (a client to the least loaded, an upstream
 * down, the drain, a --rebalance move).
 */
#ifndef ZP_WORKER_INT_H
#define ZP_WORKER_INT_H

#include <sys/queue.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdint.h>
#include <event2/util.h>

#include "relay/ctx.h"
#include "lib/pipepool.h"
#include "relay/worker.h"

struct zp_worker;

/* What the root asks of a worker, run on the worker's thread. */
struct zp_wmsg {
	void		(*fn)(struct zp_worker *, struct zp_wmsg *);
	int		 fd;		/* a client, for wmsg_start */
	long		 arg;		/* an upstream, the drain's wind, a
					   move's from */
	long		 arg2;		/* a move's to */
	int		 why;		/* a move's reason (pair.h) */
	uint64_t	 seq;		/* the refresh wmsg_publish answers */
	void		*ptr;		/* zp_ctx_each's gathering; a load
					   move's line (malloc'd, or NULL) */
	/* Run instead of fn when the message is dropped unrun (its thread
	   ended); NULL: nothing to let go of. */
	void		(*drop)(struct zp_wmsg *);
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
	struct zp_up_load	 load[ZP_MAX_UPSTREAMS]; /* --rebalance load */
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

/* ---- worker_msg.c ---------------------------------------------------- */

/* Open pairs on ctx's thread, and clients on their way there. */
long	worker_ctx_load(const struct zp_ctx *ctx);

/*
 * Queue m for worker w and wake its loop. Returns 0, or -1 when it could
 * not be queued (ESRCH: its loop ended).
 */
int	wmsg_post(struct zp_worker *w, const struct zp_wmsg *m);

/* Post m to every worker (failures logged); returns to how many it went. */
int	wmsg_post_all(struct zp_ctx *root, struct zp_wmsg *m);

/* A worker's inbox event (arg: the worker): run what was queued. */
void	worker_inbox_cb(evutil_socket_t fd, short what, void *arg);

/* ---- worker_snap.c --------------------------------------------------- */

/* Publish w's counters for the root; on w's thread (or before it runs). */
void	worker_publish(struct zp_worker *w);

/* A worker's timer every ZP_SNAPSHOT_MS (arg: the worker): publish. */
void	worker_publish_cb(evutil_socket_t fd, short what, void *arg);

/* The root's event a worker's answer activates (arg: the workers). */
void	worker_answer_cb(evutil_socket_t fd, short what, void *arg);

/* End the refreshes every worker answered (all: every one). */
void	worker_refresh_finish(struct zp_workers *ws, int all);

/*
 * Thread i's counters into sn. Returns 1 for a live thread's snapshot
 * (a thread that can still take a move), 0 for one whose loop ended.
 */
int	worker_ctx_snap(struct zp_ctx *root, int i, struct zp_snap *sn);

/* ---- worker.c -------------------------------------------------------- */

/*
 * A worker's own copy of the root's options (its pointers the root's),
 * for its context, and after a reload (zp_ctx_set_cfg). NULL: no memory.
 */
struct zp_config *worker_cfg(const struct zp_config *cfg);

/* A client handed to w's thread (m->fd, m->ss), or closed once exiting. */
void	wmsg_start(struct zp_worker *w, struct zp_wmsg *m);

#endif
