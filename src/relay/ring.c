/*
 * ring.c - a relay context's io_uring and its eventfd in the loop
 * (experimental, issue 30); see ring.h.
 *
 * Set-up flags: SINGLE_ISSUER | COOP_TASKRUN | R_DISABLED, and a CQ of
 * ZP_RING_CQ entries.
 *
 * Not DEFER_TASKRUN, although it is what the experiment
 * (contrib/bench/uring-relay.c) ran with: there the thread waits in
 * io_uring_enter, here it waits in libevent's epoll_wait and learns of
 * completions from the eventfd. With DEFER_TASKRUN the eventfd is
 * signalled when the first deferred completion is queued, and on this
 * kernel (6.18) that signal came 16 to 32 ms late: a 100-byte ping-pong
 * through one pair took 32 ms a round trip (p50) instead of 0.07 ms
 * with COOP_TASKRUN, measured with the same build. COOP_TASKRUN posts
 * completions as task work run when the thread next enters or leaves
 * the kernel, without an IPI; it cuts an epoll_wait short (EINTR,
 * which libevent retries), and the eventfd is signalled as the CQE is
 * posted.
 *
 * SINGLE_ISSUER's one submitter is the thread that made the ring,
 * unless it was made disabled: then it is the thread that enables it.
 * Contexts are made on the main thread (before the privileges drop and
 * the seccomp filter) and run on their own, so the ring is made
 * disabled and each loop enables its own (zp_ring_start); without
 * R_DISABLED a worker's first submit fails with EEXIST.
 */

#ifdef ZP_HAVE_IO_URING
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <liburing.h>

#include "relay/ring.h"

/*
 * Completions the CQ holds. Each pair has up to four requests in flight
 * (a recv and a send each way); the kernel keeps what overflows
 * (IORING_FEAT_NODROP) and liburing hands it over later, so this is a
 * matter of speed, not of correctness.
 */
#define ZP_RING_CQ	8192

struct zp_ring {
	struct io_uring	 ring;
	int		 efd;		/* the kernel signals completions here */
	struct event	*ev;		/* efd readable: reap */
	unsigned long	 inflight;	/* requests with an op, not reaped */
	int		 started;
};

/* Hand every completion that is ready to its op. */
static void
ring_reap(struct zp_ring *r)
{
	struct io_uring_cqe	*cqe;
	struct zp_ring_op	*op;
	int			 res;

	for (;;) {
		if (io_uring_peek_cqe(&r->ring, &cqe) != 0)
			break;
		/* Read it before done() runs: it may queue or free. */
		op = (struct zp_ring_op *)(uintptr_t)io_uring_cqe_get_data64(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&r->ring, cqe);
		if (op == NULL)
			continue;	/* zp_ring_free's cancel-all */
		r->inflight--;
		op->done(op, res);
	}
}

/*
 * The eventfd says completions wait: reap them. (No io_uring_get_events:
 * the completions' task work has run by the time read(2) returns, and
 * liburing flushes an overflowed CQ itself when it sees the flag.)
 */
static void
ring_event_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_ring	*r = arg;
	uint64_t	 n;

	(void)what;
	/* Read first: what completes after it signals again. */
	(void)read(fd, &n, sizeof(n));
	ring_reap(r);
}

/* The opcodes a ring takes (zp_ring_new registers them). */
static struct io_uring_restriction ring_allowed[] = {
	{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_RECV },
	{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_SEND },
	{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_ASYNC_CANCEL },
	{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_NOP },
};

struct zp_ring *
zp_ring_new(struct event_base *base, unsigned entries, char *err,
    size_t errlen)
{
	struct io_uring_params	 par;
	struct zp_ring		*r;
	int			 rc;

	if ((r = calloc(1, sizeof(*r))) == NULL) {
		snprintf(err, errlen, "io_uring: %s", strerror(errno));
		return NULL;
	}
	r->efd = -1;
	memset(&par, 0, sizeof(par));
	par.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN |
	    IORING_SETUP_R_DISABLED | IORING_SETUP_CQSIZE;
	par.cq_entries = ZP_RING_CQ;
	if ((rc = io_uring_queue_init_params(entries, &r->ring, &par)) < 0) {
		snprintf(err, errlen, "io_uring_setup: %s", strerror(-rc));
		free(r);
		return NULL;
	}
	if ((r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		snprintf(err, errlen, "io_uring: eventfd: %s", strerror(errno));
		goto fail;
	}
	if ((rc = io_uring_register_eventfd(&r->ring, r->efd)) < 0) {
		snprintf(err, errlen, "io_uring_register(eventfd): %s",
		    strerror(-rc));
		goto fail;
	}
	/*
	 * What the ring may do, fixed while it is still disabled: the
	 * relay's requests (recv, send, cancel, no-op), no SQE flags, and
	 * no register call once it is enabled. The seccomp filter does not
	 * see what a ring does; this allow-list is the ring's own.
	 */
	/* liburing 2.3 declares io_uring_register_restrictions, exports not. */
	if (syscall(__NR_io_uring_register, r->ring.ring_fd,
	    IORING_REGISTER_RESTRICTIONS, ring_allowed,
	    sizeof(ring_allowed) / sizeof(ring_allowed[0])) == -1) {
		snprintf(err, errlen, "io_uring_register(restrictions): %s",
		    strerror(errno));
		goto fail;
	}
	if ((r->ev = event_new(base, r->efd, EV_READ | EV_PERSIST,
	    ring_event_cb, r)) == NULL || event_add(r->ev, NULL) == -1) {
		snprintf(err, errlen, "io_uring: cannot watch its eventfd");
		goto fail;
	}
	return r;
fail:
	if (r->ev != NULL)
		event_free(r->ev);
	if (r->efd != -1)
		close(r->efd);
	io_uring_queue_exit(&r->ring);
	free(r);
	return NULL;
}

int
zp_ring_start(struct zp_ring *r)
{
	if (r->started)
		return 0;
	/* liburing 2.3 declares io_uring_enable_rings but does not export it. */
	if (syscall(__NR_io_uring_register, r->ring.ring_fd,
	    IORING_REGISTER_ENABLE_RINGS, NULL, 0) == -1)
		return -1;
	r->started = 1;
	return 0;
}

struct io_uring_sqe *
zp_ring_sqe(struct zp_ring *r, struct zp_ring_op *op)
{
	struct io_uring_sqe	*sqe;

	if ((sqe = io_uring_get_sqe(&r->ring)) == NULL) {
		/* Full: what is queued goes now, in its order. */
		if (io_uring_submit(&r->ring) < 0 ||
		    (sqe = io_uring_get_sqe(&r->ring)) == NULL)
			return NULL;
	}
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)op);
	if (op != NULL)
		r->inflight++;
	return sqe;
}

unsigned
zp_ring_submit(struct zp_ring *r)
{
	if (io_uring_sq_ready(&r->ring) > 0)
		(void)io_uring_submit(&r->ring);
	/*
	 * Completions posted inline during the submit may have found the
	 * eventfd read already in this pass: reap them in the next one
	 * rather than trust a signal.
	 */
	if (io_uring_cq_ready(&r->ring) > 0)
		event_active(r->ev, EV_READ, 0);
	/* What the kernel did not take (out of memory): still queued. */
	return io_uring_sq_ready(&r->ring);
}

void
zp_ring_neuter(struct zp_ring *r, int (*owns)(void *, uint64_t), void *arg)
{
	struct io_uring_sq	*sq = &r->ring.sq;
	struct io_uring_sqe	*sqe;
	unsigned		 pos;
	uint64_t		 data;

	/* The queued ones, from the kernel's head (liburing's array is 1:1). */
	for (pos = *sq->khead; pos != sq->sqe_tail; pos++) {
		sqe = &sq->sqes[pos & sq->ring_mask];
		data = sqe->user_data;
		if (owns(arg, data)) {
			io_uring_prep_nop(sqe);
			io_uring_sqe_set_data64(sqe, data);
		}
	}
}

unsigned long
zp_ring_inflight(const struct zp_ring *r)
{
	return r->inflight;
}

/*
 * Every pair is closed by now (their requests cancelled as they closed);
 * what is still in flight is cancelled again, all at once, and every
 * completion reaped, so that no buffer is the kernel's when its owner
 * frees it.
 */
void
zp_ring_free(struct zp_ring *r)
{
	struct io_uring_sqe	*sqe;
	struct __kernel_timespec ts = { 0, 100 * 1000 * 1000 };
	struct io_uring_cqe	*cqe;
	int			 tries = 0;

	if (r == NULL)
		return;
	if (r->started) {
		while (r->inflight > 0 && tries++ < 50) {
			if ((sqe = zp_ring_sqe(r, NULL)) != NULL)
				io_uring_prep_cancel64(sqe, 0,
				    IORING_ASYNC_CANCEL_ANY);
			/* Not the ring's thread (SINGLE_ISSUER): give up. */
			if (io_uring_submit_and_wait_timeout(&r->ring, &cqe,
			    1, &ts, NULL) == -EEXIST)
				break;
			ring_reap(r);
		}
	}
	if (r->ev != NULL)
		event_free(r->ev);
	/* Exiting the ring cancels whatever is left, on the kernel's side. */
	io_uring_queue_exit(&r->ring);
	if (r->efd != -1)
		close(r->efd);
	free(r);
}

#else	/* !ZP_HAVE_IO_URING */

#include <stdio.h>

#include "relay/ring.h"

/* Built without io_uring: --io-uring was refused before this is asked. */
struct zp_ring *
zp_ring_new(struct event_base *base, unsigned entries, char *err,
    size_t errlen)
{
	snprintf(err, errlen, "built without io_uring");
	return NULL;
}

int
zp_ring_start(struct zp_ring *r)
{
	return 0;
}

struct io_uring_sqe *
zp_ring_sqe(struct zp_ring *r, struct zp_ring_op *op)
{
	return NULL;
}

unsigned
zp_ring_submit(struct zp_ring *r)
{
	return 0;
}

void
zp_ring_neuter(struct zp_ring *r, int (*owns)(void *, uint64_t), void *arg)
{
}

unsigned long
zp_ring_inflight(const struct zp_ring *r)
{
	return 0;
}

void
zp_ring_free(struct zp_ring *r)
{
}

#endif
