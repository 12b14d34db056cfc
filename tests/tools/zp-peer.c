/*
 * zp-peer.c - a scriptable TCP peer for zproxy's integration tests.
 *
 * One program plays every role a test needs on either side of the proxy:
 * an upstream server (listen), a client (connect), an echo server, many
 * concurrent clients, a port nobody answers on (blackhole) and a free-port
 * finder (port). It is libc only and runs every connection from one poll(2)
 * loop, so that hundreds of connections need no threads.
 *
 *   zp-peer listen  [options]            bind (127.0.0.1:0 by default), print
 *                                        the port on stdout as the first line,
 *                                        serve --conns connections
 *   zp-peer connect HOST PORT [options]  run --conns connections at once
 *   zp-peer blackhole [-b ADDR]          a listener whose accept queue is full:
 *                                        new SYNs are dropped, connects hang
 *   zp-peer port [-b ADDR]               print a port free right now, exit
 *   zp-peer gen -g N [options]           write the --send-gen stream of
 *                                        connections 0..--conns-1 to files
 *                                        (or stdout): what connect -g sent
 *   zp-peer trickle HOST PORT [options]  an attack on an HTTP endpoint: keep
 *                                        --conns connections open, each
 *                                        sending one header byte a tick, and
 *                                        report how long each one lived
 *   zp-peer churn HOST PORT [options]    short connections to an echo server
 *   zp-peer activate [-b ADDR] [-p PORT] -- CMD ARGS...
 *                                        hold a listening socket, run CMD on
 *                                        it as systemd would ($LISTEN_FDS),
 *                                        restart CMD at SIGHUP
 *                                        at --rate a second, each sending a
 *                                        message and checking its echo; every
 *                                        one counted ok or by how it failed
 *
 * Every connection ("session") does the same thing, chosen by options:
 * send a file or a deterministic pseudo-random stream (--send-gen, seeded by
 * the connection's index, so that the other side can --expect-gen the very
 * same bytes), receive into a file, discard, verify or echo, in any order
 * (at once, --after-eof, --no-read), slowly (--read-delay, --read-rate),
 * and end with a FIN (default), no FIN (--no-shut) or a reset
 * (--reset-after-recv/--reset-after-send: SO_LINGER {1,0} then close).
 *
 * Output: listen and blackhole print the port as their first stdout line
 * and flush; connect --hold prints "connected N" once every connection is
 * up; connect --expect-close prints "closed after S.SSSs (eof|reset|refused)";
 * trickle and churn print one "trickle ..." or "churn ..." line of counts
 * (churn counts every connection to the end and fails only then).
 * A summary goes to stderr (unless -q). Exit status: 0 when every session
 * ended as asked, 1 with one line on stderr on the first unexpected event
 * (error, short or wrong data, timeout), 2 for a bad command line.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* accept4, SOCK_NONBLOCK */
#endif
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define OBUF_SIZE	(256 * 1024)
#define RBUF_SIZE	(256 * 1024)
#define PER_WAKEUP	(1024 * 1024)	/* bytes per session per poll round */

enum mode {
	MODE_LISTEN,
	MODE_CONNECT,
	MODE_BLACKHOLE,
	MODE_PORT,
	MODE_TRICKLE,
	MODE_CHURN,
	MODE_ACTIVATE,
	MODE_GEN,
};

struct opts {
	enum mode	 mode;
	const char	*host;
	const char	*port;		/* connect: the peer's port */
	const char	*bind_addr;
	int		 bind_port;
	long		 conns;		/* listen: 0 = forever */
	int		 conns_set;
	const char	*send_file;
	uint64_t	 send_gen;
	int		 have_send_gen;
	const char	*recv_file;
	uint64_t	 expect_gen;
	int		 have_expect_gen;
	uint64_t	 seed;
	int		 echo;
	int		 after_eof;
	int		 no_read;
	int		 no_shut;
	int		 nodelay;
	int		 hold;
	int		 allow_reset;
	size_t		 chunk;
	double		 read_delay;
	double		 read_rate;	/* bytes per second, 0 = unlimited */
	double		 send_rate;	/* the same, for sending */
	double		 accept_delay;
	double		 expect_close;	/* seconds, 0 = not expected */
	double		 timeout;	/* seconds, 0 = none */
	uint64_t	 reset_after_recv;
	int		 have_rar;
	uint64_t	 reset_after_send;
	int		 have_ras;
	long		 pingpong;	/* messages, 0 = off */
	size_t		 msg_size;
	double		 duration;	/* trickle: seconds of attack */
	double		 interval;	/* trickle: seconds between bytes */
	double		 deadline;	/* trickle: the server's, expected */
	long		 garbage_every;	/* trickle: every Nth sends junk */
	double		 rate;		/* churn: connects per second */
	char		**cmd;		/* activate: what to run */
	long		 max_open;	/* churn: connections open at once */
	int		 verbose;
	int		 quiet;
	/* --tls: each session speaks TLS (connect: client, listen: server) */
	int		 tls;
	const char	*tls_cert;	/* ours: the server's, or a client's */
	const char	*tls_key;
	const char	*tls_ca;	/* verify the peer against it */
	const char	*tls_name;	/* connect: the name to verify, SNI */
	int		 tls_max;	/* highest version offered; 0: any */
	int		 tls_fail;	/* the TLS must fail: say why, exit 0 */
	int		 tls_print;	/* print version and peer serial */
};

/* A splitmix64 byte stream: the same (seed, index) gives the same bytes. */
struct rng {
	uint64_t	state;
	uint8_t		cache[8];
	unsigned	avail;
};

struct sess {
	int		 fd;
	long		 idx;
	int		 connecting;
	int		 done;
	double		 t0;
	const char	*end;		/* how it ended */

	/* outgoing */
	int		 src_fd;	/* --send file, -1 when none */
	uint64_t	 gen_left;	/* --send-gen bytes still to make */
	struct rng	 txr;
	char		*obuf;
	size_t		 ooff, olen;
	int		 src_done;	/* nothing more will enter obuf */
	int		 shut;		/* write side finished */
	uint64_t	 sent;

	/* incoming */
	int		 sink_fd;	/* --recv file, -1 when none */
	struct rng	 rxr;
	uint64_t	 recvd;
	int		 rd_eof;

	/* --tls */
	SSL		*ssl;
	int		 hs;		/* handshaking */
	short		 hs_want;	/* POLLIN or POLLOUT */
	size_t		 wretry;	/* an SSL_write that must be repeated */

	/* --pingpong */
	long		 pp_left;	/* messages still to send */
	size_t		 pp_wait;	/* bytes of the last one not back yet */
	double		 pp_sent_at;
};

static struct opts	 o;
static struct sess	*sessions;
static long		 nsess, cap_sess;
static long		 nconnected;	/* connects that completed */
static double		 t_start;
static struct pollfd	*pfds;		/* run_sessions' poll set */
static struct sess	**owner;	/* session of each pfds entry */
static size_t		 npfd_cap;
static double		*rtts;		/* --pingpong round trips, seconds */
static size_t		 nrtt, cap_rtt;
static char		 rbuf[RBUF_SIZE];
static SSL_CTX		*tls_ctx;
static long		 tls_failed;	/* --tls-fail: sessions whose TLS failed */
static char		 vbuf[RBUF_SIZE];

static void usage(FILE *fp)
{
	fputs(
"usage: zp-peer listen [options]\n"
"       zp-peer connect HOST PORT [options]\n"
"       zp-peer blackhole [-b ADDR] [-p PORT]\n"
"       zp-peer port [-b ADDR]\n"
"       zp-peer gen -g N [--seed N] [-n N] [-o FILE]\n"
"       zp-peer trickle HOST PORT [-n N] [--duration SEC] [--interval SEC]\n"
"                       [--deadline SEC] [--garbage-every K]\n"
"       zp-peer activate [-b ADDR] [-p PORT] -- CMD [ARGS...]\n"
"       zp-peer churn HOST PORT [--rate N] [--duration SEC] [--msg-size BYTES]\n"
"                     [--max-open N] [--seed N] [-t SEC] [-b ADDR] [-v]\n"
"\n"
"listen     bind ADDR:PORT (127.0.0.1:0), print the port as the first line of\n"
"           stdout, accept --conns connections (1; 0 = forever) and run a\n"
"           session on each; exit when the last one is done\n"
"connect    open --conns connections (1) to HOST PORT at once, run a session\n"
"           on each, exit when all are done\n"
"blackhole  listen with backlog 0, fill the accept queue and never accept, so\n"
"           that new SYNs are dropped; print the port, wait until killed\n"
"port       print a port that is free now for TCP and UDP on ADDR (default ::\n"
"           dual stack, else 0.0.0.0), below the ephemeral range, and exit\n"
"gen        write the --send-gen N stream of each connection index 0 to\n"
"           --conns - 1 (1) to --recv FILE (%d: the index; default stdout,\n"
"           one connection only): the bytes connect -g N --seed S sent on\n"
"           each, to compare with what a peer behind a proxy received\n"
"trickle    for --duration SEC (10), keep --conns connections (1) to an HTTP\n"
"           server, opened over the first second, each sending one byte of a\n"
"           request that never ends every --interval SEC (1); every\n"
"           --garbage-every Kth connection (0: none) sends junk at once. A\n"
"           connection the server closes is opened again at its next tick.\n"
"           Prints \"trickle conns=N immediate=N mid=N deadline=N late=N\n"
"           maxlife=S answered=N garbage=N failed=N\": lifetimes from connect to\n"
"           the server's close, below 0.5 s, up to --deadline SEC (5) - 1,\n"
"           up to --deadline + 1.5, beyond (one still open at the end counts\n"
"           only when that old); answered: got any byte back; failed:\n"
"           connects refused or reset before they completed\n"
"activate   bind ADDR:PORT (127.0.0.1:0), listen, print the port, and run CMD\n"
"           with the socket as descriptor 3, LISTEN_FDS=1, LISTEN_PID its pid,\n"
"           LISTEN_FDNAMES=zp: socket activation as systemd does it. SIGHUP\n"
"           restarts CMD (SIGTERM, wait, start again; prints \"restarted N\")\n"
"           while the socket stays open, as systemd's does across a restart.\n"
"           SIGTERM stops CMD and exits with its status; so does CMD's exit\n"
"churn      for --duration SEC (10), open --rate N (1000) connections a second\n"
"           to HOST PORT, evenly paced, to an echo server, maybe behind a proxy\n"
"           (listen --echo -n 0 -t 0 --allow-reset: else it stops after 120 s\n"
"           or at the first reset). Each sends --msg-size BYTES (100) of the\n"
"           --send-gen stream of its index and a FIN, must get exactly those\n"
"           bytes back, then EOF, and is closed. At most --max-open N (2000)\n"
"           are open at once: a connect due when none may open waits for room\n"
"           and counts as late. -t SEC (10) is per connection. Every one is\n"
"           counted once: ok; refused (ECONNREFUSED); reset (ECONNRESET or\n"
"           EPIPE once connected); bad (wrong, short or extra bytes); timeout;\n"
"           error (any other errno). Prints \"churn attempted=N ok=N refused=N\n"
"           reset=N bad=N timeout=N error=N late=N rate=R\" on stdout, R the\n"
"           connects a second achieved; exit 0 only when all were ok, else 1\n"
"           with the first failure on stderr; -v: a line for each that failed\n"
"           SIGUSR1 ends the period at once: nothing more opens, those open\n"
"           finish and are counted\n"
"\n"
"addresses\n"
"  -b, --bind ADDR          listen address (127.0.0.1; ::1 for IPv6); connect,\n"
"                           churn: the source address of every connection\n"
"                           (e.g. 127.0.0.2; default: the kernel's choice)\n"
"  -p, --port N             listen port (0 = any)\n"
"  -n, --conns N            number of connections (see above)\n"
"what a session sends (default nothing)\n"
"  -s, --send FILE          the contents of FILE\n"
"  -g, --send-gen N         N pseudo-random bytes, seeded by --seed and the\n"
"                           connection's index (0, 1, ... in accept/connect order)\n"
"  -e, --echo               every byte received\n"
"what it does with what it receives (default discard)\n"
"  -o, --recv FILE          write it to FILE (%d: the connection index; -:\n"
"                           stdout, after the port line in listen mode)\n"
"  -x, --expect-gen N       it must be exactly the --send-gen N stream; with\n"
"                           --no-shut the session ends once N bytes arrived\n"
"      --seed N             stream seed (default 1)\n"
"how\n"
"      --after-eof          read to EOF before sending anything\n"
"      --no-read            never read: send, shut down, close\n"
"      --no-shut            no shutdown(SHUT_WR) after the last byte sent; wait\n"
"                           for the peer's EOF (or --expect-gen bytes)\n"
"      --chunk N            at most N bytes per send() (default 64K)\n"
"      --nodelay            set TCP_NODELAY\n"
"      --read-delay SEC     do not read during the first SEC seconds\n"
"      --read-rate BYTES    read at most BYTES per second (K/M/G suffixes)\n"
"      --send-rate BYTES    send at most BYTES per second (K/M/G suffixes)\n"
"      --reset-after-recv N abort (SO_LINGER 0 close: RST) once N bytes arrived\n"
"      --reset-after-send N abort once N bytes were sent\n"
"      --allow-reset        a reset or EPIPE from the peer ends the session\n"
"                           quietly instead of failing\n"
"      --accept-delay SEC   listen: accept nothing during the first SEC seconds\n"
"      --hold               connect: no FIN; print \"connected N\" once all N are\n"
"                           up, then keep them open until the peer closes them\n"
"                           or zp-peer is killed\n""                           listen: no FIN, and a connection stays open after\n"
"                           the peer's EOF (never closed first) until zp-peer\n"
"                           is killed\n"
"      --pingpong N         connect: N times send a --msg-size message (100)\n"
"                           and wait for its echo (verified); prints \"rtt n=N\n"
"                           p50=...ms p99=...ms max=...ms\" on stdout\n"
"      --expect-close SEC   connect: the connection must be closed by the peer\n"
"                           (EOF, reset, or refused) within SEC seconds; prints\n"
"                           \"closed after S.SSSs (how)\"\n"
"TLS (connect, listen)\n"
"      --tls                each session speaks TLS: connect as the client,\n"
"                           listen as the server\n"
"      --tls-cert FILE      our certificate (PEM, chain after it): listen's,\n"
"                           or a client certificate\n"
"      --tls-key FILE       its key\n"
"      --tls-ca FILE        verify the peer against these CAs (listen: a\n"
"                           client certificate is required)\n"
"      --tls-name NAME      connect: the server name to verify and send (SNI)\n"
"      --tls-max-version V  offer at most 1.0, 1.1, 1.2 or 1.3 (old ones at\n"
"                           OpenSSL's security level 0)\n"
"      --tls-fail           the TLS must fail: print \"tls-failed: REASON\"\n"
"                           and end the session; exit 1 if none failed\n"
"      --tls-print          print \"tls: VERSION serial=HEX\" (the peer's\n"
"                           certificate) once a handshake is done\n"
"  -t, --timeout SEC        fail if not done within SEC seconds (120; 0 = never)\n"
"                           churn: each connection's own limit (10)\n"
"  -v, --verbose            one line per session on stderr\n"
"  -q, --quiet              no summary line\n"
"  -h, --help               this text\n"
"\n"
"Sizes take K, M, G suffixes (powers of 1024). Exit status: 0 all sessions\n"
"ended as asked, 1 unexpected event (one line on stderr), 2 usage error.\n",
	    fp);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));

/* Print one line "zp-peer: ..." and exit 1. */
static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("zp-peer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf,
    1, 2), noreturn));

/* Print one line about the command line and exit 2. */
static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("zp-peer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (zp-peer --help)\n", stderr);
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Parse "123", "64K", "1M", "2G" (powers of 1024). */
static uint64_t parse_size(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno != 0 || *s == '-')
		usage_error("%s: bad size '%s'", opt, s);
	switch (*end) {
	case 'k': case 'K': mul = 1024ULL; end++; break;
	case 'm': case 'M': mul = 1024ULL * 1024; end++; break;
	case 'g': case 'G': mul = 1024ULL * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end != '\0')
		usage_error("%s: bad size '%s'", opt, s);
	return (uint64_t)v * mul;
}

static double parse_secs(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || v < 0)
		usage_error("%s: bad number of seconds '%s'", opt, s);
	return v;
}

#define SPLITMIX_GAMMA	0x9e3779b97f4a7c15ULL

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += SPLITMIX_GAMMA);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void rng_init(struct rng *r, uint64_t seed, long idx)
{
	uint64_t s = seed * 0x100000001b3ULL + (uint64_t)idx;

	r->state = splitmix64(&s);
	r->avail = 0;
}

static void rng_fill(struct rng *r, char *buf, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (r->avail == 0) {
			uint64_t v = splitmix64(&r->state);

			memcpy(r->cache, &v, sizeof(v));
			r->avail = 8;
		}
		buf[i] = (char)r->cache[8 - r->avail--];
	}
}

/*
 * Put r at byte off of the (seed, idx) stream without making the bytes
 * before it: word w of the stream is made from state0 + (w + 1) * gamma.
 * churn sends from here, so that a partial send needs no buffer.
 */
static void rng_seek(struct rng *r, uint64_t seed, long idx, uint64_t off)
{
	char skip[8];

	rng_init(r, seed, idx);
	r->state += (off / 8) * SPLITMIX_GAMMA;
	rng_fill(r, skip, (size_t)(off % 8));
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
		die("fcntl: %s", strerror(errno));
}

/* Resolve a numeric or named address; die on failure. */
static struct addrinfo *resolve(const char *host, const char *port, int passive)
{
	struct addrinfo hints, *res;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0)
		die("%s port %s: %s", host ? host : "*", port, gai_strerror(rc));
	return res;
}

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		die("getsockname: %s", strerror(errno));
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* A socket bound to addr:port (no SO_REUSEPORT: a second bind must fail). */
static int bind_socket(const char *addr, int port, int dualstack)
{
	struct addrinfo *ai;
	char pbuf[16];
	int fd, one = 1, zero = 0;

	snprintf(pbuf, sizeof(pbuf), "%d", port);
	ai = resolve(addr, pbuf, 1);
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd == -1)
		die("socket: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1)
		die("SO_REUSEADDR: %s", strerror(errno));
	if (dualstack && ai->ai_family == AF_INET6)
		(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
		    sizeof(zero));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1)
		die("bind %s port %d: %s", addr, port, strerror(errno));
	freeaddrinfo(ai);
	return fd;
}

static void print_port(int port)
{
	printf("%d\n", port);
	if (fflush(stdout) == EOF)
		die("stdout: %s", strerror(errno));
}

/*
 * A port is "free" to a test when both a TCP and a UDP socket can bind it
 * on addr (dual stack for "::"). Returns 1 if so; nothing stays bound.
 */
static int port_is_free(const char *addr, int port, int dualstack)
{
	static const int types[] = { SOCK_STREAM, SOCK_DGRAM };
	struct addrinfo *ai;
	char pbuf[16];
	int ok = 1, one = 1, zero = 0;
	size_t i;

	snprintf(pbuf, sizeof(pbuf), "%d", port);
	ai = resolve(addr, pbuf, 1);
	for (i = 0; ok && i < sizeof(types) / sizeof(types[0]); i++) {
		int fd = socket(ai->ai_family, types[i] | SOCK_CLOEXEC, 0);

		if (fd == -1)
			die("socket: %s", strerror(errno));
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
		    sizeof(one));
		if (dualstack && ai->ai_family == AF_INET6)
			(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
			    sizeof(zero));
		ok = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0;
		close(fd);
	}
	freeaddrinfo(ai);
	return ok;
}

/* The first port of the kernel's ephemeral range (32768 if unreadable). */
static int ephemeral_low(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	int lo = 32768, hi;

	if (f != NULL) {
		if (fscanf(f, "%d %d", &lo, &hi) != 2)
			lo = 32768;
		fclose(f);
	}
	return lo;
}

/*
 * Mode port: a port that is free now, chosen at random *below* the
 * ephemeral range. A port the kernel hands out for bind(0) is ephemeral,
 * and under a parallel test run some other test's outgoing connection
 * can be given the same port between this check and the caller's bind
 * (CI saw "bind 127.0.0.1 port 40575: Address already in use"). Below the
 * range only another explicit bind can take it.
 */
static int run_port(void)
{
	const char *addr = o.bind_addr;
	int dualstack = 1, lo, top, tries;
	struct timespec ts;

	if (addr == NULL) {
		/* dual stack "::" when IPv6 exists, so both families are free */
		int s6 = socket(AF_INET6, SOCK_STREAM, 0);

		if (s6 != -1) {
			close(s6);
			addr = "::";
		} else {
			addr = "0.0.0.0";
			dualstack = 0;
		}
	}
	top = ephemeral_low();
	lo = top - 12000 < 1024 ? 1024 : top - 12000;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	srandom((unsigned)(ts.tv_nsec ^ getpid() * 2654435761u));
	for (tries = 0; top - lo >= 1000 && tries < 500; tries++) {
		int port = lo + (int)(random() % (top - lo));

		if (port_is_free(addr, port, dualstack)) {
			print_port(port);
			return 0;
		}
	}
	/* a narrowed range: what the kernel picks, as before */
	{
		int fd = bind_socket(addr, 0, dualstack);

		print_port(bound_port(fd));
		close(fd);
	}
	return 0;
}

/*
 * Mode blackhole: listen(fd, 0) and connect to it ourselves until a
 * connection no longer completes, i.e. the accept queue is full and the
 * kernel drops SYNs; then nothing will ever be accepted.
 */
static int run_blackhole(void)
{
	const char *addr = o.bind_addr ? o.bind_addr : "127.0.0.1";
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int lfd, fillers[16], n = 0, full = 0;

	lfd = bind_socket(addr, o.bind_port, 0);
	if (listen(lfd, 0) == -1)
		die("listen: %s", strerror(errno));
	if (getsockname(lfd, (struct sockaddr *)&ss, &len) == -1)
		die("getsockname: %s", strerror(errno));
	while (!full && n < (int)(sizeof(fillers) / sizeof(fillers[0]))) {
		struct pollfd pfd;
		int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);

		if (fd == -1)
			die("socket: %s", strerror(errno));
		if (connect(fd, (struct sockaddr *)&ss, len) == -1 &&
		    errno != EINPROGRESS)
			die("blackhole: connect: %s", strerror(errno));
		pfd.fd = fd;
		pfd.events = POLLOUT;
		if (poll(&pfd, 1, 300) == 0) {
			/* SYN dropped: the queue is full */
			close(fd);
			full = 1;
		} else {
			int err = 0;
			socklen_t elen = sizeof(err);

			getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
			if (err != 0)
				die("blackhole: connect: %s", strerror(err));
			fillers[n++] = fd;
		}
	}
	if (!full)
		die("blackhole: %d connections completed, queue never filled",
		    n);
	print_port(bound_port(lfd));
	for (;;) {
		double left = o.timeout > 0 ? t_start + o.timeout - now() : 3600;

		if (left <= 0)
			die("blackhole: timeout after %.1fs", o.timeout);
		poll(NULL, 0, (int)(left * 1000) + 1);
	}
}

static void sess_refill(struct sess *);

/* ---- --tls ---------------------------------------------------------- */

/* The last TLS error, in OpenSSL's words. */
static const char *tls_err(void)
{
	static char b[256];
	unsigned long e = ERR_peek_last_error();

	if (e == 0)
		return errno != 0 ? strerror(errno) : "closed by the peer";
	ERR_error_string_n(e, b, sizeof(b));
	return b;
}

static void sess_finish(struct sess *, const char *, int);
static void sess_reset(struct sess *, const char *, int);
static int is_reset(int);

/*
 * The TLS of a session failed (its handshake, or an alert after it):
 * with --tls-fail that is what the test wants, said on stdout.
 */
static void sess_tls_failed(struct sess *s, const char *what)
{
	if (!o.tls_fail)
		die("conn %ld: TLS %s: %s", s->idx, what, tls_err());
	printf("tls-failed: %s\n", tls_err());
	fflush(stdout);
	ERR_clear_error();
	tls_failed++;
	sess_finish(s, "tls-failed", 0);
}

static int tls_version(const char *v)
{
	if (strcmp(v, "1.0") == 0)
		return TLS1_VERSION;
	if (strcmp(v, "1.1") == 0)
		return TLS1_1_VERSION;
	if (strcmp(v, "1.2") == 0)
		return TLS1_2_VERSION;
	if (strcmp(v, "1.3") == 0)
		return TLS1_3_VERSION;
	usage_error("--tls-max-version: 1.0, 1.1, 1.2 or 1.3");
	return 0;
}

static void tls_setup(void)
{
	int server = o.mode == MODE_LISTEN;

	tls_ctx = SSL_CTX_new(server ? TLS_server_method() :
	    TLS_client_method());
	if (tls_ctx == NULL)
		die("TLS: %s", tls_err());
	if (o.tls_max != 0) {
		/* Old versions only exist below OpenSSL's default level. */
		SSL_CTX_set_security_level(tls_ctx, 0);
		(void)SSL_CTX_set_cipher_list(tls_ctx, "DEFAULT:@SECLEVEL=0");
		(void)SSL_CTX_set_min_proto_version(tls_ctx, TLS1_VERSION);
		(void)SSL_CTX_set_max_proto_version(tls_ctx, o.tls_max);
	}
	SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_options(tls_ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	if (o.tls_cert != NULL &&
	    SSL_CTX_use_certificate_chain_file(tls_ctx, o.tls_cert) != 1)
		die("--tls-cert %s: %s", o.tls_cert, tls_err());
	if (o.tls_key != NULL && SSL_CTX_use_PrivateKey_file(tls_ctx,
	    o.tls_key, SSL_FILETYPE_PEM) != 1)
		die("--tls-key %s: %s", o.tls_key, tls_err());
	if (o.tls_ca != NULL) {
		if (SSL_CTX_load_verify_locations(tls_ctx, o.tls_ca, NULL) != 1)
			die("--tls-ca %s: %s", o.tls_ca, tls_err());
		SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_PEER | (server ?
		    SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), NULL);
	}
}

/* The socket is connected: begin the handshake. */
static void sess_tls_start(struct sess *s)
{
	if ((s->ssl = SSL_new(tls_ctx)) == NULL ||
	    SSL_set_fd(s->ssl, s->fd) != 1)
		die("conn %ld: TLS: %s", s->idx, tls_err());
	if (o.mode == MODE_LISTEN) {
		SSL_set_accept_state(s->ssl);
		s->hs_want = POLLIN;
	} else {
		SSL_set_connect_state(s->ssl);
		if (o.tls_name != NULL &&
		    (SSL_set_tlsext_host_name(s->ssl, o.tls_name) != 1 ||
		    SSL_set1_host(s->ssl, o.tls_name) != 1))
			die("conn %ld: TLS: %s", s->idx, tls_err());
		s->hs_want = POLLOUT;
	}
	s->hs = 1;
}

/* One step of the handshake. */
static void sess_handshake(struct sess *s)
{
	int r, e;

	ERR_clear_error();
	errno = 0;
	if ((r = SSL_do_handshake(s->ssl)) == 1) {
		s->hs = 0;
		if (o.tls_print) {
			X509 *c = SSL_get0_peer_certificate(s->ssl);
			char *hex = NULL;
			BIGNUM *bn;

			if (c != NULL && (bn = ASN1_INTEGER_to_BN(
			    X509_get0_serialNumber(c), NULL)) != NULL) {
				hex = BN_bn2hex(bn);
				BN_free(bn);
			}
			printf("tls: %s serial=%s\n", SSL_get_version(s->ssl),
			    hex != NULL ? hex : "none");
			fflush(stdout);
			OPENSSL_free(hex);
		}
		return;
	}
	e = SSL_get_error(s->ssl, r);
	if (e == SSL_ERROR_WANT_READ)
		s->hs_want = POLLIN;
	else if (e == SSL_ERROR_WANT_WRITE)
		s->hs_want = POLLOUT;
	else
		sess_tls_failed(s, "handshake");
}

/*
 * --tls-fail, and the connection was reset: the alert that came before
 * the reset says why the TLS failed. Returns 1 when it did (the session
 * is over), 0 when there was none.
 */
static int sess_tls_alert(struct sess *s, const char *what)
{
	if (!o.tls_fail || s->ssl == NULL)
		return 0;
	ERR_clear_error();
	if (SSL_read(s->ssl, vbuf, 1) <= 0 && ERR_peek_last_error() != 0) {
		sess_tls_failed(s, what);
		return 1;
	}
	return 0;
}

/*
 * SSL_read or SSL_write returned r <= 0: 1 to try again later, 0 at
 * the end of the stream (reads), -1 when the session is over (handled).
 */
static int sess_tls_io_error(struct sess *s, int r, const char *what)
{
	int saved = errno, e = SSL_get_error(s->ssl, r);

	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
		return 1;
	if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL &&
	    saved == 0 && ERR_peek_last_error() == 0))
		return 0;
	if (e == SSL_ERROR_SYSCALL && is_reset(saved)) {
		if (sess_tls_alert(s, what))
			return -1;
		sess_reset(s, what, saved);
		return -1;
	}
	errno = saved;
	sess_tls_failed(s, what);
	return -1;
}

static void sess_abort(struct sess *s)
{
	struct linger l = { 1, 0 };

	if (setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) == -1)
		die("conn %ld: SO_LINGER: %s", s->idx, strerror(errno));
	close(s->fd);
	s->fd = -1;
}

static void sess_finish(struct sess *s, const char *end, int abort_it)
{
	double t = now();
	int unread = 0;

	/* What is left unread makes the close a reset: -v says so. */
	if (o.verbose && s->fd != -1 && !abort_it &&
	    ioctl(s->fd, FIONREAD, &unread) == 0 && unread > 0)
		fprintf(stderr, "zp-peer: conn %ld: closing with %d bytes "
		    "unread\n", s->idx, unread);
	if (s->fd != -1) {
		if (abort_it)
			sess_abort(s);
		else
			close(s->fd);
		s->fd = -1;
	}
	if (s->ssl != NULL) {
		SSL_free(s->ssl);
		s->ssl = NULL;
	}
	if (s->sink_fd != -1) {
		close(s->sink_fd);
		s->sink_fd = -1;
	}
	if (s->src_fd != -1) {
		close(s->src_fd);
		s->src_fd = -1;
	}
	free(s->obuf);
	s->obuf = NULL;
	s->done = 1;
	s->end = end;
	if (o.expect_close > 0) {
		printf("closed after %.3fs (%s)\n", t - s->t0, end);
		fflush(stdout);
	}
	if (o.verbose)
		fprintf(stderr, "zp-peer: conn %ld: sent %" PRIu64 " received %"
		    PRIu64 " end %s after %.3fs\n", s->idx, s->sent, s->recvd,
		    end, t - s->t0);
}

/* A reset (or EPIPE) from the peer: fine only if the options say so. */
static void sess_reset(struct sess *s, const char *what, int err)
{
	if (o.allow_reset || o.expect_close > 0 || o.hold)
		sess_finish(s, "reset", 0);
	else
		die("conn %ld: %s: %s (after %" PRIu64 " bytes sent, %" PRIu64
		    " received)", s->idx, what, strerror(err), s->sent,
		    s->recvd);
}

static int is_reset(int err)
{
	return err == ECONNRESET || err == EPIPE || err == ECONNABORTED;
}

static void sess_setup(struct sess *s, int fd, long idx)
{
	int one = 1;

	memset(s, 0, sizeof(*s));
	s->fd = fd;
	s->idx = idx;
	s->t0 = now();
	s->src_fd = -1;
	s->sink_fd = -1;
	if (o.nodelay && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
	    sizeof(one)) == -1)
		die("TCP_NODELAY: %s", strerror(errno));
	if ((s->obuf = malloc(OBUF_SIZE)) == NULL)
		die("out of memory");
	if (o.send_file != NULL) {
		s->src_fd = open(o.send_file, O_RDONLY | O_CLOEXEC);
		if (s->src_fd == -1)
			die("%s: %s", o.send_file, strerror(errno));
	}
	if (o.have_send_gen) {
		s->gen_left = o.send_gen;
		rng_init(&s->txr, o.seed, idx);
	}
	s->pp_left = o.pingpong;
	if (o.have_expect_gen)
		rng_init(&s->rxr, o.seed, idx);
	if (o.recv_file != NULL) {
		char name[4096];
		const char *p = strstr(o.recv_file, "%d");

		if (p != NULL)
			snprintf(name, sizeof(name), "%.*s%ld%s",
			    (int)(p - o.recv_file), o.recv_file, idx, p + 2);
		else
			snprintf(name, sizeof(name), "%s", o.recv_file);
		if (strcmp(name, "-") == 0) {
			fflush(stdout);
			s->sink_fd = dup(STDOUT_FILENO);
		} else
			s->sink_fd = open(name, O_WRONLY | O_CREAT | O_TRUNC |
			    O_CLOEXEC, 0644);
		if (s->sink_fd == -1)
			die("%s: %s", name, strerror(errno));
	}
	if (!o.echo && o.send_file == NULL && !o.have_send_gen)
		s->src_done = 1;
	sess_refill(s);
}

static struct sess *sess_new(int fd)
{
	if (nsess == cap_sess) {
		long ncap = cap_sess ? cap_sess * 2 : 16;
		struct sess *n = realloc(sessions, ncap * sizeof(*n));

		if (n == NULL)
			die("out of memory");
		sessions = n;
		cap_sess = ncap;
	}
	sess_setup(&sessions[nsess], fd, nsess);
	return &sessions[nsess++];
}

/* Top up obuf from the file or the generator (never for echo). */
static void sess_refill(struct sess *s)
{
	ssize_t r;

	if (s->olen > 0 || s->src_done || o.echo)
		return;
	s->ooff = 0;
	if (s->src_fd != -1) {
		do
			r = read(s->src_fd, s->obuf, OBUF_SIZE);
		while (r == -1 && errno == EINTR);
		if (r == -1)
			die("%s: %s", o.send_file, strerror(errno));
		if (r == 0) {
			close(s->src_fd);
			s->src_fd = -1;
		} else {
			s->olen = (size_t)r;
			return;
		}
	}
	if (o.pingpong > 0 && s->pp_wait > 0)
		return;		/* the echo of the last message first */
	if (s->gen_left > 0) {
		size_t n = s->gen_left < OBUF_SIZE ? s->gen_left : OBUF_SIZE;

		if (o.pingpong > 0) {
			n = o.msg_size;
			s->pp_wait = n;
			s->pp_left--;
			s->pp_sent_at = now();
		}
		rng_fill(&s->txr, s->obuf, n);
		s->gen_left -= n;
		s->olen = n;
		return;
	}
	s->src_done = 1;
}

/* Bytes this session may read now (0: not now), and when to look again. */
static size_t sess_read_allowance(const struct sess *s, double t, double *wake)
{
	size_t max = RBUF_SIZE;
	double start = s->t0 + o.read_delay;

	if (s->rd_eof || o.no_read || s->connecting)
		return 0;
	if (t < start) {
		if (start < *wake)
			*wake = start;
		return 0;
	}
	if (o.read_rate > 0) {
		double allowed = o.read_rate * (t - start) - (double)s->recvd;
		double step = o.read_rate / 50 > 1024 ? 1024 : o.read_rate / 50;

		if (allowed < step) {
			double w = start + ((double)s->recvd + step) /
			    o.read_rate;

			if (w < *wake)
				*wake = w;
			return 0;
		}
		if (allowed < (double)max)
			max = (size_t)allowed;
	}
	if (o.have_rar && o.reset_after_recv - s->recvd < max)
		max = (size_t)(o.reset_after_recv - s->recvd);
	if (o.echo) {
		size_t room = OBUF_SIZE - s->olen;

		if (room == 0)
			return 0;
		if (room < max)
			max = room;
	}
	return max;
}

/*
 * --send-rate: bytes this session may send now (SIZE_MAX: no limit, 0:
 * not now; *wake then says when).
 */
static size_t sess_send_allowance(const struct sess *s, double t,
    double *wake)
{
	double allowed, step;

	if (o.send_rate <= 0)
		return SIZE_MAX;
	allowed = o.send_rate * (t - s->t0) - (double)s->sent;
	step = o.send_rate / 50 > 1024 ? 1024 : o.send_rate / 50;
	if (allowed < step) {
		double w = s->t0 + ((double)s->sent + step) / o.send_rate;

		if (wake != NULL && w < *wake)
			*wake = w;
		return 0;
	}
	return (size_t)allowed;
}

static int sess_wants_write(const struct sess *s)
{
	if (s->connecting)
		return 1;
	if (o.after_eof && !s->rd_eof)
		return 0;
	return s->olen > 0;
}

/* All sent (and FIN given unless --no-shut): is the session over? */
static void sess_check_done(struct sess *s)
{
	if (s->done)
		return;
	if (o.expect_close > 0) {
		if (s->rd_eof)
			sess_finish(s, "eof", 0);
		return;
	}
	if (!(s->src_done && s->olen == 0))
		return;
	if (!s->shut) {
		/* close_notify first: what says "every byte was sent". */
		if (!o.no_shut && s->ssl != NULL) {
			ERR_clear_error();
			(void)SSL_shutdown(s->ssl);
		}
		if (!o.no_shut && shutdown(s->fd, SHUT_WR) == -1) {
			if ((is_reset(errno) || errno == ENOTCONN) &&
			    sess_tls_alert(s, "shutdown"))
				return;
			if (is_reset(errno) || errno == ENOTCONN) {
				sess_reset(s, "shutdown", errno);
				return;
			}
			die("conn %ld: shutdown: %s", s->idx, strerror(errno));
		}
		s->shut = 1;
	}
	/* listen --hold: the peer's EOF, and yet we never close first. */
	if (o.hold && o.mode == MODE_LISTEN && s->rd_eof)
		return;
	if (o.no_read || s->rd_eof)
		sess_finish(s, "eof", 0);
	else if (o.no_shut && o.have_expect_gen && s->recvd == o.expect_gen)
		sess_finish(s, "done", 0);
}

static void sess_consume(struct sess *s, const char *buf, size_t n)
{
	if (o.have_expect_gen) {
		size_t i;

		if (s->recvd + n > o.expect_gen)
			die("conn %ld: received more than the %" PRIu64
			    " bytes expected", s->idx, o.expect_gen);
		rng_fill(&s->rxr, vbuf, n);
		if (memcmp(buf, vbuf, n) != 0) {
			for (i = 0; i < n && buf[i] == vbuf[i]; i++)
				;
			die("conn %ld: wrong byte at offset %" PRIu64,
			    s->idx, s->recvd + i);
		}
	}
	if (s->sink_fd != -1) {
		size_t off = 0;

		while (off < n) {
			ssize_t w = write(s->sink_fd, buf + off, n - off);

			if (w == -1 && errno == EINTR)
				continue;
			if (w == -1)
				die("conn %ld: write to file: %s", s->idx,
				    strerror(errno));
			off += (size_t)w;
		}
	}
	if (o.echo) {
		if (s->ooff + s->olen + n > OBUF_SIZE) {
			memmove(s->obuf, s->obuf + s->ooff, s->olen);
			s->ooff = 0;
		}
		memcpy(s->obuf + s->ooff + s->olen, buf, n);
		s->olen += n;
	}
	s->recvd += n;
	if (o.pingpong > 0 && s->pp_wait > 0) {
		if (n > s->pp_wait)
			die("conn %ld: more bytes back than sent", s->idx);
		s->pp_wait -= n;
		if (s->pp_wait == 0) {
			if (nrtt == cap_rtt) {
				cap_rtt = cap_rtt ? cap_rtt * 2 : 1024;
				rtts = realloc(rtts, cap_rtt * sizeof(*rtts));
				if (rtts == NULL)
					die("out of memory");
			}
			rtts[nrtt++] = now() - s->pp_sent_at;
			sess_refill(s);
		}
	}
}

static void sess_read(struct sess *s, size_t max)
{
	ssize_t r;

	if (s->ssl != NULL) {
		ERR_clear_error();
		errno = 0;
		r = SSL_read(s->ssl, rbuf, max > INT32_MAX ? INT32_MAX :
		    (int)max);
		if (r <= 0) {
			switch (sess_tls_io_error(s, (int)r, "read")) {
			case 1:
			case -1:
				return;
			}
			r = 0;
		}
	} else
		do
			r = recv(s->fd, rbuf, max, 0);
		while (r == -1 && errno == EINTR);
	if (r == -1) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (is_reset(errno)) {
			sess_reset(s, "recv", errno);
			return;
		}
		die("conn %ld: recv: %s", s->idx, strerror(errno));
	}
	if (r == 0) {
		s->rd_eof = 1;
		if (o.echo)
			s->src_done = 1;
		if (o.have_expect_gen && s->recvd != o.expect_gen &&
		    o.expect_close == 0 && !o.allow_reset)
			die("conn %ld: EOF after %" PRIu64 " of %" PRIu64
			    " expected bytes", s->idx, s->recvd, o.expect_gen);
		return;
	}
	sess_consume(s, rbuf, (size_t)r);
	if (o.have_rar && s->recvd >= o.reset_after_recv)
		sess_finish(s, "abort", 1);
}

static void sess_write(struct sess *s)
{
	size_t moved = 0;

	while (!s->done && moved < PER_WAKEUP) {
		size_t n, room = sess_send_allowance(s, now(), NULL);
		ssize_t w;

		sess_refill(s);
		if (s->olen == 0 || room == 0)
			break;
		n = s->olen < o.chunk ? s->olen : o.chunk;
		if (n > room)
			n = room;
		if (o.have_ras && o.reset_after_send - s->sent < n)
			n = (size_t)(o.reset_after_send - s->sent);
		if (s->ssl != NULL) {
			/* A retry offers what the last try did, at least. */
			if (n < s->wretry)
				n = s->wretry < s->olen ? s->wretry : s->olen;
			ERR_clear_error();
			errno = 0;
			w = SSL_write(s->ssl, s->obuf + s->ooff, (int)n);
			if (w <= 0) {
				if (sess_tls_io_error(s, (int)w, "write") != 1)
					return;
				s->wretry = n;
				break;
			}
			s->wretry = 0;
		} else
			do
				w = send(s->fd, s->obuf + s->ooff, n,
				    MSG_NOSIGNAL);
			while (w == -1 && errno == EINTR);
		if (w == -1) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (is_reset(errno)) {
				sess_reset(s, "send", errno);
				return;
			}
			die("conn %ld: send: %s", s->idx, strerror(errno));
		}
		s->ooff += (size_t)w;
		s->olen -= (size_t)w;
		if (s->olen == 0)
			s->ooff = 0;
		s->sent += (size_t)w;
		moved += (size_t)w;
		if (o.have_ras && s->sent >= o.reset_after_send) {
			sess_finish(s, "abort", 1);
			return;
		}
	}
	sess_refill(s);
}

/* The non-blocking connect finished: did it work? */
static void sess_connected(struct sess *s)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	s->connecting = 0;
	if (err != 0) {
		if (o.expect_close > 0 && (err == ECONNREFUSED ||
		    is_reset(err))) {
			sess_finish(s, err == ECONNREFUSED ? "refused" :
			    "reset", 0);
			return;
		}
		die("conn %ld: connect to %s port %s: %s", s->idx, o.host,
		    o.port, strerror(err));
	}
	nconnected++;
	if (o.tls)
		sess_tls_start(s);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* "rtt n=N p50=X p99=Y max=Z" (milliseconds) on stdout. */
static void report_rtts(void)
{
	size_t p99 = (nrtt * 99 + 99) / 100;

	qsort(rtts, nrtt, sizeof(*rtts), cmp_double);
	if (p99 > nrtt)
		p99 = nrtt;
	printf("rtt n=%zu p50=%.3fms p99=%.3fms max=%.3fms\n", nrtt,
	    rtts[nrtt / 2] * 1e3, rtts[p99 - 1] * 1e3, rtts[nrtt - 1] * 1e3);
	fflush(stdout);
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* The poll loop shared by listen and connect. */
static int run_sessions(int lfd)
{
	long accepted = 0, i, ndone;
	int printed_connected = 0;
	uint64_t tot_sent = 0, tot_recvd = 0;

	for (;;) {
		double t = now(), wake = t + 3600;
		size_t np = 0;
		int ms, rc;
		long want_accept;

		ndone = 0;
		for (i = 0; i < nsess; i++)
			ndone += sessions[i].done;
		want_accept = lfd != -1 && (o.conns == 0 || accepted < o.conns);
		if (!want_accept && ndone == nsess)
			break;
		if (o.hold && o.mode == MODE_CONNECT && !printed_connected &&
		    nconnected == nsess) {
			printf("connected %ld\n", nconnected);
			fflush(stdout);
			printed_connected = 1;
		}
		if (o.timeout > 0) {
			if (t >= t_start + o.timeout) {
				for (i = 0; i < nsess; i++) {
					struct sess *s = &sessions[i];

					if (!s->done)
						die("timeout after %.1fs: conn"
						    " %ld %s, %" PRIu64 " sent,"
						    " %" PRIu64 " received%s",
						    o.timeout, s->idx,
						    s->connecting ?
						    "connecting" : "open",
						    s->sent, s->recvd,
						    s->rd_eof ? ", got EOF" :
						    "");
				}
				if (o.conns == 0)
					die("timeout after %.1fs: still serving"
					    " (%ld connections accepted)",
					    o.timeout, accepted);
				die("timeout after %.1fs: %ld of %ld "
				    "connections accepted", o.timeout,
				    accepted, o.conns);
			}
			wake = t_start + o.timeout;
		}
		if (npfd_cap < (size_t)nsess + 1) {
			npfd_cap = (size_t)nsess * 2 + 16;
			pfds = realloc(pfds, npfd_cap * sizeof(*pfds));
			owner = realloc(owner, npfd_cap * sizeof(*owner));
			if (pfds == NULL || owner == NULL)
				die("out of memory");
		}
		if (want_accept) {
			double at = t_start + o.accept_delay;

			if (t >= at) {
				pfds[np].fd = lfd;
				pfds[np].events = POLLIN;
				owner[np++] = NULL;
			} else if (at < wake)
				wake = at;
		}
		for (i = 0; i < nsess; i++) {
			struct sess *s = &sessions[i];
			short ev = 0;

			if (s->done)
				continue;
			if (o.expect_close > 0) {
				double dl = s->t0 + o.expect_close;

				if (t >= dl) {
					printf("not closed after %.3fs\n",
					    t - s->t0);
					die("conn %ld: still open after %.3fs "
					    "(%" PRIu64 " bytes received)",
					    s->idx, t - s->t0, s->recvd);
				}
				if (dl < wake)
					wake = dl;
			}
			if (s->hs)
				ev = s->hs_want;
			else {
				if (sess_read_allowance(s, t, &wake) > 0)
					ev |= POLLIN;
				if (sess_wants_write(s) && (s->connecting ||
				    sess_send_allowance(s, t, &wake) > 0))
					ev |= POLLOUT;
			}
			/* Decrypted bytes no poll will announce: now. */
			if (s->ssl != NULL && !s->hs &&
			    SSL_has_pending(s->ssl) && (ev & POLLIN))
				wake = t;
			if (ev == 0)
				continue;	/* POLLHUP/POLLERR would spin */
			pfds[np].fd = s->fd;
			pfds[np].events = ev;
			owner[np++] = s;
		}
		ms = (int)((wake - t) * 1000) + 1;
		if (ms < 0)
			ms = 0;
		rc = poll(pfds, np, ms);
		if (rc == -1) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		t = now();
		for (size_t k = 0; k < np && rc > 0; k++) {
			struct sess *s = owner[k];
			short re = pfds[k].revents;

			if (re == 0)
				continue;
			if (s == NULL) {
				int fd = accept4(lfd, NULL, NULL,
				    SOCK_NONBLOCK | SOCK_CLOEXEC);

				if (fd == -1) {
					if (errno == EAGAIN || errno == EINTR ||
					    errno == ECONNABORTED)
						continue;
					die("accept: %s", strerror(errno));
				}
				if (o.tls)
					sess_tls_start(sess_new(fd));
				else
					sess_new(fd);
				accepted++;
				nconnected++;
				if (o.conns != 0 && accepted == o.conns) {
					close(lfd);
					lfd = -1;
				}
				/* sessions may have moved: restart the round */
				break;
			}
			if (s->done)
				continue;
			if (s->connecting) {
				if (re & (POLLOUT | POLLERR | POLLHUP))
					sess_connected(s);
				continue;
			}
			if (s->hs) {
				sess_handshake(s);
				continue;
			}
			if (re & (POLLIN | POLLERR | POLLHUP)) {
				double w2 = t + 3600;
				size_t max = sess_read_allowance(s, t, &w2);

				if (max > 0)
					sess_read(s, max);
			}
			if (!s->done && (re & (POLLOUT | POLLERR | POLLHUP)) &&
			    sess_wants_write(s))
				sess_write(s);
			sess_check_done(s);
		}
		for (i = 0; i < nsess; i++) {
			struct sess *s = &sessions[i];
			double w2 = t + 3600;
			size_t max;

			if (s->done || s->connecting || s->hs)
				continue;
			/* What OpenSSL holds is read without a poll. */
			if (s->ssl != NULL && SSL_has_pending(s->ssl) &&
			    (max = sess_read_allowance(s, t, &w2)) > 0)
				sess_read(s, max);
			if (!s->done)
				sess_check_done(s);
		}
	}
	for (i = 0; i < nsess; i++) {
		tot_sent += sessions[i].sent;
		tot_recvd += sessions[i].recvd;
	}
	if (o.tls_fail && tls_failed == 0)
		die("--tls-fail: the TLS of %ld session%s did not fail", nsess,
		    nsess == 1 ? "" : "s");
	if (nrtt > 0)
		report_rtts();
	if (!o.quiet)
		fprintf(stderr, "zp-peer: %ld connection%s, %" PRIu64
		    " bytes sent, %" PRIu64 " received, %.3fs\n", nsess,
		    nsess == 1 ? "" : "s", tot_sent, tot_recvd,
		    now() - t_start);
	return 0;
}

/* Mode gen: the --send-gen stream of each index into its --recv file. */
static int run_gen(void)
{
	long idx;

	for (idx = 0; idx < o.conns; idx++) {
		struct rng r;
		uint64_t left = o.send_gen;
		int fd = STDOUT_FILENO;
		char name[4096];

		if (o.recv_file != NULL && strcmp(o.recv_file, "-") != 0) {
			const char *p = strstr(o.recv_file, "%d");

			if (p != NULL)
				snprintf(name, sizeof(name), "%.*s%ld%s",
				    (int)(p - o.recv_file), o.recv_file, idx,
				    p + 2);
			else
				snprintf(name, sizeof(name), "%s",
				    o.recv_file);
			fd = open(name, O_WRONLY | O_CREAT | O_TRUNC |
			    O_CLOEXEC, 0644);
			if (fd == -1)
				die("%s: %s", name, strerror(errno));
		}
		rng_init(&r, o.seed, idx);
		while (left > 0) {
			size_t n = left < RBUF_SIZE ? (size_t)left : RBUF_SIZE;
			size_t off = 0;

			rng_fill(&r, rbuf, n);
			while (off < n) {
				ssize_t w = write(fd, rbuf + off, n - off);

				if (w == -1 && errno == EINTR)
					continue;
				if (w == -1)
					die("gen: write: %s", strerror(errno));
				off += (size_t)w;
			}
			left -= n;
		}
		if (fd != STDOUT_FILENO && close(fd) == -1)
			die("gen: close: %s", strerror(errno));
	}
	return 0;
}

static int run_listen(void)
{
	const char *addr = o.bind_addr ? o.bind_addr : "127.0.0.1";
	int lfd = bind_socket(addr, o.bind_port, 0);

	if (listen(lfd, 1024) == -1)
		die("listen: %s", strerror(errno));
	set_nonblock(lfd);
	if (o.tls)
		tls_setup();
	print_port(bound_port(lfd));
	return run_sessions(lfd);
}

static int run_connect(void)
{
	struct addrinfo *ai = resolve(o.host, o.port, 0), *src = NULL;
	long i, n = o.conns_set ? o.conns : 1;
	int one = 1;

	if (o.bind_addr != NULL)
		src = resolve(o.bind_addr, "0", 1);
	if (o.tls)
		tls_setup();

	for (i = 0; i < n; i++) {
		struct sess *s;
		int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, 0);

		if (fd == -1)
			die("socket: %s", strerror(errno));
		if (src != NULL) {
#ifdef IP_BIND_ADDRESS_NO_PORT
			/* the port is chosen at connect, per destination */
			(void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT,
			    &one, sizeof(one));
#endif
			if (bind(fd, src->ai_addr, src->ai_addrlen) == -1)
				die("conn %ld: bind to %s: %s", i, o.bind_addr,
				    strerror(errno));
		}
		s = sess_new(fd);
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
			nconnected++;
			if (o.tls)
				sess_tls_start(s);
		} else {
			if (errno == EINPROGRESS) {
				s->connecting = 1;
				continue;
			}
			if (errno == ECONNREFUSED && o.expect_close > 0) {
				sess_finish(s, "refused", 0);
				continue;
			}
			die("conn %ld: connect to %s port %s: %s", i, o.host,
			    o.port, strerror(errno));
		}
	}
	freeaddrinfo(ai);
	if (src != NULL)
		freeaddrinfo(src);
	(void)one;
	return run_sessions(-1);
}

/* Requests that trickle never finish: one byte a tick of this, then 'a's. */
static const char trickle_head[] = "GET /metrics HTTP/1.1\r\nX-Trickle: ";

/* What a --garbage-every connection sends at once, in turn. */
static const char *const junk[] = {
	"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
	"GET /metrics HTTP/9.9\r\n\r\n",
	"BREW /metrics HTCPCP/1.0\r\n\r\n",
	"GET /metrics HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
	"\r\n\r\n\r\n\r\n",
	"GET\r\n\r\n",
};

struct trick {
	int	 fd;		/* -1 between connections */
	int	 connecting;
	int	 garbage;	/* this connection sends junk */
	double	 t_open;	/* the connect completed */
	double	 next;		/* next byte, or next connect */
	size_t	 off;		/* bytes of the request sent */
	int	 answered;
};

static long tr_conns, tr_immediate, tr_mid, tr_deadline, tr_late;
static long tr_answered, tr_garbage, tr_failed;
static double tr_maxlife;

/* Classify a connection that lived life seconds. */
static void trickle_count(double life)
{
	if (life > tr_maxlife)
		tr_maxlife = life;
	if (life < 0.5)
		tr_immediate++;
	else if (life < o.deadline - 1)
		tr_mid++;
	else if (life <= o.deadline + 1.5)
		tr_deadline++;
	else
		tr_late++;
}

/* Open slot i's next connection. */
static void trickle_open(struct trick *t, const struct addrinfo *ai,
    double now_t)
{
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0);

	if (fd == -1)
		die("socket: %s", strerror(errno));
	t->fd = fd;
	t->off = 0;
	t->answered = 0;
	t->garbage = o.garbage_every > 0 && tr_conns % o.garbage_every == 0;
	t->next = now_t;
	tr_conns++;
	if (t->garbage)
		tr_garbage++;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
		t->connecting = 0;
		t->t_open = now_t;
	} else if (errno == EINPROGRESS)
		t->connecting = 1;
	else {
		close(fd);
		t->fd = -1;
		tr_failed++;
		t->next = now_t + o.interval;
	}
}

/* The server closed slot t (or the connect failed): count, plan again. */
static void trickle_closed(struct trick *t, double now_t)
{
	if (t->connecting)
		tr_failed++;
	else {
		trickle_count(now_t - t->t_open);
		if (t->answered)
			tr_answered++;
	}
	close(t->fd);
	t->fd = -1;
	t->connecting = 0;
	t->next = now_t + o.interval;
}

static int run_trickle(void)
{
	struct addrinfo *ai = resolve(o.host, o.port, 0);
	long n = o.conns, i, np;
	struct trick *tr = calloc((size_t)n, sizeof(*tr));
	struct pollfd *pf = calloc((size_t)n, sizeof(*pf));
	long *who = calloc((size_t)n, sizeof(*who));
	double t0 = now(), end = t0 + o.duration, t;
	char buf[4096];

	if (tr == NULL || pf == NULL || who == NULL)
		die("out of memory");
	/* open the connections over the first second, not in one burst */
	for (i = 0; i < n; i++) {
		tr[i].fd = -1;
		tr[i].next = t0 + (double)i / (double)n;
	}
	while ((t = now()) < end) {
		for (i = 0, np = 0; i < n; i++) {
			struct trick *k = &tr[i];

			if (k->fd == -1 && t >= k->next)
				trickle_open(k, ai, t);
			if (k->fd == -1)
				continue;
			if (!k->connecting && t >= k->next) {
				const char *msg;
				size_t len, hl = sizeof(trickle_head) - 1;
				char c;
				ssize_t w;

				if (k->garbage) {
					msg = junk[(size_t)i % (sizeof(junk) /
					    sizeof(junk[0]))];
					len = strlen(msg);
					if (k->off < len) {
						w = send(k->fd, msg + k->off,
						    len - k->off, MSG_NOSIGNAL);
						if (w > 0)
							k->off += (size_t)w;
					}
					k->next = end;
				} else {
					c = k->off < hl ? trickle_head[k->off] :
					    'a';
					if (send(k->fd, &c, 1, MSG_NOSIGNAL) ==
					    1)
						k->off++;
					k->next = t + o.interval;
				}
			}
			pf[np].fd = k->fd;
			pf[np].events = k->connecting ? POLLOUT : POLLIN;
			pf[np].revents = 0;
			who[np++] = i;
		}
		if (poll(pf, (nfds_t)np, 20) == -1 && errno != EINTR)
			die("poll: %s", strerror(errno));
		t = now();
		for (i = 0; i < np; i++) {
			struct trick *k = &tr[who[i]];
			ssize_t r;

			if (pf[i].revents == 0)
				continue;
			if (k->connecting) {
				int err = 0;
				socklen_t el = sizeof(err);

				(void)getsockopt(k->fd, SOL_SOCKET, SO_ERROR,
				    &err, &el);
				if (err != 0 || (pf[i].revents & (POLLERR |
				    POLLHUP))) {
					trickle_closed(k, t);
					continue;
				}
				k->connecting = 0;
				k->t_open = t;
				k->next = t;
				continue;
			}
			while ((r = recv(k->fd, buf, sizeof(buf), 0)) > 0)
				k->answered = 1;
			if (r == 0 || (errno != EAGAIN && errno != EINTR))
				trickle_closed(k, t);
		}
	}
	t = now();
	/* one still open past the deadline's slack is late; younger, nothing */
	for (i = 0; i < n; i++)
		if (tr[i].fd != -1) {
			if (!tr[i].connecting &&
			    t - tr[i].t_open > o.deadline + 1.5)
				trickle_count(t - tr[i].t_open);
			close(tr[i].fd);
		}
	printf("trickle conns=%ld immediate=%ld mid=%ld deadline=%ld "
	    "late=%ld maxlife=%.3f answered=%ld garbage=%ld failed=%ld\n",
	    tr_conns, tr_immediate, tr_mid, tr_deadline, tr_late, tr_maxlife,
	    tr_answered, tr_garbage, tr_failed);
	freeaddrinfo(ai);
	free(tr);
	free(pf);
	free(who);
	return 0;
}

/*
 * Mode churn: short connections opened at a steady rate, each one sending
 * a message to an echo server and checking that the very same bytes come
 * back before the EOF. What is measured is what happens to connections
 * that come and go, not to bytes: every connection is counted once, as ok
 * or by the way it failed, and none is given up for being late.
 */
enum churn_class {
	CH_OK, CH_REFUSED, CH_RESET, CH_BAD, CH_TIMEOUT, CH_ERROR, CH_NCLASS,
};

static const char *const ch_names[CH_NCLASS] = {
	"ok", "refused", "reset", "bad", "timeout", "error",
};

struct churn {
	int		 fd;		/* -1: a free slot */
	long		 idx;
	int		 connecting;
	int		 shut;		/* all sent and the FIN given */
	double		 t0;		/* when the connect was tried */
	size_t		 sent, recvd;
	struct rng	 rxr;		/* what must come back next */
};

static struct churn	*ch_slots;
static long		*ch_free;	/* a stack of free slot numbers */
static long		 ch_nfree;
static long		 ch_count[CH_NCLASS];
static long		 ch_late;
static char		 ch_first[512];	/* the first failure, for exit 1 */

static void churn_end(struct churn *, enum churn_class, int, const char *,
    ...) __attribute__((format(printf, 4, 5)));

/*
 * Connection c is over: count it as cl, say why (with errno err's text
 * when err is not 0) and give its slot back.
 */
static void churn_end(struct churn *c, enum churn_class cl, int err,
    const char *fmt, ...)
{
	char why[256], line[sizeof(ch_first)];
	va_list ap;

	if (c->fd != -1)
		close(c->fd);
	c->fd = -1;
	ch_free[ch_nfree++] = c - ch_slots;
	ch_count[cl]++;
	if (cl == CH_OK)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (err != 0)
		snprintf(line, sizeof(line), "conn %ld: %s: %s: %s (errno %d)",
		    c->idx, ch_names[cl], why, strerror(err), err);
	else
		snprintf(line, sizeof(line), "conn %ld: %s: %s", c->idx,
		    ch_names[cl], why);
	if (ch_first[0] == '\0')
		memcpy(ch_first, line, sizeof(line));
	if (o.verbose)
		fprintf(stderr, "zp-peer: %s, after %.3fs (%zu sent, %zu "
		    "received)\n", line, now() - c->t0, c->sent, c->recvd);
}

/* A failed call on a connection that was up: a reset, or something else. */
static void churn_fail(struct churn *c, const char *what, int err)
{
	/* ENOTCONN: shutdown on a socket that the peer's RST already closed */
	if (is_reset(err) || (err == ENOTCONN && strcmp(what, "shutdown") == 0))
		churn_end(c, CH_RESET, err, "%s", what);
	else
		churn_end(c, CH_ERROR, err, "%s", what);
}

/* Send what the socket takes of the message; the FIN after its last byte. */
static void churn_send(struct churn *c)
{
	struct rng r;

	while (c->sent < o.msg_size) {
		size_t n = o.msg_size - c->sent;
		ssize_t w;

		if (n > sizeof(vbuf))
			n = sizeof(vbuf);
		/* made again from the stream: no buffer per connection */
		rng_seek(&r, o.seed, c->idx, c->sent);
		rng_fill(&r, vbuf, n);
		do
			w = send(c->fd, vbuf, n, MSG_NOSIGNAL);
		while (w == -1 && errno == EINTR);
		if (w == -1) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				churn_fail(c, "send", errno);
			return;
		}
		c->sent += (size_t)w;
	}
	if (shutdown(c->fd, SHUT_WR) == -1) {
		churn_fail(c, "shutdown", errno);
		return;
	}
	c->shut = 1;
}

/* Read and check the echo; at EOF the connection is over. */
static void churn_recv(struct churn *c)
{
	for (;;) {
		ssize_t r;
		size_t i;

		do
			r = recv(c->fd, rbuf, sizeof(rbuf), 0);
		while (r == -1 && errno == EINTR);
		if (r == -1) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				churn_fail(c, "recv", errno);
			return;
		}
		if (r == 0) {
			if (c->recvd < o.msg_size)
				churn_end(c, CH_BAD, 0, "EOF after %zu of %zu "
				    "bytes", c->recvd, o.msg_size);
			else
				churn_end(c, CH_OK, 0, "eof");
			return;
		}
		if (c->recvd + (size_t)r > o.msg_size) {
			churn_end(c, CH_BAD, 0, "at least %zu bytes back, %zu "
			    "sent", c->recvd + (size_t)r, o.msg_size);
			return;
		}
		rng_fill(&c->rxr, vbuf, (size_t)r);
		if (memcmp(rbuf, vbuf, (size_t)r) != 0) {
			for (i = 0; rbuf[i] == vbuf[i]; i++)
				;
			churn_end(c, CH_BAD, 0, "wrong byte at offset %zu",
			    c->recvd + i);
			return;
		}
		c->recvd += (size_t)r;
	}
}

/* The non-blocking connect finished: send at once if it worked. */
static void churn_connected(struct churn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		err = errno;
	if (err == ECONNREFUSED)
		churn_end(c, CH_REFUSED, err, "connect");
	else if (err != 0)
		churn_fail(c, "connect", err);
	else {
		c->connecting = 0;
		churn_send(c);
	}
}

/* Try connection idx in slot c. */
static void churn_open(struct churn *c, long idx, const struct addrinfo *ai,
    const struct addrinfo *src, double t)
{
	int one = 1;

	memset(c, 0, sizeof(*c));
	c->idx = idx;
	c->t0 = t;
	rng_init(&c->rxr, o.seed, idx);
	c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0);
	if (c->fd == -1) {
		churn_end(c, CH_ERROR, errno, "socket");
		return;
	}
	if (src != NULL) {
#ifdef IP_BIND_ADDRESS_NO_PORT
		/* the port is chosen at connect, per destination */
		(void)setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT,
		    &one, sizeof(one));
#endif
		if (bind(c->fd, src->ai_addr, src->ai_addrlen) == -1) {
			churn_end(c, CH_ERROR, errno, "bind to %s",
			    o.bind_addr);
			return;
		}
	}
	(void)one;
	if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == 0)
		churn_send(c);
	else if (errno == EINPROGRESS)
		c->connecting = 1;
	else if (errno == ECONNREFUSED)
		churn_end(c, CH_REFUSED, errno, "connect");
	else
		churn_fail(c, "connect", errno);
}

/*
 * Mode activate: CMD in a child, on the socket as descriptor 3 with the
 * environment sd_listen_fds(3) reads. Returns the child's pid.
 */
static pid_t activate_spawn(int lfd)
{
	sigset_t none;
	char buf[32];
	pid_t pid;

	if ((pid = fork()) == -1)
		die("fork: %s", strerror(errno));
	if (pid > 0)
		return pid;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (lfd != 3 && dup2(lfd, 3) == -1)
		_exit(127);
	(void)fcntl(3, F_SETFD, 0);
	snprintf(buf, sizeof(buf), "%ld", (long)getpid());
	setenv("LISTEN_PID", buf, 1);
	setenv("LISTEN_FDS", "1", 1);
	setenv("LISTEN_FDNAMES", "zp", 1);
	execvp(o.cmd[0], o.cmd);
	fprintf(stderr, "zp-peer: activate: %s: %s\n", o.cmd[0],
	    strerror(errno));
	_exit(127);
}

/* A child's wait status as an exit status. */
static int activate_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int run_activate(void)
{
	const char *addr = o.bind_addr ? o.bind_addr : "127.0.0.1";
	sigset_t set;
	pid_t child;
	int lfd, sig, st, restarts = 0;

	lfd = bind_socket(addr, o.bind_port, 0);
	if (listen(lfd, 1024) == -1)
		die("listen: %s", strerror(errno));
	print_port(bound_port(lfd));
	sigemptyset(&set);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	child = activate_spawn(lfd);
	for (;;) {
		if ((sig = sigwaitinfo(&set, NULL)) == -1)
			continue;
		if (sig == SIGCHLD) {
			if (waitpid(child, &st, WNOHANG) != child)
				continue;
			printf("exited %d\n", activate_status(st));
			return activate_status(st);
		}
		kill(child, SIGTERM);
		while (waitpid(child, &st, 0) == -1 && errno == EINTR)
			;
		if (sig != SIGHUP)
			return activate_status(st);
		/* the socket stays: clients wait in its backlog meanwhile */
		child = activate_spawn(lfd);
		printf("restarted %d\n", ++restarts);
	}
}

/* SIGUSR1: the churn's period ends now (a test ends it on an event). */
static volatile sig_atomic_t churn_stop;

static void churn_stop_handler(int sig)
{
	(void)sig;
	churn_stop = 1;
}

static int run_churn(void)
{
	struct addrinfo *ai = resolve(o.host, o.port, 0), *src = NULL;
	long total = (long)(o.duration * o.rate + 0.5);
	long max = o.max_open, opened = 0, late_below = 0, due, i, np;
	struct pollfd *pf;
	long *who;
	struct rlimit rl;
	double t0, t, t_last, secs;

	if (o.bind_addr != NULL)
		src = resolve(o.bind_addr, "0", 1);
	/* a connect short of descriptors would count as an error, not late */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    (rlim_t)max + 16 > rl.rlim_cur) {
		max = rl.rlim_cur > 32 ? (long)rl.rlim_cur - 16 : 16;
		fprintf(stderr, "zp-peer: churn: --max-open lowered to %ld "
		    "(RLIMIT_NOFILE %llu)\n", max,
		    (unsigned long long)rl.rlim_cur);
	}
	ch_slots = calloc((size_t)max, sizeof(*ch_slots));
	ch_free = calloc((size_t)max, sizeof(*ch_free));
	pf = calloc((size_t)max, sizeof(*pf));
	who = calloc((size_t)max, sizeof(*who));
	if (ch_slots == NULL || ch_free == NULL || pf == NULL || who == NULL)
		die("out of memory");
	for (i = max - 1; i >= 0; i--) {
		ch_slots[i].fd = -1;
		ch_free[ch_nfree++] = i;
	}
	signal(SIGUSR1, churn_stop_handler);
	t0 = t_last = now();
	for (;;) {
		double wake;
		int ms, rc;

		if (churn_stop && total > opened)
			total = opened;
		t = now();
		/*
		 * The token bucket: connection k is due at t0 + k / rate.
		 * Those due but without a free slot wait for one (late);
		 * a round that fell behind catches up in one burst, so that
		 * a slow round costs pacing, not connections.
		 */
		due = (long)((t - t0) * o.rate) + 1;
		if (due > total)
			due = total;
		while (opened < due && ch_nfree > 0) {
			if (opened < late_below)
				ch_late++;
			churn_open(&ch_slots[ch_free[--ch_nfree]], opened, ai,
			    src, t);
			opened++;
			t_last = t;
		}
		if (opened < due)
			late_below = due;
		if (opened == total && ch_nfree == max)
			break;
		/* with no room, only an event or a timeout can help */
		wake = opened < due ? t + 3600 : opened < total ?
		    t0 + (double)opened / o.rate : t + 3600;
		for (i = 0, np = 0; i < max; i++) {
			struct churn *c = &ch_slots[i];

			if (c->fd == -1)
				continue;
			if (o.timeout > 0) {
				double dl = c->t0 + o.timeout;

				if (t >= dl) {
					churn_end(c, CH_TIMEOUT, 0, "not done "
					    "after %.1fs%s", o.timeout,
					    c->connecting ? ", connecting" :
					    c->shut ? "" : ", sending");
					/* a free slot: open, or end, at once */
					wake = t;
					continue;
				}
				if (dl < wake)
					wake = dl;
			}
			pf[np].fd = c->fd;
			pf[np].events = c->connecting ? POLLOUT :
			    c->shut ? POLLIN : POLLIN | POLLOUT;
			pf[np].revents = 0;
			who[np++] = i;
		}
		/* round up: waking before the next connect is due would spin */
		ms = wake - t > 3600 ? 3600 * 1000 : (int)((wake - t) * 1000);
		if (ms < 0)
			ms = 0;
		else if ((double)ms < (wake - t) * 1000)
			ms++;
		rc = poll(pf, (nfds_t)np, ms);
		if (rc == -1) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		for (i = 0; i < np && rc > 0; i++) {
			struct churn *c = &ch_slots[who[i]];
			short re = pf[i].revents;

			if (re == 0)
				continue;
			rc--;
			if (c->connecting) {
				churn_connected(c);
				continue;
			}
			if (re & (POLLIN | POLLERR | POLLHUP))
				churn_recv(c);
			if (c->fd != -1 && !c->shut && (re & POLLOUT))
				churn_send(c);
		}
	}
	/* perfect pacing opens the last one 1/rate before the period ends */
	secs = t_last - t0 + 1 / o.rate;
	printf("churn attempted=%ld ok=%ld refused=%ld reset=%ld bad=%ld "
	    "timeout=%ld error=%ld late=%ld rate=%.1f\n", opened,
	    ch_count[CH_OK], ch_count[CH_REFUSED], ch_count[CH_RESET],
	    ch_count[CH_BAD], ch_count[CH_TIMEOUT], ch_count[CH_ERROR], ch_late,
	    (double)opened / secs);
	freeaddrinfo(ai);
	if (src != NULL)
		freeaddrinfo(src);
	free(ch_slots);
	free(ch_free);
	free(pf);
	free(who);
	if (ch_count[CH_OK] != opened)
		die("churn: %s", ch_first);
	return 0;
}

enum {
	OPT_SEED = 256, OPT_AFTER_EOF, OPT_NO_READ, OPT_NO_SHUT, OPT_CHUNK,
	OPT_NODELAY, OPT_READ_DELAY, OPT_READ_RATE, OPT_RAR, OPT_RAS,
	OPT_ALLOW_RESET, OPT_ACCEPT_DELAY, OPT_HOLD, OPT_EXPECT_CLOSE,
	OPT_PINGPONG, OPT_MSG_SIZE, OPT_DURATION, OPT_INTERVAL, OPT_DEADLINE,
	OPT_GARBAGE_EVERY, OPT_RATE, OPT_MAX_OPEN,
	OPT_SEND_RATE,
	OPT_TLS, OPT_TLS_CERT, OPT_TLS_KEY, OPT_TLS_CA, OPT_TLS_NAME,
	OPT_TLS_MAX_VERSION, OPT_TLS_FAIL, OPT_TLS_PRINT,
};

static const struct option longopts[] = {
	{ "bind",		required_argument, NULL, 'b' },
	{ "port",		required_argument, NULL, 'p' },
	{ "conns",		required_argument, NULL, 'n' },
	{ "send",		required_argument, NULL, 's' },
	{ "send-gen",		required_argument, NULL, 'g' },
	{ "echo",		no_argument,	   NULL, 'e' },
	{ "recv",		required_argument, NULL, 'o' },
	{ "expect-gen",		required_argument, NULL, 'x' },
	{ "seed",		required_argument, NULL, OPT_SEED },
	{ "after-eof",		no_argument,	   NULL, OPT_AFTER_EOF },
	{ "no-read",		no_argument,	   NULL, OPT_NO_READ },
	{ "no-shut",		no_argument,	   NULL, OPT_NO_SHUT },
	{ "chunk",		required_argument, NULL, OPT_CHUNK },
	{ "nodelay",		no_argument,	   NULL, OPT_NODELAY },
	{ "read-delay",		required_argument, NULL, OPT_READ_DELAY },
	{ "read-rate",		required_argument, NULL, OPT_READ_RATE },
	{ "reset-after-recv",	required_argument, NULL, OPT_RAR },
	{ "reset-after-send",	required_argument, NULL, OPT_RAS },
	{ "allow-reset",	no_argument,	   NULL, OPT_ALLOW_RESET },
	{ "accept-delay",	required_argument, NULL, OPT_ACCEPT_DELAY },
	{ "hold",		no_argument,	   NULL, OPT_HOLD },
	{ "expect-close",	required_argument, NULL, OPT_EXPECT_CLOSE },
	{ "pingpong",		required_argument, NULL, OPT_PINGPONG },
	{ "msg-size",		required_argument, NULL, OPT_MSG_SIZE },
	{ "duration",		required_argument, NULL, OPT_DURATION },
	{ "interval",		required_argument, NULL, OPT_INTERVAL },
	{ "deadline",		required_argument, NULL, OPT_DEADLINE },
	{ "garbage-every",	required_argument, NULL, OPT_GARBAGE_EVERY },
	{ "rate",		required_argument, NULL, OPT_RATE },
	{ "max-open",		required_argument, NULL, OPT_MAX_OPEN },
	{ "send-rate",		required_argument, NULL, OPT_SEND_RATE },
	{ "tls",		no_argument, NULL, OPT_TLS },
	{ "tls-cert",		required_argument, NULL, OPT_TLS_CERT },
	{ "tls-key",		required_argument, NULL, OPT_TLS_KEY },
	{ "tls-ca",		required_argument, NULL, OPT_TLS_CA },
	{ "tls-name",		required_argument, NULL, OPT_TLS_NAME },
	{ "tls-max-version",	required_argument, NULL, OPT_TLS_MAX_VERSION },
	{ "tls-fail",		no_argument, NULL, OPT_TLS_FAIL },
	{ "tls-print",		no_argument, NULL, OPT_TLS_PRINT },
	{ "timeout",		required_argument, NULL, 't' },
	{ "verbose",		no_argument,	   NULL, 'v' },
	{ "quiet",		no_argument,	   NULL, 'q' },
	{ "help",		no_argument,	   NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

static void parse_args(int argc, char **argv)
{
	const char *m;
	int c, npos;
	char **pos;

	if (argc < 2)
		usage_error("missing mode: listen, connect, blackhole, port, "
		    "gen, trickle, churn or activate");
	m = argv[1];
	if (strcmp(m, "-h") == 0 || strcmp(m, "--help") == 0) {
		usage(stdout);
		exit(0);
	}
	if (strcmp(m, "listen") == 0)
		o.mode = MODE_LISTEN;
	else if (strcmp(m, "connect") == 0)
		o.mode = MODE_CONNECT;
	else if (strcmp(m, "blackhole") == 0)
		o.mode = MODE_BLACKHOLE;
	else if (strcmp(m, "port") == 0)
		o.mode = MODE_PORT;
	else if (strcmp(m, "trickle") == 0)
		o.mode = MODE_TRICKLE;
	else if (strcmp(m, "churn") == 0)
		o.mode = MODE_CHURN;
	else if (strcmp(m, "activate") == 0)
		o.mode = MODE_ACTIVATE;
	else if (strcmp(m, "gen") == 0)
		o.mode = MODE_GEN;
	else
		usage_error("unknown mode '%s'", m);

	o.conns = 1;
	o.chunk = 64 * 1024;
	o.seed = 1;
	/* churn: per connection, so a stuck one is counted, not waited for */
	o.timeout = o.mode == MODE_CHURN ? 10 : 120;
	o.duration = 10;
	o.interval = 1;
	o.deadline = 5;
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "b:p:n:s:g:eo:x:t:vqh", longopts,
	    NULL)) != -1) {
		switch (c) {
		case 'b': o.bind_addr = optarg; break;
		case 'p': {
			uint64_t p = parse_size("--port", optarg);

			if (p > 65535)
				usage_error("--port: bad port '%s'", optarg);
			o.bind_port = (int)p;
			break;
		}
		case 'n':
			o.conns = (long)parse_size("--conns", optarg);
			o.conns_set = 1;
			break;
		case 's': o.send_file = optarg; break;
		case 'g':
			o.send_gen = parse_size("--send-gen", optarg);
			o.have_send_gen = 1;
			break;
		case 'e': o.echo = 1; break;
		case 'o': o.recv_file = optarg; break;
		case 'x':
			o.expect_gen = parse_size("--expect-gen", optarg);
			o.have_expect_gen = 1;
			break;
		case OPT_SEED: o.seed = parse_size("--seed", optarg); break;
		case OPT_AFTER_EOF: o.after_eof = 1; break;
		case OPT_NO_READ: o.no_read = 1; break;
		case OPT_NO_SHUT: o.no_shut = 1; break;
		case OPT_CHUNK:
			o.chunk = (size_t)parse_size("--chunk", optarg);
			if (o.chunk == 0 || o.chunk > OBUF_SIZE)
				usage_error("--chunk: 1 to %d bytes",
				    OBUF_SIZE);
			break;
		case OPT_NODELAY: o.nodelay = 1; break;
		case OPT_READ_DELAY:
			o.read_delay = parse_secs("--read-delay", optarg);
			break;
		case OPT_SEND_RATE:
			o.send_rate = (double)parse_size("--send-rate", optarg);
			break;
		case OPT_READ_RATE:
			o.read_rate = (double)parse_size("--read-rate", optarg);
			break;
		case OPT_RAR:
			o.reset_after_recv = parse_size("--reset-after-recv",
			    optarg);
			o.have_rar = 1;
			break;
		case OPT_RAS:
			o.reset_after_send = parse_size("--reset-after-send",
			    optarg);
			o.have_ras = 1;
			break;
		case OPT_ALLOW_RESET: o.allow_reset = 1; break;
		case OPT_ACCEPT_DELAY:
			o.accept_delay = parse_secs("--accept-delay", optarg);
			break;
		case OPT_HOLD: o.hold = 1; o.no_shut = 1; break;
		case OPT_EXPECT_CLOSE:
			o.expect_close = parse_secs("--expect-close", optarg);
			break;
		case OPT_PINGPONG:
			o.pingpong = (long)parse_size("--pingpong", optarg);
			break;
		case OPT_MSG_SIZE:
			o.msg_size = (size_t)parse_size("--msg-size", optarg);
			if (o.msg_size == 0 || o.msg_size > OBUF_SIZE)
				usage_error("--msg-size: 1 to %d bytes",
				    OBUF_SIZE);
			break;
		case OPT_DURATION:
			o.duration = parse_secs("--duration", optarg);
			break;
		case OPT_INTERVAL:
			o.interval = parse_secs("--interval", optarg);
			if (o.interval <= 0)
				usage_error("--interval must be above 0");
			break;
		case OPT_DEADLINE:
			o.deadline = parse_secs("--deadline", optarg);
			break;
		case OPT_GARBAGE_EVERY:
			o.garbage_every = (long)parse_size("--garbage-every",
			    optarg);
			break;
		case OPT_RATE: {
			char *end;

			errno = 0;
			o.rate = strtod(optarg, &end);
			if (end == optarg || *end != '\0' || errno != 0 ||
			    !(o.rate > 0 && o.rate <= 1e6))
				usage_error("--rate: bad rate '%s' (above 0, "
				    "at most 1000000)", optarg);
			break;
		}
		case OPT_MAX_OPEN:
			o.max_open = (long)parse_size("--max-open", optarg);
			if (o.max_open < 1)
				usage_error("--max-open must be at least 1");
			break;
		case OPT_TLS: o.tls = 1; break;
		case OPT_TLS_CERT: o.tls_cert = optarg; break;
		case OPT_TLS_KEY: o.tls_key = optarg; break;
		case OPT_TLS_CA: o.tls_ca = optarg; break;
		case OPT_TLS_NAME: o.tls_name = optarg; break;
		case OPT_TLS_MAX_VERSION: o.tls_max = tls_version(optarg); break;
		case OPT_TLS_FAIL: o.tls_fail = 1; break;
		case OPT_TLS_PRINT: o.tls_print = 1; break;
		case 't': o.timeout = parse_secs("--timeout", optarg); break;
		case 'v': o.verbose = 1; break;
		case 'q': o.quiet = 1; break;
		case 'h': usage(stdout); exit(0);
		default: usage_error("bad option");
		}
	}
	pos = argv + optind;
	npos = argc - optind;
	if (o.mode == MODE_CONNECT || o.mode == MODE_TRICKLE ||
	    o.mode == MODE_CHURN) {
		if (npos != 2)
			usage_error("%s needs HOST PORT", m);
		o.host = pos[0];
		o.port = pos[1];
	} else if (o.mode == MODE_ACTIVATE) {
		if (npos == 0)
			usage_error("activate needs -- CMD [ARGS...]");
		o.cmd = pos;
	} else if (npos != 0)
		usage_error("unexpected argument '%s'", pos[0]);
	if (o.echo && (o.send_file || o.have_send_gen))
		usage_error("--echo sends what it receives: no --send/--send-gen");
	if (o.send_file && o.have_send_gen)
		usage_error("--send and --send-gen exclude each other");
	if (o.echo && (o.no_read || o.after_eof))
		usage_error("--echo needs to read as it goes");
	if (o.no_read && (o.after_eof || o.recv_file || o.have_expect_gen))
		usage_error("--no-read receives nothing");
	if (o.recv_file && strstr(o.recv_file, "%d") == NULL &&
	    (o.conns != 1 || (o.mode == MODE_LISTEN && o.conns == 0)))
		usage_error("--recv with several connections needs %%d");
	if (o.mode == MODE_CONNECT && o.conns == 0)
		usage_error("connect --conns must be at least 1");
	if (o.hold && o.mode != MODE_CONNECT && o.mode != MODE_LISTEN)
		usage_error("--hold is for connect and listen");
	if ((o.expect_close > 0 || o.pingpong) && o.mode != MODE_CONNECT)
		usage_error("--expect-close, --pingpong are for connect");
	if (o.pingpong > 0) {
		/* N messages of the --send-gen stream, each echo verified */
		if (o.send_file || o.have_send_gen || o.have_expect_gen ||
		    o.no_read || o.after_eof)
			usage_error("--pingpong makes its own stream: no --send,"
			    " --send-gen, --expect-gen, --no-read, --after-eof");
		if (o.msg_size == 0)
			o.msg_size = 100;
		o.have_send_gen = o.have_expect_gen = 1;
		o.send_gen = o.expect_gen = (uint64_t)o.pingpong * o.msg_size;
	}
	if (o.mode == MODE_GEN) {
		if (!o.have_send_gen || o.send_file || o.echo ||
		    o.have_expect_gen || o.pingpong)
			usage_error("gen takes --send-gen N, --seed, --conns, "
			    "--recv only");
		if (o.conns < 1)
			usage_error("gen --conns must be at least 1");
		if (o.conns > 1 && o.recv_file == NULL)
			usage_error("gen with several connections needs "
			    "--recv FILE with %%d");
	}
	if (o.accept_delay > 0 && o.mode != MODE_LISTEN)
		usage_error("--accept-delay is for listen");
	if ((o.rate > 0 || o.max_open > 0) && o.mode != MODE_CHURN)
		usage_error("--rate and --max-open are for churn");
	if (o.mode == MODE_CHURN) {
		/* churn makes its own messages and checks their echo itself */
		if (o.send_file || o.have_send_gen || o.have_expect_gen ||
		    o.echo || o.recv_file || o.conns_set)
			usage_error("churn takes no --send, --send-gen, "
			    "--expect-gen, --echo, --recv, --conns");
		if (o.rate == 0)
			o.rate = 1000;
		if (o.max_open == 0)
			o.max_open = 2000;
		if (o.msg_size == 0)
			o.msg_size = 100;
		if (o.duration * o.rate < 0.5)
			usage_error("--duration %g at --rate %g opens no "
			    "connection", o.duration, o.rate);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* never outlive the test script that started us */
	(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
	t_start = now();
	parse_args(argc, argv);
	raise_nofile();
	switch (o.mode) {
	case MODE_LISTEN:
		return run_listen();
	case MODE_CONNECT:
		return run_connect();
	case MODE_BLACKHOLE:
		return run_blackhole();
	case MODE_PORT:
		return run_port();
	case MODE_TRICKLE:
		return run_trickle();
	case MODE_CHURN:
		return run_churn();
	case MODE_ACTIVATE:
		return run_activate();
	case MODE_GEN:
		return run_gen();
	}
	return 2;
}
