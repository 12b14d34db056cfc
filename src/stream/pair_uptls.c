/*
 * pair_uptls.c - the TLS handshake with a tls@ upstream, between its TCP
 * connect and the relay: the PROXY header first, in the clear (as
 * HAProxy's send-proxy on an ssl server, and as nginx's `listen ... ssl
 * proxy_protocol` expects it), then the ClientHello; the certificate
 * verified against --upstream-ca and the upstream's name.
 *
 * The handshake is part of the connect: it must be done within
 * --connect-timeout of the connect's end, and a failure (a certificate
 * that does not verify, a collector that speaks no TLS) counts as a
 * failed connect of that upstream: the next address, or the next
 * upstream, is tried. The socket stays its connect's (struct
 * zp_connecting) until the caller takes it with the session.
 */

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "core/net.h"
#include "lib/log.h"
#include "lib/proxyproto.h"
#include "core/upstream.h"
#include "relay/ctx.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "tls/tls.h"
#include "tls/tls_io.h"

/*
 * Upstream idx's spec, from the shared table: a thread's copy of the
 * options may not have an upstream that zproxy ctl or a reload added
 * yet, and that one must never be sent the stream in the clear.
 */
static const struct zp_upstream_spec *
uphs_spec(const struct zp_pair *p, int idx)
{
	struct zp_upstream	u;

	if (idx < 0 || (size_t)idx >= zp_upstreams_count(p->ctx->ups))
		return NULL;
	zp_upstream_get(p->ctx->ups, (size_t)idx, &u);
	return u.spec;
}

int
pair_upstream_tls(const struct zp_pair *p, int idx)
{
	const struct zp_upstream_spec	*up = uphs_spec(p, idx);

	return up != NULL && up->tls;
}

void
pair_uphs_clear(struct pair_uphs *hs)
{
	if (hs->ev != NULL)
		event_free(hs->ev);
	hs->ev = NULL;
	zp_tls_free(hs->tls);
	hs->tls = NULL;
}

struct zp_tls *
pair_uphs_take(struct pair_uphs *hs)
{
	struct zp_tls	*t = hs->tls;

	hs->tls = NULL;
	pair_uphs_clear(hs);
	return t;
}

/* The handshake is over without a session: how, to the caller. */
static int ZP_MAY_FREE
uphs_end(struct pair_uphs *hs, enum pair_uphs_end how)
{
	pair_uphs_clear(hs);
	return hs->done(hs->p, how);
}

/*
 * The upstream failed the handshake (why, OpenSSL's words in text):
 * counted, said (at warning level once a second at most: a collector
 * with an expired certificate fails every client's try), and handed to
 * the caller, whose connect failed.
 */
static int ZP_MAY_FREE
uphs_fail(struct pair_uphs *hs, enum zp_tls_fail why, const char *text)
{
	struct zp_pair	*p = hs->p;
	struct zp_ctx	*ctx = p->ctx;
	char		 abuf[ZP_ADDRSTRLEN];
	int		 level;

	ctx->stats.tls_handshakes[ZP_TLS_SIDE_UPSTREAM][why]++;
	/* The pair's end says it when no other upstream takes it. */
	snprintf(p->tls_why, sizeof(p->tls_why), "upstream %s: %s%s%s",
	    zp_addr_str(&hs->addr, abuf, sizeof(abuf)), zp_tls_fail_str(why),
	    text != NULL && text[0] != '\0' ? ": " : "",
	    text != NULL ? text : "");
	level = pair_warn_level(&ctx->tls_warned);
	if (zp_log_enabled(ctx->log, level))
		zp_log(ctx->log, level, "connection %llu: TLS handshake failed "
		    "(%s): a failed connect of that upstream",
		    (unsigned long long)p->id, p->tls_why);
	return uphs_end(hs, PAIR_UPHS_FAILED);
}

static int	uphs_step(struct pair_uphs *, short) ZP_MAY_FREE;

static void
uphs_cb(evutil_socket_t fd, short what, void *arg)
{
	struct pair_uphs	*hs = arg;
	struct zp_pair		*p = hs->p;

	(void)fd;
	if (uphs_step(hs, what) == 0)
		pair_check(p);
}

/*
 * One step of the handshake (what: the event that woke it). Returns 1
 * when the pair was freed or moved on (the caller's done() says).
 */
static int ZP_MAY_FREE
uphs_step(struct pair_uphs *hs, short what)
{
	struct zp_pair	*p = hs->p;
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now, left;
	short		 want = hs->want;

	/* A timer may fire a little early (pair_tls.c): wait out the rest. */
	if (!(what & EV_TIMEOUT))
		switch (zp_tls_handshake(hs->tls, &want)) {
		case 1:
			ctx->stats.tls_handshakes[ZP_TLS_SIDE_UPSTREAM]
			    [ZP_TLS_OK]++;
			if (zp_log_enabled(ctx->log, ZP_LOG_DEBUG))
				zp_log(ctx->log, ZP_LOG_DEBUG, "connection "
				    "%llu: TLS with upstream done (%s%s)",
				    (unsigned long long)p->id,
				    zp_tls_version(hs->tls),
				    zp_tls_resumed(hs->tls) ? ", resumed" :
				    "");
			return hs->done(p, PAIR_UPHS_DONE);
		case -1:
			return uphs_fail(hs, zp_tls_failure(hs->tls),
			    zp_tls_failure_text(hs->tls));
		}
	zp_clock_now(&now);
	if (!timercmp(&now, &hs->deadline, <))
		return uphs_fail(hs, ZP_TLS_TIMEOUT, "no handshake within "
		    "--connect-timeout");
	timersub(&hs->deadline, &now, &left);
	hs->want = want;
	event_del(hs->ev);
	if (event_assign(hs->ev, ctx->base, event_get_fd(hs->ev), want,
	    uphs_cb, hs) == -1 || event_add(hs->ev, &left) == -1)
		return uphs_end(hs, PAIR_UPHS_LOCAL);
	return 0;
}

int ZP_MAY_FREE
pair_uphs_start(struct zp_pair *p, struct pair_uphs *hs, int fd, int idx,
    const struct zp_addr *a,
    int (*done)(struct zp_pair *, enum pair_uphs_end))
{
	struct zp_ctx			*ctx = p->ctx;
	const struct zp_upstream_spec	*up = uphs_spec(p, idx);
	struct timeval			 now, tv = zp_seconds_tv(
					     ctx->cfg->connect_timeout);
	struct ssl_st			*ssl = NULL;

	memset(hs, 0, sizeof(*hs));
	hs->p = p;
	hs->idx = idx;
	hs->addr = *a;
	hs->done = done;
	hs->want = EV_READ;
	zp_clock_now(&now);
	timeradd(&now, &tv, &hs->deadline);
	/* The header goes before the ClientHello, in the clear. */
	if (ctx->cfg->send_proxy && pair_send_proxy(p, fd, hs->hdr,
	    &hs->hlen) == -1) {
		hs->err = errno;
		return uphs_end(hs, PAIR_UPHS_HEADER);
	}
	if (ctx->tls_cli != NULL && up != NULL)
		ssl = zp_tls_cli_session(ctx->tls_cli, ctx->thread,
		    ctx->tls_cache, fd, up->host, up->port);
	if (ssl == NULL || (hs->tls = zp_tls_wrap(ssl)) == NULL ||
	    (hs->ev = event_new(ctx->base, fd, EV_READ, uphs_cb, hs)) ==
	    NULL)
		return uphs_end(hs, PAIR_UPHS_LOCAL);
	/* The ClientHello goes now: a fresh socket has room for it. */
	return uphs_step(hs, EV_WRITE);
}
