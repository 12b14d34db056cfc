/*
 * pair_show.c - what zproxy ctl asks of the pairs of one thread: a line
 * a stream (show streams), maint's close of the unframed streams of an
 * upstream, and one stream's move (move STREAM-ID). See pair.h. Runs on the pairs' own thread.
 */

#include <sys/time.h>
#include <stdio.h>
#include <string.h>
#include <event2/buffer.h>

#include "relay/ctx.h"
#include "lib/clock.h"
#include "lib/framing.h"
#include "core/net.h"
#include "core/upstream.h"
#include "stream/pair.h"
#include "stream/pair_int.h"

/* What show streams calls a pair's state. */
static const char *
pair_show_state(const struct zp_pair *p)
{
	if (p->winding)
		return "winding-down";
	return pair_state_str(p->state);
}

/* One stream's line. */
static void
pair_show_one(struct zp_pair *p, const struct timeval *now, int json,
    struct evbuffer *out)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 age;
	char		 cbuf[ZP_ADDRSTRLEN], ubuf[300];
	uint64_t	 msgs = p->up.fr != NULL ? p->up.fr->frames : 0;

	timersub(now, &p->started, &age);
	zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf));
	if (p->up_idx >= 0)
		zp_upstream_label(ctx->ups, (size_t)p->up_idx, ubuf,
		    sizeof(ubuf));
	else
		snprintf(ubuf, sizeof(ubuf), "-");
	/* Names and addresses hold no character JSON must escape. */
	if (json)
		evbuffer_add_printf(out, "{\"id\":%llu,\"client\":\"%s\","
		    "\"upstream\":%s%s%s,\"thread\":%d,\"age\":%ld.%03ld,"
		    "\"bytes_up\":%llu,\"bytes_down\":%llu,\"messages\":%llu,"
		    "\"framing\":\"%s\",\"state\":\"%s\"}\n",
		    (unsigned long long)p->id, cbuf, p->up_idx >= 0 ? "\"" :
		    "", p->up_idx >= 0 ? ubuf : "null", p->up_idx >= 0 ?
		    "\"" : "", ctx->thread, (long)age.tv_sec,
		    (long)(age.tv_usec / 1000),
		    (unsigned long long)(p->up.bytes + p->spooled),
		    (unsigned long long)p->down.bytes,
		    (unsigned long long)msgs,
		    zp_framing_name(p->framing), pair_show_state(p));
	else
		evbuffer_add_printf(out, "%-8llu %-22s %-22s %-6d %-8ld "
		    "%-12llu %-12llu %-10llu %-7s %s\n",
		    (unsigned long long)p->id, cbuf, ubuf, ctx->thread,
		    (long)age.tv_sec,
		    (unsigned long long)(p->up.bytes + p->spooled),
		    (unsigned long long)p->down.bytes,
		    (unsigned long long)msgs,
		    zp_framing_name(p->framing), pair_show_state(p));
}

void
zp_pairs_show(struct zp_ctx *ctx, int idx, int json, struct evbuffer *out)
{
	struct zp_pair	*p;
	struct timeval	 now;

	zp_clock_now(&now);
	TAILQ_FOREACH(p, &ctx->pairs, entry)
		if (idx < 0 || p->up_idx == idx)
			pair_show_one(p, &now, json, out);
}

int
zp_pairs_close_on(struct zp_ctx *ctx, int idx)
{
	struct zp_pair	*p, *next;
	int		 n = 0;

	for (p = TAILQ_FIRST(&ctx->pairs); p != NULL; p = next) {
		next = TAILQ_NEXT(p, entry);
		if (p->up_idx == idx && p->framing == ZP_FRAMING_NONE) {
			zp_pair_close(p, ZP_END_SHUTDOWN);
			n++;
		}
	}
	return n;
}

/*
 * zproxy ctl move: stream id, if it is here, to upstream to (-1: the
 * balancer's choice); see pair.h.
 */
int
zp_pairs_move_id(struct zp_ctx *ctx, uint64_t id, int to, char *why,
    size_t len)
{
	struct zp_pair	*p;

	TAILQ_FOREACH(p, &ctx->pairs, entry) {
		if (p->id != id)
			continue;
		if (to >= 0 && to == p->up_idx) {
			snprintf(why, len, "stream %llu is on that upstream "
			    "already", (unsigned long long)id);
			return -1;
		}
		if (ctx->stopping || !zp_pair_can_move(p)) {
			snprintf(why, len, "stream %llu cannot move now (%s%s)",
			    (unsigned long long)id, p->framing ==
			    ZP_FRAMING_NONE ? "no --framing" :
			    pair_state_str(p->state), pair_next_on(p) ||
			    (p->mv != NULL && p->mv->retiring.fd != -1) ?
			    ", a move under way" : "");
			return -1;
		}
		if (zp_pair_plan_move(p, to, ZP_MOVE_CTL) == -1) {
			snprintf(why, len, "stream %llu: no other upstream to "
			    "move to", (unsigned long long)id);
			return -1;
		}
		snprintf(why, len, "stream %llu is moving", (unsigned long
		    long)id);
		return 1;
	}
	return 0;
}
