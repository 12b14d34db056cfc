/*
 * proxyproto.c - encode PROXY protocol v1 and v2 headers.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "proxyproto.h"

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
pp_v2(const struct pp_addr *s, const struct pp_addr *d, char *buf,
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
	p[13] = s->family == AF_INET ? 0x11 : 0x21;	/* TCP over v4 / v6 */
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
zp_proxy_header(int version, const struct sockaddr *src,
    const struct sockaddr *dst, char *buf, size_t len)
{
	struct pp_addr	s, d;

	pp_addr_get(src, &s);
	pp_addr_get(dst, &d);
	if (version == 1)
		return pp_v1(&s, &d, buf, len);
	if (version == 2)
		return pp_v2(&s, &d, buf, len);
	return -1;
}
