/*
 * wake.h - make an event of one loop active from another thread without
 * taking that loop's lock.
 *
 * With libevent's threading on, event_active() from another thread takes
 * the target base's lock, which its own thread holds through most of a
 * loop pass: the other thread then waits (a futex) for a relay thread's
 * loop, and a relay thread for the I/O thread's. strace of a run with
 * every feature on counted 1,206 such waits of the main thread in 15 s.
 * A zp_wake is one eventfd per loop instead: another thread queues the
 * event under the wake's own small lock (held for an append, never while
 * anything else is done) and writes the eventfd when the queue was empty;
 * the loop's own thread reads it and makes each queued event active, as
 * event_active() from that thread (its own lock, uncontended).
 */
#ifndef ZP_WAKE_H
#define ZP_WAKE_H

struct event;
struct event_base;
struct zp_wake;

/*
 * A wake for the loop of base: its eventfd and read event (added). NULL
 * with errno (EMFILE, ENOMEM).
 */
struct zp_wake	*zp_wake_new(struct event_base *base);

/* Free it, on its loop's thread, once no other thread may post to it. */
void	zp_wake_free(struct zp_wake *);

/*
 * From any thread: ev, an event of that loop, runs there soon (as
 * event_active(ev, EV_TIMEOUT, 0)). The caller keeps ev alive until it
 * ran or zp_wake_forget() took it back. Out of memory, or with no wake
 * (NULL: a loop made without one), it is made active through the loop's
 * lock after all.
 */
void	zp_wake_post(struct zp_wake *, struct event *ev);

/*
 * On the loop's thread, before ev is freed: drop what is queued for it
 * (whoever posts it must no longer be able to: the caller's own lock
 * says so). NULL: nothing to do.
 */
void	zp_wake_forget(struct zp_wake *, struct event *ev);

#endif
