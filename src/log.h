/*
 * log.h - zproxy's logger: one line per event, to stderr.
 *
 * A struct zp_log lives in the context; nothing here is global.
 */
#ifndef ZP_LOG_H
#define ZP_LOG_H

#include <stdarg.h>
#include <stdio.h>

enum zp_log_level {
	ZP_LOG_ERROR = 0,	/* something failed; always shown */
	ZP_LOG_WARN,		/* a connection failed, a fallback happened */
	ZP_LOG_NOTICE,		/* start-up, shutdown, totals */
	ZP_LOG_CONN,		/* one line per connection (-v) */
	ZP_LOG_DEBUG,		/* -vv */
};

struct zp_log {
	FILE	*fp;
	int	 level;		/* highest level written */
};

/* Set up a logger writing to fp at the given level. */
void	zp_log_init(struct zp_log *, FILE *, int);

/* Write one line if level is enabled; a newline is added. */
void	zp_log(struct zp_log *, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));

/* True when a line at level would be written (to skip costly formatting). */
int	zp_log_enabled(const struct zp_log *, int);

#endif
