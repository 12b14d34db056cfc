/*
 * pair_connect.c - a pair's connect to its upstream: choose one, try each
 * of its addresses, wait out local faults (descriptors, memory, ports),
 * and set the pair up to relay once one answers.
 */

#include <sys/socket.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "ops/origdst.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "lib/proxyproto.h"
#include "relay/worker.h"

/*
 * After a connect failed for a local shortage (no descriptor, no kernel
 * memory, no local port), how long the pair rests before it tries the
 * same address again, in milliseconds: the listener's pause after EMFILE.
 */
#define ZP_CONNECT_RETRY_MS	100
/* ... and after asking the main thread to shed --stats clients. */
#define ZP_SHED_RETRY_MS	5
/* A UDP source's stream that no upstream took asks again this often. */
#define ZP_DGRAM_WAIT_MS	1000

static int	pair_connect_next(struct zp_pair *) ZP_MAY_FREE;
static int	pair_dgram_wait(struct zp_pair *) ZP_MAY_FREE;
static int	pair_no_upstream(struct zp_pair *) ZP_MAY_FREE;
static void	pair_dial_end(struct zp_pair *);

/*
 * Write the PROXY header before any client byte (and before a TLS
 * upstream's ClientHello), and leave it in hdr (ZP_PROXY_MAX), *hlen
 * long, for the mirrors. A fresh socket's send buffer always takes ~100
 * bytes whole; anything else is a failure.
 */
int
pair_send_proxy(struct zp_pair *p, int fd, char *hdr, size_t *hlen)
{
	struct sockaddr_storage	 local;
	socklen_t		 len = sizeof(local);
	ssize_t			 n, w;

	/*
	 * Behind a balancer, the address its client connected to; under
	 * --tproxy or after a redirect, where the client meant.
	 */
	memset(&local, 0, sizeof(local));
	if (p->px != NULL && p->px->proxy_dst.len > 0) {
		memcpy(&local, &p->px->proxy_dst.ss,
		    sizeof(p->px->proxy_dst.ss));
		len = p->px->proxy_dst.len;
	} else if (p->dst.len > 0)
		memcpy(&local, &p->dst.ss, sizeof(p->dst.ss));
	else if (getsockname(p->client.fd, (struct sockaddr *)&local,
	    &len) == -1)
		return -1;
	n = zp_proxy_header(p->ctx->cfg->send_proxy, p->dgram,
	    (struct sockaddr *)&p->client_addr.ss, (struct sockaddr *)&local,
	    hdr, ZP_PROXY_MAX);
	if (n == -1)
		return -1;
	*hlen = (size_t)n;
	do {
		w = send(fd, hdr, (size_t)n, MSG_NOSIGNAL);
	} while (w == -1 && errno == EINTR);
	if (w != n) {
		if (w != -1)
			errno = EAGAIN;
		return -1;
	}
	return 0;
}

/*
 * The addresses of an upstream for this pair: its own, or for -u
 * original the one the client meant.
 */
static size_t
pair_naddrs(const struct zp_pair *p)
{
	if (p->ctx->cfg->upstreams[p->up_idx].original)
		return 1;
	return zp_upstream_addr(p->ctx->ups, (size_t)p->up_idx, SIZE_MAX,
	    NULL);
}

/*
 * The i-th, in *buf: a copy, since a re-resolution on another thread may
 * replace the list; NULL when the list got shorter meanwhile.
 */
static const struct zp_addr *
pair_addr(const struct zp_pair *p, size_t i, struct zp_addr *buf)
{
	if (p->ctx->cfg->upstreams[p->up_idx].original)
		return &p->dst;
	if (i >= zp_upstream_addr(p->ctx->ups, (size_t)p->up_idx, i, buf))
		return NULL;
	return buf;
}

/*
 * The upstream answered: set up events and move what is waiting.
 * Returns 1 when the pair was freed (or moved on).
 */
static int ZP_MAY_FREE
pair_connected(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct timeval		 now;
	int			 moved = p->state == ZP_PAIR_MOVING, rc;
	char			 hdr[ZP_PROXY_MAX];
	size_t			 hlen = 0;

	/* As connected: a re-resolution may have changed the list since. */
	p->up_addr = p->dial->addr;
	/* A TLS upstream had its header before its ClientHello. */
	if (p->upstream.tls != NULL && p->dial->hs.hlen > 0) {
		memcpy(hdr, p->dial->hs.hdr, p->dial->hs.hlen);
		hlen = p->dial->hs.hlen;
	}
	pair_dial_end(p);
	zp_clock_now(&now);
	zp_upstream_report(ctx->ups, (size_t)p->up_idx, 1, 0, &now);
	zp_upstream_acquire(ctx->ups, (size_t)p->up_idx);
	pair_tally(p, &p->up, p->up_idx);
	/* An old upstream still closing is still the client's source. */
	if (!pair_retiring(p))
		pair_tally(p, &p->down, p->up_idx);
	pair_set_state(p, ZP_PAIR_RELAYING);
	zp_clock_now(&p->up_since);
	if (ctx->cfg->send_proxy && p->upstream.tls == NULL &&
	    pair_send_proxy(p, p->upstream.fd, hdr, &hlen) == -1) {
		p->upstream.err = errno;
		zp_pair_close(p, ZP_END_PROXY_HEADER);
		return 1;
	}
	p->up_sent = hlen;
	/* A moved stream keeps its mirrors: they follow the client. */
	if (!moved && p->mir == NULL)
		p->mir = p->up.mir = zp_mirror_set_new(ctx, p->id,
		    p->framing, p->max_frame, hdr, hlen);
	/* Said once the cut is done: it may need the rest of a frame. */
	p->move_log_due = moved;
	zp_clock_now(&p->last_active);
	if (pair_timer_update(p) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	/*
	 * --io-uring: a plain pair relays through the ring, its events
	 * never made; out of memory, it goes on as any other.
	 */
	if (!moved && pair_ring_eligible(p) && (rc = pair_ring_start(p)) >= 0)
		return rc;
	if ((!moved && pair_half_events(p, &p->client) == -1) ||
	    pair_half_events(p, &p->upstream) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	/*
	 * Try both directions before arming any event: the client has
	 * usually sent its first bytes while we were connecting. A framed
	 * stream that comes to an upstream during the drain winds down;
	 * that may end it (a client that reset meanwhile).
	 */
	if (ctx->stopping && zp_pair_wind_down(p, ZP_END_SHUTDOWN) == 1)
		return 1;
	if (pair_run(p, &p->up) != 0)
		return 1;
	return pair_run(p, &p->down);
}

/*
 * Give up on the current upstream address and try the next one (tls:
 * its handshake failed, err EPROTO). Returns 1 when the pair was freed.
 */
static int ZP_MAY_FREE
pair_connect_failed(struct zp_pair *p, int err, int tls)
{
	zp_connecting_cancel(&p->conn);
	p->connect_err = err;
	p->dial->tls_failed = tls;
	p->dial->addr_idx++;
	return pair_connect_next(p);
}

/*
 * The pair waits for a local resource, or no longer: keep the count that
 * holds the listener, and let the listener know when it changes.
 */
static void
pair_set_waiting(struct zp_pair *p, int on)
{
	struct zp_ctx	*ctx = p->ctx;

	if (p->dial == NULL || p->dial->waiting == on)
		return;
	p->dial->waiting = on;
	if (on)
		ctx->stats.conns_waiting++;
	else
		ctx->stats.conns_waiting--;
	__atomic_add_fetch(&zp_ctx_root(ctx)->waiting_all, on ? 1 : -1,
	    __ATOMIC_RELAXED);
	zp_ctx_changed(ctx);
}

/*
 * The connect phase's state, made when a pair begins to connect (at its
 * start, after a move, after its spool); NULL when out of memory.
 */
struct pair_dial *
pair_dial(struct zp_pair *p)
{
	if (p->dial == NULL)
		p->dial = calloc(1, sizeof(*p->dial));
	return p->dial;
}

/* The connect phase is over (connected, or the pair ends): free it. */
static void
pair_dial_end(struct zp_pair *p)
{
	if (p->dial == NULL)
		return;
	pair_set_waiting(p, 0);
	pair_uphs_clear(&p->dial->hs);
	if (p->dial->retry != NULL)
		event_free(p->dial->retry);
	if (p->dial->hold != NULL)
		event_free(p->dial->hold);
	free(p->dial);
	p->dial = NULL;
}

/* Free what the connect phase holds; zp_pair_close() calls this. */
void
pair_connect_release(struct zp_pair *p)
{
	pair_dial_end(p);
	zp_connecting_cancel(&p->conn);
}

/*
 * The first local fault of a pair: say so with -v, and at warn level at
 * most once a second, since the cause (descriptors, memory, ports) is the
 * operator's to fix. No "conn=" field: this is not the connection's line.
 */
static void
pair_wait_log(struct zp_pair *p, int err)
{
	struct zp_ctx	*ctx = p->ctx;
	char		 cbuf[ZP_ADDRSTRLEN], ubuf[300];
	int		 level = pair_warn_level(&ctx->local_warned);

	if (!zp_log_enabled(ctx->log, level))
		return;
	zp_log(ctx->log, level, "connect for client %s (conn %llu) to %s: "
	    "%s; retrying for up to %.3fs (%llu clients waiting)",
	    zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf)),
	    (unsigned long long)p->id,
	    zp_upstream_label(ctx->ups, (size_t)p->up_idx, ubuf,
	    sizeof(ubuf)),
	    strerror(err), ctx->cfg->connect_timeout,
	    (unsigned long long)ctx->stats.conns_waiting + !p->dial->waiting);
}

/* The pause after a local fault is over: the same address again. */
static void
pair_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair		*p = arg;

	/* A re-resolution may have shortened the list meanwhile. */
	if (p->dial->addr_idx >= pair_naddrs(p))
		p->dial->addr_idx = 0;
	if (pair_connect_next(p) == 0)
		pair_check(p);
}

/*
 * A connect failed for a shortage of this host's (zp_connect_local_error,
 * or an event that could not be made): neither the upstream's fault nor
 * the client's, so nothing is reported and no other address is tried.
 * The pair tries the same address again every ZP_CONNECT_RETRY_MS, the
 * client's bytes waiting in its socket, until --connect-timeout has
 * passed since its first such fault; then it ends with local-resource.
 * While any pair waits, the listener accepts nothing: a new client would
 * take the descriptor a waiting one needs. Returns 1 when the pair was
 * freed.
 */
static int ZP_MAY_FREE
pair_connect_wait(struct zp_pair *p, int err)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now, tv, pause = { 0, ZP_CONNECT_RETRY_MS * 1000 };

	zp_connecting_cancel(&p->conn);
	ctx->stats.local_errors++;
	p->connect_err = err;
	zp_clock_now(&now);
	if (!timerisset(&p->dial->retry_until)) {
		tv = zp_seconds_tv(ctx->cfg->connect_timeout);
		timeradd(&now, &tv, &p->dial->retry_until);
		pair_wait_log(p, err);
	}
	if (!timercmp(&now, &p->dial->retry_until, <)) {
		/* A UDP source's stream waits on, as for an upstream. */
		if (p->dgram) {
			pair_set_waiting(p, 0);
			return pair_dgram_wait(p);
		}
		ctx->stats.conns_local_failed++;
		zp_pair_close(p, ZP_END_LOCAL_RESOURCE);
		return 1;
	}
	timersub(&p->dial->retry_until, &now, &tv);
	if (timercmp(&tv, &pause, >))
		tv = pause;
	if (p->dial->retry == NULL)
		p->dial->retry = evtimer_new(ctx->base, pair_retry_cb, p);
	if (p->dial->retry == NULL || evtimer_add(p->dial->retry, &tv) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	pair_set_waiting(p, 1);
	return 0;
}

/*
 * The main thread was asked to shed --stats clients for this worker's
 * connect: try the same address again on the next turns of the loop,
 * which is when the descriptors are free. Returns 1 when the pair was
 * freed.
 */
static int ZP_MAY_FREE
pair_shed_wait(struct zp_pair *p)
{
	struct timeval	tv = { 0, ZP_SHED_RETRY_MS * 1000 };

	if (p->dial->retry == NULL)
		p->dial->retry = evtimer_new(p->ctx->base, pair_retry_cb, p);
	if (p->dial->retry == NULL || evtimer_add(p->dial->retry, &tv) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	return 0;
}

/*
 * A tls@ upstream's handshake is over: relay, or try the next address
 * (a failed handshake is a failed connect). Returns 1 when the pair was
 * freed (or moved on).
 */
static int ZP_MAY_FREE
pair_dial_tls_done(struct zp_pair *p, enum pair_uphs_end how)
{
	switch (how) {
	case PAIR_UPHS_FAILED:
		return pair_connect_failed(p, EPROTO, 1);
	case PAIR_UPHS_LOCAL:
		/* Not the upstream's fault: the same address again. */
		return pair_connect_wait(p, ENOMEM);
	case PAIR_UPHS_HEADER:
		p->upstream.err = p->dial->hs.err;
		zp_pair_close(p, ZP_END_PROXY_HEADER);
		return 1;
	case PAIR_UPHS_DONE:
		break;
	}
	p->upstream.fd = zp_connecting_take(&p->conn);
	p->upstream.tls = pair_uphs_take(&p->dial->hs);
	return pair_connected(p);
}

/*
 * The TCP connect is done: a tls@ upstream's handshake next, else the
 * relay. Returns 1 when the pair was freed (or moved on).
 */
static int ZP_MAY_FREE
pair_tcp_connected(struct zp_pair *p)
{
	if (pair_upstream_tls(p, p->up_idx))
		return pair_uphs_start(p, &p->dial->hs, p->conn.fd, p->up_idx,
		    &p->dial->addr, pair_dial_tls_done);
	p->upstream.fd = zp_connecting_take(&p->conn);
	return pair_connected(p);
}

/* The one-shot connect event fired: connected, refused or timed out. */
static void
pair_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;
	int		 err = zp_connecting_result(&p->conn, what), gone;

	if (zp_connect_local_error(err))
		gone = pair_connect_wait(p, err);
	else if (err != 0)
		gone = pair_connect_failed(p, err, 0);
	else
		gone = pair_tcp_connected(p);
	if (!gone)
		pair_check(p);
}

/*
 * Where to connect to upstream address a from (--source): *src NULL for
 * the kernel's choice, else buf filled with --source ADDR or the client's
 * own address (p->client_addr: the PROXY header's source once one was
 * read). Returns -1 when a is of the other family: it is skipped.
 */
int
pair_source(struct zp_pair *p, const struct zp_addr *a, struct zp_addr *buf,
    const struct zp_addr **src)
{
	const struct zp_config	*cfg = p->ctx->cfg;

	*src = NULL;
	switch (cfg->source) {
	case ZP_SOURCE_ADDR:
		if (zp_source_for(&cfg->source_addr, a, buf) == -1)
			return -1;
		break;
	case ZP_SOURCE_CLIENT:
		/* The shared stream of UDP sources has no client to be. */
		if (p->client_addr.len == 0)
			return 0;
		if (zp_source_for(&p->client_addr, a, buf) == -1)
			return -1;
		break;
	default:
		return 0;
	}
	*src = buf;
	return 0;
}

/*
 * Start a non-blocking connect to the current address, skipping addresses
 * that fail at once; with none left, end the pair and say why. A local
 * fault (pair_connect_wait) stays on the address. Returns 1 when the pair
 * was freed (or moved on, once connected).
 */
static int
pair_connect_next(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct timeval		 now, tv = zp_seconds_tv(
				     ctx->cfg->connect_timeout);
	const struct zp_addr	*a, *src;
	struct zp_addr		 srcbuf, abuf;
	int			 rc, spoof = ctx->cfg->source ==
				     ZP_SOURCE_CLIENT;
	int			 flags = spoof ? ZP_CONNECT_TRANSPARENT : 0;

	for (; p->dial->addr_idx < pair_naddrs(p); p->dial->addr_idx++) {
		if ((a = pair_addr(p, p->dial->addr_idx, &abuf)) == NULL)
			break;
		if (pair_source(p, a, &srcbuf, &src) == -1) {
			/* Says why only when no address was tried at all. */
			if (p->connect_err == 0)
				p->connect_err = EAFNOSUPPORT;
			continue;
		}
		p->dial->addr_tried = 1;
		rc = zp_connecting_start(&p->conn, ctx->base, a, src, flags,
		    &tv, pair_connect_cb, p);
		/* Out of descriptors: stats clients give way to ours. */
		if (rc == -1 && (errno == EMFILE || errno == ENFILE)) {
			int	err = errno, shed = zp_ctx_shed(ctx);

			if (shed > 0)
				rc = zp_connecting_start(&p->conn, ctx->base,
				    a, src, flags, &tv, pair_connect_cb, p);
			else if (shed < 0 && !p->shed_asked) {
				/*
				 * A worker's: the main thread sheds on its
				 * own thread. Try again in a moment, quietly,
				 * as the main thread's own pairs would at once.
				 */
				p->shed_asked = 1;
				return pair_shed_wait(p);
			} else
				errno = err;
		}
		if (rc == -1 && zp_connect_local_error(errno))
			return pair_connect_wait(p, errno);
		pair_set_waiting(p, 0);
		if (rc == -1) {
			p->connect_err = errno;
			p->dial->tls_failed = 0;
			continue;
		}
		p->dial->addr = *a;
		pair_sock_tune_upstream(ctx, p->conn.fd);
		if (rc == 0)
			return pair_tcp_connected(p);
		return 0;
	}
	/*
	 * Every address of this upstream failed: it counts as one failure;
	 * unless --source skipped them all (the upstream is not at fault),
	 * or, with --source client, the connect timed out: the SYN-ACK went
	 * to the client's address, and whether it came back through this
	 * host is the return path's doing, not the upstream's (DESIGN.md).
	 */
	if (p->dial->addr_tried) {
		zp_upstream_connect_failed(ctx->ups, (size_t)p->up_idx);
		if (!spoof || p->connect_err != ETIMEDOUT) {
			zp_clock_now(&now);
			zp_upstream_report(ctx->ups, (size_t)p->up_idx, 0,
			    p->connect_err, &now);
		}
	}
	return pair_connect_upstream(p);
}

/* The wait of a UDP source's stream for an upstream is over: try again. */
static void
pair_dgram_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	if (pair_connect_upstream(p) == 0)
		pair_check(p);
}

/*
 * A UDP source's stream that no upstream took, nor the spool (full, or
 * none): its device cannot be told to send again, as a TCP client is by
 * a refusal, so the stream waits, its datagrams in its socket pair and
 * then in zproxy, which stops reading when they are too many (udp.h:
 * the kernel's drops are counted), and every ZP_DGRAM_WAIT_MS asks the
 * upstreams again, moving or not. Said once a stream. Returns 0, or 1
 * when the pair was freed (no memory).
 */
static int ZP_MAY_FREE
pair_dgram_wait(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 tv;
	char		 cbuf[ZP_ADDRSTRLEN];
	int		 level = ZP_LOG_CONN;

	if (p->dial->hold == NULL && (p->dial->hold = evtimer_new(ctx->base,
	    pair_dgram_retry_cb, p)) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	/* Said once a stream, at warning level at most once a second. */
	if (!p->dial->held) {
		level = pair_warn_level(&ctx->local_warned);
		zp_log(ctx->log, level, "connection %llu (UDP source %s): no "
		    "upstream takes it (%s); its datagrams wait, and it tries "
		    "again, every %d ms at first, then less often", (unsigned
		    long long)p->id, zp_addr_str(&p->client_addr, cbuf,
		    sizeof(cbuf)), strerror(p->connect_err != 0 ?
		    p->connect_err : EHOSTDOWN), ZP_DGRAM_WAIT_MS);
	}
	/*
	 * Every second, then twice as long each time, to --fail-timeout: a
	 * thousand devices must not storm collectors that are down.
	 */
	if (p->dial->held++ == 0 || p->dial->wait_ms == 0)
		p->dial->wait_ms = ZP_DGRAM_WAIT_MS;
	else if (p->dial->wait_ms < ctx->cfg->fail_timeout * 1000 / 2)
		p->dial->wait_ms *= 2;
	tv.tv_sec = p->dial->wait_ms / 1000;
	tv.tv_usec = p->dial->wait_ms % 1000 * 1000;
	p->dial->tried = 0;
	p->dial->attempts = 0;
	timerclear(&p->dial->retry_until);
	/* --idle-timeout and the like wait for an upstream too. */
	if (p->timer != NULL)
		evtimer_del(p->timer);
	evtimer_add(p->dial->hold, &tv);
	return 0;
}

/*
 * Choose an upstream not tried yet and start on its first address. With
 * none left (or --retries spent), end the pair: the client sent nothing
 * that was forwarded, so closing it loses nothing it cannot resend (a
 * UDP source's stream waits instead: pair_dgram_wait). Returns 1 when
 * the pair was freed (or moved on, once connected).
 */
int
pair_connect_upstream(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now;
	unsigned char	 tried[ZP_MAX_UPSTREAMS];
	int		 idx = -1, retries = ctx->cfg->retries, i;

	if (pair_dial(p) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	if (retries < 0 || p->dial->attempts <= retries) {
		for (i = 0; i < ZP_MAX_UPSTREAMS; i++)
			tried[i] = (p->dial->tried >> i) & 1;
		zp_clock_now(&now);
		idx = zp_upstream_pick(ctx->ups, &p->client_addr, tried, &now);
	}
	if (idx >= 0) {
		p->dial->tried |= (uint64_t)1 << idx;
		p->dial->attempts++;
		p->up_idx = idx;
		p->dial->addr_idx = 0;
		p->dial->addr_tried = 0;
		return pair_connect_next(p);
	}
	return pair_no_upstream(p);
}

/*
 * No upstream is left to try: spool the stream, let a UDP source's
 * wait, or end the pair with the reason the tries gave. Returns 1 when
 * the pair was freed.
 */
static int ZP_MAY_FREE
pair_no_upstream(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;

	if (p->state == ZP_PAIR_MOVING && ctx->spool != NULL) {
		/* --spool: the stream waits in files rather than ending. */
		switch (pair_spool_moved(p)) {
		case 0:
			return 0;
		case 1:
			return 1;
		}
		if (errno == ENOSPC && !p->dgram) {
			pair_move_log(p, NULL);
			zp_pair_close(p, ZP_END_SPOOL_FULL);
			return 1;
		}
	}
	if (p->state == ZP_PAIR_MOVING && p->dgram)
		return pair_dgram_wait(p);
	if (p->state == ZP_PAIR_MOVING) {
		pair_move_log(p, NULL);
		/* None to try (all down and tried): the failure that began it. */
		if (p->connect_err == 0) {
			/* MOVING: pair_move() made p->mv. */
			p->upstream.err = p->mv->move_err;
			zp_pair_close(p, p->upstream.err == 0 ? ZP_END_CLOSED :
			    zp_half_end(&p->upstream, 0));
			return 1;
		}
	}
	/* --source skipped every address: nothing was tried. */
	if (p->connect_err == EAFNOSUPPORT && ctx->cfg->source !=
	    ZP_SOURCE_NONE) {
		zp_pair_close(p, ZP_END_SOURCE_FAMILY);
		return 1;
	}
	/* Files are cut at messages: only a framed stream spools. */
	if (ctx->spool != NULL && p->state == ZP_PAIR_CONNECTING &&
	    p->up.fr != NULL) {
		if (pair_spool(p) == 0)
			return 0;
		if (errno == ENOSPC && !p->dgram) {
			zp_pair_close(p, ZP_END_SPOOL_FULL);
			return 1;
		}
	}
	if (p->dgram)
		return pair_dgram_wait(p);
	switch (p->connect_err) {
	case ECONNREFUSED:
		zp_pair_close(p, ZP_END_REFUSED);
		break;
	case EPROTO:
		/* A tls@ upstream's handshake failed (p->tls_why says). */
		zp_pair_close(p, p->dial->tls_failed ? ZP_END_UPSTREAM_TLS :
		    ZP_END_UNREACHABLE);
		break;
	case ETIMEDOUT:
		zp_pair_close(p, ZP_END_TIMEOUT);
		break;
	default:
		zp_pair_close(p, ZP_END_UNREACHABLE);
		break;
	}
	return 1;
}

/* Take two pipes, or none: a pair never splices one way only by choice. */
static int
pair_take_pipes(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;

	if (zp_pipepool_get(ctx->pool, &p->up.pipe) == -1)
		return -1;
	if (zp_pipepool_get(ctx->pool, &p->down.pipe) == -1) {
		zp_pipepool_put(ctx->pool, &p->up.pipe);
		return -1;
	}
	return 0;
}

/* Would connecting to dst reach one of our own listeners? */
static int
pair_loops(const struct zp_ctx *ctx, const struct zp_addr *dst)
{
	size_t	i;

	for (i = 0; i < ctx->nlisten_addrs; i++)
		if (zp_origdst_loops(dst, &ctx->listen_addrs[i]))
			return 1;
	return 0;
}

/*
 * Where the client meant to go: under --tproxy, with -u original, and for
 * --send-proxy's header (after a redirect). Only a destination of the
 * client's own is kept for the log (dst=), not zproxy's own address. With
 * -u original, one that would come back to zproxy (a client that came to
 * it directly, or a redirect to its own port) or that --allow-dst does
 * not hold ends the pair before anything is connected. Returns 1 when
 * the pair was freed.
 */
static int ZP_MAY_FREE
pair_dst(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_config	*cfg = ctx->cfg;
	int			 rc;

	/* A UDP source's is the listener's, set when it began. */
	if (p->dgram || (!cfg->tproxy && !cfg->original && !cfg->send_proxy))
		return 0;
	rc = zp_origdst_get(p->client.fd, cfg->tproxy, &p->dst);
	if (!cfg->original) {
		if (rc != 1)
			p->dst.len = 0;
		return 0;
	}
	/* The listeners' addresses, also once they closed for the drain. */
	if (rc == -1 || pair_loops(ctx, &p->dst) ||
	    !zp_dstacl_permits(&cfg->allow_dst,
	    (const struct sockaddr *)&p->dst.ss)) {
		if (rc == -1)
			p->connect_err = errno;
		ctx->stats.bad_destinations++;
		zp_pair_close(p, ZP_END_BAD_DST);
		return 1;
	}
	return 0;
}

/*
 * The client may be relayed: count it under its source, take pipes (or
 * fall back to copy), start connecting. Returns 1 when the pair was
 * freed (or moved on, once connected).
 */
int ZP_MAY_FREE
pair_take_source(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	unsigned	 max = ctx->cfg->max_conns_per_source > 0 ?
			    (unsigned)ctx->cfg->max_conns_per_source : 0;

	/*
	 * The listener refused a source at its limit already; this is the
	 * count itself, exact when several threads start pairs at once. A
	 * UDP source has one stream (two while one ends): the limit is for
	 * connections, which it makes none of.
	 */
	if (p->source_counted || p->dgram)
		return 0;
	switch (zp_srctab_take(&zp_ctx_root(ctx)->sources,
	    (struct sockaddr *)&p->client_addr.ss, max)) {
	case -1:
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	case 1:
		zp_pair_close(p, ZP_END_SOURCE_LIMIT);
		return 1;
	}
	p->source_counted = 1;
	return 0;
}

int ZP_MAY_FREE
pair_begin(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;

	if (pair_take_source(p) != 0)
		return 1;
	pair_set_state(p, ZP_PAIR_CONNECTING);
	/*
	 * A zproxy that started with a tls@ upstream may send any stream to
	 * one (now, after a move, after a reload): TLS one way at least, no
	 * pipes, ever (it has none: mode copy).
	 */
	if (ctx->tls_upstreams && !p->tls)
		pair_use_tls(p);
	/* A UDP source's stream and a TLS client's copy, for good. */
	if (ctx->pool != NULL && ctx->cfg->splice_min == 0 && !p->dgram &&
	    !p->tls && !ctx->tls_upstreams) {
		if (pair_take_pipes(p) == 0) {
			zp_dir_set_backend(&p->up, &zp_relay_splice);
			zp_dir_set_backend(&p->down, &zp_relay_splice);
		} else {
			p->up.fellback = p->down.fellback = 1;
			pair_no_pipe(p);
		}
	}
	if (pair_dst(p) != 0)
		return 1;
	return pair_connect_upstream(p);
}
