/*
 * tls.c - the command line's TLS settings made into OpenSSL contexts
 * (tls.h). Everything here runs at start-up, on the main thread: a
 * setting that does not load is a start-up error naming the file and
 * OpenSSL's reason.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "core/config.h"
#include "lib/log.h"
#include "tls/tls.h"

struct zp_tls_srv {
	SSL_CTX		*ctx;
	int		 mutual;	/* asks for client certificates */
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
static void
tls_fail(char *err, size_t errlen, const char *what, const char *file)
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
static int
tls_readable(const char *what, const char *file, char *err, size_t errlen)
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
static int
tls_common(SSL_CTX *ctx, const struct zp_config *cfg, char *err,
    size_t errlen)
{
	int	min = cfg->tls_min_version == ZP_TLS_V13 ? TLS1_3_VERSION :
		    TLS1_2_VERSION;

	if (SSL_CTX_set_min_proto_version(ctx, min) != 1) {
		tls_fail(err, errlen, "--tls-min-version", NULL);
		return -1;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
	    SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_COMPRESSION);
	/*
	 * No TLS 1.3 session tickets: they are sent after the handshake,
	 * and a shipper that only writes never reads them; when it closes
	 * with them unread, its kernel answers with a reset and drops what
	 * it had not sent yet (openssl#7948; syslog-ng turned them off for
	 * the same reason). TLS 1.2 clients still resume (session ids,
	 * tickets inside the handshake).
	 */
	(void)SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
	    SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
	if (cfg->tls_ciphers != NULL &&
	    SSL_CTX_set_cipher_list(ctx, cfg->tls_ciphers) != 1) {
		tls_fail(err, errlen, "--tls-ciphers", cfg->tls_ciphers);
		return -1;
	}
	if (cfg->tls_ciphersuites != NULL &&
	    SSL_CTX_set_ciphersuites(ctx, cfg->tls_ciphersuites) != 1) {
		tls_fail(err, errlen, "--tls-ciphersuites",
		    cfg->tls_ciphersuites);
		return -1;
	}
	return 0;
}

/* A key file asked for a password: start-up only, one thread. */
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

	if (tls_readable("--tls-client-ca", file, err, errlen) == -1)
		return -1;
	if (SSL_CTX_load_verify_locations(ctx, file, NULL) != 1) {
		tls_fail(err, errlen, "--tls-client-ca", file);
		return -1;
	}
	/* The names sent in the CertificateRequest: which CAs we take. */
	if ((names = SSL_load_client_CA_file(file)) == NULL) {
		tls_fail(err, errlen, "--tls-client-ca", file);
		return -1;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER |
	    SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
	return 0;
}

int
zp_tls_srv_new(const struct zp_config *cfg, struct zp_tls_srv **out,
    char *err, size_t errlen)
{
	/* Resumed sessions are tied to this context's settings. */
	static const unsigned char sid_ctx[] = "zproxy";
	struct zp_tls_srv	*s;
	SSL_CTX			*ctx;
	unsigned long		 e;
	int			 mismatch = 0;

	*out = NULL;
	if (!zp_config_tls(cfg))
		return 0;
	if (zp_tls_config_check(cfg, err, errlen) == -1)
		return -1;
	if (tls_readable("--tls-cert", cfg->tls_cert, err, errlen) == -1 ||
	    tls_readable("--tls-key", cfg->tls_key, err, errlen) == -1)
		return -1;
	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_server_method())) == NULL) {
		tls_fail(err, errlen, "TLS", NULL);
		return -1;
	}
	if (tls_common(ctx, cfg, err, errlen) == -1)
		goto fail;
	if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert) != 1) {
		tls_fail(err, errlen, "--tls-cert", cfg->tls_cert);
		goto fail;
	}
	/* An encrypted key would have OpenSSL prompt on the terminal. */
	SSL_CTX_set_default_passwd_cb(ctx, tls_no_password);
	if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key,
	    SSL_FILETYPE_PEM) != 1) {
		e = ERR_peek_last_error();
		if (tls_password_asked) {
			zp_seterr(err, errlen, "--tls-key %s: the key is "
			    "encrypted; zproxy takes an unencrypted key (openssl "
			    "pkey -in KEY -out PLAIN)", cfg->tls_key);
			ERR_clear_error();
			goto fail;
		}
		if (ERR_GET_LIB(e) != ERR_LIB_X509 ||
		    ERR_GET_REASON(e) != X509_R_KEY_VALUES_MISMATCH) {
			tls_fail(err, errlen, "--tls-key", cfg->tls_key);
			goto fail;
		}
		mismatch = 1;
	}
	ERR_clear_error();
	if (mismatch || SSL_CTX_check_private_key(ctx) != 1) {
		zp_seterr(err, errlen, "--tls-key %s does not match the "
		    "certificate of --tls-cert %s", cfg->tls_key,
		    cfg->tls_cert);
		ERR_clear_error();
		goto fail;
	}
	if (cfg->tls_client_ca != NULL && tls_client_ca(ctx,
	    cfg->tls_client_ca, err, errlen) == -1)
		goto fail;
	(void)SSL_CTX_set_session_id_context(ctx, sid_ctx,
	    sizeof(sid_ctx) - 1);
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		zp_seterr(err, errlen, "TLS: %s", strerror(errno));
		goto fail;
	}
	s->ctx = ctx;
	s->mutual = cfg->tls_client_ca != NULL;
	*out = s;
	return 0;
fail:
	SSL_CTX_free(ctx);
	return -1;
}

SSL *
zp_tls_srv_session(struct zp_tls_srv *s, int fd)
{
	SSL	*ssl;

	if ((ssl = SSL_new(s->ctx)) == NULL)
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
	free(s);
}
