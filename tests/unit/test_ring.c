/*
 * test_ring.c - unit tests for relay/ring.c: a context's io_uring takes
 * the relay's requests and hands each completion to its op, and refuses
 * every other opcode (the allow-list registered while the ring is
 * disabled: the ring's own sandbox, since seccomp does not see what a
 * ring does).
 *
 * A build without io_uring has no ring to make: its zp_ring_new() must
 * say so and return NULL, which is what test_unavailable checks there.
 */

#include <sys/socket.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <event2/event.h>

#include "relay/ring.h"

#ifdef ZP_HAVE_IO_URING
#include <liburing.h>

struct rec {
	struct zp_ring_op	op;
	int			done;
	int			res;
};

static void
rec_done(struct zp_ring_op *op, int res)
{
	struct rec	*r = (struct rec *)op;

	r->done++;
	r->res = res;
}

/* A started ring on a fresh base; both freed by ring_down(). */
static struct zp_ring *
ring_up(struct event_base **base)
{
	struct zp_ring	*ring;
	char		 err[256];

	*base = event_base_new();
	assert_non_null(*base);
	ring = zp_ring_new(*base, 8, err, sizeof(err));
	if (ring == NULL)
		fail_msg("zp_ring_new: %s", err);
	assert_int_equal(zp_ring_start(ring), 0);
	return ring;
}

static void
ring_down(struct zp_ring *ring, struct event_base *base)
{
	zp_ring_free(ring);
	event_base_free(base);
}

/* Submit, then run the loop until rec completed (at most ~2 s). */
static void
run_until(struct zp_ring *ring, struct event_base *base, struct rec *r)
{
	struct timeval	tv = { 0, 20 * 1000 };
	int		i;

	(void)zp_ring_submit(ring);
	for (i = 0; i < 100 && r->done == 0; i++) {
		(void)event_base_loopexit(base, &tv);
		(void)event_base_loop(base, EVLOOP_ONCE);
	}
	assert_int_equal(r->done, 1);
}

static void
test_nop_completes(void **state)
{
	struct event_base	*base;
	struct zp_ring		*ring = ring_up(&base);
	struct rec		 r = { .op.done = rec_done, .res = -1 };
	struct io_uring_sqe	*sqe;

	(void)state;
	assert_non_null(sqe = zp_ring_sqe(ring, &r.op));
	io_uring_prep_nop(sqe);
	assert_int_equal(zp_ring_inflight(ring), 1);
	run_until(ring, base, &r);
	assert_int_equal(r.res, 0);
	assert_int_equal(zp_ring_inflight(ring), 0);
	ring_down(ring, base);
}

/* A recv and a send on a socket pair: the relay's own requests work. */
static void
test_recv_send(void **state)
{
	struct event_base	*base;
	struct zp_ring		*ring = ring_up(&base);
	struct rec		 s = { .op.done = rec_done, .res = -1 };
	struct rec		 r = { .op.done = rec_done, .res = -1 };
	struct io_uring_sqe	*sqe;
	char			 got[8] = { 0 };
	int			 sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_non_null(sqe = zp_ring_sqe(ring, &s.op));
	io_uring_prep_send(sqe, sv[0], "ring", 4, 0);
	run_until(ring, base, &s);
	assert_int_equal(s.res, 4);
	assert_non_null(sqe = zp_ring_sqe(ring, &r.op));
	io_uring_prep_recv(sqe, sv[1], got, sizeof(got), 0);
	run_until(ring, base, &r);
	assert_int_equal(r.res, 4);
	assert_memory_equal(got, "ring", 4);
	close(sv[0]);
	close(sv[1]);
	ring_down(ring, base);
}

/*
 * Anything else is refused by the kernel (EACCES), not run: a read
 * of a pipe that holds a byte, which would succeed on a ring without
 * the allow-list.
 */
static void
test_other_ops_refused(void **state)
{
	struct event_base	*base;
	struct zp_ring		*ring = ring_up(&base);
	struct rec		 r = { .op.done = rec_done, .res = 0 };
	struct io_uring_sqe	*sqe;
	char			 c = 'x', got = 0;
	int			 p[2];

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_int_equal(write(p[1], &c, 1), 1);
	assert_non_null(sqe = zp_ring_sqe(ring, &r.op));
	io_uring_prep_read(sqe, p[0], &got, 1, 0);
	run_until(ring, base, &r);
	assert_int_equal(r.res, -EACCES);
	assert_int_equal(got, 0);
	/* The byte is still there: the read never ran. */
	assert_int_equal(read(p[0], &got, 1), 1);
	assert_int_equal(got, 'x');
	close(p[0]);
	close(p[1]);
	ring_down(ring, base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nop_completes),
		cmocka_unit_test(test_recv_send),
		cmocka_unit_test(test_other_ops_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#else	/* !ZP_HAVE_IO_URING */

static void
test_unavailable(void **state)
{
	struct event_base	*base;
	char			 err[256] = "";

	(void)state;
	assert_non_null(base = event_base_new());
	assert_null(zp_ring_new(base, 8, err, sizeof(err)));
	assert_non_null(strstr(err, "without io_uring"));
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unavailable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}

#endif
