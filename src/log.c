/*
 * log.c - one line per event, to stderr, a file or syslog, as text or JSON.
 *
 * A line is built whole in a buffer on the stack, then leaves in one
 * write(2) (file), one fwrite (stderr) or one syslog(3) call: several
 * processes appending to one file never interleave their lines. A line
 * that does not fit is cut at a character boundary, and a JSON one still
 * closes its string and its object, so that every line stays parseable.
 *
 * Once zp_log_start() ran, the thread that logs only formats its line and
 * copies it into a bounded queue; a log thread writes it. A blocked
 * /dev/log or a full disk then stalls that thread alone, and the relay
 * threads drop lines (counted, and told once there is room) rather than
 * wait: they wait only in their event loops.
 */

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <fcntl.h>
#include <paths.h>
#include <pthread.h>
#include <signal.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/*
 * Room kept at the end of the buffer for what closes a line even when
 * its content was cut: a JSON string's quote, the object's brace, the
 * newline and the NUL.
 */
#define LOG_RESERVE	4

/* A line being built: appends either fit whole or set full. */
struct log_buf {
	char	*p;
	size_t	 len;
	size_t	 cap;		/* content stops here; LOG_RESERVE follows */
	int	 full;		/* something was cut: append nothing more */
};

/* Start an empty line in buf, which has size bytes (> LOG_RESERVE). */
static void
buf_init(struct log_buf *b, char *buf, size_t size)
{
	b->p = buf;
	b->len = 0;
	b->cap = size - LOG_RESERVE;
	b->full = 0;
	buf[0] = '\0';
}

/* Append n bytes whole, or nothing and mark the line cut. */
static void
buf_add(struct log_buf *b, const char *s, size_t n)
{
	if (b->full || n > b->cap - b->len) {
		b->full = 1;
		return;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

/* Append a closing byte into the reserve, which is there for it. */
static void
buf_close(struct log_buf *b, char c)
{
	if (b->len < b->cap + LOG_RESERVE - 1)
		b->p[b->len++] = c;
	b->p[b->len] = '\0';
}

/* Append a short printf-formatted token (a key, a number) whole. */
static void __attribute__((format(printf, 2, 3)))
buf_printf(struct log_buf *b, const char *fmt, ...)
{
	char	tok[128];
	va_list	ap;
	int	n;

	va_start(ap, fmt);
	n = vsnprintf(tok, sizeof(tok), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tok)) {
		b->full = 1;
		return;
	}
	buf_add(b, tok, (size_t)n);
}

/*
 * The length of the well-formed UTF-8 sequence at s (n bytes left), or 0
 * when the byte there starts none: a JSON reader may reject the line.
 */
static size_t
utf8_len(const unsigned char *s, size_t n)
{
	unsigned char	lo = 0x80, hi = 0xbf;
	size_t		len, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		len = 3;
		if (s[0] == 0xe0)
			lo = 0xa0;	/* overlong */
		else if (s[0] == 0xed)
			hi = 0x9f;	/* surrogates */
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		len = 4;
		if (s[0] == 0xf0)
			lo = 0x90;	/* overlong */
		else if (s[0] == 0xf4)
			hi = 0x8f;	/* beyond U+10FFFF */
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return len;
}

/*
 * Append n bytes of s, escaped one character at a time so that a cut
 * never splits an escape or a character. JSON: RFC 8259, \uFFFD for a
 * byte that is not UTF-8. Text: control characters and stray bytes as
 * \xNN, so that a message can never start a line of its own.
 */
static void
buf_str(struct log_buf *b, const char *s, size_t n, int json)
{
	const unsigned char	*u = (const unsigned char *)s;
	char			 esc[8];
	size_t			 i, k;

	for (i = 0; i < n && !b->full; i += k) {
		k = utf8_len(u + i, n - i);
		if (json && k == 0) {
			buf_add(b, "\\ufffd", 6);
			k = 1;
		} else if (k == 0) {
			snprintf(esc, sizeof(esc), "\\x%02x", u[i]);
			buf_add(b, esc, 4);
			k = 1;
		} else if (k > 1)
			buf_add(b, s + i, k);
		else if (!json && (u[i] < 0x20 || u[i] == 0x7f)) {
			snprintf(esc, sizeof(esc), "\\x%02x", u[i]);
			buf_add(b, esc, 4);
		} else if (!json)
			buf_add(b, s + i, 1);
		else if (u[i] == '"')
			buf_add(b, "\\\"", 2);
		else if (u[i] == '\\')
			buf_add(b, "\\\\", 2);
		else if (u[i] == '\n')
			buf_add(b, "\\n", 2);
		else if (u[i] == '\r')
			buf_add(b, "\\r", 2);
		else if (u[i] == '\t')
			buf_add(b, "\\t", 2);
		else if (u[i] < 0x20 || u[i] == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", u[i]);
			buf_add(b, esc, 6);
		} else
			buf_add(b, s + i, 1);
	}
}

/*
 * Append ,"key":"value" (null when s is NULL). Once the opening quote is
 * in, the closing one always follows, into the reserve if need be.
 */
static void
buf_jstr(struct log_buf *b, const char *key, const char *s)
{
	if (s == NULL) {
		buf_printf(b, ",\"%s\":null", key);
		return;
	}
	buf_printf(b, ",\"%s\":\"", key);
	if (b->full)
		return;
	buf_str(b, s, strlen(s), 1);
	if (!b->full)
		buf_add(b, "\"", 1);
	if (b->full)
		buf_close(b, '"');
}

/* The level's name in JSON: syslog's names, "info" for a connection. */
static const char *
level_name(int level)
{
	static const char *const names[] = {
		"error", "warn", "notice", "info", "debug"
	};

	if (level < ZP_LOG_ERROR)
		level = ZP_LOG_ERROR;
	if (level > ZP_LOG_DEBUG)
		level = ZP_LOG_DEBUG;
	return names[level];
}

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

/* Append UTC wall-clock time to the millisecond: 2026-12-02T15:22:26.123Z */
static void
buf_time(struct log_buf *b)
{
	struct timespec	 ts;
	struct tm	 tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	buf_printf(b, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, (long)(ts.tv_nsec / 1000000));
}

/* Append a connection record's fields after the JSON header. */
static void
buf_conn(struct log_buf *b, const struct zp_conn_record *r)
{
	buf_printf(b, ",\"event\":\"conn\",\"conn\":%llu",
	    (unsigned long long)r->id);
	buf_jstr(b, "client", r->client);
	if (r->peer != NULL)
		buf_jstr(b, "peer", r->peer);
	buf_jstr(b, "upstream", r->upstream);
	if (r->dst != NULL)
		buf_jstr(b, "dst", r->dst);
	buf_jstr(b, "mode", r->mode);
	buf_printf(b, ",\"up\":%llu,\"down\":%llu",
	    (unsigned long long)r->up, (unsigned long long)r->down);
	/* NaN and infinities are not JSON numbers. */
	if (isfinite(r->duration))
		buf_printf(b, ",\"duration\":%.3f", r->duration);
	else
		buf_printf(b, ",\"duration\":null");
	buf_jstr(b, "end", r->end);
	if (r->error != NULL)
		buf_jstr(b, "error", r->error);
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
static void
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
 * Build one line at level into line (ZP_LOG_LINE_MAX bytes): msg as text
 * or as JSON "msg", or, in JSON with r set, r's fields. Returns its
 * length, newline included unless syslog; line is a C string too.
 */
static size_t
log_format(const struct zp_log *lg, int level, const char *msg,
    const struct zp_conn_record *r, char *line)
{
	struct log_buf	b;

	buf_init(&b, line, ZP_LOG_LINE_MAX);
	if (lg->json) {
		buf_add(&b, "{\"time\":\"", 9);
		buf_time(&b);
		buf_printf(&b, "\",\"level\":\"%s\",\"pid\":%ld",
		    level_name(level), (long)getpid());
		if (r != NULL)
			buf_conn(&b, r);
		else
			buf_jstr(&b, "msg", msg);
		buf_close(&b, '}');
	} else {
		/* syslog(3) stamps time, ident and pid itself. */
		if (lg->sink != ZP_LOG_SYSLOG) {
			buf_time(&b);
			buf_printf(&b, " zproxy[%ld]: ", (long)getpid());
		}
		buf_str(&b, msg, strlen(msg), 0);
	}
	if (lg->sink != ZP_LOG_SYSLOG)
		buf_close(&b, '\n');
	line[b.len] = '\0';	/* syslog(3) takes a C string */
	return b.len;
}

/*
 * A record in the queue: this header, then the line and its NUL. The
 * ring wraps inside a record; ring_copy() takes care of it.
 */
struct log_rec {
	uint16_t	len;		/* the line's bytes, NUL excluded */
	uint16_t	level;
};

/* Copy n bytes into the ring at offset off (any: it wraps). */
static void
ring_in(struct zp_log *lg, size_t off, const void *p, size_t n)
{
	size_t	first;

	off %= ZP_LOG_QUEUE;
	first = ZP_LOG_QUEUE - off < n ? ZP_LOG_QUEUE - off : n;
	memcpy(lg->ring + off, p, first);
	memcpy(lg->ring, (const char *)p + first, n - first);
}

/* Copy n bytes out of the ring from offset off (any: it wraps). */
static void
ring_out(const struct zp_log *lg, size_t off, void *p, size_t n)
{
	size_t	first;

	off %= ZP_LOG_QUEUE;
	first = ZP_LOG_QUEUE - off < n ? ZP_LOG_QUEUE - off : n;
	memcpy(p, lg->ring + off, first);
	memcpy((char *)p + first, lg->ring, n - first);
}

/*
 * Hand a finished line to the sink, mu held: into the queue while the
 * log thread runs (dropped and counted when it is full: a relay thread
 * must not wait for the disk), else written here as before it started.
 */
static void
log_put(struct zp_log *lg, int level, const char *line, size_t len)
{
	struct log_rec	rec;
	size_t		need = sizeof(rec) + len + 1;

	if (!lg->running) {
		log_write(lg, level, line, len);
		return;
	}
	if (need > ZP_LOG_QUEUE - lg->used) {
		__atomic_add_fetch(&lg->dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	rec.len = (uint16_t)len;
	rec.level = (uint16_t)level;
	ring_in(lg, lg->head + lg->used, &rec, sizeof(rec));
	ring_in(lg, lg->head + lg->used + sizeof(rec), line, len + 1);
	lg->used += need;
	if (lg->sleeping)
		pthread_cond_signal(&lg->wake);
}

/* Build one line and hand it on, mu held; filter and rate limit passed. */
static void
log_emit(struct zp_log *lg, int level, const char *msg,
    const struct zp_conn_record *r)
{
	char	line[ZP_LOG_LINE_MAX];
	size_t	len;

	len = log_format(lg, level, msg, r, line);
	log_put(lg, level, line, len);
}

/* True when the logger has somewhere to write. */
static int
log_usable(const struct zp_log *lg)
{
	return lg->live;
}

/* Write "N log lines suppressed" for the lines the limit held back. */
static void
log_report_dropped(struct zp_log *lg)
{
	char	msg[64];

	snprintf(msg, sizeof(msg), "%lu log lines suppressed",
	    lg->rl_dropped);
	lg->rl_dropped = 0;
	/*
	 * Not filtered by level: the lines it counts passed the filter, and
	 * under -q (errors only) it is the one trace of an error storm.
	 */
	log_emit(lg, ZP_LOG_WARN, msg, NULL);
}

/*
 * The rate limit: may a line (already enabled) be written now? Limited
 * lines (WARN and ERROR, and those of zp_log_conn_limited()) beyond
 * ZP_LOG_RATE in a one-second window are counted instead. The first line
 * of any level once such a window is over is preceded by the count.
 */
static int
log_admit(struct zp_log *lg, int limited)
{
	struct timespec	now;
	long long	ms;

	if (!limited && lg->rl_dropped == 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long long)(now.tv_sec - lg->rl_window.tv_sec) * 1000 +
	    (now.tv_nsec - lg->rl_window.tv_nsec) / 1000000;
	if (ms >= 1000 || ms < 0) {
		if (lg->rl_dropped > 0)
			log_report_dropped(lg);
		lg->rl_window = now;
		lg->rl_count = 0;
	}
	if (!limited)
		return 1;
	if (lg->rl_count >= ZP_LOG_RATE) {
		lg->rl_dropped++;
		return 0;
	}
	lg->rl_count++;
	return 1;
}

/*
 * Open path for appending (created 0640) as a FILE whose descriptor is
 * not inherited. Returns it, or NULL with errno set.
 */
static FILE *
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
static void
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

/* Set up a logger writing to fp (not owned) at the given level, as text. */
void
zp_log_init(struct zp_log *lg, FILE *fp, int level)
{
	memset(lg, 0, sizeof(*lg));
	pthread_mutex_init(&lg->mu, NULL);
	pthread_cond_init(&lg->wake, NULL);
	pthread_cond_init(&lg->idle, NULL);
	lg->fp = fp;
	lg->live = fp != NULL;
	lg->level = level;
	lg->sink = ZP_LOG_STDERR;
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

/*
 * Open the log file's path again and swap it in, on the thread that
 * writes the log. On failure keep the old file and say so in it: through
 * zp_log() when called before the log thread runs, else written here
 * (this is the log thread). Returns 0 or -1.
 */
static int
log_reopen_now(struct zp_log *lg, int threaded)
{
	FILE	*fp;
	char	 q[ZP_ESCLEN], msg[ZP_LOG_LINE_MAX], line[ZP_LOG_LINE_MAX];
	size_t	 len;
	int	 e;

	if ((fp = log_open_file(lg->path)) == NULL) {
		e = errno;
		snprintf(msg, sizeof(msg), "cannot reopen log file '%s': %s; "
		    "still writing to the old file", zp_escape(lg->path, q,
		    sizeof(q)), strerror(e));
		if (!threaded) {
			zp_log(lg, ZP_LOG_ERROR, "%s", msg);
			return -1;
		}
		len = log_format(lg, ZP_LOG_ERROR, msg, NULL, line);
		log_write(lg, ZP_LOG_ERROR, line, len);
		return -1;
	}
	if (!threaded)
		pthread_mutex_lock(&lg->mu);
	fclose(lg->fp);
	lg->fp = fp;
	if (!threaded) {
		pthread_mutex_unlock(&lg->mu);
		return 0;
	}
	if (zp_log_enabled(lg, ZP_LOG_NOTICE)) {
		len = log_format(lg, ZP_LOG_NOTICE, "log reopened", NULL, line);
		log_write(lg, ZP_LOG_NOTICE, line, len);
	}
	return 0;
}

/*
 * Reopen the log file after logrotate moved the old one away: here
 * before the log thread runs, else on it (the open is a disk call).
 */
int
zp_log_reopen(struct zp_log *lg)
{
	int	running;

	if (lg->sink != ZP_LOG_FILE)
		return 0;
	pthread_mutex_lock(&lg->mu);
	if ((running = lg->running)) {
		lg->reopen = 1;
		lg->reopen_at = lg->used;
		pthread_cond_signal(&lg->wake);
	}
	pthread_mutex_unlock(&lg->mu);
	/* fp is the log thread's while it runs. */
	if (running)
		return 1;
	if (lg->fp == NULL)
		return 0;
	return log_reopen_now(lg, 0);
}

/* Write the "lines dropped" line if the full queue refused any. */
static void
log_report_lost(struct zp_log *lg)
{
	char		msg[96], line[ZP_LOG_LINE_MAX];
	size_t		len;
	uint64_t	n;

	n = __atomic_load_n(&lg->dropped, __ATOMIC_RELAXED) - lg->reported;
	/* Told once syslog is back; said into the void it would be lost. */
	if (n == 0 || lg->syslog_down)
		return;
	lg->reported += n;
	/* Not filtered: the lines it counts passed the filter. */
	if (lg->syslog_lost > 0) {
		snprintf(msg, sizeof(msg), "log: %llu lines dropped: nothing "
		    "listened on %s", (unsigned long long)lg->syslog_lost,
		    _PATH_LOG);
		n -= lg->syslog_lost;
		lg->syslog_lost = 0;
		len = log_format(lg, ZP_LOG_WARN, msg, NULL, line);
		log_write(lg, ZP_LOG_WARN, line, len);
	}
	if (n == 0)
		return;
	snprintf(msg, sizeof(msg), "log: %llu lines dropped: the log could "
	    "not keep up", (unsigned long long)n);
	len = log_format(lg, ZP_LOG_WARN, msg, NULL, line);
	log_write(lg, ZP_LOG_WARN, line, len);
}

/* Lines taken out of the queue at once: fewer wake-ups and lock turns. */
#define LOG_BATCH	(64 * 1024)

/*
 * The log thread: take queued lines out under mu, write them with mu
 * let go, so that a blocked sink holds up no one that logs. Ends once
 * stopping and the queue is empty.
 */
static void *
log_main(void *arg)
{
	struct zp_log	*lg = arg;
	struct log_rec	 rec;
	char		*batch;
	size_t		 n, k, off;
	int		 reopen;

	if ((batch = malloc(LOG_BATCH)) == NULL)
		abort();
	pthread_mutex_lock(&lg->mu);
	for (;;) {
		while (lg->used == 0 && !lg->reopen && !lg->stopping) {
			lg->sleeping = 1;
			pthread_cond_wait(&lg->wake, &lg->mu);
			lg->sleeping = 0;
		}
		if (lg->used == 0 && !lg->reopen)
			break;
		/*
		 * A record always fits: a line is < ZP_LOG_LINE_MAX. A
		 * reopen comes after the lines queued before it, no later.
		 */
		n = 0;
		while (lg->used > 0 && !(lg->reopen && lg->reopen_at == 0)) {
			ring_out(lg, lg->head, &rec, sizeof(rec));
			k = sizeof(rec) + rec.len + 1;
			if (n + k > LOG_BATCH)
				break;
			ring_out(lg, lg->head, batch + n, k);
			n += k;
			lg->head = (lg->head + k) % ZP_LOG_QUEUE;
			lg->used -= k;
			if (lg->reopen)
				lg->reopen_at -= k;
		}
		if ((reopen = lg->reopen && lg->reopen_at == 0))
			lg->reopen = 0;
		lg->writing = 1;
		pthread_mutex_unlock(&lg->mu);

		for (off = 0; off < n; off += sizeof(rec) + rec.len + 1) {
			memcpy(&rec, batch + off, sizeof(rec));
			log_write(lg, rec.level, batch + off + sizeof(rec),
			    rec.len);
		}
		/* Lines queued before the request went to the old file. */
		if (reopen)
			(void)log_reopen_now(lg, 1);
		log_report_lost(lg);

		pthread_mutex_lock(&lg->mu);
		lg->writing = 0;
		if (lg->used == 0 && !lg->reopen)
			pthread_cond_broadcast(&lg->idle);
	}
	/* Callers write their lines themselves from now on, in order. */
	lg->running = 0;
	pthread_cond_broadcast(&lg->idle);
	pthread_mutex_unlock(&lg->mu);
	free(batch);
	return NULL;
}

/*
 * Start the log thread, with every signal blocked: they are the loops'.
 * Returns 0, or -1 with err filled.
 */
int
zp_log_start(struct zp_log *lg, char *err, size_t errlen)
{
	sigset_t	all, old;
	int		e;

	if (lg->running || !lg->live)
		return 0;
	if (lg->ring == NULL && (lg->ring = malloc(ZP_LOG_QUEUE)) == NULL) {
		zp_seterr(err, errlen, "log thread: %s", strerror(errno));
		return -1;
	}
	lg->head = lg->used = 0;
	lg->stopping = 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_mutex_lock(&lg->mu);
	lg->running = 1;
	if ((e = pthread_create(&lg->thread, NULL, log_main, lg)) != 0)
		lg->running = 0;
	else
		(void)pthread_setname_np(lg->thread, "zp-log");
	pthread_mutex_unlock(&lg->mu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		zp_seterr(err, errlen, "log thread: %s", strerror(e));
		return -1;
	}
	return 0;
}

/* Wait until the queue is empty and written; tests and exit only. */
void
zp_log_flush(struct zp_log *lg)
{
	pthread_mutex_lock(&lg->mu);
	while (lg->running && (lg->used > 0 || lg->writing || lg->reopen))
		pthread_cond_wait(&lg->idle, &lg->mu);
	pthread_mutex_unlock(&lg->mu);
}

/* Write what is queued and end the log thread. */
void
zp_log_stop(struct zp_log *lg)
{
	int	started;

	pthread_mutex_lock(&lg->mu);
	started = lg->running;
	lg->stopping = 1;
	pthread_cond_signal(&lg->wake);
	pthread_mutex_unlock(&lg->mu);
	if (started)
		pthread_join(lg->thread, NULL);
	lg->stopping = 0;
	free(lg->ring);
	lg->ring = NULL;
}

/* Lines the full queue dropped; read from any thread. */
uint64_t
zp_log_dropped(const struct zp_log *lg)
{
	return __atomic_load_n(&lg->dropped, __ATOMIC_RELAXED);
}

/* Report what the rate limit held back, close the file or syslog, free. */
void
zp_log_close(struct zp_log *lg)
{
	zp_log_stop(lg);
	if (lg->rl_dropped > 0 && log_usable(lg))
		log_report_dropped(lg);
	log_close_sink(lg);
	lg->json = 0;
	lg->rl_dropped = 0;
}

/*
 * A connection's line: key=value text (the format scripts grep), or a
 * JSON object with the same fields; under the rate limit if limited.
 */
static void
log_conn(struct zp_log *lg, int level, const struct zp_conn_record *r,
    int limited)
{
	char		 msg[ZP_LOG_LINE_MAX], line[ZP_LOG_LINE_MAX];
	const char	*q1 = "", *error = "", *q2 = "";
	const char	*pk = "", *peer = "";
	const char	*d1 = "", *dst = "";
	size_t		 len;
	int		 saved = errno;

	if (!zp_log_enabled(lg, level))
		return;
	if (lg->json) {
		len = log_format(lg, level, NULL, r, line);
		pthread_mutex_lock(&lg->mu);
		if (log_admit(lg, limited))
			log_put(lg, level, line, len);
		pthread_mutex_unlock(&lg->mu);
		errno = saved;
		return;
	}
	if (r->peer != NULL) {
		pk = " peer=";
		peer = r->peer;
	}
	if (r->error != NULL) {
		q1 = " error=\"";
		error = r->error;
		q2 = "\"";
	}
	if (r->dst != NULL) {
		d1 = " dst=";
		dst = r->dst;
	}
#define NZ(s)	((s) != NULL ? (s) : "-")
	snprintf(msg, sizeof(msg), "conn=%llu client=%s%s%s upstream=%s%s%s "
	    "mode=%s up=%llu down=%llu duration=%.3fs end=%s%s%s%s",
	    (unsigned long long)r->id, NZ(r->client), pk, peer,
	    NZ(r->upstream), d1, dst, NZ(r->mode), (unsigned long long)r->up,
	    (unsigned long long)r->down, r->duration, NZ(r->end), q1, error,
	    q2);
#undef NZ
	len = log_format(lg, level, msg, NULL, line);
	pthread_mutex_lock(&lg->mu);
	if (log_admit(lg, limited))
		log_put(lg, level, line, len);
	pthread_mutex_unlock(&lg->mu);
	errno = saved;
}

/*
 * A connection's line. A failed client's line is a warning, limited like
 * the others; but with -v the operator asked for every connection, failed
 * or not, and a storm of short successful ones would write as much.
 */
void
zp_log_conn(struct zp_log *lg, int level, const struct zp_conn_record *r)
{
	log_conn(lg, level, r, level <= ZP_LOG_WARN &&
	    !zp_log_enabled(lg, ZP_LOG_CONN));
}

/* A connection's line, rate-limited at any level. */
void
zp_log_conn_limited(struct zp_log *lg, int level,
    const struct zp_conn_record *r)
{
	log_conn(lg, level, r, 1);
}

/* True when a line at level would be written. */
int
zp_log_enabled(const struct zp_log *lg, int level)
{
	return level <= lg->level && log_usable(lg);
}

/*
 * Write one line if level is enabled and the rate limit lets it through.
 * errno is kept: a caller may still want it after logging.
 */
void
zp_log(struct zp_log *lg, int level, const char *fmt, ...)
{
	char	msg[ZP_LOG_LINE_MAX], line[ZP_LOG_LINE_MAX];
	va_list	ap;
	size_t	len;
	int	n, saved = errno;

	if (!zp_log_enabled(lg, level))
		return;
	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/*
	 * A message cut here needs no care: the line has less room than msg
	 * for it, so buf_str() cuts it first, at a character boundary.
	 */
	if (n < 0)
		return;
	/* Formatted before the lock: other threads wait only for a copy. */
	len = log_format(lg, level, msg, NULL, line);
	pthread_mutex_lock(&lg->mu);
	if (log_admit(lg, level <= ZP_LOG_WARN))
		log_put(lg, level, line, len);
	pthread_mutex_unlock(&lg->mu);
	errno = saved;
}

/* Fill the caller's error buffer; see log.h. */
void
zp_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list	ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
 * Escape s for a one-line message; see log.h. Each byte becomes one token
 * (itself or an escape); tokens are written while they fit, and the last
 * point where "..." still fits after them is remembered, so that a value
 * cut short never ends inside an escape.
 */
const char *
zp_escape(const char *s, char *buf, size_t len)
{
	const unsigned char	*u = (const unsigned char *)s;
	char			 tok[5];
	size_t			 n = 0, cut = 0, k;

	if (len == 0)
		return buf;
	for (; *u != '\0'; u++) {
		switch (*u) {
		case '\n':
			memcpy(tok, "\\n", 3);
			break;
		case '\t':
			memcpy(tok, "\\t", 3);
			break;
		case '\r':
			memcpy(tok, "\\r", 3);
			break;
		case '\\':
		case '\'':
		case '"':
			tok[0] = '\\';
			tok[1] = (char)*u;
			tok[2] = '\0';
			break;
		default:
			if (*u < 0x20 || *u > 0x7e)
				snprintf(tok, sizeof(tok), "\\x%02x", *u);
			else {
				tok[0] = (char)*u;
				tok[1] = '\0';
			}
			break;
		}
		k = strlen(tok);
		if (n + k > len - 1) {
			/* Cut: back to where "..." (or what of it fits) goes. */
			n = cut;
			for (k = 0; k < 3 && n < len - 1; k++)
				buf[n++] = '.';
			break;
		}
		memcpy(buf + n, tok, k);
		n += k;
		if (n + 3 <= len - 1)
			cut = n;
	}
	buf[n] = '\0';
	return buf;
}
