/*
 * test_relay.c - unit tests for the relay loop (relay.c) and its two
 * backends (relay_splice.c, relay_copy.c).
 *
 * Each test drives zp_dir_pump() for one direction over real, connected,
 * non-blocking TCP sockets on 127.0.0.1:
 *
 *	src_peer ==TCP==> src_fd --[zp_dir d]--> dst_fd ==TCP==> dst_peer
 *
 * with a real event base, real events on both halves (so the read and
 * write events really are added and deleted), a real config and a real
 * pipe pool. Linked with -Wl,--wrap=splice,--wrap=recv,--wrap=send: the
 * wrappers pass through unless a test injects a fault, and count calls so
 * that a busy loop shows up as a number.
 *
 * The test code itself moves bytes with read(2)/write(2), which are not
 * wrapped, so injected faults only ever hit the code under test.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/types.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "core/config.h"
#include "relay/ctx.h"
#include "lib/pipepool.h"
#include "lib/pipepool_int.h"
#include "relay/relay.h"

#define KIB		1024
#define MIB		(1024 * 1024)
#define POOL_PIPE	(64 * KIB)
#define BUDGET		(256 * KIB)
#define SMALL_SOCKBUF	(16 * KIB)
#define STALL_MS	2000	/* no event for this long: a lost wake-up */

ssize_t	__real_splice(int, loff_t *, int, loff_t *, size_t, unsigned int);
ssize_t	__wrap_splice(int, loff_t *, int, loff_t *, size_t, unsigned int);
ssize_t	__real_recv(int, void *, size_t, int);
ssize_t	__wrap_recv(int, void *, size_t, int);
ssize_t	__real_send(int, const void *, size_t, int);
ssize_t	__wrap_send(int, const void *, size_t, int);

/* ---- fault injection ---------------------------------------------- */

/*
 * One wrapped operation. After `pass` calls went through, the next
 * `nfail` calls (-1: all of them) fail with `err`; then calls pass again.
 * pass == -1 disables the fault.
 */
struct fault {
	int	 pass;
	int	 nfail;
	int	 err;
	int	 calls;		/* every call seen */
	int	 failed;	/* failures injected */
	size_t	 maxlen;	/* largest length asked for */
	size_t	 moved;		/* bytes moved by the real calls */
	int	 shorts;	/* real calls that moved less than asked */
	size_t	 clamp;		/* > 0: the real call gets at most this */
};

static struct {
	struct fault	fill;	/* splice socket -> pipe */
	struct fault	flush;	/* splice pipe -> socket */
	struct fault	recv;
	struct fault	send;
} inj;

static void
fault_reset(void)
{
	memset(&inj, 0, sizeof(inj));
	inj.fill.pass = inj.flush.pass = inj.recv.pass = inj.send.pass = -1;
}

/* From now on, after `pass` more good calls, fail `nfail` calls with err. */
static void
fault_set(struct fault *f, int pass, int nfail, int err)
{
	f->pass = f->calls + pass;
	f->nfail = nfail;
	f->err = err;
	f->failed = 0;
}

static void
fault_clear(struct fault *f)
{
	f->pass = -1;
}

/* Count the call; return 1 (errno set) when this one must fail. */
static int
fault_hit(struct fault *f, size_t len)
{
	f->calls++;
	if (len > f->maxlen)
		f->maxlen = len;
	if (f->pass < 0 || f->calls <= f->pass)
		return 0;
	if (f->nfail >= 0 && f->failed >= f->nfail)
		return 0;
	f->failed++;
	errno = f->err;
	return 1;
}

static void
fault_count(struct fault *f, ssize_t n, size_t len)
{
	if (n > 0)
		f->moved += (size_t)n;
	if (n > 0 && (size_t)n < len)
		f->shorts++;
}

/* All wrapped calls so far. */
static int
syscalls(void)
{
	return inj.fill.calls + inj.flush.calls + inj.recv.calls +
	    inj.send.calls;
}

ssize_t
__wrap_splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out,
    size_t len, unsigned int flags)
{
	struct stat	 st;
	struct fault	*f;
	ssize_t		 n;

	/* Reading from a pipe is a flush; anything else is a fill. */
	if (fstat(fd_in, &st) == 0 && S_ISFIFO(st.st_mode))
		f = &inj.flush;
	else
		f = &inj.fill;
	if (len == 0)
		fail_msg("splice called with len 0 (reads as a false EOF)");
	if (flags & SPLICE_F_MORE)
		fail_msg("splice called with SPLICE_F_MORE");
	if (!(flags & SPLICE_F_NONBLOCK))
		fail_msg("splice called without SPLICE_F_NONBLOCK");
	if (fault_hit(f, len))
		return -1;
	n = __real_splice(fd_in, off_in, fd_out, off_out,
	    f->clamp > 0 && len > f->clamp ? f->clamp : len, flags);
	fault_count(f, n, len);
	return n;
}

ssize_t
__wrap_recv(int fd, void *buf, size_t len, int flags)
{
	ssize_t	n;

	if (fault_hit(&inj.recv, len))
		return -1;
	n = __real_recv(fd, buf, inj.recv.clamp > 0 && len > inj.recv.clamp ?
	    inj.recv.clamp : len, flags);
	fault_count(&inj.recv, n, len);
	return n;
}

ssize_t
__wrap_send(int fd, const void *buf, size_t len, int flags)
{
	ssize_t	n;

	if (!(flags & MSG_NOSIGNAL))
		fail_msg("send without MSG_NOSIGNAL");
	if (fault_hit(&inj.send, len))
		return -1;
	n = __real_send(fd, buf, inj.send.clamp > 0 && len > inj.send.clamp ?
	    inj.send.clamp : len, flags);
	fault_count(&inj.send, n, len);
	return n;
}

/* ---- sockets ------------------------------------------------------ */

static void
set_bufs(int fd, int opt, int force, int size)
{
	if (setsockopt(fd, SOL_SOCKET, force, &size, sizeof(size)) == -1 &&
	    setsockopt(fd, SOL_SOCKET, opt, &size, sizeof(size)) == -1)
		fail_msg("setsockopt buffer: %s", strerror(errno));
}

/* Wait for events on one fd; returns revents, 0 on timeout. */
static short
wait_fd(int fd, short events, int ms)
{
	struct pollfd	pfd = { .fd = fd, .events = events };
	int		rc;

	do {
		rc = poll(&pfd, 1, ms);
	} while (rc == -1 && errno == EINTR);
	if (rc == -1)
		fail_msg("poll: %s", strerror(errno));
	return rc == 0 ? 0 : pfd.revents;
}

/*
 * A connected TCP pair on 127.0.0.1, both ends non-blocking with
 * TCP_NODELAY (as zproxy sets them). *c is the connecting end, *a the
 * accepted one. bufsize > 0 sets the connecting end's send buffer and
 * the accepted end's receive buffer (set on the listener so that the
 * window is right from the handshake).
 */
static void
tcp_pair(int *c, int *a, int bufsize)
{
	struct sockaddr_in	sin;
	socklen_t		len = sizeof(sin);
	int			lfd, err = 0, on = 1;

	*c = *a = -1;
	if ((lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		fail_msg("socket: %s", strerror(errno));
	if (bufsize > 0)
		set_bufs(lfd, SO_RCVBUF, SO_RCVBUFFORCE, bufsize);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    listen(lfd, 1) == -1 ||
	    getsockname(lfd, (struct sockaddr *)&sin, &len) == -1)
		fail_msg("listener: %s", strerror(errno));
	if ((*c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0)) == -1)
		fail_msg("socket: %s", strerror(errno));
	if (bufsize > 0)
		set_bufs(*c, SO_SNDBUF, SO_SNDBUFFORCE, bufsize);
	if (connect(*c, (struct sockaddr *)&sin, sizeof(sin)) == -1 &&
	    errno != EINPROGRESS)
		fail_msg("connect: %s", strerror(errno));
	if (!(wait_fd(lfd, POLLIN, 5000) & POLLIN))
		fail_msg("accept timed out");
	if ((*a = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) ==
	    -1)
		fail_msg("accept4: %s", strerror(errno));
	close(lfd);
	if (!(wait_fd(*c, POLLOUT, 5000) & POLLOUT))
		fail_msg("connect timed out");
	len = sizeof(err);
	if (getsockopt(*c, SOL_SOCKET, SO_ERROR, &err, &len) == -1 || err != 0)
		fail_msg("connect: %s", strerror(err));
	setsockopt(*c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
}

/* Close with SO_LINGER {1, 0}: the peer gets an RST. */
static void
close_rst(int *fd)
{
	struct linger	l = { .l_onoff = 1, .l_linger = 0 };

	if (setsockopt(*fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) == -1)
		fail_msg("SO_LINGER: %s", strerror(errno));
	close(*fd);
	*fd = -1;
}

/* Bytes waiting in a socket's receive queue. */
static int
inq(int fd)
{
	int	n = 0;

	if (ioctl(fd, FIONREAD, &n) == -1)
		fail_msg("FIONREAD: %s", strerror(errno));
	return n;
}

/* ---- the fixture -------------------------------------------------- */

struct fx_opts {
	const struct zp_relay_ops	*ops;
	size_t				 pipe_size;	/* splice pool */
	size_t				 buffer_size;	/* copy / fallback */
	size_t				 budget;
	int				 src_bufs;	/* 0: defaults */
	int				 dst_bufs;
	int				 lazy;		/* copy until bulk */
	size_t				 splice_min;	/* 0: the default */
};

struct fx {
	struct event_base	*base;
	struct zp_config	 cfg;
	struct zp_ctx		 ctx;
	struct zp_log		 logst;	/* ctx.log */
	int			 src_peer, src_fd, dst_fd, dst_peer;
	struct zp_half		 src, dst;
	struct zp_dir		 d;

	unsigned char		*tx;		/* what src_peer sends */
	size_t			 txlen, sent;
	size_t			 feed_chunk;	/* bytes per write(2) */
	int			 tx_fin;	/* shut src_peer after tx */
	int			 fin_sent;
	size_t			 rcvd;		/* checked bytes at dst_peer */
	int			 peer_eof;	/* dst_peer read 0 */
	size_t			 read_chunk;	/* event loop: per callback */

	int			 pump_cbs;	/* event loop: pumps run */
	int			 pump_rc;	/* OR of pump results */
	struct event		*peer_rev, *peer_wev, *watchdog;
	int			 timed_out;
};

static void	fx_pump_cb(evutil_socket_t, short, void *);
static void	fx_noop_cb(evutil_socket_t, short, void *);
static int	fx_teardown(void **);

/* A deterministic, non-repeating byte stream. */
static unsigned char
pat(size_t i)
{
	uint32_t	x = (uint32_t)i * 2654435761u;

	return (unsigned char)((x >> 24) ^ (i >> 16));
}

/* Give src_peer `len` bytes to send; fin: shut it down after them. */
static void
fx_data(struct fx *fx, size_t len, int fin)
{
	size_t	i;

	free(fx->tx);
	if ((fx->tx = malloc(len > 0 ? len : 1)) == NULL)
		fail_msg("malloc");
	for (i = 0; i < len; i++)
		fx->tx[i] = pat(i);
	fx->txlen = len;
	fx->sent = 0;
	fx->tx_fin = fin;
	fx->fin_sent = 0;
	fx->rcvd = 0;
	fx->peer_eof = 0;
}

/* A half with its two EV_PERSIST events, both off. */
static void
half_init(struct fx *fx, struct zp_half *h, int fd, int pumps_on_read)
{
	memset(h, 0, sizeof(*h));
	h->fd = fd;
	/*
	 * Of each half this direction uses one event (src: read, dst:
	 * write); the other belongs to the opposite direction.
	 */
	h->rev = event_new(fx->base, fd, EV_READ | EV_PERSIST,
	    pumps_on_read ? fx_pump_cb : fx_noop_cb, fx);
	h->wev = event_new(fx->base, fd, EV_WRITE | EV_PERSIST,
	    pumps_on_read ? fx_noop_cb : fx_pump_cb, fx);
	if (h->rev == NULL || h->wev == NULL)
		fail_msg("event_new");
}

/*
 * Build the fixture: event base, config, pool, two TCP pairs, two halves
 * and one direction src_fd -> dst_fd with the backend in o.
 */
static int
fx_setup(void **state, const struct fx_opts *o)
{
	struct fx	*fx;
	char		 err[256];
	int		 shortage;

	fault_reset();
	if ((fx = calloc(1, sizeof(*fx))) == NULL)
		return -1;
	fx->src_peer = fx->src_fd = fx->dst_fd = fx->dst_peer = -1;
	fx->d.pipe.rfd = fx->d.pipe.wfd = -1;
	*state = fx;

	if ((fx->base = event_base_new()) == NULL)
		goto fail;
	zp_config_init(&fx->cfg);
	if (o->buffer_size > 0)
		fx->cfg.buffer_size = o->buffer_size;
	fx->cfg.mode = o->ops == &zp_relay_copy && !o->lazy ? ZP_MODE_COPY :
	    ZP_MODE_SPLICE;
	if (o->splice_min > 0)
		fx->cfg.splice_min = o->splice_min;
	fx->ctx.base = fx->base;
	fx->ctx.cfg = &fx->cfg;
	fx->ctx.budget = o->budget > 0 ? o->budget : BUDGET;
	TAILQ_INIT(&fx->ctx.pairs);
	fx->ctx.log = &fx->logst;
	zp_log_init(fx->ctx.log, stderr, ZP_LOG_ERROR);
	/* Every fixture has a pool, as zproxy in splice mode does. */
	if ((fx->ctx.pool = zp_pipepool_new(o->pipe_size > 0 ? o->pipe_size :
	    POOL_PIPE, 4, 2, &shortage, err, sizeof(err))) == NULL) {
		fprintf(stderr, "setup: %s\n", err);
		goto fail;
	}

	tcp_pair(&fx->src_peer, &fx->src_fd, o->src_bufs);
	tcp_pair(&fx->dst_fd, &fx->dst_peer, o->dst_bufs);
	half_init(fx, &fx->src, fx->src_fd, 1);
	half_init(fx, &fx->dst, fx->dst_fd, 0);

	fx->d.src = &fx->src;
	fx->d.dst = &fx->dst;
	zp_dir_set_backend(&fx->d, o->ops);
	fx->d.lazy = o->lazy;
	fx->d.bufsize = fx->cfg.buffer_size;
	if (o->ops == &zp_relay_splice &&
	    zp_pipepool_get(fx->ctx.pool, &fx->d.pipe) == -1)
		goto fail;
	/* Relaying starts with the source's read event on, as in a pair. */
	zp_half_want_read(&fx->src, 1);
	fx->read_chunk = SIZE_MAX;
	fx->feed_chunk = SIZE_MAX;
	return 0;
fail:
	fx_teardown(state);
	*state = NULL;
	return -1;
}

/* Free everything: store, events before their fds, pool, base, config. */
static int
fx_teardown(void **state)
{
	struct fx	*fx = *state;

	if (fx == NULL)
		return 0;
	fault_reset();
	zp_dir_release(&fx->ctx, &fx->d);
	if (fx->src.rev != NULL)
		event_free(fx->src.rev);
	if (fx->src.wev != NULL)
		event_free(fx->src.wev);
	if (fx->dst.rev != NULL)
		event_free(fx->dst.rev);
	if (fx->dst.wev != NULL)
		event_free(fx->dst.wev);
	if (fx->peer_rev != NULL)
		event_free(fx->peer_rev);
	if (fx->peer_wev != NULL)
		event_free(fx->peer_wev);
	if (fx->watchdog != NULL)
		event_free(fx->watchdog);
	if (fx->src_peer != -1)
		close(fx->src_peer);
	if (fx->src_fd != -1)
		close(fx->src_fd);
	if (fx->dst_fd != -1)
		close(fx->dst_fd);
	if (fx->dst_peer != -1)
		close(fx->dst_peer);
	zp_pipepool_free(fx->ctx.pool);
	if (fx->base != NULL)
		event_base_free(fx->base);
	zp_config_free(&fx->cfg);
	free(fx->tx);
	free(fx);
	return 0;
}

/* The fixtures: backend, pipe and buffer sizes, budget, socket buffers. */
static const struct fx_opts o_splice = {
	.ops = &zp_relay_splice,
};
static const struct fx_opts o_splice_smalldst = {
	.ops = &zp_relay_splice, .dst_bufs = SMALL_SOCKBUF,
};
static const struct fx_opts o_splice_budget = {
	.ops = &zp_relay_splice, .pipe_size = MIB, .budget = 64 * KIB,
	.src_bufs = 4 * MIB,
};
static const struct fx_opts o_copy = {
	.ops = &zp_relay_copy,
};
static const struct fx_opts o_copy_smalldst = {
	.ops = &zp_relay_copy, .dst_bufs = SMALL_SOCKBUF,
};
static const struct fx_opts o_copy_small = {
	.ops = &zp_relay_copy, .buffer_size = KIB,
};
static const struct fx_opts o_copy_small_smalldst = {
	.ops = &zp_relay_copy, .buffer_size = KIB, .dst_bufs = SMALL_SOCKBUF,
};
static const struct fx_opts o_copy_budget = {
	.ops = &zp_relay_copy, .buffer_size = MIB, .budget = 64 * KIB,
	.src_bufs = 4 * MIB,
};

/* Lazy: copy until a read shows bulk, as a pair starts by default. */
static const struct fx_opts o_lazy = {
	.ops = &zp_relay_copy, .lazy = 1,
};
static const struct fx_opts o_lazy_smalldst = {
	.ops = &zp_relay_copy, .lazy = 1, .dst_bufs = SMALL_SOCKBUF,
};
static const struct fx_opts o_lazy_small = {
	.ops = &zp_relay_copy, .lazy = 1, .buffer_size = KIB,
};

static int
setup_lazy(void **state)
{
	return fx_setup(state, &o_lazy);
}

static int
setup_lazy_smalldst(void **state)
{
	return fx_setup(state, &o_lazy_smalldst);
}

static int
setup_lazy_small(void **state)
{
	return fx_setup(state, &o_lazy_small);
}

static int
setup_splice(void **state)
{
	return fx_setup(state, &o_splice);
}

static int
setup_splice_smalldst(void **state)
{
	return fx_setup(state, &o_splice_smalldst);
}

static int
setup_splice_budget(void **state)
{
	return fx_setup(state, &o_splice_budget);
}

static int
setup_copy(void **state)
{
	return fx_setup(state, &o_copy);
}

static int
setup_copy_smalldst(void **state)
{
	return fx_setup(state, &o_copy_smalldst);
}

static int
setup_copy_small(void **state)
{
	return fx_setup(state, &o_copy_small);
}

static int
setup_copy_small_smalldst(void **state)
{
	return fx_setup(state, &o_copy_small_smalldst);
}

static int
setup_copy_budget(void **state)
{
	return fx_setup(state, &o_copy_budget);
}

/* ---- driving the direction ---------------------------------------- */

/* The ron/won bits agree with what libevent has pending. */
static void
assert_events_match(const struct zp_half *h)
{
	int	r = event_pending(h->rev, EV_READ, NULL) != 0;
	int	w = event_pending(h->wev, EV_WRITE, NULL) != 0;

	if (r != (int)h->ron || w != (int)h->won)
		fail_msg("fd %d: ron=%u but read pending=%d, won=%u but write "
		    "pending=%d", h->fd, h->ron, r, h->won, w);
}

/*
 * Would the destination's write event fire now? What the pair's write
 * callback does before it pumps, pump() does when the answer is yes.
 */
static int
dst_writable(const struct fx *fx)
{
	struct pollfd	pfd = { .fd = fx->dst_fd, .events = POLLOUT };

	return fx->dst.won && poll(&pfd, 1, 0) == 1 &&
	    (pfd.revents & POLLOUT);
}

/*
 * One pump with the context's budget, as the event loop would run it:
 * with dst->wblocked cleared when the write event would have fired.
 * Check the event bookkeeping.
 */
static int
pump(struct fx *fx)
{
	int	rc;

	if (dst_writable(fx))
		fx->dst.wblocked = 0;
	rc = zp_dir_pump(&fx->ctx, &fx->d, fx->ctx.budget);
	fx->pump_rc |= rc;
	assert_events_match(&fx->src);
	assert_events_match(&fx->dst);
	/*
	 * A done direction reads no more, unless its destination died: then
	 * it reads its source to the end and throws the bytes away.
	 */
	if (fx->d.done) {
		assert_int_equal(fx->src.ron, fx->dst.dead && !fx->d.eof);
		assert_false(fx->dst.won);
	}
	return rc;
}

/* src_peer sends what it can of tx (then its FIN). Returns bytes sent. */
static size_t
feed(struct fx *fx)
{
	size_t	total = 0, want;
	ssize_t	n;

	while (fx->sent < fx->txlen) {
		want = fx->txlen - fx->sent;
		if (want > fx->feed_chunk)
			want = fx->feed_chunk;
		n = write(fx->src_peer, fx->tx + fx->sent, want);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			fail_msg("feed: %s", strerror(errno));
		}
		fx->sent += (size_t)n;
		total += (size_t)n;
	}
	if (fx->sent == fx->txlen && fx->tx_fin && !fx->fin_sent) {
		if (shutdown(fx->src_peer, SHUT_WR) == -1)
			fail_msg("shutdown src_peer: %s", strerror(errno));
		fx->fin_sent = 1;
	}
	return total;
}

/*
 * dst_peer reads up to max bytes, checking each against tx. Returns bytes
 * read; sets peer_eof on a 0 read.
 */
static size_t
drain(struct fx *fx, size_t max)
{
	unsigned char	buf[16 * KIB];
	size_t		total = 0, i, want;
	ssize_t		n;

	while (total < max && !fx->peer_eof) {
		want = max - total < sizeof(buf) ? max - total : sizeof(buf);
		n = read(fx->dst_peer, buf, want);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			fail_msg("drain: %s", strerror(errno));
		}
		if (n == 0) {
			fx->peer_eof = 1;
			break;
		}
		if (fx->rcvd + (size_t)n > fx->txlen)
			fail_msg("dst_peer got %zu bytes, more than the %zu sent",
			    fx->rcvd + (size_t)n, fx->txlen);
		if (memcmp(buf, fx->tx + fx->rcvd, (size_t)n) != 0) {
			for (i = 0; buf[i] == fx->tx[fx->rcvd + i]; i++)
				;
			fail_msg("dst_peer: wrong byte at offset %zu",
			    fx->rcvd + i);
		}
		fx->rcvd += (size_t)n;
		total += (size_t)n;
	}
	return total;
}

/* Wait up to ms for dst_peer to have data (or EOF), then drain it. */
static size_t
drain_wait(struct fx *fx, int ms)
{
	wait_fd(fx->dst_peer, POLLIN, ms);
	return drain(fx, SIZE_MAX);
}

/* Wait until src_fd has `n` bytes queued (loopback is fast, but async). */
static void
wait_inq(struct fx *fx, int n)
{
	int	i;

	for (i = 0; i < 500 && inq(fx->src_fd) < n; i++)
		usleep(2000);
	if (inq(fx->src_fd) < n)
		fail_msg("src_fd has %d bytes queued, expected %d",
		    inq(fx->src_fd), n);
}

/* What a pump can change; equal before and after: the pump was idle. */
struct snap {
	uint64_t	bytes;
	size_t		pending;
	int		flags;
};

/* The direction's observable state now. */
static struct snap
snap(const struct fx *fx)
{
	struct snap	sn;

	sn.bytes = fx->d.bytes;
	sn.pending = fx->d.ops->pending(&fx->d);
	sn.flags = fx->d.full | fx->d.eof << 1 | fx->d.done << 2 |
	    fx->src.ron << 3 | fx->dst.won << 4 | fx->src.dead << 5 |
	    fx->dst.dead << 6;
	return sn;
}

/*
 * Run the transfer as an event loop would: pump only when src is
 * readable with its read event on, or dst writable with its write event
 * on. Finishes when dst_peer has every byte (and the EOF if one was
 * sent) or, with until_done, when d->done too. A wait of STALL_MS with
 * nothing ready while work remains is a lost wake-up, and many pumps in
 * a row that change nothing are a busy loop: both fail the test.
 */
static void
run(struct fx *fx, int until_done)
{
	struct pollfd	pfd[4];
	struct snap	a, b;
	int		i, rc, iter, idle = 0;

	for (iter = 0; iter < 1000000; iter++) {
		feed(fx);
		drain(fx, fx->read_chunk);
		if (fx->rcvd == fx->txlen && (!fx->tx_fin || fx->peer_eof) &&
		    (!until_done || fx->d.done))
			return;
		memset(pfd, 0, sizeof(pfd));
		pfd[0].fd = fx->src.ron ? fx->src_fd : -1;
		pfd[0].events = POLLIN;
		pfd[1].fd = fx->dst.won ? fx->dst_fd : -1;
		pfd[1].events = POLLOUT;
		pfd[2].fd = fx->dst_peer;
		pfd[2].events = POLLIN;
		pfd[3].fd = fx->sent < fx->txlen ? fx->src_peer : -1;
		pfd[3].events = POLLOUT;
		do {
			rc = poll(pfd, 4, STALL_MS);
		} while (rc == -1 && errno == EINTR);
		if (rc == 0)
			fail_msg("stalled: sent %zu/%zu rcvd %zu bytes=%llu "
			    "pipe.data=%zu len=%zu full=%u eof=%u done=%u ron=%u "
			    "won=%u", fx->sent, fx->txlen, fx->rcvd,
			    (unsigned long long)fx->d.bytes, fx->d.pipe.data,
			    fx->d.len, fx->d.full, fx->d.eof, fx->d.done,
			    fx->src.ron, fx->dst.won);
		for (i = 0; i < 2; i++)
			if (pfd[i].revents != 0)
				break;
		if (i < 2) {
			a = snap(fx);
			pump(fx);
			b = snap(fx);
			if (a.bytes == b.bytes && a.pending == b.pending &&
			    a.flags == b.flags) {
				if (++idle > 1000)
					fail_msg("busy loop: 1000 pumps in a row "
					    "did nothing (ron=%u won=%u "
					    "full=%u)", fx->src.ron,
					    fx->dst.won, fx->d.full);
			} else
				idle = 0;
		}
	}
	fail_msg("run: too many iterations");
}

/* Pump until d->done (with dst_peer drained meanwhile), at most n times. */
static void
pump_until_done(struct fx *fx, int n)
{
	int	i;

	for (i = 0; i < n && !fx->d.done; i++) {
		wait_fd(fx->src_fd, POLLIN, 50);
		pump(fx);
		if (fx->dst_peer != -1)
			drain(fx, SIZE_MAX);
	}
	if (!fx->d.done)
		fail_msg("not done after %d pumps", n);
}

/* Read dst_peer to its EOF (at most ms), checking every byte. */
static void
drain_to_eof(struct fx *fx, int ms)
{
	int	i;

	for (i = 0; i < ms / 10 && !fx->peer_eof; i++)
		drain_wait(fx, 10);
	if (!fx->peer_eof)
		fail_msg("dst_peer saw no EOF (rcvd %zu of %zu)", fx->rcvd,
		    fx->txlen);
}

/* Everything arrived, in order, and the direction's counters agree. */
static void
assert_all_delivered(struct fx *fx)
{
	assert_int_equal(fx->rcvd, fx->txlen);
	assert_int_equal(fx->d.bytes, fx->txlen);
	assert_int_equal(fx->d.pipe.data, 0);
	assert_int_equal(fx->d.len, 0);
}

/* ---- event-loop callbacks ----------------------------------------- */

static void
fx_pump_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx	*fx = arg;

	fx->pump_cbs++;
	if (what & EV_WRITE)
		fx->dst.wblocked = 0;	/* as the pair's write callback does */
	fx->pump_rc |= zp_dir_pump(&fx->ctx, &fx->d, fx->ctx.budget);
	if (fx->rcvd == fx->txlen && fx->peer_eof && fx->d.done)
		event_base_loopbreak(fx->base);
}

static void
fx_noop_cb(evutil_socket_t fd, short what, void *arg)
{
	fail_msg("an event of the other direction fired (fd %d)", (int)fd);
}

static void
fx_peer_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx	*fx = arg;

	drain(fx, fx->read_chunk);
	if (fx->peer_eof)
		event_del(fx->peer_rev);
	if (fx->rcvd == fx->txlen && fx->peer_eof && fx->d.done)
		event_base_loopbreak(fx->base);
}

static void
fx_peer_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx	*fx = arg;

	feed(fx);
	if (fx->sent == fx->txlen)
		event_del(fx->peer_wev);
}

static void
fx_watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	struct fx	*fx = arg;

	fx->timed_out = 1;
	event_base_loopbreak(fx->base);
}

/*
 * Set up the peers' events: dst_peer reads (read_chunk per callback),
 * src_peer writes tx then its FIN. reader: start dst_peer's reading now.
 */
static void
fx_peer_events(struct fx *fx, int reader)
{
	fx->peer_rev = event_new(fx->base, fx->dst_peer, EV_READ | EV_PERSIST,
	    fx_peer_read_cb, fx);
	fx->peer_wev = event_new(fx->base, fx->src_peer, EV_WRITE | EV_PERSIST,
	    fx_peer_write_cb, fx);
	fx->watchdog = evtimer_new(fx->base, fx_watchdog_cb, fx);
	assert_non_null(fx->peer_rev);
	assert_non_null(fx->peer_wev);
	assert_non_null(fx->watchdog);
	if (reader)
		event_add(fx->peer_rev, NULL);
	event_add(fx->peer_wev, NULL);
}

/* Run the event loop for at most ms. */
static void
fx_loop(struct fx *fx, int ms)
{
	struct timeval	tv = { ms / 1000, (ms % 1000) * 1000 };

	fx->timed_out = 0;
	evtimer_add(fx->watchdog, &tv);
	event_base_dispatch(fx->base);
	evtimer_del(fx->watchdog);
}

/* ---- both backends ------------------------------------------------ */

/*
 * Bytes written into src arrive at dst byte-exact, d->bytes counts them,
 * the store is empty at the end, and the events are back to "waiting for
 * input": read on, write off.
 */
static void
test_transfer(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;

	fx_data(fx, 3 * MIB + 12345, 0);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_ptr_equal(fx->d.ops, splicing ? &zp_relay_splice :
	    &zp_relay_copy);
	assert_false(fx->d.fellback);
	assert_false(fx->d.done);
	assert_false(fx->d.eof);
	assert_int_equal(fx->pump_rc, 0);
	/* Settle: one more pump with nothing to do. */
	pump(fx);
	assert_true(fx->src.ron);
	assert_false(fx->dst.won);
	assert_false(fx->d.full);
	if (splicing) {
		assert_true(inj.fill.moved == fx->txlen);
		assert_true(inj.flush.moved == fx->txlen);
		assert_int_equal(inj.recv.calls + inj.send.calls, 0);
	} else {
		assert_true(inj.recv.moved == fx->txlen);
		assert_true(inj.send.moved == fx->txlen);
		assert_int_equal(inj.fill.calls + inj.flush.calls, 0);
		assert_true(inj.recv.maxlen <= fx->d.bufsize);
	}
}

/*
 * Many small writes (1000 B segments with TCP_NODELAY fill a 64 KiB
 * pipe by slots, long before 64 KiB): the tail still arrives, no wake-up
 * is lost, and the FIN follows the last byte.
 */
static void
test_small_writes(void **state)
{
	struct fx	*fx = *state;

	fx->feed_chunk = 1000;
	fx_data(fx, 1000 * 1000 + 99, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->d.shut);
}

/*
 * EOF: once src_peer shuts down, every byte is flushed, then dst gets
 * SHUT_WR (dst_peer reads its data, then 0); d->eof, shut and done are
 * set, the events are off and the store is given back (pipe to the pool).
 */
static void
test_eof(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;
	int		 splicing = fx->d.ops == &zp_relay_splice;

	fx_data(fx, 200 * KIB + 7, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->d.eof);
	assert_true(fx->d.shut);
	assert_true(fx->d.done);
	assert_false(fx->src.dead);
	assert_false(fx->dst.dead);
	assert_int_equal(fx->pump_rc, 0);
	assert_false(fx->src.ron);
	assert_false(fx->dst.won);
	if (splicing) {
		assert_int_equal(fx->d.pipe.rfd, -1);
		assert_int_equal(fx->ctx.pool->nfree, nfree + 1);
		assert_int_equal(fx->ctx.pool->killed, 0);
	} else
		assert_null(fx->d.buf);

	/* Done is done: a pump does nothing, not even a syscall. */
	{
		int	calls = syscalls();

		assert_int_equal(pump(fx), 0);
		assert_int_equal(syscalls(), calls);
	}
}

/* EOF with nothing sent: the FIN is carried over at once. */
static void
test_eof_empty(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 0, 1);
	feed(fx);
	wait_fd(fx->src_fd, POLLIN, 1000);
	pump_until_done(fx, 10);
	drain_to_eof(fx, 2000);
	assert_int_equal(fx->rcvd, 0);
	assert_int_equal(fx->d.bytes, 0);
	assert_true(fx->d.shut);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * Backpressure: dst_peer does not read. Eventually the store fills (or a
 * lazy direction that saw bulk waits for its buffer to drain), the
 * source's read event goes off and the destination's write event is on
 * while bytes wait. A pump in that state costs at most a couple of
 * syscalls. Then dst_peer reads: every byte arrives, and the events go
 * back to read on, write off.
 */
static void
test_backpressure(void **state)
{
	struct fx	*fx = *state;
	struct snap	 a, b;
	int		 i, calls, idle = 0;

	fx_data(fx, 8 * MIB, 0);
	for (i = 0; i < 100000 && fx->src.ron; i++) {
		idle = feed(fx) == 0 ? idle + 1 : 0;
		wait_fd(fx->src_fd, POLLIN, idle > 0 ? 10 : 0);
		a = snap(fx);
		pump(fx);
		b = snap(fx);
		if (a.bytes != b.bytes || a.pending != b.pending)
			idle = 0;
		if (idle > 100)
			fail_msg("never full: sent %zu, bytes %llu, pending "
			    "%zu, ron %u, won %u", fx->sent,
			    (unsigned long long)fx->d.bytes, b.pending,
			    fx->src.ron, fx->dst.won);
	}
	assert_true(fx->d.full || (fx->d.lazy && fx->d.bulk));
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);
	assert_true(fx->d.ops->pending(&fx->d) > 0);

	/* The write event firing with dst still full: cheap, no change. */
	calls = syscalls();
	pump(fx);
	assert_true(syscalls() - calls <= 2);
	assert_true(fx->d.full || (fx->d.lazy && fx->d.bulk));
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);

	run(fx, 0);
	assert_all_delivered(fx);
	pump(fx);
	assert_true(fx->src.ron);
	assert_false(fx->dst.won);
	assert_false(fx->d.full);
}

/* src_peer sends the next n bytes of tx, and src_fd has them queued. */
static void
feed_n(struct fx *fx, size_t n)
{
	size_t	end = fx->txlen;

	fx->txlen = fx->sent + n < end ? fx->sent + n : end;
	feed(fx);
	fx->txlen = end;
	wait_inq(fx, (int)n);
}

/*
 * A destination that fell short is not written again until its write
 * event fires. A pump woken by the source only reads into the store: a
 * collector that reads slowly would otherwise cost a failed send or
 * splice on every wake-up of the source. Then the write event resumes
 * the flow, and every byte arrives in order.
 */
static void
test_blocked_dst_not_retried(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	int		 i, ins, outs;
	size_t		 pending;

	/* 2000 B a pass: below --splice-min, so a lazy direction stays lazy. */
	fx_data(fx, MIB, 0);
	for (i = 0; i < 2000 && !fx->dst.wblocked; i++) {
		feed_n(fx, 2000);
		pump(fx);
	}
	assert_true(fx->dst.wblocked);
	assert_true(fx->dst.won);
	assert_false(dst_writable(fx));
	assert_true(fx->src.ron);
	assert_false(fx->d.full);

	ins = in->calls;
	outs = out->calls;
	pending = fx->d.ops->pending(&fx->d);
	feed_n(fx, 2000);
	pump(fx);
	assert_int_equal(out->calls, outs);
	assert_true(in->calls > ins);
	assert_int_equal(fx->d.ops->pending(&fx->d), pending + 2000);
	assert_true(fx->dst.wblocked);
	assert_true(fx->dst.won);

	run(fx, 0);
	assert_all_delivered(fx);
	assert_false(fx->dst.wblocked);
	assert_false(fx->dst.won);
}

/*
 * Budget: with 64 KiB of budget and 1 MiB waiting in src, one pump
 * moves at most the budget out of src and leaves the read event on (the
 * level-triggered event brings it back); the whole MiB then goes in
 * budget-sized steps.
 */
static void
test_budget(void **state)
{
	struct fx	*fx = *state;
	uint64_t	 before, moved;
	int		 pumps = 0, i, q, last = -1;

	fx_data(fx, MIB, 0);
	for (i = 0; i < 200 && fx->sent < fx->txlen; i++) {
		feed(fx);
		wait_fd(fx->src_peer, POLLOUT, 10);
	}
	/* Let the queue settle: everything src_peer could send is there. */
	for (i = 0; i < 100 && (q = inq(fx->src_fd)) != last; i++) {
		last = q;
		usleep(10000);
	}
	/* Small socket buffers (not root?): shrink the budget to fit. */
	if (q < (int)(4 * fx->ctx.budget))
		fx->ctx.budget = (size_t)q / 4;
	assert_true(fx->ctx.budget >= 4096);
	if (fx->sent == MIB)
		assert_int_equal(q, MIB);

	pump(fx);
	moved = fx->d.bytes + fx->d.ops->pending(&fx->d);
	assert_true(moved > 0);
	assert_true(moved <= fx->ctx.budget);
	assert_int_equal(inq(fx->src_fd), q - (int)moved);
	assert_true(fx->src.ron);
	assert_false(fx->d.done);

	for (i = 0; i < 10000 && fx->rcvd < fx->txlen; i++) {
		feed(fx);
		before = fx->d.bytes + fx->d.ops->pending(&fx->d);
		pump(fx);
		pumps++;
		moved = fx->d.bytes + fx->d.ops->pending(&fx->d) - before;
		assert_true(moved <= fx->ctx.budget);
		drain_wait(fx, 1);
	}
	assert_all_delivered(fx);
	assert_true(pumps >= (int)(MIB / fx->ctx.budget) - 1);
}

/*
 * A direction whose destination is already dead (the other direction
 * saw it fail) drops what it holds and is done; from then on it reads
 * its source and throws the bytes away until EOF, so that the survivor
 * can finish sending and its receive queue stays empty (a close with
 * unread bytes would reset what is still queued for it).
 */
static void
test_dst_already_dead(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	int		 rc, i;

	/* Get bytes stuck in the store: the destination refuses them. */
	fx_data(fx, 5000, 0);
	feed(fx);
	wait_inq(fx, 5000);
	fault_set(splicing ? &inj.flush : &inj.send, 0, -1, EAGAIN);
	pump(fx);
	assert_int_equal(fx->d.ops->pending(&fx->d), 5000);
	assert_true(fx->dst.won);
	fault_reset();

	fx->dst.dead = 1;
	fx->dst.err = ECONNRESET;
	rc = pump(fx);
	assert_false(rc & ZP_PUMP_DEAD);	/* not news: already dead */
	assert_true(fx->d.done);
	assert_false(fx->d.shut);
	assert_int_equal(fx->d.ops->pending(&fx->d), 0);
	assert_int_equal(fx->d.bytes, 0);
	assert_true(fx->src.ron);		/* the source is read on */
	assert_false(fx->dst.won);
	if (splicing) {
		assert_int_equal(fx->d.pipe.rfd, -1);
		assert_int_equal(fx->ctx.pool->killed, 1);
	} else
		assert_null(fx->d.buf);

	/* What src_peer sends now is read and dropped, then its FIN. */
	fx_data(fx, 30000, 1);
	feed(fx);
	wait_inq(fx, 30000);
	for (i = 0; i < 20 && !fx->d.eof; i++) {
		wait_fd(fx->src_fd, POLLIN, 50);
		pump(fx);
	}
	assert_int_equal(inq(fx->src_fd), 0);
	assert_int_equal(fx->d.discarded, 30000);
	assert_true(fx->d.eof);
	assert_false(fx->src.ron);
	assert_int_equal(fx->d.bytes, 0);
}

/*
 * A direction whose source is already dead (a write to it failed)
 * delivers what it holds and what the source's receive queue still
 * holds, then shuts its destination: dst_peer sees every byte, then EOF.
 */
static void
test_src_already_dead(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	int		 fills;

	fx_data(fx, 8000, 0);
	fx->txlen = 5000;
	feed(fx);
	wait_inq(fx, 5000);
	fault_set(splicing ? &inj.flush : &inj.send, 0, -1, EAGAIN);
	pump(fx);
	assert_int_equal(fx->d.ops->pending(&fx->d), 5000);
	fault_reset();
	fx->txlen = 8000;
	feed(fx);
	wait_inq(fx, 3000);

	fx->src.dead = 1;
	fx->src.err = ECONNRESET;
	fills = in->calls;
	pump_until_done(fx, 20);
	assert_true(in->calls > fills);
	assert_true(fx->d.done);
	assert_true(fx->d.shut);
	assert_int_equal(fx->d.bytes, 8000);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/*
 * The order that lost bytes in 0.2: src_peer sent its bytes (its kernel
 * acknowledged them) and reset; the other direction's write to src failed
 * first (that write took the ECONNRESET), so src is dead before this
 * direction read anything. Linux keeps what it acknowledged readable
 * after a reset: the direction reads it all and delivers it, then FIN.
 */
static void
test_src_dead_first_drains_rst(void **state)
{
	struct fx	*fx = *state;
	char		 b = 'x';
	ssize_t		 n;
	int		 i;

	fx_data(fx, 60000, 0);
	feed(fx);
	wait_inq(fx, 60000);
	close_rst(&fx->src_peer);
	wait_fd(fx->src_fd, POLLERR | POLLHUP, 1000);
	/* The other direction writes to src and fails: src is dead. */
	for (i = 0; i < 10; i++) {
		n = write(fx->src_fd, &b, 1);
		if (n == -1)
			break;
	}
	assert_true(n == -1 && (errno == ECONNRESET || errno == EPIPE));
	fx->src.dead = 1;
	fx->src.err = errno;
	pump_until_done(fx, 50);
	assert_true(fx->d.shut);
	assert_int_equal(fx->d.bytes, 60000);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/*
 * An error reading the source mid-stream (ECONNRESET after some bytes):
 * ZP_PUMP_DEAD, src dead with its errno, and the bytes already held
 * still reach dst, followed by its FIN; then the direction is done.
 */
static void
test_src_reset_midstream(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	size_t		 nfree = fx->ctx.pool->nfree;
	int		 rc;

	/* 700 bytes move into the store; dst says "later". */
	fx_data(fx, 700, 0);
	feed(fx);
	wait_inq(fx, 700);
	fault_set(out, 0, -1, EAGAIN);
	assert_int_equal(pump(fx), 0);
	assert_int_equal(fx->d.ops->pending(&fx->d), 700);

	/* Then the source is reset, and dst takes bytes again. */
	fault_clear(out);
	fault_set(in, 0, 1, ECONNRESET);
	rc = pump(fx);
	assert_true(rc & ZP_PUMP_DEAD);
	assert_true(fx->src.dead);
	assert_int_equal(fx->src.err, ECONNRESET);
	assert_false(fx->dst.dead);
	assert_true(fx->d.eof);
	assert_true(fx->d.shut);
	assert_true(fx->d.done);
	assert_false(fx->src.ron);
	assert_false(fx->dst.won);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	if (splicing) {
		assert_int_equal(fx->ctx.pool->nfree, nfree + 1);
		assert_int_equal(fx->ctx.pool->killed, 0);
	}
}

/*
 * Same, with dst still full when the source dies: the pump reports the
 * death, keeps the bytes, and waits for dst's write event; the next pump
 * delivers them and shuts dst.
 */
static void
test_src_reset_dst_busy(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	int		 rc;

	fx_data(fx, 900, 0);
	feed(fx);
	wait_inq(fx, 900);
	fault_set(out, 0, -1, EAGAIN);
	pump(fx);
	fault_set(in, 0, 1, ECONNRESET);
	rc = pump(fx);
	assert_true(rc & ZP_PUMP_DEAD);
	assert_true(fx->src.dead);
	assert_int_equal(fx->src.err, ECONNRESET);
	assert_false(fx->d.done);
	assert_false(fx->d.shut);
	assert_int_equal(fx->d.ops->pending(&fx->d), 900);
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);

	fault_clear(out);
	rc = pump(fx);
	assert_false(rc & ZP_PUMP_DEAD);
	assert_true(fx->d.done);
	assert_true(fx->d.shut);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/* A real RST from src_peer after some data: the data, then dst's FIN. */
static void
test_src_real_rst(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 10000, 0);
	feed(fx);
	wait_inq(fx, 10000);
	close_rst(&fx->src_peer);
	wait_fd(fx->src_fd, POLLERR | POLLHUP, 1000);
	pump_until_done(fx, 20);
	assert_true(fx->pump_rc & ZP_PUMP_DEAD);
	assert_true(fx->src.dead);
	assert_int_equal(fx->src.err, ECONNRESET);
	assert_true(fx->d.shut);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}


/*
 * Shared body: writing dst fails with err (EPIPE, ECONNRESET). dst is
 * dead with that errno, the direction is done and drops its store (a
 * pipe holding bytes is killed, never reused), dst's events are off, src
 * is still read (to be dropped), and the pump says ZP_PUMP_DEAD. Nothing
 * was delivered, no FIN was tried.
 */
static void
dst_write_error(struct fx *fx, int err)
{
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	size_t		 nalive = fx->ctx.pool->nalive;
	int		 rc;

	fx_data(fx, 5000, 0);
	feed(fx);
	wait_inq(fx, 5000);
	fault_set(out, 0, -1, err);
	rc = pump(fx);
	assert_true(rc & ZP_PUMP_DEAD);
	assert_true(fx->dst.dead);
	assert_int_equal(fx->dst.err, err);
	assert_false(fx->src.dead);
	assert_true(fx->d.done);
	assert_false(fx->d.shut);
	assert_int_equal(fx->d.bytes, 0);
	assert_int_equal(fx->d.ops->pending(&fx->d), 0);
	assert_true(fx->src.ron);	/* read on, and dropped */
	assert_false(fx->dst.won);
	assert_false(fx->dst.ron);
	assert_int_equal(out->failed, 1);
	if (splicing) {
		assert_int_equal(fx->d.pipe.rfd, -1);
		assert_int_equal(fx->ctx.pool->killed, 1);
		assert_int_equal(fx->ctx.pool->nalive, nalive - 1);
	} else
		assert_null(fx->d.buf);
}

/* EPIPE writing dst: see dst_write_error. */
static void
test_dst_epipe(void **state)
{
	dst_write_error(*state, EPIPE);
}

/* ECONNRESET writing dst: see dst_write_error. */
static void
test_dst_econnreset(void **state)
{
	dst_write_error(*state, ECONNRESET);
}

/*
 * A real RST from dst_peer: the next write to dst fails (ECONNRESET, or
 * EPIPE), dst is dead, the direction done, the store dropped - without
 * a SIGPIPE killing anyone (splice cannot pass MSG_NOSIGNAL; main()
 * ignores SIGPIPE as zproxy does).
 */
static void
test_dst_real_rst(void **state)
{
	struct fx	*fx = *state;

	close_rst(&fx->dst_peer);
	wait_fd(fx->dst_fd, POLLIN, 1000);
	fx_data(fx, 10000, 0);
	feed(fx);
	wait_inq(fx, 10000);
	pump_until_done(fx, 20);
	assert_true(fx->pump_rc & ZP_PUMP_DEAD);
	assert_true(fx->dst.dead);
	assert_true(fx->dst.err == ECONNRESET || fx->dst.err == EPIPE);
	assert_false(fx->src.dead);
	assert_int_equal(fx->d.ops->pending(&fx->d), 0);
	assert_int_equal(fx->d.pipe.rfd, -1);
	assert_null(fx->d.buf);
}

/*
 * EAGAIN from the source with nothing stored means "socket empty": the
 * pump asks once, not again, leaves the read event on and is not full.
 */
static void
test_src_eagain(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	int		 calls;

	fx_data(fx, 3000, 0);
	feed(fx);
	wait_inq(fx, 3000);
	fault_set(in, 0, 1, EAGAIN);
	calls = syscalls();
	assert_int_equal(pump(fx), 0);
	assert_int_equal(syscalls() - calls, 1);
	assert_int_equal(fx->d.bytes, 0);
	assert_false(fx->d.full);
	assert_true(fx->src.ron);
	assert_false(fx->dst.won);

	/* The read event fires again: now the bytes move. */
	pump(fx);
	drain_wait(fx, 1000);
	assert_all_delivered(fx);
}

/* EINTR anywhere is retried, never taken for an error. */
static void
test_eintr(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	struct fault	*out = splicing ? &inj.flush : &inj.send;

	fx_data(fx, 70000, 1);
	feed(fx);
	wait_inq(fx, 1);
	fault_set(in, 0, 1, EINTR);
	fault_set(out, 0, 1, EINTR);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_int_equal(in->failed, 1);
	assert_int_equal(out->failed, 1);
	assert_int_equal(fx->pump_rc, 0);
	assert_false(fx->src.dead);
	assert_false(fx->dst.dead);
	assert_all_delivered(fx);
}

/*
 * Partial writes to dst (the wrapper hands the kernel at most 333 bytes
 * a time): the rest stays in the store, what comes next goes in behind
 * it (the copy buffer compacts), order is kept and the copy buffer's
 * bounds hold.
 */
static void
test_partial_flush(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	int		 i;

	out->clamp = 333;
	fx_data(fx, 200 * KIB + 1, 1);
	for (i = 0; i < 100000 && !fx->d.done; i++) {
		feed(fx);
		pump(fx);
		assert_true(fx->d.len <= fx->d.bufsize);
		assert_true(fx->d.off + fx->d.len <= fx->d.bufsize);
		drain(fx, SIZE_MAX);
	}
	assert_true(fx->d.done);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(out->shorts > 0);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * One short write is enough to mark dst blocked (no EAGAIN needed): the
 * pump that fell short writes no more in that pass, and a pump woken by
 * the source while dst is blocked only reads into the store, with no
 * write at all, until dst's write event clears wblocked. Then every
 * byte arrives in order.
 */
static void
test_short_write_blocks(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	struct fault	*in = splicing ? &inj.fill : &inj.recv;
	struct fault	*out = splicing ? &inj.flush : &inj.send;
	int		 ins, outs;

	out->clamp = 333;
	fx_data(fx, 4000, 0);
	feed_n(fx, 2000);
	pump(fx);
	assert_int_equal(out->calls, 1);
	assert_int_equal(out->shorts, 1);
	assert_int_equal(fx->d.bytes, 333);
	assert_int_equal(fx->d.ops->pending(&fx->d), 2000 - 333);
	assert_true(fx->dst.wblocked);
	assert_true(fx->dst.won);

	/* The source's read event, not dst's write event, runs the pump. */
	ins = in->calls;
	outs = out->calls;
	feed_n(fx, 2000);
	zp_dir_pump(&fx->ctx, &fx->d, fx->ctx.budget);
	assert_true(in->calls > ins);
	assert_int_equal(out->calls, outs);
	assert_int_equal(fx->d.bytes, 333);
	assert_int_equal(fx->d.ops->pending(&fx->d), 4000 - 333);
	assert_true(fx->dst.wblocked);
	assert_true(fx->dst.won);

	out->clamp = 0;
	run(fx, 0);
	assert_all_delivered(fx);
	assert_false(fx->dst.wblocked);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * Short reads from src (the wrapper asks the kernel for at most 100
 * bytes) are no EOF and no error: everything arrives.
 */
static void
test_short_fill(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;

	(splicing ? &inj.fill : &inj.recv)->clamp = 100;
	fx_data(fx, 50 * KIB + 3, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * Through a real event loop (libevent callbacks do the pumping), with a
 * reader taking 4 KiB at a time: 2 MiB and the FIN arrive, no wake-up
 * lost.
 */
static void
test_evloop_slow_reader(void **state)
{
	struct fx	*fx = *state;

	fx->read_chunk = 4 * KIB;
	fx_data(fx, 2 * MIB, 1);
	fx_peer_events(fx, 1);
	fx_loop(fx, 30000);
	assert_false(fx->timed_out);
	assert_true(fx->peer_eof);
	assert_true(fx->d.done);
	assert_all_delivered(fx);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * The busy-loop trap: with the reader stalled, once the store and the
 * socket buffers are full nothing may fire any more (the read event is
 * off while the store is full, the write event waits for room). Then the
 * reader wakes up and everything arrives.
 */
static void
test_evloop_stalled_reader(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 16 * MIB, 1);
	fx_peer_events(fx, 0);
	fx_loop(fx, 500);		/* fill everything up */
	assert_true(fx->timed_out);
	assert_true(fx->sent < fx->txlen);
	fx->pump_cbs = 0;
	fx_loop(fx, 300);		/* a stall: count the wake-ups */
	assert_true(fx->timed_out);
	if (fx->pump_cbs > 3)
		fail_msg("%d pump callbacks during a 300 ms stall", fx->pump_cbs);
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);

	event_add(fx->peer_rev, NULL);
	fx_loop(fx, 60000);
	assert_false(fx->timed_out);
	assert_all_delivered(fx);
	assert_true(fx->peer_eof);
}

/* ---- splice only -------------------------------------------------- */

/* Start the direction over as a fresh splice direction with a new pipe. */
static void
dir_restart_splice(struct fx *fx)
{
	zp_dir_release(&fx->ctx, &fx->d);
	memset(&fx->d, 0, sizeof(fx->d));
	fx->d.src = &fx->src;
	fx->d.dst = &fx->dst;
	fx->d.ops = &zp_relay_splice;
	fx->d.bufsize = fx->cfg.buffer_size;
	fx->d.pipe.rfd = fx->d.pipe.wfd = -1;
	if (zp_pipepool_get(fx->ctx.pool, &fx->d.pipe) == -1)
		fail_msg("no pipe");
	zp_half_want_read(&fx->src, 1);
	zp_half_want_write(&fx->dst, 0);
}

/*
 * "EAGAIN while the pipe holds bytes means full" (HAProxy's rule): with
 * bytes in the pipe that dst will not take, a socket->pipe EAGAIN sets
 * d->full and turns the read event off, in two syscalls, no loop. The
 * write event firing while dst is still full costs one. When dst takes
 * the bytes, full clears and reading resumes.
 */
static void
test_splice_full_pipe(void **state)
{
	struct fx	*fx = *state;
	int		 calls;

	fx_data(fx, 8000, 0);
	feed(fx);
	wait_inq(fx, 8000);
	fault_set(&inj.flush, 0, -1, EAGAIN);
	pump(fx);
	assert_int_equal(fx->d.pipe.data, 8000);
	assert_true(fx->dst.won);

	fault_set(&inj.fill, 0, -1, EAGAIN);
	calls = syscalls();
	assert_int_equal(pump(fx), 0);
	assert_true(syscalls() - calls <= 2);
	assert_true(fx->d.full);
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);
	assert_int_equal(fx->d.pipe.data, 8000);

	calls = syscalls();
	pump(fx);
	assert_int_equal(syscalls() - calls, 1);
	assert_true(fx->d.full);

	fault_clear(&inj.fill);
	fault_clear(&inj.flush);
	calls = syscalls();
	pump(fx);
	assert_true(syscalls() - calls <= 3);
	assert_false(fx->d.full);
	assert_true(fx->src.ron);
	assert_false(fx->dst.won);
	drain_wait(fx, 1000);
	assert_all_delivered(fx);
}

/*
 * EINVAL on the very first splice (nothing moved yet): ZP_PUMP_FELLBACK,
 * the direction now copies (ops, fellback, buffer size from the config),
 * its pipe went back to the pool empty, splice is never called again,
 * and the bytes arrive byte-exact by recv/send - starting in that pump.
 */
static void
test_splice_fallback(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;
	int		 rc;

	fx_data(fx, 300 * KIB, 1);
	feed(fx);
	wait_inq(fx, 1);
	fault_set(&inj.fill, 0, 1, EINVAL);
	rc = pump(fx);
	assert_true(rc & ZP_PUMP_FELLBACK);
	assert_false(rc & ZP_PUMP_DEAD);
	assert_ptr_equal(fx->d.ops, &zp_relay_copy);
	assert_true(fx->d.fellback);
	assert_int_equal(fx->d.bufsize, fx->cfg.buffer_size);
	assert_int_equal(fx->d.pipe.rfd, -1);
	assert_int_equal(fx->d.pipe.wfd, -1);
	assert_int_equal(fx->d.pipe.data, 0);
	assert_int_equal(fx->ctx.pool->nfree, nfree + 1);
	assert_int_equal(fx->ctx.pool->killed, 0);
	assert_false(fx->src.dead);
	assert_int_equal(inj.fill.calls, 1);
	assert_int_equal(inj.flush.calls, 0);
	assert_true(inj.recv.calls >= 1);
	assert_true(fx->d.bytes > 0);

	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_int_equal(inj.fill.calls + inj.flush.calls, 1);
	assert_true(fx->d.shut);
}

/* Every errno that means "cannot splice these sockets" falls back too. */
static void
test_splice_fallback_errnos(void **state)
{
	static const int errs[] = { ENOSYS, EPERM, EBADF, EOPNOTSUPP };
	struct fx	*fx = *state;
	size_t		 i;
	int		 rc;

	for (i = 0; i < sizeof(errs) / sizeof(errs[0]); i++) {
		dir_restart_splice(fx);
		fx_data(fx, 1000 + i, 0);
		feed(fx);
		wait_inq(fx, (int)fx->txlen);
		fault_set(&inj.fill, 0, 1, errs[i]);
		rc = pump(fx);
		if (!(rc & ZP_PUMP_FELLBACK))
			fail_msg("%s: no fallback", strerror(errs[i]));
		assert_false(rc & ZP_PUMP_DEAD);
		assert_ptr_equal(fx->d.ops, &zp_relay_copy);
		assert_false(fx->src.dead);
		drain_wait(fx, 1000);
		assert_all_delivered(fx);
	}
}

/*
 * The same errno after bytes went through is no fallback (a direction
 * never holds bytes in two stores): it kills the source; what was
 * delivered stays delivered, and dst gets its FIN.
 */
static void
test_splice_einval_after_bytes(void **state)
{
	struct fx	*fx = *state;
	int		 rc;

	fx_data(fx, 1000, 0);
	feed(fx);
	wait_inq(fx, 1000);
	pump(fx);
	drain_wait(fx, 1000);
	assert_all_delivered(fx);

	fx_data(fx, 500, 0);
	feed(fx);
	wait_inq(fx, 500);
	fault_set(&inj.fill, 0, 1, EINVAL);
	rc = pump(fx);
	assert_false(rc & ZP_PUMP_FELLBACK);
	assert_true(rc & ZP_PUMP_DEAD);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_false(fx->d.fellback);
	assert_true(fx->src.dead);
	assert_int_equal(fx->src.err, EINVAL);
	assert_true(fx->d.done);
	assert_true(fx->d.shut);
	drain_to_eof(fx, 2000);
	assert_int_equal(fx->rcvd, 0);
	assert_int_equal(fx->d.bytes, 1000);
}

/*
 * The same errno while the pipe holds bytes dst has not taken yet, with
 * nothing spliced out so far: no fallback either. Falling back would
 * drop the pipe with its bytes (or, kept, let copied bytes pass them).
 * The source dies (ZP_PUMP_DEAD, its errno kept), the pipe's bytes reach
 * dst in order, then the FIN; the pipe goes back to the pool empty, and
 * what src held behind the error is never read.
 */
static void
test_splice_einval_pipe_holds(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;
	int		 rc;

	fx_data(fx, 8000, 0);
	feed_n(fx, 5000);
	fault_set(&inj.flush, 0, -1, EAGAIN);
	pump(fx);
	assert_int_equal(fx->d.pipe.data, 5000);
	assert_int_equal(fx->d.spliced, 0);
	assert_true(fx->dst.won);

	feed_n(fx, 3000);
	fault_clear(&inj.flush);
	fault_set(&inj.fill, 0, 1, EINVAL);
	rc = pump(fx);
	assert_false(rc & ZP_PUMP_FELLBACK);
	assert_true(rc & ZP_PUMP_DEAD);
	assert_int_equal(inj.fill.failed, 1);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_false(fx->d.fellback);
	assert_true(fx->src.dead);
	assert_int_equal(fx->src.err, EINVAL);
	assert_true(fx->d.done);
	assert_true(fx->d.shut);
	assert_int_equal(fx->d.spliced, 5000);
	assert_int_equal(fx->ctx.pool->killed, 0);
	assert_int_equal(fx->ctx.pool->nfree, nfree + 1);
	assert_int_equal(inq(fx->src_fd), 3000);
	fx->txlen = 5000;
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/* ---- copy only ---------------------------------------------------- */

/*
 * A 1 KiB buffer and dst refusing bytes: the buffer fills (d->full), the
 * read event goes off and the write event on, within a few syscalls; a
 * write event with dst still full costs one send. Reads never ask for
 * more than the buffer holds.
 */
static void
test_copy_buffer_full(void **state)
{
	struct fx	*fx = *state;
	int		 calls;

	fx_data(fx, 5000, 0);
	feed(fx);
	wait_inq(fx, 5000);
	fault_set(&inj.send, 0, -1, EAGAIN);
	calls = syscalls();
	pump(fx);
	assert_true(syscalls() - calls <= 3);
	assert_true(fx->d.full);
	assert_int_equal(fx->d.len, KIB);
	assert_false(fx->src.ron);
	assert_true(fx->dst.won);

	calls = syscalls();
	pump(fx);
	assert_int_equal(syscalls() - calls, 1);
	assert_true(fx->d.full);

	fault_clear(&inj.send);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_true(inj.recv.maxlen <= KIB);
	pump(fx);
	assert_true(fx->src.ron);
	assert_false(fx->dst.won);
}

/*
 * An idle copy direction holds no buffer: once everything is delivered
 * and the connection is still open, the buffer is freed; the next bytes
 * get a new one and arrive intact.
 */
static void
test_copy_idle_frees_buffer(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 3000, 0);
	feed(fx);
	wait_inq(fx, 3000);
	pump(fx);
	assert_null(fx->d.buf);
	assert_int_equal(fx->d.len, 0);
	assert_false(fx->d.done);
	assert_true(fx->src.ron);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_null(fx->d.buf);
}

/* ---- lazy: copy until bulk, then splice --------------------------- */

/*
 * Writes below --splice-min, each read on its own, are copied: no pipe
 * leaves the pool, no splice call is made, and the direction stays lazy.
 * Then one read of 5000 bytes (above the default 4K, below the 64K
 * buffer) moves it to splice: a pipe is taken, every byte arrives in
 * order, and what follows goes through the pipe.
 */
static void
test_lazy_threshold(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree, sizes[] = { 100, 3000,
			    ZP_DEFAULT_SPLICE_MIN - 1 }, i;

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		fx_data(fx, sizes[i], 0);
		feed(fx);
		wait_inq(fx, (int)sizes[i]);
		pump(fx);
		drain_wait(fx, 2000);
		assert_all_delivered(fx);
		fx->d.bytes = 0;
		assert_ptr_equal(fx->d.ops, &zp_relay_copy);
		assert_true(fx->d.lazy);
		assert_false(fx->d.bulk);
		assert_int_equal(fx->d.pipe.rfd, -1);
		assert_int_equal(fx->ctx.pool->nfree, nfree);
		assert_null(fx->d.buf);		/* idle: trimmed */
	}
	assert_int_equal(inj.fill.calls + inj.flush.calls, 0);
	assert_int_equal(fx->d.spliced, 0);

	fx_data(fx, 5000, 0);
	feed(fx);
	wait_inq(fx, 5000);
	pump(fx);
	drain_wait(fx, 2000);
	assert_all_delivered(fx);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_false(fx->d.lazy);
	assert_false(fx->d.fellback);
	assert_true(fx->d.pipe.rfd >= 0);
	assert_int_equal(fx->ctx.pool->nfree, nfree - 1);
	assert_null(fx->d.buf);
	assert_int_equal(fx->d.spliced, 0);	/* those 5000 were copied */

	fx->d.bytes = 0;
	fx_data(fx, 300 * KIB + 1, 0);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_int_equal(fx->d.spliced, fx->txlen);
	assert_int_equal(inj.flush.moved, fx->txlen);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * A bulk transfer: the first read fills the buffer, so the rest goes
 * through the pipe. Every byte arrives in order; copied plus spliced is
 * the whole; only the first few reads were recv(2).
 */
static void
test_lazy_transfer(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 3 * MIB + 12345, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->d.shut);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_true(inj.recv.calls <= 4);
	assert_true(fx->d.spliced > 0);
	assert_int_equal(fx->d.spliced + inj.recv.moved, fx->txlen);
	assert_int_equal(inj.send.moved, inj.recv.moved);
	assert_int_equal(fx->pump_rc, 0);
	/* At the end the pipe went back to the pool, empty. */
	assert_int_equal(fx->d.pipe.rfd, -1);
	assert_int_equal(fx->ctx.pool->nfree, 2);
}

/*
 * Bulk arrives while dst takes nothing: the bytes wait in the buffer and
 * the direction does not switch to the pipe (a spliced byte would pass
 * the buffered ones). Once dst takes them, the switch happens and every
 * byte arrives in order.
 */
static void
test_lazy_waits_for_flush(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;

	fx_data(fx, 200 * KIB, 0);
	feed(fx);
	wait_inq(fx, 100 * KIB);
	fault_set(&inj.send, 0, -1, EAGAIN);
	pump(fx);
	pump(fx);
	assert_ptr_equal(fx->d.ops, &zp_relay_copy);
	assert_true(fx->d.bulk);
	assert_int_equal(fx->d.len, fx->d.bufsize);
	assert_int_equal(fx->ctx.pool->nfree, nfree);
	assert_int_equal(inj.fill.calls, 0);
	assert_true(fx->dst.won);
	/* No more reads into the buffer meanwhile: it must drain to switch. */
	assert_int_equal(inj.recv.calls, 1);
	assert_false(fx->src.ron);

	fault_clear(&inj.send);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_true(fx->d.spliced > 0);
	assert_int_equal(fx->d.spliced + inj.send.moved, fx->txlen);
}

/*
 * Bulk into a destination slower than the source (a small socket buffer
 * read 4 KiB at a time): with the buffer refilled on every pass it would
 * never be empty; the switch still happens, after at most one buffer
 * more, and every byte arrives in order.
 */
static void
test_lazy_slow_dst(void **state)
{
	struct fx	*fx = *state;

	fx->read_chunk = 4 * KIB;
	fx_data(fx, 2 * MIB, 0);
	run(fx, 0);
	assert_all_delivered(fx);
	assert_ptr_equal(fx->d.ops, &zp_relay_splice);
	assert_true(inj.recv.moved <= 2 * fx->d.bufsize);
	assert_int_equal(fx->d.spliced + inj.recv.moved, fx->txlen);
}

/*
 * No pipe to be had when bulk shows (the pool's cap is reached): the
 * direction says so once (ZP_PUMP_NOPIPE), copies for good and loses
 * nothing.
 */
static void
test_lazy_no_pipe(void **state)
{
	struct fx	*fx = *state;
	struct zp_pipe	 held[4];
	size_t		 n = 0, i;

	while (n < 4 && zp_pipepool_get(fx->ctx.pool, &held[n]) == 0)
		n++;
	assert_int_equal(fx->ctx.pool->nalive, fx->ctx.pool->cap);

	fx_data(fx, MIB + 3, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->pump_rc & ZP_PUMP_NOPIPE);
	assert_ptr_equal(fx->d.ops, &zp_relay_copy);
	assert_true(fx->d.fellback);
	assert_false(fx->d.lazy);
	assert_int_equal(fx->ctx.pool->shortage, ZP_PIPE_LIMIT);
	assert_int_equal(inj.fill.calls + inj.flush.calls, 0);
	assert_int_equal(fx->d.spliced, 0);
	for (i = 0; i < n; i++)
		zp_pipepool_put(fx->ctx.pool, &held[i]);
}

/*
 * The kernel refuses the first splice after the switch (EINVAL, as in a
 * sandbox): although bytes were copied before, nothing went through the
 * pipe, so the direction falls back to copy, gives its pipe back and
 * delivers every byte.
 */
static void
test_lazy_refused(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;

	fault_set(&inj.fill, 0, 1, EINVAL);
	fx_data(fx, MIB + 5, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->pump_rc & ZP_PUMP_FELLBACK);
	assert_false(fx->pump_rc & ZP_PUMP_DEAD);
	assert_int_equal(inj.fill.failed, 1);
	assert_ptr_equal(fx->d.ops, &zp_relay_copy);
	assert_true(fx->d.fellback);
	assert_int_equal(fx->d.spliced, 0);
	assert_int_equal(fx->ctx.pool->nfree, nfree);
}

/* A short exchange and its FIN: copied, no pipe ever taken. */
static void
test_lazy_short_eof(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree;

	fx_data(fx, 100, 1);
	run(fx, 1);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
	assert_true(fx->d.shut);
	assert_true(fx->d.done);
	assert_int_equal(fx->ctx.pool->nfree, nfree);
	assert_int_equal(fx->ctx.pool->created, 2);
	assert_int_equal(inj.fill.calls + inj.flush.calls, 0);
}

/*
 * 100 bytes and a FIN wait in src. Without a word on the FIN, one pump
 * moves the bytes and stops at the short read (the next read waits for
 * the next wake-up). With src->rdhup (the read event said EV_CLOSED),
 * the same pump reads on to the EOF and carries the FIN: one pass.
 */
/* Wait until src_fd has the peer's FIN queued (POLLRDHUP), at most 5 s. */
static void
wait_rdhup(struct fx *fx)
{
	if (!(wait_fd(fx->src_fd, POLLRDHUP, 5000) & POLLRDHUP))
		fail_msg("src_fd: no FIN queued after 5 s");
}

static void
test_rdhup_one_pass(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 100, 1);
	feed(fx);
	wait_rdhup(fx);
	fx->src.rdhup = 1;
	pump(fx);
	assert_true(fx->d.eof);
	assert_true(fx->d.shut);
	assert_true(fx->d.done);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/* The same without rdhup: the FIN is read on the second pump. */
static void
test_no_rdhup_two_passes(void **state)
{
	struct fx	*fx = *state;

	fx_data(fx, 100, 1);
	feed(fx);
	wait_rdhup(fx);
	pump(fx);
	assert_int_equal(fx->d.bytes, 100);
	assert_false(fx->d.eof);
	assert_true(fx->src.ron);
	pump(fx);
	assert_true(fx->d.done);
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/*
 * --splice-min is inclusive: one read of exactly splice_min bytes (less
 * than the buffer, so not a full read) is bulk, and the direction takes
 * a pipe once they are flushed. (splice_min - 1 is not: see
 * test_lazy_threshold.)
 */
static void
test_lazy_at_splice_min(void **state)
{
	struct fx	*fx = *state;
	size_t		 nfree = fx->ctx.pool->nfree, min = fx->cfg.splice_min;

	assert_true(min > 0 && min < fx->d.bufsize);
	fx_data(fx, min, 0);
	feed(fx);
	wait_inq(fx, (int)min);
	pump(fx);
	drain_wait(fx, 2000);
	assert_all_delivered(fx);
	assert_int_equal(inj.recv.calls, 1);
	assert_int_equal(inj.recv.moved, min);
	if (fx->d.ops != &zp_relay_splice)
		fail_msg("a read of --splice-min (%zu) bytes: still %s", min,
		    fx->d.ops->name);
	assert_false(fx->d.lazy);
	assert_false(fx->d.fellback);
	assert_true(fx->d.pipe.rfd >= 0);
	assert_int_equal(fx->ctx.pool->nfree, nfree - 1);
	assert_int_equal(fx->pump_rc, 0);
}

/*
 * The other direction is over already (it shut src for writing): at this
 * direction's EOF every byte is delivered and the direction is done, but
 * dst gets no shutdown(2). The pair closes both sockets now, and close(2)
 * sends the FIN after the queued bytes: until then dst_peer has the bytes
 * and no EOF.
 */
static void
test_eof_other_way_over(void **state)
{
	struct fx	*fx = *state;

	if (shutdown(fx->src_fd, SHUT_WR) == -1)
		fail_msg("shutdown src_fd: %s", strerror(errno));
	fx->src.wshut = 1;
	fx->src.fin = 1;
	fx_data(fx, 3000, 1);
	feed(fx);
	wait_rdhup(fx);
	pump_until_done(fx, 20);
	assert_true(fx->d.eof);
	assert_true(fx->d.shut);
	assert_true(fx->dst.wshut);
	assert_false(fx->dst.fin);
	assert_false(fx->dst.dead);
	assert_int_equal(fx->pump_rc, 0);
	while (fx->rcvd < fx->txlen && drain_wait(fx, 1000) > 0)
		;
	assert_int_equal(fx->rcvd, fx->txlen);
	/* No FIN on the wire: nothing more to read, not even an EOF. */
	assert_int_equal(wait_fd(fx->dst_peer, POLLIN, 100), 0);
	assert_false(fx->peer_eof);

	close(fx->dst_fd);
	fx->dst_fd = -1;
	drain_to_eof(fx, 2000);
	assert_all_delivered(fx);
}

/* ---- events ------------------------------------------------------- */

/*
 * zp_half_want_read/write add and delete for real, only on a change, and
 * never turn an event on for a dead half or a half without events.
 */
static void
test_half_want(void **state)
{
	struct fx	*fx = *state;
	struct zp_half	 bare;

	zp_half_want_read(&fx->dst, 1);
	zp_half_want_read(&fx->dst, 1);
	assert_true(fx->dst.ron);
	assert_true(event_pending(fx->dst.rev, EV_READ, NULL));
	zp_half_want_write(&fx->dst, 1);
	assert_true(fx->dst.won);
	assert_true(event_pending(fx->dst.wev, EV_WRITE, NULL));
	zp_half_want_read(&fx->dst, 0);
	zp_half_want_read(&fx->dst, 0);
	assert_false(fx->dst.ron);
	assert_false(event_pending(fx->dst.rev, EV_READ, NULL));
	zp_half_want_write(&fx->dst, 0);
	assert_false(fx->dst.won);
	assert_false(event_pending(fx->dst.wev, EV_WRITE, NULL));

	/* A dead half is never written, but may be read to its end. */
	fx->dst.dead = 1;
	zp_half_want_read(&fx->dst, 1);
	zp_half_want_write(&fx->dst, 1);
	assert_true(fx->dst.ron);
	assert_false(fx->dst.won);
	assert_true(event_pending(fx->dst.rev, EV_READ, NULL));
	zp_half_want_read(&fx->dst, 0);

	memset(&bare, 0, sizeof(bare));
	bare.fd = -1;
	zp_half_want_read(&bare, 1);
	zp_half_want_write(&bare, 1);
	assert_false(bare.ron);
	assert_false(bare.won);
}

/*
 * A framed direction's boundary work: a seek and a cut are separate
 * asks, and a seek asked during a cut is kept until the cut ends (where
 * it is done at once: a cut ends at a boundary). Every move below is in
 * relay.c's table; one that is not would abort here (debug build).
 */
static void
test_dframe_states(void **state)
{
	struct zp_dframe	fr;

	(void)state;
	memset(&fr, 0, sizeof(fr));
	assert_int_equal(fr.state, ZP_FR_RELAYING);
	zp_dframe_seek(&fr, 1);
	assert_int_equal(fr.state, ZP_FR_SEEKING);
	assert_true(zp_dframe_seeking(&fr));
	assert_false(zp_dframe_cutting(&fr));
	zp_dframe_seek(&fr, 1);			/* asked twice: no move */
	assert_int_equal(fr.state, ZP_FR_SEEKING);
	zp_dframe_cut(&fr, 0);			/* no cut to end: no move */
	assert_int_equal(fr.state, ZP_FR_SEEKING);
	zp_dframe_seek(&fr, 0);
	assert_int_equal(fr.state, ZP_FR_RELAYING);

	zp_dframe_cut(&fr, 1);
	assert_int_equal(fr.state, ZP_FR_CUTTING);
	zp_dframe_seek(&fr, 1);			/* a rewind asked mid-cut */
	assert_int_equal(fr.state, ZP_FR_CUT_SEEK);
	assert_true(zp_dframe_seeking(&fr) && zp_dframe_cutting(&fr));
	zp_dframe_cut(&fr, 0);			/* the cut ends: the seek is on */
	assert_int_equal(fr.state, ZP_FR_SEEKING);
	zp_dframe_seek(&fr, 0);

	zp_dframe_cut(&fr, 1);
	zp_dframe_seek(&fr, 1);
	zp_dframe_seek(&fr, 0);			/* the seek dropped: cutting on */
	assert_int_equal(fr.state, ZP_FR_CUTTING);
	zp_dframe_cut(&fr, 0);
	assert_int_equal(fr.state, ZP_FR_RELAYING);
}

static void
lazy_wcb(int fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(*(int *)arg)++;
}

/*
 * A half's write event is made the first time it is wanted, with the
 * half's wcb on its read event's base and argument, and kept after; a
 * half without wcb (or without a read event) never gets one.
 */
static void
test_half_lazy_write(void **state)
{
	struct event_base	*base = event_base_new();
	struct zp_half		 h;
	int			 sv[2], calls = 0;

	(void)state;
	assert_non_null(base);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	memset(&h, 0, sizeof(h));
	h.fd = sv[0];
	h.rev = event_new(base, h.fd, EV_READ | EV_PERSIST, lazy_wcb, &calls);
	assert_non_null(h.rev);
	assert_int_equal(zp_half_want_write(&h, 1), 0);	/* no wcb: none */
	assert_null(h.wev);
	assert_false(h.won);
	h.wcb = lazy_wcb;
	assert_int_equal(zp_half_want_write(&h, 0), 0);
	assert_null(h.wev);
	assert_int_equal(zp_half_want_write(&h, 1), 0);
	assert_non_null(h.wev);
	assert_true(h.won);
	assert_ptr_equal(event_get_callback_arg(h.wev), &calls);
	assert_ptr_equal(event_get_base(h.wev), base);
	/* An empty socket is writable: the callback runs, with rev's arg. */
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK),
	    0);
	assert_int_equal(calls, 1);
	assert_int_equal(zp_half_want_write(&h, 0), 0);
	assert_false(h.won);
	assert_non_null(h.wev);
	event_free(h.wev);
	event_free(h.rev);
	close(sv[0]);
	close(sv[1]);
	event_base_free(base);
}

/* zp_dir_release gives the store back and is safe to call twice. */
static void
test_dir_release(void **state)
{
	struct fx	*fx = *state;
	int		 splicing = fx->d.ops == &zp_relay_splice;
	size_t		 nfree = fx->ctx.pool->nfree;

	fx_data(fx, 2000, 0);
	feed(fx);
	wait_inq(fx, 2000);
	fault_set(splicing ? &inj.flush : &inj.send, 0, -1, EAGAIN);
	pump(fx);
	assert_true(fx->d.full || fx->d.ops->pending(&fx->d) == 2000);
	zp_dir_release(&fx->ctx, &fx->d);
	assert_false(fx->d.full);
	assert_int_equal(fx->d.ops->pending(&fx->d), 0);
	zp_dir_release(&fx->ctx, &fx->d);
	if (splicing) {
		assert_int_equal(fx->d.pipe.rfd, -1);
		assert_int_equal(fx->ctx.pool->killed, 1);
		assert_int_equal(fx->ctx.pool->nfree, nfree);
	} else
		assert_null(fx->d.buf);
}

int
main(void)
{
#define SPLICE(f)	cmocka_unit_test_setup_teardown(f, setup_splice, \
			    fx_teardown)
#define LAZY(f)	{ #f "/lazy", f, setup_lazy, fx_teardown, NULL }
#define BOTH(f, s, c)	{ #f "/splice", f, s, fx_teardown, NULL }, \
			{ #f "/copy", f, c, fx_teardown, NULL }
	const struct CMUnitTest tests[] = {
		BOTH(test_transfer, setup_splice, setup_copy),
		{ "test_transfer/copy-1K", test_transfer, setup_copy_small,
		    fx_teardown, NULL },
		BOTH(test_small_writes, setup_splice, setup_copy),
		BOTH(test_eof, setup_splice, setup_copy),
		BOTH(test_eof_empty, setup_splice, setup_copy),
		BOTH(test_backpressure, setup_splice_smalldst,
		    setup_copy_small_smalldst),
		{ "test_backpressure/copy-default", test_backpressure,
		    setup_copy_smalldst, fx_teardown, NULL },
		BOTH(test_blocked_dst_not_retried, setup_splice_smalldst,
		    setup_copy_smalldst),
		{ "test_blocked_dst_not_retried/lazy",
		    test_blocked_dst_not_retried, setup_lazy_smalldst,
		    fx_teardown, NULL },
		BOTH(test_budget, setup_splice_budget, setup_copy_budget),
		BOTH(test_dst_already_dead, setup_splice, setup_copy),
		BOTH(test_src_already_dead, setup_splice, setup_copy),
		BOTH(test_src_dead_first_drains_rst, setup_splice, setup_copy),
		BOTH(test_src_reset_midstream, setup_splice, setup_copy),
		BOTH(test_src_reset_dst_busy, setup_splice, setup_copy),
		BOTH(test_src_real_rst, setup_splice, setup_copy),
		BOTH(test_dst_epipe, setup_splice, setup_copy),
		BOTH(test_dst_econnreset, setup_splice, setup_copy),
		BOTH(test_dst_real_rst, setup_splice, setup_copy),
		BOTH(test_src_eagain, setup_splice, setup_copy),
		BOTH(test_eintr, setup_splice, setup_copy),
		BOTH(test_evloop_slow_reader, setup_splice, setup_copy),
		BOTH(test_evloop_stalled_reader, setup_splice, setup_copy),
		SPLICE(test_splice_full_pipe),
		SPLICE(test_splice_fallback),
		SPLICE(test_splice_fallback_errnos),
		SPLICE(test_splice_einval_after_bytes),
		SPLICE(test_splice_einval_pipe_holds),
		cmocka_unit_test(test_dframe_states),
		cmocka_unit_test(test_half_lazy_write),
		cmocka_unit_test_setup_teardown(test_copy_buffer_full,
		    setup_copy_small, fx_teardown),
		cmocka_unit_test_setup_teardown(test_copy_idle_frees_buffer,
		    setup_copy, fx_teardown),
		BOTH(test_partial_flush, setup_splice, setup_copy_small),
		BOTH(test_short_fill, setup_splice, setup_copy_small),
		BOTH(test_short_write_blocks, setup_splice, setup_copy),
		LAZY(test_short_write_blocks),
		LAZY(test_lazy_threshold),
		LAZY(test_lazy_transfer),
		LAZY(test_lazy_waits_for_flush),
		{ "test_lazy_slow_dst/lazy", test_lazy_slow_dst,
		    setup_lazy_smalldst, fx_teardown, NULL },
		LAZY(test_lazy_no_pipe),
		LAZY(test_lazy_refused),
		LAZY(test_lazy_short_eof),
		{ "test_lazy_transfer/1K", test_lazy_transfer,
		    setup_lazy_small, fx_teardown, NULL },
		LAZY(test_small_writes),
		LAZY(test_eof_empty),
		{ "test_backpressure/lazy", test_backpressure,
		    setup_lazy_smalldst, fx_teardown, NULL },
		LAZY(test_src_reset_midstream),
		LAZY(test_src_reset_dst_busy),
		LAZY(test_src_real_rst),
		LAZY(test_dst_real_rst),
		LAZY(test_src_dead_first_drains_rst),
		LAZY(test_evloop_slow_reader),
		LAZY(test_evloop_stalled_reader),
		BOTH(test_rdhup_one_pass, setup_splice, setup_copy),
		LAZY(test_rdhup_one_pass),
		BOTH(test_no_rdhup_two_passes, setup_splice, setup_copy),
		LAZY(test_lazy_at_splice_min),
		BOTH(test_eof_other_way_over, setup_splice, setup_copy),
		LAZY(test_eof_other_way_over),
		SPLICE(test_half_want),
		BOTH(test_dir_release, setup_splice, setup_copy),
	};
#undef SPLICE
#undef LAZY
#undef BOTH

	/* As zproxy does: splice(2) cannot say MSG_NOSIGNAL. */
	signal(SIGPIPE, SIG_IGN);
	/* ZP_TEST_FILTER=test_eof* runs some of the tests. */
	if (getenv("ZP_TEST_FILTER") != NULL)
		cmocka_set_test_filter(getenv("ZP_TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
