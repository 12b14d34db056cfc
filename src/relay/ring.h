/*
 * ring.h - a relay context's io_uring (experimental, issue 30; built with
 * --enable-io-uring, used with --io-uring): one ring per context, its
 * completions announced to the context's libevent loop by an eventfd.
 *
 * Contract:
 * - Every request carries, as user_data, a struct zp_ring_op that its
 *   owner keeps alive until that request's completion was handed to
 *   op->done (never the pair, which may be freed first: relay_ring.c
 *   keeps its op records in an allocation that outlives the pair).
 * - Requests queued with zp_ring_sqe() go to the kernel at the end of
 *   the loop's pass (zp_ring_submit, from zp_ctx_loop), one system call
 *   for all of them; or earlier when the submission queue is full.
 * - Completions are reaped by the eventfd's event, in the loop: op->done
 *   may queue more requests and may free what holds op.
 * - zp_ring_free() cancels what is still in flight and waits for every
 *   completion before it unmaps the ring.
 *
 * io_uring's requests are not seen by seccomp: a recv or send made
 * through the ring is not checked against the sandbox's allow-list
 * (ops/sandbox.c lets io_uring_enter and _register through when a ring
 * is in use). The ring has an allow-list of its own instead, registered
 * while it is disabled: recv, send, cancel and no-op requests, no SQE
 * flags, and no register call once it is enabled; anything else
 * completes with -EACCES without running.
 */
#ifndef ZP_RING_H
#define ZP_RING_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct io_uring_sqe;
struct zp_ring;

/* Submission slots of each context's ring (more are submitted early). */
#define ZP_RING_ENTRIES	1024

struct zp_ring_op {
	/* res: the CQE's (bytes, or -errno). */
	void	(*done)(struct zp_ring_op *, int res);
};

/*
 * A ring of `entries` submission slots for a context whose loop runs on
 * base, made disabled (IORING_SETUP_R_DISABLED): it may be made on the
 * main thread before the privileges drop, and is enabled by
 * zp_ring_start() on the thread that runs the loop, which becomes its
 * only submitter. NULL with err filled.
 */
struct zp_ring	*zp_ring_new(struct event_base *, unsigned entries, char *err,
		    size_t errlen);

/* On the loop's own thread, before its first pass: 0, or -1 with errno. */
int		 zp_ring_start(struct zp_ring *);

/*
 * A submission slot for op (user_data set), or NULL when the ring cannot
 * take one (a failed submit): the caller treats it as ENOMEM.
 */
struct io_uring_sqe *zp_ring_sqe(struct zp_ring *, struct zp_ring_op *);

/*
 * Hand what was queued to the kernel: at the end of a loop pass, and
 * before a descriptor named by a queued request is closed. Returns how
 * many requests the kernel did not take (out of memory): still queued.
 */
unsigned	 zp_ring_submit(struct zp_ring *);

/*
 * Make the queued requests whose user_data owns(arg, user_data) says
 * are the caller's into no-ops, their user_data kept: they complete
 * without touching a descriptor about to close.
 */
void		 zp_ring_neuter(struct zp_ring *, int (*owns)(void *, uint64_t),
		    void *arg);

/* Requests queued or in flight. */
unsigned long	 zp_ring_inflight(const struct zp_ring *);

/* Cancel what is in flight, reap every completion, free. NULL is fine. */
void		 zp_ring_free(struct zp_ring *);

#endif
