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
 * Write the header for a connection from src to dst (the address the
 * client connected to) into buf: over TCP, or (dgram) for a stream of
 * UDP datagrams, which v2 says (DGRAM) and v1 cannot (TCP4, TCP6). A v4-mapped IPv6 address is sent as
 * IPv4 when the other one is IPv4 too; an IPv4 address (or a v4-mapped
 * one) paired with an IPv6 one is sent v4-mapped, TCP6 / TCP over IPv6,
 * so that the client is named whatever the families. Only an unknown
 * family (none, AF_UNIX) gives v1's "UNKNOWN" line or v2's LOCAL command,
 * as the spec says. Returns the header length, or -1
 * when version is not 1 or 2 or buf is too small.
 */
ssize_t	zp_proxy_header(int version, int dgram, const struct sockaddr *src,
	    const struct sockaddr *dst, char *buf, size_t len);

/* The longest header zp_proxy_parse() accepts, v2 TLVs included. */
#define ZP_PROXY_ACCEPT_MAX	2048

/* What a received header says about the connection it starts. */
struct zp_proxy_info {
	int		version;	/* 1 or 2 */
	/*
	 * Use the connection's own addresses: v2 LOCAL, v1 UNKNOWN, v2
	 * AF_UNSPEC / AF_UNIX / non-STREAM.
	 */
	int		local;
	/* Valid when !local: AF_INET or AF_INET6 sockaddrs, ports set. */
	struct sockaddr_storage src, dst;
	socklen_t	srclen, dstlen;
	/* A CRC32c TLV was present (and matched: else the parse fails). */
	int		crc32c;
	/* PP2_TYPE_AUTHORITY (0x02), NUL-terminated; "" if absent. */
	char		authority[256];
	/* AWS TLV 0xEA subtype 0x01 (VPC endpoint id); "" if absent. */
	char		aws_vpce[256];
	unsigned	ntlvs;	/* TLVs seen (SSL sub-TLVs not counted) */
};

/*
 * Read a PROXY header (v1 or v2, told apart by the first bytes) at the
 * start of buf. Returns the header's length (> 0) with *info filled when
 * buf holds a whole valid header (bytes after it are the client's data
 * and are not looked at); 0 when buf is a valid but incomplete prefix --
 * so every byte of buf belongs to the header and the caller may consume
 * them all and wait for more; -1 when buf cannot start a valid header,
 * with *why set to a short static reason ("not a PROXY header", "v1 line
 * too long", "bad v1 address", "v2 bad version", "v2 header too long",
 * "v2 CRC32c mismatch", "v2 bad TLV", ...). Never reads past len. An
 * empty buffer gives 0; a prefix that already deviates gives -1 (a
 * first byte that is neither 'P' nor CR at once), and stays -1 whatever
 * follows.
 *
 * Strict, as the spec asks of a receiver: v1 has single spaces, addresses
 * of the family named (inet_pton), ports 0-65535 in decimal without a sign
 * or a leading zero, and ends in CRLF within 107 bytes; for UNKNOWN the
 * rest of the line is ignored. v2 has version 2, the LOCAL or PROXY
 * command and a known family and protocol. Its address block is sized by
 * the family alone (INET 12, INET6 36, UNIX 216, UNSPEC 0 bytes), for
 * LOCAL too, and the TLVs after it must tile the rest exactly. An
 * AUTHORITY or AWS VPC endpoint TLV longer than 255 bytes, or holding a
 * NUL, is refused rather than truncated; so is a second CRC32c,
 * AUTHORITY or VPC endpoint TLV, a UNIQUE_ID over 128 bytes and an SSL
 * TLV whose sub-TLVs do not fit it. DGRAM is reported as local: zproxy
 * relays TCP, and a UDP peer's address is no TCP client's.
 * *info is zeroed on every call; why may be NULL.
 */
ssize_t	zp_proxy_parse(const void *buf, size_t len, struct zp_proxy_info *info,
	    const char **why);

#endif
