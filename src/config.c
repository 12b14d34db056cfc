/*
 * config.c - the command line, parsed and validated; no I/O but the
 * start-up name resolution.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "framing.h"
#include "log.h"
#include "upstream.h"

enum {
	OPT_PIPE_SIZE = 256,
	OPT_BUFFER_SIZE,
	OPT_SPLICE_MIN,
	OPT_MAX_CONNS,
	OPT_CONNECT_TIMEOUT,
	OPT_BALANCE,
	OPT_RETRIES,
	OPT_MAX_FAILS,
	OPT_FAIL_TIMEOUT,
	OPT_CHECK_INTERVAL,
	OPT_RESOLVE_INTERVAL,
	OPT_IDLE_TIMEOUT,
	OPT_FIN_TIMEOUT,
	OPT_LINGER_TIMEOUT,
	OPT_KEEPALIVE,
	OPT_DRAIN_TIMEOUT,
	OPT_LOG_FILE,
	OPT_SYSLOG,
	OPT_LOG_FORMAT,
	OPT_STATS,
	OPT_STATS_MAX_CONNS,
	OPT_STATS_TIMEOUT,
	OPT_SEND_PROXY,
	OPT_DNS_SERVER,
	OPT_SOURCE,
	/* who may connect */
	OPT_ALLOW,
	OPT_DENY,
	OPT_MAX_CONNS_PER_SOURCE,
	/* behind a balancer */
	OPT_ACCEPT_PROXY,
	OPT_PROXY_FROM,
	OPT_PROXY_TIMEOUT,
	/* privileges */
	OPT_USER,
	OPT_GROUP,
	OPT_NO_SANDBOX,
	/* transparent modes */
	OPT_TPROXY,
	OPT_ALLOW_DST,
	/* log streams */
	OPT_FRAMING,
	OPT_MAX_FRAME,
	OPT_MAX_LIFETIME,
	OPT_REBALANCE,
	OPT_REBALANCE_RATE,
	OPT_REPLAY_WINDOW,
	/* restarts */
	OPT_CONTROL,
	OPT_TAKEOVER,
	OPT_DAEMON,
};

static const struct option zp_longopts[] = {
	{ "listen",		required_argument,	NULL, 'l' },
	{ "upstream",		required_argument,	NULL, 'u' },
	{ "mode",		required_argument,	NULL, 'm' },
	{ "pipe-size",		required_argument,	NULL, OPT_PIPE_SIZE },
	{ "buffer-size",	required_argument,	NULL, OPT_BUFFER_SIZE },
	{ "splice-min",		required_argument,	NULL, OPT_SPLICE_MIN },
	{ "framing",		required_argument,	NULL, OPT_FRAMING },
	{ "max-frame",		required_argument,	NULL, OPT_MAX_FRAME },
	{ "max-lifetime",	required_argument,	NULL, OPT_MAX_LIFETIME },
	{ "rebalance",		no_argument,		NULL, OPT_REBALANCE },
	{ "rebalance-rate",	required_argument,	NULL, OPT_REBALANCE_RATE },
	{ "replay-window",	required_argument,	NULL, OPT_REPLAY_WINDOW },
	{ "max-conns",		required_argument,	NULL, OPT_MAX_CONNS },
	{ "connect-timeout",	required_argument,	NULL, OPT_CONNECT_TIMEOUT },
	{ "balance",		required_argument,	NULL, OPT_BALANCE },
	{ "retries",		required_argument,	NULL, OPT_RETRIES },
	{ "max-fails",		required_argument,	NULL, OPT_MAX_FAILS },
	{ "fail-timeout",	required_argument,	NULL, OPT_FAIL_TIMEOUT },
	{ "check-interval",	required_argument,	NULL, OPT_CHECK_INTERVAL },
	{ "resolve-interval",	required_argument,	NULL, OPT_RESOLVE_INTERVAL },
	{ "idle-timeout",	required_argument,	NULL, OPT_IDLE_TIMEOUT },
	{ "fin-timeout",	required_argument,	NULL, OPT_FIN_TIMEOUT },
	{ "linger-timeout",	required_argument,	NULL, OPT_LINGER_TIMEOUT },
	{ "keepalive",		no_argument,		NULL, OPT_KEEPALIVE },
	{ "drain-timeout",	required_argument,	NULL, OPT_DRAIN_TIMEOUT },
	{ "log-file",		required_argument,	NULL, OPT_LOG_FILE },
	{ "syslog",		no_argument,		NULL, OPT_SYSLOG },
	{ "log-format",		required_argument,	NULL, OPT_LOG_FORMAT },
	{ "stats",		required_argument,	NULL, OPT_STATS },
	{ "stats-max-conns",	required_argument,	NULL, OPT_STATS_MAX_CONNS },
	{ "stats-timeout",	required_argument,	NULL, OPT_STATS_TIMEOUT },
	{ "send-proxy",		required_argument,	NULL, OPT_SEND_PROXY },
	{ "dns-server",		required_argument,	NULL, OPT_DNS_SERVER },
	{ "source",		required_argument,	NULL, OPT_SOURCE },
	/* who may connect */
	{ "allow",		required_argument,	NULL, OPT_ALLOW },
	{ "deny",		required_argument,	NULL, OPT_DENY },
	{ "max-conns-per-source", required_argument,	NULL,
	    OPT_MAX_CONNS_PER_SOURCE },
	/* behind a balancer */
	{ "accept-proxy",	no_argument,		NULL, OPT_ACCEPT_PROXY },
	{ "proxy-from",		required_argument,	NULL, OPT_PROXY_FROM },
	{ "proxy-timeout",	required_argument,	NULL, OPT_PROXY_TIMEOUT },
	/* privileges */
	{ "user",		required_argument,	NULL, OPT_USER },
	{ "group",		required_argument,	NULL, OPT_GROUP },
	{ "no-sandbox",		no_argument,		NULL, OPT_NO_SANDBOX },
	/* transparent modes */
	{ "tproxy",		no_argument,		NULL, OPT_TPROXY },
	{ "allow-dst",		required_argument,	NULL, OPT_ALLOW_DST },
	/* restarts */
	{ "control",		required_argument,	NULL, OPT_CONTROL },
	{ "takeover",		required_argument,	NULL, OPT_TAKEOVER },
	{ "daemon",		no_argument,		NULL, OPT_DAEMON },
	{ "verbose",		no_argument,		NULL, 'v' },
	{ "quiet",		no_argument,		NULL, 'q' },
	{ "help",		no_argument,		NULL, 'h' },
	{ "version",		no_argument,		NULL, 'V' },
	{ NULL,			0,			NULL, 0 }
};

#define ZP_MAX_CONNS_LIMIT	10000000L
/* Scrapers are few; each stats connection is a descriptor the relay lacks. */
#define ZP_STATS_MAX_CONNS_LIMIT 1024L
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
	cfg->linger_timeout = ZP_DEFAULT_LINGER_TIMEOUT;
	cfg->stats_max_conns = ZP_DEFAULT_STATS_MAX_CONNS;
	cfg->stats_timeout = ZP_DEFAULT_STATS_TIMEOUT;
	cfg->proxy_timeout = ZP_DEFAULT_PROXY_TIMEOUT;
	cfg->rebalance_rate = ZP_DEFAULT_REBALANCE_RATE;
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
	free(cfg->log_file);
	cfg->log_file = NULL;
	free(cfg->user);
	cfg->user = NULL;
	free(cfg->group);
	cfg->group = NULL;
	free(cfg->control);
	cfg->control = NULL;
	free(cfg->takeover);
	cfg->takeover = NULL;
}

/* Usage text. */
void
zp_config_usage(FILE *fp, const char *prog)
{
	fprintf(fp,
"usage: %s -l [ADDR]:PORT|systemd[:NAME] -u HOST:PORT [options]\n"
"\n"
"Relay every TCP connection accepted on the listen address to a fresh\n"
"connection to the upstream, both ways, with splice(2).\n"
"\n"
"  -l, --listen [ADDR]:PORT   where to accept: :PORT (every address),\n"
"                             0.0.0.0:PORT, 127.0.0.1:PORT, [::1]:PORT;\n"
"                             systemd: the sockets systemd passed\n"
"                             ($LISTEN_FDS), systemd:NAME: those named NAME\n"
"                             (FileDescriptorName=); give it again for more\n"
"  -u, --upstream HOST:PORT   where to connect: name:port, 1.2.3.4:port,\n"
"                             [::1]:port; every address of a name is tried;\n"
"                             give it again for more upstreams; original:\n"
"                             each client's original destination (under\n"
"                             --tproxy, or an nft redirect rule), alone\n"
"  -m, --mode splice|copy     data path (default splice)\n"
"      --pipe-size BYTES      size of each splice pipe (default 1M)\n"
"      --buffer-size BYTES    per-direction buffer in copy mode (default 48K)\n"
"      --splice-min BYTES     a direction copies until one read brings this\n"
"                             much, then takes a pipe (default 4K; 0: take\n"
"                             both pipes when a connection starts)\n"
"      --max-conns N          most pairs at once; beyond it clients wait in\n"
"                             the listen backlog (default from RLIMIT_NOFILE)\n"
"      --connect-timeout SEC  per upstream address; also the most a client\n"
"                             waits for a descriptor to connect with\n"
"                             (default 5)\n"
"\n"
"Upstreams:\n"
"      --balance first|roundrobin|leastconn|source\n"
"                             how to choose (default roundrobin; first:\n"
"                             failover in order; source: client address hash)\n"
"      --retries N            other upstreams to try when one fails\n"
"                             (default: every one, once)\n"
"      --max-fails N          failed connects in a row that mark an upstream\n"
"                             down (default 3)\n"
"      --fail-timeout SEC     how long it stays down before a retry (default 10)\n"
"      --check-interval SEC   check each upstream with a TCP connect this often\n"
"                             (default: no active checks)\n"
"      --resolve-interval SEC re-resolve upstream names this often, without\n"
"                             blocking (default: at start-up only)\n"
"      --dns-server ADDR:PORT ask this DNS server when re-resolving, instead\n"
"                             of /etc/resolv.conf's (and /etc/hosts)\n"
"      --send-proxy v1|v2     send a PROXY protocol header to the upstream\n"
"      --source ADDR|client   connect upstream from ADDR (an address of this\n"
"                             host, no port), or from the client's own\n"
"                             address (needs CAP_NET_ADMIN or CAP_NET_RAW\n"
"                             and a return path: see README); upstream\n"
"                             addresses of the other family are skipped\n"
"\n"
"Log streams:\n"
"      --framing none|lf|octet|auto|nul\n"
"                             messages of the client's stream: lf (one per\n"
"                             line), octet (RFC 6587 LEN SP MSG), auto (by\n"
"                             its first byte), nul (GELF: each ends with a\n"
"                             NUL byte); an upstream that fails moves\n"
"                             the client to another at a message boundary\n"
"                             (default none: a plain byte relay)\n"
"      --max-frame BYTES      longest message (default 64K for lf, 16M for\n"
"                             octet); a longer one ends the framing of that\n"
"                             connection: it is relayed as plain bytes\n"
"      --max-lifetime SEC     a stream this long on one upstream moves to\n"
"                             the balancer's choice at a message boundary,\n"
"                             if that is another (default: never)\n"
"      --rebalance            move streams off the busiest upstream while\n"
"                             it has 2 more than the idlest (an upstream\n"
"                             back up fills again)\n"
"      --rebalance-rate N     at most N such moves a second (default 10)\n"
"      --replay-window BYTES  keep the last BYTES sent to the upstream of\n"
"                             each stream, and send them again to the next\n"
"                             one from their first whole message when it\n"
"                             fails: at least once (default 0: off)\n"
"\n"
"Who may connect:\n"
"      --allow CIDR           relay only clients in these networks (repeat it;\n"
"                             10.0.0.0/8, 2001:db8::/32, a bare address is one\n"
"                             host); default: every client\n"
"      --deny CIDR            refuse clients in these networks (repeat it;\n"
"                             checked before --allow)\n"
"      --max-conns-per-source N\n"
"                             most pairs open at once from one IPv4 address or\n"
"                             one IPv6 /64; beyond it new clients are refused\n"
"\n"
"Behind a load balancer:\n"
"      --accept-proxy         every client starts with a PROXY protocol header\n"
"                             (v1 or v2); its source is the client everywhere\n"
"      --proxy-from CIDR      only these peers may send one (repeat it);\n"
"                             connections from elsewhere are refused\n"
"      --proxy-timeout SEC    the whole header must arrive within this long\n"
"                             of accept (default 3)\n"
"\n"
"Privileges:\n"
"      --user USER            once the sockets and the log are open, become\n"
"                             USER, with no capabilities and no way back\n"
"      --group GROUP          and this group (default: USER's primary group;\n"
"                             needs --user)\n"
"      --no-sandbox           do not confine the relay to its system calls\n"
"                             (seccomp allow-list, on by default)\n"
"\n"
"Transparent proxying:\n"
"      --tproxy               accept connections an nft tproxy rule diverts,\n"
"                             for any destination (IP_TRANSPARENT; needs\n"
"                             CAP_NET_ADMIN or CAP_NET_RAW at start-up)\n"
"      --allow-dst CIDR[:PORT]\n"
"                             where -u original may connect (repeat it;\n"
"                             10.0.0.0/8:514, [2001:db8::/32]:514, fd00::/8);\n"
"                             default: anywhere, with a warning\n"
"\n"
"Time and stopping:\n"
"      --idle-timeout SEC|off close a pair with no byte either way for this\n"
"                             long (default off: never)\n"
"      --fin-timeout SEC|off  close a half-closed pair with no byte either\n"
"                             way for this long (default 300)\n"
"      --linger-timeout SEC   after one side reset, wait this long for the\n"
"                             other to acknowledge what was sent to it, from\n"
"                             its last acknowledgement (default 30)\n"
"      --keepalive            TCP keepalive on both sockets\n"
"      --drain-timeout SEC    at SIGTERM, let open pairs finish for this long\n"
"                             (default 30)\n"
"\n"
"Restarts that refuse no client:\n"
"      --control PATH         hand the listening sockets over on this Unix\n"
"                             socket (mode 0600) to a zproxy started with\n"
"                             --takeover PATH\n"
"      --takeover PATH        take the listening sockets from the zproxy\n"
"                             behind PATH; it stops accepting, drains for\n"
"                             its --drain-timeout and exits 0\n"
"      --daemon               go to the background once serving (the\n"
"                             command exits 0 then, or with the error)\n"
"\n"
"Seeing what it does:\n"
"      --log-file PATH        log there instead of stderr (SIGHUP reopens it)\n"
"      --syslog               log to syslog (facility daemon)\n"
"      --log-format text|json one line of text or one JSON object per event\n"
"      --stats ADDR:PORT      serve Prometheus metrics on http://ADDR:PORT/metrics\n"
"      --stats-max-conns N    most stats connections at once; later ones are\n"
"                             closed at accept (default 16, 1-1024)\n"
"      --stats-timeout SEC    close a stats connection this long after accept,\n"
"                             answered or not (default 5)\n"
"  -v, --verbose              log one line per connection when it ends,\n"
"                             failed ones included, none held back by the\n"
"                             rate limit; -vv adds debug lines\n"
"  -q, --quiet                log errors only (not with -v)\n"
"  -h, --help                 show this help and exit\n"
"  -V, --version              show the version and exit\n"
"\n"
"Sizes take K, M or G suffixes (powers of 1024). An option that takes a\n"
"value is given once, except -l, -u, --allow, --deny, --proxy-from and\n"
"--allow-dst.\n",
	    prog);
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
	if (v > ZP_MAX_SIZE / mult) {
		zp_seterr(err, errlen,
		    "invalid size '%s': above the limit of 1G",
		    zp_escape(s, q, sizeof(q)));
		return -1;
	}
	*out = (size_t)(v * mult);
	return 0;
bad:
	zp_seterr(err, errlen, "invalid size '%s': expected a number with an "
	    "optional K, M or G suffix", zp_escape(s, q, sizeof(q)));
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

/* -l as given: "systemd[:NAME]", ":PORT" or the address. */
const char *
zp_listen_spec_str(const struct zp_listen_spec *ls, char *buf, size_t len)
{
	if (ls->systemd)
		snprintf(buf, len, "systemd%s%s", ls->name[0] ? ":" : "",
		    ls->name);
	else if (ls->any)
		snprintf(buf, len, ":%u", (unsigned)ls->port);
	else
		return zp_addr_str(&ls->addr, buf, len);
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

/* A size option: the message names the option as well as the value. */
static int
parse_size_opt(const char *name, const char *s, size_t *out, char *err,
    size_t errlen)
{
	char	why[ZP_ERRLEN];

	if (zp_parse_size(s, out, why, sizeof(why)) == 0)
		return 0;
	zp_seterr(err, errlen, "--%s: %s", name, why);
	return -1;
}

/*
 * Parse an integer option value from min to max (min >= 0); the message
 * states that range.
 */
static int
parse_range(const char *name, const char *s, long min, long max, long *out,
    char *err, size_t errlen)
{
	long	 v;
	char	*end, q[ZP_ESCLEN];

	errno = 0;
	v = strtol(s, &end, 10);
	if (*s == '\0' || !isdigit((unsigned char)*s) || *end != '\0' ||
	    errno != 0 || v < min || v > max) {
		zp_seterr(err, errlen,
		    "invalid %s '%s': expected %ld-%ld", name,
		    zp_escape(s, q, sizeof(q)), min, max);
		return -1;
	}
	*out = v;
	return 0;
}

/* Parse a positive integer option value. */
static int
parse_count(const char *name, const char *s, long max, long *out, char *err,
    size_t errlen)
{
	return parse_range(name, s, 1, max, out, err, errlen);
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

/* The long name of an option, for messages. */
static const char *
opt_name(int val)
{
	const struct option	*o;

	for (o = zp_longopts; o->name != NULL; o++)
		if (o->val == val)
			return o->name;
	return "option";
}

/* Where a seconds-valued option goes. */
static double *
seconds_field(struct zp_config *cfg, int opt)
{
	switch (opt) {
	case OPT_FAIL_TIMEOUT:		return &cfg->fail_timeout;
	case OPT_CHECK_INTERVAL:	return &cfg->check_interval;
	case OPT_RESOLVE_INTERVAL:	return &cfg->resolve_interval;
	case OPT_IDLE_TIMEOUT:		return &cfg->idle_timeout;
	case OPT_FIN_TIMEOUT:		return &cfg->fin_timeout;
	case OPT_LINGER_TIMEOUT:	return &cfg->linger_timeout;
	case OPT_STATS_TIMEOUT:		return &cfg->stats_timeout;
	case OPT_PROXY_TIMEOUT:		return &cfg->proxy_timeout;
	case OPT_MAX_LIFETIME:		return &cfg->max_lifetime;
	default:			return &cfg->drain_timeout;
	}
}

/*
 * Name what getopt_long refused. It sets optopt to a flag's letter when a
 * long flag was given a value ("--verbose=2"), so look at the word itself.
 */
static void
bad_option(const char *word, int opt, char *err, size_t errlen)
{
	const struct option	*o;
	size_t			 len;
	char			 q[ZP_ESCLEN], flag[3];

	if (strncmp(word, "--", 2) == 0) {
		len = strcspn(word + 2, "=");
		for (o = zp_longopts; o->name != NULL; o++)
			if (strlen(o->name) == len &&
			    strncmp(o->name, word + 2, len) == 0 &&
			    word[2 + len] == '=') {
				zp_seterr(err, errlen, "option '--%s' takes no "
				    "value", o->name);
				return;
			}
		/* No escape makes a '=': the first one is the word's. */
		zp_escape(word, q, sizeof(q));
		q[strcspn(q, "=")] = '\0';
		zp_seterr(err, errlen, "unknown option '%s'", q);
	} else if (opt != 0) {
		flag[0] = '-';
		flag[1] = (char)opt;
		flag[2] = '\0';
		zp_seterr(err, errlen, "unknown option '%s'",
		    zp_escape(flag, q, sizeof(q)));
	} else
		zp_seterr(err, errlen, "unknown option '%s'",
		    zp_escape(word, q, sizeof(q)));
}

#define ZP_NLONGOPTS	(sizeof(zp_longopts) / sizeof(zp_longopts[0]))

/*
 * An option that takes a value takes one, but for --upstream, --allow and
 * --deny, which add one more each time: a second value is refused, as nginx refuses a
 * duplicate single-valued directive, rather than silently replacing the
 * first (a unit file and its drop-in both setting -l).
 * Flags may be repeated: they mean the same each time, and -vv counts.
 * given[] holds, per zp_longopts entry, the value it was given. Returns 0,
 * or -1 with err filled.
 */
static int
check_once(int c, const char *arg, const char **given, char *err,
    size_t errlen)
{
	const struct option	*o;
	char			 q1[ZP_ESCLEN / 2], q2[ZP_ESCLEN / 2];
	size_t			 i;

	for (i = 0; zp_longopts[i].name != NULL; i++)
		if (zp_longopts[i].val == c)
			break;
	o = &zp_longopts[i];
	/* The options that add one more of a list may repeat. */
	if (o->name == NULL || o->has_arg != required_argument || c == 'l' ||
	    c == 'u' ||
	    c == OPT_ALLOW || c == OPT_DENY || c == OPT_PROXY_FROM ||
	    c == OPT_ALLOW_DST)
		return 0;
	if (given[i] != NULL) {
		zp_seterr(err, errlen,
		    "option --%s given twice ('%s', then '%s'): "
		    "it takes one value", o->name, zp_escape(given[i], q1,
		    sizeof(q1)), zp_escape(arg, q2, sizeof(q2)));
		return -1;
	}
	given[i] = arg;
	return 0;
}

/* Was the option with this val given a value? */
static int
given_opt(const char **given, int val)
{
	size_t	i;

	for (i = 0; zp_longopts[i].name != NULL; i++)
		if (zp_longopts[i].val == val)
			return given[i] != NULL;
	return 0;
}

/* The options that say who may connect: --allow, --deny, per source. */
static int
parse_access(struct zp_config *cfg, int opt, const char *s, char *err,
    size_t errlen)
{
	switch (opt) {
	case OPT_ALLOW:
		return zp_acl_add(&cfg->allow, "allow", s, err, errlen);
	case OPT_DENY:
		return zp_acl_add(&cfg->deny, "deny", s, err, errlen);
	default:
		return parse_count("max-conns-per-source", s,
		    ZP_MAX_CONNS_LIMIT, &cfg->max_conns_per_source, err,
		    errlen);
	}
}

/*
 * `-u original` is the only upstream when given: a fixed upstream beside
 * it would be a second policy (which one, when?) with no clear answer.
 * What serves a list of fixed addresses does not apply to it and is
 * refused rather than silently ignored: active checks and re-resolution
 * (there is no address to check or name to look up). --balance,
 * --retries, --max-fails and --fail-timeout are ignored: with one
 * upstream there is nothing to choose, and one destination's refusal says
 * nothing about the next client's (zp_upstream_report). --allow-dst
 * limits original alone.
 */
static int
check_original(const struct zp_config *cfg, char *err, size_t errlen)
{
	if (!cfg->original) {
		if (cfg->allow_dst.n > 0) {
			zp_seterr(err, errlen, "--allow-dst needs -u original");
			return -1;
		}
		return 0;
	}
	if (cfg->nupstreams > 1) {
		zp_seterr(err, errlen, "-u original must be the only "
		    "--upstream (%zu given)", cfg->nupstreams);
		return -1;
	}
	/*
	 * Behind a balancer the socket's original destination is zproxy's
	 * own (the balancer came to it), and the header's is the balancer's
	 * front: neither is where the client meant to go.
	 */
	if (cfg->accept_proxy) {
		zp_seterr(err, errlen, "-u original does not apply to "
		    "--accept-proxy: the balancer chose the destination");
		return -1;
	}
	if (cfg->check_interval > 0) {
		zp_seterr(err, errlen, "--check-interval does not apply to "
		    "-u original: there is no fixed address to check");
		return -1;
	}
	if (cfg->resolve_interval > 0) {
		zp_seterr(err, errlen, "--resolve-interval does not apply to "
		    "-u original: there is no name to resolve");
		return -1;
	}
	return 0;
}

/*
 * --control, --takeover: a Unix socket's path. The control socket is
 * made at PATH.tmp.PID and renamed over PATH, so that name must fit
 * sun_path too.
 */
static int
parse_control_path(const char *opt, const char *s, char **out, char *err,
    size_t errlen)
{
	char	q[ZP_ESCLEN];

	if (*s == '\0' || strlen(s) > ZP_CONTROL_PATH_MAX) {
		zp_seterr(err, errlen, "invalid --%s path '%s': 1 to %d "
		    "characters", opt, zp_escape(s, q, sizeof(q)),
		    ZP_CONTROL_PATH_MAX);
		return -1;
	}
	free(*out);
	if ((*out = strdup(s)) == NULL) {
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

/*
 * Several -l: each once. The same address twice could never bind; the
 * same systemd name twice would take its sockets twice.
 */
static int
check_listens(const struct zp_config *cfg, char *err, size_t errlen)
{
	const struct zp_listen_spec	*a, *b;
	char				 buf[ZP_ADDRSTRLEN + ZP_FDNAME_MAX];
	size_t				 i, j;

	for (i = 0; i < cfg->nlistens; i++)
		for (j = 0; j < i; j++) {
			a = &cfg->listens[i];
			b = &cfg->listens[j];
			if (a->systemd != b->systemd || a->any != b->any ||
			    a->port != b->port)
				continue;
			if (a->systemd ? strcmp(a->name, b->name) != 0 :
			    !a->any && (a->addr.len != b->addr.len ||
			    memcmp(&a->addr.ss, &b->addr.ss, a->addr.len) != 0))
				continue;
			zp_seterr(err, errlen, "--listen %s given twice",
			    zp_listen_spec_str(a, buf, sizeof(buf)));
			return -1;
		}
	return 0;
}

/* Parse --source: "client" or an address literal without a port. */
int
zp_parse_source(const char *s, int *mode, struct zp_addr *a, char *err,
    size_t errlen)
{
	struct sockaddr_in	*sin = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6	*sin6 = (struct sockaddr_in6 *)&a->ss;
	struct in6_addr		 in6;
	char			 q[ZP_ESCLEN];

	memset(a, 0, sizeof(*a));
	if (strcmp(s, "client") == 0) {
		*mode = ZP_SOURCE_CLIENT;
		return 0;
	}
	if (inet_pton(AF_INET, s, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		a->len = sizeof(*sin);
	} else if (inet_pton(AF_INET6, s, &in6) == 1) {
		/* ::ffff:a.b.c.d is the IPv4 address, as everywhere else. */
		if (IN6_IS_ADDR_V4MAPPED(&in6)) {
			sin->sin_family = AF_INET;
			memcpy(&sin->sin_addr, &in6.s6_addr[12], 4);
			a->len = sizeof(*sin);
		} else {
			sin6->sin6_family = AF_INET6;
			sin6->sin6_addr = in6;
			a->len = sizeof(*sin6);
		}
	} else {
		zp_seterr(err, errlen, "invalid source '%s': expected an IPv4 "
		    "or IPv6 address without a port, or client",
		    zp_escape(s, q, sizeof(q)));
		return -1;
	}
	*mode = ZP_SOURCE_ADDR;
	return 0;
}

/* Parse argv into cfg. */
int
zp_config_parse(struct zp_config *cfg, int argc, char **argv, char *err,
    size_t errlen)
{
	struct zp_upstream_spec	*up;
	const char		*given[ZP_NLONGOPTS] = { NULL };
	char			 q[ZP_ESCLEN];
	long			 v;
	int			 c;

	opterr = 0;
	optind = 0;	/* 0 makes glibc reinitialise, for the unit tests */
	while ((c = getopt_long(argc, argv, ":l:u:m:vqhV", zp_longopts,
	    NULL)) != -1) {
		if (check_once(c, optarg, given, err, errlen) == -1)
			return ZP_PARSE_ERROR;
		switch (c) {
		case 'l':
			if (cfg->nlistens == ZP_MAX_LISTENS) {
				zp_seterr(err, errlen, "too many --listen: at "
				    "most %d", ZP_MAX_LISTENS);
				return ZP_PARSE_ERROR;
			}
			if (zp_parse_listen_arg(optarg,
			    &cfg->listens[cfg->nlistens], err, errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->nlistens++;
			break;
		case 'u':
			if (cfg->nupstreams == ZP_MAX_UPSTREAMS) {
				zp_seterr(err, errlen,
				    "too many --upstream: at "
				    "most %d", ZP_MAX_UPSTREAMS);
				return ZP_PARSE_ERROR;
			}
			up = &cfg->upstreams[cfg->nupstreams];
			/*
			 * "original": each connection's own destination, as
			 * --tproxy or a redirect rule left it; no address here.
			 */
			if (strcmp(optarg, "original") == 0) {
				if ((up->host = strdup(optarg)) == NULL) {
					zp_seterr(err, errlen, "out of memory");
					return ZP_PARSE_ERROR;
				}
				up->original = 1;
				cfg->original = 1;
				cfg->nupstreams++;
				break;
			}
			if (zp_parse_hostport(optarg, &up->host, up->port,
			    sizeof(up->port), err, errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->nupstreams++;
			break;
		case OPT_BALANCE:
			if ((cfg->balance = zp_balance_parse(optarg)) == -1) {
				zp_seterr(err, errlen, "invalid balance '%s': "
				    "expected first, roundrobin, leastconn or "
				    "source", zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_RETRIES:
			/* 0 is meaningful here: never try another upstream. */
			if (parse_range("retries", optarg, 0, ZP_MAX_UPSTREAMS,
			    &v, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->retries = (int)v;
			break;
		case OPT_MAX_FAILS:
			if (parse_count("max-fails", optarg, 1000000, &v, err,
			    errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->max_fails = (int)v;
			break;
		case OPT_IDLE_TIMEOUT:
		case OPT_FIN_TIMEOUT:
			/* "off": no timeout; 0 means none everywhere. */
			if (strcmp(optarg, "off") == 0) {
				*seconds_field(cfg, c) = 0;
				break;
			}
			if (parse_seconds(opt_name(c), optarg,
			    seconds_field(cfg, c), err, errlen) == -1) {
				size_t n = strlen(err);

				snprintf(err + n, errlen - n, ", or off");
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_FAIL_TIMEOUT:
		case OPT_CHECK_INTERVAL:
		case OPT_RESOLVE_INTERVAL:
		case OPT_LINGER_TIMEOUT:
		case OPT_DRAIN_TIMEOUT:
		case OPT_STATS_TIMEOUT:
		case OPT_PROXY_TIMEOUT:
		case OPT_MAX_LIFETIME:
			if (parse_seconds(opt_name(c), optarg,
			    seconds_field(cfg, c), err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_KEEPALIVE:
			cfg->keepalive = 1;
			break;
		case OPT_REBALANCE:
			cfg->rebalance = 1;
			break;
		case OPT_REBALANCE_RATE:
			if (parse_count("rebalance-rate", optarg, 1000, &v, err,
			    errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->rebalance_rate = (int)v;
			break;
		case OPT_LOG_FILE:
			if (*optarg == '\0') {
				zp_seterr(err, errlen,
				    "invalid log-file: empty "
				    "path");
				return ZP_PARSE_ERROR;
			}
			free(cfg->log_file);
			if ((cfg->log_file = strdup(optarg)) == NULL) {
				zp_seterr(err, errlen, "out of memory");
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_SYSLOG:
			cfg->use_syslog = 1;
			break;
		case OPT_LOG_FORMAT:
			if (strcmp(optarg, "text") == 0)
				cfg->log_format = ZP_LOG_TEXT;
			else if (strcmp(optarg, "json") == 0)
				cfg->log_format = ZP_LOG_JSON;
			else {
				zp_seterr(err, errlen,
				    "invalid log-format '%s': "
				    "expected text or json",
				    zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_STATS:
			if (zp_parse_listen(optarg, &cfg->stats, err,
			    errlen) == -1)
				return ZP_PARSE_ERROR;
			cfg->have_stats = 1;
			break;
		case OPT_STATS_MAX_CONNS:
			/*
			 * 0 is refused, not "no limit": an endpoint without a
			 * cap is the descriptor exhaustion this option exists
			 * to prevent.
			 */
			if (parse_count("stats-max-conns", optarg,
			    ZP_STATS_MAX_CONNS_LIMIT, &cfg->stats_max_conns,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_DNS_SERVER:
			if (zp_parse_listen(optarg, &cfg->dns_server, err,
			    errlen) == -1)
				return ZP_PARSE_ERROR;
			if (cfg->dns_server.any) {
				zp_seterr(err, errlen,
				    "invalid dns-server '%s': "
				    "expected ADDR:PORT",
				    zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			cfg->have_dns_server = 1;
			break;
		case OPT_USER:
		case OPT_GROUP:
			if (*optarg == '\0') {
				zp_seterr(err, errlen, "invalid %s: empty name",
				    c == OPT_USER ? "user" : "group");
				return ZP_PARSE_ERROR;
			}
			if (c == OPT_USER) {
				free(cfg->user);
				cfg->user = strdup(optarg);
			} else {
				free(cfg->group);
				cfg->group = strdup(optarg);
			}
			if ((c == OPT_USER ? cfg->user : cfg->group) == NULL) {
				zp_seterr(err, errlen, "out of memory");
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_NO_SANDBOX:
			cfg->no_sandbox = 1;
			break;
		case OPT_CONTROL:
		case OPT_TAKEOVER:
			if (parse_control_path(c == OPT_CONTROL ? "control" :
			    "takeover", optarg, c == OPT_CONTROL ?
			    &cfg->control : &cfg->takeover, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_DAEMON:
			cfg->daemon = 1;
			break;
		case OPT_TPROXY:
			cfg->tproxy = 1;
			break;
		case OPT_ALLOW_DST:
			if (zp_dstacl_add(&cfg->allow_dst, "allow-dst", optarg,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_SOURCE:
			if (zp_parse_source(optarg, &cfg->source,
			    &cfg->source_addr, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_SEND_PROXY:
			if (strcmp(optarg, "v1") == 0)
				cfg->send_proxy = 1;
			else if (strcmp(optarg, "v2") == 0)
				cfg->send_proxy = 2;
			else {
				zp_seterr(err, errlen,
				    "invalid send-proxy '%s': "
				    "expected v1 or v2",
				    zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_ALLOW:
		case OPT_DENY:
		case OPT_MAX_CONNS_PER_SOURCE:
			if (parse_access(cfg, c, optarg, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_ACCEPT_PROXY:
			cfg->accept_proxy = 1;
			break;
		case OPT_PROXY_FROM:
			if (zp_acl_add(&cfg->proxy_from, "proxy-from", optarg,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case 'm':
			if (strcmp(optarg, "splice") == 0)
				cfg->mode = ZP_MODE_SPLICE;
			else if (strcmp(optarg, "copy") == 0)
				cfg->mode = ZP_MODE_COPY;
			else {
				zp_seterr(err, errlen, "invalid mode '%s': "
				    "expected splice or copy",
				    zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_PIPE_SIZE:
			if (parse_size_opt("pipe-size", optarg, &cfg->pipe_size,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_BUFFER_SIZE:
			if (parse_size_opt("buffer-size", optarg, &cfg->buffer_size,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_SPLICE_MIN:
			/* 0 is a size here: "splice from the first byte". */
			if (strcmp(optarg, "0") == 0)
				cfg->splice_min = 0;
			else if (parse_size_opt("splice-min", optarg,
			    &cfg->splice_min, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_FRAMING:
			if ((cfg->framing = zp_framing_parse(optarg)) == -1) {
				zp_seterr(err, errlen, "invalid framing '%s': "
				    "expected none, lf, octet, auto or nul",
				    zp_escape(optarg, q, sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_REPLAY_WINDOW:
			if (strcmp(optarg, "0") == 0)
				cfg->replay_window = 0;
			else if (parse_size_opt("replay-window", optarg,
			    &cfg->replay_window, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			if (cfg->replay_window > ZP_REPLAY_WINDOW_MAX) {
				zp_seterr(err, errlen, "--replay-window %s is "
				    "over the most, 64M", zp_escape(optarg, q,
				    sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_MAX_FRAME:
			if (parse_size_opt("max-frame", optarg, &cfg->max_frame,
			    err, errlen) == -1)
				return ZP_PARSE_ERROR;
			if (cfg->max_frame > ZP_FRAME_MAX) {
				zp_seterr(err, errlen, "--max-frame %s is over "
				    "the most, 16M", zp_escape(optarg, q,
				    sizeof(q)));
				return ZP_PARSE_ERROR;
			}
			break;
		case OPT_MAX_CONNS:
			if (parse_count("max-conns", optarg,
			    ZP_MAX_CONNS_LIMIT, &cfg->max_conns, err,
			    errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case OPT_CONNECT_TIMEOUT:
			if (parse_seconds("connect-timeout", optarg,
			    &cfg->connect_timeout, err, errlen) == -1)
				return ZP_PARSE_ERROR;
			break;
		case 'v':
			cfg->verbose++;
			break;
		case 'q':
			cfg->quiet = 1;
			break;
		case 'h':
			return ZP_PARSE_HELP;
		case 'V':
			return ZP_PARSE_VERSION;
		case ':':
			zp_seterr(err, errlen, "option '%s' needs a value",
			    zp_escape(argv[optind - 1], q, sizeof(q)));
			return ZP_PARSE_ERROR;
		default:
			bad_option(argv[optind - 1], optopt, err, errlen);
			return ZP_PARSE_ERROR;
		}
	}
	if (optind < argc) {
		zp_seterr(err, errlen, "unexpected argument '%s'",
		    zp_escape(argv[optind], q, sizeof(q)));
		return ZP_PARSE_ERROR;
	}
	if (cfg->nlistens == 0) {
		zp_seterr(err, errlen, "missing --listen [ADDR]:PORT");
		return ZP_PARSE_ERROR;
	}
	if (check_listens(cfg, err, errlen) == -1)
		return ZP_PARSE_ERROR;
	if (cfg->nupstreams == 0) {
		zp_seterr(err, errlen, "missing --upstream HOST:PORT");
		return ZP_PARSE_ERROR;
	}
	if (check_original(cfg, err, errlen) == -1)
		return ZP_PARSE_ERROR;
	if (cfg->log_file != NULL && cfg->use_syslog) {
		zp_seterr(err, errlen, "--log-file and --syslog exclude each "
		    "other");
		return ZP_PARSE_ERROR;
	}
	/*
	 * A group alone would leave uid 0 and its capabilities: the drop
	 * the operator expects would not happen.
	 */
	if (cfg->group != NULL && cfg->user == NULL) {
		zp_seterr(err, errlen, "--group needs --user");
		return ZP_PARSE_ERROR;
	}
	/* Said of headers nobody would read: a mistake, not a no-op. */
	if (!cfg->accept_proxy && (cfg->proxy_from.n > 0 ||
	    given_opt(given, OPT_PROXY_TIMEOUT))) {
		zp_seterr(err, errlen, "--%s needs --accept-proxy",
		    cfg->proxy_from.n > 0 ? "proxy-from" : "proxy-timeout");
		return ZP_PARSE_ERROR;
	}
	/* Only a framed stream has boundaries to move at. */
	if (cfg->framing == ZP_FRAMING_NONE && (given_opt(given,
	    OPT_MAX_FRAME) || given_opt(given, OPT_MAX_LIFETIME) ||
	    cfg->rebalance || given_opt(given, OPT_REBALANCE_RATE) ||
	    cfg->replay_window > 0)) {
		zp_seterr(err, errlen, "--%s needs --framing",
		    given_opt(given, OPT_MAX_FRAME) ? "max-frame" :
		    given_opt(given, OPT_MAX_LIFETIME) ? "max-lifetime" :
		    cfg->rebalance ? "rebalance" :
		    cfg->replay_window > 0 ? "replay-window" :
		    "rebalance-rate");
		return ZP_PARSE_ERROR;
	}
	if (given_opt(given, OPT_REBALANCE_RATE) && !cfg->rebalance) {
		zp_seterr(err, errlen, "--rebalance-rate needs --rebalance");
		return ZP_PARSE_ERROR;
	}
	/* An even spread is what leastconn and roundrobin aim at. */
	if (cfg->rebalance && cfg->balance != ZP_BALANCE_LEASTCONN &&
	    cfg->balance != ZP_BALANCE_ROUNDROBIN) {
		zp_seterr(err, errlen, "--rebalance needs --balance leastconn "
		    "or roundrobin");
		return ZP_PARSE_ERROR;
	}
	/* Which one was meant is a guess: say so rather than take the last. */
	if (cfg->verbose > 0 && cfg->quiet) {
		zp_seterr(err, errlen,
		    "--verbose (-v) and --quiet (-q) exclude "
		    "each other");
		return ZP_PARSE_ERROR;
	}
	return ZP_PARSE_OK;
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
		zp_seterr(err, errlen, "upstream '%s' does not resolve: %s",
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
		zp_seterr(err, errlen, "upstream '%s' does not resolve to a "
		    "usable address", zp_escape(up->host, q, sizeof(q)));
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

/*
 * Format an address; a v4-mapped IPv6 address (a client of a dual-stack
 * listener) is shown as the IPv4 address it is.
 */
const char *
zp_addr_str(const struct zp_addr *a, char *buf, size_t len)
{
	char	host[INET6_ADDRSTRLEN];

	if (a->ss.ss_family == AF_INET) {
		const struct sockaddr_in *sin = (const void *)&a->ss;

		inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
		snprintf(buf, len, "%s:%u", host, ntohs(sin->sin_port));
	} else if (a->ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)&a->ss;

		if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
			inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], host,
			    sizeof(host));
			snprintf(buf, len, "%s:%u", host,
			    ntohs(sin6->sin6_port));
		} else {
			inet_ntop(AF_INET6, &sin6->sin6_addr, host,
			    sizeof(host));
			snprintf(buf, len, "[%s]:%u", host,
			    ntohs(sin6->sin6_port));
		}
	} else
		snprintf(buf, len, "?");
	return buf;
}
