/*
 * proxyproto.c - encode and read PROXY protocol v1 and v2 headers
 * (HAProxy's doc/proxy-protocol.txt).
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lib/proxyproto.h"

static const unsigned char v2_sig[12] = {
	0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a
};

/* An address reduced to what the header carries. */
struct pp_addr {
	int		family;		/* AF_INET, AF_INET6 or 0 */
	unsigned char	addr[16];
	uint16_t	port;		/* network order */
};

/* Reduce a sockaddr; a v4-mapped IPv6 address becomes IPv4. */
static void
pp_addr_get(const struct sockaddr *sa, struct pp_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (sa == NULL)
		return;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)sa;

		a->family = AF_INET;
		memcpy(a->addr, &sin->sin_addr, 4);
		a->port = sin->sin_port;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)sa;

		if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
			a->family = AF_INET;
			memcpy(a->addr, &sin6->sin6_addr.s6_addr[12], 4);
		} else {
			a->family = AF_INET6;
			memcpy(a->addr, &sin6->sin6_addr, 16);
		}
		a->port = sin6->sin6_port;
	}
}

/*
 * An IPv4 a as the v4-mapped IPv6 address it is (::ffff:a.b.c.d): a
 * header holds one family, so an IPv4 end paired with an IPv6 one
 * travels mapped (HAProxy's make_proxy_line does the same) rather than
 * as UNKNOWN / LOCAL, which would make the upstream take zproxy for the
 * client.
 */
static void
pp_addr_map6(struct pp_addr *a)
{
	if (a->family != AF_INET)
		return;
	memmove(a->addr + 12, a->addr, 4);
	memset(a->addr, 0, 10);
	a->addr[10] = a->addr[11] = 0xff;
	a->family = AF_INET6;
}

/* "PROXY TCP4 1.2.3.4 5.6.7.8 1111 2222\r\n" */
static ssize_t
pp_v1(const struct pp_addr *s, const struct pp_addr *d, char *buf,
    size_t len)
{
	char	sh[INET6_ADDRSTRLEN], dh[INET6_ADDRSTRLEN];
	int	n;

	if (s->family == 0 || s->family != d->family)
		n = snprintf(buf, len, "PROXY UNKNOWN\r\n");
	else {
		inet_ntop(s->family, s->addr, sh, sizeof(sh));
		inet_ntop(d->family, d->addr, dh, sizeof(dh));
		n = snprintf(buf, len, "PROXY %s %s %s %u %u\r\n",
		    s->family == AF_INET ? "TCP4" : "TCP6", sh, dh,
		    ntohs(s->port), ntohs(d->port));
	}
	if (n < 0 || (size_t)n >= len)
		return -1;
	return n;
}

/* The binary form: signature, version/command, family, length, block. */
static ssize_t
pp_v2(const struct pp_addr *s, const struct pp_addr *d, int dgram, char *buf,
    size_t len)
{
	unsigned char	*p = (unsigned char *)buf;
	size_t		 alen, total;

	if (s->family == 0 || s->family != d->family) {
		if (len < 16)
			return -1;
		memcpy(p, v2_sig, 12);
		p[12] = 0x20;	/* version 2, LOCAL: no addresses */
		p[13] = 0x00;	/* UNSPEC */
		p[14] = p[15] = 0;
		return 16;
	}
	alen = s->family == AF_INET ? 4 : 16;
	total = 16 + 2 * alen + 4;
	if (len < total)
		return -1;
	memcpy(p, v2_sig, 12);
	p[12] = 0x21;	/* version 2, PROXY */
	/* TCP (STREAM) or UDP (DGRAM) over v4 / v6 */
	p[13] = (s->family == AF_INET ? 0x10 : 0x20) | (dgram ? 0x02 : 0x01);
	p[14] = (unsigned char)((total - 16) >> 8);
	p[15] = (unsigned char)((total - 16) & 0xff);
	memcpy(p + 16, s->addr, alen);
	memcpy(p + 16 + alen, d->addr, alen);
	memcpy(p + 16 + 2 * alen, &s->port, 2);
	memcpy(p + 16 + 2 * alen + 2, &d->port, 2);
	return (ssize_t)total;
}

/* Write the header for src -> dst into buf. */
ssize_t
zp_proxy_header(int version, int dgram, const struct sockaddr *src,
    const struct sockaddr *dst, char *buf, size_t len)
{
	struct pp_addr	s, d;

	pp_addr_get(src, &s);
	pp_addr_get(dst, &d);
	if (s.family != 0 && d.family != 0 && s.family != d.family) {
		pp_addr_map6(&s);
		pp_addr_map6(&d);
	}
	if (version == 1)
		return pp_v1(&s, &d, buf, len);
	if (version == 2)
		return pp_v2(&s, &d, dgram, buf, len);
	return -1;
}

/* ---- the reader ----------------------------------------------------- */

#define V1_LINE_MAX	107	/* the spec: longest v1 line, CRLF included */
#define V2_HDR		16	/* signature, ver/cmd, fam/proto, length */

/* Not <ctype.h>: what v1 allows does not depend on the locale. */
#define PP_DIGIT(c)	((c) >= '0' && (c) <= '9')
#define PP_XALPHA(c)	(((c) >= 'a' && (c) <= 'f') || \
			 ((c) >= 'A' && (c) <= 'F'))

#define PP2_TYPE_AUTHORITY	0x02
#define PP2_TYPE_CRC32C		0x03
#define PP2_TYPE_UNIQUE_ID	0x05
#define PP2_TYPE_SSL		0x20
#define PP2_TYPE_AWS		0xea
#define PP2_AWS_VPCE_ID		0x01
#define PP2_UNIQUE_ID_MAX	128
#define PP2_SSL_FIXED		5	/* client (1) and verify (4) */

/* Fail the parse with a reason; the reasons are static strings. */
static ssize_t
pp_fail(const char **why, const char *reason)
{
	if (why != NULL)
		*why = reason;
	return -1;
}

/*
 * CRC32c (Castagnoli: reflected, polynomial 0x82F63B78, as RFC 4960
 * appendix B and the spec say), four bits at a time: a 16-entry table is
 * small enough to write out and needs no start-up initialisation. Start
 * with crc 0xffffffff and invert the end result.
 */
static uint32_t
pp_crc32c(uint32_t crc, const unsigned char *p, size_t n)
{
	static const uint32_t t[16] = {
		0x00000000, 0x105ec76f, 0x20bd8ede, 0x30e349b1,
		0x417b1dbc, 0x5125dad3, 0x61c69362, 0x7198540d,
		0x82f63b78, 0x92a8fc17, 0xa24bb5a6, 0xb21572c9,
		0xc38d26c4, 0xd3d3e1ab, 0xe330a81a, 0xf36e6f75,
	};
	size_t	i;

	for (i = 0; i < n; i++) {
		crc ^= p[i];
		crc = (crc >> 4) ^ t[crc & 0x0f];
		crc = (crc >> 4) ^ t[crc & 0x0f];
	}
	return crc;
}

/*
 * Compare what there is of buf with the literal lit: -1 when it deviates,
 * 0 when it is a true prefix of it (wait for more), 1 when lit is whole.
 */
static int
pp_match(const unsigned char *p, size_t avail, const char *lit)
{
	size_t	n = strlen(lit);

	if (memcmp(p, lit, avail < n ? avail : n) != 0)
		return -1;
	return avail >= n;
}

/*
 * One v1 field of TCP4/TCP6 whole in f (n bytes, not terminated): an
 * address of family af into a (4 or 16 bytes), or a port into *port.
 */
static int
pp_v1_addr(const unsigned char *f, size_t n, int af, void *a)
{
	char	text[INET6_ADDRSTRLEN];

	if (n == 0 || n >= sizeof(text))
		return -1;
	memcpy(text, f, n);
	text[n] = '\0';
	return inet_pton(af, text, a) == 1 ? 0 : -1;
}

/*
 * "PROXY UNKNOWN" from pos (just past "PROXY "): anything up to the CRLF,
 * as the spec says. Returns the line's length, 0 for more bytes, or -1
 * with *why set; as pp_v1_parse().
 */
static ssize_t
pp_v1_unknown(const unsigned char *p, size_t len, size_t pos,
    struct zp_proxy_info *info, const char **why)
{
	unsigned char	c;

	for (pos += 7;; pos++) {
		if (pos >= V1_LINE_MAX)
			return pp_fail(why, "v1 line too long");
		if (pos >= len)
			return 0;
		c = p[pos];
		if (pos == 13 && c != ' ' && c != '\r')
			return pp_fail(why, "bad v1 protocol");
		if (c == '\n')
			return pp_fail(why, "v1 line not ended by CRLF");
		if (c != '\r')
			continue;
		if (pos + 1 >= V1_LINE_MAX)
			return pp_fail(why, "v1 line too long");
		if (pos + 1 >= len)
			return 0;
		if (p[pos + 1] != '\n')
			return pp_fail(why, "v1 line not ended by CRLF");
		info->version = 1;
		info->local = 1;
		return (ssize_t)(pos + 2);
	}
}

/*
 * Field f of a TCP4/TCP6 line (0 src, 1 dst: an address of family af
 * into a; 2 sport, 3 dport: into port[f - 2]) from *pos, judged byte by
 * byte. Returns 1 with *pos past its terminator (SP, or the last one's
 * CR), 0 for more bytes, or -1 with *why set.
 */
static ssize_t
pp_v1_field(const unsigned char *p, size_t len, size_t *pos, int f, int af,
    unsigned char a[16], unsigned long port[2], const char **why)
{
	size_t		start, width;
	unsigned char	c;

	width = f >= 2 ? 5 : af == AF_INET ? INET_ADDRSTRLEN - 1 :
	    INET6_ADDRSTRLEN - 1;
	for (start = *pos;; (*pos)++) {
		if (*pos >= V1_LINE_MAX)
			return pp_fail(why, "v1 line too long");
		if (*pos >= len)
			return 0;
		c = p[*pos];
		if (c == (f == 3 ? '\r' : ' '))
			break;
		if (c == '\n')
			return pp_fail(why, "v1 line not ended by CRLF");
		if (f < 2) {
			if (*pos - start >= width ||
			    !(PP_DIGIT(c) || c == '.' ||
			    (af == AF_INET6 && (PP_XALPHA(c) || c == ':'))))
				return pp_fail(why, "bad v1 address");
			continue;
		}
		/* No sign, no leading zero, at most 65535. */
		if (!PP_DIGIT(c) || (*pos > start && p[start] == '0'))
			return pp_fail(why, "bad v1 port");
		port[f - 2] = port[f - 2] * 10 + (unsigned long)(c - '0');
		if (port[f - 2] > 65535)
			return pp_fail(why, "bad v1 port");
	}
	if (*pos == start)
		return pp_fail(why, f < 2 ? "bad v1 address" : "bad v1 port");
	if (f < 2 && pp_v1_addr(p + start, *pos - start, af, a) == -1)
		return pp_fail(why, "bad v1 address");
	(*pos)++;
	return 1;
}

/* A whole TCP4/TCP6 line's addresses (a) and ports into info. */
static void
pp_v1_set(struct zp_proxy_info *info, int af, unsigned char a[2][16],
    const unsigned long port[2])
{
	struct sockaddr_in	*s4 = (struct sockaddr_in *)&info->src;
	struct sockaddr_in	*d4 = (struct sockaddr_in *)&info->dst;
	struct sockaddr_in6	*s6 = (struct sockaddr_in6 *)&info->src;
	struct sockaddr_in6	*d6 = (struct sockaddr_in6 *)&info->dst;

	info->version = 1;
	if (af == AF_INET) {
		s4->sin_family = d4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, a[0], 4);
		memcpy(&d4->sin_addr, a[1], 4);
		s4->sin_port = htons((uint16_t)port[0]);
		d4->sin_port = htons((uint16_t)port[1]);
		info->srclen = info->dstlen = sizeof(struct sockaddr_in);
	} else {
		s6->sin6_family = d6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, a[0], 16);
		memcpy(&d6->sin6_addr, a[1], 16);
		s6->sin6_port = htons((uint16_t)port[0]);
		d6->sin6_port = htons((uint16_t)port[1]);
		info->srclen = info->dstlen = sizeof(struct sockaddr_in6);
	}
}

/*
 * The v1 line: "PROXY TCP4 src dst sport dport\r\n" (or TCP6), or "PROXY
 * UNKNOWN" with anything up to the CRLF. Each byte is judged as it
 * arrives, so that a line that cannot be valid fails before it is whole:
 * a field takes only the characters of its kind, up to its longest
 * width, and a port its digits while it stays within 65535.
 */
static ssize_t
pp_v1_parse(const unsigned char *p, size_t len, struct zp_proxy_info *info,
    const char **why)
{
	unsigned char		 a[2][16];
	unsigned long		 port[2] = { 0, 0 };
	size_t			 pos;
	ssize_t			 r;
	int			 af, f, m, m4, m6;

	if ((m = pp_match(p, len, "PROXY ")) != 1)
		return m == -1 ? pp_fail(why, "not a PROXY header") : 0;
	pos = 6;
	if ((m = pp_match(p + pos, len - pos, "UNKNOWN")) == 0)
		return 0;
	if (m == 1)
		return pp_v1_unknown(p, len, pos, info, why);
	m4 = pp_match(p + pos, len - pos, "TCP4 ");
	m6 = pp_match(p + pos, len - pos, "TCP6 ");
	if (m4 == -1 && m6 == -1)
		return pp_fail(why, "bad v1 protocol");
	if (m4 != 1 && m6 != 1)
		return 0;
	af = m4 == 1 ? AF_INET : AF_INET6;
	pos += 5;

	/* src dst sport dport, the last one ended by CR, the others by SP. */
	for (f = 0; f < 4; f++)
		if ((r = pp_v1_field(p, len, &pos, f, af, a[f < 2 ? f : 0],
		    port, why)) != 1)
			return r;
	/* p[pos - 1] is the CR; V1_LINE_MAX bounds pos as above. */
	if (pos >= V1_LINE_MAX)
		return pp_fail(why, "v1 line too long");
	if (pos >= len)
		return 0;
	if (p[pos] != '\n')
		return pp_fail(why, "v1 line not ended by CRLF");
	pp_v1_set(info, af, a, port);
	return (ssize_t)(pos + 1);
}

/*
 * Copy a string TLV value into dst (256 bytes): refused when too long to
 * fit whole or when it holds a NUL, so that what the caller sees is what
 * was sent.
 */
static int
pp_tlv_string(char *dst, size_t size, const unsigned char *v, size_t n)
{
	if (n >= size || memchr(v, '\0', n) != NULL)
		return -1;
	memcpy(dst, v, n);
	dst[n] = '\0';
	return 0;
}

/*
 * The TLVs of a whole v2 header h of total bytes, from off on. Returns
 * 0, or -1 with why set; *crc_off is the offset of the CRC32c value, or 0.
 */
static int
pp_v2_tlvs(const unsigned char *h, size_t off, size_t total,
    struct zp_proxy_info *info, size_t *crc_off, const char **why)
{
	const unsigned char	*v;
	size_t			 n, sub;
	unsigned		 type;
	int			 authority = 0, vpce = 0;

	*crc_off = 0;
	while (off < total) {
		if (total - off < 3)
			goto bad;
		type = h[off];
		n = (size_t)h[off + 1] << 8 | h[off + 2];
		if (n > total - off - 3)
			goto bad;
		v = h + off + 3;
		switch (type) {
		case PP2_TYPE_CRC32C:
			if (n != 4 || *crc_off != 0)
				goto bad;
			*crc_off = off + 3;
			break;
		case PP2_TYPE_AUTHORITY:
			if (authority++ || pp_tlv_string(info->authority,
			    sizeof(info->authority), v, n) == -1)
				goto bad;
			break;
		case PP2_TYPE_UNIQUE_ID:
			if (n > PP2_UNIQUE_ID_MAX)
				goto bad;
			break;
		case PP2_TYPE_SSL:
			/* client, verify, then sub-TLVs filling the rest. */
			if (n < PP2_SSL_FIXED)
				goto bad;
			for (sub = PP2_SSL_FIXED; sub < n;) {
				if (n - sub < 3 ||
				    ((size_t)v[sub + 1] << 8 | v[sub + 2]) >
				    n - sub - 3)
					goto bad;
				sub += 3 + ((size_t)v[sub + 1] << 8 |
				    v[sub + 2]);
			}
			break;
		case PP2_TYPE_AWS:
			if (n == 0 || v[0] != PP2_AWS_VPCE_ID)
				break;	/* another AWS subtype: not ours */
			if (vpce++ || pp_tlv_string(info->aws_vpce,
			    sizeof(info->aws_vpce), v + 1, n - 1) == -1)
				goto bad;
			break;
		default:
			/* NOOP, ALPN, NETNS, custom and future: skipped. */
			break;
		}
		info->ntlvs++;
		off += 3 + n;
	}
	return 0;
bad:
	*why = "v2 bad TLV";
	return -1;
}

static const unsigned char zero4[4];

/*
 * The v2 header's CRC32c TLV (its value at crc_off) against the whole
 * header (total bytes), computed with the checksum's 4 bytes as zeroes.
 * Returns 1 when they agree.
 */
static int
pp_v2_crc_ok(const unsigned char *p, size_t total, size_t crc_off)
{
	uint32_t	crc, want;

	want = (uint32_t)p[crc_off] << 24 | (uint32_t)p[crc_off + 1] << 16 |
	    (uint32_t)p[crc_off + 2] << 8 | p[crc_off + 3];
	crc = pp_crc32c(0xffffffff, p, crc_off);
	crc = pp_crc32c(crc, zero4, 4);
	crc = pp_crc32c(crc, p + crc_off + 4, total - crc_off - 4);
	return (crc ^ 0xffffffff) == want;
}

/* A PROXY v2 address block b of family fam (1 INET, 2 INET6) into info. */
static void
pp_v2_set(struct zp_proxy_info *info, unsigned fam, const unsigned char *b)
{
	struct sockaddr_in	*s4 = (struct sockaddr_in *)&info->src;
	struct sockaddr_in	*d4 = (struct sockaddr_in *)&info->dst;
	struct sockaddr_in6	*s6 = (struct sockaddr_in6 *)&info->src;
	struct sockaddr_in6	*d6 = (struct sockaddr_in6 *)&info->dst;

	if (fam == 1) {
		s4->sin_family = d4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, b, 4);
		memcpy(&d4->sin_addr, b + 4, 4);
		memcpy(&s4->sin_port, b + 8, 2);
		memcpy(&d4->sin_port, b + 10, 2);
		info->srclen = info->dstlen = sizeof(struct sockaddr_in);
	} else {
		s6->sin6_family = d6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, b, 16);
		memcpy(&d6->sin6_addr, b + 16, 16);
		memcpy(&s6->sin6_port, b + 32, 2);
		memcpy(&d6->sin6_port, b + 34, 2);
		info->srclen = info->dstlen = sizeof(struct sockaddr_in6);
	}
}

/*
 * The binary header. Fails as soon as the bytes there are say it must:
 * at the first byte off the signature, at a bad version, command or
 * family byte, and, once the 16 fixed bytes are in, at a length over
 * ZP_PROXY_ACCEPT_MAX or too short for the family's addresses.
 */
static ssize_t
pp_v2_parse(const unsigned char *p, size_t len, struct zp_proxy_info *info,
    const char **why)
{
	size_t			 total, alen, crc_off;
	unsigned		 fam, proto;
	const char		*reason = "";

	if (memcmp(p, v2_sig, len < 12 ? len : 12) != 0)
		return pp_fail(why, "not a PROXY header");
	if (len < 13)
		return 0;
	if (p[12] >> 4 != 2)
		return pp_fail(why, "v2 bad version");
	if ((p[12] & 0x0f) > 1)
		return pp_fail(why, "v2 bad command");
	if (len < 14)
		return 0;
	fam = p[13] >> 4;
	proto = p[13] & 0x0f;
	if (fam > 3 || proto > 2)
		return pp_fail(why, "v2 bad family");
	if (len < V2_HDR)
		return 0;
	total = V2_HDR + ((size_t)p[14] << 8 | p[15]);
	if (total > ZP_PROXY_ACCEPT_MAX)
		return pp_fail(why, "v2 header too long");
	/* The family alone sizes the block: the protocol has no say. */
	alen = fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0;
	if (total - V2_HDR < alen) {
		/*
		 * LOCAL: "the receiver must ... discard the protocol block
		 * including the family", so a health check that names INET
		 * with no addresses (some balancers do) is still one.
		 */
		if ((p[12] & 0x0f) != 0)
			return pp_fail(why, "v2 address block too short");
		alen = total - V2_HDR;
	}
	if (len < total)
		return 0;

	if (pp_v2_tlvs(p, V2_HDR + alen, total, info, &crc_off, &reason) ==
	    -1)
		return pp_fail(why, reason);
	if (crc_off != 0) {
		if (!pp_v2_crc_ok(p, total, crc_off))
			return pp_fail(why, "v2 CRC32c mismatch");
		info->crc32c = 1;
	}

	info->version = 2;
	info->local = (p[12] & 0x0f) == 0 || proto != 1 ||
	    (fam != 1 && fam != 2);
	if (!info->local)
		pp_v2_set(info, fam, p + V2_HDR);
	return (ssize_t)total;
}

/* Read a v1 or v2 header at the start of buf; see proxyproto.h. */
ssize_t
zp_proxy_parse(const void *buf, size_t len, struct zp_proxy_info *info,
    const char **why)
{
	const unsigned char	*p = buf;
	ssize_t			 n;

	memset(info, 0, sizeof(*info));
	if (len == 0)
		return 0;
	if (p[0] == 'P')
		n = pp_v1_parse(p, len, info, why);
	else if (p[0] == v2_sig[0])
		n = pp_v2_parse(p, len, info, why);
	else
		return pp_fail(why, "not a PROXY header");
	if (n <= 0) {
		/* Half-filled on the way: nothing to hand back. */
		memset(info, 0, sizeof(*info));
	}
	return n;
}
