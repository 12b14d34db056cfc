/*
 * resolver.c - re-resolve upstream names with evdns on a timer. A lookup
 * that fails keeps the addresses the upstream had: a DNS outage must not
 * take the collectors away.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "upstream/resolver.h"
#include "core/upstream.h"

/*
 * One lookup in flight. It belongs to evdns until its callback runs:
 * evdns may run a cancelled lookup's callback later, from the loop, so
 * the resolver only forgets it (r = NULL) and the callback frees it.
 */
struct zp_lookup {
	struct zp_resolver			*r;
	size_t					 idx;
	struct evdns_getaddrinfo_request	*req;
};

struct zp_resolver {
	struct zp_ctx		*ctx;
	struct evdns_base	*dns;
	struct event		*timer;
	struct zp_lookup	**inflight;	/* one slot per upstream */
	int			*failing;	/* last lookup failed: said so */
};

/* A literal address needs no lookup. */
static int
is_literal(const char *host)
{
	struct zp_addr	a;

	return zp_addr_literal(host, "0", &a) == 0;
}

/*
 * The same set of addresses? Order is ignored: a server that rotates its
 * records is not a collector that moved.
 */
static int
same_addrs(const struct zp_upstreams *ups, size_t idx,
    const struct evutil_addrinfo *res)
{
	const struct evutil_addrinfo	*ai;
	struct zp_addr			 a;
	size_t				 i, n = 0, have;

	have = zp_upstream_addr(ups, idx, SIZE_MAX, NULL);
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		n++;
		for (i = 0; i < have && zp_upstream_addr(ups, idx, i, &a) > i;
		    i++)
			if (ai->ai_addrlen == a.len &&
			    memcmp(ai->ai_addr, &a.ss, ai->ai_addrlen) == 0)
				break;
		if (i >= have)
			return 0;
	}
	return n == have;
}

static void
lookup_cb(int result, struct evutil_addrinfo *res, void *arg)
{
	struct zp_lookup	*lk = arg;
	struct zp_resolver	*r = lk->r;
	struct zp_addr		*v;
	size_t			 n;
	char			 name[300], abuf[ZP_ADDRSTRLEN];

	if (r == NULL)
		goto out;	/* the resolver is gone */
	r->inflight[lk->idx] = NULL;
	zp_upstream_label(r->ctx->ups, lk->idx, name, sizeof(name));
	if (result != 0 || res == NULL) {
		n = zp_upstream_addr(r->ctx->ups, lk->idx, SIZE_MAX, NULL);
		if (!r->failing[lk->idx])
			zp_log(r->ctx->log, ZP_LOG_WARN, "upstream %s: lookup "
			    "failed (%s); keeping %zu address%s", name,
			    evutil_gai_strerror(result), n, n == 1 ? "" : "es");
		r->failing[lk->idx] = 1;
		goto out;
	}
	r->failing[lk->idx] = 0;
	if (same_addrs(r->ctx->ups, lk->idx, res))
		goto out;
	if (zp_addrs_from_ai(res, &v, &n) == 0) {
		zp_addr_str(&v[0], abuf, sizeof(abuf));
		zp_upstream_set_addrs(r->ctx->ups, lk->idx, v, n);
		zp_log(r->ctx->log, ZP_LOG_NOTICE, "upstream %s now resolves "
		    "to %zu address%s, first %s", name, n, n == 1 ? "" : "es",
		    abuf);
	}
out:
	if (res != NULL)
		evutil_freeaddrinfo(res);
	free(lk);
}

/* Look upstream i's name up, unless a lookup is under way. */
static void
resolver_start(struct zp_resolver *r, size_t i)
{
	const struct zp_upstream_spec	*us = &r->ctx->cfg->upstreams[i];
	struct evutil_addrinfo		 hints;
	struct zp_lookup		*lk;
	struct evdns_getaddrinfo_request *req;
	struct zp_upstream		 u;

	zp_upstream_get(r->ctx->ups, i, &u);
	if (r->inflight[i] != NULL || u.admin == ZP_ADMIN_REMOVED ||
	    is_literal(us->host))
		return;
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = EVUTIL_AI_NUMERICSERV;
	if ((lk = calloc(1, sizeof(*lk))) == NULL)
		return;
	lk->r = r;
	lk->idx = i;
	r->inflight[i] = lk;
	/* The callback may run before this returns (cache, hosts). */
	req = evdns_getaddrinfo(r->dns, us->host, us->port, &hints,
	    lookup_cb, lk);
	if (req != NULL && r->inflight[i] == lk)
		lk->req = req;
}

/* The interval is up: look every name up again. */
static void
resolver_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_resolver	*r = arg;
	size_t			 i;

	for (i = 0; i < zp_upstreams_count(r->ctx->ups); i++)
		resolver_start(r, i);
}

void
zp_resolver_now(struct zp_resolver *r, size_t i)
{
	resolver_start(r, i);
}

/* Start re-resolving. */
struct zp_resolver *
zp_resolver_new(struct zp_ctx *ctx, char *err, size_t errlen)
{
	struct zp_config	*cfg = ctx->cfg;
	struct zp_resolver	*r;
	struct timeval		 iv;
	char			 abuf[ZP_ADDRSTRLEN], tmo[32];
	size_t			 n = ZP_MAX_UPSTREAMS; /* ctl may add */

	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->inflight = calloc(n, sizeof(*r->inflight))) == NULL ||
	    (r->failing = calloc(n, sizeof(*r->failing))) == NULL) {
		snprintf(err, errlen, "resolver: out of memory");
		goto fail;
	}
	r->ctx = ctx;
	if (cfg->have_dns_server) {
		/* Only that server: no resolv.conf, no hosts file. */
		r->dns = evdns_base_new(ctx->base, 0);
		zp_addr_str(&cfg->dns_server.addr, abuf, sizeof(abuf));
		if (r->dns == NULL || evdns_base_nameserver_sockaddr_add(r->dns,
		    (struct sockaddr *)&cfg->dns_server.addr.ss,
		    cfg->dns_server.addr.len, 0) != 0) {
			snprintf(err, errlen, "cannot use DNS server %s", abuf);
			goto fail;
		}
	} else {
		r->dns = evdns_base_new(ctx->base,
		    EVDNS_BASE_INITIALIZE_NAMESERVERS |
		    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
		if (r->dns == NULL) {
			snprintf(err, errlen, "cannot read /etc/resolv.conf "
			    "for --resolve-interval");
			goto fail;
		}
	}
	/*
	 * evdns waits 5 s a try, 3 tries, before it calls a lookup failed;
	 * keep an outage from outliving several intervals unnoticed.
	 */
	snprintf(tmo, sizeof(tmo), "%.3f", cfg->resolve_interval < 1 ? 1.0 :
	    cfg->resolve_interval > 5 ? 5.0 : cfg->resolve_interval);
	(void)evdns_base_set_option(r->dns, "timeout:", tmo);
	(void)evdns_base_set_option(r->dns, "attempts:", "2");
	iv = zp_seconds_tv(cfg->resolve_interval);
	r->timer = event_new(ctx->base, -1, EV_PERSIST, resolver_timer_cb, r);
	if (r->timer == NULL || event_add(r->timer, &iv) == -1) {
		snprintf(err, errlen, "resolver: cannot create its timer");
		goto fail;
	}
	return r;
fail:
	zp_resolver_free(r);
	return NULL;
}

/* Cancel pending lookups and free. */
void
zp_resolver_free(struct zp_resolver *r)
{
	size_t	i;

	if (r == NULL)
		return;
	if (r->timer != NULL)
		event_free(r->timer);
	for (i = 0; r->inflight != NULL &&
	    i < zp_upstreams_count(r->ctx->ups); i++) {
		struct zp_lookup *lk = r->inflight[i];

		if (lk == NULL)
			continue;
		lk->r = NULL;
		if (lk->req != NULL)
			evdns_getaddrinfo_cancel(lk->req);
	}
	/* Fail what is left so that every callback runs and frees its lookup. */
	if (r->dns != NULL)
		evdns_base_free(r->dns, 1);
	free(r->inflight);
	free(r->failing);
	free(r);
}
