/*
 * test_dgram.c - unit tests for dgram.c: a datagram's frame in each
 * framing, byte for byte (octet: its length, a space, the datagram as it
 * is, NUL and '\n' included; LF: a '\n' added or kept, every '\n' inside
 * written as "#012" and counted); an empty or oversized datagram makes
 * none; the framing a UDP source gets; and a run of datagrams framed one
 * after the other is, to the framer that follows the stream, exactly one
 * frame each with a boundary at each frame's end.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "lib/dgram.h"

/* d framed so must be want (want_len bytes), escaping nl newlines. */
static void
framed(const char *d, size_t len, enum zp_framing fr, const char *want,
    size_t want_len, size_t nl)
{
	unsigned char	out[ZP_DGRAM_FRAME_MAX(64)];
	size_t		n, esc = 99, esc2 = 99;

	assert_true(len <= 64);
	n = zp_dgram_frame(d, len, fr, out, &esc);
	assert_int_equal(n, want_len);
	assert_memory_equal(out, want, want_len);
	assert_int_equal(esc, nl);
	assert_int_equal(zp_dgram_frame_len(d, len, fr, &esc2), want_len);
	assert_int_equal(esc2, nl);
}

#define FRAMED(d, fr, want, nl) \
	framed((d), sizeof(d) - 1, (fr), (want), sizeof(want) - 1, (nl))

static void
test_octet(void **state)
{
	(void)state;
	FRAMED("hello", ZP_FRAMING_OCTET, "5 hello", 0);
	FRAMED("<13>a b\n", ZP_FRAMING_OCTET, "8 <13>a b\n", 0);
	/* Any byte as it is: NUL, '\n' inside, binary. */
	FRAMED("a\0b\nc\xff", ZP_FRAMING_OCTET, "6 a\0b\nc\xff", 0);
	FRAMED("\n", ZP_FRAMING_OCTET, "1 \n", 0);
}

/* The length header at each digit boundary, and frame_len agreeing. */
static void
test_octet_digits(void **state)
{
	static const size_t	lens[] = { 1, 9, 10, 99, 100, 999, 1000, 9999,
				    10000, ZP_DGRAM_MAX };
	static unsigned char	d[ZP_DGRAM_MAX], out[ZP_DGRAM_MAX + 16];
	char			want[16];
	size_t			i, n, h;

	(void)state;
	memset(d, 'y', sizeof(d));
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		h = (size_t)snprintf(want, sizeof(want), "%zu ", lens[i]);
		n = zp_dgram_frame(d, lens[i], ZP_FRAMING_OCTET, out, NULL);
		assert_int_equal(n, h + lens[i]);
		assert_memory_equal(out, want, h);
		assert_int_equal(out[h], 'y');
		assert_int_equal(zp_dgram_frame_len(d, lens[i],
		    ZP_FRAMING_OCTET, NULL), n);
	}
}

static void
test_lf(void **state)
{
	(void)state;
	FRAMED("hello", ZP_FRAMING_LF, "hello\n", 0);
	/* A '\n' that ends it is the frame's: kept, not doubled. */
	FRAMED("hello\n", ZP_FRAMING_LF, "hello\n", 0);
	FRAMED("a\r\n", ZP_FRAMING_LF, "a\r\n", 0);
	/* Inside, each '\n' is "#012": one line, whatever it held. */
	FRAMED("a\nb", ZP_FRAMING_LF, "a#012b\n", 1);
	FRAMED("a\n\nb\n", ZP_FRAMING_LF, "a#012#012b\n", 2);
	FRAMED("\n\n", ZP_FRAMING_LF, "#012\n", 1);
	FRAMED("\n", ZP_FRAMING_LF, "\n", 0);
	FRAMED("\nx", ZP_FRAMING_LF, "#012x\n", 1);
	/* Other bytes as they are. */
	FRAMED("a\0b\xff", ZP_FRAMING_LF, "a\0b\xff\n", 0);
}

/* Empty and oversized datagrams make no frame; the largest one does. */
static void
test_sizes(void **state)
{
	static unsigned char	d[ZP_DGRAM_MAX + 1], out[ZP_DGRAM_FRAME_MAX(
				    ZP_DGRAM_MAX + 1)];
	size_t			esc = 99;

	(void)state;
	memset(d, 'x', sizeof(d));
	assert_int_equal(zp_dgram_frame(d, 0, ZP_FRAMING_OCTET, out, &esc), 0);
	assert_int_equal(esc, 0);
	assert_int_equal(zp_dgram_frame_len(d, 0, ZP_FRAMING_LF, NULL), 0);
	assert_int_equal(zp_dgram_frame(d, ZP_DGRAM_MAX + 1, ZP_FRAMING_LF,
	    out, NULL), 0);
	assert_int_equal(zp_dgram_frame(d, ZP_DGRAM_MAX, ZP_FRAMING_OCTET,
	    out, NULL), ZP_DGRAM_MAX + 6);
	assert_memory_equal(out, "65527 x", 7);
	assert_int_equal(zp_dgram_frame(d, ZP_DGRAM_MAX, ZP_FRAMING_LF, out,
	    NULL), ZP_DGRAM_MAX + 1);
	/* The worst case: every byte a '\n'. */
	memset(d, '\n', sizeof(d));
	assert_int_equal(zp_dgram_frame(d, ZP_DGRAM_MAX, ZP_FRAMING_LF, out,
	    &esc), 4 * (ZP_DGRAM_MAX - 1) + 1);
	assert_int_equal(esc, ZP_DGRAM_MAX - 1);
}

static void
test_framing_of_sources(void **state)
{
	(void)state;
	assert_int_equal(zp_dgram_framing(ZP_FRAMING_LF), ZP_FRAMING_LF);
	assert_int_equal(zp_dgram_framing(ZP_FRAMING_NONE), ZP_FRAMING_OCTET);
	assert_int_equal(zp_dgram_framing(ZP_FRAMING_OCTET), ZP_FRAMING_OCTET);
	assert_int_equal(zp_dgram_framing(ZP_FRAMING_AUTO), ZP_FRAMING_OCTET);
	assert_int_equal(zp_dgram_framing(ZP_FRAMING_NUL), ZP_FRAMING_OCTET);
}

/*
 * Datagrams framed one after the other, as a source's stream carries
 * them: the framer finds one frame each, a boundary at each frame's end.
 */
static void
test_stream(void **state)
{
	static const char *const dg[] = {
		"<13>one", "two\n", "th\nree", "\n", "5 five", "\n\n\n", "1",
	};
	unsigned char		buf[1024];
	struct zp_framer	f;
	size_t			i, k, n, off;
	enum zp_framing		fr[] = { ZP_FRAMING_LF, ZP_FRAMING_OCTET };

	(void)state;
	for (k = 0; k < 2; k++) {
		assert_int_equal(zp_framer_init(&f, fr[k], 0), 0);
		off = 0;
		for (i = 0; i < sizeof(dg) / sizeof(dg[0]); i++) {
			n = zp_dgram_frame(dg[i], strlen(dg[i]), fr[k], buf,
			    NULL);
			assert_true(n > 0);
			assert_int_equal(zp_framer_feed(&f, buf, n), n);
			off += n;
			assert_int_equal(zp_framer_frames(&f), i + 1);
			assert_true(zp_framer_at_boundary(&f));
			assert_int_equal(zp_framer_boundary(&f), off);
		}
		assert_null(zp_framer_error(&f, NULL));
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_octet),
		cmocka_unit_test(test_octet_digits),
		cmocka_unit_test(test_lf),
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_framing_of_sources),
		cmocka_unit_test(test_stream),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
