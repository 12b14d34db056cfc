/*
 * privs.c - give up root after start-up.
 *
 * Only binding a port below 1024 (and opening a log file in a root-owned
 * directory) needs root, and both happen before the loop starts: from
 * then on a relay that a bug let someone take over should be worth as
 * little as the nobody user. The order is the usual one (OpenBSD's
 * relayd, HAProxy): supplementary groups first, then the group, then the
 * user, each checked, since a failing setuid(2) that is ignored leaves
 * root in place.
 */

#include <sys/prctl.h>
#include <sys/capability.h>
#include <sys/types.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "lib/log.h"
#include "ops/privs.h"

/* Look up --user and --group. */
int
zp_privs_lookup(struct zp_privs *pv, const char *user, const char *group,
    char *err, size_t errlen)
{
	struct passwd	*pw;
	struct group	*gr;
	char		 q[ZP_ESCLEN];

	memset(pv, 0, sizeof(*pv));
	if (user == NULL)
		return 0;
	errno = 0;
	if ((pw = getpwnam(user)) == NULL) {
		snprintf(err, errlen, "unknown user '%s'%s%s",
		    zp_escape(user, q, sizeof(q)), errno != 0 ? ": " : "",
		    errno != 0 ? strerror(errno) : "");
		return ZP_EX_NOUSER;
	}
	pv->uid = pw->pw_uid;
	pv->gid = pw->pw_gid;
	snprintf(pv->user, sizeof(pv->user), "%s", pw->pw_name);
	if (group != NULL) {
		errno = 0;
		if ((gr = getgrnam(group)) == NULL) {
			snprintf(err, errlen, "unknown group '%s'%s%s",
			    zp_escape(group, q, sizeof(q)), errno != 0 ?
			    ": " : "", errno != 0 ? strerror(errno) : "");
			return ZP_EX_NOUSER;
		}
		pv->gid = gr->gr_gid;
		snprintf(pv->group, sizeof(pv->group), "%s", gr->gr_name);
	} else if ((gr = getgrgid(pv->gid)) != NULL)
		snprintf(pv->group, sizeof(pv->group), "%s", gr->gr_name);
	else
		snprintf(pv->group, sizeof(pv->group), "%lu",
		    (unsigned long)pv->gid);
	/*
	 * Without root only the ids already held can be had: naming them is
	 * fine (a unit file shared by root and user instances), anything
	 * else would fail later at setuid(2) with a vaguer message.
	 */
	if (geteuid() != 0 && (pv->uid != getuid() || pv->uid != geteuid() ||
	    pv->gid != getgid() || pv->gid != getegid())) {
		snprintf(err, errlen, "--user %s%s%s needs root: this process "
		    "runs as uid %lu gid %lu", pv->user, group != NULL ?
		    " --group " : "", group != NULL ? pv->group : "",
		    (unsigned long)geteuid(), (unsigned long)getegid());
		return ZP_EX_NOPERM;
	}
	pv->change = 1;
	return 0;
}

/*
 * The capability --source client needs for IP_TRANSPARENT: CAP_NET_RAW
 * (enough since Linux 3.2, and the narrower: the sandbox refuses the raw
 * sockets it would allow), else CAP_NET_ADMIN, whichever is permitted
 * now; -1 if neither is (the start-up check has said so already).
 */
static cap_value_t
cap_transparent(void)
{
	static const cap_value_t	 want[] = { CAP_NET_RAW, CAP_NET_ADMIN };
	cap_flag_value_t		 v;
	cap_t				 cur;
	cap_value_t			 c = -1;
	size_t				 i;

	if ((cur = cap_get_proc()) == NULL)
		return -1;
	for (i = 0; c == -1 && i < sizeof(want) / sizeof(want[0]); i++)
		if (cap_get_flag(cur, want[i], CAP_PERMITTED, &v) == 0 &&
		    v == CAP_SET)
			c = want[i];
	cap_free(cur);
	return c;
}

/*
 * Empty the capability sets: effective, permitted, inheritable and
 * ambient; all but keep (-1: none), which stays permitted and effective
 * (PR_SET_KEEPCAPS kept it permitted across the setuid).
 */
static int
caps_clear(cap_value_t keep, char *err, size_t errlen)
{
	cap_t	caps;
	int	rc;

	if ((caps = cap_init()) == NULL) {
		snprintf(err, errlen, "cap_init: %s", strerror(errno));
		return -1;
	}
	if (keep != -1 && (cap_set_flag(caps, CAP_PERMITTED, 1, &keep,
	    CAP_SET) == -1 || cap_set_flag(caps, CAP_EFFECTIVE, 1, &keep,
	    CAP_SET) == -1)) {
		snprintf(err, errlen, "cap_set_flag: %s", strerror(errno));
		cap_free(caps);
		return -1;
	}
	rc = cap_set_proc(caps);
	if (rc == -1)
		snprintf(err, errlen, "cannot drop capabilities: %s",
		    strerror(errno));
	cap_free(caps);
	if (rc == 0 && CAP_AMBIENT_SUPPORTED() && cap_reset_ambient() == -1) {
		snprintf(err, errlen, "cannot clear ambient capabilities: %s",
		    strerror(errno));
		rc = -1;
	}
	return rc;
}

/* Check that the ids are pv's, all three of each, and no way back. */
static int
ids_verify(const struct zp_privs *pv, char *err, size_t errlen)
{
	uid_t	ru, eu, su;
	gid_t	rg, eg, sg, groups[2];
	int	n;

	if (getresuid(&ru, &eu, &su) == -1 || getresgid(&rg, &eg, &sg) == -1 ||
	    (n = getgroups(2, groups)) == -1) {
		snprintf(err, errlen, "cannot read back the ids: %s",
		    strerror(errno));
		return -1;
	}
	if (ru != pv->uid || eu != pv->uid || su != pv->uid ||
	    rg != pv->gid || eg != pv->gid || sg != pv->gid ||
	    (n == 1 && groups[0] != pv->gid) || n > 1) {
		snprintf(err, errlen, "the ids did not change as asked: uid "
		    "%lu/%lu/%lu gid %lu/%lu/%lu, %d groups", (unsigned long)ru,
		    (unsigned long)eu, (unsigned long)su, (unsigned long)rg,
		    (unsigned long)eg, (unsigned long)sg, n);
		return -1;
	}
	if (pv->uid != 0 && setuid(0) != -1) {
		snprintf(err, errlen, "setuid(0) still works after becoming "
		    "uid %lu", (unsigned long)pv->uid);
		return -1;
	}
	return 0;
}

/* Become pv's user for good. */
int
zp_privs_drop(const struct zp_privs *pv, char *err, size_t errlen)
{
	cap_value_t	c, keep = -1;

	if (!pv->change)
		return 0;
	if (pv->keep_transparent && (keep = cap_transparent()) == -1) {
		snprintf(err, errlen, "--source client needs CAP_NET_ADMIN or "
		    "CAP_NET_RAW, and this process has neither");
		return -1;
	}
	if (geteuid() == 0) {
		/*
		 * The bounding set too, while CAP_SETPCAP is ours: nothing
		 * this process could ever exec regains a capability. A
		 * container without CAP_SETPCAP keeps its bounding set; the
		 * sets that count are emptied below in any case.
		 */
		if (CAP_IS_SUPPORTED(CAP_SETPCAP))
			for (c = 0; c <= CAP_LAST_CAP; c++)
				if (CAP_IS_SUPPORTED(c) && cap_get_bound(c) == 1)
					(void)cap_drop_bound(c);
		if (setgroups(1, &pv->gid) == -1) {
			snprintf(err, errlen, "setgroups(%lu): %s",
			    (unsigned long)pv->gid, strerror(errno));
			return -1;
		}
		if (setresgid(pv->gid, pv->gid, pv->gid) == -1) {
			snprintf(err, errlen, "setresgid(%lu): %s",
			    (unsigned long)pv->gid, strerror(errno));
			return -1;
		}
		/* Without it the setuid empties the permitted set. */
		if (keep != -1 && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == -1) {
			snprintf(err, errlen, "PR_SET_KEEPCAPS: %s",
			    strerror(errno));
			return -1;
		}
		if (setresuid(pv->uid, pv->uid, pv->uid) == -1) {
			snprintf(err, errlen, "setresuid(%lu): %s",
			    (unsigned long)pv->uid, strerror(errno));
			return -1;
		}
		if (keep != -1)
			(void)prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
		if (ids_verify(pv, err, errlen) == -1)
			return -1;
	}
#if defined(__SANITIZE_ADDRESS__) || defined(ZP_SANITIZERS)
	/*
	 * LeakSanitizer stops the world from a tracer that is a process of
	 * its own: it may ptrace us only while we are dumpable, which the
	 * change of ids just undid. Sanitizer builds only; a release build
	 * stays undumpable, so that others of this user cannot attach.
	 */
	(void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
#endif
	if (caps_clear(keep, err, errlen) == -1)
		return -1;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == -1) {
		snprintf(err, errlen, "PR_SET_NO_NEW_PRIVS: %s",
		    strerror(errno));
		return -1;
	}
	return 0;
}
