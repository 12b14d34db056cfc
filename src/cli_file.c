/*
 * cli_file.c - -f FILE: options read from a file, one a line, before the
 * command line's (which replace them); and what was read, kept for
 * --check. See cli_int.h.
 *
 * A line is a long option name and, for an option that takes one, its
 * value as the command line would give it: the rest of the line, blanks
 * around it dropped ("upstream logs-a:514,weight=2", "framing octet",
 * "rebalance"). Blank lines and lines whose first non-blank is '#' are
 * skipped. An option given again adds one more where the command line
 * would (-u, -l, --mirror, ...) and is refused where it would.
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_int.h"
#include "core/config.h"
#include "lib/log.h"

/* Longest line read; a longer one is refused, not cut. */
#define CLI_LINE_MAX	4096

int
cli_item_add(struct zp_config *cfg, const char *name, const char *value)
{
	struct zp_config_item	*v;
	char			*dup = NULL;

	if (value != NULL && (dup = strdup(value)) == NULL)
		return -1;
	if ((v = realloc(cfg->items, (cfg->nitems + 1) * sizeof(*v))) ==
	    NULL) {
		free(dup);
		return -1;
	}
	cfg->items = v;
	v[cfg->nitems].name = name;
	v[cfg->nitems].value = dup;
	cfg->nitems++;
	return 0;
}

/* The table entry of a long name, or NULL. */
static const struct cli_opt *
cli_find_name(const char *name)
{
	size_t	i;

	for (i = 0; i < CLI_NOPTS; i++)
		if (strcmp(cli_opts[i].name, name) == 0)
			return &cli_opts[i];
	return NULL;
}

/*
 * One line, its newline gone: into cfg unless the command line gives the
 * option. Returns 0, or -1 with err (without the "PATH:LINE: ").
 */
static int
file_line(struct zp_config *cfg, char *line, const unsigned char *skip,
    const char **given, char *err, size_t errlen)
{
	const struct cli_opt	*o;
	char			*name, *value, *end, q[ZP_ESCLEN];

	for (name = line; isblank((unsigned char)*name); name++)
		;
	if (*name == '\0' || *name == '#')
		return 0;
	for (value = name; *value != '\0' && !isblank((unsigned char)*value);
	    value++)
		;
	if (*value != '\0')
		*value++ = '\0';
	while (isblank((unsigned char)*value))
		value++;
	for (end = value + strlen(value); end > value &&
	    isblank((unsigned char)end[-1]); end--)
		;
	*end = '\0';
	if ((o = cli_find_name(name)) == NULL) {
		zp_seterr(err, errlen, "unknown option '%s'",
		    zp_escape(name, q, sizeof(q)));
		return -1;
	}
	if (o->kind == CLI_EXIT || o->val == 'f' || o->val == OPT_CHECK) {
		zp_seterr(err, errlen, "'%s' belongs on the command line, not "
		    "in a configuration file", o->name);
		return -1;
	}
	if (cli_has_value(o) && *value == '\0') {
		zp_seterr(err, errlen, "option '%s' needs a value", o->name);
		return -1;
	}
	if (!cli_has_value(o) && o->kind != CLI_FLAG_WORD && *value != '\0') {
		zp_seterr(err, errlen, "option '%s' takes no value", o->name);
		return -1;
	}
	if (skip[o - cli_opts])
		return 0;	/* the command line's replaces it */
	if (cli_item_add(cfg, o->name, cli_has_value(o) ||
	    (o->kind == CLI_FLAG_WORD && *value != '\0') ? value : NULL) ==
	    -1) {
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	/* given[] keeps the item's copy, which lives as long as cfg. */
	value = cfg->items[cfg->nitems - 1].value;
	if (cli_check_once(o, value, given, err, errlen) == -1 ||
	    cli_opt_set(cfg, o, value, err, errlen) == -1)
		return -1;
	return 0;
}

/*
 * The next line of f into buf (CLI_LINE_MAX + 1 bytes), its newline (and
 * a CR before it) gone: 1; 0 at the end; -1 with why filled for a line
 * too long or holding a NUL byte or another control character but a tab.
 * Never more than a line is held: a file like /dev/zero is refused, not
 * read into memory.
 */
static int
file_next(FILE *f, char *buf, char *why, size_t whylen)
{
	size_t	len = 0, i;
	int	c;

	while ((c = getc(f)) != EOF && c != '\n') {
		if (c == '\0') {
			zp_seterr(why, whylen, "a NUL byte");
			return -1;
		}
		if (len == CLI_LINE_MAX) {
			zp_seterr(why, whylen, "a line longer than %d bytes",
			    CLI_LINE_MAX);
			return -1;
		}
		buf[len++] = (char)c;
	}
	if (c == EOF && len == 0)
		return 0;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	buf[len] = '\0';
	/*
	 * No option's value holds one, and one would not survive what
	 * --check prints (a CR before its newline is a line's end).
	 */
	for (i = 0; i < len; i++)
		if (iscntrl((unsigned char)buf[i]) && buf[i] != '\t') {
			zp_seterr(why, whylen, "a control character (0x%02x)",
			    (unsigned char)buf[i]);
			return -1;
		}
	return 1;
}

int
cli_file_read(struct zp_config *cfg, const char *path,
    const unsigned char *skip, const char **given, char *err, size_t errlen)
{
	FILE	*f;
	char	 buf[CLI_LINE_MAX + 1], why[ZP_ERRLEN];
	long	 n = 0;
	int	 rc = 0, more;

	if ((f = fopen(path, "r")) == NULL) {
		zp_seterr(err, errlen, "-f %s: %s", path, strerror(errno));
		return -1;
	}
	while (rc == 0) {
		n++;
		if ((more = file_next(f, buf, why, sizeof(why))) == 0)
			break;
		if (more == 1 && file_line(cfg, buf, skip, given, why,
		    sizeof(why)) == 0)
			continue;
		zp_seterr(err, errlen, "%s:%ld: %s", path, n, why);
		rc = -1;
	}
	if (rc == 0 && ferror(f)) {
		zp_seterr(err, errlen, "-f %s: %s", path, strerror(errno));
		rc = -1;
	}
	fclose(f);
	return rc;
}

void
zp_config_print(FILE *fp, const struct zp_config *cfg)
{
	size_t	i;

	fprintf(fp, "# zproxy %s: the options as read%s%s\n", PACKAGE_VERSION,
	    cfg->config_file != NULL ? " from " : "",
	    cfg->config_file != NULL ? cfg->config_file : "");
	fprintf(fp, "# (and from the command line); zproxy -f THIS_FILE "
	    "reads them back\n");
	for (i = 0; i < cfg->nitems; i++)
		if (cfg->items[i].value != NULL)
			fprintf(fp, "%s %s\n", cfg->items[i].name,
			    cfg->items[i].value);
		else
			fprintf(fp, "%s\n", cfg->items[i].name);
}
