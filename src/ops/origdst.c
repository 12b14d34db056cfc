/*
 * origdst.c - a client's original destination (getsockname under
 * --tproxy, SO_ORIGINAL_DST after a redirect) and the loop check.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "core/net.h"
#include "ops/origdst.h"

/*
 * <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h> name
 * these; both headers pull in kernel definitions that clash with glibc's.
 */
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST		80	/* SOL_IP */
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST	80	/* SOL_IPV6 */
#endif

static unsigned short	addr_port(const struct zp_addr *);
static int		addr_eq(const struct zp_addr *, const struct zp_addr *);
/* The original destination of an accepted socket. */
int
zp_origdst_get(int fd, int tproxy, struct zp_addr *dst)
{
	struct zp_addr	local;
	socklen_t	len;
	int		rc;

	memset(&local, 0, sizeof(local));
	local.len = sizeof(local.ss);
	if (getsockname(fd, (struct sockaddr *)&local.ss, &local.len) == -1)
		return -1;
	zp_addr_unmap(&local);
	*dst = local;
	if (tproxy)
		return 1;
	/*
	 * The conntrack entry is IPv4 for an IPv4 client, also one of a
	 * dual-stack socket (SOL_IP works on it), IPv6 otherwise. ENOENT:
	 * not tracked, the client came to zproxy itself.
	 */
	memset(dst, 0, sizeof(*dst));
	if (local.ss.ss_family == AF_INET) {
		len = sizeof(struct sockaddr_in);
		rc = getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst->ss, &len);
	} else {
		len = sizeof(struct sockaddr_in6);
		rc = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst->ss,
		    &len);
	}
	if (rc == -1) {
		*dst = local;
		return errno == ENOENT ? 0 : -1;
	}
	dst->len = len;
	zp_addr_unmap(dst);
	/*
	 * Conntrack answers for any tracked connection, NATed or not: an
	 * "original" destination that is our own address was no redirect.
	 */
	if (addr_eq(dst, &local) && addr_port(dst) == addr_port(&local)) {
		*dst = local;
		return 0;
	}
	return 1;
}

/* The port of an IPv4 or IPv6 address, 0 for others. */
static unsigned short
addr_port(const struct zp_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)(const void *)
		    &a->ss)->sin_port);
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)(const void *)
		    &a->ss)->sin6_port);
	return 0;
}

/* Is a (port aside) the unspecified address of its family? */
static int
addr_any(const struct zp_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ((const struct sockaddr_in *)(const void *)
		    &a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)
	    (const void *)&a->ss)->sin6_addr);
}

/* Same family and address, the port aside? */
static int
addr_eq(const struct zp_addr *a, const struct zp_addr *b)
{
	if (a->ss.ss_family != b->ss.ss_family)
		return 0;
	if (a->ss.ss_family == AF_INET)
		return memcmp(&((const struct sockaddr_in *)(const void *)
		    &a->ss)->sin_addr, &((const struct sockaddr_in *)
		    (const void *)&b->ss)->sin_addr, 4) == 0;
	return memcmp(&((const struct sockaddr_in6 *)(const void *)
	    &a->ss)->sin6_addr, &((const struct sockaddr_in6 *)(const void *)
	    &b->ss)->sin6_addr, 16) == 0;
}

/*
 * Is a an address of this host? bind(2) to it (port 0) succeeds only
 * then, without IP_FREEBIND or IP_TRANSPARENT. Returns 1, 0, or -1 when
 * it cannot tell (no descriptor).
 */
static int
addr_local(const struct zp_addr *a)
{
	struct zp_addr	t = *a;
	int		fd, rc, err;

	if (t.ss.ss_family == AF_INET)
		((struct sockaddr_in *)&t.ss)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&t.ss)->sin6_port = 0;
	fd = socket(t.ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		return -1;
	rc = bind(fd, (struct sockaddr *)&t.ss, t.len);
	err = errno;
	close(fd);
	if (rc == 0)
		return 1;
	return err == EADDRNOTAVAIL ? 0 : -1;
}

/* Would connecting to dst reach the listener? */
int
zp_origdst_loops(const struct zp_addr *dst, const struct zp_addr *listen)
{
	struct zp_addr	d = *dst, l = *listen;
	int		local;

	zp_addr_unmap(&d);
	zp_addr_unmap(&l);
	if (d.ss.ss_family != AF_INET && d.ss.ss_family != AF_INET6)
		return 1;
	if (addr_port(&d) != addr_port(&l))
		return 0;
	if (!addr_any(&l))
		return addr_eq(&d, &l);
	/* 0.0.0.0 takes IPv4 only; [::] takes both (zproxy's ":PORT"). */
	if (l.ss.ss_family == AF_INET && d.ss.ss_family != AF_INET)
		return 0;
	local = addr_local(&d);
	return local != 0;
}
