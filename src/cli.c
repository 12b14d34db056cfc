/*
 * cli.c - the command line. One table says, for every option, what it
 * sets and how its value is read (getopt_long's table is made from it);
 * the checks across options follow the loop.
 */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"
#include "framing.h"
#include "log.h"
#include "upstream.h"

enum {
	OPT_PIPE_SIZE = 256,
	OPT_BUFFER_SIZE,
	OPT_SPLICE_MIN,
	OPT_MAX_CONNS,
	OPT_THREADS,
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
	OPT_MIRROR,
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
	OPT_STALL_TIMEOUT,
	OPT_REBALANCE,
	OPT_REBALANCE_RATE,
	OPT_REPLAY_WINDOW,
	OPT_SPOOL,
	OPT_SPOOL_MAX,
	OPT_SPOOL_SENDERS,
	OPT_SPOOL_SYNC,
	/* restarts */
	OPT_CONTROL,
	OPT_TAKEOVER,
	OPT_DAEMON,
};

#define ZP_MAX_CONNS_LIMIT	10000000L
/* Scrapers are few; each stats connection is a descriptor the relay lacks. */
#define ZP_STATS_MAX_CONNS_LIMIT 1024L

/* How an option's value is read into its field. */
enum cli_kind {
	CLI_FLAG,		/* no value: an int set to 1 */
	CLI_MORE,		/* no value: an int counted up (-vv) */
	CLI_EXIT,		/* no value: parsing returns min (-h, -V) */
	CLI_INT,		/* an int from min to max */
	CLI_LONG,		/* a long from min to max */
	CLI_SECONDS,		/* a double, seconds */
	CLI_SECONDS_OFF,	/* the same, or "off" for 0 */
	CLI_SIZE,		/* a size_t: 64K, 1M; "0" too when min is 0;
				   at most max when max is not 0 (what: in
				   words) */
	CLI_WORD,		/* an int, one of the words word() knows
				   (what: the words, for the message) */
	CLI_STRING,		/* a char *, not empty (what: the thing) */
	CLI_CALL,		/* call() reads it */
};

struct cli_opt {
	const char	*name;		/* the long name */
	int		 val;		/* a letter, or an OPT_ */
	enum cli_kind	 kind;
	size_t		 off;		/* the field in struct zp_config */
	long		 min, max;
	const char	*what;
	int		(*word)(const char *);
	int		(*call)(struct zp_config *, const struct cli_opt *,
			    const char *, char *, size_t);
	int		 list;		/* may be given again: adds one more */
};

static int	opt_listen(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_upstream(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_stats(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_dns_server(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_acl(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_allow_dst(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_source(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_mirror(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_control(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	opt_spool_max(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
static int	word_mode(const char *);
static int	word_log_format(const char *);
static int	word_send_proxy(const char *);

#define F(field)	offsetof(struct zp_config, field)

static const struct cli_opt cli_opts[] = {
	{ "listen", 'l', CLI_CALL, 0, 0, 0, NULL, NULL, opt_listen, 1 },
	{ "upstream", 'u', CLI_CALL, 0, 0, 0, NULL, NULL, opt_upstream, 1 },
	{ "mode", 'm', CLI_WORD, F(mode), 0, 0, "splice or copy", word_mode,
	    NULL, 0 },
	{ "pipe-size", OPT_PIPE_SIZE, CLI_SIZE, F(pipe_size), 1, 0, NULL,
	    NULL, NULL, 0 },
	{ "buffer-size", OPT_BUFFER_SIZE, CLI_SIZE, F(buffer_size), 1, 0,
	    NULL, NULL, NULL, 0 },
	/* 0 is a size here: "splice from the first byte". */
	{ "splice-min", OPT_SPLICE_MIN, CLI_SIZE, F(splice_min), 0, 0, NULL,
	    NULL, NULL, 0 },
	{ "framing", OPT_FRAMING, CLI_WORD, F(framing), 0, 0,
	    "none, lf, octet, auto or nul", zp_framing_parse, NULL, 0 },
	{ "max-frame", OPT_MAX_FRAME, CLI_SIZE, F(max_frame), 1, ZP_FRAME_MAX,
	    "16M", NULL, NULL, 0 },
	{ "max-lifetime", OPT_MAX_LIFETIME, CLI_SECONDS, F(max_lifetime), 0,
	    0, NULL, NULL, NULL, 0 },
	/* "off": an upstream may take nothing for as long as it likes. */
	{ "stall-timeout", OPT_STALL_TIMEOUT, CLI_SECONDS_OFF,
	    F(stall_timeout), 0, 0, NULL, NULL, NULL, 0 },
	{ "rebalance", OPT_REBALANCE, CLI_FLAG, F(rebalance), 0, 0, NULL,
	    NULL, NULL, 0 },
	{ "rebalance-rate", OPT_REBALANCE_RATE, CLI_INT, F(rebalance_rate),
	    1, 1000, NULL, NULL, NULL, 0 },
	{ "replay-window", OPT_REPLAY_WINDOW, CLI_SIZE, F(replay_window), 0,
	    ZP_REPLAY_WINDOW_MAX, "64M", NULL, NULL, 0 },
	{ "spool", OPT_SPOOL, CLI_STRING, F(spool_dir), 0, 0, "directory",
	    NULL, NULL, 0 },
	{ "spool-max", OPT_SPOOL_MAX, CLI_CALL, F(spool_max), 0, 0, NULL,
	    NULL, opt_spool_max, 0 },
	{ "spool-senders", OPT_SPOOL_SENDERS, CLI_INT, F(spool_senders), 1,
	    64, NULL, NULL, NULL, 0 },
	{ "spool-sync", OPT_SPOOL_SYNC, CLI_SECONDS, F(spool_sync), 0, 0,
	    NULL, NULL, NULL, 0 },
	{ "max-conns", OPT_MAX_CONNS, CLI_LONG, F(max_conns), 1,
	    ZP_MAX_CONNS_LIMIT, NULL, NULL, NULL, 0 },
	{ "threads", OPT_THREADS, CLI_INT, F(threads), 1, ZP_THREADS_MAX,
	    NULL, NULL, NULL, 0 },
	{ "connect-timeout", OPT_CONNECT_TIMEOUT, CLI_SECONDS,
	    F(connect_timeout), 0, 0, NULL, NULL, NULL, 0 },
	{ "balance", OPT_BALANCE, CLI_WORD, F(balance), 0, 0,
	    "first, roundrobin, leastconn or source", zp_balance_parse, NULL,
	    0 },
	/* 0 is meaningful here: never try another upstream. */
	{ "retries", OPT_RETRIES, CLI_INT, F(retries), 0, ZP_MAX_UPSTREAMS,
	    NULL, NULL, NULL, 0 },
	{ "max-fails", OPT_MAX_FAILS, CLI_INT, F(max_fails), 1, 1000000, NULL,
	    NULL, NULL, 0 },
	{ "fail-timeout", OPT_FAIL_TIMEOUT, CLI_SECONDS, F(fail_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	{ "check-interval", OPT_CHECK_INTERVAL, CLI_SECONDS,
	    F(check_interval), 0, 0, NULL, NULL, NULL, 0 },
	{ "resolve-interval", OPT_RESOLVE_INTERVAL, CLI_SECONDS,
	    F(resolve_interval), 0, 0, NULL, NULL, NULL, 0 },
	/* "off": no timeout; 0 means none everywhere. */
	{ "idle-timeout", OPT_IDLE_TIMEOUT, CLI_SECONDS_OFF, F(idle_timeout),
	    0, 0, NULL, NULL, NULL, 0 },
	{ "fin-timeout", OPT_FIN_TIMEOUT, CLI_SECONDS_OFF, F(fin_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	{ "linger-timeout", OPT_LINGER_TIMEOUT, CLI_SECONDS,
	    F(linger_timeout), 0, 0, NULL, NULL, NULL, 0 },
	{ "keepalive", OPT_KEEPALIVE, CLI_FLAG, F(keepalive), 0, 0, NULL, NULL,
	    NULL, 0 },
	{ "drain-timeout", OPT_DRAIN_TIMEOUT, CLI_SECONDS, F(drain_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	{ "log-file", OPT_LOG_FILE, CLI_STRING, F(log_file), 0, 0, "path",
	    NULL, NULL, 0 },
	{ "syslog", OPT_SYSLOG, CLI_FLAG, F(use_syslog), 0, 0, NULL, NULL,
	    NULL, 0 },
	{ "log-format", OPT_LOG_FORMAT, CLI_WORD, F(log_format), 0, 0,
	    "text or json", word_log_format, NULL, 0 },
	{ "stats", OPT_STATS, CLI_CALL, F(stats), 0, 0, NULL, NULL, opt_stats,
	    0 },
	/*
	 * 0 is refused, not "no limit": an endpoint without a cap is the
	 * descriptor exhaustion this option exists to prevent.
	 */
	{ "stats-max-conns", OPT_STATS_MAX_CONNS, CLI_LONG, F(stats_max_conns),
	    1, ZP_STATS_MAX_CONNS_LIMIT, NULL, NULL, NULL, 0 },
	{ "stats-timeout", OPT_STATS_TIMEOUT, CLI_SECONDS, F(stats_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	{ "send-proxy", OPT_SEND_PROXY, CLI_WORD, F(send_proxy), 0, 0,
	    "v1 or v2", word_send_proxy, NULL, 0 },
	{ "dns-server", OPT_DNS_SERVER, CLI_CALL, F(dns_server), 0, 0, NULL,
	    NULL, opt_dns_server, 0 },
	{ "source", OPT_SOURCE, CLI_CALL, F(source), 0, 0, NULL, NULL,
	    opt_source, 0 },
	{ "mirror", OPT_MIRROR, CLI_CALL, 0, 0, 0, NULL, NULL, opt_mirror, 1 },
	/* who may connect */
	{ "allow", OPT_ALLOW, CLI_CALL, F(allow), 0, 0, NULL, NULL, opt_acl,
	    1 },
	{ "deny", OPT_DENY, CLI_CALL, F(deny), 0, 0, NULL, NULL, opt_acl, 1 },
	{ "max-conns-per-source", OPT_MAX_CONNS_PER_SOURCE, CLI_LONG,
	    F(max_conns_per_source), 1, ZP_MAX_CONNS_LIMIT, NULL, NULL, NULL,
	    0 },
	/* behind a balancer */
	{ "accept-proxy", OPT_ACCEPT_PROXY, CLI_FLAG, F(accept_proxy), 0, 0,
	    NULL, NULL, NULL, 0 },
	{ "proxy-from", OPT_PROXY_FROM, CLI_CALL, F(proxy_from), 0, 0, NULL,
	    NULL, opt_acl, 1 },
	{ "proxy-timeout", OPT_PROXY_TIMEOUT, CLI_SECONDS, F(proxy_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	/* privileges */
	{ "user", OPT_USER, CLI_STRING, F(user), 0, 0, "name", NULL, NULL,
	    0 },
	{ "group", OPT_GROUP, CLI_STRING, F(group), 0, 0, "name", NULL, NULL,
	    0 },
	{ "no-sandbox", OPT_NO_SANDBOX, CLI_FLAG, F(no_sandbox), 0, 0, NULL,
	    NULL, NULL, 0 },
	/* transparent modes */
	{ "tproxy", OPT_TPROXY, CLI_FLAG, F(tproxy), 0, 0, NULL, NULL, NULL,
	    0 },
	{ "allow-dst", OPT_ALLOW_DST, CLI_CALL, F(allow_dst), 0, 0, NULL,
	    NULL, opt_allow_dst, 1 },
	/* restarts */
	{ "control", OPT_CONTROL, CLI_CALL, F(control), 0, 0, NULL, NULL,
	    opt_control, 0 },
	{ "takeover", OPT_TAKEOVER, CLI_CALL, F(takeover), 0, 0, NULL, NULL,
	    opt_control, 0 },
	{ "daemon", OPT_DAEMON, CLI_FLAG, F(daemon), 0, 0, NULL, NULL, NULL,
	    0 },
	{ "verbose", 'v', CLI_MORE, F(verbose), 0, 0, NULL, NULL, NULL, 0 },
	{ "quiet", 'q', CLI_FLAG, F(quiet), 0, 0, NULL, NULL, NULL, 0 },
	{ "help", 'h', CLI_EXIT, 0, ZP_PARSE_HELP, 0, NULL, NULL, NULL, 0 },
	{ "version", 'V', CLI_EXIT, 0, ZP_PARSE_VERSION, 0, NULL, NULL, NULL,
	    0 },
};

#define CLI_NOPTS	(sizeof(cli_opts) / sizeof(cli_opts[0]))

/* Does the option take a value? */
static int
cli_has_value(const struct cli_opt *o)
{
	return o->kind != CLI_FLAG && o->kind != CLI_MORE &&
	    o->kind != CLI_EXIT;
}

/* The table entry of a getopt value, or NULL. */
static const struct cli_opt *
cli_find(int val)
{
	size_t	i;

	for (i = 0; i < CLI_NOPTS; i++)
		if (cli_opts[i].val == val)
			return &cli_opts[i];
	return NULL;
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
"      --threads N            threads relaying, each with its own loop, pipes\n"
"                             and pairs (1-64; default: one per CPU zproxy\n"
"                             may run on)\n"
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
"      --mirror HOST:PORT     send a copy of what each client sends to this\n"
"                             collector too, over a connection of its own\n"
"                             (up to 4; a slow one is dropped, never waited\n"
"                             for; what it sends back is thrown away)\n"
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
"      --stall-timeout SEC    an upstream that acknowledges nothing of a\n"
"                             stream for SEC while zproxy has bytes for it,\n"
"                             or does not close within SEC of the client's\n"
"                             FIN, has failed: the stream moves on, its\n"
"                             replay window sent again (default 10, or off)\n"
"      --rebalance            move streams off the busiest upstream while\n"
"                             it has 2 more than the idlest (an upstream\n"
"                             back up fills again)\n"
"      --rebalance-rate N     at most N such moves a second (default 10)\n"
"      --replay-window BYTES  keep the last BYTES sent to the upstream of\n"
"                             each stream, and send them again to the next\n"
"                             one from their first whole message when it\n"
"                             fails: at least once (default 0: off)\n"
"      --spool DIR            when no upstream takes a client, write its\n"
"                             stream to files in DIR and send them on once\n"
"                             one answers, in order (needs --framing)\n"
"      --spool-max BYTES      most the spool holds (default 1G); the file\n"
"                             system keeps 4M free; beyond, clients are\n"
"                             refused as without --spool\n"
"      --spool-senders N      files sent at once (default 4)\n"
"      --spool-sync SEC       fdatasync spool files this often (default 1):\n"
"                             a crash loses at most this much\n"
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
"value is given once, except -l, -u, --mirror, --allow, --deny,\n"
"--proxy-from and --allow-dst.\n",
	    prog);
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

/*
 * Name what getopt_long refused. It sets optopt to a flag's letter when a
 * long flag was given a value ("--verbose=2"), so look at the word itself.
 */
static void
bad_option(const char *word, int opt, char *err, size_t errlen)
{
	const struct cli_opt	*o;
	size_t			 len;
	char			 q[ZP_ESCLEN], flag[3];

	if (strncmp(word, "--", 2) == 0) {
		len = strcspn(word + 2, "=");
		for (o = cli_opts; o < cli_opts + CLI_NOPTS; o++)
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

/*
 * An option that takes a value takes one, but for those that add one more
 * of a list each time (o->list): a second value is refused, as nginx
 * refuses a duplicate single-valued directive, rather than silently
 * replacing the first (a unit file and its drop-in both setting it).
 * Flags may be repeated: they mean the same each time, and -vv counts.
 * given[] holds, per cli_opts entry, the value it was given. Returns 0,
 * or -1 with err filled.
 */
static int
check_once(const struct cli_opt *o, const char *arg, const char **given,
    char *err, size_t errlen)
{
	char	q1[ZP_ESCLEN / 2], q2[ZP_ESCLEN / 2];
	size_t	i = (size_t)(o - cli_opts);

	if (!cli_has_value(o) || o->list)
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
	const struct cli_opt	*o = cli_find(val);

	return o != NULL && given[o - cli_opts] != NULL;
}

/* --listen: one more listening socket, at most ZP_MAX_LISTENS. */
static int
opt_listen(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	if (cfg->nlistens == ZP_MAX_LISTENS) {
		zp_seterr(err, errlen, "too many --listen: at most %d",
		    ZP_MAX_LISTENS);
		return -1;
	}
	if (zp_parse_listen_arg(s, &cfg->listens[cfg->nlistens], err,
	    errlen) == -1)
		return -1;
	cfg->nlistens++;
	return 0;
}

/* --upstream: one more upstream, HOST:PORT or "original". */
static int
opt_upstream(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	struct zp_upstream_spec	*up;

	(void)o;
	if (cfg->nupstreams == ZP_MAX_UPSTREAMS) {
		zp_seterr(err, errlen, "too many --upstream: at most %d",
		    ZP_MAX_UPSTREAMS);
		return -1;
	}
	up = &cfg->upstreams[cfg->nupstreams];
	/*
	 * "original": each connection's own destination, as --tproxy or a
	 * redirect rule left it; no address here.
	 */
	if (strcmp(s, "original") == 0) {
		if ((up->host = strdup(s)) == NULL) {
			zp_seterr(err, errlen, "out of memory");
			return -1;
		}
		up->original = 1;
		cfg->original = 1;
		cfg->nupstreams++;
		return 0;
	}
	if (zp_parse_hostport(s, &up->host, up->port, sizeof(up->port), err,
	    errlen) == -1)
		return -1;
	cfg->nupstreams++;
	return 0;
}

/* --spool-max BYTES: beyond 1G, unlike the other sizes. */
static int
opt_spool_max(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	char	why[ZP_ERRLEN];

	if (zp_parse_bytes(s, &cfg->spool_max, ZP_SPOOL_MAX_LIMIT, "16T",
	    why, sizeof(why)) == 0)
		return 0;
	zp_seterr(err, errlen, "--%s: %s", o->name, why);
	return -1;
}

/* --mirror HOST:PORT: one more collector that gets a copy. */
static int
opt_mirror(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	struct zp_mirror_spec	*m;
	char			 e[ZP_ERRLEN];

	(void)o;
	if (cfg->nmirrors == ZP_MAX_MIRRORS) {
		zp_seterr(err, errlen, "too many --mirror: at most %d",
		    ZP_MAX_MIRRORS);
		return -1;
	}
	m = &cfg->mirrors[cfg->nmirrors];
	if (zp_parse_hostport(s, &m->to.host, m->to.port, sizeof(m->to.port),
	    e, sizeof(e)) == -1) {
		zp_seterr(err, errlen, "--mirror: %s", e);
		return -1;
	}
	if ((m->arg = strdup(s)) == NULL) {
		free(m->to.host);
		m->to.host = NULL;
		zp_seterr(err, errlen, "out of memory");
		return -1;
	}
	cfg->nmirrors++;
	return 0;
}

/* --stats [ADDR]:PORT. */
static int
opt_stats(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	if (zp_parse_listen(s, &cfg->stats, err, errlen) == -1)
		return -1;
	cfg->have_stats = 1;
	return 0;
}

/* --dns-server ADDR:PORT: an address, not a wildcard. */
static int
opt_dns_server(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	char	q[ZP_ESCLEN];

	(void)o;
	if (zp_parse_listen(s, &cfg->dns_server, err, errlen) == -1)
		return -1;
	if (cfg->dns_server.any) {
		zp_seterr(err, errlen, "invalid dns-server '%s': expected "
		    "ADDR:PORT", zp_escape(s, q, sizeof(q)));
		return -1;
	}
	cfg->have_dns_server = 1;
	return 0;
}

/* --allow, --deny, --proxy-from: one more CIDR rule in the option's list. */
static int
opt_acl(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;

	return zp_acl_add(field, o->name, s, err, errlen);
}

/* --allow-dst: one more destination -u original may go to. */
static int
opt_allow_dst(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	return zp_dstacl_add(&cfg->allow_dst, o->name, s, err, errlen);
}

/* --source client|ADDR. */
static int
opt_source(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	(void)o;
	return zp_parse_source(s, &cfg->source, &cfg->source_addr, err,
	    errlen);
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

/* --control, --takeover: a path; see parse_control_path(). */
static int
opt_control(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;

	return parse_control_path(o->name, s, field, err, errlen);
}

static int
word_mode(const char *s)
{
	if (strcmp(s, "splice") == 0)
		return ZP_MODE_SPLICE;
	if (strcmp(s, "copy") == 0)
		return ZP_MODE_COPY;
	return -1;
}

static int
word_log_format(const char *s)
{
	if (strcmp(s, "text") == 0)
		return ZP_LOG_TEXT;
	if (strcmp(s, "json") == 0)
		return ZP_LOG_JSON;
	return -1;
}

static int
word_send_proxy(const char *s)
{
	if (strcmp(s, "v1") == 0)
		return 1;
	if (strcmp(s, "v2") == 0)
		return 2;
	return -1;
}

/* A CLI_SIZE value: "0" when o->min is 0; at most o->max (not 0). */
static int
opt_size(const struct cli_opt *o, const char *s, size_t *out, char *err,
    size_t errlen)
{
	char	q[ZP_ESCLEN];

	if (o->min == 0 && strcmp(s, "0") == 0) {
		*out = 0;
		return 0;
	}
	if (parse_size_opt(o->name, s, out, err, errlen) == -1)
		return -1;
	if (o->max > 0 && *out > (size_t)o->max) {
		zp_seterr(err, errlen, "--%s %s is over the most, %s", o->name,
		    zp_escape(s, q, sizeof(q)), o->what);
		return -1;
	}
	return 0;
}

/* Read one option's value into its field, as its entry says. */
static int
opt_set(struct zp_config *cfg, const struct cli_opt *o, const char *s,
    char *err, size_t errlen)
{
	void	*field = (char *)cfg + o->off;
	char	 q[ZP_ESCLEN];
	long	 v;
	int	 w;
	size_t	 n;

	switch (o->kind) {
	case CLI_FLAG:
		*(int *)field = 1;
		return 0;
	case CLI_MORE:
		(*(int *)field)++;
		return 0;
	case CLI_INT:
	case CLI_LONG:
		if (parse_range(o->name, s, o->min, o->max, &v, err,
		    errlen) == -1)
			return -1;
		if (o->kind == CLI_INT)
			*(int *)field = (int)v;
		else
			*(long *)field = v;
		return 0;
	case CLI_SECONDS_OFF:
		if (strcmp(s, "off") == 0) {
			*(double *)field = 0;
			return 0;
		}
		if (zp_parse_seconds(o->name, s, field, err, errlen) == -1) {
			n = strlen(err);
			snprintf(err + n, errlen - n, ", or off");
			return -1;
		}
		return 0;
	case CLI_SECONDS:
		return zp_parse_seconds(o->name, s, field, err, errlen);
	case CLI_SIZE:
		return opt_size(o, s, field, err, errlen);
	case CLI_WORD:
		if ((w = o->word(s)) == -1) {
			zp_seterr(err, errlen, "invalid %s '%s': expected %s",
			    o->name, zp_escape(s, q, sizeof(q)), o->what);
			return -1;
		}
		*(int *)field = w;
		return 0;
	case CLI_STRING:
		if (*s == '\0') {
			zp_seterr(err, errlen, "invalid %s: empty %s", o->name,
			    o->what);
			return -1;
		}
		free(*(char **)field);
		if ((*(char **)field = strdup(s)) == NULL) {
			zp_seterr(err, errlen, "out of memory");
			return -1;
		}
		return 0;
	case CLI_CALL:
		return o->call(cfg, o, s, err, errlen);
	case CLI_EXIT:
		break;
	}
	return 0;
}

/* Parse argv into cfg. */
int
zp_config_parse(struct zp_config *cfg, int argc, char **argv, char *err,
    size_t errlen)
{
	struct option		 lo[CLI_NOPTS + 1];
	const struct cli_opt	*o;
	const char		*given[CLI_NOPTS] = { NULL };
	char			 q[ZP_ESCLEN];
	size_t			 i;
	int			 c;

	memset(lo, 0, sizeof(lo));
	for (i = 0; i < CLI_NOPTS; i++) {
		lo[i].name = cli_opts[i].name;
		lo[i].has_arg = cli_has_value(&cli_opts[i]) ?
		    required_argument : no_argument;
		lo[i].val = cli_opts[i].val;
	}
	opterr = 0;
	optind = 0;	/* 0 makes glibc reinitialise, for the unit tests */
	while ((c = getopt_long(argc, argv, ":l:u:m:vqhV", lo, NULL)) != -1) {
		if (c == ':') {
			zp_seterr(err, errlen, "option '%s' needs a value",
			    zp_escape(argv[optind - 1], q, sizeof(q)));
			return ZP_PARSE_ERROR;
		}
		if ((o = cli_find(c)) == NULL) {
			bad_option(argv[optind - 1], optopt, err, errlen);
			return ZP_PARSE_ERROR;
		}
		if (check_once(o, optarg, given, err, errlen) == -1)
			return ZP_PARSE_ERROR;
		if (o->kind == CLI_EXIT)
			return (int)o->min;
		if (opt_set(cfg, o, optarg, err, errlen) == -1)
			return ZP_PARSE_ERROR;
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
	    given_opt(given, OPT_STALL_TIMEOUT) ||
	    cfg->rebalance || given_opt(given, OPT_REBALANCE_RATE) ||
	    cfg->replay_window > 0)) {
		zp_seterr(err, errlen, "--%s needs --framing",
		    given_opt(given, OPT_MAX_FRAME) ? "max-frame" :
		    given_opt(given, OPT_MAX_LIFETIME) ? "max-lifetime" :
		    given_opt(given, OPT_STALL_TIMEOUT) ? "stall-timeout" :
		    cfg->rebalance ? "rebalance" :
		    cfg->replay_window > 0 ? "replay-window" :
		    "rebalance-rate");
		return ZP_PARSE_ERROR;
	}
	/* A spool file is cut, and a spooled stream sent on, at messages. */
	if (cfg->spool_dir != NULL && cfg->framing == ZP_FRAMING_NONE) {
		zp_seterr(err, errlen, "--spool needs --framing");
		return ZP_PARSE_ERROR;
	}
	if (cfg->spool_dir == NULL && (given_opt(given, OPT_SPOOL_MAX) ||
	    given_opt(given, OPT_SPOOL_SENDERS) ||
	    given_opt(given, OPT_SPOOL_SYNC))) {
		zp_seterr(err, errlen, "--%s needs --spool",
		    given_opt(given, OPT_SPOOL_MAX) ? "spool-max" :
		    given_opt(given, OPT_SPOOL_SENDERS) ? "spool-senders" :
		    "spool-sync");
		return ZP_PARSE_ERROR;
	}
	/* Sent on later to "the upstream": -u original has none to name. */
	if (cfg->spool_dir != NULL && cfg->original) {
		zp_seterr(err, errlen, "--spool cannot be used with "
		    "-u original");
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
