/*
 * framing.c - the framing state machine of one direction (framing.h).
 *
 * One loop, framer_run(), walks a buffer for feed, feed_header and next;
 * they differ only in where it stops. Each step takes a run of bytes the
 * current state can take at once: a delimited segment found with memchr,
 * a slice of an octet body without looking at it, one octet header byte.
 */

#include <assert.h>
#include <string.h>

#include "lib/framing.h"

enum {
	FR_BOUNDARY,	/* at a boundary (also AUTO before its first byte) */
	FR_LINE,	/* LF/NUL: inside a frame whose start was seen */
	FR_BLIND,	/* LF/NUL: after blind bytes, no delimiter seen yet */
	FR_HEADER,	/* OCTET: some digits of LEN seen */
	FR_BODY,	/* OCTET: body_left > 0 */
	FR_ERROR	/* terminal */
};

/* Where framer_run() stops. */
enum {
	RUN_ALL,	/* at the end of the buffer */
	RUN_FIRST,	/* just past the first boundary */
	RUN_HEADER	/* just past an octet header's SP */
};

/* Enter the terminal error state, for the byte at stream offset at. */
static void
framer_fail(struct zp_framer *f, const char *why, uint64_t at)
{
	f->state = FR_ERROR;
	f->why = why;
	f->err_offset = at;
}

/* The limit of kind k when max_frame was 0. */
static uint64_t
framer_default_max(enum zp_framing k)
{
	return k == ZP_FRAMING_OCTET ? ZP_FRAME_MAX : ZP_FRAME_DEFAULT_LF;
}

int
zp_framer_init(struct zp_framer *f, enum zp_framing mode, uint64_t max_frame)
{
	if (mode != ZP_FRAMING_NONE && mode != ZP_FRAMING_LF &&
	    mode != ZP_FRAMING_OCTET && mode != ZP_FRAMING_AUTO &&
	    mode != ZP_FRAMING_NUL)
		return -1;
	if (max_frame > ZP_FRAME_MAX)
		return -1;
	memset(f, 0, sizeof(*f));
	f->mode = f->kind = mode;
	f->state = FR_BOUNDARY;
	f->max_asked = max_frame;
	/* AUTO with the default has none until its first byte picks. */
	if (max_frame != 0)
		f->max = max_frame;
	else if (mode != ZP_FRAMING_AUTO)
		f->max = framer_default_max(mode);
	f->why = NULL;
	return 0;
}

int
zp_framer_resume(struct zp_framer *f, enum zp_framing kind,
    uint64_t max_frame, uint64_t offset, int at_boundary)
{
	struct zp_framer	g;

	if (kind != ZP_FRAMING_LF && kind != ZP_FRAMING_OCTET &&
	    kind != ZP_FRAMING_NUL)
		return -1;
	if (kind == ZP_FRAMING_OCTET && !at_boundary)
		return -1;
	if (zp_framer_init(&g, kind, max_frame) == -1)
		return -1;
	g.offset = offset;
	if (at_boundary)
		g.boundary = offset;
	else
		g.state = FR_BLIND;
	*f = g;
	return 0;
}

/* A frame ends at the current offset. */
static void
framer_complete(struct zp_framer *f)
{
	f->frames++;
	f->boundary = f->offset;
	f->state = FR_BOUNDARY;
	f->cur = 0;
}

/*
 * LF/NUL: take bytes up to and including the next delimiter in p, or all
 * of them. Returns how many were taken; *hit is set when a frame ended.
 */
static size_t
framer_delim(struct zp_framer *f, const unsigned char *p, size_t len,
    int *hit)
{
	const unsigned char	*q;
	size_t			 seg;
	int			 delim;

	delim = f->kind == ZP_FRAMING_NUL ? '\0' : '\n';
	q = memchr(p, delim, len);
	seg = q != NULL ? (size_t)(q - p) : len;
	assert(f->cur <= f->max);
	if (seg > f->max - f->cur) {
		/* The (max + 1)-th byte without a delimiter. */
		seg = (size_t)(f->max - f->cur);
		framer_fail(f, "frame over max-frame", f->offset + seg);
		f->offset += seg + 1;
		return seg + 1;
	}
	f->offset += seg;
	if (q == NULL) {
		f->cur += seg;
		if (f->state == FR_BOUNDARY && seg > 0)
			f->state = FR_LINE;
		return seg;
	}
	f->offset++;
	framer_complete(f);
	*hit = 1;
	return seg + 1;
}

/* OCTET: one byte of a header (state FR_BOUNDARY or FR_HEADER). */
static void
framer_header_byte(struct zp_framer *f, unsigned char c)
{
	uint64_t	at = f->offset++;

	if (f->state == FR_BOUNDARY) {
		if (c >= '1' && c <= '9') {
			f->hdr_len = (uint64_t)(c - '0');
			f->hdr_digits = 1;
			f->state = FR_HEADER;
		} else if (c == '0') {
			framer_fail(f, "octet length starts with 0", at);
			return;
		} else {
			framer_fail(f, "octet frame does not start with a length",
			    at);
			return;
		}
	} else if (c >= '0' && c <= '9') {
		/*
		 * No ninth digit gets past the limit (ZP_FRAME_MAX has
		 * eight), so the RFC's nine-digit bound holds by itself.
		 */
		assert(f->hdr_digits < 9);
		f->hdr_len = f->hdr_len * 10 + (uint64_t)(c - '0');
		f->hdr_digits++;
	} else if (c == ' ') {
		f->body_left = f->hdr_len;
		f->hdr_len = 0;
		f->hdr_digits = 0;
		f->state = FR_BODY;
		return;
	} else {
		framer_fail(f, "octet length not followed by a space", at);
		return;
	}
	if (f->hdr_len > f->max)
		framer_fail(f, "octet length over max-frame", at);
}

/* OCTET: take up to body_left bytes of p without looking at them. */
static size_t
framer_body(struct zp_framer *f, size_t len, int *hit)
{
	size_t	n;

	n = f->body_left < len ? (size_t)f->body_left : len;
	f->body_left -= n;
	f->offset += n;
	if (f->body_left == 0) {
		framer_complete(f);
		*hit = 1;
	}
	return n;
}

/* AUTO: the first byte seen decides. */
static void
framer_decide(struct zp_framer *f, unsigned char c)
{
	f->kind = c >= '1' && c <= '9' ? ZP_FRAMING_OCTET : ZP_FRAMING_LF;
	f->max = f->max_asked != 0 ? f->max_asked : framer_default_max(f->kind);
}

/*
 * Walk len bytes of p, stopping as stop says. Returns how many bytes were
 * taken (counted in f->offset) and sets *last to the offset in p just past
 * the last boundary reached, or 0. Bytes after an error are taken and
 * counted only when stop is RUN_ALL.
 */
static size_t
framer_run(struct zp_framer *f, const unsigned char *p, size_t len, int stop,
    size_t *last)
{
	size_t	i = 0;
	int	hit;

	*last = 0;
	if (len == 0)
		return 0;
	if (f->kind == ZP_FRAMING_AUTO && f->state == FR_BOUNDARY)
		framer_decide(f, p[0]);
	if (stop == RUN_HEADER && (f->kind != ZP_FRAMING_OCTET ||
	    f->state == FR_BODY || f->state == FR_ERROR))
		stop = RUN_ALL;
	while (i < len && f->state != FR_ERROR &&
	    f->kind != ZP_FRAMING_NONE) {
		hit = 0;
		if (f->kind != ZP_FRAMING_OCTET)
			i += framer_delim(f, p + i, len - i, &hit);
		else if (f->state == FR_BODY)
			i += framer_body(f, len - i, &hit);
		else {
			framer_header_byte(f, p[i++]);
			if (stop == RUN_HEADER && f->state == FR_BODY)
				break;
		}
		if (hit) {
			*last = i;
			if (stop == RUN_FIRST)
				break;
		}
	}
	if (i < len && (f->state == FR_ERROR || f->kind == ZP_FRAMING_NONE) &&
	    stop == RUN_ALL) {
		f->offset += len - i;
		i = len;
	}
	return i;
}

size_t
zp_framer_feed(struct zp_framer *f, const void *buf, size_t len)
{
	size_t	last;

	framer_run(f, buf, len, RUN_ALL, &last);
	return last;
}

size_t
zp_framer_feed_header(struct zp_framer *f, const void *buf, size_t len)
{
	size_t	last;

	return framer_run(f, buf, len, RUN_HEADER, &last);
}

int
zp_framer_skip(struct zp_framer *f, uint64_t n)
{
	uint64_t	at = f->offset;

	if (n == 0)
		return 0;
	f->offset += n;
	if (f->state == FR_ERROR || f->kind == ZP_FRAMING_NONE)
		return 0;
	if (f->kind == ZP_FRAMING_AUTO) {
		framer_fail(f, "first byte skipped unseen", at);
		return -1;
	}
	if (f->kind != ZP_FRAMING_OCTET) {
		/* Whatever the bytes held, the frame's start is lost. */
		f->state = FR_BLIND;
		f->blind += n;
		f->cur = 0;
		return 0;
	}
	if (f->state != FR_BODY || n > f->body_left) {
		framer_fail(f, "bytes skipped outside an octet body",
		    at + (f->state == FR_BODY ? f->body_left : 0));
		f->body_left = 0;
		return -1;
	}
	f->body_left -= n;
	if (f->body_left == 0)
		framer_complete(f);
	return 0;
}

size_t
zp_framer_next(const struct zp_framer *f, const void *buf, size_t len)
{
	struct zp_framer	copy = *f;
	size_t			last;

	framer_run(&copy, buf, len, RUN_FIRST, &last);
	return last;
}

int
zp_framer_at_boundary(const struct zp_framer *f)
{
	if (f->state == FR_ERROR)
		return 0;
	if (f->kind == ZP_FRAMING_NONE)
		return f->offset == 0;
	return f->state == FR_BOUNDARY;
}

uint64_t
zp_framer_frames(const struct zp_framer *f)
{
	return f->frames;
}

uint64_t
zp_framer_offset(const struct zp_framer *f)
{
	return f->offset;
}

uint64_t
zp_framer_boundary(const struct zp_framer *f)
{
	return f->boundary;
}

uint64_t
zp_framer_body_left(const struct zp_framer *f)
{
	return f->state == FR_BODY ? f->body_left : 0;
}

uint64_t
zp_framer_blind(const struct zp_framer *f)
{
	return f->blind;
}

enum zp_framing
zp_framer_kind(const struct zp_framer *f)
{
	return f->kind;
}

uint64_t
zp_framer_max(const struct zp_framer *f)
{
	return f->max;
}

const char *
zp_framer_error(const struct zp_framer *f, uint64_t *offset)
{
	if (f->state != FR_ERROR)
		return NULL;
	if (offset != NULL)
		*offset = f->err_offset;
	return f->why;
}

const char *
zp_framing_name(enum zp_framing mode)
{
	switch (mode) {
	case ZP_FRAMING_NONE:
		return "none";
	case ZP_FRAMING_LF:
		return "lf";
	case ZP_FRAMING_OCTET:
		return "octet";
	case ZP_FRAMING_AUTO:
		return "auto";
	case ZP_FRAMING_NUL:
		return "nul";
	}
	return "?";
}

int
zp_framing_parse(const char *name)
{
	static const enum zp_framing	 all[] = { ZP_FRAMING_NONE,
	    ZP_FRAMING_LF, ZP_FRAMING_OCTET, ZP_FRAMING_AUTO, ZP_FRAMING_NUL };
	size_t				 i;

	for (i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (strcmp(name, zp_framing_name(all[i])) == 0)
			return (int)all[i];
	return -1;
}
