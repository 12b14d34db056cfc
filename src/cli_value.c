/*
 * cli_value.c - one option's value into its field of struct zp_config:
 * ranges, sizes, seconds, words, and the options with a reader of their
 * own (addresses, lists, paths). config.c's parsers do the reading.
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_int.h"
#include "core/config.h"
#include "lib/log.h"
#include "core/upstream.h"

/* A size option: the message names the option as well as the value. */
static int
parse_size_opt(const char *name, const char *s, size_t *out, char *err,
    size_t errlen)
{
	char	why[ZP_ERRLEN];

	if (zp_parse_size(s, out, why, sizeof(why)) == 0)
		return 0;
	zp_seterr(err, errlen, "--%s: %s", name, why);
	return -1;
}

/*
 * Parse an integer option value from min to max (min >= 0); the message
 * states that range.
 */
static int
parse_range(const char *name, const char *s, long min, long max, long *out,
    char *err, size_t errlen)
{
	long	 v;
	char	*end, q[ZP_ESCLEN];

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || !isdigit((unsigned char)*s) || *end != '\0' ||
	    errno != 0 || v < min || v > max) {
		zp_seterr(err, errlen,
		    "invalid %s '%s': expected %ld-%ld", name,
		    zp_escape(s, q, sizeof(q)), min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/* --listen: one more listening socket, at most ZP_MAX_LISTENS. */
int
cli_opt_listen(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	if (cfg->nlistens == ZP_MAX_LISTENS) {
		zp_seterr(err, errlen, "too many --listen: at most %d",
		    ZP_MAX_LISTENS);
		return -1;
	}
	if (zp_parse_listen_arg(s, &cfg->listens[cfg->nlistens], err,
	    errlen) == -1)
		return -1;
	cfg->nlistens++;
	return 0;
}

/*
 * The options after -u HOST:PORT, comma-separated: "weight=N" (0 to
 * ZP_WEIGHT_MAX) and "backup". Returns 0, or -1 with err naming the
 * option that is wrong.
 */
static int
upstream_opts(struct zp_upstream_spec *up, const char *arg, char *opts,
    char *err, size_t errlen)
{
	char	*o, *end;
	long	 w;

	for (o = strtok_r(opts, ",", &end); o != NULL;
	    o = strtok_r(NULL, ",", &end)) {
		if (strcmp(o, "backup") == 0)
			up->backup = 1;
		else if (strncmp(o, "weight=", 7) == 0) {
			char	*e;

			errno = 0;
			w = strtol(o + 7, &e, 10);
			if (o[7] == '\0' || *e != '\0' || errno != 0 || w < 0 ||
			    w > ZP_WEIGHT_MAX) {
				zp_seterr(err, errlen, "--upstream %s: weight "
				    "must be a whole number from 0 to %d, not "
				    "'%s'", arg, ZP_WEIGHT_MAX, o + 7);
				return -1;
			}
			up->weight = (int)w;
			up->has_weight = 1;
		} else {
			zp_seterr(err, errlen, "--upstream %s: unknown option "
			    "'%s' (weight=N or backup)", arg, o);
			return -1;
		}
	}
	return 0;
}

/* --upstream: one more upstream, HOST:PORT or "original". */
int
cli_opt_upstream(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	struct zp_upstream_spec	*up;
	char			*addr, *opts;
	int			 rc;

	(void)o;
	if (cfg->nupstreams == ZP_MAX_UPSTREAMS) {
		zp_seterr(err, errlen, "too many --upstream: at most %d",
		    ZP_MAX_UPSTREAMS);
		return -1;
	}
	up = &cfg->upstreams[cfg->nupstreams];
	memset(up, 0, sizeof(*up));
	if ((addr = strdup(s)) == NULL) {
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	/* HOST:PORT[,weight=N][,backup]: nothing of HOST:PORT has a comma. */
	if ((opts = strchr(addr, ',')) != NULL)
		*opts++ = '\0';
	if (opts != NULL && upstream_opts(up, s, opts, err, errlen) == -1) {
		free(addr);
		return -1;
	}
	/*
	 * "original": each connection's own destination, as --tproxy or a
	 * redirect rule left it; no address here.
	 */
	if (strcmp(addr, "original") == 0) {
		up->host = addr;
		up->original = 1;
		cfg->original = 1;
		cfg->nupstreams++;
		return 0;
	}
	/*
	 * HAProxy's prefixes: datagrams to it, as datagrams; or the stream
	 * over TLS.
	 */
	if (strncmp(addr, "udp@", 4) == 0)
		up->udp = 1;
	else if (strncmp(addr, "tls@", 4) == 0)
		up->tls = 1;
	rc = zp_parse_hostport(addr + (up->udp || up->tls ? 4 : 0), &up->host,
	    up->port,
	    sizeof(up->port), err, errlen);
	free(addr);
	if (rc == -1)
		return -1;
	cfg->nupstreams++;
	return 0;
}

/* --spool-max BYTES: beyond 1G, unlike the other sizes. */
int
cli_opt_spool_max(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	char	why[ZP_ERRLEN];

	if (zp_parse_bytes(s, &cfg->spool_max, ZP_SPOOL_MAX_LIMIT, "16T",
	    why, sizeof(why)) == 0)
		return 0;
	zp_seterr(err, errlen, "--%s: %s", o->name, why);
	return -1;
}

/*
 * --mirror [tls@]HOST:PORT: one more collector that gets a copy; tls@,
 * as -u takes it: over TLS, checked as tls@ upstreams are.
 */
int
cli_opt_mirror(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	struct zp_mirror_spec	*m;
	char			 e[ZP_ERRLEN];

	(void)o;
	if (cfg->nmirrors == ZP_MAX_MIRRORS) {
		zp_seterr(err, errlen, "too many --mirror: at most %d",
		    ZP_MAX_MIRRORS);
		return -1;
	}
	m = &cfg->mirrors[cfg->nmirrors];
	m->to.tls = strncmp(s, "tls@", 4) == 0;
	if (zp_parse_hostport(s + (m->to.tls ? 4 : 0), &m->to.host, m->to.port,
	    sizeof(m->to.port), e, sizeof(e)) == -1) {
		m->to.tls = 0;
		zp_seterr(err, errlen, "--mirror: %s", e);
		return -1;
	}
	if ((m->arg = strdup(s)) == NULL) {
		free(m->to.host);
		m->to.host = NULL;
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	cfg->nmirrors++;
	return 0;
}

/* --stats [ADDR]:PORT. */
int
cli_opt_stats(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	if (zp_parse_listen(s, &cfg->stats, err, errlen) == -1)
		return -1;
	cfg->have_stats = 1;
	return 0;
}

/* --dns-server ADDR:PORT: an address, not a wildcard. */
int
cli_opt_dns_server(struct zp_config *cfg, const struct cli_opt *o,
    const char *s, char *err, size_t errlen)
{
	char	q[ZP_ESCLEN];

	(void)o;
	if (zp_parse_listen(s, &cfg->dns_server, err, errlen) == -1)
		return -1;
	if (cfg->dns_server.any) {
		zp_seterr(err, errlen, "invalid dns-server '%s': expected "
		    "ADDR:PORT", zp_escape(s, q, sizeof(q)));
		return -1;
	}
	cfg->have_dns_server = 1;
	return 0;
}

/* --allow, --deny, --proxy-from: one more CIDR rule in the option's list. */
int
cli_opt_acl(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;

	return zp_acl_add(field, o->name, s, err, errlen);
}

/* --allow-dst: one more destination -u original may go to. */
int
cli_opt_allow_dst(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	return zp_dstacl_add(&cfg->allow_dst, o->name, s, err, errlen);
}

/* --source client|ADDR. */
int
cli_opt_source(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	return zp_parse_source(s, &cfg->source, &cfg->source_addr, err,
	    errlen);
}

/*
 * --control, --takeover: a Unix socket's path. The control socket is
 * made at PATH.tmp.PID and renamed over PATH, so that name must fit
 * sun_path too.
 */
static int
parse_control_path(const char *opt, const char *s, char **out, char *err,
    size_t errlen)
{
	char	q[ZP_ESCLEN];

	if (*s == '\0' || strlen(s) > ZP_CONTROL_PATH_MAX) {
		zp_seterr(err, errlen, "invalid --%s path '%s': 1 to %d "
		    "characters", opt, zp_escape(s, q, sizeof(q)),
		    ZP_CONTROL_PATH_MAX);
		return -1;
	}
	free(*out);
	if ((*out = strdup(s)) == NULL) {
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* --control, --takeover: a path; see parse_control_path(). */
int
cli_opt_control(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;

	return parse_control_path(o->name, s, field, err, errlen);
}

int
cli_word_mode(const char *s)
{
	if (strcmp(s, "splice") == 0)
		return ZP_MODE_SPLICE;
	if (strcmp(s, "copy") == 0)
		return ZP_MODE_COPY;
	return -1;
}

int
cli_word_log_format(const char *s)
{
	if (strcmp(s, "text") == 0)
		return ZP_LOG_TEXT;
	if (strcmp(s, "json") == 0)
		return ZP_LOG_JSON;
	return -1;
}

int
cli_word_send_proxy(const char *s)
{
	if (strcmp(s, "v1") == 0)
		return 1;
	if (strcmp(s, "v2") == 0)
		return 2;
	return -1;
}

/* A CLI_SIZE value: "0" when o->min is 0; at most o->max (not 0). */
static int
opt_size(const struct cli_opt *o, const char *s, size_t *out, char *err,
    size_t errlen)
{
	char	q[ZP_ESCLEN];

	if (o->min == 0 && strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	if (parse_size_opt(o->name, s, out, err, errlen) == -1)
		return -1;
	if (o->max > 0 && *out > (size_t)o->max) {
		zp_seterr(err, errlen, "--%s %s is over the most, %s", o->name,
		    zp_escape(s, q, sizeof(q)), o->what);
		return -1;
	}
	return 0;
}

/* Read one option's value into its field, as its entry says. */
int
cli_opt_set(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;
	char	 q[ZP_ESCLEN];
	long	 v;
	int	 w;
	size_t	 n;

	switch (o->kind) {
	case CLI_FLAG:
		*(int *)field = 1;
		return 0;
	case CLI_FLAG_WORD:
		if (s == NULL || *s == '\0') {
			*(int *)field = (int)o->min;
			return 0;
		}
		if ((w = o->word(s)) == -1) {
			zp_seterr(err, errlen, "invalid %s '%s': expected %s",
			    o->name, zp_escape(s, q, sizeof(q)), o->what);
			return -1;
		}
		*(int *)field = w;
		return 0;
	case CLI_MORE:
		(*(int *)field)++;
		return 0;
	case CLI_INT:
	case CLI_LONG:
		if (parse_range(o->name, s, o->min, o->max, &v, err,
		    errlen) == -1)
			return -1;
		if (o->kind == CLI_INT)
			*(int *)field = (int)v;
		else
			*(long *)field = v;
		return 0;
	case CLI_SECONDS_OFF:
		if (strcmp(s, "off") == 0) {
			*(double *)field = 0;
			return 0;
		}
		if (zp_parse_seconds(o->name, s, field, err, errlen) == -1) {
			n = strlen(err);
			snprintf(err + n, errlen - n, ", or off");
			return -1;
		}
		return 0;
	case CLI_SECONDS:
		return zp_parse_seconds(o->name, s, field, err, errlen);
	case CLI_SIZE:
		return opt_size(o, s, field, err, errlen);
	case CLI_WORD:
		if ((w = o->word(s)) == -1) {
			zp_seterr(err, errlen, "invalid %s '%s': expected %s",
			    o->name, zp_escape(s, q, sizeof(q)), o->what);
			return -1;
		}
		*(int *)field = w;
		return 0;
	case CLI_STRING:
		if (*s == '\0') {
			zp_seterr(err, errlen, "invalid %s: empty %s", o->name,
			    o->what);
			return -1;
		}
		free(*(char **)field);
		if ((*(char **)field = strdup(s)) == NULL) {
			zp_seterr(err, errlen, "out of memory");
			return -1;
		}
		return 0;
	case CLI_CALL:
		return o->call(cfg, o, s, err, errlen);
	case CLI_EXIT:
		break;
	}
	return 0;
}
