/*
 * framing.h - where the messages of one direction's byte stream begin and
 * end: RFC 6587 non-transparent framing (a frame ends with '\n'), octet
 * counting (`LEN SP MSG`), '\0'-delimited frames (GELF over TCP), or a
 * choice between the first two by the stream's first byte.
 *
 * A struct zp_framer follows one direction's stream: every byte the
 * direction moves passes through it once, either seen (zp_framer_feed(),
 * zp_framer_feed_header()) or blind (zp_framer_skip(): spliced without
 * being looked at). It is a pure state machine: no I/O, no allocation, no
 * clock; O(len) per call (memchr for the delimited modes); every count
 * and offset is 64-bit. The struct is declared here so that the data path
 * can embed it; its fields are the framer's own, read them through the
 * functions below.
 *
 * Terms. The stream offset of a byte is the number of bytes (seen or
 * blind) that passed before it. A boundary is a point between two bytes
 * where one frame has ended and the next has not begun; the start of the
 * stream (offset 0) is one, in every mode. A frame is complete when the
 * framer has seen its end:
 *   LF, NUL  a frame ends with its delimiter ('\n', '\0'), which belongs
 *            to it. Every delimiter ends a frame, so a lone '\n' (an
 *            empty line) is a frame of one byte: the boundary after it
 *            is real, whether or not a collector keeps empty messages.
 *   OCTET    a frame is `LEN SP` and LEN bytes of body: LEN in decimal,
 *            1-9 digits, the first 1-9 (so no leading zero and no LEN 0).
 *            Body bytes are never looked at: they may hold '\n', spaces,
 *            anything. The frame ends with its last body byte.
 *   AUTO     LF or OCTET, decided by the first byte fed: a digit 1-9
 *            gives OCTET, any other byte LF.
 *   NONE     no frames: nothing is ever counted; the only boundary is the
 *            start of the stream.
 *
 * The limit (max_frame). LF and NUL: a frame's message, the delimiter not
 * counted, may be up to max_frame bytes; max_frame + 1 bytes without a
 * delimiter since the last boundary is an error, found at the offset of
 * that (max_frame + 1)-th byte. OCTET: LEN may be up to max_frame; a LEN
 * over it is an error at the digit that takes it over (more digits only
 * make it larger), so a body is never spliced blind past the limit.
 * max_frame 0 means the mode's default: ZP_FRAME_DEFAULT_LF (64 KiB) for
 * LF and NUL, ZP_FRAME_MAX (16 MiB) for OCTET (the length is declared,
 * so by default any sane one is taken); for AUTO the default of the mode
 * the first byte picks. No limit is above ZP_FRAME_MAX; nine digits could
 * say 999999999, so with that cap a ten-digit length is always refused
 * as over the limit before its tenth digit.
 *
 * Errors. A frame over the limit, a malformed octet header (a first byte
 * that is not 1-9, a leading zero, a non-digit where the SP should be), a
 * blind skip the framing cannot survive (see zp_framer_skip()) put the
 * framer in its terminal error state: it reports why (a static string)
 * and the stream offset of the byte that showed it, is never again at a
 * boundary, and counts no more frames; feed and skip still take bytes and
 * only count them. The data path then relays the rest as plain bytes: a
 * framing error never drops a connection nor any byte.
 *
 * Blind bytes. OCTET bodies may be skipped blind without losing anything:
 * the framer knows how many bytes are left in the body
 * (zp_framer_body_left()), and skipping all of them reaches the boundary.
 * LF and NUL bytes skipped blind lose the position: the framer is then
 * "blind", not at a boundary and not knowing how many frames the skipped
 * bytes held. The next delimiter fed ends a frame (whose start is
 * unknown) and makes the position known again: that delimiter is a
 * boundary. Frames are counted only when their end is seen, so
 * zp_framer_frames() is then a lower bound, exact when
 * zp_framer_blind() is 0; zp_framer_blind() is the number of bytes
 * skipped blind in a delimited mode. After a blind stretch the limit is
 * applied to the bytes fed since it (a lower bound of the frame's length,
 * so an error found is a real one; a frame too long only within the blind
 * stretch goes unseen).
 */
#ifndef ZP_FRAMING_H
#define ZP_FRAMING_H

#include <stddef.h>
#include <stdint.h>

enum zp_framing {
	ZP_FRAMING_NONE,
	ZP_FRAMING_LF,
	ZP_FRAMING_OCTET,
	ZP_FRAMING_AUTO,
	ZP_FRAMING_NUL
};

#define ZP_FRAME_DEFAULT_LF	(64 * 1024)
#define ZP_FRAME_MAX		(16 * 1024 * 1024)
/* The longest octet header: nine digits and the SP. */
#define ZP_OCTET_HDR_MAX	10

struct zp_framer {
	enum zp_framing	 mode;		/* as asked: AUTO stays AUTO */
	enum zp_framing	 kind;		/* in effect; AUTO until decided */
	int		 state;		/* FR_* in framing.c */
	uint64_t	 max_asked;	/* 0: the kind's default */
	uint64_t	 max;		/* in effect, once kind is known */
	uint64_t	 offset;	/* bytes passed, seen or blind */
	uint64_t	 frames;	/* frames whose end was seen */
	uint64_t	 boundary;	/* offset of the last boundary seen */
	uint64_t	 cur;		/* LF/NUL: bytes since boundary or blind */
	uint64_t	 body_left;	/* OCTET: in the current body */
	uint64_t	 hdr_len;	/* OCTET: LEN so far */
	unsigned	 hdr_digits;
	uint64_t	 blind;		/* LF/NUL bytes skipped blind */
	const char	*why;		/* the error, or NULL */
	uint64_t	 err_offset;
};

/*
 * Start following a stream from its first byte in mode with the limit
 * max_frame (0: the mode's default). Returns 0, or -1 (f untouched) for
 * an unknown mode or a max_frame over ZP_FRAME_MAX.
 */
int	zp_framer_init(struct zp_framer *f, enum zp_framing mode,
	    uint64_t max_frame);

/*
 * Follow a stream again from stream offset `offset`, in kind (LF, OCTET or
 * NUL), with the limit max_frame (0: the kind's default): for a data path
 * that kept no track of the bytes before it (a move to another upstream
 * re-reads what its pipe held). at_boundary says whether offset is known
 * to be a boundary; for LF and NUL it may be 0 (the framer is then blind:
 * the next delimiter is the first boundary), for OCTET it must be 1. The
 * frame count starts again at 0. Returns 0, or -1 (f untouched) for
 * another kind, an OCTET stream not at a boundary, or a max_frame over
 * ZP_FRAME_MAX.
 */
int	zp_framer_resume(struct zp_framer *f, enum zp_framing kind,
	    uint64_t max_frame, uint64_t offset, int at_boundary);

/*
 * The next len bytes of the stream, seen: the framer advances over all of
 * them. Returns the offset in buf just past the last boundary reached
 * within buf (1..len), or 0 when none was (a boundary the framer stood
 * at before the call does not count). A caller can cut buf there: what
 * comes before is whole frames. Boundaries before an error found within
 * buf count; after it, none.
 */
size_t	zp_framer_feed(struct zp_framer *f, const void *buf, size_t len);

/*
 * For a data path that splices OCTET bodies: buf holds bytes peeked from
 * the stream, a header and maybe what follows it. Feeds buf only up to
 * the end of the current header, the SP included, and returns how many
 * bytes it took; the caller takes exactly those from the socket and then
 * splices zp_framer_body_left() bytes. All of buf is taken when it holds
 * only (part of) a header; on an error, up to the byte that showed it.
 * Outside a header (a boundary is the start of one), after an error and
 * in the other modes it is zp_framer_feed() that returns how many bytes
 * it took, i.e. len. In AUTO the first byte decides, as for feed.
 */
size_t	zp_framer_feed_header(struct zp_framer *f, const void *buf,
	    size_t len);

/*
 * n bytes of the stream passed blind. OCTET: n may be up to
 * zp_framer_body_left(); skipping the last body byte completes the frame
 * and reaches a boundary. LF, NUL (AUTO once decided): any n; n > 0 makes
 * the framer blind (see above). NONE, and after an error: the bytes are
 * counted, nothing else. Returns 0, or -1 when the skip cannot be
 * followed: OCTET bytes outside a body (or more than the body has), or
 * an AUTO stream whose first byte is skipped unseen; the framer is then
 * in error at the first byte that could not be followed. n == 0 does
 * nothing.
 */
int	zp_framer_skip(struct zp_framer *f, uint64_t n);

/*
 * Without changing f: given the next len bytes of the stream, how many of
 * them take it to its next boundary (the end of the frame being read, or
 * of the next one when f is at a boundary): 1..len, or 0 when that
 * boundary is not within them, cannot be known (NONE) or an error comes
 * first. Only as many bytes are looked at as feed would: none of an
 * OCTET body.
 */
size_t	zp_framer_next(const struct zp_framer *f, const void *buf,
	    size_t len);

/* Whether the stream is known to be at a boundary now. */
int	zp_framer_at_boundary(const struct zp_framer *f);

/* Frames completed (their end seen); exact when zp_framer_blind() is 0. */
uint64_t zp_framer_frames(const struct zp_framer *f);

/* Bytes passed so far, seen or blind: the stream offset of the next. */
uint64_t zp_framer_offset(const struct zp_framer *f);

/* The stream offset of the last boundary seen (0 at first). */
uint64_t zp_framer_boundary(const struct zp_framer *f);

/* OCTET: body bytes left in the current frame (0 outside a body). */
uint64_t zp_framer_body_left(const struct zp_framer *f);

/* LF, NUL: bytes skipped blind so far. */
uint64_t zp_framer_blind(const struct zp_framer *f);

/* The framing in effect: AUTO until the first byte, then LF or OCTET. */
enum zp_framing zp_framer_kind(const struct zp_framer *f);

/* The limit in effect; 0 while AUTO with the default is undecided. */
uint64_t zp_framer_max(const struct zp_framer *f);

/*
 * NULL, or why the framing failed (a short static string) with the stream
 * offset of the byte that showed it in *offset (when offset is not NULL).
 */
const char *zp_framer_error(const struct zp_framer *f, uint64_t *offset);

/* The mode a name ("none", "lf", "octet", "auto", "nul") means, or -1. */
int	zp_framing_parse(const char *name);

/* "none", "lf", "octet", "auto", "nul"; "?" for anything else. */
const char *zp_framing_name(enum zp_framing mode);

#endif
