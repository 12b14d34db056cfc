/*
 * fuzz_framing.c - the framing state machine (framing.h) over any stream,
 * cut anyhow.
 *
 * The input: byte 0 picks the mode (mod 5), byte 1 the limit (0: the
 * default; 1-191 bytes; then 1-64 KiB by KiB), bytes 2-3 seed the cutting;
 * the rest is the stream. The framer must keep its contract whatever the
 * bytes and wherever they are cut:
 *
 *   - fed one byte at a time, each feed returns 1 exactly when the stream
 *     is then at a boundary: that run says where the boundaries are;
 *   - fed at once, the stream gives the same frames, error (why and
 *     offset), boundary state and last boundary, and feed returns the
 *     last boundary;
 *   - cut into random pieces, each either fed, fed by feed_header (which
 *     stops only just past an octet header's SP or at the byte of an
 *     error) or, inside an octet body, skipped in part or exactly to its
 *     end, each feed returns the last boundary within its piece and the
 *     whole ends alike (skipped bytes count as fed in the reference: a
 *     body is never looked at); zp_framer_next() on the bytes ahead names
 *     the first boundary among them and changes nothing;
 *   - LF and NUL with pieces skipped blind: every boundary the framer
 *     then reports is a real one, it counts no more frames than there
 *     are, and any error it finds is a real one, at or after the one the
 *     reference found;
 *   - counts stay sane: offset is the bytes passed, body left within the
 *     limit, an error has a non-empty reason at an offset already passed.
 */

#include <stdint.h>

#include "lib/framing.h"
#include "fuzz.h"

/* xorshift32: the cutting, from the input's seed. */
static uint32_t
rnd(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void
check_sane(const struct zp_framer *f, uint64_t passed)
{
	const char	*why;
	uint64_t	 at = 0;

	FUZZ_CHECK(zp_framer_offset(f) == passed);
	FUZZ_CHECK(zp_framer_frames(f) <= passed);
	FUZZ_CHECK(zp_framer_boundary(f) <= passed);
	FUZZ_CHECK(zp_framer_body_left(f) <= ZP_FRAME_MAX);
	if (zp_framer_kind(f) == ZP_FRAMING_OCTET)
		FUZZ_CHECK(zp_framer_body_left(f) <= zp_framer_max(f));
	if ((why = zp_framer_error(f, &at)) != NULL) {
		FUZZ_CHECK(why[0] != '\0');
		FUZZ_CHECK(at < passed);
		FUZZ_CHECK(!zp_framer_at_boundary(f));
	}
	if (zp_framer_at_boundary(f))
		FUZZ_CHECK(zp_framer_boundary(f) == passed);
}

/* Two framers agree on what a caller sees. */
static void
check_same(const struct zp_framer *a, const struct zp_framer *b)
{
	const char	*wa, *wb;
	uint64_t	 oa = 0, ob = 0;

	FUZZ_CHECK(zp_framer_frames(a) == zp_framer_frames(b));
	FUZZ_CHECK(zp_framer_offset(a) == zp_framer_offset(b));
	FUZZ_CHECK(zp_framer_boundary(a) == zp_framer_boundary(b));
	FUZZ_CHECK(zp_framer_at_boundary(a) == zp_framer_at_boundary(b));
	FUZZ_CHECK(zp_framer_body_left(a) == zp_framer_body_left(b));
	FUZZ_CHECK(zp_framer_kind(a) == zp_framer_kind(b));
	wa = zp_framer_error(a, &oa);
	wb = zp_framer_error(b, &ob);
	FUZZ_CHECK((wa == NULL) == (wb == NULL));
	if (wa != NULL)
		FUZZ_CHECK(strcmp(wa, wb) == 0 && oa == ob);
}

/* The offset in [from, to) just past the last boundary of at, or 0. */
static size_t
last_in(const uint8_t *at, size_t from, size_t to)
{
	size_t	i;

	for (i = to; i > from; i--)
		if (at[i - 1])
			return i - from;
	return 0;
}

/* The offset in [from, to) just past the first boundary of at, or 0. */
static size_t
first_in(const uint8_t *at, size_t from, size_t to)
{
	size_t	i;

	for (i = from; i < to; i++)
		if (at[i])
			return i + 1 - from;
	return 0;
}

/* Cut the stream into pieces, feeding, feeding headers, skipping bodies. */
static void
run_cut(enum zp_framing mode, uint64_t max, const uint8_t *p, size_t len,
    const uint8_t *at, uint32_t seed, unsigned cmax,
    const struct zp_framer *whole)
{
	struct zp_framer	 f, before;
	size_t			 i = 0, n, w, c;
	uint64_t		 left, eo;
	uint32_t		 r;

	FUZZ_CHECK(zp_framer_init(&f, mode, max) == 0);
	while (i < len) {
		r = rnd(&seed);
		n = 1 + r % cmax;
		if (n > len - i)
			n = len - i;
		r >>= 9;
		if ((r & 7) == 0) {
			w = len - i < 64 ? len - i : 64;
			before = f;
			FUZZ_CHECK(zp_framer_next(&f, p + i, w) ==
			    first_in(at, i, i + w));
			FUZZ_CHECK(memcmp(&f, &before, sizeof(f)) == 0);
		}
		r >>= 3;
		left = zp_framer_body_left(&f);
		if (left > 0 && (r & 3) != 0) {
			/* Spliced: part of the body, or to its end. */
			if ((r & 4) != 0 || left < n)
				n = (size_t)(left < len - i ? left : len - i);
			FUZZ_CHECK(zp_framer_skip(&f, n) == 0);
			FUZZ_CHECK(zp_framer_at_boundary(&f) == at[i + n - 1]);
			i += n;
		} else if ((r & 8) != 0) {
			c = zp_framer_feed_header(&f, p + i, n);
			FUZZ_CHECK(c >= 1 && c <= n);
			if (c < n) {
				if (zp_framer_error(&f, &eo) != NULL)
					FUZZ_CHECK(eo == i + c - 1);
				else
					FUZZ_CHECK(zp_framer_body_left(&f) >
					    0 && p[i + c - 1] == ' ');
			}
			FUZZ_CHECK(zp_framer_at_boundary(&f) == at[i + c - 1]);
			i += c;
		} else {
			FUZZ_CHECK(zp_framer_feed(&f, p + i, n) ==
			    last_in(at, i, i + n));
			i += n;
		}
		check_sane(&f, i);
	}
	FUZZ_CHECK(zp_framer_blind(&f) == 0);
	check_same(&f, whole);
}

/* LF / NUL with some pieces skipped blind: what it says is still true. */
static void
run_blind(enum zp_framing mode, uint64_t max, const uint8_t *p, size_t len,
    const uint8_t *at, uint32_t seed, unsigned cmax,
    const struct zp_framer *whole)
{
	struct zp_framer	 f;
	const char		*why;
	size_t			 i = 0, n;
	uint64_t		 eo = 0, weo = 0, skipped = 0;
	uint32_t		 r;
	int			 werr;

	werr = zp_framer_error(whole, &weo) != NULL;
	FUZZ_CHECK(zp_framer_init(&f, mode, max) == 0);
	while (i < len) {
		r = rnd(&seed);
		n = 1 + r % cmax;
		if (n > len - i)
			n = len - i;
		/* AUTO must see its first byte. */
		if (((r >> 9) & 3) == 0 && (i > 0 || mode != ZP_FRAMING_AUTO)) {
			FUZZ_CHECK(zp_framer_skip(&f, n) == 0);
			skipped += n;
		} else
			zp_framer_feed(&f, p + i, n);
		i += n;
		check_sane(&f, i);
		if (zp_framer_at_boundary(&f))
			FUZZ_CHECK(at[i - 1] || (werr && weo < i));
	}
	/* After an error a skip only counts bytes. */
	FUZZ_CHECK(zp_framer_blind(&f) <= skipped);
	if (zp_framer_error(&f, NULL) == NULL)
		FUZZ_CHECK(zp_framer_blind(&f) == skipped);
	/* Past the reference's error it may go on counting. */
	if (!werr)
		FUZZ_CHECK(zp_framer_frames(&f) <= zp_framer_frames(whole));
	if ((why = zp_framer_error(&f, &eo)) != NULL)
		FUZZ_CHECK(werr && weo <= eo);
	if (skipped == 0)
		check_same(&f, whole);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zp_framer	 one, whole;
	enum zp_framing		 mode;
	const uint8_t		*p;
	uint8_t			*at;
	uint64_t		 max;
	uint32_t		 seed;
	unsigned		 cmax;
	size_t			 len, i, r;

	if (size < 4)
		return 0;
	mode = (enum zp_framing)(data[0] % 5);
	max = data[1] < 0xc0 ? data[1] : (uint64_t)(data[1] - 0xbf) * 1024;
	seed = (uint32_t)data[2] << 8 | data[3];
	cmax = 1u << (data[3] % 9);
	seed = seed * 2654435761u | 1;
	p = data + 4;
	len = size - 4;
	if ((at = malloc(len + 1)) == NULL)
		abort();

	FUZZ_CHECK(zp_framer_init(&one, mode, max) == 0);
	for (i = 0; i < len; i++) {
		r = zp_framer_feed(&one, p + i, 1);
		at[i] = (uint8_t)zp_framer_at_boundary(&one);
		FUZZ_CHECK(r == at[i]);
		check_sane(&one, i + 1);
	}
	FUZZ_CHECK(zp_framer_init(&whole, mode, max) == 0);
	FUZZ_CHECK(zp_framer_feed(&whole, p, len) == last_in(at, 0, len));
	check_sane(&whole, len);
	check_same(&whole, &one);

	run_cut(mode, max, p, len, at, seed, cmax, &whole);
	if (zp_framer_kind(&whole) == ZP_FRAMING_LF ||
	    zp_framer_kind(&whole) == ZP_FRAMING_NUL)
		run_blind(mode, max, p, len, at, seed ^ 0x9e3779b9u, cmax,
		    &whole);
	free(at);
	return 0;
}
