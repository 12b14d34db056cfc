/*
 * test_connect.c - unit tests for connect.c: the non-blocking connect
 * with a timeout, over real sockets on 127.0.0.1 and a real event base.
 *
 * A connect that does not complete, without a network: a listener with
 * listen(fd, 0) takes one connection into its accept queue and drops
 * the SYNs after it while nobody accepts (the kernel's accept-queue
 * overflow; SYN cookies only help a full SYN queue), so the next connect
 * stays in SYN-SENT until its first retransmission, a second away.
 *
 * Linked with -Wl,--wrap=event_new, to make the connect's event fail.
 * Every test checks that it left no descriptor open.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "core/config.h"
#include "core/connect.h"

#define DEADLINE_MS	5000	/* every loop is bounded */

struct event *__real_event_new(struct event_base *, evutil_socket_t, short,
	    event_callback_fn, void *);
struct event *__wrap_event_new(struct event_base *, evutil_socket_t, short,
	    event_callback_fn, void *);

static int	event_fail;	/* the next event_new() fails */

struct event *
__wrap_event_new(struct event_base *base, evutil_socket_t fd, short what,
    event_callback_fn cb, void *arg)
{
	if (event_fail) {
		event_fail = 0;
		errno = ENOMEM;
		return NULL;
	}
	return __real_event_new(base, fd, what, cb, arg);
}

/* What the connect's callback saw. */
struct seen {
	struct zp_connecting	*c;
	int			 calls;
	int			 err;
	short			 what;
};

static void
seen_cb(evutil_socket_t fd, short what, void *arg)
{
	struct seen	*s = arg;

	assert_int_equal(fd, s->c->fd);
	s->calls++;
	s->what = what;
	s->err = zp_connecting_result(s->c, what);
}

static int
open_fds(void)
{
	DIR		*d = opendir("/proc/self/fd");
	struct dirent	*e;
	int		 n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;		/* the directory's own */
}

static void
addr_v4(struct zp_addr *a, const char *ip, unsigned short port)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;

	memset(a, 0, sizeof(*a));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	assert_int_equal(inet_pton(AF_INET, ip, &sin->sin_addr), 1);
	a->len = sizeof(*sin);
}

/* A listener on 127.0.0.1, any port, with this backlog; its address. */
static int
listener(int backlog, struct zp_addr *a)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	int			fd;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd != -1);
	addr_v4(a, "127.0.0.1", 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a->ss, a->len), 0);
	assert_int_equal(listen(fd, backlog), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	((struct sockaddr_in *)&a->ss)->sin_port = sin.sin_port;
	return fd;
}

/* A port of 127.0.0.1 where nobody listens. */
static void
closed_port(struct zp_addr *a)
{
	int	fd = listener(1, a);

	close(fd);
}

/* Run base until s saw its callback, or the deadline. */
static void
run_until_called(struct event_base *base, struct seen *s)
{
	struct timeval	tv = { DEADLINE_MS / 1000, 0 }, start, now, dt;

	gettimeofday(&start, NULL);
	while (s->calls == 0) {
		gettimeofday(&now, NULL);
		timersub(&now, &start, &dt);
		assert_true(timercmp(&dt, &tv, <));
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	}
}

/* The port a socket is bound to. */
static unsigned short
local_port(int fd)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	return ntohs(sin.sin_port);
}

/*
 * Each test's: an event base, a connect and what its callback saw, a
 * listener; the descriptors open before, which teardown finds again.
 */
struct fx {
	struct event_base	*base;
	struct zp_connecting	 c;
	struct seen		 s;
	struct zp_addr		 a;
	struct timeval		 tv;	/* the connect's timeout */
	int			 lfd;	/* -1: none */
	int			 fds;
};

static int
setup(void **state)
{
	struct fx	*f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->fds = open_fds();
	assert_non_null(f->base = event_base_new());
	zp_connecting_init(&f->c);
	f->s.c = &f->c;
	f->tv.tv_sec = 1;
	f->lfd = -1;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx	*f = *state;

	zp_connecting_cancel(&f->c);
	if (f->lfd != -1)
		close(f->lfd);
	event_base_free(f->base);
	assert_int_equal(open_fds(), f->fds);
	free(f);
	return 0;
}

/* Begin f's connect to f->a. */
static int
fx_start(struct fx *f, const struct zp_addr *src, int flags)
{
	return zp_connecting_start(&f->c, f->base, &f->a, src, flags, &f->tv,
	    seen_cb, &f->s);
}

/*
 * To a listener of this host the handshake is over when connect() lets
 * go: 0, the socket connected (the listener accepts it), no event, and
 * the callback is never called. take() hands the socket over and leaves
 * nothing to cancel.
 */
static void
test_connected_at_once(void **state)
{
	struct fx		*f = *state;
	struct sockaddr_in	 peer;
	socklen_t		 plen = sizeof(peer);
	int			 fd, afd;

	f->lfd = listener(16, &f->a);
	assert_int_equal(fx_start(f, NULL, 0), 0);
	assert_true(f->c.fd != -1);
	assert_null(f->c.ev);
	assert_int_equal(getpeername(f->c.fd, (struct sockaddr *)&peer,
	    &plen), 0);
	afd = accept(f->lfd, NULL, NULL);
	assert_true(afd != -1);
	fd = zp_connecting_take(&f->c);
	assert_int_equal(f->c.fd, -1);
	zp_connecting_cancel(&f->c);	/* nothing: the socket is ours */
	assert_int_equal(write(fd, "x", 1), 1);
	assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
	assert_int_equal(f->s.calls, 0);
	close(fd);
	close(afd);
}

/*
 * ZP_CONNECT_DEFER: the same connect done at once is reported from the
 * loop, once, as connected; the socket stays c's until taken.
 */
static void
test_deferred(void **state)
{
	struct fx	*f = *state;
	int		 afd;

	f->lfd = listener(16, &f->a);
	f->s.err = -1;
	assert_int_equal(fx_start(f, NULL, ZP_CONNECT_DEFER), 1);
	assert_non_null(f->c.ev);
	assert_int_equal(f->s.calls, 0);
	run_until_called(f->base, &f->s);
	assert_int_equal(f->s.err, 0);
	assert_true(f->s.what & EV_WRITE);
	assert_null(f->c.ev);
	assert_true(f->c.fd != -1);
	/* One-shot: nothing more comes. */
	assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
	assert_int_equal(f->s.calls, 1);
	afd = accept(f->lfd, NULL, NULL);
	assert_true(afd != -1);
	zp_connecting_cancel(&f->c);
	assert_int_equal(f->c.fd, -1);
	close(afd);
}

/*
 * Nobody listens: refused, at once (-1, ECONNREFUSED, nothing open) or,
 * should the kernel let connect() go first, from the callback.
 */
static void
test_refused(void **state)
{
	struct fx	*f = *state;
	int		 rc;

	closed_port(&f->a);
	rc = fx_start(f, NULL, 0);
	if (rc == -1) {
		assert_int_equal(errno, ECONNREFUSED);
		assert_int_equal(f->c.fd, -1);
		assert_null(f->c.ev);
	} else {
		assert_int_equal(rc, 1);
		run_until_called(f->base, &f->s);
		assert_int_equal(f->s.err, ECONNREFUSED);
	}
}

/*
 * Fill a listen(fd, 0) listener's accept queue: connects done at once
 * until one is not, which is left in progress in f->c (the ones that got
 * in are closed; the queue stays full, nobody accepts). Fails the test
 * if the kernel here never drops a SYN (tcp_abort_on_overflow would
 * refuse instead).
 */
static void
start_stuck(struct fx *f)
{
	int	in[8], n = 0, rc;

	f->lfd = listener(0, &f->a);
	while ((rc = fx_start(f, NULL, 0)) == 0) {
		assert_true(n < 8);
		in[n++] = zp_connecting_take(&f->c);
	}
	assert_int_equal(rc, 1);
	while (n > 0)
		close(in[--n]);
}

/*
 * A connect that cannot complete (its SYN dropped by a full accept
 * queue): the callback says ETIMEDOUT once the timeout passed, with the
 * socket still c's to cancel.
 */
static void
test_timeout(void **state)
{
	struct fx	*f = *state;
	struct timeval	 t0, t1, dt;

	f->tv.tv_sec = 0;
	f->tv.tv_usec = 100 * 1000;
	start_stuck(f);
	gettimeofday(&t0, NULL);
	run_until_called(f->base, &f->s);
	gettimeofday(&t1, NULL);
	timersub(&t1, &t0, &dt);
	assert_int_equal(f->s.err, ETIMEDOUT);
	assert_true(f->s.what & EV_TIMEOUT);
	assert_true(dt.tv_sec == 0 && dt.tv_usec >= 90 * 1000);
	assert_null(f->c.ev);
	assert_true(f->c.fd != -1);
}

/*
 * Cancelled while in progress: the event goes with the socket, and the
 * callback never comes, not even at the timeout.
 */
static void
test_cancel_pending(void **state)
{
	struct fx	*f = *state;

	f->tv.tv_sec = 0;
	f->tv.tv_usec = 20 * 1000;
	start_stuck(f);
	zp_connecting_cancel(&f->c);
	assert_int_equal(f->c.fd, -1);
	assert_null(f->c.ev);
	zp_connecting_cancel(&f->c);	/* again: nothing */
	usleep(50 * 1000);
	assert_int_equal(event_base_loop(f->base, EVLOOP_NONBLOCK), 1);
	assert_int_equal(f->s.calls, 0);
}

/*
 * From a source address: the listener sees the connect come from it
 * (127.0.0.2, this host's too: all of 127/8 is loopback), with a port
 * chosen at connect().
 */
static void
test_source(void **state)
{
	struct fx		*f = *state;
	struct zp_addr		 src;
	struct sockaddr_in	 peer;
	socklen_t		 plen = sizeof(peer);
	char			 ip[INET_ADDRSTRLEN];
	int			 afd, rc;

	f->lfd = listener(16, &f->a);
	addr_v4(&src, "127.0.0.2", 0);
	if ((rc = fx_start(f, &src, 0)) == 1) {
		run_until_called(f->base, &f->s);
		assert_int_equal(f->s.err, 0);
	} else
		assert_int_equal(rc, 0);
	assert_true(local_port(f->c.fd) != 0);
	afd = accept(f->lfd, (struct sockaddr *)&peer, &plen);
	assert_true(afd != -1);
	assert_non_null(inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip)));
	assert_string_equal(ip, "127.0.0.2");
	assert_int_equal(ntohs(peer.sin_port), local_port(f->c.fd));
	close(afd);
}

/*
 * A source that is not this host's, not transparent: the bind fails,
 * -1 with its errno (EADDRNOTAVAIL), nothing open.
 */
static void
test_source_foreign(void **state)
{
	struct fx	*f = *state;
	struct zp_addr	 src;

	f->lfd = listener(16, &f->a);
	addr_v4(&src, "192.0.2.1", 0);		/* TEST-NET-1 */
	assert_int_equal(fx_start(f, &src, 0), -1);
	assert_int_equal(errno, EADDRNOTAVAIL);
	assert_int_equal(f->c.fd, -1);
	assert_null(f->c.ev);
}

/*
 * The connect's event cannot be made: -1 with ENOMEM (a local shortage
 * for zp_connect_local_error), and the socket already made is closed.
 */
static void
test_event_nomem(void **state)
{
	struct fx	*f = *state;
	int		 afd;

	f->lfd = listener(16, &f->a);
	event_fail = 1;
	assert_int_equal(fx_start(f, NULL, ZP_CONNECT_DEFER), -1);
	assert_int_equal(errno, ENOMEM);
	assert_int_equal(event_fail, 0);
	assert_int_equal(f->c.fd, -1);
	assert_null(f->c.ev);
	/* It did connect before the event failed: the listener has it. */
	afd = accept(f->lfd, NULL, NULL);
	assert_true(afd != -1);
	close(afd);
}

#define T(f)	cmocka_unit_test_setup_teardown(f, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_connected_at_once),
		T(test_deferred),
		T(test_refused),
		T(test_timeout),
		T(test_cancel_pending),
		T(test_source),
		T(test_source_foreign),
		T(test_event_nomem),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
