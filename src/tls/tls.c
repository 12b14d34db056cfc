/*
 * tls.c - the command line's TLS settings made into OpenSSL contexts
 * (tls.h). Everything here runs at start-up, on the main thread: a
 * setting that does not load is a start-up error naming the file and
 * OpenSSL's reason.
 */

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/config.h"
#include "lib/log.h"
#include "tls/tls.h"
#include "tls/tls_int.h"

/*
 * The options a context is made from, the server's own copy: the loader
 * thread makes it again from them (zp_tls_srv_reload) while the
 * configuration may be changed by zproxy ctl reload.
 */
struct tls_settings {
	char		*cert;
	char		*key;
	char		*client_ca;	/* or NULL */
	char		*ciphers;	/* or NULL */
	char		*suites;	/* or NULL */
	int		 min_version;	/* enum zp_tls_version */
};

/* A file's certificate, for zproxy_tls_cert_expiry_seconds. */
struct tls_expiry {
	const char	*file;		/* the settings' */
	time_t		 not_after;	/* the earliest in the file; 0: none */
};

#define TLS_FILES	2		/* --tls-cert, --tls-client-ca */

struct zp_tls_srv {
	pthread_mutex_t	 mu;		/* ctx and exp[] (reloads) */
	SSL_CTX		*ctx;
	struct tls_expiry exp[TLS_FILES];
	int		 mutual;	/* asks for client certificates */
	struct tls_settings set;
};

int
zp_tls_version_parse(const char *s)
{
	if (strcmp(s, "1.2") == 0)
		return ZP_TLS_V12;
	if (strcmp(s, "1.3") == 0)
		return ZP_TLS_V13;
	return -1;
}

int
zp_tls_verify_parse(const char *s)
{
	if (strcmp(s, "required") == 0)
		return ZP_TLS_VERIFY_REQUIRED;
	if (strcmp(s, "none") == 0)
		return ZP_TLS_VERIFY_NONE;
	return -1;
}

int
zp_tls_config_check(const struct zp_config *cfg, char *err, size_t errlen)
{
	if (zp_config_tls(cfg)) {
		if (cfg->tls_cert == NULL || cfg->tls_key == NULL) {
			zp_seterr(err, errlen, "-l tls@ needs --tls-cert and "
			    "--tls-key");
			return -1;
		}
		return 0;
	}
	if (cfg->tls_cert != NULL || cfg->tls_key != NULL ||
	    cfg->tls_client_ca != NULL || cfg->tls_ciphers != NULL ||
	    cfg->tls_ciphersuites != NULL) {
		zp_seterr(err, errlen, "--tls-cert, --tls-key, --tls-client-ca "
		    "and --tls-cipher* apply to -l tls@[ADDR]:PORT, and no "
		    "listener is one");
		return -1;
	}
	return 0;
}

/*
 * "what FILE: reason": OpenSSL's last error (its queue is emptied), or
 * errno's when OpenSSL has none (a file that cannot be opened).
 */
void
zp_tls_fail(char *err, size_t errlen, const char *what, const char *file)
{
	unsigned long	e = ERR_peek_last_error();
	char		why[256];

	if (e != 0 && ((ERR_GET_LIB(e) == ERR_LIB_SSL &&
	    ERR_GET_REASON(e) == ERR_R_PEM_LIB) || ERR_GET_LIB(e) ==
	    ERR_LIB_PEM))
		/* OpenSSL says "PEM lib": the file holds no such PEM block. */
		snprintf(why, sizeof(why), "not the PEM file expected (%s)",
		    ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_reason_error_string(e)
		    != NULL ? ERR_reason_error_string(e) : "no PEM block of "
		    "that kind");
	else if (e != 0) {
		/* The reason alone: "no such file", "no cipher match". */
		snprintf(why, sizeof(why), "%s", ERR_reason_error_string(e) !=
		    NULL ? ERR_reason_error_string(e) : "unknown error");
	} else
		snprintf(why, sizeof(why), "%s", strerror(errno != 0 ? errno :
		    EINVAL));
	ERR_clear_error();
	if (file != NULL)
		zp_seterr(err, errlen, "%s %s: %s", what, file, why);
	else
		zp_seterr(err, errlen, "%s: %s", what, why);
}

/*
 * A file the process must read: said plainly when it cannot (OpenSSL's
 * "system lib" would hide that it is missing or unreadable).
 */
int
zp_tls_readable(const char *what, const char *file, char *err, size_t errlen)
{
	FILE	*f;

	if ((f = fopen(file, "r")) == NULL) {
		zp_seterr(err, errlen, "%s %s: %s", what, file,
		    strerror(errno));
		return -1;
	}
	fclose(f);
	return 0;
}

/*
 * What every context of zproxy's has: the oldest version, no
 * renegotiation (a client could make the server work for free, and TLS
 * 1.3 has none), writes that may end short and be retried from a buffer
 * that moved (the relay's store compacts), buffers given back while a
 * session is idle (thousands of quiet shippers), and a peer that closes
 * the TCP connection without close_notify read as an end, not an error
 * (syslog shippers do: the bytes before it were whole records).
 */
int
zp_tls_common(SSL_CTX *ctx, int min_version, const char *ciphers,
    const char *suites, char *err, size_t errlen)
{
	int	min = min_version == ZP_TLS_V13 ? TLS1_3_VERSION :
		    TLS1_2_VERSION;

	if (SSL_CTX_set_min_proto_version(ctx, min) != 1) {
		zp_tls_fail(err, errlen, "--tls-min-version", NULL);
		return -1;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
	    SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (ciphers != NULL && SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
		zp_tls_fail(err, errlen, "--tls-ciphers", ciphers);
		return -1;
	}
	if (suites != NULL && SSL_CTX_set_ciphersuites(ctx, suites) != 1) {
		zp_tls_fail(err, errlen, "--tls-ciphersuites", suites);
		return -1;
	}
	return 0;
}

/*
 * A key file asked for a password: written by whoever builds a context,
 * at start-up or on the loader thread, one at a time.
 */
static int tls_password_asked;

static int
tls_no_password(char *buf, int size, int rwflag, void *arg)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)arg;
	tls_password_asked = 1;
	return 0;
}

/* --tls-client-ca: ask for, and require, a certificate it signed. */
static int
tls_client_ca(SSL_CTX *ctx, const char *file, char *err, size_t errlen)
{
	STACK_OF(X509_NAME)	*names;

	if (zp_tls_readable("--tls-client-ca", file, err, errlen) == -1)
		return -1;
	if (SSL_CTX_load_verify_locations(ctx, file, NULL) != 1) {
		zp_tls_fail(err, errlen, "--tls-client-ca", file);
		return -1;
	}
	/* The names sent in the CertificateRequest: which CAs we take. */
	if ((names = SSL_load_client_CA_file(file)) == NULL) {
		zp_tls_fail(err, errlen, "--tls-client-ca", file);
		return -1;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER |
	    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return 0;
}

/* See tls_int.h. */
int
zp_tls_use_cert_key(SSL_CTX *ctx, const char *cert, const char *key,
    const char *cert_opt, const char *key_opt, char *err, size_t errlen)
{
	unsigned long	e;
	int		mismatch = 0;

	if (zp_tls_readable(cert_opt, cert, err, errlen) == -1 ||
	    zp_tls_readable(key_opt, key, err, errlen) == -1)
		return -1;
	ERR_clear_error();
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		zp_tls_fail(err, errlen, cert_opt, cert);
		return -1;
	}
	/* An encrypted key would have OpenSSL prompt on the terminal. */
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_password);
	tls_password_asked = 0;
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
		e = ERR_peek_last_error();
		if (tls_password_asked) {
			zp_seterr(err, errlen, "%s %s: the key is encrypted; "
			    "zproxy takes an unencrypted key (openssl pkey -in "
			    "KEY -out PLAIN)", key_opt, key);
			ERR_clear_error();
			return -1;
		}
		if (ERR_GET_LIB(e) != ERR_LIB_X509 ||
		    ERR_GET_REASON(e) != X509_R_KEY_VALUES_MISMATCH) {
			zp_tls_fail(err, errlen, key_opt, key);
			return -1;
		}
		mismatch = 1;
	}
	ERR_clear_error();
	if (mismatch || SSL_CTX_check_private_key(ctx) != 1) {
		zp_seterr(err, errlen, "%s %s does not match the certificate of "
		    "%s %s", key_opt, key, cert_opt, cert);
		ERR_clear_error();
		return -1;
	}
	return 0;
}

/* An ASN1 time as seconds since the epoch; 0 when it cannot be read. */
time_t
zp_tls_time(const ASN1_TIME *a)
{
	struct tm	tm;

	memset(&tm, 0, sizeof(tm));
	if (a == NULL || ASN1_TIME_to_tm(a, &tm) != 1)
		return 0;
	return timegm(&tm);
}

/*
 * When the certificates of a PEM file stop being of use: the earliest
 * notAfter of those not expired yet (a chain is as good as its first to
 * expire; a CA bundle may hold roots long expired, which verify
 * nothing and are no alarm), or, when every one has expired, the
 * latest. 0: none could be read.
 */
time_t
zp_tls_file_expiry(const char *file)
{
	FILE	*f;
	X509	*c;
	time_t	 t, now = time(NULL), live = 0, dead = 0;

	if ((f = fopen(file, "r")) == NULL)
		return 0;
	while ((c = PEM_read_X509(f, NULL, NULL, NULL)) != NULL) {
		t = zp_tls_time(X509_get0_notAfter(c));
		if (t > now && (live == 0 || t < live))
			live = t;
		else if (t != 0 && t <= now && t > dead)
			dead = t;
		X509_free(c);
	}
	fclose(f);
	ERR_clear_error();	/* the end of the file reads as an error */
	return live != 0 ? live : dead;
}

/*
 * A server context from the settings: the certificate chain and key
 * loaded and matched, the client CAs. NULL with err filled. Reads the
 * files: start-up, or the loader thread.
 */
static SSL_CTX *
srv_ctx_build(const struct tls_settings *cfg, char *err, size_t errlen)
{
	/* Resumed sessions are tied to this context's settings. */
	static const unsigned char sid_ctx[] = "zproxy";
	SSL_CTX			*ctx;

	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		zp_tls_fail(err, errlen, "TLS", NULL);
		return NULL;
	}
	if (zp_tls_common(ctx, cfg->min_version, cfg->ciphers, cfg->suites,
	    err, errlen) == -1)
		goto fail;
	/*
	 * No TLS 1.3 session tickets: they are sent after the handshake,
	 * and a shipper that only writes never reads them; when it closes
	 * with them unread, its kernel answers with a reset and drops what
	 * it had not sent yet (openssl#7948; syslog-ng turned them off for
	 * the same reason). TLS 1.2 clients still resume (session ids,
	 * tickets inside the handshake).
	 */
	(void)SSL_CTX_set_num_tickets(ctx, 0);
	if (zp_tls_use_cert_key(ctx, cfg->cert, cfg->key, "--tls-cert",
	    "--tls-key", err, errlen) == -1)
		goto fail;
	if (cfg->client_ca != NULL && tls_client_ca(ctx, cfg->client_ca, err,
	    errlen) == -1)
		goto fail;
	(void)SSL_CTX_set_session_id_context(ctx, sid_ctx,
	    sizeof(sid_ctx) - 1);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/*
 * The files' notAfter, read outside the lock (files are slow); the
 * certificate's own leaf when its file cannot be read again.
 */
static void
srv_expiry(const struct tls_settings *set, SSL_CTX *ctx,
    struct tls_expiry *exp)
{
	exp[0].file = set->cert;
	if ((exp[0].not_after = zp_tls_file_expiry(set->cert)) == 0)
		exp[0].not_after = zp_tls_time(X509_get0_notAfter(
		    SSL_CTX_get0_certificate(ctx)));
	exp[1].file = set->client_ca;
	exp[1].not_after = set->client_ca != NULL ?
	    zp_tls_file_expiry(set->client_ca) : 0;
}

static void
settings_free(struct tls_settings *t)
{
	free(t->cert);
	free(t->key);
	free(t->client_ca);
	free(t->ciphers);
	free(t->suites);
	memset(t, 0, sizeof(*t));
}

/* A copy of the configuration's TLS options; -1 when out of memory. */
static int
settings_copy(struct tls_settings *t, const struct zp_config *cfg)
{
	memset(t, 0, sizeof(*t));
	t->min_version = cfg->tls_min_version;
	if ((t->cert = strdup(cfg->tls_cert)) == NULL ||
	    (t->key = strdup(cfg->tls_key)) == NULL ||
	    (cfg->tls_client_ca != NULL &&
	    (t->client_ca = strdup(cfg->tls_client_ca)) == NULL) ||
	    (cfg->tls_ciphers != NULL &&
	    (t->ciphers = strdup(cfg->tls_ciphers)) == NULL) ||
	    (cfg->tls_ciphersuites != NULL &&
	    (t->suites = strdup(cfg->tls_ciphersuites)) == NULL)) {
		settings_free(t);
		return -1;
	}
	return 0;
}

int
zp_tls_srv_new(const struct zp_config *cfg, struct zp_tls_srv **out,
    char *err, size_t errlen)
{
	struct zp_tls_srv	*s;

	*out = NULL;
	if (!zp_config_tls(cfg))
		return 0;
	if (zp_tls_config_check(cfg, err, errlen) == -1)
		return -1;
	if ((s = calloc(1, sizeof(*s))) == NULL ||
	    settings_copy(&s->set, cfg) == -1) {
		free(s);
		zp_seterr(err, errlen, "TLS: %s", strerror(ENOMEM));
		return -1;
	}
	if ((s->ctx = srv_ctx_build(&s->set, err, errlen)) == NULL) {
		settings_free(&s->set);
		free(s);
		return -1;
	}
	pthread_mutex_init(&s->mu, NULL);
	s->mutual = s->set.client_ca != NULL;
	srv_expiry(&s->set, s->ctx, s->exp);
	*out = s;
	return 0;
}

int
zp_tls_srv_reload(struct zp_tls_srv *s, char *err, size_t errlen)
{
	struct tls_expiry	 exp[TLS_FILES];
	SSL_CTX			*ctx, *old;

	if ((ctx = srv_ctx_build(&s->set, err, errlen)) == NULL)
		return -1;
	srv_expiry(&s->set, ctx, exp);
	pthread_mutex_lock(&s->mu);
	old = s->ctx;
	s->ctx = ctx;
	memcpy(s->exp, exp, sizeof(s->exp));
	pthread_mutex_unlock(&s->mu);
	/* Its sessions hold references: it goes with the last of them. */
	SSL_CTX_free(old);
	return 0;
}

size_t
zp_tls_srv_expiry(struct zp_tls_srv *s, const char **files, int64_t *secs,
    size_t max)
{
	time_t	now = time(NULL);
	size_t	i, n = 0;

	pthread_mutex_lock(&s->mu);
	for (i = 0; i < TLS_FILES && n < max; i++) {
		if (s->exp[i].file == NULL || s->exp[i].not_after == 0)
			continue;
		files[n] = s->exp[i].file;
		secs[n++] = (int64_t)s->exp[i].not_after - (int64_t)now;
	}
	pthread_mutex_unlock(&s->mu);
	return n;
}

SSL *
zp_tls_srv_session(struct zp_tls_srv *s, int fd)
{
	SSL	*ssl;

	pthread_mutex_lock(&s->mu);
	ssl = SSL_new(s->ctx);
	pthread_mutex_unlock(&s->mu);
	if (ssl == NULL)
		return NULL;
	if (SSL_set_fd(ssl, fd) != 1) {
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_accept_state(ssl);
	return ssl;
}

int
zp_tls_srv_mutual(const struct zp_tls_srv *s)
{
	return s->mutual;
}

void
zp_tls_srv_free(struct zp_tls_srv *s)
{
	if (s == NULL)
		return;
	SSL_CTX_free(s->ctx);
	settings_free(&s->set);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
