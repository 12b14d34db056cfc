/*
 * worker_each.c - ask every thread something and gather the answers on
 * the root (zp_ctx_each, worker.h): zproxy ctl's show streams and move.
 *
 * The root never waits: each thread writes its part into a buffer of
 * its own, on its own thread, and the last to answer wakes the root;
 * a deadline ends the wait with the parts there are. The gathering is
 * freed by whoever lets go of it last (the root, or a late answer), so
 * that a thread that answers after the deadline writes into nothing
 * that is gone.
 */

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "relay/ctx.h"
#include "lib/log.h"
#include "lib/wake.h"
#include "relay/worker.h"
#include "relay/worker_int.h"

struct zp_each {
	struct zp_ctx		*root;
	pthread_mutex_t		 mu;	/* refs, pending, finished, parts */
	int			 refs;	/* the root's, and each message's */
	int			 pending; /* threads yet to answer */
	int			 finished; /* done ran, or cancelled */
	zp_each_fn		 fn;
	zp_each_done		 done;
	void			*done_arg;
	void			*fn_arg;	/* a copy, read on every thread */
	struct event		*answered;	/* the root's: all are in */
	struct event		*deadline;
	int			 n;
	struct evbuffer		*parts[ZP_MAX_THREADS];
};

/* Let go of e; the last one frees it. */
static void
each_unref(struct zp_each *e)
{
	int	i, last;

	pthread_mutex_lock(&e->mu);
	last = --e->refs == 0;
	pthread_mutex_unlock(&e->mu);
	if (!last)
		return;
	for (i = 0; i < e->n; i++)
		if (e->parts[i] != NULL)
			evbuffer_free(e->parts[i]);
	pthread_mutex_destroy(&e->mu);
	free(e->fn_arg);
	free(e);
}

/* Thread t's answer (or none: NULL, a thread gone). */
static void
each_answer(struct zp_each *e, int t, struct evbuffer *b)
{
	pthread_mutex_lock(&e->mu);
	if (!e->finished) {
		if (b != NULL)
			e->parts[t] = b;
		b = NULL;
		/* Posted under mu: the root forgets it only once finished. */
		if (--e->pending == 0)
			zp_wake_post(e->root->wake, e->answered);
	}
	pthread_mutex_unlock(&e->mu);
	if (b != NULL)
		evbuffer_free(b);
}

/* On a worker: its part. */
static void
wmsg_each(struct zp_worker *w, struct zp_wmsg *m)
{
	struct zp_each	*e = m->ptr;
	struct evbuffer	*b;

	if ((b = evbuffer_new()) != NULL)
		e->fn(&w->ctx, e->fn_arg, b);
	each_answer(e, w->ctx.thread, b);
	each_unref(e);
}

/* A message dropped unrun (its thread ended): no answer from there. */
static void
wmsg_each_drop(struct zp_wmsg *m)
{
	struct zp_each	*e = m->ptr;

	each_answer(e, 0, NULL);
	each_unref(e);
}

/* End the wait: no thread adds a part from now on. */
static void
each_finish(struct zp_each *e)
{
	pthread_mutex_lock(&e->mu);
	e->finished = 1;
	pthread_mutex_unlock(&e->mu);
	zp_wake_forget(e->root->wake, e->answered);
	event_free(e->answered);
	event_free(e->deadline);
}

/* Every part is in, or the deadline came: the root's callback. */
static void
each_end_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_each	*e = arg;

	each_finish(e);
	/* The parts are e's still: read under no lock, nobody adds. */
	e->done(e->done_arg, e->parts, e->n);
	each_unref(e);
}

struct zp_each *
zp_ctx_each(struct zp_ctx *root, zp_each_fn fn, const void *arg,
    size_t arglen, zp_each_done done, void *done_arg)
{
	struct zp_workers	*ws = root->workers;
	struct zp_each		*e;
	struct zp_wmsg		 m;
	struct timeval		 tv = { 0, ZP_EACH_MS * 1000 };
	struct evbuffer		*b;
	int			 t;

	if ((e = calloc(1, sizeof(*e))) == NULL)
		return NULL;
	if ((e->fn_arg = malloc(arglen > 0 ? arglen : 1)) == NULL) {
		free(e);
		return NULL;
	}
	memcpy(e->fn_arg, arg, arglen);
	pthread_mutex_init(&e->mu, NULL);
	e->root = root;
	e->fn = fn;
	e->done = done;
	e->done_arg = done_arg;
	e->n = zp_ctx_threads(root);
	e->refs = 1;
	e->pending = e->n;
	e->answered = event_new(root->base, -1, 0, each_end_cb, e);
	e->deadline = evtimer_new(root->base, each_end_cb, e);
	if (e->answered == NULL || e->deadline == NULL ||
	    evtimer_add(e->deadline, &tv) == -1) {
		if (e->answered != NULL)
			event_free(e->answered);
		if (e->deadline != NULL)
			event_free(e->deadline);
		each_unref(e);
		return NULL;
	}
	memset(&m, 0, sizeof(m));
	m.fn = wmsg_each;
	m.drop = wmsg_each_drop;
	m.ptr = e;
	for (t = 1; t < e->n; t++) {
		pthread_mutex_lock(&e->mu);
		e->refs++;
		pthread_mutex_unlock(&e->mu);
		if (wmsg_post(ws->w[t], &m) == -1) {
			/* Gone (or no memory): no part from it. */
			each_answer(e, t, NULL);
			each_unref(e);
		}
	}
	/* The root's own part, now: it is this thread. */
	b = evbuffer_new();
	if (b != NULL)
		fn(root, e->fn_arg, b);
	each_answer(e, 0, b);
	return e;
}

void
zp_ctx_each_cancel(struct zp_each *e)
{
	if (e == NULL)
		return;
	each_finish(e);
	each_unref(e);
}
