/*
 * zp-chaos.c - the chaos soak's two ends and its judge (issue 10).
 *
 *   zp-chaos serve --port P --results FILE [--timeout SECONDS]
 *   zp-chaos drive --connect PORT --results FILE [--concurrency N]
 *                  [--seconds S] [--seed N] [--first ID] [--flows N]
 *                  [--timeout SECONDS]
 *   zp-chaos check --client FILE --upstream FILE [--cut FROM_MS,TO_MS]...
 *                  [--direct]
 *   zp-chaos plan --seed N --first ID [--flows N]
 *
 * drive keeps --concurrency flows running against 127.0.0.1:--connect (the
 * relay) for --seconds, then lets the running ones finish. serve is the
 * relay's upstream on 127.0.0.1:--port. Each flow is planned by
 * plan_make() from (seed, flow id) alone: its kind, the size of each
 * direction, cut points, rounds, hold time. The client's first 20 bytes
 * (magic, id, seed) tell the upstream which flow it accepted, so that both
 * ends play the same plan. Every payload byte is a pseudo-random function
 * of (seed, id, direction, position): each end checks every byte it
 * receives on arrival (a wrong byte, or a byte past what the other end
 * sends, is "corrupt"), and keeps a SHA-256 of what it sent and of what it
 * received.
 *
 * Each end appends one line per flow to its --results file, with a single
 * write(2) on an O_APPEND descriptor, so that a SIGKILL of serve loses only
 * the lines of the flows it was running:
 *
 *   c ID KIND START_MS END_MS USZ DSZ SENT SHA GOT SHA HOW ERR   (drive)
 *   u ID KIND USZ DSZ SENT SHA GOT SHA HOW ERR                   (serve)
 *
 * SENT/GOT are payload bytes, START/END wall-clock milliseconds, HOW is eof
 * (read to EOF), reset (the peer reset us), rst (we reset, as planned),
 * hold (never-reads: closed at the end of its hold), timeout; ERR is "-" or
 * what went wrong. check joins both files by flow id and applies the
 * per-kind assertions below; each --cut names a window (wall-clock ms)
 * during which the upstream was down; --direct says that drive ran straight
 * against serve, so that a survivor may see the reset itself.
 *
 * Kinds, with their weight in 100 and what check asserts when the upstream
 * wrote its line (FULL: both directions arrived whole, EOF on both ends,
 * byte counts equal the plan and SHA-256 of sender and receiver equal):
 *
 *   clean-up 10, clean-down 10, clean-both 10    FULL (each end sends,
 *                     shuts, reads to EOF; one direction may be empty)
 *   reqresp 10        FULL; 1-40 rounds of a 1-2048 byte request and a
 *                     1-4096 byte response, each waited for
 *   half-client 7     FULL; the client sends and shuts, the upstream
 *                     answers only after that EOF
 *   half-upstream 7   FULL; the reverse
 *   client-rst 7      the client sends everything, waits for TIOCOUTQ 0
 *                     (zproxy's kernel acknowledged it), waits 0-2 ms,
 *                     resets, while the upstream still sends: the upstream
 *                     gets EVERY byte the client sent (count and SHA-256)
 *                     and then EOF; the client's download is a prefix
 *   client-rst-mid 6  the client resets right after its cut point (0 to
 *                     its size), without waiting: each direction a prefix
 *   upstream-rst 7    the same from the upstream: the client gets every
 *                     byte (count and SHA-256) and then EOF
 *   upstream-rst-mid 6   each direction a prefix
 *   slow-read-client 4   FULL; the client reads 4 KiB per 50 ms, the
 *                     download is at most 256 KiB (3.2 s)
 *   slow-read-upstream 4 FULL; the same upstream-side, for the upload
 *   slow-write-client 4  FULL; the client writes 1 byte per 50 ms, at most
 *                     60 bytes (3 s)
 *   slow-write-upstream 4 FULL; the same upstream-side
 *   never-reads 4     the upstream never reads; it sends its download (at
 *                     most 64 KiB), waits for TIOCOUTQ 0 and resets 1-3 s
 *                     after accept, while the client's upload (256 KiB to
 *                     8 MiB) has stalled: the upload is cut (the upstream
 *                     read 0 bytes); the client gets every byte of the
 *                     download (count and SHA-256), then EOF
 *
 * Sizes of the bulk directions: 50% 0-4 KiB, 30% 4-256 KiB, 15% 256 KiB-2
 * MiB, 5% 2-8 MiB (uniform within each band), so most flows are small and
 * a flow carries about 0.45 MiB a direction on average.
 *
 * A flow without an upstream line was cut by the upstream's death: its
 * client end must overlap a --cut window, or have ended without an error
 * less than 15 s before one (the upstream outlives the client when it
 * still reads what the relay delivered, or survives the client's reset),
 * and must have seen an exact prefix (no corrupt byte). Flows that start
 * while the upstream is down and get nothing are counted as refused; a
 * slot whose flow got nothing pauses 250 ms before its next flow. Any other flow without its upstream line, a timeout, an
 * error or a failed assertion is a failure: one line per flow on stdout
 * ("not ok - flow ID KIND: ..."), the first 20, then the count.
 *
 * drive and serve exit 0 unless they could not run (1) or the command line
 * is bad (64); check exits 0 when every flow passed, 1 otherwise, and
 * prints one summary line per kind and a total.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <linux/sockios.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HDR		20		/* magic, id, seed */
#define MAGIC		0x5a504331u	/* "ZPC1" */
#define CHUNK		(64 * 1024)
#define TICK		0.050		/* slow kinds: one step per tick */
#define SLOW_READ	4096
#define MAX_ROUNDS	40
#define EXIT_USAGE	64

/* ---- SHA-256 (FIPS 180-4), small and plain -------------------------- */

struct sha256 {
	uint32_t	h[8];
	uint64_t	len;
	unsigned char	buf[64];
	size_t		nbuf;
};

static const uint32_t sha_k[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
	0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
	0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
	0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
	0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
	0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
	0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n)	(((x) >> (n)) | ((x) << (32 - (n))))

static void
sha_init(struct sha256 *s)
{
	static const uint32_t h0[8] = {
		0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
		0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
	};

	memcpy(s->h, h0, sizeof(h0));
	s->len = 0;
	s->nbuf = 0;
}

/*
 * Pure arithmetic on locals, checked against sha256sum: left out of the
 * sanitizers, which would make it the soak's bottleneck (4x slower).
 */
__attribute__((no_sanitize("address", "undefined")))
static void
sha_block(struct sha256 *s, const unsigned char *p)
{
	uint32_t w[64], a, b, c, d, e, f, g, h, t1, t2;
	int i;

	for (i = 0; i < 16; i++)
		w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
		    (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
	for (; i < 64; i++)
		w[i] = w[i - 16] + (ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^
		    (w[i - 15] >> 3)) + w[i - 7] + (ROR(w[i - 2], 17) ^
		    ROR(w[i - 2], 19) ^ (w[i - 2] >> 10));
	a = s->h[0]; b = s->h[1]; c = s->h[2]; d = s->h[3];
	e = s->h[4]; f = s->h[5]; g = s->h[6]; h = s->h[7];
	for (i = 0; i < 64; i++) {
		t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) +
		    ((e & f) ^ (~e & g)) + sha_k[i] + w[i];
		t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) +
		    ((a & b) ^ (a & c) ^ (b & c));
		h = g; g = f; f = e; e = d + t1;
		d = c; c = b; b = a; a = t1 + t2;
	}
	s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
	s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void
sha_update(struct sha256 *s, const unsigned char *p, size_t n)
{
	size_t k;

	s->len += n;
	if (s->nbuf > 0) {
		k = 64 - s->nbuf < n ? 64 - s->nbuf : n;
		memcpy(s->buf + s->nbuf, p, k);
		s->nbuf += k;
		p += k;
		n -= k;
		if (s->nbuf < 64)
			return;
		sha_block(s, s->buf);
		s->nbuf = 0;
	}
	for (; n >= 64; p += 64, n -= 64)
		sha_block(s, p);
	memcpy(s->buf, p, n);
	s->nbuf = n;
}

/* The digest, as 64 hex digits and a NUL in `out`. */
static void
sha_hex(const struct sha256 *s0, char *out)
{
	struct sha256	s = *s0;
	unsigned char	pad[72] = { 0x80 };
	uint64_t	bits = s.len * 8;
	size_t		n = (s.nbuf < 56 ? 56 : 120) - s.nbuf;
	int		i;

	for (i = 0; i < 8; i++)
		pad[n + i] = (unsigned char)(bits >> (56 - 8 * i));
	sha_update(&s, pad, n + 8);
	for (i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x",
		    (unsigned)(s.h[i / 4] >> (24 - 8 * (i % 4))) & 0xff);
}

/* ---- plans ---------------------------------------------------------- */

enum kind {
	K_CLEAN_UP, K_CLEAN_DOWN, K_CLEAN_BOTH, K_REQRESP, K_HALF_CLIENT,
	K_HALF_UPSTREAM, K_CLIENT_RST, K_CLIENT_RST_MID, K_UPSTREAM_RST,
	K_UPSTREAM_RST_MID, K_SLOW_READ_CLIENT, K_SLOW_READ_UPSTREAM,
	K_SLOW_WRITE_CLIENT, K_SLOW_WRITE_UPSTREAM, K_NEVER_READS, K_NKINDS
};

static const struct {
	const char	*name;
	int		 weight;
} kinds[K_NKINDS] = {
	{ "clean-up", 10 }, { "clean-down", 10 }, { "clean-both", 10 },
	{ "reqresp", 10 }, { "half-client", 7 }, { "half-upstream", 7 },
	{ "client-rst", 7 }, { "client-rst-mid", 6 }, { "upstream-rst", 7 },
	{ "upstream-rst-mid", 6 }, { "slow-read-client", 4 },
	{ "slow-read-upstream", 4 }, { "slow-write-client", 4 },
	{ "slow-write-upstream", 4 }, { "never-reads", 4 },
};

struct plan {
	uint64_t	 seed, id;
	enum kind	 kind;
	uint64_t	 usz, dsz;	/* payload of each direction */
	uint64_t	 ucut, dcut;	/* a mid resetter stops here */
	int		 rounds;	/* reqresp */
	uint64_t	 q[MAX_ROUNDS + 1], r[MAX_ROUNDS + 1]; /* cumulative */
	double		 rst_delay;	/* after TIOCOUTQ 0 */
	double		 hold;		/* never-reads */
};

static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The n-th random number of flow p. */
static uint64_t
prand(const struct plan *p, int n)
{
	return mix(mix(p->seed ^ mix(p->id)) + (uint64_t)n * 0x632be59bd9b4e019ULL);
}

static uint64_t
bulk_size(uint64_t r)
{
	uint64_t band = r % 100, x = r / 100;

	if (band < 50)
		return x % 4097;
	if (band < 80)
		return 4096 + x % (256 * 1024 - 4096 + 1);
	if (band < 95)
		return 256 * 1024 + x % (1792 * 1024 + 1);
	return 2048 * 1024 + x % (6144 * 1024 + 1);
}

static void
plan_make(struct plan *p, uint64_t seed, uint64_t id)
{
	int w, i;

	memset(p, 0, sizeof(*p));
	p->seed = seed;
	p->id = id;
	w = (int)(prand(p, 0) % 100);
	for (i = 0; i < K_NKINDS - 1 && w >= kinds[i].weight; i++)
		w -= kinds[i].weight;
	p->kind = (enum kind)i;
	p->usz = bulk_size(prand(p, 1));
	p->dsz = bulk_size(prand(p, 2));
	p->rst_delay = (prand(p, 5) % 2001) / 1e6;
	switch (p->kind) {
	case K_CLEAN_UP:
		p->dsz = 0;
		break;
	case K_CLEAN_DOWN:
		p->usz = 0;
		break;
	case K_REQRESP:
		p->rounds = 1 + (int)(prand(p, 6) % MAX_ROUNDS);
		for (i = 0; i < p->rounds; i++) {
			p->q[i + 1] = p->q[i] + 1 + prand(p, 100 + i) % 2048;
			p->r[i + 1] = p->r[i] + 1 + prand(p, 200 + i) % 4096;
		}
		p->usz = p->q[p->rounds];
		p->dsz = p->r[p->rounds];
		break;
	case K_CLIENT_RST_MID:
		p->ucut = prand(p, 3) % (p->usz + 1);
		break;
	case K_UPSTREAM_RST_MID:
		p->dcut = prand(p, 4) % (p->dsz + 1);
		break;
	case K_SLOW_READ_CLIENT:
		p->dsz %= 256 * 1024 + 1;
		p->usz %= 4097;
		break;
	case K_SLOW_READ_UPSTREAM:
		p->usz %= 256 * 1024 + 1;
		p->dsz %= 4097;
		break;
	case K_SLOW_WRITE_CLIENT:
		p->usz %= 61;
		p->dsz %= 64 * 1024 + 1;
		break;
	case K_SLOW_WRITE_UPSTREAM:
		p->dsz %= 61;
		p->usz %= 64 * 1024 + 1;
		break;
	case K_NEVER_READS:
		p->usz = 256 * 1024 + prand(p, 3) % (7936 * 1024 + 1);
		p->dsz %= 64 * 1024 + 1;
		p->hold = 1 + (prand(p, 4) % 2001) / 1e3;
		break;
	default:
		break;
	}
}

static int
kind_byname(const char *s)
{
	int i;

	for (i = 0; i < K_NKINDS; i++)
		if (strcmp(kinds[i].name, s) == 0)
			return i;
	return -1;
}

/* Payload bytes [pos, pos + n) of a direction (key) into b. */
static void
gen(uint64_t key, uint64_t pos, unsigned char *b, size_t n)
{
	uint64_t	w;
	size_t		i = 0;

	while (i < n && ((pos + i) & 7) != 0) {
		w = mix(key + ((pos + i) >> 3));
		b[i] = (unsigned char)(w >> (((pos + i) & 7) * 8));
		i++;
	}
	for (; i + 8 <= n; i += 8) {
		w = mix(key + ((pos + i) >> 3));
		memcpy(b + i, &w, 8);	/* little-endian: byte k is w >> 8k */
	}
	for (; i < n; i++) {
		w = mix(key + ((pos + i) >> 3));
		b[i] = (unsigned char)(w >> (((pos + i) & 7) * 8));
	}
}

static uint64_t
dir_key(const struct plan *p, int up)
{
	return mix(p->seed * 0x100000001b3ULL ^ mix(p->id * 2 + (up ? 1 : 0)));
}

/* ---- ends ----------------------------------------------------------- */

enum how { H_RUN, H_EOF, H_RESET, H_RST, H_HOLD, H_TIMEOUT, H_ERROR };
static const char *hows[] = { "run", "eof", "reset", "rst", "hold",
    "timeout", "error" };

enum rst { R_NONE, R_ACKED, R_NOW };

struct end {
	int		 fd;
	int		 client;
	int		 planned;	/* upstream: header read */
	struct plan	 p;
	unsigned char	 hdr[HDR];
	size_t		 hdr_done;
	double		 t_start, t_next_read, t_next_write, t_reset;
	double		 deadline;
	double		 start_ms;	/* wall clock */
	uint64_t	 tx_key, rx_key;
	uint64_t	 tx_total, tx_pos;
	uint64_t	 rx_max, rx_pos;
	struct sha256	 tx_sha, rx_sha;
	/* behaviour */
	int		 reads;		/* 0: never reads */
	int		 slow_read, slow_write;
	int		 after_eof;	/* sends only after EOF */
	enum rst	 rst;
	int		 hold;
	int		 drained;	/* TIOCOUTQ was 0 */
	/* state */
	int		 shut, rd_eof, rd_err, tx_err;
	enum how	 how;
	char		 err[96];
};

static struct {
	int		 port;
	const char	*results;
	int		 rfd;
	long		 conc;
	double		 seconds;
	uint64_t	 seed;
	uint64_t	 first;
	long		 flows;
	double		 timeout;
} o = { 0, NULL, -1, 300, 60, 1, 0, -1, 60 };

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void
die(const char *what)
{
	fprintf(stderr, "zp-chaos: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void
lo_addr(struct sockaddr_in *sin, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* Give end e its part of its plan's kind. */
static void
end_setup(struct end *e)
{
	const struct plan *p = &e->p;
	int c = e->client;

	e->tx_key = dir_key(p, c);
	e->rx_key = dir_key(p, !c);
	e->tx_total = c ? p->usz : p->dsz;
	e->rx_max = c ? p->dsz : p->usz;
	e->reads = 1;
	sha_init(&e->tx_sha);
	sha_init(&e->rx_sha);
	switch (p->kind) {
	case K_HALF_CLIENT:
		e->after_eof = !c;
		break;
	case K_HALF_UPSTREAM:
		e->after_eof = c;
		break;
	case K_CLIENT_RST:
		if (c)
			e->rst = R_ACKED;
		break;
	case K_CLIENT_RST_MID:
		if (c) {
			e->rst = R_NOW;
			e->tx_total = p->ucut;
		}
		break;
	case K_UPSTREAM_RST:
		if (!c)
			e->rst = R_ACKED;
		break;
	case K_UPSTREAM_RST_MID:
		if (!c) {
			e->rst = R_NOW;
			e->tx_total = p->dcut;
		}
		break;
	case K_SLOW_READ_CLIENT:
		e->slow_read = c;
		break;
	case K_SLOW_READ_UPSTREAM:
		e->slow_read = !c;
		break;
	case K_SLOW_WRITE_CLIENT:
		e->slow_write = c;
		break;
	case K_SLOW_WRITE_UPSTREAM:
		e->slow_write = !c;
		break;
	case K_NEVER_READS:
		if (!c) {
			e->reads = 0;
			e->hold = 1;
		}
		break;
	default:
		break;
	}
}

/* How far end e may have sent by now: the whole stream, or, in reqresp,
 * the requests (responses) that what it received so far allows. */
static uint64_t
tx_limit(const struct end *e)
{
	const struct plan *p = &e->p;
	int i;

	if (p->kind != K_REQRESP)
		return e->tx_total;
	if (e->client) {
		/* request i once responses 0..i-1 are in */
		for (i = 0; i < p->rounds && p->r[i] <= e->rx_pos; i++)
			;
		return p->q[i];
	}
	for (i = 0; i < p->rounds && p->q[i + 1] <= e->rx_pos; i++)
		;
	return p->r[i];
}

static int
end_wants_write(const struct end *e, double t)
{
	if (e->fd == -1 || e->how != H_RUN || e->tx_err)
		return 0;
	if (e->client && e->hdr_done < HDR)
		return 1;
	if (e->after_eof && !e->rd_eof)
		return 0;
	if (e->slow_write && t < e->t_next_write)
		return 0;
	return e->tx_pos < tx_limit(e);
}

static int
end_wants_read(const struct end *e, double t)
{
	if (e->fd == -1 || e->how != H_RUN || e->rd_eof || e->rd_err)
		return 0;
	if (!e->client && !e->planned)
		return 1;
	if (!e->reads)
		return 0;
	return !e->slow_read || t >= e->t_next_read;
}

static void
end_fail(struct end *e, const char *fmt, uint64_t v, int err)
{
	if (e->err[0] == '\0') {
		if (err)
			snprintf(e->err, sizeof(e->err), "%s@%" PRIu64 ":%s",
			    fmt, v, strerror(err));
		else
			snprintf(e->err, sizeof(e->err), "%s@%" PRIu64, fmt, v);
		/* one token: no blanks */
		for (char *s = e->err; *s; s++)
			if (*s == ' ')
				*s = '_';
	}
}

/* Close e: with an RST when `reset`; write its result line. */
static void
end_close(struct end *e, enum how how, int reset)
{
	char	line[512], ts[65], rs[65];
	int	n;

	if (e->fd != -1) {
		if (reset) {
			struct linger l = { 1, 0 };

			(void)setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &l,
			    sizeof(l));
		}
		close(e->fd);
		e->fd = -1;
	}
	e->how = how;
	if (!e->client && !e->planned)
		return;		/* no header: no flow to report */
	sha_hex(&e->tx_sha, ts);
	sha_hex(&e->rx_sha, rs);
	if (e->client)
		n = snprintf(line, sizeof(line), "c %" PRIu64 " %s %.0f %.0f "
		    "%" PRIu64 " %" PRIu64 " %" PRIu64 " %s %" PRIu64 " %s %s "
		    "%s\n", e->p.id, kinds[e->p.kind].name, e->start_ms,
		    wall_ms(), e->p.usz, e->p.dsz, e->tx_pos, ts, e->rx_pos,
		    rs, hows[how], e->err[0] ? e->err : "-");
	else
		n = snprintf(line, sizeof(line), "u %" PRIu64 " %s %" PRIu64
		    " %" PRIu64 " %" PRIu64 " %s %" PRIu64 " %s %s %s\n",
		    e->p.id, kinds[e->p.kind].name, e->p.usz, e->p.dsz,
		    e->tx_pos, ts, e->rx_pos, rs, hows[how],
		    e->err[0] ? e->err : "-");
	if (write(o.rfd, line, n) != n)
		die("write results");
}

/* The upstream end read (part of) the header. */
static void
end_header(struct end *e, double t)
{
	ssize_t		n;
	uint32_t	magic;
	uint64_t	id, seed;

	n = recv(e->fd, e->hdr + e->hdr_done, HDR - e->hdr_done, 0);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		/* the client went away before its header (a connect of a
		 * cut flow): nothing to report */
		end_close(e, H_ERROR, 0);
		return;
	}
	if ((e->hdr_done += n) < HDR)
		return;
	memcpy(&magic, e->hdr, 4);
	memcpy(&id, e->hdr + 4, 8);
	memcpy(&seed, e->hdr + 12, 8);
	if (magic != MAGIC) {
		fprintf(stderr, "zp-chaos: serve: a connection without the "
		    "flow header\n");
		end_close(e, H_ERROR, 1);
		return;
	}
	plan_make(&e->p, seed, id);
	e->planned = 1;
	end_setup(e);
	e->t_start = t;
	/* the upstream's deadline is longer than the client's: the client
	 * gives up first and reports */
	e->deadline = t + o.timeout + 10;
}

static void
end_read(struct end *e, double t)
{
	unsigned char	b[CHUNK], x[CHUNK];
	size_t		want = e->slow_read ? SLOW_READ : sizeof(b);
	ssize_t		n;
	int		i;

	for (i = 0; i < 4; i++) {
		n = recv(e->fd, b, want, 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n == 0) {
			e->rd_eof = 1;
			return;
		}
		if (n == -1) {
			e->rd_err = errno;
			return;
		}
		if (e->rx_pos + n > e->rx_max) {
			end_fail(e, "too-long", e->rx_pos, 0);
			end_close(e, H_ERROR, 1);
			return;
		}
		gen(e->rx_key, e->rx_pos, x, n);
		if (memcmp(b, x, n) != 0) {
			size_t k;

			for (k = 0; b[k] == x[k]; k++)
				;
			end_fail(e, "corrupt", e->rx_pos + k, 0);
			end_close(e, H_ERROR, 1);
			return;
		}
		sha_update(&e->rx_sha, b, n);
		e->rx_pos += n;
		if (e->slow_read) {
			e->t_next_read = t + TICK;
			return;
		}
	}
}

static void
end_write(struct end *e, double t)
{
	unsigned char	b[CHUNK];
	uint64_t	lim;
	size_t		len;
	ssize_t		n;
	int		i;

	if (e->client && e->hdr_done < HDR) {
		uint32_t magic = MAGIC;

		memcpy(e->hdr, &magic, 4);
		memcpy(e->hdr + 4, &e->p.id, 8);
		memcpy(e->hdr + 12, &e->p.seed, 8);
		n = send(e->fd, e->hdr + e->hdr_done, HDR - e->hdr_done,
		    MSG_NOSIGNAL);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n == -1) {
			e->tx_err = errno;
			return;
		}
		e->hdr_done += n;
		return;
	}
	/* a few chunks a round: bulk flows must not starve the chatty ones */
	for (i = 0; i < 4; i++) {
		lim = tx_limit(e);
		if (e->tx_pos >= lim)
			return;
		len = lim - e->tx_pos > CHUNK ? CHUNK : lim - e->tx_pos;
		if (e->slow_write)
			len = 1;
		gen(e->tx_key, e->tx_pos, b, len);
		n = send(e->fd, b, len, MSG_NOSIGNAL);
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n == -1) {
			e->tx_err = errno;
			return;
		}
		sha_update(&e->tx_sha, b, n);
		e->tx_pos += n;
		if (e->slow_write) {
			e->t_next_write = t + TICK;
			return;
		}
	}
}

/* Has the connection of fd been reset (its state is CLOSE)? */
static int
tcp_closed(int fd)
{
	struct tcp_info	ti;
	socklen_t	len = sizeof(ti);

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
		return 1;
	return ti.tcpi_state == TCP_CLOSE;
}

/* What end e does next, when nothing polled for it: shut, reset, close. */
static void
end_step(struct end *e, double t)
{
	int outq;

	if (e->fd == -1 || e->how != H_RUN)
		return;
	if (!e->client && !e->planned) {
		/* no header ever came: drop it quietly */
		if (t >= e->deadline)
			end_close(e, H_ERROR, 1);
		return;
	}
	if (t >= e->deadline) {
		end_fail(e, "deadline", e->tx_pos, 0);
		end_close(e, H_TIMEOUT, 1);
		return;
	}
	if (e->client && e->hdr_done < HDR && !e->tx_err)
		return;
	/* reqresp after an early EOF: no answer will let it send on */
	if (e->rd_eof && !e->tx_err && e->tx_pos < e->tx_total &&
	    e->tx_pos >= tx_limit(e)) {
		end_fail(e, "stalled", e->tx_pos, 0);
		e->tx_err = EPIPE;
	}
	/* sending over: the whole stream, or an error */
	if (e->tx_pos >= e->tx_total || e->tx_err) {
		if (e->rst != R_NONE || e->hold) {
			if (e->rst == R_NOW) {
				end_close(e, H_RST, 1);
				return;
			}
			/*
			 * Reset first (a cut): after an RST, TIOCOUTQ keeps
			 * counting what was never acknowledged. An end that
			 * read EOF reads no more, and sees the RST only in
			 * the socket's state.
			 */
			if (e->rd_err || e->tx_err || tcp_closed(e->fd)) {
				end_close(e, H_RESET, 0);
				return;
			}
			if (!e->drained) {
				if (ioctl(e->fd, TIOCOUTQ, &outq) == -1 ||
				    outq > 0)
					return;
				e->drained = 1;
				e->t_reset = e->hold ? e->t_start + e->p.hold :
				    t + e->p.rst_delay;
			}
			if (t >= e->t_reset)
				end_close(e, e->hold ? H_HOLD : H_RST, 1);
			return;
		}
		if (!e->shut && !e->tx_err && (!e->after_eof || e->rd_eof)) {
			/* a FIN right after the last byte */
			if (shutdown(e->fd, SHUT_WR) == -1)
				e->tx_err = errno;
			e->shut = 1;
		}
	}
	if (e->rd_err) {
		/* a survivor or a victim of a cut: report what it got */
		end_close(e, H_RESET, 0);
		return;
	}
	if (e->rd_eof && (e->shut || e->tx_err)) {
		if (e->tx_err && e->err[0] == '\0' && !(e->p.kind ==
		    K_CLIENT_RST || e->p.kind == K_CLIENT_RST_MID ||
		    e->p.kind == K_UPSTREAM_RST || e->p.kind ==
		    K_UPSTREAM_RST_MID || e->p.kind == K_NEVER_READS))
			end_fail(e, "send", e->tx_pos, e->tx_err);
		end_close(e, H_EOF, 0);
	}
}

/* ---- the poll loop, shared by drive and serve ----------------------- */

static struct end	*ends;
static struct pollfd	*pfd;
static long		 nends;

static int
loop_once(int lfd, double t)
{
	long	i, n = 0;
	int	r, ms = 50;
	double	t2;

	if (lfd != -1) {
		pfd[n].fd = lfd;
		pfd[n++].events = POLLIN;
	}
	for (i = 0; i < nends; i++) {
		struct end *e = &ends[i];
		short ev = 0;

		if (e->fd == -1 || e->how != H_RUN) {
			pfd[n + i].fd = -1;
			continue;
		}
		if (end_wants_read(e, t))
			ev |= POLLIN;
		else if (e->reads && !e->rd_eof && !e->rd_err)
			ms = 5;		/* a slow reader's next tick */
		if (end_wants_write(e, t))
			ev |= POLLOUT;
		else if (e->slow_write || e->rst == R_ACKED || e->hold)
			ms = 5;
		pfd[n + i].fd = ev ? e->fd : -1;
		pfd[n + i].events = ev;
		pfd[n + i].revents = 0;
	}
	r = poll(pfd, n + nends, ms);
	if (r == -1 && errno != EINTR)
		die("poll");
	t2 = now();
	for (i = 0; i < nends && r > 0; i++) {
		struct end *e = &ends[i];
		short re = pfd[n + i].revents;

		if (pfd[n + i].fd == -1 || re == 0 || e->how != H_RUN)
			continue;
		if (!e->client && !e->planned) {
			end_header(e, t2);
			continue;
		}
		if ((re & (POLLIN | POLLHUP | POLLERR)) &&
		    end_wants_read(e, t2))
			end_read(e, t2);
		if (e->how == H_RUN && (re & (POLLOUT | POLLERR | POLLHUP)) &&
		    end_wants_write(e, t2))
			end_write(e, t2);
	}
	for (i = 0; i < nends; i++)
		end_step(&ends[i], t2);
	return lfd != -1 && r > 0 && (pfd[0].revents & POLLIN);
}

static void
raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void
open_results(void)
{
	if ((o.rfd = open(o.results, O_WRONLY | O_CREAT | O_APPEND |
	    O_CLOEXEC, 0644)) == -1) {
		fprintf(stderr, "zp-chaos: %s: %s\n", o.results,
		    strerror(errno));
		exit(1);
	}
}

static int
serve(void)
{
	struct sockaddr_in	sin;
	int			lfd, fd, one = 1;
	long			i, cap = 4096;

	open_results();
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) == -1)
		die("socket");
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	lo_addr(&sin, o.port);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    listen(lfd, 1024) == -1)
		die("listen");
	printf("listening %d\n", o.port);
	fflush(stdout);
	nends = 0;	/* the slots used so far */
	if ((ends = calloc(cap, sizeof(*ends))) == NULL ||
	    (pfd = calloc(cap + 1, sizeof(*pfd))) == NULL)
		die("calloc");
	for (i = 0; i < cap; i++) {
		ends[i].fd = -1;
		ends[i].how = H_EOF;
	}
	for (;;) {
		if (!loop_once(lfd, now()))
			continue;
		while ((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) != -1) {
			for (i = 0; i < cap && ends[i].how == H_RUN; i++)
				;
			if (i == cap) {
				fprintf(stderr, "zp-chaos: serve: more than "
				    "%ld connections\n", cap);
				close(fd);
				continue;
			}
			if (i == nends)
				nends++;
			memset(&ends[i], 0, sizeof(ends[i]));
			ends[i].fd = fd;
			ends[i].how = H_RUN;
			ends[i].deadline = now() + o.timeout + 10;
			(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof(one));
		}
	}
	return 0;
}

static void
flow_start(struct end *e, uint64_t id, double t)
{
	struct sockaddr_in	sin;
	int			fd, one = 1;

	memset(e, 0, sizeof(*e));
	e->client = 1;
	plan_make(&e->p, o.seed, id);
	end_setup(e);
	e->t_start = t;
	e->deadline = t + o.timeout;
	e->start_ms = wall_ms();
	e->how = H_RUN;
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) == -1)
		die("socket");
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	lo_addr(&sin, o.port);
	e->fd = fd;
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
	    errno != EINPROGRESS) {
		/* zproxy itself refused: a failure check reports */
		end_fail(e, "connect", 0, errno);
		end_close(e, H_ERROR, 0);
	}
}

static int
drive(void)
{
	uint64_t	next = o.first, limit;
	double		t0 = now(), t, *idle;
	long		i, running, started = 0;

	open_results();
	limit = o.flows < 0 ? UINT64_MAX : o.first + (uint64_t)o.flows;
	nends = o.conc;
	if ((ends = calloc(nends, sizeof(*ends))) == NULL ||
	    (pfd = calloc(nends + 1, sizeof(*pfd))) == NULL ||
	    (idle = calloc(nends, sizeof(*idle))) == NULL)
		die("calloc");
	for (i = 0; i < nends; i++) {
		ends[i].fd = -1;
		ends[i].how = H_EOF;
	}
	printf("seed %" PRIu64 " first %" PRIu64 " concurrency %ld seconds "
	    "%.0f\n", o.seed, o.first, o.conc, o.seconds);
	fflush(stdout);
	for (;;) {
		t = now();
		running = 0;
		for (i = 0; i < nends; i++) {
			if (ends[i].how == H_RUN) {
				running++;
				continue;
			}
			/*
			 * A flow that got nothing of its download before an
			 * EOF or a reset was refused (the upstream is down):
			 * its slot pauses, or 300 slots would spin through
			 * thousands of refusals a second.
			 */
			if (ends[i].how == H_RESET || ends[i].how == H_EOF) {
				if (ends[i].rx_pos == 0 && ends[i].rx_max > 0)
					idle[i] = t + 0.25;
				ends[i].how = H_ERROR;	/* looked at */
			}
			if (t < idle[i])
				continue;
			if (t - t0 < o.seconds && next < limit) {
				flow_start(&ends[i], next++, t);
				started++;
				running++;
			}
		}
		if (running == 0 && (t - t0 >= o.seconds || next >= limit))
			break;
		loop_once(-1, t);
	}
	free(idle);
	printf("flows %ld next %" PRIu64 " seconds %.1f\n", started, next,
	    now() - t0);
	return 0;
}

/* ---- check ---------------------------------------------------------- */

struct rec {
	int		 have;
	int		 kind;
	double		 start, end;
	uint64_t	 usz, dsz, sent, got;
	char		 ssha[65], gsha[65], how[16], err[96];
};

struct cut { double from, to; };

#define LAG	15000.0

static struct rec	*cr, *ur;
static int		 direct;	/* no relay: survivors see the RST */
static uint64_t		 rmin = UINT64_MAX, rmax;
static long		 nfail, kfail[K_NKINDS];

static void
bad(uint64_t id, int kind, const char *what)
{
	nfail++;
	if (kind < 0 || kfail[kind]++ < 3)
		printf("not ok - flow %" PRIu64 " %s: %s\n", id,
		    kind >= 0 ? kinds[kind].name : "?", what);
}

/* Read a results file; client (c) or upstream (u) lines. */
static struct rec *
load(const char *path, int client, uint64_t *n)
{
	FILE		*f;
	char		 line[1024], kname[64];
	struct rec	*v = NULL, r;
	uint64_t	 id, cap = 0;
	int		 k;

	if ((f = fopen(path, "r")) == NULL) {
		fprintf(stderr, "zp-chaos: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	*n = 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		memset(&r, 0, sizeof(r));
		if (client)
			k = sscanf(line, "c %" SCNu64 " %63s %lf %lf %" SCNu64
			    " %" SCNu64 " %" SCNu64 " %64s %" SCNu64
			    " %64s %15s %95s", &id, kname, &r.start, &r.end,
			    &r.usz, &r.dsz, &r.sent, r.ssha, &r.got, r.gsha,
			    r.how, r.err) == 12;
		else
			k = sscanf(line, "u %" SCNu64 " %63s %" SCNu64 " %"
			    SCNu64 " %" SCNu64 " %64s %" SCNu64 " %64s %15s "
			    "%95s", &id, kname, &r.usz, &r.dsz, &r.sent,
			    r.ssha, &r.got, r.gsha, r.how, r.err) == 10;
		if (!k || (r.kind = kind_byname(kname)) == -1) {
			fprintf(stderr, "zp-chaos: %s: bad line: %s", path,
			    line);
			exit(1);
		}
		if (id >= cap) {
			uint64_t nc = id + 1 > 2 * cap ? id + 1 : 2 * cap;

			if ((v = realloc(v, nc * sizeof(*v))) == NULL)
				die("realloc");
			memset(v + cap, 0, (nc - cap) * sizeof(*v));
			cap = nc;
		}
		r.have = 1;
		if (v[id].have) {
			char what[64];

			snprintf(what, sizeof(what), "two %s lines",
			    client ? "client" : "upstream");
			bad(id, r.kind, what);
		}
		v[id] = r;
		if (client && id < rmin)
			rmin = id;
		if (client && id > rmax)
			rmax = id;
	}
	fclose(f);
	*n = cap;
	return v;
}

/* How a survivor's read ended: EOF through a relay (it turns the reset
 * into a FIN after the last byte), EOF or the reset itself without one. */
static int
survivor_ok(const char *how)
{
	return strcmp(how, "eof") == 0 || (direct && strcmp(how, "reset") == 0);
}

enum verdict { V_FULL, V_PREFIX, V_CUT, V_REFUSED, V_BAD, V_NV };

static int
check(const char *cpath, const char *upath, const struct cut *cuts,
    int ncuts)
{
	static const char *vn[] = { "full", "prefix", "cut", "refused",
	    "failed" };
	long		 cnt[K_NKINDS][V_NV], tot[V_NV];
	uint64_t	 nc, nu, id, bytes = 0, fullbytes = 0;
	int		 k, v, j;
	char		 why[256];

	memset(cnt, 0, sizeof(cnt));
	memset(tot, 0, sizeof(tot));
	cr = load(cpath, 1, &nc);
	ur = load(upath, 0, &nu);
	for (id = 0; id < nu; id++)
		if (ur[id].have && (id >= nc || !cr[id].have))
			bad(id, ur[id].kind, "an upstream line, no client line");
	for (id = rmin; id < nc && id <= rmax; id++) {
		struct rec	*c = &cr[id], *u = id < nu ? &ur[id] : NULL;
		int		 full, ok = 1;

		if (!c->have)
			continue;
		if (u != NULL && !u->have)
			u = NULL;
		k = c->kind;
		why[0] = '\0';
#define NO(...)	do { if (ok) snprintf(why, sizeof(why), __VA_ARGS__); \
	ok = 0; } while (0)
		if (c->got > c->dsz)
			NO("the client got %" PRIu64 " of %" PRIu64, c->got,
			    c->dsz);
		if (strcmp(c->err, "-") != 0 && (strncmp(c->err, "corrupt", 7)
		    == 0 || strncmp(c->err, "too-long", 8) == 0))
			NO("client: %s", c->err);
		if (strcmp(c->how, "timeout") == 0)
			NO("the client timed out");
		if (u == NULL) {
			int in = 0;

			/*
			 * The upstream may outlive the client's end: it reads
			 * what the relay still holds after the client's last
			 * byte and its EOF (slowly, for a slow reader), or it
			 * survives the client's reset. A client that was done
			 * less than LAG ms before the cut, without an error,
			 * may have lost only the upstream's line.
			 */
			for (j = 0; j < ncuts; j++)
				if (c->start <= cuts[j].to + 100 &&
				    (c->end >= cuts[j].from - 100 ||
				    (c->end >= cuts[j].from - LAG &&
				    strcmp(c->err, "-") == 0)))
					in = 1;
			if (!in)
				NO("no upstream line, and no cut at the time "
				    "(%.0f-%.0f, how=%s err=%s)", c->start,
				    c->end, c->how, c->err);
			if (ok) {
				v = V_CUT;
				for (j = 0; j < ncuts; j++)
					if (c->start >= cuts[j].from - 100 &&
					    c->got == 0)
						v = V_REFUSED;
			} else
				v = V_BAD;
			bytes += c->got;
			goto count;
		}
		if (u->kind != k || u->usz != c->usz || u->dsz != c->dsz)
			NO("the ends disagree on the plan");
		if (strcmp(u->err, "-") != 0)
			NO("upstream: %s", u->err);
		if (strcmp(c->err, "-") != 0)
			NO("client: %s", c->err);
		if (c->got > u->sent)
			NO("the client got %" PRIu64 ", the upstream sent %"
			    PRIu64, c->got, u->sent);
		if (u->got > c->sent)
			NO("the upstream got %" PRIu64 ", the client sent %"
			    PRIu64, u->got, c->sent);
		full = 0;
		switch (k) {
		case K_CLIENT_RST:
			if (strcmp(c->how, "rst") != 0 || !survivor_ok(u->how))
				NO("how: client %s, upstream %s", c->how,
				    u->how);
			if (c->sent != c->usz || u->got != c->sent ||
			    strcmp(u->gsha, c->ssha) != 0)
				NO("reset after TIOCOUTQ 0: the client sent %"
				    PRIu64 ", the upstream got %" PRIu64
				    "%s", c->sent, u->got,
				    strcmp(u->gsha, c->ssha) ? " (sha differs)" :
				    "");
			full = 1;
			break;
		case K_UPSTREAM_RST:
		case K_NEVER_READS:
			if (strcmp(u->how, k == K_NEVER_READS ? "hold" : "rst")
			    != 0 || !survivor_ok(c->how))
				NO("how: client %s, upstream %s", c->how,
				    u->how);
			if (u->sent != u->dsz || c->got != u->sent ||
			    strcmp(c->gsha, u->ssha) != 0)
				NO("reset after TIOCOUTQ 0: the upstream sent %"
				    PRIu64 ", the client got %" PRIu64
				    "%s", u->sent, c->got,
				    strcmp(c->gsha, u->ssha) ? " (sha differs)" :
				    "");
			if (k == K_NEVER_READS && u->got != 0)
				NO("the upstream that never reads read %"
				    PRIu64, u->got);
			full = 1;
			break;
		case K_CLIENT_RST_MID:
			if (strcmp(c->how, "rst") != 0)
				NO("how: client %s", c->how);
			break;
		case K_UPSTREAM_RST_MID:
			if (strcmp(u->how, "rst") != 0)
				NO("how: upstream %s", u->how);
			break;
		default:
			if (strcmp(c->how, "eof") != 0 ||
			    strcmp(u->how, "eof") != 0)
				NO("how: client %s, upstream %s", c->how,
				    u->how);
			if (c->sent != c->usz || u->got != c->usz ||
			    strcmp(u->gsha, c->ssha) != 0)
				NO("up: %" PRIu64 " planned, %" PRIu64 " sent, %"
				    PRIu64 " received%s", c->usz, c->sent,
				    u->got, strcmp(u->gsha, c->ssha) ?
				    " (sha differs)" : "");
			if (u->sent != c->dsz || c->got != c->dsz ||
			    strcmp(c->gsha, u->ssha) != 0)
				NO("down: %" PRIu64 " planned, %" PRIu64
				    " sent, %" PRIu64 " received%s", c->dsz,
				    u->sent, c->got, strcmp(c->gsha, u->ssha) ?
				    " (sha differs)" : "");
			full = 2;
			break;
		}
#undef NO
		v = !ok ? V_BAD : full ? V_FULL : V_PREFIX;
		bytes += c->got + u->got;
		if (ok && full == 2)
			fullbytes += c->got + u->got;
		else if (ok && full == 1)
			fullbytes += k == K_CLIENT_RST ? u->got : c->got;
count:
		if (v == V_BAD) {
			snprintf(why + strlen(why), sizeof(why) - strlen(why),
			    " [client how=%s sent=%" PRIu64 " got=%" PRIu64
			    "]", c->how, c->sent, c->got);
			bad(id, k, why);
		}
		cnt[k][v]++;
		tot[v]++;
	}
	for (k = 0; k < K_NKINDS; k++) {
		printf("kind %-20s", kinds[k].name);
		for (v = 0; v < V_NV; v++)
			printf(" %s=%ld", vn[v], cnt[k][v]);
		printf("\n");
		if (cnt[k][V_FULL] + cnt[k][V_PREFIX] == 0) {
			printf("not ok - kind %s: no flow verified\n",
			    kinds[k].name);
			nfail++;
		}
	}
	printf("total flows=%ld", tot[V_FULL] + tot[V_PREFIX] + tot[V_CUT] +
	    tot[V_REFUSED] + tot[V_BAD]);
	for (v = 0; v < V_NV; v++)
		printf(" %s=%ld", vn[v], tot[v]);
	printf(" bytes-checked=%" PRIu64 " bytes-whole=%" PRIu64 "\n", bytes,
	    fullbytes);
	if (nfail > 0)
		printf("not ok - %ld failures in all (at most 3 a kind shown)\n",
		    nfail);
	return nfail == 0 ? 0 : 1;
}

/* ---- command line --------------------------------------------------- */

static void
usage(void)
{
	fprintf(stderr, "usage: zp-chaos serve --port P --results FILE "
	    "[--timeout S]\n"
	    "       zp-chaos drive --connect PORT --results FILE "
	    "[--concurrency N] [--seconds S] [--seed N] [--first ID] "
	    "[--flows N] [--timeout S]\n"
	    "       zp-chaos check --client FILE --upstream FILE "
	    "[--cut FROM_MS,TO_MS]... [--direct]\n"
	    "       zp-chaos plan --seed N --first ID [--flows N]\n");
	exit(EXIT_USAGE);
}

static double
num(const char *opt, const char *s, double lo, double hi)
{
	char	*end;
	double	 v;

	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "zp-chaos: --%s: bad value '%s'\n", opt, s);
		exit(EXIT_USAGE);
	}
	return v;
}

int
main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "connect", required_argument, NULL, 'p' },
		{ "results", required_argument, NULL, 'r' },
		{ "concurrency", required_argument, NULL, 'C' },
		{ "seconds", required_argument, NULL, 's' },
		{ "seed", required_argument, NULL, 'S' },
		{ "first", required_argument, NULL, 'f' },
		{ "flows", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 't' },
		{ "client", required_argument, NULL, 'c' },
		{ "upstream", required_argument, NULL, 'u' },
		{ "cut", required_argument, NULL, 'x' },
		{ "direct", no_argument, NULL, 'D' },
		{ NULL, 0, NULL, 0 }
	};
	const char	*cmd, *cpath = NULL, *upath = NULL;
	struct cut	 cuts[16];
	int		 ch, ncuts = 0;

	if (argc < 2)
		usage();
	cmd = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (ch) {
		case 'p': o.port = (int)num("port", optarg, 1, 65535); break;
		case 'r': o.results = optarg; break;
		case 'C':
			o.conc = (long)num("concurrency", optarg, 1, 4000);
			break;
		case 's': o.seconds = num("seconds", optarg, 0, 1e6); break;
		case 'S': o.seed = (uint64_t)num("seed", optarg, 0, 1e15); break;
		case 'f': o.first = (uint64_t)num("first", optarg, 0, 1e12); break;
		case 'n': o.flows = (long)num("flows", optarg, 1, 1e9); break;
		case 't': o.timeout = num("timeout", optarg, 1, 3600); break;
		case 'c': cpath = optarg; break;
		case 'D': direct = 1; break;
		case 'u': upath = optarg; break;
		case 'x':
			if (ncuts == 16 || sscanf(optarg, "%lf,%lf",
			    &cuts[ncuts].from, &cuts[ncuts].to) != 2) {
				fprintf(stderr, "zp-chaos: --cut: bad value "
				    "'%s'\n", optarg);
				exit(EXIT_USAGE);
			}
			ncuts++;
			break;
		default: usage();
		}
	}
	if (optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	raise_nofile();
	if (strcmp(cmd, "serve") == 0) {
		if (o.port == 0 || o.results == NULL)
			usage();
		return serve();
	}
	if (strcmp(cmd, "drive") == 0) {
		if (o.port == 0 || o.results == NULL)
			usage();
		return drive();
	}
	if (strcmp(cmd, "check") == 0) {
		if (cpath == NULL || upath == NULL)
			usage();
		return check(cpath, upath, cuts, ncuts);
	}
	if (strcmp(cmd, "plan") == 0) {
		struct plan	p;
		uint64_t	id, n = o.flows < 0 ? 1 : (uint64_t)o.flows;

		for (id = o.first; id < o.first + n; id++) {
			plan_make(&p, o.seed, id);
			printf("flow %" PRIu64 " %s up=%" PRIu64 " down=%" PRIu64
			    " ucut=%" PRIu64 " dcut=%" PRIu64 " rounds=%d "
			    "hold=%.3f\n", id, kinds[p.kind].name, p.usz, p.dsz,
			    p.ucut, p.dcut, p.rounds, p.hold);
		}
		return 0;
	}
	fprintf(stderr, "zp-chaos: unknown command '%s'\n", cmd);
	usage();
	return EXIT_USAGE;
}
