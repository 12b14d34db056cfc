/*
 * ctlcmd.c - zproxy ctl's grammar. See ctlcmd.h.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/ctlcmd.h"
#include "core/config.h"
#include "core/upstream.h"
#include "lib/log.h"

#define WORDS_MAX	8

const char zp_ctl_usage[] =
    "  show upstreams\n"
    "  show streams [UPSTREAM]\n"
    "  set upstream NAME state ready|drain|maint\n"
    "  set upstream NAME weight N\n"
    "  move STREAM-ID [UPSTREAM]\n"
    "  add upstream [udp@|tls@]HOST:PORT [weight N] [backup]\n"
    "  del upstream NAME\n"
    "  reload\n";

/* A whole decimal number in [lo, hi]; -1 otherwise. */
static int
ctl_number(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char			*end;
	unsigned long long	 v;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* An upstream's name into cmd->name; -1 when too long. */
static int
ctl_name(const char *s, struct zp_ctl_cmd *cmd, char *err, size_t errlen)
{
	if (strlen(s) >= sizeof(cmd->name)) {
		zp_seterr(err, errlen, "an upstream name longer than %zu "
		    "bytes", sizeof(cmd->name) - 1);
		return -1;
	}
	strcpy(cmd->name, s);
	return 0;
}

/* set upstream NAME state|weight VALUE */
static int
ctl_set(char **w, int n, struct zp_ctl_cmd *cmd, char *err, size_t errlen)
{
	uint64_t	v;
	int		a;

	if (n != 5 || strcmp(w[1], "upstream") != 0) {
		zp_seterr(err, errlen, "usage: set upstream NAME state "
		    "ready|drain|maint, or set upstream NAME weight N");
		return -1;
	}
	if (ctl_name(w[2], cmd, err, errlen) == -1)
		return -1;
	if (strcmp(w[3], "state") == 0) {
		if ((a = zp_admin_parse(w[4])) == -1) {
			zp_seterr(err, errlen, "state \"%.40s\": want ready, "
			    "drain or maint", w[4]);
			return -1;
		}
		cmd->verb = ZP_CTL_SET_STATE;
		cmd->state = a;
		return 0;
	}
	if (strcmp(w[3], "weight") == 0) {
		if (ctl_number(w[4], 0, ZP_WEIGHT_MAX, &v) == -1) {
			zp_seterr(err, errlen, "weight \"%.40s\": want a whole "
			    "number from 0 to %d", w[4], ZP_WEIGHT_MAX);
			return -1;
		}
		cmd->verb = ZP_CTL_SET_WEIGHT;
		cmd->weight = (int)v;
		return 0;
	}
	zp_seterr(err, errlen, "set upstream NAME \"%.40s\": want state or "
	    "weight", w[3]);
	return -1;
}

/* add upstream HOST:PORT [weight N] [backup]; del upstream NAME */
static int
ctl_add_del(char **w, int n, struct zp_ctl_cmd *cmd, char *err,
    size_t errlen)
{
	uint64_t	v;
	char		port[6], *host;
	int		i;

	if (strcmp(w[0], "del") == 0) {
		if (n != 3 || strcmp(w[1], "upstream") != 0) {
			zp_seterr(err, errlen, "usage: del upstream NAME");
			return -1;
		}
		cmd->verb = ZP_CTL_DEL;
		return ctl_name(w[2], cmd, err, errlen);
	}
	if (n < 3 || strcmp(w[1], "upstream") != 0) {
		zp_seterr(err, errlen, "usage: add upstream HOST:PORT "
		    "[weight N] [backup]");
		return -1;
	}
	/* HOST:PORT as -u takes it (its options are words here). */
	if (strchr(w[2], ',') != NULL) {
		zp_seterr(err, errlen, "add upstream %.60s: give weight N "
		    "and backup as words", w[2]);
		return -1;
	}
	if (strcmp(w[2], "original") == 0) {
		zp_seterr(err, errlen, "add upstream: \"original\" cannot be "
		    "added");
		return -1;
	}
	/* udp@HOST:PORT, tls@HOST:PORT: as -u takes them. */
	if (zp_parse_hostport(w[2] + (strncmp(w[2], "udp@", 4) == 0 ||
	    strncmp(w[2], "tls@", 4) == 0 ? 4 : 0),
	    &host, port, sizeof(port), err, errlen) == -1)
		return -1;
	/* A name or an address: what show's text and JSON carry as is. */
	if (host[strspn(host, "abcdefghijklmnopqrstuvwxyz"
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:")] != '\0') {
		zp_seterr(err, errlen, "add upstream %.60s: a host name holds "
		    "letters, digits, '.', '-' and '_' only", w[2]);
		free(host);
		return -1;
	}
	free(host);
	cmd->verb = ZP_CTL_ADD;
	for (i = 3; i < n; i++) {
		if (strcmp(w[i], "backup") == 0 && !cmd->backup) {
			cmd->backup = 1;
			continue;
		}
		if (strcmp(w[i], "weight") == 0 && !cmd->has_weight &&
		    i + 1 < n) {
			if (ctl_number(w[++i], 0, ZP_WEIGHT_MAX, &v) == -1) {
				zp_seterr(err, errlen, "weight \"%.40s\": want "
				    "a whole number from 0 to %d", w[i],
				    ZP_WEIGHT_MAX);
				return -1;
			}
			cmd->has_weight = 1;
			cmd->weight = (int)v;
			continue;
		}
		zp_seterr(err, errlen, "usage: add upstream HOST:PORT "
		    "[weight N] [backup]");
		return -1;
	}
	return ctl_name(w[2], cmd, err, errlen);
}

/* The words after the verb's, checked and stored. */
static int
ctl_words(char **w, int n, struct zp_ctl_cmd *cmd, char *err, size_t errlen)
{
	if (strcmp(w[0], "show") == 0) {
		if (n == 2 && strcmp(w[1], "upstreams") == 0) {
			cmd->verb = ZP_CTL_SHOW_UPSTREAMS;
			return 0;
		}
		if ((n == 2 || n == 3) && strcmp(w[1], "streams") == 0) {
			cmd->verb = ZP_CTL_SHOW_STREAMS;
			return n == 3 ? ctl_name(w[2], cmd, err, errlen) : 0;
		}
		zp_seterr(err, errlen, "usage: show upstreams, or show "
		    "streams [UPSTREAM]");
		return -1;
	}
	if (strcmp(w[0], "set") == 0)
		return ctl_set(w, n, cmd, err, errlen);
	if (strcmp(w[0], "move") == 0) {
		if (n < 2 || n > 3) {
			zp_seterr(err, errlen, "usage: move STREAM-ID "
			    "[UPSTREAM]");
			return -1;
		}
		if (ctl_number(w[1], 1, UINT64_MAX, &cmd->id) == -1) {
			zp_seterr(err, errlen, "stream id \"%.40s\": want the "
			    "number show streams gives", w[1]);
			return -1;
		}
		cmd->verb = ZP_CTL_MOVE;
		return n == 3 ? ctl_name(w[2], cmd, err, errlen) : 0;
	}
	if (strcmp(w[0], "add") == 0 || strcmp(w[0], "del") == 0)
		return ctl_add_del(w, n, cmd, err, errlen);
	if (strcmp(w[0], "reload") == 0) {
		if (n != 1) {
			zp_seterr(err, errlen, "usage: reload");
			return -1;
		}
		cmd->verb = ZP_CTL_RELOAD;
		return 0;
	}
	zp_seterr(err, errlen, "unknown command \"%.40s\" (show, set, move, "
	    "add, del, reload)", w[0]);
	return -1;
}

int
zp_ctl_parse(const char *line, struct zp_ctl_cmd *cmd, char *err,
    size_t errlen)
{
	char	 buf[1100], *w[WORDS_MAX], *p, *save = NULL;
	int	 n = 0;

	memset(cmd, 0, sizeof(*cmd));
	if (strlen(line) >= sizeof(buf)) {
		zp_seterr(err, errlen, "a command longer than %zu bytes",
		    sizeof(buf) - 1);
		return -1;
	}
	strcpy(buf, line);
	for (p = buf; *p != '\0'; p++)
		if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
			zp_seterr(err, errlen, "a control character in the "
			    "command");
			return -1;
		}
	for (p = strtok_r(buf, " \t", &save); p != NULL;
	    p = strtok_r(NULL, " \t", &save)) {
		if (strcmp(p, "--json") == 0) {
			cmd->json = 1;
			continue;
		}
		if (n == WORDS_MAX) {
			zp_seterr(err, errlen, "too many words");
			return -1;
		}
		w[n++] = p;
	}
	if (n == 0) {
		zp_seterr(err, errlen, "no command (show, set, move, add, "
		    "del, reload)");
		return -1;
	}
	return ctl_words(w, n, cmd, err, errlen);
}
