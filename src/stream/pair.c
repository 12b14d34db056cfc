/*
 * pair.c - the life of one proxied connection: start, relay both
 * directions (the run loop), end once and log it once. Its parts, which
 * pair_int.h ties together: pair_connect.c (the connect to an upstream),
 * pair_header.c (--accept-proxy), pair_spool.c (--spool), pair_move.c
 * (moves of a framed stream) and pair_timer.c (the pair's timer, the
 * wind-down).
 */

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "lib/dgram.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "tls/tls_io.h"
#include "spool/spool.h"
#include "relay/worker.h"

_Static_assert(sizeof(((struct zp_stats *)0)->moves) / sizeof(uint64_t) ==
    ZP_MOVE_MAX, "a move counter for each reason");

/*
 * The pool had no pipe for a pair or a direction: it copies. Said once,
 * and for every connection with -v, since the cause (descriptors, the
 * pipe budget) is the operator's to fix.
 */
void
pair_no_pipe(struct zp_pair *p)
{
	struct zp_ctx			*ctx = p->ctx;
	struct zp_pipepool_stats	 st;

	if (ctx->stats.fallbacks[ZP_FALLBACK_POOL]++ == 0 ||
	    zp_log_enabled(ctx->log, ZP_LOG_CONN)) {
		memset(&st, 0, sizeof(st));
		if (ctx->pool != NULL)
			zp_pipepool_stats(ctx->pool, &st);
		zp_log(ctx->log, ZP_LOG_WARN, "conn=%llu no pipe (%s); "
		    "relaying in copy mode", (unsigned long long)p->id,
		    zp_pipe_shortage_str(st.shortage));
	}
}

/*
 * TCP_NODELAY: relay small writes (log lines) as they come; and with
 * --keepalive, let the kernel find peers that vanished without a word.
 */
static void
sock_tune(struct zp_ctx *ctx, int fd)
{
	int	on = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (ctx->cfg->keepalive)
		(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on,
		    sizeof(on));
}

/*
 * An upstream socket: as any, and with --replay-window W its send queue
 * is held to W/2 (the kernel doubles the W/4 asked), so that what its
 * collector has not acknowledged is always within the window, with room
 * left for what it acknowledged and never read: a collector that stalls
 * or dies loses nothing the window cannot send again. Left to itself
 * the kernel grows a send queue to megabytes (tcp_wmem).
 */
void
pair_sock_tune_upstream(struct zp_ctx *ctx, int fd)
{
	int	sndbuf;

	sock_tune(ctx, fd);
	if (ctx->cfg->replay_window == 0)
		return;
	sndbuf = ctx->cfg->replay_window / 4 > INT_MAX ? INT_MAX :
	    (int)(ctx->cfg->replay_window / 4);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
}

/*
 * Throw away what waits in a socket's receive queue. Closing a socket
 * with unread bytes makes the kernel send RST and drop what is still
 * queued for the peer; after a one-sided failure the bytes we hold for the
 * surviving peer must get there, and its own bytes have nowhere to go.
 */
uint64_t
pair_sock_discard(int fd)
{
	uint64_t	total = 0;

	(void)zp_sock_drain(fd, 64, &total);
	return total;
}

/*
 * Bytes of a socket's send queue its peer has not acknowledged (SIOCOUTQ),
 * the FIN we queued included when `with_fin`. 0 when it cannot tell.
 */
int
pair_sock_unacked(const struct zp_half *h, int with_fin)
{
	int	n = 0;

	if (h->fd == -1 || (n = zp_sock_outq(h->fd)) < 0)
		return 0;
	if (!with_fin && h->fin && n > 0)
		n--;
	return n;
}

/* A stream's replay is over (its pair ends, or its framing failed). */
static void
dframe_replay_free(struct zp_dframe *fr)
{
	if (fr->rp == NULL)
		return;
	zp_replay_free(fr->rp);
	free(fr->rp);
	fr->rp = NULL;
	fr->teed = 0;
}

/* The error pending on a socket (a reset, a timeout), or 0. */
static int
sock_error(int fd)
{
	int		err = 0;
	socklen_t	len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		return 0;
	return err;
}

/* Does a socket hold bytes nobody read? Then close(2) resets it. */
static int
sock_unread(int fd)
{
	int	n = 0;

	return ioctl(fd, SIOCINQ, &n) == 0 && n > 0;
}

/*
 * At close, take off a direction's count what its destination will never
 * have: what a reset peer did not acknowledge (the kernel dropped it), or
 * what is unacknowledged when close(2) must reset (unread bytes). A
 * graceful close leaves the kernel to deliver the rest, so it counts.
 */
/* Count what d delivers from now on as upstream idx's. */
void
pair_tally(struct zp_pair *p, struct zp_dir *d, int idx)
{
	struct zp_traffic	*t;

	assert(idx >= 0 && idx < ZP_MAX_UPSTREAMS);
	t = &p->ctx->stats.ups[idx];
	d->tally[1] = d == &p->up ? &t->up : &t->down;
}

static void
dir_uncount(struct zp_dir *d, int aborted)
{
	uint64_t	n;

	if (d->dst->fd == -1 || (!aborted && !d->dst->dead &&
	    !sock_unread(d->dst->fd)))
		return;
	n = (uint64_t)pair_sock_unacked(d->dst, 0);
	zp_dir_uncount(d, n);
}

void
pair_half_events_free(struct zp_half *h)
{
	if (h->rev != NULL)
		event_free(h->rev);
	if (h->wev != NULL)
		event_free(h->wev);
	h->rev = h->wev = NULL;
	h->ron = h->won = 0;
}

/* Free a half's events and close its socket; `abort`: with an RST. */
void
pair_half_close(struct zp_half *h, int abort)
{
	static const struct linger	rst = { 1, 0 };

	pair_half_events_free(h);
	zp_tls_free(h->tls);
	h->tls = NULL;
	if (h->fd != -1) {
		if (abort && !h->dead)
			(void)setsockopt(h->fd, SOL_SOCKET, SO_LINGER, &rst,
			    sizeof(rst));
		close(h->fd);
	}
	h->fd = -1;
}

/*
 * Free what a closing pair holds besides its sockets, stores and
 * mirrors: the framing and replay, the header, the spool writer, a
 * connect under way, the timer.
 */
static void
pair_free_parts(struct zp_pair *p)
{
	if (p->up.fr != NULL)
		dframe_replay_free(p->up.fr);
	free(p->up.fr);
	p->up.fr = NULL;
	free(p->hdr);
	p->hdr = NULL;
	free(p->px);
	p->px = NULL;
	zp_spool_writer_free(p->spool);
	p->spool = NULL;
	pair_connect_release(p);
	if (p->timer != NULL)
		event_free(p->timer);
	p->timer = NULL;
	if (p->tls_park != NULL)
		event_free(p->tls_park);
	p->tls_park = NULL;
}

/* End a pair in any state, log it, free everything it owns. */
void
zp_pair_close(struct zp_pair *p, enum zp_end end)
{
	struct zp_ctx	*ctx = p->ctx;
	int		 discard, live = p->state == ZP_PAIR_RELAYING ||
			    p->state == ZP_PAIR_LINGERING;

	/*
	 * First: the kernel may hold its buffers; from here on the ring
	 * touches neither its directions nor its halves.
	 */
	pair_ring_release(p);

	/*
	 * After a one-sided failure or a timeout, keep the survivor's queue
	 * from an RST; a clean close saw EOF on both, nothing is left to read.
	 */
	discard = live && ((end != ZP_END_SHUTDOWN && end != ZP_END_CLOSED) ||
	    p->winding);
	/* A wind-down that ended when the client closed: what it was for. */
	if (p->winding == ZP_END_IDLE && end == ZP_END_CLOSED)
		end = ZP_END_IDLE;
	if (discard) {
		if (!p->client.dead && p->client.fd != -1)
			p->up.discarded += pair_sock_discard(p->client.fd);
		if (!p->upstream.dead && p->upstream.fd != -1)
			p->down.discarded += pair_sock_discard(p->upstream.fd);
	}
	if (live && end != ZP_END_CLOSED) {
		dir_uncount(&p->up, p->linger_abort && !p->upstream.dead);
		dir_uncount(&p->down, p->linger_abort && !p->client.dead);
	}
	if (p->move_log_due)
		pair_move_log(p, &p->up_addr);
	pair_log(p, end);
	ctx->stats.discarded += p->up.discarded + p->down.discarded;
	if (p->up_idx >= 0 && live)
		zp_upstream_release(ctx->ups, (size_t)p->up_idx);
	pair_end_count(&ctx->stats, end);
	pair_free_parts(p);
	zp_mirror_set_release(p->mir);
	p->mir = p->up.mir = NULL;
	zp_dir_release(ctx, &p->up);
	zp_dir_release(ctx, &p->down);
	/*
	 * Refused after its header, or its destination: the client learns
	 * at once, with a reset, as the listener refuses.
	 */
	zp_half_feed_drop(&p->client);
	pair_half_close(&p->client, p->linger_abort || end == ZP_END_DENIED ||
	    end == ZP_END_SOURCE_LIMIT || end == ZP_END_BAD_DST);
	pair_half_close(&p->upstream, p->linger_abort);
	pair_next_drop(p);
	if (p->mv != NULL) {
		pair_half_close(&p->mv->retiring, 0);
		if (p->mv->retire_timer != NULL)
			event_free(p->mv->retire_timer);
		free(p->mv);
		p->mv = NULL;
	}
	TAILQ_REMOVE(&ctx->pairs, p, entry);
	ctx->stats.conns_open--;
	/* A handshake under way is out of the load already. */
	if (p->hs_listed)
		pair_tls_unlist(p, 0);
	else
		__atomic_sub_fetch(&ctx->load, 1, __ATOMIC_SEQ_CST);
	if (p->source_counted)
		zp_srctab_del(&zp_ctx_root(ctx)->sources,
		    (struct sockaddr *)&p->client_addr.ss);
	free(p);
	zp_ctx_closed(ctx);	/* the listener may resume, a drain end */
}

/*
 * Both directions are done: close the pair, unless one side failed and
 * the survivor has not acknowledged everything sent to it yet. Closing
 * then would throw away its send queue (close() resets a socket that is
 * still receiving, and the survivor may well still be sending). So the
 * pair lingers: what the survivor sends is read and dropped (the
 * direction towards the dead side discards), and SIOCOUTQ is looked at
 * on every wake-up and on a timer that backs off from 5 to 200 ms, until
 * it is 0 (the FIN too) or --linger-timeout passes without progress.
 * Returns 1 when the pair was freed.
 */
int ZP_MAY_FREE
pair_finish(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct zp_half	*dead, *surv;
	struct zp_dir	*heard;		/* discards what surv sends */
	struct timeval	 now, dt;
	enum zp_end	 end;
	int		 outq;

	if (!p->client.dead && !p->upstream.dead) {
		zp_pair_close(p, ZP_END_CLOSED);
		return 1;
	}
	dead = p->client.dead ? &p->client : &p->upstream;
	surv = dead == &p->client ? &p->upstream : &p->client;
	end = zp_half_end(dead, dead == &p->client);
	/*
	 * A survivor that read to its EOF has its read event off: a reset of
	 * its own after that shows only as a pending socket error, and
	 * SIOCOUTQ would go on counting what it will never acknowledge.
	 */
	if (!surv->dead && (surv->err = sock_error(surv->fd)) != 0)
		surv->dead = 1;
	if (surv->dead || (outq = pair_sock_unacked(surv, 1)) == 0) {
		zp_pair_close(p, end);
		return 1;
	}
	zp_clock_now(&now);
	heard = surv == &p->client ? &p->up : &p->down;
	if (p->state != ZP_PAIR_LINGERING) {
		pair_set_state(p, ZP_PAIR_LINGERING);
		p->linger_acked = now;
		p->linger_outq = outq;
		p->linger_ms = 5;
		p->linger_heard = heard->discarded;
		ctx->stats.lingers++;
	} else if (outq < p->linger_outq) {
		p->linger_acked = now;
		p->linger_outq = outq;
	}
	timersub(&now, &p->linger_acked, &dt);
	if (dt.tv_sec + dt.tv_usec / 1e6 >= ctx->cfg->linger_timeout) {
		/*
		 * A survivor that sends on would reset the orphaned socket
		 * with its next segment and the rest would vanish unseen:
		 * reset it now and count the rest as not delivered. A quiet
		 * one gets a graceful close; the kernel goes on delivering.
		 */
		p->linger_abort = heard->discarded > p->linger_heard ||
		    sock_unread(surv->fd);
		ctx->stats.linger_timeouts++;
		zp_log(ctx->log, ZP_LOG_WARN, "conn=%llu linger-timeout: %d "
		    "bytes not acknowledged after %.3fs; %s",
		    (unsigned long long)p->id, pair_sock_unacked(surv, 0),
		    ctx->cfg->linger_timeout, p->linger_abort ? "the peer "
		    "still sends: resetting" : "closing");
		zp_pair_close(p, end);
		return 1;
	}
	if (p->timer == NULL &&
	    (p->timer = evtimer_new(ctx->base, pair_timer_cb, p)) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	dt.tv_sec = 0;
	dt.tv_usec = p->linger_ms * 1000;
	evtimer_add(p->timer, &dt);
	if (p->linger_ms < 200)
		p->linger_ms *= 2;
	return 0;
}

/* Say once that a stream's framing failed: it is plain bytes from now. */
static void
pair_framing_error(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct zp_dframe *fr = p->up.fr;
	const char	*why;
	uint64_t	 off;

	if (fr == NULL || fr->told ||
	    (why = zp_framer_error(&fr->f, &off)) == NULL)
		return;
	fr->told = 1;
	ctx->stats.framing_errors++;
	dframe_replay_free(fr);		/* plain bytes move nowhere */
	/* Not "conn=": scripts count those as connection lines. */
	zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: framing error at "
	    "byte %llu (%s); relaying the rest as plain bytes",
	    (unsigned long long)p->id, (unsigned long long)off, why);
}

/*
 * After the pumps of an event: log a move whose cut is done, carry a held
 * FIN that can no longer wait for a move, end the mirrors of a finished
 * stream, and start the timers a half-close or a stall asks for; or end
 * the pair when both directions are done. Returns 1 when it was freed.
 */
int ZP_MAY_FREE
pair_settle(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;

	/* A move is logged once its cut is done. */
	if (p->move_log_due && !zp_dframe_cutting(p->up.fr)) {
		p->move_log_due = 0;
		pair_move_log(p, &p->up_addr);
	}
	/*
	 * The upstream's FIN waited while the stream could still move; once
	 * it cannot (the client is done, the framing failed), carry it over.
	 */
	if (p->down.hold_fin && p->down.eof && !p->down.done &&
	    !pair_from_retiring(p) && !pair_movable(p)) {
		p->up.fr->hold = p->down.hold_fin = 0;
		if (zp_dir_pump(ctx, &p->down, ctx->budget) & ZP_PUMP_DEAD)
			(void)zp_dir_pump(ctx, &p->up, ctx->budget);
	}
	if (p->mir != NULL && p->up.done)
		zp_mirror_set_end(p->mir);
	if (!p->up.done || !p->down.done) {
		if ((p->up.done || p->down.done) && !timerisset(&p->half_closed)) {
			p->half_closed = p->last_active;
			if (pair_timer_update(p) == -1) {
				zp_pair_close(p, ZP_END_NOMEM);
				return 1;
			}
		}
		if (pair_stall_watch(p) == -1) {
			zp_pair_close(p, ZP_END_NOMEM);
			return 1;
		}
		return 0;
	}
	return pair_finish(p);
}

/*
 * Pump one direction and whatever its failures wake; close the pair when
 * both directions are done, or move a framed stream whose upstream
 * failed. Returns 1 when the pair was freed or moved on: the caller must
 * not touch it.
 */
int ZP_MAY_FREE
pair_run(struct zp_pair *p, struct zp_dir *d)
{
	struct zp_ctx	*ctx = p->ctx;
	struct zp_dir	*other = d == &p->up ? &p->down : &p->up;
	int		 i, rc;

	zp_clock_now(&p->last_active);
	/*
	 * A death can wake the other direction, whose failure wakes back;
	 * the end of a retiring upstream makes the next one the client's
	 * source, pumped here like any: its FIN and its failure move the
	 * stream as any upstream's do.
	 */
	for (i = 0; i < 4; i++) {
		/*
		 * A move (or the spool) has the stream and no upstream is
		 * connected: nothing is pumped but what a retiring upstream
		 * still sends the client. Its end must not make the closed
		 * half the client's source (a read of fd -1: the stream
		 * ended as an upstream error, its store dropped).
		 */
		if (p->upstream.fd == -1 && !(d == &p->down &&
		    pair_from_retiring(p)))
			break;
		pair_hold(p);
		rc = zp_dir_pump(ctx, d, ctx->budget);
		pair_framing_error(p);
		if (rc & ZP_PUMP_MOVE)
			return pair_move(p, ZP_MOVE_FAILED);
		if ((rc & ZP_PUMP_BOUNDARY) && pair_next_ready(p))
			return pair_switch(p);
		if (rc & ZP_PUMP_BOUNDARY) {
			/* A retiring upstream lost bytes: send them again. */
			if (pair_rewind(p) != 0)
				return 1;
			continue;
		}
		/*
		 * The upstream closed while the client still sends: a
		 * collector that closed reads nothing more, and what would be
		 * written to it now is lost at its reset. Move at once.
		 */
		if ((rc & ZP_PUMP_SRC_FIN) && d == &p->down &&
		    p->down.src == &p->upstream && pair_movable(p))
			return pair_move(p, ZP_MOVE_FAILED);
		/* The client's FIN, held: on now, or when the pair timer says. */
		if ((rc & ZP_PUMP_SRC_FIN) && d == &p->up &&
		    pair_fin_release(p))
			continue;
		if (rc & ZP_PUMP_NOPIPE)
			pair_no_pipe(p);
		if (rc & ZP_PUMP_FELLBACK) {
			ctx->stats.fallbacks[ZP_FALLBACK_REFUSED]++;
			zp_log(ctx->log, ZP_LOG_WARN, "conn=%llu splice refused "
			    "by the kernel; relaying in copy mode",
			    (unsigned long long)p->id);
		}
		if (pair_from_retiring(p) && p->down.eof &&
		    p->down.ops->pending(&p->down) == 0) {
			/* The old upstream said all it had: read the new one. */
			pair_retire_done(p, 0);
			d = &p->down;
			other = &p->up;
			continue;
		}
		if (!(rc & ZP_PUMP_DEAD))
			break;
		d = other;
		other = d == &p->up ? &p->down : &p->up;
	}
	return pair_settle(p);
}

/* Each state's name, and the states a pair may go to from it. */
#define S(x)	(1u << ZP_PAIR_##x)
static const struct {
	const char	*name;
	unsigned	 to;
} pair_moves[] = {
	[ZP_PAIR_HEADER] =	{ "header", S(CONNECTING) | S(HANDSHAKE) },
	[ZP_PAIR_HANDSHAKE] =	{ "handshake", S(CONNECTING) },
	[ZP_PAIR_CONNECTING] =	{ "connecting", S(RELAYING) | S(SPOOLING) },
	[ZP_PAIR_RELAYING] =	{ "relaying", S(MOVING) | S(LINGERING) },
	[ZP_PAIR_LINGERING] =	{ "lingering", 0 },
	[ZP_PAIR_MOVING] =	{ "moving", S(RELAYING) | S(SPOOLING) |
				    S(LINGERING) },
	[ZP_PAIR_SPOOLING] =	{ "spooling", S(CONNECTING) | S(MOVING) },
};
#undef S

const char *
pair_state_str(enum zp_pair_state s)
{
	return (size_t)s < sizeof(pair_moves) / sizeof(pair_moves[0]) ?
	    pair_moves[s].name : "?";
}

void
pair_set_state(struct zp_pair *p, enum zp_pair_state to)
{
	if (to == p->state)
		return;
	assert((size_t)p->state < sizeof(pair_moves) / sizeof(pair_moves[0]));
	assert(pair_moves[p->state].to & (1u << to));
	if (zp_log_enabled(p->ctx->log, ZP_LOG_DEBUG))
		zp_log(p->ctx->log, ZP_LOG_DEBUG, "connection %llu: %s -> %s",
		    (unsigned long long)p->id, pair_state_str(p->state),
		    pair_state_str(to));
	p->state = to;
}

void
pair_fin_set(struct zp_pair *p, enum zp_fin to)
{
	/* OPEN -> HELD -> CARRIED | WATCHED, or OPEN again (a move). */
	assert(to == ZP_FIN_OPEN || to == ZP_FIN_HELD ?
	    p->fin == ZP_FIN_OPEN || to == ZP_FIN_OPEN :
	    p->fin == ZP_FIN_OPEN || p->fin == ZP_FIN_HELD);
	p->fin = to;
}

struct pair_mv *
pair_mv(struct zp_pair *p)
{
	if (p->mv == NULL && (p->mv = calloc(1, sizeof(*p->mv))) != NULL) {
		zp_connecting_init(&p->mv->next);
		p->mv->retiring.fd = -1;
		p->mv->next_idx = p->mv->retiring_idx = -1;
	}
	return p->mv;
}

/*
 * What holds of a pair that is still there after an event was handled:
 * each descriptor has one owner (a copy of one in two halves would be
 * closed twice, the second time perhaps another connection's), and what
 * the state says is so. Asserted: a bug, not a condition to handle.
 */
void
pair_check(const struct zp_pair *p)
{
	int	fds[5] = { p->client.fd, p->upstream.fd,
		    p->mv != NULL ? p->mv->retiring.fd : -1,
		    p->mv != NULL ? p->mv->next.fd : -1, p->conn.fd };
	int	i, j;

	for (i = 0; i < 5; i++)
		for (j = i + 1; j < 5; j++)
			assert(fds[i] == -1 || fds[i] != fds[j]);
	assert(p->state != ZP_PAIR_RELAYING || p->upstream.fd != -1);
	/* A connect to the upstream is under way only while it has none. */
	assert(p->conn.fd == -1 || (p->upstream.fd == -1 &&
	    (p->state == ZP_PAIR_CONNECTING || p->state == ZP_PAIR_MOVING)));
	assert(!pair_retiring(p) || pair_from_retiring(p) ||
	    p->state == ZP_PAIR_MOVING);
	assert(p->spool == NULL || p->state == ZP_PAIR_SPOOLING);
	(void)fds;
}

/*
 * A half is readable: the bytes it brings go the other way (nginx's
 * ngx_stream_proxy_process(s, from_upstream) shape). The half is told
 * by its descriptor: the client's and the upstream's are never the same.
 */
static void
half_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;
	int		 from_upstream = fd != p->client.fd;

	if (what & EV_CLOSED)
		(from_upstream ? &p->upstream : &p->client)->rdhup = 1;
	if (pair_run(p, from_upstream ? &p->down : &p->up) == 0)
		pair_check(p);
}

/* A half is writable again: the direction towards it goes on. */
static void
half_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;
	int		 to_upstream = fd != p->client.fd;

	(to_upstream ? &p->upstream : &p->client)->wblocked = 0;
	if (pair_run(p, to_upstream ? &p->up : &p->down) == 0)
		pair_check(p);
}

/*
 * Create a half's read event (its write event is made when a write first
 * falls short: zp_half_want_write). Where the backend can tell
 * (epoll's EPOLLRDHUP), the read event also says when the peer's FIN is
 * queued. Returns 0 or -1.
 */
int
pair_half_events(struct zp_pair *p, struct zp_half *h)
{
	struct event_base *base = p->ctx->base;
	short		   rflags = EV_READ | EV_PERSIST;

	if (event_base_get_features(base) & EV_FEATURE_EARLY_CLOSE)
		rflags |= EV_CLOSED;
	h->rev = event_new(base, h->fd, rflags, half_read_cb, p);
	h->wev = NULL;		/* made when first wanted */
	h->wcb = half_write_cb;
	return h->rev == NULL ? -1 : 0;
}

/* Set up a direction from src to dst with the given backend. */
static void
dir_init(struct zp_dir *d, struct zp_half *src, struct zp_half *dst,
    const struct zp_relay_ops *ops, size_t bufsize)
{
	d->src = src;
	d->dst = dst;
	zp_dir_set_backend(d, ops);
	d->pipe.rfd = d->pipe.wfd = -1;
	d->bufsize = bufsize;
}

/*
 * A new pair for client socket fd from sa (salen 0: no address), in the
 * context's list and counts; its directions set up, plain. NULL when out
 * of memory: fd closed, the count undone.
 */
static struct zp_pair *
pair_new(struct zp_ctx *ctx, int fd, const struct sockaddr *sa,
    socklen_t salen, int counted)
{
	struct zp_pair	*p;
	size_t		 bufsize = ctx->cfg->buffer_size;

	if ((p = calloc(1, sizeof(*p))) == NULL) {
		zp_log(ctx->log, ZP_LOG_WARN, "dropping a client: %s",
		    strerror(errno));
		close(fd);
		if (counted) {
			__atomic_sub_fetch(&ctx->load, 1, __ATOMIC_SEQ_CST);
			zp_ctx_closed(ctx);
		}
		return NULL;
	}
	p->ctx = ctx;
	p->id = zp_ctx_next_id(ctx);
	p->client.fd = fd;
	p->upstream.fd = -1;
	zp_connecting_init(&p->conn);
	p->up_idx = -1;
	if (salen > sizeof(p->client_addr.ss))
		salen = sizeof(p->client_addr.ss);
	if (salen > 0)
		memcpy(&p->client_addr.ss, sa, salen);
	p->client_addr.len = salen;
	zp_clock_now(&p->started);
	TAILQ_INSERT_TAIL(&ctx->pairs, p, entry);
	ctx->stats.conns_total++;
	ctx->stats.conns_open++;
	if (!counted)
		__atomic_add_fetch(&ctx->load, 1, __ATOMIC_RELAXED);

	dir_init(&p->up, &p->client, &p->upstream, &zp_relay_copy, bufsize);
	dir_init(&p->down, &p->upstream, &p->client, &zp_relay_copy, bufsize);
	p->up.bufs = p->down.bufs = &ctx->bufs;
	p->up.splice_min = p->down.splice_min = ctx->cfg->splice_min;
	p->up.tally[0] = &ctx->stats.all.up;
	p->down.tally[0] = &ctx->stats.all.down;
	if (ctx->pool != NULL && ctx->cfg->splice_min > 0)
		p->up.lazy = p->down.lazy = 1;
	return p;
}

/*
 * The client's stream is cut into messages (framing, max_frame as the
 * framer takes them), with --replay-window's window. Returns 0, or -1
 * when out of memory (the pair is not freed).
 */
static int
pair_framed(struct zp_pair *p, int framing, size_t max_frame)
{
	struct zp_ctx	*ctx = p->ctx;

	p->framing = framing;
	p->max_frame = max_frame;
	if (framing == ZP_FRAMING_NONE)
		return 0;
	if ((p->up.fr = calloc(1, sizeof(*p->up.fr))) == NULL ||
	    zp_framer_init(&p->up.fr->f, (enum zp_framing)framing,
	    max_frame) == -1)
		return -1;
	p->up.fr->log = ctx->log;
	p->up.fr->id = p->id;
	p->up.fr->tee_rfd = ctx->tee_pipe.rfd;
	p->up.fr->tee_wfd = ctx->tee_pipe.wfd;
	if (ctx->cfg->replay_window > 0) {
		if ((p->up.fr->rp = malloc(sizeof(*p->up.fr->rp))) == NULL)
			return -1;
		zp_replay_init(p->up.fr->rp, ctx->cfg->replay_window,
		    ctx->devnull, ctx->pipes_roomy);
	}
	return 0;
}

/* Start a pair for an accepted client socket. */
int
zp_pair_start(struct zp_ctx *ctx, int fd, const struct sockaddr *sa,
    socklen_t salen, unsigned flags)
{
	struct zp_pair	*p;

	if ((p = pair_new(ctx, fd, sa, salen, flags & ZP_START_COUNTED)) ==
	    NULL)
		return -1;
	p->tls = (flags & ZP_START_TLS) != 0;
	sock_tune(ctx, fd);
	if (pair_framed(p, ctx->cfg->framing, ctx->cfg->max_frame) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return -1;
	}
	if (ctx->cfg->accept_proxy)
		return pair_header_start(p) != 0 ? -1 : 0;
	return pair_admitted(p) != 0 ? -1 : 0;
}

void
pair_use_tls(struct zp_pair *p)
{
	zp_dir_set_backend(&p->up, &zp_relay_tls);
	zp_dir_set_backend(&p->down, &zp_relay_tls);
	p->up.lazy = p->down.lazy = 0;
	p->up.fellback = p->down.fellback = 1;
}

int ZP_MAY_FREE
pair_admitted(struct zp_pair *p)
{
	return p->tls ? pair_tls_start(p) : pair_begin(p);
}

/*
 * A UDP source's stream: framed as its datagrams were (a frame may be
 * one datagram at its longest, escapes and all, whatever --max-frame
 * says: the UDP side counts those over it), its destination the
 * listener's.
 */
int
zp_pair_start_dgram(struct zp_ctx *ctx, int fd, const struct zp_addr *src,
    const struct zp_addr *local, int framing, uint64_t *id,
    struct zp_feed *feed)
{
	struct zp_pair	*p;
	size_t		 max = ZP_DGRAM_FRAME_MAX(ZP_DGRAM_MAX);

	if ((p = pair_new(ctx, fd, (const struct sockaddr *)&src->ss,
	    src->len, 0)) == NULL) {
		zp_feed_unref(feed);
		return -1;
	}
	*id = p->id;
	p->dgram = 1;
	/*
	 * The frames come in memory (the feed), taken by the copy backend:
	 * such a stream copies both ways, for good (a collector sends next
	 * to nothing back).
	 */
	p->client.feed = feed;
	feed->half = &p->client;
	p->up.lazy = p->down.lazy = 0;
	p->up.fellback = p->down.fellback = 1;
	p->dst = *local;
	if (ctx->cfg->max_frame > max)
		max = ctx->cfg->max_frame;
	if (pair_framed(p, framing, max) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return -1;
	}
	return pair_begin(p) != 0 ? -1 : 0;
}

void
zp_pairs_close(struct zp_ctx *ctx, enum zp_end end)
{
	while (!TAILQ_EMPTY(&ctx->pairs))
		zp_pair_close(TAILQ_FIRST(&ctx->pairs), end);
	/* And the mirror streams of pairs gone that were still finishing. */
	zp_mirror_sets_close(ctx);
}
