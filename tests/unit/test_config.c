/*
 * test_config.c - unit tests for config.c: sizes, ports, listen and
 * upstream addresses, whole command lines, name resolution and address
 * formatting.
 *
 * Every error path is also checked for the shape of its message: not
 * empty, one line (it ends up in a log line or after "zproxy: "), and
 * naming the value that was refused.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

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

#include "cli.h"
#include "core/config.h"
#include "core/net.h"
#include "lib/framing.h"
#include "core/upstream.h"

#define MAXARGS	64

/* Per-test state: one config, always freed by the teardown. */
struct cfg_state {
	struct zp_config	cfg;
	char			err[ZP_ERRLEN];
};

/* A fresh config with defaults and a poisoned error buffer. */
static int
cfg_setup(void **state)
{
	struct cfg_state	*s;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return -1;
	zp_config_init(&s->cfg);
	memset(s->err, 'X', sizeof(s->err) - 1);
	s->err[sizeof(s->err) - 1] = '\0';
	*state = s;
	return 0;
}

/* Free what the config owns, whatever the test left behind. */
static int
cfg_teardown(void **state)
{
	struct cfg_state	*s = *state;

	zp_config_free(&s->cfg);
	free(s);
	return 0;
}

/*
 * An error message is non-empty, one line, and names `what` (the refused
 * value, quoted or not).
 */
static void
assert_errmsg(const char *err, const char *what)
{
	assert_non_null(err);
	assert_true(err[0] != '\0');
	assert_null(strchr(err, '\n'));
	if (what != NULL) {
		if (strstr(err, what) == NULL)
			fail_msg("error \"%s\" does not name \"%s\"", err, what);
	}
}

/* An error message names the value in quotes: 'value' (works for ""). */
static void
assert_errmsg_quoted(const char *err, const char *value)
{
	char	q[ZP_ERRLEN];

	snprintf(q, sizeof(q), "'%s'", value);
	assert_errmsg(err, q);
}

/*
 * Run zp_config_parse on a NULL-terminated list of arguments (argv[0] is
 * added). The arguments are copied, as getopt may permute them, and freed
 * before returning: the config must not keep pointers into argv.
 */
static int
parse(struct cfg_state *s, ...)
{
	char		*argv[MAXARGS + 2], *copy[MAXARGS + 2];
	const char	*a;
	va_list		 ap;
	int		 argc = 0, i, rc;

	copy[argc++] = strdup("zproxy");
	va_start(ap, s);
	while ((a = va_arg(ap, const char *)) != NULL) {
		if (argc > MAXARGS)
			fail_msg("too many arguments");
		copy[argc++] = strdup(a);
	}
	va_end(ap);
	copy[argc] = NULL;
	for (i = 0; i <= argc; i++) {
		if (i < argc && copy[i] == NULL)
			fail_msg("strdup");
		argv[i] = copy[i];
	}
	memset(s->err, 0, sizeof(s->err));
	rc = zp_config_parse(&s->cfg, argc, argv, s->err, sizeof(s->err));
	for (i = 0; i < argc; i++) {
		memset(copy[i], '#', strlen(copy[i]));
		free(copy[i]);
	}
	return rc;
}

/* Reset the config between two parses within one test. */
static void
reparse_reset(struct cfg_state *s)
{
	zp_config_free(&s->cfg);
	zp_config_init(&s->cfg);
}

/* ---- zp_parse_size ------------------------------------------------ */

/* Plain decimal sizes are bytes, up to and including 1 GiB. */
static void
test_size_plain(void **state)
{
	char	err[ZP_ERRLEN];
	size_t	v;

	assert_int_equal(zp_parse_size("1", &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1);
	assert_int_equal(zp_parse_size("4096", &v, err, sizeof(err)), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(zp_parse_size("65537", &v, err, sizeof(err)), 0);
	assert_int_equal(v, 65537);
	assert_int_equal(zp_parse_size("1073741824", &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1073741824UL);
}

/* K, M and G are powers of 1024, in either case, with an optional B/iB. */
static void
test_size_suffixes(void **state)
{
	static const struct {
		const char	*s;
		size_t		 v;
	} ok[] = {
		{ "1K", 1024 }, { "1k", 1024 }, { "64K", 65536 },
		{ "1M", 1048576 }, { "1m", 1048576 }, { "3m", 3145728 },
		{ "1G", 1073741824UL }, { "1g", 1073741824UL },
		{ "2KiB", 2048 }, { "2KB", 2048 }, { "2kb", 2048 },
		{ "2kib", 2048 }, { "4MiB", 4194304 }, { "4MB", 4194304 },
		{ "1GiB", 1073741824UL }, { "1GB", 1073741824UL },
		{ "1024M", 1073741824UL }, { "1048576K", 1073741824UL },
		{ "1T", 0 },	/* a suffix of --spool-max's, over 1G here */
	};
	char	err[ZP_ERRLEN];
	size_t	i, v;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		v = 0;
		if (ok[i].v == 0) {
			assert_int_equal(zp_parse_size(ok[i].s, &v, err,
			    sizeof(err)), -1);
			assert_errmsg(err, "above the limit of 1G");
			continue;
		}
		if (zp_parse_size(ok[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", ok[i].s, err);
		if (v != ok[i].v)
			fail_msg("'%s' gave %zu, expected %zu", ok[i].s, v,
			    ok[i].v);
	}
}

/* Zero is refused in every spelling, and the message says why. */
static void
test_size_zero(void **state)
{
	static const char *zero[] = { "0", "00", "0K", "0M", "0GiB" };
	char	err[ZP_ERRLEN];
	size_t	i, v;

	for (i = 0; i < sizeof(zero) / sizeof(zero[0]); i++) {
		v = 7;
		err[0] = '\0';
		assert_int_equal(zp_parse_size(zero[i], &v, err, sizeof(err)),
		    -1);
		assert_int_equal(v, 7);
		assert_errmsg_quoted(err, zero[i]);
	}
}

/* Anything above 1 GiB is refused, including values that would overflow. */
static void
test_size_too_big(void **state)
{
	static const char *big[] = {
		"1073741825", "1025M", "2G", "1048577K", "2GiB",
		"18446744073709551615",		/* fits in 64 bits, > 1G */
		"99999999999999999999999",	/* ERANGE in strtoull */
		"18014398509481984K",		/* 2^54 K: wraps to 0 */
		"17179869184G",			/* 2^34 G: wraps to 0 */
		"17592186044416M",		/* 2^44 M: wraps to 0 */
	};
	char	err[ZP_ERRLEN];
	size_t	i, v;

	for (i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
		v = 7;
		err[0] = '\0';
		if (zp_parse_size(big[i], &v, err, sizeof(err)) != -1)
			fail_msg("'%s' accepted as %zu", big[i], v);
		assert_int_equal(v, 7);
		assert_errmsg_quoted(err, big[i]);
	}
}

/* Malformed sizes are refused and the message quotes them. */
static void
test_size_junk(void **state)
{
	static const char *junk[] = {
		"12Q", "", "-1", " 5", "5 ", "K", "KB", "1KK", "1.5M", "+5",
		"0x10", "5KiBB", "1 K", "1T", "1KIB", "1iB", "5\n", "abc",
	};
	char	err[ZP_ERRLEN];
	size_t	i, v;

	for (i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		v = 7;
		err[0] = '\0';
		if (zp_parse_size(junk[i], &v, err, sizeof(err)) != -1)
			fail_msg("'%s' accepted as %zu", junk[i], v);
		assert_int_equal(v, 7);
		if (strchr(junk[i], '\n') == NULL)
			assert_errmsg_quoted(err, junk[i]);
		else
			assert_true(err[0] != '\0');
	}
}

/* A NULL error buffer is allowed: the caller only wants the verdict. */
static void
test_size_null_err(void **state)
{
	size_t	v;

	assert_int_equal(zp_parse_size("12Q", &v, NULL, 0), -1);
	assert_int_equal(zp_parse_size("0", &v, NULL, 0), -1);
	assert_int_equal(zp_parse_size("2G", &v, NULL, 0), -1);
}

/* ---- zp_parse_port ------------------------------------------------ */

/* 1 and 65535 are the bounds; leading zeros are only decimal. */
static void
test_port_valid(void **state)
{
	char		err[ZP_ERRLEN];
	unsigned short	p;

	assert_int_equal(zp_parse_port("1", &p, err, sizeof(err)), 0);
	assert_int_equal(p, 1);
	assert_int_equal(zp_parse_port("80", &p, err, sizeof(err)), 0);
	assert_int_equal(p, 80);
	assert_int_equal(zp_parse_port("65535", &p, err, sizeof(err)), 0);
	assert_int_equal(p, 65535);
	assert_int_equal(zp_parse_port("0080", &p, err, sizeof(err)), 0);
	assert_int_equal(p, 80);
}

/* 0, out of range, signs, spaces and junk are refused, quoting the value. */
static void
test_port_invalid(void **state)
{
	static const char *bad[] = {
		"0", "65536", "70000", "abc", "", "80x", "-1", "+80", " 80",
		"80 ", "99999999999999999999999", "0x50", "http", "8.0",
	};
	char		err[ZP_ERRLEN];
	unsigned short	p;
	size_t		i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		p = 7;
		err[0] = '\0';
		if (zp_parse_port(bad[i], &p, err, sizeof(err)) != -1)
			fail_msg("port '%s' accepted as %u", bad[i], p);
		assert_int_equal(p, 7);
		assert_errmsg_quoted(err, bad[i]);
	}
}

/* ---- zp_parse_listen ---------------------------------------------- */

/* ":PORT" means every address. */
static void
test_listen_any(void **state)
{
	struct zp_listen_spec	ls;
	char			err[ZP_ERRLEN];

	memset(&ls, 0xa5, sizeof(ls));
	assert_int_equal(zp_parse_listen(":9000", &ls, err, sizeof(err)), 0);
	assert_int_equal(ls.any, 1);
	assert_int_equal(ls.port, 9000);
	assert_int_equal(zp_parse_listen(":1", &ls, err, sizeof(err)), 0);
	assert_int_equal(ls.any, 1);
	assert_int_equal(ls.port, 1);
}

/* IPv4 literals, including 0.0.0.0 (a literal, not "any"). */
static void
test_listen_v4(void **state)
{
	struct zp_listen_spec	 ls;
	struct sockaddr_in	*sin = (struct sockaddr_in *)&ls.addr.ss;
	char			 err[ZP_ERRLEN];

	assert_int_equal(zp_parse_listen("0.0.0.0:9000", &ls, err,
	    sizeof(err)), 0);
	assert_int_equal(ls.any, 0);
	assert_int_equal(ls.port, 9000);
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_ANY));
	assert_int_equal(sin->sin_port, htons(9000));
	assert_int_equal(ls.addr.len, sizeof(struct sockaddr_in));

	assert_int_equal(zp_parse_listen("127.0.0.1:9000", &ls, err,
	    sizeof(err)), 0);
	assert_int_equal(ls.any, 0);
	assert_int_equal(ls.port, 9000);
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_equal(sin->sin_port, htons(9000));
	assert_int_equal(ls.addr.len, sizeof(struct sockaddr_in));
}

/* IPv6 literals in brackets. */
static void
test_listen_v6(void **state)
{
	struct zp_listen_spec	 ls;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&ls.addr.ss;
	struct in6_addr		 want;
	char			 err[ZP_ERRLEN];

	assert_int_equal(zp_parse_listen("[::1]:9000", &ls, err, sizeof(err)),
	    0);
	assert_int_equal(ls.any, 0);
	assert_int_equal(ls.port, 9000);
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_memory_equal(&sin6->sin6_addr, &in6addr_loopback,
	    sizeof(in6addr_loopback));
	assert_int_equal(sin6->sin6_port, htons(9000));
	assert_int_equal(ls.addr.len, sizeof(struct sockaddr_in6));

	assert_int_equal(zp_parse_listen("[2001:db8::7]:65535", &ls, err,
	    sizeof(err)), 0);
	assert_int_equal(inet_pton(AF_INET6, "2001:db8::7", &want), 1);
	assert_memory_equal(&sin6->sin6_addr, &want, sizeof(want));
	assert_int_equal(ls.port, 65535);

	assert_int_equal(zp_parse_listen("[::]:80", &ls, err, sizeof(err)), 0);
	assert_memory_equal(&sin6->sin6_addr, &in6addr_any,
	    sizeof(in6addr_any));
}

/*
 * Bad listen addresses: no colon, names (a listen address must be
 * numeric), broken brackets, missing or bad ports, unbracketed IPv6.
 * Each message names the input or, for a port error, the port.
 */
static void
test_listen_bad(void **state)
{
	static const struct {
		const char	*s;
		const char	*named;	/* what the message must contain */
	} bad[] = {
		{ "9000", "9000" },
		{ "localhost:9000", "localhost:9000" },
		{ "[::1]9000", "[::1]9000" },
		{ "1.2.3.4:", "''" },
		{ "1.2.3.4:0", "'0'" },
		{ ":70000", "70000" },
		{ ":0", "'0'" },
		{ ":", "''" },
		{ ":abc", "abc" },
		{ "", "''" },
		{ "[::1]", "[::1]" },
		{ "[::1", "[::1" },
		{ "[]:9000", "[]:9000" },
		{ "1.2.3.256:80", "1.2.3.256:80" },
		{ "1.2.3:80", "1.2.3:80" },
		{ "[::g]:80", "[::g]:80" },
		{ "example.com:80", "example.com:80" },
		{ "127.0.0.1:80x", "80x" },
	};
	struct zp_listen_spec	ls;
	char			err[ZP_ERRLEN];
	size_t			i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (zp_parse_listen(bad[i].s, &ls, err, sizeof(err)) != -1)
			fail_msg("listen '%s' accepted", bad[i].s);
		assert_errmsg(err, bad[i].named);
	}
}

/*
 * An unbracketed IPv6 listen address ("::1:9000") is refused, and the
 * message names what was typed rather than a fragment of it taken for a
 * port.
 */
static void
test_listen_unbracketed_v6(void **state)
{
	static const char *bad[] = { "::1:9000", "::9000", "fe80::1:80" };
	struct zp_listen_spec	ls;
	char			err[ZP_ERRLEN];
	size_t			i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (zp_parse_listen(bad[i], &ls, err, sizeof(err)) != -1)
			fail_msg("listen '%s' accepted", bad[i]);
		assert_errmsg_quoted(err, bad[i]);
	}
}

/* ---- zp_parse_hostport -------------------------------------------- */

/* Names, literals and bracketed IPv6 split into host and port. */
static void
test_hostport_ok(void **state)
{
	static const struct {
		const char	*s, *host, *port;
	} ok[] = {
		{ "example.com:80", "example.com", "80" },
		{ "localhost:1", "localhost", "1" },
		{ "1.2.3.4:65535", "1.2.3.4", "65535" },
		{ "[::1]:443", "::1", "443" },
		{ "[2001:db8::1]:8080", "2001:db8::1", "8080" },
		{ "[fe80::1%eth0]:22", "fe80::1%eth0", "22" },
		{ "a:0080", "a", "80" },		/* port normalised */
		{ "name.with.dot.:9", "name.with.dot.", "9" },
	};
	char	 err[ZP_ERRLEN], port[8], *host;
	size_t	 i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		host = NULL;
		if (zp_parse_hostport(ok[i].s, &host, port, sizeof(port), err,
		    sizeof(err)) != 0)
			fail_msg("'%s' refused: %s", ok[i].s, err);
		assert_non_null(host);
		assert_string_equal(host, ok[i].host);
		assert_string_equal(port, ok[i].port);
		free(host);
	}
}

/*
 * Bad host:port strings are refused, *host stays NULL (nothing leaks),
 * and the message names the input or the bad port.
 */
static void
test_hostport_bad(void **state)
{
	static const struct {
		const char	*s, *named;
	} bad[] = {
		{ ":80", ":80" },			/* missing host */
		{ "[]:80", "[]:80" },
		{ "host", "host" },			/* no port */
		{ "host:", "''" },
		{ "host:0", "'0'" },
		{ "host:65536", "65536" },
		{ "host:http", "http" },		/* no service names */
		{ "host:-1", "-1" },
		{ "[::1]80", "[::1]80" },
		{ "[::1", "[::1" },
		{ "::1:80", "::1:80" },			/* unbracketed v6 */
		{ "a:b:80", "a:b:80" },
		{ "", "''" },
	};
	char	 err[ZP_ERRLEN], port[8], *host;
	size_t	 i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		host = (char *)&err;	/* must be reset to NULL */
		err[0] = '\0';
		if (zp_parse_hostport(bad[i].s, &host, port, sizeof(port), err,
		    sizeof(err)) != -1) {
			free(host);
			fail_msg("'%s' accepted", bad[i].s);
		}
		assert_null(host);
		assert_errmsg(err, bad[i].named);
	}
}

/* A 253-character host is fine, 254 is too long; a small port buffer fails. */
static void
test_hostport_limits(void **state)
{
	char	 s[300], err[1024], port[8], small[4], *host;

	memset(s, 'a', 253);
	strcpy(s + 253, ":80");
	assert_int_equal(zp_parse_hostport(s, &host, port, sizeof(port), err,
	    sizeof(err)), 0);
	assert_int_equal(strlen(host), 253);
	free(host);

	memset(s, 'a', 254);
	strcpy(s + 254, ":80");
	host = NULL;
	assert_int_equal(zp_parse_hostport(s, &host, port, sizeof(port), err,
	    sizeof(err)), -1);
	assert_null(host);
	assert_errmsg(err, "too long");

	host = NULL;
	assert_int_equal(zp_parse_hostport("a:80", &host, small, sizeof(small),
	    err, sizeof(err)), -1);
	assert_null(host);
	assert_errmsg(err, NULL);
}

/* ---- zp_config_parse ---------------------------------------------- */

/* The minimal command line gives every documented default. */
static void
test_parse_defaults(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;

	assert_int_equal(parse(s, "-l", ":9000", "-u", "backend:80", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(c->nlistens, 1);
	assert_int_equal(c->listens[0].any, 1);
	assert_int_equal(c->listens[0].port, 9000);
	assert_int_equal(c->nupstreams, 1);
	assert_string_equal(c->upstreams[0].host, "backend");
	assert_string_equal(c->upstreams[0].port, "80");
	assert_null(c->upstreams[0].addrs);
	assert_int_equal(c->upstreams[0].naddrs, 0);
	assert_int_equal(c->mode, ZP_MODE_SPLICE);
	assert_int_equal(c->pipe_size, ZP_DEFAULT_PIPE_SIZE);
	assert_int_equal(c->pipe_size, 1024 * 1024);
	assert_int_equal(c->buffer_size, ZP_DEFAULT_BUFFER_SIZE);
	assert_int_equal(c->buffer_size, 48 * 1024);
	assert_int_equal(c->splice_min, ZP_DEFAULT_SPLICE_MIN);
	assert_int_equal(c->splice_min, 4 * 1024);
	assert_int_equal(c->max_conns, 0);
	assert_int_equal(c->stats_max_conns, 16);
	assert_true(c->stats_timeout == 5.0);
	assert_true(c->connect_timeout == ZP_DEFAULT_CONNECT_TIMEOUT);
	assert_true(c->connect_timeout == 5.0);
	assert_int_equal(c->verbose, 0);
	assert_int_equal(c->quiet, 0);
}

/* Every long option, in both "--opt value" and "--opt=value" forms. */
static void
test_parse_long_options(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	struct sockaddr_in	*sin = (struct sockaddr_in *)&c->listens[0].addr.ss;

	assert_int_equal(parse(s, "--listen", "127.0.0.1:9001",
	    "--upstream", "[::1]:8080", "--mode", "copy",
	    "--pipe-size", "256K", "--buffer-size", "16KiB",
	    "--splice-min", "0", "--max-conns", "100", "--connect-timeout", "2.5",
	    "--verbose", "--verbose", NULL), ZP_PARSE_OK);
	assert_int_equal(c->listens[0].any, 0);
	assert_int_equal(c->listens[0].port, 9001);
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_string_equal(c->upstreams[0].host, "::1");
	assert_string_equal(c->upstreams[0].port, "8080");
	assert_int_equal(c->mode, ZP_MODE_COPY);
	assert_int_equal(c->pipe_size, 256 * 1024);
	assert_int_equal(c->buffer_size, 16 * 1024);
	assert_int_equal(c->splice_min, 0);
	assert_int_equal(c->max_conns, 100);
	assert_true(c->connect_timeout == 2.5);
	assert_int_equal(c->verbose, 2);
	assert_int_equal(c->quiet, 0);

	reparse_reset(s);
	assert_int_equal(parse(s, "--listen=:7", "--upstream=h:8",
	    "--mode=splice", "--pipe-size=2M", "--buffer-size=1K",
	    "--splice-min=64K", "--max-conns=10000000", "--connect-timeout=86400", "--quiet",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(c->listens[0].any, 1);
	assert_int_equal(c->listens[0].port, 7);
	assert_string_equal(c->upstreams[0].host, "h");
	assert_string_equal(c->upstreams[0].port, "8");
	assert_int_equal(c->mode, ZP_MODE_SPLICE);
	assert_int_equal(c->pipe_size, 2 * 1024 * 1024);
	assert_int_equal(c->buffer_size, 1024);
	assert_int_equal(c->splice_min, 64 * 1024);
	assert_int_equal(c->max_conns, 10000000);
	assert_true(c->connect_timeout == 86400.0);
	assert_int_equal(c->quiet, 1);
	assert_int_equal(c->verbose, 0);
}

/* Every short option, separate and attached, and -v counting. */
static void
test_parse_short_options(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;

	assert_int_equal(parse(s, "-l", "[::1]:1", "-u", "h:2", "-m", "copy",
	    "-v", "-v", "-v", NULL), ZP_PARSE_OK);
	assert_int_equal(c->listens[0].any, 0);
	assert_int_equal(c->listens[0].port, 1);
	assert_int_equal(c->listens[0].addr.ss.ss_family, AF_INET6);
	assert_string_equal(c->upstreams[0].host, "h");
	assert_string_equal(c->upstreams[0].port, "2");
	assert_int_equal(c->mode, ZP_MODE_COPY);
	assert_int_equal(c->verbose, 3);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l:9000", "-uhost:3", "-msplice", "-vv",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(c->listens[0].any, 1);
	assert_int_equal(c->listens[0].port, 9000);
	assert_string_equal(c->upstreams[0].host, "host");
	assert_string_equal(c->upstreams[0].port, "3");
	assert_int_equal(c->mode, ZP_MODE_SPLICE);
	assert_int_equal(c->verbose, 2);

	reparse_reset(s);
	assert_int_equal(parse(s, "-q", "-l", ":1", "-u", "h:1", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(c->quiet, 1);
}

/*
 * Who may connect: --allow and --deny append in order, each to its own
 * list, and --max-conns-per-source is a count; a bad rule, a zero count
 * and one rule too many are refused with one line naming the option.
 */
static void
test_parse_access(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	char			 buf[ZP_CIDRSTRLEN];

	assert_int_equal(c->allow.n, 0);
	assert_int_equal(c->deny.n, 0);
	assert_int_equal(c->max_conns_per_source, 0);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--allow",
	    "10.0.0.0/8", "--deny", "10.9.0.0/16", "--allow", "::1",
	    "--max-conns-per-source", "5", NULL), ZP_PARSE_OK);
	assert_int_equal(c->allow.n, 2);
	assert_string_equal(zp_cidr_str(&c->allow.v[0], buf, sizeof(buf)),
	    "10.0.0.0/8");
	assert_string_equal(zp_cidr_str(&c->allow.v[1], buf, sizeof(buf)),
	    "::1/128");
	assert_int_equal(c->deny.n, 1);
	assert_string_equal(zp_cidr_str(&c->deny.v[0], buf, sizeof(buf)),
	    "10.9.0.0/16");
	assert_int_equal(c->max_conns_per_source, 5);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--deny",
	    "10.9.0.1/16", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--deny: invalid CIDR '10.9.0.1/16'");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--allow", "",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--allow: invalid CIDR ''");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1",
	    "--max-conns-per-source", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "0");
	assert_errmsg(s->err, "max-conns-per-source");
}

/* Without -l or -u the parse fails and says which one is missing. */
static void
test_parse_missing_required(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-u", "h:1", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--listen");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--upstream");

	reparse_reset(s);
	assert_int_equal(parse(s, NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, NULL);
}

/* An unknown option is refused and the message names it as written. */
static void
test_parse_unknown_option(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--bogus", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--bogus");

	reparse_reset(s);
	assert_int_equal(parse(s, "-x", "-l", ":1", "-u", "h:1", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "-x");

	reparse_reset(s);
	assert_int_equal(parse(s, "-vZ", "-l", ":1", "-u", "h:1", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "-Z");
}

/*
 * A long option that takes no value, given one ("--verbose=2"), is
 * refused, and the message names the option as the user wrote it.
 */
static void
test_parse_flag_with_value(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--verbose=2",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--verbose");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--quiet=yes",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--quiet");
}

/* An option missing its value: the message names the option. */
static void
test_parse_missing_value(void **state)
{
	static const char *opts[] = {
		"-l", "-u", "-m", "--listen", "--upstream", "--mode",
		"--pipe-size", "--buffer-size", "--splice-min", "--max-conns",
		"--connect-timeout", "--stats-max-conns", "--stats-timeout",
	};
	struct cfg_state	*s = *state;
	size_t			 i;

	for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", opts[i], NULL) !=
		    ZP_PARSE_ERROR)
			fail_msg("'%s' without a value accepted", opts[i]);
		assert_errmsg_quoted(s->err, opts[i]);
	}
}

/*
 * -u may be given several times, kept in order; more than
 * ZP_MAX_UPSTREAMS is refused with a message, and nothing leaks.
 */
static void
test_parse_second_upstream(void **state)
{
	struct cfg_state	*s = *state;
	char			*argv[2 * ZP_MAX_UPSTREAMS + 8];
	char			 names[ZP_MAX_UPSTREAMS + 1][16];
	int			 i, n = 0;

	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "-u", "[::1]:2",
	    "--upstream=c:3", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.nupstreams, 3);
	assert_string_equal(s->cfg.upstreams[0].host, "a");
	assert_string_equal(s->cfg.upstreams[0].port, "1");
	assert_string_equal(s->cfg.upstreams[1].host, "::1");
	assert_string_equal(s->cfg.upstreams[2].port, "3");

	reparse_reset(s);
	argv[n++] = (char *)"zproxy";
	argv[n++] = (char *)"-l";
	argv[n++] = (char *)":1";
	for (i = 0; i <= ZP_MAX_UPSTREAMS; i++) {
		snprintf(names[i], sizeof(names[i]), "h%d:1", i);
		argv[n++] = (char *)"-u";
		argv[n++] = names[i];
	}
	argv[n] = NULL;
	assert_int_equal(zp_config_parse(&s->cfg, n, argv, s->err,
	    sizeof(s->err)), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "upstream");
}

/*
 * An option that takes a value may be given once (but -u): a second one,
 * short or long, equal or not, is refused with one line naming the
 * option and both values, whichever option it is; a value of its own
 * that is wrong is not reached.
 */
/* parse() must refuse, with a message that names what. */
#define expect_error(s, what, ...) do {					\
	assert_int_equal(parse((s), __VA_ARGS__), ZP_PARSE_ERROR);	\
	assert_errmsg((s)->err, (what));				\
} while (0)

/* -u HOST:PORT[,weight=N][,backup]: its options, and what is refused. */
static void
test_parse_upstream_opts(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;

	assert_int_equal(parse(s, "-l", ":1", "-u", "a:514,weight=3", "-u",
	    "b:514,backup", "-u", "[2001:db8::1]:514,weight=0,backup", "-u",
	    "c:514", NULL), ZP_PARSE_OK);
	assert_int_equal(c->nupstreams, 4);
	assert_string_equal(c->upstreams[0].host, "a");
	assert_string_equal(c->upstreams[0].port, "514");
	assert_int_equal(c->upstreams[0].has_weight, 1);
	assert_int_equal(c->upstreams[0].weight, 3);
	assert_int_equal(c->upstreams[0].backup, 0);
	assert_int_equal(c->upstreams[1].has_weight, 0);
	assert_int_equal(c->upstreams[1].backup, 1);
	assert_string_equal(c->upstreams[2].host, "2001:db8::1");
	assert_int_equal(c->upstreams[2].weight, 0);
	assert_int_equal(c->upstreams[2].has_weight, 1);
	assert_int_equal(c->upstreams[2].backup, 1);
	assert_int_equal(c->upstreams[3].has_weight, 0);
	assert_int_equal(c->upstreams[3].backup, 0);

	reparse_reset(s);
	expect_error(s, "--upstream a:1,weight=257: weight must be a whole "
	    "number from 0 to 256, not '257'", "-l", ":1", "-u",
	    "a:1,weight=257", NULL);
	reparse_reset(s);
	expect_error(s, "weight must be a whole number from 0 to 256, not ''",
	    "-l", ":1", "-u", "a:1,weight=", NULL);
	reparse_reset(s);
	expect_error(s, "weight must be a whole number from 0 to 256, not "
	    "'-1'", "-l", ":1", "-u", "a:1,weight=-1", NULL);
	reparse_reset(s);
	expect_error(s, "--upstream a:1,primary: unknown option 'primary' "
	    "(weight=N or backup)", "-l", ":1", "-u", "a:1,primary", NULL);
	reparse_reset(s);
	expect_error(s, "invalid address 'a': expected HOST:PORT", "-l",
	    ":1", "-u", "a,weight=2", NULL);
}

/*
 * -l udp@: a UDP listener, its options and defaults; what it refuses,
 * and what it makes possible without --framing.
 */
static void
test_parse_udp(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	char			 buf[ZP_ADDRSTRLEN + ZP_FDNAME_MAX];

	assert_int_equal(parse(s, "-l", "udp@:514", "-l", "udp@[::1]:515",
	    "-l", ":514", "-u", "h:1", NULL), ZP_PARSE_OK);
	assert_int_equal(c->nlistens, 3);
	assert_int_equal(c->listens[0].udp, 1);
	assert_int_equal(c->listens[0].any, 1);
	assert_int_equal(c->listens[0].port, 514);
	assert_int_equal(c->listens[1].udp, 1);
	assert_int_equal(c->listens[1].addr.ss.ss_family, AF_INET6);
	assert_int_equal(c->listens[2].udp, 0);
	assert_string_equal(zp_listen_spec_str(&c->listens[0], buf,
	    sizeof(buf)), "udp@:514");
	assert_string_equal(zp_listen_spec_str(&c->listens[1], buf,
	    sizeof(buf)), "udp@[::1]:515");
	assert_true(c->udp_idle == ZP_DEFAULT_UDP_IDLE);
	assert_int_equal(c->udp_max_sources, 0);
	assert_int_equal(c->udp_rcvbuf, ZP_DEFAULT_UDP_RCVBUF);
	assert_true(zp_config_framed(c));

	/* A datagram is a message: the moves need no --framing. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", "udp@127.0.0.1:514", "-u", "h:1",
	    "-u", "i:1", "--replay-window", "1M", "--spool", "/tmp",
	    "--udp-idle", "5", "--udp-max-sources", "100", "--udp-rcvbuf",
	    "16M", NULL), ZP_PARSE_OK);
	assert_true(c->udp_idle == 5.0);
	assert_int_equal(c->udp_max_sources, 100);
	assert_int_equal(c->udp_rcvbuf, 16 * 1024 * 1024);

	reparse_reset(s);
	expect_error(s, "--udp-idle needs -l udp@", "-l", ":1", "-u", "h:1",
	    "--udp-idle", "5", NULL);
	reparse_reset(s);
	expect_error(s, "--udp-rcvbuf needs -l udp@", "-l", ":1", "-u", "h:1",
	    "--udp-rcvbuf", "1M", NULL);
	reparse_reset(s);
	expect_error(s, "-u original does not apply to -l udp@", "-l",
	    "udp@:1", "-u", "original", NULL);
	reparse_reset(s);
	expect_error(s, "--tproxy takes TCP listeners only", "-l", "udp@:1",
	    "-u", "h:1", "--tproxy", NULL);
	reparse_reset(s);
	expect_error(s, "invalid address 'x'", "-l", "udp@x", "-u",
	    "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "udp-max-sources", "-l", "udp@:1", "-u", "h:1",
	    "--udp-max-sources", "0", NULL);
	reparse_reset(s);
	expect_error(s, "--listen udp@:1 given twice", "-l", "udp@:1", "-l",
	    "udp@:1", "-u", "h:1", NULL);
	/* TCP and UDP on one port are two listeners. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", "udp@:1", "-l", ":1", "-u", "h:1",
	    NULL), ZP_PARSE_OK);
	/* Without a UDP listener, --framing still decides. */
	reparse_reset(s);
	expect_error(s, "--replay-window needs --framing (or -l udp@)", "-l",
	    ":1", "-u", "h:1", "--replay-window", "1M", NULL);
}

/* -l repeats: addresses and systemd's sockets, each once. */
static void
test_parse_listens(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	char			 buf[ZP_ADDRSTRLEN + ZP_FDNAME_MAX];
	char			 name[300];

	assert_int_equal(parse(s, "-l", ":1", "-l", "127.0.0.1:2", "-l",
	    "systemd", "--listen", "systemd:web", "-u", "h:1", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(c->nlistens, 4);
	assert_int_equal(c->listens[0].any, 1);
	assert_int_equal(c->listens[0].systemd, 0);
	assert_int_equal(c->listens[1].port, 2);
	assert_int_equal(c->listens[2].systemd, 1);
	assert_string_equal(c->listens[2].name, "");
	assert_int_equal(c->listens[3].systemd, 1);
	assert_string_equal(c->listens[3].name, "web");
	assert_string_equal(zp_listen_spec_str(&c->listens[0], buf,
	    sizeof(buf)), ":1");
	assert_string_equal(zp_listen_spec_str(&c->listens[1], buf,
	    sizeof(buf)), "127.0.0.1:2");
	assert_string_equal(zp_listen_spec_str(&c->listens[2], buf,
	    sizeof(buf)), "systemd");
	assert_string_equal(zp_listen_spec_str(&c->listens[3], buf,
	    sizeof(buf)), "systemd:web");

	/* The same one twice could never work. */
	reparse_reset(s);
	expect_error(s, "--listen :1 given twice", "-l", ":1", "-l", ":1",
	    "-u", "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "--listen [::1]:5 given twice", "-l", "[::1]:5",
	    "-l", "[0:0::1]:5", "-u", "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "--listen systemd given twice", "-l", "systemd",
	    "-l", "systemd", "-u", "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "--listen systemd:a given twice", "-l", "systemd:a",
	    "-l", "systemd:a", "-u", "h:1", NULL);
	/* Other names, other addresses: fine. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", "systemd:a", "-l", "systemd:b", "-l",
	    "127.0.0.1:5", "-l", "127.0.0.2:5", "-u", "h:1", NULL),
	    ZP_PARSE_OK);

	/* Names as FileDescriptorName= takes them. */
	reparse_reset(s);
	expect_error(s, "invalid listen socket name 'systemd:'", "-l",
	    "systemd:", "-u", "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "invalid listen socket name 'systemd:a:b'", "-l",
	    "systemd:a:b", "-u", "h:1", NULL);
	reparse_reset(s);
	expect_error(s, "invalid listen socket name", "-l", "systemd:a b",
	    "-u", "h:1", NULL);
	memset(name, 'x', sizeof(name));
	memcpy(name, "systemd:", 8);
	name[8 + ZP_FDNAME_MAX] = '\0';
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", name, "-u", "h:1", NULL), ZP_PARSE_OK);
	assert_int_equal(strlen(c->listens[0].name), ZP_FDNAME_MAX);
	name[8 + ZP_FDNAME_MAX] = 'x';
	name[9 + ZP_FDNAME_MAX] = '\0';
	reparse_reset(s);
	expect_error(s, "invalid listen socket name", "-l", name, "-u", "h:1",
	    NULL);
	/* "systemdX" is neither: an address that does not parse. */
	reparse_reset(s);
	expect_error(s, "invalid listen address", "-l", "systemd2:1", "-u",
	    "h:1", NULL);

	/* At most ZP_MAX_LISTENS. */
	{
		char	*argv[2 * ZP_MAX_LISTENS + 6], ports[ZP_MAX_LISTENS + 1][8];
		int	 i, n = 0;

		argv[n++] = (char *)"zproxy";
		for (i = 0; i <= ZP_MAX_LISTENS; i++) {
			snprintf(ports[i], sizeof(ports[i]), ":%d", 100 + i);
			argv[n++] = (char *)"-l";
			argv[n++] = ports[i];
		}
		argv[n++] = (char *)"-u";
		argv[n++] = (char *)"h:1";
		argv[n] = NULL;
		reparse_reset(s);
		assert_int_equal(zp_config_parse(c, n, argv, s->err,
		    sizeof(s->err)), ZP_PARSE_ERROR);
		assert_non_null(strstr(s->err, "too many --listen"));
		reparse_reset(s);
		assert_int_equal(zp_config_parse(c, n - 2 - 2, argv, s->err,
		    sizeof(s->err)), ZP_PARSE_ERROR);	/* no -u: missing */
		argv[n - 4] = (char *)"-u";
		argv[n - 3] = (char *)"h:1";
		argv[n - 2] = NULL;
		reparse_reset(s);
		assert_int_equal(zp_config_parse(c, n - 2, argv, s->err,
		    sizeof(s->err)), ZP_PARSE_OK);
		assert_int_equal(c->nlistens, ZP_MAX_LISTENS);
	}
}

/* --control, --takeover, --daemon. */
static void
test_parse_restarts(void **state)
{
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	char			 path[ZP_CONTROL_PATH_MAX + 2];

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", NULL), ZP_PARSE_OK);
	assert_null(c->control);
	assert_null(c->takeover);
	assert_int_equal(c->daemon, 0);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--control",
	    "/run/zp/c", "--takeover", "/run/zp/c", "--daemon", NULL),
	    ZP_PARSE_OK);
	assert_string_equal(c->control, "/run/zp/c");
	assert_string_equal(c->takeover, "/run/zp/c");
	assert_int_equal(c->daemon, 1);
	reparse_reset(s);
	expect_error(s, "invalid --control path ''", "-l", ":1", "-u", "h:1",
	    "--control", "", NULL);
	memset(path, 'a', sizeof(path));
	path[0] = '/';
	path[ZP_CONTROL_PATH_MAX] = '\0';
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--takeover", path,
	    NULL), ZP_PARSE_OK);
	path[ZP_CONTROL_PATH_MAX] = 'a';
	path[ZP_CONTROL_PATH_MAX + 1] = '\0';
	reparse_reset(s);
	expect_error(s, "invalid --takeover path", "-l", ":1", "-u", "h:1",
	    "--takeover", path, NULL);
}

static void
test_parse_second_listen(void **state)
{
	static const struct {
		const char	*opt, *a, *b, *name;
	} twice[] = {
		{ "--control", "/run/a", "/run/b", "--control" },
		{ "--takeover", "/run/a", "/run/a", "--takeover" },
		{ "-m", "copy", "splice", "--mode" },
		{ "--pipe-size", "64K", "1M", "--pipe-size" },
		{ "--buffer-size", "16K", "16K", "--buffer-size" },
		{ "--splice-min", "0", "4K", "--splice-min" },
		{ "--max-conns", "10", "20", "--max-conns" },
		{ "--connect-timeout", "1", "2", "--connect-timeout" },
		{ "--balance", "first", "source", "--balance" },
		{ "--retries", "0", "1", "--retries" },
		{ "--max-fails", "2", "3", "--max-fails" },
		{ "--fail-timeout", "1", "2", "--fail-timeout" },
		{ "--check-interval", "1", "2", "--check-interval" },
		{ "--resolve-interval", "1", "2", "--resolve-interval" },
		{ "--idle-timeout", "1", "2", "--idle-timeout" },
		{ "--fin-timeout", "1", "2", "--fin-timeout" },
		{ "--drain-timeout", "1", "2", "--drain-timeout" },
		{ "--log-file", "/tmp/a", "/tmp/b", "--log-file" },
		{ "--log-format", "json", "text", "--log-format" },
		{ "--stats", ":9100", ":9101", "--stats" },
		{ "--send-proxy", "v1", "v2", "--send-proxy" },
		{ "--source", "client", "10.0.0.1", "--source" },
		{ "--dns-server", "127.0.0.1:53", "127.0.0.1:54",
		    "--dns-server" },
		{ "--mode", "copy", "nonsense", "--mode" },
	};
	struct cfg_state	*s = *state;
	char			 want[ZP_ERRLEN];
	size_t			 i;
	int			 rc;

	for (i = 0; i < sizeof(twice) / sizeof(twice[0]); i++) {
		reparse_reset(s);
		if (strcmp(twice[i].name, "--listen") == 0)
			rc = parse(s, "-u", "h:1", twice[i].opt, twice[i].a,
			    twice[i].opt, twice[i].b, NULL);
		else
			rc = parse(s, twice[i].opt, twice[i].a, "-l", ":7",
			    "-u", "h:1", twice[i].opt, twice[i].b, NULL);
		if (rc != ZP_PARSE_ERROR)
			fail_msg("%s given twice accepted", twice[i].opt);
		snprintf(want, sizeof(want), "option %s given twice ('%s', "
		    "then '%s'): it takes one value", twice[i].name,
		    twice[i].a, twice[i].b);
		assert_errmsg(s->err, want);
	}

	/* Short and long forms are one option. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--mode=copy",
	    "-mcopy", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--mode given twice");

	/* -u adds upstreams; flags may be repeated. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "-u", "a:1",
	    "--keepalive", "--keepalive", "--syslog", "--syslog", "-q", "-q",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.nupstreams, 2);
	assert_int_equal(s->cfg.keepalive, 1);
	assert_int_equal(s->cfg.use_syslog, 1);
	assert_int_equal(s->cfg.quiet, 1);

	/* Escaped there as anywhere: still one line. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--log-file",
	    "/tmp/a\n", "--log-file", "/tmp/\tb", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "('/tmp/a\\n', then '/tmp/\\tb')");
}

/*
 * -v and -q exclude each other, in either order, short or long: one
 * line naming both. -v counts (-vv, -v -v); -q alone is quiet.
 */
static void
test_parse_verbose_quiet(void **state)
{
	static const char *const both[][3] = {
		{ "-v", "-q", NULL }, { "-q", "-v", NULL },
		{ "-vq", NULL, NULL }, { "-vv", "-q", NULL },
		{ "--quiet", "--verbose", NULL }, { "-q", "-vv", "-q" },
	};
	struct cfg_state	*s = *state;
	struct zp_config	*c = &s->cfg;
	size_t			 i;

	for (i = 0; i < sizeof(both) / sizeof(both[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", both[i][0], both[i][1],
		    both[i][2], NULL) != ZP_PARSE_ERROR)
			fail_msg("%s %s accepted", both[i][0],
			    both[i][1] != NULL ? both[i][1] : "");
		assert_errmsg(s->err, "-v");
		assert_errmsg(s->err, "-q");
	}

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "-vv", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(c->verbose, 2);
	assert_int_equal(c->quiet, 0);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "-v", "--verbose",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(c->verbose, 2);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--quiet", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(c->quiet, 1);
	assert_int_equal(c->verbose, 0);
}

/*
 * A value with control characters, quotes or bytes above 0x7f is quoted
 * escaped in every kind of message (address, port, size, count, seconds,
 * keyword, unknown option, missing value, positional, resolution): one
 * line, with the escape in it, no raw control byte.
 */
static void
test_parse_escaped_values(void **state)
{
	static const struct {
		const char	*opt, *val, *want;
	} cases[] = {
		{ "-l", "x\n:80", "'x\\n:80'" },
		{ "-l", ":8\n0", "'8\\n0'" },
		{ "-u", "x\n", "'x\\n': expected HOST:PORT" },
		{ "-u", "h:8\r0", "'8\\r0'" },
		{ "--pipe-size", "1\x1b[2J", "'1\\x1b[2J'" },
		{ "--max-conns", "5\t", "'5\\t'" },
		{ "--retries", "1\n", "'1\\n'" },
		{ "--connect-timeout", "1\n", "'1\\n'" },
		{ "--mode", "spl'ice\n", "'spl\\'ice\\n'" },
		{ "--balance", "\"x\"\\", "'\\\"x\\\"\\\\'" },
		{ "--send-proxy", "v\xff", "'v\\xff'" },
		{ "--source", "1.2.3.4\n", "'1.2.3.4\\n'" },
		{ "--log-format", "j\x7f", "'j\\x7f'" },
		{ "--stats", "\n", "'\\n'" },
		{ "--dns-server", ":5\x01", "'5\\x01'" },
	};
	struct cfg_state	*s = *state;
	size_t			 i, j;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		reparse_reset(s);
		if (strcmp(cases[i].opt, "-l") == 0)
			assert_int_equal(parse(s, "-u", "h:1", "-l",
			    cases[i].val, NULL), ZP_PARSE_ERROR);
		else if (strcmp(cases[i].opt, "-u") == 0)
			assert_int_equal(parse(s, "-l", ":1", "-u",
			    cases[i].val, NULL), ZP_PARSE_ERROR);
		else
			assert_int_equal(parse(s, "-l", ":1", "-u", "h:1",
			    cases[i].opt, cases[i].val, NULL),
			    ZP_PARSE_ERROR);
		assert_errmsg(s->err, cases[i].want);
		for (j = 0; s->err[j] != '\0'; j++)
			if ((unsigned char)s->err[j] < 0x20 ||
			    (unsigned char)s->err[j] >= 0x7f)
				fail_msg("%s: raw byte 0x%02x in \"%s\"",
				    cases[i].opt, (unsigned char)s->err[j],
				    s->err);
	}

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--bo\ngus=1",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "unknown option '--bo\\ngus'");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "-\x01", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "unknown option '-\\x01'");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "ex\ntra", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "'ex\\ntra'");

	/* A long value is cut, but the message keeps its reason. */
	{
		char	longv[600];

		memset(longv, 'a', sizeof(longv) - 1);
		longv[sizeof(longv) - 1] = '\0';
		longv[300] = ':';
		reparse_reset(s);
		assert_int_equal(parse(s, "-l", ":1", "-u", longv, NULL),
		    ZP_PARSE_ERROR);
		assert_errmsg(s->err, "...': the host is too long");
	}
}

/* Resolution failures quote the host escaped, too. */
static void
test_resolve_escaped(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "x\n.invalid:80", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(zp_config_resolve(&s->cfg, s->err, sizeof(s->err)),
	    -1);
	assert_errmsg(s->err, "upstream 'x\\n.invalid' does not resolve");
}

/* --mode takes only "splice" or "copy", and names a bad value. */
static void
test_parse_bad_mode(void **state)
{
	static const char *bad[] = { "fast", "", "SPLICE", "copy ", "spl" };
	struct cfg_state	*s = *state;
	size_t			 i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reparse_reset(s);
		assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--mode",
		    bad[i], NULL), ZP_PARSE_ERROR);
		assert_errmsg_quoted(s->err, bad[i]);
	}
}

/* --connect-timeout takes positive finite seconds, fractions allowed. */
static void
test_parse_connect_timeout(void **state)
{
	static const struct {
		const char	*s;
		double		 v;
	} ok[] = {
		{ "0.5", 0.5 }, { "1", 1.0 }, { ".25", 0.25 }, { "30", 30.0 },
		{ "86400", 86400.0 },
	};
	static const char *bad[] = {
		"0", "0.0", "-1", "abc", "inf", "nan", "", "1e999", "86401",
		"5s", " 5", "-0.5", "INF", "NaN", "infinity",
	};
	struct cfg_state	*s = *state;
	size_t			 i;

	for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", "--connect-timeout",
		    ok[i].s, NULL) != ZP_PARSE_OK)
			fail_msg("timeout '%s' refused: %s", ok[i].s, s->err);
		assert_true(s->cfg.connect_timeout == ok[i].v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", "--connect-timeout",
		    bad[i], NULL) != ZP_PARSE_ERROR)
			fail_msg("timeout '%s' accepted as %f", bad[i],
			    s->cfg.connect_timeout);
		assert_errmsg_quoted(s->err, bad[i]);
	}
}

/* --max-conns takes 1..10000000. */
static void
test_parse_max_conns(void **state)
{
	static const char *bad[] = {
		"0", "-5", "abc", "", "10000001", "1.5", "10x", " 3",
		"99999999999999999999999",
	};
	struct cfg_state	*s = *state;
	size_t			 i;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--max-conns", "1",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.max_conns, 1);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", "--max-conns", bad[i],
		    NULL) != ZP_PARSE_ERROR)
			fail_msg("max-conns '%s' accepted", bad[i]);
		assert_errmsg_quoted(s->err, bad[i]);
	}
}

/* --stats-max-conns takes 1..1024: 0 is refused, not "no limit", since
 * an endpoint without a cap is the descriptor exhaustion it prevents;
 * --stats-timeout takes seconds like the other timeouts. */
static void
test_parse_stats_limits(void **state)
{
	static const char *bad[] = {
		"0", "-1", "abc", "", "1025", "1.5", "16x",
	};
	struct cfg_state	*s = *state;
	size_t			 i;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--stats", ":2",
	    "--stats-max-conns", "1", "--stats-timeout", "0.5", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(s->cfg.stats_max_conns, 1);
	assert_true(s->cfg.stats_timeout == 0.5);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1",
	    "--stats-max-conns=1024", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.stats_max_conns, 1024);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reparse_reset(s);
		if (parse(s, "-l", ":1", "-u", "h:1", "--stats-max-conns",
		    bad[i], NULL) != ZP_PARSE_ERROR)
			fail_msg("stats-max-conns '%s' accepted", bad[i]);
		assert_errmsg_quoted(s->err, bad[i]);
	}
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--stats-max-conns",
	    "0", NULL), ZP_PARSE_ERROR);
	assert_string_equal(s->err, "invalid stats-max-conns '0': expected "
	    "1-1024");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--stats-timeout",
	    "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "0");
}

/* Bad sizes, listen and upstream values fail the parse, naming the value. */
static void
test_parse_bad_values(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--pipe-size", "0",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "0");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--buffer-size",
	    "12Q", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "12Q");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--pipe-size",
	    "2G", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "2G");

	/* 0 is allowed for --splice-min, but not "00", "-1" or "4X". */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--splice-min",
	    "-1", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "-1");
	assert_non_null(strstr(s->err, "--splice-min"));

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--splice-min",
	    "4X", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "4X");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--splice-min",
	    "00", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "00");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", "localhost:9000", "-u", "h:1", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "localhost:9000");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "::1:80", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg(s->err, "::1:80");
	assert_null(s->cfg.upstreams[0].host);
}

/* -h and -V ask the caller to print and exit, wherever they appear. */
static void
test_parse_help_version(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-h", NULL), ZP_PARSE_HELP);
	reparse_reset(s);
	assert_int_equal(parse(s, "--help", NULL), ZP_PARSE_HELP);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-h", NULL), ZP_PARSE_HELP);
	reparse_reset(s);
	assert_int_equal(parse(s, "-V", NULL), ZP_PARSE_VERSION);
	reparse_reset(s);
	assert_int_equal(parse(s, "--version", NULL), ZP_PARSE_VERSION);
	reparse_reset(s);
	assert_int_equal(parse(s, "-u", "h:1", "-V", "-l", ":1", NULL),
	    ZP_PARSE_VERSION);
}

/* A positional argument is refused and named, wherever it is. */
static void
test_parse_positional(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "extra", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "extra");

	reparse_reset(s);
	assert_int_equal(parse(s, "stray", "-l", ":1", "-u", "h:1", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "stray");

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--", "-v", NULL),
	    ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "-v");
}

/*
 * zp_config_parse can be called again after a failure part-way through
 * an argv (getopt's state is reset each time).
 */
static void
test_parse_repeatable(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-vx", "-l", ":1", NULL), ZP_PARSE_ERROR);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":2", "-u", "h:2", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.listens[0].port, 2);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", NULL), ZP_PARSE_ERROR);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":3", "-u", "h:3", "-v", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(s->cfg.listens[0].port, 3);
	assert_int_equal(s->cfg.verbose, 1);
}

/* The usage text names the program and every option. */
static void
test_usage(void **state)
{
	static const char *opts[] = {
		"--listen", "--upstream", "--mode", "--pipe-size",
		"--buffer-size", "--splice-min", "--max-conns",
		"--stats-max-conns", "--stats-timeout",
		"--connect-timeout", "--verbose", "--quiet", "--help", "--version",
	};
	char	*text = NULL;
	size_t	 len = 0, i;
	FILE	*fp;

	assert_non_null(fp = open_memstream(&text, &len));
	zp_config_usage(fp, "myprog");
	fclose(fp);
	assert_non_null(strstr(text, "myprog"));
	for (i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (strstr(text, opts[i]) == NULL) {
			free(text);
			fail_msg("usage does not mention %s", opts[i]);
		}
	free(text);
}

/* ---- zp_config_resolve -------------------------------------------- */

/* An IPv4 literal resolves to itself, with the port. */
static void
test_resolve_v4(void **state)
{
	struct cfg_state	*s = *state;
	struct sockaddr_in	*sin;

	assert_int_equal(parse(s, "-l", ":1", "-u", "127.0.0.1:8080", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(zp_config_resolve(&s->cfg, s->err, sizeof(s->err)),
	    0);
	assert_int_equal(s->cfg.upstreams[0].naddrs, 1);
	sin = (struct sockaddr_in *)&s->cfg.upstreams[0].addrs[0].ss;
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(sin->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_equal(sin->sin_port, htons(8080));
	assert_int_equal(s->cfg.upstreams[0].addrs[0].len,
	    sizeof(struct sockaddr_in));

	/* Resolving again replaces the list; the old one is not leaked. */
	assert_int_equal(zp_config_resolve(&s->cfg, s->err, sizeof(s->err)),
	    0);
	assert_int_equal(s->cfg.upstreams[0].naddrs, 1);
}

/* A bracketed IPv6 literal resolves to itself. */
static void
test_resolve_v6(void **state)
{
	struct cfg_state	*s = *state;
	struct sockaddr_in6	*sin6;

	assert_int_equal(parse(s, "-l", ":1", "-u", "[::1]:9", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(zp_config_resolve(&s->cfg, s->err, sizeof(s->err)),
	    0);
	assert_int_equal(s->cfg.upstreams[0].naddrs, 1);
	sin6 = (struct sockaddr_in6 *)&s->cfg.upstreams[0].addrs[0].ss;
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_memory_equal(&sin6->sin6_addr, &in6addr_loopback,
	    sizeof(in6addr_loopback));
	assert_int_equal(sin6->sin6_port, htons(9));
	assert_int_equal(s->cfg.upstreams[0].addrs[0].len,
	    sizeof(struct sockaddr_in6));
}

/* "localhost" gives at least one loopback address, each with the port. */
static void
test_resolve_localhost(void **state)
{
	struct cfg_state	*s = *state;
	size_t			 i;

	assert_int_equal(parse(s, "-l", ":1", "-u", "localhost:5000", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(zp_config_resolve(&s->cfg, s->err, sizeof(s->err)),
	    0);
	assert_true(s->cfg.upstreams[0].naddrs >= 1);
	for (i = 0; i < s->cfg.upstreams[0].naddrs; i++) {
		struct zp_addr	*a = &s->cfg.upstreams[0].addrs[i];

		if (a->ss.ss_family == AF_INET) {
			struct sockaddr_in *sin = (struct sockaddr_in *)&a->ss;

			assert_int_equal(sin->sin_port, htons(5000));
			assert_int_equal(ntohl(sin->sin_addr.s_addr) >> 24,
			    127);
		} else if (a->ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *sin6 =
			    (struct sockaddr_in6 *)&a->ss;

			assert_int_equal(sin6->sin6_port, htons(5000));
			assert_true(IN6_IS_ADDR_LOOPBACK(&sin6->sin6_addr));
		} else
			fail_msg("family %d", a->ss.ss_family);
	}
}


/* ---- zp_addr_str -------------------------------------------------- */

/* v4 as a.b.c.d:port, v6 in brackets, v4-mapped v6 as plain v4. */
static void
test_addr_str(void **state)
{
	struct zp_addr		 a;
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a.ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a.ss;
	char			 buf[ZP_ADDRSTRLEN], small[8];

	memset(&a, 0, sizeof(a));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(80);
	assert_int_equal(inet_pton(AF_INET, "1.2.3.4", &sin->sin_addr), 1);
	a.len = sizeof(*sin);
	assert_ptr_equal(zp_addr_str(&a, buf, sizeof(buf)), buf);
	assert_string_equal(buf, "1.2.3.4:80");

	memset(&a, 0, sizeof(a));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(8080);
	sin6->sin6_addr = in6addr_loopback;
	a.len = sizeof(*sin6);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "[::1]:8080");

	assert_int_equal(inet_pton(AF_INET6, "2001:db8::1", &sin6->sin6_addr),
	    1);
	sin6->sin6_port = htons(443);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)),
	    "[2001:db8::1]:443");

	/* A client of a dual-stack listener. */
	assert_int_equal(inet_pton(AF_INET6, "::ffff:10.0.0.1",
	    &sin6->sin6_addr), 1);
	sin6->sin6_port = htons(9);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "10.0.0.1:9");

	/* The longest form fits ZP_ADDRSTRLEN. */
	assert_int_equal(inet_pton(AF_INET6,
	    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", &sin6->sin6_addr), 1);
	sin6->sin6_port = htons(65535);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)),
	    "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535");

	/* Truncation stays terminated. */
	zp_addr_str(&a, small, sizeof(small));
	assert_int_equal(strlen(small), sizeof(small) - 1);

	/* A family a zp_addr cannot hold (it only has room for IP). */
	memset(&a, 0, sizeof(a));
	a.ss.ss_family = AF_UNIX;
	a.len = sizeof(sa_family_t);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "?");
}

/* The issue-4 options: defaults, each value form, and each refusal. */
static void
test_parse_upstream_options(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", NULL),
	    ZP_PARSE_OK);
	assert_int_equal(s->cfg.balance, ZP_BALANCE_ROUNDROBIN);
	assert_int_equal(s->cfg.retries, -1);
	assert_int_equal(s->cfg.max_fails, ZP_DEFAULT_MAX_FAILS);
	assert_true(s->cfg.fail_timeout == ZP_DEFAULT_FAIL_TIMEOUT);
	assert_true(s->cfg.drain_timeout == ZP_DEFAULT_DRAIN_TIMEOUT);
	assert_true(s->cfg.idle_timeout == 0);
	assert_true(s->cfg.fin_timeout == ZP_DEFAULT_FIN_TIMEOUT);
	assert_true(s->cfg.linger_timeout == ZP_DEFAULT_LINGER_TIMEOUT);
	assert_true(s->cfg.check_interval == 0);
	assert_int_equal(s->cfg.send_proxy, 0);
	assert_int_equal(s->cfg.keepalive, 0);
	assert_int_equal(s->cfg.log_format, ZP_LOG_TEXT);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--balance",
	    "source", "--retries", "0", "--max-fails", "2", "--fail-timeout",
	    "1.5", "--check-interval", "0.3", "--resolve-interval", "2",
	    "--idle-timeout", "60", "--fin-timeout", "5", "--keepalive",
	    "--drain-timeout", "0.5", "--send-proxy", "v2", "--stats",
	    "127.0.0.1:9100", "--log-format", "json", "--log-file",
	    "/tmp/x.log", "--dns-server", "127.0.0.1:53", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.balance, ZP_BALANCE_SOURCE);
	assert_int_equal(s->cfg.retries, 0);
	assert_int_equal(s->cfg.max_fails, 2);
	assert_true(s->cfg.fail_timeout == 1.5);
	assert_true(s->cfg.check_interval == 0.3);
	assert_true(s->cfg.resolve_interval == 2);
	assert_true(s->cfg.idle_timeout == 60);
	assert_true(s->cfg.fin_timeout == 5);
	assert_true(s->cfg.drain_timeout == 0.5);
	assert_int_equal(s->cfg.keepalive, 1);
	assert_int_equal(s->cfg.send_proxy, 2);
	assert_int_equal(s->cfg.have_stats, 1);
	assert_int_equal(s->cfg.stats.port, 9100);
	assert_int_equal(s->cfg.log_format, ZP_LOG_JSON);
	assert_string_equal(s->cfg.log_file, "/tmp/x.log");
	assert_int_equal(s->cfg.have_dns_server, 1);

	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--balance",
	    "random", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "random");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--send-proxy",
	    "v3", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "v3");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--log-format",
	    "xml", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "xml");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--idle-timeout",
	    "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "idle-timeout");
	assert_errmsg(s->err, "or off");

	/* "off" turns the idle and fin timeouts off; nothing else takes it. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--idle-timeout",
	    "off", "--fin-timeout", "off", "--linger-timeout", "2.5", NULL),
	    ZP_PARSE_OK);
	assert_true(s->cfg.idle_timeout == 0 && s->cfg.fin_timeout == 0);
	assert_true(s->cfg.linger_timeout == 2.5);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--linger-timeout",
	    "off", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "off");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--fail-timeout",
	    "off", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "off");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--max-fails",
	    "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "max-fails");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--retries",
	    "-1", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "retries");
	/* The message states the range there is: 0 is valid. */
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--retries",
	    "65", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "invalid retries '65': expected 0-64");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--retries",
	    "64", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.retries, 64);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--retries",
	    "00", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.retries, 0);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--stats",
	    "9100", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "9100");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--dns-server",
	    ":53", NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, ":53");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "a:1", "--syslog",
	    "--log-file", "/tmp/x", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "syslog");
}

/*
 * --source: "client", or an IPv4 or IPv6 literal without a port (a
 * v4-mapped one is the IPv4 address, port 0); anything else, a port or
 * brackets included, is refused with one line naming the value.
 */
static void
test_parse_source(void **state)
{
	static const char *const bad[] = {
		"", "Client", "10.0.0", "10.0.0.1:80", "[::1]", "::1:x",
		"localhost", "10.0.0.1 ", "fe80::1%lo",
	};
	struct zp_addr		 a;
	char			 err[ZP_ERRLEN], buf[ZP_ADDRSTRLEN];
	size_t			 i;
	int			 mode;

	(void)state;
	assert_int_equal(zp_parse_source("client", &mode, &a, err,
	    sizeof(err)), 0);
	assert_int_equal(mode, ZP_SOURCE_CLIENT);
	assert_int_equal(zp_parse_source("10.10.0.3", &mode, &a, err,
	    sizeof(err)), 0);
	assert_int_equal(mode, ZP_SOURCE_ADDR);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "10.10.0.3:0");
	assert_int_equal(a.len, sizeof(struct sockaddr_in));
	assert_int_equal(zp_parse_source("fd10::3", &mode, &a, err,
	    sizeof(err)), 0);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "[fd10::3]:0");
	assert_int_equal(a.len, sizeof(struct sockaddr_in6));
	assert_int_equal(zp_parse_source("::ffff:10.1.2.3", &mode, &a, err,
	    sizeof(err)), 0);
	assert_int_equal(a.ss.ss_family, AF_INET);
	assert_string_equal(zp_addr_str(&a, buf, sizeof(buf)), "10.1.2.3:0");
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (zp_parse_source(bad[i], &mode, &a, err, sizeof(err)) != -1)
			fail_msg("--source '%s' accepted", bad[i]);
		if (strstr(err, "invalid source '") == NULL ||
		    strstr(err, "or client") == NULL)
			fail_msg("--source '%s': %s", bad[i], err);
	}
}

/* ---- --framing, --max-frame ---------------------------------------- */

/* The framings by name; none by default; --max-frame bounded and tied. */
static void
test_framing(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(s->cfg.framing, ZP_FRAMING_NONE);
	assert_int_equal(s->cfg.max_frame, 0);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "octet",
	    "--max-frame", "1M", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.framing, ZP_FRAMING_OCTET);
	assert_int_equal(s->cfg.max_frame, 1024 * 1024);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "nul",
	    NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.framing, ZP_FRAMING_NUL);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "json",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg_quoted(s->err, "json");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--max-frame", "17M", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "16M");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--max-frame", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "max-frame");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--max-frame", "4K",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--max-frame needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--framing", "octet", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "given twice");
}

/* --max-lifetime, --rebalance, --rebalance-rate: framed streams only. */
static void
test_planned_moves(void **state)
{
	struct cfg_state	*s = *state;

	assert_true(s->cfg.max_lifetime == 0);
	assert_int_equal(s->cfg.rebalance, 0);
	assert_int_equal(s->cfg.rebalance_rate, 10);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "-u", "i:1",
	    "--framing", "lf", "--max-lifetime", "2.5", "--balance",
	    "leastconn", "--rebalance", "--rebalance-rate", "3", NULL),
	    ZP_PARSE_OK);
	assert_true(s->cfg.max_lifetime == 2.5);
	assert_int_equal(s->cfg.rebalance, 1);
	assert_int_equal(s->cfg.rebalance_rate, 3);
	/* Bare, it is count; load and count as the next word or =WORD. */
	assert_int_equal(s->cfg.rebalance, ZP_REBALANCE_COUNT);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "--rebalance", "load", "-u",
	    "h:1", "--framing", "lf", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.rebalance, ZP_REBALANCE_LOAD);
	reparse_reset(s);
	/* load aims at no even spread: any balancer. */
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--balance", "source", "--rebalance=load", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.rebalance, ZP_REBALANCE_LOAD);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance", "count", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.rebalance, ZP_REBALANCE_COUNT);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance=heavy", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "invalid rebalance 'heavy': expected count or "
	    "load");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance", "heavy", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "unexpected argument 'heavy'");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance", "load", "--rebalance", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "given twice");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--max-lifetime",
	    "60", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--max-lifetime needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--rebalance",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--rebalance needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance", "--balance", "first", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--rebalance count needs --balance leastconn or "
	    "roundrobin");
	reparse_reset(s);
	/* It paces zproxy ctl's drains too: --framing is enough. */
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance-rate", "5", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.rebalance, 0);
	assert_int_equal(s->cfg.rebalance_rate, 5);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1",
	    "--rebalance-rate", "5", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--rebalance-rate needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--rebalance", "--rebalance-rate", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "rebalance-rate");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--max-lifetime", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "max-lifetime");
}

/* --stall-timeout: seconds or off, 10 by default, framed streams only. */
static void
test_stall_timeout(void **state)
{
	struct cfg_state	*s = *state;

	assert_true(s->cfg.stall_timeout == 10.0);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--stall-timeout", "2.5", NULL), ZP_PARSE_OK);
	assert_true(s->cfg.stall_timeout == 2.5);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--stall-timeout", "off", NULL), ZP_PARSE_OK);
	assert_true(s->cfg.stall_timeout == 0);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--stall-timeout",
	    "5", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--stall-timeout needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--stall-timeout", "soon", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "invalid stall-timeout 'soon'");
}

/* --replay-window: a size, 0 for off, framed streams only, 64M at most. */
static void
test_replay_window(void **state)
{
	struct cfg_state	*s = *state;

	assert_int_equal(s->cfg.replay_window, 0);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--replay-window", "1M", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.replay_window, 1024 * 1024);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--replay-window", "0", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.replay_window, 0);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing",
	    "octet", "--replay-window", "64M", NULL), ZP_PARSE_OK);
	assert_int_equal(s->cfg.replay_window, 64 * 1024 * 1024);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--replay-window", "65M", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--replay-window 65M is over the most, 64M");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1",
	    "--replay-window", "1M", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--replay-window needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--replay-window", "lots", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--replay-window");
}

/*
 * --spool DIR and its bounds: framed streams only, not with -u original;
 * --spool-max beyond the 1G of other sizes, up to 16T; the others need
 * --spool.
 */
static void
test_spool(void **state)
{
	struct cfg_state	*s = *state;

	assert_null(s->cfg.spool_dir);
	assert_true(s->cfg.spool_max == 1024ULL * 1024 * 1024);
	assert_int_equal(s->cfg.spool_senders, 4);
	assert_true(s->cfg.spool_sync == 1.0);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool", "/var/spool/zproxy", "--spool-max", "20G",
	    "--spool-senders", "2", "--spool-sync", "0.5", NULL),
	    ZP_PARSE_OK);
	assert_string_equal(s->cfg.spool_dir, "/var/spool/zproxy");
	assert_true(s->cfg.spool_max == 20ULL * 1024 * 1024 * 1024);
	assert_int_equal(s->cfg.spool_senders, 2);
	assert_true(s->cfg.spool_sync == 0.5);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool", "/s", "--spool-max", "16T", NULL), ZP_PARSE_OK);
	assert_true(s->cfg.spool_max == 16ULL << 40);
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool", "/s", "--spool-max", "17T", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool-max: invalid size '17T': above the "
	    "limit of 16T");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool", "/s", "--spool-max", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool-max");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--spool", "/s",
	    NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool needs --framing");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool-max", "1G", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool-max needs --spool");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool-sync", "2", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool-sync needs --spool");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "h:1", "--framing", "lf",
	    "--spool", "/s", "--spool-senders", "0", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "spool-senders");
	reparse_reset(s);
	assert_int_equal(parse(s, "-l", ":1", "-u", "original", "--framing",
	    "lf", "--spool", "/s", NULL), ZP_PARSE_ERROR);
	assert_errmsg(s->err, "--spool cannot be used with -u original");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_size_plain),
		cmocka_unit_test(test_size_suffixes),
		cmocka_unit_test(test_size_zero),
		cmocka_unit_test(test_size_too_big),
		cmocka_unit_test(test_size_junk),
		cmocka_unit_test(test_size_null_err),
		cmocka_unit_test(test_port_valid),
		cmocka_unit_test(test_port_invalid),
		cmocka_unit_test(test_listen_any),
		cmocka_unit_test(test_listen_v4),
		cmocka_unit_test(test_listen_v6),
		cmocka_unit_test(test_listen_bad),
		cmocka_unit_test(test_listen_unbracketed_v6),
		cmocka_unit_test(test_hostport_ok),
		cmocka_unit_test(test_hostport_bad),
		cmocka_unit_test(test_hostport_limits),
		cmocka_unit_test_setup_teardown(test_parse_defaults,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_long_options,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_short_options,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_access,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_missing_required,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_unknown_option,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_flag_with_value,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_missing_value,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_upstream_options,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_second_upstream,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_second_listen,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_listens,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_udp,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_upstream_opts,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_restarts,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_escaped_values,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_resolve_escaped,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_verbose_quiet,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_bad_mode,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_connect_timeout,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_stats_limits,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_max_conns,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_bad_values,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_help_version,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_positional,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_parse_repeatable,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test(test_usage),
		cmocka_unit_test_setup_teardown(test_resolve_v4,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_resolve_v6,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test_setup_teardown(test_resolve_localhost,
		    cfg_setup, cfg_teardown),
		cmocka_unit_test(test_addr_str),
		cmocka_unit_test(test_parse_source),
		cmocka_unit_test_setup_teardown(test_framing, cfg_setup,
		    cfg_teardown),
		cmocka_unit_test_setup_teardown(test_planned_moves, cfg_setup,
		    cfg_teardown),
		cmocka_unit_test_setup_teardown(test_stall_timeout, cfg_setup,
		    cfg_teardown),
		cmocka_unit_test_setup_teardown(test_replay_window, cfg_setup,
		    cfg_teardown),
		cmocka_unit_test_setup_teardown(test_spool, cfg_setup,
		    cfg_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
