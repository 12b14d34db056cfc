/*
 * log.h - zproxy's logger: one line per event, to stderr, a file or
 * syslog, as text or JSON.
 *
 * A struct zp_log lives in the context; nothing here is global.
 */
#ifndef ZP_LOG_H
#define ZP_LOG_H

#include <sys/time.h>
#include <stdarg.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

/* Most bytes of one line, newline included; longer ones are cut. */
#define ZP_LOG_LINE_MAX	2048
/* WARN and ERROR lines written per second at most; the rest are counted. */
#define ZP_LOG_RATE	20
/* Bytes of lines waiting for the log thread; beyond, lines are dropped. */
#define ZP_LOG_QUEUE	(1024 * 1024)

enum zp_log_level {
	ZP_LOG_ERROR = 0,	/* something failed; always shown */
	ZP_LOG_WARN,		/* a connection failed, a fallback happened */
	ZP_LOG_NOTICE,		/* start-up, shutdown, totals */
	ZP_LOG_CONN,		/* one line per connection (-v) */
	ZP_LOG_DEBUG,		/* -vv */
};

/* Where lines go. */
enum zp_log_sink {
	ZP_LOG_STDERR = 0,
	ZP_LOG_FILE,
	ZP_LOG_SYSLOG,
};

struct zp_log {
	/*
	 * A line is formatted by the thread that logs it, with no lock held.
	 * mu guards the rate limit's state and the queue, and is held only
	 * to admit a line and copy it in. Before zp_log_start() and after
	 * zp_log_stop() the line is written under mu by its caller instead.
	 * sink and json change only while no other thread runs, level
	 * through zp_log_set_level() (an atomic store); fp is the log
	 * thread's while it runs (a reopen is done there).
	 */
	pthread_mutex_t	 mu;
	pthread_cond_t	 wake;		/* the log thread waits for work */
	pthread_cond_t	 idle;		/* zp_log_flush() waits for it */
	pthread_t	 thread;
	int		 running;	/* the log thread writes: lines queue */
	int		 stopping;	/* it writes what is queued, then ends */
	int		 sleeping;	/* it waits on wake */
	int		 writing;	/* it holds lines taken out, unwritten */
	int		 reopen;	/* SIGHUP: it reopens the file */
	size_t		 reopen_at;	/* once these queued bytes are out */
	char		*ring;		/* ZP_LOG_QUEUE bytes of records */
	size_t		 head;		/* offset of the oldest record */
	size_t		 used;		/* bytes queued */
	uint64_t	 dropped;	/* lines the full queue refused (atomic) */
	uint64_t	 reported;	/* of those, told in the log (its thread) */
	/*
	 * --syslog with nothing listening on /dev/log: syslog(3) would drop
	 * every line without a word. Such lines count in dropped instead,
	 * and /dev/log is tried again at most once a second (CLOCK_MONOTONIC)
	 * by whoever writes: the log thread, or callers before it runs.
	 */
	int		 syslog_down;
	struct timespec	 syslog_tried;
	uint64_t	 syslog_lost;	/* of dropped, while it was down */
	int		 live;		/* has a sink: stderr, file, syslog */
	FILE		*fp;		/* stderr, or the file; NULL: syslog */
	int		 level;		/* highest level written */
	int		 sink;		/* enum zp_log_sink */
	int		 json;		/* one JSON object per line */
	char		*path;		/* ZP_LOG_FILE */
	/*
	 * Rate limit for WARN and ERROR lines: a storm can't fill a disk.
	 * rl_window is when the current one-second window began, on
	 * CLOCK_MONOTONIC (a test may move it back to end the window).
	 */
	struct timespec	 rl_window;
	unsigned	 rl_count;	/* lines written in the window */
	unsigned long	 rl_dropped;	/* held back, not yet reported */
};

/* The story of one connection, for zp_log_conn(). */
struct zp_conn_record {
	uint64_t	 id;
	const char	*client;	/* "1.2.3.4:5" or "[::1]:5" */
	const char	*upstream;
	const char	*mode;		/* splice, copy, mixed */
	uint64_t	 up;		/* bytes client -> upstream */
	uint64_t	 down;
	double		 duration;	/* seconds */
	const char	*end;		/* zp_end_str() */
	const char	*error;		/* strerror text, or NULL */
	const char	*peer;		/* the balancer that sent a PROXY
					   header for client, or NULL */
	const char	*dst;		/* original destination, or NULL */
	const char	*tls;		/* the client's TLS version, or NULL */
	const char	*tls_client;	/* its certificate's subject, escaped,
					   or NULL */
	const char	*tls_upstream;	/* the upstream's TLS version
					   ("+resumed"), or NULL */
};

/* Set up a logger writing to fp (stderr) at the given level, as text. */
void	zp_log_init(struct zp_log *, FILE *, int);

/*
 * Switch the logger to a file (appending, created 0640) or to syslog
 * (facility daemon, ident "zproxy"), and to JSON if json != 0. path NULL
 * and use_syslog 0 keep stderr. Returns 0, or -1 with err filled.
 */
int	zp_log_open(struct zp_log *, const char *path, int use_syslog,
	    int json, char *err, size_t errlen);

/*
 * Reopen the log file (SIGHUP, after logrotate moved it). Returns 0, or
 * -1 and keeps writing to the old file, having logged why. While the log
 * thread runs it is asked to do it and 1 is returned: it writes "log
 * reopened" in the new file, or why not in the old one.
 */
int	zp_log_reopen(struct zp_log *);

/*
 * Start the log thread: from now on zp_log() and friends only queue
 * their line, and a full queue drops it (counted; the log thread says
 * how many once there is room again) rather than wait for a slow disk or
 * a blocked /dev/log. Call it after any fork() (a thread does not
 * survive one) and as the user the process runs as. Returns 0, or -1
 * with err filled and lines still written by their callers.
 */
int	zp_log_start(struct zp_log *, char *err, size_t errlen);

/*
 * Wait until every queued line is written. For tests and the exit path:
 * no relay thread calls it, since it waits for the sink. A no-op when
 * the log thread does not run.
 */
void	zp_log_flush(struct zp_log *);

/*
 * Write every queued line, then end the log thread; callers write their
 * lines themselves again. Safe to call when it was never started.
 */
void	zp_log_stop(struct zp_log *);

/* Lines dropped because the queue was full, since zp_log_init(). */
uint64_t zp_log_dropped(const struct zp_log *);

/*
 * Stop the log thread (zp_log_stop()), then close the file or syslog and
 * free, first reporting lines the rate limit held back. The logger then writes nothing until zp_log_init(). Safe to
 * call twice, and on a logger that was only zp_log_init()'ed.
 */
void	zp_log_close(struct zp_log *);

/* Write one line if level is enabled. */
void	zp_log(struct zp_log *, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));

/* Write a connection's line: key=value text, or a JSON object. */
void	zp_log_conn(struct zp_log *, int, const struct zp_conn_record *);

/*
 * The same, under the WARN/ERROR rate limit whatever the level: for lines
 * a client can cause at will (a refused client), so that a scan or a
 * flood cannot fill the disk even at -v.
 */
void	zp_log_conn_limited(struct zp_log *, int,
	    const struct zp_conn_record *);

/* True when a line at level would be written (to skip costly formatting). */
/* The level from now on, from any thread (zproxy ctl reload). */
void	zp_log_set_level(struct zp_log *, int level);

int	zp_log_enabled(const struct zp_log *, int);

/* Room for one escaped value in a message: ZP_ESCLEN - 1 characters. */
#define ZP_ESCLEN	160

/*
 * Write s into buf (len bytes) as it may be quoted in a message of one
 * line: backslash and quotes as \\, \' and \", newline, tab and carriage
 * return as \n, \t and \r, every other byte outside printable ASCII as
 * \xNN. A value that does not fit is cut between two escapes and ends in
 * "...". Returns buf. Every message that quotes what a user gave (an
 * argument, a path, a name) passes it through here.
 */
const char *zp_escape(const char *s, char *buf, size_t len);

/*
 * Format a one-line error into a caller's buffer (err may be NULL or
 * errlen 0: then nothing is written). The parsers' way to say what is
 * wrong without printing it.
 */
void	zp_seterr(char *err, size_t errlen, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));

#endif
