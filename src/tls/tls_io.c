/*
 * tls_io.c - one TLS session over a non-blocking socket (tls_io.h).
 *
 * OpenSSL's error queue is per thread and outlives the call that filled
 * it: each call here starts with it empty, so that SSL_get_error reads
 * this call's failure and not an older one.
 */

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "tls/tls_io.h"

struct zp_tls {
	SSL		*ssl;
	size_t		 wcommit;	/* an EAGAIN write's count, or 0 */
	unsigned	 notified:1;	/* close_notify sent */
	enum zp_tls_fail fail;
	char		 text[96];	/* OpenSSL's reason */
};

static const char *const fail_names[ZP_TLS_FAIL_MAX] = {
	[ZP_TLS_OK] = "ok",
	[ZP_TLS_TIMEOUT] = "timeout",
	[ZP_TLS_CLOSED] = "closed",
	[ZP_TLS_PROTOCOL_VERSION] = "protocol-version",
	[ZP_TLS_NO_CERT] = "no-certificate",
	[ZP_TLS_UNKNOWN_CA] = "unknown-ca",
	[ZP_TLS_EXPIRED] = "expired",
	[ZP_TLS_BAD_CERT] = "bad-certificate",
	[ZP_TLS_NAME_MISMATCH] = "name-mismatch",
	[ZP_TLS_NOT_TLS] = "not-tls",
	[ZP_TLS_PEER_REJECTED] = "peer-rejected",
	[ZP_TLS_EVICTED] = "evicted",
	[ZP_TLS_OTHER] = "other",
};

const char *
zp_tls_fail_str(int f)
{
	return f >= 0 && f < ZP_TLS_FAIL_MAX ? fail_names[f] : "other";
}

struct zp_tls *
zp_tls_wrap(SSL *ssl)
{
	struct zp_tls	*t;

	if ((t = calloc(1, sizeof(*t))) == NULL) {
		SSL_free(ssl);
		return NULL;
	}
	t->ssl = ssl;
	return t;
}

void
zp_tls_free(struct zp_tls *t)
{
	if (t == NULL)
		return;
	SSL_free(t->ssl);
	free(t);
}

/* A certificate that did not verify: why, in the metrics' words. */
static enum zp_tls_fail
verify_fail(long v)
{
	switch (v) {
	case X509_V_ERR_CERT_HAS_EXPIRED:
	case X509_V_ERR_CERT_NOT_YET_VALID:
		return ZP_TLS_EXPIRED;
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
	case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
	case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
	case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
	case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
	case X509_V_ERR_CERT_UNTRUSTED:
		return ZP_TLS_UNKNOWN_CA;
	case X509_V_ERR_HOSTNAME_MISMATCH:
	case X509_V_ERR_IP_ADDRESS_MISMATCH:
		return ZP_TLS_NAME_MISMATCH;
	default:
		return ZP_TLS_BAD_CERT;
	}
}

/* OpenSSL's reason for a failed handshake, in the metrics' words. */
static enum zp_tls_fail
reason_fail(int reason)
{
	switch (reason) {
	case SSL_R_UNSUPPORTED_PROTOCOL:
	case SSL_R_NO_PROTOCOLS_AVAILABLE:
	case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
	case SSL_R_VERSION_TOO_LOW:
	case SSL_R_NO_SHARED_CIPHER:
		return ZP_TLS_PROTOCOL_VERSION;
	case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
	case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
		return ZP_TLS_NO_CERT;
	/* Alerts the peer sent: it refused our certificate. */
	case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
	case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
	case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
		return ZP_TLS_PEER_REJECTED;
	case SSL_R_WRONG_VERSION_NUMBER:
	case SSL_R_HTTP_REQUEST:
	case SSL_R_HTTPS_PROXY_REQUEST:
	case SSL_R_PACKET_LENGTH_TOO_LONG:
	case SSL_R_RECORD_LENGTH_MISMATCH:
	case SSL_R_UNKNOWN_PROTOCOL:
	case SSL_R_UNEXPECTED_MESSAGE:
	case SSL_R_UNEXPECTED_RECORD:
	case SSL_R_LENGTH_MISMATCH:
	case SSL_R_BAD_PACKET_LENGTH:
	case SSL_R_RECORD_TOO_SMALL:
		return ZP_TLS_NOT_TLS;
	case SSL_R_UNEXPECTED_EOF_WHILE_READING:
		return ZP_TLS_CLOSED;
	default:
		return ZP_TLS_OTHER;
	}
}

/* Note why the handshake failed (e: SSL_get_error's). */
static void
handshake_failed(struct zp_tls *t, int e)
{
	unsigned long	err = ERR_peek_last_error();
	long		v = SSL_get_verify_result(t->ssl);
	const char	*r;

	t->text[0] = '\0';
	if (err != 0 && (r = ERR_reason_error_string(err)) != NULL)
		snprintf(t->text, sizeof(t->text), "%s", r);
	if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL &&
	    err == 0)) {
		t->fail = ZP_TLS_CLOSED;
		if (t->text[0] == '\0')
			snprintf(t->text, sizeof(t->text), "%s", errno != 0 ?
			    strerror(errno) : "closed by the peer");
	} else if (v != X509_V_OK) {
		t->fail = verify_fail(v);
		snprintf(t->text, sizeof(t->text), "%s",
		    X509_verify_cert_error_string(v));
	} else if (err != 0 && ERR_GET_LIB(err) == ERR_LIB_SSL)
		t->fail = reason_fail(ERR_GET_REASON(err));
	else
		t->fail = ZP_TLS_OTHER;
	ERR_clear_error();
}

int
zp_tls_handshake(struct zp_tls *t, short *want)
{
	int	r, e;

	ERR_clear_error();
	errno = 0;
	if ((r = SSL_do_handshake(t->ssl)) == 1)
		return 1;
	switch ((e = SSL_get_error(t->ssl, r))) {
	case SSL_ERROR_WANT_READ:
		*want = EV_READ;
		return 0;
	case SSL_ERROR_WANT_WRITE:
		*want = EV_WRITE;
		return 0;
	default:
		handshake_failed(t, e);
		return -1;
	}
}

enum zp_tls_fail
zp_tls_failure(const struct zp_tls *t)
{
	return t->fail;
}

const char *
zp_tls_failure_text(const struct zp_tls *t)
{
	return t->text;
}

/*
 * After a read or write that did not move bytes: errno for the caller.
 * Returns 0 for the end of the stream (reads only), else -1.
 */
static int
io_error(struct zp_tls *t, int r)
{
	int	e = SSL_get_error(t->ssl, r), saved = errno;

	ERR_clear_error();
	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		/* No errno: the peer closed without a word (a FIN). */
		if (saved == 0)
			return 0;
		errno = saved;
		return -1;
	default:
		errno = EPROTO;
		return -1;
	}
}

/* SSL_read or SSL_peek, with recv's contract (zp_tls_read). */
static ssize_t
tls_take(struct zp_tls *t, void *buf, size_t len,
    int (*take)(SSL *, void *, int))
{
	int	r;

	if (len > INT32_MAX)
		len = INT32_MAX;
	ERR_clear_error();
	errno = 0;
	if ((r = take(t->ssl, buf, (int)len)) > 0)
		return r;
	return io_error(t, r);
}

ssize_t
zp_tls_read(struct zp_tls *t, void *buf, size_t len)
{
	return tls_take(t, buf, len, SSL_read);
}

ssize_t
zp_tls_peek(struct zp_tls *t, void *buf, size_t len)
{
	return tls_take(t, buf, len, SSL_peek);
}

/*
 * One record at a time (SSL_MODE_ENABLE_PARTIAL_WRITE), as many as the
 * socket takes: a write that stopped at one record would look short to
 * the relay, which then waits for the socket's write event in vain.
 */
ssize_t
zp_tls_write(struct zp_tls *t, const void *buf, size_t len)
{
	const char	*p = buf;
	size_t		 done = 0, ask;
	int		 r;

	/* What OpenSSL took last time must be offered again, whole. */
	if (len < t->wcommit) {
		errno = EINVAL;
		return -1;
	}
	while (done < len) {
		ask = len - done > INT32_MAX ? INT32_MAX : len - done;
		ERR_clear_error();
		errno = 0;
		if ((r = SSL_write(t->ssl, p + done, (int)ask)) > 0) {
			t->wcommit = 0;
			done += (size_t)r;
			continue;
		}
		if (io_error(t, r) == 0)
			errno = EPIPE;	/* writes have no end of stream */
		if (errno == EAGAIN && t->wcommit < ask)
			t->wcommit = ask;
		if (done > 0 && errno == EAGAIN)
			break;
		return done > 0 ? (ssize_t)done : -1;
	}
	return (ssize_t)done;
}

size_t
zp_tls_write_committed(const struct zp_tls *t)
{
	return t->wcommit;
}

int
zp_tls_close_notify(struct zp_tls *t)
{
	int	r;

	if (t->notified)
		return 0;
	ERR_clear_error();
	errno = 0;
	/* 0: sent, the peer's not seen yet; 1: both. Either will do. */
	if ((r = SSL_shutdown(t->ssl)) >= 0) {
		t->notified = 1;
		return 0;
	}
	if (io_error(t, r) == 0)
		errno = EPIPE;
	return -1;
}

int
zp_tls_pending(const struct zp_tls *t)
{
	return SSL_has_pending(t->ssl);
}

const char *
zp_tls_version(const struct zp_tls *t)
{
	return SSL_get_version(t->ssl);
}

int
zp_tls_resumed(const struct zp_tls *t)
{
	return SSL_session_reused(t->ssl) == 1;
}

void
zp_tls_peer_subject(const struct zp_tls *t, char *buf, size_t len)
{
	X509		*c = SSL_get0_peer_certificate(t->ssl);
	BIO		*b;
	int		 n;

	buf[0] = '\0';
	if (c == NULL || len == 0 || (b = BIO_new(BIO_s_mem())) == NULL)
		return;
	if (X509_NAME_print_ex(b, X509_get_subject_name(c), 0,
	    XN_FLAG_RFC2253) >= 0 && (n = BIO_read(b, buf, (int)len - 1)) > 0)
		buf[n] = '\0';
	BIO_free(b);
	ERR_clear_error();
}
