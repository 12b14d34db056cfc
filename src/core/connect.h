/*
 * connect.h - the one non-blocking TCP connect with a timeout: a socket,
 * from a source address or not, and the one-shot write event that says
 * how its connect went. Pairs, planned moves, health checks, mirrors and
 * the spool all begin their connects here.
 *
 * The socket has one owner at any time: the struct zp_connecting while
 * its fd is not -1, until zp_connecting_take() hands it to the caller or
 * zp_connecting_cancel() closes it. Its fields are read by callers,
 * written only here.
 */
#ifndef ZP_CONNECT_H
#define ZP_CONNECT_H

#include <sys/time.h>
#include <event2/event.h>

struct zp_addr;

struct zp_connecting {
	int		 fd;	/* -1: none */
	struct event	*ev;	/* pending while the connect is in progress */
};

/* src may be another host's address (IP_TRANSPARENT, --source client). */
#define ZP_CONNECT_TRANSPARENT	0x01
/*
 * A connect done at once is reported from the loop too, not by the
 * return value: for a caller that must not act on it inside the function
 * that began it (a planned move, begun from another pair's callback).
 */
#define ZP_CONNECT_DEFER	0x02

/* An empty one: no socket, no event. */
void	zp_connecting_init(struct zp_connecting *);

/*
 * Begin a connect to `to` on base, bound to src first when it is not
 * NULL (--source). c must be empty. Returns
 *  -1 with errno set and c empty: the socket, the bind or the connect
 *     failed at once, or ENOMEM when its event could not be made;
 *   0 connected at once (to a local address it usually is): c->fd is the
 *     socket, there is no event and cb is not called;
 *   1 in progress: cb(fd, what, arg) is called once from the loop, when
 *     the socket is writable or `timeout` (NULL: none) has passed; it
 *     calls zp_connecting_result().
 */
int	zp_connecting_start(struct zp_connecting *c, struct event_base *base,
	    const struct zp_addr *to, const struct zp_addr *src, int flags,
	    const struct timeval *timeout, event_callback_fn cb, void *arg);

/*
 * In cb: the connect's outcome, 0 when connected, else its errno
 * (ETIMEDOUT when the timeout passed). The event is freed either way;
 * c->fd stays c's, to be taken (connected) or cancelled (failed).
 */
int	zp_connecting_result(struct zp_connecting *c, short what);

/*
 * Hand the socket, connected, to the caller, who closes it from now on;
 * c is empty. Not while the event is pending.
 */
int	zp_connecting_take(struct zp_connecting *c);

/* Free the event and close the socket, in any state; c is empty. */
void	zp_connecting_cancel(struct zp_connecting *c);

#endif
