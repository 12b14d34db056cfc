/*
 * pair_log.c - what a pair's end says: the end reasons' and move
 * reasons' names, the connection's line (its level, its errno, whether
 * it is rate-limited) and the counters an end adds to; the pairs' modes.
 * It calls nothing of the pair's other files.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "core/net.h"
#include "core/upstream.h"
#include "relay/ctx.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "tls/tls_io.h"

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
	case ZP_END_TLS_HANDSHAKE:	return "tls-handshake-failed";
	case ZP_END_UPSTREAM_TLS:	return "upstream-tls-failed";
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
	case ZP_MOVE_DRAIN:	return "drain";
	case ZP_MOVE_CTL:	return "ctl";
	case ZP_MOVE_LOAD:	return "load";
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
	return !d->fellback && (d->ops->piped || d->lazy);
}

/* "splice", "copy" or "mixed", from the pair's directions. */
const char *
zp_pair_mode(const struct zp_pair *p)
{
	int	s_up = dir_splices(&p->up), s_down = dir_splices(&p->down);

	if (p->tls || p->up.ops == &zp_relay_tls ||
	    p->down.ops == &zp_relay_tls)
		return "tls";
	if (s_up && s_down)
		return "splice";
	if (!s_up && !s_down)
		return "copy";
	return "mixed";
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

/*
 * How a connection's end is logged: its level, the errno that says why
 * (0: none), and whether the line is rate-limited (*limited).
 */
static int
pair_end_level(const struct zp_pair *p, enum zp_end end, int *err,
    int *limited)
{
	int	level;

	*err = 0;
	*limited = 0;
	switch (end) {
	case ZP_END_BAD_DST:
		level = ZP_LOG_WARN;
		*err = p->connect_err;	/* SO_ORIGINAL_DST's failure, if any */
		break;
	case ZP_END_REFUSED:
	case ZP_END_TIMEOUT:
	case ZP_END_UNREACHABLE:
	case ZP_END_NOMEM:
	case ZP_END_LOCAL_RESOURCE:
	case ZP_END_SOURCE_FAMILY:
		level = ZP_LOG_WARN;
		*err = p->connect_err;
		break;
	case ZP_END_UPSTREAM_TLS:
		level = ZP_LOG_WARN;	/* its error= is tls_why */
		break;
	case ZP_END_CLIENT_RESET:
	case ZP_END_CLIENT_ERROR:
		level = ZP_LOG_CONN;
		*err = p->client.err;
		break;
	case ZP_END_SPOOL_FAILED:
		level = ZP_LOG_ERROR;
		*err = p->client.err;
		break;
	case ZP_END_SPOOL_FULL:
		/* Why no upstream took it; refusals are rate-limited. */
		level = ZP_LOG_WARN;
		*err = p->connect_err;
		*limited = 1;
		break;
	case ZP_END_UPSTREAM_RESET:
	case ZP_END_UPSTREAM_ERROR:
		level = ZP_LOG_CONN;
		*err = p->upstream.err;
		break;
	case ZP_END_BAD_PROXY_HEADER:
	case ZP_END_TLS_HANDSHAKE:
		/* Seen by default (a balancer sending none), but limited. */
		level = ZP_LOG_WARN;
		*limited = 1;
		break;
	case ZP_END_DENIED:
	case ZP_END_SOURCE_LIMIT:
		level = ZP_LOG_CONN;
		*limited = 1;
		break;
	default:
		level = ZP_LOG_CONN;
		break;
	}
	return level;
}

/* Log the whole story of a pair in one line. */
void
pair_log(struct zp_pair *p, enum zp_end end)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_conn_record	 rec;
	char			 cbuf[ZP_ADDRSTRLEN], pbuf[ZP_ADDRSTRLEN];
	char			 dbuf[ZP_ADDRSTRLEN], ubuf[300];
	char			 subj[256], qsubj[ZP_ESCLEN], utls[32];
	struct timeval		 now, dt;
	int			 level, err, limited;

	level = pair_end_level(p, end, &err, &limited);
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
	if (p->px != NULL && p->px->peer_addr.len > 0)
		rec.peer = zp_addr_str(&p->px->peer_addr, pbuf, sizeof(pbuf));
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
	if (end == ZP_END_TLS_HANDSHAKE || end == ZP_END_UPSTREAM_TLS)
		rec.error = p->tls_why;
	if (p->client.tls != NULL && p->state != ZP_PAIR_HANDSHAKE) {
		rec.tls = zp_tls_version(p->client.tls);
		zp_tls_peer_subject(p->client.tls, subj, sizeof(subj));
		if (subj[0] != '\0')
			rec.tls_client = zp_escape(subj, qsubj, sizeof(qsubj));
	}
	if (p->upstream.tls != NULL) {
		snprintf(utls, sizeof(utls), "%s%s",
		    zp_tls_version(p->upstream.tls),
		    zp_tls_resumed(p->upstream.tls) ? "+resumed" : "");
		rec.tls_upstream = utls;
	}
	/*
	 * A client chooses its destination, and under --source client its
	 * family: limited, as refusals are.
	 */
	if (limited || end == ZP_END_BAD_DST || end == ZP_END_SOURCE_FAMILY)
		zp_log_conn_limited(ctx->log, level, &rec);
	else
		zp_log_conn(ctx->log, level, &rec);
}

/* See pair_int.h. */
int
pair_warn_level(struct timeval *last)
{
	struct timeval	now, dt;

	zp_clock_now(&now);
	timersub(&now, last, &dt);
	if (dt.tv_sec >= 1 || dt.tv_sec < 0) {
		*last = now;
		return ZP_LOG_WARN;
	}
	return ZP_LOG_CONN;
}

/* Count a connection's end in the statistics it has a counter in. */
void
pair_end_count(struct zp_stats *st, enum zp_end end)
{
	switch (end) {
	case ZP_END_IDLE:
		st->timeouts_idle++;
		break;
	case ZP_END_FIN_TIMEOUT:
		st->timeouts_fin++;
		break;
	case ZP_END_BAD_PROXY_HEADER:
		st->bad_proxy_headers++;
		break;
	case ZP_END_DENIED:
		st->clients_denied++;
		break;
	case ZP_END_SOURCE_LIMIT:
		st->clients_source_limited++;
		break;
	case ZP_END_REFUSED:
	case ZP_END_TIMEOUT:
	case ZP_END_UNREACHABLE:
	case ZP_END_UPSTREAM_TLS:
	case ZP_END_SPOOL_FULL:
		st->conns_failed++;
		break;
	default:
		break;
	}
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
		else if (strcmp(mode, "tls") == 0)
			m->tls++;
		else if (strcmp(mode, "copy") == 0)
			m->copy++;
		else
			m->mixed++;
	}
}
