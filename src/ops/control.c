/*
 * control.c - handing the listening sockets over to a new zproxy, and
 * taking them. See control.h.
 */

#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/config.h"
#include "ops/control.h"
#include "lib/log.h"

/*
 * One client of the socket. What its first message asks makes it a
 * takeover (one at a time: ZP_CONTROL_REQUEST) or a ctl client
 * (ZP_CTL_HELLO, any number up to ZP_CTL_CLIENTS_MAX).
 */
enum sess_kind {
	SESS_NEW = 0,
	SESS_TAKEOVER,
	SESS_CTL,
};

struct zp_ctl_req {
	struct control_sess	*sess;	/* NULL: its client is gone */
};

struct control_sess {
	struct zp_control	*c;
	enum sess_kind		 kind;
	int			 fd;
	long			 pid;		/* SO_PEERCRED */
	int			 offered;	/* takeover: the offer went */
	struct event		*rev;
	struct event		*wev;
	struct event		*timer;
	struct zp_ctl_req	*req;		/* ctl: a command not done */
	struct evbuffer		*out;		/* ctl: the answer's messages,
						   each a 4-byte length first */
	int			 closing;	/* close once out is sent */
	TAILQ_ENTRY(control_sess) entry;
};

TAILQ_HEAD(sess_list, control_sess);

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
	struct sess_list		 sessions;
	size_t				 nsessions;
	struct control_sess		*takeover; /* the one under way */
};

/* Room for the descriptors of an offer, aligned as a cmsghdr must be. */
union control_cmsg {
	struct cmsghdr	hdr;
	char		buf[CMSG_SPACE(sizeof(int) * ZP_INHERIT_MAX)];
};

static void	sess_free(struct control_sess *);

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

/* The takeover failed: say why, serve on. */
static void
control_abort(struct control_sess *ss, const char *why)
{
	struct zp_control	*c = ss->c;
	long			 pid = ss->pid;

	sess_free(ss);
	c->ops->abort(c->arg, pid, why);
}

/* (Re)start a session's deadline: sec from now. */
static void
sess_deadline(struct control_sess *ss, int sec)
{
	struct timeval	tv = { sec, 0 };

	(void)evtimer_add(ss->timer, &tv);
}

static void
sess_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct control_sess	*ss = arg;

	if (ss->kind == SESS_TAKEOVER) {
		control_abort(ss, "no answer in time");
		return;
	}
	if (ss->req == NULL && evbuffer_get_length(ss->out) == 0)
		zp_log(ss->c->log, ZP_LOG_NOTICE, "control: a client (pid %ld) "
		    "said nothing for %d s: closed", ss->pid,
		    ZP_CTL_IDLE_SEC);
	else
		zp_log(ss->c->log, ZP_LOG_NOTICE, "control: a client (pid %ld) "
		    "read nothing of its answer for %d s: closed", ss->pid,
		    ZP_CTL_IDLE_SEC);
	sess_free(ss);
}

/* Send the offer: the sockets and a line for each. */
static int
control_offer(struct control_sess *ss, char *why, size_t whylen)
{
	struct zp_control	*c = ss->c;
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
		r = sendmsg(ss->fd, &msg, MSG_NOSIGNAL);
	} while (r == -1 && errno == EINTR);
	if (r != (ssize_t)off) {
		snprintf(why, whylen, "sending the sockets: %s",
		    r == -1 ? strerror(errno) : "short send");
		return -1;
	}
	return 0;
}

/* A takeover's message: the request, then "done". */
static void
takeover_msg(struct control_sess *ss, const char *buf, size_t len)
{
	struct zp_control	*c = ss->c;
	char			 why[160];
	long			 pid;

	if (!ss->offered) {
		c->ops->begin(c->arg, ss->pid);
		if (control_offer(ss, why, sizeof(why)) == -1) {
			control_abort(ss, why);
			return;
		}
		ss->offered = 1;
		return;
	}
	if (len != strlen(ZP_CONTROL_DONE) ||
	    memcmp(buf, ZP_CONTROL_DONE, len) != 0) {
		control_abort(ss, "an unexpected message");
		return;
	}
	pid = ss->pid;
	sess_free(ss);
	c->ops->done(c->arg, pid);	/* may free c */
}

/* ---- ctl clients ---------------------------------------------------- */

/* Queue one message of the answer: its kind, then text. */
static int
sess_queue(struct control_sess *ss, char kind, const char *text, size_t len)
{
	uint32_t	n = (uint32_t)len + 1;

	if (evbuffer_add(ss->out, &n, sizeof(n)) == -1 ||
	    evbuffer_add(ss->out, &kind, 1) == -1 ||
	    evbuffer_add(ss->out, text, len) == -1)
		return -1;
	return 0;
}

/*
 * Send what is queued, a message at a time, as the socket takes it;
 * once all went: the next command may come (or the session ends).
 * Returns -1 when the session was freed.
 */
static int
sess_flush(struct control_sess *ss)
{
	unsigned char	msg[ZP_CTL_MSG_MAX + 1];
	uint32_t	n;
	ssize_t		r;

	while (evbuffer_get_length(ss->out) >= sizeof(n)) {
		evbuffer_copyout(ss->out, &n, sizeof(n));
		assert(n <= sizeof(msg));
		if (evbuffer_drain(ss->out, sizeof(n)) == -1 ||
		    evbuffer_remove(ss->out, msg, n) != (int)n) {
			sess_free(ss);
			return -1;
		}
		do {
			r = send(ss->fd, msg, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		} while (r == -1 && errno == EINTR);
		if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			/* Put it back in front, and wait until it fits. */
			if (evbuffer_prepend(ss->out, msg, n) == -1 ||
			    evbuffer_prepend(ss->out, &n, sizeof(n)) == -1 ||
			    event_add(ss->wev, NULL) == -1) {
				sess_free(ss);
				return -1;
			}
			return 0;
		}
		if (r != (ssize_t)n) {
			sess_free(ss);	/* gone */
			return -1;
		}
		/* Something was read: the client is alive. */
		sess_deadline(ss, ZP_CTL_IDLE_SEC);
	}
	(void)event_del(ss->wev);
	if (ss->req != NULL)
		return 0;
	if (ss->closing) {
		sess_free(ss);
		return -1;
	}
	/* Answered: read the next command. */
	(void)event_add(ss->rev, NULL);
	return 0;
}

static void
sess_write_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)sess_flush(arg);
}

void
zp_ctl_output(struct zp_ctl_req *r, const char *text, size_t len)
{
	size_t	k;

	if (r->sess == NULL)
		return;
	for (; len > 0; text += k, len -= k) {
		k = len < ZP_CTL_MSG_MAX ? len : ZP_CTL_MSG_MAX;
		if (sess_queue(r->sess, ZP_CTL_OUTPUT, text, k) == -1) {
			r->sess->closing = 1;
			return;
		}
	}
}

void
zp_ctl_printf(struct zp_ctl_req *r, const char *fmt, ...)
{
	char	 small[512], *big = NULL;
	va_list	 ap;
	int	 n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n < sizeof(small)) {
		zp_ctl_output(r, small, (size_t)n);
		return;
	}
	va_start(ap, fmt);
	n = vasprintf(&big, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	zp_ctl_output(r, big, (size_t)n);
	free(big);
}

void
zp_ctl_done(struct zp_ctl_req *r, int ok, const char *fmt, ...)
{
	struct control_sess	*ss = r->sess;
	char			 line[ZP_CTL_LINE_MAX];
	va_list			 ap;
	int			 n = 0;

	if (ss == NULL) {
		free(r);
		return;
	}
	if (fmt != NULL) {
		va_start(ap, fmt);
		n = vsnprintf(line, sizeof(line), fmt, ap);
		va_end(ap);
	}
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	ss->req = NULL;
	free(r);
	if (sess_queue(ss, ok ? ZP_CTL_OK : ZP_CTL_FAILED, line,
	    (size_t)n) == -1)
		ss->closing = 1;
	(void)sess_flush(ss);
}

/* A ctl client's command: hand it to the daemon, read no more meanwhile. */
static void
ctl_msg(struct control_sess *ss, char *buf, size_t len)
{
	size_t	hl = strlen(ZP_CTL_HELLO);
	char	*line;

	(void)event_del(ss->rev);
	sess_deadline(ss, ZP_CTL_IDLE_SEC);
	if ((ss->req = calloc(1, sizeof(*ss->req))) == NULL) {
		ss->closing = 1;
		(void)sess_queue(ss, ZP_CTL_FAILED, "out of memory", 13);
		(void)sess_flush(ss);
		return;
	}
	ss->req->sess = ss;
	if (len < hl || memcmp(buf, ZP_CTL_HELLO, hl) != 0) {
		zp_ctl_done(ss->req, 0, "not a zproxy ctl command");
		return;
	}
	line = buf + hl;
	len -= hl;
	if (len > 0 && line[len - 1] == '\n')
		len--;
	line[len] = '\0';
	if (memchr(line, '\0', len) != NULL || strchr(line, '\n') != NULL) {
		zp_ctl_done(ss->req, 0, "a command is one line of text");
		return;
	}
	ss->c->ops->command(ss->c->arg, ss->req, line);
}

/* A client spoke (or hung up). */
static void
sess_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct control_sess	*ss = arg;
	struct zp_control	*c = ss->c;
	char			 buf[ZP_CTL_LINE_MAX + 64];
	ssize_t			 r;

	do {
		r = recv(ss->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT | MSG_TRUNC);
	} while (r == -1 && errno == EINTR);
	if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return;
	if (r <= 0) {
		if (ss->kind == SESS_TAKEOVER)
			control_abort(ss, r == 0 ? "it hung up" :
			    strerror(errno));
		else
			sess_free(ss);
		return;
	}
	if (ss->kind == SESS_NEW) {
		if ((size_t)r == strlen(ZP_CONTROL_REQUEST) &&
		    memcmp(buf, ZP_CONTROL_REQUEST, (size_t)r) == 0) {
			if (c->takeover != NULL) {
				/* One takeover at a time. */
				zp_log(c->log, ZP_LOG_WARN, "control: a "
				    "takeover is under way; refusing another");
				sess_free(ss);
				return;
			}
			ss->kind = SESS_TAKEOVER;
			c->takeover = ss;
			sess_deadline(ss, ZP_CONTROL_TIMEOUT_SEC);
		} else
			ss->kind = SESS_CTL;
	}
	if (ss->kind == SESS_TAKEOVER) {
		takeover_msg(ss, buf, (size_t)r);
		return;
	}
	if ((size_t)r >= sizeof(buf) - 1) {
		ss->closing = 1;
		(void)event_del(ss->rev);
		(void)sess_queue(ss, ZP_CTL_FAILED, "a command longer than "
		    ZP_CTL_LINE_MAX_STR " bytes",
		    strlen("a command longer than " ZP_CTL_LINE_MAX_STR
		    " bytes"));
		(void)sess_flush(ss);
		return;
	}
	buf[r] = '\0';
	ctl_msg(ss, buf, (size_t)r);
}

static void
sess_free(struct control_sess *ss)
{
	struct zp_control	*c = ss->c;

	if (ss->req != NULL)
		ss->req->sess = NULL;	/* the daemon frees it when done */
	if (c->takeover == ss)
		c->takeover = NULL;
	if (ss->rev != NULL)
		event_free(ss->rev);
	if (ss->wev != NULL)
		event_free(ss->wev);
	if (ss->timer != NULL)
		event_free(ss->timer);
	if (ss->out != NULL)
		evbuffer_free(ss->out);
	if (ss->fd != -1)
		close(ss->fd);
	TAILQ_REMOVE(&c->sessions, ss, entry);
	c->nsessions--;
	free(ss);
}

static void
control_accept_cb(evutil_socket_t lfd, short what, void *arg)
{
	struct zp_control	*c = arg;
	struct control_sess	*ss;
	struct ucred		 cred;
	socklen_t		 len = sizeof(cred);
	int			 fd;

	fd = accept4(c->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1)
		return;		/* EAGAIN, or the next one will do */
	if (c->nsessions >= ZP_CTL_CLIENTS_MAX) {
		zp_log(c->log, ZP_LOG_WARN, "control: %d clients already; "
		    "refusing another", ZP_CTL_CLIENTS_MAX);
		close(fd);
		return;
	}
	if ((ss = calloc(1, sizeof(*ss))) == NULL) {
		close(fd);
		return;
	}
	ss->c = c;
	ss->fd = fd;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
		ss->pid = (long)cred.pid;
	TAILQ_INSERT_TAIL(&c->sessions, ss, entry);
	c->nsessions++;
	ss->rev = event_new(c->base, fd, EV_READ | EV_PERSIST, sess_read_cb,
	    ss);
	ss->wev = event_new(c->base, fd, EV_WRITE | EV_PERSIST,
	    sess_write_cb, ss);
	ss->timer = evtimer_new(c->base, sess_timer_cb, ss);
	ss->out = evbuffer_new();
	if (ss->rev == NULL || ss->wev == NULL || ss->timer == NULL ||
	    ss->out == NULL || event_add(ss->rev, NULL) == -1) {
		zp_log(c->log, ZP_LOG_ERROR, "control: cannot create events");
		sess_free(ss);
		return;
	}
	sess_deadline(ss, ZP_CTL_IDLE_SEC);
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
	c->fd = -1;
	TAILQ_INIT(&c->sessions);
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
	    listen(c->fd, 16) == -1 || rename(tmp, path) == -1 ||
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
	while (!TAILQ_EMPTY(&c->sessions))
		sess_free(TAILQ_FIRST(&c->sessions));
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

int
zp_control_socket(const char *path, struct sockaddr_un *sun, int timeout_sec)
{
	struct timeval	tv = { timeout_sec, 0 };
	int		fd, saved;

	if (control_sun(path, sun) == -1) {
		errno = ENAMETOOLONG;
		return -1;
	}
	if ((fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == -1 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == -1) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

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

	if ((o->conn = zp_control_socket(path, &sun,
	    ZP_CONTROL_TIMEOUT_SEC)) == -1) {
		if (errno == ENAMETOOLONG)
			zp_seterr(err, errlen, "--takeover %s: path too long",
			    path);
		else
			zp_seterr(err, errlen, "--takeover %s: socket: %s",
			    path, strerror(errno));
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
