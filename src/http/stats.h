/*
 * stats.h - the --stats endpoint: Prometheus text format on /metrics,
 * served by evhttp inside zproxy's own event loop.
 */
#ifndef ZP_STATS_H
#define ZP_STATS_H

#include <stddef.h>

#include "core/config.h"

struct zp_ctx;
struct evbuffer;
struct zp_stats_server;

/*
 * Listen on spec and serve GET /metrics from ctx's counters; or serve on
 * fd, a listening socket taken over from another zproxy (-1: bind spec).
 * Returns the server, which owns fd from here on, or NULL with err
 * filled (address in use...).
 */
struct zp_stats_server *zp_stats_new(struct zp_ctx *,
	    const struct zp_listen_spec *, int fd, char *, size_t);

/* The listening socket, for a takeover; -1 on NULL. */
int	zp_stats_fd(const struct zp_stats_server *);

/*
 * The relay is out of descriptors: close every stats connection and stop
 * accepting for a while. Returns how many were closed. Safe on NULL.
 */
int	zp_stats_shed(struct zp_stats_server *);

/* Stop serving and free. Safe on NULL. */
void	zp_stats_free(struct zp_stats_server *);

#endif
