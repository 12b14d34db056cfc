/*
 * pair_load.c - --rebalance load, a thread's part: each stream's upstream
 * socket looked at once a second at most (what its receive window held
 * back, what waits in its send queue), summed by upstream for the
 * thread's snapshot; and which stream a load move may take. The choice
 * itself is the root's (core/loadbal.h). See pair.h.
 */

#include <sys/queue.h>
#include <sys/time.h>
#include <stdint.h>
#include <string.h>

#include "lib/clock.h"
#include "core/loadbal.h"
#include "core/net.h"
#include "relay/ctx.h"
#include "stream/pair.h"
#include "stream/pair_int.h"

/*
 * A look a second after the last at the earliest: a thread publishes its
 * snapshot every second, and a timer that fires a little early must not
 * skip a second.
 */
#define LOAD_LOOK_MS	900

/* Held back over the last second: by time, or by a window of 0 now. */
static int
pair_load_limited(const struct pair_load *l)
{
	return l->sampled && (l->pm >= ZP_LOAD_LIMITED_PM || l->zero);
}

/* Look at p's upstream socket if its last look is old enough. */
static void
pair_load_look(struct zp_pair *p, const struct timeval *now)
{
	struct pair_load	*l = &p->load;
	struct zp_sock_load	 s;
	struct timeval		 d;
	uint64_t		 us, rwnd;
	int			 outq;

	if (l->moves != p->moves) {
		/* Another upstream: its counters start from 0. */
		l->moved = p->mv != NULL && p->mv->move_reason == ZP_MOVE_LOAD;
		l->moves = p->moves;
		l->sampled = 0;
		timerclear(&l->at);
	}
	timerclear(&d);		/* since the last look, if any */
	if (timerisset(&l->at)) {
		timersub(now, &l->at, &d);
		if (d.tv_sec * 1000 + d.tv_usec / 1000 < LOAD_LOOK_MS)
			return;
	}
	if (zp_sock_load(p->upstream.fd, &s) == -1)
		return;		/* a kernel without the figures: never behind */
	outq = zp_sock_outq(p->upstream.fd);
	l->notsent = s.notsent;
	l->zero = s.zero_window && s.notsent > 0;
	l->unacked = outq > (int)s.notsent ? (uint32_t)outq - s.notsent : 0;
	if (timerisset(&l->at)) {
		us = (uint64_t)d.tv_sec * 1000000 + (uint64_t)d.tv_usec;
		rwnd = s.rwnd_us - l->rwnd_us;
		l->pm = us > 0 ? (int)(rwnd >= us ? 1000 : rwnd * 1000 / us) :
		    0;
		l->sampled = 1;
		if (!pair_load_limited(l))
			l->moved = 0;
	}
	l->at = *now;
	l->rwnd_us = s.rwnd_us;
}

void
zp_pairs_load(struct zp_ctx *ctx, struct zp_up_load *load)
{
	struct zp_pair		*p;
	struct zp_up_load	*u;
	struct timeval		 now;

	zp_clock_now(&now);
	TAILQ_FOREACH(p, &ctx->pairs, entry) {
		if (p->state != ZP_PAIR_RELAYING || p->up_idx < 0 ||
		    p->upstream.fd == -1 || p->upstream.dead)
			continue;
		pair_load_look(p, &now);
		u = &load[p->up_idx];
		u->streams++;
		if (zp_pair_can_move(p) && pair_load_may_move(p, 0))
			u->movable++;
		if (!p->load.sampled)
			continue;
		u->notsent += p->load.notsent;
		u->unacked += p->load.unacked;
		/* Its own rate holds it back, wherever it goes. */
		if (p->load.moved) {
			u->own++;
			continue;
		}
		u->sampled++;
		u->rwnd_pm += p->load.pm;
		if (pair_load_limited(&p->load))
			u->limited++;
		if (p->load.zero)
			u->zero_window++;
	}
}

int
pair_load_may_move(const struct zp_pair *p, int held)
{
	/* Not looked at on this upstream yet: nothing held back seen. */
	if (p->load.moves != p->moves)
		return !held && (p->mv == NULL ||
		    p->mv->move_reason != ZP_MOVE_LOAD);
	if (p->load.moved)
		return 0;
	return !held || pair_load_limited(&p->load);
}
