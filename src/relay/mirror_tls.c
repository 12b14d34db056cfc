/*
 * mirror_tls.c - a --mirror tls@HOST:PORT stream: zproxy is its
 * collector's TLS client, and checks it as it checks -u tls@ upstreams
 * (--upstream-ca, HOST or --upstream-sni, --upstream-verify).
 *
 * Its life within mirror.c's: connecting; then the PROXY header, in the
 * clear (as to a tls@ upstream, and as nginx's `listen ... ssl
 * proxy_protocol` expects it); then the handshake; all of it within
 * --connect-timeout of the connect's start, and a failure is a failed
 * connect of the mirror (mirror_failed). Open, its pipe (filled as a
 * plain stream's: tee'd, or written) is read into a staging buffer, a
 * record's worth at a time, and written to the session. OpenSSL holds
 * the bytes of a write that fell short committed (tls_io.h): the staged
 * bytes are offered again whole, so a cut never falls inside them, and
 * they count as not delivered yet. What the mirror sends (TLS 1.3
 * tickets, its close_notify) is read and thrown away. At the end,
 * close_notify, then the FIN.
 *
 * A TLS stream needs no pipe of the pair's: pairs splice as before, and
 * only this stream reads its bytes into memory.
 */

#include <sys/time.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/clock.h"
#include "lib/log.h"
#include "core/net.h"
#include "relay/ctx.h"
#include "relay/mirror_int.h"
#include "tls/tls.h"
#include "tls/tls_io.h"

#define MTLS_STAGE	16384	/* a TLS record's worth of plaintext */

enum mtls_state {
	MTLS_CONNECTING = 0,	/* its TCP connect: no session yet */
	MTLS_CLEAR,		/* the PROXY header goes, in the clear */
	MTLS_HANDSHAKE,
	MTLS_OPEN,		/* its bytes go, encrypted */
};

struct zp_mtls {
	enum mtls_state	 state;
	struct timeval	 deadline;	/* the connect's and handshake's
					   (monotonic) */
	struct zp_tls	*tls;		/* from MTLS_CLEAR */
	char		*stage;		/* MTLS_OPEN: read from the pipe */
	size_t		 soff;		/* stage[soff, soff + slen): not */
	size_t		 slen;		/* taken by the session yet */
};

/* The one place its state changes: forward only, one step at a time. */
static void
mtls_set_state(struct zp_mtls *t, enum mtls_state to)
{
	assert(to == t->state + 1);
	t->state = to;
}

int
mtls_new(struct zp_mstream *m)
{
	struct timeval	 now, tv = zp_seconds_tv(
			     m->set->ctx->cfg->connect_timeout);

	if ((m->tls = calloc(1, sizeof(*m->tls))) == NULL)
		return -1;
	zp_clock_now(&now);
	timeradd(&now, &tv, &m->tls->deadline);
	return 0;
}

void
mtls_free(struct zp_mstream *m)
{
	if (m->tls == NULL)
		return;
	zp_tls_free(m->tls->tls);
	free(m->tls->stage);
	free(m->tls);
	m->tls = NULL;
}

int
mtls_ready(const struct zp_mstream *m)
{
	return m->tls->state == MTLS_OPEN;
}

size_t
mtls_staged(const struct zp_mstream *m)
{
	return m->tls->slen;
}

int
mtls_start(struct zp_mstream *m)
{
	struct zp_ctx		*ctx = m->set->ctx;
	struct zp_mirror_target	*tg = &ctx->mirrors->t[m->idx];
	struct zp_mtls		*t = m->tls;
	struct timeval		 now, left = { 0, 0 };
	struct ssl_st		*ssl = NULL;

	if (ctx->tls_cli != NULL)
		ssl = zp_tls_cli_session(ctx->tls_cli, ctx->thread,
		    ctx->tls_cache, m->fd, tg->host, tg->port);
	if (ssl == NULL || (t->tls = zp_tls_wrap(ssl)) == NULL)
		return -1;
	/* What the connect left of --connect-timeout: a timer fires at 0. */
	zp_clock_now(&now);
	if (timercmp(&now, &t->deadline, <))
		timersub(&t->deadline, &now, &left);
	if (event_add(m->timer, &left) == -1)
		return -1;
	mtls_set_state(t, MTLS_CLEAR);
	return 0;
}

/*
 * The handshake failed (why, OpenSSL's words in text): counted, a
 * failed connect of the mirror, and the stream dropped saying why.
 */
static void
mtls_fail(struct zp_mstream *m, enum zp_tls_fail why, const char *text)
{
	struct zp_ctx	*ctx = m->set->ctx;
	char		 buf[200];

	ctx->stats.tls_handshakes[ZP_TLS_SIDE_MIRROR][why]++;
	(void)snprintf(buf, sizeof(buf), "TLS handshake failed: %s%s%s",
	    zp_tls_fail_str(why), text[0] != '\0' ? ": " : "", text);
	mirror_failed(ctx, m->idx, buf);
	mstream_drop(m, buf);
}

/*
 * One step of the handshake. Returns 1 once done, 0 while it waits (for
 * rev, or wev when it wants to write), -1 when the stream was dropped.
 */
static int
mtls_handshake(struct zp_mstream *m)
{
	struct zp_ctx	*ctx = m->set->ctx;
	struct zp_mtls	*t = m->tls;
	short		 want = EV_READ;

	switch (zp_tls_handshake(t->tls, &want)) {
	case 0:
		mstream_want_write(m, want == EV_WRITE);
		return 0;
	case -1:
		mtls_fail(m, zp_tls_failure(t->tls),
		    zp_tls_failure_text(t->tls));
		return -1;
	}
	if ((t->stage = malloc(MTLS_STAGE)) == NULL) {
		mstream_drop(m, "out of memory");
		return -1;
	}
	ctx->stats.tls_handshakes[ZP_TLS_SIDE_MIRROR][ZP_TLS_OK]++;
	mirror_answered(ctx, m->idx);
	mtls_set_state(t, MTLS_OPEN);
	/* Its deadline is met; the end's wait, if the end came meanwhile. */
	event_del(m->timer);
	if (m->set->released || m->cutting)
		mstream_end_timer(m);
	if (zp_log_enabled(ctx->log, ZP_LOG_DEBUG))
		zp_log(ctx->log, ZP_LOG_DEBUG, "mirror %s conn=%llu: TLS done "
		    "(%s%s)", ctx->mirrors->t[m->idx].label,
		    (unsigned long long)m->set->id, zp_tls_version(t->tls),
		    zp_tls_resumed(t->tls) ? ", resumed" : "");
	return 1;
}

/*
 * The stage is empty: the next bytes of the stream into it, from what a
 * cut kept in memory, else from the pipe, never past cut_at. Returns 1
 * when it holds some, 0 when there are none to send, -1 when the
 * stream was dropped.
 */
static int
mtls_fill(struct zp_mstream *m)
{
	struct zp_mtls	*t = m->tls;
	size_t		 len, left;
	ssize_t		 n;

	assert(t->slen == 0);
	t->soff = 0;
	if (m->held != NULL) {
		left = (size_t)(m->cut_at - m->out);
		len = left < MTLS_STAGE ? left : MTLS_STAGE;
		memcpy(t->stage, m->held + m->held_len - left, len);
		t->slen = len;
		if (len == left) {
			free(m->held);
			m->held = NULL;
		}
		return len > 0;
	}
	if (m->pipe.data == 0)
		return 0;
	len = m->pipe.data;
	if (m->cutting && m->cut_at - m->out < len)
		len = (size_t)(m->cut_at - m->out);
	if (len == 0) {
		/* At the boundary: the rest is not sent. */
		zp_pipe_close(&m->pipe);
		return 0;
	}
	if (len > MTLS_STAGE)
		len = MTLS_STAGE;
	do {
		n = read(m->pipe.rfd, t->stage, len);
	} while (n == -1 && errno == EINTR);
	if (n <= 0) {
		mstream_drop(m, n == 0 || errno == EAGAIN ?
		    "its pipe lost bytes" : strerror(errno));
		return -1;
	}
	m->pipe.data -= (size_t)n;
	t->slen = (size_t)n;
	return 1;
}

/*
 * Its bytes to the session, as far as the socket takes them. Returns 1
 * when none are left, 0 when the socket is full (wev added), -1 when
 * the stream was dropped.
 */
static int
mtls_send(struct zp_mstream *m)
{
	struct zp_mtls	*t = m->tls;
	ssize_t		 n;
	int		 r;

	for (;;) {
		if (t->slen == 0 && (r = mtls_fill(m)) != 1)
			return r == 0 ? 1 : -1;
		/*
		 * The staged bytes, whole: after a short write OpenSSL holds
		 * them committed, and they are what it must be offered.
		 */
		n = zp_tls_write(t->tls, t->stage + t->soff, t->slen);
		if (n > 0) {
			t->soff += (size_t)n;
			t->slen -= (size_t)n;
			m->out += (uint64_t)n;
			m->set->ctx->stats.mirrors[m->idx].bytes += (uint64_t)n;
			continue;
		}
		if (errno == EAGAIN) {
			mstream_want_write(m, 1);
			return 0;
		}
		mstream_drop(m, errno == EPROTO ? "TLS error" :
		    strerror(errno));
		return -1;
	}
}

void
mtls_drain(struct zp_mstream *m)
{
	struct zp_mtls	*t = m->tls;

	switch (t->state) {
	case MTLS_CONNECTING:
		return;
	case MTLS_CLEAR:
		if (mstream_send_raw(m, m->base) != 1)
			return;
		/* The mirror's bytes are the handshake's from now. */
		if (event_add(m->rev, NULL) == -1) {
			mstream_drop(m, "out of memory");
			return;
		}
		mtls_set_state(t, MTLS_HANDSHAKE);
		/* FALLTHROUGH */
	case MTLS_HANDSHAKE:
		if (mtls_handshake(m) != 1)
			return;
		/* FALLTHROUGH */
	case MTLS_OPEN:
		if (mtls_send(m) != 1)
			return;
		break;
	}
	mstream_want_write(m, 0);
	mstream_finish(m);
}

void
mtls_read(struct zp_mstream *m)
{
	struct zp_mtls	*t = m->tls;
	char		 buf[4096];
	ssize_t		 n;
	int		 i;

	if (t->state != MTLS_OPEN) {
		mtls_drain(m);
		return;
	}
	/* A bounded pass: a mirror that talks fast must not hold the loop. */
	for (i = 0; i < ZP_DRAIN_PASSES; i++) {
		if ((n = zp_tls_read(t->tls, buf, sizeof(buf))) > 0)
			continue;
		if (n == 0) {
			m->rdeof = 1;
			event_del(m->rev);
			if (m->wshut)
				mstream_close(m);
		} else if (errno != EAGAIN) {
			/* A reset: what it had not taken is lost to it. */
			if (m->wshut)
				mstream_close(m);
			else
				mstream_drop(m, errno == EPROTO ? "TLS error" :
				    strerror(errno));
		}
		return;
	}
	/* What OpenSSL holds decrypted, no socket event will announce. */
	if (zp_tls_pending(t->tls))
		event_active(m->rev, EV_READ, 1);
}

int
mtls_timeout(struct zp_mstream *m)
{
	if (m->tls->state == MTLS_OPEN)
		return 0;
	mtls_fail(m, ZP_TLS_TIMEOUT, "no handshake within --connect-timeout");
	return 1;
}

int
mtls_notify(struct zp_mstream *m)
{
	struct zp_mtls	*t = m->tls;

	if (zp_tls_close_notify(t->tls) == 0) {
		/* Nothing more to write: the stage goes, as the pipe does. */
		free(t->stage);
		t->stage = NULL;
		return 1;
	}
	if (errno == EAGAIN) {
		mstream_want_write(m, 1);
		return 0;
	}
	mstream_drop(m, strerror(errno));
	return -1;
}
