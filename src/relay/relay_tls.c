/*
 * relay_tls.c - the TLS backend: the copy backend's buffer store, with
 * each half that has a TLS session read and written through it
 * (tls/tls_io.h) and each plain one as copy does, so that one backend
 * serves TLS to plain, plain to TLS and TLS to TLS.
 *
 * Two things differ from copy. A TLS read hands over one record at a
 * time, so a short read says nothing about what the socket holds: the
 * direction reads on until EAGAIN. And a write that fell short left
 * bytes committed inside OpenSSL: the next write offers them again,
 * even past where a seeking direction would stop (the seek then ends at
 * the boundary after).
 */

#include "relay/relay.h"
#include "relay/relay_store.h"
#include "tls/tls_io.h"

static ssize_t
tls_half_read(struct zp_half *h, void *buf, size_t len)
{
	return h->tls != NULL ? zp_tls_read(h->tls, buf, len) :
	    zp_half_recv(h, buf, len);
}

static ssize_t
tls_half_write(struct zp_half *h, const void *buf, size_t len)
{
	return h->tls != NULL ? zp_tls_write(h->tls, buf, len) :
	    zp_half_send(h, buf, len);
}

static ssize_t
tls_fill(struct zp_dir *d, size_t max)
{
	return zp_store_fill(d, max, tls_half_read, d->src->tls == NULL);
}

static ssize_t
tls_flush(struct zp_dir *d)
{
	return zp_store_flush(d, tls_half_write, d->dst->tls != NULL ?
	    zp_tls_write_committed(d->dst->tls) : 0);
}

const struct zp_relay_ops zp_relay_tls = {
	.name = "tls",
	.fill = tls_fill,
	.flush = tls_flush,
	.pending = zp_store_pending,
	.release = zp_store_release,
	.trim = zp_store_trim,
};
