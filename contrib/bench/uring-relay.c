/*
 * uring-relay.c - a minimal single-threaded TCP relay with two engines,
 * for contrib/bench/uring-exp (issue 30): does io_uring, batching a loop
 * pass's reads and writes into one submission, save CPU per message
 * against an equally simple epoll loop on this machine? An experiment,
 * not part of zproxy.
 *
 *   uring-relay epoll|uring|uring-sqpoll LISTEN_PORT UPSTREAM_PORT
 *
 * Listens on 127.0.0.1:LISTEN_PORT; each client gets a fresh connection
 * to 127.0.0.1:UPSTREAM_PORT (a blocking connect: loopback, both engines
 * alike) and bytes are relayed both ways through a 16 KiB buffer per
 * direction. A read's EOF becomes shutdown(SHUT_WR) on the other socket;
 * a pair closes when both directions ended, or on an error. SIGTERM and
 * SIGINT stop it.
 *
 *   epoll         level-triggered; recv then send at once; EPOLLOUT (and
 *                 no reading on that direction) only while a send was
 *                 short, as zproxy's copy mode does.
 *   uring         one recv SQE outstanding per direction, a send SQE on
 *                 its completion (again for the rest of a short send);
 *                 one io_uring_submit_and_wait per loop turn, then every
 *                 CQE reaped. SINGLE_ISSUER|DEFER_TASKRUN: completions
 *                 are run in our own io_uring_enter, not by interrupts.
 *   uring-sqpoll  the same with IORING_SETUP_SQPOLL: a kernel thread
 *                 polls the submission queue (and burns a CPU doing so).
 *
 * Build: cc -O2 -Wall -Wextra -o uring-relay uring-relay.c -luring
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSZ	16384

struct pair;
struct dir {			/* bytes read from fd[i], written to fd[!i] */
	struct pair	*p;
	int		 i;
	size_t		 off, len;	/* unsent: buf[off .. len) */
	int		 eof;		/* read side ended and sent on */
	int		 busy;		/* uring: 0 none, 'r' recv, 's' send */
	char		 buf[BUFSZ];
};
struct pair {
	int		 fd[2];		/* 0 client, 1 upstream */
	struct dir	 d[2];
	int		 dead;		/* uring: closing, ops in flight */
	struct pair	*next;		/* epoll: freed after the batch */
};

static volatile sig_atomic_t stop;
static struct sockaddr_in upstream;

static void
on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void
die(const char *what)
{
	perror(what);
	exit(1);
}

static void
nodelay(int fd)
{
	int on = 1;

	/* Relay small writes as they come, as zproxy and haproxy do. */
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
}

static struct sockaddr_in
loopback(int port)
{
	struct sockaddr_in sin;

	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons((uint16_t)port);
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

static int
listener(int port)
{
	struct sockaddr_in sin = loopback(port);
	int fd, on = 1;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		die("socket");
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
	if (bind(fd, (struct sockaddr *)&sin, sizeof sin) == -1 ||
	    listen(fd, 4096) == -1)
		die("listen");
	return fd;
}

/* A pair for accepted client cfd, or NULL (cfd closed) if upstream fails. */
static struct pair *
pair_new(int cfd)
{
	struct pair *p;
	int ufd;

	ufd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ufd == -1 || connect(ufd, (struct sockaddr *)&upstream,
	    sizeof upstream) == -1) {
		perror("upstream");
		if (ufd != -1)
			close(ufd);
		close(cfd);
		return NULL;
	}
	nodelay(cfd);
	nodelay(ufd);
	if ((p = calloc(1, sizeof *p)) == NULL)
		die("calloc");
	p->fd[0] = cfd;
	p->fd[1] = ufd;
	for (int i = 0; i < 2; i++) {
		p->d[i].p = p;
		p->d[i].i = i;
	}
	return p;
}

/* ---- epoll ---------------------------------------------------------- */

static int ep;
static struct pair *graveyard;

/* What fd[i] waits for: reading while its direction's buffer is empty,
 * writing while the other direction's is not. */
static void
ep_watch(struct pair *p, int i, int op)
{
	struct epoll_event ev = { 0 };

	if (!p->d[i].eof && p->d[i].len == 0)
		ev.events |= EPOLLIN;
	if (p->d[!i].len > 0)
		ev.events |= EPOLLOUT;
	ev.data.ptr = &p->d[i];
	if (epoll_ctl(ep, op, p->fd[i], &ev) == -1)
		die("epoll_ctl");
}

static void
ep_close(struct pair *p)
{
	if (p->dead)
		return;
	p->dead = 1;
	close(p->fd[0]);	/* leaves the epoll set with it */
	close(p->fd[1]);
	/* Events for it may still be in this batch: free it afterwards. */
	p->next = graveyard;
	graveyard = p;
}

/* Send what direction d holds; -1: the pair failed. */
static int
ep_flush(struct dir *d)
{
	struct pair *p = d->p;
	ssize_t w;

	w = send(p->fd[!d->i], d->buf + d->off, d->len - d->off,
	    MSG_NOSIGNAL);
	if (w == -1 && errno != EAGAIN)
		return -1;
	if (w > 0)
		d->off += (size_t)w;
	if (d->off == d->len)
		d->off = d->len = 0;
	return 0;
}

static void
ep_event(struct dir *d, uint32_t evs)
{
	struct pair *p = d->p;
	int i = d->i;
	ssize_t r;

	if (p->dead)
		return;
	if (evs & EPOLLERR) {
		ep_close(p);
		return;
	}
	if ((evs & (EPOLLOUT | EPOLLHUP)) && p->d[!i].len > 0) {
		/* fd[i] drained: the other direction's rest goes out. */
		if (ep_flush(&p->d[!i]) == -1) {
			ep_close(p);
			return;
		}
		if (p->d[!i].len == 0) {
			ep_watch(p, i, EPOLL_CTL_MOD);
			ep_watch(p, !i, EPOLL_CTL_MOD);
		}
	}
	if (!(evs & (EPOLLIN | EPOLLHUP)) || d->eof || d->len > 0)
		return;
	r = recv(p->fd[i], d->buf, BUFSZ, 0);
	if (r == -1 && errno == EAGAIN)
		return;
	if (r <= 0) {
		if (r == -1) {
			ep_close(p);
			return;
		}
		d->eof = 1;
		shutdown(p->fd[!i], SHUT_WR);
		if (p->d[!i].eof) {
			ep_close(p);
			return;
		}
		ep_watch(p, i, EPOLL_CTL_MOD);
		return;
	}
	d->len = (size_t)r;
	if (ep_flush(d) == -1) {
		ep_close(p);
		return;
	}
	if (d->len > 0) {	/* short: wait for room, stop reading */
		ep_watch(p, i, EPOLL_CTL_MOD);
		ep_watch(p, !i, EPOLL_CTL_MOD);
	}
}

static void
run_epoll(int lfd)
{
	struct epoll_event ev = { .events = EPOLLIN }, evs[256];
	struct pair *p;
	int n, cfd;

	if ((ep = epoll_create1(EPOLL_CLOEXEC)) == -1)
		die("epoll_create1");
	if (fcntl(lfd, F_SETFL, O_NONBLOCK) == -1)
		die("fcntl");
	ev.data.ptr = NULL;
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) == -1)
		die("epoll_ctl");
	while (!stop) {
		n = epoll_wait(ep, evs, 256, -1);
		if (n == -1 && errno != EINTR)
			die("epoll_wait");
		for (int k = 0; k < n; k++) {
			if (evs[k].data.ptr != NULL) {
				ep_event(evs[k].data.ptr, evs[k].events);
				continue;
			}
			while ((cfd = accept4(lfd, NULL, NULL,
			    SOCK_CLOEXEC)) != -1) {
				if ((p = pair_new(cfd)) == NULL)
					continue;
				if (fcntl(p->fd[0], F_SETFL, O_NONBLOCK) == -1 ||
				    fcntl(p->fd[1], F_SETFL, O_NONBLOCK) == -1)
					die("fcntl");
				ep_watch(p, 0, EPOLL_CTL_ADD);
				ep_watch(p, 1, EPOLL_CTL_ADD);
			}
		}
		while ((p = graveyard) != NULL) {
			graveyard = p->next;
			free(p);
		}
	}
	close(ep);
}

/* ---- io_uring ------------------------------------------------------- */

static struct io_uring ring;
#define ACCEPT_TAG	1	/* user_data of the accept; dirs are pointers */

static struct io_uring_sqe *
sqe_get(void)
{
	struct io_uring_sqe *sqe;

	/* SQ full (many completions this turn): hand it over, go on. */
	while ((sqe = io_uring_get_sqe(&ring)) == NULL)
		io_uring_submit(&ring);
	return sqe;
}

static void
u_accept(int lfd)
{
	struct io_uring_sqe *sqe = sqe_get();

	io_uring_prep_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, ACCEPT_TAG);
}

static void
u_recv(struct dir *d, int first)
{
	struct io_uring_sqe *sqe = sqe_get();

	io_uring_prep_recv(sqe, d->p->fd[d->i], d->buf, BUFSZ, 0);
	/* After a send, the socket is most likely empty: arm the poll
	 * without trying the recv first. */
	if (!first)
		sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
	io_uring_sqe_set_data(sqe, d);
	d->busy = 'r';
}

static void
u_send(struct dir *d)
{
	struct io_uring_sqe *sqe = sqe_get();

	io_uring_prep_send(sqe, d->p->fd[!d->i], d->buf + d->off,
	    d->len - d->off, MSG_NOSIGNAL);
	io_uring_sqe_set_data(sqe, d);
	d->busy = 's';
}

static void
u_close_if_idle(struct pair *p)
{
	if (p->d[0].busy || p->d[1].busy)
		return;
	close(p->fd[0]);
	close(p->fd[1]);
	free(p);
}

/* An error: end the ops still in flight (a shut socket completes its
 * recv with 0 and its send with EPIPE), then close. */
static void
u_kill(struct pair *p)
{
	if (!p->dead) {
		p->dead = 1;
		shutdown(p->fd[0], SHUT_RDWR);
		shutdown(p->fd[1], SHUT_RDWR);
	}
	u_close_if_idle(p);
}

static void
u_complete(struct dir *d, int res)
{
	struct pair *p = d->p;
	int op = d->busy;

	d->busy = 0;
	if (p->dead) {
		u_close_if_idle(p);
		return;
	}
	if (res == -EINTR || res == -EAGAIN) {	/* try it again */
		if (op == 'r')
			u_recv(d, 1);
		else
			u_send(d);
		return;
	}
	if (res < 0) {
		u_kill(p);
		return;
	}
	if (op == 'r') {
		if (res == 0) {
			d->eof = 1;
			shutdown(p->fd[!d->i], SHUT_WR);
			if (p->d[!d->i].eof)
				u_close_if_idle(p);
			return;
		}
		d->off = 0;
		d->len = (size_t)res;
		u_send(d);
		return;
	}
	d->off += (size_t)res;
	if (d->off < d->len)
		u_send(d);	/* short: the rest */
	else
		u_recv(d, 0);
}

static void
run_uring(int lfd, int sqpoll)
{
	struct io_uring_params par = { 0 };
	struct io_uring_cqe *cqe;
	struct pair *p;
	unsigned head, n;
	int r;

	if (sqpoll) {
		par.flags = IORING_SETUP_SQPOLL;
		par.sq_thread_idle = 1000;
	} else
		par.flags = IORING_SETUP_SINGLE_ISSUER |
		    IORING_SETUP_DEFER_TASKRUN;
	/* One op in flight per direction: 2 per pair, 8192 completions
	 * before the CQ would overflow (it would not drop them: NODROP). */
	if ((r = io_uring_queue_init_params(4096, &ring, &par)) < 0) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-r));
		exit(1);
	}
	u_accept(lfd);
	while (!stop) {
		r = io_uring_submit_and_wait(&ring, 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
			fprintf(stderr, "io_uring_submit_and_wait: %s\n",
			    strerror(-r));
			exit(1);
		}
		n = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			n++;
			if (cqe->user_data != ACCEPT_TAG) {
				u_complete(io_uring_cqe_get_data(cqe),
				    cqe->res);
				continue;
			}
			if (cqe->res >= 0 &&
			    (p = pair_new(cqe->res)) != NULL) {
				u_recv(&p->d[0], 1);
				u_recv(&p->d[1], 1);
			} else if (cqe->res < 0)
				fprintf(stderr, "accept: %s\n",
				    strerror(-cqe->res));
			u_accept(lfd);
		}
		io_uring_cq_advance(&ring, n);
	}
	io_uring_queue_exit(&ring);
}

int
main(int argc, char **argv)
{
	struct sigaction sa;
	int lfd, lport, uport;

	if (argc != 4 || (lport = atoi(argv[2])) <= 0 || lport > 65535 ||
	    (uport = atoi(argv[3])) <= 0 || uport > 65535) {
		fprintf(stderr, "usage: uring-relay epoll|uring|uring-sqpoll "
		    "LISTEN_PORT UPSTREAM_PORT\n");
		return 2;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;	/* no SA_RESTART: the wait returns */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	upstream = loopback(uport);
	lfd = listener(lport);
	if (strcmp(argv[1], "epoll") == 0)
		run_epoll(lfd);
	else if (strcmp(argv[1], "uring") == 0)
		run_uring(lfd, 0);
	else if (strcmp(argv[1], "uring-sqpoll") == 0)
		run_uring(lfd, 1);
	else {
		fprintf(stderr, "uring-relay: unknown engine %s\n", argv[1]);
		return 2;
	}
	close(lfd);
	return 0;
}
