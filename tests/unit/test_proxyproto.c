/*
 * test_proxyproto.c - unit tests for proxyproto.c, checked against
 * HAProxy's proxy-protocol.txt: exact v1 lines and v2 bytes for the
 * cases the spec spells out, the v1 length bound, buffers that are too
 * small, and a round trip of many random address pairs through the
 * encoder and an independent decoder written here from the spec; and the
 * reader, zp_proxy_parse(): every v1 form and v2 family, what the spec
 * refuses (refused as early as the bytes show it), TLVs, CRC32c against a
 * bit-by-bit reference, every prefix of a valid header pending, and the
 * encoder's output reading back.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/proxyproto.h"

#define V1_LIMIT	107	/* the spec: a v1 line, CRLF included */
#define GUARD		64	/* bytes past the buffer that must stay put */
#define GUARD_BYTE	0xa5
#define ROUNDS		5000
#define SEED		0x5eed2024cafef00dULL

static const unsigned char sig[12] = {
	0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a
};

/* ---- building addresses ------------------------------------------- */

/* An IPv4 sockaddr from text; the test fails on bad text. */
static const struct sockaddr *
sa4(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)ss;

	memset(ss, 0, sizeof(*ss));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (inet_pton(AF_INET, ip, &sin->sin_addr) != 1)
		fail_msg("bad IPv4 literal %s", ip);
	return (const struct sockaddr *)ss;
}

/* An IPv6 sockaddr from text. */
static const struct sockaddr *
sa6(struct sockaddr_storage *ss, const char *ip, uint16_t port)
{
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(port);
	if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) != 1)
		fail_msg("bad IPv6 literal %s", ip);
	return (const struct sockaddr *)ss;
}

/* A unix-domain sockaddr: a family the header cannot carry. */
static const struct sockaddr *
saun(struct sockaddr_storage *ss, const char *path)
{
	struct sockaddr_un	*su = (struct sockaddr_un *)ss;

	memset(ss, 0, sizeof(*ss));
	su->sun_family = AF_UNIX;
	snprintf(su->sun_path, sizeof(su->sun_path), "%s", path);
	return (const struct sockaddr *)ss;
}

/*
 * Encode into the first len bytes of a larger poisoned buffer, and check
 * that nothing past len was written, whatever the result.
 */
static ssize_t
encode(int version, const struct sockaddr *src, const struct sockaddr *dst,
    unsigned char *buf, size_t len)
{
	ssize_t	n;
	size_t	i;

	memset(buf, GUARD_BYTE, len + GUARD);
	n = zp_proxy_header(version, 0, src, dst, (char *)buf, len);
	for (i = len; i < len + GUARD; i++) {
		if (buf[i] != GUARD_BYTE)
			fail_msg("v%d header wrote byte %zu of a %zu-byte "
			    "buffer", version, i, len);
	}
	if (n != -1 && (n <= 0 || (size_t)n > len))
		fail_msg("v%d header returned %zd for a %zu-byte buffer",
		    version, n, len);
	return n;
}

/* The v1 result n in buf is exactly the line `want`. */
static void
assert_v1_line(const unsigned char *buf, ssize_t n, const char *want)
{
	if (n == -1)
		fail_msg("v1 header failed, want \"%s\"", want);
	if ((size_t)n != strlen(want) || memcmp(buf, want, (size_t)n) != 0)
		fail_msg("v1 header is \"%.*s\" (%zd bytes), want \"%s\" "
		    "(%zu bytes)", (int)n, (const char *)buf, n, want,
		    strlen(want));
}

/* ---- an independent decoder, from the spec ------------------------- */

struct decoded {
	int		local;		/* v2 LOCAL, or v1 UNKNOWN */
	int		family;		/* AF_INET, AF_INET6, 0 */
	unsigned char	src[16], dst[16];
	unsigned	sport, dport;	/* host order */
};

/* A v1 port: decimal, 0..65535, no sign, no leading zero. */
static int
v1_port(const char *s, unsigned *out)
{
	unsigned	v;
	int		used = -1;

	if (s[0] < '0' || s[0] > '9' || (s[0] == '0' && s[1] != '\0'))
		return -1;
	if (strlen(s) > 5 || sscanf(s, "%u%n", &v, &used) != 1 ||
	    used != (int)strlen(s) || v > 65535)
		return -1;
	*out = v;
	return 0;
}

/*
 * Parse a v1 line of n bytes: "PROXY" and five fields separated by single
 * spaces and ended by one CRLF, or "PROXY UNKNOWN" (the spec lets a
 * receiver ignore what follows UNKNOWN, but we send nothing there).
 * Returns 0 and fills d, or -1 with a reason in why.
 */
static int
decode_v1(const unsigned char *buf, size_t n, struct decoded *d,
    const char **why)
{
	char		 line[V1_LIMIT + 1], *f[6], *p, *sp;
	int		 nf = 0, af;

	memset(d, 0, sizeof(*d));
	*why = "longer than 107 bytes";
	if (n > V1_LIMIT)
		return -1;
	*why = "not ended by CRLF";
	if (n < 2 || buf[n - 2] != '\r' || buf[n - 1] != '\n')
		return -1;
	memcpy(line, buf, n - 2);
	line[n - 2] = '\0';
	*why = "a NUL, CR or LF inside the line";
	if (strlen(line) != n - 2 || strpbrk(line, "\r\n") != NULL)
		return -1;
	if (strcmp(line, "PROXY UNKNOWN") == 0) {
		d->local = 1;
		return 0;
	}
	*why = "not six fields separated by single spaces";
	for (p = line; nf < 6; p = sp + 1) {
		f[nf++] = p;
		if ((sp = strchr(p, ' ')) == NULL)
			break;
		*sp = '\0';
	}
	if (nf != 6 || sp != NULL)
		return -1;
	for (nf = 0; nf < 6; nf++)
		if (f[nf][0] == '\0')
			return -1;
	*why = "no PROXY signature";
	if (strcmp(f[0], "PROXY") != 0)
		return -1;
	*why = "unknown protocol";
	if (strcmp(f[1], "TCP4") == 0)
		af = AF_INET;
	else if (strcmp(f[1], "TCP6") == 0)
		af = AF_INET6;
	else
		return -1;
	*why = "an address that is not of the protocol's family";
	if (inet_pton(af, f[2], d->src) != 1 ||
	    inet_pton(af, f[3], d->dst) != 1)
		return -1;
	*why = "a bad port";
	if (v1_port(f[4], &d->sport) == -1 || v1_port(f[5], &d->dport) == -1)
		return -1;
	d->family = af;
	return 0;
}

/*
 * Parse a v2 header of exactly n bytes: signature, version 2 with the
 * LOCAL or PROXY command, family and transport, length, and the address
 * block for TCP over IPv4 or IPv6 (no TLVs: we send none).
 */
static int
decode_v2(const unsigned char *buf, size_t n, struct decoded *d,
    const char **why)
{
	size_t		 blen, alen;
	const unsigned char	*b;

	memset(d, 0, sizeof(*d));
	*why = "shorter than 16 bytes";
	if (n < 16)
		return -1;
	*why = "bad signature";
	if (memcmp(buf, sig, 12) != 0)
		return -1;
	*why = "version is not 2";
	if ((buf[12] & 0xf0) != 0x20)
		return -1;
	blen = ((size_t)buf[14] << 8) | buf[15];
	*why = "length does not match the bytes returned";
	if (16 + blen != n)
		return -1;
	b = buf + 16;
	switch (buf[12] & 0x0f) {
	case 0x0:
		/* LOCAL: we send it with UNSPEC and no address block. */
		*why = "LOCAL with a family or an address block";
		if (buf[13] != 0x00 || blen != 0)
			return -1;
		d->local = 1;
		return 0;
	case 0x1:
		break;
	default:
		*why = "unknown command";
		return -1;
	}
	*why = "PROXY with a family/transport other than TCP4 or TCP6";
	if (buf[13] == 0x11) {
		d->family = AF_INET;
		alen = 4;
	} else if (buf[13] == 0x21) {
		d->family = AF_INET6;
		alen = 16;
	} else
		return -1;
	*why = "address block of the wrong size";
	if (blen != 2 * alen + 4)
		return -1;
	memcpy(d->src, b, alen);
	memcpy(d->dst, b + alen, alen);
	d->sport = ((unsigned)b[2 * alen] << 8) | b[2 * alen + 1];
	d->dport = ((unsigned)b[2 * alen + 2] << 8) | b[2 * alen + 3];
	return 0;
}

/*
 * What the header should carry for one sockaddr, worked out here: IPv4
 * as is, v4-mapped IPv6 as IPv4, other IPv6 as is, anything else 0.
 */
static int
expect_addr(const struct sockaddr *sa, unsigned char *addr, unsigned *port)
{
	const struct sockaddr_in	*sin = (const struct sockaddr_in *)sa;
	const struct sockaddr_in6	*sin6 = (const struct sockaddr_in6 *)sa;
	static const unsigned char	 mapped[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};

	memset(addr, 0, 16);
	*port = 0;
	if (sa->sa_family == AF_INET) {
		memcpy(addr, &sin->sin_addr, 4);
		*port = ntohs(sin->sin_port);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		*port = ntohs(sin6->sin6_port);
		if (memcmp(sin6->sin6_addr.s6_addr, mapped, 12) == 0) {
			memcpy(addr, sin6->sin6_addr.s6_addr + 12, 4);
			return AF_INET;
		}
		memcpy(addr, sin6->sin6_addr.s6_addr, 16);
		return AF_INET6;
	}
	return 0;
}

/*
 * Two known families that differ (IPv4 or v4-mapped on one side, IPv6 on
 * the other) travel as TCP over IPv6, the IPv4 side v4-mapped: adjust
 * what expect_addr() worked out for each side to that.
 */
static void
expect_pair(int *fs, unsigned char *es, int *fd, unsigned char *ed)
{
	int		*fam[2] = { fs, fd };
	unsigned char	*addr[2] = { es, ed };
	int		 i;

	if (*fs == 0 || *fd == 0 || *fs == *fd)
		return;
	for (i = 0; i < 2; i++) {
		if (*fam[i] != AF_INET)
			continue;
		memmove(addr[i] + 12, addr[i], 4);
		memset(addr[i], 0, 10);
		addr[i][10] = addr[i][11] = 0xff;
		*fam[i] = AF_INET6;
	}
}

/* Decoded d is what src -> dst should give; say which field differs. */
static void
assert_decoded(int version, const struct decoded *d,
    const struct sockaddr *src, const struct sockaddr *dst,
    const unsigned char *buf, size_t n, unsigned round)
{
	unsigned char	es[16], ed[16];
	unsigned	esp, edp;
	int		fs, fd;
	size_t		alen;

	fs = expect_addr(src, es, &esp);
	fd = expect_addr(dst, ed, &edp);
	expect_pair(&fs, es, &fd, ed);
	if (fs == 0 || fs != fd) {
		if (!d->local)
			fail_msg("round %u v%d: families %d/%d should give %s",
			    round, version, fs, fd,
			    version == 1 ? "UNKNOWN" : "LOCAL");
		return;
	}
	if (d->local || d->family != fs)
		fail_msg("round %u v%d: family %d, want %d (%zu bytes: "
		    "%.*s)", round, version, d->family, fs, n,
		    version == 1 ? (int)n : 0, (const char *)buf);
	alen = fs == AF_INET ? 4 : 16;
	if (memcmp(d->src, es, alen) != 0 || memcmp(d->dst, ed, alen) != 0)
		fail_msg("round %u v%d: addresses differ", round, version);
	if (d->sport != esp || d->dport != edp)
		fail_msg("round %u v%d: ports %u %u, want %u %u", round,
		    version, d->sport, d->dport, esp, edp);
}

/* ---- v1: exact lines ---------------------------------------------- */

/* TCP over IPv4 gives the spec's line, byte for byte, with no NUL. */
static void
test_v1_tcp4(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, sa4(&s, "192.0.2.1", 40000),
	    sa4(&d, "198.51.100.2", 9000), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000\r\n");
}

/* Ports 0 and 65535 are written in plain decimal. */
static void
test_v1_port_limits(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, sa4(&s, "0.0.0.0", 0),
	    sa4(&d, "255.255.255.255", 65535), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n");
}

/* TCP over IPv6 uses the compressed text form of each address. */
static void
test_v1_tcp6(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, sa6(&s, "2001:0db8:0000:0000:0000:0000:0000:0001", 40000),
	    sa6(&d, "2001:db8:0:0:1:0:0:2", 443), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP6 2001:db8::1 2001:db8::1:0:0:2 40000 443\r\n");
	n = encode(1, sa6(&s, "::1", 1), sa6(&d, "::", 2), buf,
	    ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY TCP6 ::1 :: 1 2\r\n");
}

/*
 * A v4-mapped IPv6 pair (what a dual-stack listener sees) is sent as
 * TCP4 with plain dotted IPv4 text; so is a mapped client on a plain
 * IPv4 destination, as both reduce to IPv4.
 */
static void
test_v1_v4mapped(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, sa6(&s, "::ffff:192.0.2.1", 40000),
	    sa6(&d, "::ffff:198.51.100.2", 9000), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000\r\n");
	n = encode(1, sa6(&s, "::ffff:192.0.2.1", 40000),
	    sa4(&d, "198.51.100.2", 9000), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000\r\n");
}

/*
 * An IPv4 end (or a v4-mapped one) with an IPv6 one: TCP6, the IPv4
 * address v4-mapped, never UNKNOWN, which would name zproxy as the
 * client (issue 32: a balancer's "PROXY TCP6 ::ffff:192.0.2.7 ::1 ...",
 * accepted, was sent on as UNKNOWN).
 */
static void
test_v1_mixed(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, sa4(&s, "192.0.2.1", 40000),
	    sa6(&d, "2001:db8::2", 9000), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 40000 9000\r\n");
	n = encode(1, sa6(&s, "2001:db8::1", 40000),
	    sa4(&d, "198.51.100.2", 9000), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n,
	    "PROXY TCP6 2001:db8::1 ::ffff:198.51.100.2 40000 9000\r\n");
	n = encode(1, sa6(&s, "::ffff:192.0.2.7", 40000),
	    sa6(&d, "::1", 514), buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 514\r\n");
}

/*
 * Addresses of a family the protocol cannot carry give the spec's
 * "PROXY UNKNOWN\r\n".
 */
static void
test_v1_unknown(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	ssize_t			n;

	n = encode(1, saun(&s, "/tmp/a"), saun(&d, "/tmp/b"), buf,
	    ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY UNKNOWN\r\n");
	memset(&s, 0, sizeof(s));
	s.ss_family = AF_UNSPEC;
	n = encode(1, (struct sockaddr *)&s, sa4(&d, "198.51.100.2", 9000),
	    buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY UNKNOWN\r\n");
}

/*
 * The longest line there is -- full-width IPv6 text on both sides and
 * five-digit ports -- stays within the spec's 107 bytes, and fits a
 * buffer of ZP_PROXY_V1_MAX.
 */
static void
test_v1_longest(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	const char		*full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
	const char		*other = "fe80:1234:5678:9abc:def0:1234:5678:9abc";
	char			want[200];
	ssize_t			n;

	n = encode(1, sa6(&s, full, 65535), sa6(&d, full, 65535), buf,
	    ZP_PROXY_V1_MAX);
	snprintf(want, sizeof(want), "PROXY TCP6 %s %s 65535 65535\r\n", full,
	    full);
	assert_v1_line(buf, n, want);
	assert_true(n <= V1_LIMIT);
	n = encode(1, sa6(&s, other, 65535), sa6(&d, full, 10000), buf,
	    ZP_PROXY_V1_MAX);
	snprintf(want, sizeof(want), "PROXY TCP6 %s %s 65535 10000\r\n", other,
	    full);
	assert_v1_line(buf, n, want);
	assert_true(n <= V1_LIMIT);
	/* The macros callers size their buffers with cover it. */
	assert_true(ZP_PROXY_V1_MAX >= V1_LIMIT);
	assert_true(ZP_PROXY_MAX >= ZP_PROXY_V1_MAX);
	assert_true(ZP_PROXY_MAX >= ZP_PROXY_V2_MAX);
}

/*
 * A buffer too small for the line gives -1 and writes nothing past its
 * end, down to a zero-length buffer; one byte more than the line (room
 * for a NUL) is always enough.
 */
static void
test_v1_small_buffer(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V1_MAX + GUARD];
	const char		*want =
	    "PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000\r\n";
	size_t			len, wlen = strlen(want);
	ssize_t			n;

	sa4(&s, "192.0.2.1", 40000);
	sa4(&d, "198.51.100.2", 9000);
	for (len = 0; len < wlen; len++)
		assert_int_equal(encode(1, (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, len), -1);
	/*
	 * Exactly the line's length: -1 (no room for the NUL), or the
	 * whole line -- never a line cut short by snprintf.
	 */
	n = encode(1, (struct sockaddr *)&s, (struct sockaddr *)&d, buf, wlen);
	if (n != -1)
		assert_v1_line(buf, n, want);
	assert_v1_line(buf, encode(1, (struct sockaddr *)&s,
	    (struct sockaddr *)&d, buf, wlen + 1), want);
	/* Also for the short UNKNOWN line. */
	sa6(&d, "2001:db8::2", 9000);
	for (len = 0; len < strlen("PROXY UNKNOWN\r\n"); len++)
		assert_int_equal(encode(1, (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, len), -1);
}

/* Versions other than 1 and 2 are refused, whatever the buffer. */
static void
test_bad_version(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_MAX + GUARD];
	static const int	bad[] = { 0, 3, -1, 10, 0x21 };
	size_t			i;

	sa4(&s, "192.0.2.1", 40000);
	sa4(&d, "198.51.100.2", 9000);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(encode(bad[i], (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, ZP_PROXY_MAX), -1);
		assert_int_equal(encode(bad[i], (struct sockaddr *)&s,
		    sa6(&d, "2001:db8::2", 1), buf, ZP_PROXY_MAX), -1);
		sa4(&d, "198.51.100.2", 9000);
	}
}

/* ---- v2: exact bytes ---------------------------------------------- */

/* Compare n bytes of a v2 header with want, naming the first difference. */
static void
assert_bytes(const unsigned char *buf, ssize_t n, const unsigned char *want,
    size_t wlen)
{
	size_t	i;

	if (n == -1)
		fail_msg("v2 header failed, want %zu bytes", wlen);
	if ((size_t)n != wlen)
		fail_msg("v2 header is %zd bytes, want %zu", n, wlen);
	for (i = 0; i < wlen; i++)
		if (buf[i] != want[i])
			fail_msg("v2 byte %zu is 0x%02x, want 0x%02x", i,
			    buf[i], want[i]);
}

/*
 * TCP over IPv4: signature, 0x21 (v2, PROXY), 0x11 (INET, STREAM),
 * length 12 big-endian, source and destination addresses, then source
 * and destination ports, all in network order.
 */
static void
test_v2_tcp4(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	static const unsigned char want[28] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x21, 0x11, 0x00, 0x0c,
		192, 0, 2, 1,
		198, 51, 100, 2,
		0x9c, 0x40,	/* 40000 */
		0x23, 0x28,	/* 9000 */
	};
	ssize_t			n;

	n = encode(2, sa4(&s, "192.0.2.1", 40000),
	    sa4(&d, "198.51.100.2", 9000), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
}

/* TCP over IPv6: 0x21 family, length 36, 16-byte addresses. */
static void
test_v2_tcp6(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	static const unsigned char want[52] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x21, 0x21, 0x00, 0x24,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01,
		0x20, 0x01, 0x0d, 0xb8, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
		0x12, 0x34,
		0xff, 0xff,	/* 65535 */
		0x00, 0x50,	/* 80 */
	};
	ssize_t			n;

	n = encode(2, sa6(&s, "2001:db8::1", 65535),
	    sa6(&d, "2001:db8:ffff::1234", 80), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
}

/*
 * A UDP source's stream: DGRAM in the low nibble (0x12 over IPv4, 0x22
 * over IPv6), the rest as for TCP; v1 has no UDP and says TCP4/TCP6.
 */
static void
test_dgram(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	ssize_t			n;

	memset(buf, GUARD_BYTE, sizeof(buf));
	n = zp_proxy_header(2, 1, sa4(&s, "192.0.2.1", 514),
	    sa4(&d, "198.51.100.2", 5140), (char *)buf, ZP_PROXY_V2_MAX);
	assert_int_equal(n, 28);
	assert_int_equal(buf[12], 0x21);
	assert_int_equal(buf[13], 0x12);
	assert_int_equal(buf[26] << 8 | buf[27], 5140);
	n = zp_proxy_header(2, 1, sa6(&s, "2001:db8::1", 514),
	    sa6(&d, "2001:db8::2", 514), (char *)buf, ZP_PROXY_V2_MAX);
	assert_int_equal(n, 52);
	assert_int_equal(buf[13], 0x22);
	/* No addresses: LOCAL whatever the transport. */
	n = zp_proxy_header(2, 1, saun(&s, "/x"), saun(&d, "/y"), (char *)buf,
	    ZP_PROXY_V2_MAX);
	assert_int_equal(n, 16);
	assert_int_equal(buf[12], 0x20);
	assert_int_equal(buf[13], 0x00);
	n = zp_proxy_header(1, 1, sa4(&s, "192.0.2.1", 514),
	    sa4(&d, "198.51.100.2", 5140), (char *)buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, "PROXY TCP4 192.0.2.1 198.51.100.2 514 5140\r\n");
}

/* A v4-mapped IPv6 pair is sent in the 0x11 (TCP over IPv4) form. */
static void
test_v2_v4mapped(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	static const unsigned char want[28] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x21, 0x11, 0x00, 0x0c,
		192, 0, 2, 1,
		198, 51, 100, 2,
		0x9c, 0x40,
		0x23, 0x28,
	};
	ssize_t			n;

	n = encode(2, sa6(&s, "::ffff:192.0.2.1", 40000),
	    sa6(&d, "::ffff:198.51.100.2", 9000), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
	n = encode(2, sa4(&s, "192.0.2.1", 40000),
	    sa6(&d, "::ffff:198.51.100.2", 9000), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
}

/*
 * An IPv4 end with an IPv6 one: TCP over IPv6 (0x21), the IPv4 address
 * v4-mapped, not LOCAL.
 */
static void
test_v2_mixed(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	static const unsigned char want[52] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x21, 0x21, 0x00, 0x24,
		0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 51, 100, 2,
		0x9c, 0x40,
		0x23, 0x28,
	};
	ssize_t			n;

	n = encode(2, sa6(&s, "2001:db8::1", 40000),
	    sa6(&d, "::ffff:198.51.100.2", 9000), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
	n = encode(2, sa6(&s, "2001:db8::1", 40000),
	    sa4(&d, "198.51.100.2", 9000), buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
}

/*
 * Unknown families give the LOCAL command: signature, 0x20, family 0x00
 * (UNSPEC), length 0 -- 16 bytes in all.
 */
static void
test_v2_local(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	static const unsigned char want[16] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x20, 0x00, 0x00, 0x00,
	};
	ssize_t			n;

	n = encode(2, saun(&s, "/tmp/a"), saun(&d, "/tmp/b"), buf,
	    ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want, sizeof(want));
}

/*
 * One byte short of each form (28, 52 and 16 bytes) gives -1 and writes
 * nothing past the buffer; the exact size is enough.
 */
static void
test_v2_small_buffer(void **state)
{
	struct sockaddr_storage	s, d;
	unsigned char		buf[ZP_PROXY_V2_MAX + GUARD];
	size_t			len;

	sa4(&s, "192.0.2.1", 40000);
	sa4(&d, "198.51.100.2", 9000);
	for (len = 0; len < 28; len++)
		assert_int_equal(encode(2, (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, len), -1);
	assert_int_equal(encode(2, (struct sockaddr *)&s,
	    (struct sockaddr *)&d, buf, 28), 28);

	sa6(&s, "2001:db8::1", 40000);
	sa6(&d, "2001:db8::2", 9000);
	for (len = 0; len < 52; len++)
		assert_int_equal(encode(2, (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, len), -1);
	assert_int_equal(encode(2, (struct sockaddr *)&s,
	    (struct sockaddr *)&d, buf, 52), 52);
	assert_int_equal(ZP_PROXY_V2_MAX, 52);

	saun(&s, "/tmp/a");
	saun(&d, "/tmp/b");
	for (len = 0; len < 16; len++)
		assert_int_equal(encode(2, (struct sockaddr *)&s,
		    (struct sockaddr *)&d, buf, len), -1);
	assert_int_equal(encode(2, (struct sockaddr *)&s,
	    (struct sockaddr *)&d, buf, 16), 16);
}

/* ---- round trip ---------------------------------------------------- */

/* xorshift64*: a fixed, platform-independent sequence. */
static uint64_t
rnd(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545f4914f6cdd1dULL;
}

/* A port, often at the edges. */
static uint16_t
rnd_port(uint64_t *x)
{
	switch (rnd(x) % 8) {
	case 0:		return 0;
	case 1:		return 65535;
	case 2:		return (uint16_t)(rnd(x) % 10);
	default:	return (uint16_t)rnd(x);
	}
}

/*
 * A random address: IPv4, random IPv6, IPv6 with runs of zero groups (so
 * that the text form is compressed in every way), v4-mapped IPv6, and
 * now and then a unix-domain one.
 */
static const struct sockaddr *
rnd_addr(uint64_t *x, struct sockaddr_storage *ss)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)ss;
	uint64_t		 r;
	int			 i, kind;

	memset(ss, 0, sizeof(*ss));
	kind = (int)(rnd(x) % 20);
	if (kind == 0)
		return saun(ss, "/run/zp.sock");
	if (kind < 8) {
		sin->sin_family = AF_INET;
		r = rnd(x);
		memcpy(&sin->sin_addr, &r, 4);
		sin->sin_port = htons(rnd_port(x));
		return (struct sockaddr *)ss;
	}
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(rnd_port(x));
	if (kind < 11) {
		sin6->sin6_addr.s6_addr[10] = 0xff;
		sin6->sin6_addr.s6_addr[11] = 0xff;
		r = rnd(x);
		memcpy(sin6->sin6_addr.s6_addr + 12, &r, 4);
	} else if (kind < 15) {
		for (i = 0; i < 16; i += 8) {
			r = rnd(x);
			memcpy(sin6->sin6_addr.s6_addr + i, &r, 8);
		}
	} else {
		for (i = 0; i < 16; i += 2) {
			if (rnd(x) % 2 == 0)
				continue;
			r = rnd(x);
			/* Mostly full-width groups: the longest text. */
			sin6->sin6_addr.s6_addr[i] = (unsigned char)(r | 0x10);
			sin6->sin6_addr.s6_addr[i + 1] = (unsigned char)(r >> 8);
		}
	}
	return (struct sockaddr *)ss;
}

/*
 * Many random address pairs (a fixed seed, so a failure reproduces) go
 * through the encoder and the decoder above, for both versions: what
 * comes out is what went in (reduced as the spec says), every v1 line is
 * within 107 bytes, and every header fits the ZP_PROXY_* buffers.
 */
static void
test_round_trip(void **state)
{
	struct sockaddr_storage	 s, d;
	const struct sockaddr	*src, *dst;
	unsigned char		 buf[ZP_PROXY_MAX + GUARD];
	struct decoded		 dec;
	const char		*why;
	uint64_t		 x = SEED;
	unsigned		 round, seen[3] = { 0, 0, 0 };
	size_t			 longest = 0;
	ssize_t			 n;

	for (round = 0; round < ROUNDS; round++) {
		src = rnd_addr(&x, &s);
		/* Same family more often than not, to test the addresses. */
		if (rnd(&x) % 4 != 0 && src->sa_family != AF_UNIX) {
			dst = rnd_addr(&x, &d);
			while (dst->sa_family != src->sa_family)
				dst = rnd_addr(&x, &d);
		} else
			dst = rnd_addr(&x, &d);

		n = encode(1, src, dst, buf, ZP_PROXY_V1_MAX);
		if (n == -1)
			fail_msg("round %u: v1 header failed", round);
		if ((size_t)n > longest)
			longest = (size_t)n;
		if (decode_v1(buf, (size_t)n, &dec, &why) == -1)
			fail_msg("round %u: v1 \"%.*s\": %s", round, (int)n,
			    (const char *)buf, why);
		assert_decoded(1, &dec, src, dst, buf, (size_t)n, round);
		seen[dec.local ? 0 : dec.family == AF_INET ? 1 : 2]++;

		n = encode(2, src, dst, buf, ZP_PROXY_V2_MAX);
		if (n == -1)
			fail_msg("round %u: v2 header failed", round);
		if (decode_v2(buf, (size_t)n, &dec, &why) == -1)
			fail_msg("round %u: v2: %s", round, why);
		assert_decoded(2, &dec, src, dst, buf, (size_t)n, round);
	}
	/* The generator did reach every kind of header. */
	assert_true(seen[0] > ROUNDS / 20);
	assert_true(seen[1] > ROUNDS / 20);
	assert_true(seen[2] > ROUNDS / 20);
	assert_true(longest <= V1_LIMIT);
}

/*
 * The decoder itself refuses what the spec does not allow, so that the
 * round trip above means something.
 */
static void
test_decoder_self_check(void **state)
{
	static const char	*bad_v1[] = {
		"PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000\n",
		"PROXY TCP4 192.0.2.1 198.51.100.2 40000 9000",
		"PROXY TCP4 192.0.2.1  198.51.100.2 40000 9000\r\n",
		"PROXY TCP4 192.0.2.1 198.51.100.2 040000 9000\r\n",
		"PROXY TCP4 192.0.2.1 198.51.100.2 65536 9000\r\n",
		"PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
		"PROXY TCP6 192.0.2.1 2001:db8::2 1 2\r\n",
		"PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
		"PROXY TCP4 192.0.2.1 198.51.100.2 1 2 3\r\n",
		"proxy TCP4 192.0.2.1 198.51.100.2 1 2\r\n",
		"PROXY UNKNOWN \r\n",
	};
	unsigned char		v2[28] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a, 0x21, 0x11, 0x00, 0x0c,
	};
	struct decoded		d;
	const char		*why;
	size_t			i;

	for (i = 0; i < sizeof(bad_v1) / sizeof(bad_v1[0]); i++)
		if (decode_v1((const unsigned char *)bad_v1[i],
		    strlen(bad_v1[i]), &d, &why) != -1)
			fail_msg("decoder took \"%s\"", bad_v1[i]);
	assert_int_equal(decode_v1((const unsigned char *)"PROXY UNKNOWN\r\n",
	    15, &d, &why), 0);
	assert_true(d.local);

	assert_int_equal(decode_v2(v2, sizeof(v2), &d, &why), 0);
	assert_int_equal(d.family, AF_INET);
	assert_int_equal(decode_v2(v2, sizeof(v2) - 1, &d, &why), -1);
	v2[12] = 0x11;		/* version 1 */
	assert_int_equal(decode_v2(v2, sizeof(v2), &d, &why), -1);
	v2[12] = 0x21;
	v2[13] = 0x21;		/* IPv6 with an IPv4-sized block */
	assert_int_equal(decode_v2(v2, sizeof(v2), &d, &why), -1);
	v2[13] = 0x11;
	v2[0] = 0x0a;
	assert_int_equal(decode_v2(v2, sizeof(v2), &d, &why), -1);
}

/* ---- the reader: helpers ------------------------------------------- */

/*
 * CRC32c written here the slow way, bit by bit from the spec's reflected
 * polynomial, to check the reader's table-driven one against.
 */
static uint32_t
ref_crc32c(const unsigned char *p, size_t n)
{
	uint32_t	crc = 0xffffffff;
	size_t		i;
	int		k;

	for (i = 0; i < n; i++) {
		crc ^= p[i];
		for (k = 0; k < 8; k++)
			crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78 : crc >> 1;
	}
	return ~crc;
}

/*
 * Parse n bytes from a heap copy of exactly n bytes, so that ASan sees
 * any read past them.
 */
static ssize_t
parse(const void *buf, size_t n, struct zp_proxy_info *info,
    const char **why)
{
	unsigned char	*copy;
	ssize_t		 r;

	if ((copy = malloc(n == 0 ? 1 : n)) == NULL)
		fail_msg("out of memory");
	memcpy(copy, buf, n);
	*why = NULL;
	r = zp_proxy_parse(copy, n, info, why);
	free(copy);
	if (r == -1 && (*why == NULL || *why[0] == '\0'))
		fail_msg("-1 without a reason");
	if (r < -1 || r > (ssize_t)n)
		fail_msg("parse of %zu bytes returned %zd", n, r);
	return r;
}

/*
 * buf holds exactly one valid header of n bytes: it parses to n, every
 * shorter prefix (empty included) is an incomplete 0, and with client
 * data behind it the result is still exactly n. Leaves the result in
 * *info.
 */
static void
parse_ok(const void *buf, size_t n, struct zp_proxy_info *info)
{
	static const char	 data[] = "GET / HTTP/1.1\r\n\r\n";
	unsigned char		*more;
	const char		*why;
	size_t			 k;
	ssize_t			 r;

	for (k = 0; k < n; k++) {
		r = parse(buf, k, info, &why);
		if (r != 0)
			fail_msg("prefix of %zu of %zu bytes gave %zd (%s)", k,
			    n, r, r == -1 ? why : "");
	}
	if ((more = malloc(n + sizeof(data))) == NULL)
		fail_msg("out of memory");
	memcpy(more, buf, n);
	memcpy(more + n, data, sizeof(data));
	r = parse(more, n + sizeof(data), info, &why);
	free(more);
	if (r != (ssize_t)n)
		fail_msg("header of %zu bytes and data gave %zd (%s)", n, r,
		    r == -1 ? why : "");
	r = parse(buf, n, info, &why);
	if (r != (ssize_t)n)
		fail_msg("header of %zu bytes gave %zd (%s)", n, r,
		    r == -1 ? why : "");
}

/*
 * buf (n bytes) is invalid: it gives -1 with the reason want, and so
 * does every longer prefix from the first that fails; returns that
 * first failing length, so that a test can say how early it must be.
 */
static size_t
parse_bad(const void *buf, size_t n, const char *want)
{
	struct zp_proxy_info	 info;
	const char		*why;
	size_t			 k, first = n + 1;
	ssize_t			 r;

	for (k = 0; k <= n; k++) {
		r = parse(buf, k, &info, &why);
		if (r > 0)
			fail_msg("prefix of %zu of %zu bad bytes gave %zd", k,
			    n, r);
		if (r == -1 && first > n)
			first = k;
		if (r == 0 && first <= n)
			fail_msg("prefix of %zu gave 0 after %zu gave -1", k,
			    first);
	}
	if (first > n)
		fail_msg("%zu bad bytes gave 0, want -1 (%s)", n, want);
	if (strcmp(why, want) != 0)
		fail_msg("%zu bad bytes: \"%s\", want \"%s\"", n, why, want);
	return first;
}

/* The v1 line s (a C string) is refused for reason want. */
static void
v1_bad(const char *s, const char *want)
{
	parse_bad(s, strlen(s), want);
}

/* Address a of info's side sa is family af, text ip, port. */
static void
assert_side(const struct sockaddr_storage *ss, socklen_t len, int af,
    const char *ip, unsigned port)
{
	const struct sockaddr_in	*sin = (const void *)ss;
	const struct sockaddr_in6	*sin6 = (const void *)ss;
	unsigned char			 want[16];

	assert_int_equal(ss->ss_family, af);
	assert_int_equal(inet_pton(af, ip, want), 1);
	if (af == AF_INET) {
		assert_int_equal(len, sizeof(*sin));
		assert_memory_equal(&sin->sin_addr, want, 4);
		assert_int_equal(ntohs(sin->sin_port), port);
	} else {
		assert_int_equal(len, sizeof(*sin6));
		assert_memory_equal(&sin6->sin6_addr, want, 16);
		assert_int_equal(ntohs(sin6->sin6_port), port);
	}
}

/* A v2 header being built. */
struct hb {
	unsigned char	b[4096];
	size_t		n;
};

static void
hb_put(struct hb *h, const void *p, size_t n)
{
	if (h->n + n > sizeof(h->b))
		fail_msg("test header overflow");
	memcpy(h->b + h->n, p, n);
	h->n += n;
}

static void
hb_byte(struct hb *h, unsigned c)
{
	unsigned char	b = (unsigned char)c;

	hb_put(h, &b, 1);
}

/* Signature, ver/cmd, fam/proto; the length is set by hb_end(). */
static void
hb_start(struct hb *h, unsigned vercmd, unsigned fam)
{
	h->n = 0;
	hb_put(h, sig, 12);
	hb_byte(h, vercmd);
	hb_byte(h, fam);
	hb_byte(h, 0);
	hb_byte(h, 0);
}

/* TCP over IPv4 192.0.2.1:40000 -> 198.51.100.2:9000. */
static void
hb_inet(struct hb *h)
{
	static const unsigned char a[12] = {
		192, 0, 2, 1, 198, 51, 100, 2, 0x9c, 0x40, 0x23, 0x28
	};

	hb_put(h, a, sizeof(a));
}

/* A TLV of type t with n value bytes v (NULL: n bytes of 'x'). */
static void
hb_tlv(struct hb *h, unsigned t, const void *v, size_t n)
{
	size_t	i;

	hb_byte(h, t);
	hb_byte(h, (unsigned)(n >> 8));
	hb_byte(h, (unsigned)(n & 0xff));
	if (v != NULL)
		hb_put(h, v, n);
	else
		for (i = 0; i < n; i++)
			hb_byte(h, 'x');
}

/* Set the length field from what was put. */
static void
hb_end(struct hb *h)
{
	h->b[14] = (unsigned char)((h->n - 16) >> 8);
	h->b[15] = (unsigned char)((h->n - 16) & 0xff);
}

/*
 * Append a CRC32c TLV and, the header being then whole, fill it in with
 * the reference CRC over the header with the field zeroed; returns the
 * offset of the value.
 */
static size_t
hb_crc(struct hb *h)
{
	static const unsigned char	zero[4];
	size_t				off;
	uint32_t			crc;

	hb_tlv(h, 0x03, zero, 4);
	off = h->n - 4;
	hb_end(h);
	crc = ref_crc32c(h->b, h->n);
	h->b[off] = (unsigned char)(crc >> 24);
	h->b[off + 1] = (unsigned char)(crc >> 16);
	h->b[off + 2] = (unsigned char)(crc >> 8);
	h->b[off + 3] = (unsigned char)crc;
	return off;
}

/* ---- the reader: v1 ------------------------------------------------ */

/* The spec's TCP4 and TCP6 lines, every prefix pending, data after. */
static void
test_parse_v1_tcp(void **state)
{
	struct zp_proxy_info	 info;
	const char		*s;

	s = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n";
	parse_ok(s, strlen(s), &info);
	assert_int_equal(info.version, 1);
	assert_false(info.local);
	assert_side(&info.src, info.srclen, AF_INET, "192.168.0.1", 56324);
	assert_side(&info.dst, info.dstlen, AF_INET, "192.168.0.11", 443);
	assert_int_equal(info.ntlvs, 0);
	assert_string_equal(info.authority, "");

	s = "PROXY TCP4 0.0.0.0 255.255.255.255 0 65535\r\n";
	parse_ok(s, strlen(s), &info);
	assert_side(&info.src, info.srclen, AF_INET, "0.0.0.0", 0);
	assert_side(&info.dst, info.dstlen, AF_INET, "255.255.255.255",
	    65535);

	s = "PROXY TCP6 2001:db8::1 ::ffff:192.0.2.1 1 2\r\n";
	parse_ok(s, strlen(s), &info);
	assert_side(&info.src, info.srclen, AF_INET6, "2001:db8::1", 1);
	assert_side(&info.dst, info.dstlen, AF_INET6, "::ffff:192.0.2.1", 2);

	/* The spec's longest TCP6 line: 104 bytes. */
	s = "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
	    "FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF:FFFF 65535 65535\r\n";
	assert_int_equal(strlen(s), 104);
	parse_ok(s, strlen(s), &info);
	assert_side(&info.dst, info.dstlen, AF_INET6,
	    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535);
}

/*
 * UNKNOWN, short or with anything after it up to the CRLF (the spec: the
 * receiver ignores it), is local; up to the spec's worst case of 107
 * bytes.
 */
static void
test_parse_v1_unknown(void **state)
{
	struct zp_proxy_info	 info;
	char			 line[200];
	const char		*s;

	s = "PROXY UNKNOWN\r\n";
	parse_ok(s, strlen(s), &info);
	assert_int_equal(info.version, 1);
	assert_true(info.local);
	assert_int_equal(info.srclen, 0);

	s = "PROXY UNKNOWN 192.0.2.1 198.51.100.2 1 2\r\n";
	parse_ok(s, strlen(s), &info);
	assert_true(info.local);
	s = "PROXY UNKNOWN whatever, even  double spaces\r\n";
	parse_ok(s, strlen(s), &info);
	assert_true(info.local);

	s = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
	    "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
	assert_int_equal(strlen(s), 107);
	parse_ok(s, strlen(s), &info);
	assert_true(info.local);

	/* One byte more is too long, and known to be so at byte 107. */
	snprintf(line, sizeof(line), "PROXY UNKNOWN %092d\r\n", 0);
	assert_int_equal(strlen(line), 108);
	assert_int_equal(parse_bad(line, strlen(line), "v1 line too long"),
	    107);
}

/*
 * What the spec does not allow is refused, and as soon as the bytes
 * there show it.
 */
static void
test_parse_v1_bad(void **state)
{
	char	line[300];

	v1_bad("PROXY TCP4 192.0.2.1  198.51.100.2 1 2\r\n",
	    "bad v1 address");
	v1_bad("PROXY  TCP4 192.0.2.1 198.51.100.2 1 2\r\n",
	    "bad v1 protocol");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1  2\r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1 2 \r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 65536 2\r\n",
	    "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1 99999\r\n",
	    "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 01 2\r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 00 2\r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 +1 2\r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 -1 2\r\n", "bad v1 port");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1 2\n",
	    "v1 line not ended by CRLF");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1 2\rX",
	    "v1 line not ended by CRLF");
	v1_bad("PROXY UNKNOWN\n", "bad v1 protocol");
	v1_bad("PROXY UNKNOWN x\n", "v1 line not ended by CRLF");
	v1_bad("PROXY UNKNOWN x\rx\r\n", "v1 line not ended by CRLF");
	v1_bad("PROXY UNKNOWNX\r\n", "bad v1 protocol");
	v1_bad("proxy TCP4 192.0.2.1 198.51.100.2 1 2\r\n",
	    "not a PROXY header");
	v1_bad("PROXY tcp4 192.0.2.1 198.51.100.2 1 2\r\n",
	    "bad v1 protocol");
	v1_bad("PROXY UDP4 192.0.2.1 198.51.100.2 1 2\r\n",
	    "bad v1 protocol");
	v1_bad("PROXY TCP4 2001:db8::1 198.51.100.2 1 2\r\n",
	    "bad v1 address");
	v1_bad("PROXY TCP6 192.0.2.1 2001:db8::2 1 2\r\n", "bad v1 address");
	v1_bad("PROXY TCP4 192.0.2.01 198.51.100.2 1 2\r\n",
	    "bad v1 address");
	v1_bad("PROXY TCP4 192.0.2 198.51.100.2 1 2\r\n", "bad v1 address");
	v1_bad("PROXY TCP4 192.0.2.256 198.51.100.2 1 2\r\n",
	    "bad v1 address");
	v1_bad("PROXY TCP6 2001:db8:::1 ::1 1 2\r\n", "bad v1 address");
	v1_bad("PROXY TCP4 192.0.2.1 198.51.100.2 1\r\n", "bad v1 port");
	v1_bad("PROXY TCP4\r\n", "bad v1 protocol");

	/* Early: the second space, the second digit of "01", byte 1. */
	assert_int_equal(parse_bad("PROXY TCP4 192.0.2.1  ", 22,
	    "bad v1 address"), 22);
	assert_int_equal(parse_bad("PROXY TCP4 1.2.3.4 1.2.3.4 01", 29,
	    "bad v1 port"), 29);
	assert_int_equal(parse_bad("PROXY TCP4 1.2.3.4 1.2.3.4 65536", 32,
	    "bad v1 port"), 32);
	assert_int_equal(parse_bad("PROXY TCP4 1.2.3.4x", 19,
	    "bad v1 address"), 19);
	assert_int_equal(parse_bad("PROXX", 5, "not a PROXY header"), 5);
	assert_int_equal(parse_bad("GET / HTTP/1.1\r\n", 16,
	    "not a PROXY header"), 1);

	/*
	 * 107 bytes and more without a CRLF: too long, decided at 107 at
	 * the latest (TCP6 fields are each within 45 characters, so the
	 * line runs out first).
	 */
	snprintf(line, sizeof(line),
	    "PROXY TCP6 0000:0000:0000:0000:0000:0000:0000:0000:1.2.3.4 "
	    "0000:0000:0000:0000:0000:0000:0000:0000:1.2.3.4 1 2\r\n");
	/* Each address over 45 characters: refused as an address. */
	v1_bad(line, "bad v1 address");
	snprintf(line, sizeof(line),
	    "PROXY TCP6 0000:0000:0000:0000:0000:ffff:1.2.3.4 "
	    "0000:0000:0000:0000:0000:ffff:1.2.3.4 65535 65535\r\n");
	assert_true(strlen(line) <= 107);
	{
		struct zp_proxy_info info;

		parse_ok(line, strlen(line), &info);
		assert_side(&info.src, info.srclen, AF_INET6,
		    "::ffff:1.2.3.4", 65535);
	}
	memset(line, 0, sizeof(line));
	memcpy(line, "PROXY UNKNOWN ", 14);
	memset(line + 14, 'a', 200);
	assert_int_equal(parse_bad(line, 214, "v1 line too long"), 107);
}

/* ---- the reader: v2 ------------------------------------------------ */

/* TCP over IPv4 and IPv6, PROXY command: the addresses and ports. */
static void
test_parse_v2_inet(void **state)
{
	struct zp_proxy_info	info;
	struct hb		h;
	unsigned char		a6[16];

	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_end(&h);
	assert_int_equal(h.n, 28);
	parse_ok(h.b, h.n, &info);
	assert_int_equal(info.version, 2);
	assert_false(info.local);
	assert_false(info.crc32c);
	assert_int_equal(info.ntlvs, 0);
	assert_side(&info.src, info.srclen, AF_INET, "192.0.2.1", 40000);
	assert_side(&info.dst, info.dstlen, AF_INET, "198.51.100.2", 9000);

	hb_start(&h, 0x21, 0x21);
	inet_pton(AF_INET6, "2001:db8::1", a6);
	hb_put(&h, a6, 16);
	inet_pton(AF_INET6, "2001:db8:ffff::1234", a6);
	hb_put(&h, a6, 16);
	hb_byte(&h, 0xff); hb_byte(&h, 0xff);
	hb_byte(&h, 0x00); hb_byte(&h, 0x50);
	hb_end(&h);
	assert_int_equal(h.n, 52);
	parse_ok(h.b, h.n, &info);
	assert_false(info.local);
	assert_side(&info.src, info.srclen, AF_INET6, "2001:db8::1", 65535);
	assert_side(&info.dst, info.dstlen, AF_INET6, "2001:db8:ffff::1234",
	    80);
}

/*
 * LOCAL, UNSPEC, AF_UNIX and DGRAM all mean "use the connection's own
 * addresses"; the block is still sized by the family and skipped.
 */
static void
test_parse_v2_local(void **state)
{
	struct zp_proxy_info	info;
	struct hb		h;
	unsigned char		un[216];
	static const unsigned	fams[] = { 0x00, 0x01, 0x02, 0x11, 0x12,
	    0x21, 0x22, 0x31, 0x32 };
	size_t			i;

	/* What zproxy's encoder sends for LOCAL. */
	hb_start(&h, 0x20, 0x00);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_int_equal(info.version, 2);
	assert_true(info.local);
	assert_int_equal(info.srclen, 0);

	/* LOCAL with addresses: ignored, as the spec says. */
	hb_start(&h, 0x20, 0x11);
	hb_inet(&h);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_true(info.local);
	assert_int_equal(info.src.ss_family, AF_UNSPEC);

	/* PROXY over UNSPEC, UNIX (216 bytes) and DGRAM. */
	memset(un, 'u', sizeof(un));
	for (i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		if (fams[i] == 0x11 || fams[i] == 0x21)
			continue;
		hb_start(&h, 0x21, fams[i]);
		switch (fams[i] >> 4) {
		case 1:	hb_inet(&h); break;
		case 2:	hb_put(&h, un, 36); break;
		case 3:	hb_put(&h, un, 216); break;
		}
		hb_tlv(&h, 0x04, NULL, 3);
		hb_end(&h);
		parse_ok(h.b, h.n, &info);
		if (!info.local)
			fail_msg("fam 0x%02x is not local", fams[i]);
		assert_int_equal(info.ntlvs, 1);
	}
	/* LOCAL, any family. */
	for (i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
		hb_start(&h, 0x20, fams[i]);
		hb_put(&h, un, fams[i] >> 4 == 3 ? 216 :
		    fams[i] >> 4 == 2 ? 36 : fams[i] >> 4 == 1 ? 12 : 0);
		hb_end(&h);
		parse_ok(h.b, h.n, &info);
		assert_true(info.local);
	}
}

/* Bad version, command or family: refused at that very byte. */
static void
test_parse_v2_bad_fixed(void **state)
{
	struct hb	h;
	unsigned	c;

	for (c = 0; c < 256; c++) {
		if (c == 0x20 || c == 0x21)
			continue;
		hb_start(&h, c, 0x11);
		hb_inet(&h);
		hb_end(&h);
		assert_int_equal(parse_bad(h.b, h.n, (c >> 4) != 2 ?
		    "v2 bad version" : "v2 bad command"), 13);
	}
	for (c = 0; c < 256; c++) {
		if ((c >> 4) <= 3 && (c & 0x0f) <= 2)
			continue;
		hb_start(&h, 0x21, c);
		hb_inet(&h);
		hb_end(&h);
		assert_int_equal(parse_bad(h.b, h.n, "v2 bad family"), 14);
	}
	/* Off the signature at any byte. */
	for (c = 0; c < 12; c++) {
		hb_start(&h, 0x21, 0x11);
		hb_inet(&h);
		hb_end(&h);
		h.b[c] ^= 0x40;
		assert_int_equal(parse_bad(h.b, h.n, "not a PROXY header"),
		    c + 1);
	}
}

/*
 * A length past ZP_PROXY_ACCEPT_MAX, or too short for the family's
 * addresses, is refused once the 16 fixed bytes are in; the longest
 * allowed header is taken.
 */
static void
test_parse_v2_length(void **state)
{
	struct zp_proxy_info	info;
	struct hb		h;

	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_tlv(&h, 0x04, NULL, ZP_PROXY_ACCEPT_MAX - 28 - 3);
	hb_end(&h);
	assert_int_equal(h.n, ZP_PROXY_ACCEPT_MAX);
	parse_ok(h.b, h.n, &info);
	assert_false(info.local);

	hb_byte(&h, 0);
	hb_end(&h);
	assert_int_equal(parse_bad(h.b, h.n, "v2 header too long"), 16);
	h.b[14] = h.b[15] = 0xff;
	assert_int_equal(parse_bad(h.b, 16, "v2 header too long"), 16);

	/* Truncated address blocks. */
	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	h.n--;
	hb_end(&h);
	assert_int_equal(parse_bad(h.b, h.n,
	    "v2 address block too short"), 16);
	hb_start(&h, 0x21, 0x21);
	hb_inet(&h);
	hb_end(&h);
	assert_int_equal(parse_bad(h.b, h.n,
	    "v2 address block too short"), 16);
	hb_start(&h, 0x21, 0x31);
	hb_inet(&h);
	hb_end(&h);
	assert_int_equal(parse_bad(h.b, h.n,
	    "v2 address block too short"), 16);
	/* LOCAL ignores the family, and with it the block's size. */
	hb_start(&h, 0x20, 0x11);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_true(info.local);
	assert_int_equal(info.version, 2);
	hb_start(&h, 0x20, 0x21);
	hb_inet(&h);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_true(info.local);
}

/*
 * The TLVs that are read (AUTHORITY, AWS VPC endpoint), the ones that
 * are checked and skipped (NOOP, UNIQUE_ID, SSL, NETNS, ALPN, custom),
 * each counted.
 */
static void
test_parse_v2_tlvs(void **state)
{
	struct zp_proxy_info	 info;
	struct hb		 h;
	static const char	 vpce[] = "\001vpce-08d2bf15fac5001c9";
	static const unsigned char ssl[] = {
		0x07, 0, 0, 0, 0,		/* client, verify */
		0x21, 0, 7, 'T', 'L', 'S', 'v', '1', '.', '3',
		0x22, 0, 3, 'c', 'o', 'm',
		0x23, 0, 0,
	};
	char			 name[256];

	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_tlv(&h, 0x02, "example.com", 11);
	hb_tlv(&h, 0xea, vpce, sizeof(vpce) - 1);
	hb_tlv(&h, 0xea, "\002other", 6);	/* another AWS subtype */
	hb_tlv(&h, 0x04, NULL, 0);
	hb_tlv(&h, 0x05, NULL, 128);
	hb_tlv(&h, 0x20, ssl, sizeof(ssl));
	hb_tlv(&h, 0x30, "ns1", 3);
	hb_tlv(&h, 0x01, "h2", 2);
	hb_tlv(&h, 0xf0, NULL, 1);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_false(info.local);
	assert_side(&info.src, info.srclen, AF_INET, "192.0.2.1", 40000);
	assert_string_equal(info.authority, "example.com");
	assert_string_equal(info.aws_vpce, "vpce-08d2bf15fac5001c9");
	assert_int_equal(info.ntlvs, 9);
	assert_false(info.crc32c);

	/* The longest authority is taken whole. */
	memset(name, 'a', 255);
	name[255] = '\0';
	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_tlv(&h, 0x02, name, 255);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_string_equal(info.authority, name);

	/* TLVs after a LOCAL header are read too. */
	hb_start(&h, 0x20, 0x00);
	hb_tlv(&h, 0x02, "a.example", 9);
	hb_end(&h);
	parse_ok(h.b, h.n, &info);
	assert_true(info.local);
	assert_string_equal(info.authority, "a.example");
}

/* TLVs that do not fit, or break the rules for their type. */
static void
test_parse_v2_bad_tlvs(void **state)
{
	struct hb		h;
	char			big[300];
	static const unsigned char ssl_over[] = {
		0x01, 0, 0, 0, 0, 0x21, 0, 9, 'T', 'L', 'S',
	};
	static const unsigned char ssl_stub[] = { 0x01, 0, 0, 0, 0, 0x21 };
	unsigned		k;

	memset(big, 'a', sizeof(big));
	for (k = 0; k < 14; k++) {
		hb_start(&h, 0x21, 0x11);
		hb_inet(&h);
		switch (k) {
		case 0:		/* overruns the block */
			hb_tlv(&h, 0x04, NULL, 4);
			h.n--;
			break;
		case 1:		/* one stray byte */
			hb_byte(&h, 0x04);
			break;
		case 2:		/* two */
			hb_byte(&h, 0x04);
			hb_byte(&h, 0x00);
			break;
		case 3:
			hb_tlv(&h, 0x02, big, 256);
			break;
		case 4:
			hb_tlv(&h, 0x02, "a\0b", 3);
			break;
		case 5:
			hb_tlv(&h, 0x02, "a", 1);
			hb_tlv(&h, 0x02, "b", 1);
			break;
		case 6:
			hb_tlv(&h, 0x05, NULL, 129);
			break;
		case 7:
			hb_tlv(&h, 0x20, ssl_stub, 4);
			break;
		case 8:
			hb_tlv(&h, 0x20, ssl_over, sizeof(ssl_over));
			break;
		case 9:
			hb_tlv(&h, 0x20, ssl_stub, sizeof(ssl_stub));
			break;
		case 10:
			hb_tlv(&h, 0x03, "abc", 3);
			break;
		case 11:
			hb_tlv(&h, 0x03, "abcde", 5);
			break;
		case 12:
			big[0] = 0x01;
			hb_tlv(&h, 0xea, big, 257);
			break;
		case 13:
			hb_tlv(&h, 0xea, "\001a", 2);
			hb_tlv(&h, 0xea, "\001b", 2);
			break;
		}
		hb_end(&h);
		if (parse_bad(h.b, h.n, "v2 bad TLV") != h.n)
			fail_msg("bad TLV case %u decided early", k);
	}
}

/*
 * The reference CRC32c gives the standard check value; a header carrying
 * it is taken with crc32c set, and any flipped bit in the addresses, the
 * TLVs or the checksum itself is a mismatch.
 */
static void
test_parse_v2_crc32c(void **state)
{
	struct zp_proxy_info	info;
	struct hb		h, bad;
	size_t			off, i;
	int			bit;

	assert_int_equal(ref_crc32c((const unsigned char *)"123456789", 9),
	    0xe3069283);
	/* RFC 3720 B.4: 32 bytes of zeroes. */
	memset(h.b, 0, 32);
	assert_int_equal(ref_crc32c(h.b, 32), 0x8a9136aa);

	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_tlv(&h, 0x02, "example.com", 11);
	off = hb_crc(&h);
	hb_tlv(&h, 0x04, NULL, 0);	/* the CRC covers what follows it */
	hb_end(&h);
	/* Refill: hb_crc computed it over the shorter header. */
	memset(h.b + off, 0, 4);
	{
		uint32_t crc = ref_crc32c(h.b, h.n);

		h.b[off] = (unsigned char)(crc >> 24);
		h.b[off + 1] = (unsigned char)(crc >> 16);
		h.b[off + 2] = (unsigned char)(crc >> 8);
		h.b[off + 3] = (unsigned char)crc;
	}
	parse_ok(h.b, h.n, &info);
	assert_true(info.crc32c);
	assert_string_equal(info.authority, "example.com");
	assert_int_equal(info.ntlvs, 3);

	/*
	 * Addresses 16-27, AUTHORITY at 28 (value 31-41), CRC32C at 42
	 * (value 45-48), NOOP at 49-51. Not the TLV framing: a flip there
	 * fails as a TLV, not as a CRC.
	 */
	assert_int_equal(h.n, 52);
	for (i = 16; i < h.n; i++) {
		if ((i >= 28 && i <= 30) || (i >= 42 && i <= 44) || i >= 49)
			continue;
		for (bit = 0; bit < 8; bit++) {
			bad = h;
			bad.b[i] ^= (unsigned char)(1 << bit);
			if (parse_bad(bad.b, bad.n, "v2 CRC32c mismatch") !=
			    bad.n)
				fail_msg("byte %zu bit %d", i, bit);
		}
	}

	/* LOCAL with only a CRC, and a CRC of all zeroes that is wrong. */
	hb_start(&h, 0x20, 0x00);
	off = hb_crc(&h);
	parse_ok(h.b, h.n, &info);
	assert_true(info.local);
	assert_true(info.crc32c);
	memset(h.b + off, 0, 4);
	parse_bad(h.b, h.n, "v2 CRC32c mismatch");
	/* Two CRC TLVs: which one to trust? Neither. */
	hb_start(&h, 0x21, 0x11);
	hb_inet(&h);
	hb_crc(&h);
	hb_crc(&h);
	parse_bad(h.b, h.n, "v2 bad TLV");
}

/*
 * A header HAProxy 2.6 sent (send-proxy-v2 proxy-v2-options
 * crc32c,unique-id), captured with the client's first bytes "hi" behind
 * it: another implementation's checksum, taken.
 */
static void
test_parse_v2_haproxy(void **state)
{
	static const unsigned char	hap[] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a, 0x21, 0x11, 0x00, 0x28,
		0x7f, 0x00, 0x00, 0x01, 0x7f, 0x00, 0x00, 0x01,
		0x90, 0x1a, 0xb9, 0xfb,
		0x03, 0x00, 0x04, 0x6d, 0x18, 0xbb, 0xc6,
		0x05, 0x00, 0x12, 'z', 'p', '-', '1', '2', '7', '.', '0', '.',
		'0', '.', '1', '-', '3', '6', '8', '9', '0',
		'h', 'i',
	};
	struct zp_proxy_info		info;
	const char			*why;
	unsigned char			bad[sizeof(hap)];

	assert_int_equal(parse(hap, sizeof(hap), &info, &why), 56);
	parse_ok(hap, 56, &info);
	assert_true(info.crc32c);
	assert_int_equal(info.ntlvs, 2);
	assert_false(info.local);
	assert_side(&info.src, info.srclen, AF_INET, "127.0.0.1", 36890);
	assert_side(&info.dst, info.dstlen, AF_INET, "127.0.0.1", 47611);
	memcpy(bad, hap, sizeof(bad));
	bad[55] ^= 1;		/* the unique id's last byte */
	parse_bad(bad, 56, "v2 CRC32c mismatch");
}

/* Any first byte but 'P' and CR is refused at once. */
static void
test_parse_first_byte(void **state)
{
	unsigned char	b[2];
	unsigned	c;

	for (c = 0; c < 256; c++) {
		if (c == 'P' || c == 0x0d)
			continue;
		b[0] = (unsigned char)c;
		b[1] = 'P';
		assert_int_equal(parse_bad(b, 2, "not a PROXY header"), 1);
	}
	b[0] = 'P';
	assert_int_equal(parse_bad(b, 2, "not a PROXY header"), 2);
}

/*
 * The path whole: a received header whose client is v4-mapped
 * and whose destination is IPv6 is sent on, v1 and v2, naming that
 * client.
 */
static void
test_mixed_accept_send(void **state)
{
	static const char	in[] =
	    "PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 514\r\n";
	static const unsigned char want2[52] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a,
		0x21, 0x21, 0x00, 0x24,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 7,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
		0x9c, 0x40,
		0x02, 0x02,
	};
	struct zp_proxy_info	info;
	unsigned char		buf[ZP_PROXY_MAX + GUARD];
	ssize_t			n;

	parse_ok(in, sizeof(in) - 1, &info);
	assert_false(info.local);
	n = encode(1, (struct sockaddr *)&info.src,
	    (struct sockaddr *)&info.dst, buf, ZP_PROXY_V1_MAX);
	assert_v1_line(buf, n, in);
	n = encode(2, (struct sockaddr *)&info.src,
	    (struct sockaddr *)&info.dst, buf, ZP_PROXY_V2_MAX);
	assert_bytes(buf, n, want2, sizeof(want2));
}

/*
 * What the encoder writes reads back: random address pairs (the round
 * trip's generator), both versions, addresses and ports as they went in
 * (reduced as the spec says), local where the encoder could not say.
 */
static void
test_parse_round_trip(void **state)
{
	struct sockaddr_storage	 s, d;
	const struct sockaddr	*src, *dst;
	unsigned char		 buf[ZP_PROXY_MAX + GUARD];
	unsigned char		 es[16], ed[16];
	struct zp_proxy_info	 info;
	const char		*why;
	uint64_t		 x = SEED ^ 0x1111;
	unsigned		 round, esp, edp, nonlocal = 0;
	int			 version, fs, fd;
	ssize_t			 n;

	for (round = 0; round < ROUNDS; round++) {
		src = rnd_addr(&x, &s);
		dst = rnd_addr(&x, &d);
		while (rnd(&x) % 4 != 0 && src->sa_family != AF_UNIX &&
		    dst->sa_family != src->sa_family)
			dst = rnd_addr(&x, &d);
		fs = expect_addr(src, es, &esp);
		fd = expect_addr(dst, ed, &edp);
		expect_pair(&fs, es, &fd, ed);
		for (version = 1; version <= 2; version++) {
			n = encode(version, src, dst, buf, ZP_PROXY_MAX);
			if (n == -1)
				fail_msg("round %u: v%d encode failed", round,
				    version);
			if (round % 50 == 0)
				parse_ok(buf, (size_t)n, &info);
			else if (parse(buf, (size_t)n, &info, &why) != n)
				fail_msg("round %u: v%d: %s", round, version,
				    why != NULL ? why : "incomplete");
			assert_int_equal(info.version, version);
			if (fs == 0 || fs != fd) {
				assert_true(info.local);
				continue;
			}
			assert_false(info.local);
			nonlocal++;
			assert_int_equal(info.src.ss_family, fs);
			assert_int_equal(info.dst.ss_family, fs);
			if (fs == AF_INET) {
				const struct sockaddr_in *a = (void *)&info.src;
				const struct sockaddr_in *b = (void *)&info.dst;

				assert_memory_equal(&a->sin_addr, es, 4);
				assert_memory_equal(&b->sin_addr, ed, 4);
				assert_int_equal(ntohs(a->sin_port), esp);
				assert_int_equal(ntohs(b->sin_port), edp);
			} else {
				const struct sockaddr_in6 *a, *b;

				a = (void *)&info.src;
				b = (void *)&info.dst;

				assert_memory_equal(&a->sin6_addr, es, 16);
				assert_memory_equal(&b->sin6_addr, ed, 16);
				assert_int_equal(ntohs(a->sin6_port), esp);
				assert_int_equal(ntohs(b->sin6_port), edp);
			}
		}
	}
	assert_true(nonlocal > ROUNDS / 2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_v1_tcp4),
		cmocka_unit_test(test_v1_port_limits),
		cmocka_unit_test(test_v1_tcp6),
		cmocka_unit_test(test_v1_v4mapped),
		cmocka_unit_test(test_v1_mixed),
		cmocka_unit_test(test_mixed_accept_send),
		cmocka_unit_test(test_v1_unknown),
		cmocka_unit_test(test_v1_longest),
		cmocka_unit_test(test_v1_small_buffer),
		cmocka_unit_test(test_bad_version),
		cmocka_unit_test(test_v2_tcp4),
		cmocka_unit_test(test_v2_tcp6),
		cmocka_unit_test(test_dgram),
		cmocka_unit_test(test_v2_v4mapped),
		cmocka_unit_test(test_v2_mixed),
		cmocka_unit_test(test_v2_local),
		cmocka_unit_test(test_v2_small_buffer),
		cmocka_unit_test(test_decoder_self_check),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_parse_v1_tcp),
		cmocka_unit_test(test_parse_v1_unknown),
		cmocka_unit_test(test_parse_v1_bad),
		cmocka_unit_test(test_parse_v2_inet),
		cmocka_unit_test(test_parse_v2_local),
		cmocka_unit_test(test_parse_v2_bad_fixed),
		cmocka_unit_test(test_parse_v2_length),
		cmocka_unit_test(test_parse_v2_tlvs),
		cmocka_unit_test(test_parse_v2_bad_tlvs),
		cmocka_unit_test(test_parse_v2_crc32c),
		cmocka_unit_test(test_parse_v2_haproxy),
		cmocka_unit_test(test_parse_first_byte),
		cmocka_unit_test(test_parse_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
