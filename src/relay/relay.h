/*
 * relay.h - one direction of a pair, and the contract of a data-path
 * backend (splice or copy).
 *
 * The relay loop (zp_dir_pump in relay.c) is written once; a backend only
 * knows how to move bytes from the source socket into its store (a pipe, a
 * buffer) and from its store to the destination socket.
 */
#ifndef ZP_RELAY_H
#define ZP_RELAY_H

#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/framing.h"
#include "lib/pipepool.h"
#include "lib/replay.h"

struct evbuffer;
struct zp_bufcache;
struct zp_dir;
struct zp_ctx;
struct zp_log;
struct zp_mirror_set;

/* fill() result that asks the relay loop to switch this direction to copy. */
#define ZP_FILL_FALLBACK	(-2)
/*
 * fill() result of a framed splice direction at an empty pipe whose next
 * frame is small: copy again, and splice at the next bulk read.
 */
#define ZP_FILL_LAZY		(-3)

struct zp_relay_ops {
	const char	*name;

	/*
	 * The store is a pipe (d->pipe): its bytes cannot be looked at
	 * without reading them, so the framer follows what enters the store
	 * (marks[] says where frames end) and a move must read it out first.
	 * 0: a buffer (d->buf), whose framer follows what is delivered.
	 */
	unsigned	 piped:1;

	/*
	 * Move at most `max` bytes from d->src into the store. Returns the
	 * bytes moved (> 0), 0 on EOF, -1 with errno set (EAGAIN: nothing
	 * more now; the backend sets d->full when its store is what stopped
	 * it), or ZP_FILL_FALLBACK when the kernel refuses this kind of
	 * transfer before any byte moved (only splice). Sets d->drained when
	 * a short read says the socket is most likely empty (the pump knows
	 * better when src->rdhup says a FIN waits behind the bytes).
	 */
	ssize_t	(*fill)(struct zp_dir *, size_t max);

	/*
	 * Move stored bytes to d->dst. Returns bytes moved (> 0), or -1 with
	 * errno set (EAGAIN: destination full). Never called when the store
	 * is empty.
	 */
	ssize_t	(*flush)(struct zp_dir *);

	/* Bytes held in the store. */
	size_t	(*pending)(const struct zp_dir *);

	/* Give back the store (pipe to the pool, buffer to free()). */
	void	(*release)(struct zp_ctx *, struct zp_dir *);

	/*
	 * The store is empty at the end of a pass: drop what an idle
	 * direction need not hold (copy frees its buffer). May be NULL.
	 */
	void	(*trim)(struct zp_dir *);
};

extern const struct zp_relay_ops zp_relay_splice;
extern const struct zp_relay_ops zp_relay_copy;
/* Copy's store; halves with a TLS session (h->tls) go through it. */
extern const struct zp_relay_ops zp_relay_tls;

/*
 * The one place a direction changes backend: the old store must be empty
 * (asserted; never bytes in two stores) and given back by the caller
 * first. Both stores' fields are left as they are.
 */
void	zp_dir_set_backend(struct zp_dir *, const struct zp_relay_ops *);

/* How many octet frame ends a framed pipe holds at most. */
#define ZP_MARKS	64

/*
 * An octet body shorter than this is copied, not spliced (unless
 * --splice-min is 0): each spliced frame costs a peek and a splice of
 * its own, and below about this size a copy of many frames at once is
 * both faster and cheaper (docs/PERFORMANCE.md, "Framing").
 */
#define ZP_OCTET_SPLICE_MIN	(64 * 1024)

/* The body size from which an octet direction splices; 0: always. */
size_t	zp_octet_splice_min(const struct zp_dir *);

/*
 * The framing of a direction (--framing: client -> upstream only). In
 * copy mode the framer follows the bytes delivered (fed as they are
 * sent); in splice mode it follows the bytes stored (fed or skipped as
 * they enter the pipe), and for octet framing marks[] holds the stream
 * offsets of the frame ends still in the pipe, so that the boundaries of
 * what was delivered are known without reading the pipe. The two meet
 * where the store is empty, which is where a direction changes backend.
 */
/*
 * A framed direction's boundary work, changed only by zp_dframe_seek()
 * and zp_dframe_cut(), which assert the move (docs/DESIGN.md, "Framed
 * direction states"). Seeking and cutting are independent asks: a seek
 * may come while a cut is under way, and is then done where the cut
 * ends, at a boundary.
 */
enum zp_fr_state {
	ZP_FR_RELAYING,		/* frame after frame */
	ZP_FR_SEEKING,		/* a planned move or a rewind waits: deliver
				   up to the next boundary, nothing after */
	ZP_FR_CUTTING,		/* an unplanned move came mid-frame: drop the
				   rest of that frame */
	ZP_FR_CUT_SEEK,		/* cutting, and a seek was asked meanwhile */
};

struct zp_dframe {
	struct zp_framer f;
	uint64_t	 sent;		/* stream offset of the next byte out */
	uint64_t	 last_mark;	/* the last boundary delivered */
	uint64_t	 marks[ZP_MARKS]; /* a ring: frame ends in the pipe */
	unsigned	 mhead;
	unsigned	 mcount;
	uint64_t	 frames;	/* frames delivered, to every upstream */
	uint64_t	 cut;		/* bytes dropped to reach a boundary */
	enum zp_fr_state state;		/* zp_dframe_seek(), zp_dframe_cut() */
	unsigned	 hold:1;	/* dst dies: keep the store, the pair moves
					   (the pair's policy, set before each
					   pump: pair_hold()) */
	unsigned	 told:1;	/* its framing error was logged */
	unsigned	 tail_delim:1;	/* the byte before tail_at ends a frame */
	uint64_t	 tail_at;	/* lf, nul spliced: where the last byte
					   of a pipe that emptied was looked at */
	int		 tee_rfd;	/* the context's tee_pipe, or -1 */
	int		 tee_wfd;
	struct zp_replay *rp;		/* --replay-window, or NULL */
	size_t		 teed;		/* splice: bytes at the head of the
					   pipe the replay holds already */
	uint64_t	 replayed;	/* bytes sent again after moves */
	struct zp_log	*log;		/* for its moves at debug level; NULL */
	uint64_t	 id;		/* its connection's, in those lines */
};

/* Ask for a seek, or drop it (the boundary was reached or not needed). */
void	zp_dframe_seek(struct zp_dframe *, int on);

/* Begin or end a cut to the next boundary. */
void	zp_dframe_cut(struct zp_dframe *, int on);

/* Delivery stops at the next boundary (SEEKING, or CUT_SEEK). */
static inline int
zp_dframe_seeking(const struct zp_dframe *fr)
{
	return fr->state == ZP_FR_SEEKING || fr->state == ZP_FR_CUT_SEEK;
}

/* The rest of a frame is being dropped (CUTTING, or CUT_SEEK). */
static inline int
zp_dframe_cutting(const struct zp_dframe *fr)
{
	return fr->state == ZP_FR_CUTTING || fr->state == ZP_FR_CUT_SEEK;
}

/*
 * Bytes a half takes in before its socket's: a UDP
 * source's frames, handed over in memory instead of through the socket
 * pair. Shared by the producer (which owns buf) and the half; each
 * detaches (buf or half to NULL) and drops its reference as it goes.
 */
struct zp_feed {
	struct evbuffer	*buf;
	struct zp_half	*half;
	int		 refs;
	void		(*detached)(void *); /* the producer writes what buf
					   holds to the socket from now on */
	void		*arg;
};

struct zp_feed	*zp_feed_new(struct evbuffer *);
void		 zp_feed_unref(struct zp_feed *);
/* The producer added bytes: wake the half's read, if it reads. */
void		 zp_feed_kick(struct zp_feed *);
/*
 * The half reads only its socket from now on (the spool's writer reads
 * it): the producer is told to write what the feed holds there. The
 * producer writes to the socket only once the half let go of the feed,
 * so the socket's bytes always follow what the half took from it.
 */
struct zp_half;
void		 zp_half_feed_detach(struct zp_half *);
/*
 * The half lets go of the feed, whose bytes stay with the producer: the
 * half closes, or the producer is about to write to the socket.
 */
void		 zp_half_feed_drop(struct zp_half *);

/* One socket of a pair, and its two events. */
struct zp_tls;
struct zp_half {
	int		 fd;
	struct zp_feed	*feed;		/* or NULL: the socket only */
	struct zp_tls	*tls;		/* or NULL: no TLS on it (the
					   direction's ops are then tls) */
	struct event	*rev;		/* read, EV_PERSIST */
	struct event	*wev;		/* write, EV_PERSIST; NULL until a write
					   first falls short (most never do) */
	void		(*wcb)(int, short, void *); /* wev's callback (its
					   argument and base are rev's) */
	unsigned	 ron:1;		/* rev is added */
	unsigned	 won:1;		/* wev is added */
	unsigned	 dead:1;	/* reset or failed: no more I/O */
	unsigned	 wshut:1;	/* shut down for writing (FIN sent) */
	unsigned	 fin:1;		/* by our shutdown(): SIOCOUTQ counts it */
	unsigned	 rdhup:1;	/* the peer's FIN is queued (EV_CLOSED) */
	unsigned	 wblocked:1;	/* a write fell short: wait for wev */
	int		 err;		/* errno that killed it */
};

/*
 * Traffic counters that directions add to as they deliver, besides their
 * own: the process's and each upstream's. Whoever reads them reads these,
 * never the pairs.
 */
struct zp_tally {
	uint64_t	bytes;		/* delivered */
	uint64_t	spliced;	/* of which through a pipe */
	uint64_t	frames;		/* --framing: messages delivered */
};

/* The tallies a direction adds to: [0] the process's, [1] its upstream's. */
#define ZP_DIR_TALLIES	2

/* One direction: bytes from src to dst. */
struct zp_dir {
	struct zp_half			*src;
	struct zp_half			*dst;
	const struct zp_relay_ops	*ops;

	/* splice store (pipe.data: the bytes in it) */
	struct zp_pipe			 pipe;

	/* copy store */
	char				*buf;
	size_t				 bufsize;
	struct zp_bufcache		*bufs;	/* the context's; NULL: none */
	size_t				 splice_min; /* --splice-min */
	size_t				 flush_max; /* 0, or flush at most this */
	size_t				 off;	/* first unsent byte */
	size_t				 len;	/* unsent bytes */

	uint64_t			 bytes;	/* delivered to dst */
	uint64_t			 spliced; /* of which through the pipe
						    (counted by splice_flush) */
	uint64_t			 discarded; /* read after dst died */
	struct zp_tally			*tally[ZP_DIR_TALLIES]; /* NULL: none */
	unsigned			 full:1; /* store can take no more */
	unsigned			 eof:1;	/* src is done */
	unsigned			 shut:1; /* dst got SHUT_WR */
	unsigned			 done:1; /* nothing more to do */
	unsigned			 fellback:1; /* splice refused, no pipe, or
						    a UDP source's stream (its
						    bytes are in memory): copy */
	unsigned			 drained:1; /* src looked empty; a hint */
	unsigned			 lazy:1; /* copies until bulk, then splices */
	unsigned			 bulk:1; /* a lazy read showed bulk */
	unsigned			 hold_fin:1; /* src's EOF is not carried:
						    the pair moves (down) */
	unsigned			 fin_wait:1; /* dst's close_notify waits
						    for room (TLS) */
	struct zp_dframe		*fr;	/* NULL: a plain byte relay */
	struct zp_mirror_set		*mir;	/* --mirror: what src sends
						   goes there too; NULL */
};

/* What a pump left behind, for the pair to act on (bits). */
#define ZP_PUMP_DEAD		0x1	/* a half died: the other direction must run */
#define ZP_PUMP_FELLBACK	0x2	/* splice was refused: now copy */
#define ZP_PUMP_NOPIPE		0x4	/* bulk, but the pool had no pipe */
#define ZP_PUMP_MOVE		0x8	/* the upstream is gone and the stream
					   is framed: the pair moves it */
#define ZP_PUMP_BOUNDARY	0x10	/* seeking: delivered up to a frame
					   boundary, nothing after it */
#define ZP_PUMP_SRC_FIN		0x20	/* hold_fin: the source ended and
					   everything it sent is delivered */

/*
 * Move bytes for one direction until the source is empty, the store is
 * full, the destination can take no more, or `budget` bytes were read.
 * After a short write the destination is not written again until its
 * write event clears dst->wblocked: a pump woken by the source only
 * reads into the store.
 * Then turn src's read event and dst's write event on or off to match.
 * A lazy direction (copy ops, d->lazy) takes a pipe from the pool and
 * splices from then on once one read brought --splice-min bytes (or all
 * the buffer had room for) and its buffer is flushed; with no pipe to be
 * had it stays copy for good (ZP_PUMP_NOPIPE).
 * A refused splice switches the direction to copy (ZP_PUMP_FELLBACK).
 * An error marks the failing half dead (ZP_PUMP_DEAD). A direction
 * whose source died reads on until the source says EOF or an error (the
 * kernel keeps what it acknowledged readable after a reset), delivers
 * everything, then shuts its destination. One whose destination died
 * drops what it holds and from then on reads its source and throws the
 * bytes away until EOF: the survivor can go on sending and reading what
 * is still on its way to it, and its receive queue stays empty, so that
 * closing its socket later does not reset the bytes queued for it.
 * A direction that holds (the pair may move a framed stream instead)
 * keeps its store when its destination fails and says ZP_PUMP_MOVE
 * (d->fr->hold), or carries no FIN from a source that ended, saying
 * ZP_PUMP_SRC_FIN once everything it sent is delivered (d->hold_fin).
 * One that seeks (zp_dframe_seeking(d->fr): a planned move) delivers up to the next frame boundary and nothing after it, and
 * says ZP_PUMP_BOUNDARY: copy mode reads on, splice mode ends the octet
 * frame it is in, and a blind lf pipe takes no more, empties, and copies
 * on to find the newline.
 * d->done is set when the direction has nothing more to deliver. A FIN
 * is carried with shutdown(2), except when the source was shut for
 * writing already: the other direction is over, so the caller closes
 * both sockets now and close(2) sends the FIN. What it delivered is
 * added to d->tally[]. Returns ZP_PUMP_* bits.
 */
int	zp_dir_pump(struct zp_ctx *, struct zp_dir *, size_t budget);

/*
 * A framed direction (d->fr) whose destination is gone or done, for
 * another destination: keep what the store holds from the first frame
 * boundary at or after the last byte delivered, as a copy-mode buffer,
 * and drop what comes before it; a frame that goes on past the store is
 * dropped as the rest of it arrives (fr->cutting), so the next
 * destination gets whole frames only. The direction copies on, and
 * splices again at the next bulk read when it was splicing. Returns 0, or
 * -1 with errno: ENOMEM, EIO when the pipe could not be read, EPROTO when
 * the framing failed before a boundary came (the stream cannot go on).
 */
int	zp_dir_move(struct zp_ctx *, struct zp_dir *);

/*
 * A framed direction at a frame boundary (a seek met it), whose
 * earlier destination may have lost what it was sent: send the replay
 * window again, to the current destination, from its first boundary,
 * before what the store holds (at-least-once: what this destination had
 * already comes twice). Returns 0, 1 when there was nothing to send
 * again (no --replay-window, or no boundary in it), or -1 with errno.
 */
int	zp_dir_rewind(struct zp_ctx *, struct zp_dir *);

/*
 * Framed stream bookkeeping of the backends: n bytes went out, from the
 * pipe (sent: marks delivered are counted) or from buf (seen: fed to the
 * framer, which follows delivery in copy mode).
 */
void	zp_dframe_sent(struct zp_dframe *, size_t n);
void	zp_dframe_seen(struct zp_dframe *, const void *buf, size_t n);

/*
 * Drop n bytes from the front of a copy store, fed to the framer and
 * counted as cut: they belong to a frame whose start went to the old
 * destination.
 */
void	zp_dir_cut(struct zp_dir *, size_t n);

/* An octet frame ended at stream offset off, in the pipe. */
void	zp_dframe_mark(struct zp_dframe *, uint64_t off);

/*
 * At close: n of the bytes counted as delivered never will be (a reset
 * dropped them); taken off the direction's counts and its tallies.
 */
void	zp_dir_uncount(struct zp_dir *, uint64_t n);

/* Give back the store and clear the direction's events. */
void	zp_dir_release(struct zp_ctx *, struct zp_dir *);

/*
 * Bytes a half has for its reader that no socket event will announce: a
 * UDP source's feed, what OpenSSL decrypted or buffered (relay_half.c).
 */
int	zp_half_holds(const struct zp_half *);

/*
 * Add or delete an event only when its state changes. The write event is
 * created the first time it is wanted (with h->wcb, on rev's base and
 * argument): an idle connection holds none. Returns 0, or -1 (ENOMEM)
 * when it could not be: the caller gives the half up.
 */
void	zp_half_want_read(struct zp_half *, int);
int	zp_half_want_write(struct zp_half *, int);

#endif
