/*
 * udp.c - syslog over UDP: each thread's readers, and the streams of
 * their sources (udp.h says how they fit together).
 */

#include <sys/queue.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/net.h"
#include "core/iptab.h"
#include "core/udpsock.h"
#include "lib/acl.h"
#include "lib/clock.h"
#include "lib/dgram.h"
#include "lib/log.h"
#include "relay/ctx.h"
#include "relay/worker.h"
#include "stream/pair.h"
#include "relay/relay.h"
#include "stream/udp.h"
#include "stream/udp_socks.h"
#include "stream/udp_out.h"

/* Datagrams a recvmmsg call takes, and calls a read event makes. */
#define ZP_UDP_BATCH		32
#define ZP_UDP_ROUNDS		8
/* Room for any datagram: 65,535 less the UDP header, and then some. */
#define ZP_UDP_BUFSZ		65536
/* The drain reads what waits, at most this many batches. */
#define ZP_UDP_STOP_ROUNDS	4096

struct zp_udp;

/*
 * One source address and its stream: our end of the socket pair whose
 * other end is its pair's client, and the frames it has not taken yet.
 */
struct udp_src {
	struct zp_iptab_ent	 ent;		/* first: u->tab's, its address */
	struct zp_udp		*u;
	TAILQ_ENTRY(udp_src)	 lru;		/* u->srcs, least recent first */
	TAILQ_ENTRY(udp_src)	 dirty;		/* u->dirty: framed this batch */
	int			 fd;		/* -1: gone */
	struct event		*rev;		/* reads what comes back, EOF */
	struct event		*wev;		/* pending to write */
	struct evbuffer		*pending;	/* frames not written yet */
	struct zp_feed		*feed;		/* pending, as the pair's input */
	struct timeval		 last;		/* its last datagram */
	uint64_t		 id;		/* its pair's connection */
	unsigned		 hashed:1;	/* in the table: takes datagrams */
	unsigned		 shared:1;	/* sources beyond the limit */
	unsigned		 ending:1;	/* shut once pending is written */
	unsigned		 shut:1;	/* shutdown(SHUT_WR) done */
	unsigned		 eof:1;		/* its pair sent its FIN */
	unsigned		 is_dirty:1;
	unsigned		 won:1;		/* wev added */
};

TAILQ_HEAD(udp_src_list, udp_src);

/* A thread's reader of one UDP socket, and the sources it has seen. */
struct zp_udp {
	struct zp_udp		*next;		/* ctx->udp */
	struct zp_ctx		*ctx;
	int			 fd;		/* -1 once stopped */
	int			 listen;	/* cfg->listens[], stats.udp[] */
	const char		*label;		/* the root's list's */
	struct zp_addr		 addr;		/* bound: PROXY's destination */
	struct event		*ev;		/* the socket readable */
	struct event		*tick;		/* idle sources, kernel drops */
	unsigned		 reading:1;	/* ev added */
	unsigned		 shared_said:1;
	unsigned		 in_batch:1;	/* udp_batch runs */
	unsigned		 stop_due:1;	/* zp_udp_stop came meanwhile */
	unsigned		 stopped:1;	/* read out, closed */
	unsigned		 holding:1;	/* ... and the drain waits for
						   what waits for the upstreams */
	int			 framing;	/* enum zp_framing */
	size_t			 lf_max;	/* --max-frame under LF */
	long			 max_sources;	/* every thread's, in all */
	uint32_t		 drops;		/* the kernel's, counted */
	size_t			 pending;	/* bytes its sources hold */
	struct zp_iptab		 tab;		/* the sources with a stream */
	struct udp_src		*shared;	/* the shared stream, or NULL */
	struct udp_outs		*outs;		/* -u udp@: to the upstreams */
	struct udp_src_list	 srcs;		/* every source, open or ending */
	struct udp_src_list	 dirty;
	struct timeval		 now;		/* the batch's */
	struct mmsghdr		 msgs[ZP_UDP_BATCH];
	struct iovec		 iov[ZP_UDP_BATCH];
	union zp_sockaddr	 from[ZP_UDP_BATCH];
	char			 ctrl[ZP_UDP_BATCH][CMSG_SPACE(sizeof(uint32_t))];
	unsigned char		*bufs;		/* ZP_UDP_BATCH of ZP_UDP_BUFSZ */
};

static void	udp_resume(struct zp_udp *);
static void	udp_stop_one(struct zp_udp *);
static void	src_flush(struct udp_src *);
static struct udp_src *src_open(struct zp_udp *, const struct zp_addr *);
static struct udp_src *src_get(struct zp_udp *, const struct zp_addr *);

static struct zp_udp_tally *
udp_tally(struct zp_udp *u)
{
	return &u->ctx->stats.udp[u->listen];
}

/* ---- the source table --------------------------------------------- */

static struct udp_src *
src_find(struct zp_udp *u, const struct zp_addr *a)
{
	/* The entry is the source's first member. */
	return (struct udp_src *)zp_iptab_find(&u->tab, a);
}

/* Take s out of the table: the next datagram of its source opens anew. */
static void
src_unhash(struct udp_src *s)
{
	struct zp_udp	*u = s->u;

	if (s->shared && u->shared == s)
		u->shared = NULL;
	if (!s->hashed)
		return;
	zp_iptab_del(&u->tab, &s->ent);
	s->hashed = 0;
	udp_tally(u)->sources--;
	__atomic_sub_fetch(&zp_ctx_root(u->ctx)->udp_sources, 1,
	    __ATOMIC_RELAXED);
}

/* ---- a source's stream -------------------------------------------- */

/*
 * The reader's count of what its sources hold follows every source's
 * buffer: frames added, taken by the pair (its feed), written to the
 * socket, moved to another source.
 */
static void
src_pending_cb(struct evbuffer *buf, const struct evbuffer_cb_info *info,
    void *arg)
{
	struct udp_src	*s = arg;
	struct zp_udp	*u = s->u;

	u->pending += info->n_added;
	u->pending -= info->n_deleted;
	if (info->n_deleted > 0)
		udp_resume(u);
}

/* Close our end and free s: its pair has ended or will on our FIN. */
static void
src_free(struct udp_src *s)
{
	struct zp_udp	*u = s->u;
	size_t		 left;

	src_unhash(s);
	if (s->is_dirty)
		TAILQ_REMOVE(&u->dirty, s, dirty);
	TAILQ_REMOVE(&u->srcs, s, lru);
	if (s->rev != NULL)
		event_free(s->rev);
	if (s->wev != NULL)
		event_free(s->wev);
	if (s->fd != -1)
		close(s->fd);
	if (s->feed != NULL) {
		s->feed->buf = NULL;
		zp_feed_unref(s->feed);
	}
	if (s->pending != NULL) {
		(void)evbuffer_remove_cb(s->pending, src_pending_cb, s);
		left = evbuffer_get_length(s->pending);
		u->pending -= left;
		evbuffer_free(s->pending);
	}
	free(s);
	udp_resume(u);
}

/*
 * The stream ends: no more datagrams go to it, and once what it holds is
 * written, its pair reads our FIN after the last frame.
 */
static void
src_end(struct udp_src *s)
{
	src_unhash(s);
	s->ending = 1;
	src_flush(s);
}

/*
 * Write what s holds into its socket pair. What it cannot take now waits
 * for the write event. The pair gone (its client closed with frames
 * unread: it ended without an upstream to give them to, and without
 * --spool), what is left is lost with it, as a TCP client's unsent
 * bytes are: said, since every datagram read counts.
 */
static void
src_flush(struct udp_src *s)
{
	struct zp_udp	*u = s->u;
	size_t		 left;
	int		 n, err = 0;

	/*
	 * Bytes go into the socket from here on: its pair must read them
	 * there only, after what it took from the feed and before anything
	 * newer (the socket's bytes are the feed's oldest).
	 */
	if (s->feed != NULL && s->feed->half != NULL)
		zp_half_feed_drop(s->feed->half);

	while (evbuffer_get_length(s->pending) > 0) {
		if ((n = evbuffer_write(s->pending, s->fd)) > 0)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			break;
		err = n == -1 ? errno : EPIPE;
		break;
	}
	left = evbuffer_get_length(s->pending);
	if (err != 0) {
		zp_log(u->ctx->log, ZP_LOG_WARN, "%s: connection %llu ended "
		    "with %zu bytes of its source's datagrams unread (%s)",
		    u->label, (unsigned long long)s->id, left, strerror(err));
		src_free(s);
		return;
	}
	if (left > 0) {
		if (!s->won && event_add(s->wev, NULL) == 0)
			s->won = 1;
		udp_resume(u);
		return;
	}
	if (s->won) {
		event_del(s->wev);
		s->won = 0;
	}
	udp_resume(u);
	if (s->eof) {
		/* Its pair is done reading us; nothing is left to give it. */
		src_free(s);
		return;
	}
	if (s->ending && !s->shut) {
		(void)shutdown(s->fd, SHUT_WR);
		s->shut = 1;
	}
}

static void
src_write_cb(evutil_socket_t fd, short what, void *arg)
{
	src_flush(arg);
}

/* Its pair reads the socket only (it spools): what waits goes there. */
static void
src_feed_detached(void *arg)
{
	src_flush(arg);
}

/*
 * What the collector sent back (a syslog collector sends nothing) is read
 * and dropped. The pair's FIN ends the source: its stream ends (its
 * upstream closed and it could not move; --idle-timeout; the drain).
 * Frames it has not taken go on in a new stream of the same source,
 * not into one that is ending, unless it ends at our word (--udp-idle,
 * the drain: it reads what we write until our FIN). A reset instead (it
 * closed with frames of ours unread) lost those: said.
 */
static void
src_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct udp_src	*s = arg, *n;
	struct zp_udp	*u = s->u;
	int		 rc = zp_sock_drain(fd, ZP_DRAIN_PASSES, NULL);

	if (rc == 0)
		return;
	src_unhash(s);
	s->eof = 1;
	if (rc == -1) {
		zp_log(u->ctx->log, ZP_LOG_WARN, "%s: connection %llu ended "
		    "with datagrams of its source unread (%s): they are lost, "
		    "and %zu bytes not yet written to it", u->label,
		    (unsigned long long)s->id, strerror(errno),
		    evbuffer_get_length(s->pending));
		src_free(s);
		return;
	}
	if (evbuffer_get_length(s->pending) == 0) {
		src_free(s);
		return;
	}
	if (!s->ending && !u->ctx->stopping &&
	    (n = s->shared ? src_open(u, NULL) : src_get(u, &s->ent.addr)) !=
	    NULL && !n->ending) {
		(void)evbuffer_add_buffer(n->pending, s->pending);
		src_free(s);
		if (n->feed != NULL && n->feed->half != NULL)
			zp_feed_kick(n->feed);
		else
			src_flush(n);
		return;
	}
	event_del(s->rev);
	src_flush(s);
}

/* Source a's entry in the table: s takes its datagrams. -1: no memory. */
static int
src_hash_in(struct zp_udp *u, struct udp_src *s, const struct zp_addr *a)
{
	s->ent.addr = *a;
	return zp_iptab_add(&u->tab, &s->ent);
}

/*
 * A stream for source a (NULL: the shared one), its pair started on
 * this thread. NULL when a socket pair or memory could not be had.
 */
static struct udp_src *
src_open(struct zp_udp *u, const struct zp_addr *a)
{
	struct zp_ctx	*ctx = u->ctx;
	struct udp_src	*s;
	struct zp_addr	 none;
	int		 sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
	    sv) == -1)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    (s->pending = evbuffer_new()) == NULL ||
	    (s->feed = zp_feed_new(s->pending)) == NULL ||
	    evbuffer_add_cb(s->pending, src_pending_cb, s) == NULL ||
	    (s->rev = event_new(ctx->base, sv[0], EV_READ | EV_PERSIST,
	    src_read_cb, s)) == NULL ||
	    (s->wev = event_new(ctx->base, sv[0], EV_WRITE | EV_PERSIST,
	    src_write_cb, s)) == NULL || event_add(s->rev, NULL) == -1 ||
	    (a != NULL && src_hash_in(u, s, a) == -1)) {
		if (s != NULL) {
			if (s->rev != NULL)
				event_free(s->rev);
			if (s->wev != NULL)
				event_free(s->wev);
			if (s->pending != NULL)
				evbuffer_free(s->pending);
			free(s->feed);
			free(s);
		}
		close(sv[0]);
		close(sv[1]);
		return NULL;
	}
	s->u = u;
	s->fd = sv[0];
	s->feed->detached = src_feed_detached;
	s->feed->arg = s;
	zp_clock_now(&s->last);
	TAILQ_INSERT_TAIL(&u->srcs, s, lru);
	if (a == NULL) {
		memset(&none, 0, sizeof(none));
		s->shared = 1;
		u->shared = s;
	} else {
		s->hashed = 1;
		udp_tally(u)->sources++;
		__atomic_add_fetch(&zp_ctx_root(ctx)->udp_sources, 1,
		    __ATOMIC_RELAXED);
	}
	/*
	 * A pair that ends at once (no upstream, no --spool) closes its end:
	 * ours reads EOF and the source goes, as a refused TCP client does.
	 */
	(void)zp_pair_start_dgram(ctx, sv[1], a != NULL ? a : &none, &u->addr,
	    u->framing, &s->id, s->feed);
	if (zp_log_enabled(ctx->log, ZP_LOG_CONN)) {
		char	abuf[ZP_ADDRSTRLEN];

		zp_log(ctx->log, ZP_LOG_CONN, "%s: %s%s: connection %llu",
		    u->label, a != NULL ? "source " : "the shared stream",
		    a != NULL ? zp_addr_str(a, abuf, sizeof(abuf)) : "",
		    (unsigned long long)s->id);
	}
	return s;
}

/*
 * The stream for a datagram from a: its source's, a new one, or beyond
 * --udp-max-sources (or out of descriptors) the thread's shared one.
 */
static struct udp_src *
src_get(struct zp_udp *u, const struct zp_addr *a)
{
	struct zp_ctx	*root = zp_ctx_root(u->ctx);
	struct udp_src	*s;

	if ((s = src_find(u, a)) != NULL)
		return s;
	/* An address that names no source (none can: UDP has one) shares. */
	if (zp_iptab_keyed(a) &&
	    __atomic_load_n(&root->udp_sources, __ATOMIC_RELAXED) <
	    u->max_sources && (s = src_open(u, a)) != NULL)
		return s;
	if (u->shared == NULL && (s = src_open(u, NULL)) != NULL &&
	    !u->shared_said) {
		u->shared_said = 1;
		zp_log(u->ctx->log, ZP_LOG_WARN, "%s: %ld sources have streams "
		    "of their own (--udp-max-sources %ld) or descriptors ran "
		    "out: datagrams of new sources share connection %llu, "
		    "which names no source", u->label, (long)__atomic_load_n(
		    &root->udp_sources, __ATOMIC_RELAXED), u->max_sources,
		    (unsigned long long)s->id);
	}
	return u->shared;
}

/* ---- datagrams in --------------------------------------------------- */

/*
 * One datagram of len bytes from a: one frame in its source's buffer,
 * written at the batch's end (or counted as not relayed, and why).
 */
static void
udp_datagram(struct zp_udp *u, const unsigned char *d, size_t len,
    const struct zp_addr *a)
{
	struct zp_ctx		*ctx = u->ctx;
	struct zp_udp_tally	*t = udp_tally(u);
	struct udp_src		*s;
	struct evbuffer_iovec	 v;
	size_t			 flen, esc = 0;

	t->datagrams++;
	if (len == 0) {
		t->dropped[ZP_UDP_DROP_EMPTY]++;
		return;
	}
	if (!zp_acl_permits(&ctx->cfg->allow, &ctx->cfg->deny,
	    (const struct sockaddr *)&a->ss)) {
		t->dropped[ZP_UDP_DROP_DENIED]++;
		return;
	}
	if (u->outs != NULL) {
		udp_outs_send(u->outs, d, len, a, &u->now);
		return;
	}
	if ((s = src_get(u, a)) == NULL) {
		t->dropped[ZP_UDP_DROP_NO_STREAM]++;
		return;
	}
	flen = zp_dgram_frame_len(d, len, (enum zp_framing)u->framing, &esc);
	if (evbuffer_reserve_space(s->pending, (ev_ssize_t)flen, &v, 1) < 1) {
		t->dropped[ZP_UDP_DROP_NO_STREAM]++;
		return;
	}
	v.iov_len = zp_dgram_frame(d, len, (enum zp_framing)u->framing,
	    v.iov_base, NULL);
	(void)evbuffer_commit_space(s->pending, &v, 1);
	/* One line a datagram: a '\n' in it escaped, or over --max-frame. */
	if (esc > 0 || (u->framing == ZP_FRAMING_LF && flen > u->lf_max))
		ctx->stats.framing_errors++;
	if (s->shared)
		t->shared++;
	s->last = u->now;
	TAILQ_REMOVE(&u->srcs, s, lru);
	TAILQ_INSERT_TAIL(&u->srcs, s, lru);
	if (!s->is_dirty) {
		s->is_dirty = 1;
		TAILQ_INSERT_TAIL(&u->dirty, s, dirty);
	}
}

/*
 * The kernel's drop count, as a datagram carried it or as it is now. It
 * is 32 bits and wraps (70 minutes of a flood of a million a second): the
 * difference is taken modulo 2^32, signed, because a datagram read late
 * carries a count older than the one the tick read.
 */
static void
udp_drops(struct zp_udp *u, uint32_t now)
{
	int32_t	d = (int32_t)(now - u->drops);

	if (d > 0) {
		udp_tally(u)->dropped[ZP_UDP_DROP_RCVBUF] += (uint64_t)d;
		u->drops = now;
	}
}

/*
 * One recvmmsg batch, its frames written. Returns how many datagrams it
 * took (ZP_UDP_BATCH: there may be more), 0 when none waited, -1 on an
 * error (logged).
 */
static int
udp_batch(struct zp_udp *u)
{
	struct udp_src	*s;
	struct cmsghdr	*c;
	struct zp_addr	 a;
	uint32_t	 dropped;
	int		 i, n;

	for (i = 0; i < ZP_UDP_BATCH; i++) {
		memset(&u->msgs[i].msg_hdr, 0, sizeof(u->msgs[i].msg_hdr));
		u->iov[i].iov_base = u->bufs + (size_t)i * ZP_UDP_BUFSZ;
		u->iov[i].iov_len = ZP_UDP_BUFSZ;
		u->msgs[i].msg_hdr.msg_iov = &u->iov[i];
		u->msgs[i].msg_hdr.msg_iovlen = 1;
		u->msgs[i].msg_hdr.msg_name = &u->from[i];
		u->msgs[i].msg_hdr.msg_namelen = sizeof(u->from[i]);
		u->msgs[i].msg_hdr.msg_control = u->ctrl[i];
		u->msgs[i].msg_hdr.msg_controllen = sizeof(u->ctrl[i]);
	}
	if ((n = recvmmsg(u->fd, u->msgs, ZP_UDP_BATCH, MSG_DONTWAIT,
	    NULL)) == -1) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		zp_log(u->ctx->log, ZP_LOG_ERROR, "%s: recvmmsg: %s", u->label,
		    strerror(errno));
		return -1;
	}
	zp_clock_now(&u->now);
	u->in_batch = 1;
	for (i = 0; i < n; i++) {
		struct msghdr	*m = &u->msgs[i].msg_hdr;

		for (c = CMSG_FIRSTHDR(m); c != NULL; c = CMSG_NXTHDR(m, c))
			if (c->cmsg_level == SOL_SOCKET &&
			    c->cmsg_type == SO_RXQ_OVFL) {
				memcpy(&dropped, CMSG_DATA(c), sizeof(dropped));
				udp_drops(u, dropped);
			}
		if (zp_addr_set(&a, m->msg_name, m->msg_namelen) == -1)
			memset(&a, 0, sizeof(a));
		udp_datagram(u, u->iov[i].iov_base, u->msgs[i].msg_len, &a);
	}
	if (u->outs != NULL)
		udp_outs_flush(u->outs);	/* before bufs are read into */
	while ((s = TAILQ_FIRST(&u->dirty)) != NULL) {
		TAILQ_REMOVE(&u->dirty, s, dirty);
		s->is_dirty = 0;
		/* Its pair takes the frames from memory; else, the socket. */
		if (s->feed != NULL && s->feed->half != NULL && !s->ending)
			zp_feed_kick(s->feed);
		else
			src_flush(s);
	}
	u->in_batch = 0;
	/* A pair that began or ended in the batch may have begun the drain. */
	if (u->stop_due) {
		udp_stop_one(u);
		return 0;
	}
	return n;
}

/* Stop reading while the sources hold too much; go on once they drain. */
static void
udp_pause(struct zp_udp *u)
{
	if (u->reading && u->pending + udp_outs_pending(u->outs) >
	    ZP_UDP_PENDING_MAX) {
		event_del(u->ev);
		u->reading = 0;
	}
}

static void
udp_resume(struct zp_udp *u)
{
	if (!u->reading && u->fd != -1 && u->pending +
	    udp_outs_pending(u->outs) <= ZP_UDP_PENDING_MAX / 2 &&
	    event_add(u->ev, NULL) == 0)
		u->reading = 1;
}

/* The drain may end as far as this reader goes. */
static void
udp_release(struct zp_udp *u)
{
	u->holding = 0;
	__atomic_sub_fetch(&zp_ctx_root(u->ctx)->drain_holds, 1,
	    __ATOMIC_SEQ_CST);
	zp_ctx_changed(u->ctx);
}

/*
 * -u udp@: what waited for an upstream's socket was sent; a stopped
 * reader's drain waited for it.
 */
static void
udp_outs_resume_cb(void *arg)
{
	struct zp_udp	*u = arg;

	udp_resume(u);
	if (u->holding && udp_outs_pending(u->outs) == 0)
		udp_release(u);
}

static void
udp_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_udp	*u = arg;
	int		 i;

	for (i = 0; i < ZP_UDP_ROUNDS && u->reading; i++) {
		if (udp_batch(u) < ZP_UDP_BATCH)
			break;
		udp_pause(u);
	}
	/* More may wait in the socket: the loop does not pause (--coalesce). */
	if (i == ZP_UDP_ROUNDS)
		u->ctx->pass_busy = 1;
	udp_pause(u);
}

/*
 * Every second: streams idle for --udp-idle end (the least recent come
 * first), and the kernel's drops since the last datagram are counted.
 */
static void
udp_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_udp	*u = arg;
	struct udp_src	*s, *next;
	struct timeval	 now, idle = zp_seconds_tv(u->ctx->cfg->udp_idle), t;
	int64_t		 d;

	if (u->fd != -1 && (d = zp_udp_drops(u->fd)) >= 0)
		udp_drops(u, (uint32_t)d);
	if (u->outs != NULL)
		udp_outs_tick(u->outs);
	zp_clock_now(&now);
	for (s = TAILQ_FIRST(&u->srcs); s != NULL; s = next) {
		next = TAILQ_NEXT(s, lru);
		timeradd(&s->last, &idle, &t);
		if (timercmp(&t, &now, >))
			break;
		if (!s->ending && !s->eof)
			src_end(s);
	}
}

/* ---- set-up and the end ------------------------------------------- */

/* Socket i of the root's list, read on ctx's thread. */
static struct zp_udp *
udp_new(struct zp_ctx *ctx, size_t i, long max_sources)
{
	struct zp_udp_socks	*us = zp_ctx_root(ctx)->udp_socks;
	struct zp_config	*cfg = ctx->cfg;
	struct zp_udp		*u;
	struct timeval		 tv = { 1, 0 };
	uint64_t		 seed = 0;
	int64_t			 d;

	if (cfg->udp_idle < 1.0)
		tv = zp_seconds_tv(cfg->udp_idle / 2);
	if ((u = calloc(1, sizeof(*u))) == NULL ||
	    (u->bufs = malloc((size_t)ZP_UDP_BATCH * ZP_UDP_BUFSZ)) == NULL) {
		free(u);
		return NULL;
	}
	u->ctx = ctx;
	u->fd = us->s[i].fd;
	u->listen = us->s[i].listen;
	u->label = us->s[i].label;
	u->addr = us->s[i].addr;
	zp_addr_unmap(&u->addr);
	u->framing = zp_dgram_framing((enum zp_framing)cfg->framing);
	u->lf_max = cfg->max_frame > 0 ? cfg->max_frame : ZP_FRAME_DEFAULT_LF;
	u->max_sources = max_sources;
	(void)getrandom(&seed, sizeof(seed), GRND_NONBLOCK);
	zp_iptab_init(&u->tab, seed ^ (uint64_t)(uintptr_t)u);
	TAILQ_INIT(&u->srcs);
	TAILQ_INIT(&u->dirty);
	/* -u udp@: datagrams go on as datagrams (udp_out.h). */
	if ((zp_config_udp_upstreams(cfg) && (u->outs = udp_outs_new(ctx,
	    &ctx->stats.udp[u->listen], max_sources, udp_outs_resume_cb,
	    u)) == NULL) ||
	    (u->ev = event_new(ctx->base, u->fd, EV_READ | EV_PERSIST,
	    udp_read_cb, u)) == NULL ||
	    (u->tick = event_new(ctx->base, -1, EV_PERSIST, udp_tick_cb,
	    u)) == NULL || event_add(u->ev, NULL) == -1 ||
	    event_add(u->tick, &tv) == -1) {
		if (u->ev != NULL)
			event_free(u->ev);
		if (u->tick != NULL)
			event_free(u->tick);
		udp_outs_free(u->outs);
		free(u->bufs);
		free(u);
		return NULL;
	}
	u->reading = 1;
	d = zp_udp_drops(u->fd);
	u->drops = d >= 0 ? (uint32_t)d : 0;
	return u;
}

int
zp_udp_attach(struct zp_ctx *root, char *err, size_t errlen)
{
	struct zp_udp_socks	*us = root->udp_socks;
	struct zp_ctx		*ctx;
	struct zp_udp		*u;
	size_t			 i, j, nth;
	int			 threads = zp_ctx_threads(root);
	long			 max = root->cfg->udp_max_sources;

	if (us == NULL)
		return 0;
	/* Half of --max-conns: each source's stream is a connection. */
	if (max == 0)
		max = root->max_conns / 2 > 0 ? root->max_conns / 2 : 1;
	for (i = 0; i < us->n; i++) {
		/* The how-manieth socket of its -l: that thread reads it. */
		for (j = 0, nth = 0; j < i; j++)
			nth += us->s[j].listen == us->s[i].listen;
		ctx = zp_ctx_thread(root, (int)(nth % (size_t)threads));
		if ((u = udp_new(ctx, i, max)) == NULL) {
			snprintf(err, errlen, "%s: cannot set up its reader: "
			    "%s", us->s[i].label, strerror(errno));
			return -1;
		}
		us->s[i].owned = 1;
		/* The drain ends once each read its queue out. */
		__atomic_add_fetch(&root->drain_holds, 1, __ATOMIC_SEQ_CST);
		u->next = ctx->udp;
		ctx->udp = u;
	}
	return 0;
}

/*
 * The socket closes: what the kernel dropped since the last look is
 * counted. What may still be queued is not read: the socket can live on
 * in another process (a takeover's, systemd's), whose datagrams they are.
 */
static void
udp_last_drops(struct zp_udp *u)
{
	int64_t	d;

	if ((d = zp_udp_drops(u->fd)) >= 0)
		udp_drops(u, (uint32_t)d);
}

/*
 * The drain, of one reader: what its socket queued before is relayed (as
 * far as its sources' buffers take it), the socket closed, every source's
 * stream ended; the drain may end once every reader did this.
 */
static void
udp_stop_one(struct zp_udp *u)
{
	struct udp_src	*s, *next;
	int		 i;

	if (u->stopped)
		return;
	/* Inside a batch (a pair's start or end began the drain): after it. */
	if (u->in_batch) {
		u->stop_due = 1;
		return;
	}
	u->stopped = 1;
	for (i = 0; i < ZP_UDP_STOP_ROUNDS && u->pending +
	    udp_outs_pending(u->outs) <= ZP_UDP_PENDING_MAX; i++)
		if (udp_batch(u) < ZP_UDP_BATCH)
			break;
	event_del(u->ev);
	u->reading = 0;
	udp_last_drops(u);
	close(u->fd);
	u->fd = -1;
	for (s = TAILQ_FIRST(&u->srcs); s != NULL; s = next) {
		next = TAILQ_NEXT(s, lru);
		if (!s->ending && !s->eof)
			src_end(s);
	}
	/* Datagrams for UDP upstreams still waiting hold the drain. */
	u->holding = 1;
	if (udp_outs_pending(u->outs) == 0)
		udp_release(u);
}

void
zp_udp_stop(struct zp_ctx *ctx)
{
	struct zp_udp	*u;

	for (u = ctx->udp; u != NULL; u = u->next)
		udp_stop_one(u);
}

void
zp_udp_free(struct zp_ctx *ctx)
{
	struct zp_udp	*u, *next;

	for (u = ctx->udp; u != NULL; u = next) {
		next = u->next;
		if (!u->stopped || u->holding)
			__atomic_sub_fetch(&zp_ctx_root(ctx)->drain_holds, 1,
			    __ATOMIC_SEQ_CST);
		/* Reading stops first: no source's end may resume it. */
		event_free(u->ev);
		event_free(u->tick);
		u->reading = 0;
		if (u->fd != -1)
			close(u->fd);
		u->fd = -1;
		while (!TAILQ_EMPTY(&u->srcs))
			src_free(TAILQ_FIRST(&u->srcs));
		udp_outs_free(u->outs);
		zp_iptab_free(&u->tab);
		free(u->bufs);
		free(u);
	}
	ctx->udp = NULL;
}
