/*
 * mirror.c - --mirror: a copy of every client's stream to other
 * collectors; see mirror.h.
 *
 * A stream's life: connecting (its pipe fills meanwhile), open (the pipe
 * is spliced to the socket as the socket takes it), ending (the client's
 * stream is over: the rest, then a FIN, its pipe closed, then the
 * mirror's EOF or --linger-timeout), closed. One that cannot begin (no
 * pipe, no socket) opens no connection and is counted as dropped, not
 * as a stream. An error drops it from any state: closed at
 * once and counted. Too slow (its pipe full), it is counted as dropped
 * and takes no more: closed at once, or, framed or still connecting,
 * "cutting": sent what it holds up to a message boundary (cut_at), then
 * a FIN. A tls@ mirror's stream is the same with TLS between its
 * connect and its bytes (mirror_tls.c).
 */

#include <sys/socket.h>
#include <sys/time.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/connect.h"
#include "relay/ctx.h"
#include "relay/mirror.h"
#include "relay/mirror_int.h"
#include "relay/worker.h"
#include "core/net.h"

/* Never SPLICE_F_MORE: a tail held back is a tail late. */
#define ZP_MIRROR_SPLICE	(SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

static void	mstream_drain(struct zp_mstream *);

static int64_t
mono_us(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct zp_mirrors *
zp_mirrors_new(const struct zp_config *cfg)
{
	struct zp_mirrors	*ms;
	size_t			 i;

	if ((ms = calloc(1, sizeof(*ms))) == NULL)
		return NULL;
	ms->n = cfg->nmirrors;
	ms->fail_timeout = cfg->fail_timeout;
	for (i = 0; i < ms->n; i++) {
		ms->t[i].label = cfg->mirrors[i].arg;
		ms->t[i].host = cfg->mirrors[i].to.host;
		ms->t[i].port = cfg->mirrors[i].to.port;
		ms->t[i].tls = cfg->mirrors[i].to.tls;
		ms->t[i].addrs = cfg->mirrors[i].to.addrs;
		ms->t[i].naddrs = cfg->mirrors[i].to.naddrs;
	}
	return ms;
}

void
zp_mirrors_free(struct zp_mirrors *ms)
{
	free(ms);
}

size_t
zp_mirrors_count(const struct zp_mirrors *ms)
{
	return ms != NULL ? ms->n : 0;
}

int
zp_mirror_up(const struct zp_mirrors *ms, size_t i)
{
	return __atomic_load_n(&ms->t[i].down_until, __ATOMIC_RELAXED) <=
	    mono_us();
}

/*
 * A stream of mirror i ended early: counted, and said at most once a
 * second per mirror and thread, with how many went unsaid.
 */
static void
mirror_drop_log(struct zp_ctx *ctx, size_t i, uint64_t id, const char *why)
{
	int64_t		now = mono_us();
	uint64_t	more = ctx->mirror_unsaid[i];

	ctx->stats.mirrors[i].dropped++;
	if (ctx->mirror_said[i] != 0 && now - ctx->mirror_said[i] < 1000000) {
		ctx->mirror_unsaid[i]++;
		return;
	}
	ctx->mirror_said[i] = now;
	ctx->mirror_unsaid[i] = 0;
	if (more > 0)
		zp_log(ctx->log, ZP_LOG_WARN, "mirror %s conn=%llu dropped: "
		    "%s (and %llu more since)", ctx->mirrors->t[i].label,
		    (unsigned long long)id, why, (unsigned long long)more);
	else
		zp_log(ctx->log, ZP_LOG_WARN, "mirror %s conn=%llu dropped: "
		    "%s", ctx->mirrors->t[i].label, (unsigned long long)id,
		    why);
}

/*
 * A set that is released and has no stream left is freed; one that
 * counted as a connection while it finished no longer does.
 */
static void
set_maybe_free(struct zp_mirror_set *set)
{
	struct zp_ctx	*ctx = set->ctx;
	int		 counted = set->counted;

	if (!set->released || set->open > 0)
		return;
	TAILQ_REMOVE(&ctx->mirror_sets, set, entry);
	free(set);
	if (counted) {
		__atomic_sub_fetch(&ctx->load, 1, __ATOMIC_SEQ_CST);
		zp_ctx_closed(ctx);	/* the listener may resume */
	}
}

/* Its connect is under way: its bytes wait in its pipe. */
static int
mstream_connecting(const struct zp_mstream *m)
{
	return m->conn.fd != -1;
}

/* Connecting or connected: not closed. */
static int
mstream_open(const struct zp_mstream *m)
{
	return m->fd != -1 || mstream_connecting(m);
}

/* Not sending yet: connecting, or (tls@) before its handshake's end. */
static int
mstream_unready(const struct zp_mstream *m)
{
	return mstream_connecting(m) || (m->tls != NULL && !mtls_ready(m));
}

/* Where its pipe starts: after what went, and a tls@ stream's staged. */
static uint64_t
mstream_pipe_start(const struct zp_mstream *m)
{
	return m->out + (m->tls != NULL ? mtls_staged(m) : 0);
}

/* A stream that takes the client's bytes (none after its FIN). */
static int
mstream_live(const struct zp_mstream *m)
{
	return mstream_open(m) && !m->cutting && !m->wshut;
}

/* A message ended at the client's stream offset off. */
static void
set_bound(struct zp_mirror_set *set, uint64_t off)
{
	if (off == set->bound[0])
		return;
	set->bound[1] = set->bound[0];
	set->bound[0] = off;
}

/* Close a stream: everything it holds. */
void
mstream_close(struct zp_mstream *m)
{
	if (!mstream_open(m))
		return;
	zp_connecting_cancel(&m->conn);
	if (m->rev != NULL)
		event_free(m->rev);
	if (m->wev != NULL)
		event_free(m->wev);
	if (m->timer != NULL)
		event_free(m->timer);
	m->rev = m->wev = m->timer = NULL;
	m->won = 0;
	if (m->tls != NULL)
		mtls_free(m);
	if (m->fd != -1)
		close(m->fd);
	m->fd = -1;
	zp_pipe_close(&m->pipe);
	free(m->held);
	m->held = NULL;
	m->teed = 0;
	m->set->open--;
}

/*
 * A stream ends before its client's stream did. Nothing here frees the
 * set: the event callbacks and the release look at it last. One that was
 * cut was counted then.
 */
void
mstream_drop(struct zp_mstream *m, const char *why)
{
	if (!mstream_open(m))
		return;
	mstream_close(m);
	if (!m->cutting)
		mirror_drop_log(m->set->ctx, m->idx, m->set->id, why);
}

static void	mstream_cut(struct zp_mstream *, const char *);

/*
 * lf and nul spliced blind: no boundary is known in what a stream holds.
 * Its pipe is read out (tee'd pages fill a pipe beyond its size: it may
 * hold megabytes), what comes up to the last delimiter in it is kept in
 * m->held to be sent from there, the rest dropped. Returns the stream
 * offset after that delimiter (the pipe started at mstream_pipe_start),
 * or 0 when there is none (or the kind is not known yet, octet, or
 * memory is short).
 */
static uint64_t
mstream_last_delim(struct zp_mstream *m)
{
	struct zp_mirror_set	*set = m->set;
	enum zp_framing		 k = zp_framer_kind(&set->f);
	size_t			 len = m->pipe.data, got = 0;
	char			*buf, *p;
	ssize_t			 n;

	if ((k != ZP_FRAMING_LF && k != ZP_FRAMING_NUL) || len == 0 ||
	    (buf = malloc(len)) == NULL)
		return 0;
	while (got < len && ((n = read(m->pipe.rfd, buf + got, len - got)) > 0 ||
	    (n == -1 && errno == EINTR)))
		got += n > 0 ? (size_t)n : 0;
	m->pipe.data -= got;
	p = memrchr(buf, k == ZP_FRAMING_NUL ? '\0' : '\n', got);
	if (p == NULL || m->pipe.data != 0) {
		free(buf);
		return 0;
	}
	m->held = buf;
	m->held_len = (size_t)(p - buf) + 1;
	return mstream_pipe_start(m) + m->held_len;
}

/*
 * Too slow. A framed stream takes no more and ends at the last message
 * boundary known within what it was handed and has not sent yet: the
 * collector never gets half a message (unless it had part of the one
 * in progress already, or no boundary is known: then it ends where it
 * stands). One still connecting (its pipe filled meanwhile) waits for
 * the connect's outcome, so that a mirror that never answers is marked
 * down all the same; if it answers, it gets what it holds (framed: up to
 * the boundary), then a FIN.
 */
static void
mstream_slow(struct zp_mstream *m)
{
	mstream_cut(m, "too slow");
}

/*
 * A stream that takes no more (why: "too slow", ...): it ends at the last
 * message boundary known within what it holds; see mstream_slow().
 */
static void
mstream_cut(struct zp_mstream *m, const char *why)
{
	struct zp_mirror_set	*set = m->set;
	uint64_t		 b = m->in;
	int			 i, whole = 0;	/* b ends a message */
	char			 buf[96];

	if (!mstream_open(m) || m->cutting)
		return;
	/* Not within bytes a tls@ session took, or holds committed. */
	if (set->framed) {
		for (i = 0; i < 2 && !whole; i++) {
			b = m->base + set->bound[i];
			whole = b >= mstream_pipe_start(m) && b <= m->in;
		}
		if (!whole && (b = mstream_last_delim(m)) != 0)
			whole = 1;
		if (!whole)
			b = m->in;
	}
	if (!mstream_unready(m) && !whole) {
		(void)snprintf(buf, sizeof(buf), "%s%s", why, set->framed ?
		    ", inside a message" : "");
		mstream_drop(m, buf);
		return;
	}
	(void)snprintf(buf, sizeof(buf), "%s%s", why, mstream_unready(m) ?
	    " while it connects" : "; ends at a message boundary");
	mirror_drop_log(set->ctx, m->idx, set->id, buf);
	m->cutting = 1;
	m->cut_at = b;
	m->teed = 0;
	/*
	 * Connecting (tls@: or in its handshake), the connect's timeout
	 * bounds it; connected, the end.
	 */
	if (!mstream_unready(m))
		mstream_end_timer(m);
	mstream_drain(m);
}

void
mstream_want_write(struct zp_mstream *m, int on)
{
	if (on && !m->won && event_add(m->wev, NULL) == 0)
		m->won = 1;
	else if (!on && m->won) {
		event_del(m->wev);
		m->won = 0;
	}
}

/*
 * Wait for the end (the mirror's FIN) at most --linger-timeout; not
 * before a tls@ stream's handshake is done (its timer is that deadline
 * until then).
 */
void
mstream_end_timer(struct zp_mstream *m)
{
	struct timeval	tv = zp_seconds_tv(m->set->ctx->cfg->linger_timeout);

	if (m->timer != NULL && !mstream_unready(m))
		event_add(m->timer, &tv);
}

/* Everything is out: carry the client's FIN, or close when both are. */
void
mstream_finish(struct zp_mstream *m)
{
	struct zp_mirror_set	*set = m->set;

	if ((!set->ended && !m->cutting) || m->pipe.data > 0 ||
	    m->held != NULL || mstream_unready(m) ||
	    (m->tls != NULL && mtls_staged(m) > 0))
		return;
	if (!m->wshut) {
		/* tls@: close_notify goes first, or the FIN is a truncation. */
		if (m->tls != NULL && mtls_notify(m) != 1)
			return;
		m->wshut = 1;
		if (shutdown(m->fd, SHUT_WR) == -1 && errno != ENOTCONN) {
			mstream_drop(m, strerror(errno));
			return;
		}
		/*
		 * Nothing goes in any more: the pipe's two descriptors go
		 * back now, not when the mirror closes, which a slow one may
		 * put off for --linger-timeout while new pairs need them.
		 */
		zp_pipe_close(&m->pipe);
		mstream_end_timer(m);
	}
	if (m->rdeof)
		mstream_close(m);
}

int
mstream_send_raw(struct zp_mstream *m, uint64_t until)
{
	struct zp_ctx	*ctx = m->set->ctx;
	size_t		 len;
	ssize_t		 n;

	while (m->out < until) {
		if (m->held != NULL) {
			len = (size_t)(m->cut_at - m->out);
			n = send(m->fd, m->held + m->held_len - len,
			    until - m->out < len ? (size_t)(until - m->out) :
			    len, MSG_DONTWAIT | MSG_NOSIGNAL);
		} else if (m->pipe.data > 0) {
			len = m->pipe.data;
			if (m->cutting && m->cut_at - m->out < len)
				len = (size_t)(m->cut_at - m->out);
			if (len == 0) {
				/* At the boundary: the rest is not sent. */
				zp_pipe_close(&m->pipe);
				continue;
			}
			if (until - m->out < len)
				len = (size_t)(until - m->out);
			n = splice(m->pipe.rfd, NULL, m->fd, NULL, len,
			    ZP_MIRROR_SPLICE);
		} else
			break;
		if (n > 0) {
			if (m->held == NULL)
				m->pipe.data -= (size_t)n;
			m->out += (uint64_t)n;
			ctx->stats.mirrors[m->idx].bytes += (uint64_t)n;
			if (m->held != NULL && m->out == m->cut_at) {
				free(m->held);
				m->held = NULL;
			}
		} else if (n == -1 && errno == EINTR)
			continue;
		else if (n == -1 && errno == EAGAIN) {
			mstream_want_write(m, 1);
			return 0;
		} else {
			mstream_drop(m, n == 0 ? "its pipe lost bytes" :
			    strerror(errno));
			return -1;
		}
	}
	return 1;
}

/*
 * The pipe to the socket, as far as the socket takes it; a stream cut
 * at a boundary only up to cut_at, from what it held in memory if its
 * pipe was read out. A tls@ stream's through its session.
 */
static void
mstream_drain(struct zp_mstream *m)
{
	if (m->fd == -1)
		return;		/* closed, or its bytes wait for the connect */
	if (m->tls != NULL) {
		mtls_drain(m);
		return;
	}
	if (mstream_send_raw(m, UINT64_MAX) != 1)
		return;
	mstream_want_write(m, 0);
	mstream_finish(m);
}

/*
 * New bytes in its pipe (tee'd, or a tls@ stream's written): out now, as
 * far as the socket takes them; a tls@ stream's wait for its handshake,
 * as a connecting one's for its connect.
 */
static void
mstream_push(struct zp_mstream *m)
{
	if (m->tls == NULL || mtls_ready(m))
		mstream_drain(m);
}

/* Bytes into a stream's pipe (copy mode, a move); short: too slow. */
static void
mstream_write(struct zp_mstream *m, const char *buf, size_t n)
{
	size_t	had;
	ssize_t	w;

	while (n > 0 && mstream_live(m)) {
		/* An empty pipe of an open plain stream: straight out. */
		if (m->pipe.data == 0 && m->fd != -1 && m->tls == NULL) {
			w = send(m->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
			if (w > 0) {
				m->set->ctx->stats.mirrors[m->idx].bytes +=
				    (uint64_t)w;
				m->in += (uint64_t)w;
				m->out += (uint64_t)w;
				buf += w;
				n -= (size_t)w;
				continue;
			}
			if (w == -1 && errno == EINTR)
				continue;
			if (w == -1 && errno != EAGAIN) {
				mstream_drop(m, strerror(errno));
				return;
			}
		}
		w = write(m->pipe.wfd, buf, n);
		if (w == -1 && errno == EINTR)
			continue;
		if (w <= 0) {
			mstream_slow(m);
			return;
		}
		m->pipe.data += (size_t)w;
		m->in += (uint64_t)w;
		buf += w;
		n -= (size_t)w;
		/*
		 * While connecting, the pipe waits for the connect. A tls@
		 * stream's is encrypted now: what the session takes makes
		 * room for the rest.
		 */
		if (m->fd != -1 && m->tls != NULL) {
			had = m->pipe.data;
			mstream_push(m);
			if (n > 0 && m->pipe.data < had)
				continue;
		} else if (m->fd != -1)
			mstream_want_write(m, 1);
		if (n > 0) {
			mstream_slow(m);
			return;
		}
	}
}

/*
 * A connect failed (why: "connect: ...", or for tls@ "TLS handshake
 * failed: ..."): the address after it next time; down after all.
 */
void
mirror_failed(struct zp_ctx *ctx, size_t i, const char *why)
{
	struct zp_mirror_target	*t = &ctx->mirrors->t[i];
	int64_t			 now = mono_us(), was;
	struct timeval		 tv = zp_seconds_tv(ctx->mirrors->fail_timeout);

	__atomic_add_fetch(&t->cursor, 1, __ATOMIC_RELAXED);
	if (__atomic_add_fetch(&t->fails, 1, __ATOMIC_RELAXED) < t->naddrs)
		return;
	__atomic_store_n(&t->fails, 0, __ATOMIC_RELAXED);
	was = __atomic_exchange_n(&t->down_until, now +
	    (int64_t)tv.tv_sec * 1000000 + tv.tv_usec, __ATOMIC_RELAXED);
	if (was <= now)
		zp_log(ctx->log, ZP_LOG_WARN, "mirror %s down for %gs: %s",
		    t->label, ctx->mirrors->fail_timeout, why);
}

/* A connect (tls@: its handshake) succeeded: no failure in a row. */
void
mirror_answered(struct zp_ctx *ctx, size_t i)
{
	__atomic_store_n(&ctx->mirrors->t[i].fails, 0, __ATOMIC_RELAXED);
}

static void
mstream_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_mstream	*m = arg;
	struct zp_mirror_set	*set = m->set;

	if (m->tls != NULL) {
		mtls_read(m);
		set_maybe_free(set);
		return;
	}
	/* A bounded pass: a mirror that talks fast must not hold the loop. */
	switch (zp_sock_drain(m->fd, ZP_DRAIN_PASSES, NULL)) {
	case 1:
		m->rdeof = 1;
		event_del(m->rev);
		if (m->wshut)
			mstream_close(m);
		break;
	case -1:
		/* A reset: what it had not taken is lost to it. */
		if (m->wshut && m->pipe.data == 0)
			mstream_close(m);
		else
			mstream_drop(m, strerror(errno));
		break;
	}
	set_maybe_free(set);
}

static void
mstream_write_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_mstream	*m = arg;
	struct zp_mirror_set	*set = m->set;

	mstream_drain(m);
	set_maybe_free(set);
}

static void
mstream_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_mstream	*m = arg;
	struct zp_mirror_set	*set = m->set;

	if (m->tls != NULL && mtls_timeout(m))
		;	/* its handshake's deadline: failed, dropped */
	else if (m->pipe.data > 0 || m->held != NULL || !m->wshut)
		mstream_drop(m, "too slow");	/* said already if cutting */
	else
		mstream_close(m);	/* all delivered; its FIN never came */
	set_maybe_free(set);
}

/* The connect answered: wev says when the socket takes more. */
static int
mstream_writer(struct zp_mstream *m)
{
	if (m->wev != NULL)
		event_free(m->wev);
	m->won = 0;
	m->wev = event_new(m->set->ctx->base, m->fd, EV_WRITE | EV_PERSIST,
	    mstream_write_cb, m);
	return m->wev != NULL ? 0 : -1;
}

/* The connect answered: read and send from now on. */
static void
mstream_connected(struct zp_mstream *m)
{
	struct zp_ctx	*ctx = m->set->ctx;
	short		 rflags = EV_READ | EV_PERSIST;

	/* tls@: answered once its handshake is done; read from then. */
	if (m->tls == NULL)
		mirror_answered(ctx, m->idx);
	m->rev = event_new(ctx->base, m->fd, rflags, mstream_read_cb, m);
	if (m->rev == NULL || (m->tls == NULL ? event_add(m->rev, NULL) ==
	    -1 : mtls_start(m) == -1)) {
		mstream_drop(m, "out of memory");
		return;
	}
	if (m->set->released || m->cutting)
		mstream_end_timer(m);
	mstream_drain(m);
}

static void
mstream_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_mstream	*m = arg;
	struct zp_mirror_set	*set = m->set;
	int			 err = zp_connecting_result(&m->conn, what);
	char			 why[128];

	if (err != 0) {
		snprintf(why, sizeof(why), "connect: %s", strerror(err));
		mirror_failed(set->ctx, m->idx, why);
		snprintf(why, sizeof(why), "connect: %s", what & EV_TIMEOUT ?
		    "timed out" : strerror(err));
		mstream_drop(m, why);
	} else {
		m->fd = zp_connecting_take(&m->conn);
		if (mstream_writer(m) == -1)
			mstream_drop(m, "out of memory");
		else
			mstream_connected(m);
	}
	set_maybe_free(set);
}

/*
 * A pipe for the stream: in splice mode as large as the pairs' (a tee
 * takes a whole pipe's worth of the direction's) where the per-user pipe
 * budget does not bind (root, no --user); else the default size, so that
 * the mirrors do not take the pool's share of that budget (it counts
 * capacity, not use). Copy mode's writes fit the default one.
 */
static int
mstream_pipe(struct zp_ctx *ctx, struct zp_mstream *m)
{
	int	fds[2];

	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1)
		return -1;
	m->pipe.rfd = fds[0];
	m->pipe.wfd = fds[1];
	m->pipe.data = 0;
	if (ctx->pool != NULL && ctx->pipes_roomy)
		(void)fcntl(fds[1], F_SETPIPE_SZ, (int)ctx->cfg->pipe_size);
	return 0;
}

/* Begin stream i of set; 0, or -1 when it could not (counted). */
static int
mstream_start(struct zp_mirror_set *set, size_t i, const void *hdr,
    size_t hdrlen)
{
	struct zp_ctx		*ctx = set->ctx;
	struct zp_mirror_target	*t = &ctx->mirrors->t[i];
	struct zp_mstream	*m = &set->s[i];
	struct timeval		 tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	unsigned		 k;
	int			 rc, err;
	char			 why[128];

	m->set = set;
	m->idx = i;
	zp_connecting_init(&m->conn);
	m->fd = -1;
	m->pipe.rfd = m->pipe.wfd = -1;
	if (!zp_mirror_up(ctx->mirrors, i)) {
		mirror_drop_log(ctx, i, set->id, "down");
		return -1;
	}
	/*
	 * The pipe before the socket: a stream that cannot have one (out of
	 * descriptors) must not open a connection that the mirror would see
	 * carry nothing.
	 */
	if (mstream_pipe(ctx, m) == -1) {
		snprintf(why, sizeof(why), "pipe: %s", strerror(errno));
		mirror_drop_log(ctx, i, set->id, why);
		return -1;
	}
	k = __atomic_load_n(&t->cursor, __ATOMIC_RELAXED) % t->naddrs;
	if ((rc = zp_connecting_start(&m->conn, ctx->base, &t->addrs[k], NULL,
	    0, &tv, mstream_connect_cb, m)) == -1) {
		err = errno;
		zp_pipe_close(&m->pipe);
		snprintf(why, sizeof(why), "connect: %s", strerror(err));
		if (!zp_connect_local_error(err))
			mirror_failed(ctx, i, why);
		mirror_drop_log(ctx, i, set->id, why);
		return -1;
	}
	set->open++;
	/* Connected at once (a local address): wev writes from now. */
	if (rc == 0)
		m->fd = zp_connecting_take(&m->conn);
	m->timer = event_new(ctx->base, -1, 0, mstream_timer_cb, m);
	if (m->timer == NULL || (t->tls && mtls_new(m) == -1) ||
	    (rc == 0 && mstream_writer(m) == -1)) {
		mstream_drop(m, "out of memory");
		return -1;
	}
	if (hdrlen > 0 && (write(m->pipe.wfd, hdr, hdrlen) != (ssize_t)hdrlen)) {
		mstream_drop(m, "its pipe refused the PROXY header");
		return -1;
	}
	m->pipe.data = hdrlen;
	m->base = m->in = hdrlen;
	/* Begun: one that failed before this is counted as dropped only. */
	ctx->stats.mirrors[i].streams++;
	if (rc == 0) {
		mstream_connected(m);
		return m->fd == -1 ? -1 : 0;
	}
	return 0;
}

struct zp_mirror_set *
zp_mirror_set_new(struct zp_ctx *ctx, uint64_t id, int framing,
    size_t max_frame, const void *hdr, size_t hdrlen)
{
	struct zp_mirror_set	*set;
	size_t			 i, n = zp_mirrors_count(ctx->mirrors);

	if (n == 0)
		return NULL;
	if ((set = calloc(1, sizeof(*set))) == NULL) {
		for (i = 0; i < n; i++)
			mirror_drop_log(ctx, i, id, "out of memory");
		return NULL;
	}
	set->ctx = ctx;
	set->id = id;
	set->n = n;
	set->framed = framing != ZP_FRAMING_NONE &&
	    zp_framer_init(&set->f, (enum zp_framing)framing, max_frame) == 0;
	for (i = 0; i < n; i++)
		(void)mstream_start(set, i, hdr, hdrlen);
	if (set->open == 0) {
		free(set);
		return NULL;
	}
	return set;
}

void
zp_mirror_copy(struct zp_mirror_set *set, const void *buf, size_t n)
{
	size_t	i, k;

	if (set->open == 0)
		return;		/* every stream is gone: nothing to follow */
	if (set->framed && (k = zp_framer_feed(&set->f, buf, n)) > 0)
		set_bound(set, set->off + k);
	for (i = 0; i < set->n; i++)
		mstream_write(&set->s[i], buf, n);
	set->off += n;
}

size_t
zp_mirror_tee(struct zp_mirror_set *set, int rfd, size_t len)
{
	struct zp_mstream	*m;
	size_t			 i, may = len;
	ssize_t			 n;

	for (i = 0; i < set->n; i++) {
		m = &set->s[i];
		if (!mstream_live(m))
			continue;
		if (m->teed == 0) {
			do {
				n = tee(rfd, m->pipe.wfd, len,
				    SPLICE_F_NONBLOCK);
			} while (n == -1 && errno == EINTR);
			if (n == -1 && errno != EAGAIN) {
				mstream_drop(m, strerror(errno));
				continue;
			}
			if (n <= 0) {
				mstream_slow(m);
				continue;
			}
			m->teed = (size_t)n;
			m->pipe.data += (size_t)n;
			m->in += (uint64_t)n;
			mstream_push(m);
			if (!mstream_live(m))
				continue;
		}
		if (m->teed < may)
			may = m->teed;
	}
	return may;
}

void
zp_mirror_sent(struct zp_mirror_set *set, size_t n, size_t whole)
{
	size_t	i;

	if (whole > 0)
		set_bound(set, set->off + whole);
	set->off += n;
	for (i = 0; i < set->n; i++)
		if (mstream_live(&set->s[i]))
			set->s[i].teed -= n < set->s[i].teed ? n :
			    set->s[i].teed;
}

void
zp_mirror_unpipe(struct zp_mirror_set *set, const void *buf, size_t len,
    const struct zp_framer *f)
{
	struct zp_mstream	*m;
	size_t			 i;

	for (i = 0; i < set->n; i++) {
		m = &set->s[i];
		if (!mstream_live(m))
			continue;
		if (m->teed < len)
			mstream_write(m, (const char *)buf + m->teed,
			    len - m->teed);
		m->teed = 0;
	}
	set->off += len;
	if (f != NULL)
		zp_mirror_follow(set, f);
}

void
zp_mirror_follow(struct zp_mirror_set *set, const struct zp_framer *f)
{
	if (set->framed)
		set->f = *f;
}

void
zp_mirror_set_leave(struct zp_mirror_set *set, const char *why)
{
	size_t	i;

	for (i = 0; i < set->n; i++)
		if (mstream_live(&set->s[i]))
			mstream_cut(&set->s[i], why);
}

void
zp_mirror_set_end(struct zp_mirror_set *set)
{
	size_t	i;

	if (set->ended)
		return;
	set->ended = 1;
	for (i = 0; i < set->n; i++)
		if (set->s[i].fd != -1)
			mstream_finish(&set->s[i]);
}

void
zp_mirror_set_release(struct zp_mirror_set *set)
{
	size_t	i;

	if (set == NULL)
		return;
	set->released = 1;
	TAILQ_INSERT_TAIL(&set->ctx->mirror_sets, set, entry);
	/*
	 * A copy still finishing holds descriptors the next pair may not
	 * take: it counts as a connection (--max-conns, and the derived
	 * one's budget) until it is done, however slow its mirror reads.
	 */
	if (set->open > 0) {
		set->counted = 1;
		__atomic_add_fetch(&set->ctx->load, 1, __ATOMIC_SEQ_CST);
	}
	zp_mirror_set_end(set);
	/* Whatever is left has --linger-timeout to go out. */
	for (i = 0; i < set->n; i++)
		if (set->s[i].fd != -1 && !set->s[i].wshut)
			mstream_end_timer(&set->s[i]);
	set_maybe_free(set);
}

void
zp_mirror_sets_close(struct zp_ctx *ctx)
{
	struct zp_mirror_set	*set;
	size_t			 i;

	while ((set = TAILQ_FIRST(&ctx->mirror_sets)) != NULL) {
		for (i = 0; i < set->n; i++)
			if (set->s[i].pipe.data > 0 || set->s[i].held != NULL ||
			    !set->s[i].wshut)
				mstream_drop(&set->s[i], "zproxy is stopping");
			else
				mstream_close(&set->s[i]);
		set_maybe_free(set);
	}
}
