/*
 * tls.h - the TLS settings of the command line made into OpenSSL
 * contexts: the server side of -l tls@ listeners (--tls-cert, --tls-key,
 * --tls-client-ca, --tls-min-version, --tls-ciphers, --tls-ciphersuites).
 *
 * A context is made at start-up and shared by every thread; each new
 * session takes a reference on it (OpenSSL's SSL_new), so a context
 * replaced later stays alive until its last session ends.
 */
#ifndef ZP_TLS_H
#define ZP_TLS_H

#include <stddef.h>
#include <stdint.h>

struct zp_config;
struct ssl_st;
struct zp_tls_srv;

/* --tls-min-version: the words and what they stand for. */
enum zp_tls_version {
	ZP_TLS_V12 = 0,		/* default */
	ZP_TLS_V13,
};

/* "1.2" or "1.3" (cli's word parser): the enum, or -1. */
int	zp_tls_version_parse(const char *);

/*
 * Is the configuration's TLS whole: a tls@ listener has a certificate
 * and a key; the TLS options without one say so? Returns 0, or -1 with
 * err filled (one line naming the problem).
 */
int	zp_tls_config_check(const struct zp_config *, char *err, size_t);

/*
 * The server context of the configuration's tls@ listeners: the
 * certificate chain and key loaded and matched, the client CA when
 * --tls-client-ca asks for client certificates. *out is NULL when no
 * listener is tls@. Returns 0, or -1 with err filled ("--tls-key
 * /etc/k.pem: ...").
 */
int	zp_tls_srv_new(const struct zp_config *, struct zp_tls_srv **out,
	    char *err, size_t errlen);

/*
 * Read the files again (SIGHUP, zproxy ctl reload): a new context for
 * new handshakes, the old one kept by the sessions made from it until
 * they end. Reads files: call it from a thread that may wait, never a
 * relay thread's loop. Returns 0, or -1 with err filled and the old
 * context still in use. Thread-safe.
 */
int	zp_tls_srv_reload(struct zp_tls_srv *, char *err, size_t errlen);

/*
 * zproxy_tls_cert_expiry_seconds: up to max files (--tls-cert, then
 * --tls-client-ca) and the seconds until the earliest notAfter of the
 * certificates in each (negative once expired), as last loaded.
 * Returns how many. Thread-safe.
 */
size_t	zp_tls_srv_expiry(struct zp_tls_srv *, const char **files,
	    int64_t *secs, size_t max);

/*
 * A new server session on accepted socket fd (not started), from the
 * context last loaded. NULL when out of memory. Thread-safe.
 */
struct ssl_st *zp_tls_srv_session(struct zp_tls_srv *, int fd);

/* Does it ask for client certificates (--tls-client-ca)? */
int	zp_tls_srv_mutual(const struct zp_tls_srv *);

void	zp_tls_srv_free(struct zp_tls_srv *);

#endif
