/*
 * connect.c - the one non-blocking connect with a timeout. See connect.h.
 */

#include <assert.h>
#include <errno.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/connect.h"
#include "core/net.h"

void
zp_connecting_init(struct zp_connecting *c)
{
	c->fd = -1;
	c->ev = NULL;
}

/* Begin a connect; see connect.h for the three outcomes. */
int
zp_connecting_start(struct zp_connecting *c, struct event_base *base,
    const struct zp_addr *to, const struct zp_addr *src, int flags,
    const struct timeval *timeout, event_callback_fn cb, void *arg)
{
	int	rc;

	assert(c->fd == -1 && c->ev == NULL);
	rc = zp_connect_start_from(to, src, (flags & ZP_CONNECT_TRANSPARENT) !=
	    0, &c->fd);
	if (rc == -1) {
		c->fd = -1;
		return -1;
	}
	if (rc == 0 && !(flags & ZP_CONNECT_DEFER))
		return 0;
	/* A connected socket is writable: a deferred one fires next turn. */
	if ((c->ev = event_new(base, c->fd, EV_WRITE, cb, arg)) == NULL ||
	    event_add(c->ev, timeout) == -1) {
		zp_connecting_cancel(c);
		errno = ENOMEM;
		return -1;
	}
	return 1;
}

/* The outcome, in the connect's callback. */
int
zp_connecting_result(struct zp_connecting *c, short what)
{
	int	err;

	assert(c->fd != -1 && c->ev != NULL);
	err = zp_connect_result(c->fd, what);
	event_free(c->ev);
	c->ev = NULL;
	return err;
}

/* The socket is the caller's from now on. */
int
zp_connecting_take(struct zp_connecting *c)
{
	int	fd = c->fd;

	assert(c->ev == NULL);
	c->fd = -1;
	return fd;
}

/* Nothing of the connect is left. */
void
zp_connecting_cancel(struct zp_connecting *c)
{
	if (c->ev != NULL)
		event_free(c->ev);
	c->ev = NULL;
	if (c->fd != -1)
		close(c->fd);
	c->fd = -1;
}
