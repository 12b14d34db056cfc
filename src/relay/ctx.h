/*
 * ctx.h - the one context that all of zproxy's state hangs off.
 *
 * Nothing in zproxy is global and mutable: every module is handed this
 * struct, so that one context per worker thread is a small step later.
 */
#ifndef ZP_CTX_H
#define ZP_CTX_H

#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <stdint.h>

#include "lib/acl.h"
#include "lib/bufcache.h"
#include "core/config.h"
#include "core/loadbal.h"
#include "lib/log.h"
#include "relay/mirror.h"
#include "lib/pipepool.h"
#include "relay/relay.h"
#include "core/upstream.h"

struct event_base;
struct zp_listener;
struct zp_control;
struct zproxy_ctl;
struct zproxy_reload;
struct zproxy_tls;
struct zp_pair;
struct zp_stats_server;
struct zp_health;
struct zp_resolver;
struct zp_sandbox;
struct zp_tls_srv;
struct zp_tls_cli;
struct zp_tls_cache;
struct zp_notify;
struct zp_workers;
struct zp_spool;
struct zp_upstreams;
struct zp_udp;
struct zp_udp_socks;
struct zp_ring;

/* Why a pair relays in copy mode although splice was asked for. */
enum zp_fallback {
	ZP_FALLBACK_POOL = 0,	/* no pipe to be had */
	ZP_FALLBACK_REFUSED,	/* the kernel refused splice on the sockets */
	ZP_FALLBACK_MAX,
};

/* Why the stats endpoint closed a connection without answering it. */
enum zp_stats_refusal {
	ZP_STATS_REFUSED_CONNS = 0,	/* --stats-max-conns were open */
	ZP_STATS_REFUSED_FDS,		/* descriptors kept for the relay */
	ZP_STATS_REFUSED_MAX,
};

/* Why a datagram read (or due) was not relayed: zproxy_udp_dropped_total. */
enum zp_udp_drop {
	ZP_UDP_DROP_RCVBUF = 0,	/* the kernel's: the socket's queue was full
				   (SO_RXQ_OVFL), before zproxy saw it */
	ZP_UDP_DROP_EMPTY,	/* zero length: no message to carry */
	ZP_UDP_DROP_DENIED,	/* its source: --allow, --deny */
	ZP_UDP_DROP_NO_STREAM,	/* no stream could be made for it (out of
				   memory or descriptors, and no shared one) */
	ZP_UDP_DROP_UNREACHABLE, /* -u udp@: the upstream refused it (ICMP
				   unreachable), or it could not be sent */
	ZP_UDP_DROP_MAX,
};

/* A UDP listener's counters (stream/udp.h), by its -l. */
struct zp_udp_tally {
	uint64_t	datagrams;	/* read */
	uint64_t	dropped[ZP_UDP_DROP_MAX];
	uint64_t	shared;		/* carried by a shared stream */
	uint64_t	sources;	/* with a stream open now */
};

/* Both directions' tallies: up is client -> upstream. */
struct zp_traffic {
	struct zp_tally	up;
	struct zp_tally	down;
};

/* zproxy_tls_handshakes_total{side,result}: tls_io.h's results. */
#define ZP_TLS_SIDE_CLIENT	0
#define ZP_TLS_SIDE_UPSTREAM	1
#define ZP_TLS_SIDE_MIRROR	2
#define ZP_TLS_SIDES		3
#define ZP_TLS_RESULTS		13

struct zp_stats {
	uint64_t	conns_total;	/* accepted */
	uint64_t	conns_open;
	uint64_t	conns_failed;	/* upstream never answered */
	struct zp_traffic all;		/* every pair's, open or closed */
	struct zp_traffic ups[ZP_MAX_UPSTREAMS]; /* each upstream's */
	uint64_t	fallbacks[ZP_FALLBACK_MAX];
	uint64_t	accept_pauses;	/* out of descriptors */
	uint64_t	timeouts_idle;
	uint64_t	timeouts_fin;
	uint64_t	lingers;	/* pairs that waited for the survivor */
	uint64_t	linger_timeouts; /* ... and gave up */
	uint64_t	discarded;	/* bytes read after their peer was gone */
	uint64_t	local_errors;	/* connects failed for a local shortage */
	uint64_t	conns_waiting;	/* pairs waiting to retry after one */
	uint64_t	conns_local_failed; /* end=local-resource */
	uint64_t	clients_denied;		/* --allow, --deny */
	uint64_t	clients_source_limited;	/* --max-conns-per-source */
	uint64_t	bad_proxy_headers;	/* --accept-proxy refusals */
	uint64_t	bad_destinations;	/* -u original refused one */
	uint64_t	moves[7];	/* --framing: streams moved, by
					   enum zp_move_reason */
	uint64_t	framing_errors;	/* streams whose framing failed */
	uint64_t	replayed;	/* --replay-window: bytes sent again */
	uint64_t	stats_open;	/* --stats connections */
	uint64_t	stats_refused[ZP_STATS_REFUSED_MAX];
	uint64_t	stats_timeouts;	/* closed by --stats-timeout */
	struct zp_mirror_tally mirrors[ZP_MAX_MIRRORS];	/* --mirror */
	struct zp_udp_tally udp[ZP_MAX_LISTENS];	/* -l udp@ */
	uint64_t	tls_handshakes[ZP_TLS_SIDES][ZP_TLS_RESULTS]; /* by
					   side, result */
	uint64_t	tls_pending;	/* gauge: handshakes under way */
};

/* How many open pairs relay in each mode, for the metrics. */
struct zp_pair_modes {
	uint64_t	splice;
	uint64_t	copy;
	uint64_t	mixed;
	uint64_t	tls;		/* a TLS half: the TLS backend */
};

/*
 * What the layers above the context do when a service below them (the
 * worker threads, worker.c) must have it done without knowing them: the
 * composition root (zproxy.c, zp_wire) sets these in the root context
 * before any thread runs, and nobody changes them after. Each runs on
 * the thread of the context it is given.
 */
/* How a client is started (zp_pair_start's flags). */
#define ZP_START_COUNTED	0x1	/* in ctx->load already (handed) */
#define ZP_START_TLS		0x2	/* from a tls@ listener */

struct zp_ctx_hooks {
	/* Start a pair for a client handed here (pair.h: zp_pair_start). */
	int	(*pair_start)(struct zp_ctx *, int fd,
		    const struct sockaddr *, socklen_t, unsigned flags);
	/* Upstream idx went down: move or end what it holds here. */
	int	(*pairs_upstream_down)(struct zp_ctx *, int idx);
	/*
	 * The drain: read the UDP sockets here out, and wind every framed
	 * stream here down, losslessly.
	 */
	void	(*drain)(struct zp_ctx *);
	/* The end: close every pair here now. */
	void	(*pairs_close)(struct zp_ctx *);
	/* Count the open pairs here by mode. */
	void	(*pairs_modes)(struct zp_ctx *, struct zp_pair_modes *);
	/* --rebalance (pair.h): the moves under way here, the movable. */
	void	(*pairs_moving)(struct zp_ctx *, long *eff, long *movable);
	/* ... load: what each upstream's streams here were held back. */
	void	(*pairs_load)(struct zp_ctx *, struct zp_up_load *);
	/*
	 * ... on the root: which upstream gives a stream to which, and why
	 * (1), if any; text: a load move's figures for the log, or "".
	 */
	int	(*rebalance_choose)(struct zp_ctx *root, const long *eff,
		    const struct zp_up_load *, const struct timeval *now,
		    int *hi, int *lo, int *why, char *text, size_t len);
	/* ... one move from hi to lo here, for why; 1 when it began. */
	int	(*pairs_move_one)(struct zp_ctx *, int hi, int lo, int why);
	/*
	 * On the root: pairs closed or stopped waiting somewhere, so the
	 * listeners may accept again.
	 */
	void	(*root_changed)(struct zp_ctx *root);
	/*
	 * On the root: out of descriptors, let the --stats clients give
	 * way; returns how many closed.
	 */
	int	(*root_shed)(struct zp_ctx *root);
};

TAILQ_HEAD(zp_pair_list, zp_pair);

/*
 * --threads: the main thread's context is thread 0 and the root; each
 * other thread relays with a context of its own (worker.c) that points
 * back to it. Per context: the base, the pool, the pairs, the counters.
 * The root's alone: the listeners, --stats, --control, the health
 * checks, the resolver, the drain, the per-source table and next_id.
 * Shared through pointers, each with its own lock: the log and the
 * upstreams. The configuration is read-only once the threads run.
 */
struct zp_ctx {
	struct event_base	*base;
	struct zp_wake		*wake;		/* other threads wake base by it */
	struct zp_config	*cfg;
	struct zp_log		*log;
	struct zp_ctx		*root;		/* NULL in the root itself */
	const struct zp_ctx_hooks *hooks; /* the root's: zp_ctx_hooks() */
	int			 thread;	/* 0: the root */
	struct zp_workers	*workers;	/* the root's; NULL: 1 thread */
	/*
	 * Atomic: open pairs here (zp_pair_start to zp_pair_close), and
	 * clients handed here but not started yet, one counter: the root
	 * counts a client when it hands it over, the pair keeps it. The
	 * least loaded context gets the next client, --max-conns counts
	 * them all. (Two counters, one raised as the other fell, let the
	 * sum seem one off for a moment, and an accept slip past the cap.)
	 */
	long			 load;
	long			 waiting_all;	/* root: pairs waiting, every
						   thread's (the listener) */
	long			 drain_holds;	/* root, atomic: what the drain
						   waits for besides the open
						   pairs: UDP readers not read
						   out yet (stream/udp.h) */
	int			 close_wake;	/* root, atomic: wake me at
						   every close (paused at
						   --max-conns, or draining) */
	struct zp_pipepool	*pool;		/* NULL: no splicing (copy mode) */
	struct zp_bufcache	 bufs;		/* copy-mode buffers to reuse */
	struct zp_ring		*ring;		/* --io-uring (experimental): this
						   thread's; NULL: none */
	struct zp_pipe		 tee_pipe;	/* --framing lf/nul: a pipe's
						   last byte is looked at here */
	int			 devnull;	/* --replay-window drops here */
	int			 pipes_roomy;	/* root, no --user: the per-user
						   pipe budget does not bind */
	struct zp_listener	*listener;	/* a list: several -l */
	struct zp_udp		*udp;		/* this thread's UDP readers */
	struct zp_udp_socks	*udp_socks;	/* root: every UDP socket */
	long			 udp_sources;	/* root, atomic: UDP sources
						   with a stream of their own,
						   every thread's */
	struct zp_addr		 listen_addrs[ZP_MAX_LISTEN_SOCKETS];	/* kept after
						   they close */
	size_t			 nlisten_addrs;
	struct zp_control	*control;	/* --control */
	struct zproxy_ctl	*ctl;		/* root: zproxy ctl's commands
						   under way (zproxy_ctl.c) */
	struct zproxy_tls	*tls_loader;	/* root: reads certificates
						   again (zproxy_tls.c) */
	struct zproxy_reload	*reload;	/* root: -f's reader thread
						   (zproxy_reload.c) */
	int			 daemon_fd;	/* --daemon: the parent waits
						   for a byte here; -1 */
	struct zp_upstreams	*ups;
	struct zp_mirrors	*mirrors;	/* the root's, shared */
	struct zp_tls_srv	*tls_srv;	/* tls@: the root's, shared;
						   NULL: no tls@ listener */
	struct zp_tls_cli	*tls_cli;	/* -u or --mirror tls@: the
						   root's, shared; NULL: none
						   is tls@ */
	struct zp_tls_cache	*tls_cache;	/* ... this thread's sessions
						   to resume */
	int			 tls_upstreams;	/* a tls@ upstream at start-up:
						   every pair copies, and may
						   be TLS (pair_use_tls) */
	struct timeval		 tls_warned;	/* an upstream's handshake
						   failure said at warn level */
	struct zp_spool		*spool;		/* --spool: the root's, shared */
	struct zp_mirror_sets	 mirror_sets;	/* released, finishing */
	int64_t			 mirror_said[ZP_MAX_MIRRORS]; /* drops: last
						   logged (monotonic us) */
	uint64_t		 mirror_unsaid[ZP_MAX_MIRRORS];	/* ... since */
	struct zp_stats_server	*stats_server;	/* --stats */
	struct zp_health	*health;	/* --check-interval */
	struct zp_resolver	*resolver;	/* --resolve-interval */
	struct zp_sandbox	*sandbox;	/* NULL: --no-sandbox */
	struct zp_notify	*notify;	/* NULL: no $NOTIFY_SOCKET */
	struct event		*drain_timer;
	struct event		*rebalance_timer;	/* --rebalance */
	struct zp_loadbal	*loadbal;	/* root: --rebalance load */
	struct zp_pair_list	 pairs;
	/*
	 * tls@ clients in their handshake here, oldest first: not in load
	 * (--max-conns), at most tls_max_pending over the threads; the
	 * oldest makes room for a new one (pair_tls.c).
	 */
	struct zp_pair_list	 handshakes;
	long			 nhandshakes;	/* atomic: the root reads it */
	long			 tls_max_pending; /* root: over every thread */
	struct zp_srctab	 sources;	/* open pairs per client source */
	struct zp_stats		 stats;
	uint64_t		 next_id;
	long			 max_conns;	/* effective */
	size_t			 pipe_cap;	/* pipes the fd budget holds */
	size_t			 pool_cap;	/* each thread's pool: at most */
	size_t			 pool_prepare;	/* ... and made at start-up */
	long			 nofile;	/* RLIMIT_NOFILE; 0: unknown */
	long			 fd_reserve;	/* kept free of stats' use */
	size_t			 budget;	/* bytes per direction per callback */
	int			 pass_busy;	/* --coalesce: this pass of the
						   loop left bytes waiting */
	int			 loop_stop;	/* atomic: zp_ctx_loop returns
						   (a stop from another thread) */
	struct timeval		 started;
	struct timeval		 local_warned;	/* last local-fault warning */
	int			 stopping;
	int			 exit_status;	/* root: what zp_run() returns
						   after a clean stop (a worker
						   died: ZP_EX_SOFTWARE) */
};

/* The root context (the main thread's): ctx itself, or what it points to. */
struct zp_ctx *zp_ctx_root(struct zp_ctx *);

/* The hooks the root was wired with (zproxy.c); never NULL. */
const struct zp_ctx_hooks *zp_ctx_hooks(struct zp_ctx *);

/* The next connection id, unique over the threads. */
uint64_t zp_ctx_next_id(struct zp_ctx *);

/*
 * Run ctx's loop (event_base_loop's flags and result). With --coalesce,
 * one pass at a time, and after a pass that left nothing waiting (no
 * direction stopped by its budget: ctx->pass_busy) a pause of that long
 * before the next: what the sockets gather meanwhile is read in one
 * pass, many small messages a read. The loop's timers and wake-ups are
 * late by the pause at most. A break (event_base_loopbreak) must come
 * from within the loop (a pass clears one made between passes); another
 * thread stops it with zp_ctx_loop_stop().
 * With a ring (--io-uring) it goes one pass at a time too, and what the
 * pass queued on the ring is submitted after it, in one system call
 * (and the ring is enabled on this thread first: -1 when it cannot be).
 */
int	zp_ctx_loop(struct zp_ctx *, int flags);

/* From any thread: ctx's loop returns (its base is broken too). */
void	zp_ctx_loop_stop(struct zp_ctx *);

#endif
