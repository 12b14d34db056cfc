/*
 * fuzz_proxy_parse.c - zp_proxy_parse() over any bytes.
 *
 * The input is the buffer as a client would send it. The reader must
 * keep its contract (proxyproto.h), whatever the bytes:
 *
 *   - it returns -1 (with a reason), 0, or a length within the buffer
 *     and within ZP_PROXY_ACCEPT_MAX (107 bytes for v1);
 *   - -1 stays -1 with one more byte: a refused prefix is never taken
 *     back; 0 means the buffer is shorter than ZP_PROXY_ACCEPT_MAX, and
 *     a shorter prefix is pending too;
 *   - a header read from a buffer reads the same from exactly its own
 *     bytes, and one byte fewer of them is pending;
 *   - a header with addresses has two of one family, AF_INET or
 *     AF_INET6, and encoding them again with zp_proxy_header() reads
 *     back to the same addresses and ports;
 *   - a v2 header refused only for its CRC32c is taken once the checksum
 *     is put right by a bit-by-bit CRC32c written here: the table-driven
 *     one in the reader and this one agree.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>

#include "lib/proxyproto.h"
#include "fuzz.h"

/* CRC32c bit by bit (reflected, polynomial 0x82F63B78). */
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

/* Parse n bytes from a heap buffer of exactly n bytes. */
static ssize_t
parse(const uint8_t *data, size_t n, struct zp_proxy_info *info,
    const char **why)
{
	uint8_t	*copy;
	ssize_t	 r;

	if ((copy = malloc(n == 0 ? 1 : n)) == NULL)
		abort();
	memcpy(copy, data, n);
	*why = NULL;
	r = zp_proxy_parse(copy, n, info, why);
	free(copy);
	FUZZ_CHECK(r >= -1 && r <= (ssize_t)n);
	if (r == -1)
		FUZZ_CHECK(*why != NULL && (*why)[0] != '\0');
	return r;
}

/*
 * An address as the encoder reduces it: family, 16 bytes (IPv4 in the
 * first 4) and port; a v4-mapped IPv6 address becomes IPv4.
 */
struct norm {
	int		family;
	unsigned char	addr[16];
	uint16_t	port;
};

static void
normalise(const struct sockaddr_storage *ss, socklen_t len, struct norm *n)
{
	const struct sockaddr_in	*sin = (const void *)ss;
	const struct sockaddr_in6	*sin6 = (const void *)ss;

	memset(n, 0, sizeof(*n));
	if (ss->ss_family == AF_INET) {
		FUZZ_CHECK(len == sizeof(*sin));
		n->family = AF_INET;
		memcpy(n->addr, &sin->sin_addr, 4);
		n->port = sin->sin_port;
		return;
	}
	FUZZ_CHECK(ss->ss_family == AF_INET6 && len == sizeof(*sin6));
	n->port = sin6->sin6_port;
	if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
		n->family = AF_INET;
		memcpy(n->addr, &sin6->sin6_addr.s6_addr[12], 4);
	} else {
		n->family = AF_INET6;
		memcpy(n->addr, &sin6->sin6_addr, 16);
	}
}

/* The addresses of info, encoded again as version, read back alike. */
static void
check_reencode(const struct zp_proxy_info *info, int version)
{
	struct zp_proxy_info	 back;
	struct norm		 a, b;
	char			 hdr[ZP_PROXY_MAX];
	const char		*why;
	ssize_t			 n;

	n = zp_proxy_header(version, 0, (const struct sockaddr *)&info->src,
	    (const struct sockaddr *)&info->dst, hdr, sizeof(hdr));
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(parse((const uint8_t *)hdr, (size_t)n, &back, &why) == n);
	FUZZ_CHECK(back.version == version);
	/* Mapped on one side only: TCP6, the client kept all the same. */
	FUZZ_CHECK(!back.local);
	normalise(&info->src, info->srclen, &a);
	normalise(&back.src, back.srclen, &b);
	FUZZ_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	normalise(&info->dst, info->dstlen, &a);
	normalise(&back.dst, back.dstlen, &b);
	FUZZ_CHECK(memcmp(&a, &b, sizeof(a)) == 0);
}

/*
 * A v2 header refused for its CRC32c: find the CRC32C TLV as the spec
 * lays it out, put the right checksum in, and the header must be taken.
 */
static void
check_crc_fixed(const uint8_t *data, size_t size)
{
	struct zp_proxy_info	 info;
	const char		*why;
	uint8_t			*h;
	size_t			 total, off, n;
	unsigned		 fam;
	uint32_t		 crc;

	FUZZ_CHECK(size >= 16);
	total = 16 + ((size_t)data[14] << 8 | data[15]);
	FUZZ_CHECK(total <= size);
	fam = data[13] >> 4;
	off = 16 + (fam == 1 ? 12 : fam == 2 ? 36 : fam == 3 ? 216 : 0);
	for (;;) {
		FUZZ_CHECK(off + 3 <= total);
		n = (size_t)data[off + 1] << 8 | data[off + 2];
		if (data[off] == 0x03)
			break;
		off += 3 + n;
	}
	FUZZ_CHECK(n == 4);
	if ((h = malloc(total)) == NULL)
		abort();
	memcpy(h, data, total);
	memset(h + off + 3, 0, 4);
	crc = ref_crc32c(h, total);
	h[off + 3] = (uint8_t)(crc >> 24);
	h[off + 4] = (uint8_t)(crc >> 16);
	h[off + 5] = (uint8_t)(crc >> 8);
	h[off + 6] = (uint8_t)crc;
	FUZZ_CHECK(parse(h, total, &info, &why) == (ssize_t)total);
	FUZZ_CHECK(info.crc32c);
	free(h);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct zp_proxy_info zero;
	struct zp_proxy_info	 info, again;
	const char		*why, *why2;
	uint8_t			*more;
	ssize_t			 r, r2;

	r = parse(data, size, &info, &why);
	if (r == -1) {
		FUZZ_CHECK(memcmp(&info, &zero, sizeof(info)) == 0);
		/* Refused stays refused, whatever follows. */
		if ((more = malloc(size + 1)) == NULL)
			abort();
		memcpy(more, data, size);
		more[size] = size > 0 ? data[size - 1] : 0;
		FUZZ_CHECK(parse(more, size + 1, &again, &why2) == -1);
		free(more);
		if (strcmp(why, "v2 CRC32c mismatch") == 0)
			check_crc_fixed(data, size);
		return 0;
	}
	if (r == 0) {
		FUZZ_CHECK(size < ZP_PROXY_ACCEPT_MAX);
		FUZZ_CHECK(memcmp(&info, &zero, sizeof(info)) == 0);
		if (size > 0)
			FUZZ_CHECK(parse(data, size / 2, &again, &why2) == 0);
		return 0;
	}

	FUZZ_CHECK(r <= ZP_PROXY_ACCEPT_MAX);
	FUZZ_CHECK(info.version == 1 || info.version == 2);
	if (info.version == 1)
		FUZZ_CHECK(r <= 107 && !info.crc32c && info.ntlvs == 0);
	FUZZ_CHECK(memchr(info.authority, '\0', sizeof(info.authority)) !=
	    NULL);
	FUZZ_CHECK(memchr(info.aws_vpce, '\0', sizeof(info.aws_vpce)) !=
	    NULL);
	/* Its own bytes, exactly, read the same; one fewer is pending. */
	FUZZ_CHECK(parse(data, (size_t)r, &again, &why2) == r);
	FUZZ_CHECK(memcmp(&info, &again, sizeof(info)) == 0);
	r2 = parse(data, (size_t)r - 1, &again, &why2);
	FUZZ_CHECK(r2 == 0);

	if (info.local) {
		FUZZ_CHECK(info.srclen == 0 && info.dstlen == 0);
		FUZZ_CHECK(info.src.ss_family == AF_UNSPEC);
		return 0;
	}
	FUZZ_CHECK(info.src.ss_family == AF_INET ||
	    info.src.ss_family == AF_INET6);
	FUZZ_CHECK(info.dst.ss_family == info.src.ss_family);
	check_reencode(&info, 1);
	check_reencode(&info, 2);
	return 0;
}
