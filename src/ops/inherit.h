/*
 * inherit.h - listening sockets zproxy did not bind itself: those
 * systemd passed ($LISTEN_FDS, socket activation) or those a running
 * zproxy handed over (--takeover). Each has a label, the -l it answers:
 * "systemd:NAME" for systemd's (NAME from $LISTEN_FDNAMES), and the old
 * process's own -l ("systemd:web", ":9000", "[::1]:9000") for a
 * takeover. Each -l then takes the sockets whose label it answers.
 */
#ifndef ZP_INHERIT_H
#define ZP_INHERIT_H

#include <stddef.h>
#include <sys/types.h>

#include "core/config.h"

/* A socket and what it answers; at most this many (SCM_RIGHTS: 253). */
#define ZP_INHERIT_MAX		ZP_MAX_LISTEN_SOCKETS
#define ZP_INHERIT_LABELLEN	(ZP_FDNAME_MAX + 16)

struct zp_inherited {
	int	fd;
	char	label[ZP_INHERIT_LABELLEN];
	int	stats;		/* --stats's socket (a takeover), not a -l's */
	int	taken;
};

struct zp_inherit {
	struct zp_inherited	socks[ZP_INHERIT_MAX];
	size_t			n;
	int			first_fd;	/* systemd: fd of socks[0] */
};

/*
 * Read what systemd passed: LISTEN_PID (must be this process), LISTEN_FDS
 * (descriptors from 3 on), LISTEN_FDNAMES (':'-separated, optional), as
 * the strings given (NULL: unset). Fills set with labels "systemd:NAME"
 * ("systemd:" alone when no names came). Returns 0; -1 with err filled
 * when they are absent, meant for another process, or malformed. Opens
 * nothing: the descriptors are simply there.
 */
int	zp_inherit_parse_env(struct zp_inherit *, const char *pid,
	    const char *fds, const char *names, pid_t self, char *, size_t);

/*
 * The descriptors this -l takes, into fds (at most max): for "systemd"
 * every systemd socket no named -l of cfg claims; for "systemd:NAME"
 * those named NAME; for a takeover (takeover != 0) those whose label is
 * the -l as written. Marks them taken. Returns how many.
 */
size_t	zp_inherit_take(struct zp_inherit *, const struct zp_config *,
	    const struct zp_listen_spec *, int takeover, int *fds, size_t max);

/*
 * A takeover's --stats socket, if the old zproxy served stats on the
 * very spec this one asks for (label: zp_listen_spec_str): its fd, taken;
 * else -1 (bind anew; the old one closes its own at the handover).
 */
int	zp_inherit_take_stats(struct zp_inherit *, const char *label);

/*
 * The first socket nobody took, or NULL: after every -l took its share,
 * a takeover refuses to start (the old zproxy listens on more), and
 * systemd's extra sockets are closed with a warning.
 */
const struct zp_inherited *zp_inherit_left(const struct zp_inherit *);

/* Close every socket not taken. */
void	zp_inherit_close_rest(struct zp_inherit *);

#endif
