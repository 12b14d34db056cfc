/*
 * inherit.c - listening sockets from systemd or a zproxy taken over.
 * See inherit.h. sd_listen_fds_with_names(3) documents the environment;
 * this reads it the same way without libsystemd.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ops/inherit.h"
#include "lib/log.h"

/* sd_listen_fds(3): the first passed descriptor. */
#define ZP_LISTEN_FDS_START	3

/* A decimal number without sign or junk, in [1, max]. */
static int
env_number(const char *s, unsigned long max, unsigned long *v)
{
	char	*end;

	if (s == NULL || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	*v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || *v == 0 || *v > max)
		return -1;
	return 0;
}

int
zp_inherit_parse_env(struct zp_inherit *set, const char *pid,
    const char *fds, const char *names, pid_t self, char *err, size_t errlen)
{
	unsigned long	 p, n, i;
	const char	*s, *colon;
	size_t		 len, k;
	char		 q[ZP_ESCLEN];

	memset(set, 0, sizeof(*set));
	set->first_fd = ZP_LISTEN_FDS_START;
	if (fds == NULL) {
		zp_seterr(err, errlen, "-l systemd: no sockets were passed "
		    "($LISTEN_FDS is unset: start zproxy from a socket unit, "
		    "or systemd-socket-activate)");
		return -1;
	}
	if (pid == NULL || env_number(pid, (unsigned long)INT32_MAX, &p) == -1) {
		zp_seterr(err, errlen, "-l systemd: $LISTEN_PID is %s",
		    pid == NULL ? "unset" : "not a process id");
		return -1;
	}
	if (p != (unsigned long)self) {
		zp_seterr(err, errlen, "-l systemd: the sockets were passed "
		    "to process %lu ($LISTEN_PID), not to this one (%ld)",
		    p, (long)self);
		return -1;
	}
	if (env_number(fds, ZP_INHERIT_MAX, &n) == -1) {
		zp_seterr(err, errlen, "-l systemd: $LISTEN_FDS '%s' is not "
		    "a number from 1 to %d", zp_escape(fds, q, sizeof(q)),
		    ZP_INHERIT_MAX);
		return -1;
	}
	s = names;
	for (i = 0; i < n; i++) {
		set->socks[i].fd = (int)(ZP_LISTEN_FDS_START + i);
		if (s == NULL) {
			snprintf(set->socks[i].label, ZP_INHERIT_LABELLEN,
			    "systemd:");
			continue;
		}
		colon = strchr(s, ':');
		len = colon != NULL ? (size_t)(colon - s) : strlen(s);
		if (len > ZP_FDNAME_MAX) {
			zp_seterr(err, errlen, "-l systemd: a name in "
			    "$LISTEN_FDNAMES is longer than %d characters",
			    ZP_FDNAME_MAX);
			return -1;
		}
		/* systemd's own rule (fdname_is_valid): no control character. */
		for (k = 0; k < len; k++)
			if ((unsigned char)s[k] < 0x20 ||
			    (unsigned char)s[k] > 0x7e) {
				zp_seterr(err, errlen, "-l systemd: a name in "
				    "$LISTEN_FDNAMES has a control character");
				return -1;
			}
		snprintf(set->socks[i].label, ZP_INHERIT_LABELLEN,
		    "systemd:%.*s", (int)len, s);
		if (colon == NULL && i + 1 < n) {
			zp_seterr(err, errlen, "-l systemd: $LISTEN_FDNAMES "
			    "names %lu sockets, $LISTEN_FDS says %lu", i + 1,
			    n);
			return -1;
		}
		s = colon != NULL ? colon + 1 : NULL;
	}
	if (names != NULL && s != NULL) {
		zp_seterr(err, errlen, "-l systemd: $LISTEN_FDNAMES names more "
		    "sockets than $LISTEN_FDS (%lu)", n);
		return -1;
	}
	set->n = n;
	return 0;
}

/* Does some -l of cfg name this systemd socket? */
static int
named_by_some(const struct zp_config *cfg, const char *label)
{
	char	buf[ZP_INHERIT_LABELLEN];
	size_t	i;

	for (i = 0; i < cfg->nlistens; i++)
		if (cfg->listens[i].systemd && cfg->listens[i].name[0] &&
		    strcmp(zp_listen_spec_str(&cfg->listens[i], buf,
		    sizeof(buf)), label) == 0)
			return 1;
	return 0;
}

size_t
zp_inherit_take(struct zp_inherit *set, const struct zp_config *cfg,
    const struct zp_listen_spec *spec, int takeover, int *fds, size_t max)
{
	char	want[ZP_INHERIT_LABELLEN];
	size_t	i, n = 0;
	int	match;

	zp_listen_spec_str(spec, want, sizeof(want));
	for (i = 0; i < set->n && n < max; i++) {
		if (set->socks[i].taken || set->socks[i].stats)
			continue;
		if (takeover)
			match = strcmp(set->socks[i].label, want) == 0;
		else if (spec->name[0] != '\0')
			match = strcmp(set->socks[i].label, want) == 0;
		else
			match = !named_by_some(cfg, set->socks[i].label);
		if (!match)
			continue;
		set->socks[i].taken = 1;
		fds[n++] = set->socks[i].fd;
	}
	return n;
}

int
zp_inherit_take_stats(struct zp_inherit *set, const char *label)
{
	size_t	i;

	for (i = 0; i < set->n; i++)
		if (set->socks[i].stats && !set->socks[i].taken &&
		    strcmp(set->socks[i].label, label) == 0) {
			set->socks[i].taken = 1;
			return set->socks[i].fd;
		}
	return -1;
}

/* A stats socket nobody wants is simply closed: it is not a -l. */
const struct zp_inherited *
zp_inherit_left(const struct zp_inherit *set)
{
	size_t	i;

	for (i = 0; i < set->n; i++)
		if (!set->socks[i].taken && !set->socks[i].stats)
			return &set->socks[i];
	return NULL;
}

void
zp_inherit_close_rest(struct zp_inherit *set)
{
	size_t	i;

	for (i = 0; i < set->n; i++)
		if (!set->socks[i].taken && set->socks[i].fd != -1) {
			close(set->socks[i].fd);
			set->socks[i].fd = -1;
			set->socks[i].taken = 1;
		}
}
