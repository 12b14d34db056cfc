/*
 * tools.c - load generators and an echo server for contrib/bench/run.
 *
 * libc only; built by the run script with `cc -O2` into a temporary
 * directory. Every mode is bounded in time and stops by itself.
 *
 *   tools echo [MAXSEC] [CLOSE_AFTER]
 *       Echo server on 127.0.0.1, port chosen by the kernel. Prints
 *       "port N" on stdout as its first line, then echoes every byte it
 *       reads on every connection and holds connections open until the
 *       peer closes; with CLOSE_AFTER, it closes a connection itself once
 *       it echoed that many bytes on it (the server closes first). Exits
 *       after MAXSEC seconds (default 7200) or on SIGTERM/SIGINT.
 *
 *   tools pingpong PORT COUNT [SIZE] [WARMUP]
 *       One connection to 127.0.0.1:PORT (TCP_NODELAY); WARMUP untimed
 *       round trips (default 1000), then COUNT timed ones of SIZE bytes
 *       (default 64): write SIZE, read SIZE back. Prints
 *       "n=N p50_us=.. p90_us=.. p99_us=.. p999_us=.. mean_us=.. max_us=..".
 *
 *   tools shortconn PORT SECONDS [CONC] [SIZE] [WAITEOF]
 *       Keeps CONC (default 8) connections in flight for SECONDS: each one
 *       connects, sends SIZE (default 100) bytes, reads SIZE bytes back and
 *       closes, and is replaced by a new one. With WAITEOF 1, it reads on
 *       to the server's EOF before it closes (for an echo with CLOSE_AFTER:
 *       the server closes first, so the TIME_WAIT sockets are the server's
 *       and no ephemeral port is held for a minute). Prints
 *       "conns=N errors=E seconds=S rate=R" (completed exchanges per second).
 *
 *   tools rr PORT SECONDS [CONNS] [SIZE]
 *       CONNS (default 50) connections held open for SECONDS, each sending
 *       SIZE (default 100) bytes and reading SIZE back, again and again as
 *       fast as the answers come (an RPC, or syslog with acks). Prints
 *       "exchanges=N errors=E conns=C seconds=S rate=R"; exit 1 when a
 *       connection failed.
 *
 *   tools idle PORT COUNT [CONC] [MAXHOLD]
 *       Opens COUNT connections to 127.0.0.1:PORT, at most CONC (default 64)
 *       being set up at once; each one sends 1 byte and waits for it to come
 *       back, so that it is known to reach the server end to end. Prints
 *       "ready N errors=E seconds=S" once every connection is up (or after
 *       60 s with what it has), then holds them until SIGUSR1, SIGTERM,
 *       SIGINT or MAXHOLD seconds (default 300), closes them all and prints
 *       "closed N".
 *
 *   tools frames none|octet|lf SIZE BYTES
 *       Writes framed messages to stdout until at least BYTES are out,
 *       whole messages only: each message is SIZE printable bytes (no
 *       newline in them); octet puts "SIZE " in front of each (RFC 6587
 *       octet counting), lf puts a newline after each, none writes the
 *       bare messages back to back.
 *
 *   tools blast PORT SECONDS CONC FILE
 *       CONC connections to 127.0.0.1:PORT, each sending the content of
 *       FILE over and over for SECONDS (whole passes: a connection stops
 *       only at the end of the file, so a framed file ends on a message
 *       boundary), then shutdown(SHUT_WR) and waits for the server's EOF,
 *       so that the time covers delivery. Prints "bytes=N seconds=S
 *       conns=C errors=E gbps=G" (bytes sent, all of them delivered when
 *       errors=0; seconds from the first connect to the last EOF).
 *
 *   tools sink [MAXSEC]
 *       Discard server on 127.0.0.1, port chosen by the kernel: prints
 *       "port N", then reads and drops what every connection sends; at a
 *       connection's EOF it closes it and prints "closed BYTES" (what it
 *       read on it). Exits after MAXSEC seconds (default 7200) or on
 *       SIGTERM/SIGINT.
 *
 *   tools udpsend PORT RATE SECONDS SIZE SOURCES
 *       Sends RATE * SECONDS datagrams of SIZE bytes to 127.0.0.1:PORT at
 *       RATE per second, from SOURCES sockets bound to 127.0.0.2,
 *       127.0.0.3, ... (one device each), in turns of up to 64 datagrams
 *       per sendmmsg, paced every millisecond. Each datagram is an RFC 3164
 *       line, "<13>... zpb: zpbm SEQUENCE xxxx...", with the marker "zpbm"
 *       exactly once and no newline. Prints "sent=N seconds=S rate=R" (R:
 *       the rate it kept; below RATE when this sender could go no faster).
 *
 *   tools fansend PORT CONNS RATE SECONDS SIZE [lf|octet]
 *       The shippers of a fan-in: CONNS connections to 127.0.0.1:PORT
 *       (opened first, at most 256 being set up at once), each sending
 *       RATE messages a second for SECONDS, paced every millisecond and
 *       spread over the second (connection i starts i/CONNS of a
 *       message period late); one send(2) per message, as a shipper
 *       writes a line. Each message is an RFC 3164 line of SIZE bytes,
 *       newline included: "<13>... zpb: zpbm SEQUENCE TIME xxxx...\n",
 *       TIME the CLOCK_MONOTONIC microseconds when it was sent (the sink
 *       takes its latency from it). With octet, each message is framed
 *       as RFC 6587 octet counting instead, "LEN SP" and the line without
 *       its newline, SIZE bytes in all. What a full socket does not take
 *       waits, in order, and counts as late. Then shutdown(SHUT_WR) on
 *       each, and up to 30 s for the relay's EOF. Prints "sent=N conns=C
 *       seconds=S rate=R late=L errors=E" (L: messages that went out
 *       more than 100 ms after they were due: the sender, or the relay's
 *       backpressure, could not keep the pace).
 *
 *   tools count tcp|udp FILE [MAXSEC]
 *       Listens (tcp) or binds (udp, SO_RCVBUFFORCE 64 MiB) on 127.0.0.1,
 *       port chosen by the kernel; prints "port N", then counts the
 *       markers of udpsend in everything it receives, however it is
 *       framed (octet counting, lines, a datagram each, rewritten
 *       headers: a relay may reformat a message but keeps its text).
 *       Every 20 ms in which the count changed it writes "COUNT DROPS
 *       P50 P99 MAX SAMPLES" to FILE (DROPS: what the kernel dropped on
 *       its own UDP socket, from SO_RXQ_OVFL; 0 for tcp; P50, P99, MAX:
 *       microseconds from a fansend message's TIME to its arrival, over
 *       the SAMPLES messages whose marker and time came in one read; 0
 *       without any). Exits after MAXSEC seconds (default 7200) or on
 *       SIGTERM/SIGINT; SIGUSR2 starts the latencies afresh.
 *
 *   tools reap COMMAND [ARGS...]
 *       Runs COMMAND as a child subreaper (PR_SET_CHILD_SUBREAPER) in a
 *       process group of its own, so that processes it double-forks (redir
 *       does, per connection) stay below this one: their CPU time shows in
 *       /proc under this process while they run and in its cutime/cstime
 *       once reaped. SIGTERM/SIGINT go to the whole group; exits with
 *       COMMAND's status once every child is gone (SIGKILL to the group
 *       5 s after a stop signal).
 *
 * Exit status: 0 on success, 1 on an error (a line on stderr), 2 for a bad
 * command line.
 */
#define _GNU_SOURCE
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t	stop_flag;

static void
on_signal(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void
die(const char *what)
{
	fprintf(stderr, "tools: %s: %s\n", what, strerror(errno));
	exit(1);
}

static double
now(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long
now_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void
raise_nofile(void)
{
	struct rlimit	rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void
catch_signals(void)
{
	struct sigaction	sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

static long
num(const char *s, long lo, long hi)
{
	char	*end;
	long	 v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "tools: bad number: %s\n", s);
		exit(2);
	}
	return v;
}

static struct sockaddr_in
loopback(int port)
{
	struct sockaddr_in	sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

static void
nodelay(int fd)
{
	int	one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* ---- echo server ---------------------------------------------------- */

struct econn {
	char	*pend;		/* bytes read but not yet written back */
	size_t	 plen;
	size_t	 poff;
	size_t	 echoed;	/* bytes read so far */
};

static struct econn	*econns;
static size_t		 neconns;

static struct econn *
econn_get(int fd)
{
	if ((size_t)fd >= neconns) {
		size_t	n = neconns ? neconns : 1024;

		while (n <= (size_t)fd)
			n *= 2;
		econns = realloc(econns, n * sizeof *econns);
		if (econns == NULL)
			die("realloc");
		memset(econns + neconns, 0, (n - neconns) * sizeof *econns);
		neconns = n;
	}
	return &econns[fd];
}

static void
econn_close(int ep, int fd)
{
	struct econn	*c = econn_get(fd);

	epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
	close(fd);
	free(c->pend);
	memset(c, 0, sizeof *c);
}

static int
mode_echo(int argc, char **argv)
{
	static char		 buf[65536];
	struct sockaddr_in	 sin = loopback(0);
	struct epoll_event	 ev, evs[256];
	socklen_t		 len = sizeof sin;
	long			 maxsec = argc > 0 ? num(argv[0], 1, 86400) : 7200;
	long			 close_after = argc > 1 ?
				    num(argv[1], 1, 1L << 30) : 0;
	int			 lfd, ep, one = 1, i, n;

	raise_nofile();
	catch_signals();
	alarm((unsigned)maxsec);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd == -1)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) == -1)
		die("bind");
	if (listen(lfd, 4096) == -1)
		die("listen");
	if (getsockname(lfd, (struct sockaddr *)&sin, &len) == -1)
		die("getsockname");
	printf("port %d\n", ntohs(sin.sin_port));
	fflush(stdout);

	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);

	while (!stop_flag) {
		n = epoll_wait(ep, evs, 256, 1000);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			int		 fd = evs[i].data.fd;
			struct econn	*c;
			ssize_t		 r;

			if (fd == lfd) {
				int	cfd, k;

				for (k = 0; k < 256; k++) {
					cfd = accept4(lfd, NULL, NULL,
					    SOCK_NONBLOCK | SOCK_CLOEXEC);
					if (cfd == -1)
						break;
					nodelay(cfd);
					econn_get(cfd);
					ev.events = EPOLLIN;
					ev.data.fd = cfd;
					epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
				}
				continue;
			}
			c = econn_get(fd);
			if (c->pend != NULL) {
				/* Writing what is left; reading is paused. */
				r = send(fd, c->pend + c->poff, c->plen - c->poff,
				    MSG_NOSIGNAL);
				if (r == -1 && errno == EAGAIN)
					continue;
				if (r <= 0) {
					econn_close(ep, fd);
					continue;
				}
				c->poff += (size_t)r;
				if (c->poff == c->plen) {
					free(c->pend);
					c->pend = NULL;
					if (close_after > 0 &&
					    c->echoed >= (size_t)close_after) {
						econn_close(ep, fd);
						continue;
					}
					ev.events = EPOLLIN;
					ev.data.fd = fd;
					epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
				}
				continue;
			}
			r = recv(fd, buf, sizeof buf, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r <= 0) {
				econn_close(ep, fd);
				continue;
			}
			c->echoed += (size_t)r;
			{
				ssize_t	w = send(fd, buf, (size_t)r, MSG_NOSIGNAL);

				if (w == -1 && errno != EAGAIN) {
					econn_close(ep, fd);
					continue;
				}
				if (w < 0)
					w = 0;
				if (w == r && close_after > 0 &&
				    c->echoed >= (size_t)close_after) {
					/* All read and echoed: a FIN, no RST. */
					econn_close(ep, fd);
					continue;
				}
				if (w < r) {
					c->plen = (size_t)(r - w);
					c->poff = 0;
					c->pend = malloc(c->plen);
					if (c->pend == NULL)
						die("malloc");
					memcpy(c->pend, buf + w, c->plen);
					ev.events = EPOLLOUT;
					ev.data.fd = fd;
					epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
				}
			}
		}
	}
	return 0;
}

/* ---- ping-pong latency ------------------------------------------------ */

static int
cmp_double(const void *a, const void *b)
{
	double	x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void
xfer(int fd, char *buf, size_t size, int out)
{
	size_t	done = 0;
	ssize_t	r;

	while (done < size) {
		r = out ? send(fd, buf + done, size - done, MSG_NOSIGNAL) :
		    recv(fd, buf + done, size - done, 0);
		if (r == -1 && errno == EINTR && !stop_flag)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			die(out ? "send" : "recv (timeout, reset or eof)");
		}
		done += (size_t)r;
	}
}

static int
mode_pingpong(int argc, char **argv)
{
	struct sockaddr_in	 sin;
	struct timeval		 tv = { 5, 0 };
	long			 count, size, warm, i;
	double			*rtt, sum = 0, t0;
	char			*buf;
	int			 fd;

	if (argc < 2)
		return 2;
	sin = loopback((int)num(argv[0], 1, 65535));
	count = num(argv[1], 1, 10000000);
	size = argc > 2 ? num(argv[2], 1, 1 << 20) : 64;
	warm = argc > 3 ? num(argv[3], 0, 10000000) : 1000;
	catch_signals();
	alarm(120);
	if ((rtt = malloc(sizeof *rtt * (size_t)count)) == NULL ||
	    (buf = malloc((size_t)size)) == NULL)
		die("malloc");
	memset(buf, 'x', (size_t)size);
	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		die("socket");
	nodelay(fd);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&sin, sizeof sin) == -1)
		die("connect");
	for (i = 0; i < warm && !stop_flag; i++) {
		xfer(fd, buf, (size_t)size, 1);
		xfer(fd, buf, (size_t)size, 0);
	}
	for (i = 0; i < count && !stop_flag; i++) {
		t0 = now();
		xfer(fd, buf, (size_t)size, 1);
		xfer(fd, buf, (size_t)size, 0);
		rtt[i] = (now() - t0) * 1e6;
		sum += rtt[i];
	}
	if (stop_flag) {
		fprintf(stderr, "tools: pingpong: stopped after %ld\n", i);
		return 1;
	}
	close(fd);
	qsort(rtt, (size_t)count, sizeof *rtt, cmp_double);
#define PCT(p)	rtt[(size_t)((double)(count - 1) * (p))]
	printf("n=%ld p50_us=%.1f p90_us=%.1f p99_us=%.1f p999_us=%.1f "
	    "mean_us=%.1f max_us=%.1f\n", count, PCT(0.50), PCT(0.90),
	    PCT(0.99), PCT(0.999), sum / (double)count, rtt[count - 1]);
	return 0;
}

/* ---- short connections -------------------------------------------------- */

enum { S_IDLE, S_CONNECTING, S_SENDING, S_READING };

struct slot {
	int	fd;
	int	state;
	size_t	done;
	double	started;
};

static int
slot_start(int ep, struct slot *s, const struct sockaddr_in *sin, int idx)
{
	struct epoll_event	ev;

	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s->fd == -1)
		return -1;
	nodelay(s->fd);
	s->done = 0;
	s->started = now();
	if (connect(s->fd, (const struct sockaddr *)sin, sizeof *sin) == -1 &&
	    errno != EINPROGRESS) {
		close(s->fd);
		s->fd = -1;
		return -1;
	}
	s->state = S_CONNECTING;
	ev.events = EPOLLOUT;
	ev.data.u32 = (uint32_t)idx;
	epoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev);
	return 0;
}

static void
slot_end(struct slot *s)
{
	if (s->fd != -1)
		close(s->fd);	/* also drops it from the epoll set */
	s->fd = -1;
	s->state = S_IDLE;
}

/*
 * Send the rest of a slot's size bytes; once all are out, wait for the
 * answer (EPOLLIN). Returns 0 (all or some sent, or none yet), -1 on an
 * error.
 */
static int
slot_send(int ep, struct slot *s, uint32_t idx, const char *buf, size_t size)
{
	struct epoll_event	ev;
	ssize_t			r;

	r = send(s->fd, buf, size - s->done, MSG_NOSIGNAL);
	if (r == -1 && errno == EAGAIN)
		return 0;
	if (r <= 0)
		return -1;
	s->done += (size_t)r;
	if (s->done < size)
		return 0;
	s->done = 0;
	s->state = S_READING;
	ev.events = EPOLLIN;
	ev.data.u32 = idx;
	epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
	return 0;
}

static int
mode_shortconn(int argc, char **argv)
{
	static char		 buf[65536];
	struct sockaddr_in	 sin;
	struct epoll_event	 evs[64];
	struct slot		*slots;
	long			 secs, conc, size, conns = 0, errs = 0, inflight;
	int			 waiteof;
	double			 t0, tend, tnow;
	int			 ep, i, n;

	if (argc < 2)
		return 2;
	sin = loopback((int)num(argv[0], 1, 65535));
	secs = num(argv[1], 1, 3600);
	conc = argc > 2 ? num(argv[2], 1, 1024) : 8;
	size = argc > 3 ? num(argv[3], 1, 65536) : 100;
	waiteof = argc > 4 ? (int)num(argv[4], 0, 1) : 0;
	catch_signals();
	alarm((unsigned)(secs + 30));
	memset(buf, 'x', sizeof buf);
	if ((slots = calloc((size_t)conc, sizeof *slots)) == NULL)
		die("calloc");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	t0 = now();
	tend = t0 + (double)secs;
	for (i = 0; i < conc; i++) {
		slots[i].fd = -1;
		if (slot_start(ep, &slots[i], &sin, i) == -1)
			errs++;
	}
	for (;;) {
		tnow = now();
		inflight = 0;
		for (i = 0; i < conc; i++) {
			struct slot	*s = &slots[i];

			if (s->state != S_IDLE && tnow - s->started > 5) {
				slot_end(s);	/* a stuck exchange */
				errs++;
			}
			if (s->state == S_IDLE && tnow < tend && !stop_flag &&
			    slot_start(ep, s, &sin, i) == -1)
				errs++;
			if (s->state != S_IDLE)
				inflight++;
		}
		if (inflight == 0 && (tnow >= tend || stop_flag))
			break;
		n = epoll_wait(ep, evs, 64, 100);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < n; i++) {
			struct slot	*s = &slots[evs[i].data.u32];
			ssize_t		 r;
			int		 err = 0;
			socklen_t	 el = sizeof err;

			if (s->state == S_IDLE)
				continue;
			if (s->state == S_CONNECTING) {
				getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err) {
					slot_end(s);
					errs++;
					continue;
				}
				s->state = S_SENDING;
			}
			if (s->state == S_SENDING) {
				if (slot_send(ep, s, evs[i].data.u32, buf,
				    (size_t)size) == -1) {
					slot_end(s);
					errs++;
				}
				continue;
			}
			r = recv(s->fd, buf, sizeof buf, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r == 0 && waiteof && s->done == (size_t)size) {
				slot_end(s);	/* the server closed first */
				if (now() <= tend)
					conns++;
				continue;
			}
			if (r <= 0 || s->done + (size_t)r > (size_t)size) {
				slot_end(s);
				errs++;
				continue;
			}
			s->done += (size_t)r;
			if (s->done == (size_t)size && !waiteof) {
				slot_end(s);
				if (now() <= tend)
					conns++;
			}
		}
	}
	printf("conns=%ld errors=%ld seconds=%.3f rate=%.1f\n", conns, errs,
	    (double)secs, (double)conns / (double)secs);
	return errs > conns / 100 ? 1 : 0;
}

/* ---- request/response on many connections ------------------------------ */

/*
 * rr PORT SECS [CONNS [SIZE]]: CONNS connections (default 50), each
 * sending SIZE bytes (default 100) and reading SIZE back from an echo
 * server, then again, as fast as the answers come, for SECS seconds: an
 * RPC or syslog-with-acks workload. Prints exchanges, errors and the rate.
 */
static int
mode_rr(int argc, char **argv)
{
	static char		 buf[65536];
	struct sockaddr_in	 sin;
	struct epoll_event	 ev, evs[256];
	struct slot		*slots;
	long			 secs, conc, size, done = 0, errs = 0, open = 0;
	double			 t0, tend;
	ssize_t			 r;
	int			 ep, i, n, fd;

	if (argc < 2)
		return 2;
	sin = loopback((int)num(argv[0], 1, 65535));
	secs = num(argv[1], 1, 3600);
	conc = argc > 2 ? num(argv[2], 1, 4096) : 50;
	size = argc > 3 ? num(argv[3], 1, 65536) : 100;
	catch_signals();
	alarm((unsigned)(secs + 30));
	memset(buf, 'x', sizeof buf);
	if ((slots = calloc((size_t)conc, sizeof *slots)) == NULL)
		die("calloc");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	for (i = 0; i < conc; i++) {
		slots[i].fd = -1;
		if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
		    connect(fd, (struct sockaddr *)&sin, sizeof sin) == -1)
			die("rr: connect");
		nodelay(fd);
		if (fcntl(fd, F_SETFL, O_NONBLOCK) == -1)
			die("fcntl");
		slots[i].fd = fd;
		slots[i].state = S_SENDING;
		ev.events = EPOLLOUT;
		ev.data.u32 = (uint32_t)i;
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
		open++;
	}
	t0 = now();
	tend = t0 + (double)secs;
	while (open > 0 && now() < tend && !stop_flag) {
		n = epoll_wait(ep, evs, 256, 100);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < n; i++) {
			struct slot	*s = &slots[evs[i].data.u32];

			if (s->fd == -1)
				continue;
			if (s->state == S_SENDING) {
				if (slot_send(ep, s, evs[i].data.u32, buf,
				    (size_t)size) == -1)
					goto bad;
				continue;
			}
			r = recv(s->fd, buf, (size_t)size - s->done, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r <= 0)
				goto bad;
			s->done += (size_t)r;
			if (s->done < (size_t)size)
				continue;
			done++;
			s->done = 0;
			s->state = S_SENDING;
			/* The socket is writable: send at once, no wait. */
			r = send(s->fd, buf, (size_t)size, MSG_NOSIGNAL);
			if (r == size) {
				s->state = S_READING;
				continue;
			}
			if (r > 0)
				s->done = (size_t)r;
			else if (r == -1 && errno != EAGAIN)
				goto bad;
			ev.events = EPOLLOUT;
			ev.data.u32 = evs[i].data.u32;
			epoll_ctl(ep, EPOLL_CTL_MOD, s->fd, &ev);
			continue;
bad:
			slot_end(s);
			errs++;
			open--;
		}
	}
	printf("exchanges=%ld errors=%ld conns=%ld seconds=%.3f rate=%.1f\n",
	    done, errs, conc, (double)secs, (double)done / (double)secs);
	return errs > 0 ? 1 : 0;
}

/* ---- idle connections ------------------------------------------------- */

static int
mode_idle(int argc, char **argv)
{
	struct sockaddr_in	 sin;
	struct epoll_event	 ev, evs[256];
	int			*fds, ep, i, n;
	long			 count, conc, maxhold, opened = 0, ready = 0;
	long			 inflight = 0, errs = 0, closed = 0;
	double			 t0, deadline;
	char			 c = 'i';

	if (argc < 2)
		return 2;
	sin = loopback((int)num(argv[0], 1, 65535));
	count = num(argv[1], 1, 1000000);
	conc = argc > 2 ? num(argv[2], 1, 4096) : 64;
	maxhold = argc > 3 ? num(argv[3], 1, 3600) : 300;
	raise_nofile();
	catch_signals();
	if ((fds = malloc(sizeof *fds * (size_t)count)) == NULL)
		die("malloc");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	t0 = now();
	deadline = t0 + 60;
	while (ready + errs < count && now() < deadline && !stop_flag) {
		while (inflight < conc && opened < count) {
			int	fd = socket(AF_INET,
			    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

			if (fd == -1) {
				fprintf(stderr, "tools: idle: socket: %s\n",
				    strerror(errno));
				errs += count - opened;
				opened = count;
				break;
			}
			fds[opened] = fd;
			if (connect(fd, (struct sockaddr *)&sin, sizeof sin) ==
			    -1 && errno != EINPROGRESS) {
				close(fd);
				fds[opened++] = -1;
				errs++;
				continue;
			}
			ev.events = EPOLLOUT;
			ev.data.u64 = (uint64_t)opened;
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
			opened++;
			inflight++;
		}
		n = epoll_wait(ep, evs, 256, 100);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < n; i++) {
			long	k = (long)evs[i].data.u64;
			int	fd = fds[k], err = 0;
			socklen_t el = sizeof err;

			if (evs[i].events & EPOLLOUT) {
				getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err || send(fd, &c, 1, MSG_NOSIGNAL) != 1)
					goto failed;
				ev.events = EPOLLIN;
				ev.data.u64 = (uint64_t)k;
				epoll_ctl(ep, EPOLL_CTL_MOD, fd, &ev);
				continue;
			}
			if (recv(fd, &c, 1, 0) != 1)
				goto failed;
			/* Up end to end: keep it, stop watching it. */
			epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
			inflight--;
			ready++;
			continue;
failed:
			close(fd);
			fds[k] = -1;
			inflight--;
			errs++;
		}
	}
	printf("ready %ld errors=%ld seconds=%.3f\n", ready, errs, now() - t0);
	fflush(stdout);
	alarm((unsigned)maxhold);
	while (!stop_flag)
		usleep(50000);
	for (i = 0; i < opened; i++)
		if (fds[i] != -1) {
			close(fds[i]);
			closed++;
		}
	printf("closed %ld\n", closed);
	return ready == count ? 0 : 1;
}

/* ---- framed bulk: frames, blast, sink ------------------------------- */

static int
mode_frames(int argc, char **argv)
{
	static const char	 abc[] = "abcdefghijklmnopqrstuvwxyz0123456789";
	long			 size, bytes, out = 0, n, i;
	char			 hdr[32], *msg;
	int			 kind;

	if (argc < 3)
		return 2;
	if (strcmp(argv[0], "none") == 0)
		kind = 0;
	else if (strcmp(argv[0], "octet") == 0)
		kind = 1;
	else if (strcmp(argv[0], "lf") == 0)
		kind = 2;
	else
		return 2;
	size = num(argv[1], 1, 16 << 20);
	bytes = num(argv[2], 1, 1L << 32);
	if ((msg = malloc((size_t)size + 1)) == NULL)
		die("malloc");
	for (i = 0; i < size; i++)
		msg[i] = abc[i % (long)(sizeof abc - 1)];
	msg[size] = '\n';
	snprintf(hdr, sizeof hdr, "%ld ", size);
	for (n = 0; out < bytes; n++) {
		/* One character of each message numbers it, for a reader. */
		msg[0] = abc[n % (long)(sizeof abc - 1)];
		if (kind == 1 && fputs(hdr, stdout) == EOF)
			die("write");
		if (fwrite(msg, 1, (size_t)size + (kind == 2), stdout) !=
		    (size_t)size + (kind == 2))
			die("write");
		out += size + (kind == 2) + (kind == 1 ? (long)strlen(hdr) : 0);
	}
	if (fflush(stdout) == EOF)
		die("write");
	free(msg);
	return 0;
}

enum { B_CONNECTING, B_SENDING, B_DRAINING, B_DONE };

struct bconn {
	int	fd;
	int	state;
	size_t	off;		/* into the file */
	long	sent;
};

static int
mode_blast(int argc, char **argv)
{
	static char		 junk[4096];
	struct sockaddr_in	 sin;
	struct epoll_event	 ev, evs[64];
	struct bconn		*bc;
	struct stat		 st;
	long			 secs, conc, total = 0, errs = 0, left;
	double			 t0, tend, t1;
	char			*file;
	size_t			 flen, got;
	ssize_t			 r;
	int			 ep, i, n, ffd;

	if (argc < 4)
		return 2;
	sin = loopback((int)num(argv[0], 1, 65535));
	secs = num(argv[1], 1, 3600);
	conc = num(argv[2], 1, 1024);
	catch_signals();
	alarm((unsigned)(secs + 60));
	if ((ffd = open(argv[3], O_RDONLY | O_CLOEXEC)) == -1 ||
	    fstat(ffd, &st) == -1)
		die(argv[3]);
	if (st.st_size <= 0 || (file = malloc((size_t)st.st_size)) == NULL)
		die("empty file or malloc");
	flen = (size_t)st.st_size;
	for (got = 0; got < flen; got += (size_t)r)
		if ((r = read(ffd, file + got, flen - got)) <= 0)
			die("read");
	close(ffd);
	if ((bc = calloc((size_t)conc, sizeof *bc)) == NULL)
		die("calloc");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	t0 = now();
	tend = t0 + (double)secs;
	for (i = 0; i < conc; i++) {
		bc[i].fd = socket(AF_INET,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (bc[i].fd == -1)
			die("socket");
		if (connect(bc[i].fd, (struct sockaddr *)&sin, sizeof sin) ==
		    -1 && errno != EINPROGRESS)
			die("connect");
		ev.events = EPOLLOUT;
		ev.data.u32 = (uint32_t)i;
		epoll_ctl(ep, EPOLL_CTL_ADD, bc[i].fd, &ev);
	}
	left = conc;
	while (left > 0 && !stop_flag) {
		n = epoll_wait(ep, evs, 64, 1000);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < n; i++) {
			struct bconn	*c = &bc[evs[i].data.u32];
			int		 err = 0;
			socklen_t	 el = sizeof err;

			if (c->state == B_CONNECTING) {
				getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
				if (err)
					goto failed;
				c->state = B_SENDING;
			}
			if (c->state == B_SENDING) {
				r = send(c->fd, file + c->off, flen - c->off,
				    MSG_NOSIGNAL);
				if (r == -1 && errno == EAGAIN)
					continue;
				if (r <= 0)
					goto failed;
				c->sent += r;
				c->off += (size_t)r;
				if (c->off < flen)
					continue;
				c->off = 0;
				if (now() < tend)
					continue;
				/* A whole pass is out, and time is up. */
				shutdown(c->fd, SHUT_WR);
				c->state = B_DRAINING;
				ev.events = EPOLLIN;
				ev.data.u32 = evs[i].data.u32;
				epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				continue;
			}
			if (c->state != B_DRAINING)
				continue;
			r = recv(c->fd, junk, sizeof junk, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r != 0)
				goto failed;	/* a sink sends nothing */
			total += c->sent;
			close(c->fd);
			c->state = B_DONE;
			left--;
			continue;
failed:
			fprintf(stderr, "tools: blast: connection %u: %s\n",
			    evs[i].data.u32, err ? strerror(err) :
			    r == 0 ? "eof" : strerror(errno));
			close(c->fd);
			c->state = B_DONE;
			errs++;
			left--;
		}
	}
	t1 = now();
	if (stop_flag)
		fprintf(stderr, "tools: blast: stopped, %ld left\n", left);
	printf("bytes=%ld seconds=%.3f conns=%ld errors=%ld gbps=%.3f\n",
	    total, t1 - t0, conc, errs + left, total * 8 / (t1 - t0) / 1e9);
	return errs + left ? 1 : 0;
}

static int
mode_sink(int argc, char **argv)
{
	static char		 buf[262144];
	struct sockaddr_in	 sin = loopback(0);
	struct epoll_event	 ev, evs[256];
	socklen_t		 len = sizeof sin;
	long			 maxsec = argc > 0 ? num(argv[0], 1, 86400) : 7200;
	long			*got = NULL;
	size_t			 ngot = 0;
	int			 lfd, ep, one = 1, i, n;

	catch_signals();
	alarm((unsigned)maxsec);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (lfd == -1)
		die("socket");
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) == -1)
		die("bind");
	if (listen(lfd, 1024) == -1)
		die("listen");
	if (getsockname(lfd, (struct sockaddr *)&sin, &len) == -1)
		die("getsockname");
	printf("port %d\n", ntohs(sin.sin_port));
	fflush(stdout);
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	while (!stop_flag) {
		n = epoll_wait(ep, evs, 256, 1000);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			int	fd = evs[i].data.fd, cfd;
			ssize_t	r;

			if (fd == lfd) {
				while ((cfd = accept4(lfd, NULL, NULL,
				    SOCK_NONBLOCK | SOCK_CLOEXEC)) != -1) {
					if ((size_t)cfd >= ngot) {
						size_t	m = (size_t)cfd * 2 + 64;

						if ((got = realloc(got,
						    m * sizeof *got)) == NULL)
							die("realloc");
						memset(got + ngot, 0,
						    (m - ngot) * sizeof *got);
						ngot = m;
					}
					got[cfd] = 0;
					ev.events = EPOLLIN;
					ev.data.fd = cfd;
					epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
				}
				continue;
			}
			r = recv(fd, buf, sizeof buf, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r > 0) {
				got[fd] += r;
				continue;
			}
			if (r == 0)
				printf("closed %ld\n", got[fd]);
			else
				printf("error %ld %s\n", got[fd],
				    strerror(errno));
			fflush(stdout);
			close(fd);
		}
	}
	return 0;
}

#define MARKER		"zpbm"
#define MARKER_LEN	4
#define BATCH		64

/* ---- syslog over UDP: paced sender, counting sink ----------------------------------------------------------- */

/* Write message seq into buf (size bytes): header, then 'x' padding. */
static void
fill(char *buf, size_t size, long seq)
{
	int	n;

	n = snprintf(buf, size + 1, "<13>Dec  6 12:00:00 bench zpb: "
	    MARKER " %010ld ", seq);
	if (n < 0 || (size_t)n > size)
		n = (int)size;
	memset(buf + n, 'x', size - (size_t)n);
}

static int
mode_udpsend(int argc, char **argv)
{
	static struct mmsghdr	 msgs[BATCH];
	static struct iovec	 iov[BATCH];
	struct sockaddr_in	 dst, src;
	long			 rate, secs, size, nsrc, total, sent = 0;
	double			 t0, t1, due;
	char			*bufs;
	int			*fds, turn = 0, i;

	if (argc < 5)
		return 2;
	dst = loopback((int)num(argv[0], 1, 65535));
	rate = num(argv[1], 1, 100000000);
	secs = num(argv[2], 1, 3600);
	size = num(argv[3], 40, 65507);
	nsrc = num(argv[4], 1, 250);
	total = rate * secs;
	catch_signals();
	alarm((unsigned)(secs * 4 + 60));
	if ((fds = calloc((size_t)nsrc, sizeof *fds)) == NULL ||
	    (bufs = malloc((size_t)(BATCH * size))) == NULL)
		die("malloc");
	for (i = 0; i < nsrc; i++) {
		/* 127.0.0.2 and on: one device a socket */
		src = loopback(0);
		src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (uint32_t)i);
		if ((fds[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) ==
		    -1)
			die("socket");
		if (bind(fds[i], (struct sockaddr *)&src, sizeof src) == -1)
			die("bind 127.0.0.x");
		if (connect(fds[i], (struct sockaddr *)&dst, sizeof dst) == -1)
			die("connect");
	}
	for (i = 0; i < BATCH; i++) {
		iov[i].iov_base = bufs + (size_t)i * (size_t)size;
		iov[i].iov_len = (size_t)size;
		memset(&msgs[i], 0, sizeof msgs[i]);
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	t0 = now();
	while (sent < total && !stop_flag) {
		long	n, off = 0;

		/* what is due by now, in whole batches at most */
		due = (now() - t0) * (double)rate;
		n = (long)due - sent;
		if (n <= 0) {
			struct timespec	ts = { 0, 200000 };

			nanosleep(&ts, NULL);
			continue;
		}
		if (n > BATCH)
			n = BATCH;
		if (n > total - sent)
			n = total - sent;
		for (i = 0; i < n; i++)
			fill(iov[i].iov_base, (size_t)size, sent + i);
		while (off < n) {
			int	r = sendmmsg(fds[turn], msgs + off,
			    (unsigned)(n - off), 0);

			if (r == -1) {
				if (errno == EINTR || errno == ENOBUFS ||
				    errno == ECONNREFUSED)
					continue;	/* loopback: retry */
				die("sendmmsg");
			}
			off += r;
		}
		sent += n;
		turn = (turn + 1) % (int)nsrc;
	}
	t1 = now();
	printf("sent=%ld seconds=%.3f rate=%.0f\n", sent, t1 - t0,
	    (double)sent / (t1 - t0));
	return stop_flag && sent < total ? 1 : 0;
}

/* ---- fan-in: many paced shippers ------------------------------------------ */

struct shipper {
	int	fd;
	long	sent;		/* messages begun */
	char	buf[4096];	/* the message going out */
	size_t	len, off;	/* len 0: none */
	int	closed;		/* EOF read after our FIN */
};

static int
mode_fansend(int argc, char **argv)
{
	struct sockaddr_in	 dst;
	struct shipper		*sh;
	struct epoll_event	 ev, evs[256];
	long			 conns, rate, secs, size, total, sent = 0;
	long			 late = 0, errors = 0, i, up = 0, open = 0;
	double			 t0, t, tend, due;
	char			 junk[4096], pfx[16];
	int			 ep, n, k, octet = 0, plen = 0;

	if (argc < 5)
		return 2;
	if (argc > 5) {
		if (strcmp(argv[5], "octet") == 0)
			octet = 1;
		else if (strcmp(argv[5], "lf") != 0)
			return 2;
	}
	dst = loopback((int)num(argv[0], 1, 65535));
	conns = num(argv[1], 1, 100000);
	rate = num(argv[2], 1, 100000);
	secs = num(argv[3], 1, 3600);
	size = num(argv[4], 60, 4096);
	total = conns * rate * secs;
	/* Octet counting: "LEN " then LEN bytes, SIZE in all. */
	if (octet)
		for (k = 1; k < 5 && plen == 0; k++)
			if (snprintf(pfx, sizeof pfx, "%ld ", size - k - 1) ==
			    k + 1)
				plen = k + 1;
	catch_signals();
	raise_nofile();
	alarm((unsigned)(secs * 2 + 120));
	if ((sh = calloc((size_t)conns, sizeof *sh)) == NULL)
		die("calloc");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	/* Connect them all first: the relay's accepts are not measured. */
	for (i = 0; i < conns; i++) {
		sh[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (sh[i].fd == -1)
			die("socket");
		if (connect(sh[i].fd, (struct sockaddr *)&dst, sizeof dst) ==
		    -1)
			die("connect");
		(void)fcntl(sh[i].fd, F_SETFL, O_NONBLOCK);
		nodelay(sh[i].fd);
		ev.events = EPOLLIN | EPOLLRDHUP;
		ev.data.u64 = (uint64_t)i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, sh[i].fd, &ev) == -1)
			die("epoll_ctl");
		up++;
	}
	t0 = now();
	tend = t0 + (double)secs;
	while (sent < total && !stop_flag) {
		t = now();
		for (i = 0; i < conns; i++) {
			struct shipper	*c = &sh[i];
			long		 want;

			if (c->fd == -1)
				continue;
			/* Connection i's k-th message is due at t0 + (k + i/conns) / rate. */
			due = (t - t0) * (double)rate - (double)i / (double)conns;
			want = (long)due + 1;
			if (want > rate * secs)
				want = rate * secs;
			while (c->sent < want || c->len > 0) {
				ssize_t	w;

				if (c->len == 0) {
					int	m;

					m = snprintf(c->buf, sizeof c->buf,
					    "%s<13>Dec  7 12:00:00 bench zpb: "
					    MARKER " %010ld %016ld ",
					    octet ? pfx : "", c->sent, now_us());
					memset(c->buf + m, 'x', (size_t)(size -
					    m - 1));
					c->buf[size - 1] = octet ? 'x' : '\n';
					c->len = (size_t)size;
					c->off = 0;
					if ((double)c->sent + 1.0 <
					    due - 0.1 * (double)rate)
						late++;
					c->sent++;
					sent++;
				}
				w = send(c->fd, c->buf + c->off, c->len - c->off,
				    MSG_NOSIGNAL);
				if (w > 0) {
					c->off += (size_t)w;
					if (c->off == c->len)
						c->len = 0;
					continue;
				}
				if (w == -1 && errno == EAGAIN)
					break;
				errors++;
				close(c->fd);
				c->fd = -1;
				up--;
				break;
			}
		}
		if (up == 0)
			break;
		/* Wake each millisecond; drop what the relay says meanwhile. */
		n = epoll_wait(ep, evs, 256, 1);
		for (k = 0; k < n; k++) {
			struct shipper	*c = &sh[evs[k].data.u64];

			if (c->fd != -1)
				while (recv(c->fd, junk, sizeof junk, 0) > 0)
					;
		}
		if (now() > tend + 60.0)
			break;
	}
	t = now();
	/* Every byte out, then our FIN; the relay's EOF says it is through. */
	for (i = 0; i < conns; i++)
		if (sh[i].fd != -1) {
			int	fl = fcntl(sh[i].fd, F_GETFL);

			(void)fcntl(sh[i].fd, F_SETFL, fl & ~O_NONBLOCK);
			while (sh[i].len > 0) {
				ssize_t	w = send(sh[i].fd, sh[i].buf +
				    sh[i].off, sh[i].len - sh[i].off,
				    MSG_NOSIGNAL);

				if (w <= 0) {
					errors++;
					break;
				}
				sh[i].off += (size_t)w;
				if (sh[i].off == sh[i].len)
					sh[i].len = 0;
			}
			(void)fcntl(sh[i].fd, F_SETFL, fl);
			shutdown(sh[i].fd, SHUT_WR);
			open++;
		}
	tend = now() + 30.0;
	while (open > 0 && now() < tend && !stop_flag) {
		n = epoll_wait(ep, evs, 256, 100);
		for (k = 0; k < n; k++) {
			struct shipper	*c = &sh[evs[k].data.u64];
			ssize_t		 r;

			if (c->fd == -1 || c->closed)
				continue;
			while ((r = recv(c->fd, junk, sizeof junk, 0)) > 0)
				;
			if (r == 0 || (r == -1 && errno != EAGAIN)) {
				c->closed = 1;
				epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
				open--;
			}
		}
	}
	for (i = 0; i < conns; i++)
		if (sh[i].fd != -1)
			close(sh[i].fd);
	printf("sent=%ld conns=%ld seconds=%.3f rate=%.0f late=%ld "
	    "errors=%ld\n", sent, conns, t - t0, (double)sent / (t - t0),
	    late, errors + (open > 0 ? open : 0));
	return errors > 0 || open > 0 ? 1 : 0;
}

/* ---- counting sink --------------------------------------------------------------- */

/* Per TCP connection: the last bytes of what came, for a split marker. */
struct tail {
	char	b[MARKER_LEN - 1];
	size_t	n;
};

/*
 * Latencies of fansend's messages, in 10 us buckets up to 1 s; the
 * last bucket holds everything above.
 */
#define LAT_BUCKETS	100001
static uint32_t			 lat[LAT_BUCKETS];
static long			 lat_n;
static long			 lat_max;
static volatile sig_atomic_t	 lat_reset;

/* After a marker at q (end: the read's end): " SEQ TIME" of fansend. */
static void
lat_sample(const char *q, const char *end, long t)
{
	const char	*p = q + MARKER_LEN + 1 + 10 + 1;
	long		 sent = 0, d;
	int		 i;

	if (end - p < 17 || p[-1] != ' ' || p[16] != ' ')
		return;
	for (i = 0; i < 16; i++) {
		if (p[i] < '0' || p[i] > '9')
			return;
		sent = sent * 10 + (p[i] - '0');
	}
	d = t - sent;
	if (d < 0)
		d = 0;
	lat[d / 10 < LAT_BUCKETS - 1 ? d / 10 : LAT_BUCKETS - 1]++;
	lat_n++;
	if (d > lat_max)
		lat_max = d;
}

/* The q-quantile (0..1) in microseconds: its bucket's upper end. */
static long
lat_quantile(double q)
{
	long	want = (long)(q * (double)lat_n), seen = 0;
	long	i;

	if (lat_n == 0)
		return 0;
	for (i = 0; i < LAT_BUCKETS; i++)
		if ((seen += lat[i]) > want)
			return (i + 1) * 10;
	return lat_max;
}

static long
count_in(const char *p, size_t len)
{
	const char	*end = p + len, *q;
	long		 c = 0, t = -1;

	while ((q = memmem(p, (size_t)(end - p), MARKER, MARKER_LEN)) !=
	    NULL) {
		c++;
		if (t == -1)
			t = now_us();
		lat_sample(q, end, t);
		p = q + MARKER_LEN;
	}
	return c;
}

/* Count markers in the stream piece buf (len) after the tail t. */
static long
count_stream(struct tail *t, char *buf, size_t len)
{
	char	join[2 * (MARKER_LEN - 1)];
	size_t	k = len < MARKER_LEN - 1 ? len : MARKER_LEN - 1, keep;
	long	c;

	/* a marker across the boundary lies in tail + first 3 bytes */
	memcpy(join, t->b, t->n);
	memcpy(join + t->n, buf, k);
	c = count_in(join, t->n + k) + count_in(buf, len);
	/* the new tail: the last 3 bytes of tail + buf */
	if (len >= MARKER_LEN - 1) {
		memcpy(t->b, buf + len - (MARKER_LEN - 1), MARKER_LEN - 1);
		t->n = MARKER_LEN - 1;
	} else {
		keep = t->n + len > MARKER_LEN - 1 ?
		    MARKER_LEN - 1 - len : t->n;
		memmove(t->b, t->b + t->n - keep, keep);
		memcpy(t->b + keep, buf, len);
		t->n = keep + len;
	}
	return c;
}

static void
count_report(int fd, long count, long drops)
{
	char	line[160];
	int	n;

	if (lat_reset) {
		lat_reset = 0;
		memset(lat, 0, sizeof lat);
		lat_n = lat_max = 0;
	}
	n = snprintf(line, sizeof line, "%ld %ld %ld %ld %ld %ld\n", count,
	    drops, lat_quantile(0.5), lat_quantile(0.99), lat_max, lat_n);
	if (ftruncate(fd, 0) == -1 || pwrite(fd, line, (size_t)n, 0) != n)
		die("status file");
}

static int
count_socket(int udp, struct sockaddr_in *sin)
{
	socklen_t	len = sizeof *sin;
	int		fd, one = 1, big = 64 << 20;

	fd = socket(AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_NONBLOCK |
	    SOCK_CLOEXEC, 0);
	if (fd == -1)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (udp) {
		if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big,
		    sizeof big) == -1)
			(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big,
			    sizeof big);
		(void)setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
	}
	*sin = loopback(0);
	if (bind(fd, (struct sockaddr *)sin, sizeof *sin) == -1)
		die("bind");
	if (!udp && listen(fd, 1024) == -1)
		die("listen");
	if (getsockname(fd, (struct sockaddr *)sin, &len) == -1)
		die("getsockname");
	return fd;
}

/* Read every datagram waiting on fd; add markers to *count. */
static void
count_dgrams(int fd, long *count, long *drops)
{
	static char		 bufs[BATCH][65536];
	static char		 cbufs[BATCH][CMSG_SPACE(sizeof(uint32_t))];
	static struct mmsghdr	 m[BATCH];
	static struct iovec	 iov[BATCH];
	struct cmsghdr		*cm;
	int			 i, n;

	for (;;) {
		for (i = 0; i < BATCH; i++) {
			iov[i].iov_base = bufs[i];
			iov[i].iov_len = sizeof bufs[i];
			memset(&m[i], 0, sizeof m[i]);
			m[i].msg_hdr.msg_iov = &iov[i];
			m[i].msg_hdr.msg_iovlen = 1;
			m[i].msg_hdr.msg_control = cbufs[i];
			m[i].msg_hdr.msg_controllen = sizeof cbufs[i];
		}
		n = recvmmsg(fd, m, BATCH, MSG_DONTWAIT, NULL);
		if (n <= 0)
			return;
		for (i = 0; i < n; i++) {
			*count += count_in(bufs[i], m[i].msg_len);
			for (cm = CMSG_FIRSTHDR(&m[i].msg_hdr); cm != NULL;
			    cm = CMSG_NXTHDR(&m[i].msg_hdr, cm))
				if (cm->cmsg_level == SOL_SOCKET &&
				    cm->cmsg_type == SO_RXQ_OVFL) {
					uint32_t	d;

					memcpy(&d, CMSG_DATA(cm), sizeof d);
					*drops = (long)d;
				}
		}
	}
}

static void
on_usr2(int sig)
{
	(void)sig;
	lat_reset = 1;
}

static int
mode_count(int argc, char **argv)
{
	static char		 buf[262144];
	struct sockaddr_in	 sin;
	struct epoll_event	 ev, evs[256];
	struct tail		*tails = NULL;
	size_t			 ntails = 0;
	long			 maxsec, count = 0, drops = 0, said = -1;
	double			 next = 0;
	int			 udp, lfd, sfd, ep, i, n;

	if (argc < 2)
		return 2;
	if (strcmp(argv[0], "udp") == 0)
		udp = 1;
	else if (strcmp(argv[0], "tcp") == 0)
		udp = 0;
	else
		return 2;
	maxsec = argc > 2 ? num(argv[2], 1, 86400) : 7200;
	if ((sfd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
	    0644)) == -1)
		die(argv[1]);
	count_report(sfd, 0, 0);
	catch_signals();
	{
		struct sigaction	sa;

		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_usr2;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR2, &sa, NULL);
	}
	alarm((unsigned)maxsec);
	lfd = count_socket(udp, &sin);
	printf("port %d\n", ntohs(sin.sin_port));
	fflush(stdout);
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	ev.events = EPOLLIN;
	ev.data.fd = lfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
	while (!stop_flag) {
		n = epoll_wait(ep, evs, 256, 20);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (i = 0; i < n; i++) {
			int	fd = evs[i].data.fd, cfd;
			ssize_t	r;

			if (fd == lfd && udp) {
				count_dgrams(fd, &count, &drops);
				continue;
			}
			if (fd == lfd) {
				while ((cfd = accept4(lfd, NULL, NULL,
				    SOCK_NONBLOCK | SOCK_CLOEXEC)) != -1) {
					if ((size_t)cfd >= ntails) {
						size_t	k = (size_t)cfd * 2 + 64;

						tails = realloc(tails,
						    k * sizeof *tails);
						if (tails == NULL)
							die("realloc");
						ntails = k;
					}
					tails[cfd].n = 0;
					ev.events = EPOLLIN;
					ev.data.fd = cfd;
					epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev);
				}
				continue;
			}
			r = recv(fd, buf, sizeof buf, 0);
			if (r == -1 && errno == EAGAIN)
				continue;
			if (r > 0) {
				count += count_stream(&tails[fd], buf,
				    (size_t)r);
				continue;
			}
			close(fd);	/* EOF or error: the relay closed it */
		}
		if (count != said && now() >= next) {
			count_report(sfd, count, drops);
			said = count;
			next = now() + 0.02;
		}
	}
	count_report(sfd, count, drops);
	return 0;
}

/* ---- subreaper ------------------------------------------------------------ */

static int
mode_reap(int argc, char **argv)
{
	struct sigaction	sa;
	pid_t			child, w;
	int			status, rc = 1, stopping = 0;
	double			killat = 0;

	if (argc < 1)
		return 2;
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) == -1)
		die("prctl(PR_SET_CHILD_SUBREAPER)");
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;	/* no SA_RESTART: wait() returns */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	if ((child = fork()) == -1)
		die("fork");
	if (child == 0) {
		setpgid(0, 0);
		signal(SIGTERM, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		execvp(argv[0], argv);
		fprintf(stderr, "tools: reap: %s: %s\n", argv[0],
		    strerror(errno));
		_exit(127);
	}
	setpgid(child, child);
	for (;;) {
		if (stop_flag && !stopping) {
			stopping = 1;
			kill(-child, SIGTERM);
			killat = now() + 5;
			alarm(1);
		}
		if (stopping && now() >= killat)
			kill(-child, SIGKILL);
		w = waitpid(-1, &status, 0);
		if (w == -1) {
			if (errno == EINTR) {
				if (stopping)
					alarm(1);
				continue;
			}
			break;		/* ECHILD: nobody left */
		}
		if (w == child)
			rc = WIFEXITED(status) ? WEXITSTATUS(status) :
			    128 + WTERMSIG(status);
	}
	return rc;
}

int
main(int argc, char **argv)
{
	int	rc = 2;

	if (argc < 2)
		;
	else if (strcmp(argv[1], "echo") == 0)
		rc = mode_echo(argc - 2, argv + 2);
	else if (strcmp(argv[1], "pingpong") == 0)
		rc = mode_pingpong(argc - 2, argv + 2);
	else if (strcmp(argv[1], "rr") == 0)
		rc = mode_rr(argc - 2, argv + 2);
	else if (strcmp(argv[1], "shortconn") == 0)
		rc = mode_shortconn(argc - 2, argv + 2);
	else if (strcmp(argv[1], "idle") == 0)
		rc = mode_idle(argc - 2, argv + 2);
	else if (strcmp(argv[1], "frames") == 0)
		rc = mode_frames(argc - 2, argv + 2);
	else if (strcmp(argv[1], "blast") == 0)
		rc = mode_blast(argc - 2, argv + 2);
	else if (strcmp(argv[1], "sink") == 0)
		rc = mode_sink(argc - 2, argv + 2);
	else if (strcmp(argv[1], "reap") == 0)
		rc = mode_reap(argc - 2, argv + 2);
	else if (strcmp(argv[1], "udpsend") == 0)
		rc = mode_udpsend(argc - 2, argv + 2);
	else if (strcmp(argv[1], "count") == 0)
		rc = mode_count(argc - 2, argv + 2);
	else if (strcmp(argv[1], "fansend") == 0)
		rc = mode_fansend(argc - 2, argv + 2);
	if (rc == 2)
		fprintf(stderr, "usage: tools echo|pingpong|shortconn|rr|idle|frames|blast|sink|reap|udpsend|fansend|count ...\n"
		    "(see the comment at the top of contrib/bench/tools.c)\n");
	return rc;
}
