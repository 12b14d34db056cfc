/*
 * zproxy_int.h - what the parts of the composition root share
 * (zproxy.c, zproxy_setup.c, zproxy_signal.c, zproxy_report.c), for them
 * only: every other module goes through zproxy.h.
 *
 * zproxy.c runs (zp_run: one phase after another, then the loop);
 * zproxy_setup.c builds the root context and takes it apart;
 * zproxy_signal.c is how it stops (signals, the drain, a takeover);
 * zproxy_report.c says what it does (the start-up lines, the counters).
 * All of it runs on the root's thread.
 */
#ifndef ZP_ZPROXY_INT_H
#define ZP_ZPROXY_INT_H

#include <stddef.h>
#include <stdint.h>
#include <event2/util.h>

struct event;
struct zp_config;
struct zp_control_ops;
struct zp_ctl_req;
struct zp_ctx;
struct zp_log;
struct zp_offer;
struct zp_privs;

/* The signals the root handles: TERM, INT, USR1, HUP. */
#define ZPROXY_NSIGS	4

/* ---- zproxy_setup.c: build the context, take it apart ---------------- */

/*
 * Raise RLIMIT_NOFILE's soft limit to the hard one (a failure is logged
 * to lg). Returns the soft limit in force afterwards.
 */
long	zproxy_raise_nofile(struct zp_log *lg);

/*
 * Share the descriptor budget nofile out: ctx's max_conns (unless
 * --max-conns), pipe_cap, fd_reserve, budget. Warns when --max-conns
 * does not fit.
 */
void	zproxy_size_limits(struct zp_ctx *ctx, long nofile);

/*
 * The splice mode's pipe pool (ctx->pool) for one of nthreads threads,
 * and the tee pipe of framed lf/nul streams. Returns 0, or an exit
 * status, logged.
 */
int	zproxy_pool_setup(struct zp_ctx *ctx, int nthreads);

/* --replay-window: ctx->devnull. Returns 0, or an exit status, logged. */
int	zproxy_replay_setup(struct zp_ctx *ctx);

/*
 * --replay-window: whether the kernel gives this user a pipe that big.
 * Returns 0, or an exit status, logged.
 */
int	zproxy_replay_probe(struct zp_ctx *ctx);

/*
 * Every -l on ctx->listener (-l udp@: ctx's UDP sockets, one for each of
 * nthreads threads, read once zp_udp_attach gives them to the threads):
 * bound, inherited from systemd, or from the zproxy taken over (offer,
 * else NULL). Returns 0, or an exit status, logged.
 */
int	zproxy_listeners_setup(struct zp_ctx *ctx, struct zp_offer *offer,
	    int nthreads);

/*
 * Become pv's user, start the log, worker and spool threads, then the
 * sandbox; privs (len bytes) receives "user U:G, sandbox on". Returns 0,
 * or an exit status, logged.
 */
int	zproxy_confine(struct zp_ctx *ctx, const struct zp_privs *pv,
	    char *privs, size_t len);

/*
 * Close every pair and free all ctx holds, the nsigs events of sigs
 * too (NULL ones skipped). Safe on a context built only in part.
 */
void	zproxy_ctx_free(struct zp_ctx *ctx, struct event **sigs, int nsigs);

/*
 * --daemon: fork; the parent exits with the child's fate. Returns 0 in
 * the child, *readyfd the pipe zproxy_daemon_ready() writes; an exit
 * status on failure (said on stderr).
 */
int	zproxy_daemonize(int *readyfd);

/* --daemon: serving now, the parent may go (ctx->daemon_fd closed). */
void	zproxy_daemon_ready(struct zp_ctx *ctx);

/* The per-source table's secret hash seed. */
uint64_t zproxy_source_seed(void);

/* --threads, or one per CPU this process may run on. */
int	zproxy_threads_wanted(const struct zp_config *cfg);

/* ---- zproxy_signal.c: how the root stops ----------------------------- */

/*
 * Close the listeners, --control, health checks, lookups and the
 * rebalance timer: what serves only new connections.
 */
void	zproxy_stop_accepting(struct zp_ctx *ctx);

/*
 * Make and add the ZPROXY_NSIGS signal events into sigs (the caller
 * frees them, zproxy_ctx_free). Returns 0 or -1, not logged.
 */
int	zproxy_signals_add(struct zp_ctx *ctx, struct event **sigs);

/* --rebalance's timer (arg: the root context); start it if due. */
void	zproxy_rebalance_cb(evutil_socket_t fd, short what, void *arg);
void	zproxy_rebalance_arm(struct zp_ctx *ctx);

/* ---- zproxy_ctl.c: zproxy ctl's commands, answered ------------------- */

/* A command from --control (struct zp_control_ops.command). */
void	zproxy_ctl_command(void *arg, struct zp_ctl_req *, const char *line);

/* End every command under way and the maint timers. Safe when none. */
void	zproxy_ctl_free(struct zp_ctx *ctx);

/*
 * Upstream idx leaves (a reload no longer names it): maint now, removed
 * once no stream is on it (the rebalance timer's tick, maint's end).
 */
void	zproxy_ctl_remove_later(struct zp_ctx *ctx, int idx);

/* Remove the upstreams waiting to leave that are empty now. */
void	zproxy_ctl_tick(struct zp_ctx *ctx);

/* ---- zproxy_tls.c: certificates read again ---------------------------- */

/*
 * With a tls@ listener: the thread that reads the certificates again,
 * made before the sandbox. Returns 0, or -1 with err filled.
 */
int	zproxy_tls_start(struct zp_ctx *ctx, char *err, size_t errlen);

/*
 * SIGHUP, zproxy ctl reload: have the certificates read again (the
 * thread logs how it went). Returns 1 when asked, 0 without tls@.
 */
int	zproxy_tls_reload(struct zp_ctx *ctx);

/* Stop the thread (joined). */
void	zproxy_tls_free(struct zp_ctx *ctx);

/* ---- zproxy_reload.c: zproxy ctl reload ------------------------------ */

/*
 * -f FILE's reader thread, made before the sandbox (none is made after
 * it). Returns 0, or -1 with err filled.
 */
int	zproxy_reload_start(struct zp_ctx *ctx, char *err, size_t errlen);

/* zproxy ctl reload: the command line and the file read again, applied. */
void	zproxy_reload(struct zp_ctx *ctx, struct zp_ctl_req *req);

/* Stop the reader (joined: it reads one small file at most). */
void	zproxy_reload_free(struct zp_ctx *ctx);

/* A worker thread died: drain, then exit non-zero (zp_workers_on_death). */
void	zproxy_worker_death_cb(struct zp_ctx *ctx, int thread);

/* --control's side of a takeover (arg: the root context). */
extern const struct zp_control_ops zproxy_control_ops;

/* ---- zproxy_report.c: the lines that say what the root does ---------- */

/* The start-up line: listeners, upstreams, limits, privs. */
void	zproxy_log_start(struct zp_ctx *ctx, long nofile, const char *privs);

/* The start-up lines on PROXY headers, framing, moves and the ACLs. */
void	zproxy_log_access(struct zp_ctx *ctx);

/* -u original: where it may connect (or a warning that it is anywhere). */
void	zproxy_log_tls(struct zp_ctx *);
void	zproxy_log_original(struct zp_ctx *ctx);

/* The counters summed over the threads, in one line headed what. */
void	zproxy_log_stats(struct zp_ctx *ctx, const char *what);

/* sd_notify's STATUS= line (arg: the root context), len bytes in buf. */
void	zproxy_notify_status(void *arg, char *buf, size_t len);

#endif
