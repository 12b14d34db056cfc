/*
 * test_upstream.c - unit tests for upstream.c: the four balancers, the
 * `tried` list, passive health (down after max_fails, back-off, last
 * resort, back up on success), the log lines of state changes, the
 * name helpers, and which connect errors are this host's own.
 *
 * Time is passed in explicitly, so nothing here sleeps. The log goes to
 * a tmpfile() that each test reads back, to check that a state change is
 * logged once and only once.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <poll.h>
#include <unistd.h>
#include <event2/event.h>

#include "core/config.h"
#include "lib/log.h"
#include "core/net.h"
#include "core/upstream.h"
#include "core/upstream_int.h"
#include "core/loadbal.h"
#include "relay/ctx.h"
#include "stream/pair.h"

#define NSPEC		4
#define T0		1000000	/* an arbitrary "now", in seconds */

/* Per-test state: upstream specs, a logger on a tmpfile, the list. */
struct ups_state {
	char			 hosts[NSPEC][64];
	struct zp_upstream_spec	 specs[NSPEC];
	FILE			*logfp;
	struct zp_log		 lg;
	struct zp_upstreams	 us;
	int			 inited;
};

/* Four specs (10.0.0.1..3:80 and [2001:db8::4]:8080) and a logger. */
static int
ups_setup(void **state)
{
	struct ups_state	*s;
	int			 i;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return -1;
	for (i = 0; i < NSPEC; i++) {
		if (i < 3) {
			snprintf(s->hosts[i], sizeof(s->hosts[i]), "10.0.0.%d",
			    i + 1);
			snprintf(s->specs[i].port, sizeof(s->specs[i].port),
			    "80");
		} else {
			snprintf(s->hosts[i], sizeof(s->hosts[i]),
			    "2001:db8::%d", i + 1);
			snprintf(s->specs[i].port, sizeof(s->specs[i].port),
			    "8080");
		}
		s->specs[i].host = s->hosts[i];
	}
	if ((s->logfp = tmpfile()) == NULL) {
		free(s);
		return -1;
	}
	zp_log_init(&s->lg, s->logfp, ZP_LOG_DEBUG);
	*state = s;
	return 0;
}

/* Free the list (if the test did not) and the log file. */
static int
ups_teardown(void **state)
{
	struct ups_state	*s = *state;

	if (s->inited)
		zp_upstreams_clear(&s->us);
	fclose(s->logfp);
	free(s);
	return 0;
}

/* Set up the first n specs with a balancer and health parameters. */
static struct zp_upstreams *
ups_init(struct ups_state *s, size_t n, enum zp_balance b, int max_fails,
    double fail_timeout)
{
	assert_true(n <= NSPEC);
	assert_int_equal(zp_upstreams_init(&s->us, s->specs, n, b, max_fails,
	    fail_timeout, &s->lg), 0);
	s->inited = 1;
	return &s->us;
}

/* Free the list: each test calls this at its end. */
static void
ups_free(struct ups_state *s)
{
	zp_upstreams_clear(&s->us);
	s->inited = 0;
}

/* A time of T0 + sec seconds + usec microseconds. */
static struct timeval
at(long sec, long usec)
{
	struct timeval	tv;

	tv.tv_sec = T0 + sec;
	tv.tv_usec = usec;
	return tv;
}

/* An IPv4 client address. */
static void
client4(struct zp_addr *a, uint32_t ip, uint16_t port)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;

	memset(a, 0, sizeof(*a));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(ip);
	sin->sin_port = htons(port);
	a->len = sizeof(*sin);
}

/* The same IPv4 client as seen on a dual-stack socket: ::ffff:a.b.c.d */
static void
client4mapped(struct zp_addr *a, uint32_t ip, uint16_t port)
{
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a->ss;
	uint32_t		 nip = htonl(ip);

	memset(a, 0, sizeof(*a));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_addr.s6_addr[10] = 0xff;
	sin6->sin6_addr.s6_addr[11] = 0xff;
	memcpy(sin6->sin6_addr.s6_addr + 12, &nip, 4);
	sin6->sin6_port = htons(port);
	a->len = sizeof(*sin6);
}

/* An IPv6 client in 2001:db8::/64, host part n. */
static void
client6(struct zp_addr *a, uint32_t n, uint16_t port)
{
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a->ss;
	uint32_t		 nn = htonl(n);

	memset(a, 0, sizeof(*a));
	sin6->sin6_family = AF_INET6;
	inet_pton(AF_INET6, "2001:db8::", &sin6->sin6_addr);
	memcpy(sin6->sin6_addr.s6_addr + 12, &nn, 4);
	sin6->sin6_port = htons(port);
	a->len = sizeof(*sin6);
}

/* Pick with nothing tried yet. */
static int
pick(struct zp_upstreams *us, const struct zp_addr *client,
    const struct timeval *now)
{
	unsigned char	tried[NSPEC] = { 0 };

	return zp_upstream_pick(us, client, tried, now);
}

/* Report n refused connects to upstream i at now. */
static void
fail_n(struct zp_upstreams *us, size_t i, int n, const struct timeval *now)
{
	while (n-- > 0)
		zp_upstream_report(us, i, 0, ECONNREFUSED, now);
}

/* How many log lines so far contain every one of the given strings. */
static int
log_count(struct ups_state *s, const char *what, const char *name)
{
	char	line[2048];
	int	n = 0;

	fflush(s->logfp);
	rewind(s->logfp);
	while (fgets(line, sizeof(line), s->logfp) != NULL) {
		if (strstr(line, what) != NULL &&
		    (name == NULL || strstr(line, name) != NULL))
			n++;
	}
	fseek(s->logfp, 0, SEEK_END);
	return n;
}

/* ---- init and names ------------------------------------------------ */

/*
 * init keeps the parameters, turns fail_timeout into a timeval, and
 * starts every upstream up, with no failures and no pairs; free leaves
 * an empty list.
 */
static void
test_init(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	size_t			 i;

	us = ups_init(s, 3, ZP_BALANCE_LEASTCONN, 5, 2.5);
	assert_int_equal(us->n, 3);
	assert_int_equal(us->balance, ZP_BALANCE_LEASTCONN);
	assert_int_equal(us->max_fails, 5);
	assert_int_equal(us->fail_timeout.tv_sec, 2);
	assert_int_equal(us->fail_timeout.tv_usec, 500000);
	assert_ptr_equal(us->log, &s->lg);
	for (i = 0; i < 3; i++) {
		assert_ptr_equal(us->v[i].spec, &s->specs[i]);
		assert_int_equal(us->v[i].up, 1);
		assert_int_equal(us->v[i].fails, 0);
		assert_int_equal(us->v[i].active, 0);
		assert_int_equal(us->v[i].conns_total, 0);
	}
	ups_free(s);
	assert_null(s->us.v);
	assert_int_equal(s->us.n, 0);
	assert_int_equal(log_count(s, "", NULL), 0);
}

/*
 * What other modules see: a set from zp_upstreams_new(), read through
 * its count, zp_upstream_get() and its balancer; zp_upstreams_free()
 * takes NULL.
 */
static void
test_new_get(void **state)
{
	struct ups_state		*s = *state;
	struct zp_upstreams		*us;
	struct zp_upstream		 u;
	char				 name[64];

	assert_non_null(us = zp_upstreams_new(s->specs, 4,
	    ZP_BALANCE_FIRST, 1, 1.0, &s->lg));
	assert_int_equal(zp_upstreams_count(us), 4);
	assert_int_equal(zp_upstreams_balance(us), ZP_BALANCE_FIRST);
	zp_upstream_get(us, 3, &u);
	assert_ptr_equal(u.spec, &s->specs[3]);
	assert_int_equal(u.up, 1);
	assert_null(u.addrs);	/* the copy never shares the live list */
	assert_string_equal(zp_upstream_name(&u, name, sizeof(name)),
	    "[2001:db8::4]:8080");
	assert_string_equal(zp_upstream_label(us, 3, name, sizeof(name)),
	    "[2001:db8::4]:8080");
	zp_upstream_acquire(us, 3);
	zp_upstream_get(us, 3, &u);
	assert_int_equal(u.active, 1);
	zp_upstreams_free(us);
	zp_upstreams_free(NULL);
}

/*
 * Names are "host:port", with brackets around an IPv6 literal, and are
 * cut short (still a C string) in a small buffer.
 */
static void
test_upstream_name(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	char			 buf[64], tiny[6];
	char			 h6[] = "::1", h6b[] = "example.com";

	us = ups_init(s, 4, ZP_BALANCE_ROUNDROBIN, 1, 1.0);
	assert_string_equal(zp_upstream_name(&us->v[0], buf, sizeof(buf)),
	    "10.0.0.1:80");
	assert_string_equal(zp_upstream_name(&us->v[3], buf, sizeof(buf)),
	    "[2001:db8::4]:8080");
	assert_ptr_equal(zp_upstream_name(&us->v[0], buf, sizeof(buf)), buf);
	assert_string_equal(zp_upstream_name(&us->v[0], tiny, sizeof(tiny)),
	    "10.0.");
	s->specs[0].host = h6;
	assert_string_equal(zp_upstream_name(&us->v[0], buf, sizeof(buf)),
	    "[::1]:80");
	s->specs[0].host = h6b;
	snprintf(s->specs[0].port, sizeof(s->specs[0].port), "443");
	assert_string_equal(zp_upstream_name(&us->v[0], buf, sizeof(buf)),
	    "example.com:443");
	s->specs[0].host = s->hosts[0];
	ups_free(s);
}

/* Each balancer name parses to its value and prints back the same. */
static void
test_balance_names(void **state)
{
	static const struct {
		const char	*name;
		enum zp_balance	 b;
	} t[] = {
		{ "first",	ZP_BALANCE_FIRST },
		{ "roundrobin",	ZP_BALANCE_ROUNDROBIN },
		{ "leastconn",	ZP_BALANCE_LEASTCONN },
		{ "source",	ZP_BALANCE_SOURCE },
	};
	static const char	*bad[] = {
		"bogus", "", "First", "round-robin", "roundrobin ", "sourc",
		"leastconns",
	};
	size_t			 i;

	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		assert_int_equal(zp_balance_parse(t[i].name), (int)t[i].b);
		assert_string_equal(zp_balance_str(t[i].b), t[i].name);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (zp_balance_parse(bad[i]) != -1)
			fail_msg("\"%s\" parsed as a balancer", bad[i]);
}

/* ---- balancers ----------------------------------------------------- */

/* roundrobin goes through every upstream in turn, again and again. */
static void
test_rr_cycles(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i;

	us = ups_init(s, 4, ZP_BALANCE_ROUNDROBIN, 3, 10.0);
	for (i = 0; i < 12; i++)
		assert_int_equal(pick(us, NULL, &now), i % 4);
	ups_free(s);
}

/*
 * roundrobin skips a down upstream while its back-off runs, and keeps
 * the order among the others.
 */
static void
test_rr_skips_down(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	static const int	 want[] = { 0, 2, 3, 0, 2, 3, 0, 2, 3 };
	size_t			 i;

	us = ups_init(s, 4, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	fail_n(us, 1, 1, &now);
	assert_int_equal(us->v[1].up, 0);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(pick(us, NULL, &now), want[i]);
	/* Two down: only the others. */
	fail_n(us, 3, 1, &now);
	for (i = 0; i < 6; i++)
		assert_int_equal(pick(us, NULL, &now), i % 2 == 0 ? 0 : 2);
	ups_free(s);
}

/*
 * first always takes the lowest live index (failover in the order
 * given); with that one tried, the next; with it down, the next live.
 */
static void
test_first_failover(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	unsigned char		 tried[NSPEC] = { 0 };
	int			 i;

	us = ups_init(s, 4, ZP_BALANCE_FIRST, 2, 10.0);
	for (i = 0; i < 5; i++)
		assert_int_equal(pick(us, NULL, &now), 0);
	tried[0] = 1;
	assert_int_equal(zp_upstream_pick(us, NULL, tried, &now), 1);
	tried[1] = 1;
	assert_int_equal(zp_upstream_pick(us, NULL, tried, &now), 2);
	tried[2] = 1;
	assert_int_equal(zp_upstream_pick(us, NULL, tried, &now), 3);

	fail_n(us, 0, 2, &now);
	for (i = 0; i < 5; i++)
		assert_int_equal(pick(us, NULL, &now), 1);
	fail_n(us, 1, 2, &now);
	assert_int_equal(pick(us, NULL, &now), 2);
	/* 0 comes back: it is first again at once. */
	zp_upstream_report(us, 0, 1, 0, &now);
	assert_int_equal(pick(us, NULL, &now), 0);
	ups_free(s);
}

/*
 * leastconn takes the upstream with the fewest open pairs, and goes
 * round among those tied for fewest.
 */
static void
test_leastconn(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i, seen[NSPEC] = { 0 };

	us = ups_init(s, 3, ZP_BALANCE_LEASTCONN, 3, 10.0);
	us->v[0].active = 5;
	us->v[1].active = 2;
	us->v[2].active = 7;
	for (i = 0; i < 4; i++)
		assert_int_equal(pick(us, NULL, &now), 1);

	/* A tie between 1 and 2: they alternate, 0 never comes. */
	us->v[0].active = 3;
	us->v[1].active = 1;
	us->v[2].active = 1;
	for (i = 0; i < 6; i++)
		seen[pick(us, NULL, &now)]++;
	assert_int_equal(seen[0], 0);
	assert_int_equal(seen[1], 3);
	assert_int_equal(seen[2], 3);
	for (i = 0; i < 4; i++)
		assert_int_not_equal(pick(us, NULL, &now), pick(us, NULL,
		    &now));

	/* All equal: round robin over all three. */
	us->v[0].active = us->v[1].active = us->v[2].active = 4;
	memset(seen, 0, sizeof(seen));
	for (i = 0; i < 9; i++)
		seen[pick(us, NULL, &now)]++;
	assert_int_equal(seen[0], 3);
	assert_int_equal(seen[1], 3);
	assert_int_equal(seen[2], 3);

	/* As a caller would: count each pick as an open pair. */
	us->v[0].active = us->v[1].active = us->v[2].active = 0;
	for (i = 0; i < 30; i++)
		us->v[pick(us, NULL, &now)].active++;
	assert_int_equal(us->v[0].active, 10);
	assert_int_equal(us->v[1].active, 10);
	assert_int_equal(us->v[2].active, 10);

	/* The least loaded, once down, is passed over. */
	us->v[1].active = 0;
	fail_n(us, 1, 3, &now);
	assert_int_not_equal(pick(us, NULL, &now), 1);
	ups_free(s);
}

/*
 * source sends the same client address to the same upstream every
 * time, whatever its port, and whatever other clients came between.
 */
static void
test_source_sticky(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 a, b;
	int			 first, i;

	us = ups_init(s, 3, ZP_BALANCE_SOURCE, 3, 10.0);
	client4(&a, 0xc0000201, 40000);	/* 192.0.2.1 */
	first = pick(us, &a, &now);
	assert_in_range(first, 0, 2);
	for (i = 0; i < 50; i++) {
		client4(&a, 0xc0000201, (uint16_t)(1024 + i * 777));
		assert_int_equal(pick(us, &a, &now), first);
		client4(&b, 0x0a000000 + (uint32_t)i, 5000);
		(void)pick(us, &b, &now);
	}
	client6(&a, 42, 1);
	first = pick(us, &a, &now);
	for (i = 0; i < 20; i++) {
		client6(&a, 42, (uint16_t)(i + 2));
		assert_int_equal(pick(us, &a, &now), first);
	}
	ups_free(s);
}

/*
 * source spreads different clients over the upstreams: 1000 IPv4
 * addresses in a row, 1000 scattered ones, and 1000 IPv6 ones, over 3
 * upstreams, give each more than 20%.
 */
static void
test_source_spread(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 a;
	int			 kind, i, j, count[3];

	us = ups_init(s, 3, ZP_BALANCE_SOURCE, 3, 10.0);
	for (kind = 0; kind < 3; kind++) {
		memset(count, 0, sizeof(count));
		for (i = 0; i < 1000; i++) {
			if (kind == 0)
				client4(&a, 0xc0a80000 + (uint32_t)i, 1);
			else if (kind == 1)
				client4(&a, (uint32_t)i * 2654435761u, 1);
			else
				client6(&a, (uint32_t)i, 1);
			j = pick(us, &a, &now);
			assert_in_range(j, 0, 2);
			count[j]++;
		}
		for (j = 0; j < 3; j++)
			if (count[j] <= 200)
				fail_msg("kind %d: upstream %d got %d of 1000 "
				    "clients (%d %d %d)", kind, j, count[j],
				    count[0], count[1], count[2]);
	}
	ups_free(s);
}

/*
 * An IPv4 client seen as ::ffff:a.b.c.d on a dual-stack listener goes
 * where the same client would go over plain IPv4.
 */
static void
test_source_v4mapped(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 a, m;
	uint32_t		 ip;
	int			 i;

	us = ups_init(s, 3, ZP_BALANCE_SOURCE, 3, 10.0);
	for (i = 0; i < 300; i++) {
		ip = 0xc6336400u + (uint32_t)i * 7919u;
		client4(&a, ip, 1000);
		client4mapped(&m, ip, 2000);
		if (pick(us, &a, &now) != pick(us, &m, &now))
			fail_msg("client %u: IPv4 and v4-mapped differ", ip);
	}
	ups_free(s);
}

/*
 * source's choices hold while the live set is unchanged: a second round
 * of the same clients lands where the first did; while one upstream is
 * down no client lands on it and each client's choice is again stable;
 * once it is back, every client is where it was before the outage.
 */
static void
test_source_stable(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 a;
	int			 before[200], i, j;

	us = ups_init(s, 3, ZP_BALANCE_SOURCE, 1, 10.0);
	for (i = 0; i < 200; i++) {
		client4(&a, 0x0a010000 + (uint32_t)i * 13u, 1);
		before[i] = pick(us, &a, &now);
	}
	for (i = 0; i < 200; i++) {
		client4(&a, 0x0a010000 + (uint32_t)i * 13u, 9);
		assert_int_equal(pick(us, &a, &now), before[i]);
	}
	fail_n(us, 1, 1, &now);
	for (i = 0; i < 200; i++) {
		client4(&a, 0x0a010000 + (uint32_t)i * 13u, 1);
		j = pick(us, &a, &now);
		assert_int_not_equal(j, 1);
		/* And it is stable while 1 stays down. */
		assert_int_equal(pick(us, &a, &now), j);
	}
	zp_upstream_report(us, 1, 1, 0, &now);
	for (i = 0; i < 200; i++) {
		client4(&a, 0x0a010000 + (uint32_t)i * 13u, 1);
		assert_int_equal(pick(us, &a, &now), before[i]);
	}
	ups_free(s);
}

/*
 * With every balancer, the tried array excludes upstreams: n picks, each
 * marked tried, give n different upstreams, and the next pick gives -1.
 */
static void
test_tried_exhausts(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 a;
	unsigned char		 tried[NSPEC];
	static const enum zp_balance bs[] = {
		ZP_BALANCE_ROUNDROBIN, ZP_BALANCE_FIRST, ZP_BALANCE_LEASTCONN,
		ZP_BALANCE_SOURCE,
	};
	size_t			 b, k;
	int			 j, c;

	client4(&a, 0xcb007107, 1);	/* 203.0.113.7 */
	for (b = 0; b < sizeof(bs) / sizeof(bs[0]); b++) {
		for (c = 0; c < 2; c++) {
			us = ups_init(s, NSPEC, bs[b], 3, 10.0);
			/* Second time round, one is down: tried still wins. */
			if (c == 1)
				fail_n(us, 2, 3, &now);
			memset(tried, 0, sizeof(tried));
			for (k = 0; k < NSPEC; k++) {
				j = zp_upstream_pick(us, &a, tried, &now);
				if (j < 0 || j >= NSPEC || tried[j])
					fail_msg("%s: pick %zu gave %d",
					    zp_balance_str(bs[b]), k, j);
				tried[j] = 1;
			}
			assert_int_equal(zp_upstream_pick(us, &a, tried, &now),
			    -1);
			assert_int_equal(zp_upstream_pick(us, NULL, tried,
			    &now), -1);
			ups_free(s);
		}
	}
}

/* ---- passive health ------------------------------------------------ */

/*
 * max_fails refused connects in a row mark an upstream down, with its
 * error kept, and log one "is down" line naming it; more failures while
 * down log nothing more.
 */
static void
test_down_after_max_fails(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i;

	us = ups_init(s, 3, ZP_BALANCE_ROUNDROBIN, 3, 10.0);
	fail_n(us, 1, 2, &now);
	assert_int_equal(us->v[1].up, 1);
	assert_int_equal(us->v[1].fails, 2);
	assert_int_equal(log_count(s, "is down", NULL), 0);
	fail_n(us, 1, 1, &now);
	assert_int_equal(us->v[1].up, 0);
	assert_int_equal(us->v[1].last_err, ECONNREFUSED);
	assert_int_equal(log_count(s, "is down", NULL), 1);
	assert_int_equal(log_count(s, "is down", "10.0.0.2:80"), 1);
	assert_int_equal(log_count(s, "is down", strerror(ECONNREFUSED)), 1);
	for (i = 0; i < 10; i++) {
		now = at(i, 0);
		fail_n(us, 1, 1, &now);
	}
	assert_int_equal(us->v[1].up, 0);
	assert_int_equal(log_count(s, "is down", NULL), 1);
	/* The others were not touched. */
	assert_int_equal(us->v[0].up, 1);
	assert_int_equal(us->v[2].up, 1);
	assert_int_equal(us->v[0].fails, 0);
	ups_free(s);
}

/* A success between failures resets the count: no max_fails in a row. */
static void
test_success_resets_fails(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i;

	us = ups_init(s, 2, ZP_BALANCE_ROUNDROBIN, 3, 10.0);
	for (i = 0; i < 20; i++) {
		fail_n(us, 0, 2, &now);
		zp_upstream_report(us, 0, 1, 0, &now);
		assert_int_equal(us->v[0].fails, 0);
		assert_int_equal(us->v[0].last_err, 0);
	}
	assert_int_equal(us->v[0].up, 1);
	assert_int_equal(log_count(s, "is down", NULL), 0);
	assert_int_equal(log_count(s, "is up", NULL), 0);
	fail_n(us, 0, 3, &now);
	assert_int_equal(us->v[0].up, 0);
	ups_free(s);
}

/*
 * A down upstream is skipped while its back-off runs (retry_at is the
 * time of the last failure plus fail_timeout), and is picked again once
 * now is past retry_at -- without any success reported in between.
 */
static void
test_backoff(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0), t, want = at(10, 0);
	static const long	 during[][2] = {
		{ 0, 0 }, { 1, 0 }, { 5, 500000 }, { 9, 999999 },
	};
	int			 i, seen;

	us = ups_init(s, 3, ZP_BALANCE_ROUNDROBIN, 2, 10.0);
	fail_n(us, 2, 2, &now);
	assert_int_equal(us->v[2].up, 0);
	assert_int_equal(us->v[2].retry_at.tv_sec, want.tv_sec);
	assert_int_equal(us->v[2].retry_at.tv_usec, want.tv_usec);

	for (i = 0; i < 4; i++) {
		t = at(during[i][0], during[i][1]);
		for (seen = 0; seen < 6; seen++)
			assert_int_not_equal(pick(us, NULL, &t), 2);
	}
	t = at(10, 1);
	for (i = 0, seen = 0; i < 3; i++)
		seen += pick(us, NULL, &t) == 2;
	assert_int_equal(seen, 1);
	assert_int_equal(us->v[2].up, 0);	/* not up until it works */

	/* It fails again: a new back-off from that time. */
	t = at(11, 0);
	fail_n(us, 2, 1, &t);
	assert_int_equal(us->v[2].retry_at.tv_sec, T0 + 21);
	t = at(20, 999999);
	for (i = 0; i < 6; i++)
		assert_int_not_equal(pick(us, NULL, &t), 2);
	t = at(21, 1);
	for (i = 0, seen = 0; i < 3; i++)
		seen += pick(us, NULL, &t) == 2;
	assert_int_equal(seen, 1);
	assert_int_equal(log_count(s, "is down", NULL), 1);
	ups_free(s);
}

/*
 * A fractional fail_timeout is kept to the microsecond: 2.3 s of
 * back-off is 2.300000 s, not 2.299999 s, and the log line says 2.300s.
 */
static void
test_backoff_fraction(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0), t;

	us = ups_init(s, 2, ZP_BALANCE_FIRST, 1, 2.3);
	if (us->fail_timeout.tv_sec != 2 || us->fail_timeout.tv_usec != 300000)
		fail_msg("fail_timeout 2.3 became %ld.%06ld",
		    (long)us->fail_timeout.tv_sec,
		    (long)us->fail_timeout.tv_usec);
	fail_n(us, 0, 1, &now);
	assert_int_equal(log_count(s, "is down", "2.300s"), 1);
	/* Still backing off a microsecond before 2.3 s... */
	t = at(2, 299999);
	assert_int_equal(pick(us, NULL, &t), 1);
	/* ...and over just after. */
	t = at(2, 300001);
	assert_int_equal(pick(us, NULL, &t), 0);
	ups_free(s);
}

/*
 * Whatever the fraction, fail_timeout becomes a normalised timeval
 * (0 <= tv_usec < 1000000) that is within a microsecond of the value
 * given, so that timeradd() on it gives a valid retry_at.
 */
static void
test_fail_timeout_timeval(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	static const double	 v[] = {
		0.0, 0.001, 0.5, 1.0, 1.9999999, 0.9999996, 10.0, 86400.25,
	};
	double			 got;
	size_t			 i;

	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		us = ups_init(s, 1, ZP_BALANCE_FIRST, 1, v[i]);
		assert_in_range(us->fail_timeout.tv_usec, 0, 999999);
		got = (double)us->fail_timeout.tv_sec +
		    (double)us->fail_timeout.tv_usec / 1e6;
		if (got < v[i] - 1e-6 || got > v[i] + 1e-6)
			fail_msg("fail_timeout %.7f became %ld.%06ld", v[i],
			    (long)us->fail_timeout.tv_sec,
			    (long)us->fail_timeout.tv_usec);
		ups_free(s);
	}
}

/*
 * When every upstream is down and backing off, pick still returns one
 * (the last resort) rather than turning the client away; tried still
 * excludes, and -1 comes only when all were tried.
 */
static void
test_last_resort(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0), t = at(1, 0);
	unsigned char		 tried[NSPEC] = { 0 };
	struct zp_addr		 a;
	int			 i, j, b;

	for (b = ZP_BALANCE_ROUNDROBIN; b <= ZP_BALANCE_SOURCE; b++) {
		us = ups_init(s, 3, (enum zp_balance)b, 1, 10.0);
		for (i = 0; i < 3; i++)
			fail_n(us, (size_t)i, 1, &now);
		client4(&a, 0x08080808, 53);
		for (i = 0; i < 6; i++) {
			j = pick(us, &a, &t);
			if (j < 0 || j > 2)
				fail_msg("%s: all down gave %d",
				    zp_balance_str((enum zp_balance)b), j);
		}
		memset(tried, 0, sizeof(tried));
		tried[0] = tried[2] = 1;
		assert_int_equal(zp_upstream_pick(us, &a, tried, &t), 1);
		tried[1] = 1;
		assert_int_equal(zp_upstream_pick(us, &a, tried, &t), -1);
		ups_free(s);
	}
}

/*
 * A live upstream is preferred to down ones still backing off, even when
 * the balancer would otherwise choose a down one (first: the lowest
 * index); once the live one is tried, the down ones are the last resort,
 * in the balancer's order.
 */
static void
test_live_before_down(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	unsigned char		 tried[NSPEC] = { 0 };

	us = ups_init(s, 3, ZP_BALANCE_FIRST, 1, 10.0);
	fail_n(us, 0, 1, &now);
	fail_n(us, 1, 1, &now);
	assert_int_equal(pick(us, NULL, &now), 2);
	/* 2 tried: only down ones are left, and the first of them wins. */
	tried[2] = 1;
	assert_int_equal(zp_upstream_pick(us, NULL, tried, &now), 0);
	ups_free(s);
}

/*
 * A success marks a down upstream up, clears its failures, and logs one
 * "is up" line naming it; more successes log nothing more.
 */
static void
test_back_up(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i;

	us = ups_init(s, 4, ZP_BALANCE_ROUNDROBIN, 2, 10.0);
	fail_n(us, 3, 2, &now);
	assert_int_equal(us->v[3].up, 0);
	assert_int_equal(log_count(s, "is up", NULL), 0);
	now = at(3, 0);
	zp_upstream_report(us, 3, 1, 0, &now);
	assert_int_equal(us->v[3].up, 1);
	assert_int_equal(us->v[3].fails, 0);
	assert_int_equal(us->v[3].last_err, 0);
	assert_int_equal(log_count(s, "is up", NULL), 1);
	assert_int_equal(log_count(s, "is up", "[2001:db8::4]:8080"), 1);
	for (i = 0; i < 5; i++)
		zp_upstream_report(us, 3, 1, 0, &now);
	assert_int_equal(log_count(s, "is up", NULL), 1);
	assert_int_equal(log_count(s, "is down", NULL), 1);
	/* Up again means picked again, well before the back-off ended. */
	for (i = 0; i < 4; i++)
		if (pick(us, NULL, &now) == 3)
			break;
	assert_true(i < 4);
	/* A second outage is a second "is down" line. */
	fail_n(us, 3, 2, &now);
	assert_int_equal(log_count(s, "is down", NULL), 2);
	zp_upstream_report(us, 3, 1, 0, &now);
	assert_int_equal(log_count(s, "is up", NULL), 2);
	ups_free(s);
}

/* max_fails 1: the first failure is enough. */
static void
test_max_fails_one(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);

	us = ups_init(s, 2, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	zp_upstream_report(us, 0, 0, ETIMEDOUT, &now);
	assert_int_equal(us->v[0].up, 0);
	assert_int_equal(us->v[0].last_err, ETIMEDOUT);
	assert_int_equal(log_count(s, "is down", strerror(ETIMEDOUT)), 1);
	ups_free(s);
}

/* A listening socket on 127.0.0.1, its address in *a. */
static int
local_listener(struct zp_addr *a)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;
	socklen_t		 len = sizeof(*sin);
	int			 fd;

	memset(a, 0, sizeof(*a));
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)sin, sizeof(*sin)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)sin, &len), 0);
	a->len = len;
	return fd;
}

/*
 * To a local listener the connect is over when zp_connect_start returns:
 * 0, a connected non-blocking socket, no event-loop round needed. To a
 * local port nobody listens on: not connected (1, the write event then
 * tells ECONNREFUSED) or refused at once (-1, ECONNREFUSED); never 0.
 */
static void
test_connect_local(void **state)
{
	struct zp_addr		 a;
	struct sockaddr_in	 peer;
	socklen_t		 len = sizeof(peer);
	struct pollfd		 pfd;
	int			 lfd, fd = -1, rc;

	(void)state;
	lfd = local_listener(&a);
	assert_int_equal(zp_connect_start(&a, &fd), 0);
	assert_true(fd >= 0);
	assert_int_equal(getpeername(fd, (struct sockaddr *)&peer, &len), 0);
	assert_int_equal(peer.sin_port,
	    ((struct sockaddr_in *)&a.ss)->sin_port);
	assert_int_equal(send(fd, "x", 1, MSG_NOSIGNAL), 1);
	close(fd);
	close(lfd);		/* the port is free now: nobody listens */

	fd = -1;
	rc = zp_connect_start(&a, &fd);
	if (rc == -1) {
		assert_int_equal(errno, ECONNREFUSED);
		return;
	}
	assert_int_equal(rc, 1);
	pfd.fd = fd;
	pfd.events = POLLOUT;
	assert_int_equal(poll(&pfd, 1, 5000), 1);
	assert_int_equal(zp_connect_result(fd, EV_WRITE), ECONNREFUSED);
	close(fd);
}

/*
 * The local shortages — descriptors, kernel memory, local ports — are
 * this host's; refusals, timeouts, unreachable networks and resets are
 * the upstream's (or the path's) and must keep counting against it.
 */
static void
test_local_errors(void **state)
{
	static const int local[] = {
		EMFILE, ENFILE, ENOBUFS, ENOMEM, EADDRNOTAVAIL, EADDRINUSE,
	};
	static const int remote[] = {
		0, ECONNREFUSED, ETIMEDOUT, EHOSTUNREACH, ENETUNREACH,
		ECONNRESET, ECONNABORTED, EAFNOSUPPORT, EACCES, EPERM, EINVAL,
		EAGAIN, EINTR, EINPROGRESS,
	};
	size_t	i;

	(void)state;
	for (i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if (!zp_connect_local_error(local[i]))
			fail_msg("%s taken for the upstream's fault",
			    strerror(local[i]));
	for (i = 0; i < sizeof(remote) / sizeof(remote[0]); i++)
		if (zp_connect_local_error(remote[i]))
			fail_msg("%s taken for a local fault",
			    strerror(remote[i]));
}

/*
 * Out of descriptors for real (the soft RLIMIT_NOFILE lowered to what is
 * open), zp_connect_start fails with EMFILE, leaves nothing open, and
 * that errno is classified local; with the limit back, the same address
 * connects.
 */
static void
test_connect_emfile(void **state)
{
	struct rlimit	 old, low;
	struct zp_addr	 a;
	int		 lfd, fd = -1, rc, full_err, err, spare[256], n = 0;

	(void)state;
	lfd = local_listener(&a);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	/* A limit a few above lfd; spare[] fills every slot, holes too. */
	low = old;
	low.rlim_cur = (rlim_t)lfd + 1 + 4;
	assert_true(low.rlim_cur <= old.rlim_cur);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 256 && (spare[n] = dup(lfd)) != -1)
		n++;
	full_err = n < 256 ? errno : 0;
	rc = zp_connect_start(&a, &fd);
	err = errno;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	while (n > 0)
		close(spare[--n]);
	assert_int_equal(full_err, EMFILE);	/* the table was full */
	assert_int_equal(rc, -1);
	assert_int_equal(err, EMFILE);
	assert_int_equal(fd, -1);
	assert_true(zp_connect_local_error(err));
	assert_int_equal(zp_connect_start(&a, &fd), 0);
	close(fd);
	close(lfd);
}

/* An address from a literal, port 0. */
static struct zp_addr
lit(const char *s)
{
	struct zp_addr		 a;
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a.ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a.ss;

	memset(&a, 0, sizeof(a));
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		a.len = sizeof(*sin);
	} else {
		assert_int_equal(inet_pton(AF_INET6, s, &sin6->sin6_addr), 1);
		sin6->sin6_family = AF_INET6;
		a.len = sizeof(*sin6);
	}
	return a;
}

/*
 * The bind address of --source: same family only; a v4-mapped client
 * (dual-stack listener) binds plain IPv4 towards an IPv4 upstream and
 * cannot reach an IPv6 one; a v4-mapped upstream is reached from the
 * mapped IPv4 source; the port is always 0.
 */
static void
test_source_for(void **state)
{
	static const struct {
		const char	*from, *to, *want;	/* want NULL: skipped */
	} cases[] = {
		{ "10.9.0.2", "10.10.0.2", "10.9.0.2:0" },
		{ "fd09::2", "fd10::2", "[fd09::2]:0" },
		{ "::ffff:10.9.0.2", "10.10.0.2", "10.9.0.2:0" },
		{ "10.9.0.2", "::ffff:10.10.0.2", "10.9.0.2:0" },
		{ "10.9.0.2", "fd10::2", NULL },
		{ "fd09::2", "10.10.0.2", NULL },
		{ "::ffff:10.9.0.2", "fd10::2", NULL },
		{ "fd09::2", "::ffff:10.10.0.2", NULL },
	};
	struct zp_addr	 from, to, out;
	char		 buf[ZP_ADDRSTRLEN];
	size_t		 i;
	int		 rc;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		from = lit(cases[i].from);
		((struct sockaddr_in *)&from.ss)->sin_port = htons(4242);
		to = lit(cases[i].to);
		rc = zp_source_for(&from, &to, &out);
		if (cases[i].want == NULL) {
			if (rc != -1)
				fail_msg("%s -> %s not skipped", cases[i].from,
				    cases[i].to);
			continue;
		}
		if (rc != 0)
			fail_msg("%s -> %s skipped", cases[i].from, cases[i].to);
		assert_int_equal(out.ss.ss_family, to.ss.ss_family);
		assert_string_equal(zp_addr_str(&out, buf, sizeof(buf)),
		    cases[i].want);
	}
}

#define T(f)	cmocka_unit_test_setup_teardown(f, ups_setup, ups_teardown)

/* ---- weights and backups (-u HOST:PORT,weight=N,backup) -------------- */

/*
 * roundrobin with weights 1:3 gives exactly 100 and 300 of 400 clients,
 * spread out (smooth weighted round robin: never more than 3 in a row
 * to the heavier one, never 2 in a row to the lighter).
 */
static void
test_rr_weights(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 n[2] = { 0, 0 }, i, idx, last = -1, run = 0;

	s->specs[0].weight = 1;
	s->specs[1].weight = 3;
	s->specs[0].has_weight = s->specs[1].has_weight = 1;
	us = ups_init(s, 2, ZP_BALANCE_ROUNDROBIN, 3, 10.0);
	for (i = 0; i < 400; i++) {
		idx = pick(us, NULL, &now);
		assert_true(idx == 0 || idx == 1);
		n[idx]++;
		run = idx == last ? run + 1 : 1;
		last = idx;
		assert_true(run <= (idx == 1 ? 3 : 1));
	}
	assert_int_equal(n[0], 100);
	assert_int_equal(n[1], 300);
	ups_free(s);
}

/*
 * leastconn with weights 1:3, every client staying: open pairs end at
 * 1:3 (active / weight balanced), 100 and 300 of 400.
 */
static void
test_leastconn_weights(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 i, idx;

	s->specs[0].weight = 1;
	s->specs[1].weight = 3;
	s->specs[0].has_weight = s->specs[1].has_weight = 1;
	us = ups_init(s, 2, ZP_BALANCE_LEASTCONN, 3, 10.0);
	for (i = 0; i < 400; i++) {
		idx = pick(us, NULL, &now);
		assert_true(idx == 0 || idx == 1);
		zp_upstream_acquire(us, (size_t)idx);
	}
	assert_int_equal(us->v[0].active, 100);
	assert_int_equal(us->v[1].active, 300);
	ups_free(s);
}

/* Weight 0 takes no new client, with every balancer; all 0: none. */
static void
test_weight_zero(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 c;
	static const enum zp_balance b[] = { ZP_BALANCE_ROUNDROBIN,
		ZP_BALANCE_FIRST, ZP_BALANCE_LEASTCONN, ZP_BALANCE_SOURCE };
	size_t			 k;
	int			 i;

	for (k = 0; k < sizeof(b) / sizeof(b[0]); k++) {
		s->specs[0].has_weight = 1;
		s->specs[0].weight = 0;
		s->specs[1].has_weight = 0;
		us = ups_init(s, 2, b[k], 3, 10.0);
		for (i = 0; i < 50; i++) {
			client4(&c, 0x0a000000u + (uint32_t)i, 1000);
			assert_int_equal(zp_upstream_pick(us, &c,
			    (unsigned char[NSPEC]){ 0 }, &now), 1);
		}
		us->v[1].weight = 0;
		assert_int_equal(pick(us, NULL, &now), -1);
		ups_free(s);
	}
}

/*
 * A backup gets no client while an upstream that is not one is up (or
 * down with its back-off over); with both primaries down, every client;
 * once one is back, none again.
 */
static void
test_backup(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0), later = at(20, 0);
	int			 i;

	s->specs[2].backup = 1;
	us = ups_init(s, 3, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	for (i = 0; i < 30; i++)
		assert_true(pick(us, NULL, &now) != 2);
	fail_n(us, 0, 1, &now);
	for (i = 0; i < 10; i++)
		assert_int_equal(pick(us, NULL, &now), 1);
	fail_n(us, 1, 1, &now);
	for (i = 0; i < 10; i++)
		assert_int_equal(pick(us, NULL, &now), 2);
	/* A primary answers again: the backup is out of the rotation. */
	zp_upstream_report(us, 0, 1, 0, &now);
	for (i = 0; i < 10; i++)
		assert_int_equal(pick(us, NULL, &now), 0);
	/* The other's back-off is over: it is tried again, not the backup. */
	for (i = 0; i < 10; i++)
		assert_true(pick(us, NULL, &later) != 2);
	ups_free(s);
}

/*
 * --balance source is a consistent hash: 5 upstreams share 10,000
 * sources about evenly (each 20 % +- 5), and with one of them gone only
 * its own sources move (about 1/5), where a modulo over the candidates
 * moved about 4/5. Weights 1:1:1:1:2 give the last about a third.
 */
static void
test_source_consistent(void **state)
{
	char			 hosts[5][16];
	struct zp_upstream_spec	 specs[5];
	struct zp_upstreams	 us;
	struct timeval		 now = at(0, 0);
	struct zp_addr		 c;
	unsigned char		 tried[5] = { 0 };
	static unsigned char	 before[10000];
	int			 i, k, n[5] = { 0 }, moved = 0, gone = 0;

	(void)state;
	memset(specs, 0, sizeof(specs));
	for (k = 0; k < 5; k++) {
		snprintf(hosts[k], sizeof(hosts[k]), "10.1.0.%d", k + 1);
		specs[k].host = hosts[k];
		snprintf(specs[k].port, sizeof(specs[k].port), "514");
	}
	assert_int_equal(zp_upstreams_init(&us, specs, 5, ZP_BALANCE_SOURCE,
	    3, 10.0, NULL), 0);
	for (i = 0; i < 10000; i++) {
		client4(&c, 0xc0a80000u + (uint32_t)i * 7919u, 40000);
		k = zp_upstream_pick(&us, &c, tried, &now);
		assert_true(k >= 0 && k < 5);
		before[i] = (unsigned char)k;
		n[k]++;
	}
	for (k = 0; k < 5; k++)
		assert_true(n[k] >= 1500 && n[k] <= 2500);
	/* Upstream 2 leaves (tried: as if gone from the candidates). */
	tried[2] = 1;
	for (i = 0; i < 10000; i++) {
		client4(&c, 0xc0a80000u + (uint32_t)i * 7919u, 40000);
		k = zp_upstream_pick(&us, &c, tried, &now);
		assert_true(k >= 0 && k < 5 && k != 2);
		if (before[i] == 2)
			gone++;
		else
			assert_int_equal(k, before[i]);	/* nobody else moves */
		moved += k != before[i];
	}
	assert_int_equal(moved, gone);
	assert_true(moved <= 2500);
	print_message("source: 5 upstreams, 10000 sources, %d (%.1f %%) moved "
	    "when one left\n", moved, moved / 100.0);
	/* Weights 1:1:1:1:2: the last gets about 2/6. */
	us.v[4].weight = 2;
	memset(n, 0, sizeof(n));
	tried[2] = 0;
	for (i = 0; i < 10000; i++) {
		client4(&c, 0xc0a80000u + (uint32_t)i * 7919u, 40000);
		n[zp_upstream_pick(&us, &c, tried, &now)]++;
	}
	assert_true(n[4] >= 2833 && n[4] <= 3833);
	zp_upstreams_clear(&us);
}

/*
 * zp_rebalance_choose for the upstreams us, eff streams on each, mode
 * (enum zp_rebalance), no load seen.
 */
static int
choose(struct zp_upstreams *us, const long *eff, int mode, int *hi, int *lo)
{
	struct zp_config	cfg;
	struct zp_ctx		root;
	struct zp_up_load	load[ZP_MAX_UPSTREAMS];
	char			text[512];
	int			why;
	struct timeval		now = at(0, 0);

	memset(&cfg, 0, sizeof(cfg));
	memset(&root, 0, sizeof(root));
	memset(load, 0, sizeof(load));
	cfg.rebalance = mode;
	root.cfg = &cfg;
	root.ups = us;
	return zp_rebalance_choose(&root, eff, load, &now, hi, lo, &why, text,
	    sizeof(text));
}

/*
 * --rebalance's choice (zp_rebalance_choose) with weights and backups:
 * equal weights move at a difference of 2; 1:3 with 2 and 6 streams is
 * balanced, with 3 and 5 one moves to the heavier; a backup that still
 * holds streams once a primary is up gives them to the idlest primary.
 */
static void
test_rebalance_weights(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct timeval		 now = at(0, 0);
	int			 hi, lo;

	us = ups_init(s, 2, ZP_BALANCE_LEASTCONN, 1, 10.0);
	assert_int_equal(choose(us, (long[]){ 3, 2 }, 1, &hi, &lo),
	    0);
	assert_int_equal(choose(us, (long[]){ 4, 2 }, 1, &hi, &lo),
	    1);
	assert_int_equal(hi, 0);
	assert_int_equal(lo, 1);
	us->v[1].weight = 3;
	assert_int_equal(choose(us, (long[]){ 2, 6 }, 1, &hi, &lo),
	    0);
	assert_int_equal(choose(us, (long[]){ 3, 5 }, 1, &hi, &lo),
	    1);
	assert_int_equal(hi, 0);
	assert_int_equal(lo, 1);
	ups_free(s);

	s->specs[2].backup = 1;
	us = ups_init(s, 3, ZP_BALANCE_LEASTCONN, 1, 10.0);
	/* Primaries down: the backup holds everything, nothing moves. */
	fail_n(us, 0, 1, &now);
	fail_n(us, 1, 1, &now);
	assert_int_equal(choose(us, (long[]){ 0, 0, 5 }, 1, &hi,
	    &lo), 0);
	/* One is back: the backup's streams go to it, one at a time. */
	zp_upstream_report(us, 1, 1, 0, &now);
	assert_int_equal(choose(us, (long[]){ 0, 0, 5 }, 1, &hi,
	    &lo), 1);
	assert_int_equal(hi, 2);
	assert_int_equal(lo, 1);
	assert_int_equal(choose(us, (long[]){ 0, 4, 1 }, 1, &hi,
	    &lo), 1);
	assert_int_equal(hi, 2);
	assert_int_equal(choose(us, (long[]){ 0, 5, 0 }, 1, &hi,
	    &lo), 0);
	ups_free(s);
}

/* zp_loadbal_choose over the upstreams of us as they are now. */
static int
lb_choose(const struct zp_loadbal *lb, const struct zp_upstreams *us,
    const long *eff, const struct zp_up_load *l, const struct timeval *now,
    int *hi, int *lo)
{
	struct zp_upstream	u[ZP_MAX_UPSTREAMS];
	size_t			i, n = zp_upstreams_count(us);

	for (i = 0; i < n; i++)
		zp_upstream_get(us, i, &u[i]);
	return zp_loadbal_choose(lb, u, n, eff, l, now, hi, lo);
}

/*
 * --rebalance load (core/loadbal.h): an upstream whose streams its
 * receive window holds back gives them, after ZP_LOAD_BEHIND_S, to one
 * whose own kept up for ZP_LOAD_CLEAR_S, or that has none and was not
 * behind within ZP_LOAD_FORGET_S; some held back, fewer than half, is
 * not behind; one emptied for falling behind takes nothing back at once;
 * one drained takes nothing, nor one whose streams a load move may not
 * take gives; the line's figures; zp_rebalance_choose makes it a load
 * move.
 */
static void
test_rebalance_load(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct zp_loadbal	*lb;
	struct zp_up_load	 l[2];
	struct zp_config	 cfg;
	struct zp_ctx		 root;
	struct timeval		 now;
	char			 text[512];
	int			 hi = -1, lo = -1, t, why;

	us = ups_init(s, 2, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	lb = zp_loadbal_new();
	assert_non_null(lb);
	l[0] = (struct zp_up_load){ .streams = 4, .movable = 4, .sampled = 4,
	    .limited = 4, .rwnd_pm = 3900, .zero_window = 1,
	    .notsent = 100000, .unacked = 2000 };
	l[1] = (struct zp_up_load){ .streams = 4, .movable = 4, .sampled = 4 };
	/* Behind from 0, the other clear from 0: a move at 5, not before. */
	for (t = 0; t <= 5; t++) {
		now = at(t, 0);
		zp_loadbal_update(lb, l, 2, &now);
		assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l,
		    &now, &hi, &lo), t == 5);
	}
	assert_int_equal(hi, 0);
	assert_int_equal(lo, 1);
	assert_string_equal(zp_loadbal_state(lb, 0), "behind");
	assert_string_equal(zp_loadbal_state(lb, 1), "ok");
	zp_loadbal_why(lb, us, l, 0, 1, &now, text, sizeof(text));
	assert_non_null(strstr(text, " is behind (5.0s): 4 of 4 streams held "
	    "back by its receive window, 97% of the last second on average, "
	    "1 at a zero window, 100000 bytes not sent, 2000 unacknowledged; "
	    "one moves to "));
	assert_non_null(strstr(text, " (0 of 4 held back, clear for 5.0s)"));
	/* Through zp_rebalance_choose: a load move, with its figures. */
	memset(&cfg, 0, sizeof(cfg));
	memset(&root, 0, sizeof(root));
	cfg.rebalance = ZP_REBALANCE_LOAD;
	root.cfg = &cfg;
	root.ups = us;
	root.loadbal = lb;
	text[0] = '\0';
	assert_int_equal(zp_rebalance_choose(&root, (long[]){ 4, 4 }, l, &now,
	    &hi, &lo, &why, text, sizeof(text)), 1);
	assert_int_equal(why, ZP_MOVE_LOAD);
	assert_int_equal(hi, 0);
	assert_non_null(strstr(text, "is behind"));
	/* Count's even spread is not load's: 6 and 2, nothing moves. */
	l[0].limited = 0;
	now = at(6, 0);
	zp_loadbal_update(lb, l, 2, &now);
	assert_int_equal(zp_rebalance_choose(&root, (long[]){ 6, 2 }, l, &now,
	    &hi, &lo, &why, text, sizeof(text)), 0);
	/* One of 4 held back: not behind; then behind again, from 7. */
	l[0].limited = 1;
	now = at(7, 0);
	zp_loadbal_update(lb, l, 2, &now);
	assert_string_equal(zp_loadbal_state(lb, 0), "mixed");
	assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l, &now,
	    &hi, &lo), 0);
	l[0].limited = 4;
	for (t = 8; t <= 11; t++) {
		now = at(t, 0);
		zp_loadbal_update(lb, l, 2, &now);
		assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l,
		    &now, &hi, &lo), t == 11);
	}
	/* A move made: the next waits ZP_LOAD_SETTLE_S, both ends. */
	zp_loadbal_moved(lb, 0, 1, &now);
	now = at(12, 0);
	assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l, &now,
	    &hi, &lo), 0);
	now = at(13, 0);
	assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l, &now,
	    &hi, &lo), 1);
	/* A tenth held back is still clear; more is not. */
	l[1] = (struct zp_up_load){ .streams = 10, .movable = 10,
	    .sampled = 10, .limited = 1 };
	zp_loadbal_update(lb, l, 2, &now);
	assert_string_equal(zp_loadbal_state(lb, 1), "ok");
	l[1].limited = 2;
	zp_loadbal_update(lb, l, 2, &now);
	assert_string_equal(zp_loadbal_state(lb, 1), "mixed");
	assert_int_equal(lb_choose(lb, us, (long[]){ 4, 10 }, l, &now,
	    &hi, &lo), 0);
	l[1] = (struct zp_up_load){ .streams = 4, .movable = 4, .sampled = 4 };
	zp_loadbal_update(lb, l, 2, &now);
	/* Nothing of it left to move: no move. */
	assert_int_equal(lb_choose(lb, us, (long[]){ 0, 8 }, l, &now,
	    &hi, &lo), 0);
	/* Streams, none a load move may take (each moved once): none. */
	l[0].movable = 0;
	assert_int_equal(lb_choose(lb, us, (long[]){ 4, 4 }, l, &now,
	    &hi, &lo), 0);
	/*
	 * Emptied, last behind at 13; now the other falls behind: the
	 * emptied one takes nothing before 73. (Streams held back since
	 * their own move for load are not the collector's: they make
	 * nothing behind.)
	 */
	l[0] = (struct zp_up_load){ .streams = 0 };
	l[1] = (struct zp_up_load){ .streams = 12, .movable = 8, .sampled = 8,
	    .limited = 8, .rwnd_pm = 8000, .own = 4 };
	for (t = 14; t <= 73; t++) {
		now = at(t, 0);
		zp_loadbal_update(lb, l, 2, &now);
		assert_int_equal(lb_choose(lb, us, (long[]){ 0, 8 }, l,
		    &now, &hi, &lo), t == 73);
	}
	assert_int_equal(hi, 1);
	assert_int_equal(lo, 0);
	zp_loadbal_why(lb, us, l, 1, 0, &now, text, sizeof(text));
	assert_non_null(strstr(text, "(no stream on it)"));
	/* Drained, it takes none. */
	zp_upstream_set_admin(us, 0, ZP_ADMIN_DRAIN);
	assert_int_equal(lb_choose(lb, us, (long[]){ 0, 8 }, l, &now,
	    &hi, &lo), 0);
	zp_loadbal_free(lb);
	ups_free(s);
}

/*
 * zproxy ctl add and del: an added upstream takes clients at once; one
 * with open pairs cannot be removed; a removed one takes nothing, is not
 * found by name nor counted as up, and comes back in its slot (its
 * counters kept); the 64 slots bound the set.
 */
static void
test_add_remove(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct zp_upstream	 u;
	struct zp_addr		 c, *a;
	struct timeval		 now = at(0, 0);
	unsigned char		 tried[ZP_MAX_UPSTREAMS] = { 0 };
	int			 i, n[3] = { 0 };
	char			 name[64];

	memset(&c, 0, sizeof(c));
	us = ups_init(s, 2, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	a = calloc(1, sizeof(*a));
	assert_non_null(a);
	assert_int_equal(zp_upstreams_add(us, &s->specs[2], a, 1), 2);
	assert_int_equal(zp_upstreams_count(us), 3);
	for (i = 0; i < 30; i++)
		n[zp_upstream_pick(us, &c, tried, &now)]++;
	assert_int_equal(n[2], 10);
	zp_upstream_label(us, 2, name, sizeof(name));
	assert_int_equal(zp_upstreams_find(us, name), 2);
	zp_upstream_acquire(us, 2);
	assert_int_equal(zp_upstream_remove(us, 2), -1);
	zp_upstream_release(us, 2);
	assert_int_equal(zp_upstream_remove(us, 2), 0);
	assert_int_equal(zp_upstreams_find(us, name), -1);
	assert_ptr_equal(zp_upstreams_removed_spec(us, name), &s->specs[2]);
	for (i = 0; i < 30; i++)
		assert_int_not_equal(zp_upstream_pick(us, &c, tried, &now), 2);
	/* Back in its slot, its count of connections kept. */
	assert_int_equal(zp_upstreams_add(us, &s->specs[2], NULL, 0), 2);
	assert_int_equal(zp_upstreams_count(us), 3);
	zp_upstream_get(us, 2, &u);
	assert_int_equal(u.admin, ZP_ADMIN_READY);
	assert_int_equal(u.up, 0);	/* no address yet: down */
	assert_true(u.conns_total == 1);
	assert_null(zp_upstreams_removed_spec(us, name));
	/* Every slot taken: -1. */
	while (zp_upstreams_count(us) < ZP_MAX_UPSTREAMS)
		assert_true(zp_upstreams_add(us, &s->specs[3], NULL, 0) >= 0);
	assert_int_equal(zp_upstreams_add(us, &s->specs[3], NULL, 0), -1);
	ups_free(s);
}

/*
 * zproxy ctl set upstream NAME state drain|maint: no new client goes
 * there, whatever the balancer; its streams leave it first, one at a
 * time, with or without --rebalance (even), to a ready upstream only;
 * ready again: it takes clients, and without --rebalance nothing moves
 * back. A weight set to 0 takes no client and, without --rebalance,
 * moves nothing.
 */
static void
test_admin_drain(void **state)
{
	struct ups_state	*s = *state;
	struct zp_upstreams	*us;
	struct zp_upstream	 u;
	struct zp_addr		 c;
	struct timeval		 now = at(0, 0);
	unsigned char		 tried[ZP_MAX_UPSTREAMS] = { 0 };
	int			 hi, lo, i;

	memset(&c, 0, sizeof(c));
	us = ups_init(s, 3, ZP_BALANCE_ROUNDROBIN, 1, 10.0);
	assert_int_equal(zp_upstreams_draining(us), 0);
	assert_int_equal(zp_upstream_set_admin(us, 1, ZP_ADMIN_DRAIN),
	    ZP_ADMIN_READY);
	assert_int_equal(zp_upstreams_draining(us), 1);
	zp_upstream_get(us, 1, &u);
	assert_string_equal(zp_upstream_state_str(&u), "drain");
	for (i = 0; i < 30; i++)
		assert_int_not_equal(zp_upstream_pick(us, &c, tried, &now), 1);
	/* Even every other one tried: a drained one takes no client. */
	tried[0] = tried[2] = 1;
	assert_int_equal(zp_upstream_pick(us, &c, tried, &now), -1);
	tried[0] = tried[2] = 0;
	/* Its streams go, with or without --rebalance; to the idlest. */
	assert_int_equal(choose(us, (long[]){ 3, 4, 1 }, 0, &hi,
	    &lo), 1);
	assert_int_equal(hi, 1);
	assert_int_equal(lo, 2);
	assert_int_equal(choose(us, (long[]){ 3, 0, 1 }, 0, &hi,
	    &lo), 0);
	/* Never to another that is drained or in maint. */
	zp_upstream_set_admin(us, 2, ZP_ADMIN_MAINT);
	assert_int_equal(choose(us, (long[]){ 0, 4, 1 }, 1, &hi,
	    &lo), 1);
	assert_int_equal(lo, 0);
	zp_upstream_set_admin(us, 0, ZP_ADMIN_MAINT);
	assert_int_equal(choose(us, (long[]){ 0, 4, 1 }, 1, &hi,
	    &lo), 0);
	assert_int_equal(zp_upstream_pick(us, &c, tried, &now), -1);
	/* Ready again: clients go there; nothing moves back uneven. */
	zp_upstream_set_admin(us, 0, ZP_ADMIN_READY);
	zp_upstream_set_admin(us, 1, ZP_ADMIN_READY);
	zp_upstream_set_admin(us, 2, ZP_ADMIN_READY);
	assert_int_equal(zp_upstreams_draining(us), 0);
	assert_int_equal(choose(us, (long[]){ 0, 4, 1 }, 0, &hi,
	    &lo), 0);
	assert_int_equal(choose(us, (long[]){ 0, 4, 1 }, 1, &hi,
	    &lo), 1);
	/* A weight of 0: no new client, and no move without --rebalance. */
	assert_int_equal(zp_upstream_set_weight(us, 2, 0), 1);
	for (i = 0; i < 30; i++)
		assert_int_not_equal(zp_upstream_pick(us, &c, tried, &now), 2);
	assert_int_equal(choose(us, (long[]){ 2, 2, 3 }, 0, &hi,
	    &lo), 0);
	assert_int_equal(choose(us, (long[]){ 2, 2, 3 }, 1, &hi,
	    &lo), 1);
	assert_int_equal(hi, 2);
	zp_upstream_get(us, 2, &u);
	assert_string_equal(zp_upstream_state_str(&u), "ready");
	fail_n(us, 2, 1, &now);
	zp_upstream_get(us, 2, &u);
	assert_string_equal(zp_upstream_state_str(&u), "down");
	assert_true(u.last_err_at != 0);
	assert_int_equal(zp_upstreams_find(us, "nope:1"), -1);
	ups_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_init),
		T(test_new_get),
		T(test_upstream_name),
		cmocka_unit_test(test_balance_names),
		T(test_rr_cycles),
		T(test_rr_skips_down),
		T(test_first_failover),
		T(test_leastconn),
		T(test_source_sticky),
		T(test_source_spread),
		T(test_source_v4mapped),
		T(test_source_stable),
		T(test_tried_exhausts),
		T(test_down_after_max_fails),
		T(test_success_resets_fails),
		T(test_backoff),
		T(test_backoff_fraction),
		T(test_fail_timeout_timeval),
		T(test_last_resort),
		T(test_live_before_down),
		T(test_back_up),
		T(test_max_fails_one),
		cmocka_unit_test(test_connect_local),
		cmocka_unit_test(test_local_errors),
		cmocka_unit_test(test_source_for),
		cmocka_unit_test(test_connect_emfile),
		cmocka_unit_test_setup_teardown(test_rr_weights, ups_setup,
		    ups_teardown),
		cmocka_unit_test_setup_teardown(test_leastconn_weights,
		    ups_setup, ups_teardown),
		cmocka_unit_test_setup_teardown(test_weight_zero, ups_setup,
		    ups_teardown),
		cmocka_unit_test_setup_teardown(test_backup, ups_setup,
		    ups_teardown),
		cmocka_unit_test(test_source_consistent),
		cmocka_unit_test_setup_teardown(test_add_remove, ups_setup,
		    ups_teardown),
		cmocka_unit_test_setup_teardown(test_admin_drain, ups_setup,
		    ups_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_load,
		    ups_setup, ups_teardown),
		cmocka_unit_test_setup_teardown(test_rebalance_weights,
		    ups_setup, ups_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
