/*
 * log.c - one line per event, to stderr, a file or syslog, as text or JSON:
 * the queue, the log thread and the calls that log. A line is built in
 * log_format.c and written in log_sink.c.
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

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

#include "lib/log.h"
#include "lib/log_int.h"

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
	const char	*t1 = "", *tls = "", *c1 = "", *tcl = "", *c2 = "";
	const char	*u1 = "", *utls = "";
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
	if (r->tls != NULL) {
		t1 = " tls=";
		tls = r->tls;
	}
	if (r->tls_client != NULL) {
		c1 = " tls_client=\"";
		tcl = r->tls_client;
		c2 = "\"";
	}
	if (r->tls_upstream != NULL) {
		u1 = " tls_upstream=";
		utls = r->tls_upstream;
	}
#define NZ(s)	((s) != NULL ? (s) : "-")
	snprintf(msg, sizeof(msg), "conn=%llu client=%s%s%s upstream=%s%s%s "
	    "mode=%s%s%s%s%s%s%s%s up=%llu down=%llu duration=%.3fs "
	    "end=%s%s%s%s",
	    (unsigned long long)r->id, NZ(r->client), pk, peer,
	    NZ(r->upstream), d1, dst, NZ(r->mode), t1, tls, c1, tcl, c2,
	    u1, utls,
	    (unsigned long long)r->up,
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
	/* Relaxed: zproxy ctl reload may change it while threads log. */
	return level <= __atomic_load_n(&lg->level, __ATOMIC_RELAXED) &&
	    log_usable(lg);
}

void
zp_log_set_level(struct zp_log *lg, int level)
{
	__atomic_store_n(&lg->level, level, __ATOMIC_RELAXED);
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
