/*
 * zproxy_signal.c - how the root stops: signals, the drain, a worker
 * that died, and the old side of a takeover (--control).
 */

#include <stdio.h>
#include <event2/event.h>

#include "core/config.h"
#include "ops/control.h"
#include "relay/ctx.h"
#include "upstream/health.h"
#include "ops/inherit.h"
#include "stream/listener.h"
#include "lib/log.h"
#include "ops/notify.h"
#include "stream/pair.h"
#include "stream/udp.h"
#include "upstream/resolver.h"
#include "http/stats.h"
#include "relay/worker.h"
#include "zproxy_int.h"

/*
 * Close the listening socket (new clients are refused from now on) and
 * stop the health checks and lookups that only serve new connections.
 */
void
zproxy_stop_accepting(struct zp_ctx *ctx)
{
	zp_listener_free(ctx->listener);
	ctx->listener = NULL;
	zp_udp_stop(ctx);
	zp_control_free(ctx->control);
	ctx->control = NULL;
	zp_health_free(ctx->health);
	ctx->health = NULL;
	zp_resolver_free(ctx->resolver);
	ctx->resolver = NULL;
	if (ctx->rebalance_timer != NULL)
		event_free(ctx->rebalance_timer);
	ctx->rebalance_timer = NULL;
	zproxy_ctl_free(ctx);
}

/*
 * The rebalance timer runs with --rebalance, and while an upstream is
 * drained (zproxy ctl): add it if it should run and does not.
 */
void
zproxy_rebalance_arm(struct zp_ctx *ctx)
{
	struct timeval	tv = zp_seconds_tv(1.0 / ctx->cfg->rebalance_rate);

	if (ctx->rebalance_timer == NULL ||
	    event_pending(ctx->rebalance_timer, EV_TIMEOUT, NULL))
		return;
	if (ctx->cfg->rebalance || zp_upstreams_draining(ctx->ups) > 0)
		(void)event_add(ctx->rebalance_timer, &tv);
}

/* --rebalance: one step over every thread, --rebalance-rate a second. */
void
zproxy_rebalance_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_ctx	*ctx = arg;

	zproxy_ctl_tick(ctx);
	if (!ctx->cfg->rebalance && zp_upstreams_draining(ctx->ups) == 0) {
		(void)event_del(ctx->rebalance_timer);
		return;
	}
	zp_ctx_rebalance(ctx);
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
	zproxy_stop_accepting(ctx);
	open = zp_ctx_open_all(ctx);
	if (zp_ctx_drained(ctx)) {
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
	zp_ctx_drain(ctx);
	zp_ctx_hooks(ctx)->drain(ctx);
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
void
zproxy_worker_death_cb(struct zp_ctx *ctx, int thread)
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
	const char		*labels[ZP_INHERIT_MAX];
	int			 fds[ZP_INHERIT_MAX];
	size_t			 i, n;

	for (l = ctx->listener; l != NULL && set->n < ZP_INHERIT_MAX;
	    l = zp_listener_next(l)) {
		s = &set->socks[set->n++];
		s->fd = zp_listener_fd(l);
		snprintf(s->label, sizeof(s->label), "%s",
		    zp_listener_label(l));
	}
	/* Each thread's UDP socket: the next zproxy reads them all. */
	n = zp_udp_sockets(ctx, fds, labels, ZP_INHERIT_MAX - set->n);
	for (i = 0; i < n; i++) {
		s = &set->socks[set->n++];
		s->fd = fds[i];
		snprintf(s->label, sizeof(s->label), "%s", labels[i]);
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

const struct zp_control_ops zproxy_control_ops = {
	control_begin, control_offer, control_abort, control_done,
	zproxy_ctl_command,
};

/*
 * SIGHUP: reopen the log file that logrotate moved away (the log thread
 * does it (1) and writes "log reopened" itself, or why not), and read
 * the TLS certificates again (their thread says how it went).
 */
static void
signal_hup_cb(evutil_socket_t sig, short what, void *arg)
{
	struct zp_ctx	*ctx = arg;

	if (ctx->log->sink == ZP_LOG_FILE && zp_log_reopen(ctx->log) == 0)
		zp_log(ctx->log, ZP_LOG_NOTICE, "signal %d: log reopened",
		    (int)sig);
	(void)zproxy_tls_reload(ctx);
}

/* SIGUSR1's line, once the workers published their counters. */
static void
signal_stats_refreshed_cb(void *arg)
{
	zproxy_log_stats(arg, "stats");
}

/* SIGUSR1: the counters, fresh from every thread (or ZP_REFRESH_MS old). */
static void
signal_stats_cb(evutil_socket_t sig, short what, void *arg)
{
	if (zp_ctx_refresh(arg, signal_stats_refreshed_cb, arg) == NULL)
		zproxy_log_stats(arg, "stats");
}

int
zproxy_signals_add(struct zp_ctx *ctx, struct event **sigs)
{
	int	i;

	sigs[0] = evsignal_new(ctx->base, SIGTERM, signal_stop_cb, ctx);
	sigs[1] = evsignal_new(ctx->base, SIGINT, signal_stop_cb, ctx);
	sigs[2] = evsignal_new(ctx->base, SIGUSR1, signal_stats_cb, ctx);
	sigs[3] = evsignal_new(ctx->base, SIGHUP, signal_hup_cb, ctx);
	for (i = 0; i < ZPROXY_NSIGS; i++)
		if (sigs[i] == NULL || event_add(sigs[i], NULL) == -1)
			return -1;
	return 0;
}
