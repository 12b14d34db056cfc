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

/* --upstream-verify: an upstream's certificate is checked, or not. */
enum zp_tls_verify {
	ZP_TLS_VERIFY_REQUIRED = 0,	/* default */
	ZP_TLS_VERIFY_NONE,
};

/* "required" or "none" (cli's word parser): the enum, or -1. */
int	zp_tls_verify_parse(const char *);

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

/*
 * The client side, for -u tls@ upstreams and --mirror tls@ mirrors
 * (their certificates are checked alike): a context for each of
 * nthreads relay threads (none shares its certificate store), made from
 * --upstream-ca (else the system's trust store), --upstream-cert and
 * --upstream-key, --upstream-verify; *out is NULL when no upstream nor
 * mirror is tls@. Returns 0, or -1 with err filled. Start-up.
 */
struct zp_tls_cli;
struct zp_tls_cache;

int	zp_tls_cli_new(const struct zp_config *, int nthreads,
	    struct zp_tls_cli **out, char *err, size_t errlen);

/* Read the files again, as zp_tls_srv_reload. Thread-safe. */
int	zp_tls_cli_reload(struct zp_tls_cli *, char *err, size_t errlen);

/* zproxy_tls_cert_expiry_seconds: --upstream-cert, --upstream-ca. */
size_t	zp_tls_cli_expiry(struct zp_tls_cli *, const char **files,
	    int64_t *secs, size_t max);

/* Are upstream certificates verified (not --upstream-verify none)? */
int	zp_tls_cli_verifies(const struct zp_tls_cli *);

/*
 * A thread's sessions to resume, one per upstream: made and freed by
 * the thread, used by it alone. NULL when out of memory.
 */
struct zp_tls_cache *zp_tls_cache_new(void);
void	zp_tls_cache_free(struct zp_tls_cache *);

/*
 * A new client session, of relay thread `thread`'s context (or the
 * spool's I/O thread's: ZP_TLS_CLI_SPOOL), on connected
 * socket fd (not started) to the upstream host:port: SNI and the certificate's name are host's (or
 * --upstream-sni's; an address literal is checked against the
 * certificate's addresses and sends no SNI); the session cache's last
 * session for it offered for resumption, and the new one kept there
 * (cache NULL: neither). NULL when out of memory. Thread-safe.
 */
#define ZP_TLS_CLI_SPOOL	(-1)
struct ssl_st *zp_tls_cli_session(struct zp_tls_cli *, int thread,
	    struct zp_tls_cache *, int fd, const char *host,
	    const char *port);

void	zp_tls_cli_free(struct zp_tls_cli *);

#endif
