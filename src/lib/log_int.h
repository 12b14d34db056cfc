/*
 * log_int.h - what the parts of the log share (log.c: the queue, the log
 * thread and the calls that log; log_format.c: a line built whole, text
 * or JSON; log_sink.c: stderr, the file, syslog), for them only: every
 * other module goes through log.h.
 */
#ifndef ZP_LOG_INT_H
#define ZP_LOG_INT_H

#include <stddef.h>
#include <stdio.h>

struct zp_conn_record;
struct zp_log;

/*
 * Build one line at level into line (ZP_LOG_LINE_MAX bytes): msg as text
 * or as JSON "msg", or, in JSON with r set, r's fields. Returns its
 * length, newline included unless syslog; line is a C string too. Takes
 * no lock: it reads only what is set before the log thread starts.
 */
size_t	log_format(const struct zp_log *lg, int level, const char *msg,
	    const struct zp_conn_record *r, char *line);

/*
 * Send a finished line (len bytes) to lg's sink, now, on the calling
 * thread: the log thread, or a caller before it runs (mu held). Failures
 * are dropped.
 */
void	log_write(struct zp_log *lg, int level, const char *line, size_t len);

/* Let go of the current sink (never the stderr it was given). */
void	log_close_sink(struct zp_log *lg);

/*
 * Open path for appending (created 0640) as a FILE whose descriptor is
 * not inherited. Returns it, or NULL with errno set.
 */
FILE	*log_open_file(const char *path);

#endif
