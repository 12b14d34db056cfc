/*
 * pair_int.h - the fields of struct zp_pair, and the functions the parts
 * of the pair share (pair.c, pair_connect.c, pair_header.c, pair_spool.c,
 * pair_move.c, pair_timer.c), for them and their unit tests only: every
 * other module goes through pair.h.
 */
#ifndef ZP_PAIR_INT_H
#define ZP_PAIR_INT_H

#include <sys/queue.h>
#include <sys/time.h>
#include <stdint.h>

#include "core/config.h"
#include "core/connect.h"
#include "stream/pair.h"
#include "lib/proxyproto.h"
#include "relay/relay.h"

struct zp_ctx;
struct event;
struct zp_spool_writer;
struct zp_rpair;

/*
 * The client's FIN on a framed stream that may move (pair_hold): OPEN
 * until it comes; HELD while the upstream has not acknowledged all it was
 * sent (or a retiring one may want a replay); then CARRIED to it, or
 * WATCHED: carried, and the upstream must close within --stall-timeout
 * (stall_since). A move makes it OPEN again, for the next upstream.
 */
enum zp_fin {
	ZP_FIN_OPEN = 0,
	ZP_FIN_HELD,
	ZP_FIN_CARRIED,
	ZP_FIN_WATCHED,
};

/* How a tls@ upstream's handshake ended: pair_uphs's done(). */
enum pair_uphs_end {
	PAIR_UPHS_DONE = 0,	/* the session is ready */
	PAIR_UPHS_FAILED,	/* the upstream's doing (its certificate, no
				   TLS, the timeout): a failed connect */
	PAIR_UPHS_LOCAL,	/* out of memory here: not the upstream's */
	PAIR_UPHS_HEADER,	/* --send-proxy's header could not be sent
				   (errno in err) */
};

/*
 * A tls@ upstream's handshake after its TCP connect (pair_uptls.c): of
 * a pair's connect (pair_dial) or of a planned move's next upstream
 * (pair_mv). The socket is its connect's meanwhile.
 */
struct pair_uphs {
	struct zp_pair		*p;
	struct zp_tls		*tls;		/* NULL: none under way */
	struct event		*ev;		/* what the handshake waits for */
	struct timeval		 deadline;	/* --connect-timeout from the
						   connect */
	short			 want;		/* EV_READ or EV_WRITE */
	int			 idx;		/* the upstream */
	struct zp_addr		 addr;		/* ... and its address */
	char			 hdr[ZP_PROXY_MAX]; /* --send-proxy's, sent */
	size_t			 hlen;
	int			 err;		/* PAIR_UPHS_HEADER's errno */
	/* The handshake is over: returns 1 when p was freed. */
	int			(*done)(struct zp_pair *, enum pair_uphs_end);
};

/*
 * What only a stream that moves needs (the last move's account, a planned
 * move's next upstream, the upstream it left): made by the first move,
 * planned or not (pair_mv()), and freed with the pair. An idle or plain
 * pair has none.
 */
struct pair_mv {
	struct zp_addr		 move_from;	/* the upstream left */
	int			 move_err;	/* why: errno, 0 for its FIN */
	int			 move_reason;	/* enum zp_move_reason */
	uint64_t		 move_frames;	/* delivered to it */
	uint64_t		 move_unacked;	/* sent, not acknowledged */
	uint64_t		 move_cut;	/* up.fr->cut when it began */
	uint64_t		 move_replayed;	/* sent again to the next */
	int			 move_checked;	/* the health checks began it */
	int			 rewind_due;	/* a retiring upstream lost
						   bytes: send the replay again
						   at the next boundary */
	uint64_t		 retiring_sent;	/* bytes sent to it */
	/* A planned move: the next upstream, connecting or connected. */
	struct zp_connecting	 next;		/* fd -1: none; ev: connecting */
	struct pair_uphs	 next_hs;	/* ... its TLS handshake */
	int			 next_ready;	/* ... connected (and its
						   handshake done): the move
						   waits for a boundary */
	int			 next_idx;
	struct zp_addr		 next_addr;
	/* The upstream a planned move left, read until it closes. */
	struct zp_half		 retiring;	/* fd -1: none */
	int			 retiring_idx;
	struct zp_addr		 retiring_addr;
	struct event		*retire_timer;	/* --drain-timeout */
};

/*
 * --accept-proxy: the header being read (HEADER state only, freed once
 * it is whole), and what a header that named a client leaves for the
 * pair's life.
 */
struct pair_hdr {
	size_t			 len;		/* bytes taken so far */
	struct timeval		 deadline;	/* --proxy-timeout */
	unsigned char		 buf[ZP_PROXY_ACCEPT_MAX];
};

struct pair_proxied {
	struct zp_addr		 peer_addr;	/* the balancer that sent it */
	struct zp_addr		 proxy_dst;	/* the header's destination */
};

/*
 * The connect phase (at the start, after a move, after the spool): made
 * by pair_dial(), freed once connected or with the pair.
 */
struct pair_dial {
	struct pair_uphs	 hs;		/* a tls@ upstream's handshake */
	int			 tls_failed;	/* the last try's handshake
						   failed (connect_err EPROTO) */
	uint64_t		 tried;		/* bit i: upstream i was tried */
	int			 attempts;	/* upstreams tried */
	int			 addr_tried;	/* one was (not skipped by --source) */
	size_t			 addr_idx;	/* its address being tried */
	struct zp_addr		 addr;		/* the one a connect is on */
	struct event		*retry;		/* after a local fault */
	struct timeval		 retry_until;	/* local faults' deadline */
	int			 waiting;	/* retry is armed */
	struct event		*hold;		/* a UDP source's stream waits
						   for an upstream */
	int			 held;		/* ... this many rounds */
	int			 wait_ms;	/* ... and the next round's */
};

/*
 * --rebalance load: the last look at the upstream socket (pair_load.c);
 * its counters start again on each upstream (moves: the one looked at).
 */
struct pair_load {
	struct timeval		 at;		/* 0: none yet on this one */
	uint64_t		 moves;		/* p->moves then */
	uint64_t		 rwnd_us;	/* tcpi_rwnd_limited then */
	int			 pm;		/* of the second before: per
						   mille held back (sampled) */
	uint32_t		 notsent;	/* bytes, at the last look */
	uint32_t		 unacked;
	unsigned		 sampled:1;	/* pm is one whole second's */
	unsigned		 zero:1;	/* a window of 0, bytes waiting
						   for it, at the last look */
	unsigned		 moved:1;	/* it moved for load, and was
						   held back on every look since */
};

/* pair_dial.tried is a bit set of the upstreams. */
_Static_assert(ZP_MAX_UPSTREAMS <= 64, "pair_dial.tried holds 64 upstreams");

struct zp_pair {
	struct zp_ctx		*ctx;
	uint64_t		 id;
	enum zp_pair_state	 state;
	unsigned		 source_counted:1; /* in ctx->sources */
	unsigned		 shed_asked:1;	/* a worker out of descriptors
						   asked the main thread to shed
						   --stats clients, once */
	unsigned		 linger_abort:1; /* gave up on a sending survivor */
	unsigned		 move_log_due:1; /* said once its cut is done */
	unsigned		 spool_live:1;	/* ... a stream that was live
						   (its move found no upstream):
						   it goes back as a move */
	unsigned		 dgram:1;	/* a UDP source's (udp.h): its
						   client is a socketpair, dst
						   the UDP listener */
	unsigned		 tls:1;		/* a tls@ listener's: its
						   handshake, then client.tls */
	unsigned		 hs_listed:1;	/* in ctx->handshakes, and
						   not in ctx->load */
	int			 framing;	/* enum zp_framing: its stream's */
	size_t			 max_frame;	/* ... and its longest message */
	struct zp_half		 client;
	struct zp_half		 upstream;
	struct zp_dir		 up;		/* client -> upstream */
	struct zp_dir		 down;		/* upstream -> client */
	struct zp_rpair		*ring;		/* --io-uring: its directions go
						   through the ring (pair_ring.c);
						   NULL: the pump's events */
	struct zp_mirror_set	*mir;		/* --mirror; up.mir too */
	struct zp_addr		 client_addr;	/* the PROXY header's, if any */
	struct pair_proxied	*px;		/* a PROXY header's addresses */
	struct pair_hdr		*hdr;		/* reading the header */
	const char		*hdr_why;	/* why it was refused */
	struct timeval		 tls_deadline;	/* --tls-handshake-timeout */
	short			 tls_want;	/* EV_READ or EV_WRITE: what
						   the handshake waits for */
	struct event		*tls_park;	/* done, waiting for room
						   under --max-conns */
	char			 tls_why[128];	/* why its handshake failed */
	int			 up_idx;	/* upstream in use, or -1 */
	struct zp_addr		 up_addr;	/* the address connected to */
	struct zp_connecting	 conn;		/* to the upstream, under way */
	struct pair_dial	*dial;		/* connecting: pair_dial() */
	struct zp_addr		 dst;		/* original destination; len 0: none */
	int			 connect_err;	/* last connect failure */
	struct timeval		 started;
	struct timeval		 last_active;	/* a byte moved (loop time) */
	struct timeval		 half_closed;	/* one direction done */
	struct event		*timer;		/* idle, fin and linger */
	struct timeval		 linger_acked;	/* the survivor last acked */
	int			 linger_outq;	/* its unacknowledged bytes */
	int			 linger_ms;	/* wait before the next look */
	uint64_t		 linger_heard;	/* discarded when it began */
	/* --framing: the current upstream's share, and moves. */
	uint64_t		 up_base;	/* up.bytes when it began */
	uint64_t		 frames_base;	/* up.fr->frames when it began */
	uint64_t		 up_sent;	/* bytes written to it (header too) */
	uint64_t		 moves;
	struct pair_mv		*mv;		/* made by its first move */
	struct timeval		 up_since;	/* on the current upstream since */
	struct timeval		 stall_since;	/* --stall-timeout: it stopped
						   taking the stream's bytes */
	uint64_t		 stall_acked;	/* ... having acknowledged this */
	enum zp_fin		 fin;		/* the client's FIN, held or
						   carried: pair_fin_set() */
	int			 fin_poll_ms;	/* looks again after this */
	int			 winding;	/* 0, or the end its wind-down
						   stands for (idle, shutdown) */
	struct pair_load	 load;		/* --rebalance load */
	struct zp_spool_writer	*spool;		/* ZP_PAIR_SPOOLING */
	uint64_t		 spooled;	/* client bytes that went to
						   the spool (up= counts them) */
	TAILQ_ENTRY(zp_pair)	 entry;
	TAILQ_ENTRY(zp_pair)	 hs_entry;	/* ctx->handshakes */
};

/* pair_connect.c: the connect phase's state, made the first time. */
struct pair_dial *pair_dial(struct zp_pair *);

/* The pair's move state, made the first time; NULL when out of memory. */
struct pair_mv *pair_mv(struct zp_pair *);

/* A planned move left an upstream that is still read. */
static inline int
pair_retiring(const struct zp_pair *p)
{
	return p->mv != NULL && p->mv->retiring.fd != -1;
}

/* A planned move's next upstream is connecting or connected. */
static inline int
pair_next_on(const struct zp_pair *p)
{
	return p->mv != NULL && p->mv->next.fd != -1;
}

/* ... and ready to take the stream at the next boundary. */
static inline int
pair_next_ready(const struct zp_pair *p)
{
	return pair_next_on(p) && p->mv->next_ready;
}

/* The down direction reads the retiring upstream, not the current one. */
static inline int
pair_from_retiring(const struct zp_pair *p)
{
	return p->mv != NULL && p->down.src == &p->mv->retiring;
}

/*
 * Each function below that may free the pair (or hand it on to a move or
 * a connect) returns nonzero when it did, and is ZP_MAY_FREE: its caller
 * returns at once then, and an event callback that ends with one checks
 * the pair's invariants when it is still there (pair_check).
 */

/* pair_load.c */

/*
 * May a load move take p: not one that moved for load and was held back
 * ever since; with held, only one held back over its last second.
 */
int	pair_load_may_move(const struct zp_pair *, int held);

/* pair_log.c */

/* Log a pair's end: its line, at the level and rate the end asks for. */
void	pair_log(struct zp_pair *, enum zp_end);

/* Count a pair's end in the statistics it has a counter in. */
void	pair_end_count(struct zp_stats *, enum zp_end);

/* pair.c */

/*
 * The pool had no pipe for the pair or a direction: it copies; said
 * once (and with -v for every connection).
 */
void	pair_no_pipe(struct zp_pair *);

/*
 * Tune an upstream socket: TCP_NODELAY, --keepalive, and under
 * --replay-window a send queue held within the window.
 */
void	pair_sock_tune_upstream(struct zp_ctx *, int fd);

/*
 * Read and drop what waits in a socket's receive queue, so that its
 * close does not reset it; returns how many bytes.
 */
uint64_t pair_sock_discard(int fd);

/*
 * Bytes of a half's send queue its peer has not acknowledged (our FIN
 * too when with_fin); 0 when it cannot tell.
 */
int	pair_sock_unacked(const struct zp_half *, int with_fin);

/* Count what d delivers from now on as upstream idx's. */
void	pair_tally(struct zp_pair *, struct zp_dir *d, int idx);

/* Free a half's events and close its socket; abort: with an RST. */
void	pair_half_close(struct zp_half *, int abort);

/*
 * Both directions are done: close the pair, or let it linger while
 * the survivor of a one-sided failure acknowledges. Returns 1 when the
 * pair was freed.
 */
int	pair_finish(struct zp_pair *) ZP_MAY_FREE;

/*
 * After its directions moved: the timers a half-close asks for, or the
 * end when both are done (pair.c). Returns 1 when the pair was freed.
 */
int	pair_settle(struct zp_pair *) ZP_MAY_FREE;

/*
 * pair_ring.c (--io-uring, experimental): may this newly connected pair
 * relay through the context's ring? Then start it there: 0; -1 when it
 * could not (out of memory: it goes on with the pump's events); 1 when
 * its first requests could not be queued and the pair ended (freed).
 */
int	pair_ring_eligible(const struct zp_pair *);
int	pair_ring_start(struct zp_pair *) ZP_MAY_FREE;

/* The pair closes: its ring requests are cancelled (zp_pair_close). */
void	pair_ring_release(struct zp_pair *);

/*
 * Pump direction d and whatever its failures wake; close the pair or
 * move its stream as they say. Returns 1 when the pair was freed or
 * handed on.
 */
int	pair_run(struct zp_pair *, struct zp_dir *d) ZP_MAY_FREE;

/*
 * Assert what holds of a pair still there after an event was handled
 * (one owner per descriptor; what its state says).
 */
void	pair_check(const struct zp_pair *);

/*
 * The one place the client's FIN changes state (enum zp_fin): asserts
 * the move (OPEN -> HELD -> CARRIED or WATCHED; OPEN after a move, for
 * the next upstream).
 */
void	pair_fin_set(struct zp_pair *, enum zp_fin to);

/* Free a half's two events (its socket stays). */
void	pair_half_events_free(struct zp_half *);

/*
 * The one place a pair's state changes: asserts that from its state the
 * pair may go to `to` (the table in DESIGN.md, "Pair states", is the
 * code's pair_moves[]) and logs it at debug level. Going to the state it
 * is in is no change.
 */
void	pair_set_state(struct zp_pair *, enum zp_pair_state to);

/* A state's name, for the log. */
const char *pair_state_str(enum zp_pair_state);

/* Make a half's two persistent events (not added). Returns 0 or -1. */
int	pair_half_events(struct zp_pair *, struct zp_half *);

/* pair_connect.c */

/*
 * Write the --send-proxy header to the upstream's socket fd and leave it
 * in hdr (ZP_PROXY_MAX bytes), *hlen long. Returns 0, or -1 with errno.
 */
int	pair_send_proxy(struct zp_pair *, int fd, char *hdr, size_t *hlen);

/* Free what the connect phase holds (zp_pair_close). */
void	pair_connect_release(struct zp_pair *);

/*
 * Where to connect to a from (--source): *src NULL (the kernel's
 * choice) or buf. Returns -1 when a is of the other family.
 */
int	pair_source(struct zp_pair *, const struct zp_addr *a,
	    struct zp_addr *buf, const struct zp_addr **src);

/*
 * Choose an upstream not tried yet and connect to it; with none left,
 * spool or end the pair. Returns 1 when the pair was freed (or moved
 * on, once connected).
 */
int	pair_connect_upstream(struct zp_pair *) ZP_MAY_FREE;

/*
 * The client may be relayed: count it under its source, take pipes,
 * start connecting. Returns 1 when the pair was freed (or moved on).
 */
int	pair_begin(struct zp_pair *) ZP_MAY_FREE;

/*
 * Count the client under its source (--max-conns-per-source), once:
 * pair_begin, or a tls@ client's handshake, which holds a descriptor
 * too. Returns 1 when the pair was refused (freed).
 */
int	pair_take_source(struct zp_pair *) ZP_MAY_FREE;

/* pair_header.c */

/*
 * --accept-proxy: read the client's PROXY header first, for
 * --proxy-timeout at most. Returns 1 when the pair was freed.
 */
int	pair_header_start(struct zp_pair *) ZP_MAY_FREE;

/* pair_tls.c */

/*
 * tls@: the client's handshake, within --tls-handshake-timeout of
 * accept; then pair_begin. Returns 1 when the pair was freed (or moved
 * on).
 */
int	pair_tls_start(struct zp_pair *) ZP_MAY_FREE;

/*
 * A pair leaves the handshakes (done, or closing): back in the load
 * when it goes on (counted), out of it already when it closes.
 */
void	pair_tls_unlist(struct zp_pair *, int counted);

/*
 * The client may go on (accepted, its header read): its handshake
 * first when it is a tls@ listener's, else pair_begin. Returns 1 when
 * the pair was freed (or moved on).
 */
int	pair_admitted(struct zp_pair *) ZP_MAY_FREE;

/*
 * The level of a line that a storm of pairs may each say (a local
 * fault, an upstream's failed handshake): warning at most once a second
 * (*last: when it last was; the caller's, per kind), else the
 * connection level. pair_log.c.
 */
int	pair_warn_level(struct timeval *last);

/* pair_uptls.c */

/* Is upstream idx a tls@ one? */
int	pair_upstream_tls(const struct zp_pair *, int idx);

/*
 * Begin the TLS handshake with upstream idx, connected on fd (still its
 * connect's) at address a: the --send-proxy header first, then the
 * ClientHello. done(p, how) is called once it is over, unless the pair
 * clears it first; the upstream's failure is counted and said. Returns
 * what done returned, or 0 while the handshake goes on.
 */
int	pair_uphs_start(struct zp_pair *, struct pair_uphs *, int fd, int idx,
	    const struct zp_addr *a,
	    int (*done)(struct zp_pair *, enum pair_uphs_end)) ZP_MAY_FREE;

/* Give it up: its session and event freed (not its socket). */
void	pair_uphs_clear(struct pair_uphs *);

/* The session of a handshake that is done, for the upstream's half. */
struct zp_tls *pair_uphs_take(struct pair_uphs *);

/*
 * TLS on either side: both directions go through the TLS backend (a
 * record cannot be spliced), for good. Before anything was read.
 */
void	pair_use_tls(struct zp_pair *);

/* pair_spool.c */

/*
 * --spool: the client's stream goes into files. Returns 0, or -1 with
 * errno (ENOSPC: the spool is full); the pair is not freed.
 */
int	pair_spool(struct zp_pair *);

/*
 * --spool: a moving framed stream found no upstream; its stream goes
 * into files from a frame boundary. Returns 0 (spooling), 1 (freed),
 * or -1 with errno when the spool did not take it (ENOSPC: full).
 */
int	pair_spool_moved(struct zp_pair *) ZP_MAY_FREE;

/* pair_move.c */

/*
 * May the stream move to another upstream should this one fail: framed,
 * relaying, its framing whole, its client still sending, another
 * upstream to go to?
 */
int	pair_movable(const struct zp_pair *);

/*
 * Before each pump: what the directions hold back while the stream may
 * move (the up direction's store, the FINs).
 */
void	pair_hold(struct zp_pair *);

/*
 * The client's FIN, held by the up direction: 1 when it may go on to
 * the upstream now; 0 while it waits (the pair timer looks again).
 */
int	pair_fin_release(struct zp_pair *);

/*
 * --stall-timeout: note when the upstream stopped taking the stream's
 * bytes, and arm the timer. Returns 0, or -1 when the timer could not
 * be made.
 */
int	pair_stall_watch(struct zp_pair *);

/*
 * The pair timer, with a stall noted (now: the loop's time): once
 * --stall-timeout passed without progress, the stream moves on.
 * Returns 1 when the pair was handed on.
 */
int	pair_stall_check(struct zp_pair *, const struct timeval *now)
	    ZP_MAY_FREE;

/*
 * One line per move: to the next upstream's address, or NULL when
 * none answered (the end line follows).
 */
void	pair_move_log(struct zp_pair *, const struct zp_addr *to);

/*
 * A framed stream's upstream failed (reason: ZP_MOVE_FAILED or
 * ZP_MOVE_STALLED): close it, connect to another, the stream going on
 * from a frame boundary. Always returns 1 (freed or connecting).
 */
int	pair_move(struct zp_pair *, int reason) ZP_MAY_FREE;

/* Forget a planned move's next upstream. */
void	pair_next_drop(struct zp_pair *);

/*
 * Close the upstream a planned move left (it closed or failed, or
 * timed_out: --drain-timeout); the down direction reads the current one.
 */
void	pair_retire_done(struct zp_pair *, int timed_out);

/*
 * At a boundary sought for a replay: the window goes again to the
 * current upstream, when due. Returns 1 when the pair was freed.
 */
int	pair_rewind(struct zp_pair *) ZP_MAY_FREE;

/*
 * A planned move reached a frame boundary: the next upstream takes the
 * stream, the old one retires. Always returns 1 (handed on).
 */
int	pair_switch(struct zp_pair *) ZP_MAY_FREE;

/* pair_timer.c */

/*
 * The pair's one timer (arg: the pair): lingering, a stall, a held
 * FIN, --max-lifetime, --fin-timeout, --idle-timeout.
 */
void	pair_timer_cb(evutil_socket_t, short, void *);

/*
 * Arm the pair's timer for its earliest deadline (made the first time
 * one is needed). Returns 0, or -1 when it could not be made.
 */
int	pair_timer_update(struct zp_pair *);

#endif
