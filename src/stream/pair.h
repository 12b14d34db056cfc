/*
 * pair.h - a client connection, its upstream connection and the two
 * directions between them: the whole life of one proxied connection.
 *
 * A pair owns its descriptors, events, pipes and buffers; zp_pair_close()
 * is the one function that frees them, safe in any state, and logs the
 * connection's story once.
 */
#ifndef ZP_PAIR_H
#define ZP_PAIR_H

#include <sys/socket.h>
#include <stdint.h>

/*
 * On a function that may free the pair it is given: it returns nonzero
 * when it did (or handed the pair on), and no caller may ignore that.
 */
#define ZP_MAY_FREE	__attribute__((warn_unused_result))

struct zp_ctx;
struct zp_half;

enum zp_pair_state {
	ZP_PAIR_HEADER = 0,	/* --accept-proxy: reading the PROXY header */
	ZP_PAIR_CONNECTING,
	ZP_PAIR_RELAYING,
	ZP_PAIR_LINGERING,	/* one side reset; the survivor acknowledges */
	ZP_PAIR_MOVING,		/* --framing: connecting to the next upstream */
	ZP_PAIR_SPOOLING,	/* --spool: no upstream; the client's stream
				   goes into files */
	ZP_PAIR_HANDSHAKE,	/* tls@: the client's TLS handshake */
};

/* How a pair ended, for the log line. */
enum zp_end {
	ZP_END_CLOSED = 0,	/* both directions finished with a FIN */
	ZP_END_CLIENT_RESET,
	ZP_END_UPSTREAM_RESET,
	ZP_END_CLIENT_ERROR,
	ZP_END_UPSTREAM_ERROR,
	ZP_END_REFUSED,		/* every upstream address refused */
	ZP_END_TIMEOUT,		/* the last upstream address timed out */
	ZP_END_UNREACHABLE,	/* connect failed otherwise */
	ZP_END_NOMEM,
	ZP_END_SHUTDOWN,	/* zproxy is stopping */
	ZP_END_IDLE,		/* --idle-timeout */
	ZP_END_FIN_TIMEOUT,	/* --fin-timeout */
	ZP_END_PROXY_HEADER,	/* the PROXY header could not be sent */
	ZP_END_LOCAL_RESOURCE,	/* out of descriptors, memory or ports here */
	ZP_END_BAD_PROXY_HEADER, /* --accept-proxy: none, bad, long or late */
	ZP_END_DENIED,		/* the header's client: --allow, --deny */
	ZP_END_SOURCE_LIMIT,	/* ... or --max-conns-per-source */
	ZP_END_BAD_DST,		/* -u original: a loop, or not --allow-dst */
	ZP_END_SOURCE_FAMILY,	/* --source: no upstream address of its family */
	ZP_END_SPOOLED,		/* --spool: the client's stream ended, in files */
	ZP_END_SPOOL_FAILED,	/* --spool: a file could not be written */
	ZP_END_SPOOL_FULL,	/* --spool: no upstream, and the spool full */
	ZP_END_TLS_HANDSHAKE,	/* tls@: the client's handshake failed */
	ZP_END_UPSTREAM_TLS,	/* -u tls@: no upstream's handshake ended well
				   (the last one's reason: tls_why) */
};

/* Why a framed stream moved to another upstream. */
enum zp_move_reason {
	ZP_MOVE_FAILED = 0,	/* its upstream reset or failed */
	ZP_MOVE_LIFETIME,	/* --max-lifetime */
	ZP_MOVE_REBALANCE,	/* --rebalance */
	ZP_MOVE_STALLED,	/* its upstream took nothing: --stall-timeout */
	ZP_MOVE_DRAIN,		/* zproxy ctl: its upstream drained, maint */
	ZP_MOVE_CTL,		/* zproxy ctl move */
	ZP_MOVE_LOAD,		/* --rebalance load: its upstream fell behind */
	ZP_MOVE_MAX
};

/*
 * A pair is pair.c's own: other modules hold pointers and call the
 * functions below (its fields are in pair_int.h, for pair.c and its
 * unit tests).
 */
struct zp_pair;


/*
 * Start a pair for an accepted, non-blocking client socket: read its
 * PROXY header first under --accept-proxy, then its TLS handshake (flags
 * ZP_START_TLS: from a tls@ listener); then take pipes (or fall back to
 * copy) and begin connecting upstream. Takes ownership of fd in every
 * case; returns 0, or -1 when the pair was closed already (or, connected
 * at once, moved on: no caller holds the pair either way). The pair
 * counts in ctx->load until it closes; ZP_START_COUNTED: the client
 * counts there already (the root counted it when it handed it to this
 * thread).
 */
int	zp_pair_start(struct zp_ctx *, int fd, const struct sockaddr *,
	    socklen_t, unsigned flags);

/*
 * Start the stream of a UDP source (udp.h): fd is its end of a
 * socketpair whose other end the UDP side writes each datagram into as
 * one frame (framing: LF or OCTET, zp_dgram_framing); src the device's
 * address (len 0: the shared stream of sources beyond
 * --udp-max-sources, which names none), local the UDP listener's (the
 * PROXY header's destination). The header's transport is DGRAM. *id
 * gets the connection's id. Takes fd in every case; returns 0, or -1
 * when the pair closed already (fd with it).
 */
struct zp_addr;
struct zp_feed;
int	zp_pair_start_dgram(struct zp_ctx *, int fd, const struct zp_addr *src,
	    const struct zp_addr *local, int framing, uint64_t *id,
	    struct zp_feed *feed);

/* End a pair in any state, log it, free everything it owns. */
void	zp_pair_close(struct zp_pair *, enum zp_end);

/* Name of an end reason. */
const char *zp_end_str(enum zp_end);

/*
 * The end reason that a dead half stands for, from its errno (h->err): a
 * reset (ECONNRESET, EPIPE, ECONNABORTED) or any other error, of the
 * client (client != 0) or of the upstream.
 */
enum zp_end	zp_half_end(const struct zp_half *, int client);

/* "upstream-failed", "max-lifetime", "rebalance", ... */
const char *zp_move_reason_str(int);

/*
 * May a planned move begin: a framed, relaying stream with another
 * upstream, no move under way and none still closing its old upstream?
 */
int	zp_pair_can_move(const struct zp_pair *);

/*
 * Begin a planned move (--max-lifetime, --rebalance) to upstream idx, or
 * (idx -1) to where the balancer would send this client now; only to
 * another upstream (when that is the one it is on, it stays). The next upstream
 * is connected beside the current one; once it answers, the stream goes
 * on to it from its next frame boundary, and the old one gets a FIN
 * after its last whole frame. Returns 0 when the connect began, -1 when
 * there is nothing to do (the pair is untouched).
 */
int	zp_pair_plan_move(struct zp_pair *, int idx, int reason);

/*
 * A framed stream's lossless close (--idle-timeout, the drain): FIN to
 * the client after what the upstream sent, then read and forward what
 * the client still sends until it closes (or --fin-timeout, the drain's
 * end). end (ZP_END_IDLE, ZP_END_SHUTDOWN) is what it stands for.
 * Returns 0 (winding down), 1 (the pair ended and was freed), or -1 when
 * there is nothing to do (not framed, not relaying, or the client is done
 * already).
 */
int	zp_pair_wind_down(struct zp_pair *, enum zp_end end) ZP_MAY_FREE;

/*
 * The health checks marked upstream idx down: move every framed stream on
 * it that can move to where the balancer sends clients now (a planned
 * move: the next upstream connected first, the switch at a boundary, as
 * the old one may still take bytes). Returns how many moves began.
 */
int	zp_pairs_upstream_down(struct zp_ctx *, int idx);

/*
 * --rebalance, one step over every thread (worker.c, zp_ctx_rebalance):
 * each upstream's open streams (eff[], from its active count), with the
 * moves under way counted where they go (zp_pairs_moving adds -1 and +1
 * to eff[] for each of ctx's, and counts in movable[] its streams that
 * could move, by upstream: each thread's, in the snapshot it publishes);
 * while the busiest upstream that is up holds, for its weight, more than
 * the idlest one would after one stream came to it (equal weights: at
 * least 2 more), or an upstream that is up takes no streams but holds
 * some (a backup once another is up, a weight of 0) -- all of that
 * only when even (--rebalance) -- or an operator drains an upstream that
 * holds streams (zproxy ctl: drain, maint; with or without --rebalance)
 * (zp_rebalance_choose: 1, and which), one framed stream of it moves
 * there, the oldest that can of the first thread that had one
 * (zp_pairs_move_one, on that thread: 1 when a move began).
 */
struct zp_up_load;
void	zp_pairs_moving(struct zp_ctx *, long *eff, long *movable);
int	zp_rebalance_choose(struct zp_ctx *root, const long *eff,
	    const struct zp_up_load *, const struct timeval *now, int *hi,
	    int *lo, int *why, char *text, size_t len);
int	zp_pairs_move_one(struct zp_ctx *, int hi, int lo, int why);

/*
 * --rebalance load (core/loadbal.h), a thread's part: each relaying
 * stream's upstream socket looked at (TCP_INFO, SIOCOUTQ) when its last
 * look is a second old, the figures added to load[] by upstream
 * (pair_load.c). zp_rebalance_choose above makes a load move (why
 * ZP_MOVE_LOAD, text its figures) from every thread's sums, with the
 * root's loadbal; zp_pairs_move_one then takes a stream held back
 * before one that is not, and never one that moved for load and was
 * held back ever since: it is its own rate, not the collector's.
 */
void	zp_pairs_load(struct zp_ctx *, struct zp_up_load *load);

/*
 * zproxy ctl move: begin a move of stream id, if it is one of ctx's, to
 * upstream to (-1: where the balancer would send its client now).
 * Returns 1 when the move began, -1 when the stream is here but cannot
 * move (why says so), 0 when it is not here; why is filled in both
 * first cases.
 */
int	zp_pairs_move_id(struct zp_ctx *, uint64_t id, int to, char *why,
	    size_t len);

/*
 * zproxy ctl show streams: a line (a JSON object, json) per pair of ctx
 * on upstream idx (-1: every one) into out, each ended by a newline.
 */
struct evbuffer;
void	zp_pairs_show(struct zp_ctx *, int idx, int json,
	    struct evbuffer *out);

/*
 * maint: close every unframed stream of ctx on upstream idx, as the drain
 * closes what is left at its deadline (end=shutdown). Returns how many.
 */
int	zp_pairs_close_on(struct zp_ctx *, int idx);

/* "splice", "copy" or "mixed", from the pair's directions. */
const char *zp_pair_mode(const struct zp_pair *);

/*
 * Every open pair: a framed stream's lossless close (zp_pair_wind_down,
 * for the drain); or closed now, with end.
 */
void	zp_pairs_wind_down(struct zp_ctx *, enum zp_end end);
void	zp_pairs_close(struct zp_ctx *, enum zp_end end);

/* How many open pairs relay in each mode (ctx.h), for the metrics. */
struct zp_pair_modes;
void	zp_pairs_modes(struct zp_ctx *, struct zp_pair_modes *);

#endif
