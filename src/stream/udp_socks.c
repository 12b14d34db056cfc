/*
 * udp_socks.c - the root's list of UDP sockets: filled at start-up, said
 * in the listening line, asked by the takeover, freed at the end. See
 * udp_socks.h.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/net.h"
#include "relay/ctx.h"
#include "stream/udp.h"
#include "stream/udp_socks.h"

int
zp_udp_add(struct zp_ctx *root, int fd, int listen, const char *label,
    const struct zp_addr *bound)
{
	struct zp_udp_socks	*us;

	if (root->udp_socks == NULL &&
	    (root->udp_socks = calloc(1, sizeof(*root->udp_socks))) == NULL) {
		close(fd);
		return -1;
	}
	us = root->udp_socks;
	if (us->n == ZP_MAX_LISTEN_SOCKETS) {
		close(fd);
		return -1;
	}
	us->s[us->n].fd = fd;
	us->s[us->n].listen = listen;
	us->s[us->n].addr = *bound;
	snprintf(us->s[us->n].label, sizeof(us->s[us->n].label), "%s", label);
	us->n++;
	return 0;
}

int
zp_udp_any(const struct zp_ctx *root)
{
	return root->udp_socks != NULL && root->udp_socks->n > 0;
}

size_t
zp_udp_str(const struct zp_ctx *root, char *buf, size_t len, size_t off)
{
	const struct zp_udp_socks	*us = root->udp_socks;
	char				 abuf[ZP_ADDRSTRLEN];
	size_t				 i, j, n;

	for (i = 0; us != NULL && i < us->n && off < len; i++) {
		for (j = 0; j < i && us->s[j].listen != us->s[i].listen; j++)
			;
		if (j < i)
			continue;	/* said with its first socket */
		for (j = i, n = 0; j < us->n; j++)
			n += us->s[j].listen == us->s[i].listen;
		off += (size_t)snprintf(buf + off, len - off, "%sudp@%s (%zu "
		    "socket%s%s%s)", off > 0 ? ", " : "",
		    zp_addr_str(&us->s[i].addr, abuf, sizeof(abuf)), n,
		    n == 1 ? "" : "s", strncmp(us->s[i].label, "systemd", 7) ==
		    0 ? ", " : "", strncmp(us->s[i].label, "systemd", 7) == 0 ?
		    us->s[i].label : "");
	}
	return off;
}

int
zp_udp_listening(const struct zp_ctx *root, int listen)
{
	size_t	i;

	for (i = 0; root->udp_socks != NULL && i < root->udp_socks->n; i++)
		if (root->udp_socks->s[i].listen == listen)
			return 1;
	return 0;
}

size_t
zp_udp_sockets(const struct zp_ctx *root, int *fds, const char **labels,
    size_t max)
{
	size_t	i;

	for (i = 0; root->udp_socks != NULL && i < root->udp_socks->n &&
	    i < max; i++) {
		fds[i] = root->udp_socks->s[i].fd;
		labels[i] = root->udp_socks->s[i].label;
	}
	return i;
}

void
zp_udp_socks_free(struct zp_ctx *root)
{
	size_t	i;

	/* Start-up failed before every reader took its socket. */
	for (i = 0; root->udp_socks != NULL && i < root->udp_socks->n; i++)
		if (!root->udp_socks->s[i].owned)
			close(root->udp_socks->s[i].fd);
	free(root->udp_socks);
	root->udp_socks = NULL;
}
