/*
 * spool_sender.c - the spool's senders, in the I/O thread's loop: every
 * second (and as soon as a file went) DIR is scanned, and each stream's
 * first file goes to the balancer's choice, over a connection of its
 * own, with sendfile(2) (to a tls@ upstream: read and written through
 * its TLS session); checkpoints (sent=) in its header as the
 * upstream acknowledges it; unlinked once the upstream closed having
 * acknowledged every byte. With nothing to send and every upstream
 * down, a probe now and then, so that the writers may go live again.
 */
#include <sys/types.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/clock.h"
#include "core/config.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "lib/framing.h"
#include "lib/log.h"
#include "core/net.h"
#include "lib/proxyproto.h"
#include "spool/spool.h"
#include "spool/spool_int.h"
#include "core/upstream.h"
#include "tls/tls.h"
#include "tls/tls_io.h"

/* The most plaintext one TLS record carries (RFC 8446 5.1). */
#define SENDER_TLS_RECORD	16384

/* How often a closing upstream is looked at. */
#define SENDER_POLL_MS		20

enum sender_phase {
	SENDER_IDLE = 0,
	SENDER_CONNECTING,	/* a tls@ upstream's handshake too */
	SENDER_SENDING,
	SENDER_CLOSING,		/* FIN sent: wait for the ack and theirs */
};

/* One file on its way to an upstream (the I/O thread's). */
struct zp_sender {
	struct zp_spool		*sp;
	enum sender_phase	 phase;
	char			 name[ZP_SPOOL_NAME_MAX];
	int			 file;
	struct zp_connecting	 conn;		/* while SENDER_CONNECTING */
	int			 sock;
	struct zp_tls		*tls;		/* a tls@ upstream's session */
	struct timeval		 hs_deadline;	/* its handshake's, from the
						   connect's start */
	int			 notified;	/* its close_notify went */
	struct event		*ev;
	struct event		*timer;
	off_t			 off;
	off_t			 size;
	off_t			 hdrlen;
	off_t			 start;		/* this connection's first byte */
	/* Checkpoints: how far the upstream has it, to a boundary. */
	int			 ck_ok;		/* sent= can be written */
	int			 delim;		/* lf, nul; -1: the framer */
	off_t			 ck;		/* sent= says up to here */
	struct timeval		 ck_at;
	struct zp_framer	 fr;		/* octet, auto: fed up to fr_off */
	off_t			 fr_off;
	off_t			 fr_last;	/* its last boundary */
	int			 up_idx;
	struct zp_addr		 to;
	struct timeval		 since;		/* the phase began */
	int			 eof;		/* the upstream closed */
};

static void	sender_checkpoint(struct zp_sender *);
static void	sender_ck_cb(evutil_socket_t, short, void *);
static void	spool_probe(struct zp_spool *);

static int
sender_key_busy(const struct zp_spool *sp, const char *name)
{
	size_t	kl = spool_name_key_len(name);
	int	i;

	for (i = 0; i < sp->nsenders; i++)
		if (sp->senders[i].phase != SENDER_IDLE &&
		    spool_name_key_len(sp->senders[i].name) == kl &&
		    strncmp(sp->senders[i].name, name, kl) == 0)
			return 1;
	return 0;
}

static void
sender_reset(struct zp_sender *s)
{
	zp_connecting_cancel(&s->conn);
	if (s->ev != NULL)
		event_free(s->ev);
	if (s->timer != NULL)
		event_free(s->timer);
	s->ev = s->timer = NULL;
	zp_tls_free(s->tls);
	s->tls = NULL;
	s->notified = 0;
	if (s->sock != -1)
		close(s->sock);
	if (s->file != -1)
		close(s->file);
	s->sock = s->file = -1;
	s->phase = SENDER_IDLE;
	s->eof = 0;
}

static const char *
sender_to(struct zp_sender *s, char *buf, size_t len)
{
	return zp_addr_str(&s->to, buf, len);
}

/* Write sent= (file offset off, a boundary) and sync it. */
static int
sender_write_sent(struct zp_sender *s, off_t off)
{
	char	digits[ZP_SPOOL_SENT_DIGITS + 1];

	snprintf(digits, sizeof(digits), "%0*llu", ZP_SPOOL_SENT_DIGITS,
	    (unsigned long long)(off - s->hdrlen));
	if (pwrite(s->file, digits, ZP_SPOOL_SENT_DIGITS, s->hdrlen - 1 -
	    ZP_SPOOL_SENT_DIGITS) != ZP_SPOOL_SENT_DIGITS ||
	    fdatasync(s->file) == -1) {
		s->ck_ok = 0;
		return -1;
	}
	return 0;
}

/*
 * The file stays for the next try (another upstream, maybe), from where
 * this connection began: what this upstream's kernel acknowledged may
 * have died with it unread. (The checkpoints are for a zproxy that
 * dies, leaving its upstream to read what it has.)
 */
static void
sender_fail_why(struct zp_sender *s, int err, const char *why)
{
	struct zp_spool	*sp = s->sp;
	char		 to[ZP_ADDRSTRLEN];

	if (s->ck_ok && s->ck > s->start)
		(void)sender_write_sent(s, s->start);
	zp_clock_now(&sp->failed_at);
	if (s->phase == SENDER_CONNECTING)
		zp_upstream_report(sp->ctx->ups, (size_t)s->up_idx, 0, err,
		    &sp->failed_at);
	zp_log(sp->ctx->log, ZP_LOG_WARN, "spool: %s not delivered to %s "
	    "(%s); kept for the next try", s->name,
	    sender_to(s, to, sizeof(to)), why);
	sender_reset(s);
}

/* what: the step that failed ("connect", "sendfile", ...). */
static void
sender_fail(struct zp_sender *s, int err, const char *what)
{
	char	why[128];

	(void)snprintf(why, sizeof(why), "%s: %s", what, strerror(err));
	sender_fail_why(s, err, why);
}

/*
 * What the upstream says is dropped; 1 once it closed, 0 when nothing
 * more is there now, -1 with errno. A TLS session's is read through it:
 * a TLS 1.3 session's tickets come this way.
 */
static int
sender_drain(struct zp_sender *s)
{
	char	buf[4096];
	ssize_t	n;
	int	i;

	if (s->tls == NULL)
		return zp_sock_drain(s->sock, ZP_DRAIN_PASSES, NULL);
	/* Bounded: an upstream that talks on must not hold the loop. */
	for (i = 0; i < ZP_DRAIN_PASSES; i++) {
		if ((n = zp_tls_read(s->tls, buf, sizeof(buf))) == 0)
			return 1;
		if (n == -1)
			return errno == EAGAIN ? 0 : -1;
	}
	return 0;
}

static void
sender_delivered(struct zp_sender *s)
{
	struct zp_spool	*sp = s->sp;
	char		 to[ZP_ADDRSTRLEN];

	if (unlinkat(sp->dirfd, s->name, 0) == -1) {
		sender_fail(s, errno, "unlink");
		return;
	}
	spool_add(&sp->files, -1);
	spool_add(&sp->bytes, -(int64_t)s->size);
	spool_add(&sp->replayed, (int64_t)(s->size - s->start));
	spool_add(&sp->delivered, 1);
	zp_log(sp->ctx->log, ZP_LOG_NOTICE, "spool: %s delivered to %s "
	    "(%lld bytes)", s->name, sender_to(s, to, sizeof(to)),
	    (long long)(s->size - s->start));
	sender_reset(s);
	/* The stream's next file, or the next stream, without waiting. */
	event_active(sp->kick, EV_TIMEOUT, 0);
}

/*
 * Our FIN went: read (and drop) what the upstream says until it closes;
 * the file is delivered once it closed and acknowledged everything
 * (SIOCOUTQ 0, our FIN too). Its kernel's acknowledgement alone is not
 * enough (the collector may die before it reads): one that has not
 * closed within --linger-timeout failed, and the file is sent again.
 */
static void
sender_closing_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	struct timeval		 now, dt, lim;
	int			 outq, rc = 0;

	/* Bounded: an upstream that talks on must not hold the loop. */
	if (!s->eof && (rc = sender_drain(s)) == -1) {
		sender_fail(s, errno, "closing");
		return;
	}
	if (rc == 1) {
		s->eof = 1;
		event_del(s->ev);
	}
	if ((outq = zp_sock_outq(s->sock)) == 0 && s->eof) {
		sender_delivered(s);
		return;
	}
	/* All of it is in the socket; the upstream may still be slow. */
	sender_checkpoint(s);
	zp_clock_now(&now);
	timersub(&now, &s->since, &dt);
	lim = zp_seconds_tv(s->sp->ctx->cfg->linger_timeout);
	if (!timercmp(&dt, &lim, <))
		sender_fail(s, ETIMEDOUT, outq == 0 ? "the upstream's close" :
		    "acknowledgement");
}

/*
 * To a tls@ upstream: the file's next bytes (at most max, at least what
 * a short write left committed: the file holds the same bytes there)
 * through its session. Returns the bytes taken, -1 with errno.
 */
static ssize_t
sender_tls_send(struct zp_sender *s, size_t max)
{
	char	buf[SENDER_TLS_RECORD];
	size_t	len = sizeof(buf), c = zp_tls_write_committed(s->tls);
	ssize_t	n;

	if (len > max)
		len = max < c ? c : max;
	if ((off_t)len > s->size - s->off)
		len = (size_t)(s->size - s->off);
	if ((n = pread(s->file, buf, len, s->off)) <= 0) {
		if (n == 0)
			errno = EIO;
		return -1;
	}
	if ((n = zp_tls_write(s->tls, buf, (size_t)n)) > 0)
		s->off += n;
	return n;
}

static void
sender_send_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	struct zp_ctx		*ctx = s->sp->ctx;
	struct timeval		 tv = { 0, SENDER_POLL_MS * 1000 };
	size_t			 left = ctx->budget;
	ssize_t			 n;

	/* One budget a wake-up: live pairs come between. */
	while (s->off < s->size && left > 0) {
		if (s->tls != NULL)
			n = sender_tls_send(s, left);
		else
			n = sendfile(s->sock, s->file, &s->off,
			    (size_t)(s->size - s->off) < left ?
			    (size_t)(s->size - s->off) : left);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return;
		if (n <= 0) {
			sender_fail(s, n == 0 ? EIO : errno, s->tls != NULL ?
			    "TLS write" : "sendfile");
			return;
		}
		left -= (size_t)n;
	}
	sender_checkpoint(s);
	if (s->off < s->size)
		return;
	/* close_notify before the FIN: the end of the file, not a cut. */
	if (s->tls != NULL && !s->notified) {
		if (zp_tls_close_notify(s->tls) == -1) {
			if (errno != EAGAIN)
				sender_fail(s, errno, "close_notify");
			return;
		}
		s->notified = 1;
	}
	if (shutdown(s->sock, SHUT_WR) == -1) {
		sender_fail(s, errno, "shutdown");
		return;
	}
	event_free(s->ev);
	if (s->timer != NULL)
		event_free(s->timer);
	s->timer = NULL;
	s->phase = SENDER_CLOSING;
	zp_clock_now(&s->since);
	if ((s->ev = event_new(s->sp->base, s->sock, EV_READ | EV_PERSIST,
	    sender_closing_cb, s)) == NULL ||
	    (s->timer = event_new(s->sp->base, -1, EV_PERSIST,
	    sender_closing_cb, s)) == NULL || event_add(s->ev, NULL) == -1 ||
	    event_add(s->timer, &tv) == -1)
		sender_fail(s, ENOMEM, "events");
}

/*
 * File fd's offset just past the last delim in [lo, hi), or -1 when
 * there is none (or it could not be read).
 */
static off_t
delim_back(int fd, off_t lo, off_t hi, int delim)
{
	char		 b[64 * 1024];
	const char	*d;
	size_t		 m;

	for (; hi > lo; hi -= (off_t)m) {
		m = hi - lo < (off_t)sizeof(b) ? (size_t)(hi - lo) : sizeof(b);
		if (pread(fd, b, m, hi - (off_t)m) != (ssize_t)m)
			return -1;
		if ((d = memrchr(b, delim, m)) != NULL)
			return hi - (off_t)m + (d - b) + 1;
	}
	return -1;
}

/*
 * Feed framer fr file fd's bytes from *off up to to, moving *off on;
 * *last becomes the offset of the last boundary reached, when one is.
 * Stops at a framing error (zp_framer_error() tells).
 */
static void
frames_walk(int fd, struct zp_framer *fr, off_t *off, off_t to, off_t *last)
{
	char	b[64 * 1024];
	size_t	m, r;
	ssize_t	n;

	while (*off < to && zp_framer_error(fr, NULL) == NULL) {
		m = to - *off < (off_t)sizeof(b) ? (size_t)(to - *off) :
		    sizeof(b);
		if ((n = pread(fd, b, m, *off)) <= 0)
			break;
		if ((r = zp_framer_feed(fr, b, (size_t)n)) > 0)
			*last = *off + (off_t)r;
		*off += n;
	}
}

/* The boundary at or before sent= to resume at; see spool.h. */
uint64_t
zp_spool_resume(int fd, off_t data, uint64_t sent, int framing,
    uint64_t max_frame)
{
	struct zp_framer	fr;
	off_t			off = data, last = data, b;

	if (framing == ZP_FRAMING_LF || framing == ZP_FRAMING_NUL) {
		b = delim_back(fd, data, data + (off_t)sent,
		    framing == ZP_FRAMING_LF ? '\n' : '\0');
		return b == -1 ? 0 : (uint64_t)(b - data);
	}
	/* A length prefix is only known from the frame before it. */
	if (zp_framer_init(&fr, framing, max_frame) == -1)
		return 0;
	frames_walk(fd, &fr, &off, data + (off_t)sent, &last);
	return (uint64_t)(last - data);
}

/*
 * The last frame boundary at or before file offset `acked`, past the
 * last checkpoint; or the last checkpoint when none is known. Delimited
 * streams look back for a delimiter; octet (and auto) follow the frames
 * with a framer over what was sent, read again.
 */
static off_t
sender_boundary(struct zp_sender *s, off_t acked)
{
	off_t	b;

	if (s->delim != -1) {
		b = delim_back(s->file, s->ck, acked, s->delim);
		return b == -1 ? s->ck : b;
	}
	frames_walk(s->file, &s->fr, &s->fr_off, acked, &s->fr_last);
	/* A framing error: no boundary is known any more. */
	if (zp_framer_error(&s->fr, NULL) != NULL)
		s->ck_ok = 0;
	return s->fr_last > s->ck ? s->fr_last : s->ck;
}

/*
 * Write down, in the file's header, how far the upstream acknowledged
 * it, to a frame boundary, at most every --spool-sync: a send that fails
 * or a zproxy that dies resumes there, and what reaches the collector
 * twice is at most what came after.
 */
static void
sender_checkpoint(struct zp_sender *s)
{
	struct timeval	now, dt, every;
	off_t		acked, b;
	int		outq;

	if (!s->ck_ok)
		return;
	zp_clock_now(&now);
	timersub(&now, &s->ck_at, &dt);
	every = zp_seconds_tv(s->sp->ctx->cfg->spool_sync);
	if (timercmp(&dt, &every, <) || (outq = zp_sock_outq(s->sock)) < 0)
		return;
	s->ck_at = now;
	/*
	 * Over TLS the queue counts records: what of the file's bytes the
	 * upstream has is at least what went, less as many as the queue
	 * holds and one record more (one acknowledged in part is unread).
	 */
	if (s->tls != NULL && outq > 0)
		outq += SENDER_TLS_RECORD;
	acked = s->off - outq;
	if (acked <= s->ck || (b = sender_boundary(s, acked)) <= s->ck ||
	    sender_write_sent(s, b) == -1)
		return;
	s->ck = b;
}

/* The upstream took us (a tls@ one: its handshake ended well). */
static void
sender_sending(struct zp_sender *s)
{
	struct zp_ctx	*ctx = s->sp->ctx;
	struct timeval	 now, every;

	zp_clock_now(&now);
	zp_upstream_report(ctx->ups, (size_t)s->up_idx, 1, 0, &now);
	s->phase = SENDER_SENDING;
	/* A checkpoint also while the upstream reads too slowly to wake us. */
	every = zp_seconds_tv(ctx->cfg->spool_sync);
	if (s->ev != NULL)
		event_free(s->ev);
	if ((s->ev = event_new(s->sp->base, s->sock, EV_WRITE | EV_PERSIST,
	    sender_send_cb, s)) == NULL || event_add(s->ev, NULL) == -1 ||
	    (s->timer = event_new(s->sp->base, -1, EV_PERSIST, sender_ck_cb,
	    s)) == NULL || event_add(s->timer, &every) == -1)
		sender_fail(s, ENOMEM, "events");
}

static void	sender_hs_cb(evutil_socket_t, short, void *);

/* A step of a tls@ upstream's handshake, within --connect-timeout. */
static void
sender_hs_step(struct zp_sender *s)
{
	struct timeval	now, left;
	short		want = EV_READ;
	char		why[192];

	switch (zp_tls_handshake(s->tls, &want)) {
	case 1:
		spool_add(&s->sp->tls_hs[ZP_TLS_OK], 1);
		sender_sending(s);
		return;
	case -1:
		spool_add(&s->sp->tls_hs[zp_tls_failure(s->tls)], 1);
		(void)snprintf(why, sizeof(why), "TLS handshake failed: %s%s%s",
		    zp_tls_fail_str(zp_tls_failure(s->tls)),
		    *zp_tls_failure_text(s->tls) != '\0' ? ": " : "",
		    zp_tls_failure_text(s->tls));
		sender_fail_why(s, EPROTO, why);
		return;
	}
	zp_clock_now(&now);
	if (!timercmp(&now, &s->hs_deadline, <)) {
		spool_add(&s->sp->tls_hs[ZP_TLS_TIMEOUT], 1);
		sender_fail_why(s, ETIMEDOUT, "TLS handshake failed: timeout: "
		    "none within --connect-timeout");
		return;
	}
	timersub(&s->hs_deadline, &now, &left);
	if (s->ev != NULL)
		event_free(s->ev);
	if ((s->ev = event_new(s->sp->base, s->sock, want, sender_hs_cb,
	    s)) == NULL || event_add(s->ev, &left) == -1)
		sender_fail(s, ENOMEM, "events");
}

static void
sender_hs_cb(evutil_socket_t fd, short what, void *arg)
{
	sender_hs_step(arg);
}

/*
 * Is upstream idx a tls@ one? Then a session on s->sock for it (its
 * names as a pair's would have), made; -1 when that failed.
 */
static int
sender_tls(struct zp_sender *s, int *tls)
{
	struct zp_ctx		*ctx = s->sp->ctx;
	struct zp_upstream	 u;
	struct ssl_st		*ssl;

	*tls = 0;
	if (ctx->tls_cli == NULL || s->up_idx < 0 ||
	    (size_t)s->up_idx >= zp_upstreams_count(ctx->ups))
		return 0;
	zp_upstream_get(ctx->ups, (size_t)s->up_idx, &u);
	if (u.spec == NULL || !u.spec->tls)
		return 0;
	*tls = 1;
	if ((ssl = zp_tls_cli_session(ctx->tls_cli, ZP_TLS_CLI_SPOOL,
	    s->sp->tls_cache, s->sock, u.spec->host, u.spec->port)) == NULL ||
	    (s->tls = zp_tls_wrap(ssl)) == NULL)
		return -1;
	return 0;
}

/* Connected: the PROXY header, then (tls@) the handshake, then the file. */
static void
sender_connected(struct zp_sender *s)
{
	struct zp_spool		*sp = s->sp;
	struct zp_ctx		*ctx = sp->ctx;
	struct zp_spool_hdr	 h;
	char			 b[ZP_SPOOL_HDR_MAX], ph[ZP_PROXY_MAX];
	ssize_t			 n, w;
	int			 tls;

	if (ctx->cfg->send_proxy) {
		n = pread(s->file, b, sizeof(b), 0);
		if (n <= 0 || zp_spool_hdr_parse(b, (size_t)n, &h) <= 0 ||
		    (n = zp_proxy_header(ctx->cfg->send_proxy, h.dgram,
		    (struct sockaddr *)&h.client.ss,
		    (struct sockaddr *)&h.dst.ss, ph, sizeof(ph))) == -1) {
			sender_fail(s, EINVAL, "PROXY header");
			return;
		}
		w = send(s->sock, ph, (size_t)n, MSG_NOSIGNAL);
		if (w != n) {
			sender_fail(s, w == -1 ? errno : EAGAIN,
			    "PROXY header");
			return;
		}
	}
	if (sender_tls(s, &tls) == -1) {
		sender_fail(s, ENOMEM, "TLS");
		return;
	}
	if (!tls) {
		sender_sending(s);
		return;
	}
	/* The ClientHello goes now: a fresh socket has room for it. */
	sender_hs_step(s);
}

static void
sender_ck_cb(evutil_socket_t fd, short what, void *arg)
{
	sender_checkpoint(arg);
}

static void
sender_connect_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_sender	*s = arg;
	int			 err = zp_connecting_result(&s->conn, what);

	if (err != 0)
		sender_fail(s, err, "connect");	/* its reset cancels conn */
	else {
		s->sock = zp_connecting_take(&s->conn);
		sender_connected(s);
	}
}

/*
 * Open file name for s, locked, and read its header into *h. Returns the
 * header's length, or 0 when the file was skipped (gone, or set aside:
 * no header), s reset.
 */
static int
sender_open(struct zp_sender *s, const char *name, struct zp_spool_hdr *h)
{
	struct zp_spool		*sp = s->sp;
	struct stat		 st, cur;
	char			 b[ZP_SPOOL_HDR_MAX];
	ssize_t			 n;
	int			 hl;

	/*
	 * Another sender has it (a takeover's other zproxy), or it went
	 * between the listing and the lock: not ours now.
	 */
	if ((s->file = openat(sp->dirfd, name, O_RDWR | O_CLOEXEC |
	    O_NOFOLLOW)) == -1 || spool_file_lock(s->file) == -1 ||
	    fstat(s->file, &st) == -1 || fstatat(sp->dirfd, name, &cur,
	    AT_SYMLINK_NOFOLLOW) == -1 || cur.st_ino != st.st_ino ||
	    cur.st_dev != st.st_dev) {
		sender_reset(s);
		return 0;
	}
	s->size = st.st_size;
	n = pread(s->file, b, sizeof(b), 0);
	if (n < 0 || (hl = zp_spool_hdr_parse(b, (size_t)n, h)) <= 0) {
		/* Not ours to send: set aside, no longer counted. */
		zp_log(sp->ctx->log, ZP_LOG_WARN, "spool: %s has no valid "
		    "header; renamed .bad, not sent", name);
		if (spool_rename(sp, name, "bad") == 0) {
			spool_add(&sp->files, -1);
			spool_add(&sp->bytes, -(int64_t)s->size);
		}
		sender_reset(s);
		return 0;
	}
	return hl;
}

/*
 * Where s begins in file name, whose header h is hl bytes long: past it,
 * and past what an upstream acknowledged before, to a boundary; and how
 * its checkpoints will be found.
 */
static void
sender_resume(struct zp_sender *s, const char *name,
    const struct zp_spool_hdr *h, int hl)
{
	struct zp_ctx	*ctx = s->sp->ctx;
	uint64_t	 at;

	s->hdrlen = s->off = hl;
	/*
	 * Acknowledged before: a failed send, or a run that died. sent= is
	 * only read, not trusted: a corrupted or edited one inside a
	 * message would send the collector a torn one, so the resume is at
	 * the boundary at or before it (a message twice rather than torn).
	 */
	if (h->sent > 0 && h->sent <= (uint64_t)(s->size - hl)) {
		at = zp_spool_resume(s->file, hl, h->sent, h->framing,
		    ZP_FRAME_MAX);
		s->off += (off_t)at;
		if (at != h->sent)
			zp_log(ctx->log, ZP_LOG_WARN, "spool: %s: sent=%llu "
			    "is not a message boundary; resumes after %llu "
			    "bytes, the boundary before it", name,
			    (unsigned long long)h->sent,
			    (unsigned long long)at);
		else
			zp_log(ctx->log, ZP_LOG_NOTICE, "spool: %s resumes "
			    "after the %llu bytes an upstream had already",
			    name, (unsigned long long)h->sent);
	}
	s->start = s->ck = s->fr_off = s->fr_last = s->off;
	zp_clock_now(&s->ck_at);
	s->delim = h->framing == ZP_FRAMING_LF ? '\n' :
	    h->framing == ZP_FRAMING_NUL ? '\0' : -1;
	/*
	 * The writer held each message to its stream's bound (a UDP
	 * source's may pass --max-frame): here only the boundaries are
	 * found again.
	 */
	s->ck_ok = h->sent_fixed && zp_framer_init(&s->fr, h->framing,
	    ZP_FRAME_MAX) == 0;
}

/*
 * Send file name (whole: its header checked) to the balancer's choice.
 * Returns 0 when it began, 1 when the file was skipped (gone, or set
 * aside: no header), -1 when no upstream could be tried (logged).
 */
static int
sender_start(struct zp_sender *s, const char *name)
{
	struct zp_spool		*sp = s->sp;
	struct zp_ctx		*ctx = sp->ctx;
	struct zp_spool_hdr	 h;
	struct timeval		 now, tv;
	unsigned char		 tried[ZP_MAX_UPSTREAMS];
	size_t			 na;
	int			 rc, hl;

	snprintf(s->name, sizeof(s->name), "%s", name);
	if ((hl = sender_open(s, name, &h)) == 0)
		return 1;
	sender_resume(s, name, &h, hl);
	memset(tried, 0, sizeof(tried));
	zp_clock_now(&now);
	s->since = now;
	if ((s->up_idx = zp_upstream_pick(ctx->ups, &h.client, tried,
	    &now)) < 0 || (na = zp_upstream_addr(ctx->ups,
	    (size_t)s->up_idx, 0, &s->to)) == 0) {
		sender_reset(s);
		return -1;
	}
	(void)zp_upstream_addr(ctx->ups, (size_t)s->up_idx,
	    sp->attempt++ % na, &s->to);
	s->phase = SENDER_CONNECTING;
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	timeradd(&now, &tv, &s->hs_deadline);
	if ((rc = zp_connecting_start(&s->conn, sp->base, &s->to, NULL, 0,
	    &tv, sender_connect_cb, s)) == -1) {
		sender_fail(s, errno, "connect");
		return -1;
	}
	if (rc == 0) {
		s->sock = zp_connecting_take(&s->conn);
		sender_connected(s);
	}
	return 0;
}

/* Is any upstream up, so that files may go; else one try now and then. */
static int
sender_may(struct zp_spool *sp, int *probe)
{
	struct zp_ctx		*ctx = sp->ctx;
	struct timeval		 now, dt, wait;

	*probe = 0;
	if (zp_upstreams_any_up(ctx->ups))
		return 1;
	zp_clock_now(&now);
	timersub(&now, &sp->failed_at, &dt);
	wait = zp_seconds_tv(ctx->cfg->fail_timeout);
	if (timercmp(&dt, &wait, <))
		return 0;
	*probe = 1;
	return 1;
}

static void
probe_done(struct zp_spool *sp, int err)
{
	struct timeval	now;

	zp_clock_now(&now);
	zp_upstream_report(sp->ctx->ups, (size_t)sp->probe_idx, err == 0, err,
	    &now);
	if (err != 0)
		sp->failed_at = now;
	zp_connecting_cancel(&sp->probe);
}

static void
probe_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool	*sp = arg;

	probe_done(sp, zp_connecting_result(&sp->probe, what));
}

/* A connect to the balancer's choice, only to report how it went. */
static void
spool_probe(struct zp_spool *sp)
{
	struct zp_ctx	*ctx = sp->ctx;
	struct zp_addr	 any, a;
	struct timeval	 now, tv;
	unsigned char	 tried[ZP_MAX_UPSTREAMS];
	int		 rc;

	if (sp->probe.fd != -1)
		return;
	memset(&any, 0, sizeof(any));
	memset(tried, 0, sizeof(tried));
	zp_clock_now(&now);
	if ((sp->probe_idx = zp_upstream_pick(ctx->ups, &any, tried,
	    &now)) < 0 || zp_upstream_addr(ctx->ups, (size_t)sp->probe_idx,
	    0, &a) == 0)
		return;
	tv = zp_seconds_tv(ctx->cfg->connect_timeout);
	if ((rc = zp_connecting_start(&sp->probe, sp->base, &a, NULL, 0, &tv,
	    probe_cb, sp)) == -1) {
		sp->failed_at = now;
		return;
	}
	if (rc == 0)
		probe_done(sp, 0);
}

/* Every second, and when a file was delivered: start what may start. */
void
spool_sender_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_spool	*sp = arg;
	size_t		 i, kl, okl = 0;
	const char	*other = NULL;
	int		 k, rc = 0, probe, started = 0;

	for (k = 0; k < sp->nsenders; k++)
		if (sp->senders[k].phase == SENDER_IDLE)
			break;
	/* The gauges are counted again, whatever happens next. */
	if (spool_scan(sp) == -1 || k == sp->nsenders || sp->nnames == 0 ||
	    !sender_may(sp, &probe)) {
		spool_names_clear(sp);
		return;
	}
	for (i = 0; i < sp->nnames && k < sp->nsenders; i++) {
		const char	*name = sp->names[i];

		kl = spool_name_key_len(name);
		/* Only a stream's first file left; none still written. */
		if ((other != NULL && kl == okl &&
		    strncmp(other, name, kl) == 0) ||
		    strcmp(spool_name_suffix(name), "open") == 0 ||
		    sender_key_busy(sp, name)) {
			other = name;
			okl = kl;
			continue;
		}
		other = name;
		okl = kl;
		if ((rc = sender_start(&sp->senders[k], name)) == 0)
			started++;
		/* A failed connect waits for the next tick. */
		if (rc == -1 || (probe && started > 0))
			break;
		while (k < sp->nsenders && sp->senders[k].phase !=
		    SENDER_IDLE)
			k++;
	}
	spool_names_clear(sp);
	/*
	 * Nothing to send yet (files still written) while every upstream
	 * looks down: see whether one is back, so that the writers may cut
	 * their files and go live; else nothing would ever tell.
	 */
	if (probe && started == 0 && rc != -1)
		spool_probe(sp);
}

int
spool_senders_new(struct zp_spool *sp)
{
	int	i;

	if ((sp->senders = calloc((size_t)sp->ctx->cfg->spool_senders,
	    sizeof(*sp->senders))) == NULL)
		return -1;
	/* Counted once they exist: spool_senders_free() walks them. */
	sp->nsenders = sp->ctx->cfg->spool_senders;
	for (i = 0; i < sp->nsenders; i++) {
		sp->senders[i].sp = sp;
		sp->senders[i].file = sp->senders[i].sock = -1;
		zp_connecting_init(&sp->senders[i].conn);
	}
	return 0;
}

void
spool_senders_free(struct zp_spool *sp)
{
	int	i;

	for (i = 0; i < sp->nsenders; i++)
		sender_reset(&sp->senders[i]);
	free(sp->senders);
}
