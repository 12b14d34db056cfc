/*
 * pair_timer.c - a pair's one timer (lingering, a stall, a held FIN,
 * --max-lifetime, --fin-timeout, --idle-timeout) and the lossless
 * wind-down of a framed stream that the idle timeout and the drain
 * begin.
 */

#include <sys/socket.h>
#include <stddef.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "stream/pair.h"
#include "stream/pair_int.h"

/*
 * The timer fired: look at a lingering pair again, or close a pair idle
 * for --idle-timeout, or half-closed and idle for --fin-timeout; else
 * wait for the rest.
 */
void
pair_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair		*p = arg;
	struct zp_config	*cfg = p->ctx->cfg;
	struct timeval		 now, dt;
	double			 idle;

	if (p->state == ZP_PAIR_LINGERING) {
		if (pair_finish(p) == 0)
			pair_check(p);
		return;
	}
	zp_clock_now(&now);
	if (timerisset(&p->stall_since) && pair_stall_check(p, &now) != 0)
		return;		/* moved on */
	if (p->fin == ZP_FIN_HELD && p->state == ZP_PAIR_RELAYING) {
		if (p->fin_poll_ms < 200)
			p->fin_poll_ms *= 2;
		/* The held FIN: pair_run asks pair_fin_release again. */
		if (pair_run(p, &p->up) != 0)
			return;
	}
	if (cfg->max_lifetime > 0 && p->state == ZP_PAIR_RELAYING) {
		timersub(&now, &p->up_since, &dt);
		if (dt.tv_sec + dt.tv_usec / 1e6 >= cfg->max_lifetime) {
			/* Moved or not, the next look is a lifetime away. */
			p->up_since = now;
			(void)zp_pair_plan_move(p, -1, ZP_MOVE_LIFETIME);
		}
	}
	timersub(&now, &p->last_active, &dt);
	idle = dt.tv_sec + dt.tv_usec / 1e6;
	if (cfg->fin_timeout > 0 && timerisset(&p->half_closed) &&
	    idle >= cfg->fin_timeout) {
		zp_pair_close(p, ZP_END_FIN_TIMEOUT);
		return;
	}
	if (cfg->idle_timeout > 0 && idle >= cfg->idle_timeout &&
	    !p->winding) {
		/* A framed stream is closed from the client's side. */
		switch (zp_pair_wind_down(p, ZP_END_IDLE)) {
		case -1:
			zp_pair_close(p, ZP_END_IDLE);
			return;
		case 1:
			return;	/* it ended */
		}
	}
	if (pair_timer_update(p) == -1)
		zp_pair_close(p, ZP_END_NOMEM);
}

/*
 * Arm the timer for the earliest of the idle and fin deadlines, both
 * counted from the last byte moved (the fin one only once half-closed,
 * like HAProxy's client-fin/server-fin), and --max-lifetime's, counted
 * from the connect to the current upstream. Traffic only moves last_active:
 * the timer is re-armed when it fires early, not on every byte, so the
 * hot path pays nothing for it. The timer is made the first time a pair
 * needs one. Returns 0, or -1 when it could not be made.
 */
int
pair_timer_update(struct zp_pair *p)
{
	struct zp_config	*cfg = p->ctx->cfg;
	struct timeval		 now, dt;
	double			 limit = 0, wait;

	if (cfg->idle_timeout > 0)
		limit = cfg->idle_timeout;
	if (cfg->fin_timeout > 0 && timerisset(&p->half_closed) &&
	    (limit == 0 || cfg->fin_timeout < limit))
		limit = cfg->fin_timeout;
	if (limit == 0 && cfg->max_lifetime == 0 &&
	    !timerisset(&p->stall_since) && p->fin != ZP_FIN_HELD)
		return 0;
	if (p->timer == NULL && (p->timer = evtimer_new(p->ctx->base,
	    pair_timer_cb, p)) == NULL)
		return -1;
	zp_clock_now(&now);
	timersub(&now, &p->last_active, &dt);
	wait = limit > 0 ? limit - (dt.tv_sec + dt.tv_usec / 1e6) : 86400;
	/* --max-lifetime counts from the connect to the current upstream. */
	if (cfg->max_lifetime > 0 && p->up.fr != NULL) {
		timersub(&now, &p->up_since, &dt);
		if (cfg->max_lifetime - (dt.tv_sec + dt.tv_usec / 1e6) < wait)
			wait = cfg->max_lifetime - (dt.tv_sec +
			    dt.tv_usec / 1e6);
	}
	/* A held FIN is looked at again soon. */
	if (p->fin == ZP_FIN_HELD && p->fin_poll_ms / 1000.0 < wait)
		wait = p->fin_poll_ms / 1000.0;
	/* --stall-timeout counts from when the upstream stopped taking. */
	if (timerisset(&p->stall_since)) {
		timersub(&now, &p->stall_since, &dt);
		if (cfg->stall_timeout - (dt.tv_sec + dt.tv_usec / 1e6) < wait)
			wait = cfg->stall_timeout - (dt.tv_sec +
			    dt.tv_usec / 1e6);
	}
	dt = zp_seconds_tv(wait < 0.001 ? 0.001 : wait);
	evtimer_add(p->timer, &dt);
	return 0;
}

/* A framed stream's lossless close; see pair.h. */
int
zp_pair_wind_down(struct zp_pair *p, enum zp_end end)
{
	struct zp_ctx	*ctx = p->ctx;

	/* A spooling client hears a FIN; what it still sends is kept. */
	if (p->state == ZP_PAIR_SPOOLING && !p->winding) {
		p->winding = end;
		if (shutdown(p->client.fd, SHUT_WR) == 0)
			p->client.wshut = 1;
		return 0;
	}
	/* A client that said all it had needs no telling. */
	if (p->up.fr == NULL || p->state != ZP_PAIR_RELAYING || p->up.done)
		return -1;
	if (p->winding)
		return 0;
	p->winding = end;
	pair_next_drop(p);
	/* Not "conn=": scripts count those as connection lines. */
	zp_log(ctx->log, ZP_LOG_CONN, "connection %llu winds down (%s): a "
	    "FIN to the client, what it still sends is forwarded",
	    (unsigned long long)p->id, end == ZP_END_IDLE ? "idle-timeout" :
	    "shutdown");
	/*
	 * The fin timer counts from here: the idle time that led here is
	 * not the client's time to finish.
	 */
	zp_clock_now(&p->last_active);
	if (p->down.done)
		return 0;
	/* Nothing more from the upstream: deliver what is here, then FIN. */
	if (pair_from_retiring(p))
		pair_retire_done(p, 0);
	p->down.eof = 1;
	return pair_run(p, &p->down);
}

/* Every open pair winds down, or closes; see pair.h. */
void
zp_pairs_wind_down(struct zp_ctx *ctx, enum zp_end end)
{
	struct zp_pair	*p, *next;

	for (p = TAILQ_FIRST(&ctx->pairs); p != NULL; p = next) {
		next = TAILQ_NEXT(p, entry);
		if (zp_pair_wind_down(p, end) == 0)
			pair_check(p);
	}
}
