/*
 * dgram.c - a syslog datagram as one frame of a framed stream. See
 * dgram.h.
 */

#include <string.h>

#include "lib/dgram.h"

enum zp_framing
zp_dgram_framing(enum zp_framing configured)
{
	return configured == ZP_FRAMING_LF ? ZP_FRAMING_LF : ZP_FRAMING_OCTET;
}

/*
 * The digits of len (1 to ZP_DGRAM_MAX: at most 5) and the SP of its
 * octet-counting header, into out when not NULL; returns their number.
 * By hand: snprintf was a tenth of a UDP thread's user time per datagram.
 */
static size_t
octet_hdr(size_t len, unsigned char *out)
{
	size_t	n = 1, v, i;

	for (v = len; v >= 10; v /= 10)
		n++;
	if (out != NULL) {
		for (v = len, i = n; i > 0; v /= 10)
			out[--i] = (unsigned char)('0' + v % 10);
		out[n] = ' ';
	}
	return n + 1;
}

/*
 * LF: how many bytes of d are the message (a '\n' that ends it is the
 * frame's own) and how many '\n' inside them are escaped.
 */
static size_t
lf_body(const unsigned char *d, size_t len, size_t *nl)
{
	const unsigned char	*p = d, *end;
	size_t			 body = d[len - 1] == '\n' ? len - 1 : len;

	*nl = 0;
	end = d + body;
	while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		(*nl)++;
		p++;
	}
	return body;
}

size_t
zp_dgram_frame_len(const void *d, size_t len, enum zp_framing framing,
    size_t *escaped)
{
	size_t	nl = 0, body;

	if (escaped != NULL)
		*escaped = 0;
	if (len == 0 || len > ZP_DGRAM_MAX)
		return 0;
	if (framing != ZP_FRAMING_LF)
		return octet_hdr(len, NULL) + len;
	body = lf_body(d, len, &nl);
	if (escaped != NULL)
		*escaped = nl;
	return body + nl * (sizeof(ZP_DGRAM_NL_ESC) - 2) + 1;
}

size_t
zp_dgram_frame(const void *d, size_t len, enum zp_framing framing,
    void *out, size_t *escaped)
{
	const unsigned char	*p = d, *end, *nl;
	unsigned char		*o = out;
	size_t			 n, body, count;

	if (escaped != NULL)
		*escaped = 0;
	if (len == 0 || len > ZP_DGRAM_MAX)
		return 0;
	if (framing != ZP_FRAMING_LF) {
		/* At most 5 digits and the SP: within ZP_OCTET_HDR_MAX. */
		n = octet_hdr(len, o);
		memcpy(o + n, d, len);
		return n + len;
	}
	body = lf_body(d, len, &count);
	if (escaped != NULL)
		*escaped = count;
	end = p + body;
	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		n = (size_t)((nl != NULL ? nl : end) - p);
		memcpy(o, p, n);
		o += n;
		p += n;
		if (nl == NULL)
			break;
		memcpy(o, ZP_DGRAM_NL_ESC, sizeof(ZP_DGRAM_NL_ESC) - 1);
		o += sizeof(ZP_DGRAM_NL_ESC) - 1;
		p++;
	}
	*o++ = '\n';
	return (size_t)(o - (unsigned char *)out);
}
