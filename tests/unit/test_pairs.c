/*
 * test_pairs.c - pair.c with a real context, real sockets and a real
 * event loop: which upstream a client gets and in what order, what is
 * counted where when it closes, the timers, and how its end is named in
 * the log. The integration tests see the same through the binary; these
 * see the counters and the pair itself, where they are decided.
 *
 * Each test builds a context as zp_run() does (copy mode: no pipe pool;
 * -m splice: a pool of its own), makes a client socket by connecting to
 * a listener of its own and hands the accepted end to zp_pair_start();
 * upstreams are listeners of the test's, accepted from with a deadline.
 * The tests of the pair's seams (moves, the drain) run in both modes.
 */

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <event2/event.h>
#include <event2/thread.h>

#include <cmocka.h>

#include "cli.h"
#include "core/config.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "lib/pipepool.h"
#include "spool/spool.h"
#include "core/upstream.h"
#include "core/upstream_int.h"
#include "relay/worker.h"
#include "zproxy.h"

#define MAXARGS	16

/*
 * Faults the tests inject where zproxy meets the system (linked with
 * --wrap): a non-blocking connect that completes at once is reported as
 * in progress (connect() and getpeername() of a non-blocking socket:
 * loopback usually completes it inside connect(), and the seams between
 * a connect and what happens meanwhile need the loop in between);
 * shutdown() of one descriptor fails as for a dead socket; event_new()
 * fails for one descriptor; close() is counted for one descriptor; a
 * worker thread's event loop fails once it is told to, or is held
 * between two turns, as a worker busy in a callback would be; the wall
 * clock steps (gettimeofday()).
 */
int	__real_connect(int, const struct sockaddr *, socklen_t);
int	__real_getpeername(int, struct sockaddr *, socklen_t *);
struct event *__real_event_new(struct event_base *, evutil_socket_t, short,
	    event_callback_fn, void *);
int	__real_close(int);
int	__real_shutdown(int, int);
int	__real_event_base_loop(struct event_base *, int);
int	__real_gettimeofday(struct timeval *, void *);
int	__wrap_gettimeofday(struct timeval *, void *);
int	__wrap_event_base_loop(struct event_base *, int);
int	__wrap_connect(int, const struct sockaddr *, socklen_t);
int	__wrap_getpeername(int, struct sockaddr *, socklen_t *);
struct event *__wrap_event_new(struct event_base *, evutil_socket_t, short,
	    event_callback_fn, void *);
int	__wrap_close(int);
int	__wrap_shutdown(int, int);

static int	connect_async;		/* every connect is "in progress" */
static int	shutdown_fail_fd = -1;	/* shutdown() of it fails */
static int	event_fail_fd = -1;	/* event_new() on it fails */
static int	close_watch_fd = -1;	/* close() of it is counted */
static int	close_watch_n;
static pthread_t main_thread;
static int	kill_workers;		/* atomic: worker loops fail */
static long	wall_step;		/* seconds gettimeofday() is off */
static __thread int turn_connected;	/* a worker connected this turn */
static int	hold_workers;		/* atomic: worker loops stop ... */
static int	workers_held;		/* atomic: ... and one did */

int
__wrap_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	int	rc = __real_connect(fd, sa, len);

	if (!pthread_equal(pthread_self(), main_thread))
		turn_connected = 1;
	/* Only zproxy's sockets: the tests' own connect blocking. */
	if (rc == 0 && connect_async && (fcntl(fd, F_GETFL) & O_NONBLOCK)) {
		errno = EINPROGRESS;
		return -1;
	}
	return rc;
}

/* zp_connect_start_from() asks whether the handshake is over already. */
int
__wrap_getpeername(int fd, struct sockaddr *sa, socklen_t *len)
{
	if (connect_async && (fcntl(fd, F_GETFL) & O_NONBLOCK)) {
		errno = ENOTCONN;
		return -1;
	}
	return __real_getpeername(fd, sa, len);
}

/*
 * Linux says ENOTCONN for a socket that was reset, which relay.c takes
 * for a FIN nobody needs; any other error kills the half (EPIPE here).
 */
int
__wrap_shutdown(int fd, int how)
{
	if (fd != -1 && fd == shutdown_fail_fd) {
		errno = EPIPE;
		return -1;
	}
	return __real_shutdown(fd, how);
}

struct event *
__wrap_event_new(struct event_base *base, evutil_socket_t fd, short what,
    event_callback_fn cb, void *arg)
{
	if (fd != -1 && fd == event_fail_fd) {
		event_fail_fd = -1;
		errno = ENOMEM;
		return NULL;
	}
	return __real_event_new(base, fd, what, cb, arg);
}

/*
 * A worker's loop (any thread but the tests' own) runs a turn at a time
 * and returns -1, as a failed epoll_wait() would, once kill_workers is
 * set and it started a client (connected upstream: not a turn of its own
 * timers); a loopbreak (the end) returns as usual. While hold_workers is
 * set, it stops after its turn until the test lets it go.
 */
int
__wrap_event_base_loop(struct event_base *base, int flags)
{
	int	rc;

	if (pthread_equal(pthread_self(), main_thread))
		return __real_event_base_loop(base, flags);
	for (;;) {
		turn_connected = 0;
		rc = __real_event_base_loop(base, flags | EVLOOP_ONCE);
		if (rc == -1 || event_base_got_break(base))
			return rc;
		if (__atomic_load_n(&kill_workers, __ATOMIC_SEQ_CST) &&
		    turn_connected)
			return -1;
		while (__atomic_load_n(&hold_workers, __ATOMIC_SEQ_CST)) {
			__atomic_store_n(&workers_held, 1, __ATOMIC_SEQ_CST);
			(void)poll(NULL, 0, 1);
		}
		__atomic_store_n(&workers_held, 0, __ATOMIC_SEQ_CST);
	}
}

/* The wall clock, stepped (NTP, a virtual machine that resumed). */
int
__wrap_gettimeofday(struct timeval *tv, void *tz)
{
	int	rc = __real_gettimeofday(tv, tz);

	if (rc == 0)
		tv->tv_sec += wall_step;
	return rc;
}

int
__wrap_close(int fd)
{
	if (fd != -1 && fd == close_watch_fd)
		close_watch_n++;
	return __real_close(fd);
}

struct harness {
	struct zp_config	 cfg;
	struct zp_ctx		 ctx;
	struct zp_log		 logst;	/* ctx.log */
	FILE			*log;
	int			 front;		/* stands for zproxy's listener */
};

/* A listening socket on 127.0.0.1, any port; its port in *port. */
static int
listen_any(unsigned short *port)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	int			fd, on = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd != -1);
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	*port = ntohs(sin.sin_port);
	return fd;
}

/* A listening socket on 127.0.0.1:port (a port closed_port() gave). */
static int
listen_port(unsigned short port)
{
	struct sockaddr_in	sin;
	int			fd, on = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd != -1);
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(port);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(fd, 16), 0);
	return fd;
}

/* A port nobody listens on (bound, then closed). */
static unsigned short
closed_port(void)
{
	unsigned short	port;

	close(listen_any(&port));
	return port;
}

/* Build the context from a command line (NULL-terminated, -l implied). */
static void
h_init(struct harness *h, ...)
{
	char		*argv[MAXARGS + 4];
	char		 err[ZP_ERRLEN];
	const char	*a;
	va_list		 ap;
	int		 argc = 0;
	unsigned short	 port;

	memset(h, 0, sizeof(*h));
	argv[argc++] = (char *)"zproxy";
	argv[argc++] = (char *)"-l";
	argv[argc++] = (char *)"127.0.0.1:1";
	va_start(ap, h);
	while ((a = va_arg(ap, const char *)) != NULL && argc < MAXARGS + 3)
		argv[argc++] = (char *)a;
	va_end(ap);
	argv[argc] = NULL;
	zp_config_init(&h->cfg);
	if (zp_config_parse(&h->cfg, argc, argv, err, sizeof(err)) !=
	    ZP_PARSE_OK)
		fail_msg("parse: %s", err);
	if (zp_config_resolve(&h->cfg, err, sizeof(err)) == -1)
		fail_msg("resolve: %s", err);
	h->log = tmpfile();
	assert_non_null(h->log);
	h->ctx.log = &h->logst;
	zp_log_init(h->ctx.log, h->log, ZP_LOG_CONN);
	h->ctx.cfg = &h->cfg;
	zp_wire(&h->ctx);	/* as zp_run() does */
	h->ctx.tee_pipe.rfd = h->ctx.tee_pipe.wfd = -1;
	h->ctx.devnull = -1;
	h->ctx.daemon_fd = -1;
	h->ctx.max_conns = 100;
	h->ctx.budget = 256 * 1024;
	TAILQ_INIT(&h->ctx.pairs);
	assert_non_null(h->ctx.base = event_base_new());
	assert_non_null(h->ctx.ups = zp_upstreams_new(h->cfg.upstreams,
	    h->cfg.nupstreams, (enum zp_balance)h->cfg.balance,
	    h->cfg.max_fails, h->cfg.fail_timeout, h->ctx.log));
	/* As zp_run() does for spliced lf and nul streams (pipes_setup). */
	if (h->cfg.framing == ZP_FRAMING_LF ||
	    h->cfg.framing == ZP_FRAMING_NUL ||
	    h->cfg.framing == ZP_FRAMING_AUTO) {
		int	fds[2];

		assert_int_equal(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
		h->ctx.tee_pipe.rfd = fds[0];
		h->ctx.tee_pipe.wfd = fds[1];
	}
	if (h->cfg.mode == ZP_MODE_SPLICE) {
		int	shortage;

		h->ctx.pool = zp_pipepool_new(h->cfg.pipe_size, 16, 4,
		    &shortage, err, sizeof(err));
		if (h->ctx.pool == NULL)
			fail_msg("pipe pool: %s", err);
	}
	h->front = listen_any(&port);
}

static void
h_free(struct harness *h)
{
	while (!TAILQ_EMPTY(&h->ctx.pairs))
		zp_pair_close(TAILQ_FIRST(&h->ctx.pairs), ZP_END_SHUTDOWN);
	zp_upstreams_free(h->ctx.ups);
	zp_pipepool_free(h->ctx.pool);
	if (h->ctx.tee_pipe.rfd != -1) {
		close(h->ctx.tee_pipe.rfd);
		close(h->ctx.tee_pipe.wfd);
	}
	event_base_free(h->ctx.base);
	zp_config_free(&h->cfg);
	close(h->front);
	fclose(h->log);
}

/* Reset a socket of the test's: close() with SO_LINGER 0 sends an RST. */
static void
reset_close(int fd)
{
	struct linger	lg = { 1, 0 };

	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg,
	    sizeof(lg)), 0);
	close(fd);
}

/*
 * A client: its own end (returned) and a pair on the accepted end,
 * started here (zp_pair_start) or, handed, where the listener would start
 * it (zp_ctx_start_pair: the least loaded thread); reset: the client
 * resets first, and what zp_pair_start() returned is returned.
 */
static int
h_client_how(struct harness *h, int handed, int reset)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	int			c, a;

	assert_int_equal(getsockname(h->front, (struct sockaddr *)&sin, &len),
	    0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(c != -1);
	assert_int_equal(connect(c, (struct sockaddr *)&sin, len), 0);
	len = sizeof(sin);
	a = accept4(h->front, (struct sockaddr *)&sin, &len,
	    SOCK_NONBLOCK | SOCK_CLOEXEC);
	assert_true(a != -1);
	if (reset)
		reset_close(c);	/* before zproxy looks at it */
	if (handed)
		zp_ctx_start_pair(&h->ctx, a, (struct sockaddr *)&sin, len, 0);
	else if (reset)
		return zp_pair_start(&h->ctx, a, (struct sockaddr *)&sin, len,
		    0);
	else
		assert_int_equal(zp_pair_start(&h->ctx, a,
		    (struct sockaddr *)&sin, len, 0), 0);
	return c;
}

static int
h_client_via(struct harness *h, int handed)
{
	return h_client_how(h, handed, 0);
}

static int
h_client(struct harness *h)
{
	return h_client_via(h, 0);
}

/*
 * Run the loop until cond(h) holds or ms pass; returns cond(h). Each
 * turn runs what is ready and what that made ready, unless flags has
 * EVLOOP_ONCE: then only what was ready (a state between two events can
 * be seen).
 */
static int
h_run_flags(struct harness *h, int (*cond)(struct harness *), int ms,
    int flags)
{
	struct timespec	t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		(void)event_base_loop(h->ctx.base, EVLOOP_NONBLOCK | flags);
		if (cond(h))
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 +
		    (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return cond(h);
		(void)poll(NULL, 0, 1);
	}
}

static int
h_run(struct harness *h, int (*cond)(struct harness *), int ms)
{
	return h_run_flags(h, cond, ms, 0);
}

/* Accept on an upstream listener, running the loop meanwhile. */
static int
h_accept(struct harness *h, int lfd)
{
	struct pollfd	pfd = { lfd, POLLIN, 0 };
	int		i, fd;

	for (i = 0; i < 2000; i++) {
		(void)event_base_loop(h->ctx.base, EVLOOP_NONBLOCK);
		if (poll(&pfd, 1, 1) == 1) {
			fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
			assert_true(fd != -1);
			return fd;
		}
	}
	fail_msg("the upstream was never connected to");
	return -1;
}

/* Read want bytes from fd (a peer's end), running the loop meanwhile. */
static void
h_recv(struct harness *h, int fd, size_t want)
{
	char	buf[4096];
	size_t	got;
	ssize_t	n;
	int	i;

	for (got = 0, i = 0; got < want && i < 2000; got += (size_t)n, i++) {
		(void)event_base_loop(h->ctx.base, EVLOOP_NONBLOCK);
		n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n == -1 && errno == EAGAIN) {
			n = 0;
			(void)poll(NULL, 0, 1);
		}
		assert_true(n >= 0);
	}
	assert_int_equal(got, want);
}

static int
no_pairs(struct harness *h)
{
	return h->ctx.stats.conns_open == 0;
}

static int
relaying(struct harness *h)
{
	struct zp_pair	*p = TAILQ_FIRST(&h->ctx.pairs);

	return p != NULL && p->state == ZP_PAIR_RELAYING;
}

/* The log so far, as one string (static). */
static const char *
h_log(struct harness *h)
{
	static char	buf[16384];
	size_t		n;

	fflush(h->log);
	rewind(h->log);
	n = fread(buf, 1, sizeof(buf) - 1, h->log);
	buf[n] = '\0';
	fseek(h->log, 0, SEEK_END);
	return buf;
}

static unsigned short
addr_port(const struct zp_addr *a)
{
	return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

/*
 * --balance first: a refused first upstream is counted against it (one
 * failed connection, none open) and the client gets the second, whose
 * address the pair keeps.
 */
static void
test_failover_first(void **state)
{
	struct harness	 h;
	char		 u1[32], u2[32];
	unsigned short	 port;
	int		 s, c, u;

	(void)state;
	s = listen_any(&port);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", closed_port());
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", port);
	h_init(&h, "-u", u1, "-u", u2, "--balance", "first", "-m", "copy",
	    NULL);
	c = h_client(&h);
	u = h_accept(&h, s);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(TAILQ_FIRST(&h.ctx.pairs)->up_idx, 1);
	assert_int_equal(addr_port(&TAILQ_FIRST(&h.ctx.pairs)->up_addr),
	    port);
	assert_int_equal(h.ctx.ups->v[0].conns_failed, 1);
	assert_int_equal(h.ctx.ups->v[0].conns_total, 0);
	assert_int_equal(h.ctx.ups->v[0].active, 0);
	assert_int_equal(h.ctx.ups->v[1].conns_total, 1);
	assert_int_equal(h.ctx.ups->v[1].active, 1);
	close(c);
	close(u);
	assert_true(h_run(&h, no_pairs, 2000));
	assert_int_equal(h.ctx.ups->v[1].active, 0);
	assert_int_equal(h.ctx.stats.conns_failed, 0);
	h_free(&h);
	close(s);
}

/* Every upstream refuses: the client is closed, one failed connection. */
static void
test_all_refused(void **state)
{
	struct harness	 h;
	char		 u1[32], u2[32], b;
	int		 c;

	(void)state;
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", closed_port());
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", closed_port());
	h_init(&h, "-u", u1, "-u", u2, "-m", "copy", NULL);
	c = h_client(&h);
	assert_true(h_run(&h, no_pairs, 2000));
	assert_int_equal(h.ctx.stats.conns_failed, 1);
	assert_int_equal(h.ctx.ups->v[0].conns_failed, 1);
	assert_int_equal(h.ctx.ups->v[1].conns_failed, 1);
	assert_int_equal(read(c, &b, 1), 0);	/* closed */
	assert_non_null(strstr(h_log(&h), "end=upstream-refused"));
	close(c);
	h_free(&h);
}

/*
 * Bytes each way are counted as they are delivered, overall and for the
 * upstream, and once: closing adds nothing; the upstream has no pair
 * open after.
 */
static void
test_close_accounting(void **state)
{
	struct harness	 h;
	char		 up[32], buf[4096];
	unsigned short	 port;
	int		 s, c, u;

	(void)state;
	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", "copy", NULL);
	c = h_client(&h);
	u = h_accept(&h, s);
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(write(c, buf, 1000), 1000);
	h_recv(&h, u, 1000);
	assert_int_equal(write(u, buf, 500), 500);
	h_recv(&h, c, 500);
	assert_int_equal(h.ctx.stats.all.up.bytes, 1000);
	assert_int_equal(h.ctx.stats.all.down.bytes, 500);
	assert_int_equal(h.ctx.stats.ups[0].up.bytes, 1000);
	assert_int_equal(h.ctx.stats.ups[0].down.bytes, 500);
	assert_int_equal(h.ctx.ups->v[0].active, 1);
	close(c);
	close(u);
	assert_true(h_run(&h, no_pairs, 2000));
	assert_int_equal(h.ctx.stats.all.up.bytes, 1000);
	assert_int_equal(h.ctx.stats.all.down.bytes, 500);
	assert_int_equal(h.ctx.stats.ups[0].up.bytes, 1000);
	assert_int_equal(h.ctx.stats.ups[0].down.bytes, 500);
	assert_int_equal(h.ctx.ups->v[0].active, 0);
	assert_int_equal(h.ctx.ups->v[0].conns_total, 1);
	assert_int_equal(h.ctx.stats.conns_total, 1);
	assert_non_null(strstr(h_log(&h), " up=1000 down=500 "));
	h_free(&h);
	close(s);
}

static int
one_cached(struct harness *h)
{
	return h->ctx.bufs.n == 1;
}

/*
 * Copy mode: a direction gives its buffer back to the context's cache as
 * it empties, and the next pass takes it from there: one buffer serves
 * every pass of both directions of a pair (they run in turn), and stays
 * for the next pair. The cache keeps at most ZP_BUFCACHE_MAX, and only
 * of --buffer-size.
 */
static void
test_buffer_cache(void **state)
{
	struct harness	 h;
	char		 up[32], buf[4096], *b[ZP_BUFCACHE_MAX + 8];
	char		*first = NULL;
	unsigned short	 port;
	int		 s, c, u, i;

	(void)state;
	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", "copy", NULL);
	h.ctx.bufs.size = h.cfg.buffer_size;
	c = h_client(&h);
	u = h_accept(&h, s);
	memset(buf, 'x', sizeof(buf));
	for (i = 0; i < 3; i++) {
		assert_int_equal(write(c, buf, 1000), 1000);
		h_recv(&h, u, 1000);
		assert_int_equal(write(u, buf, 500), 500);
		h_recv(&h, c, 500);
		/* Both directions empty: the buffer back, none more. */
		assert_true(h_run(&h, one_cached, 2000));
		if (i == 0)
			first = h.ctx.bufs.v[0];
		assert_ptr_equal(h.ctx.bufs.v[0], first);
	}
	close(c);
	close(u);
	assert_true(h_run(&h, no_pairs, 2000));
	assert_int_equal(h.ctx.bufs.n, 1);
	/* Another size is not kept; the cache has a bound. */
	zp_buf_put(&h.ctx.bufs, zp_buf_get(&h.ctx.bufs, 100), 100);
	assert_int_equal(h.ctx.bufs.n, 1);
	for (i = 0; i < ZP_BUFCACHE_MAX + 8; i++)
		assert_non_null(b[i] = zp_buf_get(&h.ctx.bufs,
		    h.cfg.buffer_size));
	assert_int_equal(h.ctx.bufs.n, 0);
	for (i = 0; i < ZP_BUFCACHE_MAX + 8; i++)
		zp_buf_put(&h.ctx.bufs, b[i], h.cfg.buffer_size);
	assert_int_equal(h.ctx.bufs.n, ZP_BUFCACHE_MAX);
	zp_bufcache_clear(&h.ctx.bufs);
	assert_int_equal(h.ctx.bufs.n, 0);
	h_free(&h);
	close(s);
}

/*
 * Connect to 127.0.0.1:port until a connect does not complete: the
 * listener's accept queue is full and drops SYNs. Returns how many
 * completed (their sockets in fill).
 */
static int
fill_queue(unsigned short port, int *fill)
{
	struct sockaddr_in	sin;
	struct pollfd		pfd;
	int			n = 0, fd;

	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0);
		assert_true(fd != -1);
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1)
			assert_int_equal(errno, EINPROGRESS);
		pfd.fd = fd;
		pfd.events = POLLOUT;
		if (poll(&pfd, 1, 200) == 0) {
			close(fd);	/* dropped: the queue is full */
			return n;
		}
		if (n == 16)
			fail_msg("the accept queue never filled");
		fill[n++] = fd;
	}
}

/*
 * The address a pair reports is the one its connect went to, also when
 * re-resolution replaced the upstream's list before the connect was
 * done.
 */
static void
test_connected_address(void **state)
{
	struct harness		 h;
	struct zp_addr		*other;
	struct sockaddr_in	*sin;
	char			 up[32];
	unsigned short		 port;
	int			 s, c, u, fill[16], nfill;

	(void)state;
	s = listen_any(&port);
	/*
	 * A connect to loopback is done at once; to keep this one under
	 * way, the upstream's accept queue is full (backlog 0, fillers),
	 * so that its SYN is dropped until the queue is emptied below.
	 */
	assert_int_equal(listen(s, 0), 0);
	nfill = fill_queue(port, fill);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", "copy", "--connect-timeout", "10", NULL);
	c = h_client(&h);
	assert_false(relaying(&h));
	/* What --resolve-interval does: a new list in place of the old. */
	assert_non_null(other = calloc(1, sizeof(*other)));
	sin = (struct sockaddr_in *)&other->ss;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(9);
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1);
	other->len = sizeof(*sin);
	zp_upstream_set_addrs(h.ctx.ups, 0, other, 1);
	while (nfill > 0)
		close(accept(s, NULL, NULL)), close(fill[--nfill]);
	u = h_accept(&h, s);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(addr_port(&TAILQ_FIRST(&h.ctx.pairs)->up_addr),
	    port);
	close(c);
	close(u);
	assert_true(h_run(&h, no_pairs, 2000));
	assert_non_null(strstr(h_log(&h), up));
	h_free(&h);
	close(s);
}

/* --idle-timeout closes a quiet pair, counted and named. */
static void
test_idle_timeout(void **state)
{
	struct harness	 h;
	char		 up[32];
	unsigned short	 port;
	int		 s, c, u;

	(void)state;
	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", "copy", "--idle-timeout", "0.1", NULL);
	c = h_client(&h);
	u = h_accept(&h, s);
	assert_true(h_run(&h, relaying, 2000));
	assert_true(h_run(&h, no_pairs, 3000));
	assert_int_equal(h.ctx.stats.timeouts_idle, 1);
	assert_non_null(strstr(h_log(&h), "end=idle-timeout"));
	close(c);
	close(u);
	h_free(&h);
	close(s);
}

/* A client that resets: the pair ends as client-reset, not as an error. */
static void
test_client_reset(void **state)
{
	struct harness	 h;
	struct linger	 lg = { 1, 0 };
	char		 up[32];
	unsigned short	 port;
	int		 s, c, u;

	(void)state;
	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", "copy", NULL);
	c = h_client(&h);
	u = h_accept(&h, s);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)),
	    0);
	close(c);
	assert_true(h_run(&h, no_pairs, 3000));
	assert_non_null(strstr(h_log(&h), "end=client-reset"));
	assert_int_equal(h.ctx.stats.conns_failed, 0);
	close(u);
	h_free(&h);
	close(s);
}

/* The mode a seam test runs in: its prestate, "splice" or "copy". */
static char *
mode_of(void **state)
{
	return *state != NULL ? *state : (char *)"copy";
}

/*
 * A framed client that resets while its upstream connect is in progress,
 * during the drain: the connect's completion winds the stream down
 * (zproxy is stopping), and the wind-down meets the reset (its FIN to
 * the client fails) and frees the pair. Nothing may touch the pair after
 * that (pair_connected() went on to pump it: a use after free under
 * ASan). The pair ends once, as the client's error, and the upstream's
 * count is back to 0.
 */
static void
test_drain_connect_reset(void **state)
{
	struct harness	 h;
	char		 up[32];
	unsigned short	 port;
	int		 s, u;

	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", mode_of(state), "--framing", "lf", NULL);
	/*
	 * No linger (below what --linger-timeout takes): a pair whose
	 * client failed closes as soon as both ways are done, whatever its
	 * upstream did not acknowledge yet (its FIN).
	 */
	h.cfg.linger_timeout = 0;
	h.ctx.stopping = 1;
	connect_async = 1;
	(void)h_client_how(&h, 0, 1);
	connect_async = 0;
	assert_int_equal(TAILQ_FIRST(&h.ctx.pairs)->state, ZP_PAIR_CONNECTING);
	shutdown_fail_fd = TAILQ_FIRST(&h.ctx.pairs)->client.fd;
	u = h_accept(&h, s);
	assert_true(h_run(&h, no_pairs, 3000));
	shutdown_fail_fd = -1;
	assert_non_null(strstr(h_log(&h), "end=client-"));
	assert_int_equal(h.ctx.ups->v[0].active, 0);
	close(u);
	h_free(&h);
	close(s);
}

/*
 * zp_pair_start()'s contract: -1 when the pair is gone already. Here the
 * connect completes inside the start (loopback), the client had reset,
 * and with no linger the pair ends before the start returns.
 */
static void
test_start_gone(void **state)
{
	struct harness	 h;
	char		 up[32];
	unsigned short	 port;
	int		 s, u;

	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(&h, "-u", up, "-m", mode_of(state), NULL);
	h.cfg.linger_timeout = 0;
	assert_int_equal(h_client_how(&h, 0, 1), -1);
	assert_true(TAILQ_EMPTY(&h.ctx.pairs));
	assert_non_null(strstr(h_log(&h), "end=client-reset"));
	u = h_accept(&h, s);
	close(u);
	h_free(&h);
	close(s);
}

/*
 * A planned move reaches its boundary (at once: nothing is in flight)
 * and the old upstream is to become the retiring one, but the event that
 * would read it cannot be made. The pair ends (no memory), and every
 * descriptor is closed once: the old upstream's was copied into the
 * retiring half and closed twice, the second time perhaps another
 * connection's (with threads, a socket another thread just opened). Each
 * upstream's count of open connections is back to 0 (the old one's was
 * released twice).
 */
static void
test_switch_nomem(void **state)
{
	struct harness	 h;
	struct zp_pair	*p;
	char		 u1[32], u2[32];
	unsigned short	 p1, p2;
	int		 s1, s2, c, a, b;

	s1 = listen_any(&p1);
	s2 = listen_any(&p2);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", p1);
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", p2);
	h_init(&h, "-u", u1, "-u", u2, "--balance", "first", "-m",
	    mode_of(state), "--framing", "lf", NULL);
	c = h_client(&h);
	a = h_accept(&h, s1);
	assert_true(h_run(&h, relaying, 2000));
	p = TAILQ_FIRST(&h.ctx.pairs);
	assert_int_equal(zp_pair_plan_move(p, 1, ZP_MOVE_REBALANCE), 0);
	event_fail_fd = close_watch_fd = p->upstream.fd;
	close_watch_n = 0;
	b = h_accept(&h, s2);
	assert_true(h_run(&h, no_pairs, 3000));
	assert_int_equal(close_watch_n, 1);
	close_watch_fd = event_fail_fd = -1;
	assert_non_null(strstr(h_log(&h), "end=out-of-memory"));
	assert_int_equal(h.ctx.ups->v[0].active, 0);
	assert_int_equal(h.ctx.ups->v[1].active, 0);
	close(c);
	close(a);
	close(b);
	h_free(&h);
	close(s1);
	close(s2);
}

static int	feed_fd = -1;	/* a peer's end the conditions below use */

/* The peer's end feed_fd sees EOF (what comes before it is read). */
static int
peer_eof(struct harness *h)
{
	char	buf[4096];
	ssize_t	n;

	(void)h;
	while ((n = recv(feed_fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		;
	return n == 0;
}

/* zproxy holds nothing of the client's (all of it in the kernel's). */
static int
up_flushed(struct harness *h)
{
	struct zp_pair	*p = TAILQ_FIRST(&h->ctx.pairs);
	int		 pending;

	if (p == NULL || ioctl(p->client.fd, FIONREAD, &pending) == -1)
		return 0;
	return pending == 0 && p->up.ops->pending(&p->up) == 0;
}

static int
retiring(struct harness *h)
{
	struct zp_pair	*p = TAILQ_FIRST(&h->ctx.pairs);

	return p != NULL && p->mv != NULL && p->mv->retiring.fd != -1;
}

/*
 * A planned move switched from A to B at a boundary; A is retiring (it
 * got its FIN and is read until it closes). B closes too, before A has:
 * when A's FIN arrives, the client's source becomes B, whose FIN is read
 * in the same turn. That FIN must move the stream at once (a collector
 * that closed reads no more), as any upstream's FIN does: it was
 * dropped, and the client's next bytes went to the closed B and were
 * lost at its reset. Here the stream moves back to A (a new connection,
 * B was the one that failed) before the client writes, and the client's
 * next line arrives there.
 */
static void
test_retire_fin(void **state)
{
	struct harness	 h;
	struct zp_pair	*p;
	char		 u1[32], u2[32], buf[16];
	unsigned short	 p1, p2;
	int		 s1, s2, c, a, a2, b;

	s1 = listen_any(&p1);
	s2 = listen_any(&p2);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", p1);
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", p2);
	h_init(&h, "-u", u1, "-u", u2, "--balance", "first", "-m",
	    mode_of(state), "--framing", "lf", NULL);
	c = h_client(&h);
	a = h_accept(&h, s1);
	assert_true(h_run(&h, relaying, 2000));
	p = TAILQ_FIRST(&h.ctx.pairs);
	assert_int_equal(zp_pair_plan_move(p, 1, ZP_MOVE_REBALANCE), 0);
	b = h_accept(&h, s2);
	assert_true(h_run(&h, retiring, 2000));
	/* A has its FIN: it says all it had, after B closed. */
	assert_int_equal(read(a, buf, sizeof(buf)), 0);
	close(b);
	close(a);
	a2 = h_accept(&h, s1);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(write(c, "x\n", 2), 2);
	h_recv(&h, a2, 2);
	assert_non_null(strstr(h_log(&h), "reason=upstream-failed"));
	close(c);
	close(a2);
	assert_true(h_run(&h, no_pairs, 3000));
	assert_int_equal(h.ctx.ups->v[0].active, 0);
	assert_int_equal(h.ctx.ups->v[1].active, 0);
	h_free(&h);
	close(s1);
	close(s2);
}

static struct zp_totals	tot;

/*
 * --threads 2 in copy mode, its workers' deaths told to on_death: n
 * clients handed as the listener hands them, each with its upstream
 * connection (c[i], u[i], accepted on *s) and 1000 bytes written up.
 */
static void
h_threads(struct harness *h, int *s, void (*on_death)(struct zp_ctx *, int),
    int n, int *c, int *u)
{
	char		 up[32], buf[1000], err[ZP_ERRLEN];
	unsigned short	 port;
	int		 i;

	*s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	h_init(h, "-u", up, "-m", "copy", NULL);
	assert_int_equal(zp_workers_new(&h->ctx, 2, err, sizeof(err)), 0);
	assert_int_equal(zp_ctx_threads(&h->ctx), 2);
	zp_workers_on_death(&h->ctx, on_death);
	assert_int_equal(zp_workers_start(&h->ctx, err, sizeof(err)), 0);
	memset(buf, 'x', sizeof(buf));
	for (i = 0; i < n; i++) {
		c[i] = h_client_via(h, 1);
		u[i] = h_accept(h, *s);
		assert_int_equal(write(c[i], buf, sizeof(buf)), sizeof(buf));
	}
}

/* End what h_threads began (u[i] -1: none accepted). */
static void
h_threads_free(struct harness *h, int s, int n, int *c, int *u)
{
	int	i;

	zp_workers_free(&h->ctx);
	for (i = 0; i < n; i++) {
		close(c[i]);
		if (u[i] != -1)
			close(u[i]);
	}
	h_free(h);
	close(s);
}


/* Every thread's totals: 4 open, 2 on each, 4000 bytes up. */
static int
spread_and_counted(struct harness *h)
{
	zp_ctx_totals(&h->ctx, &tot);
	return tot.stats.conns_open == 4 && tot.open[0] == 2 &&
	    tot.open[1] == 2 && tot.stats.all.up.bytes == 4000 &&
	    tot.stats.ups[0].up.bytes == 4000;
}

/*
 * --threads 2: the root takes every other client (the least loaded,
 * ties to the root), the worker relays its own; the totals sum both
 * threads; the end closes the worker's pairs and logs them; the limit
 * and the upstream's count see every thread.
 */
static void
test_threads(void **state)
{
	struct harness	 h;
	int		 s, c[4], u[4], i;

	(void)state;
	h_threads(&h, &s, NULL, 4, c, u);
	assert_int_equal(zp_ctx_open_all(&h.ctx), 4);
	assert_true(h_run(&h, spread_and_counted, 5000));
	/* The root relays its two itself; the worker's went on meanwhile. */
	for (i = 0; i < 4; i++)
		h_recv(&h, u[i], 1000);
	assert_int_equal(h.ctx.stats.conns_open, 2);
	assert_int_equal(h.ctx.ups->v[0].active, 4);
	zp_workers_stop(&h.ctx);
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[1], 0);
	assert_int_equal(tot.stats.conns_total, 4);
	assert_int_equal(tot.stats.conns_open, 2);
	assert_int_equal(h.ctx.ups->v[0].active, 2);
	assert_int_equal(zp_ctx_open_all(&h.ctx), 2);
	/* The worker's two ended with the process's end, logged. */
	assert_non_null(strstr(h_log(&h), "end=shutdown"));
	h_threads_free(&h, s, 4, c, u);
}

/*
 * zp_sock_acked() reads the kernel's tcpi_bytes_acked by name (glibc's
 * struct tcp_info stops before it): what the peer acknowledged, the SYN
 * not counted, its FIN once it is acknowledged.
 */
static void
test_sock_acked(void **state)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	char			buf[1000];
	uint64_t		acked = 0;
	unsigned short		port;
	int			s, c, a, i;

	(void)state;
	s = listen_any(&port);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sin, &len), 0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&sin, len), 0);
	a = accept4(s, NULL, NULL, SOCK_CLOEXEC);
	assert_true(a != -1);
	assert_int_equal(zp_sock_acked(c, &acked), 0);
	assert_int_equal(acked, 0);
	memset(buf, 'a', sizeof(buf));
	assert_int_equal(write(c, buf, sizeof(buf)), sizeof(buf));
	for (i = 0; i < 2000 && acked != sizeof(buf); i++) {
		assert_int_equal(zp_sock_acked(c, &acked), 0);
		(void)poll(NULL, 0, 1);
	}
	assert_int_equal(acked, sizeof(buf));
	assert_int_equal(shutdown(c, SHUT_WR), 0);
	for (i = 0; i < 2000 && acked != sizeof(buf) + 1; i++) {
		assert_int_equal(zp_sock_acked(c, &acked), 0);
		(void)poll(NULL, 0, 1);
	}
	assert_int_equal(acked, sizeof(buf) + 1);
	assert_int_equal(zp_sock_acked(s, &acked) == -1 || acked == 0, 1);
	close(a);
	close(c);
	close(s);
}

/*
 * --max-lifetime moves a stream only to another upstream: where the
 * balancer would place it now (--balance first: the first upstream,
 * where it is) it stays, with no connect begun. It reconnected to the
 * same upstream, a needless reconnect and drain.
 */
static void
test_lifetime_same(void **state)
{
	struct harness	 h;
	struct zp_pair	*p;
	char		 u1[32], u2[32];
	unsigned short	 p1, p2;
	int		 s1, s2, c, a;

	s1 = listen_any(&p1);
	s2 = listen_any(&p2);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", p1);
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", p2);
	h_init(&h, "-u", u1, "-u", u2, "--balance", "first", "-m",
	    mode_of(state), "--framing", "lf", NULL);
	c = h_client(&h);
	a = h_accept(&h, s1);
	assert_true(h_run(&h, relaying, 2000));
	p = TAILQ_FIRST(&h.ctx.pairs);
	assert_int_equal(p->up_idx, 0);
	assert_int_equal(zp_pair_plan_move(p, -1, ZP_MOVE_LIFETIME), -1);
	assert_true(p->mv == NULL || p->mv->next.fd == -1);
	/* To the other one, as --rebalance would ask: it begins. */
	assert_int_equal(zp_pair_plan_move(p, 1, ZP_MOVE_LIFETIME), 0);
	assert_true(p->mv != NULL && p->mv->next.fd != -1);
	close(c);
	close(a);
	h_free(&h);
	close(s1);
	close(s2);
}

/* The stall tests' lines: "msg N" padded to 100 bytes with its newline. */
#define STALL_LINE	100
#define STALL_MAX	200000		/* 20 MB at most */

static void
stall_line(char *buf, int n)
{
	memset(buf, 'p', STALL_LINE);
	snprintf(buf, STALL_LINE, "msg %08d ", n);
	buf[strlen(buf)] = 'p';
	buf[STALL_LINE - 1] = '\n';
}

/*
 * Read lines from fd (running the loop) until line `last` came; each
 * line's number is marked in seen[]. Fails after 10 s.
 */
static void
stall_read_until(struct harness *h, int fd, int last, unsigned char *seen)
{
	static char	acc[1 << 20];
	static size_t	have;
	ssize_t		n;
	size_t		i, start;
	int		num, done = 0, k;

	have = 0;
	for (k = 0; k < 10000 && !done; k++) {
		(void)event_base_loop(h->ctx.base, EVLOOP_NONBLOCK);
		n = recv(fd, acc + have, sizeof(acc) - have, MSG_DONTWAIT);
		if (n == -1 && errno == EAGAIN) {
			(void)poll(NULL, 0, 1);
			continue;
		}
		assert_true(n > 0);
		have += (size_t)n;
		for (i = 0, start = 0; i < have; i++) {
			if (acc[i] != '\n')
				continue;
			assert_int_equal(i + 1 - start, STALL_LINE);
			assert_int_equal(sscanf(acc + start, "msg %d ", &num),
			    1);
			seen[num] = 1;
			done |= num == last;
			start = i + 1;
		}
		memmove(acc, acc + start, have - start);
		have -= start;
	}
	assert_true(done);
}

/*
 * The stall tests' set-up: upstreams A (its window shut after 4 KB: its
 * sockets inherit a small SO_RCVBUF, and nothing reads them) and B,
 * --balance first, lf framing, a 1M replay window, --stall-timeout as
 * given; a client relaying to A.
 */
struct stall_rig {
	struct harness	 h;
	int		 s1, s2;	/* A's and B's listeners */
	int		 c, a;		/* the client, A's end */
};

/* A's receive buffer is rcv bytes (the kernel doubles it). */
static void
stall_begin_rcv(struct stall_rig *r, void **state, const char *stall,
    int rcv)
{
	char		u1[32], u2[32];
	unsigned short	p1, p2;

	r->s1 = listen_any(&p1);
	r->s2 = listen_any(&p2);
	assert_int_equal(setsockopt(r->s1, SOL_SOCKET, SO_RCVBUF, &rcv,
	    sizeof(rcv)), 0);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", p1);
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", p2);
	h_init(&r->h, "-u", u1, "-u", u2, "--balance", "first", "-m",
	    mode_of(state), "--framing", "lf", "--replay-window", "1M",
	    "--stall-timeout", stall, NULL);
	r->c = h_client(&r->h);
	r->a = h_accept(&r->h, r->s1);
	assert_true(h_run(&r->h, relaying, 2000));
}

/* A can take 8 KB unread: a collector that stopped reading. */
static void
stall_begin(struct stall_rig *r, void **state, const char *stall)
{
	stall_begin_rcv(r, state, stall, 4096);
}

/* The client sends lines 0 to n-1 (blocking: the kernel takes them). */
static void
stall_send(struct stall_rig *r, int n)
{
	char	line[STALL_LINE];
	int	i;

	for (i = 0; i < n; i++) {
		stall_line(line, i);
		assert_int_equal(send(r->c, line, STALL_LINE, 0), STALL_LINE);
	}
}

/* B (accepted now) gets every one of lines 0 to n-1; returns its end. */
static int
stall_expect_all(struct stall_rig *r, int n)
{
	static unsigned char	seen[STALL_MAX];
	int			b, i;

	b = h_accept(&r->h, r->s2);
	memset(seen, 0, sizeof(seen));
	stall_read_until(&r->h, b, n - 1, seen);
	for (i = 0; i < n; i++)
		if (!seen[i])
			fail_msg("line %d of %d never reached B", i, n);
	return b;
}

static void
stall_end(struct stall_rig *r, int b)
{
	close(r->c);
	close(r->a);
	close(b);
	assert_true(h_run(&r->h, no_pairs, 3000));
	h_free(&r->h);
	close(r->s1);
	close(r->s2);
}

/*
 * --stall-timeout: the upstream (A) accepts and never reads (a stopped
 * collector); the client writes until zproxy holds bytes it cannot
 * write. Once A has acknowledged nothing for the timeout, it has failed:
 * the stream moves to B with its replay window, and every line the
 * client wrote reaches B, whole, at least once: zproxy's send queue to
 * A is held within the window (the kernel grew it to megabytes, beyond
 * any window). It stayed on A for ever.
 */
static void
test_stall_moves(void **state)
{
	struct stall_rig	 r;
	struct zp_pair		*p;
	char			 line[STALL_LINE];
	int			 sent;

	stall_begin(&r, state, "0.3");
	p = TAILQ_FIRST(&r.h.ctx.pairs);
	/* Until zproxy holds bytes it cannot write to A. */
	for (sent = 0; sent < STALL_MAX && !(p->upstream.wblocked &&
	    p->up.ops->pending(&p->up) > 0);) {
		stall_line(line, sent);
		if (send(r.c, line, STALL_LINE, MSG_DONTWAIT) == STALL_LINE)
			sent++;
		else
			assert_int_equal(errno, EAGAIN);
		(void)event_base_loop(r.h.ctx.base, EVLOOP_NONBLOCK);
	}
	assert_true(sent < STALL_MAX);
	stall_end(&r, stall_expect_all(&r, sent));
}

/*
 * The stream moved to B (b) once, for the stall, after the client's FIN:
 * B hears that FIN, and the client B's; then the rig ends.
 */
static void
stall_fin_moved(struct stall_rig *r, int b)
{
	assert_non_null(strstr(h_log(&r->h), "reason=upstream-stalled"));
	assert_int_equal(r->h.ctx.stats.moves[ZP_MOVE_STALLED], 1);
	feed_fd = b;
	assert_true(h_run(&r->h, peer_eof, 3000));
	shutdown(b, SHUT_WR);
	feed_fd = r->c;
	assert_true(h_run(&r->h, peer_eof, 3000));
	stall_end(r, b);
}

/*
 * A collector (A) that stops reading with the client's last lines in
 * zproxy's send queue, none held by zproxy itself, and the client closes
 * (a forwarder that wrote its batch and ends). The client's FIN waits
 * while A has not acknowledged everything; A's stall then moves the
 * stream to B, its replay window first, and B gets every line and then
 * the FIN. The FIN went to A at once, behind the lines A never took:
 * the client waited on a collector that would never answer, and the
 * lines were lost when the pair ended.
 */
static void
test_stall_fin(void **state)
{
	struct stall_rig	r;
	int			b;

	stall_begin(&r, state, "0.3");
	/* 50 KB: zproxy's send queue takes it all (W/2), A 4 KB of it. */
	stall_send(&r, 500);
	assert_int_equal(shutdown(r.c, SHUT_WR), 0);
	b = stall_expect_all(&r, 500);
	assert_non_null(strstr(h_log(&r.h), "(--stall-timeout)"));
	stall_fin_moved(&r, b);
}

/*
 * A collector (A) that stopped reading but whose kernel took every line
 * into its receive buffer (acknowledged, never read), then the client's
 * FIN after them: A does not close. Within --stall-timeout of the FIN it
 * has failed all the same: the stream moves to B with its replay window,
 * B gets every line and then the FIN, and the client B's EOF. The client
 * waited on A until --fin-timeout (300 s by default), and A's lines
 * were lost if A was then killed (stall.sh, on a loaded machine).
 */
static void
test_stall_after_fin(void **state)
{
	struct stall_rig	r;
	int			b;

	stall_begin_rcv(&r, state, "0.3", 1 << 20);
	stall_send(&r, 500);
	assert_int_equal(shutdown(r.c, SHUT_WR), 0);
	b = stall_expect_all(&r, 500);
	assert_non_null(strstr(h_log(&r.h), "of the client's FIN: it has "
	    "failed"));
	stall_fin_moved(&r, b);
}

/*
 * A planned move off a collector (A) that stopped reading: the switch
 * comes at once (zproxy holds nothing: A's lines are in its send queue),
 * A gets its FIN behind them and never closes. When --drain-timeout
 * gives A up with bytes it never acknowledged, the replay window goes
 * again to B at the stream's next boundary, and B gets every line. They
 * were lost ("387213 bytes sent to it not acknowledged").
 */
static void
test_retire_lost(void **state)
{
	struct stall_rig	r;
	int			b;

	stall_begin(&r, state, "off");
	r.h.cfg.drain_timeout = 0.3;
	stall_send(&r, 500);
	assert_true(h_run(&r.h, up_flushed, 3000));
	assert_int_equal(zp_pair_plan_move(TAILQ_FIRST(&r.h.ctx.pairs), 1,
	    ZP_MOVE_REBALANCE), 0);
	b = stall_expect_all(&r, 500);
	assert_non_null(strstr(h_log(&r.h), "the replay window goes again"));
	stall_end(&r, b);
}

/*
 * zp_sock_drain(), the one read-and-drop loop: at most `passes` reads
 * of ZP_DROP_CHUNK a call, whatever the peer still sends (a chatty
 * upstream must not hold a loop); 0 while more may come, 1 at EOF.
 */
static void
test_sock_drain(void **state)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	static char		buf[1 << 20];
	uint64_t		dropped = 0, total = 0;
	unsigned short		port;
	int			s, c, a, i, rc = 0, sz = 4 << 20;

	(void)state;
	s = listen_any(&port);
	assert_int_equal(getsockname(s, (struct sockaddr *)&sin, &len), 0);
	c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(c, (struct sockaddr *)&sin, len), 0);
	a = accept4(s, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	assert_true(a != -1);
	(void)setsockopt(a, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(write(c, buf, sizeof(buf)), sizeof(buf));
	assert_int_equal(zp_sock_drain(a, 1, &dropped), 0);
	assert_true(dropped > 0 && dropped <= ZP_DROP_CHUNK);
	close(c);
	for (i = 0, total = dropped; i < 1000 && rc == 0; i++) {
		dropped = 0;
		rc = zp_sock_drain(a, 1, &dropped);
		total += dropped;
		if (rc == 0 && dropped == 0)
			(void)poll(NULL, 0, 1);
	}
	assert_int_equal(rc, 1);
	assert_int_equal(total, sizeof(buf));
	close(a);
	close(s);
}

/*
 * The drain (a wind-down: a FIN to the client) while the stream's
 * collector (A) has stopped reading with the client's last lines: the
 * client closes, its FIN waits for A, and A's stall moves the stream to
 * B with its replay window: every line reaches B, then the pair ends.
 * The FIN went to A at once (a wind-down held nothing), and the lines
 * A never took were lost at the drain's end.
 */
static void
test_stall_drain(void **state)
{
	struct stall_rig	r;
	int			b;

	stall_begin(&r, state, "0.3");
	stall_send(&r, 500);
	r.h.ctx.stopping = 1;
	assert_int_equal(zp_pair_wind_down(TAILQ_FIRST(&r.h.ctx.pairs),
	    ZP_END_SHUTDOWN), 0);
	/* The client hears the FIN, and closes in turn. */
	feed_fd = r.c;
	assert_true(h_run(&r.h, peer_eof, 3000));
	assert_int_equal(shutdown(r.c, SHUT_WR), 0);
	b = stall_expect_all(&r, 500);
	assert_non_null(strstr(h_log(&r.h), "reason=upstream-stalled"));
	feed_fd = b;
	assert_true(h_run(&r.h, peer_eof, 3000));
	stall_end(&r, b);
}

/*
 * A planned move from A to B, and B resets just after: the stream goes
 * back to A (a new connection) with its replay window, so the lines B
 * took and lost reach A again. (attack.sh saw such a move back replay
 * nothing, after A had been stopped and continued; this simple case
 * holds, and guards the path.)
 */
static void
test_switch_then_fail(void **state)
{
	struct stall_rig	r;
	struct zp_pair		*p;
	char			line[STALL_LINE];
	int			b, a2, k;

	stall_begin(&r, state, "off");
	stall_send(&r, 100);
	h_recv(&r.h, r.a, 100 * STALL_LINE);
	p = TAILQ_FIRST(&r.h.ctx.pairs);
	assert_int_equal(zp_pair_plan_move(p, 1, ZP_MOVE_REBALANCE), 0);
	b = h_accept(&r.h, r.s2);
	assert_true(h_run(&r.h, retiring, 2000));
	for (k = 100; k < 200; k++) {
		stall_line(line, k);
		assert_int_equal(send(r.c, line, STALL_LINE, 0), STALL_LINE);
		(void)event_base_loop(r.h.ctx.base, EVLOOP_NONBLOCK);
	}
	h_recv(&r.h, b, 100 * STALL_LINE);
	reset_close(b);
	/* The next line written into B's reset fails it. */
	stall_line(line, 200);
	assert_int_equal(send(r.c, line, STALL_LINE, 0), STALL_LINE);
	/* A's new connection gets the window again: lines 100 to 199. */
	{
		static unsigned char	seen[STALL_MAX];

		a2 = h_accept(&r.h, r.s1);
		memset(seen, 0, sizeof(seen));
		stall_read_until(&r.h, a2, 200, seen);
		for (k = 100; k < 200; k++)
			if (!seen[k])
				fail_msg("line %d never reached A again: %s", k,
				    h_log(&r.h));
	}
	close(a2);
	close(r.c);
	close(r.a);
	h_free(&r.h);
	close(r.s1);
	close(r.s2);
}

static int
spooling(struct harness *h)
{
	struct zp_pair	*p = TAILQ_FIRST(&h->ctx.pairs);

	return p != NULL && p->state == ZP_PAIR_SPOOLING;
}

/*
 * What the spool directory's files hold, past their header lines, in
 * one buffer (static), and how many bytes.
 */
static size_t
spool_read_all(const char *dir, char **out)
{
	static char	all[1 << 20];
	char		path[512], *nl;
	struct dirent	*e;
	DIR		*dp;
	FILE		*f;
	size_t		 n = 0, k;

	assert_non_null(dp = opendir(dir));
	while ((e = readdir(dp)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		assert_non_null(f = fopen(path, "r"));
		k = fread(all + n, 1, sizeof(all) - n - 1, f);
		fclose(f);
		all[n + k] = '\0';
		/* The header line is the spool's, not the stream's. */
		assert_non_null(nl = strchr(all + n, '\n'));
		memmove(all + n, nl + 1, k - (size_t)(nl + 1 - (all + n)));
		n += k - (size_t)(nl + 1 - (all + n));
	}
	closedir(dp);
	*out = all;
	return n;
}

/*
 * --spool, a live framed stream whose upstream fails while every other
 * is down: the move finds no upstream; the stream goes into the spool
 * from its replay window's first message on, and the client stays
 * connected (no EOF, no reset). It was cut: "could not move ... to=none",
 * and the client's last lines were lost. Every line the client wrote is
 * in the files, whole, in order from the window's start (here the
 * stream's first line).
 */
static void
test_spool_live(void **state)
{
	struct stall_rig	 r;
	char			 dir[] = "/tmp/zp-spool-live.XXXXXX", up[64];
	char			 err[ZP_ERRLEN], line[STALL_LINE], *all, *q;
	unsigned short		 port;
	size_t			 n, i;
	int			 s, c, a, k, next;

	assert_non_null(mkdtemp(dir));
	s = listen_any(&port);
	snprintf(up, sizeof(up), "127.0.0.1:%u", port);
	snprintf(err, sizeof(err), "127.0.0.1:%u", closed_port());
	h_init(&r.h, "-u", up, "-u", err, "--balance", "first", "-m",
	    mode_of(state), "--framing", "lf", "--replay-window", "1M",
	    "--spool", dir, NULL);
	assert_non_null(r.h.ctx.spool = zp_spool_new(&r.h.ctx, err,
	    sizeof(err)));
	assert_int_equal(zp_spool_start(r.h.ctx.spool, err, sizeof(err)), 0);
	c = h_client(&r.h);
	a = h_accept(&r.h, s);
	assert_true(h_run(&r.h, relaying, 2000));
	r.c = c;
	stall_send(&r, 100);
	h_recv(&r.h, a, 100 * STALL_LINE);
	reset_close(a);
	/* Lines go on; the write into the reset upstream fails it. */
	for (k = 100; k < 200; k++) {
		stall_line(line, k);
		assert_int_equal(send(c, line, STALL_LINE, 0), STALL_LINE);
		(void)event_base_loop(r.h.ctx.base, EVLOOP_NONBLOCK);
	}
	assert_true(h_run(&r.h, spooling, 5000));
	assert_null(strstr(h_log(&r.h), "could not move"));
	/* The client is still connected: nothing came back, no reset. */
	feed_fd = c;
	assert_false(h_run(&r.h, peer_eof, 300));
	/* Every line in the files, from the window's start, in order. */
	for (k = 0; k < 200 && (n = spool_read_all(dir, &all)) <
	    (size_t)(200 * STALL_LINE); k++)
		(void)h_run(&r.h, no_pairs, 10);
	n = spool_read_all(dir, &all);
	assert_int_equal(n % STALL_LINE, 0);
	for (i = 0, q = all, next = -1; i < n / STALL_LINE; i++) {
		assert_int_equal(q[STALL_LINE - 1], '\n');
		assert_int_equal(sscanf(q, "msg %d ", &k), 1);
		assert_true(next == -1 || k == next);
		next = k + 1;
		q += STALL_LINE;
	}
	assert_int_equal(next, 200);
	assert_int_equal(strncmp(all, "msg 00000000 ", 13), 0);
	assert_non_null(strstr(h_log(&r.h), "spooling client"));
	/* (Its files would go to A, which is up again: not here.) */
	close(c);
	zp_pairs_close(&r.h.ctx, ZP_END_SHUTDOWN);
	zp_spool_free(r.h.ctx.spool);
	r.h.ctx.spool = NULL;
	h_free(&r.h);
	close(s);
	(void)snprintf(line, sizeof(line), "rm -rf %s", dir);
	(void)system(line);
}

/*
 * Deadlines run on the monotonic clock: an upstream marked down for
 * --fail-timeout 0.2 is tried again 0.2 s later though the wall clock
 * stepped an hour ahead meanwhile. (Its back-off was counted from the
 * wall clock at the failure and compared with libevent's cached time:
 * it stayed down for the hour.)
 */
static void
test_clock_step(void **state)
{
	struct harness	 h;
	char		 u1[32], u2[32];
	unsigned short	 pa, pb;
	int		 sa, sb, c1, c2, u, v;

	(void)state;
	pa = closed_port();
	sb = listen_any(&pb);
	snprintf(u1, sizeof(u1), "127.0.0.1:%u", pa);
	snprintf(u2, sizeof(u2), "127.0.0.1:%u", pb);
	h_init(&h, "-u", u1, "-u", u2, "--balance", "first", "-m", "copy",
	    "--max-fails", "1", "--fail-timeout", "0.2", NULL);
	wall_step = 3600;
	c1 = h_client(&h);
	u = h_accept(&h, sb);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(TAILQ_FIRST(&h.ctx.pairs)->up_idx, 1);
	/* A listens again; after its back-off the next client goes there. */
	sa = listen_port(pa);
	(void)poll(NULL, 0, 300);
	c2 = h_client(&h);
	v = h_accept(&h, sa);
	assert_true(h_run(&h, relaying, 2000));
	assert_int_equal(TAILQ_LAST(&h.ctx.pairs, zp_pair_list)->up_idx, 0);
	wall_step = 0;
	close(c1);
	close(c2);
	close(u);
	close(v);
	h_free(&h);
	close(sa);
	close(sb);
}

static int	deaths, death_thread;

static void
death_cb(struct zp_ctx *root, int thread)
{
	(void)root;
	deaths++;
	death_thread = thread;
}

static int
death_told(struct harness *h)
{
	(void)h;
	return deaths > 0;
}

/*
 * --threads 2, and the worker's event loop fails with two clients of its
 * own: the root hears of it on its own thread, once (the callback the
 * composition root registers: zproxy drains and exits non-zero), every
 * later client goes to the root, the totals do not wait for the dead
 * thread (they hung: the root waited on a condition variable for a
 * reply that never came), and the stop closes its stalled pairs, logged.
 * An alarm bounds the test: a hang fails it.
 */
static void
test_worker_dies(void **state)
{
	struct harness	 h;
	int		 s, c[7], u[7], n0;

	(void)state;
	alarm(30);
	deaths = 0;
	h_threads(&h, &s, death_cb, 4, c, u);
	assert_true(h_run(&h, spread_and_counted, 5000));
	/*
	 * The next client goes to the root (a tie), the one after to the
	 * worker, whose loop then fails once it started it (its upstream
	 * connection is never accepted).
	 */
	__atomic_store_n(&kill_workers, 1, __ATOMIC_SEQ_CST);
	c[4] = h_client_via(&h, 1);
	u[4] = h_accept(&h, s);
	c[5] = h_client_via(&h, 1);
	u[5] = -1;
	assert_true(h_run(&h, death_told, 5000));
	assert_int_equal(deaths, 1);
	assert_int_equal(death_thread, 1);
	assert_non_null(strstr(h_log(&h), "thread 1: its event loop ended"));
	/*
	 * The sixth client went there, or (the worker woke by its own
	 * pairs and died first) to the root. The worker has the fewest
	 * either way: the next one goes to the root all the same.
	 */
	n0 = (int)h.ctx.stats.conns_open;
	assert_true(n0 == 3 || n0 == 4);
	c[6] = h_client_via(&h, 1);
	u[6] = h_accept(&h, s);
	assert_int_equal(h.ctx.stats.conns_open, n0 + 1);
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[0], n0 + 1);
	zp_workers_stop(&h.ctx);
	assert_int_equal(deaths, 1);
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[1], 0);
	assert_int_equal(zp_ctx_open_all(&h.ctx), n0 + 1);
	h_threads_free(&h, s, 7, c, u);
	__atomic_store_n(&kill_workers, 0, __ATOMIC_SEQ_CST);
	alarm(0);
}

static int	refreshed;
static struct timespec refreshed_at;

static void
refresh_cb(void *arg)
{
	(void)arg;
	refreshed++;
	clock_gettime(CLOCK_MONOTONIC, &refreshed_at);
}

static int
was_refreshed(struct harness *h)
{
	(void)h;
	return refreshed > 0;
}

static int
worker_held(struct harness *h)
{
	(void)h;
	return __atomic_load_n(&workers_held, __ATOMIC_SEQ_CST);
}

/* Milliseconds from t0 to t (NULL: now). */
static long
ms_from(const struct timespec *t0, const struct timespec *t)
{
	struct timespec	now;

	if (t == NULL) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		t = &now;
	}
	return (t->tv_sec - t0->tv_sec) * 1000 +
	    (t->tv_nsec - t0->tv_nsec) / 1000000;
}

/* Refresh and run the loop until it ended; returns how long it took. */
static long
h_refresh(struct harness *h)
{
	struct timespec	t0;

	refreshed = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_non_null(zp_ctx_refresh(&h->ctx, refresh_cb, NULL));
	assert_true(h_run(h, was_refreshed, 5000));
	assert_int_equal(refreshed, 1);
	return ms_from(&t0, &refreshed_at);
}

/*
 * --threads 2, the worker's loop held between two turns (as one busy in
 * a long callback would be, or stopped): the root relays on; the totals
 * come at once, with the worker's last snapshot; a refresh ends at its
 * deadline (ZP_REFRESH_MS), not when the worker is let go, with that
 * snapshot still; one cancelled never ends; a client handed to the
 * worker counts in the load at once. Let go, the worker answers the
 * next refresh, and the totals are exact: its new client and its bytes.
 * (ctx_call made the root wait for the held worker at the first totals.)
 */
static void
test_refresh_held(void **state)
{
	struct harness	 h;
	char		 buf[1000];
	struct timespec	 t0;
	long		 ms;
	int		 s, c[4], u[4], i;

	(void)state;
	alarm(30);
	/* The root's, the worker's, the root's (the least loaded). */
	h_threads(&h, &s, NULL, 3, c, u);
	for (i = 0; i < 3; i++)
		h_recv(&h, u[i], 1000);
	memset(buf, 'x', sizeof(buf));
	(void)h_refresh(&h);
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[1], 1);
	assert_int_equal(tot.stats.all.up.bytes, 3000);

	/* A refresh wakes it; it stops after that turn. */
	__atomic_store_n(&hold_workers, 1, __ATOMIC_SEQ_CST);
	(void)h_refresh(&h);
	assert_true(h_run(&h, worker_held, 5000));
	c[3] = h_client_via(&h, 1);
	assert_int_equal(zp_ctx_open_all(&h.ctx), 4);
	assert_int_equal(write(c[0], buf, sizeof(buf)), sizeof(buf));
	h_recv(&h, u[0], sizeof(buf));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	zp_ctx_totals(&h.ctx, &tot);
	assert_true(ms_from(&t0, NULL) < 100);
	assert_int_equal(tot.open[0], 2);
	assert_int_equal(tot.open[1], 1);
	assert_int_equal(tot.stats.conns_total, 3);
	assert_int_equal(tot.stats.all.up.bytes, 4000);
	ms = h_refresh(&h);
	assert_true(ms >= ZP_REFRESH_MS - 20 && ms < 1000);
	assert_true(worker_held(&h));
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[1], 1);
	refreshed = 0;
	zp_ctx_refresh_cancel(zp_ctx_refresh(&h.ctx, refresh_cb, NULL));
	assert_false(h_run(&h, was_refreshed, 2 * ZP_REFRESH_MS));

	__atomic_store_n(&hold_workers, 0, __ATOMIC_SEQ_CST);
	u[3] = h_accept(&h, s);
	assert_int_equal(write(c[3], buf, sizeof(buf)), sizeof(buf));
	h_recv(&h, u[3], sizeof(buf));
	ms = h_refresh(&h);
	assert_true(ms < ZP_REFRESH_MS);
	zp_ctx_totals(&h.ctx, &tot);
	assert_int_equal(tot.open[0], 2);
	assert_int_equal(tot.open[1], 2);
	assert_int_equal(tot.stats.conns_open, 4);
	assert_int_equal(tot.stats.conns_total, 4);
	assert_int_equal(tot.stats.all.up.bytes, 5000);
	h_threads_free(&h, s, 4, c, u);
	alarm(0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_failover_first),
		cmocka_unit_test(test_all_refused),
		cmocka_unit_test(test_close_accounting),
		cmocka_unit_test(test_connected_address),
		cmocka_unit_test(test_idle_timeout),
		cmocka_unit_test(test_client_reset),
		cmocka_unit_test(test_buffer_cache),
		cmocka_unit_test(test_threads),
		cmocka_unit_test_prestate(test_drain_connect_reset, (char *)"splice"),
		cmocka_unit_test_prestate(test_drain_connect_reset, (char *)"copy"),
		cmocka_unit_test_prestate(test_start_gone, (char *)"splice"),
		cmocka_unit_test_prestate(test_start_gone, (char *)"copy"),
		cmocka_unit_test_prestate(test_switch_nomem, (char *)"splice"),
		cmocka_unit_test_prestate(test_switch_nomem, (char *)"copy"),
		cmocka_unit_test_prestate(test_retire_fin, (char *)"splice"),
		cmocka_unit_test_prestate(test_retire_fin, (char *)"copy"),
		cmocka_unit_test(test_worker_dies),
		cmocka_unit_test(test_refresh_held),
		cmocka_unit_test(test_sock_acked),
		cmocka_unit_test(test_sock_drain),
		cmocka_unit_test(test_clock_step),
		cmocka_unit_test_prestate(test_lifetime_same, (char *)"copy"),
		cmocka_unit_test_prestate(test_stall_moves, (char *)"splice"),
		cmocka_unit_test_prestate(test_stall_moves, (char *)"copy"),
		cmocka_unit_test_prestate(test_stall_fin, (char *)"splice"),
		cmocka_unit_test_prestate(test_stall_fin, (char *)"copy"),
		cmocka_unit_test_prestate(test_stall_after_fin,
		    (char *)"splice"),
		cmocka_unit_test_prestate(test_stall_after_fin, (char *)"copy"),
		cmocka_unit_test_prestate(test_retire_lost, (char *)"splice"),
		cmocka_unit_test_prestate(test_retire_lost, (char *)"copy"),
		cmocka_unit_test_prestate(test_stall_drain, (char *)"splice"),
		cmocka_unit_test_prestate(test_stall_drain, (char *)"copy"),
		cmocka_unit_test_prestate(test_switch_then_fail, (char *)"splice"),
		cmocka_unit_test_prestate(test_switch_then_fail, (char *)"copy"),
		cmocka_unit_test_prestate(test_spool_live, (char *)"splice"),
		cmocka_unit_test_prestate(test_spool_live, (char *)"copy"),
	};

	main_thread = pthread_self();
	/* As zp_run() does with --threads above 1, before any base. */
	if (evthread_use_pthreads() == -1)
		return 1;

	return cmocka_run_group_tests(tests, NULL, NULL);
}
