/*
 * net.c - listening sockets, made or taken over. See net.h.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "net.h"

int
zp_net_transparent(int fd, int family, char *err, size_t errlen)
{
	const char	*name = family == AF_INET6 ? "IPV6_TRANSPARENT" :
			    "IP_TRANSPARENT";
	int		 on = 1, rc, saved;

	if (family == AF_INET6)
		rc = setsockopt(fd, IPPROTO_IPV6, IPV6_TRANSPARENT, &on,
		    sizeof(on));
	else
		rc = setsockopt(fd, IPPROTO_IP, IP_TRANSPARENT, &on,
		    sizeof(on));
	if (rc == 0)
		return 0;
	saved = errno;
	if (saved == EPERM)
		snprintf(err, errlen, "--tproxy needs CAP_NET_ADMIN or "
		    "CAP_NET_RAW (%s: %s)", name, strerror(saved));
	else
		snprintf(err, errlen, "--tproxy: %s: %s", name,
		    strerror(saved));
	errno = saved;
	return -1;
}

/* A socket of this family, non-blocking and close-on-exec. */
static int
net_socket(int family)
{
	return socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    IPPROTO_TCP);
}

int
zp_net_listen(const struct zp_listen_spec *spec, int backlog,
    int transparent, const char *what, struct zp_addr *bound, char *err,
    size_t errlen)
{
	struct zp_addr	a;
	char		abuf[ZP_ADDRSTRLEN];
	int		fd = -1, on = 1, off = 0, saved;

	memset(&a, 0, sizeof(a));
	if (spec->any) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&a.ss;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_addr = in6addr_any;
		sin6->sin6_port = htons(spec->port);
		a.len = sizeof(*sin6);
		fd = net_socket(AF_INET6);
		if (fd != -1 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off,
		    sizeof(off)) == -1) {
			close(fd);
			fd = -1;
		}
		if (fd == -1) {
			/* No IPv6 here: every IPv4 address, then. */
			struct sockaddr_in *sin = (struct sockaddr_in *)&a.ss;

			memset(&a, 0, sizeof(a));
			sin->sin_family = AF_INET;
			sin->sin_addr.s_addr = htonl(INADDR_ANY);
			sin->sin_port = htons(spec->port);
			a.len = sizeof(*sin);
		}
	} else
		a = spec->addr;
	if (fd == -1)
		fd = net_socket(a.ss.ss_family);
	zp_addr_str(&a, abuf, sizeof(abuf));
	if (fd == -1) {
		saved = errno;
		snprintf(err, errlen, "cannot %s on %s: socket: %s", what,
		    abuf, strerror(saved));
		errno = saved;
		return -1;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	if (transparent && zp_net_transparent(fd, a.ss.ss_family, err,
	    errlen) == -1)
		goto fail;
	/* The kernel caps the backlog at net.core.somaxconn. */
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) == -1 ||
	    listen(fd, backlog) == -1) {
		saved = errno;
		snprintf(err, errlen, "cannot %s on %s: %s", what, abuf,
		    strerror(saved));
		errno = saved;
		goto fail;
	}
	a.len = sizeof(a.ss);
	if (getsockname(fd, (struct sockaddr *)&a.ss, &a.len) == -1) {
		saved = errno;
		snprintf(err, errlen, "getsockname: %s", strerror(saved));
		errno = saved;
		goto fail;
	}
	*bound = a;
	return fd;
fail:
	saved = errno;
	close(fd);
	errno = saved;
	return -1;
}

/* What a socket is, for the message that says it is not what we need. */
static const char *
net_kind(int domain, int type, int proto, int listening)
{
	if (domain == AF_UNIX)
		return "a Unix socket";
	if (domain != AF_INET && domain != AF_INET6)
		return "not an IP socket";
	if (type == SOCK_DGRAM || proto == IPPROTO_UDP)
		return "a UDP socket";
	if (type != SOCK_STREAM || proto != IPPROTO_TCP)
		return "not a TCP socket";
	if (!listening)
		return "a TCP socket that is not listening";
	return NULL;
}

int
zp_net_adopt(int fd, struct zp_addr *a, char *err, size_t errlen)
{
	int		 domain = 0, type = 0, proto = 0, listening = 0, fl;
	socklen_t	 len;
	const char	*kind;

	len = sizeof(domain);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1) {
		snprintf(err, errlen, "descriptor %d is not a listening TCP "
		    "socket (%s)", fd, errno == ENOTSOCK ? "not a socket" :
		    strerror(errno));
		return -1;
	}
	len = sizeof(type);
	(void)getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len);
	len = sizeof(proto);
	(void)getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len);
	len = sizeof(listening);
	(void)getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
	if ((kind = net_kind(domain, type, proto, listening)) != NULL) {
		snprintf(err, errlen, "descriptor %d is not a listening TCP "
		    "socket (%s)", fd, kind);
		return -1;
	}
	/* systemd passes blocking sockets unless NonBlocking=yes. */
	if ((fl = fcntl(fd, F_GETFL)) == -1 ||
	    fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1 ||
	    fcntl(fd, F_SETFD, FD_CLOEXEC) == -1) {
		snprintf(err, errlen, "descriptor %d: fcntl: %s", fd,
		    strerror(errno));
		return -1;
	}
	memset(a, 0, sizeof(*a));
	a->len = sizeof(a->ss);
	if (getsockname(fd, (struct sockaddr *)&a->ss, &a->len) == -1) {
		snprintf(err, errlen, "descriptor %d: getsockname: %s", fd,
		    strerror(errno));
		return -1;
	}
	return 0;
}
