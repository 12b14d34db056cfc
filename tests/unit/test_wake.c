/*
 * test_wake.c - unit tests for wake.c: another thread makes an event of
 * a loop active through the loop's eventfd, never its lock.
 *
 * The loop's base is made without libevent's threading on (no
 * evthread_use_pthreads here): an event_active() from the other thread
 * would then be a data race that ThreadSanitizer reports, so the posts
 * going through the wake's own queue is what these tests show, besides
 * each event running once a batch and a forgotten one not at all.
 */

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "lib/wake.h"

struct loop {
	struct event_base	*base;
	struct zp_wake		*wake;
	struct event		*ev[2];
	int			 ran[2];
	int			 want;		/* runs before the loop ends */
};

static void
ran_cb(evutil_socket_t fd, short what, void *arg)
{
	int	*ran = arg;

	(void)fd;
	(void)what;
	(*ran)++;
}

/* Stop the loop once the runs wanted happened. */
static void
check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct loop	*l = arg;

	(void)fd;
	(void)what;
	if (l->ran[0] + l->ran[1] >= l->want)
		event_base_loopbreak(l->base);
}

static void
loop_init(struct loop *l)
{
	int	i;

	memset(l, 0, sizeof(*l));
	assert_non_null(l->base = event_base_new());
	assert_non_null(l->wake = zp_wake_new(l->base));
	for (i = 0; i < 2; i++)
		assert_non_null(l->ev[i] = event_new(l->base, -1, 0, ran_cb,
		    &l->ran[i]));
}

static void
loop_free(struct loop *l)
{
	zp_wake_free(l->wake);
	event_free(l->ev[0]);
	event_free(l->ev[1]);
	event_base_free(l->base);
}

/* Run the loop until `want` runs (checked every 10 ms), or 5 s. */
static void
loop_run(struct loop *l, int want)
{
	struct timeval	 tv = { 0, 10000 }, five = { 5, 0 };
	struct event	*check;

	l->want = want;
	assert_non_null(check = event_new(l->base, -1, EV_PERSIST, check_cb,
	    l));
	assert_int_equal(event_add(check, &tv), 0);
	assert_int_equal(event_base_loopexit(l->base, &five), 0);
	assert_int_equal(event_base_loop(l->base, 0), 0);
	event_free(check);
}

struct poster {
	struct loop	*l;
	int		 n;
};

static void *
poster_main(void *arg)
{
	struct poster	*p = arg;
	int		 i;

	for (i = 0; i < p->n; i++)
		zp_wake_post(p->l->wake, p->l->ev[i % 2]);
	return NULL;
}

/* Posts from another thread run in the loop; a batch runs each once. */
static void
test_post_other_thread(void **state)
{
	struct loop	l;
	struct poster	p;
	pthread_t	t;

	(void)state;
	loop_init(&l);
	p.l = &l;
	p.n = 1000;
	assert_int_equal(pthread_create(&t, NULL, poster_main, &p), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	/* All 1000 queued before the loop ran: one batch, each event once. */
	loop_run(&l, 2);
	assert_int_equal(l.ran[0], 1);
	assert_int_equal(l.ran[1], 1);
	/* And again, later. */
	assert_int_equal(pthread_create(&t, NULL, poster_main, &p), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	loop_run(&l, 4);
	assert_int_equal(l.ran[0], 2);
	assert_int_equal(l.ran[1], 2);
	loop_free(&l);
}

/* A forgotten event does not run; the other one does. */
static void
test_forget(void **state)
{
	struct loop	l;

	(void)state;
	loop_init(&l);
	zp_wake_post(l.wake, l.ev[0]);
	zp_wake_post(l.wake, l.ev[1]);
	zp_wake_forget(l.wake, l.ev[0]);
	loop_run(&l, 1);
	assert_int_equal(l.ran[0], 0);
	assert_int_equal(l.ran[1], 1);
	loop_free(&l);
}

/* No wake (a loop made without one): the post is an event_active(). */
static void
test_null_wake(void **state)
{
	struct loop	l;

	(void)state;
	loop_init(&l);
	zp_wake_post(NULL, l.ev[1]);
	zp_wake_forget(NULL, l.ev[1]);
	loop_run(&l, 1);
	assert_int_equal(l.ran[1], 1);
	loop_free(&l);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_post_other_thread),
		cmocka_unit_test(test_forget),
		cmocka_unit_test(test_null_wake),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
