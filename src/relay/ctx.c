/*
 * ctx.c - what every module asks of its context, whichever thread's it
 * is (ctx.h): the root, the hooks it was wired with, the next id; and
 * its loop.
 */

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "core/config.h"
#include "relay/ctx.h"
#include "relay/ring.h"

struct zp_ctx *
zp_ctx_root(struct zp_ctx *ctx)
{
	return ctx->root != NULL ? ctx->root : ctx;
}

const struct zp_ctx_hooks *
zp_ctx_hooks(struct zp_ctx *ctx)
{
	const struct zp_ctx_hooks *h = zp_ctx_root(ctx)->hooks;

	assert(h != NULL);	/* zp_wire() was not called */
	return h;
}

uint64_t
zp_ctx_next_id(struct zp_ctx *ctx)
{
	return __atomic_add_fetch(&zp_ctx_root(ctx)->next_id, 1,
	    __ATOMIC_SEQ_CST);
}

int
zp_ctx_loop(struct zp_ctx *ctx, int flags)
{
	struct timespec	pause;
	int		rc;

	/*
	 * The ring's one submitter is the thread that enables it: this
	 * one, which runs the loop (ring.c).
	 */
	if (ctx->ring != NULL && zp_ring_start(ctx->ring) == -1) {
		zp_log(ctx->log, ZP_LOG_ERROR, "thread %d: cannot enable its "
		    "io_uring: %s", ctx->thread, strerror(errno));
		return -1;
	}
	if (!(ctx->cfg->coalesce > 0) && ctx->ring == NULL)
		return event_base_loop(ctx->base, flags);
	for (;;) {
		/*
		 * A stop from another thread between passes: its break was
		 * cleared, or will be by the next pass; the flag stays. (A
		 * stop just after this look is seen after the next pass: a
		 * worker's publish timer makes one at least every period.)
		 */
		if (__atomic_load_n(&ctx->loop_stop, __ATOMIC_SEQ_CST))
			return 0;
		ctx->pass_busy = 0;
		/*
		 * What the last pass queued goes to the kernel before the
		 * loop waits again: one io_uring_enter for all of it.
		 */
		if (ctx->ring != NULL)
			(void)zp_ring_submit(ctx->ring);
		rc = event_base_loop(ctx->base, flags | EVLOOP_ONCE);
		if (rc != 0 || event_base_got_break(ctx->base) ||
		    event_base_got_exit(ctx->base) ||
		    __atomic_load_n(&ctx->loop_stop, __ATOMIC_SEQ_CST))
			return rc;
		if (ctx->pass_busy || !(ctx->cfg->coalesce > 0))
			continue;	/* more is waiting, or no pause asked */
		pause.tv_sec = (time_t)ctx->cfg->coalesce;
		pause.tv_nsec = (long)((ctx->cfg->coalesce -
		    (double)pause.tv_sec) * 1e9);
		/* A signal cuts it short: its event runs in the next pass. */
		(void)nanosleep(&pause, NULL);
	}
}

void
zp_ctx_loop_stop(struct zp_ctx *ctx)
{
	__atomic_store_n(&ctx->loop_stop, 1, __ATOMIC_SEQ_CST);
	/* Wakes a loop waiting for events; one paused sees the flag next. */
	event_base_loopbreak(ctx->base);
}
