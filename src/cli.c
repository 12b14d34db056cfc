/*
 * cli.c - the command line's table: for every option, what it sets and
 * how its value is read (getopt_long's table is made from it, in
 * cli_parse.c; the values are read in cli_value.c), and the help text.
 */

#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "cli_int.h"
#include "core/config.h"
#include "lib/framing.h"
#include "core/upstream.h"
#include "tls/tls.h"

#define ZP_MAX_CONNS_LIMIT	10000000L
/* Scrapers are few; each stats connection is a descriptor the relay lacks. */
#define ZP_STATS_MAX_CONNS_LIMIT 1024L

#define F(field)	offsetof(struct zp_config, field)

const struct cli_opt cli_opts[] = {
	{ "listen", 'l', CLI_CALL, 0, 0, 0, NULL, NULL, cli_opt_listen, 1 },
	{ "upstream", 'u', CLI_CALL, 0, 0, 0, NULL, NULL, cli_opt_upstream, 1 },
	{ "mode", 'm', CLI_WORD, F(mode), 0, 0, "splice or copy", cli_word_mode,
	    NULL, 0 },
	{ "pipe-size", OPT_PIPE_SIZE, CLI_SIZE, F(pipe_size), 1, 0, NULL,
	    NULL, NULL, 0 },
	{ "buffer-size", OPT_BUFFER_SIZE, CLI_SIZE, F(buffer_size), 1, 0,
	    NULL, NULL, NULL, 0 },
	/* 0 is a size here: "splice from the first byte". */
	{ "splice-min", OPT_SPLICE_MIN, CLI_SIZE, F(splice_min), 0, 0, NULL,
	    NULL, NULL, 0 },
	{ "io-uring", OPT_IO_URING, CLI_FLAG, F(io_uring), 0, 0, NULL, NULL,
	    NULL, 0 },
	{ "coalesce", OPT_COALESCE, CLI_SECONDS_OFF, F(coalesce), 0, 0, NULL,
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
	/* Bare, it keeps its first meaning: count. */
	{ "rebalance", OPT_REBALANCE, CLI_FLAG_WORD, F(rebalance),
	    ZP_REBALANCE_COUNT, 0, "count or load", zp_rebalance_parse, NULL,
	    0 },
	{ "rebalance-rate", OPT_REBALANCE_RATE, CLI_INT, F(rebalance_rate),
	    1, 1000, NULL, NULL, NULL, 0 },
	{ "replay-window", OPT_REPLAY_WINDOW, CLI_SIZE, F(replay_window), 0,
	    ZP_REPLAY_WINDOW_MAX, "64M", NULL, NULL, 0 },
	{ "spool", OPT_SPOOL, CLI_STRING, F(spool_dir), 0, 0, "directory",
	    NULL, NULL, 0 },
	{ "spool-max", OPT_SPOOL_MAX, CLI_CALL, F(spool_max), 0, 0, NULL,
	    NULL, cli_opt_spool_max, 0 },
	{ "spool-senders", OPT_SPOOL_SENDERS, CLI_INT, F(spool_senders), 1,
	    64, NULL, NULL, NULL, 0 },
	{ "spool-sync", OPT_SPOOL_SYNC, CLI_SECONDS, F(spool_sync), 0, 0,
	    NULL, NULL, NULL, 0 },
	/* syslog over UDP */
	{ "udp-idle", OPT_UDP_IDLE, CLI_SECONDS, F(udp_idle), 0, 0, NULL,
	    NULL, NULL, 0 },
	{ "udp-max-sources", OPT_UDP_MAX_SOURCES, CLI_LONG,
	    F(udp_max_sources), 1, ZP_MAX_CONNS_LIMIT, NULL, NULL, NULL, 0 },
	{ "udp-rcvbuf", OPT_UDP_RCVBUF, CLI_SIZE, F(udp_rcvbuf), 1, 0, NULL,
	    NULL, NULL, 0 },
	/* TLS: -l tls@ */
	{ "tls-cert", OPT_TLS_CERT, CLI_STRING, F(tls_cert), 0, 0, "file",
	    NULL, NULL, 0 },
	{ "tls-key", OPT_TLS_KEY, CLI_STRING, F(tls_key), 0, 0, "file", NULL,
	    NULL, 0 },
	{ "tls-client-ca", OPT_TLS_CLIENT_CA, CLI_STRING, F(tls_client_ca), 0,
	    0, "file", NULL, NULL, 0 },
	{ "tls-min-version", OPT_TLS_MIN_VERSION, CLI_WORD,
	    F(tls_min_version), 0, 0, "1.2 or 1.3", zp_tls_version_parse,
	    NULL, 0 },
	{ "tls-ciphers", OPT_TLS_CIPHERS, CLI_STRING, F(tls_ciphers), 0, 0,
	    "cipher list", NULL, NULL, 0 },
	{ "tls-ciphersuites", OPT_TLS_CIPHERSUITES, CLI_STRING,
	    F(tls_ciphersuites), 0, 0, "cipher suites", NULL, NULL, 0 },
	{ "tls-handshake-timeout", OPT_TLS_HANDSHAKE_TIMEOUT, CLI_SECONDS,
	    F(tls_handshake_timeout), 0, 0, NULL, NULL, NULL, 0 },
	{ "tls-max-pending", OPT_TLS_MAX_PENDING, CLI_LONG,
	    F(tls_max_pending), 1, ZP_MAX_CONNS_LIMIT, NULL, NULL, NULL, 0 },
	/* TLS: -u tls@ */
	{ "upstream-ca", OPT_UPSTREAM_CA, CLI_STRING, F(upstream_ca), 0, 0,
	    "file", NULL, NULL, 0 },
	{ "upstream-sni", OPT_UPSTREAM_SNI, CLI_STRING, F(upstream_sni), 0, 0,
	    "name", NULL, NULL, 0 },
	{ "upstream-cert", OPT_UPSTREAM_CERT, CLI_STRING, F(upstream_cert), 0,
	    0, "file", NULL, NULL, 0 },
	{ "upstream-key", OPT_UPSTREAM_KEY, CLI_STRING, F(upstream_key), 0, 0,
	    "file", NULL, NULL, 0 },
	{ "upstream-verify", OPT_UPSTREAM_VERIFY, CLI_WORD, F(upstream_verify),
	    0, 0, "required or none", zp_tls_verify_parse, NULL, 0 },
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
	    "text or json", cli_word_log_format, NULL, 0 },
	{ "stats", OPT_STATS, CLI_CALL, F(stats), 0, 0, NULL, NULL,
	    cli_opt_stats, 0 },
	/*
	 * 0 is refused, not "no limit": an endpoint without a cap is the
	 * descriptor exhaustion this option exists to prevent.
	 */
	{ "stats-max-conns", OPT_STATS_MAX_CONNS, CLI_LONG, F(stats_max_conns),
	    1, ZP_STATS_MAX_CONNS_LIMIT, NULL, NULL, NULL, 0 },
	{ "stats-timeout", OPT_STATS_TIMEOUT, CLI_SECONDS, F(stats_timeout), 0,
	    0, NULL, NULL, NULL, 0 },
	{ "send-proxy", OPT_SEND_PROXY, CLI_WORD, F(send_proxy), 0, 0,
	    "v1 or v2", cli_word_send_proxy, NULL, 0 },
	{ "dns-server", OPT_DNS_SERVER, CLI_CALL, F(dns_server), 0, 0, NULL,
	    NULL, cli_opt_dns_server, 0 },
	{ "source", OPT_SOURCE, CLI_CALL, F(source), 0, 0, NULL, NULL,
	    cli_opt_source, 0 },
	{ "mirror", OPT_MIRROR, CLI_CALL, 0, 0, 0, NULL, NULL, cli_opt_mirror,
	    1 },
	/* who may connect */
	{ "allow", OPT_ALLOW, CLI_CALL, F(allow), 0, 0, NULL, NULL, cli_opt_acl,
	    1 },
	{ "deny", OPT_DENY, CLI_CALL, F(deny), 0, 0, NULL, NULL, cli_opt_acl,
	    1 },
	{ "max-conns-per-source", OPT_MAX_CONNS_PER_SOURCE, CLI_LONG,
	    F(max_conns_per_source), 1, ZP_MAX_CONNS_LIMIT, NULL, NULL, NULL,
	    0 },
	/* behind a balancer */
	{ "accept-proxy", OPT_ACCEPT_PROXY, CLI_FLAG, F(accept_proxy), 0, 0,
	    NULL, NULL, NULL, 0 },
	{ "proxy-from", OPT_PROXY_FROM, CLI_CALL, F(proxy_from), 0, 0, NULL,
	    NULL, cli_opt_acl, 1 },
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
	    NULL, cli_opt_allow_dst, 1 },
	/* restarts */
	{ "control", OPT_CONTROL, CLI_CALL, F(control), 0, 0, NULL, NULL,
	    cli_opt_control, 0 },
	{ "takeover", OPT_TAKEOVER, CLI_CALL, F(takeover), 0, 0, NULL, NULL,
	    cli_opt_control, 0 },
	{ "daemon", OPT_DAEMON, CLI_FLAG, F(daemon), 0, 0, NULL, NULL, NULL,
	    0 },
	{ "config", 'f', CLI_STRING, F(config_file), 0, 0, "file", NULL,
	    NULL, 0 },
	{ "check", OPT_CHECK, CLI_FLAG, F(check), 0, 0, NULL, NULL, NULL, 0 },
	{ "verbose", 'v', CLI_MORE, F(verbose), 0, 0, NULL, NULL, NULL, 0 },
	{ "quiet", 'q', CLI_FLAG, F(quiet), 0, 0, NULL, NULL, NULL, 0 },
	{ "help", 'h', CLI_EXIT, 0, ZP_PARSE_HELP, 0, NULL, NULL, NULL, 0 },
	{ "version", 'V', CLI_EXIT, 0, ZP_PARSE_VERSION, 0, NULL, NULL, NULL,
	    0 },
};

/* Does the option take a value? */
int
cli_has_value(const struct cli_opt *o)
{
	return o->kind != CLI_FLAG && o->kind != CLI_FLAG_WORD &&
	    o->kind != CLI_MORE && o->kind != CLI_EXIT;
}

/* The table entry of a getopt value, or NULL. */
const struct cli_opt *
cli_find(int val)
{
	size_t	i;

	for (i = 0; i < CLI_NOPTS; i++)
		if (cli_opts[i].val == val)
			return &cli_opts[i];
	return NULL;
}

/*
 * The help text after its first line: data, like the table above, one
 * string as the reader sees it (docs/OPTIONS.md holds the same).
 */
static const char usage_text[] =
"\n"
"Relay every TCP connection accepted on the listen address to a fresh\n"
"connection to the upstream, both ways, with splice(2).\n"
"\n"
"  -l, --listen [ADDR]:PORT   where to accept: :PORT (every address),\n"
"                             0.0.0.0:PORT, 127.0.0.1:PORT, [::1]:PORT;\n"
"                             udp@[ADDR]:PORT: syslog datagrams (below);\n"
"                             tls@[ADDR]:PORT: TLS clients (below);\n"
"                             systemd: the sockets systemd passed\n"
"                             ($LISTEN_FDS), systemd:NAME: those named NAME\n"
"                             (FileDescriptorName=); give it again for more\n"
"  -u, --upstream HOST:PORT   where to connect: name:port, 1.2.3.4:port,\n"
"                             [::1]:port; every address of a name is tried;\n"
"                             give it again for more upstreams; original:\n"
"                             each client's original destination (under\n"
"                             --tproxy, or an nft redirect rule), alone;\n"
"                             ,weight=N (0-256, default 1) and ,backup\n"
"                             after it: HOST:PORT,weight=3,backup;\n"
"                             udp@HOST:PORT: datagrams of -l udp@ relayed\n"
"                             as datagrams (then every upstream is one);\n"
"                             tls@HOST:PORT: over TLS (below)\n"
"  -m, --mode splice|copy     data path (default splice)\n"
"      --pipe-size BYTES      size of each splice pipe (default 1M)\n"
"      --buffer-size BYTES    per-direction buffer in copy mode (default 48K)\n"
"      --splice-min BYTES     a direction copies until one read brings this\n"
"                             much, then takes a pipe (default 4K; 0: take\n"
"                             both pipes when a connection starts)\n"
"      --io-uring             relay plain copy-mode pairs through io_uring\n"
"                             (experimental; needs a build configured\n"
"                             for it, and -m copy)\n"
"      --coalesce SEC|off     after a pass of its loop that left nothing\n"
"                             waiting, a relay thread pauses this long, so\n"
"                             that the next pass reads many small messages\n"
"                             at once: less CPU per message, up to SEC more\n"
"                             latency (default off; 0.005 to 0.05 suits\n"
"                             streams of log lines)\n"
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
"                             by weight; backups only while no other is up\n"
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
"                             for; what it sends back is thrown away);\n"
"                             tls@HOST:PORT: over TLS (below)\n"
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
"      --rebalance [count|load]\n"
"                             count (bare --rebalance): move streams off\n"
"                             the busiest upstream while it has 2 more\n"
"                             than the idlest, for their weights; load:\n"
"                             off an upstream whose streams its receive\n"
"                             window holds back, to one that keeps up;\n"
"                             both: off a backup once another is up\n"
"      --rebalance-rate N     at most N such moves a second, and of streams\n"
"                             leaving an upstream that zproxy ctl drains\n"
"                             (default 10)\n"
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
"Syslog over UDP:\n"
"      --udp-idle SEC         -l udp@ makes each datagram one message of a\n"
"                             stream per source address (octet framing, lf\n"
"                             under --framing lf: moves, --replay-window,\n"
"                             --spool, --mirror apply); a source's stream\n"
"                             closes after SEC without a datagram (default\n"
"                             60); the next one opens another\n"
"      --udp-max-sources N    most per-source streams; beyond, datagrams of\n"
"                             new sources share one stream per thread\n"
"                             (default: half of --max-conns)\n"
"      --udp-rcvbuf BYTES     each UDP socket's receive buffer (default 8M)\n"
"\n"
"TLS (-l tls@[ADDR]:PORT: zproxy ends the clients' TLS, relays the bytes):\n"
"      --tls-cert FILE        the certificate (PEM), its chain after it\n"
"      --tls-key FILE         its private key (PEM)\n"
"      --tls-client-ca FILE   require client certificates signed by these CAs\n"
"                             (mutual TLS); the subject goes in the log line\n"
"      --tls-min-version 1.2|1.3\n"
"                             oldest version accepted (default 1.2)\n"
"      --tls-ciphers LIST     TLS 1.2 ciphers, OpenSSL's syntax\n"
"      --tls-ciphersuites LIST\n"
"                             TLS 1.3 suites, OpenSSL's syntax\n"
"      --tls-handshake-timeout SEC\n"
"                             the handshake must end within this long of\n"
"                             accept, however slowly it trickles (default 10)\n"
"      --tls-max-pending N    most handshakes under way at once, outside\n"
"                             --max-conns; beyond it the oldest is closed\n"
"                             (default from RLIMIT_NOFILE)\n"
"\n"
"TLS to upstreams (-u or --mirror tls@HOST:PORT: zproxy is the collector's\n"
"TLS client):\n"
"      --upstream-ca FILE     CAs the upstreams' certificates must come from\n"
"                             (default: the system's trust store)\n"
"      --upstream-sni NAME    the name sent as SNI and verified (default:\n"
"                             each upstream's HOST)\n"
"      --upstream-cert FILE   a client certificate (PEM) for mutual TLS\n"
"      --upstream-key FILE    its private key (PEM)\n"
"      --upstream-verify required|none\n"
"                             none: take any certificate (warned at start;\n"
"                             default required)\n"
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
"Restarts that refuse no client and control while it runs:\n"
"      --control PATH         a Unix socket (mode 0600, its user's) where\n"
"                             zproxy ctl is answered and the listening\n"
"                             sockets are handed to a zproxy started with\n"
"                             --takeover PATH\n"
"      --takeover PATH        take the listening sockets from the zproxy\n"
"                             behind PATH; it stops accepting, drains for\n"
"                             its --drain-timeout and exits 0\n"
"      --daemon               go to the background once serving (the\n"
"                             command exits 0 then, or with the error)\n"
"\n"
"A configuration file:\n"
"  -f, --config FILE          read options from FILE, one a line: the long\n"
"                             name and its value as on the command line\n"
"                             (\"upstream logs-a:514,weight=2\"), # comments;\n"
"                             an option on the command line replaces the\n"
"                             file's (every -u of it, for -u)\n"
"      --check                check the options (and look the upstreams up),\n"
"                             print them as a file would hold them, exit\n"
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
"--proxy-from and --allow-dst.\n";

/* Usage text. */
void
zp_config_usage(FILE *fp, const char *prog)
{
	fprintf(fp,
"usage: %s -l [ADDR]:PORT|systemd[:NAME] -u HOST:PORT [options]\n"
"       %s -f FILE [options] [--check]\n"
"       %s ctl [--control PATH] [--json] COMMAND...   (%s ctl --help)\n",
	    prog, prog, prog, prog);
	fputs(usage_text, fp);
}
