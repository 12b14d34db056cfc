/*
 * test_acl.c - unit tests for acl.c: CIDR parsing (hosts, prefixes, the
 * /0, /32 and /128 edges, v4-mapped networks, every malformed form with
 * its one-line message), matching with v4-mapped normalisation, the
 * order deny-then-allow, the rule cap, the per-source key (IPv4 address,
 * IPv6 /64) and the per-source table through growth and back to empty.
 */

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
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

#include "lib/acl.h"

/* ---- building addresses ------------------------------------------- */

/* A sockaddr from an IPv4 or IPv6 literal; the test fails on bad text. */
static const struct sockaddr *
sa(struct sockaddr_storage *ss, const char *ip)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (strchr(ip, ':') != NULL) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(4242);
		if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) != 1)
			fail_msg("bad IPv6 literal %s", ip);
	} else {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(4242);
		if (inet_pton(AF_INET, ip, &sin->sin_addr) != 1)
			fail_msg("bad IPv4 literal %s", ip);
	}
	return (const struct sockaddr *)ss;
}

/* Parse s, which must be good, and check how it prints back. */
static void
parse_ok(const char *s, int family, const char *want)
{
	struct zp_cidr	c;
	char		err[256] = "", buf[ZP_CIDRSTRLEN];

	if (zp_cidr_parse(s, &c, err, sizeof(err)) != 0)
		fail_msg("'%s' refused: %s", s, err);
	assert_int_equal(c.family, family);
	assert_string_equal(zp_cidr_str(&c, buf, sizeof(buf)), want);
}

/* Parse s, which must be refused with a message that contains want. */
static void
parse_bad(const char *s, const char *want)
{
	struct zp_cidr	c;
	char		err[256] = "", head[300];

	if (zp_cidr_parse(s, &c, err, sizeof(err)) != -1)
		fail_msg("'%s' accepted", s);
	snprintf(head, sizeof(head), "invalid CIDR '%s': ", s);
	if (strncmp(err, head, strlen(head)) != 0)
		fail_msg("'%s': message does not name it: %s", s, err);
	if (strstr(err, want) == NULL)
		fail_msg("'%s': message lacks '%s': %s", s, want, err);
	assert_null(strchr(err, '\n'));
	assert_int_equal(c.family, 0);	/* nothing half-parsed left */
}

/* Does the rule s match the client ip? */
static int
match(const char *s, const char *ip)
{
	struct zp_cidr		c;
	struct sockaddr_storage	ss;
	char			err[256];

	if (zp_cidr_parse(s, &c, err, sizeof(err)) != 0)
		fail_msg("'%s' refused: %s", s, err);
	return zp_cidr_match(&c, sa(&ss, ip));
}

/* ---- parsing --------------------------------------------------------- */

/* Proves: a bare address is one host, /32 for IPv4 and /128 for IPv6,
 * and prints back in canonical form. */
static void
test_parse_hosts(void **state)
{
	parse_ok("10.1.2.3", AF_INET, "10.1.2.3/32");
	parse_ok("0.0.0.0", AF_INET, "0.0.0.0/32");
	parse_ok("255.255.255.255", AF_INET, "255.255.255.255/32");
	parse_ok("2001:db8::1", AF_INET6, "2001:db8::1/128");
	parse_ok("2001:0DB8:0000::0001", AF_INET6, "2001:db8::1/128");
	parse_ok("::1", AF_INET6, "::1/128");
	parse_ok("::", AF_INET6, "::/128");
}

/* Proves: prefixes at the edges (/0, /32, /128) and inside bytes (/12,
 * /33, /65, /127) are taken when the host bits are zero. */
static void
test_parse_prefixes(void **state)
{
	parse_ok("10.0.0.0/8", AF_INET, "10.0.0.0/8");
	parse_ok("0.0.0.0/0", AF_INET, "0.0.0.0/0");
	parse_ok("10.1.2.3/32", AF_INET, "10.1.2.3/32");
	parse_ok("172.16.0.0/12", AF_INET, "172.16.0.0/12");
	parse_ok("10.0.0.0/08", AF_INET, "10.0.0.0/8");
	parse_ok("::/0", AF_INET6, "::/0");
	parse_ok("2001:db8::/32", AF_INET6, "2001:db8::/32");
	parse_ok("2001:db8:8000::/33", AF_INET6, "2001:db8:8000::/33");
	parse_ok("2001:db8:0:0:8000::/65", AF_INET6, "2001:db8:0:0:8000::/65");
	parse_ok("2001:db8::/127", AF_INET6, "2001:db8::/127");
	parse_ok("2001:db8::1/128", AF_INET6, "2001:db8::1/128");
}

/* Proves: a network written v4-mapped is the IPv4 network a dual-stack
 * socket's clients come from: it becomes that IPv4 rule. */
static void
test_parse_v4mapped(void **state)
{
	parse_ok("::ffff:10.0.0.0/104", AF_INET, "10.0.0.0/8");
	parse_ok("::ffff:10.1.2.3", AF_INET, "10.1.2.3/32");
	parse_ok("::ffff:0:0/96", AF_INET, "0.0.0.0/0");
	parse_ok("::ffff:a01:203/128", AF_INET, "10.1.2.3/32");
	/* v4-compatible (::a.b.c.d, deprecated) is not v4-mapped. */
	parse_ok("::10.1.2.3", AF_INET6, "::10.1.2.3/128");
	/* Below /96 the ffff bits are host bits: refused, not converted. */
	parse_bad("::ffff:10.0.0.0/80", "host bits set");
}

/* Proves: every malformed form is refused with one line that names what
 * was typed and what is wrong. */
static void
test_parse_errors(void **state)
{
	static const char *const syntax[] = {
		"", "/8", "10.0.0/8", "10.0.0", "10", "10.0.0.0.0",
		"10.0.0.256", "host.example", "[::1]", "[::1]/128",
		"fe80::1%lo", "::1::2", " 10.0.0.0",
		"10.0.0.0 ", "1.2.3.4:80",
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789",
	};
	static const char *const length[] = {
		"10.0.0.0/", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/+8",
		"10.0.0.0/ 8", "10.0.0.0/8 ", "10.0.0.0/0x8", "10.0.0.0/8/8",
		"1.2.3.4/1000",
		"::/129", "::/", "::/1280",
	};
	size_t	i;

	for (i = 0; i < sizeof(syntax) / sizeof(syntax[0]); i++)
		parse_bad(syntax[i], "expected ADDR or ADDR/LEN");
	for (i = 0; i < sizeof(length) / sizeof(length[0]); i++)
		parse_bad(length[i], "the prefix length must be 0-");
	parse_bad("10.0.0.0/33", "0-32 for IPv4");
	parse_bad("::/129", "0-128 for IPv6");
}

/* Proves: host bits under the mask are refused (not masked away), and
 * the message gives the network that was probably meant. */
static void
test_parse_host_bits(void **state)
{
	parse_bad("10.1.2.3/8", "host bits set after /8; the network is "
	    "10.0.0.0/8");
	parse_bad("0.0.0.1/0", "the network is 0.0.0.0/0");
	parse_bad("172.31.0.0/11", "the network is 172.0.0.0/11");
	parse_bad("10.0.0.1/31", "the network is 10.0.0.0/31");
	parse_bad("2001:db8::1/32", "the network is 2001:db8::/32");
	parse_bad("::1/0", "the network is ::/0");
	parse_bad("2001:db8::1/127", "the network is 2001:db8::/127");
}

/* ---- matching -------------------------------------------------------- */

/* Proves: IPv4 matching at byte and bit boundaries, /0 and /32. */
static void
test_match_v4(void **state)
{
	assert_true(match("10.0.0.0/8", "10.0.0.0"));
	assert_true(match("10.0.0.0/8", "10.255.255.255"));
	assert_false(match("10.0.0.0/8", "11.0.0.0"));
	assert_false(match("10.0.0.0/8", "9.255.255.255"));
	assert_true(match("172.16.0.0/12", "172.31.255.255"));
	assert_false(match("172.16.0.0/12", "172.32.0.0"));
	assert_false(match("172.16.0.0/12", "172.15.255.255"));
	assert_true(match("0.0.0.0/0", "255.255.255.255"));
	assert_true(match("0.0.0.0/0", "0.0.0.0"));
	assert_true(match("127.0.0.2", "127.0.0.2"));
	assert_false(match("127.0.0.2", "127.0.0.1"));
	assert_false(match("127.0.0.2", "127.0.0.3"));
}

/* Proves: IPv6 matching at /32, /64, /65, /127, /128 and /0. */
static void
test_match_v6(void **state)
{
	assert_true(match("2001:db8::/32", "2001:db8:ffff:ffff::1"));
	assert_false(match("2001:db8::/32", "2001:db9::"));
	assert_true(match("2001:db8:1:2::/64", "2001:db8:1:2:ffff::1"));
	assert_false(match("2001:db8:1:2::/64", "2001:db8:1:3::1"));
	assert_true(match("2001:db8::/65", "2001:db8::7fff:ffff:ffff:ffff"));
	assert_false(match("2001:db8::/65", "2001:db8::8000:0:0:0"));
	assert_true(match("2001:db8::/127", "2001:db8::1"));
	assert_false(match("2001:db8::/127", "2001:db8::2"));
	assert_true(match("::1", "::1"));
	assert_false(match("::1", "::2"));
	assert_true(match("::/0", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"));
	assert_true(match("::/0", "::1"));
}

/* Proves: a v4-mapped client (a dual-stack socket's IPv4 client) matches
 * IPv4 rules as its IPv4 address, and no IPv6 rule, not even ::/0; an
 * IPv4 rule never matches a real IPv6 client. */
static void
test_match_v4mapped(void **state)
{
	assert_true(match("127.0.0.0/8", "::ffff:127.0.0.1"));
	assert_true(match("127.0.0.1", "::ffff:127.0.0.1"));
	assert_false(match("127.0.0.2", "::ffff:127.0.0.1"));
	assert_true(match("0.0.0.0/0", "::ffff:1.2.3.4"));
	assert_true(match("::ffff:10.0.0.0/104", "10.9.9.9"));
	assert_true(match("::ffff:10.0.0.0/104", "::ffff:10.9.9.9"));
	assert_false(match("::/0", "::ffff:127.0.0.1"));
	assert_false(match("::/0", "127.0.0.1"));
	assert_false(match("0.0.0.0/0", "::1"));
	/* ::a.b.c.d is a real IPv6 address, not the IPv4 one. */
	assert_false(match("10.1.2.3", "::10.1.2.3"));
}

/* Proves: an address of another family (AF_UNIX) matches nothing. */
static void
test_match_other_family(void **state)
{
	struct sockaddr_un	sun;
	struct zp_cidr		c;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	assert_int_equal(zp_cidr_parse("0.0.0.0/0", &c, NULL, 0), 0);
	assert_false(zp_cidr_match(&c, (struct sockaddr *)&sun));
	assert_int_equal(zp_cidr_parse("::/0", &c, NULL, 0), 0);
	assert_false(zp_cidr_match(&c, (struct sockaddr *)&sun));
}

/* Proves: deny is checked before allow; no allow rule means everyone
 * not denied; allow rules mean no one else. */
static void
test_permits(void **state)
{
	static struct zp_acl	allow, deny;
	struct sockaddr_storage	ss;
	char			err[256];

	memset(&allow, 0, sizeof(allow));
	memset(&deny, 0, sizeof(deny));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "192.0.2.1")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "::1")));

	assert_int_equal(zp_acl_add(&deny, "deny", "10.0.0.1", err,
	    sizeof(err)), 0);
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss, "10.0.0.1")));
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss,
	    "::ffff:10.0.0.1")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "10.0.0.2")));

	assert_int_equal(zp_acl_add(&allow, "allow", "10.0.0.0/8", err,
	    sizeof(err)), 0);
	assert_int_equal(zp_acl_add(&allow, "allow", "2001:db8::/32", err,
	    sizeof(err)), 0);
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss, "10.0.0.1")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "10.0.0.2")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss,
	    "::ffff:10.200.0.2")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "2001:db8::5")));
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss, "11.0.0.1")));
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss, "::1")));

	/* A deny wider than the allow wins. */
	assert_int_equal(zp_acl_add(&deny, "deny", "0.0.0.0/0", err,
	    sizeof(err)), 0);
	assert_false(zp_acl_permits(&allow, &deny, sa(&ss, "10.0.0.2")));
	assert_true(zp_acl_permits(&allow, &deny, sa(&ss, "2001:db8::5")));
}

/* Proves: a list takes ZP_ACL_MAX_RULES rules and refuses the next with
 * one line naming the option; a bad rule's message names it too, and
 * nothing is appended. */
static void
test_acl_add_limits(void **state)
{
	static struct zp_acl	acl;
	char			err[256], s[32];
	int			i;

	memset(&acl, 0, sizeof(acl));
	for (i = 0; i < ZP_ACL_MAX_RULES; i++) {
		snprintf(s, sizeof(s), "10.%d.%d.0/24", i / 256, i % 256);
		assert_int_equal(zp_acl_add(&acl, "allow", s, err,
		    sizeof(err)), 0);
	}
	assert_int_equal(acl.n, ZP_ACL_MAX_RULES);
	assert_int_equal(zp_acl_add(&acl, "allow", "192.0.2.0/24", err,
	    sizeof(err)), -1);
	assert_string_equal(err, "too many --allow: at most 256");
	assert_int_equal(acl.n, ZP_ACL_MAX_RULES);

	memset(&acl, 0, sizeof(acl));
	assert_int_equal(zp_acl_add(&acl, "deny", "10.0.0.1/8", err,
	    sizeof(err)), -1);
	assert_string_equal(err, "--deny: invalid CIDR '10.0.0.1/8': host "
	    "bits set after /8; the network is 10.0.0.0/8");
	assert_int_equal(acl.n, 0);
}

/* ---- per source ------------------------------------------------------ */

/* Proves: the key is the IPv4 address (the same through v4-mapping) or
 * the IPv6 /64; an IPv4 key never equals an IPv6 one of the same bits. */
static void
test_source_key(void **state)
{
	struct sockaddr_storage	ss;
	struct sockaddr_un	sun;
	struct zp_source_key	a, b;

	assert_int_equal(zp_source_key(sa(&ss, "10.1.2.3"), &a), 0);
	assert_int_equal(zp_source_key(sa(&ss, "::ffff:10.1.2.3"), &b), 0);
	assert_int_equal(a.v6, 0);
	assert_true(a.prefix == 0x0a010203ULL);
	assert_true(a.prefix == b.prefix && a.v6 == b.v6);

	assert_int_equal(zp_source_key(sa(&ss, "2001:db8:1:2::1"), &a), 0);
	assert_int_equal(zp_source_key(sa(&ss, "2001:db8:1:2:ffff:ffff:ffff:"
	    "ffff"), &b), 0);
	assert_int_equal(a.v6, 1);
	assert_true(a.prefix == 0x20010db800010002ULL);
	assert_true(a.prefix == b.prefix);
	assert_int_equal(zp_source_key(sa(&ss, "2001:db8:1:3::1"), &b), 0);
	assert_true(a.prefix != b.prefix);

	/* 0.0.0.0 and ::/64 share their bits, not their key. */
	assert_int_equal(zp_source_key(sa(&ss, "0.0.0.0"), &a), 0);
	assert_int_equal(zp_source_key(sa(&ss, "::1"), &b), 0);
	assert_true(a.prefix == b.prefix && a.v6 != b.v6);

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	assert_int_equal(zp_source_key((struct sockaddr *)&sun, &a), -1);
}

/* Proves: a table that was never initialised counts nothing and takes
 * add and del as no-ops (the daemon without --max-conns-per-source). */
static void
test_srctab_off(void **state)
{
	struct zp_srctab	t;
	struct sockaddr_storage	ss;

	memset(&t, 0, sizeof(t));
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "10.0.0.1")), 0);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "10.0.0.1")), 0);
	zp_srctab_del(&t, sa(&ss, "10.0.0.1"));
	assert_null(t.b);
	zp_srctab_free(&t);
}

/* Proves: counts per source, v4 and v4-mapped together, a /64 together,
 * its neighbour apart; an entry goes when its count reaches zero. */
static void
test_srctab_counts(void **state)
{
	struct zp_srctab	t;
	struct sockaddr_storage	ss;

	zp_srctab_init(&t, 0x1234);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "127.0.0.1")), 0);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "::ffff:127.0.0.1")), 0);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "127.0.0.2")), 0);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "2001:db8::1")), 0);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "2001:db8::ffff")), 0);
	assert_int_equal(zp_srctab_add(&t, sa(&ss, "2001:db8:0:1::1")), 0);
	assert_int_equal(t.n, 4);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "127.0.0.1")), 2);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "::ffff:127.0.0.1")), 2);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "127.0.0.2")), 1);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "127.0.0.3")), 0);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "2001:db8::abcd")), 2);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "2001:db8:0:1::9")), 1);
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "2001:db8:0:2::1")), 0);

	zp_srctab_del(&t, sa(&ss, "127.0.0.1"));
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "127.0.0.1")), 1);
	zp_srctab_del(&t, sa(&ss, "::ffff:127.0.0.1"));
	assert_int_equal(zp_srctab_count(&t, sa(&ss, "127.0.0.1")), 0);
	assert_int_equal(t.n, 3);
	zp_srctab_del(&t, sa(&ss, "2001:db8::1"));
	zp_srctab_del(&t, sa(&ss, "2001:db8::2"));	/* same /64 */
	zp_srctab_del(&t, sa(&ss, "2001:db8:0:1::1"));
	zp_srctab_del(&t, sa(&ss, "127.0.0.2"));
	assert_int_equal(t.n, 0);
	zp_srctab_free(&t);
	assert_int_equal(t.on, 0);
}

/* Proves: through many doublings (20,000 sources, three pairs from
 * every tenth) each source keeps its count, and taking every pair away
 * again leaves the table empty; freeing a full table leaks nothing
 * (ASan). */
static void
test_srctab_growth(void **state)
{
	struct zp_srctab	t;
	struct sockaddr_storage	ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&ss;
	char			ip[64];
	unsigned		i, k, n = 20000;

	zp_srctab_init(&t, 0x5eed2024cafef00dULL);
	for (i = 0; i < n; i++) {
		if (i % 2)
			snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16,
			    (i >> 8) & 0xff, i & 0xff);
		else
			snprintf(ip, sizeof(ip), "2001:db8:%x:%x::1", i >> 16,
			    i & 0xffff);
		for (k = 0; k < (i % 10 == 0 ? 3u : 1u); k++)
			assert_int_equal(zp_srctab_add(&t, sa(&ss, ip)), 0);
	}
	assert_int_equal(t.n, n);
	assert_true(t.nb >= n);
	for (i = 0; i < n; i++) {
		if (i % 2)
			snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16,
			    (i >> 8) & 0xff, i & 0xff);
		else
			snprintf(ip, sizeof(ip), "2001:db8:%x:%x::1", i >> 16,
			    i & 0xffff);
		assert_int_equal(zp_srctab_count(&t, sa(&ss, ip)),
		    i % 10 == 0 ? 3 : 1);
		if (i % 2 == 0) {
			/* Another host of the same /64. */
			sin6->sin6_addr.s6_addr[15] = 0x99;
			assert_int_equal(zp_srctab_count(&t,
			    (struct sockaddr *)&ss), i % 10 == 0 ? 3 : 1);
		}
	}
	for (i = 0; i < n; i++) {
		if (i % 2)
			snprintf(ip, sizeof(ip), "10.%u.%u.%u", i >> 16,
			    (i >> 8) & 0xff, i & 0xff);
		else
			snprintf(ip, sizeof(ip), "2001:db8:%x:%x::1", i >> 16,
			    i & 0xffff);
		for (k = 0; k < (i % 10 == 0 ? 3u : 1u); k++)
			zp_srctab_del(&t, sa(&ss, ip));
	}
	assert_int_equal(t.n, 0);
	zp_srctab_free(&t);

	/* Freeing a table that still holds entries. */
	zp_srctab_init(&t, 1);
	for (i = 0; i < 1000; i++) {
		snprintf(ip, sizeof(ip), "192.168.%u.%u", i >> 8, i & 0xff);
		assert_int_equal(zp_srctab_add(&t, sa(&ss, ip)), 0);
	}
	zp_srctab_free(&t);
	assert_null(t.b);
	assert_int_equal(t.n, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_hosts),
		cmocka_unit_test(test_parse_prefixes),
		cmocka_unit_test(test_parse_v4mapped),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_host_bits),
		cmocka_unit_test(test_match_v4),
		cmocka_unit_test(test_match_v6),
		cmocka_unit_test(test_match_v4mapped),
		cmocka_unit_test(test_match_other_family),
		cmocka_unit_test(test_permits),
		cmocka_unit_test(test_acl_add_limits),
		cmocka_unit_test(test_source_key),
		cmocka_unit_test(test_srctab_off),
		cmocka_unit_test(test_srctab_counts),
		cmocka_unit_test(test_srctab_growth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
