/*
 * udp_out.c - -u udp@: datagrams relayed as datagrams (udp_out.h).
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/upstream.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "relay/ctx.h"
#include "stream/udp.h"
#include "stream/udp_out.h"

/* A datagram that waits: its length, then its bytes. */
typedef uint32_t	udp_len_t;

/* One upstream's socket, connected to its first address. */
struct udp_out {
	struct udp_outs	*os;
	int		 idx;
	int		 fd;		/* -1: none yet */
	struct event	*rev;		/* refusals; what it answers */
	struct event	*wev;		/* while datagrams wait */
	struct evbuffer	*pending;	/* datagrams it did not take */
	unsigned	 sent:1;	/* one went since the last tick */
	unsigned	 refused:1;	/* ... and was refused */
	unsigned	 said:1;	/* an error of its own was logged */
};

struct udp_outs {
	struct zp_ctx		*ctx;
	struct zp_udp_tally	*t;
	void			(*resume)(void *);
	void			*arg;
	size_t			 pending;	/* bytes waiting, every upstream */
	struct udp_out		 o[ZP_MAX_UPSTREAMS];
};

static void	out_flush(struct udp_out *);

/*
 * The upstream refused a datagram (ICMP port or host unreachable, as the
 * kernel reports it on the connected socket): one lost, one failed
 * connect of the upstream.
 */
static void
out_refused(struct udp_out *o, int err)
{
	struct udp_outs	*os = o->os;
	struct timeval	 now;

	os->t->dropped[ZP_UDP_DROP_UNREACHABLE]++;
	o->refused = 1;
	zp_clock_now(&now);
	zp_upstream_connect_failed(os->ctx->ups, (size_t)o->idx);
	(void)zp_upstream_report(os->ctx->ups, (size_t)o->idx, 0, err, &now);
}

static int
out_refusal(int err)
{
	return err == ECONNREFUSED || err == EHOSTUNREACH ||
	    err == ENETUNREACH || err == EHOSTDOWN;
}

/* Refusals, and whatever the upstream sends back (dropped). */
static void
out_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct udp_out	*o = arg;
	char		 buf[512];
	int		 i;

	for (i = 0; i < 64; i++)
		if (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == -1) {
			if (out_refusal(errno))
				out_refused(o, errno);
			else
				break;
		}
}

static void
out_write_cb(evutil_socket_t fd, short what, void *arg)
{
	out_flush(arg);
}

/* The socket to upstream idx, made the first time. -1: it cannot be. */
static int
out_open(struct udp_out *o)
{
	struct zp_ctx	*ctx = o->os->ctx;
	struct zp_addr	 a;
	char		 name[ZP_UPSTREAM_NAMELEN];

	if (o->fd != -1)
		return 0;
	if (zp_upstream_addr(ctx->ups, (size_t)o->idx, 0, &a) == 0)
		return -1;
	if ((o->fd = socket(a.ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0)) == -1 ||
	    connect(o->fd, (struct sockaddr *)&a.ss, a.len) == -1 ||
	    (o->pending = evbuffer_new()) == NULL ||
	    (o->rev = event_new(ctx->base, o->fd, EV_READ | EV_PERSIST,
	    out_read_cb, o)) == NULL ||
	    (o->wev = event_new(ctx->base, o->fd, EV_WRITE | EV_PERSIST,
	    out_write_cb, o)) == NULL || event_add(o->rev, NULL) == -1) {
		if (!o->said) {
			o->said = 1;
			zp_log(ctx->log, ZP_LOG_WARN, "udp: %s: cannot make its "
			    "socket: %s", zp_upstream_label(ctx->ups,
			    (size_t)o->idx, name, sizeof(name)),
			    strerror(errno));
		}
		if (o->rev != NULL)
			event_free(o->rev);
		if (o->pending != NULL)
			evbuffer_free(o->pending);
		if (o->fd != -1)
			close(o->fd);
		o->rev = NULL;
		o->pending = NULL;
		o->fd = -1;
		return -1;
	}
	return 0;
}

/* A datagram of len bytes went to the upstream: counted as delivered. */
static void
out_sent(struct udp_out *o, size_t len)
{
	struct zp_stats	*st = &o->os->ctx->stats;

	o->sent = 1;
	st->all.up.bytes += len;
	st->ups[o->idx].up.bytes += len;
	st->ups[o->idx].up.frames++;
}

/*
 * Send one datagram; 1 when it went or is lost (said), 0 when the socket
 * could not take it now (it is to wait). A refusal reported on this send
 * is an earlier datagram's: the kernel did not send this one, so it goes
 * again.
 */
static int
out_try(struct udp_out *o, const void *d, size_t len)
{
	char	name[ZP_UPSTREAM_NAMELEN];
	int	i;

	for (i = 0; i < 2; i++) {
		if (send(o->fd, d, len, MSG_DONTWAIT) == (ssize_t)len) {
			out_sent(o, len);
			return 1;
		}
		if (out_refusal(errno)) {
			out_refused(o, errno);
			continue;
		}
		if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR)
			return 0;
		break;
	}
	/* A datagram the path cannot carry (EMSGSIZE), say. */
	o->os->t->dropped[ZP_UDP_DROP_UNREACHABLE]++;
	if (!o->said) {
		o->said = 1;
		zp_log(o->os->ctx->log, ZP_LOG_WARN, "udp: %s: a datagram of "
		    "%zu bytes not sent: %s (said once)", zp_upstream_label(
		    o->os->ctx->ups, (size_t)o->idx, name, sizeof(name)), len,
		    strerror(i < 2 ? errno : ECONNREFUSED));
	}
	return 1;
}

/* Keep a datagram the socket could not take, until it can. */
static void
out_queue(struct udp_out *o, const void *d, size_t len)
{
	udp_len_t	n = (udp_len_t)len;

	if (evbuffer_add(o->pending, &n, sizeof(n)) == -1 ||
	    evbuffer_add(o->pending, d, len) == -1) {
		o->os->t->dropped[ZP_UDP_DROP_NO_STREAM]++;
		return;
	}
	o->os->pending += sizeof(n) + len;
	if (evbuffer_get_length(o->pending) == sizeof(n) + len)
		(void)event_add(o->wev, NULL);
}

/* Send what waits, in order, as far as the socket takes it. */
static void
out_flush(struct udp_out *o)
{
	struct udp_outs	*os = o->os;
	udp_len_t	 n;
	unsigned char	*d;

	while (evbuffer_get_length(o->pending) >= sizeof(n)) {
		(void)evbuffer_copyout(o->pending, &n, sizeof(n));
		d = evbuffer_pullup(o->pending, (ev_ssize_t)(sizeof(n) + n));
		if (d == NULL || !out_try(o, d + sizeof(n), n))
			break;
		(void)evbuffer_drain(o->pending, sizeof(n) + n);
		os->pending -= sizeof(n) + n;
	}
	if (evbuffer_get_length(o->pending) == 0) {
		event_del(o->wev);
		os->resume(os->arg);
	}
}

struct udp_outs *
udp_outs_new(struct zp_ctx *ctx, struct zp_udp_tally *t,
    void (*resume)(void *), void *arg)
{
	struct udp_outs	*os;
	int		 i;

	if ((os = calloc(1, sizeof(*os))) == NULL)
		return NULL;
	os->ctx = ctx;
	os->t = t;
	os->resume = resume;
	os->arg = arg;
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++) {
		os->o[i].os = os;
		os->o[i].idx = i;
		os->o[i].fd = -1;
	}
	return os;
}

void
udp_outs_send(struct udp_outs *os, const void *d, size_t len,
    const struct zp_addr *a)
{
	static const unsigned char	 none[ZP_MAX_UPSTREAMS];
	struct udp_out			*o;
	struct timeval			 now;
	int				 idx;

	zp_clock_now(&now);
	/* Down ones too when no other is left: a datagram is not refused. */
	if ((idx = zp_upstream_pick(os->ctx->ups, a, none, &now)) < 0 ||
	    out_open(o = &os->o[idx]) == -1) {
		os->t->dropped[ZP_UDP_DROP_NO_STREAM]++;
		return;
	}
	if (evbuffer_get_length(o->pending) > 0 || !out_try(o, d, len))
		out_queue(o, d, len);
}

size_t
udp_outs_pending(const struct udp_outs *os)
{
	return os != NULL ? os->pending : 0;
}

void
udp_outs_tick(struct udp_outs *os)
{
	struct timeval	now;
	int		i;

	zp_clock_now(&now);
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++) {
		if (os->o[i].sent && !os->o[i].refused)
			(void)zp_upstream_report(os->ctx->ups, (size_t)i, 1, 0,
			    &now);
		os->o[i].sent = os->o[i].refused = 0;
	}
}

void
udp_outs_free(struct udp_outs *os)
{
	struct udp_out	*o;
	int		 i;

	if (os == NULL)
		return;
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++) {
		o = &os->o[i];
		if (o->fd == -1)
			continue;
		if (evbuffer_get_length(o->pending) > 0)
			zp_log(os->ctx->log, ZP_LOG_WARN, "udp: %zu bytes of "
			    "datagrams for upstream %d not sent at the end",
			    evbuffer_get_length(o->pending), i);
		event_free(o->rev);
		event_free(o->wev);
		evbuffer_free(o->pending);
		close(o->fd);
	}
	free(os);
}
