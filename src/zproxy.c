/*
 * zproxy.c - the daemon: build the context, listen, run the loop, stop.
 * The parts: zproxy_setup.c, zproxy_signal.c, zproxy_report.c
 * (zproxy_int.h).
 */

#include <sys/time.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>
#include <event2/thread.h>

#include "tls/tls.h"
#include "lib/acl.h"
#include "core/config.h"
#include "ops/control.h"
#include "relay/ctx.h"
#include "relay/ring.h"
#include "upstream/health.h"
#include "ops/inherit.h"
#include "stream/listener.h"
#include "lib/log.h"
#include "relay/mirror.h"
#include "core/net.h"
#include "ops/notify.h"
#include "stream/pair.h"
#include "stream/udp.h"
#include "ops/privs.h"
#include "upstream/resolver.h"
#include "spool/spool.h"
#include "http/stats.h"
#include "core/upstream.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "zproxy.h"
#include "zproxy_int.h"

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

/*
 * The drain, on one thread: its UDP sockets read out and closed, its
 * framed streams wound down losslessly.
 */
static void
hook_drain(struct zp_ctx *ctx)
{
	zp_udp_stop(ctx);
	if (zp_config_framed(ctx->cfg))
		zp_pairs_wind_down(ctx, ZP_END_SHUTDOWN);
}

/* The end, on one thread: close its pairs now, and its UDP sources. */
static void
hook_close(struct zp_ctx *ctx)
{
	zp_pairs_close(ctx, ZP_END_SHUTDOWN);
	zp_udp_free(ctx);
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
	.drain = hook_drain,
	.pairs_close = hook_close,
	.pairs_modes = zp_pairs_modes,
	.pairs_moving = zp_pairs_moving,
	.pairs_load = zp_pairs_load,
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
 * The first steps: ctx (with its log at log) and offer made safe for
 * zproxy_ctx_free() whatever comes next, --daemon's fork, the log on
 * stderr at the level -v/-q ask. Returns 0 or an exit status.
 */
static int
run_init(struct zp_ctx *ctx, struct zp_log *log, struct zp_offer *offer,
    struct zp_config *cfg)
{
	int	rc, level;

	memset(ctx, 0, sizeof(*ctx));
	memset(offer, 0, sizeof(*offer));
	offer->conn = -1;
	ctx->tee_pipe.rfd = ctx->tee_pipe.wfd = -1;
	ctx->devnull = -1;
	ctx->daemon_fd = -1;
	if (cfg->daemon && (rc = zproxy_daemonize(&ctx->daemon_fd)) != 0)
		return rc;
	TAILQ_INIT(&ctx->pairs);
	TAILQ_INIT(&ctx->handshakes);
	TAILQ_INIT(&ctx->mirror_sets);
	zp_wire(ctx);
	ctx->cfg = cfg;
	ctx->log = log;
	ctx->bufs.size = cfg->buffer_size;
	if (cfg->quiet)
		level = ZP_LOG_ERROR;
	else if (cfg->verbose == 0)
		level = ZP_LOG_NOTICE;
	else
		level = cfg->verbose == 1 ? ZP_LOG_CONN : ZP_LOG_DEBUG;
	zp_log_init(ctx->log, stderr, level);
	return 0;
}

/*
 * Before any socket: look --user up (pv), check --source, open the log
 * sink, make the upstreams and mirrors, raise RLIMIT_NOFILE (*nofile)
 * and derive the limits from it, make the event loop. Returns 0 or an
 * exit status; on failure the caller returns it at once, as nothing
 * here needs undoing but what this undid.
 */
static int
run_open(struct zp_ctx *ctx, struct zp_privs *pv, int nthreads,
    long *nofile)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 err[ZP_ERRLEN];
	int			 rc;

	/* Before anything is opened: a wrong name must not bind a port. */
	if ((rc = zp_privs_lookup(pv, cfg->user, cfg->group, err,
	    sizeof(err))) != 0) {
		fprintf(stderr, "zproxy: %s\n", err);
		return rc;
	}
	pv->keep_transparent = cfg->source == ZP_SOURCE_CLIENT;
	if ((rc = zp_source_check(cfg, 0, err, sizeof(err))) != 0) {
		fprintf(stderr, "zproxy: %s\n", err);
		return rc;
	}
	if (zp_log_open(ctx->log, cfg->log_file, cfg->use_syslog,
	    cfg->log_format == ZP_LOG_JSON, err, sizeof(err)) == -1) {
		fprintf(stderr, "zproxy: %s\n", err);
		return ZP_EX_CANTCREAT;
	}
	/* Certificates and keys are read now, before --user drops rights. */
	if (zp_tls_srv_new(cfg, &ctx->tls_srv, err, sizeof(err)) == -1 ||
	    zp_tls_cli_new(cfg, nthreads, &ctx->tls_cli, err,
	    sizeof(err)) == -1) {
		fprintf(stderr, "zproxy: %s\n", err);
		zp_tls_srv_free(ctx->tls_srv);
		ctx->tls_srv = NULL;
		zp_tls_cli_free(ctx->tls_cli);
		ctx->tls_cli = NULL;
		zp_log_close(ctx->log);
		return ZP_EX_CONFIG;
	}
	/*
	 * A TLS record cannot be spliced: with a tls@ upstream every pair
	 * copies (pair_use_tls), and no pipe is made for none to use. A
	 * tls@ mirror does not: its stream reads its pipe and encrypts.
	 */
	ctx->tls_upstreams = zp_config_tls_upstreams(cfg);
	if (ctx->tls_upstreams && cfg->mode == ZP_MODE_SPLICE) {
		cfg->mode = ZP_MODE_COPY;
		zp_log(ctx->log, ZP_LOG_NOTICE, "mode copy: a tls@ upstream's "
		    "TLS records cannot be spliced");
	}
	gettimeofday(&ctx->started, NULL);
	if ((ctx->tls_cli != NULL &&
	    (ctx->tls_cache = zp_tls_cache_new()) == NULL) ||
	    (ctx->ups = zp_upstreams_new(cfg->upstreams, cfg->nupstreams,
	    (enum zp_balance)cfg->balance, cfg->max_fails, cfg->fail_timeout,
	    ctx->log)) == NULL ||
	    (ctx->mirrors = zp_mirrors_new(cfg)) == NULL) {
		zp_upstreams_free(ctx->ups);
		zp_tls_srv_free(ctx->tls_srv);
		zp_tls_cli_free(ctx->tls_cli);
		zp_tls_cache_free(ctx->tls_cache);
		zp_log(ctx->log, ZP_LOG_ERROR, "out of memory");
		zp_log_close(ctx->log);
		return ZP_EX_OSERR;
	}

	if (cfg->max_conns_per_source > 0)
		zp_srctab_init(&ctx->sources, zproxy_source_seed());

	/* splice(2) cannot take MSG_NOSIGNAL: a closed peer must not kill us. */
	signal(SIGPIPE, SIG_IGN);
	*nofile = zproxy_raise_nofile(ctx->log);
	zproxy_size_limits(ctx, *nofile);

	libevent_log = ctx->log;
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
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot set up libevent for "
		    "threads");
		return ZP_EX_OSERR;
	}
	if ((ctx->base = event_base_new()) == NULL ||
	    (ctx->wake = zp_wake_new(ctx->base)) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot create the event loop");
		return ZP_EX_OSERR;
	}
	/*
	 * --io-uring: made here, as root and before the sandbox; enabled
	 * by the loop's thread (zp_ctx_loop).
	 */
	if (cfg->io_uring && (ctx->ring = zp_ring_new(ctx->base,
	    ZP_RING_ENTRIES, err, sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	return 0;
}

/*
 * The sockets and pipes clients need: what --takeover fetches (offer),
 * the listeners, the pipe pool, the replay's /dev/null, the spool, the
 * signal events (into sigs). Returns 0, or an exit status, logged.
 */
static int
run_listen(struct zp_ctx *ctx, struct zp_offer *offer, int nthreads,
    struct event **sigs)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 err[ZP_ERRLEN];
	int			 rc;

	/* The old zproxy keeps serving until this one says it does. */
	if (cfg->takeover != NULL && (rc = zp_takeover_fetch(cfg->takeover,
	    offer, err, sizeof(err))) != 0) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return rc;
	}
	if ((rc = zproxy_listeners_setup(ctx, cfg->takeover != NULL ? offer :
	    NULL, nthreads)) != 0)
		return rc;
	/*
	 * The replay's and the mirrors' pipes may grow where the per-user
	 * pipe budget does not bind. Decided now: the sandbox refuses
	 * geteuid() later.
	 */
	ctx->pipes_roomy = cfg->user == NULL && geteuid() == 0;
	if ((cfg->mode == ZP_MODE_SPLICE && (rc = zproxy_pool_setup(ctx,
	    nthreads)) != 0) ||
	    (rc = zproxy_replay_setup(ctx)) != 0)
		return rc;
	if (cfg->spool_dir != NULL && (ctx->spool = zp_spool_new(ctx, err,
	    sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_CANTCREAT;
	}
	if (zproxy_signals_add(ctx, sigs) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot set up signals");
		return ZP_EX_OSERR;
	}
	return 0;
}

/*
 * What serves besides the listeners: --stats (its socket from offer on
 * a takeover), the health checks, re-resolution, --rebalance's timer.
 * Returns 0, or an exit status, logged.
 */
static int
run_services(struct zp_ctx *ctx, struct zp_offer *offer)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 err[ZP_ERRLEN];
	int			 stats_fd = -1;

	if (cfg->have_stats && cfg->takeover != NULL) {
		char	label[ZP_INHERIT_LABELLEN];

		stats_fd = zp_inherit_take_stats(&offer->set,
		    zp_listen_spec_str(&cfg->stats, label, sizeof(label)));
	}
	if (cfg->have_stats && (ctx->stats_server = zp_stats_new(ctx,
	    &cfg->stats, stats_fd, err, sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	if (cfg->check_interval > 0 &&
	    (ctx->health = zp_health_new(ctx)) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot start health checks");
		return ZP_EX_OSERR;
	}
	if (cfg->resolve_interval > 0 && (ctx->resolver =
	    zp_resolver_new(ctx, err, sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	/*
	 * --rebalance's steps, and the moves of streams off an upstream
	 * that zproxy ctl drains: the timer runs while either has work
	 * (zproxy_rebalance_arm). Made with one upstream too: ctl may add
	 * others.
	 */
	if (zp_config_framed(cfg) &&
	    ((ctx->rebalance_timer = event_new(ctx->base, -1, EV_PERSIST,
	    zproxy_rebalance_cb, ctx)) == NULL ||
	    (ctx->loadbal = zp_loadbal_new()) == NULL)) {
		zp_log(ctx->log, ZP_LOG_ERROR, "cannot start --rebalance");
		return ZP_EX_OSERR;
	}
	zproxy_rebalance_arm(ctx);
	return 0;
}

/* The sockets a takeover hands over: listeners, UDP sockets, --stats. */
static size_t
offer_count(const struct zp_ctx *ctx)
{
	const struct zp_listener	*l;
	const char			*labels[ZP_MAX_LISTEN_SOCKETS];
	int				 fds[ZP_MAX_LISTEN_SOCKETS];
	size_t				 n = ctx->cfg->have_stats ? 1 : 0;

	for (l = ctx->listener; l != NULL; l = zp_listener_next(l))
		n++;
	return n + zp_udp_sockets(ctx, fds, labels, ZP_MAX_LISTEN_SOCKETS);
}

/*
 * The other threads' contexts (they start in zproxy_confine()), the
 * service manager's socket, --control for the next zproxy (pv: the user
 * it is given to). Returns 0, or an exit status, logged.
 */
static int
run_manager(struct zp_ctx *ctx, struct zp_offer *offer,
    const struct zp_privs *pv, int nthreads)
{
	struct zp_config	*cfg = ctx->cfg;
	char			 err[ZP_ERRLEN];
	size_t			 n;

	if (nthreads > 1 && zp_workers_new(ctx, nthreads, err,
	    sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	zp_workers_on_death(ctx, zproxy_worker_death_cb);
	/* Each thread reads a UDP socket of its own. */
	if (zp_udp_attach(ctx, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}

	/* Opened as who we start as: the manager's socket may be root's. */
	ctx->notify = zp_notify_new(ctx->base, ctx->log, zproxy_notify_status,
	    ctx, err, sizeof(err));
	if (ctx->notify == NULL && err[0] != '\0') {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	if (cfg->takeover != NULL || cfg->daemon)
		zp_notify_takeover(ctx->notify, offer->watchdog_usec);
	if (cfg->control != NULL && (n = offer_count(ctx)) > ZP_INHERIT_MAX) {
		zp_log(ctx->log, ZP_LOG_ERROR, "--control: a takeover would "
		    "hand over %zu sockets, at most %d (each thread has a UDP "
		    "socket of each -l udp@: fewer --threads)", n,
		    ZP_INHERIT_MAX);
		return ZP_EX_CONFIG;
	}
	/* Made as root, then given to --user: the next zproxy is that user. */
	if (cfg->control != NULL && (ctx->control = zp_control_new(ctx->base,
	    ctx->log, cfg->control, pv->change ? pv->uid : (uid_t)-1, pv->gid,
	    &zproxy_control_ops, ctx, err, sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	return 0;
}

/*
 * Serving: say so in the log, to the service manager, to the zproxy
 * taken over (offer, freed here) and to --daemon's parent.
 */
static void
run_ready(struct zp_ctx *ctx, struct zp_offer *offer, long nofile,
    const char *privs)
{
	char	err[ZP_ERRLEN];

	zproxy_log_access(ctx);
	zproxy_log_start(ctx, nofile, privs);
	zproxy_log_original(ctx);
	zproxy_log_tls(ctx);
	/* Every listener is up, --stats too: the manager may send clients. */
	zp_notify_ready(ctx->notify);
	if (ctx->cfg->takeover != NULL) {
		if (zp_takeover_done(offer, err, sizeof(err)) == -1)
			zp_log(ctx->log, ZP_LOG_WARN, "%s", err);
		else
			zp_log(ctx->log, ZP_LOG_NOTICE, "took over from pid "
			    "%ld: it stops accepting and drains", offer->pid);
	}
	zp_offer_free(offer);
	zproxy_daemon_ready(ctx);
}

/*
 * Run the loop until the drain ends it, then close what is left and log
 * the totals. Returns the exit status: 0, ctx->exit_status (a worker
 * died), or ZP_EX_OSERR when the loop failed.
 */
static int
run_loop(struct zp_ctx *ctx)
{
	int	rc = 0;

	if (zp_ctx_loop(ctx, 0) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "event loop failed");
		rc = ZP_EX_OSERR;
	}
	ctx->stopping = 1;
	zproxy_stop_accepting(ctx);
	zp_workers_stop(ctx);
	zp_pairs_close(ctx, ZP_END_SHUTDOWN);
	zproxy_log_stats(ctx, "stopping");
	if (rc == 0)
		rc = ctx->exit_status;
	return rc;
}

/* Run until SIGTERM/SIGINT. */
int
zp_run(struct zp_config *cfg)
{
	struct zp_ctx	 ctx;
	struct zp_log	 log;
	struct event	*sigs[ZPROXY_NSIGS] = { NULL, NULL, NULL, NULL };
	struct zp_privs	 pv;
	struct zp_offer	 offer;
	char		 err[ZP_ERRLEN], privs[200];
	long		 nofile;
	int		 rc;
	int		 nthreads = zproxy_threads_wanted(cfg);

	if ((rc = run_init(&ctx, &log, &offer, cfg)) != 0 ||
	    (rc = run_open(&ctx, &pv, nthreads, &nofile)) != 0)
		return rc;
	if ((rc = run_listen(&ctx, &offer, nthreads, sigs)) != 0 ||
	    (rc = run_services(&ctx, &offer)) != 0 ||
	    (rc = run_manager(&ctx, &offer, &pv, nthreads)) != 0 ||
	    (rc = zproxy_confine(&ctx, &pv, privs, sizeof(privs))) != 0 ||
	    (rc = zproxy_replay_probe(&ctx)) != 0)
		goto out;
	/* What confine() kept must still do: a --user drop bug shows here. */
	if ((rc = zp_source_check(cfg, 1, err, sizeof(err))) != 0) {
		zp_log(ctx.log, ZP_LOG_ERROR, "%s", err);
		goto out;
	}
	run_ready(&ctx, &offer, nofile, privs);
	rc = run_loop(&ctx);
out:
	zp_offer_free(&offer);
	if (ctx.daemon_fd != -1)
		close(ctx.daemon_fd);
	zproxy_ctx_free(&ctx, sigs, ZPROXY_NSIGS);
	event_set_log_callback(NULL);
	libevent_log = NULL;
	zp_log_close(ctx.log);
	return rc;
}
