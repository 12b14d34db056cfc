/*
 * udpsock.h - the UDP sockets of -l udp@: one per thread, bound to the
 * same address in one SO_REUSEPORT group whose classic BPF program picks
 * the socket from a hash of the datagram's source address (not the
 * kernel's 4-tuple hash: a device that sends from several ports must
 * reach one thread, and so one stream); each with the receive buffer
 * asked for and the kernel's drop count on every datagram (SO_RXQ_OVFL).
 * No I/O besides the sockets' own set-up: stream/udp.c reads them.
 */
#ifndef ZP_UDPSOCK_H
#define ZP_UDPSOCK_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

/*
 * Make n sockets bound to spec's address (":PORT": IPv6 dual-stack, else
 * IPv4), non-blocking, close-on-exec, with SO_RXQ_OVFL and a receive
 * buffer of rcvbuf bytes: SO_RCVBUFFORCE where permitted, else
 * SO_RCVBUF, which net.core.rmem_max clamps (*clamped set then: the
 * caller says so once). With n > 1 they are one SO_REUSEPORT group,
 * steered by source address: socket i of the group gets the sources
 * whose hash is i modulo n. Port 0 binds them all to the port the first
 * got. Returns 0 with fds[0..n-1] and the bound address, or -1 with err
 * filled (nothing left open) and errno kept.
 */
int	zp_udp_socks(const struct zp_listen_spec *, int n, size_t rcvbuf,
	    int *fds, struct zp_addr *bound, int *clamped, char *err,
	    size_t errlen);

/*
 * Take a UDP socket someone else made (systemd, a zproxy taken over):
 * non-blocking, close-on-exec, SO_RXQ_OVFL, the receive buffer as
 * above (kept when it is larger already). Returns 0 with its address,
 * or -1 with err filled.
 */
int	zp_udp_adopt(int fd, size_t rcvbuf, struct zp_addr *, int *clamped,
	    char *err, size_t errlen);

/* Is fd a UDP socket (SOCK_DGRAM of AF_INET or AF_INET6)? */
int	zp_udp_is(int fd);

/*
 * The datagrams the kernel dropped at fd's receive queue so far
 * (SO_MEMINFO's SK_MEMINFO_DROPS, what SO_RXQ_OVFL reports), or -1.
 */
int64_t	zp_udp_drops(int fd);

#endif
