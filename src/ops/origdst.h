/*
 * origdst.h - the destination a client meant, and whether connecting
 * there would come back to zproxy: the `-u original` upstream.
 *
 * Under --tproxy the accepted socket's own address is the destination
 * (nothing was rewritten); after an nft `redirect` (iptables REDIRECT)
 * conntrack holds it, asked with SO_ORIGINAL_DST.
 */
#ifndef ZP_ORIGDST_H
#define ZP_ORIGDST_H

#include "core/config.h"

/*
 * The original destination of an accepted socket into dst, a v4-mapped
 * address made IPv4: getsockname() when tproxy, else SO_ORIGINAL_DST
 * (IP6T_SO_ORIGINAL_DST for an IPv6 client). Returns 1 when it is a
 * destination of the client's own (diverted or redirected), 0 when the
 * connection was not redirected (dst is then getsockname(): zproxy's own
 * address), or -1 with errno set.
 */
int	zp_origdst_get(int fd, int tproxy, struct zp_addr *dst);

/*
 * Would connecting to dst reach the listener bound at listen? When the
 * port is the listener's and the address is the listener's, or, for a
 * wildcard listener (0.0.0.0, or [::] which takes IPv4 too), any address
 * of this host. Whether an address is this host's is asked of the kernel:
 * bind(2) takes only a local one. Returns 1 (a loop, or it cannot tell),
 * or 0.
 */
int	zp_origdst_loops(const struct zp_addr *dst, const struct zp_addr *listen);

#endif
