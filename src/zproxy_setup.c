/*
 * zproxy_setup.c - build the root context: the descriptor budget, the
 * pipe pool, the listeners, the process (--daemon, --user, the sandbox),
 * and take it apart at the end.
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
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "tls/tls.h"
#include "lib/acl.h"
#include "core/config.h"
#include "ops/control.h"
#include "relay/ctx.h"
#include "relay/ring.h"
#include "ops/inherit.h"
#include "stream/listener.h"
#include "lib/log.h"
#include "relay/mirror.h"
#include "ops/notify.h"
#include "stream/pair.h"
#include "stream/udp.h"
#include "core/udpsock.h"
#include "lib/pipepool.h"
#include "ops/privs.h"
#include "lib/replay.h"
#include "ops/sandbox.h"
#include "spool/spool.h"
#include "http/stats.h"
#include "core/upstream.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "zproxy_int.h"

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
long
zproxy_raise_nofile(struct zp_log *lg)
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

/* Choose max-conns from the descriptor budget unless it was given. */
void
zproxy_size_limits(struct zp_ctx *ctx, long nofile)
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
		/*
		 * tls@: handshakes under way are outside --max-conns, a
		 * descriptor each; an eighth of the budget is theirs.
		 */
		if (zp_config_tls(cfg) && cfg->tls_max_pending == 0)
			ctx->tls_max_pending = (nofile - reserve) / 8;
		else
			ctx->tls_max_pending = cfg->tls_max_pending;
		ctx->max_conns = (nofile - reserve - ctx->tls_max_pending) /
		    per;
		if (ctx->max_conns < 1)
			ctx->max_conns = 1;
	}
	/* ... or what the pairs' budget leaves, 64 at least. */
	if (zp_config_tls(cfg) && cfg->tls_max_pending > 0)
		ctx->tls_max_pending = cfg->tls_max_pending;
	else if (zp_config_tls(cfg) && cfg->max_conns > 0) {
		ctx->tls_max_pending = nofile - reserve - ctx->max_conns * per;
		if (ctx->tls_max_pending < 64)
			ctx->tls_max_pending = 64;
	}
	if (ctx->tls_max_pending < 1)
		ctx->tls_max_pending = 1;
	if (cfg->tls_max_pending > 0 && cfg->max_conns == 0 &&
	    ctx->max_conns < 64)
		zp_log(ctx->log, ZP_LOG_WARN, "--tls-max-pending %ld leaves "
		    "room for %ld pairs (RLIMIT_NOFILE %ld, %ld descriptors a "
		    "pair): give --max-conns, or raise ulimit -n",
		    cfg->tls_max_pending, ctx->max_conns, nofile, per);
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
 * Prepare the pipe pool within the descriptor budget and, for a user
 * without CAP_SYS_RESOURCE, within a quarter of the per-user pipe budget
 * (fs.pipe-user-pages-soft, shared by all of that user's processes).
 * A pipe size the kernel never grants is a start-up error; a budget that
 * others hold now only means copy mode until pipes can be had. Returns 0
 * or an exit status.
 */
int
zproxy_pool_setup(struct zp_ctx *ctx, int nthreads)
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
int
zproxy_replay_setup(struct zp_ctx *ctx)
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
int
zproxy_replay_probe(struct zp_ctx *ctx)
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
int
zproxy_confine(struct zp_ctx *ctx, const struct zp_privs *pv, char *privs,
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
	/* SIGHUP reads the certificates there, never on a relay thread. */
	if (zproxy_tls_start(ctx, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	/* zproxy ctl reload reads -f's file there, never on a relay thread. */
	if (ctx->cfg->config_file != NULL && ctx->cfg->control != NULL &&
	    zproxy_reload_start(ctx, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
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
	if ((ctx->sandbox = zp_sandbox_install(ctx->base, ctx->log,
	    ctx->ring != NULL ? ZP_SANDBOX_RING : 0, err,
	    sizeof(err))) == NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	snprintf(privs + off, len - off, ", sandbox on");
	return 0;
}

/* Close every pair and free the context's resources. */
void
zproxy_ctx_free(struct zp_ctx *ctx, struct event **sigs, int nsigs)
{
	int	i;

	zp_workers_free(ctx);
	zp_pairs_close(ctx, ZP_END_SHUTDOWN);
	/* Every pair is closed: wait for the last of their completions. */
	zp_ring_free(ctx->ring);
	ctx->ring = NULL;
	zp_udp_free(ctx);
	zp_udp_socks_free(ctx);
	/* Its I/O thread reads the upstreams: it ends before they go. */
	zp_spool_free(ctx->spool);
	ctx->spool = NULL;
	zproxy_stop_accepting(ctx);
	zp_stats_free(ctx->stats_server);
	ctx->stats_server = NULL;
	if (ctx->drain_timer != NULL)
		event_free(ctx->drain_timer);
	ctx->drain_timer = NULL;
	zp_upstreams_free(ctx->ups);
	zp_loadbal_free(ctx->loadbal);
	ctx->loadbal = NULL;
	ctx->ups = NULL;
	zp_mirrors_free(ctx->mirrors);
	ctx->mirrors = NULL;
	zproxy_tls_free(ctx);
	zp_tls_srv_free(ctx->tls_srv);
	ctx->tls_srv = NULL;
	zp_tls_cli_free(ctx->tls_cli);
	ctx->tls_cli = NULL;
	zp_tls_cache_free(ctx->tls_cache);
	ctx->tls_cache = NULL;
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
int
zproxy_daemonize(int *readyfd)
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
void
zproxy_daemon_ready(struct zp_ctx *ctx)
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
 * -l systemd: the sockets systemd passed ($LISTEN_FDS), into *sd, the
 * variables unset. Returns 0, or an exit status, logged.
 */
static int
listen_systemd(struct zp_ctx *ctx, struct zp_inherit *sd)
{
	char	err[ZP_ERRLEN];

	if (zp_inherit_parse_env(sd, getenv("LISTEN_PID"),
	    getenv("LISTEN_FDS"), getenv("LISTEN_FDNAMES"), getpid(), err,
	    sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_CONFIG;
	}
	/* As sd_listen_fds(3) does: they are not for children. */
	(void)unsetenv("LISTEN_PID");
	(void)unsetenv("LISTEN_FDS");
	(void)unsetenv("LISTEN_FDNAMES");
	return 0;
}

/*
 * The kernel gave a UDP socket less than --udp-rcvbuf: said once, of the
 * first (clamped: its label, "" while none was).
 */
static void
listen_udp_clamped(struct zp_ctx *ctx, const char *clamped)
{
	if (clamped[0] == '\0')
		return;
	zp_log(ctx->log, ZP_LOG_WARN, "-l %s: the receive buffer is smaller "
	    "than --udp-rcvbuf %zu (net.core.rmem_max, and no CAP_NET_ADMIN "
	    "to pass it): bursts the buffer cannot hold are dropped by the "
	    "kernel (zproxy_udp_dropped_total{reason=\"rcvbuf\"})", clamped,
	    ctx->cfg->udp_rcvbuf);
}

/*
 * An inherited socket of -l number idx (label) that is UDP: its reader
 * is made with the others' (zp_udp_attach). Takes fd. Returns 0, or -1
 * with err filled.
 */
static int
listen_udp_adopt(struct zp_ctx *ctx, int fd, size_t idx, const char *label,
    char *clamped, char *err, size_t errlen)
{
	struct zp_addr	bound;
	int		c;

	if (zp_udp_adopt(fd, ctx->cfg->udp_rcvbuf, &bound, &c, err,
	    errlen) == -1) {
		close(fd);
		return -1;
	}
	if (c && clamped[0] == '\0')
		snprintf(clamped, ZP_INHERIT_LABELLEN, "%s", label);
	if (zp_udp_add(ctx, fd, (int)idx, label, &bound) == -1) {
		snprintf(err, errlen, "too many UDP sockets, or no memory");
		return -1;
	}
	return 0;
}

/*
 * One -l (spec, number idx, its label) from the inherited set: every
 * socket of its label adopted as a listener, or a UDP one (offer: from
 * the zproxy taken over, else NULL: from systemd, whose sockets say by
 * their type which they are; clamped: listen_udp_clamped's). Returns 0,
 * or an exit status, logged, with what is left of set closed.
 */
static int
listen_inherited(struct zp_ctx *ctx, struct zp_inherit *set,
    const struct zp_listen_spec *spec, size_t idx, const char *label,
    const struct zp_offer *offer, char *clamped)
{
	struct zp_listener	*l;
	char			 err[ZP_ERRLEN];
	int			 fds[ZP_INHERIT_MAX];
	size_t			 j, n;

	n = zp_inherit_take(set, ctx->cfg, spec, offer != NULL, fds,
	    ZP_INHERIT_MAX);
	if (n == 0) {
		if (offer != NULL)
			zp_log(ctx->log, ZP_LOG_ERROR, "--takeover: the zproxy "
			    "there (pid %ld) does not listen on %s: the listen "
			    "addresses cannot change across a takeover",
			    offer->pid, label);
		else
			zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: systemd passed "
			    "no socket %s", label, spec->name[0] ? "of that "
			    "name (FileDescriptorName=)" : "that no -l "
			    "systemd:NAME takes");
		zp_inherit_close_rest(set);
		return ZP_EX_CONFIG;
	}
	for (j = 0; j < n; j++) {
		if (spec->tls && zp_udp_is(fds[j])) {
			zp_log(ctx->log, ZP_LOG_ERROR, "-l tls@%s: descriptor %d "
			    "is a UDP socket; tls@ takes TCP ones", label,
			    fds[j]);
			while (j < n)
				close(fds[j++]);
			zp_inherit_close_rest(set);
			return ZP_EX_CONFIG;
		}
		if (spec->udp || (spec->systemd && zp_udp_is(fds[j]))) {
			if (listen_udp_adopt(ctx, fds[j], idx, label, clamped,
			    err, sizeof(err)) == 0)
				continue;
			zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: %s", label, err);
			while (++j < n)
				close(fds[j]);
			zp_inherit_close_rest(set);
			return ZP_EX_CONFIG;
		}
		/* A TCP client has no datagram for a UDP upstream. */
		if (zp_config_udp_upstreams(ctx->cfg)) {
			zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: descriptor %d "
			    "is not a UDP socket, and the upstreams are UDP "
			    "(udp@)", label, fds[j]);
			while (j < n)
				close(fds[j++]);
			zp_inherit_close_rest(set);
			return ZP_EX_CONFIG;
		}
		if ((l = zp_listener_adopt(ctx, fds[j], label, spec->tls, err,
		    sizeof(err))) == NULL) {
			zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: %s", label, err);
			while (++j < n)
				close(fds[j]);
			zp_inherit_close_rest(set);
			return errno == EPERM ? ZP_EX_NOPERM : ZP_EX_CONFIG;
		}
		zp_listener_link(&ctx->listener, l);
	}
	return 0;
}

/*
 * The inherited sockets no -l took: from a zproxy taken over (offer), a
 * start-up error (exit status, logged); from systemd, a warning each
 * (0).
 */
static int
listen_leftovers(struct zp_ctx *ctx, struct zp_inherit *set,
    const struct zp_offer *offer)
{
	const struct zp_inherited	*left;
	size_t				 i;

	if ((left = zp_inherit_left(set)) == NULL)
		return 0;
	if (offer != NULL) {
		zp_log(ctx->log, ZP_LOG_ERROR, "--takeover: the zproxy there "
		    "(pid %ld) listens on %s too: give every -l it has (the "
		    "listen addresses cannot change across a takeover)",
		    offer->pid, left->label);
		return ZP_EX_CONFIG;
	}
	for (i = 0; i < set->n; i++)
		if (!set->socks[i].taken)
			zp_log(ctx->log, ZP_LOG_WARN, "-l systemd: closing "
			    "descriptor %d (%s): no -l takes it",
			    set->socks[i].fd, set->socks[i].label);
	return 0;
}

/*
 * -l udp@ (spec, number idx, label): a socket for each of the nthreads
 * threads, bound here (clamped: listen_udp_clamped's). Returns 0, or an
 * exit status, logged.
 */
static int
listen_udp_new(struct zp_ctx *ctx, const struct zp_listen_spec *spec,
    size_t idx, const char *label, int nthreads, char *clamped)
{
	struct zp_addr	bound;
	char		err[ZP_ERRLEN];
	int		fds[ZP_THREADS_MAX], c, i;

	if (zp_udp_socks(spec, nthreads, ctx->cfg->udp_rcvbuf, fds, &bound,
	    &c, err, sizeof(err)) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "%s", err);
		return ZP_EX_OSERR;
	}
	if (c && clamped[0] == '\0')
		snprintf(clamped, ZP_INHERIT_LABELLEN, "%s", label);
	for (i = 0; i < nthreads; i++)
		if (zp_udp_add(ctx, fds[i], (int)idx, label, &bound) == -1) {
			while (++i < nthreads)
				close(fds[i]);
			zp_log(ctx->log, ZP_LOG_ERROR, "-l %s: too many UDP "
			    "sockets (%d at most in all)", label,
			    ZP_MAX_LISTEN_SOCKETS);
			return ZP_EX_CONFIG;
		}
	return 0;
}

/*
 * Every -l: bound here, or taken from the sockets systemd passed, or
 * from the zproxy taken over (offer: then every one, and exactly its
 * set). Returns 0, or an exit status, logged.
 */
int
zproxy_listeners_setup(struct zp_ctx *ctx, struct zp_offer *offer,
    int nthreads)
{
	struct zp_config		*cfg = ctx->cfg;
	const struct zp_listen_spec	*spec;
	struct zp_inherit		 sd, *set = NULL;
	struct zp_listener		*l;
	char				 err[ZP_ERRLEN];
	char				 label[ZP_INHERIT_LABELLEN];
	char				 clamped[ZP_INHERIT_LABELLEN] = "";
	size_t				 i;
	int				 rc;

	for (i = 0; offer == NULL && i < cfg->nlistens; i++)
		if (cfg->listens[i].systemd) {
			if ((rc = listen_systemd(ctx, &sd)) != 0)
				return rc;
			set = &sd;
			break;
		}
	if (offer != NULL)
		set = &offer->set;
	for (i = 0; i < cfg->nlistens; i++) {
		spec = &cfg->listens[i];
		zp_listen_spec_str(spec, label, sizeof(label));
		if (offer == NULL && spec->udp) {
			if ((rc = listen_udp_new(ctx, spec, i, label,
			    nthreads, clamped)) != 0)
				return rc;
			continue;
		}
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
		if ((rc = listen_inherited(ctx, set, spec, i, label,
		    offer, clamped)) != 0)
			return rc;
	}
	if (set != NULL && (rc = listen_leftovers(ctx, set, offer)) != 0)
		return rc;
	if (set == &sd)
		zp_inherit_close_rest(&sd);
	listen_udp_clamped(ctx, clamped);
	for (l = ctx->listener; l != NULL && ctx->nlisten_addrs <
	    ZP_MAX_LISTEN_SOCKETS; l = zp_listener_next(l))
		ctx->listen_addrs[ctx->nlisten_addrs++] = *zp_listener_addr(l);
	return 0;
}

/*
 * Secret bits for the per-source table's hash. Without getrandom(2) (a
 * very old kernel) the time and pid still vary from run to run.
 */
uint64_t
zproxy_source_seed(void)
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
int
zproxy_threads_wanted(const struct zp_config *cfg)
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
