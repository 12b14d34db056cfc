/*
 * udp_socks.h - the root's list of UDP sockets (issue 28): each one
 * bound for a -l udp@ listener (or passed by systemd, or taken over),
 * read by one thread's reader (udp.c) and handed to a takeover. The
 * functions on it are declared in udp.h; this is the list's shape, for
 * udp.c and udp_socks.c only.
 */
#ifndef ZP_UDP_SOCKS_H
#define ZP_UDP_SOCKS_H

#include <stddef.h>

#include "core/config.h"

/* The root's list of UDP sockets, for the readers and the takeover. */
struct zp_udp_socks {
	size_t		n;
	struct {
		int		fd;
		int		owned;		/* by its reader: closed there */
		int		listen;		/* index in cfg->listens */
		struct zp_addr	addr;
		char		label[ZP_ADDRSTRLEN + ZP_FDNAME_MAX + 8];
	}		s[ZP_MAX_LISTEN_SOCKETS];
};

#endif
