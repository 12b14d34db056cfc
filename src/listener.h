/*
 * listener.h - the listening socket: accept, hand each client to a new
 * pair, pause under descriptor pressure or at --max-conns.
 */
#ifndef ZP_LISTENER_H
#define ZP_LISTENER_H

#include "config.h"

struct zp_ctx;
struct zp_listener;

/*
 * Bind and listen as spec says and register with ctx->base. Returns the
 * listener, or NULL with err filled (address in use, no permission...)
 * and errno kept: EPERM when --tproxy lacks its capability.
 */
struct zp_listener *zp_listener_new(struct zp_ctx *,
	    const struct zp_listen_spec *, char *, size_t);

/* Stop accepting while the context is at its connection limit. */
void	zp_listener_pause(struct zp_listener *);

/* Accept again if paused for the limit (called when a pair closes). */
void	zp_listener_resume(struct zp_listener *);

/*
 * Stop or go on accepting as the pairs waiting for a local resource
 * (ctx->stats.conns_waiting) say: none may be accepted while one waits.
 */
void	zp_listener_update(struct zp_listener *);

/* The bound address, for the start-up log line. */
const struct zp_addr *zp_listener_addr(const struct zp_listener *);

/* Close the socket and free. */
void	zp_listener_free(struct zp_listener *);

#endif
