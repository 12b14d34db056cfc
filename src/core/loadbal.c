/*
 * loadbal.c - --rebalance load: per upstream, what its streams' sums said
 * and since when; the move that follows. See loadbal.h.
 */

#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/loadbal.h"
#include "core/upstream.h"

/* What one upstream's sums say, one second's worth. */
enum lb_seen {
	LB_NONE = 0,		/* no stream seen over a whole second */
	LB_CLEAR,		/* a tenth of them limited at most */
	LB_MIXED,		/* more, fewer than half */
	LB_BEHIND,		/* half of them or more */
};

struct lb_up {
	enum lb_seen	 seen;
	struct timeval	 since;		/* seen so since */
	struct timeval	 last_behind;	/* ever_behind: the last time */
	int		 ever_behind;
	struct timeval	 last_move;	/* a load move from or to it */
};

struct zp_loadbal {
	struct lb_up	 u[ZP_MAX_UPSTREAMS];
};

struct zp_loadbal *
zp_loadbal_new(void)
{
	return calloc(1, sizeof(struct zp_loadbal));
}

void
zp_loadbal_free(struct zp_loadbal *lb)
{
	free(lb);
}

void
zp_loadbal_reset(struct zp_loadbal *lb)
{
	if (lb != NULL)
		memset(lb, 0, sizeof(*lb));
}

void
zp_up_load_add(struct zp_up_load *sum, const struct zp_up_load *l)
{
	sum->streams += l->streams;
	sum->movable += l->movable;
	sum->sampled += l->sampled;
	sum->limited += l->limited;
	sum->own += l->own;
	sum->rwnd_pm += l->rwnd_pm;
	sum->zero_window += l->zero_window;
	sum->notsent += l->notsent;
	sum->unacked += l->unacked;
}

static enum lb_seen
lb_seen(const struct zp_up_load *l)
{
	if (l->sampled == 0)
		return LB_NONE;
	if (l->limited * 10 <= l->sampled)
		return LB_CLEAR;
	return l->limited * 2 >= l->sampled ? LB_BEHIND : LB_MIXED;
}

/* Seconds from a to b. */
static double
lb_secs(const struct timeval *a, const struct timeval *b)
{
	return (double)(b->tv_sec - a->tv_sec) +
	    (double)(b->tv_usec - a->tv_usec) / 1e6;
}

void
zp_loadbal_update(struct zp_loadbal *lb, const struct zp_up_load *load,
    size_t n, const struct timeval *now)
{
	struct lb_up	*u;
	enum lb_seen	 s;
	size_t		 i;

	for (i = 0; i < n && i < ZP_MAX_UPSTREAMS; i++) {
		u = &lb->u[i];
		s = lb_seen(&load[i]);
		if (s != u->seen || !timerisset(&u->since)) {
			u->seen = s;
			u->since = *now;
		}
		if (s == LB_BEHIND) {
			u->last_behind = *now;
			u->ever_behind = 1;
		}
	}
}

void
zp_loadbal_moved(struct zp_loadbal *lb, size_t hi, size_t lo,
    const struct timeval *now)
{
	if (lb == NULL || hi >= ZP_MAX_UPSTREAMS || lo >= ZP_MAX_UPSTREAMS)
		return;
	lb->u[hi].last_move = *now;
	lb->u[lo].last_move = *now;
}

/* Has a move from or to u settled: none within ZP_LOAD_SETTLE_S. */
static int
lb_settled(const struct lb_up *u, const struct timeval *now)
{
	return !timerisset(&u->last_move) ||
	    lb_secs(&u->last_move, now) >= ZP_LOAD_SETTLE_S;
}

/*
 * May upstream i take a stream moved for load: its streams all kept up
 * for ZP_LOAD_CLEAR_S; or it has none seen and was not behind within
 * ZP_LOAD_FORGET_S (one just emptied for falling behind waits).
 */
static int
lb_target(const struct lb_up *u, const struct timeval *now)
{
	if (u->seen == LB_CLEAR)
		return lb_secs(&u->since, now) >= ZP_LOAD_CLEAR_S;
	if (u->seen == LB_NONE)
		return !u->ever_behind ||
		    lb_secs(&u->last_behind, now) >= ZP_LOAD_FORGET_S;
	return 0;
}

int
zp_loadbal_choose(const struct zp_loadbal *lb, const struct zp_upstream *u,
    size_t n, const long *eff, const struct zp_up_load *load,
    const struct timeval *now, int *hip, int *lop)
{
	const struct lb_up	*b;
	size_t			 i;
	int			 hi = -1, lo = -1, primary;

	if (n > ZP_MAX_UPSTREAMS)
		n = ZP_MAX_UPSTREAMS;
	primary = zp_upstream_primary_up(u, n);
	for (i = 0; i < n; i++) {
		b = &lb->u[i];
		if (b->seen == LB_BEHIND && eff[i] > 0 && load[i].movable > 0 &&
		    lb_secs(&b->since, now) >= ZP_LOAD_BEHIND_S &&
		    lb_settled(b, now) &&
		    (hi == -1 || load[i].limited * load[hi].sampled >
		    load[hi].limited * load[i].sampled ||
		    (load[i].limited * load[hi].sampled ==
		    load[hi].limited * load[i].sampled &&
		    load[i].notsent > load[hi].notsent)))
			hi = (int)i;
	}
	if (hi == -1)
		return 0;
	for (i = 0; i < n; i++) {
		if ((int)i == hi || !zp_upstream_takes(&u[i], primary) ||
		    !lb_target(&lb->u[i], now) || !lb_settled(&lb->u[i], now))
			continue;
		/* The fewest streams for its weight: eff / w, undivided. */
		if (lo == -1 || eff[i] * u[lo].weight < eff[lo] * u[i].weight)
			lo = (int)i;
	}
	if (lo == -1)
		return 0;
	*hip = hi;
	*lop = lo;
	return 1;
}

void
zp_loadbal_why(const struct zp_loadbal *lb, const struct zp_upstreams *ups,
    const struct zp_up_load *load, int hi, int lo, const struct timeval *now,
    char *buf, size_t len)
{
	const struct zp_up_load	*h = &load[hi], *l = &load[lo];
	char			 a[ZP_UPSTREAM_NAMELEN], b[ZP_UPSTREAM_NAMELEN];
	char			 to[96];

	if (lb->u[lo].seen == LB_CLEAR)
		snprintf(to, sizeof(to), "%ld of %ld held back, clear for "
		    "%.1fs", l->limited, l->sampled,
		    lb_secs(&lb->u[lo].since, now));
	else
		snprintf(to, sizeof(to), "no stream on it");
	snprintf(buf, len, "%s is behind (%.1fs): %ld of %ld streams held "
	    "back by its receive window, %ld%% of the last second on "
	    "average, %ld at a zero window, %llu bytes not sent, %llu "
	    "unacknowledged; one moves to %s (%s)",
	    zp_upstream_label(ups, (size_t)hi, a, sizeof(a)),
	    lb_secs(&lb->u[hi].since, now), h->limited, h->sampled,
	    h->sampled > 0 ? h->rwnd_pm / h->sampled / 10 : 0,
	    h->zero_window, (unsigned long long)h->notsent,
	    (unsigned long long)h->unacked,
	    zp_upstream_label(ups, (size_t)lo, b, sizeof(b)), to);
}

const char *
zp_loadbal_state(const struct zp_loadbal *lb, size_t i)
{
	if (lb == NULL || i >= ZP_MAX_UPSTREAMS)
		return "-";
	switch (lb->u[i].seen) {
	case LB_CLEAR:	return "ok";
	case LB_MIXED:	return "mixed";
	case LB_BEHIND:	return "behind";
	case LB_NONE:	break;
	}
	return "-";
}
