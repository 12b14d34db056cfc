/*
 * test_framing.c - unit tests for framing.c: each mode's frames and
 * boundaries at exact offsets; every way of cutting a stream into two or
 * three feeds gives what one feed gives, boundary by boundary; octet
 * headers byte by byte, bodies with '\n' and spaces, skipped in pieces;
 * AUTO picking each mode; each limit exactly met and exceeded by one;
 * each malformed octet header refused at the byte that shows it; the
 * error state terminal; LF blind stretches; zp_framer_next() agreeing
 * with feed and leaving the framer alone.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/framing.h"

#define MAXLEN	512

/* A framer, or the test fails. */
static void
init(struct zp_framer *f, enum zp_framing mode, uint64_t max)
{
	assert_int_equal(zp_framer_init(f, mode, max), 0);
}

/* Feed a C string. */
static size_t
feeds(struct zp_framer *f, const char *s)
{
	return zp_framer_feed(f, s, strlen(s));
}

/*
 * What feeding len bytes one at a time says: at[i] is whether the stream
 * is at a boundary after byte i. Returns the framer as it ends.
 */
static void
bytewise(enum zp_framing mode, uint64_t max, const unsigned char *buf,
    size_t len, unsigned char *at, struct zp_framer *f)
{
	size_t	i, r;

	init(f, mode, max);
	for (i = 0; i < len; i++) {
		r = zp_framer_feed(f, buf + i, 1);
		at[i] = (unsigned char)zp_framer_at_boundary(f);
		assert_int_equal(r, at[i] ? 1 : 0);
	}
}

/* The offset in [from, to) just past the last boundary of at, or 0. */
static size_t
last_in(const unsigned char *at, size_t from, size_t to)
{
	size_t	i;

	for (i = to; i > from; i--)
		if (at[i - 1])
			return i - from;
	return 0;
}

/* Two framers agree on everything a caller can see. */
static void
same(const struct zp_framer *a, const struct zp_framer *b)
{
	const char	*wa, *wb;
	uint64_t	 oa = 0, ob = 0;

	assert_int_equal(zp_framer_frames(a), zp_framer_frames(b));
	assert_int_equal(zp_framer_offset(a), zp_framer_offset(b));
	assert_int_equal(zp_framer_boundary(a), zp_framer_boundary(b));
	assert_int_equal(zp_framer_at_boundary(a), zp_framer_at_boundary(b));
	assert_int_equal(zp_framer_body_left(a), zp_framer_body_left(b));
	assert_int_equal(zp_framer_kind(a), zp_framer_kind(b));
	wa = zp_framer_error(a, &oa);
	wb = zp_framer_error(b, &ob);
	assert_true((wa == NULL) == (wb == NULL));
	if (wa != NULL) {
		assert_string_equal(wa, wb);
		assert_int_equal(oa, ob);
	}
}

/*
 * The stream s cut at every i <= j into three feeds: each feed returns
 * the last boundary the byte-by-byte run saw within it, and the framer
 * ends as one feed of everything ends. Covers every pair of feeds too
 * (i == j, or i == 0).
 */
static void
check_splits(enum zp_framing mode, uint64_t max, const void *s, size_t len)
{
	const unsigned char	*buf = s;
	unsigned char		 at[MAXLEN];
	struct zp_framer	 whole, one, f;
	size_t			 i, j;

	assert_true(len <= MAXLEN);
	bytewise(mode, max, buf, len, at, &one);
	init(&whole, mode, max);
	assert_int_equal(zp_framer_feed(&whole, buf, len), last_in(at, 0,
	    len));
	same(&whole, &one);
	for (i = 0; i <= len; i++)
		for (j = i; j <= len; j++) {
			init(&f, mode, max);
			assert_int_equal(zp_framer_feed(&f, buf, i),
			    last_in(at, 0, i));
			assert_int_equal(zp_framer_feed(&f, buf + i, j - i),
			    last_in(at, i, j));
			assert_int_equal(zp_framer_feed(&f, buf + j, len - j),
			    last_in(at, j, len));
			same(&f, &whole);
		}
}

/* The framer is in error for why at offset, and stays there. */
static void
check_error(struct zp_framer *f, const char *why, uint64_t offset)
{
	struct zp_framer	 before;
	const char		*w;
	uint64_t		 at = ~0ULL;

	w = zp_framer_error(f, &at);
	assert_non_null(w);
	assert_string_equal(w, why);
	assert_int_equal(at, offset);
	assert_false(zp_framer_at_boundary(f));
	before = *f;
	assert_int_equal(feeds(f, "\n1 x\n\0"), 0);
	assert_int_equal(zp_framer_skip(f, 10), 0);
	assert_int_equal(zp_framer_feed_header(f, "1 ", 2), 2);
	assert_int_equal(zp_framer_next(f, "\n\n", 2), 0);
	assert_int_equal(zp_framer_frames(f), zp_framer_frames(&before));
	assert_int_equal(zp_framer_offset(f), zp_framer_offset(&before) + 17);
	assert_false(zp_framer_at_boundary(f));
	w = zp_framer_error(f, &at);
	assert_string_equal(w, why);
	assert_int_equal(at, offset);
}

/* ---- init ---------------------------------------------------------- */

/* Unknown modes and limits over the cap are refused; 0 is the default. */
static void
test_init(void **state)
{
	struct zp_framer	f;

	(void)state;
	assert_int_equal(zp_framer_init(&f, (enum zp_framing)99, 0), -1);
	assert_int_equal(zp_framer_init(&f, ZP_FRAMING_LF, ZP_FRAME_MAX + 1),
	    -1);
	init(&f, ZP_FRAMING_LF, ZP_FRAME_MAX);
	assert_int_equal(zp_framer_max(&f), ZP_FRAME_MAX);
	init(&f, ZP_FRAMING_LF, 0);
	assert_int_equal(zp_framer_max(&f), 64 * 1024);
	init(&f, ZP_FRAMING_NUL, 0);
	assert_int_equal(zp_framer_max(&f), 64 * 1024);
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(zp_framer_max(&f), 16 * 1024 * 1024);
	init(&f, ZP_FRAMING_AUTO, 0);
	assert_int_equal(zp_framer_kind(&f), ZP_FRAMING_AUTO);
	assert_int_equal(zp_framer_max(&f), 0);
	/* The start of the stream is a boundary, in every mode. */
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_frames(&f), 0);
	assert_int_equal(zp_framer_offset(&f), 0);
	assert_null(zp_framer_error(&f, NULL));
	assert_string_equal(zp_framing_name(ZP_FRAMING_OCTET), "octet");
	assert_string_equal(zp_framing_name(ZP_FRAMING_NUL), "nul");
	assert_string_equal(zp_framing_name((enum zp_framing)99), "?");
}

/* NONE counts bytes and nothing else. */
static void
test_none(void **state)
{
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_NONE, 0);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(feeds(&f, "5 hello\n\n"), 0);
	assert_int_equal(zp_framer_feed_header(&f, "5 x", 3), 3);
	assert_int_equal(zp_framer_skip(&f, 100), 0);
	assert_int_equal(zp_framer_next(&f, "\n", 1), 0);
	assert_int_equal(zp_framer_frames(&f), 0);
	assert_int_equal(zp_framer_offset(&f), 112);
	assert_false(zp_framer_at_boundary(&f));
	assert_null(zp_framer_error(&f, NULL));
}

/* ---- LF and NUL ---------------------------------------------------- */

/*
 * Every '\n' ends a frame, empty lines too; feed returns the last one
 * within the buffer; a tail without '\n' is an open frame.
 */
static void
test_lf(void **state)
{
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_LF, 0);
	assert_int_equal(feeds(&f, "a\nbb\n\nccc"), 6);
	assert_int_equal(zp_framer_frames(&f), 3);
	assert_int_equal(zp_framer_boundary(&f), 6);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(feeds(&f, "c"), 0);
	assert_int_equal(feeds(&f, "\n"), 1);
	assert_int_equal(zp_framer_frames(&f), 4);
	assert_int_equal(zp_framer_boundary(&f), 11);
	assert_true(zp_framer_at_boundary(&f));
	/* Lone newlines: a frame each. */
	assert_int_equal(feeds(&f, "\n\n\n"), 3);
	assert_int_equal(zp_framer_frames(&f), 7);
	/* A '\0' or a digit is nothing special. */
	assert_int_equal(zp_framer_feed(&f, "5 \0x\n", 5), 5);
	assert_int_equal(zp_framer_frames(&f), 8);
	assert_int_equal(zp_framer_body_left(&f), 0);
	assert_null(zp_framer_error(&f, NULL));
}

/* NUL: '\0' ends a frame, '\n' is a body byte (GELF). */
static void
test_nul(void **state)
{
	static const char	s[] = "{\"a\":\n1}\0\0{\"b\":2}\n";
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_NUL, 0);
	assert_int_equal(zp_framer_feed(&f, s, sizeof(s) - 1), 10);
	assert_int_equal(zp_framer_frames(&f), 2);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_feed(&f, "", 1), 1);
	assert_int_equal(zp_framer_frames(&f), 3);
	assert_true(zp_framer_at_boundary(&f));
	check_splits(ZP_FRAMING_NUL, 0, s, sizeof(s));
}

/* Exactly max_frame bytes and a '\n' pass; one more byte is an error. */
static void
test_lf_limit(void **state)
{
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_LF, 10);
	assert_int_equal(feeds(&f, "0123456789\n"), 11);
	assert_int_equal(feeds(&f, "0123456789"), 0);
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(feeds(&f, "\n"), 1);
	assert_int_equal(zp_framer_frames(&f), 2);
	/* The eleventh byte without '\n', at offset 22 + 10. */
	assert_int_equal(feeds(&f, "01234"), 0);
	assert_int_equal(feeds(&f, "56789A\n"), 0);
	check_error(&f, "frame over max-frame", 32);
	assert_int_equal(zp_framer_frames(&f), 2);
	/* Boundaries before the error in the same buffer count. */
	init(&f, ZP_FRAMING_LF, 3);
	assert_int_equal(feeds(&f, "ab\nabc\nabcd\n"), 7);
	check_error(&f, "frame over max-frame", 10);
	assert_int_equal(zp_framer_frames(&f), 2);
	check_splits(ZP_FRAMING_LF, 3, "ab\nabc\nabcd\n", 12);
	/* NUL the same. */
	init(&f, ZP_FRAMING_NUL, 2);
	assert_int_equal(zp_framer_feed(&f, "ab\0abc", 6), 3);
	check_error(&f, "frame over max-frame", 5);
	/* The limit at 1: a message of one byte. */
	init(&f, ZP_FRAMING_LF, 1);
	assert_int_equal(feeds(&f, "a\n\nb\nbc"), 5);
	check_error(&f, "frame over max-frame", 6);
}

/*
 * Blind bytes lose the position until the next '\n'; frames in them are
 * not counted, and the limit counts from their end.
 */
static void
test_lf_blind(void **state)
{
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_LF, 4);
	assert_int_equal(feeds(&f, "abc\n"), 4);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_skip(&f, 100), 0);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_blind(&f), 100);
	assert_int_equal(zp_framer_offset(&f), 104);
	assert_int_equal(feeds(&f, "xyz"), 0);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_next(&f, "q\nr", 3), 2);
	assert_int_equal(feeds(&f, "q\nr"), 2);
	assert_int_equal(zp_framer_frames(&f), 2);
	assert_int_equal(zp_framer_boundary(&f), 109);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(feeds(&f, "\n"), 1);
	assert_true(zp_framer_at_boundary(&f));
	/* Mid-frame: 3 bytes, blind, 4 more pass; the fifth does not. */
	assert_int_equal(feeds(&f, "abc"), 0);
	assert_int_equal(zp_framer_skip(&f, 7), 0);
	assert_int_equal(zp_framer_blind(&f), 107);
	assert_int_equal(feeds(&f, "abcd"), 0);
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(feeds(&f, "e"), 0);
	check_error(&f, "frame over max-frame", 111 + 3 + 7 + 4);
	/* A blind stretch right after a '\n', then a '\n' at once. */
	init(&f, ZP_FRAMING_LF, 0);
	assert_int_equal(zp_framer_skip(&f, 1), 0);
	assert_int_equal(feeds(&f, "\n"), 1);
	assert_int_equal(zp_framer_frames(&f), 1);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_skip(&f, 0), 0);
	assert_true(zp_framer_at_boundary(&f));
}

/* ---- OCTET --------------------------------------------------------- */

/* Bodies with '\n', spaces and digits; boundaries exactly after them. */
static void
test_octet(void **state)
{
	static const char	s[] = "5 hello3 a\nb11 hello world1 9";
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "5 hel"), 0);
	assert_int_equal(zp_framer_body_left(&f), 2);
	assert_int_equal(feeds(&f, "lo3 a\nb11 hello w"), 7);
	assert_int_equal(zp_framer_frames(&f), 2);
	assert_int_equal(zp_framer_boundary(&f), 12);
	assert_int_equal(zp_framer_body_left(&f), 4);
	assert_int_equal(feeds(&f, "orld1 9"), 7);
	assert_int_equal(zp_framer_frames(&f), 4);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_boundary(&f), sizeof(s) - 1);
	check_splits(ZP_FRAMING_OCTET, 0, s, sizeof(s) - 1);
	check_splits(ZP_FRAMING_AUTO, 0, s, sizeof(s) - 1);
}

/* A header byte by byte: nothing happens until its SP. */
static void
test_octet_header_bytewise(void **state)
{
	static const char	hdr[] = "1234 ";
	struct zp_framer	f;
	size_t			i;
	char			body[1234];

	(void)state;
	init(&f, ZP_FRAMING_OCTET, 0);
	for (i = 0; i < 4; i++) {
		assert_int_equal(zp_framer_feed(&f, hdr + i, 1), 0);
		assert_false(zp_framer_at_boundary(&f));
		assert_int_equal(zp_framer_body_left(&f), 0);
	}
	assert_int_equal(zp_framer_feed(&f, hdr + 4, 1), 0);
	assert_int_equal(zp_framer_body_left(&f), 1234);
	memset(body, ' ', sizeof(body));
	assert_int_equal(zp_framer_next(&f, body, 1233), 0);
	assert_int_equal(zp_framer_next(&f, body, 1234), 1234);
	assert_int_equal(zp_framer_feed(&f, body, 1233), 0);
	assert_int_equal(zp_framer_feed(&f, body, 1), 1);
	assert_int_equal(zp_framer_frames(&f), 1);
	assert_true(zp_framer_at_boundary(&f));
}

/* LEN == max_frame passes; max_frame + 1 fails at the digit. */
static void
test_octet_limit(void **state)
{
	struct zp_framer	f;
	char			body[101];

	(void)state;
	memset(body, 'x', sizeof(body));
	init(&f, ZP_FRAMING_OCTET, 100);
	assert_int_equal(feeds(&f, "100 "), 0);
	assert_int_equal(zp_framer_feed(&f, body, 100), 100);
	assert_int_equal(feeds(&f, "10"), 0);
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(feeds(&f, "1 "), 0);
	check_error(&f, "octet length over max-frame", 106);
	/* A digit too many. */
	init(&f, ZP_FRAMING_OCTET, 100);
	assert_int_equal(feeds(&f, "1000 "), 0);
	check_error(&f, "octet length over max-frame", 3);
	/* The default: ZP_FRAME_MAX itself, spliced blind. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "16777216 "), 0);
	assert_int_equal(zp_framer_body_left(&f), ZP_FRAME_MAX);
	assert_int_equal(zp_framer_skip(&f, ZP_FRAME_MAX), 0);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(feeds(&f, "16777217 "), 0);
	check_error(&f, "octet length over max-frame", 9 + ZP_FRAME_MAX + 7);
	/* Ten digits never get to the tenth. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "1234567890 "), 0);
	check_error(&f, "octet length over max-frame", 8);
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "0000000001 "), 0);
	check_error(&f, "octet length starts with 0", 0);
}

/* Each malformed header, refused at the byte that shows it. */
static void
test_octet_malformed(void **state)
{
	static const struct {
		const char	*s;
		uint64_t	 at;
		const char	*why;
	} bad[] = {
		{ "0 ", 0, "octet length starts with 0" },
		{ "012 abcdefghijkl", 0, "octet length starts with 0" },
		{ "x", 0, "octet frame does not start with a length" },
		{ " 5 hello", 0, "octet frame does not start with a length" },
		{ "-5 hello", 0, "octet frame does not start with a length" },
		{ "+5 hello", 0, "octet frame does not start with a length" },
		{ "\n", 0, "octet frame does not start with a length" },
		{ "5x", 1, "octet length not followed by a space" },
		{ "5\nhello", 1, "octet length not followed by a space" },
		{ "3 abc4\n", 6, "octet length not followed by a space" },
		{ "3 abc0 ", 5, "octet length starts with 0" },
		{ "3 abc 3 abc", 5, "octet frame does not start with a "
		    "length" },
	};
	struct zp_framer	f;
	size_t			i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		init(&f, ZP_FRAMING_OCTET, 0);
		feeds(&f, bad[i].s);
		check_error(&f, bad[i].why, bad[i].at);
		check_splits(ZP_FRAMING_OCTET, 0, bad[i].s, strlen(bad[i].s));
	}
	/* "12  hello": the body is " hello" and 6 more: no error in it. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "12  hello"), 0);
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(zp_framer_body_left(&f), 6);
	/* Frames before the bad header stay counted. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "3 abc3 abc3x"), 10);
	assert_int_equal(zp_framer_frames(&f), 2);
	check_error(&f, "octet length not followed by a space", 11);
}

/*
 * The splice path: feed_header takes only the header, skip takes the
 * body in pieces, and the next header follows.
 */
static void
test_octet_skip(void **state)
{
	struct zp_framer	f;

	(void)state;
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(zp_framer_feed_header(&f, "5 hello", 7), 2);
	assert_int_equal(zp_framer_body_left(&f), 5);
	assert_int_equal(zp_framer_skip(&f, 2), 0);
	assert_int_equal(zp_framer_body_left(&f), 3);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_skip(&f, 3), 0);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_frames(&f), 1);
	assert_int_equal(zp_framer_boundary(&f), 7);
	/* A header in two peeks. */
	assert_int_equal(zp_framer_feed_header(&f, "1", 1), 1);
	assert_int_equal(zp_framer_feed_header(&f, "1 hello world", 13), 2);
	assert_int_equal(zp_framer_body_left(&f), 11);
	/* In a body feed_header is feed: it takes all. */
	assert_int_equal(zp_framer_feed_header(&f, "hello", 5), 5);
	assert_int_equal(zp_framer_skip(&f, 4), 0);
	assert_int_equal(zp_framer_feed_header(&f, "ld2 ab", 6), 6);
	assert_int_equal(zp_framer_frames(&f), 3);
	assert_int_equal(zp_framer_blind(&f), 0);
	assert_int_equal(zp_framer_offset(&f), 7 + 3 + 11 + 4);
	/* A bad header: taken up to the byte that shows it. */
	assert_int_equal(zp_framer_feed_header(&f, "1x 0123", 7), 2);
	check_error(&f, "octet length not followed by a space", 26);
	/* Too much skipped: an error at the first byte past the body. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "3 a"), 0);
	assert_int_equal(zp_framer_skip(&f, 3), -1);
	check_error(&f, "bytes skipped outside an octet body", 5);
	/* Skipping a header, whole or in part. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(zp_framer_skip(&f, 1), -1);
	check_error(&f, "bytes skipped outside an octet body", 0);
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(feeds(&f, "1"), 0);
	assert_int_equal(zp_framer_skip(&f, 1), -1);
	check_error(&f, "bytes skipped outside an octet body", 1);
	/* LF: feed_header is feed. */
	init(&f, ZP_FRAMING_LF, 0);
	assert_int_equal(zp_framer_feed_header(&f, "5 a\nb", 5), 5);
	assert_int_equal(zp_framer_frames(&f), 1);
}

/* ---- AUTO ---------------------------------------------------------- */

/* The first byte picks: 1-9 octet, anything else (0 too) lf. */
static void
test_auto(void **state)
{
	static const struct {
		const char	*s;
		enum zp_framing	 kind;
		uint64_t	 frames;
	} cases[] = {
		{ "4 a\nb\n3 abc", ZP_FRAMING_OCTET, 2 },
		{ "9", ZP_FRAMING_OCTET, 0 },
		{ "1 \n", ZP_FRAMING_OCTET, 1 },
		{ "hello\n5 hello\n", ZP_FRAMING_LF, 2 },
		{ "0 x\n", ZP_FRAMING_LF, 1 },
		{ "\n", ZP_FRAMING_LF, 1 },
		{ "<13>1 - x\n", ZP_FRAMING_LF, 1 },
		{ " 5 x\n", ZP_FRAMING_LF, 1 },
	};
	struct zp_framer	f;
	size_t			i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		init(&f, ZP_FRAMING_AUTO, 0);
		feeds(&f, cases[i].s);
		assert_int_equal(zp_framer_kind(&f), cases[i].kind);
		assert_int_equal(zp_framer_frames(&f), cases[i].frames);
		assert_int_equal(zp_framer_max(&f), cases[i].kind ==
		    ZP_FRAMING_OCTET ? ZP_FRAME_MAX : ZP_FRAME_DEFAULT_LF);
		assert_null(zp_framer_error(&f, NULL));
		check_splits(ZP_FRAMING_AUTO, 0, cases[i].s,
		    strlen(cases[i].s));
	}
	/* An empty feed decides nothing. */
	init(&f, ZP_FRAMING_AUTO, 7);
	assert_int_equal(zp_framer_max(&f), 7);
	assert_int_equal(zp_framer_feed(&f, "", 0), 0);
	assert_int_equal(zp_framer_kind(&f), ZP_FRAMING_AUTO);
	/* Next does not decide either. */
	assert_int_equal(zp_framer_next(&f, "1 x", 3), 3);
	assert_int_equal(zp_framer_kind(&f), ZP_FRAMING_AUTO);
	/* The limit asked applies to the mode picked. */
	assert_int_equal(feeds(&f, "8 "), 0);
	check_error(&f, "octet length over max-frame", 0);
	/* The first byte cannot be skipped. */
	init(&f, ZP_FRAMING_AUTO, 0);
	assert_int_equal(zp_framer_skip(&f, 4), -1);
	check_error(&f, "first byte skipped unseen", 0);
	/* Once decided, skip is the mode's. */
	init(&f, ZP_FRAMING_AUTO, 0);
	assert_int_equal(feeds(&f, "4 "), 0);
	assert_int_equal(zp_framer_skip(&f, 4), 0);
	assert_int_equal(zp_framer_frames(&f), 1);
	init(&f, ZP_FRAMING_AUTO, 0);
	assert_int_equal(feeds(&f, "a"), 0);
	assert_int_equal(zp_framer_skip(&f, 4), 0);
	assert_int_equal(zp_framer_blind(&f), 4);
}

/* ---- next ---------------------------------------------------------- */

/* next says where feed would find the first boundary, and changes nothing. */
static void
test_next(void **state)
{
	struct zp_framer	f, before;

	(void)state;
	init(&f, ZP_FRAMING_LF, 0);
	assert_int_equal(zp_framer_next(&f, "abc\ndef\n", 8), 4);
	assert_int_equal(zp_framer_next(&f, "abc", 3), 0);
	assert_int_equal(zp_framer_next(&f, "\n", 1), 1);
	feeds(&f, "abc\nde");
	before = f;
	assert_int_equal(zp_framer_next(&f, "f\n\n", 3), 2);
	assert_memory_equal(&f, &before, sizeof(f));
	/* An error before the boundary: none. */
	init(&f, ZP_FRAMING_LF, 2);
	assert_int_equal(zp_framer_next(&f, "abc\n", 4), 0);
	assert_int_equal(zp_framer_next(&f, "ab\n", 3), 3);
	/* OCTET: a header is read, a body only counted. */
	init(&f, ZP_FRAMING_OCTET, 0);
	assert_int_equal(zp_framer_next(&f, "3 abc", 5), 5);
	assert_int_equal(zp_framer_next(&f, "3 ab", 4), 0);
	assert_int_equal(zp_framer_next(&f, "3x abc", 6), 0);
	feeds(&f, "10 ab");
	assert_int_equal(zp_framer_next(&f, "cdefghijkl", 10), 8);
	assert_int_equal(zp_framer_next(&f, "cdefghi", 7), 0);
	assert_int_equal(zp_framer_body_left(&f), 8);
	assert_false(zp_framer_at_boundary(&f));
	feeds(&f, "cdefghij");
	assert_true(zp_framer_at_boundary(&f));
	/* At a boundary: the end of the next frame. */
	assert_int_equal(zp_framer_next(&f, "1 x1 y", 6), 3);
}

/* ---- many frames --------------------------------------------------- */

/* xorshift64*, so that a failure is reproducible. */
static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545f4914f6cdd1dULL;
}

/*
 * Many octet frames of random length whose bodies are full of '\n',
 * spaces and digits, taken in random pieces: by feed, or as the splice
 * path does (feed_header, then skip in pieces). Every frame is counted and
 * the stream ends at a boundary; split points are checked on a short one.
 */
static void
test_octet_many(void **state)
{
	static unsigned char	 s[200000];
	static const char	 alphabet[] = "\n 0123456789\0x";
	struct zp_framer	 f;
	uint64_t		 seed = 0x5eedf4a3e12ULL;
	size_t			 len = 0, i, n, k, nframes = 0;
	int			 hlen;

	(void)state;
	while (len + 2000 < sizeof(s)) {
		n = 1 + rnd(&seed) % 1500;
		hlen = snprintf((char *)s + len, 16, "%zu ", n);
		len += (size_t)hlen;
		for (k = 0; k < n; k++)
			s[len++] = (unsigned char)alphabet[rnd(&seed) %
			    (sizeof(alphabet) - 1)];
		nframes++;
	}
	check_splits(ZP_FRAMING_OCTET, 0, s, 80);

	init(&f, ZP_FRAMING_OCTET, 1500);
	for (i = 0; i < len; i += n) {
		n = 1 + rnd(&seed) % 700;
		if (n > len - i)
			n = len - i;
		zp_framer_feed(&f, s + i, n);
	}
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(zp_framer_frames(&f), nframes);
	assert_true(zp_framer_at_boundary(&f));

	init(&f, ZP_FRAMING_OCTET, 1500);
	for (i = 0; i < len; i += n) {
		if (zp_framer_body_left(&f) > 0) {
			n = 1 + rnd(&seed) % 700;
			if (n > zp_framer_body_left(&f))
				n = zp_framer_body_left(&f);
			assert_int_equal(zp_framer_skip(&f, n), 0);
		} else {
			n = 1 + rnd(&seed) % ZP_OCTET_HDR_MAX;
			if (n > len - i)
				n = len - i;
			n = zp_framer_feed_header(&f, s + i, n);
		}
	}
	assert_null(zp_framer_error(&f, NULL));
	assert_int_equal(zp_framer_frames(&f), nframes);
	assert_int_equal(zp_framer_offset(&f), len);
	assert_true(zp_framer_at_boundary(&f));
}

/* The same for lines: every '\n' counted, whatever the pieces. */
static void
test_lf_many(void **state)
{
	static unsigned char	 s[100000];
	struct zp_framer	 f;
	uint64_t		 seed = 0xfeedULL;
	size_t			 i, n, nl = 0, last = 0, r;

	(void)state;
	for (i = 0; i < sizeof(s); i++) {
		s[i] = rnd(&seed) % 20 == 0 ? '\n' : 'a' + rnd(&seed) % 26;
		if (s[i] == '\n') {
			nl++;
			last = i + 1;
		}
	}
	check_splits(ZP_FRAMING_LF, 30, s, 120);
	init(&f, ZP_FRAMING_LF, 0);
	for (i = 0; i < sizeof(s); i += n) {
		n = 1 + rnd(&seed) % 300;
		if (n > sizeof(s) - i)
			n = sizeof(s) - i;
		r = zp_framer_feed(&f, s + i, n);
		if (r > 0)
			assert_int_equal(s[i + r - 1], '\n');
	}
	assert_int_equal(zp_framer_frames(&f), nl);
	assert_int_equal(zp_framer_boundary(&f), last);
}

/*
 * zp_framer_resume: a move re-reads what a pipe held from where delivery
 * stopped. At a boundary the framer takes the next frames as a fresh one
 * would, at the offsets given; blind (LF) it waits for a delimiter; the
 * kind, the limit and the refusals hold.
 */
static void
test_resume(void **state)
{
	struct zp_framer	f, g;

	init(&f, ZP_FRAMING_OCTET, 100);
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_OCTET, 100, 1000, 1),
	    0);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_offset(&f), 1000);
	assert_int_equal(zp_framer_boundary(&f), 1000);
	assert_int_equal(zp_framer_frames(&f), 0);
	assert_int_equal(feeds(&f, "3 abc2 x"), 5);
	assert_int_equal(zp_framer_frames(&f), 1);
	assert_int_equal(zp_framer_boundary(&f), 1005);
	assert_int_equal(zp_framer_body_left(&f), 1);
	/* The limit is kept: 101 is over it. */
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_OCTET, 100, 7, 1), 0);
	(void)feeds(&f, "101 ");
	assert_non_null(zp_framer_error(&f, NULL));

	/* LF, blind: nothing before the first '\n' is a boundary. */
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_LF, 0, 50, 0), 0);
	assert_false(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_next(&f, "tail\nnext\n", 10), 5);
	assert_int_equal(feeds(&f, "tail\nnext\n"), 10);
	assert_int_equal(zp_framer_frames(&f), 2);
	assert_int_equal(zp_framer_boundary(&f), 60);
	assert_int_equal(zp_framer_max(&f), ZP_FRAME_DEFAULT_LF);

	/* LF and NUL at a boundary. */
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_NUL, 8, 3, 1), 0);
	assert_true(zp_framer_at_boundary(&f));
	assert_int_equal(zp_framer_kind(&f), ZP_FRAMING_NUL);
	assert_int_equal(zp_framer_feed(&f, "ab\0", 3), 3);
	assert_int_equal(zp_framer_boundary(&f), 6);

	/* Refused, f untouched: octet not at a boundary, AUTO, NONE, a limit
	 * over the cap. */
	init(&f, ZP_FRAMING_LF, 0);
	(void)feeds(&f, "ab");
	g = f;
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_OCTET, 0, 9, 0), -1);
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_AUTO, 0, 9, 1), -1);
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_NONE, 0, 9, 1), -1);
	assert_int_equal(zp_framer_resume(&f, ZP_FRAMING_LF,
	    (uint64_t)ZP_FRAME_MAX + 1, 9, 1), -1);
	assert_memory_equal(&f, &g, sizeof(f));
}

/* The names --framing takes, and nothing else. */
static void
test_parse(void **state)
{
	assert_int_equal(zp_framing_parse("none"), ZP_FRAMING_NONE);
	assert_int_equal(zp_framing_parse("lf"), ZP_FRAMING_LF);
	assert_int_equal(zp_framing_parse("octet"), ZP_FRAMING_OCTET);
	assert_int_equal(zp_framing_parse("auto"), ZP_FRAMING_AUTO);
	assert_int_equal(zp_framing_parse("nul"), ZP_FRAMING_NUL);
	assert_int_equal(zp_framing_parse("LF"), -1);
	assert_int_equal(zp_framing_parse(""), -1);
	assert_int_equal(zp_framing_parse("octets"), -1);
	assert_int_equal(zp_framing_parse("?"), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init),
		cmocka_unit_test(test_none),
		cmocka_unit_test(test_lf),
		cmocka_unit_test(test_nul),
		cmocka_unit_test(test_lf_limit),
		cmocka_unit_test(test_lf_blind),
		cmocka_unit_test(test_octet),
		cmocka_unit_test(test_octet_header_bytewise),
		cmocka_unit_test(test_octet_limit),
		cmocka_unit_test(test_octet_malformed),
		cmocka_unit_test(test_octet_skip),
		cmocka_unit_test(test_auto),
		cmocka_unit_test(test_next),
		cmocka_unit_test(test_octet_many),
		cmocka_unit_test(test_lf_many),
		cmocka_unit_test(test_resume),
		cmocka_unit_test(test_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
