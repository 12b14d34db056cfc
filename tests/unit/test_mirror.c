/*
 * test_mirror.c - unit tests for --mirror (mirror.c): a pair's mirror
 * streams, driven through their calls with a real event base, real pipes
 * and real TCP connections to a listener on 127.0.0.1 that plays the
 * mirror collector.
 *
 *	zp_mirror_copy / zp_mirror_tee --> [stream: pipe] ==TCP==> peer
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
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
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "core/config.h"
#include "relay/ctx.h"
#include "relay/mirror.h"
#include "zproxy.h"

#define KIB	1024
#define DEADLINE_MS	10000	/* every wait is bounded */

struct fx {
	struct zp_config	 cfg;
	struct zp_log		 log;
	struct zp_ctx		 ctx;
	struct zp_addr		 addr[2];
	int			 lfd[2];	/* the mirrors' listeners */
	int			 peer[2];	/* accepted, or -1 */
	char			 label[2][4];
};

static long long
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int
listener(struct zp_addr *a)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;
	int			 fd;

	memset(a, 0, sizeof(*a));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a->len = sizeof(*sin);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)sin, a->len), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a->ss, &a->len),
	    0);
	return fd;
}

/* n mirrors, framing as given; copy mode (no pool). */
static struct fx *
fx_new(size_t n, int framing)
{
	struct fx	*fx = calloc(1, sizeof(*fx));
	size_t		 i;

	assert_non_null(fx);
	zp_config_init(&fx->cfg);
	fx->cfg.framing = framing;
	fx->cfg.fail_timeout = 60;
	fx->cfg.linger_timeout = 5;
	fx->cfg.connect_timeout = 5;
	for (i = 0; i < n; i++) {
		snprintf(fx->label[i], sizeof(fx->label[i]), "m%zu", i);
		fx->lfd[i] = listener(&fx->addr[i]);
		fx->peer[i] = -1;
		fx->cfg.mirrors[i].arg = fx->label[i];
		fx->cfg.mirrors[i].to.addrs = &fx->addr[i];
		fx->cfg.mirrors[i].to.naddrs = 1;
	}
	fx->cfg.nmirrors = n;
	zp_log_init(&fx->log, stderr, ZP_LOG_ERROR);
	fx->ctx.cfg = &fx->cfg;
	fx->ctx.log = &fx->log;
	zp_wire(&fx->ctx);	/* as zp_run() does: a finished copy tells it */
	fx->ctx.base = event_base_new();
	assert_non_null(fx->ctx.base);
	fx->ctx.mirrors = zp_mirrors_new(&fx->cfg);
	assert_non_null(fx->ctx.mirrors);
	TAILQ_INIT(&fx->ctx.mirror_sets);
	return fx;
}

static void
fx_free(struct fx *fx)
{
	size_t	i;

	zp_mirror_sets_close(&fx->ctx);
	for (i = 0; i < fx->cfg.nmirrors; i++) {
		close(fx->lfd[i]);
		if (fx->peer[i] != -1)
			close(fx->peer[i]);
	}
	zp_mirrors_free(fx->ctx.mirrors);
	event_base_free(fx->ctx.base);
	free(fx);
}

static void
loop_once(struct fx *fx)
{
	event_base_loop(fx->ctx.base, EVLOOP_NONBLOCK);
}

/*
 * Accept mirror i's connection (the handshake needs no loop turn). Its
 * buffers stay the kernel's: a receive buffer made small after the
 * handshake stalls loopback's 64 KiB segments on the persist timer.
 */
static void
accept_peer(struct fx *fx, size_t i)
{
	struct pollfd	pfd = { fx->lfd[i], POLLIN, 0 };

	assert_int_equal(poll(&pfd, 1, DEADLINE_MS), 1);
	fx->peer[i] = accept(fx->lfd[i], NULL, NULL);
	assert_true(fx->peer[i] >= 0);
}

/* What mirror i's peer can read now, appended at buf + *got. */
static void
peer_take(struct fx *fx, size_t i, char *buf, size_t *got, size_t cap)
{
	ssize_t	n;

	while ((n = recv(fx->peer[i], buf + *got, cap - *got,
	    MSG_DONTWAIT)) > 0)
		*got += (size_t)n;
	assert_true(*got < cap);
}

/*
 * Read mirror i's stream to EOF into buf (at most cap) after the got
 * bytes there, turning the loop meanwhile. Returns the length.
 */
static size_t
read_to_eof(struct fx *fx, size_t i, char *buf, size_t got, size_t cap)
{
	long long	 deadline = now_ms() + DEADLINE_MS;
	ssize_t		 n;
	struct pollfd	 pfd = { fx->peer[i], POLLIN, 0 };

	for (;;) {
		assert_true(now_ms() < deadline);
		loop_once(fx);
		if (poll(&pfd, 1, 10) != 1)
			continue;
		n = read(fx->peer[i], buf + got, cap - got);
		assert_true(n >= 0);
		if (n == 0)
			return got;
		got += (size_t)n;
		assert_true(got < cap);
	}
}

/*
 * A pattern of len bytes (i * a + i / b), and in dst[] room for what two
 * mirrors get of it, a header included.
 */
static char *
bufs_new(size_t len, size_t a, size_t b, char *dst[2])
{
	char	*src = malloc(len);
	size_t	 i;

	dst[0] = malloc(len + 64);
	dst[1] = malloc(len + 64);
	assert_non_null(src);
	assert_non_null(dst[0]);
	assert_non_null(dst[1]);
	for (i = 0; i < len; i++)
		src[i] = (char)(i * a + i / b);
	return src;
}

/* Log lines, each "message N" and a newline. */
static size_t
lines(char *buf, size_t cap)
{
	size_t	off = 0;
	int	i;

	for (i = 0; off + 64 < cap; i++)
		off += (size_t)snprintf(buf + off, cap - off,
		    "<13>message number %d of the mirror test\n", i);
	return off;
}

/*
 * Copy mode: the PROXY header first, then every byte as handed over,
 * then a FIN once the client's stream ended; counted; the set freed.
 */
static void
test_copy_whole_stream(void **state)
{
	struct fx		*fx = fx_new(2, ZP_FRAMING_NONE);
	struct zp_mirror_set	*set;
	size_t			 len = 300 * KIB, off, n, i, got[2] = { 0, 0 };
	char			*dst[2], *src = bufs_new(len, 7, 251, dst);

	(void)state;
	set = zp_mirror_set_new(&fx->ctx, 7, fx->cfg.framing, fx->cfg.max_frame, "HDR\r\n", 5);
	assert_non_null(set);
	accept_peer(fx, 0);
	accept_peer(fx, 1);
	/* Small pieces, the loop turning in between, as reads come. */
	for (off = 0; off < len; off += n) {
		n = len - off < 16 * KIB ? len - off : 16 * KIB;
		zp_mirror_copy(set, src + off, n);
		loop_once(fx);
		/* Read as a collector does, so that nothing is ever slow. */
		for (i = 0; i < 2; i++)
			peer_take(fx, i, dst[i], &got[i], len + 64);
	}
	zp_mirror_set_end(set);
	zp_mirror_set_release(set);
	for (i = 0; i < 2; i++) {
		n = read_to_eof(fx, i, dst[i], got[i], len + 64);
		assert_int_equal(n, len + 5);
		assert_memory_equal(dst[i], "HDR\r\n", 5);
		assert_memory_equal(dst[i] + 5, src, len);
		assert_int_equal(fx->ctx.stats.mirrors[i].streams, 1);
		assert_int_equal(fx->ctx.stats.mirrors[i].dropped, 0);
		assert_int_equal(fx->ctx.stats.mirrors[i].bytes, len + 5);
	}
	/* The peers closed too: the set is gone once their FIN is read. */
	shutdown(fx->peer[0], SHUT_WR);
	shutdown(fx->peer[1], SHUT_WR);
	{
		long long	deadline = now_ms() + DEADLINE_MS;

		while (!TAILQ_EMPTY(&fx->ctx.mirror_sets) &&
		    now_ms() < deadline) {
			loop_once(fx);
			poll(NULL, 0, 5);
		}
	}
	assert_true(TAILQ_EMPTY(&fx->ctx.mirror_sets));
	free(src);
	free(dst[0]);
	free(dst[1]);
	fx_free(fx);
}

/*
 * Splice mode's hand-off: the direction's pipe is tee'd, the flush may
 * send what every stream took, and the streams get every byte once,
 * although tee(2) always starts at the head of the pipe.
 */
static void
test_tee_accounting(void **state)
{
	struct fx		*fx = fx_new(2, ZP_FRAMING_NONE);
	struct zp_mirror_set	*set;
	int			 p[2];
	size_t			 len = 200 * KIB, in = 0, out = 0, may, k, i;
	size_t			 got[2] = { 0, 0 };
	char			*dst[2], *src = bufs_new(len, 13, 509, dst);
	char			 sink[4 * KIB];
	ssize_t			 n;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	set = zp_mirror_set_new(&fx->ctx, 8, fx->cfg.framing, fx->cfg.max_frame, NULL, 0);
	assert_non_null(set);
	accept_peer(fx, 0);
	accept_peer(fx, 1);
	while (out < len) {
		/* The client's bytes come into the direction's pipe... */
		if (in < len) {
			n = write(p[1], src + in, len - in < 6000 ?
			    len - in : 6000);
			if (n > 0)
				in += (size_t)n;
		}
		/* ... and a flush sends at most what the mirrors took, in
		 * slices smaller than that, as a slow upstream would. */
		may = zp_mirror_tee(set, p[0], in - out);
		assert_true(may > 0 && may <= in - out);
		k = may > 1000 ? may / 3 : may;
		n = read(p[0], sink, k < sizeof(sink) ? k : sizeof(sink));
		assert_true(n > 0);
		assert_memory_equal(sink, src + out, (size_t)n);
		out += (size_t)n;
		zp_mirror_sent(set, (size_t)n, 0);
		loop_once(fx);
		for (i = 0; i < 2; i++) {
			assert_int_equal(fx->ctx.stats.mirrors[i].dropped, 0);
			peer_take(fx, i, dst[i], &got[i], len + 64);
		}
	}
	zp_mirror_set_end(set);
	zp_mirror_set_release(set);
	for (i = 0; i < 2; i++) {
		n = (ssize_t)read_to_eof(fx, i, dst[i], got[i], len + 64);
		assert_int_equal(n, len);
		assert_memory_equal(dst[i], src, len);
	}
	close(p[0]);
	close(p[1]);
	free(src);
	free(dst[0]);
	free(dst[1]);
	fx_free(fx);
}

/*
 * A mirror that stops reading is dropped, never waited for. Framed
 * (lf), it still gets what it holds up to the last message boundary:
 * whole messages only. Unframed, a prefix.
 */
static void
slow_mirror(int framing)
{
	struct fx		*fx = fx_new(1, framing);
	struct zp_mirror_set	*set;
	size_t			 len = 16 * 1024 * KIB, off, n, got;
	char			*src = malloc(len), *dst = malloc(len);
	long long		 deadline = now_ms() + DEADLINE_MS;

	assert_non_null(src);
	assert_non_null(dst);
	len = lines(src, len);
	set = zp_mirror_set_new(&fx->ctx, 9, fx->cfg.framing, fx->cfg.max_frame, NULL, 0);
	assert_non_null(set);
	accept_peer(fx, 0);
	/* The peer reads nothing: the sockets, then the pipe fill up. */
	for (off = 0; off < len && fx->ctx.stats.mirrors[0].dropped == 0;
	    off += n) {
		assert_true(now_ms() < deadline);
		/* Odd sizes: the pieces end inside messages. */
		n = len - off < 10007 ? len - off : 10007;
		zp_mirror_copy(set, src + off, n);
		loop_once(fx);
	}
	assert_int_equal(fx->ctx.stats.mirrors[0].dropped, 1);
	/* Handed no more once dropped: nothing reaches it, nothing fails. */
	zp_mirror_copy(set, src, 1000);
	zp_mirror_set_end(set);
	zp_mirror_set_release(set);
	got = read_to_eof(fx, 0, dst, 0, len);
	assert_true(got > 0 && got < off);
	assert_memory_equal(dst, src, got);
	if (framing == ZP_FRAMING_LF)
		assert_int_equal(dst[got - 1], '\n');
	assert_int_equal(fx->ctx.stats.mirrors[0].dropped, 1);
	assert_int_equal(fx->ctx.stats.mirrors[0].bytes, got);
	free(src);
	free(dst);
	fx_free(fx);
}

static void
test_slow_framed_ends_at_boundary(void **state)
{
	(void)state;
	slow_mirror(ZP_FRAMING_LF);
}

static void
test_slow_unframed_prefix(void **state)
{
	(void)state;
	slow_mirror(ZP_FRAMING_NONE);
}

/*
 * A mirror that refuses: the stream is dropped, the mirror is down for
 * --fail-timeout, and a pair meanwhile gets no stream (counted).
 */
static void
test_refused_marks_down(void **state)
{
	struct fx		*fx = fx_new(1, ZP_FRAMING_NONE);
	struct zp_mirror_set	*set;
	long long		 deadline = now_ms() + DEADLINE_MS;

	(void)state;
	close(fx->lfd[0]);	/* nobody listens there any more */
	fx->lfd[0] = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(zp_mirror_up(fx->ctx.mirrors, 0));
	set = zp_mirror_set_new(&fx->ctx, 10, fx->cfg.framing, fx->cfg.max_frame, NULL, 0);
	if (set != NULL) {
		/* In progress: the refusal comes through the loop. */
		zp_mirror_copy(set, "abc\n", 4);
		while (fx->ctx.stats.mirrors[0].dropped == 0 &&
		    now_ms() < deadline) {
			loop_once(fx);
			poll(NULL, 0, 5);
		}
		zp_mirror_set_release(set);
	}
	assert_int_equal(fx->ctx.stats.mirrors[0].dropped, 1);
	assert_false(zp_mirror_up(fx->ctx.mirrors, 0));
	assert_null(zp_mirror_set_new(&fx->ctx, 11, fx->cfg.framing, fx->cfg.max_frame, NULL, 0));
	assert_int_equal(fx->ctx.stats.mirrors[0].dropped, 2);
	assert_int_equal(fx->ctx.stats.mirrors[0].streams, set != NULL);
	fx_free(fx);
}

/*
 * A mirror that does not answer (its listener's accept queue full: the
 * SYN is dropped): what the client sends meanwhile waits in the pipe;
 * at --connect-timeout the stream is dropped and the mirror is down,
 * as for a refusal. The timeout is the connect's own (zp_connecting),
 * not the stream's end timer.
 */
static void
test_timeout_marks_down(void **state)
{
	struct fx		*fx = fx_new(1, ZP_FRAMING_NONE);
	struct zp_mirror_set	*set;
	long long		 t0 = now_ms(), deadline = t0 + DEADLINE_MS;
	int			 in;

	(void)state;
	fx->cfg.connect_timeout = 0.2;
	assert_int_equal(listen(fx->lfd[0], 0), 0);
	in = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(connect(in, (struct sockaddr *)&fx->addr[0].ss,
	    fx->addr[0].len), 0);
	set = zp_mirror_set_new(&fx->ctx, 12, fx->cfg.framing, fx->cfg.max_frame, NULL, 0);
	assert_non_null(set);
	zp_mirror_copy(set, "abc\n", 4);
	while (fx->ctx.stats.mirrors[0].dropped == 0 && now_ms() < deadline) {
		loop_once(fx);
		poll(NULL, 0, 5);
	}
	assert_int_equal(fx->ctx.stats.mirrors[0].dropped, 1);
	assert_true(now_ms() - t0 >= 190);
	assert_int_equal(fx->ctx.stats.mirrors[0].streams, 1);
	assert_int_equal(fx->ctx.stats.mirrors[0].bytes, 0);
	assert_false(zp_mirror_up(fx->ctx.mirrors, 0));
	zp_mirror_set_release(set);
	close(in);
	fx_free(fx);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_whole_stream),
		cmocka_unit_test(test_tee_accounting),
		cmocka_unit_test(test_slow_framed_ends_at_boundary),
		cmocka_unit_test(test_slow_unframed_prefix),
		cmocka_unit_test(test_refused_marks_down),
		cmocka_unit_test(test_timeout_marks_down),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
