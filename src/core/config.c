/*
 * config.c - the configuration: defaults, the parsers of the values the
 * command line gives (cli.c reads the line itself), and the start-up
 * name resolution, its only I/O.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "lib/framing.h"
#include "lib/log.h"
#include "core/net.h"
#include "core/upstream.h"

#define ZP_MAX_TIMEOUT		86400.0
#define ZP_MIN_TIMEOUT		0.001

/* Fill cfg with defaults. */
void
zp_config_init(struct zp_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->mode = ZP_MODE_SPLICE;
	cfg->pipe_size = ZP_DEFAULT_PIPE_SIZE;
	cfg->buffer_size = ZP_DEFAULT_BUFFER_SIZE;
	cfg->splice_min = ZP_DEFAULT_SPLICE_MIN;
	cfg->connect_timeout = ZP_DEFAULT_CONNECT_TIMEOUT;
	cfg->balance = ZP_BALANCE_ROUNDROBIN;
	cfg->retries = -1;
	cfg->max_fails = ZP_DEFAULT_MAX_FAILS;
	cfg->fail_timeout = ZP_DEFAULT_FAIL_TIMEOUT;
	cfg->drain_timeout = ZP_DEFAULT_DRAIN_TIMEOUT;
	cfg->fin_timeout = ZP_DEFAULT_FIN_TIMEOUT;
	cfg->stall_timeout = ZP_DEFAULT_STALL_TIMEOUT;
	cfg->linger_timeout = ZP_DEFAULT_LINGER_TIMEOUT;
	cfg->stats_max_conns = ZP_DEFAULT_STATS_MAX_CONNS;
	cfg->stats_timeout = ZP_DEFAULT_STATS_TIMEOUT;
	cfg->proxy_timeout = ZP_DEFAULT_PROXY_TIMEOUT;
	cfg->rebalance_rate = ZP_DEFAULT_REBALANCE_RATE;
	cfg->spool_max = ZP_DEFAULT_SPOOL_MAX;
	cfg->spool_senders = ZP_DEFAULT_SPOOL_SENDERS;
	cfg->spool_sync = ZP_DEFAULT_SPOOL_SYNC;
	cfg->udp_idle = ZP_DEFAULT_UDP_IDLE;
	cfg->udp_rcvbuf = ZP_DEFAULT_UDP_RCVBUF;
	cfg->tls_handshake_timeout = ZP_DEFAULT_TLS_HANDSHAKE_TIMEOUT;
}

int
zp_config_tls(const struct zp_config *cfg)
{
	size_t	i;

	for (i = 0; i < cfg->nlistens; i++)
		if (cfg->listens[i].tls)
			return 1;
	return 0;
}

int
zp_config_tls_upstreams(const struct zp_config *cfg)
{
	size_t	i;

	for (i = 0; i < cfg->nupstreams; i++)
		if (cfg->upstreams[i].tls)
			return 1;
	return 0;
}

int
zp_config_tls_mirrors(const struct zp_config *cfg)
{
	size_t	i;

	for (i = 0; i < cfg->nmirrors; i++)
		if (cfg->mirrors[i].to.tls)
			return 1;
	return 0;
}

int
zp_config_udp_upstreams(const struct zp_config *cfg)
{
	return cfg->nupstreams > 0 && cfg->upstreams[0].udp;
}

int
zp_config_framed(const struct zp_config *cfg)
{
	size_t	i;

	if (cfg->framing != ZP_FRAMING_NONE)
		return 1;
	/* Datagrams relayed as datagrams make no stream. */
	if (zp_config_udp_upstreams(cfg))
		return 0;
	for (i = 0; i < cfg->nlistens; i++)
		if (cfg->listens[i].udp || cfg->listens[i].systemd)
			return 1;
	return 0;
}

/* Free what cfg owns. */
void
zp_config_free(struct zp_config *cfg)
{
	size_t	i;

	for (i = 0; i < cfg->nupstreams; i++) {
		free(cfg->upstreams[i].host);
		free(cfg->upstreams[i].addrs);
		cfg->upstreams[i].host = NULL;
		cfg->upstreams[i].addrs = NULL;
		cfg->upstreams[i].naddrs = 0;
	}
	cfg->nupstreams = 0;
	for (i = 0; i < cfg->nmirrors; i++) {
		free(cfg->mirrors[i].arg);
		free(cfg->mirrors[i].to.host);
		free(cfg->mirrors[i].to.addrs);
	}
	memset(cfg->mirrors, 0, sizeof(cfg->mirrors));
	cfg->nmirrors = 0;
	free(cfg->log_file);
	cfg->log_file = NULL;
	free(cfg->spool_dir);
	cfg->spool_dir = NULL;
	free(cfg->user);
	cfg->user = NULL;
	free(cfg->group);
	cfg->group = NULL;
	free(cfg->control);
	cfg->control = NULL;
	free(cfg->takeover);
	cfg->takeover = NULL;
	free(cfg->config_file);
	cfg->config_file = NULL;
	free(cfg->tls_cert);
	free(cfg->tls_key);
	free(cfg->tls_client_ca);
	free(cfg->tls_ciphers);
	free(cfg->tls_ciphersuites);
	cfg->tls_cert = cfg->tls_key = cfg->tls_client_ca = NULL;
	cfg->tls_ciphers = cfg->tls_ciphersuites = NULL;
	free(cfg->upstream_ca);
	free(cfg->upstream_sni);
	free(cfg->upstream_cert);
	free(cfg->upstream_key);
	cfg->upstream_ca = cfg->upstream_sni = NULL;
	cfg->upstream_cert = cfg->upstream_key = NULL;
	for (i = 0; i < cfg->nitems; i++)
		free(cfg->items[i].value);
	free(cfg->items);
	cfg->items = NULL;
	cfg->nitems = 0;
}

int
zp_rebalance_parse(const char *s)
{
	if (strcmp(s, "count") == 0)
		return ZP_REBALANCE_COUNT;
	if (strcmp(s, "load") == 0)
		return ZP_REBALANCE_LOAD;
	return -1;
}

const char *
zp_rebalance_str(int r)
{
	switch (r) {
	case ZP_REBALANCE_COUNT:	return "count";
	case ZP_REBALANCE_LOAD:		return "load";
	default:			return "off";
	}
}

/* Parse a port "1".."65535". */
int
zp_parse_port(const char *s, unsigned short *port, char *err, size_t errlen)
{
	unsigned long	 v;
	char		*end, q[ZP_ESCLEN];

	if (*s == '\0' || !isdigit((unsigned char)*s))
		goto bad;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || v == 0 || v > 65535)
		goto bad;
	*port = (unsigned short)v;
	return 0;
bad:
	zp_seterr(err, errlen, "invalid port '%s': expected 1-65535",
	    zp_escape(s, q, sizeof(q)));
	return -1;
}

/* Parse a size with an optional K/M/G suffix. */
int
zp_parse_size(const char *s, size_t *out, char *err, size_t errlen)
{
	uint64_t	v;

	if (zp_parse_bytes(s, &v, ZP_MAX_SIZE, "1G", err, errlen) == -1)
		return -1;
	*out = (size_t)v;
	return 0;
}

int
zp_parse_bytes(const char *s, uint64_t *out, uint64_t limit,
    const char *limit_str, char *err, size_t errlen)
{
	unsigned long long	 v, mult = 1;
	char			*end, q[ZP_ESCLEN];

	if (*s == '\0' || !isdigit((unsigned char)*s))
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0)
		goto bad;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K':
		mult = 1024ULL;
		end++;
		break;
	case 'm': case 'M':
		mult = 1024ULL * 1024;
		end++;
		break;
	case 'g': case 'G':
		mult = 1024ULL * 1024 * 1024;
		end++;
		break;
	case 't': case 'T':
		mult = 1024ULL * 1024 * 1024 * 1024;
		end++;
		break;
	default:
		goto bad;
	}
	if (mult > 1 && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end != '\0')
		goto bad;
	if (v == 0) {
		zp_seterr(err, errlen, "invalid size '%s': must be above 0",
		    zp_escape(s, q, sizeof(q)));
		return -1;
	}
	if (v > limit / mult) {
		zp_seterr(err, errlen,
		    "invalid size '%s': above the limit of %s",
		    zp_escape(s, q, sizeof(q)), limit_str);
		return -1;
	}
	*out = (uint64_t)(v * mult);
	return 0;
bad:
	zp_seterr(err, errlen, "invalid size '%s': expected a number with an "
	    "optional K, M, G or T suffix", zp_escape(s, q, sizeof(q)));
	return -1;
}

/* Parse ":PORT", "IPv4:PORT" or "[IPv6]:PORT". */
int
zp_parse_listen(const char *s, struct zp_listen_spec *ls, char *err,
    size_t errlen)
{
	char	 host[INET6_ADDRSTRLEN + 1];
	char	 portbuf[8];
	char	*host_dyn = NULL;
	char	 q[ZP_ESCLEN];

	memset(ls, 0, sizeof(*ls));
	if (s[0] == ':' && strchr(s + 1, ':') != NULL) {
		zp_seterr(err, errlen,
		    "invalid listen address '%s': put an IPv6 "
		    "address in brackets, [ADDR]:PORT",
		    zp_escape(s, q, sizeof(q)));
		return -1;
	}
	if (s[0] == ':') {
		if (zp_parse_port(s + 1, &ls->port, err, errlen) == -1)
			return -1;
		ls->any = 1;
		return 0;
	}
	if (zp_parse_hostport(s, &host_dyn, portbuf, sizeof(portbuf), err,
	    errlen) == -1)
		return -1;
	if (strlen(host_dyn) >= sizeof(host)) {
		zp_seterr(err, errlen, "invalid listen address '%s': expected "
		    ":PORT, IPv4:PORT or [IPv6]:PORT",
		    zp_escape(s, q, sizeof(q)));
		free(host_dyn);
		return -1;
	}
	strcpy(host, host_dyn);
	free(host_dyn);
	/* zp_parse_hostport validated the port already. */
	ls->port = (unsigned short)atoi(portbuf);
	if ((s[0] == '[') != (strchr(host, ':') != NULL))
		goto bad;	/* brackets are for IPv6 only, and needed */
	if (strchr(host, ':') != NULL) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ls->addr.ss;

		if (inet_pton(AF_INET6, host, &sin6->sin6_addr) != 1)
			goto bad;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(ls->port);
		ls->addr.len = sizeof(*sin6);
	} else {
		struct sockaddr_in *sin = (struct sockaddr_in *)&ls->addr.ss;

		if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
			goto bad;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(ls->port);
		ls->addr.len = sizeof(*sin);
	}
	return 0;
bad:
	zp_seterr(err, errlen, "invalid listen address '%s': expected :PORT, "
	    "IPv4:PORT or [IPv6]:PORT with a numeric address",
	    zp_escape(s, q, sizeof(q)));
	return -1;
}

/*
 * Parse -l: "systemd", "systemd:NAME", or an address. NAME is what
 * systemd's FileDescriptorName= accepts (and puts in $LISTEN_FDNAMES,
 * ':'-separated): printable ASCII without ':', at most 255 characters.
 */
int
zp_parse_listen_arg(const char *s, struct zp_listen_spec *ls, char *err,
    size_t errlen)
{
	const char	*name;
	char		 q[ZP_ESCLEN];
	size_t		 i, n;

	/* HAProxy's prefixes: "tls@:6514", "tls@systemd:NAME". */
	if (strncmp(s, "tls@", 4) == 0) {
		if (strncmp(s + 4, "udp@", 4) == 0 ||
		    strncmp(s + 4, "tls@", 4) == 0) {
			zp_seterr(err, errlen, "invalid listen address '%s': "
			    "tls@ is TCP, followed by [ADDR]:PORT or "
			    "systemd[:NAME]", zp_escape(s, q, sizeof(q)));
			return -1;
		}
		if (zp_parse_listen_arg(s + 4, ls, err, errlen) == -1)
			return -1;
		ls->tls = 1;
		return 0;
	}
	/* "udp@:514", "udp@[::1]:514". */
	if (strncmp(s, "udp@", 4) == 0) {
		if (zp_parse_listen(s + 4, ls, err, errlen) == -1)
			return -1;
		ls->udp = 1;
		return 0;
	}
	if (strncmp(s, "systemd", 7) != 0 || (s[7] != '\0' && s[7] != ':'))
		return zp_parse_listen(s, ls, err, errlen);
	memset(ls, 0, sizeof(*ls));
	ls->systemd = 1;
	if (s[7] == '\0')
		return 0;
	name = s + 8;
	n = strlen(name);
	for (i = 0; i < n; i++)
		if (name[i] < 0x21 || name[i] > 0x7e || name[i] == ':')
			break;
	if (n == 0 || n > ZP_FDNAME_MAX || i < n) {
		zp_seterr(err, errlen, "invalid listen socket name '%s': "
		    "expected systemd:NAME, NAME as in FileDescriptorName= "
		    "(1 to %d printable characters, no ':')",
		    zp_escape(s, q, sizeof(q)), ZP_FDNAME_MAX);
		return -1;
	}
	memcpy(ls->name, name, n + 1);
	return 0;
}

/* -l as given: "systemd[:NAME]", ":PORT" or the address; "udp@" first. */
const char *
zp_listen_spec_str(const struct zp_listen_spec *ls, char *buf, size_t len)
{
	const char	*pre = ls->udp ? "udp@" : ls->tls ? "tls@" : "";
	char		 a[ZP_ADDRSTRLEN];

	/*
	 * A passed socket's label is systemd's, which knows no tls@: the
	 * inherited sockets are matched by it.
	 */
	if (ls->systemd)
		snprintf(buf, len, "systemd%s%s", ls->name[0] ? ":" : "",
		    ls->name);
	else if (ls->any)
		snprintf(buf, len, "%s:%u", pre, (unsigned)ls->port);
	else
		snprintf(buf, len, "%s%s", pre, zp_addr_str(&ls->addr, a,
		    sizeof(a)));
	return buf;
}

/* Split "host:port" or "[v6]:port". */
int
zp_parse_hostport(const char *s, char **hostp, char *port, size_t portlen,
    char *err, size_t errlen)
{
	const char	*colon, *hstart, *hend;
	unsigned short	 p;
	size_t		 hlen;
	char		 q[ZP_ESCLEN];

	*hostp = NULL;
	if (s[0] == '[') {
		hstart = s + 1;
		hend = strchr(hstart, ']');
		if (hend == NULL || hend[1] != ':') {
			zp_seterr(err, errlen, "invalid address '%s': expected "
			    "[IPv6]:PORT", zp_escape(s, q, sizeof(q)));
			return -1;
		}
		colon = hend + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL) {
			zp_seterr(err, errlen, "invalid address '%s': expected "
			    "HOST:PORT", zp_escape(s, q, sizeof(q)));
			return -1;
		}
		hstart = s;
		hend = colon;
		if (memchr(hstart, ':', hend - hstart) != NULL) {
			zp_seterr(err, errlen, "invalid address '%s': put an "
			    "IPv6 address in brackets, [ADDR]:PORT",
			    zp_escape(s, q, sizeof(q)));
			return -1;
		}
	}
	hlen = hend - hstart;
	if (hlen == 0) {
		zp_seterr(err, errlen, "invalid address '%s': the host is "
		    "missing", zp_escape(s, q, sizeof(q)));
		return -1;
	}
	if (hlen > 253) {
		zp_seterr(err, errlen, "invalid address '%s': the host is too "
		    "long", zp_escape(s, q, sizeof(q)));
		return -1;
	}
	if (zp_parse_port(colon + 1, &p, err, errlen) == -1)
		return -1;
	if (portlen < 6) {
		zp_seterr(err, errlen, "internal error: port buffer too small");
		return -1;
	}
	snprintf(port, portlen, "%u", p);
	if ((*hostp = strndup(hstart, hlen)) == NULL) {
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/* Parse a positive number of seconds, fractions allowed. */
static int
parse_seconds(const char *name, const char *s, double *out, char *err,
    size_t errlen)
{
	double	 v;
	char	*end, q[ZP_ESCLEN];

	/* Plain decimal only: no exponents, hex floats, inf or nan. */
	if (*s == '\0' || strspn(s, "0123456789.") != strlen(s) ||
	    strchr(s, '.') != strrchr(s, '.'))
		goto bad;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || errno != 0 || v < ZP_MIN_TIMEOUT ||
	    v > ZP_MAX_TIMEOUT)
		goto bad;
	*out = v;
	return 0;
bad:
	zp_seterr(err, errlen, "invalid %s '%s': expected seconds from %.3f to "
	    "%.0f", name, zp_escape(s, q, sizeof(q)), ZP_MIN_TIMEOUT,
	    ZP_MAX_TIMEOUT);
	return -1;
}

/* Parse --source: "client" or an address literal without a port. */
int
zp_parse_source(const char *s, int *mode, struct zp_addr *a, char *err,
    size_t errlen)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a->ss;
	char			 q[ZP_ESCLEN];

	memset(a, 0, sizeof(*a));
	if (strcmp(s, "client") == 0) {
		*mode = ZP_SOURCE_CLIENT;
		return 0;
	}
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		a->len = sizeof(*sin);
	} else if (inet_pton(AF_INET6, s, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		a->len = sizeof(*sin6);
		/* ::ffff:a.b.c.d is the IPv4 address, as everywhere else. */
		zp_addr_unmap(a);
	} else {
		zp_seterr(err, errlen, "invalid source '%s': expected an IPv4 "
		    "or IPv6 address without a port, or client",
		    zp_escape(s, q, sizeof(q)));
		return -1;
	}
	*mode = ZP_SOURCE_ADDR;
	return 0;
}

int
zp_addr_set(struct zp_addr *a, const struct sockaddr *sa, socklen_t len)
{
	if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) ||
	    len > sizeof(a->ss))
		return -1;
	memset(a, 0, sizeof(*a));
	memcpy(&a->ss, sa, len);
	a->len = len;
	return 0;
}

/* The usable addresses of a getaddrinfo result. */
int
zp_addrs_from_ai(const struct addrinfo *res, struct zp_addr **vp, size_t *np)
{
	const struct addrinfo	*ai;
	struct zp_addr		*v;
	size_t			 n = 0;

	for (ai = res; ai != NULL; ai = ai->ai_next)
		n++;
	if (n == 0 || (v = calloc(n, sizeof(*v))) == NULL)
		return -1;
	n = 0;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if (ai->ai_addrlen > sizeof(v[0].ss) ||
		    (ai->ai_family != AF_INET && ai->ai_family != AF_INET6))
			continue;
		memcpy(&v[n].ss, ai->ai_addr, ai->ai_addrlen);
		v[n].len = ai->ai_addrlen;
		n++;
	}
	if (n == 0) {
		free(v);
		return -1;
	}
	*vp = v;
	*np = n;
	return 0;
}

/* Resolve one upstream with a blocking getaddrinfo. */
int
zp_upstream_resolve(struct zp_upstream_spec *up, char *err, size_t errlen)
{
	return zp_peer_resolve(up, "upstream", err, errlen);
}

int
zp_peer_resolve(struct zp_upstream_spec *up, const char *what, char *err,
    size_t errlen)
{
	struct addrinfo	 hints, *res = NULL;
	char		 q[ZP_ESCLEN];
	int		 rc, e;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(up->host, up->port, &hints, &res);
	if (rc != 0) {
		e = errno;
		zp_seterr(err, errlen, "%s '%s' does not resolve: %s", what,
		    zp_escape(up->host, q, sizeof(q)), rc == EAI_SYSTEM ?
		    strerror(e) : gai_strerror(rc));
		return -1;
	}
	free(up->addrs);
	up->addrs = NULL;
	up->naddrs = 0;
	rc = zp_addrs_from_ai(res, &up->addrs, &up->naddrs);
	freeaddrinfo(res);
	if (rc == -1) {
		zp_seterr(err, errlen, "%s '%s' does not resolve to a "
		    "usable address", what, zp_escape(up->host, q, sizeof(q)));
		return -1;
	}
	return 0;
}

/* Resolve every upstream. */
int
zp_config_resolve(struct zp_config *cfg, char *err, size_t errlen)
{
	size_t	i;

	for (i = 0; i < cfg->nupstreams; i++)
		if (!cfg->upstreams[i].original &&
		    zp_upstream_resolve(&cfg->upstreams[i], err, errlen) == -1)
			return -1;
	for (i = 0; i < cfg->nmirrors; i++)
		if (zp_peer_resolve(&cfg->mirrors[i].to, "--mirror", err,
		    errlen) == -1)
			return -1;
	return 0;
}

/* The seconds parser of the options, for callers outside this file. */
int
zp_parse_seconds(const char *name, const char *s, double *out, char *err,
    size_t errlen)
{
	return parse_seconds(name, s, out, err, errlen);
}

/* Seconds as a timeval, rounded to the microsecond. */
struct timeval
zp_seconds_tv(double t)
{
	struct timeval	tv;
	long long	us;

	if (!(t > 0))
		t = 0;
	us = (long long)(t * 1e6 + 0.5);
	tv.tv_sec = (time_t)(us / 1000000);
	tv.tv_usec = (suseconds_t)(us % 1000000);
	return tv;
}
