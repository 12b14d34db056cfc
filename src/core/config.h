/*
 * config.h - the command line, parsed and validated into struct zp_config.
 *
 * Parsing does no I/O apart from name resolution in zp_config_resolve();
 * every error is reported as one line in a caller's buffer.
 */
#ifndef ZP_CONFIG_H
#define ZP_CONFIG_H

#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lib/acl.h"

#define ZP_EX_USAGE	64	/* sysexits.h EX_USAGE: bad command line */
#define ZP_EX_NOUSER	67	/* sysexits.h EX_NOUSER: no such --user/--group */
#define ZP_EX_NOHOST	68	/* sysexits.h EX_NOHOST: name did not resolve */
#define ZP_EX_UNAVAILABLE 69	/* EX_UNAVAILABLE: no zproxy to take over from */
#define ZP_EX_SOFTWARE	70	/* sysexits.h EX_SOFTWARE: a thread's loop died */
#define ZP_EX_OSERR	71	/* sysexits.h EX_OSERR: a system call failed */
#define ZP_EX_CANTCREAT	73	/* sysexits.h EX_CANTCREAT: cannot open the log */
#define ZP_EX_NOPERM	77	/* sysexits.h EX_NOPERM: cannot become --user */
#define ZP_EX_CONFIG	78	/* EX_CONFIG: -l and the sockets given differ */

#define ZP_ERRLEN	256

enum zp_mode {
	ZP_MODE_SPLICE = 0,
	ZP_MODE_COPY,
};

/*
 * An IPv4 or IPv6 address and port: 28 bytes, where a sockaddr_storage
 * takes 128. A pair holds nine of these (client, balancer, PROXY
 * destination, upstream, ...): with sockaddr_storage they were more than
 * half of an idle connection's memory. ss_family reads the family as on
 * a sockaddr_storage (every member begins with it); (struct sockaddr *)
 * &a->ss is the address for the socket calls, sizeof(a->ss) their room.
 */
union zp_sockaddr {
	sa_family_t		ss_family;
	struct sockaddr		sa;
	struct sockaddr_in	sin;
	struct sockaddr_in6	sin6;
};

struct zp_addr {
	union zp_sockaddr	ss;
	socklen_t		len;
};

/*
 * Copy a socket address of len bytes into a; -1 (a untouched) when it
 * is not one that fits (a family other than IPv4 and IPv6).
 */
int	zp_addr_set(struct zp_addr *a, const struct sockaddr *sa,
	    socklen_t len);

/* systemd's FileDescriptorName= is at most 255 characters. */
#define ZP_FDNAME_MAX	255

/*
 * Where to listen: a literal address, every address (":PORT"), or a
 * socket the service manager passed ("systemd", "systemd:NAME": -l only).
 */
struct zp_listen_spec {
	int		udp;	/* "udp@...": datagrams (stream/udp.h) */
	int		tls;	/* "tls@...": TLS clients (tls/tls.h) */
	int		any;	/* ":PORT": IPv6 dual-stack, else IPv4 */
	unsigned short	port;
	struct zp_addr	addr;	/* valid when !any && !systemd */
	int		systemd;	/* from $LISTEN_FDS */
	char		name[ZP_FDNAME_MAX + 1];	/* "": any not named */
};

/* The longest --control/--takeover path (sun_path holds 107, less ".tmp.PID"). */
#define ZP_CONTROL_PATH_MAX	90

/* -l may be given this many times; and the sockets they may take in all. */
#define ZP_MAX_LISTENS	16
#define ZP_MAX_LISTEN_SOCKETS	64

/* One upstream as given, and the addresses it resolved to. */
struct zp_upstream_spec {
	char		*host;		/* name or literal, no brackets */
	char		 port[6];
	struct zp_addr	*addrs;		/* at start-up (zp_config_resolve());
					   the live ones are the upstream
					   module's, see upstream.h */
	size_t		 naddrs;
	int		 original;	/* "-u original": no address of its own */
	int		 weight;	/* ",weight=N", 0-256, when has_weight */
	int		 has_weight;	/* else 1 */
	int		 backup;	/* ",backup": only while no other is up */
	int		 udp;		/* "udp@HOST:PORT": datagrams, as
					   datagrams (stream/udp.h) */
	int		 tls;		/* "tls@HOST:PORT": over TLS
					   (tls/tls.h) */
};

/* -u HOST:PORT,weight=N: its range (0: no new client goes there). */
#define ZP_WEIGHT_MAX		256

#define ZP_MAX_UPSTREAMS	64

/*
 * --mirror: as given (its metrics' label), and where it resolved; to.tls
 * for "tls@HOST:PORT" (to.host is the name its certificate is checked
 * against, unless --upstream-sni).
 */
#define ZP_MAX_MIRRORS		4
struct zp_mirror_spec {
	char			*arg;
	struct zp_upstream_spec	 to;
};
#define ZP_THREADS_MAX		64	/* --threads; worker.h's ZP_MAX_THREADS */

/* Where upstream connections come from: --source. */
enum zp_source {
	ZP_SOURCE_NONE = 0,	/* the kernel's choice */
	ZP_SOURCE_ADDR,		/* --source ADDR: one address of this host */
	ZP_SOURCE_CLIENT,	/* --source client: the client's (IP_TRANSPARENT) */
};

enum zp_log_format {
	ZP_LOG_TEXT = 0,
	ZP_LOG_JSON,
};

/*
 * An option as it was read, from -f's file and then the command line
 * (those of the file that the command line gives again left out):
 * what --check prints, one "name value" a line, a file of its own.
 */
struct zp_config_item {
	const char	*name;		/* the long name (static) */
	char		*value;		/* NULL: a flag */
};

struct zp_config {
	struct zp_listen_spec	listens[ZP_MAX_LISTENS];
	size_t			nlistens;
	struct zp_upstream_spec	upstreams[ZP_MAX_UPSTREAMS];
	size_t			nupstreams;
	int			balance;	/* enum zp_balance */
	int			retries;	/* -1: every upstream once */
	int			max_fails;	/* passive health */
	double			fail_timeout;	/* seconds down after that */
	double			check_interval;	/* 0: no active checks */
	double			resolve_interval; /* 0: resolve at start only */
	int			mode;		/* enum zp_mode */
	size_t			pipe_size;	/* bytes */
	size_t			buffer_size;	/* bytes, copy mode */
	size_t			splice_min;	/* read that starts splicing; 0: always */
	long			max_conns;	/* 0: derive from RLIMIT_NOFILE */
	int			threads;	/* 0: one per CPU we may run on */
	double			connect_timeout; /* seconds */
	double			idle_timeout;	/* 0: none */
	double			fin_timeout;	/* half-closed, no byte moved; 0: none */
	double			linger_timeout;	/* after a reset, no ack progress */
	double			drain_timeout;	/* seconds, at SIGTERM */
	int			keepalive;
	int			send_proxy;	/* 0, 1 or 2 */
	int			source;		/* enum zp_source */
	struct zp_addr		source_addr;	/* ZP_SOURCE_ADDR, port 0 */
	struct zp_listen_spec	stats;
	int			have_stats;
	long			stats_max_conns; /* open at once, >= 1 */
	double			stats_timeout;	/* seconds from accept */
	struct zp_listen_spec	dns_server;	/* for --resolve-interval */
	int			have_dns_server;
	char			*log_file;
	int			use_syslog;
	int			log_format;	/* enum zp_log_format */
	int			verbose;	/* count of -v */
	int			quiet;
	/* Who may connect: --deny, --allow, --max-conns-per-source. */
	struct zp_acl		allow;
	struct zp_acl		deny;
	long			max_conns_per_source;	/* 0: no limit */
	/* Behind a balancer: --accept-proxy, --proxy-from, --proxy-timeout. */
	int			accept_proxy;
	struct zp_acl		proxy_from;	/* empty: any peer may send one */
	double			proxy_timeout;	/* seconds from accept */
	/* Privileges: whom to become after start-up, and the sandbox. */
	char			*user;		/* --user, or NULL: stay */
	char			*group;		/* --group; NULL: user's primary */
	int			no_sandbox;	/* --no-sandbox */
	int			io_uring;	/* --io-uring (experimental): eligible
						   pairs relay through a ring */
	/* Transparent modes: --tproxy, -u original, --allow-dst. */
	int			tproxy;		/* IP_TRANSPARENT listener */
	int			original;	/* -u original */
	struct zp_dstacl	allow_dst;	/* where original may go */
	/* Log streams: --framing, --max-frame. */
	int			framing;	/* enum zp_framing */
	size_t			max_frame;	/* 0: the framing's default */
	double			max_lifetime;	/* 0: streams stay */
	double			stall_timeout;	/* 0: an upstream may stall */
	double			coalesce;	/* a relay thread's pause after
						   a pass with no backlog; 0:
						   none */
	int			rebalance;	/* enum zp_rebalance */
	int			rebalance_rate;	/* moves a second */
	size_t			replay_window;	/* 0: no replay */
	/* A copy of every client's stream: --mirror. */
	struct zp_mirror_spec	mirrors[ZP_MAX_MIRRORS];
	size_t			nmirrors;
	/* Keep what no upstream takes: --spool and its bounds. */
	char			*spool_dir;	/* NULL: refuse, as ever */
	uint64_t		spool_max;	/* bytes */
	int			spool_senders;	/* files sent at once */
	double			spool_sync;	/* fdatasync this often */
	/* Restarts that refuse no client: --control, --takeover, --daemon. */
	char			*control;	/* hands the listeners over */
	char			*config_file;	/* -f, --config */
	int			check;		/* --check: print, exit */
	struct zp_config_item	*items;		/* as read, for --check */
	size_t			nitems;
	int			argc;		/* main's, for zproxy ctl reload */
	char			**argv;		/* (the process's: not owned) */
	char			*takeover;	/* takes them from there */
	int			daemon;		/* background once ready */
	/* Syslog over UDP: -l udp@, stream/udp.h. */
	double			udp_idle;	/* a source's stream closes */
	long			udp_max_sources; /* 0: from the fd limit */
	size_t			udp_rcvbuf;	/* each UDP socket's */
	/* TLS: -l tls@, tls/tls.h. Paths as given. */
	char			*tls_cert;	/* chain, leaf first (PEM) */
	char			*tls_key;
	char			*tls_client_ca;	/* NULL: no client certs */
	int			tls_min_version; /* enum zp_tls_version */
	char			*tls_ciphers;	/* TLS 1.2; NULL: OpenSSL's */
	char			*tls_ciphersuites; /* TLS 1.3; NULL: OpenSSL's */
	double			tls_handshake_timeout; /* from accept */
	long			tls_max_pending; /* handshakes at once; 0:
						   from the descriptor limit */
	/* TLS to -u tls@ upstreams. Paths as given. */
	char			*upstream_ca;	/* NULL: the system's store */
	char			*upstream_sni;	/* NULL: each upstream's host */
	char			*upstream_cert;	/* NULL: no client certificate */
	char			*upstream_key;
	int			upstream_verify; /* enum zp_tls_verify */
};

/* Is a listener tls@? */
int	zp_config_tls(const struct zp_config *);

/* Is an upstream tls@ (then no pair splices: tls/tls.h)? */
int	zp_config_tls_upstreams(const struct zp_config *);

/* Is a --mirror tls@ (its stream alone is TLS: pairs may splice)? */
int	zp_config_tls_mirrors(const struct zp_config *);

/*
 * May framed streams exist: --framing, or a UDP listener (a datagram is
 * a message whatever --framing says), or a socket systemd passes (it
 * may be UDP: only its type tells)?
 */
int	zp_config_framed(const struct zp_config *);

/* Are the upstreams UDP ones (-u udp@: then every one is)? */
int	zp_config_udp_upstreams(const struct zp_config *);

#define ZP_DEFAULT_PIPE_SIZE	(1024 * 1024)
#define ZP_REPLAY_WINDOW_MAX	(64 * 1024 * 1024)
#define ZP_DEFAULT_BUFFER_SIZE	(48 * 1024)
#define ZP_DEFAULT_SPLICE_MIN	(4 * 1024)
#define ZP_DEFAULT_CONNECT_TIMEOUT 5.0
#define ZP_DEFAULT_MAX_FAILS	3
#define ZP_DEFAULT_FAIL_TIMEOUT	10.0
#define ZP_DEFAULT_DRAIN_TIMEOUT 30.0
#define ZP_DEFAULT_FIN_TIMEOUT	300.0	/* HAProxy-like client-fin bound */
/*
 * An upstream that acknowledges nothing of a framed stream for this long
 * while zproxy has bytes for it is failed (a stopped collector, a full
 * disk): the stream moves on. Long enough for a collector's pauses (a
 * log rotation, a garbage collection), short against --fin-timeout.
 */
#define ZP_DEFAULT_STALL_TIMEOUT 10.0
#define ZP_DEFAULT_LINGER_TIMEOUT 30.0	/* nginx's lingering_time */
#define ZP_DEFAULT_STATS_MAX_CONNS 16
#define ZP_DEFAULT_STATS_TIMEOUT 5.0
#define ZP_DEFAULT_PROXY_TIMEOUT 3.0
#define ZP_DEFAULT_TLS_HANDSHAKE_TIMEOUT 10.0
#define ZP_DEFAULT_REBALANCE_RATE 10	/* HAProxy's timeout client-ish bound */
#define ZP_MAX_SIZE		(1024UL * 1024 * 1024)
#define ZP_DEFAULT_SPOOL_MAX	(1024ULL * 1024 * 1024)
#define ZP_SPOOL_MAX_LIMIT	(16ULL << 40)	/* 16T */
#define ZP_DEFAULT_SPOOL_SENDERS 4
#define ZP_DEFAULT_SPOOL_SYNC	1.0
#define ZP_DEFAULT_UDP_IDLE	60.0
/* --coalesce: the longest pause (it delays a thread's timers too). */
#define ZP_COALESCE_MAX		1.0
#define ZP_DEFAULT_UDP_RCVBUF	(8UL * 1024 * 1024)

/*
 * --rebalance: off; count (bare --rebalance: streams evened out by their
 * count for the weights); load (streams moved off a collector that falls
 * behind its streams, core/loadbal.h).
 */
enum zp_rebalance {
	ZP_REBALANCE_OFF = 0,
	ZP_REBALANCE_COUNT,
	ZP_REBALANCE_LOAD,
};

/* "count" or "load" into enum zp_rebalance, or -1; and back ("off"). */
int	zp_rebalance_parse(const char *);
const char *zp_rebalance_str(int);

/* Fill cfg with defaults; cfg owns nothing yet. */
void	zp_config_init(struct zp_config *);

/*
 * Resolve every upstream name into its addrs with a blocking getaddrinfo
 * (start-up only). Returns 0, or -1 with err filled.
 */
int	zp_config_resolve(struct zp_config *, char *, size_t);

/*
 * Resolve one upstream (blocking). Returns 0, or -1 with err filled.
 */
int	zp_upstream_resolve(struct zp_upstream_spec *, char *, size_t);

/* The same for another kind of peer, named so in err ("--mirror"). */
int	zp_peer_resolve(struct zp_upstream_spec *, const char *what, char *,
	    size_t);

/*
 * The usable (AF_INET, AF_INET6) addresses of a getaddrinfo result, in a
 * new array. Returns 0 with *v and *n set, or -1 when there are none (or
 * no memory).
 */
int	zp_addrs_from_ai(const struct addrinfo *, struct zp_addr **, size_t *);

/* Free what cfg owns. */
void	zp_config_free(struct zp_config *);

/*
 * Parse a size: decimal digits with an optional K, M, G or T suffix
 * (powers of 1024, either case, optional trailing "B"/"iB"). Returns 0,
 * or -1 with err filled when empty, malformed, zero, or above ZP_MAX_SIZE.
 */
int	zp_parse_size(const char *, size_t *, char *, size_t);

/* The same up to limit, named limit_str in the message ("16T"). */
int	zp_parse_bytes(const char *, uint64_t *, uint64_t limit,
	    const char *limit_str, char *, size_t);

/*
 * Parse a port "1".."65535". Returns 0, or -1 with err filled.
 */
int	zp_parse_port(const char *, unsigned short *, char *, size_t);

/*
 * Parse --source: "client", or an IPv4 or IPv6 literal without a port
 * (a v4-mapped one becomes the IPv4 address). Fills *mode and, for an
 * address, a (port 0). Returns 0, or -1 with err filled.
 */
int	zp_parse_source(const char *, int *mode, struct zp_addr *, char *,
	    size_t);

/*
 * Parse a listen address: ":PORT", "IPv4:PORT" or "[IPv6]:PORT".
 * Returns 0, or -1 with err filled.
 */
int	zp_parse_listen(const char *, struct zp_listen_spec *, char *, size_t);

/*
 * Parse -l: a listen address, "udp@" and a listen address (a UDP
 * listener), or "systemd" or "systemd:NAME" (NAME as systemd's
 * FileDescriptorName= allows: 1 to 255 printable ASCII characters but
 * ':'). Returns 0, or -1 with err filled.
 */
int	zp_parse_listen_arg(const char *, struct zp_listen_spec *, char *,
	    size_t);

/*
 * -l as given, for logs and the takeover: "systemd:NAME" or the address,
 * "udp@" or "tls@" before it (not before systemd[:NAME]: the label of a
 * passed socket, by which it is matched).
 */
const char *zp_listen_spec_str(const struct zp_listen_spec *, char *, size_t);

/*
 * Split "host:port" or "[v6]:port" into host (malloc'd, brackets removed)
 * and a validated port. Returns 0, or -1 with err filled.
 */
int	zp_parse_hostport(const char *, char **, char *, size_t, char *,
	    size_t);

/*
 * Parse seconds for the option called name (used in the message): plain
 * decimal digits with at most one '.', from 0.001 to 86400; no sign,
 * exponent, inf or nan. Returns 0, or -1 with err filled.
 */
int	zp_parse_seconds(const char *, const char *, double *, char *, size_t);

/*
 * Seconds (as parsed from the command line) as a timeval, rounded to the
 * microsecond; negative values give zero.
 */
struct timeval zp_seconds_tv(double);

#define ZP_ADDRSTRLEN	(46 + 10)

#endif
