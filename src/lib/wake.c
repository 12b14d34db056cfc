/*
 * wake.c - another thread's wake-up of a loop, by an eventfd; see wake.h.
 */

#include <sys/eventfd.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/wake.h"

struct zp_wake {
	int		 fd;		/* the eventfd */
	struct event	*ev;		/* its read event, in the loop */
	pthread_mutex_t	 mu;		/* the queue's, held to append */
	struct event	**q;		/* posted, not yet made active */
	size_t		 n, cap;
	struct event	**run;		/* the loop's copy while it runs */
	size_t		 runcap;
};

/* The loop's thread: take the queue and make each event active. */
static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_wake	*w = arg;
	struct event	**t;
	uint64_t	 v;
	size_t		 n, i, cap;

	(void)what;
	(void)read(fd, &v, sizeof(v));	/* EAGAIN: a post after the last */
	pthread_mutex_lock(&w->mu);
	/* Swap the arrays: the poster appends to the empty one. */
	t = w->run;
	cap = w->runcap;
	w->run = w->q;
	w->runcap = w->cap;
	n = w->n;
	w->q = t;
	w->cap = cap;
	w->n = 0;
	pthread_mutex_unlock(&w->mu);
	for (i = 0; i < n; i++)
		if (w->run[i] != NULL)
			event_active(w->run[i], EV_TIMEOUT, 0);
}

struct zp_wake *
zp_wake_new(struct event_base *base)
{
	struct zp_wake	*w;
	int		 err;

	if ((w = calloc(1, sizeof(*w))) == NULL)
		return NULL;
	if ((w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1) {
		err = errno;
		free(w);
		errno = err;
		return NULL;
	}
	if ((w->ev = event_new(base, w->fd, EV_READ | EV_PERSIST, wake_cb,
	    w)) == NULL || event_add(w->ev, NULL) == -1) {
		if (w->ev != NULL)
			event_free(w->ev);
		close(w->fd);
		free(w);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&w->mu, NULL);
	return w;
}

void
zp_wake_free(struct zp_wake *w)
{
	if (w == NULL)
		return;
	event_free(w->ev);
	close(w->fd);
	pthread_mutex_destroy(&w->mu);
	free(w->q);
	free(w->run);
	free(w);
}

void
zp_wake_post(struct zp_wake *w, struct event *ev)
{
	static const uint64_t	 one = 1;
	struct event		**q;
	size_t			 cap;
	int			 first;

	if (w == NULL) {	/* a loop without one (the unit tests') */
		event_active(ev, EV_TIMEOUT, 0);
		return;
	}
	pthread_mutex_lock(&w->mu);
	if (w->n == w->cap) {
		cap = w->cap > 0 ? w->cap * 2 : 16;
		if ((q = realloc(w->q, cap * sizeof(*q))) == NULL) {
			pthread_mutex_unlock(&w->mu);
			/* Late rather than never: through the loop's lock. */
			event_active(ev, EV_TIMEOUT, 0);
			return;
		}
		w->q = q;
		w->cap = cap;
	}
	first = w->n == 0;
	w->q[w->n++] = ev;
	pthread_mutex_unlock(&w->mu);
	/* One write a batch: the loop takes all that is queued at once. */
	if (first)
		(void)write(w->fd, &one, sizeof(one));
}

void
zp_wake_forget(struct zp_wake *w, struct event *ev)
{
	size_t	i;

	if (w == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	for (i = 0; i < w->n; i++)
		if (w->q[i] == ev)
			w->q[i] = NULL;
	pthread_mutex_unlock(&w->mu);
}
