/*
 * tls_int.h - what the server's contexts (tls.c) and the upstreams'
 * (tls_cli.c) share: how a context is set up, how a file is loaded, and
 * how OpenSSL's failures are said. Start-up and the loader thread only.
 */
#ifndef ZP_TLS_INT_H
#define ZP_TLS_INT_H

#include <stddef.h>
#include <time.h>

#include <openssl/ssl.h>

/*
 * The settings every context has (tls.c says why): min_version an enum
 * zp_tls_version; ciphers and suites NULL for OpenSSL's. Returns 0, or
 * -1 with err filled.
 */
int	zp_tls_common(SSL_CTX *, int min_version, const char *ciphers,
	    const char *suites, char *err, size_t errlen);

/*
 * Load a certificate chain and its private key (PEM) into ctx and check
 * that they match; cert_opt and key_opt name the options in the error
 * ("--tls-cert"). Returns 0, or -1 with err filled (an unreadable file,
 * an encrypted key, a mismatch).
 */
int	zp_tls_use_cert_key(SSL_CTX *, const char *cert, const char *key,
	    const char *cert_opt, const char *key_opt, char *err,
	    size_t errlen);

/* Can the process read file? -1 with err "what FILE: reason" if not. */
int	zp_tls_readable(const char *what, const char *file, char *err,
	    size_t errlen);

/* err: "what FILE: OpenSSL's reason" (file NULL: "what: reason"). */
void	zp_tls_fail(char *err, size_t errlen, const char *what,
	    const char *file);

/* An ASN1 time in seconds since the epoch; 0 if unreadable. */
time_t	zp_tls_time(const ASN1_TIME *);

/*
 * When the certificates of a PEM file stop being of use (tls.c); 0 when
 * none could be read.
 */
time_t	zp_tls_file_expiry(const char *file);

#endif
