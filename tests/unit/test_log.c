/*
 * test_log.c - unit tests for log.c: the text and JSON line formats,
 * escaping and truncation, connection records, level filtering, the file
 * sink's open / reopen / close, the rate limit, and the syslog sink.
 *
 * Every test logs to a file in its own temporary directory through
 * zp_log_open() and reads that file back. JSON lines are checked by a
 * small strict parser below (flat objects of strings, numbers and null,
 * as the logger writes), which also decodes values so that escaping is
 * checked as a round trip.
 *
 * Most tests run twice: as the logger runs before zp_log_start() (its
 * callers write), and with the log thread (lines queue; fx_read() flushes
 * first). The queue's own tests come last: a blocked sink, many threads.
 *
 * openlog, syslog and closelog are defined here, so that the logger's
 * calls land in this file (the executable's symbols come first): they
 * record what they are given, then pass it on to the C library.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
/* Keep syslog(3) a plain function here, not an inline wrapper. */
#undef _FORTIFY_SOURCE

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <paths.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/log.h"

#define TIME_RE	"[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:" \
		"[0-6][0-9]\\.[0-9]{3}Z"

#define NSYSLOG	16

/* What the logger handed to syslog(3); reset by fx_setup. */
static struct {
	int	open;			/* openlog'ed, not yet closelog'ed */
	char	ident[32];
	int	option;
	int	facility;
	int	n;			/* messages seen */
	int	pri[NSYSLOG];
	char	msg[NSYSLOG][ZP_LOG_LINE_MAX];
} sl;

/* The C library's function that the one here stands for. */
static void *
libc_fn(const char *name)
{
	void	*fn;

	if ((fn = dlsym(RTLD_NEXT, name)) == NULL)
		fail_msg("dlsym %s: %s", name, dlerror());
	return fn;
}

void
openlog(const char *ident, int option, int facility)
{
	void	(*real)(const char *, int, int);

	sl.open = 1;
	snprintf(sl.ident, sizeof(sl.ident), "%s", ident);
	sl.option = option;
	sl.facility = facility;
	*(void **)&real = libc_fn("openlog");
	real(ident, option, facility);
}

void
closelog(void)
{
	void	(*real)(void);

	sl.open = 0;
	*(void **)&real = libc_fn("closelog");
	real();
}

/* Record one message, then have the C library send it. */
static void __attribute__((format(printf, 2, 0)))
sl_record(int pri, const char *fmt, va_list ap)
{
	va_list	ap2;

	if (sl.n < NSYSLOG) {
		sl.pri[sl.n] = pri;
		va_copy(ap2, ap);
		vsnprintf(sl.msg[sl.n], sizeof(sl.msg[0]), fmt, ap2);
		va_end(ap2);
		sl.n++;
	}
	vsyslog(pri, fmt, ap);
}

void
syslog(int pri, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	sl_record(pri, fmt, ap);
	va_end(ap);
}

/* What log.c calls instead of syslog when built with _FORTIFY_SOURCE. */
void	__syslog_chk(int, int, const char *, ...)
	    __attribute__((format(printf, 3, 4)));

void
__syslog_chk(int pri, int flag, const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	sl_record(pri, fmt, ap);
	va_end(ap);
}

/*
 * /dev/log as log.c's probe finds it: 0, a daemon listens there (the
 * probe's connect succeeds, without a socket behind it), or the errno
 * its connect fails with. Reset to 0 by fx_setup. Only connects to
 * _PATH_LOG land here: glibc's own openlog/syslog call an internal
 * connect that this does not replace.
 */
static int	devlog_errno;

int
connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	const struct sockaddr_un	*sun = (const void *)sa;
	int				(*real)(int, const struct sockaddr *,
					    socklen_t);

	if (sa->sa_family == AF_UNIX && strcmp(sun->sun_path, _PATH_LOG) == 0) {
		if (devlog_errno == 0)
			return 0;
		errno = devlog_errno;
		return -1;
	}
	*(void **)&real = libc_fn("connect");
	return real(fd, sa, len);
}

/* Per-test state: a temporary directory, a log file in it, a logger. */
struct fx {
	char		dir[64];
	char		path[256];
	char		err[256];
	struct zp_log	lg;
	char		*text;		/* the last file read */
	int		 threaded;	/* fx_open() starts the log thread */
};

/* Remove every file in dir, then dir; dir may be gone already. */
static void
rm_dir(const char *dir)
{
	char		 p[PATH_MAX];
	DIR		*d;
	struct dirent	*de;

	if ((d = opendir(dir)) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

/* A fresh directory; the logger is set up as zproxy does, on stderr. */
static int
fx_setup(void **state)
{
	struct fx	*fx;

	if ((fx = calloc(1, sizeof(*fx))) == NULL)
		return -1;
	snprintf(fx->dir, sizeof(fx->dir), "/tmp/test_log.XXXXXX");
	if (mkdtemp(fx->dir) == NULL) {
		free(fx);
		return -1;
	}
	snprintf(fx->path, sizeof(fx->path), "%s/zproxy.log", fx->dir);
	zp_log_init(&fx->lg, stderr, ZP_LOG_DEBUG);
	devlog_errno = 0;
	memset(&sl, 0, sizeof(sl));
	*state = fx;
	return 0;
}

/* The same, with the log thread started by fx_open(). */
static int
fx_setup_threaded(void **state)
{
	if (fx_setup(state) == -1)
		return -1;
	((struct fx *)*state)->threaded = 1;
	return 0;
}

static int
fx_teardown(void **state)
{
	struct fx	*fx = *state;

	zp_log_close(&fx->lg);
	rm_dir(fx->dir);
	free(fx->text);
	free(fx);
	return 0;
}

/* Open fx's log file with the given format, failing the test on error. */
static void
fx_open(struct fx *fx, int json)
{
	int	rc;

	rc = zp_log_open(&fx->lg, fx->path, 0, json, fx->err,
	    sizeof(fx->err));
	if (rc != 0)
		fail_msg("zp_log_open: %s", fx->err);
	if (fx->threaded && zp_log_start(&fx->lg, fx->err,
	    sizeof(fx->err)) != 0)
		fail_msg("zp_log_start: %s", fx->err);
}

/* The whole of a file (NUL-terminated), kept in fx until teardown. */
static const char *
fx_read(struct fx *fx, const char *path)
{
	FILE	*fp;
	long	 n;

	zp_log_flush(&fx->lg);
	free(fx->text);
	fx->text = NULL;
	assert_non_null(fp = fopen(path, "r"));
	assert_int_equal(fseek(fp, 0, SEEK_END), 0);
	assert_true((n = ftell(fp)) >= 0);
	rewind(fp);
	assert_non_null(fx->text = malloc((size_t)n + 1));
	assert_int_equal(fread(fx->text, 1, (size_t)n, fp), (size_t)n);
	fx->text[n] = '\0';
	fclose(fp);
	return fx->text;
}

/* How many lines s holds; every line must end in a newline. */
static int
count_lines(const char *s)
{
	int	n = 0;

	for (; *s != '\0'; s++)
		if (*s == '\n')
			n++;
	return n;
}

/* The n-th line of s (from 0) without its newline, into buf. */
static const char *
nth_line(const char *s, int n, char *buf, size_t size)
{
	const char	*e;
	size_t		 len;

	for (; n > 0 && s != NULL; n--)
		if ((s = strchr(s, '\n')) != NULL)
			s++;
	if (s == NULL || (e = strchr(s, '\n')) == NULL)
		return NULL;
	len = (size_t)(e - s);
	if (len >= size)
		len = size - 1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return buf;
}

/* True if s matches the POSIX extended regular expression re. */
static int
matches(const char *s, const char *re)
{
	regex_t	rx;
	int	rc;

	if (regcomp(&rx, re, REG_EXTENDED | REG_NOSUB) != 0)
		fail_msg("bad regex %s", re);
	rc = regexec(&rx, s, 0, NULL, 0);
	regfree(&rx);
	return rc == 0;
}

/* The part of a line after its timestamp: the fixed part, comparable. */
static const char *
after_time(const char *line)
{
	const char	*s = strchr(line, 'Z');

	assert_non_null(s);
	return s + 1;
}

/*
 * The length of the well-formed UTF-8 sequence at s, or 0: written
 * independently of log.c's, to check it.
 */
static size_t
u8len(const unsigned char *s)
{
	size_t	len, i;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4;
	else
		return 0;
	for (i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return len;
}

/* True if the NUL-terminated s is all well-formed UTF-8. */
static int
utf8_ok(const char *s)
{
	const unsigned char	*u = (const unsigned char *)s;
	size_t			 k;

	while (*u != '\0') {
		if ((k = u8len(u)) == 0)
			return 0;
		u += k;
	}
	return 1;
}

/* ---- a strict JSON parser for flat objects ---------------------------- */

/* The parser's position in the line. */
struct jp {
	const char	*s;
};

/* Append c to out (bounded), the value being decoded. */
static void
jp_put(char *out, size_t *n, size_t size, int c)
{
	if (out != NULL && *n + 1 < size)
		out[(*n)++] = (char)c;
}

/* Parse a JSON string at p->s, decoding it into out. 0 or -1. */
static int
jp_string(struct jp *p, char *out, size_t size)
{
	const unsigned char	*u;
	unsigned		 cp;
	size_t			 n = 0, k;
	int			 i;

	if (*p->s++ != '"')
		return -1;
	for (;;) {
		u = (const unsigned char *)p->s;
		if (*u == '"')
			break;
		if (*u < 0x20)
			return -1;	/* raw control character, or the end */
		if (*u == '\\') {
			p->s++;
			switch (*p->s) {
			case '"': case '\\': case '/':
				jp_put(out, &n, size, *p->s);
				break;
			case 'b': jp_put(out, &n, size, '\b'); break;
			case 'f': jp_put(out, &n, size, '\f'); break;
			case 'n': jp_put(out, &n, size, '\n'); break;
			case 'r': jp_put(out, &n, size, '\r'); break;
			case 't': jp_put(out, &n, size, '\t'); break;
			case 'u':
				cp = 0;
				for (i = 1; i <= 4; i++) {
					char	c = p->s[i];

					cp <<= 4;
					if (c >= '0' && c <= '9')
						cp |= (unsigned)(c - '0');
					else if (c >= 'a' && c <= 'f')
						cp |= (unsigned)(c - 'a' + 10);
					else if (c >= 'A' && c <= 'F')
						cp |= (unsigned)(c - 'A' + 10);
					else
						return -1;
				}
				p->s += 4;
				/* Enough UTF-8 for what the logger writes. */
				if (cp < 0x80)
					jp_put(out, &n, size, (int)cp);
				else if (cp < 0x800) {
					jp_put(out, &n, size, 0xc0 | (cp >> 6));
					jp_put(out, &n, size,
					    0x80 | (cp & 0x3f));
				} else {
					jp_put(out, &n, size,
					    0xe0 | (cp >> 12));
					jp_put(out, &n, size,
					    0x80 | ((cp >> 6) & 0x3f));
					jp_put(out, &n, size,
					    0x80 | (cp & 0x3f));
				}
				break;
			default:
				return -1;
			}
			p->s++;
			continue;
		}
		if ((k = u8len(u)) == 0)
			return -1;
		while (k-- > 0)
			jp_put(out, &n, size, *p->s++);
	}
	p->s++;
	if (out != NULL)
		out[n] = '\0';
	return 0;
}

/* Parse a JSON number or null at p->s, copying its text into out. */
static int
jp_scalar(struct jp *p, char *out, size_t size)
{
	const char	*b = p->s;
	size_t		 n;

	if (strncmp(p->s, "null", 4) == 0)
		p->s += 4;
	else {
		if (*p->s == '-')
			p->s++;
		if (*p->s == '0')
			p->s++;
		else if (*p->s >= '1' && *p->s <= '9')
			while (*p->s >= '0' && *p->s <= '9')
				p->s++;
		else
			return -1;
		if (*p->s == '.') {
			p->s++;
			if (*p->s < '0' || *p->s > '9')
				return -1;
			while (*p->s >= '0' && *p->s <= '9')
				p->s++;
		}
	}
	if (out != NULL) {
		n = (size_t)(p->s - b) < size ? (size_t)(p->s - b) : size - 1;
		memcpy(out, b, n);
		out[n] = '\0';
	}
	return 0;
}

/*
 * Check that line is exactly one flat JSON object followed by a newline.
 * If key is set, its decoded value (a string's content, a number's or
 * null's text) goes to val. Returns 0, -1 if invalid, -2 if key is not
 * there.
 */
static int
json_check(const char *line, const char *key, char *val, size_t vallen)
{
	struct jp	p = { line };
	char		k[64];
	int		keep, found = 0;

	if (*p.s++ != '{')
		return -1;
	if (*p.s != '}') {
		for (;;) {
			if (jp_string(&p, k, sizeof(k)) == -1 || *p.s++ != ':')
				return -1;
			keep = key != NULL && strcmp(k, key) == 0;
			if (keep)
				found = 1;
			if (*p.s == '"') {
				if (jp_string(&p, keep ? val : NULL,
				    vallen) == -1)
					return -1;
			} else if (jp_scalar(&p, keep ? val : NULL,
			    vallen) == -1)
				return -1;
			if (*p.s == '}')
				break;
			if (*p.s++ != ',')
				return -1;
		}
	}
	p.s++;
	if (strcmp(p.s, "\n") != 0)
		return -1;
	return key == NULL || found ? 0 : -2;
}

/* Check one JSON line and return the value of key (static buffer). */
static const char *
jget(const char *line, const char *key)
{
	static char	val[ZP_LOG_LINE_MAX];
	char		l[ZP_LOG_LINE_MAX + 2];

	snprintf(l, sizeof(l), "%s\n", line);
	if (json_check(l, key, val, sizeof(val)) != 0)
		fail_msg("not valid JSON with \"%s\": %s", key, line);
	return val;
}

/* The fixed record of the brief, and the same with error NULL. */
static const struct zp_conn_record rec = {
	.id = 12, .client = "127.0.0.1:40000", .upstream = "127.0.0.1:8080",
	.mode = "splice", .up = 1048576, .down = 0, .duration = 0.512,
	.end = "closed", .error = "Connection reset by peer"
};

/* ---- tests ------------------------------------------------------------ */

/*
 * A text line is "TIME zproxy[PID]: message\n": UTC to the millisecond,
 * our pid, the message, one newline, nothing else.
 */
static void
test_text_format(void **state)
{
	struct fx	*fx = *state;
	char		 re[256];

	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "hello %s %d", "world", 42);
	snprintf(re, sizeof(re), "^" TIME_RE " zproxy\\[%ld\\]: hello world "
	    "42\n$", (long)getpid());
	assert_true(matches(fx_read(fx, fx->path), re));
}

/*
 * The file is created 0640 (owner writes, group reads, nobody else),
 * appended to rather than truncated, and not inherited across exec.
 */
static void
test_file_create(void **state)
{
	struct fx	*fx = *state;
	struct stat	 st;
	mode_t		 old;
	FILE		*fp;

	assert_non_null(fp = fopen(fx->path, "w"));
	fputs("earlier\n", fp);
	fclose(fp);
	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "later");
	assert_int_equal(count_lines(fx_read(fx, fx->path)), 2);
	assert_true(strncmp(fx->text, "earlier\n", 8) == 0);
	assert_true(fcntl(fileno(fx->lg.fp), F_GETFD) & FD_CLOEXEC);
	assert_true(fcntl(fileno(fx->lg.fp), F_GETFL) & O_APPEND);

	unlink(fx->path);
	old = umask(0);
	fx_open(fx, 0);
	umask(old);
	assert_int_equal(stat(fx->path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0640);
}

/*
 * Lines above the logger's level are not written, and zp_log_enabled
 * agrees with what is written.
 */
static void
test_level_filter(void **state)
{
	struct fx	*fx = *state;
	char		 l[256];

	fx_open(fx, 0);
	fx->lg.level = ZP_LOG_NOTICE;
	zp_log(&fx->lg, ZP_LOG_DEBUG, "debug");
	zp_log(&fx->lg, ZP_LOG_CONN, "conn");
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &rec);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "notice");
	zp_log(&fx->lg, ZP_LOG_WARN, "warn");
	zp_log(&fx->lg, ZP_LOG_ERROR, "error");
	assert_false(zp_log_enabled(&fx->lg, ZP_LOG_DEBUG));
	assert_false(zp_log_enabled(&fx->lg, ZP_LOG_CONN));
	assert_true(zp_log_enabled(&fx->lg, ZP_LOG_NOTICE));
	assert_true(zp_log_enabled(&fx->lg, ZP_LOG_ERROR));
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 3);
	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	assert_non_null(strstr(l, "]: notice"));
	assert_non_null(strstr(fx->text, ": warn\n"));
	assert_non_null(strstr(fx->text, ": error\n"));

	fx->lg.level = ZP_LOG_ERROR;
	assert_false(zp_log_enabled(&fx->lg, ZP_LOG_WARN));
	fx->lg.level = ZP_LOG_DEBUG;
	assert_true(zp_log_enabled(&fx->lg, ZP_LOG_DEBUG));
}

/*
 * A JSON line is exactly {"time","level","pid","msg"} in that order, the
 * time in the text format, the pid a number, and each level named as
 * syslog names it (a connection line is "info").
 */
static void
test_json_line(void **state)
{
	struct fx	*fx = *state;
	const char	*names[] = { "error", "warn", "notice", "info",
			    "debug" };
	char		 l[512], want[256];
	int		 i;

	fx_open(fx, 1);
	for (i = ZP_LOG_ERROR; i <= ZP_LOG_DEBUG; i++)
		zp_log(&fx->lg, i, "level %d", i);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 5);
	for (i = ZP_LOG_ERROR; i <= ZP_LOG_DEBUG; i++) {
		assert_non_null(nth_line(fx->text, i, l, sizeof(l)));
		assert_true(matches(jget(l, "time"), "^" TIME_RE "$"));
		assert_true(strncmp(l, "{\"time\":\"", 9) == 0);
		snprintf(want, sizeof(want), "\",\"level\":\"%s\",\"pid\":%ld,"
		    "\"msg\":\"level %d\"}", names[i], (long)getpid(), i);
		assert_string_equal(after_time(l), want);
		assert_string_equal(jget(l, "level"), names[i]);
	}
}

/*
 * JSON strings escape quotes, backslashes and control characters, keep
 * UTF-8, and replace a byte that is not UTF-8 by U+FFFD: the line parses
 * and the message decodes back to what was logged.
 */
static void
test_json_escape(void **state)
{
	struct fx	*fx = *state;
	const char	*msg = "say \"hi\" C:\\dir\nnext\ttab\r\x01\x1f\x7f "
			    "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 /";
	char		 l[512];

	fx_open(fx, 1);
	zp_log(&fx->lg, ZP_LOG_WARN, "%s", msg);
	zp_log(&fx->lg, ZP_LOG_WARN, "bad \xff\xc3 \xed\xa0\x80 end");
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 2);
	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	assert_non_null(strstr(l, "\"msg\":\"say \\\"hi\\\" C:\\\\dir\\nnext"
	    "\\ttab\\r\\u0001\\u001f\\u007f caf\xc3\xa9 \xe2\x82\xac "
	    "\xf0\x9f\x98\x80 /\"}"));
	assert_string_equal(jget(l, "msg"), msg);
	assert_non_null(nth_line(fx->text, 1, l, sizeof(l)));
	assert_true(utf8_ok(l));
	assert_string_equal(jget(l, "msg"), "bad \xef\xbf\xbd\xef\xbf\xbd "
	    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd end");
}

/*
 * Text lines show control characters and stray bytes as \xNN: a message
 * with a newline (from a peer, a resolver) cannot forge a second line.
 */
static void
test_text_escape(void **state)
{
	struct fx	*fx = *state;
	char		 l[512];

	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_WARN, "a\nFAKE zproxy[1]: b\tc\x7f \xff "
	    "caf\xc3\xa9 \"q\" \\");
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 1);
	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	assert_string_equal(strstr(l, "]: ") + 3, "a\\x0aFAKE zproxy[1]: "
	    "b\\x09c\\x7f \\xff caf\xc3\xa9 \"q\" \\");
}

/*
 * A connection record in text is the key=value line scripts grep, with
 * error="..." only when there is an error.
 */
static void
test_conn_text(void **state)
{
	struct fx		*fx = *state;
	struct zp_conn_record	 r = rec;
	char			 l[512], re[512];

	fx_open(fx, 0);
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	r.error = NULL;
	r.id = 13;
	r.up = 0;
	r.down = 77;
	r.duration = 2;
	r.mode = "copy";
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	r.peer = "10.0.0.1:5000";	/* the balancer of --accept-proxy */
	r.dst = "198.51.100.9:514";	/* --tproxy, -u original */
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 3);
	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	snprintf(re, sizeof(re), "^" TIME_RE " zproxy\\[%ld\\]: ",
	    (long)getpid());
	assert_true(matches(l, re));
	assert_string_equal(strstr(l, "]: ") + 3, "conn=12 "
	    "client=127.0.0.1:40000 upstream=127.0.0.1:8080 mode=splice "
	    "up=1048576 down=0 duration=0.512s end=closed "
	    "error=\"Connection reset by peer\"");
	assert_non_null(nth_line(fx->text, 1, l, sizeof(l)));
	assert_string_equal(strstr(l, "]: ") + 3, "conn=13 "
	    "client=127.0.0.1:40000 upstream=127.0.0.1:8080 mode=copy "
	    "up=0 down=77 duration=2.000s end=closed");
	assert_non_null(nth_line(fx->text, 2, l, sizeof(l)));
	assert_string_equal(strstr(l, "]: ") + 3, "conn=13 "
	    "client=127.0.0.1:40000 peer=10.0.0.1:5000 "
	    "upstream=127.0.0.1:8080 dst=198.51.100.9:514 mode=copy up=0 "
	    "down=77 duration=2.000s "
	    "end=closed");
}

/*
 * A connection record in JSON is the exact object of the design, level
 * "info" at CONN and "warn" at WARN, with "error" only when set.
 */
static void
test_conn_json(void **state)
{
	struct fx		*fx = *state;
	struct zp_conn_record	 r = rec;
	char			 l[512], want[512];

	fx_open(fx, 1);
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	r.error = NULL;
	zp_log_conn(&fx->lg, ZP_LOG_WARN, &r);
	r.peer = "[fd00::1]:5000";
	r.dst = "[2001:db8::9]:514";
	zp_log_conn(&fx->lg, ZP_LOG_WARN, &r);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 3);

	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	snprintf(want, sizeof(want), "\",\"level\":\"info\",\"pid\":%ld,"
	    "\"event\":\"conn\",\"conn\":12,\"client\":\"127.0.0.1:40000\","
	    "\"upstream\":\"127.0.0.1:8080\",\"mode\":\"splice\","
	    "\"up\":1048576,\"down\":0,\"duration\":0.512,\"end\":\"closed\","
	    "\"error\":\"Connection reset by peer\"}", (long)getpid());
	assert_string_equal(after_time(l), want);
	assert_true(matches(jget(l, "time"), "^" TIME_RE "$"));
	assert_string_equal(jget(l, "error"), "Connection reset by peer");

	assert_non_null(nth_line(fx->text, 1, l, sizeof(l)));
	snprintf(want, sizeof(want), "\",\"level\":\"warn\",\"pid\":%ld,"
	    "\"event\":\"conn\",\"conn\":12,\"client\":\"127.0.0.1:40000\","
	    "\"upstream\":\"127.0.0.1:8080\",\"mode\":\"splice\","
	    "\"up\":1048576,\"down\":0,\"duration\":0.512,\"end\":\"closed\"}",
	    (long)getpid());
	assert_string_equal(after_time(l), want);
	assert_string_equal(jget(l, "end"), "closed");

	assert_non_null(nth_line(fx->text, 2, l, sizeof(l)));
	snprintf(want, sizeof(want), "\",\"level\":\"warn\",\"pid\":%ld,"
	    "\"event\":\"conn\",\"conn\":12,\"client\":\"127.0.0.1:40000\","
	    "\"peer\":\"[fd00::1]:5000\",\"upstream\":\"127.0.0.1:8080\","
	    "\"dst\":\"[2001:db8::9]:514\",\"mode\":\"splice\",\"up\":1048576,"
	    "\"down\":0,\"duration\":0.512,\"end\":\"closed\"}", (long)getpid());
	assert_string_equal(after_time(l), want);
}

/*
 * Odd records still give valid lines: strings needing escapes, a NULL
 * field (null in JSON, "-" in text), a duration that is not a number.
 */
static void
test_conn_odd(void **state)
{
	struct fx		*fx = *state;
	struct zp_conn_record	 r = rec;
	char			 l[512];

	r.upstream = "name\"with\\quote";
	r.mode = NULL;
	r.duration = NAN;
	r.id = UINT64_MAX;
	fx_open(fx, 1);
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	fx_read(fx, fx->path);
	assert_non_null(nth_line(fx->text, 0, l, sizeof(l)));
	assert_string_equal(jget(l, "upstream"), "name\"with\\quote");
	assert_string_equal(jget(l, "mode"), "null");
	assert_string_equal(jget(l, "duration"), "null");
	assert_string_equal(jget(l, "conn"), "18446744073709551615");

	unlink(fx->path);
	fx_open(fx, 0);
	r.duration = 1.5;
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &r);
	fx_read(fx, fx->path);
	assert_non_null(strstr(fx->text, " mode=- up="));
}

/*
 * Reopen after logrotate renamed the file: the old file keeps the first
 * line, a new file at the path gets only the second.
 */
static void
test_reopen_rename(void **state)
{
	struct fx	*fx = *state;
	char		 old[PATH_MAX];

	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "first");
	snprintf(old, sizeof(old), "%s.1", fx->path);
	assert_int_equal(rename(fx->path, old), 0);
	assert_int_equal(zp_log_reopen(&fx->lg), 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "second");

	fx_read(fx, old);
	assert_int_equal(count_lines(fx->text), 1);
	assert_non_null(strstr(fx->text, ": first\n"));
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 1);
	assert_non_null(strstr(fx->text, ": second\n"));
}

/*
 * Reopen when the file's directory is gone fails, says why once in the
 * old file, and logging goes on into the old file.
 */
static void
test_reopen_fail(void **state)
{
	struct fx	*fx = *state;
	char		 sub[128], moved[128], want[512], l[512];

	snprintf(sub, sizeof(sub), "%s/logs", fx->dir);
	assert_int_equal(mkdir(sub, 0700), 0);
	snprintf(fx->path, sizeof(fx->path), "%s/zproxy.log", sub);
	snprintf(moved, sizeof(moved), "%s/moved.log", fx->dir);
	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "first");
	assert_int_equal(rename(fx->path, moved), 0);
	assert_int_equal(rmdir(sub), 0);

	errno = 0;
	assert_int_equal(zp_log_reopen(&fx->lg), -1);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "second");

	fx_read(fx, moved);
	assert_int_equal(count_lines(fx->text), 3);
	assert_non_null(strstr(nth_line(fx->text, 0, l, sizeof(l)), ": first"));
	snprintf(want, sizeof(want), ": cannot reopen log file '%s': %s; "
	    "still writing to the old file", fx->path, strerror(ENOENT));
	assert_non_null(strstr(nth_line(fx->text, 1, l, sizeof(l)), want));
	assert_non_null(strstr(nth_line(fx->text, 2, l, sizeof(l)),
	    ": second"));
	assert_int_equal(access(fx->path, F_OK), -1);
}

/* Reopen is a no-op returning 0 on stderr, syslog and a closed logger. */
static void
test_reopen_noop(void **state)
{
	struct fx	*fx = *state;
	struct zp_log	 lg;

	zp_log_init(&lg, stderr, ZP_LOG_ERROR);
	assert_int_equal(zp_log_reopen(&lg), 0);
	zp_log_close(&lg);
	assert_int_equal(zp_log_reopen(&lg), 0);
	assert_int_equal(zp_log_open(&fx->lg, NULL, 1, 0, fx->err,
	    sizeof(fx->err)), 0);
	assert_int_equal(zp_log_reopen(&fx->lg), 0);
}

/*
 * An unopenable path fails with the message main prints ("cannot open
 * log file 'PATH': strerror"), and leaves the logger as it was.
 */
static void
test_open_fail(void **state)
{
	struct fx	*fx = *state;
	char		 bad[160], want[300], small[16];

	fx_open(fx, 0);
	snprintf(bad, sizeof(bad), "%s/no/such/dir/zproxy.log", fx->dir);
	assert_int_equal(zp_log_open(&fx->lg, bad, 0, 1, fx->err,
	    sizeof(fx->err)), -1);
	snprintf(want, sizeof(want), "cannot open log file '%s': %s", bad,
	    strerror(ENOENT));
	assert_string_equal(fx->err, want);
	assert_int_equal(zp_log_open(&fx->lg, fx->dir, 0, 1, fx->err,
	    sizeof(fx->err)), -1);
	assert_non_null(strstr(fx->err, strerror(EISDIR)));

	/* A small buffer gets a cut message, not an overflow. */
	assert_int_equal(zp_log_open(&fx->lg, bad, 0, 0, small,
	    sizeof(small)), -1);
	assert_int_equal(strlen(small), sizeof(small) - 1);

	/* Still the first file, still text. */
	zp_log(&fx->lg, ZP_LOG_NOTICE, "still here");
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 1);
	assert_non_null(strstr(fx->text, "]: still here\n"));

	/* A file and syslog at once is refused. */
	assert_int_equal(zp_log_open(&fx->lg, fx->path, 1, 0, fx->err,
	    sizeof(fx->err)), -1);
	assert_true(strlen(fx->err) > 0);
}

/*
 * Opening another file lets go of the first; no path and no syslog
 * keep the sink and only set the format.
 */
static void
test_open_switch(void **state)
{
	struct fx	*fx = *state;
	char		 first[PATH_MAX];

	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "one");
	snprintf(first, sizeof(first), "%s", fx->path);
	snprintf(fx->path, sizeof(fx->path), "%s/other.log", fx->dir);
	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "two");
	assert_int_equal(zp_log_open(&fx->lg, NULL, 0, 1, fx->err,
	    sizeof(fx->err)), 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "three");
	assert_int_equal(count_lines(fx_read(fx, first)), 1);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 2);
	assert_non_null(strstr(fx->text, "]: two\n{\"time\":"));
}

/*
 * zp_log_init's stream (stderr in zproxy) is written to as text, as
 * before; close never closes it.
 */
static void
test_init_stream(void **state)
{
	struct zp_log	 lg;
	FILE		*fp;
	char		 buf[256], re[128];
	size_t		 n;

	assert_non_null(fp = tmpfile());
	zp_log_init(&lg, fp, ZP_LOG_NOTICE);
	zp_log(&lg, ZP_LOG_NOTICE, "to the stream");
	zp_log(&lg, ZP_LOG_DEBUG, "not this");
	zp_log_close(&lg);
	zp_log(&lg, ZP_LOG_ERROR, "nor this, after close");
	rewind(fp);
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	buf[n] = '\0';
	snprintf(re, sizeof(re), "^" TIME_RE " zproxy\\[%ld\\]: to the "
	    "stream\n$", (long)getpid());
	assert_true(matches(buf, re));
	assert_int_equal(fclose(fp), 0);	/* still open: ours */
}

/*
 * Close is safe twice, on an init-only logger, and on an open file;
 * afterwards nothing is enabled and logging is a harmless no-op.
 */
static void
test_close_twice(void **state)
{
	struct fx	*fx = *state;
	struct zp_log	 lg;

	zp_log_init(&lg, stderr, ZP_LOG_DEBUG);
	zp_log_close(&lg);
	zp_log_close(&lg);
	fx_open(fx, 1);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "before");
	zp_log_close(&fx->lg);
	zp_log_close(&fx->lg);
	assert_null(fx->lg.fp);
	assert_null(fx->lg.path);
	assert_false(zp_log_enabled(&fx->lg, ZP_LOG_ERROR));
	zp_log(&fx->lg, ZP_LOG_ERROR, "after");
	zp_log_conn(&fx->lg, ZP_LOG_ERROR, &rec);
	assert_int_equal(count_lines(fx_read(fx, fx->path)), 1);
}

/*
 * A message longer than a line is cut: the line is at most
 * ZP_LOG_LINE_MAX bytes, ends with one newline, and is still a line.
 */
static void
test_truncate_text(void **state)
{
	struct fx	*fx = *state;
	static char	 big[3 * ZP_LOG_LINE_MAX];

	memset(big, 'x', 3 * ZP_LOG_LINE_MAX - 1);
	big[3 * ZP_LOG_LINE_MAX - 1] = '\0';
	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "%s", big);
	/* Every byte escaped to four: the escapes are not split either. */
	memset(big, '\n', 3 * ZP_LOG_LINE_MAX - 1);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "%s", big);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 2);
	assert_true(strchr(fx->text, '\n') - fx->text + 1 <= ZP_LOG_LINE_MAX);
	assert_true(strchr(fx->text, '\n') - fx->text + 1 >=
	    ZP_LOG_LINE_MAX - 8);
	assert_true(matches(fx->text, "^[^\n]*: x+\n"));
	assert_true(matches(fx->text, "\n[^\n]*: (\\\\x0a)+\n$"));
	assert_true(strlen(fx->text) <= 2 * ZP_LOG_LINE_MAX);
}

/*
 * JSON lines cut anywhere (in a plain character, a two-byte escape, a
 * six-byte one, a multibyte character) still parse, stay UTF-8 and fit
 * the line.
 */
static void
test_truncate_json(void **state)
{
	struct fx	*fx = *state;
	const char	*units[] = { "x", "\"", "\x01", "\xc3\xa9",
			    "\xf0\x9f\x98\x80" };
	static char	 big[3 * ZP_LOG_LINE_MAX], l[ZP_LOG_LINE_MAX + 2];
	size_t		 u, pad, n;
	const char	*s;

	fx_open(fx, 1);
	for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
		/* Shift the cut over every position within a unit. */
		for (pad = 0; pad < 6; pad++) {
			memset(big, 'p', pad);
			n = pad;
			while (n + 4 < 3 * ZP_LOG_LINE_MAX) {
				memcpy(big + n, units[u], strlen(units[u]));
				n += strlen(units[u]);
			}
			big[n] = '\0';
			zp_log(&fx->lg, ZP_LOG_NOTICE, "%s", big);
		}
	}
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 5 * 6);
	for (s = fx->text; *s != '\0'; s = strchr(s, '\n') + 1) {
		n = (size_t)(strchr(s, '\n') - s) + 1;
		assert_true(n <= ZP_LOG_LINE_MAX);
		assert_true(n >= ZP_LOG_LINE_MAX - 8);
		memcpy(l, s, n);
		l[n] = '\0';
		assert_int_equal(json_check(l, "msg", NULL, 0), 0);
		assert_true(utf8_ok(l));
	}
}

/*
 * A text line cut in the middle of a multibyte character loses the
 * whole character, not half of it (which would show as \xNN bytes).
 */
static void
test_truncate_utf8(void **state)
{
	struct fx	*fx = *state;
	static char	 big[2 * ZP_LOG_LINE_MAX];
	size_t		 pad, n;
	const char	*s;

	fx_open(fx, 0);
	for (pad = 0; pad < 4; pad++) {
		memset(big, 'p', pad);
		for (n = pad; n + 4 < 2 * ZP_LOG_LINE_MAX; n += 4)
			memcpy(big + n, "\xf0\x9f\x98\x80", 4);
		big[n] = '\0';
		zp_log(&fx->lg, ZP_LOG_NOTICE, "%s", big);
	}
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 4);
	assert_true(utf8_ok(fx->text));
	assert_null(strstr(fx->text, "\\x"));
	for (s = fx->text; *s != '\0'; s = strchr(s, '\n') + 1)
		assert_true(strchr(s, '\n') - s + 1 <= ZP_LOG_LINE_MAX);
}

/*
 * A storm of WARN/ERROR lines: ZP_LOG_RATE are written in the window,
 * the rest counted; NOTICE and CONN lines are never limited, nor (the
 * logger writing every connection, as with -v) a failed connect's WARN
 * connection line; once the window is over (moved back here, not slept)
 * the next line is preceded by one "N log lines suppressed" warning, and
 * a new window opens.
 */
static void
test_rate_limit(void **state)
{
	struct fx	*fx = *state;
	char		 l[512];
	int		 i, n;

	fx_open(fx, 0);
	for (i = 0; i < 100; i++)
		zp_log(&fx->lg, i % 2 ? ZP_LOG_WARN : ZP_LOG_ERROR, "w %d", i);
	for (i = 0; i < 50; i++) {
		zp_log(&fx->lg, ZP_LOG_NOTICE, "notice %d", i);
		zp_log_conn(&fx->lg, ZP_LOG_CONN, &rec);
	}
	zp_log_conn(&fx->lg, ZP_LOG_WARN, &rec);	/* a refused connect */
	assert_int_equal(fx->lg.rl_dropped, 80);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), ZP_LOG_RATE + 101);
	assert_non_null(strstr(fx->text, ": w 19\n"));
	assert_null(strstr(fx->text, ": w 20\n"));
	assert_null(strstr(fx->text, "suppressed"));

	fx->lg.rl_window.tv_sec -= 2;
	zp_log(&fx->lg, ZP_LOG_NOTICE, "after the storm");
	for (i = 0; i < 30; i++)
		zp_log(&fx->lg, ZP_LOG_WARN, "again %d", i);
	fx_read(fx, fx->path);
	n = count_lines(fx->text);
	assert_int_equal(n, ZP_LOG_RATE + 101 + 2 + ZP_LOG_RATE);
	nth_line(fx->text, ZP_LOG_RATE + 101, l, sizeof(l));
	assert_non_null(strstr(l, "]: 80 log lines suppressed"));
	nth_line(fx->text, ZP_LOG_RATE + 102, l, sizeof(l));
	assert_non_null(strstr(l, "]: after the storm"));
	assert_int_equal(fx->lg.rl_dropped, 10);
}

/*
 * Failed connects (WARN connection lines), the way zproxy logs them:
 * without -v (level NOTICE) they are warnings, limited and counted like
 * any; with -v (level CONN) each one is written, however many, and the
 * other warnings stay limited. A pending count still comes out before
 * the first line once the window is over, a connection line included.
 */
static void
test_rate_limit_failed_conns(void **state)
{
	struct fx	*fx = *state;
	char		 l[512];
	int		 i;

	fx_open(fx, 0);
	fx->lg.level = ZP_LOG_NOTICE;
	for (i = 0; i < 200; i++)
		zp_log_conn(&fx->lg, ZP_LOG_WARN, &rec);
	assert_int_equal(fx->lg.rl_dropped, 200 - ZP_LOG_RATE);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), ZP_LOG_RATE);

	fx->lg.level = ZP_LOG_CONN;
	fx->lg.rl_window.tv_sec -= 2;
	for (i = 0; i < 200; i++)
		zp_log_conn(&fx->lg, ZP_LOG_WARN, &rec);
	for (i = 0; i < ZP_LOG_RATE + 3; i++)
		zp_log(&fx->lg, ZP_LOG_WARN, "other %d", i);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), ZP_LOG_RATE + 1 + 200 +
	    ZP_LOG_RATE);
	nth_line(fx->text, ZP_LOG_RATE, l, sizeof(l));
	assert_non_null(strstr(l, "]: 180 log lines suppressed"));
	nth_line(fx->text, ZP_LOG_RATE + 1, l, sizeof(l));
	assert_non_null(strstr(l, "]: conn=12 "));
	assert_int_equal(fx->lg.rl_dropped, 3);
	assert_null(strstr(fx->text, "other 20"));
}

/*
 * zp_escape: printable ASCII is kept; backslash and quotes, \n \t \r,
 * other control bytes, DEL and bytes above 0x7f are escaped; the result
 * never holds a control byte; a value too long for the buffer is cut
 * between escapes and ends in "...", never beyond len - 1 characters.
 */
static void
test_escape(void **state)
{
	char	buf[ZP_ESCLEN], small[8];
	size_t	i;

	(void)state;
	assert_string_equal(zp_escape("", buf, sizeof(buf)), "");
	assert_string_equal(zp_escape("127.0.0.1:80", buf, sizeof(buf)),
	    "127.0.0.1:80");
	assert_string_equal(zp_escape("x\n:80", buf, sizeof(buf)),
	    "x\\n:80");
	assert_string_equal(zp_escape("x\n\t\r:80", buf, sizeof(buf)),
	    "x\\n\\t\\r:80");
	assert_string_equal(zp_escape("\x01\x1b[31m\x7f\xff", buf,
	    sizeof(buf)), "\\x01\\x1b[31m\\x7f\\xff");
	assert_string_equal(zp_escape("it's \"q\" \\", buf, sizeof(buf)),
	    "it\\'s \\\"q\\\" \\\\");
	assert_string_equal(zp_escape("caf\xc3\xa9", buf, sizeof(buf)),
	    "caf\\xc3\\xa9");

	/* Cut: 7 characters of room. */
	assert_string_equal(zp_escape("abcdefg", small, sizeof(small)),
	    "abcdefg");
	assert_string_equal(zp_escape("abcdefgh", small, sizeof(small)),
	    "abcd...");
	assert_string_equal(zp_escape("ab\ncdefgh", small, sizeof(small)),
	    "ab\\n...");
	assert_string_equal(zp_escape("abc\x01" "defgh", small, sizeof(small)),
	    "abc...");
	assert_string_equal(zp_escape("a\x01", small, 3), "..");
	assert_string_equal(zp_escape("abc", small, 1), "");

	/* Every byte value, alone: one line, no control byte, fits. */
	for (i = 1; i < 256; i++) {
		char	in[2] = { (char)i, '\0' };
		size_t	j;

		zp_escape(in, buf, sizeof(buf));
		assert_true(strlen(buf) >= 1 && strlen(buf) <= 4);
		for (j = 0; buf[j] != '\0'; j++)
			assert_true(buf[j] >= 0x20 && buf[j] < 0x7f);
	}
}

/*
 * The window runs on the real monotonic clock: after a second, the
 * count is reported, at level warn, in the line's format (JSON here).
 */
static void
test_rate_limit_clock(void **state)
{
	struct fx		*fx = *state;
	struct timespec		 ts = { 1, 50 * 1000 * 1000 };
	char			 l[512];
	int			 i;

	fx_open(fx, 1);
	for (i = 0; i < ZP_LOG_RATE + 5; i++)
		zp_log(&fx->lg, ZP_LOG_ERROR, "e %d", i);
	zp_log(&fx->lg, ZP_LOG_DEBUG, "same window");
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	zp_log(&fx->lg, ZP_LOG_DEBUG, "next window");
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), ZP_LOG_RATE + 3);
	nth_line(fx->text, ZP_LOG_RATE + 1, l, sizeof(l));
	assert_string_equal(jget(l, "msg"), "5 log lines suppressed");
	assert_string_equal(jget(l, "level"), "warn");
	nth_line(fx->text, ZP_LOG_RATE + 2, l, sizeof(l));
	assert_string_equal(jget(l, "msg"), "next window");
}

/*
 * Lines still held back at close are reported then, even when the level
 * (-q: errors only) would filter a warning.
 */
static void
test_rate_limit_close(void **state)
{
	struct fx	*fx = *state;
	int		 i;

	fx_open(fx, 0);
	fx->lg.level = ZP_LOG_ERROR;
	for (i = 0; i < ZP_LOG_RATE + 7; i++) {
		zp_log(&fx->lg, ZP_LOG_ERROR, "e %d", i);
		zp_log(&fx->lg, ZP_LOG_WARN, "filtered, not counted");
	}
	zp_log_close(&fx->lg);
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), ZP_LOG_RATE + 1);
	assert_non_null(strstr(fx->text, "]: 7 log lines suppressed\n"));
	assert_null(strstr(fx->text, "filtered"));
}

/*
 * The syslog sink: openlog("zproxy", LOG_PID | LOG_NDELAY, LOG_DAEMON),
 * one syslog call per line with the level's priority, text without our
 * time and pid (syslog adds its own) or a JSON object without newline;
 * closelog at close, once.
 */
static void
test_syslog(void **state)
{
	struct fx	*fx = *state;
	const int	 pri[] = { LOG_ERR, LOG_WARNING, LOG_NOTICE, LOG_INFO,
			    LOG_DEBUG };
	char		 want[128], l[ZP_LOG_LINE_MAX + 2];
	int		 i;

	assert_int_equal(zp_log_open(&fx->lg, NULL, 1, 0, fx->err,
	    sizeof(fx->err)), 0);
	assert_int_equal(fx->lg.sink, ZP_LOG_SYSLOG);
	assert_true(sl.open);
	assert_string_equal(sl.ident, "zproxy");
	assert_int_equal(sl.option, LOG_PID | LOG_NDELAY);
	assert_int_equal(sl.facility, LOG_DAEMON);
	for (i = ZP_LOG_ERROR; i <= ZP_LOG_DEBUG; i++) {
		assert_true(zp_log_enabled(&fx->lg, i));
		zp_log(&fx->lg, i, "test_log %d \"%s\"", i, "q\n");
	}
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &rec);
	assert_int_equal(sl.n, 6);
	for (i = ZP_LOG_ERROR; i <= ZP_LOG_DEBUG; i++) {
		assert_int_equal(sl.pri[i], pri[i]);
		snprintf(want, sizeof(want), "test_log %d \"q\\x0a\"", i);
		assert_string_equal(sl.msg[i], want);
	}
	assert_int_equal(sl.pri[5], LOG_INFO);
	assert_true(strncmp(sl.msg[5], "conn=12 client=", 15) == 0);
	assert_int_equal(zp_log_reopen(&fx->lg), 0);
	zp_log_close(&fx->lg);
	assert_false(sl.open);
	zp_log_close(&fx->lg);
	assert_false(zp_log_enabled(&fx->lg, ZP_LOG_ERROR));
	zp_log(&fx->lg, ZP_LOG_ERROR, "after close");
	assert_int_equal(sl.n, 6);

	/* JSON: the whole object is the message. */
	zp_log_init(&fx->lg, stderr, ZP_LOG_DEBUG);
	assert_int_equal(zp_log_open(&fx->lg, NULL, 1, 1, fx->err,
	    sizeof(fx->err)), 0);
	zp_log(&fx->lg, ZP_LOG_WARN, "json \"%s\"", "q");
	zp_log_conn(&fx->lg, ZP_LOG_WARN, &rec);
	assert_int_equal(sl.n, 8);
	assert_int_equal(sl.pri[6], LOG_WARNING);
	snprintf(l, sizeof(l), "%s", sl.msg[6]);
	assert_string_equal(jget(l, "msg"), "json \"q\"");
	assert_string_equal(jget(l, "level"), "warn");
	snprintf(l, sizeof(l), "%s", sl.msg[7]);
	assert_string_equal(jget(l, "error"), "Connection reset by peer");

	/* From syslog to a file, and from a file to syslog. */
	fx_open(fx, 0);
	assert_false(sl.open);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "in the file");
	assert_int_equal(zp_log_open(&fx->lg, NULL, 1, 0, fx->err,
	    sizeof(fx->err)), 0);
	assert_null(fx->lg.fp);
	assert_null(fx->lg.path);
	assert_int_equal(count_lines(fx_read(fx, fx->path)), 1);
}

/*
 * --syslog where nothing listens on /dev/log: a warning on stderr at
 * the open, lines never handed to syslog(3) but counted as dropped;
 * once /dev/log answers (tried at most once a second) lines go again,
 * and the log thread says how many were lost.
 */
static void
test_syslog_down(void **state)
{
	struct fx	*fx = *state;
	char		 p[PATH_MAX];
	FILE		*err;
	int		 saved, i;

	snprintf(p, sizeof(p), "%s/stderr", fx->dir);
	assert_non_null(err = fopen(p, "w+"));
	fflush(stderr);
	saved = dup(2);
	dup2(fileno(err), 2);
	devlog_errno = ENOENT;
	assert_int_equal(zp_log_open(&fx->lg, NULL, 1, 0, fx->err,
	    sizeof(fx->err)), 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	fclose(err);
	assert_string_equal(fx_read(fx, p), "zproxy: --syslog: " _PATH_LOG
	    ": No such file or directory: log lines are dropped, counted in "
	    "zproxy_log_dropped_total, until a syslog daemon listens there\n");
	if (fx->threaded)
		assert_int_equal(zp_log_start(&fx->lg, fx->err,
		    sizeof(fx->err)), 0);
	for (i = 0; i < 3; i++)
		zp_log(&fx->lg, ZP_LOG_NOTICE, "lost %d", i);
	zp_log_flush(&fx->lg);
	assert_int_equal(sl.n, 0);
	assert_int_equal(zp_log_dropped(&fx->lg), 3);

	/* Back, but not tried again within the second: still dropped. */
	devlog_errno = 0;
	zp_log(&fx->lg, ZP_LOG_NOTICE, "lost 3");
	zp_log_flush(&fx->lg);
	assert_int_equal(sl.n, 0);
	assert_int_equal(zp_log_dropped(&fx->lg), 4);

	/* A second later it is tried, and the line goes. */
	fx->lg.syslog_tried.tv_sec -= 2;
	zp_log(&fx->lg, ZP_LOG_NOTICE, "delivered");
	zp_log_flush(&fx->lg);
	assert_int_equal(zp_log_dropped(&fx->lg), 4);
	assert_true(sl.n >= 1);
	assert_string_equal(sl.msg[0], "delivered");
	if (fx->threaded) {
		assert_int_equal(sl.n, 2);
		assert_string_equal(sl.msg[1], "log: 4 lines dropped: nothing "
		    "listened on " _PATH_LOG);
		assert_int_equal(sl.pri[1], LOG_WARNING);
	}
	zp_log_stop(&fx->lg);
	zp_log_close(&fx->lg);
}

/* Logging leaves errno as it was: a caller may still look at it. */
static void
test_errno_kept(void **state)
{
	struct fx	*fx = *state;

	fx_open(fx, 0);
	errno = ECONNREFUSED;
	zp_log(&fx->lg, ZP_LOG_WARN, "%s", strerror(errno));
	assert_int_equal(errno, ECONNREFUSED);
	zp_log_conn(&fx->lg, ZP_LOG_CONN, &rec);
	assert_int_equal(errno, ECONNREFUSED);
}

/*
 * Several processes appending to one file never interleave lines: each
 * line leaves in one write(2) on an O_APPEND descriptor.
 */
static void
test_no_interleave(void **state)
{
	struct fx	*fx = *state;
	struct zp_log	 lg;
	char		 pad[600], l[1024];
	pid_t		 pid[4];
	int		 i, j, st;

	memset(pad, 'a', sizeof(pad) - 1);
	pad[sizeof(pad) - 1] = '\0';
	for (i = 0; i < 4; i++) {
		assert_true((pid[i] = fork()) != -1);
		if (pid[i] != 0)
			continue;
		zp_log_init(&lg, stderr, ZP_LOG_NOTICE);
		if (zp_log_open(&lg, fx->path, 0, 0, fx->err,
		    sizeof(fx->err)) == -1)
			_exit(1);
		for (j = 0; j < 200; j++) {
			pad[i] = 'A' + (char)i;
			zp_log(&lg, ZP_LOG_NOTICE, "child=%d line=%d %s", i, j,
			    pad);
		}
		zp_log_close(&lg);
		_exit(0);
	}
	for (i = 0; i < 4; i++) {
		assert_int_equal(waitpid(pid[i], &st, 0), pid[i]);
		assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 4 * 200);
	for (i = 0; i < 4 * 200; i++) {
		assert_non_null(nth_line(fx->text, i, l, sizeof(l)));
		assert_true(matches(l, "^" TIME_RE " zproxy\\[[0-9]+\\]: "
		    "child=[0-3] line=[0-9]+ a*[A-D]a*$"));
	}
}

/* ---- the log thread ---------------------------------------------------- */

/* Lines the blocked-sink test logs, and how long they may take. */
#define NBLOCKED	100000
#define BLOCKED_SECS	20

/* A thread that logs NBLOCKED lines, then says so. */
struct flood {
	struct zp_log	*lg;
	int		 id;		/* which of several */
	int		 n;		/* lines to log */
	int		 done;		/* atomic: every call returned */
};

static void *
flood_main(void *arg)
{
	struct flood	*f = arg;
	char		 pad[400];
	int		 i, k;

	for (i = 0; i < f->n; i++) {
		/* Lengths vary, so that records wrap the ring anywhere. */
		k = (i * 37 + f->id * 11) % (int)(sizeof(pad) - 1);
		memset(pad, 'a' + f->id, (size_t)k);
		pad[k] = '\0';
		zp_log(f->lg, ZP_LOG_NOTICE, "t=%d line=%d pad=%s end", f->id,
		    i, pad);
	}
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Read a pipe to its end into a growing buffer. */
struct drain {
	int	 fd;
	char	*buf;
	size_t	 len, cap;
};

static void *
drain_main(void *arg)
{
	struct drain	*d = arg;
	ssize_t		 n;

	for (;;) {
		if (d->cap - d->len < 65536) {
			d->cap = d->cap * 2 + 65536;
			if ((d->buf = realloc(d->buf, d->cap + 1)) == NULL)
				abort();
		}
		n = read(d->fd, d->buf + d->len, d->cap - d->len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		d->len += (size_t)n;
	}
	d->buf[d->len] = '\0';
	return NULL;
}

/* Lines of s that contain what, and the sum of "log: N lines dropped". */
static void
tally(const char *s, const char *what, long *nlines, unsigned long long *lost)
{
	const char		*p, *q, *r;
	unsigned long long	 n;

	*nlines = 0;
	*lost = 0;
	for (p = s; *p != '\0'; p = q + 1) {
		if ((q = strchr(p, '\n')) == NULL)
			fail_msg("a line without its newline: %.80s", p);
		if (memmem(p, (size_t)(q - p), what, strlen(what)) != NULL)
			(*nlines)++;
		else if ((r = memmem(p, (size_t)(q - p), "]: log: ", 8)) !=
		    NULL && sscanf(r, "]: log: %llu lines dropped", &n) == 1) {
			assert_true(memmem(p, (size_t)(q - p) + 1, ": the log "
			    "could not keep up\n", 28) != NULL);
			*lost += n;
		}
	}
}

/*
 * A sink that blocks (a pipe nobody reads, as stderr) does not block
 * the callers: NBLOCKED lines from a thread return within BLOCKED_SECS
 * while the pipe stays full; the lines the queue refused are counted
 * exactly (logged - written); once the pipe is read every queued line
 * arrives whole, and so does "log: N lines dropped" with the same N.
 * Before the log thread, the first full pipe held zp_log() forever.
 */
static void
test_queue_blocked_sink(void **state)
{
	struct zp_log		 lg;
	struct flood		 f = { &lg, 0, NBLOCKED, 0 };
	struct drain		 d = { -1, NULL, 0, 0 };
	pthread_t		 ft, dt;
	FILE			*fp;
	char			 err[256];
	unsigned long long	 lost;
	long			 n;
	int			 p[2], i;

	(void)state;
	assert_int_equal(pipe(p), 0);
	assert_non_null(fp = fdopen(p[1], "w"));
	zp_log_init(&lg, fp, ZP_LOG_NOTICE);
	assert_int_equal(zp_log_start(&lg, err, sizeof(err)), 0);
	assert_int_equal(pthread_create(&ft, NULL, flood_main, &f), 0);
	for (i = 0; i < BLOCKED_SECS * 100 &&
	    !__atomic_load_n(&f.done, __ATOMIC_ACQUIRE); i++)
		usleep(10000);
	/* Read it even on failure, or neither thread would ever end. */
	d.fd = p[0];
	assert_int_equal(pthread_create(&dt, NULL, drain_main, &d), 0);
	assert_int_equal(pthread_join(ft, NULL), 0);
	if (i == BLOCKED_SECS * 100)
		fail_msg("zp_log() blocked on the full pipe");
	assert_true(zp_log_dropped(&lg) > 0);
	zp_log_close(&lg);	/* every queued line written, thread joined */
	fclose(fp);		/* the end for the reader */
	assert_int_equal(pthread_join(dt, NULL), 0);
	close(p[0]);

	tally(d.buf, " line=", &n, &lost);
	assert_true(n > 0);
	assert_int_equal((unsigned long long)(NBLOCKED - n),
	    zp_log_dropped(&lg));
	assert_int_equal(lost, zp_log_dropped(&lg));
	free(d.buf);
}

/*
 * Several threads logging at once through the queue into one file:
 * every line written is whole and once (its thread, its number, its
 * padding of its own letter, its end), and written + dropped = logged.
 */
static void
test_queue_threads(void **state)
{
	struct fx		*fx = *state;
	struct flood		 f[4];
	pthread_t		 t[4];
	char			 re[128], l[ZP_LOG_LINE_MAX];
	unsigned char		*seen;
	unsigned long long	 lost;
	const char		*p, *q;
	long			 n;
	int			 i, id, line, per = 20000;

	fx_open(fx, 0);
	for (i = 0; i < 4; i++) {
		f[i] = (struct flood){ &fx->lg, i, per, 0 };
		assert_int_equal(pthread_create(&t[i], NULL, flood_main, &f[i]),
		    0);
	}
	for (i = 0; i < 4; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	fx_read(fx, fx->path);
	tally(fx->text, " line=", &n, &lost);
	assert_int_equal((unsigned long long)(4 * per - n),
	    zp_log_dropped(&fx->lg));
	assert_int_equal(lost, zp_log_dropped(&fx->lg));
	assert_non_null(seen = calloc(4 * (size_t)per, 1));
	for (p = fx->text; *p != '\0'; p = q + 1) {
		q = strchr(p, '\n');
		assert_true((size_t)(q - p) < sizeof(l));
		memcpy(l, p, (size_t)(q - p));
		l[q - p] = '\0';
		if (strstr(l, " line=") == NULL)
			continue;
		assert_int_equal(sscanf(strstr(l, "]: "), "]: t=%d line=%d",
		    &id, &line), 2);
		assert_true(id >= 0 && id < 4 && line >= 0 && line < per);
		assert_false(seen[id * per + line]);
		seen[id * per + line] = 1;
		snprintf(re, sizeof(re), "^" TIME_RE " zproxy\\[[0-9]+\\]: "
		    "t=%d line=%d pad=%c* end$", id, line, 'a' + id);
		assert_true(matches(l, re));
	}
	free(seen);
}

/*
 * A reopen while the log thread runs is done on it, in order: lines
 * logged before zp_log_reopen() go to the old file, "log reopened" and
 * what follows to the new one. After zp_log_stop() callers write again
 * themselves (nothing waits in a queue).
 */
static void
test_queue_reopen(void **state)
{
	struct fx	*fx = *state;
	char		 moved[300];

	fx_open(fx, 0);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "before");
	snprintf(moved, sizeof(moved), "%s.1", fx->path);
	assert_int_equal(rename(fx->path, moved), 0);
	assert_int_equal(zp_log_reopen(&fx->lg), 1);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "after");
	fx_read(fx, moved);
	assert_int_equal(count_lines(fx->text), 1);
	assert_non_null(strstr(fx->text, "]: before\n"));
	fx_read(fx, fx->path);
	assert_int_equal(count_lines(fx->text), 2);
	assert_true(matches(fx->text, "]: log reopened\n.*]: after\n$"));
	zp_log_stop(&fx->lg);
	zp_log(&fx->lg, ZP_LOG_NOTICE, "stopped");
	assert_non_null(strstr(fx_read(fx, fx->path), "]: stopped\n"));
}

int
main(void)
{
#define T(f)	cmocka_unit_test_setup_teardown(f, fx_setup, fx_teardown)
#define TT(f)	cmocka_unit_test_setup_teardown(f, fx_setup_threaded, \
		    fx_teardown)
	const struct CMUnitTest tests[] = {
		T(test_text_format),
		T(test_file_create),
		T(test_level_filter),
		T(test_json_line),
		T(test_json_escape),
		T(test_text_escape),
		T(test_conn_text),
		T(test_conn_json),
		T(test_conn_odd),
		T(test_reopen_rename),
		T(test_reopen_fail),
		T(test_reopen_noop),
		T(test_open_fail),
		T(test_open_switch),
		cmocka_unit_test(test_init_stream),
		T(test_close_twice),
		T(test_truncate_text),
		T(test_truncate_json),
		T(test_truncate_utf8),
		T(test_rate_limit),
		T(test_rate_limit_clock),
		T(test_rate_limit_close),
		T(test_rate_limit_failed_conns),
		T(test_escape),
		T(test_syslog),
		T(test_syslog_down),
		T(test_errno_kept),
		T(test_no_interleave),
		/* Again through the log thread's queue. */
		TT(test_text_format),
		TT(test_level_filter),
		TT(test_json_line),
		TT(test_json_escape),
		TT(test_conn_text),
		TT(test_conn_json),
		TT(test_truncate_text),
		TT(test_truncate_json),
		TT(test_rate_limit),
		TT(test_rate_limit_failed_conns),
		TT(test_errno_kept),
		TT(test_syslog_down),
		TT(test_queue_threads),
		TT(test_queue_reopen),
		cmocka_unit_test(test_queue_blocked_sink),
	};
#undef T
#undef TT

	return cmocka_run_group_tests(tests, NULL, NULL);
}
