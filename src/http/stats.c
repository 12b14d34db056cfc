/*
 * stats.c - the --stats endpoint: GET /metrics (metrics.c renders it),
 * served by evhttp in zproxy's own event loop.
 *
 * The HTTP side is kept small
 * on purpose: one path, two methods, one answer per connection, tight
 * limits on what a client may send, so that the endpoint cannot be used to
 * grow zproxy's memory. Nor to take the relay's descriptors: a connection
 * lives --stats-timeout from accept at most, --stats-max-conns are open
 * at most, none is taken from the relay's reserve, and the relay can take
 * them all back (zp_stats_shed).
 */

#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "lib/clock.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "http/metrics.h"
#include "core/net.h"
#include "http/stats.h"
#include "relay/worker.h"

#define ZP_STATS_CONTENT_TYPE	"text/plain; version=0.0.4; charset=utf-8"
/* A scraper sends one short request line and a few headers. */
#define ZP_STATS_MAX_HEADERS	8192
/* Nothing here takes a body; a small one is read to answer 405. */
#define ZP_STATS_MAX_BODY	1024
/* How long accepting rests after EMFILE/ENFILE, in milliseconds. */
#define ZP_STATS_PAUSE_MS	250
/* How long it rests after giving descriptors back to the relay. */
#define ZP_STATS_SHED_MS	1000
/* Connections accepted in one go before accepting waits for stats_adopt. */
#define ZP_STATS_ADOPT_BATCH	8
/* Descriptors the process holds besides pairs, pipes and stats: stdio,
 * epoll, libevent's signal pair, both listeners, the log. */
#define ZP_STATS_BASE_FDS	8
/* Seconds between two idle runs of the server's timer (see there). */
#define ZP_STATS_IDLE_TICK	86400

/*
 * One client connection. evhttp owns it; we hold it only to count it and
 * to end it at its deadline. Until "adopted" (see stats_adopt) we know
 * only its bufferevent, which we made and hold a reference on. With
 * --threads, its request waits for the workers' counters (refresh) before
 * it is answered; the request is evhttp's, and ends with the connection.
 */
struct stats_conn {
	struct zp_stats_server		*s;
	struct bufferevent		*bev;	/* until adopted */
	struct evhttp_connection	*evcon;	/* once adopted */
	struct event			*deadline;
	struct evhttp_request		*req;	/* waits for refresh */
	struct zp_refresh		*refresh;
	TAILQ_ENTRY(stats_conn)		 entry;
};

TAILQ_HEAD(stats_conn_list, stats_conn);

struct zp_stats_server {
	struct zp_ctx		*ctx;
	struct evhttp		*http;
	struct evconnlistener	*lev;	/* owned by http */
	struct event		*timer;	/* ends a pause */
	struct event		*adopt;	/* made active by each accept */
	struct stats_conn_list	 pending; /* accepted, not adopted yet */
	struct stats_conn_list	 conns;	/* adopted and open */
	size_t			 npending;
	size_t			 nconns;
	size_t			 max_conns; /* --stats-max-conns */
	struct timeval		 timeout; /* --stats-timeout */
	int			 pause_ms;
	unsigned		 paused:1; /* lev off until timer fires */
	unsigned		 held:1;  /* lev off until adopt runs */
	unsigned		 lev_on:1;
	struct timeval		 last_warn;
	struct zp_addr		 addr;	/* bound */
};

/* Answer with a short text/plain body. */
static void
reply_text(struct evhttp_request *req, int code, const char *reason,
    const char *text)
{
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*b = evbuffer_new();

	evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
	evhttp_add_header(h, "Connection", "close");
	if (b == NULL || evbuffer_add(b, text, strlen(text)) == -1) {
		if (b != NULL)
			evbuffer_free(b);
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	evhttp_send_reply(req, code, reason, b);
	evbuffer_free(b);
}

/* Answer GET or HEAD /metrics with the counters as they are now. */
static void
stats_reply(struct zp_stats_server *s, struct evhttp_request *req)
{
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*b;

	if ((b = evbuffer_new()) == NULL ||
	    zp_metrics_render(s->ctx, b) == -1) {
		if (b != NULL)
			evbuffer_free(b);
		zp_log(s->ctx->log, ZP_LOG_WARN, "stats: out of memory "
		    "rendering /metrics");
		evhttp_send_error(req, HTTP_INTERNAL, NULL);
		return;
	}
	evhttp_add_header(h, "Content-Type", ZP_STATS_CONTENT_TYPE);
	evhttp_add_header(h, "Cache-Control", "no-store");
	evhttp_add_header(h, "Connection", "close");
	if (cmd == EVHTTP_REQ_HEAD) {
		char	len[24];

		/* evhttp 2.1 would send a HEAD reply's body: give it none. */
		snprintf(len, sizeof(len), "%zu", evbuffer_get_length(b));
		evhttp_add_header(h, "Content-Length", len);
		evhttp_send_reply(req, HTTP_OK, "OK", NULL);
	} else
		evhttp_send_reply(req, HTTP_OK, "OK", b);
	evbuffer_free(b);
}

/* The workers published their counters (or some did not in time). */
static void
stats_refreshed_cb(void *arg)
{
	struct stats_conn	*c = arg;
	struct evhttp_request	*req = c->req;

	c->req = NULL;
	c->refresh = NULL;
	stats_reply(c->s, req);
}

/* The adopted connection a request came on; NULL: one evhttp made. */
static struct stats_conn *
stats_conn_of(struct zp_stats_server *s, struct evhttp_request *req)
{
	struct evhttp_connection	*evcon;
	struct stats_conn		*c;

	evcon = evhttp_request_get_connection(req);
	TAILQ_FOREACH(c, &s->conns, entry)
		if (c->evcon == evcon)
			return c;
	return NULL;
}

/*
 * Every request: GET or HEAD /metrics, 404 elsewhere, 405 otherwise.
 * With --threads the answer waits in the loop, never on a lock, until
 * every worker published its counters (at most ZP_REFRESH_MS: one that
 * is busy is shown as it last published). Only on a connection of ours,
 * whose end cancels the wait (stats_conn_forget); another one is
 * answered at once.
 */
static void
stats_request_cb(struct evhttp_request *req, void *arg)
{
	struct zp_stats_server	*s = arg;
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	const char		*path = uri != NULL ?
				    evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct stats_conn	*c;

	if (path == NULL || strcmp(path, "/metrics") != 0) {
		reply_text(req, HTTP_NOTFOUND, "Not Found",
		    "404 not found: metrics are at /metrics\n");
		return;
	}
	if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
		evhttp_add_header(h, "Allow", "GET, HEAD");
		reply_text(req, 405, "Method Not Allowed",
		    "405 method not allowed: use GET\n");
		return;
	}
	if ((c = stats_conn_of(s, req)) != NULL && c->refresh == NULL &&
	    (c->refresh = zp_ctx_refresh(s->ctx, stats_refreshed_cb, c)) !=
	    NULL) {
		c->req = req;
		return;
	}
	stats_reply(s, req);
}

/* Turn accepting on or off to match the pause flags. */
static void
stats_listen_update(struct zp_stats_server *s)
{
	int	want = !s->paused && !s->held;

	if (want == (int)s->lev_on)
		return;
	if (want)
		(void)evconnlistener_enable(s->lev);
	else
		(void)evconnlistener_disable(s->lev);
	s->lev_on = want;
}

/*
 * The server's timer: it always runs, so that stats_accept_error_cb can
 * find the server among the base's events (see there). Idle, it fires once
 * a day and does nothing; during a pause it ends the pause.
 */
static void
stats_timer_arm(struct zp_stats_server *s)
{
	struct timeval	tv = { ZP_STATS_IDLE_TICK, 0 };

	if (s->paused) {
		tv.tv_sec = s->pause_ms / 1000;
		tv.tv_usec = (s->pause_ms % 1000) * 1000;
	}
	(void)evtimer_add(s->timer, &tv);
}

/* Stop accepting for ms milliseconds; clients wait in the backlog. */
static void
stats_pause(struct zp_stats_server *s, int ms)
{
	s->paused = 1;
	s->pause_ms = ms;
	stats_listen_update(s);
	stats_timer_arm(s);
}

/* The timer fired: end a pause, re-arm. */
static void
stats_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_stats_server	*s = arg;

	s->paused = 0;
	stats_listen_update(s);
	stats_timer_arm(s);
}

/*
 * A warning about connections closed unanswered, at most once a second:
 * under attack there is one per connection, and the counters tell the
 * rest.
 */
static void
stats_warn(struct zp_stats_server *s, const char *why)
{
	struct zp_stats	*st = &s->ctx->stats;
	struct timeval	 now, dt;

	zp_clock_now(&now);
	timersub(&now, &s->last_warn, &dt);
	if (dt.tv_sec < 1)
		return;
	s->last_warn = now;
	zp_log(s->ctx->log, ZP_LOG_WARN, "stats: %s (so far refused "
	    "max-conns=%llu descriptors=%llu, timed out %llu)", why,
	    (unsigned long long)st->stats_refused[ZP_STATS_REFUSED_CONNS],
	    (unsigned long long)st->stats_refused[ZP_STATS_REFUSED_FDS],
	    (unsigned long long)st->stats_timeouts);
}

/*
 * Take an evhttp connection's socket out of the loop before evhttp closes
 * it: libevent 2.1 closes first and deletes the events later, from its
 * loop, so with --threads another thread could be given the number in
 * between (ThreadSanitizer saw it; the late epoll_ctl fails, harmless but
 * a race). The bufferevent is not told to close the socket itself
 * (BEV_OPT_CLOSE_ON_FREE), which would defer the close to that later
 * pass: the descriptors that shedding frees must be free at once.
 */
static void
stats_evcon_quiet(struct evhttp_connection *evcon)
{
	struct bufferevent	*bev = evhttp_connection_get_bufferevent(evcon);

	if (bev != NULL)
		(void)bufferevent_disable(bev, EV_READ | EV_WRITE);
}

/*
 * Unlink an adopted connection and free our part of it; an answer it
 * waited for is not given (the request goes with the connection).
 */
static void
stats_conn_forget(struct stats_conn *c)
{
	struct zp_stats_server	*s = c->s;

	zp_ctx_refresh_cancel(c->refresh);
	TAILQ_REMOVE(&s->conns, c, entry);
	s->nconns--;
	s->ctx->stats.stats_open = s->nconns;
	event_free(c->deadline);
	free(c);
}

/*
 * evhttp is closing an adopted connection (answered, or the client left).
 * A request not answered yet that evhttp let go of (libevent 2.1 unlinks
 * it from a connection that failed, for its user to answer) is freed
 * here; one still linked is freed by evhttp after this.
 */
static void
stats_conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct stats_conn	*c = arg;

	if (c->req != NULL && evhttp_request_get_connection(c->req) == NULL)
		evhttp_request_free(c->req);
	stats_evcon_quiet(evcon);
	stats_conn_forget(c);
}

/*
 * Close an adopted connection now. Our bookkeeping does not wait for
 * evhttp's close callback, so that it cannot depend on when evhttp calls
 * it.
 */
static void
stats_conn_kill(struct stats_conn *c)
{
	struct evhttp_connection	*evcon = c->evcon;

	evhttp_connection_set_closecb(evcon, NULL, NULL);
	stats_conn_forget(c);
	stats_evcon_quiet(evcon);
	evhttp_connection_free(evcon);
}

/* --stats-timeout after accept and still open: the answer is not out. */
static void
stats_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
	struct stats_conn	*c = arg;
	struct zp_stats_server	*s = c->s;

	s->ctx->stats.stats_timeouts++;
	stats_conn_kill(c);
	stats_warn(s, "closed a connection at its deadline "
	    "(--stats-timeout)");
}

/*
 * Drop a connection before adoption: our reference on its bufferevent
 * goes, and the bufferevent with it if evhttp never took it.
 */
static void
stats_pending_drop(struct stats_conn *c)
{
	if (bufferevent_decref(c->bev) == 0)
		bufferevent_free(c->bev);
	event_free(c->deadline);
	free(c);
}

/*
 * Whether a stats connection on descriptor fd leaves the relay its
 * reserve: ctx->fd_reserve descriptors below RLIMIT_NOFILE that stats
 * never takes. What is in use is estimated from below twice: accept(2)
 * gives the lowest free number, so all below fd are taken; and every pair
 * holds two sockets, every pipe two ends. The larger estimate counts.
 */
static int
stats_fd_room(struct zp_stats_server *s, int fd)
{
	struct zp_ctx	*ctx = s->ctx;
	long		 used = (long)fd + 1, known;

	if (ctx->nofile <= 0)
		return 1;
	known = ZP_STATS_BASE_FDS + 2 * zp_ctx_open_all(ctx) +
	    (long)s->nconns + 1;
	/* This thread's pipes only: the others' are theirs to count. */
	if (ctx->pool != NULL) {
		struct zp_pipepool_stats	st;

		zp_pipepool_stats(ctx->pool, &st);
		known += 2 * (long)st.alive;
	}
	if (known > used)
		used = known;
	return used + ctx->fd_reserve <= ctx->nofile;
}

/*
 * Adopt the connections accepted since the last run: find each one's
 * evhttp connection (the argument of its bufferevent's callbacks, set
 * once evhttp took it), then close it at once if --stats-max-conns are
 * open or the relay's reserve would be touched, else start its deadline.
 * evhttp 2.1 has no hook that sees a connection when it is accepted, so
 * stats_bev_cb, which runs just before, queues it, and this runs from the
 * loop right after.
 */
static void
stats_adopt(struct zp_stats_server *s)
{
	struct zp_ctx		*ctx = s->ctx;
	struct stats_conn	*c;
	bufferevent_event_cb	 ecb;
	void			*arg;
	int			 fd, why;

	while ((c = TAILQ_FIRST(&s->pending)) != NULL) {
		TAILQ_REMOVE(&s->pending, c, entry);
		s->npending--;
		bufferevent_getcb(c->bev, NULL, NULL, &ecb, &arg);
		if (ecb == NULL || arg == NULL) {
			/* evhttp let go of it already (out of memory) */
			stats_pending_drop(c);
			continue;
		}
		c->evcon = arg;
		fd = bufferevent_getfd(c->bev);
		(void)bufferevent_decref(c->bev);	/* evhttp holds it */
		c->bev = NULL;
		if (s->nconns >= s->max_conns)
			why = ZP_STATS_REFUSED_CONNS;
		else if (!stats_fd_room(s, fd))
			why = ZP_STATS_REFUSED_FDS;
		else
			why = -1;
		if (why != -1) {
			ctx->stats.stats_refused[why]++;
			stats_evcon_quiet(c->evcon);
			evhttp_connection_free(c->evcon);
			event_free(c->deadline);
			free(c);
			if (why == ZP_STATS_REFUSED_FDS) {
				stats_pause(s, ZP_STATS_PAUSE_MS);
				stats_warn(s, "refusing connections: the "
				    "descriptors left are the relay's");
			} else
				stats_warn(s, "refusing connections: "
				    "--stats-max-conns are open");
			continue;
		}
		TAILQ_INSERT_TAIL(&s->conns, c, entry);
		s->nconns++;
		ctx->stats.stats_open = s->nconns;
		evhttp_connection_set_closecb(c->evcon, stats_conn_closed_cb,
		    c);
		(void)evtimer_add(c->deadline, &s->timeout);
	}
	s->held = 0;
	stats_listen_update(s);
}

static void
stats_adopt_cb(evutil_socket_t fd, short what, void *arg)
{
	stats_adopt(arg);
}

/*
 * evhttp accepted a connection and asks for its bufferevent: make it,
 * keep a reference (so that it outlives evhttp's if evhttp fails), queue
 * the connection for stats_adopt. After a batch, accepting stops until
 * stats_adopt ran, so that refused connections hold their descriptors for
 * one short turn of the loop only. NULL makes evhttp use one of its own:
 * that connection then goes uncounted, under evhttp's own timeout.
 */
static struct bufferevent *
stats_bev_cb(struct event_base *base, void *arg)
{
	struct zp_stats_server	*s = arg;
	struct stats_conn	*c;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->s = s;
	c->bev = bufferevent_socket_new(base, -1, 0);
	c->deadline = evtimer_new(base, stats_deadline_cb, c);
	if (c->bev == NULL || c->deadline == NULL) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		if (c->deadline != NULL)
			event_free(c->deadline);
		free(c);
		return NULL;
	}
	bufferevent_incref(c->bev);
	TAILQ_INSERT_TAIL(&s->pending, c, entry);
	s->npending++;
	event_active(s->adopt, EV_TIMEOUT, 1);
	if (s->npending >= ZP_STATS_ADOPT_BATCH) {
		s->held = 1;
		stats_listen_update(s);
	}
	return c->bev;
}

/* What stats_find_cb looks for, and what it found. */
struct stats_find {
	struct evconnlistener	*lev;
	struct zp_stats_server	*s;
};

/* event_base_foreach_event: is ev the timer of the server on this lev? */
static int
stats_find_cb(const struct event_base *base, const struct event *ev,
    void *arg)
{
	struct stats_find	*find = arg;
	struct zp_stats_server	*s;

	if (event_get_callback(ev) != stats_timer_cb)
		return 0;
	s = event_get_callback_arg(ev);
	if (s->lev != find->lev)
		return 0;
	find->s = s;
	return 1;
}

/*
 * accept(2) failed with something other than EAGAIN/EINTR: most likely
 * EMFILE or ENFILE while the proxy holds every descriptor. The listening
 * socket stays readable, so accepting again at once would spin the loop;
 * rest for a moment instead, as the proxy's own listener does.
 *
 * evhttp made itself the listener's callback argument, so the server is
 * found through its timer, which is always pending in the base: no global
 * table is needed, and the walk happens only on an accept error.
 */
static void
stats_accept_error_cb(struct evconnlistener *lev, void *http)
{
	struct stats_find	 find = { lev, NULL };
	struct zp_stats_server	*s;
	int			 err = errno;

	evconnlistener_disable(lev);
	(void)event_base_foreach_event(evconnlistener_get_base(lev),
	    stats_find_cb, &find);
	if ((s = find.s) == NULL)
		return;	/* cannot happen; better no stats than a busy loop */
	s->lev_on = 0;
	if (!s->paused)
		zp_log(s->ctx->log, ZP_LOG_WARN, "stats: accept: %s; "
		    "pausing %d ms", strerror(err), ZP_STATS_PAUSE_MS);
	stats_pause(s, ZP_STATS_PAUSE_MS);
}

/*
 * The relay ran out of descriptors: close every stats connection and
 * stop accepting for a while, so that /metrics goes blind and the relay
 * does not. Returns how many connections were closed (their descriptors
 * are free again when it returns). Safe on NULL.
 */
int
zp_stats_shed(struct zp_stats_server *s)
{
	int	n = 0;

	if (s == NULL)
		return 0;
	stats_adopt(s);
	while (!TAILQ_EMPTY(&s->conns)) {
		stats_conn_kill(TAILQ_FIRST(&s->conns));
		n++;
	}
	s->ctx->stats.stats_refused[ZP_STATS_REFUSED_FDS] += (uint64_t)n;
	if (!s->paused || n > 0)
		zp_log(s->ctx->log, ZP_LOG_WARN, "stats: the relay is out "
		    "of descriptors: closed %d stats connections, not "
		    "accepting for %d ms", n, ZP_STATS_SHED_MS);
	stats_pause(s, ZP_STATS_SHED_MS);
	return n;
}

/*
 * s's listening socket: fd when inherited (-1: bound to spec here), as
 * s->lev, with evhttp s->http bound to it. Returns 0, or -1 with err
 * filled; fd is closed or owned by s->lev either way.
 */
static int
stats_listen(struct zp_stats_server *s, const struct zp_listen_spec *spec,
    int fd, char *err, size_t errlen)
{
	if (fd != -1 && zp_net_adopt(fd, &s->addr, err, errlen) == -1) {
		close(fd);
		return -1;
	}
	if (fd == -1 && (fd = zp_net_listen(spec, 128, 0, "serve stats",
	    &s->addr, err, errlen)) == -1)
		return -1;
	if ((s->http = evhttp_new(s->ctx->base)) == NULL) {
		close(fd);
		snprintf(err, errlen, "stats: cannot set up HTTP");
		return -1;
	}
	/*
	 * Our own evconnlistener rather than evhttp_accept_socket_with_handle:
	 * its failure would leave unclear whether fd was closed, and we need
	 * the listener to set the accept error callback and to pause.
	 */
	if ((s->lev = evconnlistener_new(s->ctx->base, NULL, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd)) == NULL) {
		close(fd);
		snprintf(err, errlen, "stats: cannot set up the listener");
		return -1;
	}
	if (evhttp_bind_listener(s->http, s->lev) == NULL) {
		evconnlistener_free(s->lev);	/* closes fd */
		s->lev = NULL;
		snprintf(err, errlen, "stats: cannot set up the listener");
		return -1;
	}
	return 0;
}

/* The HTTP side of s: limits, timeouts, methods, the request callback. */
static void
stats_http_setup(struct zp_stats_server *s)
{
	struct timeval	idle;

	evhttp_set_bevcb(s->http, stats_bev_cb, s);
	evhttp_set_max_headers_size(s->http, ZP_STATS_MAX_HEADERS);
	evhttp_set_max_body_size(s->http, ZP_STATS_MAX_BODY);
	/*
	 * evhttp's inactivity timer, which the deadline makes moot; set a
	 * second past it (evhttp's default is 50 s), so that the deadline, and
	 * its count, always comes first: at the same 5 s the two raced for a
	 * client that had sent nothing.
	 */
	idle = s->timeout;
	idle.tv_sec += 1;
	evhttp_set_timeout_tv(s->http, &idle);
	/* Let every method reach stats_request_cb, so that it can say 405. */
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
	    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT |
	    EVHTTP_REQ_PATCH);
	evhttp_set_gencb(s->http, stats_request_cb, s);
}

/*
 * Listen on spec and serve GET /metrics from ctx's counters, in
 * ctx->base, under ctx->cfg's --stats-max-conns and --stats-timeout.
 * Returns the server, which owns the socket, the evhttp and every client
 * connection; or NULL with err filled.
 */
struct zp_stats_server *
zp_stats_new(struct zp_ctx *ctx, const struct zp_listen_spec *spec, int fd,
    char *err, size_t errlen)
{
	struct zp_stats_server	*s;
	char			 abuf[ZP_ADDRSTRLEN];
	double			 t = ZP_DEFAULT_STATS_TIMEOUT;

	if ((s = calloc(1, sizeof(*s))) == NULL) {
		snprintf(err, errlen, "stats: %s", strerror(errno));
		if (fd != -1)
			close(fd);
		return NULL;
	}
	s->ctx = ctx;
	TAILQ_INIT(&s->pending);
	TAILQ_INIT(&s->conns);
	s->max_conns = ZP_DEFAULT_STATS_MAX_CONNS;
	if (ctx->cfg != NULL && ctx->cfg->stats_max_conns > 0)
		s->max_conns = (size_t)ctx->cfg->stats_max_conns;
	if (ctx->cfg != NULL && ctx->cfg->stats_timeout > 0)
		t = ctx->cfg->stats_timeout;
	s->timeout = zp_seconds_tv(t);
	if (stats_listen(s, spec, fd, err, errlen) == -1)
		goto fail;
	s->lev_on = 1;
	s->timer = evtimer_new(ctx->base, stats_timer_cb, s);
	s->adopt = event_new(ctx->base, -1, 0, stats_adopt_cb, s);
	if (s->timer == NULL || s->adopt == NULL) {
		snprintf(err, errlen, "stats: cannot create events");
		goto fail;
	}
	stats_timer_arm(s);
	evconnlistener_set_error_cb(s->lev, stats_accept_error_cb);
	stats_http_setup(s);
	zp_log(ctx->log, ZP_LOG_NOTICE, "serving metrics on http://%s/metrics "
	    "(stats-max-conns %zu, stats-timeout %.3gs)",
	    zp_addr_str(&s->addr, abuf, sizeof(abuf)), s->max_conns, t);
	return s;
fail:
	zp_stats_free(s);
	return NULL;
}

/* The listening socket, for a takeover; -1 on NULL. */
int
zp_stats_fd(const struct zp_stats_server *s)
{
	return s == NULL || s->lev == NULL ? -1 : evconnlistener_get_fd(s->lev);
}

/* Stop serving: close the socket and every client connection, free. */
void
zp_stats_free(struct zp_stats_server *s)
{
	struct stats_conn	*c;

	if (s == NULL)
		return;
	while ((c = TAILQ_FIRST(&s->conns)) != NULL)
		stats_conn_kill(c);
	s->ctx->stats.stats_open = 0;
	if (s->http != NULL)
		evhttp_free(s->http);	/* its listener and connections too */
	while ((c = TAILQ_FIRST(&s->pending)) != NULL) {
		TAILQ_REMOVE(&s->pending, c, entry);
		stats_pending_drop(c);
	}
	if (s->adopt != NULL)
		event_free(s->adopt);
	if (s->timer != NULL)
		event_free(s->timer);
	free(s);
}
