/*
 * log_sink.c - where a finished line goes: stderr, a file opened for
 * appending (one write(2) a line, reopened after logrotate), or syslog(3)
 * (with /dev/log watched while nobody reads it).
 */

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <paths.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/log_int.h"

/* The syslog(3) priority of a level. */
static int
level_priority(int level)
{
	switch (level) {
	case ZP_LOG_ERROR:
		return LOG_ERR;
	case ZP_LOG_WARN:
		return LOG_WARNING;
	case ZP_LOG_NOTICE:
		return LOG_NOTICE;
	case ZP_LOG_CONN:
		return LOG_INFO;
	default:
		return level < ZP_LOG_ERROR ? LOG_ERR : LOG_DEBUG;
	}
}

/*
 * Can syslog(3) reach a daemon on _PATH_LOG (/dev/log)? Tries what glibc
 * tries, a datagram socket, then a stream one. Returns 0, or an errno
 * value (ENOENT: no /dev/log; ECONNREFUSED: nobody reads it).
 */
static int
log_syslog_probe(void)
{
	struct sockaddr_un	 sun;
	int			 fd, e = 0, types[] = { SOCK_DGRAM, SOCK_STREAM };
	size_t			 i;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	strncpy(sun.sun_path, _PATH_LOG, sizeof(sun.sun_path) - 1);
	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if ((fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0)) == -1)
			return errno;
		e = connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1 ?
		    errno : 0;
		close(fd);
		if (e != EPROTOTYPE)
			break;
	}
	return e;
}

/*
 * With syslog down, is it back? Asks /dev/log at most once a second.
 * Returns 1 when lines may go to syslog(3) again.
 */
static int
log_syslog_back(struct zp_log *lg)
{
	struct timespec	now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - lg->syslog_tried.tv_sec < 1 ||
	    (now.tv_sec - lg->syslog_tried.tv_sec == 1 &&
	    now.tv_nsec < lg->syslog_tried.tv_nsec))
		return 0;
	lg->syslog_tried = now;
	if (log_syslog_probe() != 0)
		return 0;
	lg->syslog_down = 0;
	return 1;
}

/*
 * Send a finished line (len bytes, newline included unless syslog) to
 * the sink. Failures are dropped: there is nowhere left to report them;
 * only lines for a /dev/log nobody listens on are counted (syslog(3)
 * says nothing of them).
 */
void
log_write(struct zp_log *lg, int level, const char *line, size_t len)
{
	ssize_t	n;
	int	fd;

	switch (lg->sink) {
	case ZP_LOG_SYSLOG:
		if (lg->syslog_down && !log_syslog_back(lg)) {
			__atomic_add_fetch(&lg->dropped, 1, __ATOMIC_RELAXED);
			lg->syslog_lost++;
			break;
		}
		syslog(level_priority(level), "%s", line);
		break;
	case ZP_LOG_FILE:
		/* One write(2) per line: O_APPEND makes it atomic. */
		fd = fileno(lg->fp);
		while (len > 0) {
			if ((n = write(fd, line, len)) == -1) {
				if (errno == EINTR)
					continue;
				break;
			}
			line += n;
			len -= (size_t)n;
		}
		break;
	default:
		fwrite(line, 1, len, lg->fp);
		fflush(lg->fp);
		break;
	}
}

/*
 * Open path for appending (created 0640) as a FILE whose descriptor is
 * not inherited. Returns it, or NULL with errno set.
 */
FILE *
log_open_file(const char *path)
{
	FILE	*fp;
	int	 fd, e;

	if ((fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC,
	    0640)) == -1)
		return NULL;
	if ((fp = fdopen(fd, "a")) == NULL) {
		e = errno;
		close(fd);
		errno = e;
	}
	return fp;
}

/* Let go of the current sink (never the stderr it was given). */
void
log_close_sink(struct zp_log *lg)
{
	if (lg->sink == ZP_LOG_FILE && lg->fp != NULL)
		fclose(lg->fp);
	else if (lg->sink == ZP_LOG_SYSLOG)
		closelog();
	lg->fp = NULL;
	lg->live = 0;
	lg->sink = ZP_LOG_STDERR;
	free(lg->path);
	lg->path = NULL;
}

/*
 * Switch to the file at path or to syslog, and to JSON if json != 0.
 * The old sink is let go only once the new one is open. Returns 0, or -1
 * with err filled and the logger unchanged.
 */
int
zp_log_open(struct zp_log *lg, const char *path, int use_syslog, int json,
    char *err, size_t errlen)
{
	FILE	*fp;
	char	*copy, q[ZP_ESCLEN];
	int	 e;

	if (path != NULL && use_syslog) {
		snprintf(err, errlen, "cannot log both to '%s' and to syslog",
		    zp_escape(path, q, sizeof(q)));
		return -1;
	}
	if (path != NULL) {
		if ((copy = strdup(path)) == NULL) {
			e = errno;
			snprintf(err, errlen, "cannot open log file '%s': %s",
			    zp_escape(path, q, sizeof(q)), strerror(e));
			return -1;
		}
		if ((fp = log_open_file(path)) == NULL) {
			e = errno;
			snprintf(err, errlen, "cannot open log file '%s': %s",
			    zp_escape(path, q, sizeof(q)), strerror(e));
			free(copy);
			return -1;
		}
		log_close_sink(lg);
		lg->fp = fp;
		lg->path = copy;
		lg->sink = ZP_LOG_FILE;
		lg->live = 1;
	} else if (use_syslog) {
		log_close_sink(lg);
		/*
		 * Said here, on stderr, once: from now on the log is syslog,
		 * and where nothing listens there nobody would hear it.
		 */
		if ((e = log_syslog_probe()) != 0) {
			fprintf(stderr, "zproxy: --syslog: %s: %s: log lines "
			    "are dropped, counted in zproxy_log_dropped_total, "
			    "until a syslog daemon listens there\n", _PATH_LOG,
			    strerror(e));
			lg->syslog_down = 1;
			clock_gettime(CLOCK_MONOTONIC, &lg->syslog_tried);
		}
		/* LOG_NDELAY: connect now, while /dev/log is reachable. */
		openlog("zproxy", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		lg->sink = ZP_LOG_SYSLOG;
		lg->live = 1;
	}
	lg->json = json != 0;
	return 0;
}
