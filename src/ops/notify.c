/*
 * notify.c - the sd_notify(3) protocol, spoken directly. See notify.h.
 */

#include <sys/socket.h>
#include <sys/un.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <event2/event.h>

#include "lib/log.h"
#include "ops/notify.h"

struct zp_notify {
	int			 fd;
	struct sockaddr_un	 sun;
	socklen_t		 sunlen;
	struct zp_log		*log;
	struct event_base	*base;
	struct event		*status_ev;
	struct event		*watchdog_ev;
	unsigned long long	 watchdog_usec;
	zp_notify_status_fn	 status;
	void			*arg;
	int			 warned;	/* a send failed: said once */
	int			 mainpid;	/* READY=1 says MAINPID= too */
};

/* $WATCHDOG_USEC for this process, or 0. */
static unsigned long long
watchdog_env(void)
{
	const char		*s = getenv("WATCHDOG_USEC"), *p;
	char			*end;
	unsigned long long	 usec, pid;

	if (s == NULL || *s < '0' || *s > '9')
		return 0;
	errno = 0;
	usec = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || usec == 0)
		return 0;
	/* Set for another process (one we were started by, say): not ours. */
	if ((p = getenv("WATCHDOG_PID")) != NULL && *p != '\0') {
		errno = 0;
		pid = strtoull(p, &end, 10);
		if (errno != 0 || *end != '\0' || pid != (unsigned long long)getpid())
			return 0;
	}
	return usec;
}

/* Send one datagram; a failure is logged once, then ignored. */
static void
notify_send(struct zp_notify *n, const char *msg)
{
	ssize_t	r;

	do {
		r = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL,
		    (struct sockaddr *)&n->sun, n->sunlen);
	} while (r == -1 && errno == EINTR);
	if (r == -1 && !n->warned) {
		n->warned = 1;
		zp_log(n->log, ZP_LOG_WARN, "NOTIFY_SOCKET %s%s: %s",
		    n->sun.sun_path[0] == '\0' ? "@" : "",
		    n->sun.sun_path + (n->sun.sun_path[0] == '\0'),
		    strerror(errno));
	}
}

/* `what` (may be empty) and a STATUS= line, in one datagram. */
static void
notify_with_status(struct zp_notify *n, const char *what)
{
	char	msg[512], status[400];

	status[0] = '\0';
	n->status(n->arg, status, sizeof(status));
	snprintf(msg, sizeof(msg), "%sSTATUS=%s\n", what, status);
	notify_send(n, msg);
}

static void
notify_status_cb(evutil_socket_t fd, short what, void *arg)
{
	notify_with_status(arg, "");
}

static void
notify_watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	notify_send(arg, "WATCHDOG=1\n");
}

struct zp_notify *
zp_notify_new(struct event_base *base, struct zp_log *log,
    zp_notify_status_fn status, void *arg, char *err, size_t errlen)
{
	const char		*path = getenv("NOTIFY_SOCKET");
	struct zp_notify	*n;
	size_t			 len;

	if (errlen > 0)
		err[0] = '\0';
	if (path == NULL || *path == '\0')
		return NULL;
	len = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || len < 2) {
		snprintf(err, errlen, "NOTIFY_SOCKET '%s': not an absolute "
		    "path nor an abstract name (@...)", path);
		return NULL;
	}
	if (len >= sizeof(n->sun.sun_path)) {
		snprintf(err, errlen, "NOTIFY_SOCKET: a path of %zu bytes, "
		    "the most is %zu", len, sizeof(n->sun.sun_path) - 1);
		return NULL;
	}
	if ((n = calloc(1, sizeof(*n))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	n->sun.sun_family = AF_UNIX;
	memcpy(n->sun.sun_path, path, len);
	/* An abstract name has no terminating NUL: the length says it all. */
	if (path[0] == '@') {
		n->sun.sun_path[0] = '\0';
		n->sunlen = (socklen_t)(offsetof(struct sockaddr_un,
		    sun_path) + len);
	} else
		n->sunlen = (socklen_t)sizeof(n->sun);
	n->log = log;
	n->base = base;
	n->status = status;
	n->arg = arg;
	n->watchdog_usec = watchdog_env();
	if ((n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1) {
		snprintf(err, errlen, "NOTIFY_SOCKET: socket: %s",
		    strerror(errno));
		free(n);
		return NULL;
	}
	return n;
}

/* A persistent timer of usec microseconds; NULL on failure. */
static struct event *
notify_timer(struct zp_notify *n, unsigned long long usec,
    event_callback_fn cb)
{
	struct event	*ev;
	struct timeval	 tv;

	tv.tv_sec = (time_t)(usec / 1000000);
	tv.tv_usec = (suseconds_t)(usec % 1000000);
	if ((ev = event_new(n->base, -1, EV_PERSIST, cb, n)) == NULL)
		return NULL;
	if (event_add(ev, &tv) == -1) {
		event_free(ev);
		return NULL;
	}
	return ev;
}

void
zp_notify_ready(struct zp_notify *n)
{
	char	what[64];

	if (n == NULL)
		return;
	if (n->mainpid)
		snprintf(what, sizeof(what), "MAINPID=%ld\nREADY=1\n",
		    (long)getpid());
	else
		snprintf(what, sizeof(what), "READY=1\n");
	notify_with_status(n, what);
	zp_log(n->log, ZP_LOG_NOTICE, "ready, told NOTIFY_SOCKET %s%s%s",
	    n->sun.sun_path[0] == '\0' ? "@" : "",
	    n->sun.sun_path + (n->sun.sun_path[0] == '\0'),
	    n->watchdog_usec > 0 ? " (watchdog on)" : "");
	if (n->watchdog_usec > 0) {
		notify_send(n, "WATCHDOG=1\n");
		/* Half the interval, as sd_watchdog_enabled(3) advises. */
		if ((n->watchdog_ev = notify_timer(n, n->watchdog_usec / 2 > 0 ?
		    n->watchdog_usec / 2 : 1, notify_watchdog_cb)) == NULL)
			zp_log(n->log, ZP_LOG_WARN, "cannot start the watchdog "
			    "timer: the service manager will restart zproxy");
	}
	if ((n->status_ev = notify_timer(n, ZP_NOTIFY_STATUS_SEC * 1000000ULL,
	    notify_status_cb)) == NULL)
		zp_log(n->log, ZP_LOG_WARN, "cannot start the status timer");
}

void
zp_notify_takeover(struct zp_notify *n, unsigned long long watchdog_usec)
{
	if (n == NULL)
		return;
	n->mainpid = 1;
	if (n->watchdog_usec == 0)
		n->watchdog_usec = watchdog_usec;
}

void
zp_notify_reloading(struct zp_notify *n)
{
	if (n != NULL)
		notify_with_status(n, "RELOADING=1\n");
}

void
zp_notify_resume(struct zp_notify *n)
{
	if (n != NULL)
		notify_with_status(n, "READY=1\n");
}

void
zp_notify_stopping(struct zp_notify *n)
{
	if (n == NULL)
		return;
	notify_with_status(n, "STOPPING=1\n");
}

void
zp_notify_free(struct zp_notify *n)
{
	if (n == NULL)
		return;
	if (n->status_ev != NULL)
		event_free(n->status_ev);
	if (n->watchdog_ev != NULL)
		event_free(n->watchdog_ev);
	close(n->fd);
	free(n);
}

unsigned long long
zp_notify_watchdog_usec(const struct zp_notify *n)
{
	return n != NULL ? n->watchdog_usec : 0;
}
