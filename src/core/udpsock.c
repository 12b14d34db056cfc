/*
 * udpsock.c - the UDP sockets of -l udp@: made, steered, adopted.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/filter.h>
#include <linux/sock_diag.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/net.h"
#include "core/udpsock.h"

/*
 * Classic BPF over the datagram (its data begins after the UDP header;
 * SKF_NET_OFF reaches the IP header): the source address (IPv4's, or the
 * four words of IPv6's folded by XOR), multiplied by a 32-bit golden-ratio
 * constant so that neighbouring addresses spread, its high half taken,
 * modulo n: the index of the socket in the group. A v4-mapped source of
 * a dual-stack socket is an IPv4 packet here, so it hashes as itself.
 */
static int
udp_steer(int fd, int n)
{
	struct sock_filter	 code[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, SKF_NET_OFF + 0),
		/* 1 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf0),
		/* 2 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x60, 2, 0),
		/* 3: IPv4 */
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 12),
		/* 4 */ BPF_JUMP(BPF_JMP | BPF_JA, 10, 0, 0),	/* to 15 */
		/* 5: IPv6 */
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 8),
		/* 6 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
		/* 7 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 12),
		/* 8 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		/* 9 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
		/* 10 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 16),
		/* 11 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		/* 12 */ BPF_STMT(BPF_MISC | BPF_TAX, 0),
		/* 13 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_NET_OFF + 20),
		/* 14 */ BPF_STMT(BPF_ALU | BPF_XOR | BPF_X, 0),
		/* 15: both */
			BPF_STMT(BPF_ALU | BPF_MUL | BPF_K, 0x9e3779b1u),
		/* 16 */ BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 16),
		/* 17 */ BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, (unsigned)n),
		/* 18 */ BPF_STMT(BPF_RET | BPF_A, 0),
	};
	struct sock_fprog	 prog = { sizeof(code) / sizeof(code[0]), code };

	return setsockopt(fd, SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog,
	    sizeof(prog));
}

/*
 * The receive buffer: forced past net.core.rmem_max where the process may
 * (CAP_NET_ADMIN, at start-up), else asked for and clamped. Never made
 * smaller than it is. *clamped: the kernel gave less than asked.
 */
static void
udp_rcvbuf(int fd, size_t want, int *clamped)
{
	int		 v = want > (size_t)(INT32_MAX / 2) ? INT32_MAX / 2 :
			    (int)want, got = 0;
	socklen_t	 len = sizeof(got);

	*clamped = 0;
	/* The kernel reports twice what it was asked (its bookkeeping). */
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 &&
	    got / 2 >= v)
		return;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &v, sizeof(v)) == 0)
		return;
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
	len = sizeof(got);
	if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len) == 0 &&
	    got / 2 < v)
		*clamped = 1;
}

/* What every UDP socket of ours has: drops reported, and the buffer. */
static void
udp_common(int fd, size_t rcvbuf, int *clamped)
{
	int	on = 1;

	(void)setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof(on));
	udp_rcvbuf(fd, rcvbuf, clamped);
}

/* One socket of the group, bound to a (its port filled in once bound). */
static int
udp_bind_one(struct zp_addr *a, int reuseport, char *err, size_t errlen)
{
	char	abuf[ZP_ADDRSTRLEN];
	int	fd, on = 1, off = 0, saved;

	zp_addr_str(a, abuf, sizeof(abuf));
	if ((fd = socket(a->ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, IPPROTO_UDP)) == -1) {
		saved = errno;
		snprintf(err, errlen, "cannot listen on udp@%s: socket: %s",
		    abuf, strerror(saved));
		errno = saved;
		return -1;
	}
	if (a->ss.ss_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off,
		    sizeof(off));
	if ((reuseport && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on,
	    sizeof(on)) == -1) ||
	    bind(fd, (struct sockaddr *)&a->ss, a->len) == -1) {
		saved = errno;
		snprintf(err, errlen, "cannot listen on udp@%s: %s", abuf,
		    strerror(saved));
		close(fd);
		errno = saved;
		return -1;
	}
	a->len = sizeof(a->ss);
	(void)getsockname(fd, (struct sockaddr *)&a->ss, &a->len);
	return fd;
}

/* The address to bind for spec: ":PORT" dual-stack where IPv6 is. */
static void
udp_spec_addr(const struct zp_listen_spec *spec, struct zp_addr *a)
{
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a->ss;
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;
	int			 fd;

	memset(a, 0, sizeof(*a));
	if (!spec->any) {
		*a = spec->addr;
		return;
	}
	if ((fd = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0)) != -1) {
		close(fd);
		sin6->sin6_family = AF_INET6;
		sin6->sin6_addr = in6addr_any;
		sin6->sin6_port = htons(spec->port);
		a->len = sizeof(*sin6);
		return;
	}
	sin->sin_family = AF_INET;
	sin->sin_addr.s_addr = htonl(INADDR_ANY);
	sin->sin_port = htons(spec->port);
	a->len = sizeof(*sin);
}

int
zp_udp_socks(const struct zp_listen_spec *spec, int n, size_t rcvbuf,
    int *fds, struct zp_addr *bound, int *clamped, char *err, size_t errlen)
{
	struct zp_addr	a;
	char		abuf[ZP_ADDRSTRLEN];
	int		i, c, saved;

	udp_spec_addr(spec, &a);
	*clamped = 0;
	for (i = 0; i < n; i++) {
		/* The first bound the port: the others join it. */
		if ((fds[i] = udp_bind_one(&a, n > 1, err, errlen)) == -1)
			goto fail;
		udp_common(fds[i], rcvbuf, &c);
		*clamped |= c;
	}
	if (n > 1 && udp_steer(fds[0], n) == -1) {
		saved = errno;
		snprintf(err, errlen, "udp@%s: SO_ATTACH_REUSEPORT_CBPF: %s",
		    zp_addr_str(&a, abuf, sizeof(abuf)), strerror(saved));
		errno = saved;
		goto fail;
	}
	*bound = a;
	return 0;
fail:
	saved = errno;
	while (--i >= 0)
		close(fds[i]);
	errno = saved;
	return -1;
}

int
zp_udp_is(int fd)
{
	int		domain = 0, type = 0;
	socklen_t	len = sizeof(domain);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == -1)
		return 0;
	len = sizeof(type);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == -1)
		return 0;
	return (domain == AF_INET || domain == AF_INET6) && type == SOCK_DGRAM;
}

int
zp_udp_adopt(int fd, size_t rcvbuf, struct zp_addr *a, int *clamped,
    char *err, size_t errlen)
{
	if (!zp_udp_is(fd)) {
		snprintf(err, errlen, "descriptor %d is not a UDP socket", fd);
		return -1;
	}
	if (zp_net_own(fd, a, err, errlen) == -1)
		return -1;
	udp_common(fd, rcvbuf, clamped);
	return 0;
}

int64_t
zp_udp_drops(int fd)
{
	uint32_t	mem[SK_MEMINFO_VARS];
	socklen_t	len = sizeof(mem);

	if (getsockopt(fd, SOL_SOCKET, SO_MEMINFO, mem, &len) == -1 ||
	    len < sizeof(uint32_t) * (SK_MEMINFO_DROPS + 1))
		return -1;
	return mem[SK_MEMINFO_DROPS];
}
