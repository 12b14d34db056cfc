/*
 * relay_half.c - one socket of a pair: its read and write events, turned
 * on and off only when they change, and the bytes it holds that no
 * socket event announces (a UDP source's feed, OpenSSL's buffer).
 */

#include <errno.h>
#include <stdlib.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "relay/relay.h"
#include "tls/tls_io.h"

/*
 * Bytes a half has for its reader that no socket event will announce: a
 * UDP source's feed, what OpenSSL decrypted or buffered.
 */
int
zp_half_holds(const struct zp_half *h)
{
	if (h->feed != NULL && h->feed->buf != NULL &&
	    evbuffer_get_length(h->feed->buf) > 0)
		return 1;
	return h->tls != NULL && zp_tls_pending(h->tls);
}

/*
 * Add or delete the read event only when its state changes. A dead half
 * may still be read: what its kernel acknowledged before the reset waits
 * in its receive queue.
 */
void
zp_half_want_read(struct zp_half *h, int on)
{
	on = on && h->rev != NULL;
	if (on == h->ron)
		return;
	if (on)
		event_add(h->rev, NULL);
	else
		event_del(h->rev);
	h->ron = on;
	/* What waits in a feed or a TLS session makes no socket readable. */
	if (on && zp_half_holds(h))
		event_active(h->rev, EV_READ, 0);
}

struct zp_feed *
zp_feed_new(struct evbuffer *buf)
{
	struct zp_feed	*f;

	if ((f = calloc(1, sizeof(*f))) == NULL)
		return NULL;
	f->buf = buf;
	f->refs = 2;
	return f;
}

void
zp_feed_unref(struct zp_feed *f)
{
	if (f != NULL && --f->refs == 0)
		free(f);
}

/* The half lets go of its feed; `tell`: the producer takes over. */
static void
half_feed_release(struct zp_half *h, int tell)
{
	struct zp_feed	*f = h->feed;

	if (f == NULL)
		return;
	h->feed = NULL;
	f->half = NULL;
	if (tell && f->detached != NULL && f->buf != NULL)
		f->detached(f->arg);
	zp_feed_unref(f);
}

void
zp_half_feed_drop(struct zp_half *h)
{
	half_feed_release(h, 0);
}

void
zp_half_feed_detach(struct zp_half *h)
{
	half_feed_release(h, 1);
}

void
zp_feed_kick(struct zp_feed *f)
{
	if (f->half != NULL && f->half->ron && f->half->rev != NULL)
		event_active(f->half->rev, EV_READ, 0);
}

/* Add or delete the write event only when its state changes. */
int
zp_half_want_write(struct zp_half *h, int on)
{
	on = on && !h->dead &&
	    (h->wev != NULL || (h->wcb != NULL && h->rev != NULL));
	if (on == h->won)
		return 0;
	if (on && h->wev == NULL && (h->wev = event_new(event_get_base(h->rev),
	    h->fd, EV_WRITE | EV_PERSIST, h->wcb,
	    event_get_callback_arg(h->rev))) == NULL) {
		errno = ENOMEM;
		return -1;
	}
	if (on)
		event_add(h->wev, NULL);
	else
		event_del(h->wev);
	h->won = on;
	return 0;
}
