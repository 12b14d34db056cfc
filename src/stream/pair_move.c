/*
 * pair_move.c - moves of a framed stream to another upstream: when its
 * upstream fails or stalls (--stall-timeout), and planned ones
 * (--max-lifetime, --rebalance, the health checks) that switch at a
 * frame boundary and retire the old upstream; the held FIN; which move
 * --rebalance makes.
 */

#include <sys/socket.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "lib/proxyproto.h"
#include "tls/tls_io.h"

/*
 * Of what was written to the upstream, how much its kernel did not
 * acknowledge: lost with it unless it comes back. After a reset the send
 * queue is gone (SIOCOUTQ says 0), but the count of bytes acknowledged
 * stays.
 */
static uint64_t
upstream_unacked(const struct zp_pair *p)
{
	uint64_t	sent = p->up_sent + (p->up.bytes - p->up_base);
	uint64_t	acked;

	/* TLS: the kernel counts records, not the bytes counted here. */
	if (p->upstream.fd == -1 || p->upstream.tls != NULL ||
	    zp_sock_acked(p->upstream.fd, &acked) == -1)
		return (uint64_t)pair_sock_unacked(&p->upstream, 0);
	return acked >= sent ? 0 : sent - acked;
}

/*
 * May the pair move its stream to another upstream when this one fails?
 * Only a framed stream whose framing holds, whose client is there and
 * still has bytes to deliver, and with another upstream to go to (not
 * one upstream, not -u original): else it ends as without framing.
 */
static int
pair_leavable(const struct zp_pair *p)
{
	return p->up.fr != NULL && p->state == ZP_PAIR_RELAYING &&
	    zp_framer_error(&p->up.fr->f, NULL) == NULL &&
	    !p->client.dead && zp_upstreams_count(p->ctx->ups) > 1 &&
	    !p->ctx->cfg->original;
}

int
pair_movable(const struct zp_pair *p)
{
	return pair_leavable(p) && !p->up.done;
}

/*
 * Before each pump: may the stream move (the up direction keeps its
 * store when the upstream fails), and does the down direction carry a
 * FIN (not while the stream may move, nor the FIN of an old upstream a
 * planned move left: the client's stream goes on)?
 */
void
pair_hold(struct zp_pair *p)
{
	int	movable, m;

	if (p->up.fr == NULL)
		return;
	movable = pair_movable(p);
	m = movable && !p->winding;
	p->up.fr->hold = m;
	p->down.hold_fin = !p->winding && (m || pair_from_retiring(p));
	/*
	 * The client's FIN waits while what it sent may need sending again,
	 * in a wind-down too: the drain must not lose it to a stalled
	 * collector.
	 */
	p->up.hold_fin = movable && (p->fin == ZP_FIN_OPEN ||
	    p->fin == ZP_FIN_HELD) &&
	    (p->ctx->cfg->stall_timeout > 0 || pair_retiring(p));
}

/*
 * --stall-timeout starts watching the upstream from now: what it has
 * acknowledged so far, so that the pair timer can tell progress.
 */
static void
pair_stall_begin(struct zp_pair *p)
{
	p->stall_since = p->last_active;
	if (zp_sock_acked(p->upstream.fd, &p->stall_acked) == -1)
		p->stall_acked = 0;
}

/*
 * The client's FIN (held by the up direction) may go on to the upstream
 * once nothing it sent may have to be sent again: the upstream has
 * acknowledged everything (a FIN queued behind bytes a stalled collector
 * never takes would leave the client waiting on it, and the bytes lost
 * when the pair ends), and no retiring upstream may still want a replay
 * (pair_retire_done). Meanwhile the pair timer looks again, sooner at
 * first (5 ms, doubling to 200 ms), and --stall-timeout watches the
 * upstream as when a write blocks. Returns 1 when the FIN may go now.
 */
int
pair_fin_release(struct zp_pair *p)
{
	if (p->fin == ZP_FIN_CARRIED || p->fin == ZP_FIN_WATCHED)
		return 1;	/* carried already */
	if (!pair_retiring(p) && pair_sock_unacked(&p->upstream, 0) <= 0) {
		timerclear(&p->stall_since);
		/*
		 * Acknowledged is not read: a stopped collector's kernel
		 * takes a whole receive buffer. One that does not close
		 * within --stall-timeout of the FIN has stalled too.
		 */
		if (p->ctx->cfg->stall_timeout > 0) {
			pair_fin_set(p, ZP_FIN_WATCHED);
			zp_clock_now(&p->stall_since);
		} else
			pair_fin_set(p, ZP_FIN_CARRIED);
		return 1;
	}
	if (p->fin != ZP_FIN_HELD) {
		pair_fin_set(p, ZP_FIN_HELD);
		p->fin_poll_ms = 5;
		pair_stall_begin(p);
	}
	return 0;
}

/*
 * --stall-timeout: note when the upstream of a framed stream stopped
 * taking its bytes (zproxy holds some it cannot write) and what it had
 * acknowledged then; the pair timer looks again once the timeout has
 * passed (pair_stall_check). No system call until a write blocked: the
 * hot path pays nothing. Returns 0, or -1 when the timer could not be
 * made.
 */
int
pair_stall_watch(struct zp_pair *p)
{
	if (p->ctx->cfg->stall_timeout <= 0 || p->up.fr == NULL ||
	    p->state != ZP_PAIR_RELAYING)
		return 0;
	if (p->fin == ZP_FIN_HELD || p->fin == ZP_FIN_WATCHED)
		return pair_timer_update(p);
	if (!p->upstream.wblocked || p->up.done ||
	    p->up.ops->pending(&p->up) == 0) {
		timerclear(&p->stall_since);
		return 0;
	}
	if (timerisset(&p->stall_since))
		return 0;
	pair_stall_begin(p);
	return pair_timer_update(p);
}

/*
 * The pair timer, with a stall noted: once --stall-timeout has passed,
 * an upstream that acknowledged something meanwhile is watched again
 * from now; one that did not has failed (a stopped collector, a full
 * disk: its window stays shut), and the stream moves on as from any
 * failed upstream, its replay window sent again to the next one. The
 * stalled one is reset, not closed: what it holds of a message cut short
 * must not reach it later. Returns 1 when the pair was handed on.
 */
int
pair_stall_check(struct zp_pair *p, const struct timeval *now)
{
	static const struct linger	 rst = { 1, 0 };
	struct zp_ctx			*ctx = p->ctx;
	struct timeval			 dt;
	uint64_t			 acked;
	char				 buf[ZP_ADDRSTRLEN];

	timersub(now, &p->stall_since, &dt);
	if (p->state != ZP_PAIR_RELAYING || ctx->cfg->stall_timeout <= 0 ||
	    dt.tv_sec + dt.tv_usec / 1e6 < ctx->cfg->stall_timeout)
		return 0;
	if (p->fin == ZP_FIN_WATCHED) {
		/* Its FIN went: it had everything, and did not close. */
		timerclear(&p->stall_since);
		if (!pair_leavable(p))
			return 0;
		zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: the upstream "
		    "%s did not close within %.3gs (--stall-timeout) of the "
		    "client's FIN: it has failed",
		    (unsigned long long)p->id, zp_addr_str(&p->up_addr, buf,
		    sizeof(buf)), ctx->cfg->stall_timeout);
		goto failed;
	}
	if (zp_sock_acked(p->upstream.fd, &acked) == 0 &&
	    acked != p->stall_acked) {
		p->stall_since = *now;
		p->stall_acked = acked;
		return 0;
	}
	/*
	 * It took all it was sent: it has not stalled. (The client's FIN
	 * held for the upstream a planned move left, still taking what was
	 * queued for it at its own pace, waits on that one, whose bound is
	 * --drain-timeout: not on this one.)
	 */
	if (pair_sock_unacked(&p->upstream, 0) <= 0) {
		p->stall_since = *now;
		return 0;
	}
	timerclear(&p->stall_since);
	if (!pair_movable(p))
		return 0;
	zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: the upstream %s took "
	    "nothing for %.3gs (--stall-timeout) with %d bytes sent to it "
	    "not acknowledged: it has failed", (unsigned long long)p->id,
	    zp_addr_str(&p->up_addr, buf, sizeof(buf)),
	    ctx->cfg->stall_timeout, pair_sock_unacked(&p->upstream, 0));
failed:
	(void)setsockopt(p->upstream.fd, SOL_SOCKET, SO_LINGER, &rst,
	    sizeof(rst));
	p->upstream.err = ETIMEDOUT;
	return pair_move(p, ZP_MOVE_STALLED);
}

/* Did the move begin with its upstream's failure (an error= to say)? */
static int
pair_move_failed(const struct zp_pair *p)
{
	return p->mv->move_reason == ZP_MOVE_FAILED ||
	    p->mv->move_reason == ZP_MOVE_STALLED;
}

/*
 * One line per move, when the next upstream answered (to is its address)
 * or when none did (to NULL: the end line follows). Not "conn=": scripts
 * count those as connection lines.
 */
void
pair_move_log(struct zp_pair *p, const struct zp_addr *to)
{
	struct zp_ctx	*ctx = p->ctx;
	char		 fbuf[ZP_ADDRSTRLEN], tbuf[ZP_ADDRSTRLEN];
	char		 cbuf[ZP_ADDRSTRLEN];

	if (p->mv == NULL)
		return;		/* never moved */
	zp_log(ctx->log, to != NULL ? ZP_LOG_CONN : ZP_LOG_WARN,
	    "connection %llu %s: client=%s from=%s to=%s reason=%s%s%s%s "
	    "frames=%llu unacked=%llu cut=%llu replayed=%llu",
	    (unsigned long long)p->id, to != NULL ? "moved" :
	    "could not move", zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf)),
	    zp_addr_str(&p->mv->move_from, fbuf, sizeof(fbuf)),
	    to != NULL ? zp_addr_str(to, tbuf, sizeof(tbuf)) : "none",
	    zp_move_reason_str(p->mv->move_reason),
	    pair_move_failed(p) ? " error=\"" : "",
	    !pair_move_failed(p) ? "" : p->mv->move_err != 0 ?
	    strerror(p->mv->move_err) : p->mv->move_checked ? "marked down by the "
	    "health checks" : "closed by the upstream",
	    pair_move_failed(p) ? "\"" : "",
	    (unsigned long long)p->mv->move_frames,
	    (unsigned long long)p->mv->move_unacked,
	    (unsigned long long)(p->up.fr->cut - p->mv->move_cut),
	    (unsigned long long)p->mv->move_replayed);
}

/*
 * A framed stream's upstream failed: a reset, an error, or its FIN while
 * the client still sends (framing is for one-way streams: a collector
 * that closed reads no more). Instead of ending the client, close that
 * upstream (counting what it never acknowledged), keep what the client
 * sent from the next frame boundary on, and connect to another upstream
 * (--balance, never the one that failed); the client's bytes wait in
 * its socket meanwhile, and what the old upstream sent towards the
 * client is delivered once the next one answers. reason: ZP_MOVE_FAILED,
 * or ZP_MOVE_STALLED (--stall-timeout). Always returns 1: the pair was
 * freed or handed to the connect.
 */
int
pair_move(struct zp_pair *p, int reason)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	struct zp_half		*h = &p->upstream;
	struct timeval		 now;
	int			 old = p->up_idx, err;

	if (pair_mv(p) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	pair_next_drop(p);
	zp_dframe_seek(fr, 0);
	p->mv->move_reason = reason;
	p->mv->move_checked = 0;
	p->mv->move_from = p->up_addr;
	p->mv->move_err = h->err;
	p->mv->move_unacked = upstream_unacked(p);
	p->mv->move_frames = fr->frames - p->frames_base;
	zp_upstream_release(ctx->ups, (size_t)old);
	if (h->err != 0) {
		zp_clock_now(&now);
		zp_upstream_report(ctx->ups, (size_t)old, 0, h->err, &now);
	}
	if (!h->dead && h->fd != -1)
		p->down.discarded += pair_sock_discard(h->fd);
	pair_half_close(h, 0);
	memset(h, 0, sizeof(*h));
	h->fd = -1;
	p->moves++;
	ctx->stats.moves[reason]++;
	/* The next upstream gets the held FIN once it acknowledged all. */
	pair_fin_set(p, ZP_FIN_OPEN);
	timerclear(&p->stall_since);
	pair_set_state(p, ZP_PAIR_MOVING);
	p->mv->move_cut = fr->cut;
	p->mv->move_replayed = fr->replayed;
	if (zp_dir_move(ctx, &p->up) == -1) {
		p->client.err = errno;
		pair_move_log(p, NULL);
		zp_pair_close(p, errno == EPROTO ? ZP_END_CLIENT_ERROR :
		    ZP_END_NOMEM);
		return 1;
	}
	p->mv->move_replayed = fr->replayed - p->mv->move_replayed;
	ctx->stats.replayed += p->mv->move_replayed;
	if (fr->rp != NULL && (err = zp_replay_retry(fr->rp)) != 0)
		zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: no replay "
		    "window could be kept (a pipe: %s); nothing is sent again",
		    (unsigned long long)p->id, strerror(err));
	/*
	 * Bytes still on the way to the client go after the move; but not
	 * after a FIN it was sent already (a wind-down's), nor after a
	 * close_notify begun (TLS, waiting for room): that way is over.
	 */
	if (!p->client.wshut && !p->down.fin_wait)
		p->down.eof = p->down.done = p->down.shut = p->down.drained =
		    0;
	zp_half_want_read(&p->client, 0);
	(void)zp_half_want_write(&p->client, 0);
	p->up_base = p->up.bytes;
	p->frames_base = fr->frames;
	p->up_sent = 0;
	p->up_addr.len = 0;
	p->connect_err = 0;
	if (pair_dial(p) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	p->dial->tried = (uint64_t)1 << old;
	p->dial->attempts = 1;
	timerclear(&p->dial->retry_until);
	if (pair_connect_upstream(p) != 0)
		return 1;	/* freed */
	return 1;		/* connecting: the connect's events have it */
}

/* ---- planned moves: --max-lifetime, --rebalance ---------------------- */

/* Forget a planned move's next upstream (not connected to yet, or idle). */
void
pair_next_drop(struct zp_pair *p)
{
	if (p->mv != NULL) {
		pair_uphs_clear(&p->mv->next_hs);
		zp_connecting_cancel(&p->mv->next);
		p->mv->next_ready = 0;
	}
	if (p->up.fr != NULL)
		zp_dframe_seek(p->up.fr, 0);
}

int
zp_pair_can_move(const struct zp_pair *p)
{
	return pair_movable(p) && !pair_next_on(p) && !pair_retiring(p) &&
	    p->up.fr->state == ZP_FR_RELAYING &&
	    !p->ctx->stopping;
}

/*
 * The next upstream is ready (connected, its TLS handshake done): seek
 * a boundary; or it is not (err; why: its words, NULL for strerror's),
 * or the stream may no longer move: give up on it. Returns 1 when the
 * pair was freed.
 */
static int ZP_MAY_FREE
pair_next_answered(struct zp_pair *p, int err, const char *why)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now;
	char		 buf[ZP_ADDRSTRLEN];

	if (err != 0 || !pair_movable(p)) {
		if (err != 0) {
			if (!zp_connect_local_error(err)) {
				zp_clock_now(&now);
				zp_upstream_report(ctx->ups,
				    (size_t)p->mv->next_idx, 0, err, &now);
			}
			zp_log(ctx->log, ZP_LOG_CONN, "connection %llu stays: "
			    "%s move to %s failed: %s",
			    (unsigned long long)p->id,
			    zp_move_reason_str(p->mv->move_reason),
			    zp_addr_str(&p->mv->next_addr, buf, sizeof(buf)),
			    why != NULL ? why : strerror(err));
		}
		pair_next_drop(p);
		return 0;
	}
	/* Until the boundary, the current upstream gets the frame in hand. */
	p->mv->next_ready = 1;
	zp_dframe_seek(p->up.fr, 1);
	return pair_run(p, &p->up);
}

/* A tls@ next upstream's handshake is over. */
static int ZP_MAY_FREE
pair_next_tls_done(struct zp_pair *p, enum pair_uphs_end how)
{
	switch (how) {
	case PAIR_UPHS_DONE:
		return pair_next_answered(p, 0, NULL);
	case PAIR_UPHS_FAILED:
		return pair_next_answered(p, EPROTO, p->tls_why);
	case PAIR_UPHS_LOCAL:
		return pair_next_answered(p, ENOMEM, NULL);
	case PAIR_UPHS_HEADER:
		break;
	}
	return pair_next_answered(p, p->mv->next_hs.err, "the PROXY header "
	    "could not be sent");
}

/* The next upstream answered, or not: its handshake, a boundary, or none. */
static void
pair_next_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;
	int		 err = zp_connecting_result(&p->mv->next, what), gone;

	(void)fd;
	if (err == 0 && pair_movable(p) && pair_upstream_tls(p,
	    p->mv->next_idx))
		gone = pair_uphs_start(p, &p->mv->next_hs, p->mv->next.fd,
		    p->mv->next_idx, &p->mv->next_addr, pair_next_tls_done);
	else
		gone = pair_next_answered(p, err, NULL);
	if (!gone)
		pair_check(p);
}

int
zp_pair_plan_move(struct zp_pair *p, int idx, int reason)
{
	struct zp_ctx		*ctx = p->ctx;
	const struct zp_addr	*a, *src;
	struct zp_addr		 srcbuf, abuf;
	unsigned char		 tried[ZP_MAX_UPSTREAMS];
	struct timeval		 tv, now;

	if (!zp_pair_can_move(p))
		return -1;
	if (idx < 0) {
		/* Where this client would go now, itself not counted. */
		memset(tried, 0, sizeof(tried));
		zp_clock_now(&now);
		idx = zp_upstream_pick_moving(ctx->ups, (size_t)p->up_idx,
		    &p->client_addr, tried, &now);
	}
	/*
	 * Only to another upstream, for a lifetime too: where the balancer
	 * would place the client now is where it is, and a fresh connection
	 * there would cost a reconnect and a drain for nothing (and could
	 * land it on a collector that stopped reading).
	 */
	if (idx < 0 || idx == p->up_idx ||
	    (size_t)idx >= zp_upstreams_count(ctx->ups))
		return -1;
	if (zp_upstream_addr(ctx->ups, (size_t)idx, 0, &abuf) == 0)
		return -1;
	a = &abuf;
	if (pair_source(p, a, &srcbuf, &src) == -1 || pair_mv(p) == NULL)
		return -1;
	/* Even a connect done at once is taken up from the loop. */
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	if (zp_connecting_start(&p->mv->next, ctx->base, a, src,
	    ZP_CONNECT_DEFER | (ctx->cfg->source == ZP_SOURCE_CLIENT ?
	    ZP_CONNECT_TRANSPARENT : 0), &tv, pair_next_cb, p) == -1)
		return -1;
	pair_sock_tune_upstream(ctx, p->mv->next.fd);
	p->mv->next_idx = idx;
	p->mv->next_addr = *a;
	p->mv->move_reason = reason;
	p->mv->move_checked = reason == ZP_MOVE_FAILED;
	return 0;
}

static void
retiring_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	if (what & EV_CLOSED)
		p->mv->retiring.rdhup = 1;
	if (pair_run(p, &p->down) == 0)
		pair_check(p);
}

/* The old upstream did not close within --drain-timeout: close it. */
static void
retire_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	pair_retire_done(p, 1);
	/* Down reads the next one now; up may owe it a replay, or a FIN. */
	if (pair_run(p, &p->down) == 0 && pair_run(p, &p->up) == 0)
		pair_check(p);
}

/*
 * The upstream a planned move left said all it had (its FIN, or a reset),
 * or did not within --drain-timeout: close it, count what it did not
 * acknowledge, and let the down direction read the new one. When it is
 * given up on (the timeout, an error) with bytes it never acknowledged,
 * and the stream keeps a replay window, the window goes again to the
 * current upstream at the stream's next boundary (pair_rewind):
 * at-least-once, as after any failed upstream, instead of a loss.
 */
void
pair_retire_done(struct zp_pair *p, int timed_out)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_half		*r = &p->mv->retiring;
	char			 buf[ZP_ADDRSTRLEN];
	uint64_t		 acked, lost = 0;
	int			 left = r->dead ? 0 : pair_sock_unacked(r, 0);
	int			 rewind;

	if (r->fd == -1)
		return;
	/* What the client gets from now on is the current upstream's. */
	pair_tally(p, &p->down, p->up_idx);
	/*
	 * TLS: the kernel's counts are of records, not of the stream's
	 * bytes; what its queue held is all there is to go by, and after
	 * a reset nothing: then assume a loss (a replay sends twice,
	 * never loses).
	 */
	if ((timed_out || r->dead) && r->tls != NULL)
		lost = r->dead ? 1 : (uint64_t)left;
	else if ((timed_out || r->dead) && zp_sock_acked(r->fd, &acked) == 0)
		lost = acked >= p->mv->retiring_sent ? 0 : p->mv->retiring_sent - acked;
	else if (timed_out || r->dead)
		lost = (uint64_t)left;
	/*
	 * In a move (no upstream now) the window went with the move already
	 * (zp_dir_move took it all): nothing to send again.
	 */
	rewind = lost > 0 && p->up.fr != NULL && p->up.fr->rp != NULL &&
	    !p->up.done && p->upstream.fd != -1;
	if (timed_out || left > 0 || r->dead)
		zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: the old "
		    "upstream %s %s; %d bytes sent to it not acknowledged%s",
		    (unsigned long long)p->id, zp_addr_str(&p->mv->retiring_addr,
		    buf, sizeof(buf)), timed_out ? "did not close within "
		    "--drain-timeout" : r->dead ? strerror(r->err) :
		    "closed", left, rewind ? ": the replay window goes again "
		    "to the current one" : "");
	if (rewind) {
		p->mv->rewind_due = 1;
		zp_dframe_seek(p->up.fr, 1);
	}
	if (p->mv->retire_timer != NULL)
		event_free(p->mv->retire_timer);
	p->mv->retire_timer = NULL;
	if (!r->dead)
		p->down.discarded += pair_sock_discard(r->fd);
	pair_half_close(r, 0);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	p->down.src = &p->upstream;
	p->down.eof = p->down.drained = 0;
	/*
	 * No upstream yet (a move): the client waits for the next one's
	 * bytes, and what the store still holds goes when it connects;
	 * its write event, level-triggered, would wake a pump that does
	 * nothing now (pair_run).
	 */
	if (p->upstream.fd == -1)
		(void)zp_half_want_write(&p->client, 0);
}

/*
 * The stream reached a boundary that it sought for a replay
 * (pair_retire_done): the window goes again to the current upstream,
 * before what the store holds. Returns 1 when the pair was freed.
 */
int
pair_rewind(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	uint64_t		 before = fr->replayed;
	char			 buf[ZP_ADDRSTRLEN];
	int			 rc;

	zp_dframe_seek(fr, 0);
	if (p->mv == NULL || !p->mv->rewind_due)
		return 0;
	p->mv->rewind_due = 0;
	if ((rc = zp_dir_rewind(ctx, &p->up)) == -1) {
		zp_pair_close(p, errno == EPROTO ? ZP_END_CLIENT_ERROR :
		    ZP_END_NOMEM);
		return 1;
	}
	ctx->stats.replayed += fr->replayed - before;
	zp_log(ctx->log, rc == 0 ? ZP_LOG_NOTICE : ZP_LOG_WARN, "connection "
	    "%llu: %s to %s (%llu bytes)", (unsigned long long)p->id,
	    rc == 0 ? "the replay window goes again" : "nothing could be sent "
	    "again (no whole message in the replay window)",
	    zp_addr_str(&p->up_addr, buf, sizeof(buf)),
	    (unsigned long long)(fr->replayed - before));
	return 0;
}

/*
 * A planned move reached a frame boundary: everything before it went to
 * the current upstream, nothing after. That one gets its FIN and becomes
 * the retiring upstream (read until it closes, so that what it still
 * sends reaches the client before anything of the new one); the next
 * upstream takes the stream from here. What can fail is made first,
 * while the pair is as it was; then each descriptor changes owner in one
 * step (the old upstream's from upstream to retiring, the next one's
 * from next to upstream). Always returns 1 (pair_run's contract: the
 * pair was handed on).
 */
int
pair_switch(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	struct zp_half		*h = &p->upstream, *r = &p->mv->retiring;
	struct event_base	*base = ctx->base;
	struct event		*rev, *timer = NULL;
	struct timeval		 tv, now;
	short			 rflags = EV_READ | EV_PERSIST;
	char			 hdr[ZP_PROXY_MAX];
	size_t			 hlen;

	if (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE)
		rflags |= EV_CLOSED;
	tv = zp_seconds_tv(ctx->cfg->drain_timeout);
	if ((rev = event_new(base, h->fd, rflags, retiring_read_cb, p)) ==
	    NULL || (timer = evtimer_new(base, retire_timer_cb, p)) == NULL ||
	    evtimer_add(timer, &tv) == -1) {
		if (rev != NULL)
			event_free(rev);
		if (timer != NULL)
			event_free(timer);
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	zp_dframe_seek(fr, 0);
	p->mv->move_from = p->up_addr;
	p->mv->move_err = 0;
	p->mv->move_unacked = (uint64_t)pair_sock_unacked(h, 0);
	p->mv->move_frames = fr->frames - p->frames_base;
	p->mv->move_cut = fr->cut;
	p->mv->move_replayed = 0;
	/* Its bytes down stay its own until it closes (pair_retire_done). */
	zp_upstream_release(ctx->ups, (size_t)p->up_idx);
	p->mv->retiring_sent = p->up_sent + (p->up.bytes - p->up_base);
	p->up_base = p->up.bytes;
	p->frames_base = fr->frames;
	/*
	 * A FIN after its last whole frame; it stays open until it closes.
	 * On TLS, close_notify before it when the socket has room for the
	 * whole alert, else the FIN alone: a record cut short by the FIN
	 * would read as an error where a bare FIN reads as an end.
	 */
	if (h->tls != NULL && !h->wshut && zp_sock_roomy(h->fd))
		(void)zp_tls_close_notify(h->tls);
	if (!h->wshut && shutdown(h->fd, SHUT_WR) == 0)
		h->fin = 1;
	h->wshut = 1;
	pair_half_events_free(h);
	/* The old upstream is the retiring one's, and only its. */
	*r = *h;
	r->rev = rev;
	p->mv->retire_timer = timer;
	p->mv->retiring_idx = p->up_idx;
	p->mv->retiring_addr = p->up_addr;
	p->down.src = r;
	/* The next one is the upstream's, and only its. */
	memset(h, 0, sizeof(*h));
	h->fd = zp_connecting_take(&p->mv->next);
	h->tls = pair_uphs_take(&p->mv->next_hs);
	p->mv->next_ready = 0;
	p->up_idx = p->mv->next_idx;
	p->up_addr = p->mv->next_addr;
	p->up_sent = 0;
	pair_tally(p, &p->up, p->up_idx);
	zp_clock_now(&now);
	zp_upstream_report(ctx->ups, (size_t)p->up_idx, 1, 0, &now);
	zp_upstream_acquire(ctx->ups, (size_t)p->up_idx);
	zp_clock_now(&p->up_since);
	p->moves++;
	ctx->stats.moves[p->mv->move_reason]++;
	/* A held FIN waits for the next one (and for the retiring one). */
	pair_fin_set(p, ZP_FIN_OPEN);
	timerclear(&p->stall_since);
	/* A TLS one had it before its ClientHello. */
	if (ctx->cfg->send_proxy && h->tls == NULL) {
		if (pair_send_proxy(p, h->fd, hdr, &hlen) == -1) {
			h->err = errno;
			zp_pair_close(p, ZP_END_PROXY_HEADER);
			return 1;
		}
		p->up_sent = hlen;
	} else if (h->tls != NULL)
		p->up_sent = p->mv->next_hs.hlen;
	if (pair_half_events(p, h) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	pair_move_log(p, &p->up_addr);
	/* Freed or not, the pair was handed on (pair_run's contract). */
	if (pair_run(p, &p->up) == 0 && pair_run(p, &p->down) == 0)
		pair_check(p);
	return 1;
}

/* The health checks marked an upstream down; see pair.h. */
int
zp_pairs_upstream_down(struct zp_ctx *ctx, int idx)
{
	struct zp_pair	*p;
	int		 n = 0;

	if (!zp_config_framed(ctx->cfg))
		return 0;
	TAILQ_FOREACH(p, &ctx->pairs, entry)
		if (p->up_idx == idx && zp_pair_can_move(p) &&
		    zp_pair_plan_move(p, -1, ZP_MOVE_FAILED) == 0)
			n++;
	return n;
}

/* Moves under way, and the streams that could move; see pair.h. */
void
zp_pairs_moving(struct zp_ctx *ctx, long *eff, long *movable)
{
	struct zp_pair	*p;

	TAILQ_FOREACH(p, &ctx->pairs, entry) {
		if (p->up_idx < 0)
			continue;
		if (pair_next_on(p)) {
			eff[p->up_idx]--;
			eff[p->mv->next_idx]++;
		}
		if (zp_pair_can_move(p))
			movable[p->up_idx]++;
	}
}

/* Begin one --rebalance move from hi to lo, for why; see pair.h. */
int
zp_pairs_move_one(struct zp_ctx *ctx, int hi, int lo, int why)
{
	struct zp_pair	*p;
	int		 pass;

	if (ctx->stopping)
		return 0;
	/* For load: one held back first (pass 0), then any (pass 1). */
	for (pass = why == ZP_MOVE_LOAD ? 0 : 1; pass < 2; pass++)
		TAILQ_FOREACH(p, &ctx->pairs, entry)
			if (p->up_idx == hi && zp_pair_can_move(p) &&
			    (why != ZP_MOVE_LOAD ||
			    pair_load_may_move(p, pass == 0)) &&
			    zp_pair_plan_move(p, lo, why) == 0)
				return 1;
	return 0;
}

/*
 * Which move a --rebalance step makes now, if any; see pair.h. Streams
 * leave an upstream an operator drains first, then one that is up but
 * takes none (a backup once another is up again, a weight of 0), then
 * --rebalance's own moves: count, or load.
 */
int
zp_rebalance_choose(struct zp_ctx *root, const long *eff,
    const struct zp_up_load *load, const struct timeval *now, int *hip,
    int *lop, int *why, char *text, size_t len)
{
	struct zp_upstream u[ZP_MAX_UPSTREAMS];
	size_t		 i, n = zp_upstreams_count(root->ups);
	int		 hi = -1, lo = -1, out = -1, primary_up, mode;

	mode = root->cfg->rebalance;
	*text = '\0';
	for (i = 0; i < n; i++)
		zp_upstream_get(root->ups, i, &u[i]);
	primary_up = zp_upstream_primary_up(u, n);
	if (mode == ZP_REBALANCE_LOAD && root->loadbal != NULL)
		zp_loadbal_update(root->loadbal, load, n, now);
	/*
	 * Streams per unit of weight: i is fuller than j when eff[i] /
	 * w[i] > eff[j] / w[j], compared without dividing. Drained ones
	 * leave with or without --rebalance (mode 0); those on an upstream
	 * that takes none, with it.
	 */
	for (i = 0; i < n; i++) {
		if (!zp_upstream_takes(&u[i], primary_up)) {
			if (eff[i] <= 0)
				continue;
			if (u[i].admin != ZP_ADMIN_READY) {
				if (out == -1 || u[out].admin ==
				    ZP_ADMIN_READY || eff[i] > eff[out])
					out = (int)i;
			} else if (mode != ZP_REBALANCE_OFF && u[i].up &&
			    (out == -1 || (u[out].admin == ZP_ADMIN_READY &&
			    eff[i] > eff[out])))
				out = (int)i;
			continue;
		}
		if (hi == -1 || eff[i] * u[hi].weight > eff[hi] * u[i].weight)
			hi = (int)i;
		if (lo == -1 || eff[i] * u[lo].weight < eff[lo] * u[i].weight)
			lo = (int)i;
	}
	if (lo == -1)
		return 0;
	if (out != -1) {
		*hip = out;
		*lop = lo;
		*why = u[out].admin != ZP_ADMIN_READY ? ZP_MOVE_DRAIN :
		    ZP_MOVE_REBALANCE;
		return 1;
	}
	if (mode == ZP_REBALANCE_LOAD) {
		if (root->loadbal == NULL || !zp_loadbal_choose(root->loadbal,
		    u, n, eff, load, now, hip, lop))
			return 0;
		zp_loadbal_why(root->loadbal, root->ups, load, *hip, *lop,
		    now, text, len);
		*why = ZP_MOVE_LOAD;
		return 1;
	}
	/* Only when hi, one stream lighter, is still no lighter than lo. */
	if (mode != ZP_REBALANCE_COUNT || hi == lo || (eff[hi] - 1) *
	    u[lo].weight < (eff[lo] + 1) * u[hi].weight)
		return 0;
	*hip = hi;
	*lop = lo;
	*why = ZP_MOVE_REBALANCE;
	return 1;
}
