/*
 * bufcache.c - copy-mode buffers kept for the next pass (bufcache.h).
 */

#include <stdlib.h>

#include "lib/bufcache.h"

char *
zp_buf_get(struct zp_bufcache *c, size_t size)
{
	if (c != NULL && c->n > 0 && size == c->size)
		return c->v[--c->n];
	return malloc(size);
}

void
zp_buf_put(struct zp_bufcache *c, char *buf, size_t size)
{
	if (buf == NULL)
		return;
	if (c != NULL && size == c->size && c->n < ZP_BUFCACHE_MAX)
		c->v[c->n++] = buf;
	else
		free(buf);
}

void
zp_bufcache_clear(struct zp_bufcache *c)
{
	while (c->n > 0)
		free(c->v[--c->n]);
}
