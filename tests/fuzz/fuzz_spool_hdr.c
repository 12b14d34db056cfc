/*
 * fuzz_spool_hdr.c - zp_spool_hdr_parse() over any bytes.
 *
 * The input is the start of a file found in --spool DIR: ours, another
 * run's, cut short by a crash, or anything someone put there. The reader
 * must keep its contract (spool.h), whatever the bytes:
 *
 *   - it returns -1, 0 (only below ZP_SPOOL_HDR_MAX bytes), or the
 *     length of a line that ends in '\n', within the buffer and within
 *     ZP_SPOOL_HDR_MAX;
 *   - -1 stays -1 with one more byte (a refused start is not taken back),
 *     and a header reads the same from exactly its own bytes, one byte
 *     fewer of them being pending (0);
 *   - a header read has a client address of AF_INET or AF_INET6 (a
 *     v4-mapped one is read as IPv4), a destination of those or none, a framing other than none; written
 *     again with zp_spool_hdr_format() it reads back to the same, its
 *     sent= of the fixed width the sender writes over in place.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <stdint.h>

#include "lib/framing.h"
#include "spool/spool.h"
#include "fuzz.h"

/* Parse n bytes from a heap buffer of exactly n bytes (ASan sees over-reads). */
static int
parse(const uint8_t *data, size_t n, struct zp_spool_hdr *h)
{
	uint8_t	*copy = malloc(n ? n : 1);
	int	 rc;

	FUZZ_CHECK(copy != NULL);
	if (n > 0)
		memcpy(copy, data, n);
	rc = zp_spool_hdr_parse(copy, n, h);
	free(copy);
	return rc;
}

static int
same_addr(const struct zp_addr *a, const struct zp_addr *b)
{
	return a->len == b->len && (a->len == 0 ||
	    memcmp(&a->ss, &b->ss, a->len) == 0);
}

static void
check_addr(const struct zp_addr *a, int may_be_none)
{
	if (a->len == 0) {
		FUZZ_CHECK(may_be_none);
		return;
	}
	FUZZ_CHECK((a->ss.ss_family == AF_INET &&
	    a->len == sizeof(struct sockaddr_in)) ||
	    (a->ss.ss_family == AF_INET6 &&
	    a->len == sizeof(struct sockaddr_in6)));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zp_spool_hdr	h, h2, h3;
	char			out[ZP_SPOOL_HDR_MAX + 1];
	int			rc, rc2, n;

	rc = parse(data, size, &h);
	FUZZ_CHECK(rc >= -1);
	if (rc == 0) {
		FUZZ_CHECK(size < ZP_SPOOL_HDR_MAX);
		return 0;
	}
	if (size > 0) {
		rc2 = parse(data, size - 1, &h2);
		/* A refusal of fewer bytes holds for more. */
		if (rc2 == -1)
			FUZZ_CHECK(rc == -1);
	}
	if (rc == -1)
		return 0;
	FUZZ_CHECK((size_t)rc <= size && rc <= ZP_SPOOL_HDR_MAX);
	FUZZ_CHECK(data[rc - 1] == '\n');
	FUZZ_CHECK(memchr(data, '\n', (size_t)rc - 1) == NULL);
	check_addr(&h.client, 0);
	check_addr(&h.dst, 1);
	FUZZ_CHECK(h.framing != ZP_FRAMING_NONE &&
	    zp_framing_name(h.framing)[0] != '?');
	/* Its own bytes, and one fewer. */
	FUZZ_CHECK(parse(data, (size_t)rc, &h2) == rc);
	FUZZ_CHECK(same_addr(&h.client, &h2.client) &&
	    same_addr(&h.dst, &h2.dst) && h.framing == h2.framing &&
	    h.dgram == h2.dgram && h.started_ms == h2.started_ms &&
	    h.sent == h2.sent);
	FUZZ_CHECK(parse(data, (size_t)rc - 1, &h2) == 0);
	/* Written again, read again. */
	n = zp_spool_hdr_format(&h, out, sizeof(out));
	FUZZ_CHECK(n > 0 && n <= ZP_SPOOL_HDR_MAX);
	FUZZ_CHECK(parse((const uint8_t *)out, (size_t)n, &h3) == n);
	FUZZ_CHECK(same_addr(&h.client, &h3.client) &&
	    same_addr(&h.dst, &h3.dst) && h.framing == h3.framing &&
	    h.dgram == h3.dgram && h.started_ms == h3.started_ms);
	/* The width the sender writes over in place, when it fits. */
	if (h.sent < 10000000000000000ULL)
		FUZZ_CHECK(h3.sent == h.sent && h3.sent_fixed);
	return 0;
}
