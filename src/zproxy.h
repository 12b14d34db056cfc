/*
 * zproxy.h - run the daemon: context, listener, signals, the event loop.
 */
#ifndef ZP_ZPROXY_H
#define ZP_ZPROXY_H

#include "core/config.h"

/*
 * Run until SIGTERM/SIGINT with a validated, resolved configuration.
 * Returns the process exit status: 0 after a clean stop, or a sysexits
 * code when start-up failed (the reason is logged).
 */
int	zp_run(struct zp_config *);

/*
 * Wire what the layers above the context do into root (ctx.h, struct
 * zp_ctx_hooks): zp_run does it, and so does a test that builds a
 * context of its own.
 */
struct zp_ctx;
void	zp_wire(struct zp_ctx *root);

#endif
