/*
 * upstream_int.h - the fields of struct zp_upstreams, for upstream.c and
 * the unit tests only: every other module goes through upstream.h.
 */
#ifndef ZP_UPSTREAM_INT_H
#define ZP_UPSTREAM_INT_H

#include <sys/time.h>
#include <stddef.h>

#include <pthread.h>

#include "core/upstream.h"

struct zp_upstreams {
	/*
	 * --threads: every worker connects and closes, the main thread
	 * checks health and resolves; all of it under mu, which nothing
	 * holds across a call out of this file but zp_log.
	 */
	pthread_mutex_t		 mu;
	struct zp_upstream	*v;
	size_t			 n;
	enum zp_balance		 balance;
	size_t			 rr_next;
	int			 max_fails;
	struct timeval		 fail_timeout;
	struct zp_log		*log;
};

/*
 * zp_upstreams_new() on a set the caller holds: 0, or -1 (memory);
 * zp_upstreams_clear() frees what it holds, not the set.
 */
int	zp_upstreams_init(struct zp_upstreams *, struct zp_upstream_spec *,
	    size_t, enum zp_balance, int max_fails, double fail_timeout,
	    struct zp_log *);
void	zp_upstreams_clear(struct zp_upstreams *);

#endif
