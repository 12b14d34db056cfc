/*
 * test_ctlcmd.c - zproxy ctl's grammar (ops/ctlcmd.c): every command and
 * its fields, --json anywhere, blanks, and each malformed form refused
 * with its one-line message.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>

#include <cmocka.h>

#include "core/upstream.h"
#include "ops/ctlcmd.h"

static struct zp_ctl_cmd cmd;
static char err[200];

static int
parse(const char *line)
{
	err[0] = '\0';
	return zp_ctl_parse(line, &cmd, err, sizeof(err));
}

static void
refused(const char *line, const char *why)
{
	assert_int_equal(parse(line), -1);
	if (strstr(err, why) == NULL)
		fail_msg("\"%s\": \"%s\" does not say \"%s\"", line, err, why);
}

static void
test_commands(void **state)
{
	assert_int_equal(parse("show upstreams"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_SHOW_UPSTREAMS);
	assert_int_equal(cmd.json, 0);
	assert_string_equal(cmd.name, "");

	assert_int_equal(parse("--json show streams"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_SHOW_STREAMS);
	assert_int_equal(cmd.json, 1);
	assert_string_equal(cmd.name, "");
	assert_int_equal(parse("show streams [::1]:514 --json"), 0);
	assert_string_equal(cmd.name, "[::1]:514");
	assert_int_equal(cmd.json, 1);

	assert_int_equal(parse("set upstream a:1 state drain"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_SET_STATE);
	assert_int_equal(cmd.state, ZP_ADMIN_DRAIN);
	assert_string_equal(cmd.name, "a:1");
	assert_int_equal(parse("set upstream a:1 state maint"), 0);
	assert_int_equal(cmd.state, ZP_ADMIN_MAINT);
	assert_int_equal(parse("set upstream a:1 --json state ready"), 0);
	assert_int_equal(cmd.state, ZP_ADMIN_READY);

	assert_int_equal(parse("set upstream b:2 weight 0"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_SET_WEIGHT);
	assert_int_equal(cmd.weight, 0);
	assert_int_equal(parse("\tset  upstream b:2 weight 256 "), 0);
	assert_int_equal(cmd.weight, 256);

	assert_int_equal(parse("move 42"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_MOVE);
	assert_int_equal(cmd.id, 42);
	assert_string_equal(cmd.name, "");
	assert_int_equal(parse("move 18446744073709551615 c:3"), 0);
	assert_true(cmd.id == UINT64_MAX);
	assert_string_equal(cmd.name, "c:3");

	assert_int_equal(parse("add upstream 10.0.0.1:514"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_ADD);
	assert_string_equal(cmd.name, "10.0.0.1:514");
	assert_int_equal(cmd.has_weight, 0);
	assert_int_equal(cmd.backup, 0);
	assert_int_equal(parse("add upstream [::1]:514 backup weight 3"), 0);
	assert_string_equal(cmd.name, "[::1]:514");
	assert_int_equal(cmd.has_weight, 1);
	assert_int_equal(cmd.weight, 3);
	assert_int_equal(cmd.backup, 1);
	assert_int_equal(parse("add upstream logs.example.net:514 weight 0"),
	    0);
	assert_int_equal(cmd.weight, 0);
	assert_int_equal(parse("reload --json"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_RELOAD);
	assert_int_equal(parse("del upstream logs.example.net:514"), 0);
	assert_int_equal(cmd.verb, ZP_CTL_DEL);
	assert_string_equal(cmd.name, "logs.example.net:514");
}

static void
test_refused(void **state)
{
	char	long_name[400];

	refused("", "no command");
	refused("  --json ", "no command");
	refused("frob", "unknown command \"frob\"");
	refused("show", "usage: show upstreams");
	refused("show upstreams x", "usage: show upstreams");
	refused("show streams a b", "usage: show upstreams");
	refused("set upstream a:1 state", "usage: set upstream");
	refused("set server a:1 state drain", "usage: set upstream");
	refused("set upstream a:1 state off", "state \"off\": want ready");
	refused("set upstream a:1 colour red", "want state or weight");
	refused("set upstream a:1 weight 257", "from 0 to 256");
	refused("set upstream a:1 weight -1", "from 0 to 256");
	refused("set upstream a:1 weight 1x", "from 0 to 256");
	refused("move", "usage: move");
	refused("move 0", "stream id \"0\"");
	refused("move 18446744073709551616", "stream id");
	refused("move 1 a:1 b:2", "usage: move");
	refused("show a b c d e f g h i", "too many words");
	refused("add upstream", "usage: add upstream");
	refused("add server a:1", "usage: add upstream");
	refused("add upstream a:1,weight=2", "as words");
	refused("add upstream a", "expected HOST:PORT");
	refused("add upstream a:99999", "99999");
	refused("add upstream original", "cannot be added");
	refused("add upstream a\"b:1", "letters, digits");
	refused("add upstream a/b:1", "letters, digits");
	refused("add upstream a:1 weight", "usage: add upstream");
	refused("add upstream a:1 weight 300", "from 0 to 256");
	refused("add upstream a:1 backup backup", "usage: add upstream");
	refused("add upstream a:1 weight 1 weight 2", "usage: add upstream");
	refused("del upstream", "usage: del upstream");
	refused("reload now", "usage: reload");
	refused("del upstream a:1 now", "usage: del upstream");
	refused("show\nupstreams", "a control character");
	refused("show upstreams\r", "a control character");
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	memcpy(long_name, "show streams ", 13);
	refused(long_name, "longer than 299 bytes");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_commands),
		cmocka_unit_test(test_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
