/*
 * metrics.c - the metrics in Prometheus text exposition format 0.0.4:
 * what GET /metrics on --stats answers.
 *
 * Rendering reads the context and writes nothing to it: the counters and
 * tallies as they are, the open pairs' modes (pair.c counts them) and one
 * getrusage(2) a scrape.
 */

#include <sys/resource.h>
#include <sys/time.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>

#include "relay/ctx.h"
#include "lib/framing.h"
#include "lib/log.h"
#include "http/metrics.h"
#include "stream/pair.h"
#include "stream/udp.h"
#include "lib/pipepool.h"
#include "relay/relay.h"
#include "spool/spool.h"
#include "core/upstream.h"
#include "relay/worker.h"
#include "tls/tls.h"
#include "tls/tls_io.h"

/* Room for "name:port" of an upstream and a "#NN" for a repeated one. */
#define ZP_STATS_NAMELEN	320

/* Where a render writes, and whether any write failed. */
struct render {
	struct evbuffer	*b;
	int		 failed;
};

/* One label of a sample: name="value". */
struct label {
	const char	*name;
	const char	*value;
};

/* A formatted append; remembers a failure (out of memory). */
static void
put(struct render *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
put(struct render *r, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	if (evbuffer_add_vprintf(r->b, fmt, ap) == -1)
		r->failed = 1;
	va_end(ap);
}

/* Append bytes as they are. */
static void
put_raw(struct render *r, const char *s, size_t len)
{
	if (len > 0 && evbuffer_add(r->b, s, len) == -1)
		r->failed = 1;
}

/*
 * Append a label value escaped as the text format asks: backslash, double
 * quote and line feed become \\, \" and \n; every other byte is as is
 * (UTF-8 passes through).
 */
static void
put_label_value(struct render *r, const char *v)
{
	const char	*run = v;

	for (; *v != '\0'; v++) {
		const char *esc;

		switch (*v) {
		case '\\':
			esc = "\\\\";
			break;
		case '"':
			esc = "\\\"";
			break;
		case '\n':
			esc = "\\n";
			break;
		default:
			continue;
		}
		put_raw(r, run, (size_t)(v - run));
		put_raw(r, esc, 2);
		run = v + 1;
	}
	put_raw(r, run, (size_t)(v - run));
}

/* "# HELP" and "# TYPE" lines that open a metric family. */
static void
family(struct render *r, const char *name, const char *type, const char *help)
{
	put(r, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{l0="v0",...} : the part of a sample line before its value. */
static void
sample_head(struct render *r, const char *name, const struct label *l,
    size_t nl)
{
	size_t	i;

	put_raw(r, name, strlen(name));
	if (nl == 0)
		return;
	put_raw(r, "{", 1);
	for (i = 0; i < nl; i++) {
		put(r, "%s%s=\"", i > 0 ? "," : "", l[i].name);
		put_label_value(r, l[i].value);
		put_raw(r, "\"", 1);
	}
	put_raw(r, "}", 1);
}

/* A sample with an integer value. */
static void
sample_u64(struct render *r, const char *name, const struct label *l,
    size_t nl, uint64_t v)
{
	sample_head(r, name, l, nl);
	put(r, " %llu\n", (unsigned long long)v);
}

/* A family of one sample without labels: HELP, TYPE and the value. */
static void
single_u64(struct render *r, const char *name, const char *type,
    const char *help, uint64_t v)
{
	family(r, name, type, help);
	sample_u64(r, name, NULL, 0, v);
}

/* A counter family with one sample per direction, up and down. */
static void
updown_u64(struct render *r, const char *name, const char *help,
    uint64_t up, uint64_t down)
{
	struct label	l = { "direction", "up" };

	family(r, name, "counter", help);
	sample_u64(r, name, &l, 1, up);
	l.value = "down";
	sample_u64(r, name, &l, 1, down);
}

/* A timeval as seconds with microseconds, "1733155346.123456". */
static void
sample_tv(struct render *r, const char *name, const struct timeval *tv)
{
	put(r, "%s %lld.%06ld\n", name, (long long)tv->tv_sec,
	    (long)tv->tv_usec);
}

/*
 * The label value of each upstream: "host:port", and "host:port#N" for
 * the Nth entry of a name given more than once, so that no two series of a
 * family share their labels.
 */
static void
upstream_labels(const struct zp_upstreams *ups, size_t n,
    char (*names)[ZP_STATS_NAMELEN])
{
	char	base[ZP_STATS_NAMELEN];
	size_t	i, j;
	int	seen;

	for (i = 0; i < n; i++) {
		zp_upstream_label(ups, i, base, sizeof(base));
		seen = 0;
		for (j = 0; j < i; j++) {
			char other[ZP_STATS_NAMELEN];

			zp_upstream_label(ups, j, other, sizeof(other));
			if (strcmp(base, other) == 0)
				seen++;
		}
		if (seen == 0)
			snprintf(names[i], ZP_STATS_NAMELEN, "%s", base);
		else
			snprintf(names[i], ZP_STATS_NAMELEN, "%.*s#%d",
			    ZP_STATS_NAMELEN - 16, base, seen + 1);
	}
}

/* CPU time this process used, user and system. */
static void
cpu_time(struct timeval *tv)
{
	struct rusage	ru;

	timerclear(tv);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		timeradd(&ru.ru_utime, &ru.ru_stime, tv);
}

/* The per-upstream families with one sample per upstream. */
enum upstream_metric {
	UPSTREAM_UP,
	UPSTREAM_FAILS,
	UPSTREAM_OPEN,
	UPSTREAM_CONNS,
	UPSTREAM_FAILED,
};

static const struct {
	const char		*name;
	const char		*type;
	const char		*help;
	enum upstream_metric	 what;
} upstream_families[] = {
	{ "zproxy_upstream_up", "gauge",
	    "Whether the upstream is taken to be up (1) or down (0).",
	    UPSTREAM_UP },
	{ "zproxy_upstream_consecutive_failures", "gauge",
	    "Connects to the upstream that failed in a row, up to now.",
	    UPSTREAM_FAILS },
	{ "zproxy_upstream_connections_open", "gauge",
	    "Connections open to the upstream and relaying.", UPSTREAM_OPEN },
	{ "zproxy_upstream_connections_total", "counter",
	    "Connections to the upstream that were established.",
	    UPSTREAM_CONNS },
	{ "zproxy_upstream_connections_failed_total", "counter",
	    "Attempts to connect to the upstream that failed on every "
	    "address.", UPSTREAM_FAILED },
};

/* One upstream's value of one of upstream_families. */
static uint64_t
upstream_value(const struct zp_upstream *u, enum upstream_metric what)
{
	switch (what) {
	case UPSTREAM_UP:
		return u->up ? 1 : 0;
	case UPSTREAM_FAILS:
		return u->fails > 0 ? (uint64_t)u->fails : 0;
	case UPSTREAM_OPEN:
		return u->active;
	case UPSTREAM_CONNS:
		return u->conns_total;
	case UPSTREAM_FAILED:
		return u->conns_failed;
	}
	return 0;
}

/* Every per-upstream family. */
static void
render_upstreams(struct render *r, struct zp_ctx *ctx,
    const struct zp_stats *st)
{
	char			(*names)[ZP_STATS_NAMELEN];
	const struct zp_traffic	*t;
	struct zp_upstream	 u;
	struct label		 l[2];
	size_t			 i, f, n = zp_upstreams_count(ctx->ups);

	if (n > ZP_MAX_UPSTREAMS)
		n = ZP_MAX_UPSTREAMS;
	if ((names = calloc(n > 0 ? n : 1, sizeof(*names))) == NULL) {
		r->failed = 1;
		return;
	}
	upstream_labels(ctx->ups, n, names);
	l[0].name = "upstream";
	l[1].name = "direction";
	for (f = 0; f < sizeof(upstream_families) /
	    sizeof(upstream_families[0]); f++) {
		family(r, upstream_families[f].name, upstream_families[f].type,
		    upstream_families[f].help);
		for (i = 0; i < n; i++) {
			l[0].value = names[i];
			zp_upstream_get(ctx->ups, i, &u);
			sample_u64(r, upstream_families[f].name, l, 1,
			    upstream_value(&u, upstream_families[f].what));
		}
	}
	family(r, "zproxy_upstream_bytes_total", "counter",
	    "Bytes relayed through the upstream: up is client to upstream, "
	    "down is upstream to client.");
	for (i = 0; i < n; i++) {
		t = &st->ups[i];
		l[0].value = names[i];
		l[1].value = "up";
		sample_u64(r, "zproxy_upstream_bytes_total", l, 2,
		    t->up.bytes);
		l[1].value = "down";
		sample_u64(r, "zproxy_upstream_bytes_total", l, 2,
		    t->down.bytes);
	}
	if (zp_config_framed(ctx->cfg) || zp_config_udp_upstreams(ctx->cfg)) {
		family(r, "zproxy_frames_total", "counter",
		    "Messages (--framing, UDP datagrams) delivered whole to the "
		    "upstream; in "
		    "splice mode lf and nul messages are counted only where "
		    "zproxy reads them, so this is a lower bound there.");
		for (i = 0; i < n; i++) {
			l[0].value = names[i];
			sample_u64(r, "zproxy_frames_total", l, 1,
			    st->ups[i].up.frames);
		}
	}
	free(names);
}

/* --spool: what it holds, took, sent on and refused. */
static void
render_spool(struct render *r, const struct zp_spool *sp)
{
	struct zp_spool_tally	t;

	zp_spool_tally(sp, &t);
	single_u64(r, "zproxy_spool_bytes", "gauge", "Bytes in the spool's "
	    "files now (headers too), of --spool-max.", t.bytes);
	single_u64(r, "zproxy_spool_files", "gauge", "Files in the spool now, "
	    "those being written too.", t.files);
	single_u64(r, "zproxy_spool_streams", "gauge", "Clients whose stream "
	    "is being written to the spool now.", t.streams);
	single_u64(r, "zproxy_spooled_bytes_total", "counter", "Client bytes "
	    "written to the spool.", t.spooled);
	single_u64(r, "zproxy_spool_replayed_bytes_total", "counter",
	    "Client bytes of spool files delivered to an upstream (a file "
	    "counts once it was acknowledged and closed).", t.replayed);
	single_u64(r, "zproxy_spool_delivered_files_total", "counter",
	    "Spool files delivered and removed.", t.delivered);
	single_u64(r, "zproxy_spool_refused_total", "counter", "Clients "
	    "refused because no upstream answered and the spool was full.",
	    t.refused);
}

/* --mirror: each mirror's families, labelled with --mirror as given. */
static void
render_mirrors(struct render *r, struct zp_ctx *ctx,
    const struct zp_stats *st)
{
	static const struct {
		const char	*name, *type, *help;
	} fam[] = {
		{ "zproxy_mirror_up", "gauge", "Whether the mirror is taken "
		    "to be up (1), or down for --fail-timeout after a failed "
		    "connect (0)." },
		{ "zproxy_mirror_streams_total", "counter", "Connections "
		    "opened to the mirror, one per client connection." },
		{ "zproxy_mirror_dropped_total", "counter", "Mirror streams "
		    "that ended before their client's stream: too slow, "
		    "failed, or the mirror was down." },
		{ "zproxy_mirror_bytes_total", "counter", "Bytes of the "
		    "clients' streams delivered to the mirror (PROXY headers "
		    "included)." },
	};
	struct label	l = { "mirror", NULL };
	size_t		f, i, n = zp_mirrors_count(ctx->mirrors);
	uint64_t	v[sizeof(fam) / sizeof(fam[0])];

	for (f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(r, fam[f].name, fam[f].type, fam[f].help);
		for (i = 0; i < n; i++) {
			v[0] = (uint64_t)zp_mirror_up(ctx->mirrors, i);
			v[1] = st->mirrors[i].streams;
			v[2] = st->mirrors[i].dropped;
			v[3] = st->mirrors[i].bytes;
			l.value = ctx->cfg->mirrors[i].arg;
			sample_u64(r, fam[f].name, &l, 1, v[f]);
		}
	}
}

/* The connections and the bytes, summed over the threads. */
static void
render_conns(struct render *r, struct zp_ctx *ctx, const struct zp_stats *st)
{
	single_u64(r, "zproxy_connections_open", "gauge",
	    "Client connections open now.", st->conns_open);
	single_u64(r, "zproxy_connections_total", "counter",
	    "Client connections accepted.", st->conns_total);
	single_u64(r, "zproxy_connections_failed_total", "counter",
	    "Client connections closed because no upstream answered.",
	    st->conns_failed);
	single_u64(r, "zproxy_max_connections", "gauge",
	    "Most client connections open at once (--max-conns); later ones "
	    "wait in the listen backlog.",
	    ctx->max_conns > 0 ? (uint64_t)ctx->max_conns : 0);

	updown_u64(r, "zproxy_bytes_total", "Bytes relayed: up is client "
	    "to upstream, down is upstream to client.",
	    st->all.up.bytes, st->all.down.bytes);
	updown_u64(r, "zproxy_spliced_bytes_total", "Of zproxy_bytes_total, "
	    "the bytes that went through a pipe (zero-copy) rather than a "
	    "buffer.", st->all.up.spliced,
	    st->all.down.spliced);
}

/* The data paths: pairs by mode, copy fallbacks, the pipe pool. */
static void
render_paths(struct render *r, const struct zp_totals *t)
{
	const struct zp_stats	*st = &t->stats;
	const struct zp_pair_modes *m = &t->modes;
	struct label		 l;
	size_t			 nalive = t->pool.alive, nfree = t->pool.pooled;

	family(r, "zproxy_pairs", "gauge",
	    "Open connections by data path: splice, copy, mixed (one "
	    "direction each), or tls (a TLS side: copied through OpenSSL).");
	l.name = "mode";
	l.value = "splice";
	sample_u64(r, "zproxy_pairs", &l, 1, m->splice);
	l.value = "copy";
	sample_u64(r, "zproxy_pairs", &l, 1, m->copy);
	l.value = "mixed";
	sample_u64(r, "zproxy_pairs", &l, 1, m->mixed);
	l.value = "tls";
	sample_u64(r, "zproxy_pairs", &l, 1, m->tls);

	family(r, "zproxy_copy_fallbacks_total", "counter",
	    "Connections or directions that relay by copying although "
	    "splice was asked for, by reason.");
	l.name = "reason";
	l.value = "no-pipe";
	sample_u64(r, "zproxy_copy_fallbacks_total", &l, 1,
	    st->fallbacks[ZP_FALLBACK_POOL]);
	l.value = "splice-refused";
	sample_u64(r, "zproxy_copy_fallbacks_total", &l, 1,
	    st->fallbacks[ZP_FALLBACK_REFUSED]);

	single_u64(r, "zproxy_pipes_pooled", "gauge",
	    "Empty pipes waiting in the pool.", nfree);
	single_u64(r, "zproxy_pipes_in_use", "gauge",
	    "Pipes held by open connections.",
	    nalive > nfree ? nalive - nfree : 0);
	single_u64(r, "zproxy_pipes_created_total", "counter",
	    "Pipes the pool made.", t->pool.created);
	single_u64(r, "zproxy_pipes_killed_total", "counter",
	    "Pipes closed instead of reused because they still held bytes.",
	    t->pool.killed);
}

/* Connects and clients that failed or were refused, by cause. */
static void
render_refusals(struct render *r, const struct zp_stats *st)
{
	single_u64(r, "zproxy_accept_pauses_total", "counter",
	    "Times accepting paused for lack of file descriptors.",
	    st->accept_pauses);
	single_u64(r, "zproxy_connect_local_errors_total", "counter",
	    "Connects (clients' and health checks') that failed for a lack of "
	    "a local resource: descriptors, memory or local ports; they count "
	    "against no upstream.", st->local_errors);
	single_u64(r, "zproxy_connections_waiting", "gauge",
	    "Client connections waiting to retry such a connect; meanwhile "
	    "nothing is accepted.", st->conns_waiting);
	single_u64(r, "zproxy_connections_local_failed_total", "counter",
	    "Client connections closed (end=local-resource) because a local "
	    "resource stayed short for --connect-timeout.",
	    st->conns_local_failed);
	single_u64(r, "zproxy_clients_denied_total", "counter",
	    "Clients refused by --deny or --allow (at accept, or after "
	    "their PROXY header), or by --proxy-from.",
	    st->clients_denied);
	single_u64(r, "zproxy_clients_source_limited_total", "counter",
	    "Clients refused by --max-conns-per-source.",
	    st->clients_source_limited);
	single_u64(r, "zproxy_bad_proxy_headers_total", "counter",
	    "Connections closed (end=bad-proxy-header) under --accept-proxy: "
	    "their PROXY header was missing, malformed, too long or late.",
	    st->bad_proxy_headers);
	single_u64(r, "zproxy_bad_destinations_total", "counter",
	    "Clients refused (end=bad-destination) because -u original would "
	    "have connected back to zproxy or outside --allow-dst.",
	    st->bad_destinations);
}

/*
 * TLS handshakes, by side (client: of a tls@ listener's clients;
 * upstream: zproxy's with tls@ upstreams; mirror: with tls@ mirrors) and
 * result: ok, or why it
 * failed; the seconds left to each certificate file's earliest notAfter.
 */
static void
render_tls(struct render *r, struct zp_ctx *ctx, const struct zp_stats *st)
{
	static const char *const sides[ZP_TLS_SIDES] = { "client",
	    "upstream", "mirror" };
	const char	*files[8];
	int64_t		 secs[8];
	size_t		 i, n = 0;
	struct label	 f = { "file", NULL };
	struct label	l[2] = { { "side", NULL }, { "result", NULL } };
	struct zp_spool_tally sp;
	uint64_t	 v;
	int		res, side;

	/* The spool's sender's handshakes are the upstream side's too. */
	zp_spool_tally(ctx->spool, &sp);

	family(r, "zproxy_tls_handshakes_total", "counter",
	    "TLS handshakes by side (client: with a client of a tls@ "
	    "listener; upstream: with a tls@ upstream; mirror: with a tls@ "
	    "mirror) and result: ok, or why "
	    "one failed (timeout, closed, "
	    "protocol-version, no-certificate, unknown-ca, expired, "
	    "bad-certificate, name-mismatch, not-tls, peer-rejected: it refused "
	    "zproxy's certificate, evicted: closed to make room "
	    "(--tls-max-pending), other).");
	for (side = 0; side < ZP_TLS_SIDES; side++) {
		l[0].value = sides[side];
		for (res = 0; res < ZP_TLS_RESULTS; res++) {
			l[1].value = zp_tls_fail_str(res);
			v = st->tls_handshakes[side][res];
			if (side == ZP_TLS_SIDE_UPSTREAM)
				v += sp.tls_hs[res];
			sample_u64(r, "zproxy_tls_handshakes_total", l, 2, v);
		}
	}
	single_u64(r, "zproxy_tls_handshakes_pending", "gauge",
	    "Clients of tls@ listeners in their handshake now: outside "
	    "--max-conns, at most --tls-max-pending (beyond it the oldest is "
	    "closed: result=\"evicted\").", st->tls_pending);
	if (ctx->tls_srv != NULL)
		n = zp_tls_srv_expiry(ctx->tls_srv, files, secs, 4);
	if (ctx->tls_cli != NULL)
		n += zp_tls_cli_expiry(ctx->tls_cli, files + n, secs + n, 4);
	if (n == 0)
		return;
	family(r, "zproxy_tls_cert_expiry_seconds", "gauge",
	    "Seconds until the certificates of each file (--tls-cert, "
	    "--tls-client-ca, --upstream-cert, --upstream-ca) as last loaded "
	    "stop being of use: the first "
	    "notAfter among those not expired yet (all expired: the last, "
	    "negative). Alert on it before it reaches 0.");
	for (i = 0; i < n; i++) {
		f.value = files[i];
		sample_head(r, "zproxy_tls_cert_expiry_seconds", &f, 1);
		put(r, " %lld\n", (long long)secs[i]);
	}
}

/* --framing: moves, framing errors, replayed bytes. */
static void
render_framing(struct render *r, const struct zp_stats *st)
{
	struct label	l;
	int		i;

	family(r, "zproxy_stream_moves_total", "counter",
	    "Framed streams moved to another upstream at a message "
	    "boundary, by reason.");
	l.name = "reason";
	for (i = 0; i < ZP_MOVE_MAX; i++) {
		l.value = zp_move_reason_str(i);
		sample_u64(r, "zproxy_stream_moves_total", &l, 1,
		    st->moves[i]);
	}
	single_u64(r, "zproxy_framing_errors_total", "counter",
	    "Framed connections whose framing failed (a message over "
	    "--max-frame, a bad octet header): relayed as plain bytes "
	    "from there on; and UDP datagrams that, under --framing lf, "
	    "held a newline (written #012) or passed --max-frame (relayed "
	    "whole as one line).", st->framing_errors);
	single_u64(r, "zproxy_replayed_bytes_total", "counter",
	    "Bytes sent again to the next upstream after a move "
	    "(--replay-window).", st->replayed);
}

/*
 * One family of -l udp@'s counters: each UDP listener's (the one at
 * offset off of its struct zp_udp_tally), or with reason one of each
 * drop reason's.
 */
static void
udp_family(struct render *r, struct zp_ctx *ctx, const struct zp_stats *st,
    const char *name, const char *type, const char *help, size_t off,
    int reasons)
{
	static const char *const why[ZP_UDP_DROP_MAX] = {
		[ZP_UDP_DROP_RCVBUF] = "rcvbuf",
		[ZP_UDP_DROP_EMPTY] = "empty",
		[ZP_UDP_DROP_DENIED] = "denied",
		[ZP_UDP_DROP_NO_STREAM] = "no-stream",
		[ZP_UDP_DROP_UNREACHABLE] = "unreachable",
	};
	struct label	l[2] = { { "listener", NULL }, { "reason", NULL } };
	char		lname[ZP_ADDRSTRLEN + ZP_FDNAME_MAX + 8];
	const uint64_t	*v;
	size_t		i;
	int		k;

	family(r, name, type, help);
	for (i = 0; i < ctx->cfg->nlistens; i++) {
		if (!zp_udp_listening(ctx, (int)i))
			continue;
		l[0].value = zp_listen_spec_str(&ctx->cfg->listens[i], lname,
		    sizeof(lname));
		v = (const uint64_t *)((const char *)&st->udp[i] + off);
		for (k = 0; k < (reasons ? ZP_UDP_DROP_MAX : 1); k++) {
			l[1].value = why[k];
			sample_u64(r, name, l, reasons ? 2 : 1, v[k]);
		}
	}
}

/* -l udp@: datagrams read, not relayed (and why), shared; sources. */
static void
render_udp(struct render *r, struct zp_ctx *ctx, const struct zp_stats *st)
{
	udp_family(r, ctx, st, "zproxy_udp_datagrams_total", "counter",
	    "Datagrams read from the UDP listener.",
	    offsetof(struct zp_udp_tally, datagrams), 0);
	udp_family(r, ctx, st, "zproxy_udp_dropped_total", "counter",
	    "Datagrams not relayed: dropped by the kernel because the "
	    "socket's receive queue was full (rcvbuf, before zproxy saw "
	    "them), empty ones, ones from a source --deny or --allow "
	    "refuses, ones no stream could be made for (no-stream), ones a "
	    "UDP upstream refused (unreachable: ICMP, as the kernel "
	    "reports it).",
	    offsetof(struct zp_udp_tally, dropped), 1);
	udp_family(r, ctx, st, "zproxy_udp_shared_datagrams_total", "counter",
	    "Datagrams carried by a thread's shared stream, which names no "
	    "source: their source came beyond --udp-max-sources.",
	    offsetof(struct zp_udp_tally, shared), 0);
	udp_family(r, ctx, st, "zproxy_udp_sources", "gauge",
	    "UDP sources with a stream of their own open now.",
	    offsetof(struct zp_udp_tally, sources), 0);
}

/* How pairs ended: timeouts, lingers, bytes thrown away. */
static void
render_ends(struct render *r, const struct zp_stats *st)
{
	struct label	l;

	family(r, "zproxy_timeouts_total", "counter",
	    "Connections closed by a timeout: idle (--idle-timeout) or fin "
	    "(--fin-timeout).");
	l.name = "kind";
	l.value = "idle";
	sample_u64(r, "zproxy_timeouts_total", &l, 1,
	    st->timeouts_idle);
	l.value = "fin";
	sample_u64(r, "zproxy_timeouts_total", &l, 1,
	    st->timeouts_fin);

	single_u64(r, "zproxy_lingers_total", "counter",
	    "Pairs that, after one side reset, waited for the other side to "
	    "acknowledge everything sent to it.", st->lingers);
	single_u64(r, "zproxy_linger_timeouts_total", "counter",
	    "Lingering pairs given up on after --linger-timeout.",
	    st->linger_timeouts);
	single_u64(r, "zproxy_discarded_bytes_total", "counter",
	    "Bytes read from a peer after the other side was gone, and "
	    "thrown away.", st->discarded);
}

/* This endpoint's own counters, and the log's drops. */
static void
render_endpoint(struct render *r, struct zp_ctx *ctx,
    const struct zp_stats *st)
{
	struct label	l;

	single_u64(r, "zproxy_stats_connections_open", "gauge",
	    "Connections to this endpoint open now.", st->stats_open);
	single_u64(r, "zproxy_stats_max_connections", "gauge",
	    "Most connections to this endpoint open at once "
	    "(--stats-max-conns); later ones are closed at accept.",
	    ctx->cfg != NULL && ctx->cfg->stats_max_conns > 0 ?
	    (uint64_t)ctx->cfg->stats_max_conns : 0);
	family(r, "zproxy_stats_refused_total", "counter",
	    "Connections to this endpoint closed unanswered: at accept with "
	    "--stats-max-conns open (max-conns), or to keep descriptors for "
	    "the relay (descriptors).");
	l.name = "reason";
	l.value = "max-conns";
	sample_u64(r, "zproxy_stats_refused_total", &l, 1,
	    st->stats_refused[ZP_STATS_REFUSED_CONNS]);
	l.value = "descriptors";
	sample_u64(r, "zproxy_stats_refused_total", &l, 1,
	    st->stats_refused[ZP_STATS_REFUSED_FDS]);
	single_u64(r, "zproxy_stats_timeouts_total", "counter",
	    "Connections to this endpoint closed because no answer was "
	    "written within --stats-timeout of accept.",
	    st->stats_timeouts);
	single_u64(r, "zproxy_log_dropped_total", "counter",
	    "Log lines dropped because the log thread could not keep up (a "
	    "slow disk, a blocked /dev/log) or, with --syslog, because "
	    "nothing listened on /dev/log; the log says how many once it "
	    "can.", ctx->log != NULL ? zp_log_dropped(ctx->log) : 0);
}

/* The process: CPU time, start time, the threads and their loads. */
static void
render_process(struct render *r, struct zp_ctx *ctx,
    const struct zp_totals *t)
{
	struct label	l;
	struct timeval	cpu;
	char		num[16];
	int		i;

	cpu_time(&cpu);
	family(r, "zproxy_cpu_seconds_total", "counter",
	    "CPU time used by zproxy, user and system, in seconds.");
	sample_tv(r, "zproxy_cpu_seconds_total", &cpu);
	family(r, "zproxy_start_time_seconds", "gauge",
	    "When zproxy started, in seconds since the Unix epoch.");
	sample_tv(r, "zproxy_start_time_seconds", &ctx->started);

	single_u64(r, "zproxy_threads", "gauge",
	    "Threads relaying (--threads).", (uint64_t)t->threads);
	family(r, "zproxy_thread_connections", "gauge",
	    "Client connections open now, by thread: new ones go to the "
	    "thread with the fewest.");
	l.name = "thread";
	for (i = 0; i < t->threads; i++) {
		snprintf(num, sizeof(num), "%d", i);
		l.value = num;
		sample_u64(r, "zproxy_thread_connections", &l, 1, t->open[i]);
	}
}

/*
 * Append the metrics, Prometheus text exposition format 0.0.4, to buf.
 * Returns 0, or -1 when out of memory (buf then holds part of them).
 */
int
zp_metrics_render(struct zp_ctx *ctx, struct evbuffer *buf)
{
	struct render		 r = { buf, 0 };
	struct zp_totals	*t;
	const struct zp_stats	*st;

	/* Summed over the threads: the workers' last snapshots (worker.h). */
	if ((t = malloc(sizeof(*t))) == NULL)
		return -1;
	zp_ctx_totals(ctx, t);
	st = &t->stats;

	render_conns(&r, ctx, st);
	render_upstreams(&r, ctx, st);
	if (zp_mirrors_count(ctx->mirrors) > 0)
		render_mirrors(&r, ctx, st);
	if (ctx->spool != NULL)
		render_spool(&r, ctx->spool);
	render_paths(&r, t);
	render_refusals(&r, st);
	render_tls(&r, ctx, st);	/* zeros without a tls@ listener */
	if (zp_config_framed(ctx->cfg))
		render_framing(&r, st);
	if (zp_udp_any(ctx))
		render_udp(&r, ctx, st);
	render_ends(&r, st);
	render_endpoint(&r, ctx, st);
	render_process(&r, ctx, t);
	free(t);
	return r.failed ? -1 : 0;
}
