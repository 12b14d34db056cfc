/*
 * zproxy.c - the daemon: build the context, listen, run the loop, stop.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* sched_getaffinity, CPU_COUNT */
#endif
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "control.h"
#include "ctx.h"
#include "framing.h"
#include "health.h"
#include "inherit.h"
#include "listener.h"
#include "log.h"
#include "net.h"
#include "notify.h"
#include "pair.h"
#include "privs.h"
#include "spool.h"
#include "replay.h"
#include "resolver.h"
#include "sandbox.h"
#include "stats.h"
#include "upstream.h"
#include "wake.h"
#include "worker.h"
#include "zproxy.h"

/* Descriptors each pair needs: two sockets, and two pipes when splicing. */
#define ZP_FDS_SPLICE	6
#define ZP_FDS_COPY	2
#define ZP_FDS_MIRROR	3	/* a mirror stream: its socket and pipe */
/* Pipes made before the first clients, so that they find them ready. */
#define ZP_POOL_PREPARE	64
/* Bytes one direction may move per callback before yielding the loop. */
#define ZP_BUDGET_MIN	(256 * 1024)

/*
 * Raise RLIMIT_NOFILE's soft limit to the hard one. Returns the soft
 * limit in force afterwards.
 */
static long
raise_nofile(struct zp_log *lg)
{
	struct rlimit	rl;
	rlim_t		want;
	FILE		*fp;
	long		nr_open;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1)
		return 1024;
	want = rl.rlim_max;
	if (want == RLIM_INFINITY) {
		/* The kernel refuses more than fs.nr_open. */
		want = 1024 * 1024;
		if ((fp = fopen("/proc/sys/fs/nr_open", "r")) != NULL) {
			if (fscanf(fp, "%ld", &nr_open) == 1 && nr_open > 0)
				want = (rlim_t)nr_open;
			fclose(fp);
		}
	}
	if (want > rl.rlim_cur) {
		rlim_t old = rl.rlim_cur;

		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) == -1) {
			zp_log(lg, ZP_LOG_WARN, "cannot raise RLIMIT_NOFILE "
			    "from %llu to %llu: %s", (unsigned long long)old,
			    (unsigned long long)want, strerror(errno));
			rl.rlim_cur = old;
		}
	}
	return rl.rlim_cur > (rlim_t)0x7fffffff ? 0x7fffffff :
	    (long)rl.rlim_cur;
}

/*
 * libevent's own messages (evdns: "nameserver has failed") go through
 * zproxy's logger, so that they reach the log file, syslog or JSON like
 * every other line. libevent's callback takes no argument: this pointer,
 * set once at start-up, is the one piece of global state zproxy keeps.
 */
static struct zp_log *libevent_log;

static void
libevent_log_cb(int severity, const char *msg)
{
	int	level;

	if (libevent_log == NULL)
		return;
	switch (severity) {
	case EVENT_LOG_DEBUG:
		level = ZP_LOG_DEBUG;
		break;
	case EVENT_LOG_MSG:
		level = ZP_LOG_NOTICE;
		break;
	case EVENT_LOG_WARN:
		level = ZP_LOG_WARN;
		break;
	default:
		level = ZP_LOG_ERROR;
		break;
	}
	zp_log(libevent_log, level, "libevent: %s", msg);
}

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

/* The drain, on one thread: wind its framed streams down losslessly. */
static void
hook_wind_down(struct zp_ctx *ctx)
{
	zp_pairs_wind_down(ctx, ZP_END_SHUTDOWN);
}

/* The end, on one thread: close its pairs now. */
static void
hook_close(struct zp_ctx *ctx)
{
	zp_pairs_close(ctx, ZP_END_SHUTDOWN);
}

/* On the root: a pair closed or stopped waiting, the listeners may accept. */
static void
hook_root_changed(struct zp_ctx *root)
{
	if (root->listener != NULL) {
		zp_listener_resume(root->listener);
		zp_listener_update(root->listener);
	}
}

/* On the root: out of descriptors, --stats clients give way. */
static int
hook_root_shed(struct zp_ctx *root)
{
	return zp_stats_shed(root->stats_server);
}

/*
 * The worker threads (worker.c) sit below the pairs, the listeners and
 * the stats endpoint, and reach them through these alone.
 */
static const struct zp_ctx_hooks zp_hooks = {
	.pair_start = zp_pair_start,
	.pairs_upstream_down = zp_pairs_upstream_down,
	.pairs_wind_down = hook_wind_down,
	.pairs_close = hook_close,
	.pairs_modes = zp_pairs_modes,
	.pairs_moving = zp_pairs_moving,
	.rebalance_choose = zp_rebalance_choose,
	.pairs_move_one = zp_pairs_move_one,
	.root_changed = hook_root_changed,
	.root_shed = hook_root_shed,
};

void
zp_wire(struct zp_ctx *root)
{
	root->hooks = &zp_hooks;
}

/*
 * The service manager's status line (sd_notify STATUS=): what `systemctl
 * status` shows, bytes of open pairs too.
 */
static void
notify_status(void *arg, char *buf, size_t len)
{
	struct zp_ctx		*ctx = arg;
	struct zp_totals	*t;
	struct zp_upstream	 u;
	size_t			 i, nup = 0;

	if ((t = malloc(sizeof(*t))) == NULL) {
		snprintf(buf, len, "%s", ctx->stopping ? "draining" :
		    "relaying");
		return;
	}
	zp_ctx_totals(ctx, t);
	for (i = 0; i < zp_upstreams_count(ctx->ups); i++) {
		zp_upstream_get(ctx->ups, i, &u);
		nup += u.up != 0;
	}
	snprintf(buf, len, "%s; connections open=%llu total=%llu; bytes "
	    "up=%llu down=%llu; upstreams up %zu of %zu",
	    ctx->stopping ? "draining" : "relaying",
	    (unsigned long long)t->stats.conns_open,
	    (unsigned long long)t->stats.conns_total,
	    (unsigned long long)t->stats.all.up.bytes,
	    (unsigned long long)t->stats.all.down.bytes, nup,
	    zp_upstreams_count(ctx->ups));
	free(t);
}

/* Log the counters. */
static void
log_stats(struct zp_ctx *ctx, const char *what)
{
	struct zp_totals	*t;
	const struct zp_stats	*st;
	uint64_t		 up, down;
	double			 cpu = cpu_seconds(), gib;
	char			 per[32];

	if ((t = malloc(sizeof(*t))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s: out of memory", what);
		return;
	}
	/* Summed over the threads: one line for the process. */
	zp_ctx_totals(ctx, t);
	st = &t->stats;
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
	    (unsigned long long)(st->moves[0] + st->moves[1] +
	    st->moves[2]),
	    (unsigned long long)st->framing_errors,
	    (unsigned long long)st->replayed, cpu, per);
	free(t);
}

/*
 * Close the listening socket (new clients are refused from now on) and
 * stop the health checks and lookups that only serve new connections.
 */
static void
ctx_stop_accepting(struct zp_ctx *ctx)
{
	zp_listener_free(ctx->listener);
	ctx->listener = NULL;
	zp_control_free(ctx->control);
	ctx->control = NULL;
	zp_health_free(ctx->health);
	ctx->health = NULL;
	zp_resolver_free(ctx->resolver);
	ctx->resolver = NULL;
	if (ctx->rebalance_timer != NULL)
		event_free(ctx->rebalance_timer);
	ctx->rebalance_timer = NULL;
}

/* Are streams framed (--framing)? */
static int
cfg_framed(const struct zp_ctx *ctx)
{
	return ctx->cfg->framing != ZP_FRAMING_NONE;
}

/* --rebalance: one step over every thread, --rebalance-rate a second. */
static void
rebalance_cb(evutil_socket_t fd, short what, void *arg)
{
	zp_ctx_rebalance(arg);
}

/* The drain ran out of time: close what is left. */
static void
drain_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_ctx	*ctx = arg;

	zp_log(ctx->log, ZP_LOG_NOTICE, "drain timeout: closing %ld "
	    "connections", zp_ctx_open_all(ctx));
	event_base_loopbreak(ctx->base);
}

/*
 * Stop accepting at once and let open pairs finish for up to
 * --drain-timeout (why: "signal 15", "taken over by pid N").
 */
static void
ctx_drain(struct zp_ctx *ctx, const char *why)
{
	struct timeval	 tv;
	double		 t = ctx->cfg->drain_timeout;

	long		 open;

	ctx->stopping = 1;
	/* Every close wakes this thread now; then look (see worker.c). */
	__atomic_store_n(&ctx->close_wake, 1, __ATOMIC_SEQ_CST);
	ctx_stop_accepting(ctx);
	if ((open = zp_ctx_open_all(ctx)) == 0) {
		zp_log(ctx->log, ZP_LOG_NOTICE, "%s: stopping", why);
		event_base_loopbreak(ctx->base);
		return;
	}
	zp_log(ctx->log, ZP_LOG_NOTICE, "%s: not accepting; draining "
	    "%ld connections for up to %.3gs", why, open, t);
	/*
	 * Framed streams are told (a FIN) rather than cut at the end: what
	 * a client sends until it closes is still forwarded. Every thread
	 * does the same with its own pairs; the last one to close wakes
	 * this one (zp_ctx_changed).
	 */
	zp_ctx_drain(ctx, cfg_framed(ctx));
	if (cfg_framed(ctx))
		zp_pairs_wind_down(ctx, ZP_END_SHUTDOWN);
	tv = zp_seconds_tv(t);
	if ((ctx->drain_timer = evtimer_new(ctx->base, drain_timeout_cb,
	    ctx)) == NULL || evtimer_add(ctx->drain_timer, &tv) == -1)
		event_base_loopbreak(ctx->base);
}

/*
 * A worker thread's loop ended (worker.c said so and took it out of the
 * hand-out): its connections are stalled, so the others drain and
 * zproxy exits non-zero, for the service manager to start it again.
 */
static void
worker_death_cb(struct zp_ctx *ctx, int thread)
{
	char	why[48];

	ctx->exit_status = ZP_EX_SOFTWARE;
	if (ctx->stopping)
		return;
	zp_notify_stopping(ctx->notify);
	snprintf(why, sizeof(why), "thread %d failed", thread);
	ctx_drain(ctx, why);
}

/*
 * SIGTERM/SIGINT: drain; a second signal ends at once.
 */
static void
signal_stop_cb(evutil_socket_t sig, short what, void *arg)
{
	struct zp_ctx	*ctx = arg;
	char		 why[32];

	if (ctx->stopping) {
		zp_log(ctx->log, ZP_LOG_NOTICE, "signal %d again: closing "
		    "%ld connections now", (int)sig, zp_ctx_open_all(ctx));
		event_base_loopbreak(ctx->base);
		return;
	}
	zp_notify_stopping(ctx->notify);
	snprintf(why, sizeof(why), "signal %d", (int)sig);
	ctx_drain(ctx, why);
}

/* --control: a new zproxy asks for the listening sockets. */
static void
control_begin(void *arg, long pid)
{
	struct zp_ctx	*ctx = arg;

	zp_log(ctx->log, ZP_LOG_NOTICE, "takeover by pid %ld: handing the "
	    "listening sockets over", pid);
	zp_notify_reloading(ctx->notify);
}

/* What is handed over: every listener, and the --stats socket. */
static void
control_offer(void *arg, struct zp_inherit *set, unsigned long long *wd)
{
	struct zp_ctx		*ctx = arg;
	struct zp_listener	*l;
	struct zp_inherited	*s;

	for (l = ctx->listener; l != NULL && set->n < ZP_INHERIT_MAX;
	    l = zp_listener_next(l)) {
		s = &set->socks[set->n++];
		s->fd = zp_listener_fd(l);
		snprintf(s->label, sizeof(s->label), "%s",
		    zp_listener_label(l));
	}
	if (ctx->stats_server != NULL && set->n < ZP_INHERIT_MAX) {
		s = &set->socks[set->n++];
		s->fd = zp_stats_fd(ctx->stats_server);
		s->stats = 1;
		zp_listen_spec_str(&ctx->cfg->stats, s->label,
		    sizeof(s->label));
	}
	*wd = zp_notify_watchdog_usec(ctx->notify);
}

static void
control_abort(void *arg, long pid, const char *why)
{
	struct zp_ctx	*ctx = arg;

	zp_log(ctx->log, ZP_LOG_WARN, "takeover by pid %ld failed: %s; "
	    "serving on", pid, why);
	zp_notify_resume(ctx->notify);
}

/*
 * The new process accepts on the sockets: stop accepting (closing our
 * descriptors closes no socket: it holds them too), give up --stats (it
 * serves it now, or binds its own) and the service manager (it is the
 * main process now), and drain.
 */
static void
control_done(void *arg, long pid)
{
	struct zp_ctx	*ctx = arg;
	char		 why[48];

	zp_stats_free(ctx->stats_server);
	ctx->stats_server = NULL;
	zp_notify_free(ctx->notify);
	ctx->notify = NULL;
	snprintf(why, sizeof(why), "taken over by pid %ld", pid);
	ctx_drain(ctx, why);
}

static const struct zp_control_ops control_ops = {
	control_begin, control_offer, control_abort, control_done,
};

/*
 * SIGHUP: reopen the log file that logrotate moved away. The log thread
 * does it (1) and writes "log reopened" itself, or why not.
 */
static void
signal_hup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct zp_ctx	*ctx = arg;

	if (ctx->log->sink == ZP_LOG_FILE && zp_log_reopen(ctx->log) == 0)
		zp_log(ctx->log, ZP_LOG_NOTICE, "signal %d: log reopened",
		    (int)sig);
}

/* SIGUSR1's line, once the workers published their counters. */
static void
signal_stats_refreshed_cb(void *arg)
{
	log_stats(arg, "stats");
}

/* SIGUSR1: the counters, fresh from every thread (or ZP_REFRESH_MS old). */
static void
signal_stats_cb(evutil_socket_t sig, short what, void *arg)
{
	if (zp_ctx_refresh(arg, signal_stats_refreshed_cb, arg) == NULL)
		log_stats(arg, "stats");
}

/* Choose max-conns from the descriptor budget unless it was given. */
static void
size_limits(struct zp_ctx *ctx, long nofile)
{
	struct zp_config	*cfg = ctx->cfg;
	long			 per = (cfg->mode == ZP_MODE_SPLICE ?
				    ZP_FDS_SPLICE : ZP_FDS_COPY) +
				    (cfg->replay_window > 0 ? 2 : 0) +
				    /*
				     * A socket and a pipe per mirror, twice:
				     * the copy of a pair that closed may
				     * still be finishing (up to
				     * --linger-timeout) while the pair in its
				     * place has its own.
				     */
				    2 * ZP_FDS_MIRROR * (long)cfg->nmirrors;
	/* Listener, stdio, epoll, signal pipe and some slack for libevent. */
	long			 spare = 16 + nofile / 32;
	/* --stats gets its own share, so that its clients never take ours. */
	long			 reserve = spare + (cfg->have_stats ?
				    cfg->stats_max_conns + 1 : 0);
	long			 fit = (nofile - reserve) / ZP_FDS_SPLICE;

	/* Stats refuses clients rather than eat into the spare (stats.c). */
	ctx->nofile = nofile;
	ctx->fd_reserve = spare;

	/*
	 * Pipes never take the descriptors that sockets need: beyond what
	 * the budget holds at 6 a pair, pairs relay in copy mode at 2.
	 */
	if (fit < 0)
		fit = 0;
	ctx->pipe_cap = (size_t)fit * 2;
	if (cfg->max_conns > 0) {
		ctx->max_conns = cfg->max_conns;
		/*
		 * Kept, as HAProxy keeps a maxconn that ulimit-n cannot
		 * hold, but said in one line with the limit that would.
		 */
		if (cfg->max_conns > (nofile - reserve) / per)
			zp_log(ctx->log, ZP_LOG_WARN, "--max-conns %ld cannot "
			    "be honoured: at %ld descriptors a pair it needs "
			    "RLIMIT_NOFILE %ld or more, and it is %ld (ulimit "
			    "-n); expect accept pauses, copy-mode fallbacks "
			    "and dropped mirror streams", cfg->max_conns, per,
			    cfg->max_conns * per + reserve, nofile);
	} else {
		ctx->max_conns = (nofile - reserve) / per;
		if (ctx->max_conns < 1)
			ctx->max_conns = 1;
	}
	ctx->budget = cfg->pipe_size > ZP_BUDGET_MIN ? cfg->pipe_size :
	    ZP_BUDGET_MIN;
}

/* Read an integer sysctl, or -1. */
static long
read_sysctl(const char *path)
{
	FILE	*fp;
	long	 v = -1;

	if ((fp = fopen(path, "r")) != NULL) {
		if (fscanf(fp, "%ld", &v) != 1)
			v = -1;
		fclose(fp);
	}
	return v;
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
	return buf;
}

/* One line that says what this process is about to do. */
static void
log_start(struct zp_ctx *ctx, long nofile, const char *privs)
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
static void
log_access(struct zp_ctx *ctx)
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
	if (cfg->rebalance)
		zp_log(ctx->log, ZP_LOG_NOTICE, "rebalancing: at most %d "
		    "moves a second while an upstream has 2 streams more than "
		    "another", cfg->rebalance_rate);
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

/*
 * With -u original, say where it may connect; without --allow-dst that is
 * anywhere this host reaches, which a client chooses: warn, once.
 */
static void
log_original(struct zp_ctx *ctx)
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

/*
 * Prepare the pipe pool within the descriptor budget and, for a user
 * without CAP_SYS_RESOURCE, within a quarter of the per-user pipe budget
 * (fs.pipe-user-pages-soft, shared by all of that user's processes).
 * A pipe size the kernel never grants is a start-up error; a budget that
 * others hold now only means copy mode until pipes can be had. Returns 0
 * or an exit status.
 */
static int
pool_setup(struct zp_ctx *ctx, int nthreads)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 err[ZP_ERRLEN];
	size_t			 cap, prepare;
	long			 maxpipe, pages;
	int			 shortage;

	cap = (size_t)ctx->max_conns * 2;
	if (cap > ctx->pipe_cap)
		cap = ctx->pipe_cap;
	/*
	 * Each thread has a pool of its own: the budget is shared out, in
	 * whole pairs' worth, rounded up (--max-conns 3 on 2 threads: 2
	 * pairs' pipes each, not 3 pipes, which would splice 1 pair).
	 */
	cap = (cap + 2 * (size_t)nthreads - 1) / (2 * (size_t)nthreads) * 2;
	if (cap < 2)
		cap = 2;
	prepare = cap < ZP_POOL_PREPARE ? cap : ZP_POOL_PREPARE;
	pages = read_sysctl("/proc/sys/fs/pipe-user-pages-soft");
	if (geteuid() != 0 && pages > 0 && prepare > (size_t)pages * 4096 /
	    4 / cfg->pipe_size / (size_t)nthreads)
		prepare = (size_t)pages * 4096 / 4 / cfg->pipe_size /
		    (size_t)nthreads;
	if (prepare < 2)
		prepare = 2;
	ctx->pool_cap = cap;
	ctx->pool_prepare = prepare;
	if ((ctx->pool = zp_pipepool_new(cfg->pipe_size, cap, prepare,
	    &shortage, err, sizeof(err))) == NULL) {
		maxpipe = read_sysctl("/proc/sys/fs/pipe-max-size");
		if (shortage == ZP_PIPE_BUDGET && maxpipe > 0 &&
		    cfg->pipe_size > (size_t)maxpipe) {
			zp_log(ctx->log, ZP_LOG_ERROR, "--pipe-size %zu is "
			    "above fs.pipe-max-size (%ld) and the kernel "
			    "refuses it", cfg->pipe_size, maxpipe);
			return ZP_EX_OSERR;
		}
		if (shortage != ZP_PIPE_BUDGET && shortage != ZP_PIPE_NOFD) {
			zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
			return ZP_EX_OSERR;
		}
		zp_log(ctx->log, ZP_LOG_WARN, "%s; relaying in copy mode "
		    "until pipes can be had", err);
		if ((ctx->pool = zp_pipepool_new(cfg->pipe_size, cap, 0,
		    &shortage, err, sizeof(err))) == NULL) {
			zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
			return ZP_EX_OSERR;
		}
	} else {
		struct zp_pipepool_stats	pst;

		zp_pipepool_stats(ctx->pool, &pst);
		if (pst.pooled < prepare)
			zp_log(ctx->log, ZP_LOG_WARN, "only %zu of %zu pipes "
			    "of %zu bytes could be made (%s); pairs beyond "
			    "them relay in copy mode", pst.pooled, prepare,
			    cfg->pipe_size, zp_pipe_shortage_str(pst.shortage));
	}
	/*
	 * Framed lf or nul streams are spliced unread; the last byte of a
	 * pipe, looked at through this one with tee(2), says whether the
	 * stream stopped at a boundary.
	 */
	if (cfg->framing == ZP_FRAMING_LF || cfg->framing == ZP_FRAMING_NUL ||
	    cfg->framing == ZP_FRAMING_AUTO) {
		int	fds[2];

		if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
			zp_log(ctx->log, ZP_LOG_ERROR, "pipe2: %s",
			    strerror(errno));
			return ZP_EX_OSERR;
		}
		ctx->tee_pipe.rfd = fds[0];
		ctx->tee_pipe.wfd = fds[1];
	}
	return 0;
}

/* --replay-window: /dev/null, to drop the oldest bytes into. */
static int
replay_setup(struct zp_ctx *ctx)
{
	if (ctx->cfg->replay_window == 0)
		return 0;
	if ((ctx->devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "/dev/null: %s",
		    strerror(errno));
		return ZP_EX_OSERR;
	}
	return 0;
}

/*
 * --replay-window: proof that the kernel gives a pipe of the window's
 * size (fs.pipe-max-size caps it without CAP_SYS_RESOURCE) to the user
 * zproxy now is (after --user: root's exemption is gone), before the
 * first client comes.
 */
static int
replay_probe(struct zp_ctx *ctx)
{
	struct zp_config	*cfg = ctx->cfg;
	struct zp_pipe		 p;
	long			 maxpipe;

	if (cfg->replay_window == 0)
		return 0;
	if (zp_replay_pipe(cfg->replay_window, &p) == -1) {
		maxpipe = read_sysctl("/proc/sys/fs/pipe-max-size");
		zp_log(ctx->log, ZP_LOG_ERROR, "--replay-window %zu: the "
		    "kernel gives no pipe that large (%s; fs.pipe-max-size "
		    "is %ld)", cfg->replay_window, strerror(errno), maxpipe);
		return ZP_EX_OSERR;
	}
	close(p.rfd);
	close(p.wfd);
	return 0;
}

/*
 * Start-up is over: become --user, then confine the process to the
 * relay's system calls. Everything that needs root or a call the loop
 * never makes (binding the listener, the stats socket, opening the log,
 * the pipe pool, RLIMIT_NOFILE, evdns reading resolv.conf) is done. The
 * ids change before the filter goes on, so that the list need not hold
 * setuid and friends. privs receives "user U:G, sandbox on" for the
 * start-up line. Returns 0 or an exit status.
 */
static int
confine(struct zp_ctx *ctx, const struct zp_privs *pv, char *privs,
    size_t len)
{
	char	err[ZP_ERRLEN];
	int	off;

	if (zp_privs_drop(pv, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot become user %s: %s",
		    pv->user, err);
		return ZP_EX_NOPERM;
	}
	/*
	 * From here a slow sink (a full disk, a blocked /dev/log) stalls the
	 * log thread, not the loops. Started after --daemon's fork, which it
	 * would not survive, and after the drop, like every thread; before
	 * the sandbox, whose list then covers it without clone.
	 */
	if (zp_log_start(ctx->log, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	/*
	 * The threads start as who zproxy is now: capabilities are each
	 * thread's own, so a thread made before the drop would keep root's.
	 * The filter below covers them too (SECCOMP_FILTER_FLAG_TSYNC).
	 */
	if (zp_workers_start(ctx, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	/*
	 * --spool: as who we are now (the files are that user's), and its
	 * I/O thread, like the others before the filter.
	 */
	if (ctx->spool != NULL && zp_spool_start(ctx->spool, err,
	    sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_CANTCREAT;
	}
	if (pv->change)
		off = snprintf(privs, len, "user %s:%s", pv->user, pv->group);
	else
		off = snprintf(privs, len, "uid %lu", (unsigned long)geteuid());
	if (off < 0 || (size_t)off >= len)
		off = 0;
	if (ctx->cfg->no_sandbox) {
		snprintf(privs + off, len - off, ", sandbox off");
		return 0;
	}
	if (!zp_sandbox_available()) {
		snprintf(privs + off, len - off, ", sandbox unavailable");
		return 0;
	}
	if ((ctx->sandbox = zp_sandbox_install(ctx->base, ctx->log, err,
	    sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	snprintf(privs + off, len - off, ", sandbox on");
	return 0;
}

/* Close every pair and free the context's resources. */
static void
ctx_free(struct zp_ctx *ctx, struct event **sigs, int nsigs)
{
	int	i;

	zp_workers_free(ctx);
	zp_pairs_close(ctx, ZP_END_SHUTDOWN);
	/* Its I/O thread reads the upstreams: it ends before they go. */
	zp_spool_free(ctx->spool);
	ctx->spool = NULL;
	ctx_stop_accepting(ctx);
	zp_stats_free(ctx->stats_server);
	ctx->stats_server = NULL;
	if (ctx->drain_timer != NULL)
		event_free(ctx->drain_timer);
	ctx->drain_timer = NULL;
	zp_upstreams_free(ctx->ups);
	ctx->ups = NULL;
	zp_mirrors_free(ctx->mirrors);
	ctx->mirrors = NULL;
	zp_srctab_free(&ctx->sources);
	for (i = 0; i < nsigs; i++)
		if (sigs[i] != NULL)
			event_free(sigs[i]);
	zp_pipepool_free(ctx->pool);
	ctx->pool = NULL;
	zp_bufcache_clear(&ctx->bufs);
	if (ctx->tee_pipe.rfd != -1) {
		close(ctx->tee_pipe.rfd);
		close(ctx->tee_pipe.wfd);
	}
	ctx->tee_pipe.rfd = ctx->tee_pipe.wfd = -1;
	if (ctx->devnull != -1)
		close(ctx->devnull);
	ctx->devnull = -1;
	zp_notify_free(ctx->notify);
	ctx->notify = NULL;
	zp_sandbox_free(ctx->sandbox);
	ctx->sandbox = NULL;
	/*
	 * evdns runs the callback of a cancelled lookup later, from the
	 * loop, and that callback frees the lookup: give it that pass.
	 */
	for (i = 0; ctx->base != NULL && i < 4; i++)
		(void)event_base_loop(ctx->base, EVLOOP_NONBLOCK);
	zp_wake_free(ctx->wake);
	ctx->wake = NULL;
	if (ctx->base != NULL)
		event_base_free(ctx->base);
	ctx->base = NULL;
}

/*
 * --daemon: fork. The parent waits until the child serves (a byte on a
 * pipe) and exits 0, or until it dies first and exits with its status:
 * so that `zproxy --daemon ...` (ExecReload=) says whether it worked.
 * Returns 0 in the child with *readyfd set; an exit status on failure.
 */
static int
daemonize(int *readyfd)
{
	const char	*wp;
	char		 c, pidbuf[24];
	int		 p[2], status, fd;
	pid_t		 pid, parent = getpid();
	ssize_t		 r;

	if (pipe2(p, O_CLOEXEC) == -1) {
		fprintf(stderr, "zproxy: --daemon: pipe: %s\n", strerror(errno));
		return ZP_EX_OSERR;
	}
	fflush(NULL);
	if ((pid = fork()) == -1) {
		fprintf(stderr, "zproxy: --daemon: fork: %s\n", strerror(errno));
		return ZP_EX_OSERR;
	}
	if (pid > 0) {
		close(p[1]);
		do {
			r = read(p[0], &c, 1);
		} while (r == -1 && errno == EINTR);
		if (r == 1)
			_exit(0);
		while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
			;
		_exit(WIFEXITED(status) ? WEXITSTATUS(status) : ZP_EX_OSERR);
	}
	close(p[0]);
	(void)setsid();
	/* The watchdog the manager set for the parent is the child's now. */
	snprintf(pidbuf, sizeof(pidbuf), "%ld", (long)parent);
	if ((wp = getenv("WATCHDOG_PID")) != NULL && strcmp(wp, pidbuf) == 0) {
		snprintf(pidbuf, sizeof(pidbuf), "%ld", (long)getpid());
		(void)setenv("WATCHDOG_PID", pidbuf, 1);
	}
	if ((fd = open("/dev/null", O_RDWR | O_CLOEXEC)) != -1) {
		(void)dup2(fd, STDIN_FILENO);
		if (fd != STDIN_FILENO)
			close(fd);
	}
	*readyfd = p[1];
	return 0;
}

/* --daemon: serving now; the parent may go. */
static void
daemon_ready(struct zp_ctx *ctx)
{
	ssize_t	r;

	if (ctx->daemon_fd == -1)
		return;
	do {
		r = write(ctx->daemon_fd, "", 1);
	} while (r == -1 && errno == EINTR);
	close(ctx->daemon_fd);
	ctx->daemon_fd = -1;
}

/*
 * Every -l: bound here, or taken from the sockets systemd passed, or
 * from the zproxy taken over (offer: then every one, and exactly its
 * set). Returns 0, or an exit status, logged.
 */
static int
listeners_setup(struct zp_ctx *ctx, struct zp_offer *offer)
{
	struct zp_config		*cfg = ctx->cfg;
	const struct zp_listen_spec	*spec;
	const struct zp_inherited	*left;
	struct zp_inherit		 sd, *set = NULL;
	struct zp_listener		*l;
	char				 err[ZP_ERRLEN];
	char				 label[ZP_INHERIT_LABELLEN];
	int				 fds[ZP_INHERIT_MAX];
	size_t				 i, j, n;

	for (i = 0; offer == NULL && i < cfg->nlistens; i++)
		if (cfg->listens[i].systemd) {
			if (zp_inherit_parse_env(&sd, getenv("LISTEN_PID"),
			    getenv("LISTEN_FDS"), getenv("LISTEN_FDNAMES"),
			    getpid(), err, sizeof(err)) == -1) {
				zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
				return ZP_EX_CONFIG;
			}
			/* As sd_listen_fds(3) does: they are not for children. */
			(void)unsetenv("LISTEN_PID");
			(void)unsetenv("LISTEN_FDS");
			(void)unsetenv("LISTEN_FDNAMES");
			set = &sd;
			break;
		}
	if (offer != NULL)
		set = &offer->set;
	for (i = 0; i < cfg->nlistens; i++) {
		spec = &cfg->listens[i];
		zp_listen_spec_str(spec, label, sizeof(label));
		if (offer == NULL && !spec->systemd) {
			if ((l = zp_listener_new(ctx, spec, err,
			    sizeof(err))) == NULL) {
				/* EPERM: --tproxy without its capability. */
				zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
				return errno == EPERM ? ZP_EX_NOPERM :
				    ZP_EX_OSERR;
			}
			zp_listener_link(&ctx->listener, l);
			continue;
		}
		n = zp_inherit_take(set, cfg, spec, offer != NULL, fds,
		    ZP_INHERIT_MAX);
		if (n == 0) {
			if (offer != NULL)
				zp_log(ctx->log, ZP_LOG_ERROR, "--takeover: "
				    "the zproxy there (pid %ld) does not listen "
				    "on %s: the listen addresses cannot change "
				    "across a takeover", offer->pid, label);
			else
				zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: "
				    "systemd passed no socket %s", label,
				    spec->name[0] ? "of that name "
				    "(FileDescriptorName=)" : "that no "
				    "-l systemd:NAME takes");
			zp_inherit_close_rest(set);
			return ZP_EX_CONFIG;
		}
		for (j = 0; j < n; j++) {
			if ((l = zp_listener_adopt(ctx, fds[j], label, err,
			    sizeof(err))) == NULL) {
				zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: %s",
				    label, err);
				while (++j < n)
					close(fds[j]);
				zp_inherit_close_rest(set);
				return errno == EPERM ? ZP_EX_NOPERM :
				    ZP_EX_CONFIG;
			}
			zp_listener_link(&ctx->listener, l);
		}
	}
	if (set != NULL && (left = zp_inherit_left(set)) != NULL) {
		if (offer != NULL) {
			zp_log(ctx->log, ZP_LOG_ERROR, "--takeover: the "
			    "zproxy there (pid %ld) listens on %s too: give "
			    "every -l it has (the listen addresses cannot "
			    "change across a takeover)", offer->pid,
			    left->label);
			return ZP_EX_CONFIG;
		}
		for (i = 0; i < set->n; i++)
			if (!set->socks[i].taken)
				zp_log(ctx->log, ZP_LOG_WARN, "-l systemd: "
				    "closing descriptor %d (%s): no -l takes "
				    "it", set->socks[i].fd,
				    set->socks[i].label);
	}
	if (set == &sd)
		zp_inherit_close_rest(&sd);
	for (l = ctx->listener; l != NULL && ctx->nlisten_addrs <
	    ZP_MAX_LISTEN_SOCKETS; l = zp_listener_next(l))
		ctx->listen_addrs[ctx->nlisten_addrs++] = *zp_listener_addr(l);
	return 0;
}

/* Run until SIGTERM/SIGINT. */
/*
 * Secret bits for the per-source table's hash. Without getrandom(2) (a
 * very old kernel) the time and pid still vary from run to run.
 */
static uint64_t
source_seed(void)
{
	uint64_t	seed;
	struct timeval	tv;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) ==
	    (ssize_t)sizeof(seed))
		return seed;
	gettimeofday(&tv, NULL);
	return ((uint64_t)tv.tv_sec * 1000003) ^ ((uint64_t)tv.tv_usec << 20) ^
	    (uint64_t)getpid();
}

/* --threads, or one per CPU this process may run on. */
static int
threads_wanted(const struct zp_config *cfg)
{
	cpu_set_t	set;
	int		n;

	if (cfg->threads > 0)
		return cfg->threads;
	if (sched_getaffinity(0, sizeof(set), &set) == -1)
		return 1;
	n = CPU_COUNT(&set);
	if (n < 1)
		n = 1;
	return n > ZP_THREADS_MAX ? ZP_THREADS_MAX : n;
}

int
zp_run(struct zp_config *cfg)
{
	struct zp_ctx	 ctx;
	struct zp_log	 log;
	struct event	*sigs[4] = { NULL, NULL, NULL, NULL };
	struct zp_privs	 pv;
	struct zp_offer	 offer;
	char		 err[ZP_ERRLEN], privs[200];
	long		 nofile;
	int		 rc = 0, level, i, stats_fd = -1;
	int		 nthreads = threads_wanted(cfg);

	memset(&ctx, 0, sizeof(ctx));
	memset(&offer, 0, sizeof(offer));
	offer.conn = -1;
	ctx.tee_pipe.rfd = ctx.tee_pipe.wfd = -1;
	ctx.devnull = -1;
	ctx.daemon_fd = -1;
	if (cfg->daemon && (rc = daemonize(&ctx.daemon_fd)) != 0)
		return rc;
	TAILQ_INIT(&ctx.pairs);
	TAILQ_INIT(&ctx.mirror_sets);
	zp_wire(&ctx);
	ctx.cfg = cfg;
	ctx.log = &log;
	ctx.bufs.size = cfg->buffer_size;
	if (cfg->quiet)
		level = ZP_LOG_ERROR;
	else if (cfg->verbose == 0)
		level = ZP_LOG_NOTICE;
	else
		level = cfg->verbose == 1 ? ZP_LOG_CONN : ZP_LOG_DEBUG;
	zp_log_init(ctx.log, stderr, level);
	/* Before anything is opened: a wrong name must not bind a port. */
	if ((rc = zp_privs_lookup(&pv, cfg->user, cfg->group, err,
	    sizeof(err))) != 0) {
		fprintf(stderr, "zproxy: %s\n", err);
		return rc;
	}
	pv.keep_transparent = cfg->source == ZP_SOURCE_CLIENT;
	if ((rc = zp_source_check(cfg, 0, err, sizeof(err))) != 0) {
		fprintf(stderr, "zproxy: %s\n", err);
		return rc;
	}
	if (zp_log_open(ctx.log, cfg->log_file, cfg->use_syslog,
	    cfg->log_format == ZP_LOG_JSON, err, sizeof(err)) == -1) {
		fprintf(stderr, "zproxy: %s\n", err);
		return ZP_EX_CANTCREAT;
	}
	gettimeofday(&ctx.started, NULL);
	if ((ctx.ups = zp_upstreams_new(cfg->upstreams, cfg->nupstreams,
	    (enum zp_balance)cfg->balance, cfg->max_fails, cfg->fail_timeout,
	    ctx.log)) == NULL || (ctx.mirrors = zp_mirrors_new(cfg)) == NULL) {
		zp_upstreams_free(ctx.ups);
		zp_log(ctx.log, ZP_LOG_ERROR, "out of memory");
		zp_log_close(ctx.log);
		return ZP_EX_OSERR;
	}

	if (cfg->max_conns_per_source > 0)
		zp_srctab_init(&ctx.sources, source_seed());

	/* splice(2) cannot take MSG_NOSIGNAL: a closed peer must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	nofile = raise_nofile(ctx.log);
	size_limits(&ctx, nofile);

	libevent_log = ctx.log;
	event_set_log_callback(libevent_log_cb);
	/*
	 * Threads wake each other's loops through a zp_wake (an eventfd:
	 * no lock of the other loop), but still stop them from outside
	 * (event_base_loopbreak at the end), and a wake out of memory falls
	 * back to event_active: libevent's locks, set before any base. Not
	 * contended, they cost no system call.
	 */
	if ((nthreads > 1 || cfg->spool_dir != NULL) &&
	    evthread_use_pthreads() == -1) {
		zp_log(ctx.log, ZP_LOG_ERROR, "cannot set up libevent for "
		    "threads");
		return ZP_EX_OSERR;
	}
	if ((ctx.base = event_base_new()) == NULL ||
	    (ctx.wake = zp_wake_new(ctx.base)) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "cannot create the event loop");
		return ZP_EX_OSERR;
	}
	/* The old zproxy keeps serving until this one says it does. */
	if (cfg->takeover != NULL && (rc = zp_takeover_fetch(cfg->takeover,
	    &offer, err, sizeof(err))) != 0) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		goto out;
	}
	if ((rc = listeners_setup(&ctx, cfg->takeover != NULL ? &offer :
	    NULL)) != 0)
		goto out;
	/*
	 * The replay's and the mirrors' pipes may grow where the per-user
	 * pipe budget does not bind. Decided now: the sandbox refuses
	 * geteuid() later.
	 */
	ctx.pipes_roomy = cfg->user == NULL && geteuid() == 0;
	if ((cfg->mode == ZP_MODE_SPLICE && (rc = pool_setup(&ctx,
	    nthreads)) != 0) ||
	    (rc = replay_setup(&ctx)) != 0)
		goto out;
	if (cfg->spool_dir != NULL && (ctx.spool = zp_spool_new(&ctx, err,
	    sizeof(err))) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_CANTCREAT;
		goto out;
	}
	sigs[0] = evsignal_new(ctx.base, SIGTERM, signal_stop_cb, &ctx);
	sigs[1] = evsignal_new(ctx.base, SIGINT, signal_stop_cb, &ctx);
	sigs[2] = evsignal_new(ctx.base, SIGUSR1, signal_stats_cb, &ctx);
	sigs[3] = evsignal_new(ctx.base, SIGHUP, signal_hup_cb, &ctx);
	for (i = 0; i < 4; i++)
		if (sigs[i] == NULL || event_add(sigs[i], NULL) == -1) {
			zp_log(ctx.log, ZP_LOG_ERROR, "cannot set up "
			    "signals");
			rc = ZP_EX_OSERR;
			goto out;
		}
	if (cfg->have_stats && cfg->takeover != NULL) {
		char	label[ZP_INHERIT_LABELLEN];

		stats_fd = zp_inherit_take_stats(&offer.set,
		    zp_listen_spec_str(&cfg->stats, label, sizeof(label)));
	}
	if (cfg->have_stats && (ctx.stats_server = zp_stats_new(&ctx,
	    &cfg->stats, stats_fd, err, sizeof(err))) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_OSERR;
		goto out;
	}
	if (cfg->check_interval > 0 &&
	    (ctx.health = zp_health_new(&ctx)) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "cannot start health checks");
		rc = ZP_EX_OSERR;
		goto out;
	}
	if (cfg->resolve_interval > 0 && (ctx.resolver =
	    zp_resolver_new(&ctx, err, sizeof(err))) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_OSERR;
		goto out;
	}
	if (cfg->rebalance) {
		struct timeval	tv = zp_seconds_tv(1.0 / cfg->rebalance_rate);

		if ((ctx.rebalance_timer = event_new(ctx.base, -1, EV_PERSIST,
		    rebalance_cb, &ctx)) == NULL ||
		    event_add(ctx.rebalance_timer, &tv) == -1) {
			zp_log(ctx.log, ZP_LOG_ERROR, "cannot start --rebalance");
			rc = ZP_EX_OSERR;
			goto out;
		}
	}

	/* The other threads' contexts; they start in confine(). */
	if (nthreads > 1 && zp_workers_new(&ctx, nthreads, err,
	    sizeof(err)) == -1) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_OSERR;
		goto out;
	}
	zp_workers_on_death(&ctx, worker_death_cb);

	/* Opened as who we start as: the manager's socket may be root's. */
	ctx.notify = zp_notify_new(ctx.base, ctx.log, notify_status, &ctx,
	    err, sizeof(err));
	if (ctx.notify == NULL && err[0] != '\0') {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_OSERR;
		goto out;
	}
	if (cfg->takeover != NULL || cfg->daemon)
		zp_notify_takeover(ctx.notify, offer.watchdog_usec);
	/* Made as root, then given to --user: the next zproxy is that user. */
	if (cfg->control != NULL && (ctx.control = zp_control_new(ctx.base,
	    ctx.log, cfg->control, pv.change ? pv.uid : (uid_t)-1, pv.gid,
	    &control_ops, &ctx, err, sizeof(err))) == NULL) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		rc = ZP_EX_OSERR;
		goto out;
	}
	if ((rc = confine(&ctx, &pv, privs, sizeof(privs))) != 0 ||
	    (rc = replay_probe(&ctx)) != 0)
		goto out;
	/* What confine() kept must still do: a --user drop bug shows here. */
	if ((rc = zp_source_check(cfg, 1, err, sizeof(err))) != 0) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		goto out;
	}

	log_access(&ctx);
	log_start(&ctx, nofile, privs);
	log_original(&ctx);
	/* Every listener is up, --stats too: the manager may send clients. */
	zp_notify_ready(ctx.notify);
	if (cfg->takeover != NULL) {
		if (zp_takeover_done(&offer, err, sizeof(err)) == -1)
			zp_log(ctx.log, ZP_LOG_WARN, "%s", err);
		else
			zp_log(ctx.log, ZP_LOG_NOTICE, "took over from pid "
			    "%ld: it stops accepting and drains", offer.pid);
	}
	zp_offer_free(&offer);
	daemon_ready(&ctx);

	if (event_base_dispatch(ctx.base) == -1) {
		zp_log(ctx.log, ZP_LOG_ERROR, "event loop failed");
		rc = ZP_EX_OSERR;
	}
	ctx.stopping = 1;
	ctx_stop_accepting(&ctx);
	zp_workers_stop(&ctx);
	zp_pairs_close(&ctx, ZP_END_SHUTDOWN);
	log_stats(&ctx, "stopping");
	if (rc == 0)
		rc = ctx.exit_status;
out:
	zp_offer_free(&offer);
	if (ctx.daemon_fd != -1)
		close(ctx.daemon_fd);
	ctx_free(&ctx, sigs, 4);
	event_set_log_callback(NULL);
	libevent_log = NULL;
	zp_log_close(ctx.log);
	return rc;
}
