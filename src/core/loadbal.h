/*
 * loadbal.h - --rebalance load: which upstream's streams fall behind and
 * which one keeps up, from what the kernel says of each stream's upstream
 * socket (TCP_INFO), summed per upstream over the threads; decided with
 * hysteresis, so that a move follows a state that lasted, never one
 * sample. Pure: the caller brings the sums, the upstreams and the time.
 */
#ifndef ZP_LOADBAL_H
#define ZP_LOADBAL_H

#include <sys/time.h>
#include <stddef.h>
#include <stdint.h>

struct zp_upstream;
struct zp_upstreams;

/*
 * One upstream's streams on a thread, sampled over their last second
 * (stream/pair.h, zp_pairs_load); summed over the threads by the root.
 */
struct zp_up_load {
	long		streams;	/* relaying, their upstream connected */
	long		movable;	/* ... that a load move may take */
	long		sampled;	/* ... seen over a whole second on it */
	long		limited;	/* ... held back by its receive window
					   for ZP_LOAD_LIMITED_PM of it (those
					   in own below not counted) */
	long		own;		/* held back ever since their own move
					   for load: their rate, not the
					   collector's (neither sampled nor
					   limited) */
	long		rwnd_pm;	/* the sampled's per mille so held
					   back, summed */
	long		zero_window;	/* ... with bytes for it and a window
					   of 0 at their last look */
	uint64_t	notsent;	/* bytes queued, not sent yet */
	uint64_t	unacked;	/* sent, not acknowledged yet */
};

/*
 * A stream is limited when its upstream's receive window held it back
 * (tcpi_rwnd_limited) for half of the second or more, or is 0 with bytes
 * waiting for it (a zero window, tcpi_snd_wnd): the collector reads
 * slower than the stream comes.
 */
#define ZP_LOAD_LIMITED_PM	500
/*
 * An upstream is behind while at least half of its sampled streams are
 * limited, and clear while a tenth of them at most are; its streams move
 * after ZP_LOAD_BEHIND_S of it. It takes streams once clear for
 * ZP_LOAD_CLEAR_S; or, with none, when it was not behind in the last
 * ZP_LOAD_FORGET_S (an emptied collector is not filled again at once: no
 * flapping). After a move, neither end moves again for ZP_LOAD_SETTLE_S:
 * a stream's figures are a second old, and a moved stream's queued bytes
 * still go to the upstream it left; the next move follows what the last
 * one changed.
 */
#define ZP_LOAD_BEHIND_S	3
#define ZP_LOAD_CLEAR_S		5
#define ZP_LOAD_FORGET_S	60
#define ZP_LOAD_SETTLE_S	2

struct zp_loadbal;

/* Every upstream unseen; NULL when out of memory. */
struct zp_loadbal *zp_loadbal_new(void);
void	zp_loadbal_free(struct zp_loadbal *);

/* Forget what was seen (--rebalance changed): every upstream unseen. */
void	zp_loadbal_reset(struct zp_loadbal *);

/* Add a thread's figures for an upstream to the sum. */
void	zp_up_load_add(struct zp_up_load *sum, const struct zp_up_load *);

/* The sums for the n upstreams, as seen at now. */
void	zp_loadbal_update(struct zp_loadbal *, const struct zp_up_load *,
	    size_t n, const struct timeval *now);

/*
 * The move --rebalance load makes now, if any, among the n upstreams u
 * (as zp_upstream_get() read them): 1 with *hi the upstream
 * behind long enough (the largest share of its streams limited; one with
 * a stream a load move may take) and *lo the
 * one, of those that keep up and take streams, with the fewest for its
 * weight (eff: the streams on each, moves under way counted where they
 * go); else 0.
 */
int	zp_loadbal_choose(const struct zp_loadbal *,
	    const struct zp_upstream *u, size_t n, const long *eff,
	    const struct zp_up_load *, const struct timeval *now, int *hi,
	    int *lo);

/* A load move from hi to lo was handed to a thread at now. */
void	zp_loadbal_moved(struct zp_loadbal *, size_t hi, size_t lo,
	    const struct timeval *now);

/* Why hi gives lo a stream, with the figures, for the log line. */
void	zp_loadbal_why(const struct zp_loadbal *, const struct zp_upstreams *,
	    const struct zp_up_load *, int hi, int lo,
	    const struct timeval *now, char *buf, size_t len);

/* Upstream i as --rebalance load sees it: "behind", "ok", "mixed", "-". */
const char *zp_loadbal_state(const struct zp_loadbal *, size_t i);

#endif
