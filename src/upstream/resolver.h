/*
 * resolver.h - re-resolve upstream names on --resolve-interval with
 * evdns, without blocking the loop, so that a collector that moves is
 * followed.
 */
#ifndef ZP_RESOLVER_H
#define ZP_RESOLVER_H

#include <stddef.h>

struct zp_ctx;
struct zp_resolver;

/*
 * Start re-resolving every upstream given by name (literals are left
 * alone). Returns the resolver, or NULL with err filled.
 */
struct zp_resolver *zp_resolver_new(struct zp_ctx *, char *, size_t);

/* Look upstream i's name up now (zproxy ctl add), if it has one. */
void	zp_resolver_now(struct zp_resolver *, size_t i);

/* Cancel pending lookups and free. Safe on NULL. */
void	zp_resolver_free(struct zp_resolver *);

#endif
