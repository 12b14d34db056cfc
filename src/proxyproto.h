/*
 * proxyproto.h - the PROXY protocol header (HAProxy's proxy-protocol.txt,
 * versions 1 and 2) that tells an upstream who the real client is.
 */
#ifndef ZP_PROXYPROTO_H
#define ZP_PROXYPROTO_H

#include <sys/socket.h>
#include <sys/types.h>

#define ZP_PROXY_V1_MAX	108	/* the spec's bound for a v1 line */
#define ZP_PROXY_V2_MAX	(16 + 36)	/* header + TCP over IPv6 block */
#define ZP_PROXY_MAX	ZP_PROXY_V1_MAX

/*
 * Write the header for a TCP connection from src to dst (the address the
 * client connected to) into buf. A v4-mapped IPv6 pair is sent as IPv4.
 * Addresses of different or unknown families give v1's "UNKNOWN" line or
 * v2's LOCAL command, as the spec says. Returns the header length, or -1
 * when version is not 1 or 2 or buf is too small.
 */
ssize_t	zp_proxy_header(int version, const struct sockaddr *src,
	    const struct sockaddr *dst, char *buf, size_t len);

#endif
