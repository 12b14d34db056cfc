/*
 * dgram.h - a syslog datagram (RFC 5426) as one frame of a framed stream
 * (framing.h), for UDP sources relayed over TCP (issue 28): octet
 * counting (RFC 6587 3.4.1, "LEN SP MSG": any byte is carried as it is)
 * or LF (3.4.2: the message and a '\n'). Under LF a '\n' inside the
 * datagram is written as "#012", rsyslog's escape of control characters,
 * so that a datagram is always one line: never merged with the next,
 * never split; a '\n' that ends the datagram ends the frame. Either way a
 * datagram is one frame, whole, in order. Pure: no I/O, no allocation.
 */
#ifndef ZP_DGRAM_H
#define ZP_DGRAM_H

#include <stddef.h>

#include "lib/framing.h"

/* The largest UDP payload: 65,535 less the UDP header (IPv6, no jumbo). */
#define ZP_DGRAM_MAX		65527
/* "#012": what a '\n' inside a datagram becomes under LF. */
#define ZP_DGRAM_NL_ESC		"#012"
/*
 * The longest frame a datagram of len bytes can make: LF, every byte a
 * '\n' escaped (4 each) and one added; octet, its header.
 */
#define ZP_DGRAM_FRAME_MAX(len)	(4 * (size_t)(len) + ZP_OCTET_HDR_MAX + 1)

/*
 * The framing of a UDP source's stream: LF under --framing lf, OCTET for
 * anything else (none, octet, auto, nul): a datagram is a message whatever
 * the TCP listeners' framing.
 */
enum zp_framing zp_dgram_framing(enum zp_framing configured);

/*
 * The frame of datagram d (len bytes, 1 to ZP_DGRAM_MAX) in framing (LF
 * or OCTET) into out, which has room for ZP_DGRAM_FRAME_MAX(len) bytes.
 * Returns the frame's length; *escaped (when not NULL) gets the number of
 * '\n' written as "#012" (LF; 0 for OCTET). 0 for len 0 (an empty
 * datagram makes no frame) or over ZP_DGRAM_MAX. A datagram of one '\n'
 * is an empty line (a frame of that one byte). Escapes can take an LF
 * frame past the stream's --max-frame (64K by default, 4 times as much
 * at worst): the caller counts that datagram as a framing error, and its
 * stream's framer must take frames up to ZP_DGRAM_FRAME_MAX(ZP_DGRAM_MAX).
 */
size_t	zp_dgram_frame(const void *d, size_t len, enum zp_framing framing,
	    void *out, size_t *escaped);

/* The same frame's length, without writing it. */
size_t	zp_dgram_frame_len(const void *d, size_t len,
	    enum zp_framing framing, size_t *escaped);

#endif
