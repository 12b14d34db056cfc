/*
 * pair_tls.c - a client of a tls@ listener: its TLS handshake comes
 * first (after its PROXY header, which arrives in the clear), within
 * --tls-handshake-timeout of accept; then it begins as any client
 * (pair_begin), both directions going through the TLS backend.
 *
 * No upstream is chosen or connected before the handshake is complete:
 * a client that cannot finish one costs a descriptor and the timeout,
 * never a collector's connection.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "relay/ctx.h"
#include "relay/worker.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "tls/tls.h"
#include "tls/tls_io.h"

_Static_assert(ZP_TLS_RESULTS == ZP_TLS_FAIL_MAX,
    "zp_stats.tls_handshakes has a counter for each result");

/* The handshake's two one-shot events are done with. */
static void
tls_events_free(struct zp_pair *p)
{
	pair_half_events_free(&p->client);
}

/* See pair_int.h. */
void
pair_tls_unlist(struct zp_pair *p, int counted)
{
	struct zp_ctx	*ctx = p->ctx;

	if (!p->hs_listed)
		return;
	/* Into the load first: the drain never sees neither. */
	if (counted)
		__atomic_add_fetch(&ctx->load, 1, __ATOMIC_SEQ_CST);
	TAILQ_REMOVE(&ctx->handshakes, p, hs_entry);
	p->hs_listed = 0;
	__atomic_sub_fetch(&ctx->nhandshakes, 1, __ATOMIC_SEQ_CST);
	ctx->stats.tls_pending--;
}


/* End a client whose handshake failed, why counted and logged. */
static void
tls_refuse(struct zp_pair *p, enum zp_tls_fail why, const char *text)
{
	p->ctx->stats.tls_handshakes[ZP_TLS_SIDE_CLIENT][why]++;
	snprintf(p->tls_why, sizeof(p->tls_why), "%s%s%s",
	    zp_tls_fail_str(why), text != NULL && text[0] != '\0' ? ": " : "",
	    text != NULL ? text : "");
	zp_pair_close(p, ZP_END_TLS_HANDSHAKE);
}

/*
 * A handshake takes its place among this thread's: outside the load, so
 * that --max-conns is the relay's and a flood of half-open handshakes
 * locks no client out; beyond this thread's share of --tls-max-pending
 * the oldest makes room (it may have been waiting the longest, and a
 * real client finishes in a round trip or two).
 */
static void
tls_list(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx, *root = zp_ctx_root(ctx);
	struct zp_pair	*old;
	long		 n = zp_ctx_threads(root), max;

	/* N over the threads: N / n each, one more for the first N % n. */
	max = root->tls_max_pending / n +
	    (ctx->thread < root->tls_max_pending % n);
	if (max < 1)
		max = 1;
	while (ctx->nhandshakes >= max &&
	    (old = TAILQ_FIRST(&ctx->handshakes)) != NULL)
		tls_refuse(old, ZP_TLS_EVICTED, "closed to make room for a "
		    "new one (--tls-max-pending)");
	TAILQ_INSERT_TAIL(&ctx->handshakes, p, hs_entry);
	p->hs_listed = 1;
	__atomic_add_fetch(&ctx->nhandshakes, 1, __ATOMIC_RELAXED);
	ctx->stats.tls_pending++;
	__atomic_sub_fetch(&ctx->load, 1, __ATOMIC_SEQ_CST);
	zp_ctx_closed(ctx);	/* the listener may resume */
}

/* How often a client whose handshake is done looks for room again. */
#define ZP_TLS_PARK_MS	50

static int	tls_go(struct zp_pair *) ZP_MAY_FREE;

static void
tls_park_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	(void)fd;
	(void)what;
	if (tls_go(p) == 0)
		pair_check(p);
}

/*
 * A client whose handshake is done joins the relay's pairs when
 * --max-conns has room (the handshakes are outside it, the pairs are
 * not): until then it waits, its descriptor still one of the
 * handshakes', looking again every ZP_TLS_PARK_MS, as a client waits in
 * the listen backlog of a relay at --max-conns. The drain lets it on:
 * nothing new is accepted then. Returns 1 when the pair was freed (or
 * moved on).
 */
static int ZP_MAY_FREE
tls_go(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx, *root = zp_ctx_root(ctx);
	struct timeval	 tv = { 0, ZP_TLS_PARK_MS * 1000 };

	if (zp_ctx_open_all(root) >= root->max_conns && !ctx->stopping) {
		if (p->tls_park == NULL && (p->tls_park = evtimer_new(ctx->base,
		    tls_park_cb, p)) == NULL) {
			zp_pair_close(p, ZP_END_NOMEM);
			return 1;
		}
		if (evtimer_add(p->tls_park, &tv) == -1) {
			zp_pair_close(p, ZP_END_NOMEM);
			return 1;
		}
		return 0;
	}
	if (p->tls_park != NULL) {
		event_free(p->tls_park);
		p->tls_park = NULL;
	}
	pair_tls_unlist(p, 1);
	return pair_begin(p);
}

/*
 * The handshake is complete: the client's bytes are plain from here, and
 * each direction reads or writes it through the TLS backend, which
 * copies (a TLS record cannot be spliced). Returns 1 when the pair was
 * freed (or moved on).
 */
static int ZP_MAY_FREE
tls_done(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;

	tls_events_free(p);
	ctx->stats.tls_handshakes[ZP_TLS_SIDE_CLIENT][ZP_TLS_OK]++;
	pair_use_tls(p);
	if (zp_log_enabled(ctx->log, ZP_LOG_DEBUG))
		zp_log(ctx->log, ZP_LOG_DEBUG, "connection %llu: TLS "
		    "handshake done (%s)", (unsigned long long)p->id,
		    zp_tls_version(p->client.tls));
	return tls_go(p);
}

/* Wait for what the handshake wants, until the deadline. */
static int
tls_wait(struct zp_pair *p, short want)
{
	struct timeval	 now, left;
	struct event	*ev = want == EV_WRITE ? p->client.wev : p->client.rev;

	zp_clock_now(&now);
	if (!timercmp(&now, &p->tls_deadline, <))
		return 1;
	p->tls_want = want;
	timersub(&p->tls_deadline, &now, &left);
	/* One at a time: the other may be pending from an earlier step. */
	event_del(want == EV_WRITE ? p->client.rev : p->client.wev);
	if (event_add(ev, &left) == -1)
		return -1;
	return 0;
}

/*
 * One step of the handshake (what: the event that woke it). Returns 1
 * when the pair was freed (or moved on).
 */
static int ZP_MAY_FREE
tls_step(struct zp_pair *p, short what)
{
	short	want = EV_READ;
	int	r;

	/*
	 * A timer may fire a little early: libevent counts from the time
	 * its loop woke, the deadline from the monotonic clock now. Then
	 * the wait goes on for what is left.
	 */
	if (what & EV_TIMEOUT)
		want = p->tls_want;
	else
		switch (zp_tls_handshake(p->client.tls, &want)) {
		case 1:
			return tls_done(p);
		case -1:
			tls_refuse(p, zp_tls_failure(p->client.tls),
			    zp_tls_failure_text(p->client.tls));
			return 1;
		}
	if ((r = tls_wait(p, want)) == 0)
		return 0;
	if (r == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	tls_refuse(p, ZP_TLS_TIMEOUT, "no handshake within "
	    "--tls-handshake-timeout");
	return 1;
}

static void
tls_step_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair	*p = arg;

	(void)fd;
	if (tls_step(p, what) == 0)
		pair_check(p);
}

/* Begin the client's handshake; see pair_int.h. */
int ZP_MAY_FREE
pair_tls_start(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 tv = zp_seconds_tv(ctx->cfg->tls_handshake_timeout);
	struct ssl_st	*ssl = NULL;

	/* A handshake holds a descriptor: it counts under its source. */
	if (pair_take_source(p) != 0)
		return 1;
	pair_set_state(p, ZP_PAIR_HANDSHAKE);
	tls_list(p);
	/* From accept: neither a slow header nor a trickle extends it. */
	timeradd(&p->started, &tv, &p->tls_deadline);
	if (ctx->tls_srv != NULL)
		ssl = zp_tls_srv_session(ctx->tls_srv, p->client.fd);
	if (ssl == NULL || (p->client.tls = zp_tls_wrap(ssl)) == NULL ||
	    (p->client.rev = event_new(ctx->base, p->client.fd, EV_READ,
	    tls_step_cb, p)) == NULL || (p->client.wev = event_new(ctx->base,
	    p->client.fd, EV_WRITE, tls_step_cb, p)) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	/* The ClientHello is most likely there already: try at once. */
	return tls_step(p, EV_READ);
}
