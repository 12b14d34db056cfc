/*
 * test_replay.c - unit tests for replay.c (--replay-window) over real
 * pipes: what is kept is the last `window` bytes delivered, in order,
 * whether written (copy mode) or tee'd from a data pipe (splice mode,
 * which leaves the data pipe as it was); a move gets them from the first
 * frame boundary held (the first after a delimiter for lf and nul, a
 * marked one for octet, the start when it is known to be one); an unkept
 * stretch starts it again; a window within one message gives nothing.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* pipe2, F_GETPIPE_SZ */
#endif
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

#include "lib/replay.h"

static int
devnull(void)
{
	int	fd = open("/dev/null", O_WRONLY | O_CLOEXEC);

	assert_true(fd != -1);
	return fd;
}

/* Take what a move would get, as a C string (the test frees it). */
static char *
take(struct zp_replay *rp, enum zp_framing kind, uint64_t upto,
    uint64_t *from, int *rc)
{
	char	*buf, *s;
	size_t	 len;

	*rc = zp_replay_take(rp, kind, upto, &buf, &len, from);
	s = calloc(1, len + 1);
	assert_non_null(s);
	if (*rc == 0 && len > 0)
		memcpy(s, buf, len);
	free(buf);
	return s;
}

/* Copy mode, lf: everything held while under the window; from 0. */
static void
test_copy_all(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from = 99;
	int			 fd = devnull(), rc;
	char			*s;

	(void)state;
	zp_replay_init(&rp, 1024, fd, 1);
	zp_replay_copy(&rp, "one\ntw", 6);
	zp_replay_copy(&rp, "o\nthree\n", 8);
	s = take(&rp, ZP_FRAMING_LF, 14, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 0);
	assert_string_equal(s, "one\ntwo\nthree\n");
	free(s);
	/* Empty now, standing at the boundary it gave. */
	assert_int_equal(rp.start, 0);
	assert_int_equal(rp.end, 0);
	zp_replay_free(&rp);
	close(fd);
}

/*
 * Past the window the oldest bytes go; lf then starts after the first
 * newline held, and stops at `upto` even when more is held.
 */
static void
test_copy_window(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc;
	char			*s;

	(void)state;
	zp_replay_init(&rp, 10, fd, 1);
	zp_replay_copy(&rp, "aaaa\nbbbb\ncc\ndd", 15);	/* keeps "bbbb\ncc\ndd" */
	assert_int_equal(rp.start, 5);
	assert_int_equal(rp.end, 15);
	s = take(&rp, ZP_FRAMING_LF, 13, &from, &rc);
	assert_int_equal(rc, 0);
	/*
	 * The newline before "bbbb" was not kept: nothing says that 5 is a
	 * boundary, so the first known is after the next newline.
	 */
	assert_int_equal(from, 10);
	assert_string_equal(s, "cc\n");
	free(s);
	zp_replay_free(&rp);
	close(fd);
}

/* nul framing: the boundary is after a NUL byte. */
static void
test_nul(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc;
	char			*s;

	(void)state;
	zp_replay_init(&rp, 8, fd, 1);
	zp_replay_copy(&rp, "xx\0yyy\0zz\0", 10);	/* keeps "\0yyy\0zz\0" */
	s = take(&rp, ZP_FRAMING_NUL, 10, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 3);
	assert_memory_equal(s, "yyy\0zz\0", 7);
	free(s);
	zp_replay_free(&rp);
	close(fd);
}

/* Octet: only marked boundaries count; none held gives nothing. */
static void
test_octet_marks(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc;
	char			*s;

	(void)state;
	/* window/16 == 1: every mark is kept */
	zp_replay_init(&rp, 16, fd, 1);
	zp_replay_copy(&rp, "3 abc", 5);
	zp_replay_mark(&rp, 5);
	zp_replay_copy(&rp, "4 d\nef", 6);
	zp_replay_mark(&rp, 11);
	zp_replay_copy(&rp, "2 gh1 i", 7);	/* 18 bytes: keeps 2..18 */
	zp_replay_mark(&rp, 15);
	zp_replay_mark(&rp, 18);
	assert_int_equal(rp.start, 2);
	s = take(&rp, ZP_FRAMING_OCTET, 18, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 5);
	assert_string_equal(s, "4 d\nef2 gh1 i");
	free(s);

	/* One long message: no boundary within the window. */
	zp_replay_free(&rp);
	zp_replay_init(&rp, 16, fd, 1);
	zp_replay_copy(&rp, "40 ", 3);
	zp_replay_copy(&rp, "0123456789012345678901234567890123456789", 40);
	s = take(&rp, ZP_FRAMING_OCTET, 43, &from, &rc);
	assert_int_equal(rc, -1);
	free(s);
	zp_replay_free(&rp);
	close(fd);
}

/* After an unkept stretch the replay starts again, not at a boundary. */
static void
test_reset(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc;
	char			*s;

	(void)state;
	zp_replay_init(&rp, 100, fd, 1);
	zp_replay_copy(&rp, "a\nb\n", 4);
	zp_replay_reset(&rp, 10, 0);
	zp_replay_copy(&rp, "xy\nz\n", 5);
	s = take(&rp, ZP_FRAMING_LF, 15, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 13);
	assert_string_equal(s, "z\n");
	free(s);
	/* ... or at one, when the caller knows it is. */
	zp_replay_reset(&rp, 20, 1);
	zp_replay_copy(&rp, "xy\nz\n", 5);
	s = take(&rp, ZP_FRAMING_LF, 25, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 20);
	assert_string_equal(s, "xy\nz\n");
	free(s);
	zp_replay_free(&rp);
	close(fd);
}

/*
 * Splice mode: tee keeps what a data pipe holds without taking it from
 * the pipe; after the flush sent it, the next tee keeps the next bytes.
 */
static void
test_tee(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc, p[2];
	char			*s, out[64];
	size_t			 t;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	zp_replay_init(&rp, 1024, fd, 1);
	assert_int_equal(write(p[1], "m1\nm2\n", 6), 6);
	t = zp_replay_tee(&rp, p[0], 6);
	assert_int_equal(t, 6);
	/* the data pipe still holds its bytes: the flush sends them */
	assert_int_equal(read(p[0], out, sizeof(out)), 6);
	assert_memory_equal(out, "m1\nm2\n", 6);
	assert_int_equal(write(p[1], "m3\n", 3), 3);
	assert_int_equal(zp_replay_tee(&rp, p[0], 3), 3);
	assert_int_equal(rp.end, 9);
	/* The move comes after 6 bytes went out: m3 is still in the pipe. */
	s = take(&rp, ZP_FRAMING_LF, 6, &from, &rc);
	assert_int_equal(rc, 0);
	assert_int_equal(from, 0);
	assert_string_equal(s, "m1\nm2\n");
	free(s);
	zp_replay_free(&rp);
	close(p[0]);
	close(p[1]);
	close(fd);
}

/* Over many writes the window holds exactly the last bytes. */
static void
test_slide(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from, off = 0;
	int			 fd = devnull(), rc, i;
	char			 line[32], *s, want[64 * 1024];
	size_t			 n, wl;

	(void)state;
	zp_replay_init(&rp, 4096, fd, 1);
	for (i = 0; i < 5000; i++) {
		n = (size_t)snprintf(line, sizeof(line), "line %d\n", i);
		zp_replay_copy(&rp, line, n);
		off += n;
		assert_true(rp.end - rp.start <= 4096);
	}
	assert_int_equal(rp.end, off);
	assert_int_equal(rp.end - rp.start, 4096);
	s = take(&rp, ZP_FRAMING_LF, off, &from, &rc);
	assert_int_equal(rc, 0);
	/* the lines whose start is held, up to the last */
	wl = 0;
	want[0] = '\0';
	for (i = 4999; i >= 0; i--) {
		n = (size_t)snprintf(line, sizeof(line), "line %d\n", i);
		if (wl + n > off - from)
			break;
		memmove(want + n, want, wl + 1);
		memcpy(want, line, n);
		wl += n;
	}
	assert_int_equal(strlen(s), off - from);
	assert_string_equal(s, want);
	assert_true(off - from > 4096 - 16);
	free(s);
	zp_replay_free(&rp);
	close(fd);
}

/*
 * Splice mode, a stream of small segments: each tee'd segment takes a
 * piece of the pipe, and a pipe of the window's size has window/4096 of
 * them. The store still keeps 3/4 of the window (compacting its pieces
 * into pages), not 256 segments: what a stalled collector did not
 * acknowledge (up to half the window: its send buffer) is there to go
 * again. Each segment is read out of the data pipe before the next is
 * written, so that each is a page of its own there and a piece of its own
 * in the replay, as each segment splice reads from a socket is. (Not a
 * packet pipe: tee keeps a packet's flag, and a read that ends inside a
 * packet drops the rest of it.)
 */
static void
test_tee_small(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from, off = 0;
	int			 fd = devnull(), rc, p[2], i;
	char			 seg[200], *s, *want;
	size_t			 window = 256 * 1024, n, total = 4 * window;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_non_null(want = malloc(total));
	/* not roomy: a pipe of the window's size, 64 pieces */
	zp_replay_init(&rp, window, fd, 0);
	for (i = 0; off + sizeof(seg) <= total; i++) {
		memset(seg, 'a' + i % 26, sizeof(seg));
		n = (size_t)snprintf(seg, sizeof(seg), "%d ", i);
		seg[n] = 'x';
		seg[sizeof(seg) - 1] = '\n';
		assert_int_equal(write(p[1], seg, sizeof(seg)), sizeof(seg));
		assert_int_equal(zp_replay_tee(&rp, p[0], sizeof(seg)),
		    sizeof(seg));
		assert_int_equal(read(p[0], want + off, sizeof(seg)),
		    sizeof(seg));
		off += sizeof(seg);
		assert_true(rp.end - rp.start <= window);
	}
	assert_int_equal(rp.end, off);
	assert_true(rp.end - rp.start >= window - window / 4 - 16384);
	assert_true(rp.compactions > 0);
	s = take(&rp, ZP_FRAMING_LF, off, &from, &rc);
	assert_int_equal(rc, 0);
	assert_true(off - from >= window - window / 4 - 16384);
	assert_int_equal(strlen(s), off - from);
	assert_memory_equal(s, want + from, off - from);
	free(s);
	free(want);
	zp_replay_free(&rp);
	close(p[0]);
	close(p[1]);
	close(fd);
}

/*
 * Splice mode, an upstream that stopped reading: the data pipe fills
 * and the flush sends nothing. What the replay keeps ahead of delivery
 * is an eighth of the window, so the bytes delivered and not
 * acknowledged are still there for the move; they were all pushed out
 * when a whole pipe could be tee'd ahead.
 */
static void
test_tee_ahead(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from, off = 0;
	int			 fd = devnull(), rc, p[2];
	char			 line[64], *s, big[64 * 1024];
	size_t			 window = 64 * 1024, n, t;

	(void)state;
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_true(fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= 1 << 20);
	zp_replay_init(&rp, window, fd, 1);
	/* A window's worth delivered: tee'd, then sent by the flush. */
	while (off < window) {
		n = (size_t)snprintf(line, sizeof(line), "delivered %llu\n",
		    (unsigned long long)off);
		assert_int_equal(write(p[1], line, n), n);
		assert_int_equal(zp_replay_tee(&rp, p[0], n), n);
		assert_int_equal(read(p[0], big, n), n);
		off += n;
	}
	/* The upstream stalls: the pipe holds 64 KiB that cannot go. */
	memset(big, 'w', sizeof(big));
	assert_int_equal(write(p[1], big, sizeof(big)), sizeof(big));
	t = zp_replay_tee(&rp, p[0], sizeof(big));
	assert_true(t > 0 && t <= window / 8);
	/* The move: delivered up to off, all of it but the ahead step. */
	s = take(&rp, ZP_FRAMING_LF, off, &from, &rc);
	assert_int_equal(rc, 0);
	assert_true(off - from >= window - window / 8 - 64);
	assert_memory_equal(s, "delivered ", 10);
	free(s);
	zp_replay_free(&rp);
	close(p[0]);
	close(p[1]);
	close(fd);
}

/* The start-up check: a pipe of the window's size, or EPERM-like. */
static void
test_pipe(void **state)
{
	struct zp_pipe	p;

	(void)state;
	assert_int_equal(zp_replay_pipe(65536, &p), 0);
	assert_true(fcntl(p.wfd, F_GETPIPE_SZ) >= 65536);
	close(p.rfd);
	close(p.wfd);
	assert_int_equal(zp_replay_pipe((size_t)1 << 40, &p), -1);
}

/*
 * No pipe to be had (a window no kernel gives): nothing is kept, the
 * stream goes on, and a move learns why once, then it may try again.
 */
static void
test_no_pipe(void **state)
{
	struct zp_replay	 rp;
	uint64_t		 from;
	int			 fd = devnull(), rc, err;
	char			*s;

	(void)state;
	zp_replay_init(&rp, (size_t)1 << 40, fd, 1);
	zp_replay_copy(&rp, "a\nb\n", 4);
	assert_int_equal(rp.end, 4);
	assert_int_equal(rp.start, 4);
	s = take(&rp, ZP_FRAMING_LF, 4, &from, &rc);
	assert_int_equal(rc, -1);
	free(s);
	err = zp_replay_retry(&rp);
	assert_true(err != 0);
	assert_int_equal(zp_replay_retry(&rp), 0);
	zp_replay_free(&rp);
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_copy_all),
		cmocka_unit_test(test_copy_window),
		cmocka_unit_test(test_nul),
		cmocka_unit_test(test_octet_marks),
		cmocka_unit_test(test_reset),
		cmocka_unit_test(test_tee),
		cmocka_unit_test(test_tee_small),
		cmocka_unit_test(test_tee_ahead),
		cmocka_unit_test(test_slide),
		cmocka_unit_test(test_pipe),
		cmocka_unit_test(test_no_pipe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
