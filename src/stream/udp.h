/*
 * udp.h - syslog over UDP (-l udp@): datagrams in, each one message of a
 * framed stream, one stream per source address, kept for --udp-idle.
 *
 * Every thread reads a socket of its own (core/udpsock.h: one group,
 * steered by source address, so a device always reaches one thread) with
 * recvmmsg. A source's stream is a pair like any other (pair.h,
 * zp_pair_start_dgram) whose client is one end of a Unix socket pair:
 * this module writes each datagram into the other end as one frame
 * (lib/dgram.h), and reads and drops what the collector sends back.
 * The pair does the rest as for a TCP client: the connect, --send-proxy
 * (the device's address), --source client, moves at message boundaries,
 * the replay window, the spool, the mirrors, the metrics.
 *
 * Nothing a socket handed over is dropped here: what a source's socket
 * pair cannot take now waits in that source's buffer, and while the
 * thread's buffers hold more than ZP_UDP_PENDING_MAX, the thread stops
 * reading its socket (the kernel's queue holds the rest, and counts what
 * it drops: zproxy_udp_dropped_total{reason="rcvbuf"}). A stream ends
 * losslessly: after --udp-idle without a datagram, or at the drain, its
 * socket pair is shut for writing once its buffer is written, so the
 * pair sees its client's FIN after the last frame.
 */
#ifndef ZP_UDP_H
#define ZP_UDP_H

#include <stddef.h>

struct zp_ctx;
struct zp_addr;

/* A thread stops reading while its sources' buffers hold more. */
#define ZP_UDP_PENDING_MAX	(16 * 1024 * 1024)

/*
 * The root, at start-up: UDP socket fd of -l number `listen` (label: as
 * given, for the takeover and the log), bound to *bound. Takes fd, also
 * on failure. Returns 0, or -1 (too many sockets, no memory).
 */
int	zp_udp_add(struct zp_ctx *root, int fd, int listen, const char *label,
	    const struct zp_addr *bound);

/*
 * The root, once the threads' contexts are made (zp_workers_new) and
 * before they run: every socket added gets its reader on a thread (the
 * i-th socket of a -l on thread i modulo the threads), which owns it
 * from then on. Returns 0, or -1 with err filled.
 */
int	zp_udp_attach(struct zp_ctx *root, char *err, size_t errlen);

/*
 * The root: the UDP sockets, for a takeover's offer: up to max
 * descriptors into fds and their labels. Returns how many.
 */
size_t	zp_udp_sockets(const struct zp_ctx *root, int *fds,
	    const char **labels, size_t max);

/*
 * The UDP listeners for the start-up line, appended to buf at off:
 * ", udp@ADDR (N sockets)" each, a systemd one's label after it. Returns
 * the new off (as snprintf counts).
 */
size_t	zp_udp_str(const struct zp_ctx *root, char *buf, size_t len,
	    size_t off);

/* Has the root any UDP socket; has -l number listen one? */
int	zp_udp_any(const struct zp_ctx *root);
int	zp_udp_listening(const struct zp_ctx *root, int listen);

/*
 * ctx's thread, the drain: read what waits in its sockets, close them,
 * and end every source's stream losslessly.
 */
void	zp_udp_stop(struct zp_ctx *);

/* ctx's thread, the end: free its readers and sources. */
void	zp_udp_free(struct zp_ctx *);

/* The root's list of sockets, at the end (after every zp_udp_free). */
void	zp_udp_socks_free(struct zp_ctx *root);

#endif
