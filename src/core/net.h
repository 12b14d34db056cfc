/*
 * net.h - the network helpers every module uses: listening sockets, made
 * or taken over (the one place that binds them, the relay's listeners and
 * --stats alike, and that checks a socket someone else made: systemd, a
 * zproxy handing over); addresses, formatted and v4-mapped ones told
 * apart; outgoing connects, from a source address or not.
 */
#ifndef ZP_NET_H
#define ZP_NET_H

#include <sys/types.h>
#include <stddef.h>

#include "core/config.h"

/*
 * Bind and listen as spec says (not a systemd spec): ":PORT" is an IPv6
 * dual-stack socket, or IPv4 where there is no IPv6. The socket is
 * non-blocking and close-on-exec, with SO_REUSEADDR; transparent sets
 * IP_TRANSPARENT (--tproxy). what names the socket in messages ("listen",
 * "serve stats"). Returns the descriptor and the bound address (the port
 * the kernel chose for port 0), or -1 with err filled and errno kept
 * (EPERM: transparent without CAP_NET_ADMIN or CAP_NET_RAW).
 */
int	zp_net_listen(const struct zp_listen_spec *, int backlog,
	    int transparent, const char *what, struct zp_addr *, char *,
	    size_t);

/*
 * Take a socket someone else made: it must be a listening TCP socket of
 * AF_INET or AF_INET6. Makes it non-blocking and close-on-exec, and gives
 * its address. Returns 0, or -1 with err filled ("descriptor 3 is not a
 * listening TCP socket (a UDP socket)").
 */
int	zp_net_adopt(int, struct zp_addr *, char *, size_t);

/*
 * What taking any socket made elsewhere needs: non-blocking,
 * close-on-exec, and its address. Returns 0, or -1 with err filled.
 */
int	zp_net_own(int, struct zp_addr *, char *, size_t);

/*
 * IP_TRANSPARENT (IPV6_TRANSPARENT on a dual-stack socket, which covers
 * its IPv4 clients too). Returns 0, or -1 with err filled and errno kept.
 */
int	zp_net_transparent(int, int family, char *, size_t);

/*
 * Bind socket fd to src (port 0: the kernel's at connect, not at bind)
 * before it connects; transparent: src need not be this host's
 * (IP_TRANSPARENT, for --source client). Returns 0, or -1 with errno.
 */
int	zp_net_bind_source(int fd, const struct zp_addr *src, int transparent);

/* Format an address as "1.2.3.4:80" or "[::1]:80" into buf. */
const char *zp_addr_str(const struct zp_addr *, char *, size_t);

/*
 * A numeric IPv4 or IPv6 host and a valid port (as zp_parse_hostport()
 * gave them) into a. Returns 0, or -1 when host is a name (nothing is
 * looked up).
 */
int	zp_addr_literal(const char *host, const char *port, struct zp_addr *);

/*
 * The 4 bytes of an IPv4 address: an AF_INET one's, or a v4-mapped IPv6
 * one's (::ffff:a.b.c.d, as a dual-stack socket shows an IPv4 peer);
 * NULL for any other address.
 */
const unsigned char *zp_addr_v4(const struct zp_addr *);

/* A v4-mapped IPv6 address made the AF_INET address it is; others kept. */
void	zp_addr_unmap(struct zp_addr *);

/*
 * Start a non-blocking TCP connect to a: the first half of
 * zp_connecting_start() (connect.h), which callers use; the spool's
 * connects still call it directly, for now.
 * Returns 1 with *fd set while it is in progress (wait for writable),
 * 0 with *fd set when it is connected already (to a local address it
 * usually is), or -1 with errno set and no descriptor left open.
 */
int	zp_connect_start(const struct zp_addr *, int *fd);

/*
 * The same from a given source address (--source): bound, port 0, before
 * the connect; transparent: src may be foreign (IP_TRANSPARENT, for
 * --source client). A failed bind returns -1 with its errno.
 */
int	zp_connect_start_from(const struct zp_addr *,
	    const struct zp_addr *src, int transparent, int *fd);

/*
 * The bind address for connecting to `to` from `from` (port 0, v4-mapped
 * addresses unmapped or mapped to fit to's socket). Returns 0, or -1 when
 * the families differ (the address is skipped).
 */
int	zp_source_for(const struct zp_addr *from, const struct zp_addr *to,
	    struct zp_addr *out);

/*
 * Start-up check of --source, before the drop of privileges (and again
 * after it, with after set): ADDR must be this host's (a probe bind;
 * ZP_EX_OSERR if not, as for -l); client needs IP_TRANSPARENT to work
 * (ZP_EX_NOPERM if not), in both families where the host has IPv6.
 * Returns 0, or an exit status with err filled.
 */
int	zp_source_check(const struct zp_config *, int after, char *err,
	    size_t errlen);

/*
 * The outcome of a connect whose one-shot write event (with a timeout)
 * fired: 0 when connected, else the errno (ETIMEDOUT on the timeout).
 */
int	zp_connect_result(int fd, short what);

/*
 * Whether a connect error (from socket(), connect() or SO_ERROR) is this
 * host's shortage rather than the upstream's fault: out of descriptors
 * (EMFILE, ENFILE), of kernel memory (ENOBUFS, ENOMEM) or of local ports
 * (EADDRNOTAVAIL, EADDRINUSE). Such an error never counts against an upstream.
 */
int	zp_connect_local_error(int err);

/*
 * Read at most max bytes from a non-blocking socket and throw them away:
 * MSG_TRUNC makes TCP drop them without copying. Each call takes at most
 * ZP_DROP_CHUNK. Returns what recv(2) returns.
 */
#define ZP_DROP_CHUNK	(256 * 1024)
ssize_t	zp_sock_drop(int fd, size_t max);

/*
 * The one read-and-drop loop: what a non-blocking socket holds is read
 * and thrown away, in at most `passes` calls of zp_sock_drop() (a peer
 * that talks fast must not hold an event loop), adding what was dropped
 * to *dropped when it is not NULL. Returns 1 at the peer's EOF, 0 when
 * nothing more is there now or the bound was reached (the level-
 * triggered read event comes back for the rest), -1 with errno on an
 * error (ECONNRESET...).
 */
#define ZP_DRAIN_PASSES	4
int	zp_sock_drain(int fd, int passes, uint64_t *dropped);

/*
 * Bytes of a socket's send queue its peer has not acknowledged yet
 * (SIOCOUTQ; a FIN we queued counts one), or -1 with errno.
 */
int	zp_sock_outq(int fd);

/*
 * Has socket fd room to take a small write whole, now: its queue under
 * a quarter of its buffer (SO_SNDBUF, which the kernel doubled for its
 * own overhead)? 0 when it cannot be told.
 */
int	zp_sock_roomy(int fd);

/*
 * What the kernel says of a TCP socket's sending (TCP_INFO, 4.10 and
 * later): the time its peer's receive window held data back, and the
 * bytes queued not sent yet.
 */
struct zp_sock_load {
	uint64_t	rwnd_us;	/* tcpi_rwnd_limited, over its life */
	uint32_t	notsent;	/* tcpi_notsent_bytes */
	int		zero_window;	/* the peer's window is 0 now
					   (tcpi_snd_wnd; 5.4 and later) */
};

/* Fill *l for fd: 0, or -1 (errno; EOPNOTSUPP: a kernel before them). */
int	zp_sock_load(int fd, struct zp_sock_load *l);

/* Does this kernel give zp_sock_load's figures (a TCP socket asked)? */
int	zp_sock_load_supported(void);

/*
 * Bytes of data its peer acknowledged over a TCP socket's life
 * (TCP_INFO's tcpi_bytes_acked, less the SYN; a FIN acknowledged counts
 * one), in *acked: 0, or -1 (errno; EOPNOTSUPP when the kernel is older
 * than the field).
 */
int	zp_sock_acked(int fd, uint64_t *acked);

#endif
