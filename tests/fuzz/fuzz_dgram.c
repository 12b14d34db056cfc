/*
 * fuzz_dgram.c - a datagram as one frame (zp_dgram_frame): the bytes a
 * UDP source sends, framed for its TCP stream.
 *
 * The first byte picks the framing (odd: LF, even: octet), the rest is
 * the datagram. Empty: no frame. Else the frame is as long as
 * zp_dgram_frame_len() says and within ZP_DGRAM_FRAME_MAX; the framer
 * that follows the stream sees exactly one frame ending at its last byte,
 * with no error; octet carries the datagram byte for byte after "LEN ";
 * LF holds no '\n' but its last, and reading "#012" back as '\n' gives
 * the datagram (its last '\n' aside) wherever the datagram held no
 * "#012" of its own.
 */

#include "lib/dgram.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char	 out[ZP_DGRAM_FRAME_MAX(ZP_DGRAM_MAX)];
	static unsigned char	 back[ZP_DGRAM_MAX];
	struct zp_framer	 f;
	enum zp_framing		 fr;
	const unsigned char	*d = data + 1, *p;
	size_t			 len, n, esc, esc2, i, b = 0, body;
	char			 hdr[16];

	if (size == 0 || size - 1 > ZP_DGRAM_MAX)
		return 0;
	fr = data[0] & 1 ? ZP_FRAMING_LF : ZP_FRAMING_OCTET;
	len = size - 1;
	n = zp_dgram_frame(d, len, fr, out, &esc);
	FUZZ_CHECK(n == zp_dgram_frame_len(d, len, fr, &esc2) && esc == esc2);
	if (len == 0) {
		FUZZ_CHECK(n == 0 && esc == 0);
		return 0;
	}
	FUZZ_CHECK(n >= len && n <= ZP_DGRAM_FRAME_MAX(len));
	FUZZ_CHECK(zp_framer_init(&f, fr, ZP_FRAME_MAX) == 0);
	FUZZ_CHECK(zp_framer_feed(&f, out, n) == n);
	FUZZ_CHECK(zp_framer_frames(&f) == 1 && zp_framer_error(&f, NULL) ==
	    NULL && zp_framer_boundary(&f) == n);
	if (fr == ZP_FRAMING_OCTET) {
		snprintf(hdr, sizeof(hdr), "%zu ", len);
		FUZZ_CHECK(n == strlen(hdr) + len &&
		    memcmp(out, hdr, strlen(hdr)) == 0 &&
		    memcmp(out + strlen(hdr), d, len) == 0 && esc == 0);
		return 0;
	}
	FUZZ_CHECK(out[n - 1] == '\n' && memchr(out, '\n', n - 1) == NULL);
	if (memmem(d, len, ZP_DGRAM_NL_ESC, 4) != NULL)
		return 0;
	for (p = out, i = 0; p < out + n - 1; ) {
		if ((size_t)(out + n - 1 - p) >= 4 &&
		    memcmp(p, ZP_DGRAM_NL_ESC, 4) == 0) {
			back[b++] = '\n';
			p += 4;
			i++;
		} else
			back[b++] = *p++;
	}
	body = d[len - 1] == '\n' ? len - 1 : len;
	FUZZ_CHECK(b == body && memcmp(back, d, body) == 0 && i == esc);
	return 0;
}
