/*
 * privs.h - becoming --user after start-up: the groups, the ids and the
 * capabilities a root-started zproxy no longer needs once its sockets
 * and its log are open.
 */
#ifndef ZP_PRIVS_H
#define ZP_PRIVS_H

#include <sys/types.h>
#include <stddef.h>

/* Whom to become, looked up before anything is opened. */
struct zp_privs {
	int	 change;	/* 0: no --user: keep the ids */
	int	 keep_transparent; /* --source client: keep CAP_NET_RAW/ADMIN */
	uid_t	 uid;
	gid_t	 gid;
	char	 user[64];	/* for the start-up line */
	char	 group[64];
};

/*
 * Look up --user and --group (a NULL user: nothing to do). Returns 0; or
 * ZP_EX_NOUSER when a name is unknown, ZP_EX_NOPERM when a process that
 * is not root names someone it is not, with err filled.
 */
int	zp_privs_lookup(struct zp_privs *, const char *user,
	    const char *group, char *err, size_t errlen);

/*
 * Become pv's user and group for good (setgroups, setresgid, setresuid,
 * each checked, and a failing setuid(0) to prove there is no way back),
 * set PR_SET_NO_NEW_PRIVS, and keep none of the capabilities, but for
 * keep_transparent: CAP_NET_RAW (or CAP_NET_ADMIN when that is what this
 * process has), permitted and effective, for IP_TRANSPARENT on every
 * upstream socket of --source client. Returns 0, or -1 with err filled:
 * the caller must stop, since it would run with more than it asked.
 */
int	zp_privs_drop(const struct zp_privs *, char *err, size_t errlen);

#endif
