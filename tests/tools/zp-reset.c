/*
 * zp-reset.c - many flows in which one side resets while the other still
 * sends, to check that a relay delivers every byte the resetting side's
 * peer acknowledged.
 *
 *   zp-reset --connect PORT --upstream-port PORT --side client|upstream
 *            [--flows N] [--concurrency C] [--max-size BYTES] [--fixed]
 *            [--seed S] [--timeout SECONDS] [--quiet-survivor]
 *            [--read-delay SECONDS] [--report] [--survivor-reset SECONDS]
 *
 * zp-reset plays both ends: it listens on 127.0.0.1:--upstream-port (the
 * relay's upstream) and connects to 127.0.0.1:--connect (the relay, or the
 * upstream port itself for a run without one). Each flow:
 *
 *   - the client sends an 8-byte flow number first, so that the upstream end
 *     knows which flow it accepted;
 *   - the resetting side (--side) sends a random number of bytes (0 to
 *     --max-size) of a stream seeded by the flow number, waits until its
 *     kernel's send queue is empty (TIOCOUTQ 0: the peer's kernel has
 *     acknowledged every byte), waits 0-2 ms more, and closes with
 *     SO_LINGER {1, 0}: a reset;
 *   - the surviving side, meanwhile, sends as fast as it can (in most
 *     flows; quietly in some), and reads until EOF or an error, starting
 *     20-60 ms late, checking every byte against the stream.
 *
 * --fixed sends exactly --max-size bytes in every flow; --quiet-survivor
 * makes every survivor quiet; --read-delay keeps every survivor from
 * reading for that long after its flow started (its window fills);
 * without it, each starts 20-60 ms late.
 *
 * A flow is short when the survivor got fewer bytes than were sent to it,
 * corrupt when a byte differs, stuck when it does not end within
 * --timeout. Prints one summary line on stdout, one line per bad flow on
 * stderr; exit status 0 when every flow was whole, 1 otherwise, 2 for a
 * bad command line. With --report, short flows are expected: one line
 * "flow N got X of Y" per flow on stdout, and only corrupt or stuck flows
 * fail. --survivor-reset SECONDS makes the survivor send its FIN half
 * that long after its flow started and reset at that time, printing "flow N survivor reset, R bytes
 * read and Q queued of Y" (Q: what its kernel took and it did not read).
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

#define HDR		8
#define CHUNK		(64 * 1024)
#define JUNK_CAP	(16u << 20)	/* a survivor sends at most this */

enum end_state {
	E_IDLE = 0,	/* not connected yet, or not accepted yet */
	E_RUN,
	E_DONE,		/* closed */
};

struct end {
	int		 fd;
	enum end_state	 st;
	int		 resetter;
	/* sending */
	uint64_t	 to_send;	/* stream bytes still to send */
	uint64_t	 sent;
	uint64_t	 tx;		/* stream position */
	uint64_t	 junk;		/* survivor: bytes sent */
	int		 quiet;		/* survivor sends nothing */
	int		 shut;		/* survivor sent its FIN */
	int		 hdr_out;	/* client: header bytes sent */
	double		 reset_at;	/* resetter: when the queue emptied */
	int		 drained;	/* resetter: TIOCOUTQ reached 0 */
	/* receiving */
	uint64_t	 rx;		/* stream bytes checked */
	int		 readeof;
	int		 readerr;
};

struct flow {
	long		 id;
	uint64_t	 size;		/* bytes the resetter sends */
	double		 delay;		/* after TIOCOUTQ 0, seconds */
	double		 rdelay;	/* survivor reads only after this */
	double		 started;
	struct end	 c, u;
	int		 bad;
	int		 active;
};

static struct {
	int		 cport, uport;
	int		 side_client;	/* the client resets */
	long		 flows, conc;
	uint64_t	 max_size;
	uint64_t	 seed;
	double		 timeout;
	int		 fixed;
	int		 quiet_survivor;
	double		 read_delay;
	int		 report;
	double		 survivor_reset;	/* survivor resets then; 0: never */
} o = { 0, 0, 1, 2000, 32, 1 << 20, 1, 30, 0, 0, -1, 0, 0 };

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* Byte `pos` of flow `id`'s stream. */
static unsigned char
stream_byte(long id, uint64_t pos)
{
	return (unsigned char)(mix(o.seed * 1000003u + (uint64_t)id * 7919u +
	    (pos >> 3)) >> ((pos & 7) * 8));
}

static void
nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl == -1 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) == -1) {
		perror("zp-reset: fcntl");
		exit(1);
	}
}

static int
lo_addr(struct sockaddr_in *sin, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return 0;
}

static void
end_close(struct end *e, int reset)
{
	if (e->fd != -1) {
		if (reset) {
			struct linger l = { 1, 0 };

			(void)setsockopt(e->fd, SOL_SOCKET, SO_LINGER, &l,
			    sizeof(l));
		}
		close(e->fd);
	}
	e->fd = -1;
	e->st = E_DONE;
}

static void
flow_bad(struct flow *f, const char *what, uint64_t got)
{
	if (!f->bad)
		fprintf(stderr, "zp-reset: flow %ld %s: got %" PRIu64 " of %"
		    PRIu64 " bytes\n", f->id, what, got, f->size);
	f->bad = 1;
}

/* The surviving end read `n` bytes: check them against the stream. */
static void
survivor_got(struct flow *f, struct end *e, const unsigned char *b, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++, e->rx++) {
		if (e->rx >= f->size || b[i] != stream_byte(f->id, e->rx)) {
			flow_bad(f, e->rx >= f->size ? "too long" : "corrupt",
			    e->rx);
			return;
		}
	}
}

static void
end_read(struct flow *f, struct end *e)
{
	unsigned char	b[CHUNK];
	ssize_t		n;
	int		i;

	for (i = 0; i < 16; i++) {
		n = recv(e->fd, b, sizeof(b), 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n <= 0) {
			if (n == 0)
				e->readeof = 1;
			else
				e->readerr = errno;
			return;
		}
		if (!e->resetter)
			survivor_got(f, e, b, n);
	}
}

static void
end_write(struct flow *f, struct end *e, int client_end)
{
	unsigned char	b[CHUNK];
	size_t		len = 0, i;
	ssize_t		n;

	if (client_end && e->hdr_out < HDR) {
		uint64_t id = (uint64_t)f->id;

		memcpy(b, &id, HDR);
		len = HDR - e->hdr_out;
		memmove(b, b + e->hdr_out, len);
	} else if (e->resetter) {
		len = e->to_send > CHUNK ? CHUNK : e->to_send;
		for (i = 0; i < len; i++)
			b[i] = stream_byte(f->id, e->tx + i);
	} else {
		if (e->quiet || e->junk >= JUNK_CAP)
			return;
		len = CHUNK;
		memset(b, 'j', len);
	}
	if (len == 0)
		return;
	n = send(e->fd, b, len, MSG_NOSIGNAL);
	if (n <= 0) {
		if (n == -1 && (errno == EAGAIN || errno == EINTR))
			return;
		/* The survivor's sends fail once the relay is gone: fine. */
		if (e->resetter)
			flow_bad(f, "send failed", e->sent);
		e->quiet = 1;
		return;
	}
	if (client_end && e->hdr_out < HDR)
		e->hdr_out += n;
	else if (e->resetter) {
		e->to_send -= n;
		e->tx += n;
		e->sent += n;
	} else
		e->junk += n;
}

/* The end that may write now. */
static int
end_wants_write(const struct end *e, int client_end)
{
	if (e->st != E_RUN)
		return 0;
	if (client_end && e->hdr_out < HDR)
		return 1;
	if (e->resetter)
		return e->to_send > 0;
	return !e->quiet && e->junk < JUNK_CAP;
}

/* A survivor reads only after --read-delay; `t` is a recent now(). */
static int
end_may_read(const struct flow *f, const struct end *e, double t)
{
	return e->resetter || t >= f->started + f->rdelay;
}

static void
resetter_step(struct flow *f, struct end *e, int client_end, double t)
{
	int outq = 0;

	if (e->st != E_RUN || e->to_send > 0 || (client_end &&
	    e->hdr_out < HDR))
		return;
	if (!e->drained) {
		if (ioctl(e->fd, TIOCOUTQ, &outq) == -1 || outq > 0)
			return;
		e->drained = 1;
		e->reset_at = t + f->delay;
	}
	if (t >= e->reset_at)
		end_close(e, 1);
}

static struct flow	*flows;
static long		 next_flow, done_flows, bad_flows;

static void
flow_start(struct flow *f, long id)
{
	struct sockaddr_in	sin;
	int			fd, one = 1;

	memset(f, 0, sizeof(*f));
	f->id = id;
	f->c.fd = f->u.fd = -1;
	f->size = mix(o.seed ^ (id * 31337u)) % (o.max_size + 1);
	/* A quarter of the flows are small: resets early in a stream. */
	if (mix(id) % 4 == 0)
		f->size %= 65536;
	if (o.fixed)
		f->size = o.max_size;
	f->delay = (mix(id + 77) % 2001) / 1e6;
	/*
	 * Survivors start reading 20-60 ms late, so that what the relay holds
	 * for them is still queued when the other side resets: the case a
	 * relay loses by closing too early.
	 */
	if (o.read_delay >= 0)
		f->rdelay = o.read_delay;
	else
		f->rdelay = (20000 + mix(id + 11) % 40001) / 1e6;
	f->started = now();
	f->active = 1;
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) == -1) {
		perror("zp-reset: socket");
		exit(1);
	}
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	nonblock(fd);
	lo_addr(&sin, o.cport);
	if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
	    errno != EINPROGRESS) {
		perror("zp-reset: connect");
		exit(1);
	}
	f->c.fd = fd;
	f->c.st = E_RUN;
	f->c.resetter = o.side_client;
	f->u.resetter = !o.side_client;
	f->c.to_send = o.side_client ? f->size : 0;
	f->u.to_send = o.side_client ? 0 : f->size;
	/* One survivor in eight is quiet. */
	f->c.quiet = o.side_client ? 0 : o.quiet_survivor ||
	    mix(id + 5) % 8 == 0;
	f->u.quiet = o.side_client ? o.quiet_survivor || mix(id + 5) % 8 == 0 :
	    0;
}

static void
flow_check(struct flow *f, double t)
{
	struct end *s = o.side_client ? &f->u : &f->c;

	if (!f->active)
		return;
	/*
	 * --survivor-reset: the survivor resets in turn, unread bytes and
	 * all; say how many its kernel had taken (acknowledged).
	 */
	if (s->st == E_RUN && o.survivor_reset > 0 && !s->shut &&
	    t >= f->started + o.survivor_reset / 2) {
		(void)shutdown(s->fd, SHUT_WR);
		s->shut = 1;
		s->quiet = 1;
	}
	if (s->st == E_RUN && o.survivor_reset > 0 &&
	    t >= f->started + o.survivor_reset) {
		int	q = 0;

		(void)ioctl(s->fd, FIONREAD, &q);
		printf("flow %ld survivor reset, %" PRIu64 " bytes read and %d "
		    "queued of %" PRIu64 "\n", f->id, s->rx, q, f->size);
		end_close(s, 1);
	}
	/* The survivor is finished when it read to EOF or an error. */
	if (s->st == E_RUN && (s->readeof || s->readerr)) {
		if (o.report)
			printf("flow %ld got %" PRIu64 " of %" PRIu64 "\n",
			    f->id, s->rx, f->size);
		else if (s->rx != f->size)
			flow_bad(f, s->readerr ? "short (reset)" : "short",
			    s->rx);
		end_close(s, 0);
	}
	if (t - f->started > o.timeout) {
		flow_bad(f, "stuck", s->rx);
		end_close(&f->c, 1);
		end_close(&f->u, 1);
	}
	if (f->c.st == E_DONE && f->u.st == E_DONE) {
		f->active = 0;
		done_flows++;
		if (f->bad)
			bad_flows++;
	}
}

/* An accepted socket whose flow header is not all in yet. */
struct pending {
	int		 fd;
	unsigned char	 hdr[HDR];
	size_t		 have;
};

static struct pending	*pend;

/*
 * Read exactly the rest of the header (nothing of the stream behind it) and
 * hand the socket to its flow.
 */
static void
pend_read(struct pending *pd)
{
	ssize_t		n;
	uint64_t	id;
	long		i;

	n = recv(pd->fd, pd->hdr + pd->have, HDR - pd->have, 0);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		fprintf(stderr, "zp-reset: a connection ended before its "
		    "header\n");
		exit(1);
	}
	if ((pd->have += n) < HDR)
		return;
	memcpy(&id, pd->hdr, HDR);
	for (i = 0; i < o.conc; i++)
		if (flows[i].active && flows[i].id == (long)id &&
		    flows[i].u.fd == -1)
			break;
	if (i == o.conc) {
		fprintf(stderr, "zp-reset: header names no flow (%" PRIu64
		    ")\n", id);
		exit(1);
	}
	flows[i].u.fd = pd->fd;
	flows[i].u.st = E_RUN;
	pd->fd = -1;
}

static void
usage(void)
{
	fprintf(stderr, "usage: zp-reset --connect PORT --upstream-port PORT "
	    "--side client|upstream [--flows N] [--concurrency C] "
	    "[--max-size BYTES] [--fixed] [--seed S] [--timeout SECONDS] "
	    "[--quiet-survivor] [--read-delay SECONDS] [--report] "
	    "[--survivor-reset SECONDS]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{ "connect", required_argument, NULL, 'c' },
		{ "upstream-port", required_argument, NULL, 'u' },
		{ "side", required_argument, NULL, 's' },
		{ "flows", required_argument, NULL, 'n' },
		{ "concurrency", required_argument, NULL, 'C' },
		{ "max-size", required_argument, NULL, 'm' },
		{ "seed", required_argument, NULL, 'S' },
		{ "timeout", required_argument, NULL, 't' },
		{ "fixed", no_argument, NULL, 'F' },
		{ "quiet-survivor", no_argument, NULL, 'Q' },
		{ "read-delay", required_argument, NULL, 'D' },
		{ "report", no_argument, NULL, 'R' },
		{ "survivor-reset", required_argument, NULL, 'X' },
		{ NULL, 0, NULL, 0 }
	};
	struct sockaddr_in	 sin;
	struct pollfd		*pfd;
	struct flow		**owner;
	struct rlimit		 rl;
	int			 lfd, ch, one = 1;
	uint64_t		 total = 0;
	long			 i;
	double			 t0;

	while ((ch = getopt_long(argc, argv, "", lopts, NULL)) != -1) {
		switch (ch) {
		case 'c': o.cport = atoi(optarg); break;
		case 'u': o.uport = atoi(optarg); break;
		case 's':
			if (strcmp(optarg, "client") == 0)
				o.side_client = 1;
			else if (strcmp(optarg, "upstream") == 0)
				o.side_client = 0;
			else
				usage();
			break;
		case 'n': o.flows = atol(optarg); break;
		case 'C': o.conc = atol(optarg); break;
		case 'm': o.max_size = strtoull(optarg, NULL, 10); break;
		case 'S': o.seed = strtoull(optarg, NULL, 10); break;
		case 't': o.timeout = atof(optarg); break;
		case 'F': o.fixed = 1; break;
		case 'Q': o.quiet_survivor = 1; break;
		case 'D': o.read_delay = atof(optarg); break;
		case 'R': o.report = 1; break;
		case 'X': o.survivor_reset = atof(optarg); break;
		default: usage();
		}
	}
	if (o.cport <= 0 || o.uport <= 0 || o.flows <= 0 || o.conc <= 0 ||
	    o.timeout <= 0)
		usage();
	if (o.conc > o.flows)
		o.conc = o.flows;
	signal(SIGPIPE, SIG_IGN);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}

	if ((lfd = socket(AF_INET, SOCK_STREAM, 0)) == -1) {
		perror("zp-reset: socket");
		return 1;
	}
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	lo_addr(&sin, o.uport);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    listen(lfd, 1024) == -1) {
		perror("zp-reset: listen");
		return 1;
	}
	nonblock(lfd);

	flows = calloc(o.conc, sizeof(*flows));
	pfd = calloc(2 * o.conc + 1, sizeof(*pfd));
	pend = calloc(o.conc, sizeof(*pend));
	owner = calloc(2 * o.conc + 1, sizeof(*owner));
	if (flows == NULL || pfd == NULL || owner == NULL ||
	    pend == NULL) {
		perror("zp-reset: calloc");
		return 1;
	}
	for (i = 0; i < o.conc; i++)
		pend[i].fd = -1;
	t0 = now();
	for (i = 0; i < o.conc; i++)
		flow_start(&flows[i], next_flow++);

	while (done_flows < o.flows) {
		int		 n = 0, waiting = 0, r, k;
		double		 t, tl = now();

		pfd[n].fd = lfd;
		pfd[n].events = POLLIN;
		owner[n++] = NULL;
		for (i = 0; i < o.conc; i++) {
			struct flow *f = &flows[i];

			if (!f->active)
				continue;
			if (f->c.st == E_RUN) {
				pfd[n].fd = f->c.fd;
				pfd[n].events = (end_may_read(f, &f->c, tl) ?
				    POLLIN : 0) |
				    (end_wants_write(&f->c, 1) ? POLLOUT : 0);
				/* POLLHUP comes unasked: leave it for later. */
				if (pfd[n].events != 0)
					owner[n++] = f;
			}
			if (f->u.st == E_RUN) {
				pfd[n].fd = f->u.fd;
				pfd[n].events = (end_may_read(f, &f->u, tl) ?
				    POLLIN : 0) |
				    (end_wants_write(&f->u, 0) ? POLLOUT : 0);
				/* POLLHUP comes unasked: leave it for later. */
				if (pfd[n].events != 0)
					owner[n++] = f;
			}
			if (!end_may_read(f, f->c.resetter ? &f->u : &f->c,
			    tl))
				waiting = 1;
			if ((f->c.resetter && f->c.st == E_RUN &&
			    f->c.to_send == 0) || (f->u.resetter &&
			    f->u.st == E_RUN && f->u.to_send == 0))
				waiting = 1;
		}
		for (i = 0; i < o.conc; i++)
			if (pend[i].fd != -1)
				waiting = 1;
		r = poll(pfd, n, waiting ? 2 : 50);
		if (r == -1 && errno != EINTR) {
			perror("zp-reset: poll");
			return 1;
		}
		t = now();
		if (r > 0 && (pfd[0].revents & POLLIN)) {
			int fd;

			while ((fd = accept(lfd, NULL, NULL)) != -1) {
				for (i = 0; i < o.conc; i++)
					if (pend[i].fd == -1)
						break;
				if (i == o.conc) {
					fprintf(stderr, "zp-reset: unexpected "
					    "connection\n");
					return 1;
				}
				(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY,
				    &one, sizeof(one));
				nonblock(fd);
				pend[i].fd = fd;
				pend[i].have = 0;
			}
		}
		/* An accepted socket joins its flow once its header is in. */
		for (i = 0; i < o.conc; i++)
			if (pend[i].fd != -1)
				pend_read(&pend[i]);
		for (k = 1; k < n; k++) {
			struct flow	*f = owner[k];
			struct end	*e;
			int		 client_end;

			if (pfd[k].revents == 0)
				continue;
			client_end = pfd[k].fd == f->c.fd;
			e = client_end ? &f->c : &f->u;
			if (e->st != E_RUN)
				continue;
			if ((pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) &&
			    end_may_read(f, e, t))
				end_read(f, e);
			if (e->st == E_RUN && (pfd[k].revents & POLLOUT))
				end_write(f, e, client_end);
		}
		for (i = 0; i < o.conc; i++) {
			struct flow *f = &flows[i];

			if (!f->active)
				continue;
			if (f->c.resetter)
				resetter_step(f, &f->c, 1, t);
			else
				resetter_step(f, &f->u, 0, t);
			flow_check(f, t);
			if (!f->active) {
				total += f->size;
				if (next_flow < o.flows)
					flow_start(f, next_flow++);
			}
		}
	}
	printf("flows %ld short %ld bytes %" PRIu64 " seconds %.1f\n",
	    done_flows, bad_flows, total, now() - t0);
	close(lfd);
	free(flows);
	free(pend);
	free(pfd);
	free(owner);
	return bad_flows == 0 ? 0 : 1;
}
