/*
 * worker_msg.c - the service under the worker threads: a message queued
 * for thread i runs on thread i, in order, its loop woken through its
 * zp_wake; and the loads the root reads to choose a thread.
 */

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "relay/ctx.h"
#include "lib/log.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "relay/worker_int.h"

int
zp_ctx_threads(const struct zp_ctx *ctx)
{
	const struct zp_ctx *root = ctx->root != NULL ? ctx->root : ctx;

	return root->workers != NULL ? root->workers->n : 1;
}

/* Open pairs here, and clients on their way here. */
long
worker_ctx_load(const struct zp_ctx *ctx)
{
	return LOAD(ctx->load);
}

long
zp_ctx_open_all(const struct zp_ctx *root)
{
	long	n = worker_ctx_load(root);
	int	i;

	if (root->workers != NULL)
		for (i = 1; i < root->workers->n; i++)
			n += worker_ctx_load(&root->workers->w[i]->ctx);
	return n;
}

/*
 * Queue a message for worker w and wake its loop. Returns 0, or -1 when
 * it could not be queued (ESRCH: its loop ended).
 */
int
wmsg_post(struct zp_worker *w, const struct zp_wmsg *m)
{
	struct zp_wmsg	*q;
	size_t		 cap;

	pthread_mutex_lock(&w->mu);
	if (!w->running) {
		pthread_mutex_unlock(&w->mu);
		errno = ESRCH;
		return -1;
	}
	if (w->nq == w->capq) {
		cap = w->capq > 0 ? w->capq * 2 : 64;
		if ((q = realloc(w->q, cap * sizeof(*q))) == NULL) {
			pthread_mutex_unlock(&w->mu);
			return -1;
		}
		w->q = q;
		w->capq = cap;
	}
	w->q[w->nq++] = *m;
	pthread_mutex_unlock(&w->mu);
	zp_wake_post(w->ctx.wake, w->inbox);
	return 0;
}

/* The worker's loop: run what was queued, in order. */
void
worker_inbox_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_worker	*w = arg;
	struct zp_wmsg		 m;
	size_t			 i;

	/* One at a time: a message may queue none, but the root may. */
	for (i = 0;; i++) {
		pthread_mutex_lock(&w->mu);
		if (i >= w->nq) {
			w->nq = 0;
			pthread_mutex_unlock(&w->mu);
			return;
		}
		m = w->q[i];
		pthread_mutex_unlock(&w->mu);
		m.fn(w, &m);
	}
}

/* Post m to every worker; returns to how many it went. */
int
wmsg_post_all(struct zp_ctx *root, struct zp_wmsg *m)
{
	int	i, n = 0;

	if (root->workers == NULL)
		return 0;
	for (i = 1; i < root->workers->n; i++)
		if (wmsg_post(root->workers->w[i], m) == 0)
			n++;
		else if (errno != ESRCH)
			zp_log(root->log, ZP_LOG_ERROR, "thread %d: cannot "
			    "queue a message: %s", i, strerror(errno));
	return n;
}
