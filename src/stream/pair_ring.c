/*
 * pair_ring.c - a pair relayed through its context's io_uring
 * (--io-uring; experimental, issue 30): which pairs may, and the glue
 * between the ring's completions and the pair's life (timers, the end).
 * The bytes are moved by relay/relay_ring.c.
 */

#include "lib/clock.h"
#include "relay/ctx.h"
#include "relay/relay.h"
#include "relay/relay_ring.h"
#include "stream/pair.h"
#include "stream/pair_int.h"

/*
 * Plain TCP both ways, copy mode, nothing that follows or keeps the
 * bytes (relay_ring.h says why each of TLS, --mirror, --framing, a UDP
 * source and --spool keeps the epoll path), and stores still empty.
 */
int
pair_ring_eligible(const struct zp_pair *p)
{
	const struct zp_ctx	*ctx = p->ctx;

	return ctx->ring != NULL && ctx->pool == NULL &&
	    p->state == ZP_PAIR_RELAYING && !p->tls && !p->dgram &&
	    p->client.tls == NULL && p->upstream.tls == NULL &&
	    p->client.feed == NULL && p->mir == NULL && p->up.fr == NULL &&
	    ctx->spool == NULL &&
	    p->up.ops == &zp_relay_copy && p->down.ops == &zp_relay_copy &&
	    p->up.len == 0 && p->down.len == 0 &&
	    p->up.buf == NULL && p->down.buf == NULL;
}

/* The ring moved something for p: settle it as a pump would. */
static void
pair_ring_changed(void *arg, int rc)
{
	struct zp_pair	*p = arg;

	(void)rc;	/* a death steps both directions in relay_ring.c */
	zp_clock_now(&p->last_active);
	if (pair_settle(p) == 0)
		pair_check(p);
}

int ZP_MAY_FREE
pair_ring_start(struct zp_pair *p)
{
	int	rc;

	p->ring = zp_rpair_new(p->ctx->ring, &p->up, &p->down,
	    p->ctx->cfg->buffer_size, pair_ring_changed, p, &rc);
	if (p->ring == NULL)
		return -1;
	/* The first requests could not be queued: the halves are dead. */
	if ((rc & ZP_PUMP_DEAD) && pair_settle(p) != 0)
		return 1;
	return 0;
}

void
pair_ring_release(struct zp_pair *p)
{
	zp_rpair_release(p->ring);
	p->ring = NULL;
}
