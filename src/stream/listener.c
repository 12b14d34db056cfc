/*
 * listener.c - accept clients; pause when out of descriptors or at the
 * connection limit, and resume by itself.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "lib/acl.h"
#include "relay/ctx.h"
#include "stream/listener.h"
#include "lib/log.h"
#include "core/net.h"
#include "relay/worker.h"

/* Accepts per callback: enough to empty a burst, few enough to be fair. */
#define ZP_ACCEPT_BATCH		64
/* How long accepting rests after EMFILE/ENFILE, in milliseconds. */
#define ZP_ACCEPT_PAUSE_MS	100

struct zp_listener {
	struct zp_listener *next;	/* ctx->listener's list */
	struct zp_ctx	*ctx;
	int		 fd;
	struct zp_addr	 addr;
	char		 label[ZP_ADDRSTRLEN + ZP_FDNAME_MAX + 8];
	struct event	*ev;		/* EV_READ | EV_PERSIST on fd */
	struct event	*timer;		/* ends an out-of-descriptors pause */
	unsigned	 on:1;		/* ev is added */
	unsigned	 full:1;	/* paused at the connection limit */
	unsigned	 starved:1;	/* paused for descriptors */
	unsigned	 tls:1;		/* tls@: its clients' TLS ends here */
	struct timeval	 last_warn;
};

/*
 * Add or delete the accept event to match the pause flags. A pair that
 * waits for a descriptor (or memory, or a port) to connect upstream holds
 * the listener too: a client accepted now would take what it waits for,
 * and would wait itself; in the backlog it costs zproxy nothing.
 */
static void
listener_update(struct zp_listener *l)
{
	int	want = !l->full && !l->starved && !l->ctx->stopping &&
		    __atomic_load_n(&l->ctx->waiting_all, __ATOMIC_RELAXED) ==
		    0;

	if (want == l->on)
		return;
	if (want)
		event_add(l->ev, NULL);
	else
		event_del(l->ev);
	l->on = want;
}

/* The out-of-descriptors pause is over. */
static void
listener_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_listener *l = arg;

	l->starved = 0;
	listener_update(l);
}

/*
 * Out of descriptors: the pending client stays in the backlog. Accepting
 * again at once would spin (the error repeats until a descriptor frees),
 * so rest for a moment; warn at most once a second.
 */
static void
listener_starve(struct zp_listener *l, int err)
{
	struct zp_ctx	*ctx = l->ctx;
	struct timeval	 tv = { 0, ZP_ACCEPT_PAUSE_MS * 1000 }, now, dt;

	ctx->stats.accept_pauses++;
	zp_clock_now(&now);
	timersub(&now, &l->last_warn, &dt);
	if (dt.tv_sec >= 1) {
		zp_log(ctx->log, ZP_LOG_WARN, "accept: %s; pausing %d ms "
		    "(%llu connections open)", strerror(err),
		    ZP_ACCEPT_PAUSE_MS,
		    (unsigned long long)zp_ctx_open_all(ctx));
		l->last_warn = now;
	}
	l->starved = 1;
	listener_update(l);
	event_add(l->timer, &tv);
}

/*
 * Who may connect: --deny, then --allow, then --max-conns-per-source.
 * Returns 1 to relay the client; 0 when it was refused: counted, logged
 * (-v, rate-limited: a scan must not fill the disk) and closed with a
 * reset before any upstream is contacted. The reset (SO_LINGER {1,0}) is
 * what HAProxy's "tcp-request connection reject" sends: the refused
 * socket leaves no FIN_WAIT/TIME_WAIT state behind on this side, and the
 * client learns at once, and always, that it was not served, where a
 * plain close says FIN or RST depending on whether its first bytes had
 * arrived yet.
 */
static int
listener_admit(struct zp_listener *l, int fd, const struct sockaddr *sa,
    socklen_t len)
{
	struct zp_ctx		*ctx = l->ctx;
	struct zp_config	*cfg = ctx->cfg;
	struct zp_conn_record	 rec;
	struct zp_addr		 a;
	struct linger		 lg = { 1, 0 };
	char			 cbuf[ZP_ADDRSTRLEN];
	const char		*why;
	uint64_t		 id;

	/*
	 * Behind a balancer the peer is not the client: the access rules
	 * wait for the PROXY header (pair.c); here only --proxy-from.
	 */
	if (cfg->accept_proxy) {
		if (cfg->proxy_from.n == 0 ||
		    zp_acl_match(&cfg->proxy_from, sa))
			return 1;
		ctx->stats.clients_denied++;
		why = "denied";
	} else if (!zp_acl_permits(&cfg->allow, &cfg->deny, sa)) {
		ctx->stats.clients_denied++;
		why = "denied";
	} else if (cfg->max_conns_per_source > 0 &&
	    zp_srctab_count(&ctx->sources, sa) >=
	    (unsigned long)cfg->max_conns_per_source) {
		ctx->stats.clients_source_limited++;
		why = "source-limit";
	} else
		return 1;
	/* Refused clients get ids too: every accepted connection has one. */
	id = zp_ctx_next_id(ctx);
	if (zp_log_enabled(ctx->log, ZP_LOG_CONN)) {
		memset(&a, 0, sizeof(a));
		a.len = len < sizeof(a.ss) ? len : sizeof(a.ss);
		memcpy(&a.ss, sa, a.len);
		memset(&rec, 0, sizeof(rec));
		rec.id = id;
		rec.client = zp_addr_str(&a, cbuf, sizeof(cbuf));
		rec.upstream = "none";
		rec.end = why;
		zp_log_conn_limited(ctx->log, ZP_LOG_CONN, &rec);
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
	return 0;
}

static void
listener_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct zp_listener	*l = arg;
	struct zp_ctx		*ctx = l->ctx;
	struct sockaddr_storage	 ss;
	socklen_t		 len;
	int			 i, fd, err;

	for (i = 0; i < ZP_ACCEPT_BATCH; i++) {
		if (zp_ctx_open_all(ctx) >= ctx->max_conns) {
			/* Later clients wait in the backlog, as HAProxy's do. */
			zp_listener_pause(l);
			/*
			 * A worker's close wakes this thread only once it
			 * asked (close_wake): look again, after asking, at
			 * what a close just before may have freed.
			 */
			if (zp_ctx_open_all(ctx) >= ctx->max_conns)
				return;
			zp_listener_resume(ctx->listener);
			continue;
		}
		if (__atomic_load_n(&ctx->waiting_all, __ATOMIC_RELAXED) > 0)
			return;		/* held: see listener_update */
		len = sizeof(ss);
		fd = accept4(l->fd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			switch (errno) {
			case EAGAIN:
				return;
			case EINTR:
			case ECONNABORTED:
			case EPROTO:
			case EPERM:	/* a firewall rule */
				continue;
			case EMFILE:
			case ENFILE:
				/* Stats clients give way to ours. */
				err = errno;
				if (zp_ctx_shed(ctx) > 0)
					continue;
				listener_starve(l, err);
				return;
			case ENOBUFS:
			case ENOMEM:
				listener_starve(l, errno);
				return;
			default:
				zp_log(ctx->log, ZP_LOG_ERROR, "accept: %s",
				    strerror(errno));
				listener_starve(l, errno);
				return;
			}
		}
		if (listener_admit(l, fd, (struct sockaddr *)&ss, len))
			zp_ctx_start_pair(ctx, fd, (struct sockaddr *)&ss,
			    len, l->tls ? ZP_START_TLS : 0);
	}
	/* The batch ran out, not the backlog: no pause (--coalesce). */
	ctx->pass_busy = 1;
}

/* The part of making and taking over that is the same: events. */
static struct zp_listener *
listener_setup(struct zp_listener *l, char *err, size_t errlen)
{
	struct zp_ctx	*ctx = l->ctx;
	int		 saved;

	l->ev = event_new(ctx->base, l->fd, EV_READ | EV_PERSIST,
	    listener_accept_cb, l);
	l->timer = evtimer_new(ctx->base, listener_timer_cb, l);
	if (l->ev == NULL || l->timer == NULL) {
		snprintf(err, errlen, "listener: cannot create events");
		saved = errno;
		zp_listener_free(l);
		errno = saved;
		return NULL;
	}
	listener_update(l);
	return l;
}

static struct zp_listener *
listener_alloc(struct zp_ctx *ctx, char *err, size_t errlen)
{
	struct zp_listener	*l;

	if ((l = calloc(1, sizeof(*l))) == NULL) {
		snprintf(err, errlen, "listener: %s", strerror(errno));
		return NULL;
	}
	l->ctx = ctx;
	l->fd = -1;
	return l;
}

/* Bind and listen. */
struct zp_listener *
zp_listener_new(struct zp_ctx *ctx, const struct zp_listen_spec *spec,
    char *err, size_t errlen)
{
	struct zp_listener	*l;
	int			 saved;

	if ((l = listener_alloc(ctx, err, errlen)) == NULL)
		return NULL;
	l->fd = zp_net_listen(spec, 65535, ctx->cfg->tproxy, "listen",
	    &l->addr, err, errlen);
	if (l->fd == -1) {
		saved = errno;
		zp_listener_free(l);
		errno = saved;
		return NULL;
	}
	zp_listen_spec_str(spec, l->label, sizeof(l->label));
	l->tls = spec->tls != 0;
	return listener_setup(l, err, errlen);
}

/* Serve on a listening socket that systemd or another zproxy made. */
struct zp_listener *
zp_listener_adopt(struct zp_ctx *ctx, int fd, const char *label, int tls,
    char *err, size_t errlen)
{
	struct zp_listener	*l;
	int			 on = 0, saved;
	socklen_t		 len = sizeof(on);

	if ((l = listener_alloc(ctx, err, errlen)) == NULL) {
		close(fd);
		return NULL;
	}
	l->fd = fd;
	l->tls = tls != 0;
	snprintf(l->label, sizeof(l->label), "%s", label);
	if (zp_net_adopt(fd, &l->addr, err, errlen) == -1)
		goto fail;
	/*
	 * --tproxy: the socket accepts what an nft tproxy rule diverts to it
	 * only with IP_TRANSPARENT (systemd's Transparent=yes). Set it here
	 * if it is missing: that needs CAP_NET_ADMIN or CAP_NET_RAW, which
	 * only start-up has.
	 */
	if (ctx->cfg->tproxy) {
		if (l->addr.ss.ss_family == AF_INET6)
			(void)getsockopt(fd, IPPROTO_IPV6, IPV6_TRANSPARENT,
			    &on, &len);
		else
			(void)getsockopt(fd, IPPROTO_IP, IP_TRANSPARENT, &on,
			    &len);
		if (!on && zp_net_transparent(fd, l->addr.ss.ss_family, err,
		    errlen) == -1)
			goto fail;
	}
	return listener_setup(l, err, errlen);
fail:
	saved = errno;
	zp_listener_free(l);
	errno = saved;
	return NULL;
}

/* Put l at the end of *list. */
void
zp_listener_link(struct zp_listener **list, struct zp_listener *l)
{
	while (*list != NULL)
		list = &(*list)->next;
	*list = l;
}

struct zp_listener *
zp_listener_next(const struct zp_listener *l)
{
	return l->next;
}

int
zp_listener_fd(const struct zp_listener *l)
{
	return l->fd;
}

const char *
zp_listener_label(const struct zp_listener *l)
{
	return l->label;
}

/*
 * Stop accepting while at the connection limit: on every listener, since
 * the limit is the context's.
 */
void
zp_listener_pause(struct zp_listener *l)
{
	__atomic_store_n(&l->ctx->close_wake, 1, __ATOMIC_SEQ_CST);
	for (l = l->ctx->listener; l != NULL; l = l->next) {
		l->full = 1;
		listener_update(l);
	}
}

/* Accept again if paused for the limit and there is room. */
void
zp_listener_resume(struct zp_listener *l)
{
	struct zp_ctx	*ctx = l != NULL ? l->ctx : NULL;
	int		 full = 0;

	for (; l != NULL; l = l->next) {
		if (l->full && zp_ctx_open_all(l->ctx) < l->ctx->max_conns) {
			l->full = 0;
			listener_update(l);
		}
		full |= l->full;
	}
	/* No longer paused: the workers' closes need not wake us. */
	if (ctx != NULL && !full && !ctx->stopping)
		__atomic_store_n(&ctx->close_wake, 0, __ATOMIC_SEQ_CST);
}

/* A pair began or ended waiting for a local resource. */
void
zp_listener_update(struct zp_listener *l)
{
	for (; l != NULL; l = l->next)
		listener_update(l);
}

/* The bound address. */
const struct zp_addr *
zp_listener_addr(const struct zp_listener *l)
{
	return &l->addr;
}

/* Close the sockets and free, the whole list. */
void
zp_listener_free(struct zp_listener *l)
{
	struct zp_listener	*next;

	for (; l != NULL; l = next) {
		next = l->next;
		if (l->ev != NULL)
			event_free(l->ev);
		if (l->timer != NULL)
			event_free(l->timer);
		if (l->fd != -1)
			close(l->fd);
		free(l);
	}
}
