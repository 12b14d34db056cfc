/*
 * tls_io.h - one TLS session over a non-blocking socket, driven from the
 * event loop: the handshake, then reads and writes with the contract of
 * recv(2) and send(2), and close_notify for a FIN.
 *
 * OpenSSL may hold decrypted bytes that no socket event will announce
 * (zp_tls_pending); a write that fell short must be retried with at
 * least as many bytes, the same ones first (this module keeps that
 * promise for its caller: see zp_tls_write).
 */
#ifndef ZP_TLS_IO_H
#define ZP_TLS_IO_H

#include <sys/types.h>
#include <stddef.h>

struct ssl_st;
struct zp_tls;

/* Why a handshake failed: the metrics' result label, the log's tls_error. */
enum zp_tls_fail {
	ZP_TLS_OK = 0,
	ZP_TLS_TIMEOUT,		/* --tls-handshake-timeout */
	ZP_TLS_CLOSED,		/* the peer closed or reset it */
	ZP_TLS_PROTOCOL_VERSION, /* below --tls-min-version, or none shared */
	ZP_TLS_NO_CERT,		/* mutual TLS: the client sent none */
	ZP_TLS_UNKNOWN_CA,	/* its certificate: not from a CA we take */
	ZP_TLS_EXPIRED,		/* ... expired, or not valid yet */
	ZP_TLS_BAD_CERT,	/* ... refused otherwise */
	ZP_TLS_NAME_MISMATCH,	/* ... not for the name asked for */
	ZP_TLS_NOT_TLS,		/* what came was not a TLS handshake */
	ZP_TLS_PEER_REJECTED,	/* the peer refused our certificate (its
				   alert: unknown CA, expired, bad) */
	ZP_TLS_EVICTED,		/* closed to make room: --tls-max-pending */
	ZP_TLS_OTHER,		/* any other failure */
	ZP_TLS_FAIL_MAX
};

/* "timeout", "closed", "protocol-version", ... */
const char *zp_tls_fail_str(int);

/*
 * Take over ssl (set up on its socket, in its role), in every case: NULL
 * when out of memory, ssl freed.
 */
struct zp_tls *zp_tls_wrap(struct ssl_st *ssl);

void	zp_tls_free(struct zp_tls *);

/*
 * One step of the handshake. Returns 1 once complete, 0 while it waits
 * (*want: EV_READ or EV_WRITE, what the socket must become), -1 when it
 * failed (zp_tls_failure says why).
 */
int	zp_tls_handshake(struct zp_tls *, short *want);

/* Why the handshake failed, and OpenSSL's words for it ("" if none). */
enum zp_tls_fail zp_tls_failure(const struct zp_tls *);
const char *zp_tls_failure_text(const struct zp_tls *);

/*
 * Read decrypted bytes: > 0, 0 at the end (close_notify, or a FIN
 * without one), -1 with errno (EAGAIN: nothing now; ECONNRESET; EPROTO:
 * a TLS error).
 */
ssize_t	zp_tls_read(struct zp_tls *, void *, size_t);

/* As zp_tls_read, but the bytes stay to be read (recv's MSG_PEEK). */
ssize_t	zp_tls_peek(struct zp_tls *, void *, size_t);

/*
 * Write: bytes taken (> 0, maybe fewer than len), -1 with errno (EAGAIN:
 * the socket is full; EPIPE, ECONNRESET, EPROTO). After a write that
 * fell short, OpenSSL holds the next bytes committed: the next call
 * must offer at least zp_tls_write_committed() bytes, from where this
 * one stopped (the buffer may have moved), or it fails with EINVAL.
 */
ssize_t	zp_tls_write(struct zp_tls *, const void *, size_t);

/*
 * The smallest number of bytes the next write must be offered: 0, or
 * what an EAGAIN left committed.
 */
size_t	zp_tls_write_committed(const struct zp_tls *);

/*
 * Send close_notify (once). Returns 0 when it went (or had), -1 with
 * errno (EAGAIN: the socket is full; call again once writable).
 */
int	zp_tls_close_notify(struct zp_tls *);

/* Bytes OpenSSL holds that no socket event will announce. */
int	zp_tls_pending(const struct zp_tls *);

/*
 * For the connection's log line: the version ("TLSv1.3"), and the peer
 * certificate's subject ("" without one) in RFC 2253 form, escaped.
 */
const char *zp_tls_version(const struct zp_tls *);
/* Was the session resumed (no full handshake)? */
int	zp_tls_resumed(const struct zp_tls *);
void	zp_tls_peer_subject(const struct zp_tls *, char *, size_t);

#endif
