/*
 * test_iptab.c - unit tests for iptab.c: entries found by their IP, not
 * their port; a v4-mapped IPv6 address is its IPv4 address; IPv6 and
 * IPv4 apart; deleted entries gone, the others there, through the
 * table's growth past its first buckets; addresses of no IP family are
 * not keyed.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/iptab.h"

static struct zp_addr
v4(const char *ip, unsigned port)
{
	struct zp_addr	a;

	memset(&a, 0, sizeof(a));
	a.ss.sin.sin_family = AF_INET;
	a.ss.sin.sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, ip, &a.ss.sin.sin_addr), 1);
	a.len = sizeof(a.ss.sin);
	return a;
}

static struct zp_addr
v6(const char *ip, unsigned port)
{
	struct zp_addr	a;

	memset(&a, 0, sizeof(a));
	a.ss.sin6.sin6_family = AF_INET6;
	a.ss.sin6.sin6_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET6, ip, &a.ss.sin6.sin6_addr), 1);
	a.len = sizeof(a.ss.sin6);
	return a;
}

/* An IP is the key: another port finds it, a mapped address too. */
static void
test_key(void **state)
{
	struct zp_iptab		t;
	struct zp_iptab_ent	e4, e6;
	struct zp_addr		a;

	(void)state;
	zp_iptab_init(&t, 42);
	e4.addr = v4("192.0.2.7", 514);
	e6.addr = v6("2001:db8::7", 514);
	assert_int_equal(zp_iptab_add(&t, &e4), 0);
	assert_int_equal(zp_iptab_add(&t, &e6), 0);
	a = v4("192.0.2.7", 40000);
	assert_ptr_equal(zp_iptab_find(&t, &a), &e4);
	a = v6("::ffff:192.0.2.7", 1);
	assert_ptr_equal(zp_iptab_find(&t, &a), &e4);
	a = v6("2001:db8::7", 9);
	assert_ptr_equal(zp_iptab_find(&t, &a), &e6);
	a = v4("192.0.2.8", 514);
	assert_null(zp_iptab_find(&t, &a));
	a = v6("2001:db8::8", 514);
	assert_null(zp_iptab_find(&t, &a));
	zp_iptab_del(&t, &e4);
	a = v4("192.0.2.7", 514);
	assert_null(zp_iptab_find(&t, &a));
	assert_ptr_equal(zp_iptab_find(&t, &e6.addr), &e6);
	assert_int_equal(t.n, 1);
	memset(&a, 0, sizeof(a));
	assert_false(zp_iptab_keyed(&a));
	assert_true(zp_iptab_keyed(&e6.addr));
	zp_iptab_free(&t);
}

/* Past the first buckets: every entry found, deletions exact. */
static void
test_grow(void **state)
{
	enum { N = 5000 };
	struct zp_iptab		 t;
	struct zp_iptab_ent	*e;
	char			 ip[32];
	int			 i;

	(void)state;
	assert_non_null(e = calloc(N, sizeof(*e)));
	zp_iptab_init(&t, 7);
	for (i = 0; i < N; i++) {
		snprintf(ip, sizeof(ip), "10.%d.%d.%d", i >> 16, (i >> 8) &
		    255, i & 255);
		e[i].addr = v4(ip, 514);
		assert_int_equal(zp_iptab_add(&t, &e[i]), 0);
	}
	assert_true(t.nb >= N);
	for (i = 0; i < N; i += 2)
		zp_iptab_del(&t, &e[i]);
	for (i = 0; i < N; i++)
		assert_ptr_equal(zp_iptab_find(&t, &e[i].addr),
		    i % 2 ? &e[i] : NULL);
	assert_int_equal(t.n, N / 2);
	zp_iptab_free(&t);
	free(e);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key),
		cmocka_unit_test(test_grow),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
