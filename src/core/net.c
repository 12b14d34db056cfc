/*
 * net.c - listening sockets, addresses and outgoing connects. See net.h.
 */

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <arpa/inet.h>
/*
 * The kernel's struct tcp_info, not glibc's (netinet/tcp.h), which stops
 * before tcpi_bytes_acked: the field is read by name, not by an offset
 * guessed past glibc's end.
 */
#include <linux/tcp.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/log.h"
#include "core/net.h"

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
	int		 domain = 0, type = 0, proto = 0, listening = 0;
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
	return zp_net_own(fd, a, err, errlen);
}

int
zp_net_own(int fd, struct zp_addr *a, char *err, size_t errlen)
{
	int	fl;

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

/*
 * Format an address; a v4-mapped IPv6 address (a client of a dual-stack
 * listener) is shown as the IPv4 address it is.
 */
const char *
zp_addr_str(const struct zp_addr *a, char *buf, size_t len)
{
	const struct sockaddr_in	*sin = (const void *)&a->ss;
	const struct sockaddr_in6	*sin6 = (const void *)&a->ss;
	const unsigned char		*v4 = zp_addr_v4(a);
	char				 host[INET6_ADDRSTRLEN];

	if (v4 != NULL) {
		inet_ntop(AF_INET, v4, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(a->ss.ss_family ==
		    AF_INET ? sin->sin_port : sin6->sin6_port));
	} else if (a->ss.ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &sin6->sin6_addr, host, sizeof(host));
		snprintf(buf, len, "[%s]:%u", host, ntohs(sin6->sin6_port));
	} else
		snprintf(buf, len, "?");
	return buf;
}

/* The IPv4 bytes of an address, v4-mapped or not; see net.h. */
const unsigned char *
zp_addr_v4(const struct zp_addr *a)
{
	const struct sockaddr_in	*sin = (const void *)&a->ss;
	const struct sockaddr_in6	*sin6 = (const void *)&a->ss;

	if (a->ss.ss_family == AF_INET)
		return (const unsigned char *)&sin->sin_addr;
	if (a->ss.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr))
		return &sin6->sin6_addr.s6_addr[12];
	return NULL;
}

/* A v4-mapped address as the AF_INET one it is; see net.h. */
void
zp_addr_unmap(struct zp_addr *a)
{
	const struct sockaddr_in6	*sin6 = (const void *)&a->ss;
	const unsigned char		*v4 = zp_addr_v4(a);
	struct sockaddr_in		 sin;

	if (v4 == NULL || a->ss.ss_family != AF_INET6)
		return;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = sin6->sin6_port;
	memcpy(&sin.sin_addr, v4, 4);
	memset(&a->ss, 0, sizeof(a->ss));
	memcpy(&a->ss, &sin, sizeof(sin));
	a->len = sizeof(sin);
}

/*
 * Bind a fresh socket to src before its connect. Port 0 with
 * IP_BIND_ADDRESS_NO_PORT: the port is chosen at connect(), per
 * destination, so that one source address serves as many connections as
 * the ephemeral range allows towards each upstream, not in all (a plain
 * bind to port 0 would reserve a port for good). transparent: src need
 * not be this host's (IP_TRANSPARENT, IPV6_TRANSPARENT), for --source
 * client; the option is what lets the kernel route a SYN from a foreign
 * source at all (IP_FREEBIND only lets bind() take the address).
 */
int
zp_net_bind_source(int fd, const struct zp_addr *src, int transparent)
{
	int	on = 1;

	if (transparent && (src->ss.ss_family == AF_INET6 ?
	    setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &on, sizeof(on)) :
	    setsockopt(fd, SOL_IP, IP_TRANSPARENT, &on, sizeof(on))) == -1)
		return -1;
	/* Older kernels lack it (4.2): bind() then takes a port itself. */
	(void)setsockopt(fd, SOL_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on));
	return bind(fd, (const struct sockaddr *)&src->ss, src->len);
}

/* Start a non-blocking connect, from src when given. */
int
zp_connect_start_from(const struct zp_addr *a, const struct zp_addr *src,
    int transparent, int *fdp)
{
	struct sockaddr_storage	peer;
	socklen_t		plen = sizeof(peer);
	int			fd, err;

	fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, IPPROTO_TCP);
	if (fd == -1)
		return -1;
	if (src != NULL && zp_net_bind_source(fd, src, transparent) == -1)
		goto fail;
	if (connect(fd, (const struct sockaddr *)&a->ss, a->len) == 0) {
		*fdp = fd;
		return 0;
	}
	if (errno == EINPROGRESS || errno == EINTR) {
		*fdp = fd;
		/*
		 * To an address of this host the handshake is over already:
		 * the kernel ran the SYN-ACK when connect() let go of the
		 * socket. getpeername() says so (ENOTCONN while SYN_SENT or
		 * refused), and saves an event add, a wake-up, a delete and
		 * an SO_ERROR per connection; to a remote host it costs one
		 * failing call.
		 */
		if (getpeername(fd, (struct sockaddr *)&peer, &plen) == 0)
			return 0;
		return 1;
	}
fail:
	err = errno;
	close(fd);
	errno = err;
	return -1;
}

/* Start a non-blocking connect from wherever the kernel picks. */
int
zp_connect_start(const struct zp_addr *a, int *fdp)
{
	return zp_connect_start_from(a, NULL, 0, fdp);
}

/*
 * The address to connect to `to` from, for a source `from` (--source
 * ADDR, or a client's address): from with port 0, in the family of the
 * socket that to needs. A v4-mapped from (a client of a dual-stack
 * listener) is the IPv4 address it maps; a v4-mapped to is reached from
 * an IPv4 source mapped in turn. Returns 0, or -1 when the families
 * differ: an IPv4 source cannot reach an IPv6 upstream, nor the reverse.
 */
int
zp_source_for(const struct zp_addr *from, const struct zp_addr *to,
    struct zp_addr *out)
{
	const struct sockaddr_in6	*f6 = (const void *)&from->ss;
	struct sockaddr_in		*o4 = (void *)&out->ss;
	struct sockaddr_in6		*o6 = (void *)&out->ss;
	const unsigned char		*v4 = zp_addr_v4(from); /* if IPv4 */
	int				 to4 = zp_addr_v4(to) != NULL;

	if (v4 == NULL && from->ss.ss_family != AF_INET6)
		return -1;
	if ((v4 != NULL) != to4)
		return -1;
	memset(out, 0, sizeof(*out));
	if (v4 != NULL && to->ss.ss_family == AF_INET) {
		o4->sin_family = AF_INET;
		memcpy(&o4->sin_addr, v4, 4);
		out->len = sizeof(*o4);
	} else {
		o6->sin6_family = AF_INET6;
		if (v4 != NULL) {
			o6->sin6_addr.s6_addr[10] = 0xff;
			o6->sin6_addr.s6_addr[11] = 0xff;
			memcpy(&o6->sin6_addr.s6_addr[12], v4, 4);
		} else {
			o6->sin6_addr = f6->sin6_addr;
			o6->sin6_scope_id = f6->sin6_scope_id;
		}
		out->len = sizeof(*o6);
	}
	return 0;
}

/* Check that --source can work, at start-up. */
int
zp_source_check(const struct zp_config *cfg, int after, char *err,
    size_t errlen)
{
	static const int	 fams[] = { AF_INET, AF_INET6 };
	const struct zp_addr	*a = &cfg->source_addr;
	char			 host[INET6_ADDRSTRLEN] = "?";
	size_t			 i;
	int			 fd, rc, on = 1;

	switch (cfg->source) {
	case ZP_SOURCE_ADDR:
		if (after)
			return 0;
		if (a->ss.ss_family == AF_INET)
			inet_ntop(AF_INET, &((const struct sockaddr_in *)
			    (const void *)&a->ss)->sin_addr, host,
			    sizeof(host));
		else
			inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)
			    (const void *)&a->ss)->sin6_addr, host,
			    sizeof(host));
		fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC,
		    IPPROTO_TCP);
		if (fd == -1) {
			zp_seterr(err, errlen, "--source %s: socket: %s", host,
			    strerror(errno));
			return ZP_EX_OSERR;
		}
		rc = zp_net_bind_source(fd, a, 0);
		if (rc == -1)
			zp_seterr(err, errlen, "--source %s: cannot bind to it: "
			    "%s%s", host, strerror(errno), errno ==
			    EADDRNOTAVAIL ? " (this host has no such address)" :
			    "");
		close(fd);
		return rc == -1 ? ZP_EX_OSERR : 0;
	case ZP_SOURCE_CLIENT:
		for (i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
			fd = socket(fams[i], SOCK_STREAM | SOCK_CLOEXEC,
			    IPPROTO_TCP);
			/* No IPv6 here: no IPv6 client to speak for either. */
			if (fd == -1 && fams[i] == AF_INET6 &&
			    errno == EAFNOSUPPORT)
				continue;
			if (fd == -1) {
				zp_seterr(err, errlen, "--source client: "
				    "socket: %s", strerror(errno));
				return ZP_EX_OSERR;
			}
			rc = fams[i] == AF_INET6 ?
			    setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &on,
			    sizeof(on)) : setsockopt(fd, SOL_IP,
			    IP_TRANSPARENT, &on, sizeof(on));
			if (rc == -1)
				zp_seterr(err, errlen, "--source client needs "
				    "CAP_NET_ADMIN or CAP_NET_RAW%s (%s: %s)",
				    after ? ", kept after the drop to --user" :
				    "", fams[i] == AF_INET6 ?
				    "IPV6_TRANSPARENT" : "IP_TRANSPARENT",
				    strerror(errno));
			close(fd);
			if (rc == -1)
				return ZP_EX_NOPERM;
		}
		return 0;
	}
	return 0;
}

/* The outcome of a connect whose write event fired. */
int
zp_connect_result(int fd, short what)
{
	socklen_t	len = sizeof(int);
	int		err = 0;

	if (what & EV_TIMEOUT)
		return ETIMEDOUT;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		return errno;
	return err;
}

/*
 * Whether a connect error is this host's shortage, not the upstream's.
 * EADDRNOTAVAIL from connect() on Linux means that no ephemeral port is
 * free towards that address (connect(2)): ports run out here, whatever
 * the upstream does; EADDRINUSE is the same shortage met by the bind()
 * of --source on a kernel without IP_BIND_ADDRESS_NO_PORT. These errors come and go with load, so a connect
 * that meets one is retried, not failed over.
 */
int
zp_connect_local_error(int err)
{
	switch (err) {
	case EMFILE:
	case ENFILE:
	case ENOBUFS:
	case ENOMEM:
	case EADDRNOTAVAIL:
	case EADDRINUSE:
		return 1;
	}
	return 0;
}

ssize_t
zp_sock_drop(int fd, size_t max)
{
	/*
	 * Never written (MSG_TRUNC): a valid buffer of max bytes only so
	 * that a memory checker does not take NULL for a bad one.
	 */
	char	buf[ZP_DROP_CHUNK];

	if (max > sizeof(buf))
		max = sizeof(buf);
	return recv(fd, buf, max, MSG_TRUNC | MSG_DONTWAIT);
}

int
zp_sock_drain(int fd, int passes, uint64_t *dropped)
{
	ssize_t	n;
	int	i;

	for (i = 0; i < passes; i++) {
		if ((n = zp_sock_drop(fd, ZP_DROP_CHUNK)) > 0) {
			if (dropped != NULL)
				*dropped += (uint64_t)n;
			continue;
		}
		if (n == 0)
			return 1;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -1;
	}
	return 0;
}

int
zp_sock_outq(int fd)
{
	int	n = 0;

	return ioctl(fd, SIOCOUTQ, &n) == -1 ? -1 : n;
}

int
zp_sock_roomy(int fd)
{
	int		sndbuf = 0, outq;
	socklen_t	len = sizeof(sndbuf);

	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) == -1 ||
	    (outq = zp_sock_outq(fd)) < 0)
		return 0;
	return outq < sndbuf / 4;
}

/*
 * fd's TCP_INFO into ti, of which the kernel must fill need bytes at
 * least (an older one fills less, and says how much: EOPNOTSUPP).
 */
static int
sock_tcp_info(int fd, struct tcp_info *ti, size_t need, socklen_t *got)
{
	socklen_t	len = sizeof(*ti);

	memset(ti, 0, sizeof(*ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, ti, &len) == -1)
		return -1;
	if (len < need) {
		errno = EOPNOTSUPP;
		return -1;
	}
	if (got != NULL)
		*got = len;
	return 0;
}

int
zp_sock_acked(int fd, uint64_t *acked)
{
	struct tcp_info	ti;

	if (sock_tcp_info(fd, &ti, offsetof(struct tcp_info,
	    tcpi_bytes_acked) + sizeof(ti.tcpi_bytes_acked), NULL) == -1)
		return -1;
	*acked = ti.tcpi_bytes_acked > 0 ? ti.tcpi_bytes_acked - 1 : 0;
	return 0;
}

int
zp_sock_load(int fd, struct zp_sock_load *l)
{
	struct tcp_info	ti;
	socklen_t	len;

	if (sock_tcp_info(fd, &ti, offsetof(struct tcp_info,
	    tcpi_rwnd_limited) + sizeof(ti.tcpi_rwnd_limited), &len) == -1)
		return -1;
	l->rwnd_us = ti.tcpi_rwnd_limited;
	l->zero_window = len >= offsetof(struct tcp_info, tcpi_snd_wnd) +
	    sizeof(ti.tcpi_snd_wnd) && ti.tcpi_snd_wnd == 0;
	l->notsent = ti.tcpi_notsent_bytes;
	return 0;
}

int
zp_sock_load_supported(void)
{
	struct zp_sock_load	l;
	int			fd, ok;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return 1;	/* cannot tell: no warning */
	ok = zp_sock_load(fd, &l) == 0 || errno != EOPNOTSUPP;
	close(fd);
	return ok;
}

int
zp_addr_literal(const char *host, const char *port, struct zp_addr *a)
{
	struct sockaddr_in	*s4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6	*s6 = (struct sockaddr_in6 *)&a->ss;
	uint16_t		 p = (uint16_t)atoi(port);

	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons(p);
		a->len = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(p);
		a->len = sizeof(*s6);
		return 0;
	}
	return -1;
}
