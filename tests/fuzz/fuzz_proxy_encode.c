/*
 * fuzz_proxy_encode.c - zp_proxy_header() for any pair of addresses, any
 * version and any buffer size.
 *
 * The input picks the version (0-3: two of them invalid), the size of the
 * output buffer (allocated to exactly that size, so ASan sees any write
 * past it), and the family, address and port of each side: none (NULL),
 * IPv4, IPv6, v4-mapped IPv6 or a family the header cannot carry.
 *
 * Whatever comes out must parse back, with a parser written here from
 * HAProxy's proxy-protocol.txt, to the addresses that went in (v4-mapped
 * ones as IPv4; IPv4 with IPv6 as TCP6, the IPv4 one v4-mapped; unknown
 * families as v1's UNKNOWN or v2's LOCAL), within the spec's size bounds;
 * and a buffer too small for it
 * must give -1.
 */

#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>

#include "lib/proxyproto.h"
#include "fuzz.h"

/* An address as the header should carry it. */
struct want {
	int		family;		/* AF_INET, AF_INET6, or 0: none */
	unsigned char	addr[16];
	unsigned	port;
};

/* Byte i of the input, or 0 past its end. */
static unsigned char
in_byte(const uint8_t *data, size_t size, size_t i)
{
	return i < size ? data[i] : 0;
}

/*
 * Build one side from kind and 18 input bytes at off (16 of address, 2 of
 * port); NULL for kind 0.
 */
static const struct sockaddr *
make_side(unsigned kind, const uint8_t *data, size_t size, size_t off,
    struct sockaddr_storage *ss, struct want *w)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)ss;
	unsigned char		 b[18];
	size_t			 i;

	for (i = 0; i < sizeof(b); i++)
		b[i] = in_byte(data, size, off + i);
	memset(ss, 0, sizeof(*ss));
	memset(w, 0, sizeof(*w));
	w->port = (unsigned)b[16] << 8 | b[17];
	switch (kind % 5) {
	case 0:
		return NULL;
	case 1:
		sin->sin_family = AF_INET;
		memcpy(&sin->sin_addr, b, 4);
		sin->sin_port = htons((uint16_t)w->port);
		w->family = AF_INET;
		memcpy(w->addr, b, 4);
		break;
	case 2:
		sin6->sin6_family = AF_INET6;
		memcpy(&sin6->sin6_addr, b, 16);
		sin6->sin6_port = htons((uint16_t)w->port);
		if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
			w->family = AF_INET;
			memcpy(w->addr, b + 12, 4);
		} else {
			w->family = AF_INET6;
			memcpy(w->addr, b, 16);
		}
		break;
	case 3:		/* v4-mapped: ::ffff:a.b.c.d */
		sin6->sin6_family = AF_INET6;
		memset(&sin6->sin6_addr.s6_addr[10], 0xff, 2);
		memcpy(&sin6->sin6_addr.s6_addr[12], b, 4);
		sin6->sin6_port = htons((uint16_t)w->port);
		w->family = AF_INET;
		memcpy(w->addr, b, 4);
		break;
	default:	/* a family the header cannot carry */
		((struct sockaddr_un *)ss)->sun_family = AF_UNIX;
		break;
	}
	return (const struct sockaddr *)ss;
}

/*
 * IPv4 paired with IPv6: w, if IPv4, as the v4-mapped IPv6 address the
 * header must carry for it.
 */
static void
want_map6(struct want *w)
{
	if (w->family != AF_INET)
		return;
	memmove(w->addr + 12, w->addr, 4);
	memset(w->addr, 0, 10);
	w->addr[10] = w->addr[11] = 0xff;
	w->family = AF_INET6;
}

/* A decimal port as v1 writes it: 0-65535, no leading zero. */
static int
v1_port(const char *s, size_t n, unsigned *port)
{
	unsigned long	v = 0;
	size_t		i;

	if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
		return -1;
	for (i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > 65535)
		return -1;
	*port = (unsigned)v;
	return 0;
}

/* Parse a v1 line and compare it with what went in. */
static void
check_v1(const char *h, size_t n, const struct want *s, const struct want *d)
{
	char		 line[ZP_PROXY_V1_MAX], *f[6], *sp;
	unsigned char	 a[16];
	unsigned	 port;
	int		 nf = 0, fam;
	size_t		 i;

	FUZZ_CHECK(n >= 8 && n <= ZP_PROXY_V1_MAX - 1);
	FUZZ_CHECK(h[n - 2] == '\r' && h[n - 1] == '\n');
	FUZZ_CHECK(memchr(h, '\0', n) == NULL);
	FUZZ_CHECK(memchr(h, '\r', n - 2) == NULL);
	FUZZ_CHECK(memchr(h, '\n', n - 1) == NULL);
	memcpy(line, h, n - 2);
	line[n - 2] = '\0';
	/* Single spaces between fields, none at either end. */
	for (sp = line; nf < 6; nf++) {
		f[nf] = sp;
		if ((sp = strchr(sp, ' ')) == NULL) {
			nf++;
			break;
		}
		*sp++ = '\0';
		FUZZ_CHECK(*sp != ' ' && *sp != '\0');
	}
	FUZZ_CHECK(sp == NULL);
	FUZZ_CHECK(strcmp(f[0], "PROXY") == 0);
	if (s->family == 0 || s->family != d->family) {
		FUZZ_CHECK(nf == 2 && strcmp(f[1], "UNKNOWN") == 0);
		return;
	}
	FUZZ_CHECK(nf == 6);
	fam = s->family;
	FUZZ_CHECK(strcmp(f[1], fam == AF_INET ? "TCP4" : "TCP6") == 0);
	for (i = 0; i < 2; i++) {
		const struct want *w = i == 0 ? s : d;

		FUZZ_CHECK(inet_pton(fam, f[2 + i], a) == 1);
		FUZZ_CHECK(memcmp(a, w->addr, fam == AF_INET ? 4 : 16) == 0);
		FUZZ_CHECK(v1_port(f[4 + i], strlen(f[4 + i]), &port) == 0);
		FUZZ_CHECK(port == w->port);
	}
}

/* Parse a v2 header and compare it with what went in. */
static void
check_v2(const unsigned char *h, size_t n, const struct want *s,
    const struct want *d, int dgram)
{
	static const unsigned char sig[12] = {
		0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49,
		0x54, 0x0a
	};
	size_t	alen, blen;

	FUZZ_CHECK(n >= 16 && n <= ZP_PROXY_V2_MAX);
	FUZZ_CHECK(memcmp(h, sig, 12) == 0);
	blen = (size_t)h[14] << 8 | h[15];
	FUZZ_CHECK(blen == n - 16);
	if (s->family == 0 || s->family != d->family) {
		FUZZ_CHECK(h[12] == 0x20);	/* v2, LOCAL */
		FUZZ_CHECK(h[13] == 0x00);	/* UNSPEC */
		FUZZ_CHECK(blen == 0);
		return;
	}
	FUZZ_CHECK(h[12] == 0x21);		/* v2, PROXY */
	/* STREAM (TCP) or DGRAM (a UDP source's stream) */
	FUZZ_CHECK(h[13] == ((s->family == AF_INET ? 0x10 : 0x20) |
	    (dgram ? 0x02 : 0x01)));
	alen = s->family == AF_INET ? 4 : 16;
	FUZZ_CHECK(blen == 2 * alen + 4);
	FUZZ_CHECK(memcmp(h + 16, s->addr, alen) == 0);
	FUZZ_CHECK(memcmp(h + 16 + alen, d->addr, alen) == 0);
	FUZZ_CHECK(((unsigned)h[16 + 2 * alen] << 8 | h[17 + 2 * alen]) ==
	    s->port);
	FUZZ_CHECK(((unsigned)h[18 + 2 * alen] << 8 | h[19 + 2 * alen]) ==
	    d->port);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_storage	 sss, dss;
	const struct sockaddr	*src, *dst;
	struct want		 ws, wd;
	char			 full[ZP_PROXY_MAX + 64], *small;
	int			 version, dgram;
	size_t			 len;
	ssize_t			 n, m;

	version = in_byte(data, size, 0) % 4;
	dgram = (in_byte(data, size, 0) >> 2) & 1;
	len = in_byte(data, size, 1) % (ZP_PROXY_MAX + 9);
	src = make_side(in_byte(data, size, 2), data, size, 4, &sss, &ws);
	dst = make_side(in_byte(data, size, 3), data, size, 22, &dss, &wd);
	if (ws.family != 0 && wd.family != 0 && ws.family != wd.family) {
		want_map6(&ws);
		want_map6(&wd);
	}

	/* The header whole, in more room than the spec ever needs. */
	n = zp_proxy_header(version, dgram, src, dst, full, sizeof(full));
	if (version != 1 && version != 2) {
		FUZZ_CHECK(n == -1);
		return 0;
	}
	FUZZ_CHECK(n > 0);
	if (version == 1)
		check_v1(full, (size_t)n, &ws, &wd);
	else
		check_v2((const unsigned char *)full, (size_t)n, &ws, &wd,
		    dgram);

	/*
	 * In a buffer of the size the input asks for: the same bytes when
	 * they fit (v1 with its terminator), else -1.
	 */
	if ((small = malloc(len)) == NULL && len != 0)
		return 0;
	m = zp_proxy_header(version, dgram, src, dst, small, len);
	if ((version == 1 && len > (size_t)n) ||
	    (version == 2 && len >= (size_t)n)) {
		FUZZ_CHECK(m == n);
		FUZZ_CHECK(memcmp(small, full, (size_t)n) == 0);
	} else
		FUZZ_CHECK(m == -1);
	free(small);
	return 0;
}
