/*
 * stats.c - the --stats endpoint: GET /metrics in Prometheus text
 * exposition format 0.0.4, served by evhttp in zproxy's own event loop.
 *
 * Rendering reads the context and writes nothing to it: a scrape costs one
 * walk of the open pairs and one getrusage(2). The HTTP side is kept small
 * on purpose: one path, two methods, one answer per connection, tight
 * limits on what a client may send, so that the endpoint cannot be used to
 * grow zproxy's memory. Nor to take the relay's descriptors: a connection
 * lives --stats-timeout from accept at most, --stats-max-conns are open
 * at most, none is taken from the relay's reserve, and the relay can take
 * them all back (zp_stats_shed).
 */

#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdarg.h>
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

#include "ctx.h"
#include "framing.h"
#include "log.h"
#include "net.h"
#include "pair.h"
#include "relay.h"
#include "stats.h"
#include "upstream.h"

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
/* Room for "name:port" of an upstream and a "#NN" for a repeated one. */
#define ZP_STATS_NAMELEN	320

/*
 * One client connection. evhttp owns it; we hold it only to count it and
 * to end it at its deadline. Until "adopted" (see stats_adopt) we know
 * only its bufferevent, which we made and hold a reference on.
 */
struct stats_conn {
	struct zp_stats_server		*s;
	struct bufferevent		*bev;	/* until adopted */
	struct evhttp_connection	*evcon;	/* once adopted */
	struct event			*deadline;
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

/* Where a render writes, and whether any write failed. */
struct render {
	struct evbuffer	*b;
	int		 failed;
};

/* One label of a sample: name="value". */
struct label {
	const char	*name;
	const char	*value;
};

/* A formatted append; remembers a failure (out of memory). */
static void
put(struct render *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void
put(struct render *r, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	if (evbuffer_add_vprintf(r->b, fmt, ap) == -1)
		r->failed = 1;
	va_end(ap);
}

/* Append bytes as they are. */
static void
put_raw(struct render *r, const char *s, size_t len)
{
	if (len > 0 && evbuffer_add(r->b, s, len) == -1)
		r->failed = 1;
}

/*
 * Append a label value escaped as the text format asks: backslash, double
 * quote and line feed become \\, \" and \n; every other byte is as is
 * (UTF-8 passes through).
 */
static void
put_label_value(struct render *r, const char *v)
{
	const char	*run = v;

	for (; *v != '\0'; v++) {
		const char *esc;

		switch (*v) {
		case '\\':
			esc = "\\\\";
			break;
		case '"':
			esc = "\\\"";
			break;
		case '\n':
			esc = "\\n";
			break;
		default:
			continue;
		}
		put_raw(r, run, (size_t)(v - run));
		put_raw(r, esc, 2);
		run = v + 1;
	}
	put_raw(r, run, (size_t)(v - run));
}

/* "# HELP" and "# TYPE" lines that open a metric family. */
static void
family(struct render *r, const char *name, const char *type, const char *help)
{
	put(r, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{l0="v0",...} : the part of a sample line before its value. */
static void
sample_head(struct render *r, const char *name, const struct label *l,
    size_t nl)
{
	size_t	i;

	put_raw(r, name, strlen(name));
	if (nl == 0)
		return;
	put_raw(r, "{", 1);
	for (i = 0; i < nl; i++) {
		put(r, "%s%s=\"", i > 0 ? "," : "", l[i].name);
		put_label_value(r, l[i].value);
		put_raw(r, "\"", 1);
	}
	put_raw(r, "}", 1);
}

/* A sample with an integer value. */
static void
sample_u64(struct render *r, const char *name, const struct label *l,
    size_t nl, uint64_t v)
{
	sample_head(r, name, l, nl);
	put(r, " %llu\n", (unsigned long long)v);
}

/* A family of one sample without labels: HELP, TYPE and the value. */
static void
single_u64(struct render *r, const char *name, const char *type,
    const char *help, uint64_t v)
{
	family(r, name, type, help);
	sample_u64(r, name, NULL, 0, v);
}

/* A counter family with one sample per direction, up and down. */
static void
updown_u64(struct render *r, const char *name, const char *help,
    uint64_t up, uint64_t down)
{
	struct label	l = { "direction", "up" };

	family(r, name, "counter", help);
	sample_u64(r, name, &l, 1, up);
	l.value = "down";
	sample_u64(r, name, &l, 1, down);
}

/* A timeval as seconds with microseconds, "1733155346.123456". */
static void
sample_tv(struct render *r, const char *name, const struct timeval *tv)
{
	put(r, "%s %lld.%06ld\n", name, (long long)tv->tv_sec,
	    (long)tv->tv_usec);
}

/*
 * The label value of each upstream: "host:port", and "host:port#N" for
 * the Nth entry of a name given more than once, so that no two series of a
 * family share their labels.
 */
static void
upstream_labels(const struct zp_upstreams *ups, size_t n,
    char (*names)[ZP_STATS_NAMELEN])
{
	char	base[ZP_STATS_NAMELEN];
	size_t	i, j;
	int	seen;

	for (i = 0; i < n; i++) {
		zp_upstream_name(zp_upstream_get(ups, i), base, sizeof(base));
		seen = 0;
		for (j = 0; j < i; j++) {
			char other[ZP_STATS_NAMELEN];

			zp_upstream_name(zp_upstream_get(ups, j), other, sizeof(other));
			if (strcmp(base, other) == 0)
				seen++;
		}
		if (seen == 0)
			snprintf(names[i], ZP_STATS_NAMELEN, "%s", base);
		else
			snprintf(names[i], ZP_STATS_NAMELEN, "%.*s#%d",
			    ZP_STATS_NAMELEN - 16, base, seen + 1);
	}
}

/* CPU time this process used, user and system. */
static void
cpu_time(struct timeval *tv)
{
	struct rusage	ru;

	timerclear(tv);
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		timeradd(&ru.ru_utime, &ru.ru_stime, tv);
}

/* The per-upstream families with one sample per upstream. */
enum upstream_metric {
	UPSTREAM_UP,
	UPSTREAM_FAILS,
	UPSTREAM_OPEN,
	UPSTREAM_CONNS,
	UPSTREAM_FAILED,
};

static const struct {
	const char		*name;
	const char		*type;
	const char		*help;
	enum upstream_metric	 what;
} upstream_families[] = {
	{ "zproxy_upstream_up", "gauge",
	    "Whether the upstream is taken to be up (1) or down (0).",
	    UPSTREAM_UP },
	{ "zproxy_upstream_consecutive_failures", "gauge",
	    "Connects to the upstream that failed in a row, up to now.",
	    UPSTREAM_FAILS },
	{ "zproxy_upstream_connections_open", "gauge",
	    "Connections open to the upstream and relaying.", UPSTREAM_OPEN },
	{ "zproxy_upstream_connections_total", "counter",
	    "Connections to the upstream that were established.",
	    UPSTREAM_CONNS },
	{ "zproxy_upstream_connections_failed_total", "counter",
	    "Attempts to connect to the upstream that failed on every "
	    "address.", UPSTREAM_FAILED },
};

/* One upstream's value of one of upstream_families. */
static uint64_t
upstream_value(const struct zp_upstream *u, enum upstream_metric what)
{
	switch (what) {
	case UPSTREAM_UP:
		return u->up ? 1 : 0;
	case UPSTREAM_FAILS:
		return u->fails > 0 ? (uint64_t)u->fails : 0;
	case UPSTREAM_OPEN:
		return u->active;
	case UPSTREAM_CONNS:
		return u->conns_total;
	case UPSTREAM_FAILED:
		return u->conns_failed;
	}
	return 0;
}

/* Every per-upstream family. */
static void
render_upstreams(struct render *r, struct zp_ctx *ctx)
{
	char			(*names)[ZP_STATS_NAMELEN];
	const struct zp_traffic	*t;
	struct label		 l[2];
	size_t			 i, f, n = zp_upstreams_count(ctx->ups);

	if (n > ZP_MAX_UPSTREAMS)
		n = ZP_MAX_UPSTREAMS;
	if ((names = calloc(n > 0 ? n : 1, sizeof(*names))) == NULL) {
		r->failed = 1;
		return;
	}
	upstream_labels(ctx->ups, n, names);
	l[0].name = "upstream";
	l[1].name = "direction";
	for (f = 0; f < sizeof(upstream_families) /
	    sizeof(upstream_families[0]); f++) {
		family(r, upstream_families[f].name, upstream_families[f].type,
		    upstream_families[f].help);
		for (i = 0; i < n; i++) {
			l[0].value = names[i];
			sample_u64(r, upstream_families[f].name, l, 1,
			    upstream_value(zp_upstream_get(ctx->ups, i),
			    upstream_families[f].what));
		}
	}
	family(r, "zproxy_upstream_bytes_total", "counter",
	    "Bytes relayed through the upstream: up is client to upstream, "
	    "down is upstream to client.");
	for (i = 0; i < n; i++) {
		t = &ctx->stats.ups[i];
		l[0].value = names[i];
		l[1].value = "up";
		sample_u64(r, "zproxy_upstream_bytes_total", l, 2,
		    t->up.bytes);
		l[1].value = "down";
		sample_u64(r, "zproxy_upstream_bytes_total", l, 2,
		    t->down.bytes);
	}
	if (ctx->cfg->framing != ZP_FRAMING_NONE) {
		family(r, "zproxy_frames_total", "counter",
		    "Messages (--framing) delivered whole to the upstream; in "
		    "splice mode lf and nul messages are counted only where "
		    "zproxy reads them, so this is a lower bound there.");
		for (i = 0; i < n; i++) {
			l[0].value = names[i];
			sample_u64(r, "zproxy_frames_total", l, 1,
			    ctx->stats.ups[i].up.frames);
		}
	}
	free(names);
}

/*
 * Append the metrics, Prometheus text exposition format 0.0.4, to buf.
 * Returns 0, or -1 when out of memory (buf then holds part of them).
 */
int
zp_stats_render(struct zp_ctx *ctx, struct evbuffer *buf)
{
	struct render		 r = { buf, 0 };
	struct zp_pair_modes	 m;
	struct label		 l;
	struct timeval		 cpu;
	size_t			 nalive = 0, nfree = 0;
	unsigned long		 killed = 0, created = 0;
	int			 i;

	zp_pairs_modes(ctx, &m);

	single_u64(&r, "zproxy_connections_open", "gauge",
	    "Client connections open now.", ctx->stats.conns_open);
	single_u64(&r, "zproxy_connections_total", "counter",
	    "Client connections accepted.", ctx->stats.conns_total);
	single_u64(&r, "zproxy_connections_failed_total", "counter",
	    "Client connections closed because no upstream answered.",
	    ctx->stats.conns_failed);
	single_u64(&r, "zproxy_max_connections", "gauge",
	    "Most client connections open at once (--max-conns); later ones "
	    "wait in the listen backlog.",
	    ctx->max_conns > 0 ? (uint64_t)ctx->max_conns : 0);

	updown_u64(&r, "zproxy_bytes_total", "Bytes relayed: up is client "
	    "to upstream, down is upstream to client.",
	    ctx->stats.all.up.bytes, ctx->stats.all.down.bytes);
	updown_u64(&r, "zproxy_spliced_bytes_total", "Of zproxy_bytes_total, "
	    "the bytes that went through a pipe (zero-copy) rather than a "
	    "buffer.", ctx->stats.all.up.spliced,
	    ctx->stats.all.down.spliced);

	render_upstreams(&r, ctx);

	family(&r, "zproxy_pairs", "gauge",
	    "Open connections by data path: splice, copy, or mixed (one "
	    "direction each).");
	l.name = "mode";
	l.value = "splice";
	sample_u64(&r, "zproxy_pairs", &l, 1, m.splice);
	l.value = "copy";
	sample_u64(&r, "zproxy_pairs", &l, 1, m.copy);
	l.value = "mixed";
	sample_u64(&r, "zproxy_pairs", &l, 1, m.mixed);

	family(&r, "zproxy_copy_fallbacks_total", "counter",
	    "Connections or directions that relay by copying although "
	    "splice was asked for, by reason.");
	l.name = "reason";
	l.value = "no-pipe";
	sample_u64(&r, "zproxy_copy_fallbacks_total", &l, 1,
	    ctx->stats.fallbacks[ZP_FALLBACK_POOL]);
	l.value = "splice-refused";
	sample_u64(&r, "zproxy_copy_fallbacks_total", &l, 1,
	    ctx->stats.fallbacks[ZP_FALLBACK_REFUSED]);

	if (ctx->pool != NULL) {
		struct zp_pipepool_stats	st;

		zp_pipepool_stats(ctx->pool, &st);
		nalive = st.alive;
		nfree = st.pooled;
		killed = st.killed;
		created = st.created;
	}
	single_u64(&r, "zproxy_pipes_pooled", "gauge",
	    "Empty pipes waiting in the pool.", nfree);
	single_u64(&r, "zproxy_pipes_in_use", "gauge",
	    "Pipes held by open connections.",
	    nalive > nfree ? nalive - nfree : 0);
	single_u64(&r, "zproxy_pipes_created_total", "counter",
	    "Pipes the pool made.", created);
	single_u64(&r, "zproxy_pipes_killed_total", "counter",
	    "Pipes closed instead of reused because they still held bytes.",
	    killed);

	single_u64(&r, "zproxy_accept_pauses_total", "counter",
	    "Times accepting paused for lack of file descriptors.",
	    ctx->stats.accept_pauses);
	single_u64(&r, "zproxy_connect_local_errors_total", "counter",
	    "Connects (clients' and health checks') that failed for a lack of "
	    "a local resource: descriptors, memory or local ports; they count "
	    "against no upstream.", ctx->stats.local_errors);
	single_u64(&r, "zproxy_connections_waiting", "gauge",
	    "Client connections waiting to retry such a connect; meanwhile "
	    "nothing is accepted.", ctx->stats.conns_waiting);
	single_u64(&r, "zproxy_connections_local_failed_total", "counter",
	    "Client connections closed (end=local-resource) because a local "
	    "resource stayed short for --connect-timeout.",
	    ctx->stats.conns_local_failed);
	single_u64(&r, "zproxy_clients_denied_total", "counter",
	    "Clients refused by --deny or --allow (at accept, or after "
	    "their PROXY header), or by --proxy-from.",
	    ctx->stats.clients_denied);
	single_u64(&r, "zproxy_clients_source_limited_total", "counter",
	    "Clients refused by --max-conns-per-source.",
	    ctx->stats.clients_source_limited);
	single_u64(&r, "zproxy_bad_proxy_headers_total", "counter",
	    "Connections closed (end=bad-proxy-header) under --accept-proxy: "
	    "their PROXY header was missing, malformed, too long or late.",
	    ctx->stats.bad_proxy_headers);
	single_u64(&r, "zproxy_bad_destinations_total", "counter",
	    "Clients refused (end=bad-destination) because -u original would "
	    "have connected back to zproxy or outside --allow-dst.",
	    ctx->stats.bad_destinations);

	if (ctx->cfg->framing != ZP_FRAMING_NONE) {
		family(&r, "zproxy_stream_moves_total", "counter",
		    "Framed streams moved to another upstream at a message "
		    "boundary, by reason.");
		l.name = "reason";
		for (i = 0; i < ZP_MOVE_MAX; i++) {
			l.value = zp_move_reason_str(i);
			sample_u64(&r, "zproxy_stream_moves_total", &l, 1,
			    ctx->stats.moves[i]);
		}
		single_u64(&r, "zproxy_framing_errors_total", "counter",
		    "Framed connections whose framing failed (a message over "
		    "--max-frame, a bad octet header): relayed as plain bytes "
		    "from there on.", ctx->stats.framing_errors);
		single_u64(&r, "zproxy_replayed_bytes_total", "counter",
		    "Bytes sent again to the next upstream after a move "
		    "(--replay-window).", ctx->stats.replayed);
	}

	family(&r, "zproxy_timeouts_total", "counter",
	    "Connections closed by a timeout: idle (--idle-timeout) or fin "
	    "(--fin-timeout).");
	l.name = "kind";
	l.value = "idle";
	sample_u64(&r, "zproxy_timeouts_total", &l, 1,
	    ctx->stats.timeouts_idle);
	l.value = "fin";
	sample_u64(&r, "zproxy_timeouts_total", &l, 1,
	    ctx->stats.timeouts_fin);

	single_u64(&r, "zproxy_lingers_total", "counter",
	    "Pairs that, after one side reset, waited for the other side to "
	    "acknowledge everything sent to it.", ctx->stats.lingers);
	single_u64(&r, "zproxy_linger_timeouts_total", "counter",
	    "Lingering pairs given up on after --linger-timeout.",
	    ctx->stats.linger_timeouts);
	single_u64(&r, "zproxy_discarded_bytes_total", "counter",
	    "Bytes read from a peer after the other side was gone, and "
	    "thrown away.", ctx->stats.discarded);
	single_u64(&r, "zproxy_stats_connections_open", "gauge",
	    "Connections to this endpoint open now.", ctx->stats.stats_open);
	single_u64(&r, "zproxy_stats_max_connections", "gauge",
	    "Most connections to this endpoint open at once "
	    "(--stats-max-conns); later ones are closed at accept.",
	    ctx->cfg != NULL && ctx->cfg->stats_max_conns > 0 ?
	    (uint64_t)ctx->cfg->stats_max_conns : 0);
	family(&r, "zproxy_stats_refused_total", "counter",
	    "Connections to this endpoint closed unanswered: at accept with "
	    "--stats-max-conns open (max-conns), or to keep descriptors for "
	    "the relay (descriptors).");
	l.name = "reason";
	l.value = "max-conns";
	sample_u64(&r, "zproxy_stats_refused_total", &l, 1,
	    ctx->stats.stats_refused[ZP_STATS_REFUSED_CONNS]);
	l.value = "descriptors";
	sample_u64(&r, "zproxy_stats_refused_total", &l, 1,
	    ctx->stats.stats_refused[ZP_STATS_REFUSED_FDS]);
	single_u64(&r, "zproxy_stats_timeouts_total", "counter",
	    "Connections to this endpoint closed because no answer was "
	    "written within --stats-timeout of accept.",
	    ctx->stats.stats_timeouts);

	cpu_time(&cpu);
	family(&r, "zproxy_cpu_seconds_total", "counter",
	    "CPU time used by zproxy, user and system, in seconds.");
	sample_tv(&r, "zproxy_cpu_seconds_total", &cpu);
	family(&r, "zproxy_start_time_seconds", "gauge",
	    "When zproxy started, in seconds since the Unix epoch.");
	sample_tv(&r, "zproxy_start_time_seconds", &ctx->started);

	return r.failed ? -1 : 0;
}

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

/* Every request: GET or HEAD /metrics, 404 elsewhere, 405 otherwise. */
static void
stats_request_cb(struct evhttp_request *req, void *arg)
{
	struct zp_stats_server	*s = arg;
	const struct evhttp_uri	*uri = evhttp_request_get_evhttp_uri(req);
	const char		*path = uri != NULL ?
				    evhttp_uri_get_path(uri) : NULL;
	enum evhttp_cmd_type	 cmd = evhttp_request_get_command(req);
	struct evkeyvalq	*h = evhttp_request_get_output_headers(req);
	struct evbuffer		*b;

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
	if ((b = evbuffer_new()) == NULL ||
	    zp_stats_render(s->ctx, b) == -1) {
		if (b != NULL)
			evbuffer_free(b);
		zp_log(&s->ctx->log, ZP_LOG_WARN, "stats: out of memory "
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

	gettimeofday(&now, NULL);
	timersub(&now, &s->last_warn, &dt);
	if (dt.tv_sec < 1)
		return;
	s->last_warn = now;
	zp_log(&s->ctx->log, ZP_LOG_WARN, "stats: %s (so far refused "
	    "max-conns=%llu descriptors=%llu, timed out %llu)", why,
	    (unsigned long long)st->stats_refused[ZP_STATS_REFUSED_CONNS],
	    (unsigned long long)st->stats_refused[ZP_STATS_REFUSED_FDS],
	    (unsigned long long)st->stats_timeouts);
}

/* Unlink an adopted connection and free our part of it. */
static void
stats_conn_forget(struct stats_conn *c)
{
	struct zp_stats_server	*s = c->s;

	TAILQ_REMOVE(&s->conns, c, entry);
	s->nconns--;
	s->ctx->stats.stats_open = s->nconns;
	event_free(c->deadline);
	free(c);
}

/* evhttp is closing an adopted connection (answered, or the client left). */
static void
stats_conn_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	stats_conn_forget(arg);
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
	known = ZP_STATS_BASE_FDS + 2 * (long)ctx->stats.conns_open +
	    (long)s->nconns + 1;
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
		zp_log(&s->ctx->log, ZP_LOG_WARN, "stats: accept: %s; "
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
		zp_log(&s->ctx->log, ZP_LOG_WARN, "stats: the relay is out "
		    "of descriptors: closed %d stats connections, not "
		    "accepting for %d ms", n, ZP_STATS_SHED_MS);
	stats_pause(s, ZP_STATS_SHED_MS);
	return n;
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
	struct timeval		 idle;
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
	if (fd != -1 && zp_net_adopt(fd, &s->addr, err, errlen) == -1) {
		close(fd);
		goto fail;
	}
	if (fd == -1 && (fd = zp_net_listen(spec, 128, 0, "serve stats",
	    &s->addr, err, errlen)) == -1)
		goto fail;
	if ((s->http = evhttp_new(ctx->base)) == NULL) {
		close(fd);
		snprintf(err, errlen, "stats: cannot set up HTTP");
		goto fail;
	}
	/*
	 * Our own evconnlistener rather than evhttp_accept_socket_with_handle:
	 * its failure would leave unclear whether fd was closed, and we need
	 * the listener to set the accept error callback and to pause.
	 */
	if ((s->lev = evconnlistener_new(ctx->base, NULL, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0, fd)) == NULL) {
		close(fd);
		snprintf(err, errlen, "stats: cannot set up the listener");
		goto fail;
	}
	if (evhttp_bind_listener(s->http, s->lev) == NULL) {
		evconnlistener_free(s->lev);	/* closes fd */
		s->lev = NULL;
		snprintf(err, errlen, "stats: cannot set up the listener");
		goto fail;
	}
	s->lev_on = 1;
	s->timer = evtimer_new(ctx->base, stats_timer_cb, s);
	s->adopt = event_new(ctx->base, -1, 0, stats_adopt_cb, s);
	if (s->timer == NULL || s->adopt == NULL) {
		snprintf(err, errlen, "stats: cannot create events");
		goto fail;
	}
	stats_timer_arm(s);
	evconnlistener_set_error_cb(s->lev, stats_accept_error_cb);
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
	zp_log(&ctx->log, ZP_LOG_NOTICE, "serving metrics on http://%s/metrics "
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
