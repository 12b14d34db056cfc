/*
 * zproxy_report.c - the lines that say what the root does: the start-up
 * lines, the counters (SIGUSR1, the end) and the service manager's
 * status.
 */

#include <sys/resource.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/acl.h"
#include "core/config.h"
#include "relay/ctx.h"
#include "tls/tls.h"
#include "lib/framing.h"
#include "stream/listener.h"
#include "stream/udp.h"
#include "lib/log.h"
#include "core/net.h"
#include "core/upstream.h"
#include "relay/worker.h"
#include "zproxy_int.h"

/* CPU seconds this process has used, user and system. */
static double
cpu_seconds(void)
{
	struct rusage	ru;

	if (getrusage(RUSAGE_SELF, &ru) == -1)
		return 0;
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/*
 * The service manager's status line (sd_notify STATUS=): what `systemctl
 * status` shows, bytes of open pairs too.
 */
void
zproxy_notify_status(void *arg, char *buf, size_t len)
{
	struct zp_ctx		*ctx = arg;
	struct zp_totals	*t;
	struct zp_upstream	 u;
	size_t			 i, nup = 0, nups = 0;

	if ((t = malloc(sizeof(*t))) == NULL) {
		snprintf(buf, len, "%s", ctx->stopping ? "draining" :
		    "relaying");
		return;
	}
	zp_ctx_totals(ctx, t);
	for (i = 0; i < zp_upstreams_count(ctx->ups); i++) {
		zp_upstream_get(ctx->ups, i, &u);
		nup += u.up && u.admin != ZP_ADMIN_REMOVED;
		nups += u.admin != ZP_ADMIN_REMOVED;	/* zproxy ctl del */
	}
	snprintf(buf, len, "%s; connections open=%llu total=%llu; bytes "
	    "up=%llu down=%llu; upstreams up %zu of %zu",
	    ctx->stopping ? "draining" : "relaying",
	    (unsigned long long)t->stats.conns_open,
	    (unsigned long long)t->stats.conns_total,
	    (unsigned long long)t->stats.all.up.bytes,
	    (unsigned long long)t->stats.all.down.bytes, nup, nups);
	free(t);
}

/* Log the counters. */
void
zproxy_log_stats(struct zp_ctx *ctx, const char *what)
{
	struct zp_totals	*t;
	const struct zp_stats	*st;
	uint64_t		 up, down, moves = 0;
	size_t			 i;
	double			 cpu = cpu_seconds(), gib;
	char			 per[32];

	if ((t = malloc(sizeof(*t))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s: out of memory", what);
		return;
	}
	/* Summed over the threads: one line for the process. */
	zp_ctx_totals(ctx, t);
	st = &t->stats;
	/* Every reason's (stalls were left out until December 2026). */
	for (i = 0; i < sizeof(st->moves) / sizeof(st->moves[0]); i++)
		moves += st->moves[i];
	up = st->all.up.bytes;
	down = st->all.down.bytes;
	gib = (double)(up + down) / (1024.0 * 1024 * 1024);
	/* Below 64 MiB the start-up cost swamps the figure: say nothing. */
	if (gib >= 1.0 / 16)
		snprintf(per, sizeof(per), "%.3fs", cpu / gib);
	else
		snprintf(per, sizeof(per), "n/a");
	zp_log(ctx->log, ZP_LOG_NOTICE, "%s: connections open=%llu "
	    "total=%llu failed=%llu; bytes up=%llu down=%llu; copy-fallbacks "
	    "no-pipe=%llu splice-refused=%llu; pipes alive=%zu pooled=%zu; "
	    "accept-pauses=%llu; local-errors=%llu local-failed=%llu; "
	    "clients denied=%llu source-limited=%llu bad-proxy-header=%llu "
	    "bad-destination=%llu; moves=%llu framing-errors=%llu "
	    "replayed=%llu; cpu=%.3fs cpu-per-GiB=%s", what,
	    (unsigned long long)st->conns_open,
	    (unsigned long long)st->conns_total,
	    (unsigned long long)st->conns_failed,
	    (unsigned long long)up, (unsigned long long)down,
	    (unsigned long long)st->fallbacks[ZP_FALLBACK_POOL],
	    (unsigned long long)st->fallbacks[ZP_FALLBACK_REFUSED],
	    t->pool.alive, t->pool.pooled,
	    (unsigned long long)st->accept_pauses,
	    (unsigned long long)st->local_errors,
	    (unsigned long long)st->conns_local_failed,
	    (unsigned long long)st->clients_denied,
	    (unsigned long long)st->clients_source_limited,
	    (unsigned long long)st->bad_proxy_headers,
	    (unsigned long long)st->bad_destinations,
	    (unsigned long long)moves,
	    (unsigned long long)st->framing_errors,
	    (unsigned long long)st->replayed, cpu, per);
	free(t);
}

/*
 * The listeners for the start-up line: "[::]:9000, 127.0.0.1:9001 (systemd:web)",
 * the label where it says more than the address.
 */
static const char *
listen_str(const struct zp_ctx *ctx, char *buf, size_t len)
{
	const struct zp_listener	*l;
	char				 abuf[ZP_ADDRSTRLEN];
	const char			*label;
	size_t				 off = 0;

	buf[0] = '\0';
	for (l = ctx->listener; l != NULL && off < len;
	    l = zp_listener_next(l)) {
		label = zp_listener_label(l);
		off += snprintf(buf + off, len - off, "%s%s", off > 0 ? ", " :
		    "", zp_addr_str(zp_listener_addr(l), abuf, sizeof(abuf)));
		if (strncmp(label, "systemd", 7) == 0 && off < len)
			off += snprintf(buf + off, len - off, " (%s)", label);
	}
	(void)zp_udp_str(ctx, buf, len, off);
	return buf;
}

/* One line that says what this process is about to do. */
void
zproxy_log_start(struct zp_ctx *ctx, long nofile, const char *privs)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 lbuf[1024], ups[1024], name[300];
	char			 sbuf[ZP_ADDRSTRLEN], src[ZP_ADDRSTRLEN + 16];
	size_t			 i, off = 0, nups, naddrs;

	nups = zp_upstreams_count(ctx->ups);
	ups[0] = src[0] = '\0';
	for (i = 0; i < nups && off < sizeof(ups); i++) {
		if (cfg->upstreams[i].original) {
			off += snprintf(ups + off, sizeof(ups) - off,
			    "%soriginal (each client's original destination)",
			    i ? ", " : "");
			continue;
		}
		naddrs = zp_upstream_addr(ctx->ups, i, SIZE_MAX, NULL);
		off += snprintf(ups + off, sizeof(ups) - off, "%s%s (%zu "
		    "address%s)", i ? ", " : "", zp_upstream_label(ctx->ups, i,
		    name, sizeof(name)), naddrs, naddrs == 1 ? "" : "es");
	}
	for (i = 0; i < cfg->nmirrors && off < sizeof(ups); i++)
		off += snprintf(ups + off, sizeof(ups) - off, "%s%s (%zu "
		    "address%s)", i ? ", " : ", mirror ", cfg->mirrors[i].arg,
		    cfg->mirrors[i].to.naddrs,
		    cfg->mirrors[i].to.naddrs == 1 ? "" : "es");
	/* --source ADDR: "ADDR:0", the port the kernel picks per connect. */
	if (cfg->source == ZP_SOURCE_ADDR)
		snprintf(src, sizeof(src), ", source %s",
		    zp_addr_str(&cfg->source_addr, sbuf, sizeof(sbuf)));
	else if (cfg->source == ZP_SOURCE_CLIENT)
		snprintf(src, sizeof(src), ", source client");
	zp_log(ctx->log, ZP_LOG_NOTICE, "listening on %s, upstream%s %s, "
	    "balance %s, mode %s, pipe-size %zu, buffer-size %zu, splice-min "
	    "%zu, max-conns %ld, threads %d, RLIMIT_NOFILE %ld%s, %s",
	    listen_str(ctx, lbuf, sizeof(lbuf)),
	    nups == 1 ? "" : "s", ups,
	    zp_balance_str(zp_upstreams_balance(ctx->ups)),
	    cfg->mode == ZP_MODE_SPLICE ? "splice" : "copy", cfg->pipe_size,
	    cfg->buffer_size, cfg->splice_min, ctx->max_conns,
	    zp_ctx_threads(ctx), nofile, src, privs);
}

/* Append the rules of acl to buf as " --opt NET,NET..." (cut if long). */
static size_t
access_rules(char *buf, size_t len, size_t off, const char *opt,
    const struct zp_acl *acl)
{
	char	net[ZP_CIDRSTRLEN];
	size_t	i;

	for (i = 0; i < acl->n && off < len; i++) {
		zp_cidr_str(&acl->v[i], net, sizeof(net));
		if (i == 0)
			off += snprintf(buf + off, len - off, " --%s %s", opt,
			    net);
		else
			off += snprintf(buf + off, len - off, ",%s", net);
	}
	return off;
}

/*
 * Say who may connect, with the rules as zproxy understood them (a
 * v4-mapped network shown as the IPv4 one it matches).
 */
void
zproxy_log_access(struct zp_ctx *ctx)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 buf[ZP_LOG_LINE_MAX];
	size_t			 off = 0;

	if (cfg->accept_proxy) {
		buf[0] = '\0';
		(void)access_rules(buf, sizeof(buf), 0, "proxy-from",
		    &cfg->proxy_from);
		/* Any peer can then name any client, to the rules as well. */
		zp_log(ctx->log, cfg->proxy_from.n > 0 ? ZP_LOG_NOTICE :
		    ZP_LOG_WARN, "PROXY headers required, within %.3gs, "
		    "from %s", cfg->proxy_timeout, cfg->proxy_from.n > 0 ?
		    buf + 1 : "any peer: without --proxy-from, any client may "
		    "claim any address");
	}
	if (cfg->framing != ZP_FRAMING_NONE)
		zp_log(ctx->log, ZP_LOG_NOTICE, "framing %s, messages up to "
		    "%zu bytes%s; streams move off an upstream that fails%s",
		    zp_framing_name((enum zp_framing)cfg->framing),
		    cfg->max_frame > 0 ? cfg->max_frame : cfg->framing ==
		    ZP_FRAMING_OCTET ? (size_t)ZP_FRAME_MAX :
		    (size_t)ZP_FRAME_DEFAULT_LF, cfg->framing == ZP_FRAMING_AUTO &&
		    cfg->max_frame == 0 ? " (16M when octet)" : "",
		    cfg->nupstreams < 2 ? " (but there is only one upstream)" :
		    "");
	if (cfg->max_lifetime > 0)
		zp_log(ctx->log, ZP_LOG_NOTICE, "a stream moves to the "
		    "balancer's choice after %.3gs on one upstream",
		    cfg->max_lifetime);
	if (cfg->rebalance == ZP_REBALANCE_COUNT)
		zp_log(ctx->log, ZP_LOG_NOTICE, "rebalancing: at most %d "
		    "moves a second while an upstream has 2 streams more than "
		    "another", cfg->rebalance_rate);
	else if (cfg->rebalance == ZP_REBALANCE_LOAD &&
	    !zp_sock_load_supported())
		zp_log(ctx->log, ZP_LOG_WARN, "--rebalance load: this kernel "
		    "does not say how long a receive window held a stream back "
		    "(tcpi_rwnd_limited, Linux 4.10): no stream moves for load");
	else if (cfg->rebalance == ZP_REBALANCE_LOAD)
		zp_log(ctx->log, ZP_LOG_NOTICE, "rebalancing by load: at most "
		    "%d moves a second off an upstream whose receive window "
		    "held back half its streams for %ds, to one that kept up "
		    "for %ds", cfg->rebalance_rate, ZP_LOAD_BEHIND_S,
		    ZP_LOAD_CLEAR_S);
	if (cfg->deny.n == 0 && cfg->allow.n == 0 &&
	    cfg->max_conns_per_source == 0)
		return;
	buf[0] = '\0';
	off = access_rules(buf, sizeof(buf), off, "deny", &cfg->deny);
	off = access_rules(buf, sizeof(buf), off, "allow", &cfg->allow);
	if (cfg->max_conns_per_source > 0 && off < sizeof(buf))
		snprintf(buf + off, sizeof(buf) - off,
		    " --max-conns-per-source %ld", cfg->max_conns_per_source);
	zp_log(ctx->log, ZP_LOG_NOTICE, "who may connect:%s", buf);
}

/* tls@: the certificate, its time left, the handshakes' bounds. */
/*
 * -u tls@, --mirror tls@: what the upstreams' (and mirrors')
 * certificates are checked against; without a check (--upstream-verify
 * none), a warning, once.
 */
static void
zproxy_log_tls_upstreams(struct zp_ctx *ctx)
{
	const struct zp_config	*cfg = ctx->cfg;
	const char		*who = !ctx->tls_upstreams ? "--mirror tls@" :
				    zp_config_tls_mirrors(cfg) ?
				    "-u tls@, --mirror tls@" : "-u tls@";

	if (!zp_tls_cli_verifies(ctx->tls_cli)) {
		zp_log(ctx->log, ZP_LOG_WARN, "%s: --upstream-verify none: "
		    "the upstreams' certificates are not checked; whoever is "
		    "on the path can pose as a collector and read the logs",
		    who);
		return;
	}
	zp_log(ctx->log, ZP_LOG_NOTICE, "%s: upstream certificates "
	    "verified against %s%s, names against %s%s%s", who,
	    cfg->upstream_ca != NULL ? cfg->upstream_ca :
	    "the system's trust store",
	    cfg->upstream_ca != NULL ? " (--upstream-ca)" : "",
	    cfg->upstream_sni != NULL ? cfg->upstream_sni : "each upstream's "
	    "host", cfg->upstream_cert != NULL ? "; client certificate " : "",
	    cfg->upstream_cert != NULL ? cfg->upstream_cert : "");
}

void
zproxy_log_tls(struct zp_ctx *ctx)
{
	const char	*files[4];
	int64_t		 secs[4];
	size_t		 n;

	if (ctx->tls_cli != NULL)
		zproxy_log_tls_upstreams(ctx);
	if (ctx->tls_srv == NULL)
		return;
	n = zp_tls_srv_expiry(ctx->tls_srv, files, secs, 4);
	zp_log(ctx->log, n > 0 && secs[0] < 0 ? ZP_LOG_WARN : ZP_LOG_NOTICE,
	    "tls@: certificate %s (%s %lld days), TLS %s and up%s; handshakes "
	    "within %.3gs of accept, at most %ld under way (--tls-max-pending)",
	    ctx->cfg->tls_cert, n > 0 && secs[0] < 0 ? "expired for" :
	    "expires in", n > 0 ? (long long)(secs[0] < 0 ? -secs[0] :
	    secs[0]) / 86400 : 0LL, ctx->cfg->tls_min_version == ZP_TLS_V13 ?
	    "1.3" : "1.2", ctx->cfg->tls_client_ca != NULL ? ", client "
	    "certificates required" : "", ctx->cfg->tls_handshake_timeout,
	    ctx->tls_max_pending);
}

/*
 * With -u original, say where it may connect; without --allow-dst that is
 * anywhere this host reaches, which a client chooses: warn, once.
 */
void
zproxy_log_original(struct zp_ctx *ctx)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 buf[ZP_LOG_LINE_MAX], net[ZP_CIDRSTRLEN];
	size_t			 i, off = 0;
	int			 n;

	if (!cfg->original)
		return;
	if (cfg->allow_dst.n == 0) {
		zp_log(ctx->log, ZP_LOG_WARN, "-u original without "
		    "--allow-dst: clients may reach any destination this host "
		    "can connect to (but zproxy itself)");
		return;
	}
	buf[0] = '\0';
	for (i = 0; i < cfg->allow_dst.n && off < sizeof(buf); i++) {
		const struct zp_dstrule *r = &cfg->allow_dst.v[i];

		zp_cidr_str(&r->net, net, sizeof(net));
		if (r->port == 0)
			n = snprintf(buf + off, sizeof(buf) - off, "%s%s",
			    i ? "," : "", net);
		else
			n = snprintf(buf + off, sizeof(buf) - off,
			    r->net.family == AF_INET6 ? "%s[%s]:%u" : "%s%s:%u",
			    i ? "," : "", net, r->port);
		if (n < 0)
			break;
		off += (size_t)n;
	}
	zp_log(ctx->log, ZP_LOG_NOTICE, "-u original may connect to: "
	    "--allow-dst %s", buf);
}
