/*
 * test_pair.c - unit tests for the pure parts of pair.c: how a pair's
 * end is named (zp_half_end, zp_end_str).
 *
 * A pair's life (connect, relay, close) needs a context, an event base
 * and real peers: the integration tests drive it. What is tested here is
 * the classification that the log line's end= and the counters rest on.
 */

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>

#include <cmocka.h>

#include "stream/pair.h"
#include "relay/relay.h"

/* The errnos that mean the peer reset the connection. */
static const int resets[] = { ECONNRESET, EPIPE, ECONNABORTED };

/* Errnos of a failed socket that are no reset. */
static const int errors[] = { ETIMEDOUT, EHOSTUNREACH, ENETUNREACH, EIO,
    EINVAL, ENOMEM };

/* A dead half that failed with err. */
static struct zp_half
dead_half(int err)
{
	struct zp_half	h;

	memset(&h, 0, sizeof(h));
	h.fd = -1;
	h.dead = 1;
	h.err = err;
	return h;
}

/*
 * ECONNRESET, EPIPE and ECONNABORTED are a reset: client-reset for the
 * client's half, upstream-reset for the upstream's, by the names users
 * grep the log for.
 */
static void
test_half_end_reset(void **state)
{
	struct zp_half	h;
	size_t		i;

	(void)state;
	for (i = 0; i < sizeof(resets) / sizeof(resets[0]); i++) {
		h = dead_half(resets[i]);
		if (zp_half_end(&h, 1) != ZP_END_CLIENT_RESET)
			fail_msg("%s: client half is %s, not client-reset",
			    strerror(resets[i]),
			    zp_end_str(zp_half_end(&h, 1)));
		if (zp_half_end(&h, 0) != ZP_END_UPSTREAM_RESET)
			fail_msg("%s: upstream half is %s, not upstream-reset",
			    strerror(resets[i]),
			    zp_end_str(zp_half_end(&h, 0)));
	}
	h = dead_half(ECONNRESET);
	assert_string_equal(zp_end_str(zp_half_end(&h, 1)), "client-reset");
	assert_string_equal(zp_end_str(zp_half_end(&h, 0)), "upstream-reset");
}

/*
 * Any other errno (or none: a half killed without one) is an error of
 * that side: client-error, upstream-error. Only the errno decides, not
 * what else the half says.
 */
static void
test_half_end_error(void **state)
{
	struct zp_half	h;
	size_t		i;

	(void)state;
	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		h = dead_half(errors[i]);
		if (zp_half_end(&h, 1) != ZP_END_CLIENT_ERROR)
			fail_msg("%s: client half is %s, not client-error",
			    strerror(errors[i]),
			    zp_end_str(zp_half_end(&h, 1)));
		if (zp_half_end(&h, 0) != ZP_END_UPSTREAM_ERROR)
			fail_msg("%s: upstream half is %s, not upstream-error",
			    strerror(errors[i]),
			    zp_end_str(zp_half_end(&h, 0)));
	}
	h = dead_half(0);
	assert_int_equal(zp_half_end(&h, 1), ZP_END_CLIENT_ERROR);
	assert_int_equal(zp_half_end(&h, 0), ZP_END_UPSTREAM_ERROR);

	h = dead_half(ECONNRESET);
	h.wshut = h.fin = h.rdhup = 1;
	assert_int_equal(zp_half_end(&h, 1), ZP_END_CLIENT_RESET);
	assert_string_equal(zp_end_str(zp_half_end(&h, 1)), "client-reset");
	h = dead_half(ETIMEDOUT);
	assert_string_equal(zp_end_str(zp_half_end(&h, 0)), "upstream-error");
}

/* Every end reason has its own non-empty name, on one line. */
static void
test_end_str(void **state)
{
	const char	*names[ZP_END_SOURCE_FAMILY + 1];
	int		 i, j;

	(void)state;
	for (i = ZP_END_CLOSED; i <= ZP_END_SOURCE_FAMILY; i++) {
		names[i] = zp_end_str((enum zp_end)i);
		assert_non_null(names[i]);
		assert_true(names[i][0] != '\0');
		assert_null(strpbrk(names[i], " \n"));
		for (j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				fail_msg("ends %d and %d are both \"%s\"", j, i,
				    names[i]);
	}
	assert_string_equal(zp_end_str(ZP_END_CLOSED), "closed");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_half_end_reset),
		cmocka_unit_test(test_half_end_error),
		cmocka_unit_test(test_end_str),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
