/*
 * test_inherit.c - sockets zproxy did not bind: systemd's environment
 * (zp_inherit_parse_env), which -l takes which (zp_inherit_take), and a
 * takeover's offer (zp_offer_parse).
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "ops/control.h"
#include "ops/inherit.h"
#include "lib/log.h"

static void
assert_err(const char *err, const char *what)
{
	assert_null(strchr(err, '\n'));
	if (strstr(err, what) == NULL)
		fail_msg("error \"%s\" does not name \"%s\"", err, what);
}

/* LISTEN_FDNAMES names the sockets from 3 on, in order. */
static void
test_env_named(void **state)
{
	struct zp_inherit	set;
	char			err[ZP_ERRLEN];

	assert_int_equal(zp_inherit_parse_env(&set, "42", "3", "web:admin:web",
	    42, err, sizeof(err)), 0);
	assert_int_equal(set.n, 3);
	assert_int_equal(set.socks[0].fd, 3);
	assert_int_equal(set.socks[2].fd, 5);
	assert_string_equal(set.socks[0].label, "systemd:web");
	assert_string_equal(set.socks[1].label, "systemd:admin");
	assert_string_equal(set.socks[2].label, "systemd:web");
	/* No names at all: the sockets are there, unnamed. */
	assert_int_equal(zp_inherit_parse_env(&set, "42", "2", NULL, 42, err,
	    sizeof(err)), 0);
	assert_int_equal(set.n, 2);
	assert_string_equal(set.socks[1].label, "systemd:");
	/* An empty name is a name (systemd writes "::" for two unnamed). */
	assert_int_equal(zp_inherit_parse_env(&set, "42", "2", ":x", 42, err,
	    sizeof(err)), 0);
	assert_string_equal(set.socks[0].label, "systemd:");
	assert_string_equal(set.socks[1].label, "systemd:x");
}

static void
test_env_refused(void **state)
{
	struct zp_inherit	set;
	char			err[ZP_ERRLEN], big[400];

	assert_int_equal(zp_inherit_parse_env(&set, NULL, NULL, NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "$LISTEN_FDS is unset");
	assert_int_equal(zp_inherit_parse_env(&set, NULL, "1", NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "$LISTEN_PID is unset");
	/* Meant for the process that started us: not ours to take. */
	assert_int_equal(zp_inherit_parse_env(&set, "41", "1", NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "passed to process 41");
	assert_int_equal(zp_inherit_parse_env(&set, "4x", "1", NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "not a process id");
	assert_int_equal(zp_inherit_parse_env(&set, "42", "0", NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "'0' is not a number from 1 to 64");
	assert_int_equal(zp_inherit_parse_env(&set, "42", "65", NULL, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "'65'");
	assert_int_equal(zp_inherit_parse_env(&set, "42", "-1", NULL, 42, err,
	    sizeof(err)), -1);
	assert_int_equal(zp_inherit_parse_env(&set, "42", "2", "a", 42, err,
	    sizeof(err)), -1);
	assert_err(err, "names 1 sockets, $LISTEN_FDS says 2");
	assert_int_equal(zp_inherit_parse_env(&set, "42", "1", "a:b", 42, err,
	    sizeof(err)), -1);
	assert_err(err, "more sockets than $LISTEN_FDS");
	assert_int_equal(zp_inherit_parse_env(&set, "42", "1", "a\tb", 42, err,
	    sizeof(err)), -1);
	assert_err(err, "control character");
	memset(big, 'n', sizeof(big));
	big[ZP_FDNAME_MAX + 1] = '\0';
	assert_int_equal(zp_inherit_parse_env(&set, "42", "1", big, 42, err,
	    sizeof(err)), -1);
	assert_err(err, "longer than 255");
	big[ZP_FDNAME_MAX] = '\0';
	assert_int_equal(zp_inherit_parse_env(&set, "42", "1", big, 42, err,
	    sizeof(err)), 0);
}

/* -l systemd:NAME takes its name; -l systemd every socket no name takes. */
static void
test_take_systemd(void **state)
{
	struct zp_config	cfg;
	struct zp_inherit	set;
	char			err[ZP_ERRLEN];
	int			fds[ZP_INHERIT_MAX];

	zp_config_init(&cfg);
	assert_int_equal(zp_parse_listen_arg("systemd", &cfg.listens[0], err,
	    sizeof(err)), 0);
	assert_int_equal(zp_parse_listen_arg("systemd:web", &cfg.listens[1],
	    err, sizeof(err)), 0);
	cfg.nlistens = 2;
	assert_int_equal(zp_inherit_parse_env(&set, "42", "4",
	    "web:admin:web:other", 42, err, sizeof(err)), 0);
	/* The unnamed one leaves "web" to its own -l, whatever the order. */
	assert_int_equal(zp_inherit_take(&set, &cfg, &cfg.listens[0], 0, fds,
	    ZP_INHERIT_MAX), 2);
	assert_int_equal(fds[0], 4);
	assert_int_equal(fds[1], 6);
	assert_non_null(zp_inherit_left(&set));
	assert_int_equal(zp_inherit_take(&set, &cfg, &cfg.listens[1], 0, fds,
	    ZP_INHERIT_MAX), 2);
	assert_int_equal(fds[0], 3);
	assert_int_equal(fds[1], 5);
	assert_null(zp_inherit_left(&set));
	/* Taken once only. */
	assert_int_equal(zp_inherit_take(&set, &cfg, &cfg.listens[1], 0, fds,
	    ZP_INHERIT_MAX), 0);
	zp_config_free(&cfg);
}

/* A takeover: each -l takes the sockets the old one had for that -l. */
static void
test_take_takeover(void **state)
{
	struct zp_config	cfg;
	struct zp_offer		o;
	char			err[ZP_ERRLEN];
	int			fds[3] = { 10, 11, 12 }, got[ZP_INHERIT_MAX];
	const char		*text = ZP_CONTROL_REQUEST "pid 7\nwatchdog 5\n"
				    "listen :9000\nlisten systemd\n"
				    "stats 127.0.0.1:9100\n";

	o.conn = -1;
	assert_int_equal(zp_offer_parse(text, strlen(text), fds, 3, &o, err,
	    sizeof(err)), 0);
	assert_int_equal(o.conn, -1);
	assert_int_equal(o.pid, 7);
	assert_int_equal(o.watchdog_usec, 5);
	assert_int_equal(o.set.n, 3);
	assert_int_equal(o.set.socks[2].stats, 1);
	zp_config_init(&cfg);
	assert_int_equal(zp_parse_listen_arg("systemd", &cfg.listens[0], err,
	    sizeof(err)), 0);
	assert_int_equal(zp_parse_listen_arg(":9000", &cfg.listens[1], err,
	    sizeof(err)), 0);
	cfg.nlistens = 2;
	/* A takeover matches the label as written, not "any not named". */
	assert_int_equal(zp_inherit_take(&o.set, &cfg, &cfg.listens[0], 1,
	    got, ZP_INHERIT_MAX), 1);
	assert_int_equal(got[0], 11);
	assert_non_null(zp_inherit_left(&o.set));
	assert_int_equal(zp_inherit_take(&o.set, &cfg, &cfg.listens[1], 1,
	    got, ZP_INHERIT_MAX), 1);
	assert_int_equal(got[0], 10);
	/* The stats socket is not a -l's: nothing is left for a -l. */
	assert_null(zp_inherit_left(&o.set));
	assert_int_equal(zp_inherit_take_stats(&o.set, ":9100"), -1);
	assert_int_equal(zp_inherit_take_stats(&o.set, "127.0.0.1:9100"), 12);
	assert_int_equal(zp_inherit_take_stats(&o.set, "127.0.0.1:9100"), -1);
	/* A -l the old one did not have: nothing to take. */
	assert_int_equal(zp_parse_listen_arg("[::1]:9000", &cfg.listens[0],
	    err, sizeof(err)), 0);
	assert_int_equal(zp_inherit_take(&o.set, &cfg, &cfg.listens[0], 1,
	    got, ZP_INHERIT_MAX), 0);
	zp_config_free(&cfg);
}

static void
offer_refused(const char *text, size_t nfds, const char *what)
{
	struct zp_offer	o;
	char		err[ZP_ERRLEN];
	int		fds[4] = { 10, 11, 12, 13 };

	o.conn = -1;
	if (zp_offer_parse(text, strlen(text), fds, nfds, &o, err,
	    sizeof(err)) != -1)
		fail_msg("offer accepted: %s", text);
	assert_err(err, what);
}

static void
test_offer_refused(void **state)
{
	offer_refused("", 0, "not a zproxy takeover offer");
	offer_refused("zproxy-takeover 2\npid 1\n", 0, "not a zproxy");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nlisten :1", 1,
	    "unterminated");
	offer_refused(ZP_CONTROL_REQUEST "listen :1\n", 1, "no process id");
	offer_refused(ZP_CONTROL_REQUEST "pid 0\nlisten :1\n", 1,
	    "a bad process id");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nlisten :1\n", 2,
	    "fewer sockets named than passed");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nlisten :1\nlisten :2\n", 1,
	    "more sockets named than passed");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nlisten a b\n", 1,
	    "control character or space");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nlisten \n", 1, "label of 0");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nspeed 9\n", 0,
	    "an unknown line");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nwatchdog\n", 0,
	    "without a value");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nwatchdog -1\n", 0,
	    "not a number");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\nwatchdog 99999999999999999999\n",
	    0, "not a number");
	offer_refused(ZP_CONTROL_REQUEST "pid 1\n", 65, "at most 64");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_env_named),
		cmocka_unit_test(test_env_refused),
		cmocka_unit_test(test_take_systemd),
		cmocka_unit_test(test_take_takeover),
		cmocka_unit_test(test_offer_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
