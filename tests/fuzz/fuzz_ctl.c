/*
 * fuzz_ctl.c - zproxy ctl's command parser (zp_ctl_parse): what a client
 * of the --control socket sends, parsed by the daemon.
 *
 * An accepted command holds a known verb, a NUL-terminated upstream name
 * of the right size, a state and weight in range, a stream id above 0;
 * written back as words it parses to the same command. A refused one
 * says why in one line.
 */

#include <inttypes.h>

#include "ops/ctlcmd.h"
#include "core/upstream.h"
#include "fuzz.h"

/* cmd as the words a client would send. */
static void
ctl_format(const struct zp_ctl_cmd *c, char *buf, size_t len)
{
	const char	*j = c->json ? " --json" : "";

	switch (c->verb) {
	case ZP_CTL_SHOW_UPSTREAMS:
		snprintf(buf, len, "show upstreams%s", j);
		break;
	case ZP_CTL_SHOW_STREAMS:
		snprintf(buf, len, "show streams %s%s", c->name, j);
		break;
	case ZP_CTL_SET_STATE:
		snprintf(buf, len, "set upstream %s state %s%s", c->name,
		    zp_admin_str((enum zp_admin)c->state), j);
		break;
	case ZP_CTL_SET_WEIGHT:
		snprintf(buf, len, "set upstream %s weight %d%s", c->name,
		    c->weight, j);
		break;
	case ZP_CTL_MOVE:
		snprintf(buf, len, "move %" PRIu64 " %s%s", c->id, c->name, j);
		break;
	case ZP_CTL_ADD:
		snprintf(buf, len, "add upstream %s%s%s%s", c->name,
		    c->backup ? " backup" : "", c->has_weight ? " weight " :
		    "", j);
		if (c->has_weight)
			snprintf(buf + strlen(buf), len - strlen(buf), " %d",
			    c->weight);
		break;
	case ZP_CTL_DEL:
		snprintf(buf, len, "del upstream %s%s", c->name, j);
		break;
	case ZP_CTL_RELOAD:
		snprintf(buf, len, "reload%s", j);
		break;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zp_ctl_cmd	 cmd, again;
	char			 err[200], line[1200], *s;

	if ((s = fuzz_cstr(data, size)) == NULL)
		return 0;
	err[0] = '\0';
	if (zp_ctl_parse(s, &cmd, err, sizeof(err)) == -1) {
		FUZZ_CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
		free(s);
		return 0;
	}
	FUZZ_CHECK(cmd.verb >= ZP_CTL_SHOW_UPSTREAMS &&
	    cmd.verb <= ZP_CTL_RELOAD);
	FUZZ_CHECK(memchr(cmd.name, '\0', sizeof(cmd.name)) != NULL);
	FUZZ_CHECK(strpbrk(cmd.name, " \t") == NULL);
	FUZZ_CHECK(cmd.json == 0 || cmd.json == 1);
	if (cmd.verb == ZP_CTL_SET_STATE)
		FUZZ_CHECK(cmd.state >= ZP_ADMIN_READY &&
		    cmd.state <= ZP_ADMIN_MAINT);
	if (cmd.verb == ZP_CTL_SET_WEIGHT || cmd.has_weight)
		FUZZ_CHECK(cmd.weight >= 0 && cmd.weight <= ZP_WEIGHT_MAX);
	if (cmd.verb == ZP_CTL_SET_STATE || cmd.verb == ZP_CTL_SET_WEIGHT ||
	    cmd.verb == ZP_CTL_ADD || cmd.verb == ZP_CTL_DEL)
		FUZZ_CHECK(cmd.name[0] != '\0');
	/* An added name is one show can print as is, JSON included. */
	if (cmd.verb == ZP_CTL_ADD)
		FUZZ_CHECK(strchr(cmd.name, ':') != NULL &&
		    strpbrk(cmd.name, ",\"\\") == NULL);
	if (cmd.verb == ZP_CTL_MOVE)
		FUZZ_CHECK(cmd.id > 0);
	/* The same command, written back and read again. */
	ctl_format(&cmd, line, sizeof(line));
	FUZZ_CHECK(zp_ctl_parse(line, &again, err, sizeof(err)) == 0);
	FUZZ_CHECK(memcmp(&cmd, &again, sizeof(cmd)) == 0);
	free(s);
	return 0;
}
