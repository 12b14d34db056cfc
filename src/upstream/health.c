/*
 * health.c - active checks: every --check-interval, a non-blocking TCP
 * connect to each upstream (its addresses in order); connected means up.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "upstream/health.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "core/upstream.h"
#include "relay/worker.h"

struct zp_hcheck {
	struct zp_health	*h;
	size_t			 idx;		/* upstream */
	size_t			 addr;		/* its address being tried */
	struct zp_connecting	 conn;		/* ev: a check is under way */
	int			 err;
	int			 skipping;	/* last round met a local fault */
};

struct zp_health {
	struct zp_ctx		*ctx;
	struct event		*timer;		/* EV_PERSIST, the interval */
	struct zp_hcheck	*checks;
	size_t			 n;
	struct timeval		 timeout;
};

static void	check_next(struct zp_hcheck *);

/* Drop the check's socket and event; the check is idle again. */
static void
check_reset(struct zp_hcheck *c)
{
	zp_connecting_cancel(&c->conn);
}

/* Report the verdict and go idle. */
static void
check_done(struct zp_hcheck *c, int ok)
{
	struct zp_ctx	*ctx = c->h->ctx;
	struct timeval	 now;

	check_reset(c);
	c->skipping = 0;
	zp_clock_now(&now);
	/* Framed streams leave an upstream the checks marked down. */
	if (zp_upstream_report(ctx->ups, c->idx, ok, c->err, &now) == -1)
		zp_ctx_upstream_down(ctx, (int)c->idx);
}

/*
 * The check met a shortage of this host's (descriptors, memory, ports):
 * it says nothing about the upstream, so this round reports nothing for
 * it; the next round tries again. Warned once until a check completes.
 */
static void
check_skip(struct zp_hcheck *c, int err)
{
	struct zp_ctx	*ctx = c->h->ctx;
	char		 name[300];

	check_reset(c);
	ctx->stats.local_errors++;
	zp_log(ctx->log, c->skipping ? ZP_LOG_DEBUG : ZP_LOG_WARN,
	    "health check of %s skipped: %s (not the upstream's fault)",
	    zp_upstream_label(ctx->ups, c->idx, name, sizeof(name)),
	    strerror(err));
	c->skipping = 1;
}

static void
check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_hcheck	*c = arg;
	int			 err = zp_connecting_result(&c->conn, what);

	if (zp_connect_local_error(err)) {
		check_skip(c, err);
		return;
	}
	if (err == 0) {
		check_done(c, 1);
		return;
	}
	c->err = err;
	check_reset(c);
	c->addr++;
	check_next(c);
}

/* Try the check's current address, skipping those that fail at once. */
static void
check_next(struct zp_hcheck *c)
{
	const struct zp_config	*cfg = c->h->ctx->cfg;
	const struct zp_addr	*a = NULL, *src;
	struct zp_addr		 srcbuf, abuf;

	for (; c->addr < zp_upstream_addr(c->h->ctx->ups, c->idx, c->addr,
	    &abuf); c->addr++) {
		a = &abuf;
		/*
		 * --source ADDR: checks come from there too (a collector that
		 * admits that address only would fail every other check);
		 * --source client has no client here: the host's own address.
		 */
		src = NULL;
		if (cfg->source == ZP_SOURCE_ADDR) {
			if (zp_source_for(&cfg->source_addr, a, &srcbuf) ==
			    -1) {
				c->err = EAFNOSUPPORT;
				continue;
			}
			src = &srcbuf;
		}
		switch (zp_connecting_start(&c->conn, c->h->ctx->base, a, src,
		    0, &c->h->timeout, check_cb, c)) {
		case -1:
			if (zp_connect_local_error(errno)) {
				check_skip(c, errno);
				return;
			}
			c->err = errno;
			continue;
		case 0:
			check_done(c, 1);
			return;
		}
		return;
	}
	check_done(c, 0);
}

/* The interval is up: start a check of every upstream not in one. */
static void
health_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_health	*h = arg;
	struct zp_upstream	 u;
	size_t			 i;

	/* zproxy ctl may have added upstreams since: their slots wait. */
	h->n = zp_upstreams_count(h->ctx->ups);
	for (i = 0; i < h->n; i++) {
		if (h->checks[i].conn.ev != NULL)
			continue;	/* still waiting on the last one */
		zp_upstream_get(h->ctx->ups, i, &u);
		if (u.admin == ZP_ADMIN_REMOVED)
			continue;
		h->checks[i].addr = 0;
		h->checks[i].err = 0;
		check_next(&h->checks[i]);
	}
}

/* Start checking every upstream, the first time at once. */
struct zp_health *
zp_health_new(struct zp_ctx *ctx)
{
	struct zp_health	*h;
	struct timeval		 iv;
	double			 t;
	size_t			 i;

	if ((h = calloc(1, sizeof(*h))) == NULL)
		return NULL;
	h->ctx = ctx;
	h->n = zp_upstreams_count(ctx->ups);
	if ((h->checks = calloc(ZP_MAX_UPSTREAMS, sizeof(*h->checks))) ==
	    NULL) {
		free(h);
		return NULL;
	}
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++) {
		h->checks[i].h = h;
		h->checks[i].idx = i;
		zp_connecting_init(&h->checks[i].conn);
	}
	/* A check never outlives its interval, nor the connect timeout. */
	t = ctx->cfg->connect_timeout;
	if (ctx->cfg->check_interval < t)
		t = ctx->cfg->check_interval;
	h->timeout = zp_seconds_tv(t);
	iv = zp_seconds_tv(ctx->cfg->check_interval);
	h->timer = event_new(ctx->base, -1, EV_PERSIST, health_timer_cb, h);
	if (h->timer == NULL || event_add(h->timer, &iv) == -1) {
		zp_health_free(h);
		return NULL;
	}
	health_timer_cb(-1, 0, h);
	return h;
}

/* Stop checking and free. */
void
zp_health_free(struct zp_health *h)
{
	size_t	i;

	if (h == NULL)
		return;
	for (i = 0; i < h->n; i++)
		check_reset(&h->checks[i]);
	if (h->timer != NULL)
		event_free(h->timer);
	free(h->checks);
	free(h);
}
