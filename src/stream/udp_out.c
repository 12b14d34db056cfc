/*
 * udp_out.c - -u udp@: datagrams relayed as datagrams (udp_out.h).
 */

#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/iptab.h"
#include "core/net.h"
#include "core/upstream.h"
#include "lib/clock.h"
#include "lib/log.h"
#include "relay/ctx.h"
#include "stream/udp.h"
#include "stream/udp_out.h"

/* A datagram that waits: its length, then its bytes. */
typedef uint32_t	udp_len_t;

/* One socket to one upstream (its first address), from one source. */
struct udp_out {
	struct udp_outs	*os;
	int		 idx;
	int		 fd;
	struct event	*rev;		/* refusals; what it answers */
	struct event	*wev;		/* while datagrams wait */
	struct evbuffer	*pending;	/* datagrams it did not take */
	unsigned	 sent:1;	/* one went since the last tick */
	unsigned	 refused:1;	/* ... and was refused */
};

/* --source client: a device, and its sockets (one an upstream). */
struct udp_peer {
	struct zp_iptab_ent	 ent;		/* first: os->tab's, its address */
	TAILQ_ENTRY(udp_peer)	 lru;		/* least recent first */
	struct timeval		 last;
	int			 nout;		/* o[nout] and on are NULL */
	struct udp_out		*o[ZP_MAX_UPSTREAMS];
};

TAILQ_HEAD(udp_peer_list, udp_peer);

/* At most this many datagrams go in one sendmmsg (a reader's batch). */
#define OUT_BATCH	64

/* A datagram taken and not yet sent: udp_outs_flush() sends it. */
struct out_entry {
	struct udp_out	*o;
	const void	*d;
	size_t		 len;
};

struct udp_outs {
	struct zp_ctx		*ctx;
	struct zp_udp_tally	*t;
	void			(*resume)(void *);
	void			*arg;
	size_t			 pending;	/* bytes waiting, every socket */
	long			 max_peers;	/* --udp-max-sources, in all */
	unsigned		 said:1;	/* a socket failed: said once */
	struct udp_out		*o[ZP_MAX_UPSTREAMS]; /* from this host */
	struct zp_iptab		 tab;		/* --source client */
	struct udp_peer_list	 peers;
	struct out_entry	 batch[OUT_BATCH]; /* in the order they came */
	int			 nbatch;
};

static void	out_flush(struct udp_out *);
static void	out_queue(struct udp_out *, const void *, size_t);

/* ---- one socket ------------------------------------------------------ */

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

static void
out_free(struct udp_out *o)
{
	if (o == NULL)
		return;
	if (o->pending != NULL) {
		o->os->pending -= evbuffer_get_length(o->pending);
		evbuffer_free(o->pending);
	}
	if (o->rev != NULL)
		event_free(o->rev);
	if (o->wev != NULL)
		event_free(o->wev);
	if (o->fd != -1)
		close(o->fd);
	free(o);
}

/*
 * A socket to upstream idx, connected to its first address, from src
 * (NULL: the kernel's choice; transparent: src is a device's, --source
 * client). NULL when it cannot be made: said once.
 */
static struct udp_out *
out_new(struct udp_outs *os, int idx, const struct zp_addr *from,
    int transparent, int *errp)
{
	struct zp_ctx	*ctx = os->ctx;
	struct udp_out	*o;
	struct zp_addr	 a, src;
	char		 name[ZP_UPSTREAM_NAMELEN];
	int		 err;

	if ((o = calloc(1, sizeof(*o))) == NULL)
		return NULL;
	o->os = os;
	o->idx = idx;
	o->fd = -1;
	if (zp_upstream_addr(ctx->ups, (size_t)idx, 0, &a) == 0) {
		err = EDESTADDRREQ;
		goto fail;
	}
	if (from != NULL && zp_source_for(from, &a, &src) == -1) {
		err = EAFNOSUPPORT;
		goto fail;
	}
	if ((o->fd = socket(a.ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0)) == -1 ||
	    (from != NULL && zp_net_bind_source(o->fd, &src,
	    transparent) == -1) ||
	    connect(o->fd, (struct sockaddr *)&a.ss, a.len) == -1 ||
	    (o->pending = evbuffer_new()) == NULL ||
	    (o->rev = event_new(ctx->base, o->fd, EV_READ | EV_PERSIST,
	    out_read_cb, o)) == NULL ||
	    (o->wev = event_new(ctx->base, o->fd, EV_WRITE | EV_PERSIST,
	    out_write_cb, o)) == NULL || event_add(o->rev, NULL) == -1) {
		err = errno;
		goto fail;
	}
	return o;
fail:
	*errp = err;
	if (!os->said) {
		os->said = 1;
		zp_log(ctx->log, ZP_LOG_WARN, "udp: %s: cannot make a socket "
		    "to it: %s (said once)", zp_upstream_label(ctx->ups,
		    (size_t)idx, name, sizeof(name)), strerror(err));
	}
	out_free(o);
	return NULL;
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
 * Send one datagram; 1 when it went or is lost (counted), 0 when the
 * socket could not take it now (it is to wait). A refusal reported on
 * this send is an earlier datagram's: the kernel did not send this one,
 * so it goes again.
 */
static int
out_try(struct udp_out *o, const void *d, size_t len)
{
	int	i;

	for (i = 0; i < 2; i++) {
		if (send(o->fd, d, len, MSG_DONTWAIT) == (ssize_t)len) {
			out_sent(o, len);
			return 1;
		}
		if (!out_refusal(errno))
			break;
		out_refused(o, errno);
	}
	if (i < 2 && (errno == EAGAIN || errno == ENOBUFS || errno == EINTR))
		return 0;
	/* Refused twice, or a datagram the path cannot carry (EMSGSIZE). */
	o->os->t->dropped[ZP_UDP_DROP_UNREACHABLE]++;
	return 1;
}

/*
 * Send n datagrams (iov[i], m[i] its header) in order, as out_try() sends
 * one: a refusal is an earlier datagram's, so the one it stopped goes
 * again (twice refused, or one the path cannot carry, it is lost and
 * counted). What the socket does not take now waits, in order.
 */
static void
out_try_many(struct udp_out *o, struct mmsghdr *m, struct iovec *iov, int n)
{
	int	off = 0, r, refused = 0, short_call = 0;

	while (off < n) {
		r = sendmmsg(o->fd, m + off, (unsigned)(n - off), MSG_DONTWAIT);
		/*
		 * A call that sent some and then failed returns what it sent
		 * and drops the error (Linux since 3.0). EAGAIN, ENOBUFS and
		 * EMSGSIZE come back on the next call; a refusal does not: it
		 * was taken from the socket by the send it stopped. So a short
		 * call whose next one sends, or is refused, lost a refusal. On
		 * loopback that is every datagram to a closed port: the ICMP
		 * comes back within the send.
		 */
		if (short_call && (r > 0 || out_refusal(errno)))
			out_refused(o, ECONNREFUSED);
		short_call = 0;
		if (r > 0) {
			for (; r > 0; r--, off++)
				out_sent(o, iov[off].iov_len);
			short_call = off < n;
			refused = 0;
			continue;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == ENOBUFS)
			break;
		if (out_refusal(errno)) {
			out_refused(o, errno);
			if (++refused < 2)
				continue;
		}
		o->os->t->dropped[ZP_UDP_DROP_UNREACHABLE]++;
		off++;
		refused = 0;
	}
	for (; off < n; off++)
		out_queue(o, iov[off].iov_base, iov[off].iov_len);
}

/* Keep a datagram the socket could not take, until it can. */
static void
out_queue(struct udp_out *o, const void *d, size_t len)
{
	udp_len_t	n = (udp_len_t)len;

	/* Room for both first: never a length without its datagram. */
	if (evbuffer_expand(o->pending, sizeof(n) + len) == -1 ||
	    evbuffer_add(o->pending, &n, sizeof(n)) == -1 ||
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

/* ---- --source client: the devices ---------------------------------- */

static void
peer_free(struct udp_outs *os, struct udp_peer *p)
{
	int	i;

	zp_iptab_del(&os->tab, &p->ent);
	TAILQ_REMOVE(&os->peers, p, lru);
	for (i = 0; i < p->nout; i++)
		out_free(p->o[i]);
	os->t->sources--;
	__atomic_sub_fetch(&zp_ctx_root(os->ctx)->udp_sources, 1,
	    __ATOMIC_RELAXED);
	free(p);
}

/*
 * The device a's entry, found or made; NULL beyond --udp-max-sources
 * (or out of memory): its datagrams go from this host's address then.
 */
static struct udp_peer *
peer_get(struct udp_outs *os, const struct zp_addr *a,
    const struct timeval *now)
{
	struct zp_ctx	*root = zp_ctx_root(os->ctx);
	struct udp_peer	*p;

	if (!zp_iptab_keyed(a))
		return NULL;
	/* The entry is the peer's first member. */
	if ((p = (struct udp_peer *)zp_iptab_find(&os->tab, a)) != NULL)
		goto found;
	if (__atomic_load_n(&root->udp_sources, __ATOMIC_RELAXED) >=
	    os->max_peers || (p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->ent.addr = *a;
	if (zp_iptab_add(&os->tab, &p->ent) == -1) {
		free(p);
		return NULL;
	}
	TAILQ_INSERT_TAIL(&os->peers, p, lru);
	os->t->sources++;
	__atomic_add_fetch(&root->udp_sources, 1, __ATOMIC_RELAXED);
found:
	p->last = *now;
	TAILQ_REMOVE(&os->peers, p, lru);
	TAILQ_INSERT_TAIL(&os->peers, p, lru);
	return p;
}

/* ---- the relay -------------------------------------------------------- */

struct udp_outs *
udp_outs_new(struct zp_ctx *ctx, struct zp_udp_tally *t, long max_peers,
    void (*resume)(void *), void *arg)
{
	struct udp_outs	*os;
	uint64_t	 seed = 0;

	if ((os = calloc(1, sizeof(*os))) == NULL)
		return NULL;
	os->ctx = ctx;
	os->t = t;
	os->max_peers = max_peers;
	os->resume = resume;
	os->arg = arg;
	TAILQ_INIT(&os->peers);
	(void)getrandom(&seed, sizeof(seed), GRND_NONBLOCK);
	zp_iptab_init(&os->tab, seed ^ (uint64_t)(uintptr_t)os);
	return os;
}

/*
 * Is upstream idx of the family `from` can send to (NULL: any)? An IPv4
 * device cannot send to an IPv6 upstream, nor the reverse.
 */
static int
out_family_ok(struct udp_outs *os, int idx, const struct zp_addr *from)
{
	struct zp_addr	up, src;

	return from == NULL || (zp_upstream_addr(os->ctx->ups, (size_t)idx, 0,
	    &up) > 0 && zp_source_for(from, &up, &src) == 0);
}

/*
 * The socket for a datagram from source a, sent from `from` (NULL: this
 * host's choice; p: the device's own sockets, else the thread's): to the
 * balancer's upstream, skipping those of the other family, down ones
 * too when no other is left; one whose socket cannot be made (no
 * address yet, no route) is a failed connect, and the next is tried.
 * A socket made already was of the right family: only a new one asks.
 * NULL: none.
 */
static struct udp_out *
out_pick(struct udp_outs *os, const struct zp_addr *a,
    const struct zp_addr *from, struct udp_peer *p,
    const struct timeval *now)
{
	unsigned char	  tried[ZP_MAX_UPSTREAMS] = { 0 };
	struct udp_out	**slot;
	int		  idx, n, err = 0;

	for (n = 0; n < ZP_MAX_UPSTREAMS; n++) {
		if ((idx = zp_upstream_pick(os->ctx->ups, a, tried, now)) < 0)
			return NULL;
		tried[idx] = 1;
		slot = p != NULL ? &p->o[idx] : &os->o[idx];
		if (*slot != NULL)
			return *slot;
		if (!out_family_ok(os, idx, from))
			continue;
		if ((*slot = out_new(os, idx, from, p != NULL, &err)) != NULL) {
			if (p != NULL && idx >= p->nout)
				p->nout = idx + 1;
			return *slot;
		}
		zp_upstream_connect_failed(os->ctx->ups, (size_t)idx);
		(void)zp_upstream_report(os->ctx->ups, (size_t)idx, 0, err,
		    now);
	}
	return NULL;
}

void
udp_outs_send(struct udp_outs *os, const void *d, size_t len,
    const struct zp_addr *a, const struct timeval *now)
{
	const struct zp_config		*cfg = os->ctx->cfg;
	struct udp_peer			*p = NULL;
	struct udp_out			*o;

	if (cfg->source == ZP_SOURCE_CLIENT &&
	    (p = peer_get(os, a, now)) == NULL)
		os->t->shared++;	/* from this host's address */
	if ((o = out_pick(os, a, p != NULL ? &p->ent.addr :
	    cfg->source == ZP_SOURCE_ADDR ? &cfg->source_addr : NULL, p,
	    now)) == NULL) {
		os->t->dropped[ZP_UDP_DROP_NO_STREAM]++;
		return;
	}
	/*
	 * Behind datagrams that wait, it waits too; a socket with some in
	 * the batch has none waiting (only a flush makes them wait).
	 */
	if (os->nbatch == OUT_BATCH)
		udp_outs_flush(os);	/* first: o may have some waiting now */
	if (evbuffer_get_length(o->pending) > 0) {
		out_queue(o, d, len);
		return;
	}
	os->batch[os->nbatch].o = o;
	os->batch[os->nbatch].d = d;
	os->batch[os->nbatch].len = len;
	os->nbatch++;
}

void
udp_outs_flush(struct udp_outs *os)
{
	struct mmsghdr	 m[OUT_BATCH];
	struct iovec	 iov[OUT_BATCH];
	struct udp_out	*o;
	int		 i, j, n;

	/* Socket by socket, each one's datagrams in the order they came. */
	for (i = 0; i < os->nbatch; i++) {
		if ((o = os->batch[i].o) == NULL)
			continue;	/* went with an earlier one's */
		for (j = i, n = 0; j < os->nbatch; j++) {
			if (os->batch[j].o != o)
				continue;
			iov[n].iov_base = (void *)(uintptr_t)os->batch[j].d;
			iov[n].iov_len = os->batch[j].len;
			memset(&m[n], 0, sizeof(m[n]));
			m[n].msg_hdr.msg_iov = &iov[n];
			m[n].msg_hdr.msg_iovlen = 1;
			os->batch[j].o = NULL;
			n++;
		}
		out_try_many(o, m, iov, n);
	}
	os->nbatch = 0;
}

size_t
udp_outs_pending(const struct udp_outs *os)
{
	return os != NULL ? os->pending : 0;
}

/*
 * A down upstream sent to without a refusal, here in the last second and
 * anywhere for 2 (a refusal reaches only the thread whose socket sent
 * the datagram), is up again. One that is up is left alone: a success
 * here must not clear the refusals another thread counts towards
 * --max-fails.
 */
static void
out_tick(struct udp_out *o, const struct timeval *now, unsigned char *ok)
{
	struct zp_upstream	u;

	if (o == NULL)
		return;
	if (o->sent && !o->refused && !ok[o->idx]) {
		ok[o->idx] = 1;
		zp_upstream_get(o->os->ctx->ups, (size_t)o->idx, &u);
		if (!u.up && time(NULL) - u.last_err_at >= 2)
			(void)zp_upstream_report(o->os->ctx->ups,
			    (size_t)o->idx, 1, 0, now);
	}
	o->sent = o->refused = 0;
}

void
udp_outs_tick(struct udp_outs *os)
{
	struct udp_peer	*p, *next;
	struct timeval	 now, t, idle = zp_seconds_tv(os->ctx->cfg->udp_idle);
	unsigned char	 ok[ZP_MAX_UPSTREAMS] = { 0 };
	int		 i, held;

	zp_clock_now(&now);
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++)
		out_tick(os->o[i], &now, ok);
	for (p = TAILQ_FIRST(&os->peers); p != NULL; p = next) {
		next = TAILQ_NEXT(p, lru);
		/* only the slots used: a tick visits every device */
		for (i = 0, held = 0; i < p->nout; i++) {
			out_tick(p->o[i], &now, ok);
			held |= p->o[i] != NULL &&
			    evbuffer_get_length(p->o[i]->pending) > 0;
		}
		/* A device quiet for --udp-idle: its sockets close. */
		timeradd(&p->last, &idle, &t);
		if (!held && !timercmp(&t, &now, >))
			peer_free(os, p);
	}
}

void
udp_outs_free(struct udp_outs *os)
{
	size_t	left = 0;
	int	i;

	if (os == NULL)
		return;
	assert(os->nbatch == 0);	/* every reader's batch ends flushed */
	left = os->pending;
	while (!TAILQ_EMPTY(&os->peers))
		peer_free(os, TAILQ_FIRST(&os->peers));
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++)
		out_free(os->o[i]);
	if (left > 0)
		zp_log(os->ctx->log, ZP_LOG_WARN, "udp: %zu bytes of datagrams "
		    "for the upstreams not sent at the end", left);
	zp_iptab_free(&os->tab);
	free(os);
}
