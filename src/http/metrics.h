/*
 * metrics.h - zproxy's metrics as Prometheus text (format 0.0.4), for
 * the --stats endpoint.
 */
#ifndef ZP_METRICS_H
#define ZP_METRICS_H

struct evbuffer;
struct zp_ctx;

/*
 * Append the metrics to buf: every family with # HELP and # TYPE, label
 * values escaped. Reads ctx, writes nothing to it. Returns 0, or -1 when
 * out of memory (buf then holds part of them).
 */
int	zp_metrics_render(struct zp_ctx *, struct evbuffer *);

#endif
