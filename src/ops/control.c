/*
 * control.c - handing the listening sockets over to a new zproxy, and
 * taking them. See control.h.
 */

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/event.h>

#include "core/config.h"
#include "ops/control.h"
#include "lib/log.h"

struct zp_control {
	struct event_base		*base;
	struct zp_log			*log;
	const struct zp_control_ops	*ops;
	void				*arg;
	char				 path[ZP_CONTROL_PATH_MAX + 1];
	dev_t				 dev;	/* PATH's inode, while ours */
	ino_t				 ino;
	int				 fd;
	struct event			*ev;
	/* the takeover under way, one at a time */
	int				 conn;
	long				 pid;
	int				 offered;
	struct event			*conn_ev;
	struct event			*timer;
};

/* Room for the descriptors of an offer, aligned as a cmsghdr must be. */
union control_cmsg {
	struct cmsghdr	hdr;
	char		buf[CMSG_SPACE(sizeof(int) * ZP_INHERIT_MAX)];
};

/* A Unix address for path; -1 when it does not fit. */
static int
control_sun(const char *path, struct sockaddr_un *sun)
{
	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sun->sun_path))
		return -1;
	strcpy(sun->sun_path, path);
	return 0;
}

/* End the takeover under way (not the control). */
static void
control_hangup(struct zp_control *c)
{
	if (c->conn_ev != NULL)
		event_free(c->conn_ev);
	if (c->timer != NULL)
		event_free(c->timer);
	if (c->conn != -1)
		close(c->conn);
	c->conn_ev = c->timer = NULL;
	c->conn = -1;
	c->offered = 0;
}

/* The takeover failed: say why, serve on. */
static void
control_abort(struct zp_control *c, const char *why)
{
	long	pid = c->pid;

	control_hangup(c);
	c->ops->abort(c->arg, pid, why);
}

static void
control_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	control_abort(arg, "no answer in time");
}

/* Send the offer: the sockets and a line for each. */
static int
control_offer(struct zp_control *c, char *why, size_t whylen)
{
	struct zp_inherit	 set;
	unsigned long long	 wd = 0;
	char			 text[ZP_OFFER_MAX];
	union control_cmsg	 cm;
	struct msghdr		 msg;
	struct iovec		 iov;
	struct cmsghdr		*h;
	size_t			 i, off;
	ssize_t			 r;

	memset(&set, 0, sizeof(set));
	c->ops->offer(c->arg, &set, &wd);
	off = (size_t)snprintf(text, sizeof(text), "%spid %ld\nwatchdog %llu\n",
	    ZP_CONTROL_REQUEST, (long)getpid(), wd);
	for (i = 0; i < set.n && off < sizeof(text); i++)
		off += (size_t)snprintf(text + off, sizeof(text) - off,
		    "%s %s\n", set.socks[i].stats ? "stats" : "listen",
		    set.socks[i].label);
	if (off >= sizeof(text) || set.n == 0) {
		snprintf(why, whylen, set.n == 0 ? "nothing to hand over" :
		    "the offer does not fit");
		return -1;
	}
	memset(&msg, 0, sizeof(msg));
	memset(&cm, 0, sizeof(cm));
	iov.iov_base = text;
	iov.iov_len = off;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cm.buf;
	msg.msg_controllen = CMSG_SPACE(sizeof(int) * set.n);
	h = CMSG_FIRSTHDR(&msg);
	h->cmsg_level = SOL_SOCKET;
	h->cmsg_type = SCM_RIGHTS;
	h->cmsg_len = CMSG_LEN(sizeof(int) * set.n);
	for (i = 0; i < set.n; i++)
		memcpy(CMSG_DATA(h) + i * sizeof(int), &set.socks[i].fd,
		    sizeof(int));
	do {
		r = sendmsg(c->conn, &msg, MSG_NOSIGNAL);
	} while (r == -1 && errno == EINTR);
	if (r != (ssize_t)off) {
		snprintf(why, whylen, "sending the sockets: %s",
		    r == -1 ? strerror(errno) : "short send");
		return -1;
	}
	return 0;
}

/* The new process spoke (or hung up). */
static void
control_conn_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_control	*c = arg;
	char			 buf[64], why[160];
	ssize_t			 r;
	long			 pid;

	do {
		r = recv(c->conn, buf, sizeof(buf), MSG_DONTWAIT);
	} while (r == -1 && errno == EINTR);
	if (r == -1 && errno == EAGAIN)
		return;
	if (r <= 0) {
		control_abort(c, r == 0 ? "it hung up" : strerror(errno));
		return;
	}
	if (!c->offered) {
		if ((size_t)r != strlen(ZP_CONTROL_REQUEST) ||
		    memcmp(buf, ZP_CONTROL_REQUEST, (size_t)r) != 0) {
			control_abort(c, "not a takeover request");
			return;
		}
		c->ops->begin(c->arg, c->pid);
		if (control_offer(c, why, sizeof(why)) == -1) {
			control_abort(c, why);
			return;
		}
		c->offered = 1;
		return;
	}
	if ((size_t)r != strlen(ZP_CONTROL_DONE) ||
	    memcmp(buf, ZP_CONTROL_DONE, (size_t)r) != 0) {
		control_abort(c, "an unexpected message");
		return;
	}
	pid = c->pid;
	control_hangup(c);
	c->ops->done(c->arg, pid);	/* may free c */
}

static void
control_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct zp_control	*c = arg;
	struct ucred		 cred;
	socklen_t		 len = sizeof(cred);
	struct timeval		 tv = { ZP_CONTROL_TIMEOUT_SEC, 0 };
	int			 fd;

	fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1)
		return;		/* EAGAIN, or the next one will do */
	if (c->conn != -1) {
		/* One takeover at a time: the second asker is turned away. */
		zp_log(c->log, ZP_LOG_WARN, "control: a takeover is under way; "
		    "refusing another");
		close(fd);
		return;
	}
	c->pid = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
		c->pid = (long)cred.pid;
	c->conn = fd;
	c->conn_ev = event_new(c->base, fd, EV_READ | EV_PERSIST,
	    control_conn_cb, c);
	c->timer = evtimer_new(c->base, control_timer_cb, c);
	if (c->conn_ev == NULL || c->timer == NULL ||
	    event_add(c->conn_ev, NULL) == -1 ||
	    evtimer_add(c->timer, &tv) == -1) {
		zp_log(c->log, ZP_LOG_ERROR, "control: cannot create events");
		control_hangup(c);
	}
}

struct zp_control *
zp_control_new(struct event_base *base, struct zp_log *lg, const char *path,
    uid_t uid, gid_t gid, const struct zp_control_ops *ops, void *arg,
    char *err, size_t errlen)
{
	struct zp_control	*c;
	struct sockaddr_un	 sun;
	struct stat		 st;
	char			 tmp[sizeof(sun.sun_path)];
	mode_t			 mask;
	int			 saved, rc;

	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(err, errlen, "--control: %s", strerror(errno));
		return NULL;
	}
	c->base = base;
	c->log = lg;
	c->ops = ops;
	c->arg = arg;
	c->fd = c->conn = -1;
	snprintf(c->path, sizeof(c->path), "%s", path);
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path,
	    (long)getpid()) >= sizeof(tmp) || control_sun(tmp, &sun) == -1) {
		snprintf(err, errlen, "--control %s: path too long", path);
		errno = ENAMETOOLONG;
		goto fail;
	}
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0);
	if (c->fd == -1) {
		snprintf(err, errlen, "--control %s: socket: %s", path,
		    strerror(errno));
		goto fail;
	}
	(void)unlink(tmp);
	/* 0600 from the start: nobody else may connect in between. */
	mask = umask(077);
	rc = bind(c->fd, (struct sockaddr *)&sun, sizeof(sun));
	umask(mask);
	if (rc == -1) {
		snprintf(err, errlen, "--control %s: %s", path,
		    strerror(errno));
		goto fail;
	}
	if (chmod(tmp, 0600) == -1 ||
	    (uid != (uid_t)-1 && chown(tmp, uid, gid) == -1) ||
	    listen(c->fd, 4) == -1 || rename(tmp, path) == -1 ||
	    stat(path, &st) == -1) {
		snprintf(err, errlen, "--control %s: %s", path,
		    strerror(errno));
		saved = errno;
		(void)unlink(tmp);
		errno = saved;
		goto fail;
	}
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	if ((c->ev = event_new(base, c->fd, EV_READ | EV_PERSIST,
	    control_accept_cb, c)) == NULL || event_add(c->ev, NULL) == -1) {
		snprintf(err, errlen, "--control: cannot create events");
		errno = ENOMEM;
		goto fail;
	}
	return c;
fail:
	saved = errno;
	zp_control_free(c);
	errno = saved;
	return NULL;
}

void
zp_control_free(struct zp_control *c)
{
	struct stat	st;

	if (c == NULL)
		return;
	control_hangup(c);
	if (c->ev != NULL)
		event_free(c->ev);
	if (c->fd != -1) {
		close(c->fd);
		/*
		 * Still ours? A newer zproxy may have put its own there. As
		 * --user, removing it needs the directory's write permission
		 * (systemd's RuntimeDirectory= gives it); without, it stays
		 * and the next zproxy's rename replaces it.
		 */
		if (c->ino != 0 && stat(c->path, &st) == 0 &&
		    st.st_dev == c->dev && st.st_ino == c->ino &&
		    unlink(c->path) == -1)
			zp_log(c->log, ZP_LOG_WARN, "--control %s: not "
			    "removed: %s", c->path, strerror(errno));
	}
	free(c);
}

/* ---- the new side ------------------------------------------------- */

/* One line of the offer: its key and the rest. */
static int
offer_line(const char *line, size_t len, struct zp_offer *o, const int *fds,
    size_t nfds, size_t *nsocks, char *err, size_t errlen)
{
	const char		*val;
	char			 num[24], *end;
	unsigned long long	 v;
	size_t			 klen, vlen, i;
	int			 stats;

	if ((val = memchr(line, ' ', len)) == NULL) {
		zp_seterr(err, errlen, "a line without a value");
		return -1;
	}
	klen = (size_t)(val - line);
	vlen = len - klen - 1;
	val++;
	if ((klen == 3 && memcmp(line, "pid", 3) == 0) ||
	    (klen == 8 && memcmp(line, "watchdog", 8) == 0)) {
		if (vlen == 0 || vlen >= sizeof(num)) {
			zp_seterr(err, errlen, "a number out of range");
			return -1;
		}
		memcpy(num, val, vlen);
		num[vlen] = '\0';
		if (num[0] < '0' || num[0] > '9') {
			zp_seterr(err, errlen, "not a number");
			return -1;
		}
		errno = 0;
		v = strtoull(num, &end, 10);
		if (errno != 0 || *end != '\0') {
			zp_seterr(err, errlen, "not a number");
			return -1;
		}
		if (line[0] == 'p') {
			if (v == 0 || v > INT32_MAX) {
				zp_seterr(err, errlen, "a bad process id");
				return -1;
			}
			o->pid = (long)v;
		} else
			o->watchdog_usec = v;
		return 0;
	}
	if (klen == 6 && memcmp(line, "listen", 6) == 0)
		stats = 0;
	else if (klen == 5 && memcmp(line, "stats", 5) == 0)
		stats = 1;
	else {
		zp_seterr(err, errlen, "an unknown line");
		return -1;
	}
	if (*nsocks >= nfds) {
		zp_seterr(err, errlen, "more sockets named than passed (%zu)",
		    nfds);
		return -1;
	}
	if (vlen == 0 || vlen >= ZP_INHERIT_LABELLEN) {
		zp_seterr(err, errlen, "a socket label of %zu bytes", vlen);
		return -1;
	}
	for (i = 0; i < vlen; i++)
		if (val[i] < 0x21 || val[i] > 0x7e) {
			zp_seterr(err, errlen, "a socket label with a "
			    "control character or space");
			return -1;
		}
	o->set.socks[*nsocks].fd = fds[*nsocks];
	o->set.socks[*nsocks].stats = stats;
	memcpy(o->set.socks[*nsocks].label, val, vlen);
	o->set.socks[*nsocks].label[vlen] = '\0';
	(*nsocks)++;
	o->set.n = *nsocks;
	return 0;
}

int
zp_offer_parse(const char *buf, size_t len, const int *fds, size_t nfds,
    struct zp_offer *o, char *err, size_t errlen)
{
	const char	*p = buf, *nl;
	size_t		 hlen = strlen(ZP_CONTROL_REQUEST), nsocks = 0;
	char		 why[160];
	int		 conn = o->conn;

	memset(o, 0, sizeof(*o));
	o->conn = conn;
	if (nfds > ZP_INHERIT_MAX) {
		zp_seterr(err, errlen, "%zu sockets: at most %d", nfds,
		    ZP_INHERIT_MAX);
		return -1;
	}
	if (len < hlen || memcmp(buf, ZP_CONTROL_REQUEST, hlen) != 0) {
		zp_seterr(err, errlen, "not a zproxy takeover offer");
		return -1;
	}
	for (p = buf + hlen; p < buf + len; p = nl + 1) {
		if ((nl = memchr(p, '\n', (size_t)(buf + len - p))) == NULL) {
			zp_seterr(err, errlen, "an unterminated line");
			return -1;
		}
		if (offer_line(p, (size_t)(nl - p), o, fds, nfds, &nsocks, why,
		    sizeof(why)) == -1) {
			zp_seterr(err, errlen, "a bad offer: %s", why);
			return -1;
		}
	}
	if (nsocks != nfds || o->pid == 0) {
		zp_seterr(err, errlen, "a bad offer: %s", o->pid == 0 ?
		    "no process id" : "fewer sockets named than passed");
		return -1;
	}
	return 0;
}

/*
 * Reach the zproxy at path's control socket (o->conn, with
 * ZP_CONTROL_TIMEOUT_SEC either way) and ask for its sockets. Returns 0,
 * or ZP_EX_UNAVAILABLE with err filled.
 */
static int
takeover_connect(const char *path, struct zp_offer *o, char *err,
    size_t errlen)
{
	struct sockaddr_un	 sun;
	struct timeval		 tv = { ZP_CONTROL_TIMEOUT_SEC, 0 };

	if (control_sun(path, &sun) == -1) {
		zp_seterr(err, errlen, "--takeover %s: path too long", path);
		return ZP_EX_UNAVAILABLE;
	}
	o->conn = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (o->conn == -1 || setsockopt(o->conn, SOL_SOCKET, SO_RCVTIMEO, &tv,
	    sizeof(tv)) == -1 || setsockopt(o->conn, SOL_SOCKET, SO_SNDTIMEO,
	    &tv, sizeof(tv)) == -1) {
		zp_seterr(err, errlen, "--takeover %s: socket: %s", path,
		    strerror(errno));
		return ZP_EX_UNAVAILABLE;
	}
	if (connect(o->conn, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		zp_seterr(err, errlen, "--takeover %s: no zproxy answers "
		    "there (%s)", path, strerror(errno));
		return ZP_EX_UNAVAILABLE;
	}
	if (send(o->conn, ZP_CONTROL_REQUEST, strlen(ZP_CONTROL_REQUEST),
	    MSG_NOSIGNAL) == -1) {
		zp_seterr(err, errlen, "--takeover %s: %s", path,
		    strerror(errno));
		return ZP_EX_UNAVAILABLE;
	}
	return 0;
}

/*
 * The offer on conn: its text into text (len bytes), the descriptors it
 * carries into fds (*nfds of them, at most ZP_INHERIT_MAX), which are
 * the caller's to close whatever came. Returns what recvmsg(2) did;
 * *flags its msg_flags, *rerr its errno.
 */
static ssize_t
takeover_recv(int conn, char *text, size_t len, int *fds, size_t *nfds,
    int *flags, int *rerr)
{
	union control_cmsg	 cm;
	struct msghdr		 msg;
	struct iovec		 iov;
	struct cmsghdr		*h;
	size_t			 i;
	ssize_t			 r;

	memset(&msg, 0, sizeof(msg));
	iov.iov_base = text;
	iov.iov_len = len;
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = cm.buf;
	msg.msg_controllen = sizeof(cm.buf);
	do {
		r = recvmsg(conn, &msg, MSG_CMSG_CLOEXEC);
	} while (r == -1 && errno == EINTR);
	*rerr = errno;
	/* Whatever came, its descriptors are ours to close. */
	for (h = CMSG_FIRSTHDR(&msg); r > 0 && h != NULL;
	    h = CMSG_NXTHDR(&msg, h)) {
		if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
			continue;
		for (i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int) &&
		    *nfds < ZP_INHERIT_MAX; i++)
			memcpy(&fds[(*nfds)++], CMSG_DATA(h) + i * sizeof(int),
			    sizeof(int));
	}
	*flags = msg.msg_flags;
	return r;
}

int
zp_takeover_fetch(const char *path, struct zp_offer *o, char *err,
    size_t errlen)
{
	char			 text[ZP_OFFER_MAX];
	int			 fds[ZP_INHERIT_MAX];
	size_t			 nfds = 0, i;
	ssize_t			 r;
	char			 why[200];
	int			 rc, rerr, flags;

	memset(o, 0, sizeof(*o));
	memset(fds, 0, sizeof(fds));
	o->conn = -1;
	if ((rc = takeover_connect(path, o, err, errlen)) != 0)
		return rc;
	r = takeover_recv(o->conn, text, sizeof(text), fds, &nfds, &flags,
	    &rerr);
	if (r <= 0 || (flags & (MSG_TRUNC | MSG_CTRUNC)) ||
	    zp_offer_parse(text, (size_t)r, fds, nfds, o, why,
	    sizeof(why)) == -1) {
		for (i = 0; i < nfds; i++)
			close(fds[i]);
		o->set.n = 0;
		zp_seterr(err, errlen, "--takeover %s: %s", path, r == 0 ?
		    "the zproxy there hung up (is it draining?)" : r == -1 ?
		    (rerr == EAGAIN ? "no answer in time" : strerror(rerr)) :
		    (flags & (MSG_TRUNC | MSG_CTRUNC)) ?
		    "the offer was cut short" : why);
		return ZP_EX_UNAVAILABLE;
	}
	return 0;
}

int
zp_takeover_done(struct zp_offer *o, char *err, size_t errlen)
{
	ssize_t	r;

	r = send(o->conn, ZP_CONTROL_DONE, strlen(ZP_CONTROL_DONE),
	    MSG_NOSIGNAL);
	if (r == -1)
		zp_seterr(err, errlen, "--takeover: telling process %ld: %s",
		    o->pid, strerror(errno));
	close(o->conn);
	o->conn = -1;
	return r == -1 ? -1 : 0;
}

void
zp_offer_free(struct zp_offer *o)
{
	if (o->conn != -1)
		close(o->conn);
	o->conn = -1;
	zp_inherit_close_rest(&o->set);
}
