/*
 * log_format.c - one log line built whole in a buffer on the stack: the
 * time, the level, the message as text or a JSON object, cut at a
 * character boundary when it does not fit, with a JSON line still
 * closing its string and its object. And what messages are made of: the
 * caller's error buffer (zp_seterr) and escaped values (zp_escape).
 */

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lib/log.h"
#include "lib/log_int.h"

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
	if (r->tls != NULL)
		buf_jstr(b, "tls", r->tls);
	if (r->tls_client != NULL)
		buf_jstr(b, "tls_client", r->tls_client);
	if (r->tls_upstream != NULL)
		buf_jstr(b, "tls_upstream", r->tls_upstream);
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
 * Build one line at level into line (ZP_LOG_LINE_MAX bytes): msg as text
 * or as JSON "msg", or, in JSON with r set, r's fields. Returns its
 * length, newline included unless syslog; line is a C string too.
 */
size_t
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
