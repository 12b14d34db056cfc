/*
 * ctx.c - what every module asks of its context, whichever thread's it
 * is (ctx.h): the root, the hooks it was wired with, the next id.
 */

#include <assert.h>
#include <stdint.h>

#include "relay/ctx.h"

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
