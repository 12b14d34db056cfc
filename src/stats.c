/* stats.c - placeholder until the endpoint lands. */
#include <stddef.h>
#include "ctx.h"
#include "stats.h"

struct zp_stats_server *
zp_stats_new(struct zp_ctx *ctx, const struct zp_listen_spec *spec, char *err,
    size_t errlen)
{
	snprintf(err, errlen, "--stats is not built yet");
	return NULL;
}

void
zp_stats_free(struct zp_stats_server *s)
{
}

int
zp_stats_render(struct zp_ctx *ctx, struct evbuffer *buf)
{
	return -1;
}
