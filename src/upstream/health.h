/*
 * health.h - active health checks (--check-interval): a non-blocking TCP
 * connect to each upstream on a timer, inside the event loop.
 */
#ifndef ZP_HEALTH_H
#define ZP_HEALTH_H

struct zp_ctx;
struct zp_health;

/* Start checking every upstream. Returns NULL when out of memory. */
struct zp_health *zp_health_new(struct zp_ctx *);

/* Stop checking and free. Safe on NULL. */
void	zp_health_free(struct zp_health *);

#endif
