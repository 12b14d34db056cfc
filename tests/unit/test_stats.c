/*
 * test_stats.c - unit tests for the --stats endpoint (stats.c).
 *
 * The rendering tests build a struct zp_ctx by hand: a real config with
 * upstream specs, real zp_upstreams, counters set to distinct values and
 * a few fake pairs linked into ctx->pairs (their mode chosen through their
 * directions' ops pointers), then compare zp_metrics_render()'s output line
 * by line and check the format's rules on the whole text.
 *
 * The server tests start zp_stats_new() on 127.0.0.1 in a real event base
 * and talk HTTP to it with a plain socket, running the loop with
 * EVLOOP_NONBLOCK between poll(2) rounds, every wait bounded.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/config.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "http/metrics.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "lib/pipepool_int.h"
#include "relay/relay.h"
#include "http/stats.h"
#include "core/upstream.h"
#include "core/upstream_int.h"
#include "zproxy.h"

#define DEADLINE_MS	5000
#define NPAIRS		4

struct fixture {
	struct zp_config	 cfg;
	struct zp_ctx		 ctx;
	struct zp_log		 logst;	/* ctx.log */
	struct zp_pair		 pairs[NPAIRS];
	struct zp_stats_server	*server;
	unsigned short		 port;
	FILE			*logfp;
};

/* Milliseconds on the monotonic clock. */
static long long
now_ms(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
add_upstream(struct zp_config *cfg, const char *host, const char *port)
{
	struct zp_upstream_spec	*us = &cfg->upstreams[cfg->nupstreams++];

	us->host = strdup(host);
	assert_non_null(us->host);
	snprintf(us->port, sizeof(us->port), "%s", port);
}

/* Link a fake open pair into ctx->pairs. */
static void
add_pair(struct fixture *f, int i, int up_idx, uint64_t up, uint64_t down,
    const struct zp_relay_ops *up_ops, const struct zp_relay_ops *down_ops)
{
	struct zp_pair	*p = &f->pairs[i];

	memset(p, 0, sizeof(*p));
	p->ctx = &f->ctx;
	p->id = (uint64_t)i + 1;
	p->state = up_idx >= 0 ? ZP_PAIR_RELAYING : ZP_PAIR_CONNECTING;
	p->up_idx = up_idx;
	p->up.bytes = up;
	p->down.bytes = down;
	p->up.ops = up_ops;
	p->down.ops = down_ops;
	p->client.fd = p->upstream.fd = -1;
	TAILQ_INSERT_TAIL(&f->ctx.pairs, p, entry);
}

/*
 * Upstreams: a plain one, one whose name needs every escape, an IPv6
 * literal, and the first one again. Counters and tallies in ctx->stats
 * and zp_upstream; four open pairs (for their modes): splice on upstream
 * 0, copy on 1, mixed on 0, and one still connecting (no upstream yet,
 * copy).
 */
static int
setup_ctx(void **state)
{
	struct fixture	*f = calloc(1, sizeof(*f));
	struct zp_ctx	*ctx;

	assert_non_null(f);
	ctx = &f->ctx;
	zp_config_init(&f->cfg);
	add_upstream(&f->cfg, "10.0.0.1", "80");
	add_upstream(&f->cfg, "we\"ird\\na\nme", "8080");
	add_upstream(&f->cfg, "::1", "443");
	add_upstream(&f->cfg, "10.0.0.1", "80");
	TAILQ_INIT(&ctx->pairs);
	ctx->cfg = &f->cfg;
	zp_wire(ctx);	/* as zp_run() does */
	assert_non_null(f->logfp = tmpfile());
	ctx->log = &f->logst;
	zp_log_init(ctx->log, f->logfp, ZP_LOG_DEBUG);
	assert_non_null(ctx->base = event_base_new());
	assert_non_null(ctx->ups = zp_upstreams_new(f->cfg.upstreams,
	    f->cfg.nupstreams, ZP_BALANCE_ROUNDROBIN, 1, 10.0, ctx->log));

	ctx->stats.conns_total = 1001;
	ctx->stats.conns_open = NPAIRS;
	ctx->load = NPAIRS;	/* what zp_pair_start() adds, for --max-conns */
	ctx->stats.conns_failed = 17;
	ctx->stats.all.up.bytes = 5000000111ULL;	/* above 2^32 */
	ctx->stats.all.down.bytes = 123678;
	ctx->stats.all.up.spliced = 4000000093ULL;
	ctx->stats.all.down.spliced = 100007;
	ctx->stats.fallbacks[ZP_FALLBACK_POOL] = 3;
	ctx->stats.fallbacks[ZP_FALLBACK_REFUSED] = 4;
	ctx->stats.accept_pauses = 5;
	ctx->stats.local_errors = 11;
	ctx->stats.conns_waiting = 2;
	ctx->stats.conns_local_failed = 3;
	ctx->stats.timeouts_idle = 6;
	ctx->stats.timeouts_fin = 7;
	ctx->stats.lingers = 8;
	ctx->stats.linger_timeouts = 9;
	ctx->stats.discarded = 10;
	ctx->stats.clients_denied = 12;
	ctx->stats.clients_source_limited = 13;
	ctx->max_conns = 3000;
	ctx->started.tv_sec = 1700000000;
	ctx->started.tv_usec = 250000;

	/* A pool's counters only: no pipe is made. */
	assert_non_null(ctx->pool = calloc(1, sizeof(*ctx->pool)));
	ctx->pool->nalive = 10;
	ctx->pool->nfree = 4;
	ctx->pool->killed = 2;
	ctx->pool->created = 12;

	ctx->ups->v[0].active = 2;
	ctx->ups->v[0].conns_total = 900;
	ctx->ups->v[0].conns_failed = 1;
	ctx->stats.ups[0].up.bytes = 1110;
	ctx->stats.ups[0].down.bytes = 2220;
	ctx->ups->v[1].active = 1;
	ctx->ups->v[1].conns_total = 80;
	ctx->ups->v[1].conns_failed = 20;
	ctx->stats.ups[1].up.bytes = 31;
	ctx->stats.ups[1].down.bytes = 42;
	ctx->ups->v[1].up = 0;
	ctx->ups->v[1].fails = 3;

	add_pair(f, 0, 0, 100, 200, &zp_relay_splice, &zp_relay_splice);
	add_pair(f, 1, 1, 1, 2, &zp_relay_copy, &zp_relay_copy);
	add_pair(f, 2, 0, 10, 20, &zp_relay_splice, &zp_relay_copy);
	add_pair(f, 3, -1, 0, 0, &zp_relay_copy, &zp_relay_copy);
	*state = f;
	return 0;
}

static int
teardown_ctx(void **state)
{
	struct fixture	*f = *state;

	zp_stats_free(f->server);
	zp_upstreams_free(f->ctx.ups);
	free(f->ctx.pool);	/* counters only: nothing to close */
	zp_config_free(&f->cfg);
	event_base_free(f->ctx.base);
	fclose(f->logfp);
	free(f);
	return 0;
}

/* Render into a NUL-terminated string the caller frees. */
static char *
render(struct zp_ctx *ctx)
{
	struct evbuffer	*b = evbuffer_new();
	size_t		 len;
	char		*s;

	assert_non_null(b);
	assert_int_equal(zp_metrics_render(ctx, b), 0);
	len = evbuffer_get_length(b);
	assert_non_null(s = malloc(len + 1));
	assert_int_equal(evbuffer_remove(b, s, len), (int)len);
	s[len] = '\0';
	evbuffer_free(b);
	return s;
}

/* Does text hold exactly this line? */
static int
has_line(const char *text, const char *line)
{
	size_t		 n = strlen(line);
	const char	*p = text;

	while ((p = strstr(p, line)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
		p += 1;
	}
	return 0;
}

static void
expect_line(const char *text, const char *line)
{
	if (!has_line(text, line))
		fail_msg("no line '%s' in:\n%s", line, text);
}

/* Value of the sample line that begins with "head " (name and labels). */
static double
sample_value(const char *text, const char *head)
{
	size_t		 n = strlen(head);
	const char	*p = text;

	while ((p = strstr(p, head)) != NULL) {
		if ((p == text || p[-1] == '\n') && p[n] == ' ')
			return strtod(p + n + 1, NULL);
		p += 1;
	}
	fail_msg("no sample '%s'", head);
	return -1;
}

/* Proves: the overall connection, byte and limit counters, as tallied
 * (above 2^32 too). */
static void
test_render_totals(void **state)
{
	struct fixture	*f = *state;
	char		*t = render(&f->ctx);

	expect_line(t, "zproxy_connections_open 4");
	expect_line(t, "zproxy_connections_total 1001");
	expect_line(t, "zproxy_connections_failed_total 17");
	expect_line(t, "zproxy_max_connections 3000");
	expect_line(t, "zproxy_bytes_total{direction=\"up\"} 5000000111");
	expect_line(t, "zproxy_bytes_total{direction=\"down\"} 123678");
	expect_line(t, "zproxy_start_time_seconds 1700000000.250000");
	free(t);
}

/* Proves: every per-upstream family, each upstream's bytes its own, and
 * a repeated upstream kept apart ("#2"). */
static void
test_render_upstreams(void **state)
{
	struct fixture	*f = *state;
	char		*t = render(&f->ctx);

	expect_line(t, "zproxy_upstream_up{upstream=\"10.0.0.1:80\"} 1");
	expect_line(t, "zproxy_upstream_up{upstream=\"[::1]:443\"} 1");
	expect_line(t, "zproxy_upstream_up{upstream=\"10.0.0.1:80#2\"} 1");
	expect_line(t, "zproxy_upstream_consecutive_failures"
	    "{upstream=\"10.0.0.1:80\"} 0");
	expect_line(t, "zproxy_upstream_connections_open"
	    "{upstream=\"10.0.0.1:80\"} 2");
	expect_line(t, "zproxy_upstream_connections_total"
	    "{upstream=\"10.0.0.1:80\"} 900");
	expect_line(t, "zproxy_upstream_connections_failed_total"
	    "{upstream=\"10.0.0.1:80\"} 1");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"10.0.0.1:80\",direction=\"up\"} 1110");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"10.0.0.1:80\",direction=\"down\"} 2220");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"[::1]:443\",direction=\"up\"} 0");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"10.0.0.1:80#2\",direction=\"down\"} 0");
	free(t);
}

/* Proves: label values escape backslash, double quote and line feed
 * (and nothing else), so the odd upstream name stays one line. */
static void
test_render_escaping(void **state)
{
	struct fixture	*f = *state;
	char		*t = render(&f->ctx);

	expect_line(t, "zproxy_upstream_up"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\"} 0");
	expect_line(t, "zproxy_upstream_consecutive_failures"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\"} 3");
	expect_line(t, "zproxy_upstream_connections_open"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\"} 1");
	expect_line(t, "zproxy_upstream_connections_failed_total"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\"} 20");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\",direction=\"up\"} 31");
	expect_line(t, "zproxy_upstream_bytes_total"
	    "{upstream=\"we\\\"ird\\\\na\\nme:8080\",direction=\"down\"} 42");
	free(t);
}

/* Proves: the pairs gauge by mode (from the ops pointers, the connecting
 * pair included), pipes, fallbacks by reason, pauses, timeouts by kind,
 * lingers and discarded bytes. */
static void
test_render_datapath(void **state)
{
	struct fixture	*f = *state;
	char		*t = render(&f->ctx);

	expect_line(t, "zproxy_pairs{mode=\"splice\"} 1");
	expect_line(t, "zproxy_pairs{mode=\"copy\"} 2");
	expect_line(t, "zproxy_pairs{mode=\"mixed\"} 1");
	expect_line(t, "zproxy_pipes_pooled 4");
	expect_line(t, "zproxy_pipes_in_use 6");
	expect_line(t, "zproxy_pipes_created_total 12");
	expect_line(t, "zproxy_pipes_killed_total 2");
	expect_line(t, "zproxy_copy_fallbacks_total{reason=\"no-pipe\"} 3");
	expect_line(t,
	    "zproxy_copy_fallbacks_total{reason=\"splice-refused\"} 4");
	expect_line(t, "zproxy_accept_pauses_total 5");
	expect_line(t, "zproxy_connect_local_errors_total 11");
	expect_line(t, "zproxy_connections_waiting 2");
	expect_line(t, "zproxy_connections_local_failed_total 3");
	expect_line(t, "zproxy_timeouts_total{kind=\"idle\"} 6");
	expect_line(t, "zproxy_timeouts_total{kind=\"fin\"} 7");
	expect_line(t, "zproxy_lingers_total 8");
	expect_line(t, "zproxy_linger_timeouts_total 9");
	expect_line(t, "zproxy_discarded_bytes_total 10");
	expect_line(t, "zproxy_clients_denied_total 12");
	expect_line(t, "zproxy_clients_source_limited_total 13");
	free(t);
}

/* Proves: the spliced bytes, each direction apart; a lazy direction
 * (copying until bulk) counts as splice, and stops counting so once it
 * fell back. */
static void
test_render_spliced_lazy(void **state)
{
	struct fixture	*f = *state;
	char		*t;

	f->pairs[1].up.lazy = f->pairs[1].down.lazy = 1;	/* copy -> splice */
	f->pairs[3].up.lazy = 1;				/* copy -> mixed */
	t = render(&f->ctx);
	expect_line(t, "zproxy_spliced_bytes_total{direction=\"up\"} 4000000093");
	expect_line(t, "zproxy_spliced_bytes_total{direction=\"down\"} 100007");
	expect_line(t, "zproxy_pairs{mode=\"splice\"} 2");
	expect_line(t, "zproxy_pairs{mode=\"copy\"} 0");
	expect_line(t, "zproxy_pairs{mode=\"mixed\"} 2");
	free(t);
	f->pairs[1].down.fellback = 1;		/* no pipe at its bulk */
	t = render(&f->ctx);
	expect_line(t, "zproxy_pairs{mode=\"splice\"} 1");
	expect_line(t, "zproxy_pairs{mode=\"mixed\"} 3");
	free(t);
}

/* Proves: a fell-back direction counts as copy: one fell back = mixed,
 * both = copy; without a pool (copy mode) the pipe gauges are 0. */
static void
test_render_fellback_nopool(void **state)
{
	struct fixture	*f = *state;
	char		*t;

	f->pairs[0].up.fellback = 1;	/* splice/splice -> mixed */
	f->pairs[2].up.fellback = 1;	/* and down is copy already */
	f->pairs[2].down.fellback = 1;	/* -> copy */
	free(f->ctx.pool);
	f->ctx.pool = NULL;
	t = render(&f->ctx);
	expect_line(t, "zproxy_pairs{mode=\"splice\"} 0");
	expect_line(t, "zproxy_pairs{mode=\"copy\"} 3");
	expect_line(t, "zproxy_pairs{mode=\"mixed\"} 1");
	expect_line(t, "zproxy_pipes_pooled 0");
	expect_line(t, "zproxy_pipes_in_use 0");
	expect_line(t, "zproxy_pipes_killed_total 0");
	free(t);
}

/* Proves: the CPU counter is this process's getrusage time, not 0 nor
 * garbage, and grows with work (spin until it does, at most 2 s). */
static void
test_render_cpu(void **state)
{
	struct fixture		*f = *state;
	char			*t = render(&f->ctx);
	double			 a, b;
	volatile unsigned long	 x = 0;
	long long		 t0 = now_ms(), tick;

	a = sample_value(t, "zproxy_cpu_seconds_total");
	free(t);
	assert_true(a > 0 && a < 3600);
	do {
		for (tick = now_ms(); now_ms() - tick < 10;)
			x++;
		t = render(&f->ctx);
		b = sample_value(t, "zproxy_cpu_seconds_total");
		free(t);
	} while (b <= a && now_ms() - t0 < 2000);
	if (b <= a)
		fail_msg("cpu seconds stayed at %f after 2 s of spinning", a);
	assert_true(b - a < 10);
}

/* A metric family: its name and what was seen of it. */
struct seen {
	char	name[128];
	int	help, type, samples;
};

/*
 * Proves the format's rules on the whole text: it ends in a line feed,
 * has no blank line; every family has "# HELP" then "# TYPE" (counter or
 * gauge) before its samples, appears once (no two HELP or TYPE lines for a
 * name, no sample after another family began), is named zproxy_*; counters
 * end in _total and nothing else does; every sample has a value.
 */
static void
test_render_format(void **state)
{
	struct fixture	*f = *state;
	char		*t = render(&f->ctx), *line, *save, *sp;
	struct seen	 fam[64];
	int		 nfam = 0, cur = -1, i, is_counter[64] = { 0 };

	memset(fam, 0, sizeof(fam));
	assert_true(strlen(t) > 0 && t[strlen(t) - 1] == '\n');
	assert_null(strstr(t, "\n\n"));
	for (line = strtok_r(t, "\n", &save); line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		char	name[128], kind[16];
		size_t	n;

		if (strncmp(line, "# HELP ", 7) == 0) {
			assert_int_equal(sscanf(line + 7, "%127s", name), 1);
			for (i = 0; i < nfam; i++)
				if (strcmp(fam[i].name, name) == 0)
					fail_msg("family %s again: %s", name,
					    line);
			assert_true(nfam < 64);
			cur = nfam++;
			snprintf(fam[cur].name, sizeof(fam[cur].name), "%s",
			    name);
			fam[cur].help = 1;
			/* some words of help after the name */
			assert_true(strlen(line) > 7 + strlen(name) + 5);
			continue;
		}
		if (strncmp(line, "# TYPE ", 7) == 0) {
			assert_int_equal(sscanf(line + 7, "%127s %15s", name,
			    kind), 2);
			assert_true(cur >= 0);
			assert_string_equal(name, fam[cur].name);
			assert_int_equal(fam[cur].type, 0);
			assert_int_equal(fam[cur].samples, 0);
			fam[cur].type = 1;
			if (strcmp(kind, "counter") == 0)
				is_counter[cur] = 1;
			else if (strcmp(kind, "gauge") == 0)
				is_counter[cur] = 0;
			else
				fail_msg("type %s: %s", kind, line);
			continue;
		}
		assert_true(line[0] != '#');
		n = strcspn(line, "{ ");
		assert_true(n > 0 && n < sizeof(name));
		memcpy(name, line, n);
		name[n] = '\0';
		if (cur < 0 || strcmp(name, fam[cur].name) != 0)
			fail_msg("sample outside its family: %s", line);
		assert_int_equal(fam[cur].type, 1);
		fam[cur].samples++;
		sp = strrchr(line, ' ');
		assert_non_null(sp);
		assert_true(sp[1] >= '0' && sp[1] <= '9');
	}
	for (i = 0; i < nfam; i++) {
		size_t	n = strlen(fam[i].name);
		int	total = n > 6 && strcmp(fam[i].name + n - 6,
			    "_total") == 0;

		assert_int_equal(strncmp(fam[i].name, "zproxy_", 7), 0);
		assert_true(fam[i].help && fam[i].type);
		assert_true(fam[i].samples > 0);
		if (total != is_counter[i])
			fail_msg("%s: a counter must end in _total, nothing "
			    "else may", fam[i].name);
	}
	free(t);
}

/* Proves: all the metrics the endpoint promises are there, each with its
 * HELP and TYPE of the right kind. */
static void
test_render_families(void **state)
{
	static const char *const want[][2] = {
		{ "zproxy_connections_open", "gauge" },
		{ "zproxy_connections_total", "counter" },
		{ "zproxy_connections_failed_total", "counter" },
		{ "zproxy_max_connections", "gauge" },
		{ "zproxy_bytes_total", "counter" },
		{ "zproxy_spliced_bytes_total", "counter" },
		{ "zproxy_upstream_up", "gauge" },
		{ "zproxy_upstream_consecutive_failures", "gauge" },
		{ "zproxy_upstream_connections_open", "gauge" },
		{ "zproxy_upstream_connections_total", "counter" },
		{ "zproxy_upstream_connections_failed_total", "counter" },
		{ "zproxy_upstream_bytes_total", "counter" },
		{ "zproxy_pairs", "gauge" },
		{ "zproxy_pipes_pooled", "gauge" },
		{ "zproxy_pipes_in_use", "gauge" },
		{ "zproxy_pipes_created_total", "counter" },
		{ "zproxy_pipes_killed_total", "counter" },
		{ "zproxy_copy_fallbacks_total", "counter" },
		{ "zproxy_accept_pauses_total", "counter" },
		{ "zproxy_connect_local_errors_total", "counter" },
		{ "zproxy_connections_waiting", "gauge" },
		{ "zproxy_connections_local_failed_total", "counter" },
		{ "zproxy_clients_denied_total", "counter" },
		{ "zproxy_clients_source_limited_total", "counter" },
		{ "zproxy_bad_proxy_headers_total", "counter" },
		{ "zproxy_bad_destinations_total", "counter" },
		{ "zproxy_timeouts_total", "counter" },
		{ "zproxy_lingers_total", "counter" },
		{ "zproxy_linger_timeouts_total", "counter" },
		{ "zproxy_discarded_bytes_total", "counter" },
		{ "zproxy_stats_connections_open", "gauge" },
		{ "zproxy_stats_max_connections", "gauge" },
		{ "zproxy_stats_refused_total", "counter" },
		{ "zproxy_stats_timeouts_total", "counter" },
		{ "zproxy_cpu_seconds_total", "counter" },
		{ "zproxy_start_time_seconds", "gauge" },
	};
	struct fixture	*f = *state;
	char		*t = render(&f->ctx), line[256];
	size_t		 i;

	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		snprintf(line, sizeof(line), "# TYPE %s %s", want[i][0],
		    want[i][1]);
		expect_line(t, line);
		snprintf(line, sizeof(line), "# HELP %s ", want[i][0]);
		assert_non_null(strstr(t, line));
	}
	free(t);
}

/* Proves: with no upstream, no pair and no pool, the text is still
 * valid: per-upstream families keep their HELP and TYPE (no samples is
 * allowed) and nothing is left unterminated. */
static void
test_render_empty(void **state)
{
	struct fixture	*f = *state;
	char		*t;

	TAILQ_INIT(&f->ctx.pairs);
	f->ctx.ups->n = 0;
	free(f->ctx.pool);
	f->ctx.pool = NULL;
	t = render(&f->ctx);
	expect_line(t, "# TYPE zproxy_upstream_up gauge");
	assert_null(strstr(t, "upstream=\""));
	expect_line(t, "zproxy_pairs{mode=\"splice\"} 0");
	expect_line(t, "zproxy_bytes_total{direction=\"up\"} 5000000111");
	assert_true(t[strlen(t) - 1] == '\n');
	f->ctx.ups->n = f->cfg.nupstreams;
	free(t);
}

/* ---- the server ------------------------------------------------------- */

/* A port that was free a moment ago on 127.0.0.1. */
static unsigned short
free_port(void)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	int			fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd != -1);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
	close(fd);
	return ntohs(sin.sin_port);
}

static void
loopback_spec(struct zp_listen_spec *spec, unsigned short port)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&spec->addr.ss;

	memset(spec, 0, sizeof(*spec));
	spec->port = port;
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin->sin_port = htons(port);
	spec->addr.len = sizeof(*sin);
}

/* Start the server on a free port (any = the ":PORT" form); retry when
 * someone took the port in between. */
static void
start_server(struct fixture *f, int any)
{
	struct zp_listen_spec	spec;
	char			err[ZP_ERRLEN];
	int			i;

	for (i = 0; i < 10; i++) {
		f->port = free_port();
		loopback_spec(&spec, f->port);
		spec.any = any;
		err[0] = '\0';
		f->server = zp_stats_new(&f->ctx, &spec, -1, err, sizeof(err));
		if (f->server != NULL)
			return;
		if (strstr(err, "in use") == NULL)
			fail_msg("zp_stats_new: %s", err);
	}
	fail_msg("no free port in 10 tries");
}

static int
setup_server(void **state)
{
	setup_ctx(state);
	start_server(*state, 0);
	return 0;
}

/* A blocking connect to the server (the backlog takes it at once). */
static int
client_connect(unsigned short port)
{
	struct sockaddr_in	sin;
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC,
				    0);

	assert_true(fd != -1);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons(port);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/*
 * Send req on fd, then run the loop and read until the server closes the
 * connection or ms pass. Returns what was read (NUL-terminated, caller
 * frees); *closed says whether EOF (or a reset) came.
 */
static char *
exchange(struct fixture *f, int fd, const char *req, size_t reqlen, int ms,
    int *closed)
{
	long long	 end = now_ms() + ms;
	size_t		 len = 0, cap = 4096, off = 0;
	char		*buf = malloc(cap);
	struct pollfd	 pfd;
	ssize_t		 n;

	assert_non_null(buf);
	*closed = 0;
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	while (now_ms() < end) {
		if (off < reqlen) {
			n = send(fd, req + off, reqlen - off, MSG_NOSIGNAL);
			if (n > 0)
				off += (size_t)n;
			else if (n == -1 && errno != EAGAIN)
				off = reqlen;	/* the server gave up on us */
		}
		event_base_loop(f->ctx.base, EVLOOP_NONBLOCK);
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, 5) <= 0)
			continue;
		if (len + 1024 > cap) {
			cap *= 2;
			assert_non_null(buf = realloc(buf, cap));
		}
		n = recv(fd, buf + len, cap - len - 1, 0);
		if (n > 0)
			len += (size_t)n;
		else if (n == 0 || errno != EAGAIN) {
			*closed = 1;
			break;
		}
	}
	buf[len] = '\0';
	return buf;
}

/* One request on a fresh connection; the answer must end with a close. */
static char *
http(struct fixture *f, const char *req)
{
	int	 fd = client_connect(f->port), closed;
	char	*r;

	assert_true(fd != -1);
	r = exchange(f, fd, req, strlen(req), DEADLINE_MS, &closed);
	close(fd);
	if (!closed)
		fail_msg("no close within %d ms after %s; got: %s",
		    DEADLINE_MS, req, r);
	return r;
}

/* The HTTP status of a response, or -1. */
static int
status_of(const char *r)
{
	int	code;

	if (sscanf(r, "HTTP/1.%*d %d", &code) != 1)
		return -1;
	return code;
}

/* The value of header name (case as sent by evhttp), or NULL; static. */
static const char *
header_of(const char *r, const char *name)
{
	static char	 val[256];
	const char	*p = r, *end = strstr(r, "\r\n\r\n");
	size_t		 n = strlen(name);

	while ((p = strstr(p, "\r\n")) != NULL && (end == NULL || p < end)) {
		p += 2;
		if (strncasecmp(p, name, n) == 0 && p[n] == ':') {
			size_t vl = strcspn(p + n + 1, "\r\n");

			p += n + 1;
			while (*p == ' ' && vl > 0) {
				p++;
				vl--;
			}
			snprintf(val, sizeof(val), "%.*s", (int)vl, p);
			return val;
		}
	}
	return NULL;
}

/* Proves: GET /metrics answers 200 with the Prometheus content type and
 * a body that is the render of ctx, Content-Length right. */
static void
test_server_get(void **state)
{
	struct fixture	*f = *state;
	char		*r = http(f, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
			    "Connection: close\r\n\r\n");
	const char	*body = strstr(r, "\r\n\r\n"), *cl;

	assert_int_equal(status_of(r), 200);
	assert_string_equal(header_of(r, "Content-Type"),
	    "text/plain; version=0.0.4; charset=utf-8");
	assert_non_null(body);
	body += 4;
	assert_non_null(cl = header_of(r, "Content-Length"));
	assert_int_equal(strtoul(cl, NULL, 10), strlen(body));
	expect_line(body, "zproxy_connections_total 1001");
	expect_line(body, "zproxy_upstream_bytes_total"
	    "{upstream=\"10.0.0.1:80\",direction=\"up\"} 1110");
	assert_int_equal(strncmp(body, "# HELP zproxy_", 14), 0);
	free(r);
}

/* Proves: counters are read at each request, not cached at start. */
static void
test_server_live(void **state)
{
	struct fixture	*f = *state;
	char		*r;

	f->ctx.stats.conns_total = 1234567;
	f->ctx.stats.all.up.bytes += 1000;
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_connections_total 1234567");
	expect_line(r, "zproxy_bytes_total{direction=\"up\"} 5000001111");
	free(r);
}

/* Proves: a query string is ignored; HEAD answers 200 with the content
 * type and no body. */
static void
test_server_head_query(void **state)
{
	struct fixture	*f = *state;
	char		*r;

	r = http(f, "GET /metrics?x=1 HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_connections_total 1001");
	free(r);
	r = http(f, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n"
	    "Connection: close\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	assert_string_equal(header_of(r, "Content-Type"),
	    "text/plain; version=0.0.4; charset=utf-8");
	assert_non_null(strstr(r, "\r\n\r\n"));
	assert_string_equal(strstr(r, "\r\n\r\n"), "\r\n\r\n");
	free(r);
}

/* Proves: other paths are 404 and carry no metrics. */
static void
test_server_404(void **state)
{
	struct fixture	*f = *state;
	static const char *const paths[] = { "/nope", "/", "/metrics/",
	    "/metricsx", "/Metrics" };
	char		 req[128], *r;
	size_t		 i;

	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n",
		    paths[i]);
		r = http(f, req);
		if (status_of(r) != 404)
			fail_msg("GET %s: %s", paths[i], r);
		assert_null(strstr(r, "zproxy_"));
		free(r);
	}
}

/* Proves: methods other than GET and HEAD are 405 with Allow, a small
 * body included, and run nothing. */
static void
test_server_405(void **state)
{
	struct fixture	*f = *state;
	char		*r;

	r = http(f, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0"
	    "\r\nConnection: close\r\n\r\n");
	assert_int_equal(status_of(r), 405);
	assert_string_equal(header_of(r, "Allow"), "GET, HEAD");
	assert_null(strstr(r, "zproxy_"));
	free(r);
	r = http(f, "PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5"
	    "\r\nConnection: close\r\n\r\nhello");
	assert_int_equal(status_of(r), 405);
	free(r);
	r = http(f, "DELETE /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 405);
	free(r);
}

/* Proves: every answer says Connection: close and is the last on its
 * connection, keep-alive asked or not: the deadline covers a connection
 * from accept to its one answer. */
static void
test_server_one_per_conn(void **state)
{
	struct fixture	*f = *state;
	const char	*req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
			    "GET /metrics HTTP/1.1\r\nHost: x\r\n"
			    "Connection: close\r\n\r\n";
	int		 fd = client_connect(f->port), closed;
	char		*r;

	assert_true(fd != -1);
	r = exchange(f, fd, req, strlen(req), DEADLINE_MS, &closed);
	close(fd);
	assert_true(closed);
	assert_int_equal(status_of(r), 200);
	assert_string_equal(header_of(r, "Connection"), "close");
	assert_null(strstr(r + 1, "HTTP/1.1 200"));
	free(r);
	r = http(f, "GET /nope HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_int_equal(status_of(r), 404);
	assert_string_equal(header_of(r, "Connection"), "close");
	free(r);
}

/* Proves the limits: headers beyond the cap and a body beyond the cap
 * are refused (4xx, connection closed), never answered with metrics. */
static void
test_server_limits(void **state)
{
	struct fixture	*f = *state;
	size_t		 n = 64 * 1024;
	char		*req = malloc(n + 256), *r;
	int		 fd, closed;
	size_t		 len;

	assert_non_null(req);
	len = (size_t)snprintf(req, 256, "GET /metrics HTTP/1.1\r\nHost: x\r\n"
	    "X-Big: ");
	memset(req + len, 'a', n);
	len += n;
	memcpy(req + len, "\r\n\r\n", 4);
	len += 4;
	assert_true((fd = client_connect(f->port)) != -1);
	r = exchange(f, fd, req, len, DEADLINE_MS, &closed);
	close(fd);
	assert_true(closed);
	assert_null(strstr(r, "zproxy_connections_total"));
	if (r[0] != '\0' && (status_of(r) < 400 || status_of(r) > 499))
		fail_msg("huge header: %s", r);
	free(r);

	r = http(f, "POST /metrics HTTP/1.1\r\nHost: x\r\n"
	    "Content-Length: 1000000\r\n\r\n");
	if (status_of(r) != 413 && status_of(r) != 400)
		fail_msg("huge body: %s", r);
	free(r);
	free(req);
}

/* Proves: a client that connects and sends nothing is dropped after the
 * timeout (a few seconds), so idle connections do not pile up. */
static void
test_server_idle_timeout(void **state)
{
	struct fixture	*f = *state;
	int		 fd = client_connect(f->port), closed;
	long long	 t0 = now_ms(), dt;
	char		*r;

	assert_true(fd != -1);
	r = exchange(f, fd, "GET /metr", 9, 10000, &closed);
	dt = now_ms() - t0;
	close(fd);
	assert_true(closed);
	assert_null(strstr(r, "zproxy_"));
	if (dt < 2000 || dt > 9000)
		fail_msg("dropped after %lld ms", dt);
	free(r);
}

/* Proves: a port in use gives NULL and the documented message, and
 * leaves the other server alone. */
static void
test_server_in_use(void **state)
{
	struct fixture		*f = *state;
	struct zp_listen_spec	 spec;
	char			 err[ZP_ERRLEN], want[ZP_ERRLEN], *r;

	loopback_spec(&spec, f->port);
	assert_null(zp_stats_new(&f->ctx, &spec, -1, err, sizeof(err)));
	snprintf(want, sizeof(want), "cannot serve stats on 127.0.0.1:%u: "
	    "Address already in use", f->port);
	assert_string_equal(err, want);
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	free(r);
}

/* Proves: zp_stats_free closes the socket (the port refuses after it)
 * and is safe on NULL. */
static void
test_server_free(void **state)
{
	struct fixture	*f = *state;
	int		 fd;

	zp_stats_free(NULL);
	zp_stats_free(f->server);
	f->server = NULL;
	fd = client_connect(f->port);
	if (fd != -1) {
		close(fd);
		fail_msg("port %u still accepts after zp_stats_free",
		    f->port);
	}
	assert_int_equal(errno, ECONNREFUSED);
}

/* Proves: zp_stats_free with a client connected mid-request frees its
 * connection too (valgrind/ASan would report the leak). */
static void
test_server_free_busy(void **state)
{
	struct fixture	*f = *state;
	int		 fd = client_connect(f->port), closed;
	char		*r;

	assert_true(fd != -1);
	r = exchange(f, fd, "GET /met", 8, 100, &closed);
	free(r);
	zp_stats_free(f->server);
	f->server = NULL;
	close(fd);
}

/* Proves: the ":PORT" form (dual-stack IPv6, else IPv4) serves clients
 * that come over IPv4. */
static void
test_server_any(void **state)
{
	struct fixture	*f;
	char		*r;

	setup_ctx(state);
	f = *state;
	start_server(f, 1);
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	free(r);
	teardown_ctx(state);
}

static void
noop_cb(evutil_socket_t fd, short what, void *arg)
{
}

/* Proves: out of descriptors, accepting rests instead of spinning the
 * loop, says so in the log, and serves the waiting client once
 * descriptors are back. */
static void
test_server_emfile(void **state)
{
	struct fixture	*f = *state;
	struct rlimit	 old, low;
	struct timeval	 tick = { 0, 20 * 1000 };
	struct event	*ev;
	long long	 end;
	int		 fd, spare, rounds = 0, paused = 0, closed;
	char		 line[512], *r;

	fd = client_connect(f->port);
	assert_true(fd != -1);
	/* a timer that wakes the loop every 20 ms, so that rounds count */
	ev = event_new(f->ctx.base, -1, EV_PERSIST, noop_cb, NULL);
	assert_non_null(ev);
	assert_int_equal(event_add(ev, &tick), 0);
	/* every descriptor from the lowest free one up is refused */
	spare = dup(fd);
	assert_true(spare != -1);
	close(spare);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = (rlim_t)spare;
	if (setrlimit(RLIMIT_NOFILE, &low) == -1) {
		close(fd);
		event_free(ev);
		fail_msg("setrlimit: %s", strerror(errno));
	}
	for (end = now_ms() + 600; now_ms() < end; rounds++)
		event_base_loop(f->ctx.base, EVLOOP_ONCE);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	event_free(ev);
	rewind(f->logfp);
	while (fgets(line, sizeof(line), f->logfp) != NULL)
		if (strstr(line, "stats: accept:") != NULL &&
		    strstr(line, "pausing") != NULL)
			paused++;
	/* a spinning listener would run thousands of rounds */
	if (rounds > 200)
		fail_msg("%d loop rounds in 600 ms: accept spins", rounds);
	if (paused < 1 || paused > 6)
		fail_msg("%d pause lines in 600 ms", paused);
	/*
	 * The client that waited in the backlog is served now. (Under
	 * valgrind, whose RLIMIT_NOFILE is emulated, the kernel did accept it
	 * and valgrind closed it: then it sees a bare close.)
	 */
	r = exchange(f, fd, "GET /metrics HTTP/1.0\r\n\r\n", 25, DEADLINE_MS,
	    &closed);
	close(fd);
	assert_true(closed);
	if (r[0] != '\0' && status_of(r) != 200)
		fail_msg("waiting client: %s", r);
	free(r);
	/* and accepting works again */
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	free(r);
}

/* Run the loop for ms milliseconds. */
static void
spin(struct fixture *f, int ms)
{
	long long	end = now_ms() + ms;

	while (now_ms() < end) {
		event_base_loop(f->ctx.base, EVLOOP_NONBLOCK);
		usleep(1000);
	}
}

/*
 * Run the loop until fd is closed by the server or ms pass, sending one
 * byte of trickle every every_ms (0: none). Returns the milliseconds it
 * took, or -1 if it stayed open; *got counts the bytes that came.
 */
static long long
wait_close(struct fixture *f, int fd, int ms, const char *trickle,
    int every_ms, size_t *got)
{
	long long	 t0 = now_ms(), next = t0;
	size_t		 off = 0;
	char		 buf[4096];
	ssize_t		 n;

	*got = 0;
	assert_int_equal(fcntl(fd, F_SETFL, O_NONBLOCK), 0);
	while (now_ms() - t0 < ms) {
		if (trickle != NULL && every_ms > 0 && now_ms() >= next &&
		    trickle[off] != '\0') {
			(void)send(fd, trickle + off, 1, MSG_NOSIGNAL);
			off++;
			next += every_ms;
		}
		event_base_loop(f->ctx.base, EVLOOP_NONBLOCK);
		n = recv(fd, buf, sizeof(buf), 0);
		if (n > 0)
			*got += (size_t)n;
		else if (n == 0 || errno != EAGAIN)
			return now_ms() - t0;
		else
			usleep(1000);
	}
	return -1;
}

/* Count the log lines that hold s. */
static int
log_count(struct fixture *f, const char *s)
{
	char	line[1024];
	int	n = 0;

	fflush(f->logfp);
	rewind(f->logfp);
	while (fgets(line, sizeof(line), f->logfp) != NULL)
		if (strstr(line, s) != NULL)
			n++;
	fseek(f->logfp, 0, SEEK_END);
	return n;
}

/* Proves --stats-max-conns: with 2 connections open mid-request, a third
 * and a burst of 20 more are closed at once, unanswered, and counted;
 * the two are still served, and once they are gone a new one is too. */
static void
test_server_max_conns(void **state)
{
	struct fixture	*f = *state;
	int		 a, b, c, burst[20], i, closed;
	long long	 dt;
	size_t		 got;
	char		*r;

	f->cfg.stats_max_conns = 2;
	start_server(f, 0);
	assert_true((a = client_connect(f->port)) != -1);
	assert_true((b = client_connect(f->port)) != -1);
	assert_int_equal(send(a, "GET /met", 8, 0), 8);
	assert_int_equal(send(b, "GET /met", 8, 0), 8);
	spin(f, 50);
	assert_int_equal(f->ctx.stats.stats_open, 2);
	assert_true((c = client_connect(f->port)) != -1);
	dt = wait_close(f, c, 1000, NULL, 0, &got);
	close(c);
	if (dt == -1 || dt > 500)
		fail_msg("third connection closed after %lld ms", dt);
	assert_int_equal(got, 0);
	assert_int_equal(f->ctx.stats.stats_refused[ZP_STATS_REFUSED_CONNS],
	    1);
	for (i = 0; i < 20; i++)
		assert_true((burst[i] = client_connect(f->port)) != -1);
	for (i = 0; i < 20; i++) {
		dt = wait_close(f, burst[i], 1000, NULL, 0, &got);
		close(burst[i]);
		if (dt == -1 || got != 0)
			fail_msg("burst %d: %lld ms, %zu bytes", i, dt, got);
	}
	assert_int_equal(f->ctx.stats.stats_refused[ZP_STATS_REFUSED_CONNS],
	    21);
	assert_int_equal(f->ctx.stats.stats_open, 2);
	assert_int_equal(log_count(f, "--stats-max-conns are open"), 1);

	r = exchange(f, a, "rics HTTP/1.0\r\n\r\n", 17, DEADLINE_MS, &closed);
	assert_true(closed);
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_stats_connections_open 2");
	expect_line(r, "zproxy_stats_max_connections 2");
	expect_line(r, "zproxy_stats_refused_total{reason=\"max-conns\"} 21");
	free(r);
	close(a);
	close(b);
	spin(f, 50);
	assert_int_equal(f->ctx.stats.stats_open, 0);
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_stats_connections_open 1");
	free(r);
}

/* Proves --stats-timeout is a deadline from accept, not an inactivity
 * timer: a client that sends a header byte every 100 ms is closed,
 * unanswered, about 1 s after it connected, and counted. */
static void
test_server_deadline(void **state)
{
	struct fixture	*f = *state;
	const char	*slow = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
			    "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
	int		 fd;
	long long	 dt;
	size_t		 got;
	char		*r;

	f->cfg.stats_timeout = 1.0;
	start_server(f, 0);
	assert_true((fd = client_connect(f->port)) != -1);
	dt = wait_close(f, fd, 5000, slow, 100, &got);
	close(fd);
	if (dt < 900 || dt > 1800)
		fail_msg("closed after %lld ms", dt);
	assert_int_equal(got, 0);
	assert_int_equal(f->ctx.stats.stats_timeouts, 1);
	assert_int_equal(f->ctx.stats.stats_open, 0);
	assert_int_equal(log_count(f, "at its deadline"), 1);
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_stats_timeouts_total 1");
	free(r);
}

/* Proves the descriptor reserve: when a stats connection would leave the
 * relay fewer than ctx->fd_reserve descriptors, it is closed at once and
 * counted, accepting rests, and it resumes once descriptors are back. */
static void
test_server_reserve(void **state)
{
	struct fixture	*f = *state;
	int		 fd;
	long long	 dt;
	size_t		 got;
	char		*r;

	start_server(f, 0);
	/* 4 pairs and 10 pipes hold 28 descriptors; 8 more for the rest */
	f->ctx.nofile = 50;
	f->ctx.fd_reserve = 16;
	assert_true((fd = client_connect(f->port)) != -1);
	dt = wait_close(f, fd, 1000, NULL, 0, &got);
	close(fd);
	if (dt == -1 || dt > 500 || got != 0)
		fail_msg("closed after %lld ms with %zu bytes", dt, got);
	assert_int_equal(f->ctx.stats.stats_refused[ZP_STATS_REFUSED_FDS], 1);
	assert_int_equal(log_count(f, "the descriptors left are the relay's"),
	    1);
	/* a bigger limit: the next one is served */
	f->ctx.nofile = 100000;
	r = http(f, "GET /metrics HTTP/1.0\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	expect_line(r, "zproxy_stats_refused_total{reason=\"descriptors\"} 1");
	free(r);
}

/* Proves zp_stats_shed: it closes every open stats connection at once,
 * returns how many, counts them, and accepting rests for about a second
 * (a client then waits in the backlog and is served after). */
static void
test_server_shed(void **state)
{
	struct fixture	*f = *state;
	int		 a, b, c, closed;
	long long	 dt, t0;
	size_t		 got;
	char		*r;

	assert_int_equal(zp_stats_shed(NULL), 0);
	start_server(f, 0);
	assert_true((a = client_connect(f->port)) != -1);
	assert_true((b = client_connect(f->port)) != -1);
	spin(f, 50);
	assert_int_equal(f->ctx.stats.stats_open, 2);
	assert_int_equal(zp_stats_shed(f->server), 2);
	assert_int_equal(f->ctx.stats.stats_open, 0);
	assert_int_equal(f->ctx.stats.stats_refused[ZP_STATS_REFUSED_FDS], 2);
	dt = wait_close(f, a, 500, NULL, 0, &got);
	assert_true(dt != -1 && got == 0);
	dt = wait_close(f, b, 500, NULL, 0, &got);
	assert_true(dt != -1 && got == 0);
	close(a);
	close(b);
	assert_int_equal(log_count(f, "closed 2 stats connections"), 1);
	t0 = now_ms();
	assert_true((c = client_connect(f->port)) != -1);
	r = exchange(f, c, "GET /metrics HTTP/1.0\r\n\r\n", 25, 3000, &closed);
	dt = now_ms() - t0;
	close(c);
	assert_true(closed);
	assert_int_equal(status_of(r), 200);
	if (dt < 700)
		fail_msg("served after %lld ms, during the pause", dt);
	free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_render_totals,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_upstreams,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_escaping,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_datapath,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_spliced_lazy,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_fellback_nopool,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_cpu,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_format,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_families,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_render_empty,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_get,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_live,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_head_query,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_404,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_405,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_one_per_conn,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_limits,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_idle_timeout,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_in_use,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_free,
		    setup_server, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_free_busy,
		    setup_server, teardown_ctx),
		cmocka_unit_test(test_server_any),
		cmocka_unit_test_setup_teardown(test_server_max_conns,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_deadline,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_reserve,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_shed,
		    setup_ctx, teardown_ctx),
		cmocka_unit_test_setup_teardown(test_server_emfile,
		    setup_server, teardown_ctx),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
