/*
 * spool_hdr.c - the spool's pure codec: a file's header line (ZPSPOOL 1
 * ...), written and read, and the files' names (spool.h). No system call
 * and no state: what a restarted zproxy, or another one, reads back from
 * DIR, fuzzed by tests/fuzz/fuzz_spool_hdr.c.
 */
#include <sys/types.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "lib/framing.h"
#include "core/net.h"
#include "spool/spool.h"
#include "spool/spool_int.h"


int
zp_spool_hdr_format(const struct zp_spool_hdr *h, char *buf, size_t len)
{
	char	c[ZP_ADDRSTRLEN], d[ZP_ADDRSTRLEN];
	int	n;

	/* "1.2.3.4:80" (v4-mapped too), "[::1]:80"; dst "-" for none. */
	zp_addr_str(&h->client, c, sizeof(c));
	if (h->dst.len > 0)
		zp_addr_str(&h->dst, d, sizeof(d));
	else
		snprintf(d, sizeof(d), "-");
	if (c[0] == '?' || d[0] == '?')
		return -1;
	n = snprintf(buf, len, "ZPSPOOL 1 client=%s dst=%s framing=%s %s"
	    "started=%llu sent=%0*llu\n", c, d, zp_framing_name(h->framing),
	    h->dgram ? "transport=dgram " : "",
	    (unsigned long long)h->started_ms, ZP_SPOOL_SENT_DIGITS,
	    (unsigned long long)h->sent);
	if (n < 0 || (size_t)n >= len || n > ZP_SPOOL_HDR_MAX)
		return -1;
	return n;
}

/* 1 to maxd decimal digits, exactly s[0..n), into *v. */
static int
parse_digits(const char *s, size_t n, unsigned maxd, uint64_t *v)
{
	size_t	i;

	if (n == 0 || n > maxd)
		return -1;
	*v = 0;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		*v = *v * 10 + (uint64_t)(s[i] - '0');
	}
	return 0;
}

/* "1.2.3.4:80" or "[v6]:80" (or "-" when dash) in s[0..n). */
static int
parse_addr(const char *s, size_t n, struct zp_addr *a, int dash)
{
	struct sockaddr_in	*s4 = (void *)&a->ss;
	struct sockaddr_in6	*s6 = (void *)&a->ss;
	char			 h[INET6_ADDRSTRLEN + 1];
	const char		*colon;
	size_t			 hl;
	uint64_t		 port;

	memset(a, 0, sizeof(*a));
	if (dash && n == 1 && s[0] == '-')
		return 0;
	if ((colon = memrchr(s, ':', n)) == NULL ||
	    parse_digits(colon + 1, n - (size_t)(colon + 1 - s), 5,
	    &port) == -1 || port > 65535)
		return -1;
	hl = (size_t)(colon - s);
	if (hl >= 2 && s[0] == '[' && s[hl - 1] == ']') {
		if (hl - 2 >= sizeof(h))
			return -1;
		memcpy(h, s + 1, hl - 2);
		h[hl - 2] = '\0';
		if (inet_pton(AF_INET6, h, &s6->sin6_addr) != 1)
			return -1;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		a->len = sizeof(*s6);
		/* As written, and as a PROXY header says it: IPv4. */
		zp_addr_unmap(a);
		return 0;
	}
	if (hl == 0 || hl >= sizeof(h))
		return -1;
	memcpy(h, s, hl);
	h[hl] = '\0';
	if (inet_pton(AF_INET, h, &s4->sin_addr) != 1)
		return -1;
	s4->sin_family = AF_INET;
	s4->sin_port = htons((uint16_t)port);
	a->len = sizeof(*s4);
	return 0;
}

/* The next space-separated word of [*p, end): exactly "key=" first. */
static int
next_field(const char **p, const char *end, const char *key,
    const char **v, size_t *vn)
{
	const char	*sp;
	size_t		 kl = strlen(key);

	if ((size_t)(end - *p) < kl || memcmp(*p, key, kl) != 0)
		return -1;
	*v = *p + kl;
	sp = memchr(*v, ' ', (size_t)(end - *v));
	*vn = (size_t)((sp != NULL ? sp : end) - *v);
	*p = sp != NULL ? sp + 1 : end;
	/* A space must separate two fields, and end none. */
	if (sp != NULL && *p == end)
		return -1;
	return 0;
}

int
zp_spool_hdr_parse(const void *vbuf, size_t len, struct zp_spool_hdr *h)
{
	static const char	 magic[] = "ZPSPOOL 1 ";
	const char		*buf = vbuf, *nl, *p, *v;
	size_t			 vn, n = len < ZP_SPOOL_HDR_MAX ? len :
				     ZP_SPOOL_HDR_MAX;
	char			 fw[16];
	int			 fr;

	memset(h, 0, sizeof(*h));
	/* A wrong start says so early, even before the line is whole. */
	if (memcmp(buf, magic, n < sizeof(magic) - 1 ? n :
	    sizeof(magic) - 1) != 0)
		return -1;
	if ((nl = memchr(buf, '\n', n)) == NULL)
		return len < ZP_SPOOL_HDR_MAX ? 0 : -1;
	if ((size_t)(nl - buf) < sizeof(magic) - 1 ||
	    memchr(buf, '\0', (size_t)(nl - buf)) != NULL)
		return -1;
	p = buf + sizeof(magic) - 1;
	if (next_field(&p, nl, "client=", &v, &vn) == -1 ||
	    parse_addr(v, vn, &h->client, 0) == -1 ||
	    next_field(&p, nl, "dst=", &v, &vn) == -1 ||
	    parse_addr(v, vn, &h->dst, 1) == -1 ||
	    next_field(&p, nl, "framing=", &v, &vn) == -1 ||
	    vn == 0 || vn >= sizeof(fw))
		return -1;
	memcpy(fw, v, vn);
	fw[vn] = '\0';
	if ((fr = zp_framing_parse(fw)) == -1 || fr == ZP_FRAMING_NONE)
		return -1;
	h->framing = fr;
	/* Written for a UDP source's stream only (older files have none). */
	if (next_field(&p, nl, "transport=", &v, &vn) == 0) {
		if (vn != 5 || memcmp(v, "dgram", 5) != 0)
			return -1;
		h->dgram = 1;
	}
	if (next_field(&p, nl, "started=", &v, &vn) == -1 ||
	    parse_digits(v, vn, 19, &h->started_ms) == -1 ||
	    next_field(&p, nl, "sent=", &v, &vn) == -1 ||
	    parse_digits(v, vn, 19, &h->sent) == -1 || p != nl)
		return -1;
	h->sent_fixed = vn == ZP_SPOOL_SENT_DIGITS;
	return (int)(nl - buf) + 1;
}

int
zp_spool_name(char *buf, size_t len, uint64_t ms,
    const struct zp_addr *client, uint64_t conn, unsigned seq,
    const char *suffix)
{
	struct zp_addr			 c = *client;
	const struct sockaddr_in	*s4 = (const void *)&c.ss;
	const struct sockaddr_in6	*s6 = (const void *)&c.ss;
	char				 h[INET6_ADDRSTRLEN] = "unknown";
	unsigned			 port = 0;
	time_t				 t = (time_t)(ms / 1000);
	struct tm			 tm;
	int				 n;

	/* As the header writes it: a dual-stack listener's IPv4 client. */
	zp_addr_unmap(&c);
	if (c.len > 0 && c.ss.ss_family == AF_INET) {
		inet_ntop(AF_INET, &s4->sin_addr, h, sizeof(h));
		port = ntohs(s4->sin_port);
	} else if (c.len > 0 && c.ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &s6->sin6_addr, h, sizeof(h));
		port = ntohs(s6->sin6_port);
	}
	if (gmtime_r(&t, &tm) == NULL)
		return -1;
	n = snprintf(buf, len, "%04d%02d%02dT%02d%02d%02d.%03uZ-%s_%u-c%llu-"
	    "%06u.%s", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
	    tm.tm_hour, tm.tm_min, tm.tm_sec, (unsigned)(ms % 1000), h, port,
	    (unsigned long long)conn, seq, suffix);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The suffix of a name ("spool"), or NULL. */
const char *
spool_name_suffix(const char *name)
{
	const char	*dot = strrchr(name, '.');

	return dot != NULL && strrchr(name, '-') != NULL ? dot + 1 : NULL;
}

/* A stream's key is its files' name up to the last '-'. */
size_t
spool_name_key_len(const char *name)
{
	const char	*dash = strrchr(name, '-');

	return dash != NULL ? (size_t)(dash - name) : strlen(name);
}

/* One of ours: a file the spool wrote (or writes). */
int
spool_name_ours(const char *suffix)
{
	return suffix != NULL && (strcmp(suffix, "spool") == 0 ||
	    strcmp(suffix, "partial") == 0 || strcmp(suffix, "open") == 0);
}
