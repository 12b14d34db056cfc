/*
 * pair.c - the life of one proxied connection: start, relay both
 * directions (the run loop), end once and log it once. Its parts, which
 * pair_int.h ties together: pair_connect.c (the connect to an upstream),
 * pair_header.c (--accept-proxy) and pair_spool.c (--spool).
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

#include "clock.h"
#include "connect.h"
#include "ctx.h"
#include "log.h"
#include "net.h"
#include "pair.h"
#include "pair_int.h"
#include "proxyproto.h"
#include "spool.h"
#include "worker.h"

static void	pair_timer_cb(evutil_socket_t, short, void *);
static void	pair_next_drop(struct zp_pair *);
static int	pair_stall_check(struct zp_pair *, const struct timeval *)
		    ZP_MAY_FREE;
static int	pair_rewind(struct zp_pair *) ZP_MAY_FREE;

_Static_assert(sizeof(((struct zp_stats *)0)->moves) / sizeof(uint64_t) ==
    ZP_MOVE_MAX, "a move counter for each reason");

/* Name of an end reason; these words are what users grep logs for. */
const char *
zp_end_str(enum zp_end e)
{
	switch (e) {
	case ZP_END_CLOSED:		return "closed";
	case ZP_END_CLIENT_RESET:	return "client-reset";
	case ZP_END_UPSTREAM_RESET:	return "upstream-reset";
	case ZP_END_CLIENT_ERROR:	return "client-error";
	case ZP_END_UPSTREAM_ERROR:	return "upstream-error";
	case ZP_END_REFUSED:		return "upstream-refused";
	case ZP_END_TIMEOUT:		return "upstream-timeout";
	case ZP_END_UNREACHABLE:	return "upstream-unreachable";
	case ZP_END_NOMEM:		return "out-of-memory";
	case ZP_END_SHUTDOWN:		return "shutdown";
	case ZP_END_IDLE:		return "idle-timeout";
	case ZP_END_FIN_TIMEOUT:	return "fin-timeout";
	case ZP_END_PROXY_HEADER:	return "proxy-header-failed";
	case ZP_END_LOCAL_RESOURCE:	return "local-resource";
	case ZP_END_BAD_PROXY_HEADER:	return "bad-proxy-header";
	case ZP_END_DENIED:		return "denied";
	case ZP_END_SOURCE_LIMIT:	return "source-limit";
	case ZP_END_BAD_DST:		return "bad-destination";
	case ZP_END_SOURCE_FAMILY:	return "source-family";
	case ZP_END_SPOOLED:		return "spooled";
	case ZP_END_SPOOL_FAILED:	return "spool-failed";
	case ZP_END_SPOOL_FULL:		return "spool-full";
	}
	return "unknown";
}

/* Why a stream moved; the reason label of zproxy_stream_moves_total. */
const char *
zp_move_reason_str(int r)
{
	switch (r) {
	case ZP_MOVE_FAILED:	return "upstream-failed";
	case ZP_MOVE_LIFETIME:	return "max-lifetime";
	case ZP_MOVE_REBALANCE:	return "rebalance";
	case ZP_MOVE_STALLED:	return "upstream-stalled";
	}
	return "unknown";
}

/*
 * A direction splices when it has its pipe or will take one at the first
 * bulk read; one that fell back (refused, or no pipe) copies.
 */
static int
dir_splices(const struct zp_dir *d)
{
	return !d->fellback && (d->ops == &zp_relay_splice || d->lazy);
}

/* "splice", "copy" or "mixed", from the pair's directions. */
const char *
zp_pair_mode(const struct zp_pair *p)
{
	int	s_up = dir_splices(&p->up), s_down = dir_splices(&p->down);

	if (s_up && s_down)
		return "splice";
	if (!s_up && !s_down)
		return "copy";
	return "mixed";
}

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
static uint64_t
sock_discard(int fd)
{
	uint64_t	total = 0;

	(void)zp_sock_drain(fd, 64, &total);
	return total;
}

/*
 * Bytes of a socket's send queue its peer has not acknowledged (SIOCOUTQ),
 * the FIN we queued included when `with_fin`. 0 when it cannot tell.
 */
static int
sock_unacked(const struct zp_half *h, int with_fin)
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
	n = (uint64_t)sock_unacked(d->dst, 0);
	zp_dir_uncount(d, n);
}

/* The end reason that a dead half stands for; see pair.h. */
enum zp_end
zp_half_end(const struct zp_half *h, int client)
{
	int	reset = h->err == ECONNRESET || h->err == EPIPE ||
		    h->err == ECONNABORTED;

	if (client)
		return reset ? ZP_END_CLIENT_RESET : ZP_END_CLIENT_ERROR;
	return reset ? ZP_END_UPSTREAM_RESET : ZP_END_UPSTREAM_ERROR;
}

/* Free a half's events and close its socket; `abort`: with an RST. */
static void
half_close(struct zp_half *h, int abort)
{
	static const struct linger	rst = { 1, 0 };

	if (h->rev != NULL)
		event_free(h->rev);
	if (h->wev != NULL)
		event_free(h->wev);
	h->rev = h->wev = NULL;
	h->ron = h->won = 0;
	if (h->fd != -1) {
		if (abort && !h->dead)
			(void)setsockopt(h->fd, SOL_SOCKET, SO_LINGER, &rst,
			    sizeof(rst));
		close(h->fd);
	}
	h->fd = -1;
}

/* Log the whole story of a pair in one line. */
static void
pair_log(struct zp_pair *p, enum zp_end end)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_conn_record	 rec;
	char			 cbuf[ZP_ADDRSTRLEN], pbuf[ZP_ADDRSTRLEN];
	char			 dbuf[ZP_ADDRSTRLEN], ubuf[300];
	struct timeval		 now, dt;
	int			 level, err = 0, limited = 0;

	switch (end) {
	case ZP_END_BAD_DST:
		level = ZP_LOG_WARN;
		err = p->connect_err;	/* SO_ORIGINAL_DST's failure, if any */
		break;
	case ZP_END_REFUSED:
	case ZP_END_TIMEOUT:
	case ZP_END_UNREACHABLE:
	case ZP_END_NOMEM:
	case ZP_END_LOCAL_RESOURCE:
	case ZP_END_SOURCE_FAMILY:
		level = ZP_LOG_WARN;
		err = p->connect_err;
		break;
	case ZP_END_CLIENT_RESET:
	case ZP_END_CLIENT_ERROR:
		level = ZP_LOG_CONN;
		err = p->client.err;
		break;
	case ZP_END_SPOOL_FAILED:
		level = ZP_LOG_ERROR;
		err = p->client.err;
		break;
	case ZP_END_SPOOL_FULL:
		/* Why no upstream took it; refusals are rate-limited. */
		level = ZP_LOG_WARN;
		err = p->connect_err;
		limited = 1;
		break;
	case ZP_END_UPSTREAM_RESET:
	case ZP_END_UPSTREAM_ERROR:
		level = ZP_LOG_CONN;
		err = p->upstream.err;
		break;
	case ZP_END_BAD_PROXY_HEADER:
		/* Seen by default (a balancer sending none), but limited. */
		level = ZP_LOG_WARN;
		limited = 1;
		break;
	case ZP_END_DENIED:
	case ZP_END_SOURCE_LIMIT:
		level = ZP_LOG_CONN;
		limited = 1;
		break;
	default:
		level = ZP_LOG_CONN;
		break;
	}
	if (!zp_log_enabled(ctx->log, level))
		return;
	zp_clock_now(&now);
	timersub(&now, &p->started, &dt);
	if (p->up_addr.len > 0)
		zp_addr_str(&p->up_addr, ubuf, sizeof(ubuf));
	else if (p->up_idx >= 0)
		zp_upstream_label(ctx->ups, (size_t)p->up_idx, ubuf,
		    sizeof(ubuf));
	else
		snprintf(ubuf, sizeof(ubuf), "none");
	memset(&rec, 0, sizeof(rec));
	rec.id = p->id;
	rec.client = zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf));
	if (p->peer_addr.len > 0)
		rec.peer = zp_addr_str(&p->peer_addr, pbuf, sizeof(pbuf));
	rec.upstream = ubuf;
	if (p->dst.len > 0)
		rec.dst = zp_addr_str(&p->dst, dbuf, sizeof(dbuf));
	rec.mode = zp_pair_mode(p);
	rec.up = p->up.bytes + p->spooled;
	rec.down = p->down.bytes;
	rec.duration = dt.tv_sec + dt.tv_usec / 1e6;
	rec.end = zp_end_str(end);
	rec.error = err != 0 ? strerror(err) : NULL;
	if (end == ZP_END_BAD_PROXY_HEADER)
		rec.error = p->hdr_why;
	/*
	 * A client chooses its destination, and under --source client its
	 * family: limited, as refusals are.
	 */
	if (limited || end == ZP_END_BAD_DST || end == ZP_END_SOURCE_FAMILY)
		zp_log_conn_limited(ctx->log, level, &rec);
	else
		zp_log_conn(ctx->log, level, &rec);
}

/* End a pair in any state, log it, free everything it owns. */
void
zp_pair_close(struct zp_pair *p, enum zp_end end)
{
	struct zp_ctx	*ctx = p->ctx;
	int		 discard, live = p->state == ZP_PAIR_RELAYING ||
			    p->state == ZP_PAIR_LINGERING;

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
			p->up.discarded += sock_discard(p->client.fd);
		if (!p->upstream.dead && p->upstream.fd != -1)
			p->down.discarded += sock_discard(p->upstream.fd);
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
	if (p->up.fr != NULL)
		dframe_replay_free(p->up.fr);
	free(p->up.fr);
	p->up.fr = NULL;
	if (end == ZP_END_IDLE)
		ctx->stats.timeouts_idle++;
	else if (end == ZP_END_FIN_TIMEOUT)
		ctx->stats.timeouts_fin++;
	else if (end == ZP_END_BAD_PROXY_HEADER)
		ctx->stats.bad_proxy_headers++;
	else if (end == ZP_END_DENIED)
		ctx->stats.clients_denied++;
	else if (end == ZP_END_SOURCE_LIMIT)
		ctx->stats.clients_source_limited++;
	free(p->hdr);
	zp_spool_writer_free(p->spool);
	p->spool = NULL;
	pair_connect_release(p);
	if (p->timer != NULL)
		event_free(p->timer);
	p->timer = NULL;
	switch (end) {
	case ZP_END_REFUSED:
	case ZP_END_TIMEOUT:
	case ZP_END_UNREACHABLE:
	case ZP_END_SPOOL_FULL:
		ctx->stats.conns_failed++;
		break;
	default:
		break;
	}
	zp_mirror_set_release(p->mir);
	p->mir = p->up.mir = NULL;
	zp_dir_release(ctx, &p->up);
	zp_dir_release(ctx, &p->down);
	/*
	 * Refused after its header, or its destination: the client learns
	 * at once, with a reset, as the listener refuses.
	 */
	half_close(&p->client, p->linger_abort || end == ZP_END_DENIED ||
	    end == ZP_END_SOURCE_LIMIT || end == ZP_END_BAD_DST);
	half_close(&p->upstream, p->linger_abort);
	half_close(&p->retiring, 0);
	if (p->retire_timer != NULL)
		event_free(p->retire_timer);
	pair_next_drop(p);
	TAILQ_REMOVE(&ctx->pairs, p, entry);
	ctx->stats.conns_open--;
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
static int ZP_MAY_FREE
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
	if (surv->dead || (outq = sock_unacked(surv, 1)) == 0) {
		zp_pair_close(p, end);
		return 1;
	}
	zp_clock_now(&now);
	heard = surv == &p->client ? &p->up : &p->down;
	if (p->state != ZP_PAIR_LINGERING) {
		p->state = ZP_PAIR_LINGERING;
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
		    (unsigned long long)p->id, sock_unacked(surv, 0),
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

	if (p->upstream.fd == -1 ||
	    zp_sock_acked(p->upstream.fd, &acked) == -1)
		return (uint64_t)sock_unacked(&p->upstream, 0);
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

static int
pair_movable(const struct zp_pair *p)
{
	return pair_leavable(p) && !p->up.done;
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

static int	pair_move(struct zp_pair *, int) ZP_MAY_FREE;
static int	pair_switch(struct zp_pair *) ZP_MAY_FREE;

/*
 * Before each pump: may the stream move (the up direction keeps its
 * store when the upstream fails), and does the down direction carry a
 * FIN (not while the stream may move, nor the FIN of an old upstream a
 * planned move left: the client's stream goes on)?
 */
static void
pair_hold(struct zp_pair *p)
{
	int	movable, m;

	if (p->up.fr == NULL)
		return;
	movable = pair_movable(p);
	m = movable && !p->winding;
	p->up.fr->hold = m;
	p->down.hold_fin = !p->winding && (m || p->down.src == &p->retiring);
	/*
	 * The client's FIN waits while what it sent may need sending again,
	 * in a wind-down too: the drain must not lose it to a stalled
	 * collector.
	 */
	p->up.hold_fin = movable && !p->fin_released &&
	    (p->ctx->cfg->stall_timeout > 0 || p->retiring.fd != -1);
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
static int
pair_fin_release(struct zp_pair *p)
{
	if (p->retiring.fd == -1 && sock_unacked(&p->upstream, 0) <= 0) {
		p->fin_held = 0;
		p->fin_released = 1;
		timerclear(&p->stall_since);
		/*
		 * Acknowledged is not read: a stopped collector's kernel
		 * takes a whole receive buffer. One that does not close
		 * within --stall-timeout of the FIN has stalled too.
		 */
		if (p->ctx->cfg->stall_timeout > 0) {
			p->fin_watch = 1;
			zp_clock_now(&p->stall_since);
		}
		return 1;
	}
	if (!p->fin_held) {
		p->fin_held = 1;
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
static int
pair_stall_watch(struct zp_pair *p)
{
	if (p->ctx->cfg->stall_timeout <= 0 || p->up.fr == NULL ||
	    p->state != ZP_PAIR_RELAYING)
		return 0;
	if (p->fin_held || p->fin_watch)
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
static int
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
	if (p->fin_watch) {
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
	timerclear(&p->stall_since);
	if (!pair_movable(p))
		return 0;
	zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: the upstream %s took "
	    "nothing for %.3gs (--stall-timeout) with %d bytes sent to it "
	    "not acknowledged: it has failed", (unsigned long long)p->id,
	    zp_addr_str(&p->up_addr, buf, sizeof(buf)),
	    ctx->cfg->stall_timeout, sock_unacked(&p->upstream, 0));
failed:
	(void)setsockopt(p->upstream.fd, SOL_SOCKET, SO_LINGER, &rst,
	    sizeof(rst));
	p->upstream.err = ETIMEDOUT;
	return pair_move(p, ZP_MOVE_STALLED);
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
		pair_hold(p);
		rc = zp_dir_pump(ctx, d, ctx->budget);
		pair_framing_error(p);
		if (rc & ZP_PUMP_MOVE)
			return pair_move(p, ZP_MOVE_FAILED);
		if ((rc & ZP_PUMP_BOUNDARY) && p->next.fd != -1)
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
		if (p->down.src == &p->retiring && p->down.eof &&
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
	/*
	 * The upstream's FIN waited while the stream could still move; once
	 * it cannot (the client is done, the framing failed), carry it over.
	 */
	if (p->move_log_due && !p->up.fr->cutting) {
		p->move_log_due = 0;
		pair_move_log(p, &p->up_addr);
	}
	if (p->down.hold_fin && p->down.eof && !p->down.done &&
	    p->down.src != &p->retiring && !pair_movable(p)) {
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
 * What holds of a pair that is still there after an event was handled:
 * each descriptor has one owner (a copy of one in two halves would be
 * closed twice, the second time perhaps another connection's), and what
 * the state says is so. Asserted: a bug, not a condition to handle.
 */
void
pair_check(const struct zp_pair *p)
{
	int	fds[5] = { p->client.fd, p->upstream.fd, p->retiring.fd,
		    p->next.fd, p->conn.fd };
	int	i, j;

	for (i = 0; i < 5; i++)
		for (j = i + 1; j < 5; j++)
			assert(fds[i] == -1 || fds[i] != fds[j]);
	assert(p->state != ZP_PAIR_RELAYING || p->upstream.fd != -1);
	/* A connect to the upstream is under way only while it has none. */
	assert(p->conn.fd == -1 || (p->upstream.fd == -1 &&
	    (p->state == ZP_PAIR_CONNECTING || p->state == ZP_PAIR_MOVING)));
	assert(p->retiring.fd == -1 || p->down.src == &p->retiring ||
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
 * Create a half's two persistent events. Where the backend can tell
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
	h->wev = event_new(base, h->fd, EV_WRITE | EV_PERSIST, half_write_cb,
	    p);
	return h->rev == NULL || h->wev == NULL ? -1 : 0;
}

/*
 * The timer fired: look at a lingering pair again, or close a pair idle
 * for --idle-timeout, or half-closed and idle for --fin-timeout; else
 * wait for the rest.
 */
static void
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
	if (p->fin_held && p->state == ZP_PAIR_RELAYING) {
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
	    !timerisset(&p->stall_since) && !p->fin_held)
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
	if (p->fin_held && p->fin_poll_ms / 1000.0 < wait)
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

/* Did the move begin with its upstream's failure (an error= to say)? */
static int
pair_move_failed(const struct zp_pair *p)
{
	return p->move_reason == ZP_MOVE_FAILED ||
	    p->move_reason == ZP_MOVE_STALLED;
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

	zp_log(ctx->log, to != NULL ? ZP_LOG_CONN : ZP_LOG_WARN,
	    "connection %llu %s: client=%s from=%s to=%s reason=%s%s%s%s "
	    "frames=%llu unacked=%llu cut=%llu replayed=%llu",
	    (unsigned long long)p->id, to != NULL ? "moved" :
	    "could not move", zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf)),
	    zp_addr_str(&p->move_from, fbuf, sizeof(fbuf)),
	    to != NULL ? zp_addr_str(to, tbuf, sizeof(tbuf)) : "none",
	    zp_move_reason_str(p->move_reason),
	    pair_move_failed(p) ? " error=\"" : "",
	    !pair_move_failed(p) ? "" : p->move_err != 0 ?
	    strerror(p->move_err) : p->move_checked ? "marked down by the "
	    "health checks" : "closed by the upstream",
	    pair_move_failed(p) ? "\"" : "",
	    (unsigned long long)p->move_frames,
	    (unsigned long long)p->move_unacked,
	    (unsigned long long)(p->up.fr->cut - p->move_cut),
	    (unsigned long long)p->move_replayed);
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
static int
pair_move(struct zp_pair *p, int reason)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	struct zp_half		*h = &p->upstream;
	struct timeval		 now;
	int			 old = p->up_idx, err;

	pair_next_drop(p);
	fr->seek = 0;
	p->move_reason = reason;
	p->move_checked = 0;
	p->move_from = p->up_addr;
	p->move_err = h->err;
	p->move_unacked = upstream_unacked(p);
	p->move_frames = fr->frames - p->frames_base;
	zp_upstream_release(ctx->ups, (size_t)old);
	if (h->err != 0) {
		zp_clock_now(&now);
		zp_upstream_report(ctx->ups, (size_t)old, 0, h->err, &now);
	}
	if (!h->dead && h->fd != -1)
		p->down.discarded += sock_discard(h->fd);
	half_close(h, 0);
	memset(h, 0, sizeof(*h));
	h->fd = -1;
	p->moves++;
	ctx->stats.moves[reason]++;
	/* The next upstream gets the held FIN once it acknowledged all. */
	p->fin_held = p->fin_released = p->fin_watch = 0;
	timerclear(&p->stall_since);
	p->state = ZP_PAIR_MOVING;
	p->move_cut = fr->cut;
	p->move_replayed = fr->replayed;
	if (zp_dir_move(ctx, &p->up) == -1) {
		p->client.err = errno;
		pair_move_log(p, NULL);
		zp_pair_close(p, errno == EPROTO ? ZP_END_CLIENT_ERROR :
		    ZP_END_NOMEM);
		return 1;
	}
	p->move_replayed = fr->replayed - p->move_replayed;
	ctx->stats.replayed += p->move_replayed;
	if (fr->rp != NULL && (err = zp_replay_retry(fr->rp)) != 0)
		zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: no replay "
		    "window could be kept (a pipe: %s); nothing is sent again",
		    (unsigned long long)p->id, strerror(err));
	/*
	 * Bytes still on the way to the client go after the move; but not
	 * after a FIN it was sent already (a wind-down's): that way is over.
	 */
	if (!p->client.wshut)
		p->down.eof = p->down.done = p->down.shut = p->down.drained =
		    0;
	zp_half_want_read(&p->client, 0);
	zp_half_want_write(&p->client, 0);
	p->up_base = p->up.bytes;
	p->frames_base = fr->frames;
	p->up_sent = 0;
	p->up_addr.len = 0;
	p->connect_err = 0;
	memset(p->tried, 0, sizeof(p->tried));
	p->tried[old] = 1;
	p->attempts = 1;
	timerclear(&p->retry_until);
	if (pair_connect_upstream(p) != 0)
		return 1;	/* freed */
	return 1;		/* connecting: the connect's events have it */
}

/* Set up a direction from src to dst with the given backend. */
static void
dir_init(struct zp_dir *d, struct zp_half *src, struct zp_half *dst,
    const struct zp_relay_ops *ops, size_t bufsize)
{
	d->src = src;
	d->dst = dst;
	d->ops = ops;
	d->pipe.rfd = d->pipe.wfd = -1;
	d->bufsize = bufsize;
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
	if (p->down.src == &p->retiring)
		pair_retire_done(p, 0);
	p->down.eof = 1;
	return pair_run(p, &p->down);
}

/* ---- planned moves: --max-lifetime, --rebalance ---------------------- */

/* Forget a planned move's next upstream (not connected to yet, or idle). */
static void
pair_next_drop(struct zp_pair *p)
{
	zp_connecting_cancel(&p->next);
	if (p->up.fr != NULL)
		p->up.fr->seek = 0;
}

int
zp_pair_can_move(const struct zp_pair *p)
{
	return pair_movable(p) && p->next.fd == -1 &&
	    p->retiring.fd == -1 && !p->up.fr->seek && !p->up.fr->cutting &&
	    !p->ctx->stopping;
}

/* The next upstream answered, or not: seek a boundary, or give up. */
static void
pair_next_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now;
	char		 buf[ZP_ADDRSTRLEN];
	int		 err = zp_connecting_result(&p->next, what);

	if (err != 0 || !pair_movable(p)) {
		if (err != 0) {
			if (!zp_connect_local_error(err)) {
				zp_clock_now(&now);
				zp_upstream_report(ctx->ups,
				    (size_t)p->next_idx, 0, err, &now);
			}
			zp_log(ctx->log, ZP_LOG_CONN, "connection %llu stays: "
			    "%s move to %s failed: %s",
			    (unsigned long long)p->id,
			    zp_move_reason_str(p->move_reason),
			    zp_addr_str(&p->next_addr, buf, sizeof(buf)),
			    strerror(err));
		}
		pair_next_drop(p);
		return;
	}
	/* Until the boundary, the current upstream gets the frame in hand. */
	p->up.fr->seek = 1;
	if (pair_run(p, &p->up) == 0)
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
	if (pair_source(p, a, &srcbuf, &src) == -1)
		return -1;
	/* Even a connect done at once is taken up from the loop. */
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	if (zp_connecting_start(&p->next, ctx->base, a, src, ZP_CONNECT_DEFER |
	    (ctx->cfg->source == ZP_SOURCE_CLIENT ? ZP_CONNECT_TRANSPARENT :
	    0), &tv, pair_next_cb, p) == -1)
		return -1;
	pair_sock_tune_upstream(ctx, p->next.fd);
	p->next_idx = idx;
	p->next_addr = *a;
	p->move_reason = reason;
	p->move_checked = reason == ZP_MOVE_FAILED;
	return 0;
}

static void
retiring_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	if (what & EV_CLOSED)
		p->retiring.rdhup = 1;
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
	struct zp_half		*r = &p->retiring;
	char			 buf[ZP_ADDRSTRLEN];
	uint64_t		 acked, lost = 0;
	int			 left = r->dead ? 0 : sock_unacked(r, 0);

	if (r->fd == -1)
		return;
	/* What the client gets from now on is the current upstream's. */
	pair_tally(p, &p->down, p->up_idx);
	if ((timed_out || r->dead) && zp_sock_acked(r->fd, &acked) == 0)
		lost = acked >= p->retiring_sent ? 0 : p->retiring_sent - acked;
	else if (timed_out || r->dead)
		lost = (uint64_t)left;
	if (timed_out || left > 0 || r->dead)
		zp_log(ctx->log, ZP_LOG_WARN, "connection %llu: the old "
		    "upstream %s %s; %d bytes sent to it not acknowledged%s",
		    (unsigned long long)p->id, zp_addr_str(&p->retiring_addr,
		    buf, sizeof(buf)), timed_out ? "did not close within "
		    "--drain-timeout" : r->dead ? strerror(r->err) :
		    "closed", left, lost > 0 && p->up.fr != NULL &&
		    p->up.fr->rp != NULL && !p->up.done ? ": the replay "
		    "window goes again to the current one" : "");
	if (lost > 0 && p->up.fr != NULL && p->up.fr->rp != NULL &&
	    !p->up.done) {
		p->rewind_due = 1;
		p->up.fr->seek = 1;
	}
	if (p->retire_timer != NULL)
		event_free(p->retire_timer);
	p->retire_timer = NULL;
	if (!r->dead)
		p->down.discarded += sock_discard(r->fd);
	half_close(r, 0);
	memset(r, 0, sizeof(*r));
	r->fd = -1;
	p->down.src = &p->upstream;
	p->down.eof = p->down.drained = 0;
}

/*
 * The stream reached a boundary that it sought for a replay
 * (pair_retire_done): the window goes again to the current upstream,
 * before what the store holds. Returns 1 when the pair was freed.
 */
static int
pair_rewind(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	uint64_t		 before = fr->replayed;
	char			 buf[ZP_ADDRSTRLEN];
	int			 rc;

	fr->seek = 0;
	if (!p->rewind_due)
		return 0;
	p->rewind_due = 0;
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
static int
pair_switch(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dframe	*fr = p->up.fr;
	struct zp_half		*h = &p->upstream, *r = &p->retiring;
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
	fr->seek = 0;
	p->move_from = p->up_addr;
	p->move_err = 0;
	p->move_unacked = (uint64_t)sock_unacked(h, 0);
	p->move_frames = fr->frames - p->frames_base;
	p->move_cut = fr->cut;
	p->move_replayed = 0;
	/* Its bytes down stay its own until it closes (pair_retire_done). */
	zp_upstream_release(ctx->ups, (size_t)p->up_idx);
	p->retiring_sent = p->up_sent + (p->up.bytes - p->up_base);
	p->up_base = p->up.bytes;
	p->frames_base = fr->frames;
	/* A FIN after its last whole frame; it stays open until it closes. */
	if (!h->wshut && shutdown(h->fd, SHUT_WR) == 0)
		h->fin = 1;
	h->wshut = 1;
	if (h->rev != NULL)
		event_free(h->rev);
	if (h->wev != NULL)
		event_free(h->wev);
	h->rev = h->wev = NULL;
	h->ron = h->won = 0;
	/* The old upstream is the retiring one's, and only its. */
	*r = *h;
	r->rev = rev;
	p->retire_timer = timer;
	p->retiring_idx = p->up_idx;
	p->retiring_addr = p->up_addr;
	p->down.src = r;
	/* The next one is the upstream's, and only its. */
	memset(h, 0, sizeof(*h));
	h->fd = zp_connecting_take(&p->next);
	p->up_idx = p->next_idx;
	p->up_addr = p->next_addr;
	p->up_sent = 0;
	pair_tally(p, &p->up, p->up_idx);
	zp_clock_now(&now);
	zp_upstream_report(ctx->ups, (size_t)p->up_idx, 1, 0, &now);
	zp_upstream_acquire(ctx->ups, (size_t)p->up_idx);
	zp_clock_now(&p->up_since);
	p->moves++;
	ctx->stats.moves[p->move_reason]++;
	/* A held FIN waits for the next one (and for the retiring one). */
	p->fin_held = p->fin_released = p->fin_watch = 0;
	timerclear(&p->stall_since);
	if (ctx->cfg->send_proxy && pair_send_proxy(p, hdr, &hlen) == -1) {
		zp_pair_close(p, ZP_END_PROXY_HEADER);
		return 1;
	}
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

	if (ctx->cfg->framing == ZP_FRAMING_NONE)
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
		if (p->next.fd != -1) {
			eff[p->up_idx]--;
			eff[p->next_idx]++;
		}
		if (zp_pair_can_move(p))
			movable[p->up_idx]++;
	}
}

/* Begin one --rebalance move from hi to lo; see pair.h. */
int
zp_pairs_move_one(struct zp_ctx *ctx, int hi, int lo)
{
	struct zp_pair	*p;

	if (ctx->stopping)
		return 0;
	TAILQ_FOREACH(p, &ctx->pairs, entry)
		if (p->up_idx == hi && zp_pair_can_move(p) &&
		    zp_pair_plan_move(p, lo, ZP_MOVE_REBALANCE) == 0)
			return 1;
	return 0;
}

/* Which move --rebalance makes now; see pair.h. */
int
zp_rebalance_choose(const struct zp_upstreams *ups, const long *eff,
    int *hip, int *lop)
{
	struct zp_upstream u;
	size_t		 i, n = zp_upstreams_count(ups);
	int		 hi = -1, lo = -1;

	for (i = 0; i < n; i++) {
		zp_upstream_get(ups, i, &u);
		if (!u.up)
			continue;
		if (hi == -1 || eff[i] > eff[hi])
			hi = (int)i;
		if (lo == -1 || eff[i] < eff[lo])
			lo = (int)i;
	}
	if (hi == -1 || eff[hi] - eff[lo] < 2)
		return 0;
	*hip = hi;
	*lop = lo;
	return 1;
}

/* Start a pair for an accepted client socket. */
int
zp_pair_start(struct zp_ctx *ctx, int fd, const struct sockaddr *sa,
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
		return -1;
	}
	p->ctx = ctx;
	p->id = zp_ctx_next_id(ctx);
	p->client.fd = fd;
	p->upstream.fd = -1;
	p->retiring.fd = -1;
	zp_connecting_init(&p->conn);
	zp_connecting_init(&p->next);
	p->up_idx = -1;
	if (salen > sizeof(p->client_addr.ss))
		salen = sizeof(p->client_addr.ss);
	memcpy(&p->client_addr.ss, sa, salen);
	p->client_addr.len = salen;
	zp_clock_now(&p->started);
	TAILQ_INSERT_TAIL(&ctx->pairs, p, entry);
	ctx->stats.conns_total++;
	ctx->stats.conns_open++;
	if (!counted)
		__atomic_add_fetch(&ctx->load, 1, __ATOMIC_RELAXED);
	sock_tune(ctx, fd);

	dir_init(&p->up, &p->client, &p->upstream, &zp_relay_copy, bufsize);
	dir_init(&p->down, &p->upstream, &p->client, &zp_relay_copy, bufsize);
	p->up.bufs = p->down.bufs = &ctx->bufs;
	p->up.splice_min = p->down.splice_min = ctx->cfg->splice_min;
	p->up.tally[0] = &ctx->stats.all.up;
	p->down.tally[0] = &ctx->stats.all.down;
	if (ctx->cfg->framing != ZP_FRAMING_NONE &&
	    ((p->up.fr = calloc(1, sizeof(*p->up.fr))) == NULL ||
	    zp_framer_init(&p->up.fr->f, (enum zp_framing)ctx->cfg->framing,
	    ctx->cfg->max_frame) == -1)) {
		zp_pair_close(p, ZP_END_NOMEM);
		return -1;
	}
	if (p->up.fr != NULL) {
		p->up.fr->tee_rfd = ctx->tee_pipe.rfd;
		p->up.fr->tee_wfd = ctx->tee_pipe.wfd;
		if (ctx->cfg->replay_window > 0) {
			if ((p->up.fr->rp = malloc(sizeof(*p->up.fr->rp))) ==
			    NULL) {
				zp_pair_close(p, ZP_END_NOMEM);
				return -1;
			}
			zp_replay_init(p->up.fr->rp, ctx->cfg->replay_window,
			    ctx->devnull, ctx->pipes_roomy);
		}
	}
	if (ctx->pool != NULL && ctx->cfg->splice_min > 0)
		p->up.lazy = p->down.lazy = 1;
	if (ctx->cfg->accept_proxy)
		return pair_header_start(p) != 0 ? -1 : 0;
	return pair_begin(p) != 0 ? -1 : 0;
}

/* Open pairs by mode; see pair.h. */
void
zp_pairs_modes(struct zp_ctx *ctx, struct zp_pair_modes *m)
{
	struct zp_pair	*p;
	const char	*mode;

	memset(m, 0, sizeof(*m));
	TAILQ_FOREACH(p, &ctx->pairs, entry) {
		mode = zp_pair_mode(p);
		if (strcmp(mode, "splice") == 0)
			m->splice++;
		else if (strcmp(mode, "copy") == 0)
			m->copy++;
		else
			m->mixed++;
	}
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

void
zp_pairs_close(struct zp_ctx *ctx, enum zp_end end)
{
	while (!TAILQ_EMPTY(&ctx->pairs))
		zp_pair_close(TAILQ_FIRST(&ctx->pairs), end);
	/* And the mirror streams of pairs gone that were still finishing. */
	zp_mirror_sets_close(ctx);
}
