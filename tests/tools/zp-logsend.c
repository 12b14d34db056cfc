/*
 * zp-logsend.c - numbered syslog messages over long-lived TCP connections:
 * a sender, a mini collector and a verifier, for zproxy's log-stream tests.
 *
 *   zp-logsend send HOST PORT --conns N --msgs M --framing lf|octet ...
 *        N connections at once, each sends M messages, then FIN, then
 *        reads to EOF; any connect failure, error, reset or early EOF is
 *        exit 1. Prints "connects=N messages=N bytes=N".
 *   zp-logsend collect [-b ADDR] [--port P] --dir DIR [--conns N]
 *                      [--lag BYTES] [--rcvbuf BYTES] [--read-rate BYTES]
 *        prints its port, appends each connection's bytes as they arrive
 *        to DIR/conn-<index>.raw (a kill -9 loses nothing it read). With
 *        --lag, a collector with an in-memory queue: per connection the
 *        last BYTES bytes received are held in memory, a byte is written
 *        only once BYTES more came after it, the held ones at EOF, error
 *        or reset; a kill -9 loses exactly the held min(BYTES, received).
 *        --read-rate: a collector that takes BYTES a second in all, its
 *        connections together (a slow one), and no more.
 *   zp-logsend verify --conns N --msgs M [options] FILE...
 *        every message exactly once (or at least once, or at most K
 *        missing), each intact: its length and CRC match.
 *
 * A message is "<13>zptest: c=CONN s=SEQ n=LEN k=CRC PAYLOAD": CONN in
 * [0,N), SEQ in [0,M), PAYLOAD LEN printable bytes drawn from a stream
 * seeded by seed+CONN (spaces in it, never a space at its end: collectors
 * may trim one), CRC the crc32 (IEEE, as zlib's) of PAYLOAD in 8 hex
 * digits. Framing lf: the message and '\n'; octet (RFC 6587): "LEN SP MSG".
 *
 * libc only, one poll(2) loop for every connection, like zp-peer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* accept4, SOCK_NONBLOCK */
#endif
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_PAYLOAD	(1024 * 1024)
#define HDR_MAX		128		/* "LEN <13>zptest: c=.. k=.. " */
#define OBUF_SIZE	(256 * 1024 + MAX_PAYLOAD + 2 * HDR_MAX)
#define OBUF_FILL	(256 * 1024)	/* refill up to this */
#define RBUF_SIZE	(256 * 1024)
#define PER_WAKEUP	(1024 * 1024)	/* bytes per connection per poll round */
#define LAG_MAX		(1024ULL * 1024 * 1024)	/* --lag at most this */
#define LAG_MIN_CAP	(64 * 1024)	/* a --lag ring's first size */

enum mode {
	MODE_SEND,
	MODE_DGRAM,
	MODE_DGRAM_COLLECT,
	MODE_COLLECT,
	MODE_VERIFY,
};

enum framing {
	FRAMING_LF,
	FRAMING_OCTET,
	FRAMING_NONE,		/* dgram: a datagram is a message */
};

enum expect {
	EXPECT_ANY,
	EXPECT_EXACTLY_ONCE,
	EXPECT_AT_LEAST_ONCE,
};

struct opts {
	enum mode	 mode;
	const char	*host;
	const char	*port;
	const char	*bind_addr;
	int		 bind_port;
	long		 conns;
	int		 conns_set;
	long		 msgs;
	int		 msgs_set;
	enum framing	 framing;
	int		 framing_set;
	uint64_t	 seed;
	size_t		 min, max;
	int		 newlines;
	long		 pause_at;	/* -1: no pause */
	const char	*go_file;
	double		 timeout;	/* seconds, 0 = none */
	const char	*dir;
	size_t		 lag;		/* --lag: bytes held back, 0 = none */
	int		 rcvbuf;	/* --rcvbuf: SO_RCVBUF, 0 = the kernel's */
	int		 raw;
	enum expect	 expect;
	long		 max_missing;	/* -1: no limit */
	long		 max_partial;	/* cut short, not bad: -1, none */
	int		 tail_ok;
	int		 streams;
	int		 runs;		/* --runs: streams cut by moves */
	int		 ordered;	/* --ordered: each conn's in order */
	int		 early_fin_ok;	/* a FIN before ours: send on */
	double		 rate;		/* send: messages a second a
					   connection, 0 = as fast as it goes */
	double		 read_rate;	/* collect: bytes a second in all, 0 =
					   as fast as it goes */
	int		 verbose;
	const char	*from;		/* dgram: the first source's address */
	const char	*text;		/* dgram: every datagram's bytes */
};

struct rng {
	uint64_t	state;
};

/* One sending connection. */
struct conn {
	int		 fd;
	long		 idx;
	int		 connecting;
	struct rng	 rng;
	long		 seq;		/* next message to make */
	char		*obuf;
	size_t		 ooff, olen;
	int		 shut;		/* FIN sent */
	int		 eof;		/* FIN received after ours */
	int		 early_fin;	/* --early-fin-ok: the peer's came first */
	int		 done;
	uint64_t	 sent;
};

/* One collected connection. */
struct sink {
	int		 fd;
	int		 file;
	long		 idx;
	uint64_t	 bytes;
	/* --lag: the last bytes received, not yet written, in a ring */
	char		*ring;
	size_t		 rcap;		/* its size, grown up to --lag */
	size_t		 rhead;		/* where the oldest held byte is */
	size_t		 rlen;		/* how many are held */
};

static struct opts	 o;
static double		 t_start;
static uint32_t		 crc_table[256];
static char		 rbuf[RBUF_SIZE];

static void usage(FILE *fp)
{
	fputs(
"usage: zp-logsend send HOST PORT --conns N --msgs M --framing lf|octet\n"
"                  [--seed S] [--min BYTES] [--max BYTES] [--newlines]\n"
"                  [--pause-at K --go FILE] [--timeout SECS]\n"
"                  [--early-fin-ok] [--rate N]\n"
"       zp-logsend dgram HOST PORT --conns N --msgs M [--from ADDR]\n"
"                  [--seed S] [--min BYTES] [--max BYTES] [--newlines]\n"
"                  [--rate N] [--text STR]\n"
"       zp-logsend dgram-collect [-b ADDR] [--port P] --dir DIR\n"
"       zp-logsend collect [-b ADDR] [--port P] --dir DIR [--conns N]\n"
"                  [--lag BYTES] [--rcvbuf BYTES] [--read-rate BYTES]\n"
"       zp-logsend verify --conns N --msgs M [--framing lf|octet] [--raw]\n"
"                  [--exactly-once|--at-least-once] [--max-missing K]\n"
"                  [--max-partial K]\n"
"                  [--tail-ok] [--streams|--runs] [--ordered] [-v]\n"
"                  FILE...\n"
"\n"
"A message: \"<13>zptest: c=CONN s=SEQ n=LEN k=CRC PAYLOAD\", CONN 0..N-1,\n"
"SEQ 0..M-1, PAYLOAD LEN printable bytes (seeded by seed+CONN), CRC its\n"
"crc32 in 8 hex digits. lf framing: MSG \"\\n\"; octet: \"LEN SP MSG\".\n"
"\n"
"send     open N connections to HOST PORT at once; each sends M messages,\n"
"         then FIN, then reads to EOF. Any connect failure, error, reset or\n"
"         EOF before our FIN is exit 1. Prints \"connects=N messages=N\n"
"         bytes=N\" on stdout.\n"
"  --seed S          payload seed (1)\n"
"  --min/--max BYTES payload length, uniform in [min,max] (1..16384)\n"
"  --newlines        octet framing: payloads may hold '\\n'\n"
"  --early-fin-ok    the peer's FIN before ours is no error: send on (a\n"
"                    proxy winding down); adds \"early-fins=K\" to the line\n"
"  --pause-at K      once K messages went out on every connection, print\n"
"                    \"paused\" and wait until --go FILE exists\n"
"  --timeout SECS    fail if not done by then (120; 0 = never)\n"
"  --rate N          at most N messages a second on each connection\n"
"dgram    the same messages over UDP, one a datagram, unframed: N sources\n"
"         send M each, interleaved (c=0 s=0, c=1 s=0, ..., c=0 s=1, ...),\n"
"         each from a socket of its own; --from ADDR: source c binds the\n"
"         IPv4 address ADDR plus c (127.0.0.2 ... on loopback), else the\n"
"         kernel's choice (::1 for ::1). --rate N: N datagrams a second\n"
"         from each source. Prints \"datagrams=N bytes=N octet=N\" (octet:\n"
"         what they make octet-framed). --text STR: every datagram is STR\n"
"         instead, as it is (\"\": an empty datagram).\n"
"dgram-collect  bind UDP ADDR (127.0.0.1) port P (0: any), print the port,\n"
"         and write each datagram as a line to DIR/dgrams (until SIGTERM);\n"
"         with the sender's address first: \"IP:PORT DATAGRAM\"\n"
"collect  listen on ADDR (127.0.0.1) port P (0: any), print the port as the\n"
"         first stdout line; append each connection's bytes as they arrive\n"
"         to DIR/conn-<index>.raw (accept order), read it to EOF, close;\n"
"         serve --conns N connections (0: forever, the default); on\n"
"         SIGUSR1 stop listening (connects are refused) and serve the rest\n"
"  --rcvbuf BYTES    each connection's receive buffer (SO_RCVBUF; the\n"
"                    kernel doubles it): what a kill -9 loses unread\n"
"  --read-rate BYTES read BYTES a second in all, the connections together\n"
"                    (a collector that cannot keep up)\n"
"  --lag BYTES       like a collector with an in-memory queue: hold each\n"
"                    connection's last BYTES bytes received in memory and\n"
"                    write a byte only once BYTES more came after it; at\n"
"                    EOF, error or reset write the held ones too. A signal\n"
"                    that kills it (kill -9) loses the held bytes, the\n"
"                    last min(BYTES, received) of each connection (0: none\n"
"                    held, every byte written as it arrives, the default)\n"
"verify   read FILEs: with --raw each one is a byte stream framed as\n"
"         --framing (lf); else each line is one message as a collector\n"
"         wrote it (a prefix before \"c=\" is tolerated; --raw: none but\n"
"         \"<13>zptest: \", the header exactly as sent). Prints \"sent=S\n"
"         received=R unique=U duplicates=D missing=X bad=B\" (-v: the first\n"
"         missing and duplicate ids). Exit 1 on a bad message (partial,\n"
"         merged, wrong CRC), an id out of range, and as asked:\n"
"  --exactly-once    no duplicate, none missing\n"
"  --at-least-once   none missing\n"
"  --max-missing K   at most K missing\n"
"  --max-partial K   up to K messages cut short (a collector left behind\n"
"                    mid-message writes what it had) are not bad; the\n"
"                    summary line ends with \" partial=P\"\n"
"  --tail-ok         a file's last frame (or line) may be truncated\n"
"  --streams         --raw: each file is one connection's messages, all of\n"
"                    them, in order (with the strict header and framing:\n"
"                    byte for byte what that connection sent)\n"
"  --runs            --raw: each file is a run of one connection's messages,\n"
"                    in order, without a gap, from any one to any later\n"
"                    (what moves between upstreams leave; with\n"
"                    --exactly-once: each message whole, once, in order)\n"
"  --ordered         each connection's messages come in the order sent,\n"
"                    over the FILEs in the order given (a collector's one\n"
"                    file of every client's lines); prints\n"
"                    \"out-of-order=K\" on a second line\n"
"\n"
"Exit status: 0 as asked, 1 otherwise (one line on stderr), 2 usage error.\n",
	    fp);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2),
    noreturn));

/* Print one line "zp-logsend: ..." and exit 1. */
static void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("zp-logsend: ", stderr);
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

	fputs("zp-logsend: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (zp-logsend --help)\n", stderr);
	exit(2);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Parse "123", "64K", "1M" (powers of 1024). */
static uint64_t parse_size(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (end == s || errno != 0 || *s == '-')
		usage_error("%s: bad number '%s'", opt, s);
	switch (*end) {
	case 'k': case 'K': mul = 1024ULL; end++; break;
	case 'm': case 'M': mul = 1024ULL * 1024; end++; break;
	default: break;
	}
	if (*end != '\0' || (uint64_t)v > UINT64_MAX / mul)
		usage_error("%s: bad number '%s'", opt, s);
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

static void crc_init(void)
{
	uint32_t c, i, k;

	for (i = 0; i < 256; i++) {
		c = i;
		for (k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320U ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

/* crc32 (IEEE 802.3, as zlib's crc32()) of n bytes. */
static uint32_t crc32_of(const char *p, size_t n)
{
	uint32_t c = 0xffffffffU;
	size_t i;

	for (i = 0; i < n; i++)
		c = crc_table[(c ^ (uint8_t)p[i]) & 0xff] ^ (c >> 8);
	return c ^ 0xffffffffU;
}

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint64_t rng_next(struct rng *r)
{
	return splitmix64(&r->state);
}

static void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1)
		die("fcntl: %s", strerror(errno));
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* ---- send -------------------------------------------------------------- */

/*
 * Append conn c's next message, framed, to its obuf. The payload: printable
 * bytes 0x20..0x7e, with --newlines one in 32 a '\n' instead; the last byte
 * is never a space or '\n' (collectors may trim them).
 */
static void conn_make(struct conn *c)
{
	char *msg, *pay, hdr[HDR_MAX], pre[24];
	size_t len, i, hlen, plen;
	uint64_t v;

	len = o.min + (size_t)(rng_next(&c->rng) % (o.max - o.min + 1));
	pay = c->obuf + c->ooff + c->olen + HDR_MAX;	/* made in place */
	for (i = 0; i < len; i++) {
		v = rng_next(&c->rng);
		if (o.newlines && (v & 31) == 0)
			pay[i] = '\n';
		else
			pay[i] = (char)(0x20 + (v >> 8) % 95);
		if (i == len - 1 && (pay[i] == ' ' || pay[i] == '\n'))
			pay[i] = (char)(0x21 + (v >> 16) % 94);
	}
	hlen = (size_t)snprintf(hdr, sizeof(hdr),
	    "<13>zptest: c=%ld s=%ld n=%zu k=%08" PRIx32 " ", c->idx, c->seq,
	    len, crc32_of(pay, len));
	plen = 0;
	if (o.framing == FRAMING_OCTET)
		plen = (size_t)snprintf(pre, sizeof(pre), "%zu ", hlen + len);
	msg = c->obuf + c->ooff + c->olen;
	/* the payload moves to just after the header: memmove, it may overlap */
	memmove(msg + plen + hlen, pay, len);
	memcpy(msg, pre, plen);
	memcpy(msg + plen, hdr, hlen);
	c->olen += plen + hlen + len;
	if (o.framing == FRAMING_LF)
		c->obuf[c->ooff + c->olen++] = '\n';
	c->seq++;
}

/* Messages conn c may make: up to --pause-at until told to go. */
static long pause_limit(int paused_done)
{
	if (o.pause_at >= 0 && !paused_done && o.pause_at < o.msgs)
		return o.pause_at;
	return o.msgs;
}

/* ... and by time t: with --rate, no more than it allows since the start. */
static long conn_limit(int paused_done, double t)
{
	long lim = pause_limit(paused_done), due;

	if (o.rate > 0) {
		due = (long)((t - t_start) * o.rate) + 1;
		if (due < lim)
			lim = due;
	}
	return lim;
}

static void conn_refill(struct conn *c, long limit)
{
	if (c->olen == 0)
		c->ooff = 0;
	/* room for a whole frame beyond OBUF_FILL, wherever olen ends */
	if (c->ooff > 0 && c->ooff + OBUF_FILL + HDR_MAX + o.max + 1 >
	    OBUF_SIZE) {
		memmove(c->obuf, c->obuf + c->ooff, c->olen);
		c->ooff = 0;
	}
	while (c->seq < limit && c->olen < OBUF_FILL)
		conn_make(c);
}

static void conn_write(struct conn *c, long limit)
{
	size_t moved = 0;
	ssize_t w;

	while (moved < PER_WAKEUP) {
		conn_refill(c, limit);
		if (c->olen == 0)
			break;
		do
			w = send(c->fd, c->obuf + c->ooff, c->olen,
			    MSG_NOSIGNAL);
		while (w == -1 && errno == EINTR);
		if (w == -1) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			die("conn %ld: send: %s (after %" PRIu64 " bytes, "
			    "message %ld being made)", c->idx,
			    strerror(errno), c->sent, c->seq);
		}
		c->ooff += (size_t)w;
		c->olen -= (size_t)w;
		c->sent += (size_t)w;
		moved += (size_t)w;
	}
	if (c->olen == 0 && c->seq == o.msgs && !c->shut) {
		if (shutdown(c->fd, SHUT_WR) == -1)
			die("conn %ld: shutdown: %s", c->idx, strerror(errno));
		c->shut = 1;
		if (c->early_fin) {
			/* Its FIN came already: nothing more to wait for. */
			close(c->fd);
			c->fd = -1;
			c->done = 1;
		}
	}
}

static void conn_read(struct conn *c)
{
	ssize_t r;

	do
		r = recv(c->fd, rbuf, sizeof(rbuf), 0);
	while (r == -1 && errno == EINTR);
	if (r == -1) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		die("conn %ld: recv: %s (after %" PRIu64 " bytes sent, %ld of"
		    " %ld messages made)", c->idx, strerror(errno), c->sent,
		    c->seq, o.msgs);
	}
	if (r > 0)
		return;		/* a collector says nothing; ignore it */
	if (!c->shut && o.early_fin_ok) {
		/* A proxy winding down: what we send is still taken. */
		c->early_fin = 1;
		return;
	}
	if (!c->shut)
		die("conn %ld: EOF from the peer after %" PRIu64 " bytes sent,"
		    " %ld of %ld messages made, before our FIN", c->idx,
		    c->sent, c->seq, o.msgs);
	c->eof = 1;
	close(c->fd);
	c->fd = -1;
	c->done = 1;
}

static void conn_connected(struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		err = errno;
	if (err == EINPROGRESS || err == EALREADY)
		return;
	if (err != 0)
		die("conn %ld: connect to %s port %s: %s", c->idx, o.host,
		    o.port, strerror(err));
	c->connecting = 0;
}

static int run_send(void)
{
	struct addrinfo hints, *ai;
	struct conn *conns;
	struct pollfd *pfds;
	long i, ndone, nconnecting, limit, nmsgs = 0, early = 0;
	int rc, paused = 0, go = o.pause_at < 0 || o.pause_at >= o.msgs;
	uint64_t bytes = 0;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	rc = getaddrinfo(o.host, o.port, &hints, &ai);
	if (rc != 0)
		die("%s port %s: %s", o.host, o.port, gai_strerror(rc));
	conns = calloc((size_t)o.conns, sizeof(*conns));
	pfds = calloc((size_t)o.conns, sizeof(*pfds));
	if (conns == NULL || pfds == NULL)
		die("out of memory");
	for (i = 0; i < o.conns; i++) {
		struct conn *c = &conns[i];

		c->idx = i;
		c->rng.state = o.seed + (uint64_t)i;
		if ((c->obuf = malloc(OBUF_SIZE)) == NULL)
			die("out of memory");
		c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, 0);
		if (c->fd == -1)
			die("socket: %s", strerror(errno));
		if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) == -1) {
			if (errno != EINPROGRESS)
				die("conn %ld: connect to %s port %s: %s", i,
				    o.host, o.port, strerror(errno));
			c->connecting = 1;
		}
	}
	freeaddrinfo(ai);

	for (;;) {
		double t = now();
		int ms = 1000, all_paused;

		limit = conn_limit(go, t);
		ndone = nconnecting = 0;
		all_paused = !go;
		for (i = 0; i < o.conns; i++) {
			struct conn *c = &conns[i];

			ndone += c->done;
			nconnecting += c->connecting;
			if (c->seq < pause_limit(go) || c->olen > 0 ||
			    c->connecting)
				all_paused = 0;
		}
		if (ndone == o.conns)
			break;
		if (o.timeout > 0) {
			if (t >= t_start + o.timeout) {
				for (i = 0; i < o.conns && conns[i].done; i++)
					;
				die("timeout after %.1fs: conn %ld %s, %" PRIu64
				    " bytes sent, %ld of %ld messages made%s",
				    o.timeout, i, conns[i].connecting ?
				    "connecting" : "open", conns[i].sent,
				    conns[i].seq, o.msgs, conns[i].shut ?
				    ", FIN sent, no EOF yet" : "");
			}
			ms = (int)((t_start + o.timeout - t) * 1000) + 1;
		}
		/* --rate: back soon for the next messages due. */
		if (o.rate > 0 && limit < o.msgs && ms > 10)
			ms = 10;
		if (all_paused) {
			if (!paused) {
				printf("paused\n");
				if (fflush(stdout) == EOF)
					die("stdout: %s", strerror(errno));
				paused = 1;
			}
			if (access(o.go_file, F_OK) == 0) {
				go = 1;
				continue;
			}
			if (ms > 20)
				ms = 20;
		}
		for (i = 0; i < o.conns; i++) {
			struct conn *c = &conns[i];

			pfds[i].fd = c->done ? -1 : c->fd;
			pfds[i].events = c->early_fin ? 0 : POLLIN;
			pfds[i].revents = 0;
			if (c->connecting || (!c->shut && (c->olen > 0 ||
			    c->seq < limit || c->seq == o.msgs)))
				pfds[i].events |= POLLOUT;
		}
		rc = poll(pfds, (nfds_t)o.conns, ms);
		if (rc == -1) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		for (i = 0; i < o.conns; i++) {
			struct conn *c = &conns[i];
			short re = pfds[i].revents;

			if (re == 0 || c->done)
				continue;
			if (c->connecting) {
				conn_connected(c);
				if (c->connecting)
					continue;
			}
			if (re & (POLLIN | POLLERR | POLLHUP))
				conn_read(c);
			if (!c->done && !c->shut && (re & POLLOUT))
				conn_write(c, limit);
		}
	}
	for (i = 0; i < o.conns; i++) {
		nmsgs += conns[i].seq;
		bytes += conns[i].sent;
		early += conns[i].early_fin;
		free(conns[i].obuf);
	}
	printf("connects=%ld messages=%ld bytes=%" PRIu64 "%s", o.conns,
	    nmsgs, bytes, o.early_fin_ok ? "" : "\n");
	if (o.early_fin_ok)
		printf(" early-fins=%ld\n", early);
	free(conns);
	free(pfds);
	return 0;
}

/* ---- collect ----------------------------------------------------------- */

/*
 * dgram: N sources of M messages each, one a datagram, interleaved, at
 * --rate N a second from each (paced in steps of a millisecond).
 */
static int run_dgram(void)
{
	struct addrinfo hints, *ai;
	struct conn *conns;
	struct in_addr base;
	struct sockaddr_in sin;
	long i, seq;
	uint64_t bytes = 0, octet = 0, n = 0;
	double t0 = now(), due;
	char pre[24];
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_DGRAM;
	hints.ai_flags = AI_NUMERICSERV;
	if ((rc = getaddrinfo(o.host, o.port, &hints, &ai)) != 0)
		die("%s port %s: %s", o.host, o.port, gai_strerror(rc));
	if (o.from != NULL && (inet_pton(AF_INET, o.from, &base) != 1 ||
	    ai->ai_family != AF_INET))
		die("--from: an IPv4 address, to an IPv4 host: '%s'", o.from);
	if ((conns = calloc((size_t)o.conns, sizeof(*conns))) == NULL)
		die("out of memory");
	for (i = 0; i < o.conns; i++) {
		struct conn *c = &conns[i];

		c->idx = i;
		c->rng.state = o.seed + (uint64_t)i;
		if ((c->obuf = malloc(OBUF_SIZE)) == NULL)
			die("out of memory");
		if ((c->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC,
		    0)) == -1)
			die("socket: %s", strerror(errno));
		if (o.from == NULL)
			continue;
		memset(&sin, 0, sizeof(sin));
		sin.sin_family = AF_INET;
		sin.sin_addr.s_addr = htonl(ntohl(base.s_addr) + (uint32_t)i);
		if (bind(c->fd, (struct sockaddr *)&sin, sizeof(sin)) == -1)
			die("source %ld: bind %s: %s", i,
			    inet_ntoa(sin.sin_addr), strerror(errno));
	}
	for (seq = 0; seq < o.msgs; seq++) {
		for (i = 0; i < o.conns; i++) {
			struct conn *c = &conns[i];

			c->ooff = c->olen = 0;
			if (o.text != NULL) {
				c->olen = strlen(o.text);
				memcpy(c->obuf, o.text, c->olen);
			} else
				conn_make(c);
			if (sendto(c->fd, c->obuf, c->olen, 0, ai->ai_addr,
			    ai->ai_addrlen) != (ssize_t)c->olen)
				die("source %ld: sendto: %s", i,
				    strerror(errno));
			bytes += c->olen;
			octet += (uint64_t)snprintf(pre, sizeof(pre), "%zu ",
			    c->olen) + c->olen;
			n++;
		}
		if (o.rate > 0)
			while ((due = t0 + (double)(seq + 1) / o.rate) > now()) {
				struct timespec ts = { 0, 1000000 };

				nanosleep(&ts, NULL);
			}
		if (o.timeout > 0 && now() - t_start > o.timeout)
			die("timed out after %ld of %ld rounds", seq, o.msgs);
	}
	printf("datagrams=%llu bytes=%llu octet=%llu\n", (unsigned long long)n,
	    (unsigned long long)bytes, (unsigned long long)octet);
	for (i = 0; i < o.conns; i++) {
		close(conns[i].fd);
		free(conns[i].obuf);
	}
	free(conns);
	freeaddrinfo(ai);
	return 0;
}

static void write_all(int fd, const char *p, size_t n, long idx)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1)
			die("conn %ld: write to its file: %s", idx,
			    strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* --lag: write the k oldest held bytes of sink s, and drop them. */
static void ring_write(struct sink *s, size_t k)
{
	size_t first = s->rcap - s->rhead;

	if (k == 0)
		return;
	if (first > k)
		first = k;
	write_all(s->file, s->ring + s->rhead, first, s->idx);
	write_all(s->file, s->ring, k - first, s->idx);
	s->rhead = (s->rhead + k) % s->rcap;
	s->rlen -= k;
	if (s->rlen == 0)
		s->rhead = 0;
}

/* --lag: hold n more bytes in sink s's ring; rlen + n <= o.lag. */
static void ring_push(struct sink *s, const char *p, size_t n)
{
	size_t tail, first;

	if (n == 0)
		return;
	if (s->rlen + n > s->rcap) {
		/* grow (doubling, up to --lag) into a new, straight ring */
		size_t cap = s->rcap ? s->rcap * 2 : LAG_MIN_CAP;
		char *ring;

		if (cap < s->rlen + n)
			cap = s->rlen + n;
		if (cap > o.lag)
			cap = o.lag;
		if ((ring = malloc(cap)) == NULL)
			die("conn %ld: out of memory (--lag %zu)", s->idx,
			    o.lag);
		if (s->rlen > 0) {
			first = s->rcap - s->rhead;
			if (first > s->rlen)
				first = s->rlen;
			memcpy(ring, s->ring + s->rhead, first);
			memcpy(ring + first, s->ring, s->rlen - first);
		}
		free(s->ring);
		s->ring = ring;
		s->rcap = cap;
		s->rhead = 0;
	}
	tail = (s->rhead + s->rlen) % s->rcap;
	first = s->rcap - tail;
	if (first > n)
		first = n;
	memcpy(s->ring + tail, p, first);
	memcpy(s->ring, p + first, n - first);
	s->rlen += n;
}

/*
 * n bytes received on sink s: to its file, or with --lag whatever is now
 * more than --lag bytes behind the newest, oldest first; the rest held.
 */
static void sink_take(struct sink *s, const char *p, size_t n)
{
	size_t out, k;

	s->bytes += (uint64_t)n;
	if (o.lag == 0) {
		/* straight to the file: a kill -9 loses nothing */
		write_all(s->file, p, n, s->idx);
		return;
	}
	if (s->rlen + n > o.lag) {
		out = s->rlen + n - o.lag;
		k = out < s->rlen ? out : s->rlen;
		ring_write(s, k);
		/* more still: from p, the ring empty now */
		write_all(s->file, p, out - k, s->idx);
		p += out - k;
		n -= out - k;
	}
	ring_push(s, p, n);
}

/* Sink s is over: write what it holds (--lag), close it. */
static void sink_close(struct sink *s)
{
	if (s->rlen > 0) {
		if (o.verbose)
			fprintf(stderr, "zp-logsend: conn %ld: %zu held bytes "
			    "written\n", s->idx, s->rlen);
		ring_write(s, s->rlen);
	}
	free(s->ring);
	s->ring = NULL;
	s->rcap = s->rhead = s->rlen = 0;
	close(s->fd);
	close(s->file);
	s->fd = s->file = -1;
}

/*
 * --read-rate: a token bucket of bytes the collector may read, filled at
 * the rate, holding a tenth of a second's (4K at least): an idle moment
 * is no licence for a burst.
 */
static double	 read_tokens, read_last;

static void read_refill(double t)
{
	double cap = o.read_rate / 10 > 4096 ? o.read_rate / 10 : 4096;

	read_tokens += (t - read_last) * o.read_rate;
	if (read_tokens > cap)
		read_tokens = cap;
	read_last = t;
}

/* Read what sink s has; 1 when it is over (EOF or error). */
static int sink_read(struct sink *s)
{
	ssize_t r;
	size_t want = sizeof(rbuf);

	if (o.read_rate > 0) {
		if (read_tokens < 1)
			return 0;
		if (want > (size_t)read_tokens)
			want = (size_t)read_tokens;
	}
	do
		r = recv(s->fd, rbuf, want, 0);
	while (r == -1 && errno == EINTR);
	if (r == -1 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (r == -1) {
		/* a collector outlives a client that resets */
		fprintf(stderr, "zp-logsend: conn %ld: recv: %s after %" PRIu64
		    " bytes\n", s->idx, strerror(errno), s->bytes);
		return 1;
	}
	if (r == 0) {
		if (o.verbose)
			fprintf(stderr, "zp-logsend: conn %ld: EOF after %"
			    PRIu64 " bytes\n", s->idx, s->bytes);
		return 1;
	}
	if (o.read_rate > 0)
		read_tokens -= (double)r;
	sink_take(s, rbuf, (size_t)r);
	return 0;
}

/* SIGUSR1: stop listening (new connects are refused), serve the rest. */
static volatile sig_atomic_t	 stop_listening;
static volatile sig_atomic_t	 dgram_stop;

static void on_dgram_stop(int sig)
{
	(void)sig;
	dgram_stop = 1;
}

/*
 * dgram-collect: a UDP receiver writing "IP:PORT DATAGRAM\n" a datagram
 * to DIR/dgrams, flushed each time, until SIGTERM.
 */
static int run_dgram_collect(void)
{
	struct sockaddr_storage ss, from;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	socklen_t len = sizeof(ss), flen;
	char path[4096], host[INET6_ADDRSTRLEN], line[80];
	static char buf[65536];
	struct pollfd pfd;
	int fd, out, on = 1, big = 8 * 1024 * 1024;
	ssize_t n;

	memset(&ss, 0, sizeof(ss));
	if (o.bind_addr != NULL && strchr(o.bind_addr, ':') != NULL) {
		sin6->sin6_family = AF_INET6;
		if (inet_pton(AF_INET6, o.bind_addr, &sin6->sin6_addr) != 1)
			die("bad address %s", o.bind_addr);
		sin6->sin6_port = htons((uint16_t)o.bind_port);
		len = sizeof(*sin6);
	} else {
		sin->sin_family = AF_INET;
		if (inet_pton(AF_INET, o.bind_addr != NULL ? o.bind_addr :
		    "127.0.0.1", &sin->sin_addr) != 1)
			die("bad address %s", o.bind_addr);
		sin->sin_port = htons((uint16_t)o.bind_port);
		len = sizeof(*sin);
	}
	if ((fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		die("socket: %s", strerror(errno));
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
	if (bind(fd, (struct sockaddr *)&ss, len) == -1)
		die("bind: %s", strerror(errno));
	len = sizeof(ss);
	(void)getsockname(fd, (struct sockaddr *)&ss, &len);
	snprintf(path, sizeof(path), "%s/dgrams", o.dir);
	if ((out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
	    0644)) == -1)
		die("%s: %s", path, strerror(errno));
	signal(SIGTERM, on_dgram_stop);
	signal(SIGUSR1, on_dgram_stop);
	printf("%u\n", ntohs(ss.ss_family == AF_INET6 ? sin6->sin6_port :
	    sin->sin_port));
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (!dgram_stop) {
		if (poll(&pfd, 1, 100) <= 0)
			continue;
		flen = sizeof(from);
		if ((n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT,
		    (struct sockaddr *)&from, &flen)) < 0)
			continue;
		if (from.ss_family == AF_INET6)
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&from)->
			    sin6_addr, host, sizeof(host));
		else
			inet_ntop(AF_INET, &((struct sockaddr_in *)&from)->
			    sin_addr, host, sizeof(host));
		snprintf(line, sizeof(line), "%s:%u ", host, ntohs(
		    ((struct sockaddr_in *)&from)->sin_port));
		write_all(out, line, strlen(line), 0);
		write_all(out, buf, (size_t)n, 0);
		write_all(out, "\n", 1, 0);
	}
	close(out);
	close(fd);
	return 0;
}

static void on_usr1(int sig)
{
	(void)sig;
	stop_listening = 1;
}

static int run_collect(void)
{
	const char *addr = o.bind_addr ? o.bind_addr : "127.0.0.1";
	struct addrinfo hints, *ai;
	struct sockaddr_storage ss;
	socklen_t slen = sizeof(ss);
	struct sink *sinks = NULL;
	struct pollfd *pfds = NULL;
	long nsinks = 0, cap = 0, accepted = 0, open_n = 0, i, k;
	long round_robin = 0;
	int lfd, one = 1, rc, port;
	char pbuf[16];

	snprintf(pbuf, sizeof(pbuf), "%d", o.bind_port);
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV | AI_PASSIVE;
	rc = getaddrinfo(addr, pbuf, &hints, &ai);
	if (rc != 0)
		die("%s port %s: %s", addr, pbuf, gai_strerror(rc));
	lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd == -1)
		die("socket: %s", strerror(errno));
	if (setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == -1)
		die("SO_REUSEADDR: %s", strerror(errno));
	/* Before listen(): accepted sockets inherit it, window scale too. */
	if (o.rcvbuf > 0 && setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &o.rcvbuf,
	    sizeof(o.rcvbuf)) == -1)
		die("SO_RCVBUF: %s", strerror(errno));
	if (bind(lfd, ai->ai_addr, ai->ai_addrlen) == -1)
		die("bind %s port %d: %s", addr, o.bind_port, strerror(errno));
	freeaddrinfo(ai);
	if (listen(lfd, 1024) == -1)
		die("listen: %s", strerror(errno));
	set_nonblock(lfd);
	if (getsockname(lfd, (struct sockaddr *)&ss, &slen) == -1)
		die("getsockname: %s", strerror(errno));
	port = ntohs(ss.ss_family == AF_INET6 ?
	    ((struct sockaddr_in6 *)&ss)->sin6_port :
	    ((struct sockaddr_in *)&ss)->sin_port);
	printf("%d\n", port);
	if (fflush(stdout) == EOF)
		die("stdout: %s", strerror(errno));
	signal(SIGUSR1, on_usr1);

	read_last = now();
	for (;;) {
		long np = 0;
		int want_accept, wait_ms = -1, throttled = 0;

		if (stop_listening && lfd != -1) {
			close(lfd);
			lfd = -1;
		}
		want_accept = lfd != -1 && (o.conns == 0 || accepted < o.conns);

		if (!want_accept && open_n == 0)
			break;
		if (cap < nsinks + 1) {
			cap = cap ? cap * 2 : 64;
			sinks = realloc(sinks, (size_t)cap * sizeof(*sinks));
			pfds = realloc(pfds, (size_t)(cap + 1) * sizeof(*pfds));
			if (sinks == NULL || pfds == NULL)
				die("out of memory");
		}
		if (o.read_rate > 0) {
			read_refill(now());
			throttled = read_tokens < 1;
			wait_ms = 10;
		}
		for (i = 0; i < nsinks; i++) {
			pfds[i].fd = sinks[i].fd;	/* -1 once closed */
			pfds[i].events = throttled ? 0 : POLLIN;
			pfds[i].revents = 0;
		}
		np = nsinks;
		pfds[np].fd = want_accept ? lfd : -1;
		pfds[np].events = POLLIN;
		pfds[np].revents = 0;
		rc = poll(pfds, (nfds_t)np + 1, wait_ms);
		if (rc == -1) {
			if (errno == EINTR)
				continue;
			die("poll: %s", strerror(errno));
		}
		/*
		 * --read-rate: each round starts one further, so that its
		 * share is fair. Without, always from the first (other
		 * tests' traffic was measured so; zproxy's memory in
		 * attack.sh follows the order the collector reads in).
		 */
		for (k = 0; k < np; k++) {
			struct sink *s;

			i = o.read_rate > 0 ? (k + round_robin) % np : k;
			s = &sinks[i];
			if (s->fd == -1 || pfds[i].revents == 0)
				continue;
			if (sink_read(s)) {
				sink_close(s);
				open_n--;
			}
		}
		round_robin++;
		if (pfds[np].revents & POLLIN) {
			char name[4096];
			int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK |
			    SOCK_CLOEXEC);
			struct sink *s;

			if (fd == -1) {
				if (errno == EAGAIN || errno == EINTR ||
				    errno == ECONNABORTED)
					continue;
				die("accept: %s", strerror(errno));
			}
			s = &sinks[nsinks];
			s->fd = fd;
			s->idx = accepted++;
			s->bytes = 0;
			s->ring = NULL;
			s->rcap = s->rhead = s->rlen = 0;
			snprintf(name, sizeof(name), "%s/conn-%ld.raw", o.dir,
			    s->idx);
			s->file = open(name, O_WRONLY | O_CREAT | O_APPEND |
			    O_TRUNC | O_CLOEXEC, 0644);
			if (s->file == -1)
				die("%s: %s", name, strerror(errno));
			nsinks++;
			open_n++;
		}
	}
	if (lfd != -1)
		close(lfd);
	free(sinks);
	free(pfds);
	return 0;
}

/* ---- verify ------------------------------------------------------------ */

struct tally {
	uint8_t		*seen;		/* a count per id, saturating at 255 */
	uint64_t	 received, bad, truncated, out_of_range;
	uint64_t	 partial;	/* --max-partial: cut short, forgiven */
	uint64_t	 not_streams;	/* --streams: files that are not one */
	int64_t		*last;		/* --ordered: each conn's last s */
	uint64_t	 disorder;	/* --ordered: messages before their
					   conn's last one */
	int64_t		 f_conn;	/* --streams: this file's connection */
	int64_t		 f_next;	/* and the sequence number due next */
	const char	*first_bad;	/* why the first bad one was bad */
	char		 why[256];
};

static struct tally	 tl;

static void bad(const char *file, uint64_t where, const char *why)
{
	tl.bad++;
	if (tl.bad == 1) {
		snprintf(tl.why, sizeof(tl.why), "%s at byte %" PRIu64 ": %s",
		    file, where, why);
		tl.first_bad = tl.why;
	}
}

/*
 * --max-partial: a message cut short is forgiven, up to K of them: one
 * whose payload ends early (len 0), or whose header does (len: what is
 * left of it, shorter than any whole header).
 */
#define HEADER_MIN	40	/* "c=0 s=0 n=1 k=00000000 " and a prefix */
static int forgive_partial(ptrdiff_t len)
{
	if (o.max_partial < 0 || tl.partial >= (uint64_t)o.max_partial ||
	    len >= HEADER_MIN)
		return 0;
	tl.partial++;
	return 1;
}

static int parse_num(const char **pp, const char *end, const char *key,
    uint64_t *v, int base)
{
	const char *p = *pp;
	size_t kl = strlen(key);
	int digits = 0;

	if ((size_t)(end - p) < kl || memcmp(p, key, kl) != 0)
		return -1;
	p += kl;
	*v = 0;
	while (p < end && digits < 20) {
		int d;

		if (*p >= '0' && *p <= '9')
			d = *p - '0';
		else if (base == 16 && *p >= 'a' && *p <= 'f')
			d = *p - 'a' + 10;
		else
			break;
		*v = *v * (uint64_t)base + (uint64_t)d;
		p++;
		digits++;
	}
	if (digits == 0 || p == end || *p != ' ')
		return -1;
	*pp = p + 1;
	return 0;
}

/* --streams: one more message of this file, c=C s=S. */
static void stream_step(const char *file, uint64_t c, uint64_t s)
{
	if (tl.f_next < 0)
		return;		/* this file is known not to be one already */
	if (tl.f_conn == -1) {
		tl.f_conn = (int64_t)c;
		if (o.runs)
			tl.f_next = (int64_t)s;	/* a run starts anywhere */
	}
	if ((int64_t)c != tl.f_conn || (int64_t)s != tl.f_next) {
		fprintf(stderr, "zp-logsend: %s is not one connection's "
		    "stream: c=%" PRIu64 " s=%" PRIu64 " where c=%" PRId64
		    " s=%" PRId64 " was due\n", file, c, s, tl.f_conn,
		    tl.f_next);
		tl.not_streams++;
		tl.f_next = -1;
		return;
	}
	tl.f_next++;
}

/*
 * One message in [p, end) (a line, or an octet frame): find "c=", parse
 * the fields, check the payload's length and CRC, count the id. With
 * --raw, the message must be exactly as send made it: no prefix but
 * "<13>zptest: ", the header in its one form.
 */
static void check_msg(const char *file, uint64_t where, const char *p,
    const char *end)
{
	static const char pfx[] = "<13>zptest: ";
	const char *q, *start = p;
	uint64_t c, s, n, k;
	char hdr[HDR_MAX];
	int hlen;

	for (q = p; q + 1 < end; q++)
		if (q[0] == 'c' && q[1] == '=' && (q == p || q[-1] == ' '))
			break;
	if (q + 1 >= end) {
		if (!forgive_partial(end - start))
			bad(file, where, "no \"c=\" in it");
		return;
	}
	p = q;
	if (parse_num(&p, end, "c=", &c, 10) == -1 ||
	    parse_num(&p, end, "s=", &s, 10) == -1 ||
	    parse_num(&p, end, "n=", &n, 10) == -1 ||
	    parse_num(&p, end, "k=", &k, 16) == -1) {
		if (!forgive_partial(end - q))
			bad(file, where, "its header does not parse");
		return;
	}
	if ((uint64_t)(end - p) < n && forgive_partial(0))
		return;
	if ((uint64_t)(end - p) != n) {
		bad(file, where, (uint64_t)(end - p) < n ?
		    "payload shorter than its n= (partial)" :
		    "payload longer than its n= (merged)");
		return;
	}
	if (crc32_of(p, (size_t)n) != (uint32_t)k) {
		bad(file, where, "payload CRC does not match its k=");
		return;
	}
	if (o.raw) {
		hlen = snprintf(hdr, sizeof(hdr), "%sc=%" PRIu64 " s=%" PRIu64
		    " n=%" PRIu64 " k=%08" PRIx64 " ", pfx, c, s, n, k);
		if (hlen < 0 || (size_t)hlen >= sizeof(hdr) ||
		    p - start != hlen || memcmp(start, hdr, (size_t)hlen) != 0) {
			bad(file, where, "header not as sent");
			return;
		}
	}
	if (c >= (uint64_t)o.conns || s >= (uint64_t)o.msgs) {
		tl.out_of_range++;
		bad(file, where, "id out of range");
		return;
	}
	if (o.streams || o.runs)
		stream_step(file, c, s);
	if (o.ordered) {
		if ((int64_t)s <= tl.last[c] && tl.disorder++ == 0)
			fprintf(stderr, "zp-logsend: %s at byte %" PRIu64
			    ": c=%" PRIu64 " s=%" PRIu64 " after s=%" PRId64
			    " of that connection\n", file, where, c, s,
			    tl.last[c]);
		tl.last[c] = (int64_t)s;
	}
	tl.received++;
	if (tl.seen[c * (uint64_t)o.msgs + s] < 255)
		tl.seen[c * (uint64_t)o.msgs + s]++;
}

/* The whole of a file, NUL-terminated; *lenp its length. */
static char *slurp(const char *file, size_t *lenp)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap + 1);
	ssize_t r;
	int fd = open(file, O_RDONLY | O_CLOEXEC);

	if (fd == -1)
		die("%s: %s", file, strerror(errno));
	if (buf == NULL)
		die("out of memory");
	for (;;) {
		if (len == cap) {
			cap *= 2;
			if ((buf = realloc(buf, cap + 1)) == NULL)
				die("out of memory");
		}
		r = read(fd, buf + len, cap - len);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1)
			die("%s: %s", file, strerror(errno));
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = '\0';
	*lenp = len;
	return buf;
}

/* A truncated last frame or line: fine with --tail-ok, else bad. */
static void tail(const char *file, uint64_t where, const char *why)
{
	tl.truncated++;
	if (!o.tail_ok)
		bad(file, where, why);
	else if (o.verbose)
		fprintf(stderr, "zp-logsend: %s: truncated tail at byte %"
		    PRIu64 " (--tail-ok)\n", file, where);
}

static void verify_lines(const char *file, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len, *nl;

	while (p < end) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL) {
			/* a last line without its '\n' */
			const char *save = tl.first_bad;
			uint64_t b = tl.bad;

			check_msg(file, (uint64_t)(p - buf), p, end);
			if (tl.bad > b) {
				tl.bad = b;
				tl.first_bad = save;
				tail(file, (uint64_t)(p - buf),
				    "last line truncated");
			}
			break;
		}
		check_msg(file, (uint64_t)(p - buf), p, nl);
		p = nl + 1;
	}
}

static void verify_octets(const char *file, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len, *q;
	uint64_t n;
	int digits;

	while (p < end) {
		n = 0;
		digits = 0;
		for (q = p; q < end && *q >= '0' && *q <= '9' && digits < 10;
		    q++, digits++)
			n = n * 10 + (uint64_t)(*q - '0');
		if (q == end) {
			tail(file, (uint64_t)(p - buf), "last frame's length "
			    "truncated");
			return;
		}
		if (digits == 0 || *q != ' ' || *p == '0') {
			/* no way to find the next frame */
			bad(file, (uint64_t)(p - buf), "not an octet-counted "
			    "frame (the rest of the file is skipped)");
			return;
		}
		q++;
		if ((uint64_t)(end - q) < n) {
			tail(file, (uint64_t)(p - buf), "last frame "
			    "truncated");
			return;
		}
		check_msg(file, (uint64_t)(p - buf), q, q + n);
		p = q + n;
	}
}

static int run_verify(int nfiles, char **files)
{
	uint64_t total = (uint64_t)o.conns * (uint64_t)o.msgs, i;
	uint64_t unique = 0, dups = 0, missing = 0;
	int f, shown, rc = 0;

	if ((tl.seen = calloc(total ? total : 1, 1)) == NULL ||
	    (tl.last = malloc(((size_t)o.conns + 1) * sizeof(*tl.last))) ==
	    NULL)
		die("out of memory");
	for (i = 0; i < (uint64_t)o.conns; i++)
		tl.last[i] = -1;
	for (f = 0; f < nfiles; f++) {
		size_t len;
		char *buf = slurp(files[f], &len);

		tl.f_conn = -1;
		tl.f_next = 0;
		if (o.raw && o.framing == FRAMING_OCTET)
			verify_octets(files[f], buf, len);
		else
			verify_lines(files[f], buf, len);
		free(buf);
		if (o.streams && tl.f_next >= 0 && tl.f_next != o.msgs) {
			fprintf(stderr, "zp-logsend: %s: its stream (c=%"
			    PRId64 ") ends after %" PRId64 " of %ld messages\n",
			    files[f], tl.f_conn, tl.f_next, o.msgs);
			tl.not_streams++;
		}
	}
	for (i = 0; i < total; i++) {
		if (tl.seen[i] == 0)
			missing++;
		else
			unique++;
	}
	/* a count saturated at 255: received says how many there were */
	dups = tl.received - unique;
	printf("sent=%" PRIu64 " received=%" PRIu64 " unique=%" PRIu64
	    " duplicates=%" PRIu64 " missing=%" PRIu64 " bad=%" PRIu64,
	    total, tl.received, unique, dups, missing, tl.bad);
	if (o.max_partial >= 0)
		printf(" partial=%" PRIu64, tl.partial);
	printf("\n");
	fflush(stdout);
	if (o.verbose) {
		if (tl.truncated > 0)
			fprintf(stderr, "zp-logsend: %" PRIu64 " truncated "
			    "tail(s)\n", tl.truncated);
		for (i = 0, shown = 0; i < total && shown < 10; i++)
			if (tl.seen[i] == 0 && shown++ < 10)
				fprintf(stderr, "zp-logsend: missing c=%" PRIu64
				    " s=%" PRIu64 "\n", i / (uint64_t)o.msgs,
				    i % (uint64_t)o.msgs);
		for (i = 0, shown = 0; i < total && shown < 10; i++)
			if (tl.seen[i] > 1 && shown++ < 10)
				fprintf(stderr, "zp-logsend: duplicate c=%"
				    PRIu64 " s=%" PRIu64 " (%u times)\n",
				    i / (uint64_t)o.msgs, i % (uint64_t)o.msgs,
				    tl.seen[i]);
	}
	if (tl.bad > 0) {
		fprintf(stderr, "zp-logsend: %" PRIu64 " bad message(s), the "
		    "first: %s\n", tl.bad, tl.first_bad);
		rc = 1;
	}
	if (o.ordered)
		printf("out-of-order=%" PRIu64 "\n", tl.disorder);
	if (tl.out_of_range > 0 || tl.not_streams > 0 || tl.disorder > 0)
		rc = 1;
	if (o.expect == EXPECT_EXACTLY_ONCE && (dups > 0 || missing > 0)) {
		fprintf(stderr, "zp-logsend: not exactly once: %" PRIu64
		    " duplicate(s), %" PRIu64 " missing\n", dups, missing);
		rc = 1;
	}
	if (o.expect == EXPECT_AT_LEAST_ONCE && missing > 0) {
		fprintf(stderr, "zp-logsend: not at least once: %" PRIu64
		    " missing\n", missing);
		rc = 1;
	}
	if (o.max_missing >= 0 && missing > (uint64_t)o.max_missing) {
		fprintf(stderr, "zp-logsend: %" PRIu64 " missing, more than "
		    "--max-missing %ld\n", missing, o.max_missing);
		rc = 1;
	}
	free(tl.seen);
	free(tl.last);
	return rc;
}

/* ---- the command line -------------------------------------------------- */

enum {
	OPT_MSGS = 256,
	OPT_FRAMING,
	OPT_SEED,
	OPT_MIN,
	OPT_MAX,
	OPT_NEWLINES,
	OPT_PAUSE_AT,
	OPT_GO,
	OPT_PORT,
	OPT_DIR,
	OPT_LAG,
	OPT_RCVBUF,
	OPT_RATE,
	OPT_READ_RATE,
	OPT_RAW,
	OPT_EXACTLY_ONCE,
	OPT_AT_LEAST_ONCE,
	OPT_MAX_MISSING,
	OPT_MAX_PARTIAL,
	OPT_TAIL_OK,
	OPT_STREAMS,
	OPT_RUNS,
	OPT_ORDERED,
	OPT_EARLY_FIN_OK,
	OPT_FROM,
	OPT_TEXT,
};

static const struct option longopts[] = {
	{ "bind",		required_argument, NULL, 'b' },
	{ "conns",		required_argument, NULL, 'n' },
	{ "msgs",		required_argument, NULL, OPT_MSGS },
	{ "framing",		required_argument, NULL, OPT_FRAMING },
	{ "seed",		required_argument, NULL, OPT_SEED },
	{ "min",		required_argument, NULL, OPT_MIN },
	{ "max",		required_argument, NULL, OPT_MAX },
	{ "newlines",		no_argument,	   NULL, OPT_NEWLINES },
	{ "pause-at",		required_argument, NULL, OPT_PAUSE_AT },
	{ "go",			required_argument, NULL, OPT_GO },
	{ "timeout",		required_argument, NULL, 't' },
	{ "port",		required_argument, NULL, OPT_PORT },
	{ "dir",		required_argument, NULL, OPT_DIR },
	{ "lag",		required_argument, NULL, OPT_LAG },
	{ "rcvbuf",		required_argument, NULL, OPT_RCVBUF },
	{ "rate",		required_argument, NULL, OPT_RATE },
	{ "read-rate",		required_argument, NULL, OPT_READ_RATE },
	{ "raw",		no_argument,	   NULL, OPT_RAW },
	{ "exactly-once",	no_argument,	   NULL, OPT_EXACTLY_ONCE },
	{ "at-least-once",	no_argument,	   NULL, OPT_AT_LEAST_ONCE },
	{ "max-missing",	required_argument, NULL, OPT_MAX_MISSING },
	{ "max-partial",	required_argument, NULL, OPT_MAX_PARTIAL },
	{ "tail-ok",		no_argument,	   NULL, OPT_TAIL_OK },
	{ "streams",		no_argument,	   NULL, OPT_STREAMS },
	{ "runs",		no_argument,	   NULL, OPT_RUNS },
	{ "ordered",		no_argument,	   NULL, OPT_ORDERED },
	{ "early-fin-ok",	no_argument,	   NULL, OPT_EARLY_FIN_OK },
	{ "from",		required_argument, NULL, OPT_FROM },
	{ "text",		required_argument, NULL, OPT_TEXT },
	{ "verbose",		no_argument,	   NULL, 'v' },
	{ "help",		no_argument,	   NULL, 'h' },
	{ NULL,			0,		   NULL, 0 },
};

static int parse_args(int argc, char **argv, char ***posp)
{
	const char *m;
	int c, npos;
	char **pos;

	if (argc < 2)
		usage_error("missing mode: send, collect or verify");
	m = argv[1];
	if (strcmp(m, "-h") == 0 || strcmp(m, "--help") == 0) {
		usage(stdout);
		exit(0);
	}
	if (strcmp(m, "send") == 0)
		o.mode = MODE_SEND;
	else if (strcmp(m, "dgram") == 0)
		o.mode = MODE_DGRAM;
	else if (strcmp(m, "dgram-collect") == 0)
		o.mode = MODE_DGRAM_COLLECT;
	else if (strcmp(m, "collect") == 0)
		o.mode = MODE_COLLECT;
	else if (strcmp(m, "verify") == 0)
		o.mode = MODE_VERIFY;
	else
		usage_error("unknown mode '%s'", m);

	o.seed = 1;
	o.min = 1;
	o.max = 16384;
	o.pause_at = -1;
	o.max_missing = -1;
	o.max_partial = -1;
	o.timeout = 120;
	argc--;
	argv++;
	while ((c = getopt_long(argc, argv, "b:n:t:vh", longopts, NULL)) !=
	    -1) {
		switch (c) {
		case 'b': o.bind_addr = optarg; break;
		case 'n':
			o.conns = (long)parse_size("--conns", optarg);
			o.conns_set = 1;
			break;
		case OPT_MSGS:
			o.msgs = (long)parse_size("--msgs", optarg);
			o.msgs_set = 1;
			break;
		case OPT_FRAMING:
			if (strcmp(optarg, "lf") == 0)
				o.framing = FRAMING_LF;
			else if (strcmp(optarg, "octet") == 0)
				o.framing = FRAMING_OCTET;
			else
				usage_error("--framing: lf or octet, not '%s'",
				    optarg);
			o.framing_set = 1;
			break;
		case OPT_SEED: o.seed = parse_size("--seed", optarg); break;
		case OPT_MIN: o.min = (size_t)parse_size("--min", optarg); break;
		case OPT_MAX: o.max = (size_t)parse_size("--max", optarg); break;
		case OPT_NEWLINES: o.newlines = 1; break;
		case OPT_PAUSE_AT:
			o.pause_at = (long)parse_size("--pause-at", optarg);
			break;
		case OPT_GO: o.go_file = optarg; break;
		case 't': o.timeout = parse_secs("--timeout", optarg); break;
		case OPT_PORT: {
			uint64_t p = parse_size("--port", optarg);

			if (p > 65535)
				usage_error("--port: bad port '%s'", optarg);
			o.bind_port = (int)p;
			break;
		}
		case OPT_DIR: o.dir = optarg; break;
		case OPT_RCVBUF: {
			uint64_t v = parse_size("--rcvbuf", optarg);

			if (v == 0 || v > 64 * 1024 * 1024)
				usage_error("--rcvbuf: 1 to 64M, not '%s'",
				    optarg);
			o.rcvbuf = (int)v;
			break;
		}
		case OPT_LAG: {
			uint64_t v = parse_size("--lag", optarg);

			if (v > LAG_MAX)
				usage_error("--lag: at most %lluM, not '%s'",
				    LAG_MAX / (1024 * 1024), optarg);
			o.lag = (size_t)v;
			break;
		}
		case OPT_RATE:
			if ((o.rate = (double)parse_size("--rate", optarg)) == 0)
				usage_error("--rate: at least 1, not '%s'",
				    optarg);
			break;
		case OPT_READ_RATE:
			if ((o.read_rate = (double)parse_size("--read-rate",
			    optarg)) == 0)
				usage_error("--read-rate: at least 1, not '%s'",
				    optarg);
			break;
		case OPT_RAW: o.raw = 1; break;
		case OPT_EXACTLY_ONCE:
			if (o.expect == EXPECT_AT_LEAST_ONCE)
				usage_error("--exactly-once or --at-least-once");
			o.expect = EXPECT_EXACTLY_ONCE;
			break;
		case OPT_AT_LEAST_ONCE:
			if (o.expect == EXPECT_EXACTLY_ONCE)
				usage_error("--exactly-once or --at-least-once");
			o.expect = EXPECT_AT_LEAST_ONCE;
			break;
		case OPT_MAX_MISSING:
			o.max_missing = (long)parse_size("--max-missing",
			    optarg);
			break;
		case OPT_MAX_PARTIAL:
			o.max_partial = (long)parse_size("--max-partial",
			    optarg);
			break;
		case OPT_TAIL_OK: o.tail_ok = 1; break;
		case OPT_STREAMS: o.streams = 1; break;
		case OPT_RUNS: o.runs = 1; break;
		case OPT_ORDERED: o.ordered = 1; break;
		case OPT_EARLY_FIN_OK: o.early_fin_ok = 1; break;
		case OPT_FROM: o.from = optarg; break;
		case OPT_TEXT: o.text = optarg; break;
		case 'v': o.verbose = 1; break;
		case 'h': usage(stdout); exit(0);
		default: usage_error("bad option");
		}
	}
	pos = argv + optind;
	npos = argc - optind;
	switch (o.mode) {
	case MODE_SEND:
		if (npos != 2)
			usage_error("send needs HOST PORT");
		o.host = pos[0];
		o.port = pos[1];
		if (!o.conns_set || o.conns < 1 || !o.msgs_set ||
		    !o.framing_set)
			usage_error("send needs --conns (1 or more), --msgs and"
			    " --framing");
		if (o.min < 1 || o.min > o.max || o.max > MAX_PAYLOAD)
			usage_error("--min/--max: 1 <= min <= max <= %d",
			    MAX_PAYLOAD);
		if (o.newlines && o.framing != FRAMING_OCTET)
			usage_error("--newlines needs --framing octet");
		if ((o.pause_at >= 0) != (o.go_file != NULL))
			usage_error("--pause-at and --go go together");
		break;
	case MODE_DGRAM:
		if (npos != 2)
			usage_error("dgram needs HOST PORT");
		o.host = pos[0];
		o.port = pos[1];
		if (!o.conns_set || o.conns < 1 || !o.msgs_set)
			usage_error("dgram needs --conns (1 or more) and --msgs");
		if (o.min < 1 || o.min > o.max || o.max > MAX_PAYLOAD)
			usage_error("--min/--max: 1 <= min <= max <= %d",
			    MAX_PAYLOAD);
		o.framing = FRAMING_NONE;
		break;
	case MODE_COLLECT:
	case MODE_DGRAM_COLLECT:
		if (npos != 0)
			usage_error("unexpected argument '%s'", pos[0]);
		if (o.dir == NULL)
			usage_error("collect needs --dir");
		break;
	case MODE_VERIFY:
		if (npos < 1)
			usage_error("verify needs FILE...");
		if (!o.conns_set || !o.msgs_set)
			usage_error("verify needs --conns and --msgs");
		if (o.runs && !o.raw)
			usage_error("--runs needs --raw");
		if (o.streams && !o.raw)
			usage_error("--streams needs --raw");
		if (o.conns > 0 && (uint64_t)o.msgs > (1ULL << 34) /
		    (uint64_t)o.conns)
			usage_error("--conns * --msgs: too many");
		break;
	}
	*posp = pos;
	return npos;
}

int main(int argc, char **argv)
{
	char **pos;
	int npos;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	/* never outlive the test script that started us */
	(void)prctl(PR_SET_PDEATHSIG, SIGTERM);
	t_start = now();
	crc_init();
	npos = parse_args(argc, argv, &pos);
	raise_nofile();
	switch (o.mode) {
	case MODE_SEND:
		return run_send();
	case MODE_DGRAM:
		return run_dgram();
	case MODE_COLLECT:
		return run_collect();
	case MODE_DGRAM_COLLECT:
		return run_dgram_collect();
	case MODE_VERIFY:
		return run_verify(npos, pos);
	}
	return 2;
}
