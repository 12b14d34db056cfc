/*
 * net.h - listening sockets, made or taken over: the one place that
 * binds them (the relay's listeners and --stats alike) and that checks
 * a socket someone else made (systemd, a zproxy handing over).
 */
#ifndef ZP_NET_H
#define ZP_NET_H

#include <stddef.h>

#include "config.h"

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
 * IP_TRANSPARENT (IPV6_TRANSPARENT on a dual-stack socket, which covers
 * its IPv4 clients too). Returns 0, or -1 with err filled and errno kept.
 */
int	zp_net_transparent(int, int family, char *, size_t);

#endif
