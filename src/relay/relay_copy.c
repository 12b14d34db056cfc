/*
 * relay_copy.c - recv/send through a per-direction buffer: the mode for
 * wherever splice cannot go, and the honest baseline; its buffer store
 * is the TLS backend's too (relay_store.h).
 */

#include <sys/socket.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "lib/bufcache.h"
#include "relay/ctx.h"
#include "relay/mirror.h"
#include "relay/relay.h"
#include "relay/relay_store.h"

/*
 * After a move, drop what the store holds of the frame whose start went
 * to the old destination (cutting happens only with a store that was
 * empty before this read). Returns 0, or -1 with EPROTO when the framing
 * failed before the frame ended.
 */
static int
copy_cut(struct zp_dir *d)
{
	struct zp_dframe	*fr = d->fr;
	size_t			 k;

	k = zp_framer_next(&fr->f, d->buf + d->off, d->len);
	if (k == 0)
		k = d->len;
	else
		zp_dframe_cut(fr, 0);
	/* The frame that ends here was not delivered: fed, not counted. */
	zp_dir_cut(d, k);
	if (zp_framer_error(&fr->f, NULL) != NULL) {
		zp_dframe_cut(fr, 0);
		errno = EPROTO;
		return -1;
	}
	if (!zp_dframe_cutting(fr))
		fr->last_mark = fr->sent;
	return 0;
}

/* The plain socket: a UDP source's feed first, then the socket. */
ssize_t
zp_half_recv(struct zp_half *h, void *buf, size_t len)
{
	ssize_t	n;

	if (h->feed != NULL && h->feed->buf != NULL &&
	    evbuffer_get_length(h->feed->buf) > 0)
		return evbuffer_remove(h->feed->buf, buf, len);
	do {
		n = recv(h->fd, buf, len, 0);
	} while (n == -1 && errno == EINTR);
	return n;
}

ssize_t
zp_half_send(struct zp_half *h, const void *buf, size_t len)
{
	ssize_t	n;

	do {
		n = send(h->fd, buf, len, MSG_NOSIGNAL);
	} while (n == -1 && errno == EINTR);
	return n;
}

/*
 * Source -> buffer. The buffer is allocated on the first read, so an idle
 * connection costs no buffer memory. Returns bytes read, 0 on EOF, -1 with
 * errno (EAGAIN with d->full set when the buffer is what stopped it).
 */
ssize_t
zp_store_fill(struct zp_dir *d, size_t max, zp_half_read_fn *rd,
    int short_empty)
{
	size_t	space;
	ssize_t	n;

	if (d->buf == NULL) {
		if ((d->buf = zp_buf_get(d->bufs, d->bufsize)) == NULL) {
			errno = ENOMEM;
			return -1;
		}
		d->off = d->len = 0;
	}
	if (d->len == 0)
		d->off = 0;
	space = d->bufsize - d->off - d->len;
	if (space == 0 && d->off > 0) {
		memmove(d->buf, d->buf + d->off, d->len);
		d->off = 0;
		space = d->bufsize - d->len;
	}
	if (space == 0) {
		d->full = 1;
		errno = EAGAIN;
		return -1;
	}
	if (space > max)
		space = max;
	n = rd(d->src, d->buf + d->off + d->len, space);
	if (n > 0) {
		/* As read: a move's cut or replay is not the client's. */
		if (d->mir != NULL)
			zp_mirror_copy(d->mir, d->buf + d->off + d->len,
			    (size_t)n);
		d->len += n;
		if (d->fr != NULL && zp_dframe_cutting(d->fr) && copy_cut(d) == -1)
			return -1;
		if ((size_t)n < space && short_empty)
			d->drained = 1;	/* TCP hands over all it has */
		else if (d->off == 0 && d->len == d->bufsize)
			d->full = 1;
	} else if (n == -1 && errno == EAGAIN)
		d->drained = 1;
	return n;
}

/* Buffer -> destination. Returns bytes sent or -1 with errno. */
ssize_t
zp_store_flush(struct zp_dir *d, zp_half_write_fn *wr, size_t atleast)
{
	size_t	len = d->len;
	ssize_t	n;

	if (d->flush_max > 0 && d->flush_max < len)
		len = d->flush_max;
	if (len < atleast)
		len = atleast < d->len ? atleast : d->len;
	n = wr(d->dst, d->buf + d->off, len);
	if (n > 0) {
		if (d->fr != NULL)
			zp_dframe_seen(d->fr, d->buf + d->off, (size_t)n);
		d->off += n;
		d->len -= n;
		if (d->len == 0)
			d->off = 0;
	}
	return n;
}

size_t
zp_store_pending(const struct zp_dir *d)
{
	return d->len;
}

void
zp_store_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	zp_buf_put(d->bufs, d->buf, d->bufsize);
	d->buf = NULL;
	d->off = d->len = 0;
}

/*
 * An idle connection holds no buffer: thousands of quiet log clients must
 * not pin 2 x --buffer-size each. The buffer goes back to the context's
 * cache, where the next pass of any pair of this thread takes it.
 */
void
zp_store_trim(struct zp_dir *d)
{
	zp_store_release(NULL, d);
}

static ssize_t
copy_fill(struct zp_dir *d, size_t max)
{
	return zp_store_fill(d, max, zp_half_recv, 1);
}

static ssize_t
copy_flush(struct zp_dir *d)
{
	return zp_store_flush(d, zp_half_send, 0);
}

const struct zp_relay_ops zp_relay_copy = {
	.name = "copy",
	.fill = copy_fill,
	.flush = copy_flush,
	.pending = zp_store_pending,
	.release = zp_store_release,
	.trim = zp_store_trim,
};
