/*
 * tls_cli.c - zproxy as the TLS client of its tls@ upstreams (tls.h):
 * one context made from --upstream-ca, --upstream-cert/--upstream-key
 * and --upstream-verify, shared by every thread, read again on SIGHUP;
 * and each thread's sessions kept to resume with (no lock: a thread
 * resumes its own).
 */

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "core/config.h"
#include "lib/log.h"
#include "tls/tls.h"
#include "tls/tls_int.h"

/* The options the context is made from: the client's own copy. */
struct cli_settings {
	char	*ca;		/* or NULL: the system's store */
	char	*cert;		/* or NULL: no client certificate */
	char	*key;
	char	*sni;		/* or NULL: each upstream's host */
	int	 verify;	/* enum zp_tls_verify */
};

#define CLI_FILES	2	/* --upstream-cert, --upstream-ca */

/*
 * One context per relay thread: the contexts' certificate stores are
 * never shared, so that one thread's verification never reads what
 * another's writes (OpenSSL 3.0's store caches what a lookup finds,
 * under a lock its readers do not all take: ThreadSanitizer saw one
 * thread's handshake read a serial number another's had just written).
 */
struct zp_tls_cli {
	pthread_mutex_t	 mu;	/* ctx[], gen and expiry (reloads) */
	SSL_CTX		**ctx;	/* [nctx]: thread i's is ctx[i], the
				   spool's the last */
	int		 nctx;
	unsigned	 gen;	/* reloads so far: a session of an older
				   one is not offered (its trust may be
				   gone) */
	const char	*file[CLI_FILES];
	time_t		 not_after[CLI_FILES];
	struct cli_settings set;
};

/*
 * Sessions to resume with one upstream, the last ones it gave this
 * thread, newest last. A TLS 1.3 ticket is used once (RFC 8446, C.4)
 * and each connection brings new ones (OpenSSL's servers send two), so
 * a few kept let connections that overlap resume too.
 */
#define SLOT_SESSIONS	4

struct cache_slot {
	char		 key[300];	/* "host port name" ("": free) */
	SSL_SESSION	*sess[SLOT_SESSIONS];
	int		 n;
	unsigned	 gen;		/* the context's when they were made */
};

#define CACHE_SLOTS	(ZP_MAX_UPSTREAMS + ZP_MAX_MIRRORS)

struct zp_tls_cache {
	struct cache_slot slot[CACHE_SLOTS];
	size_t		  next;		/* the slot a new key takes */
};

/* Where a session finds its slot (SSL_get_ex_data); made once. */
static int		cache_index = -1;
static pthread_once_t	cache_once = PTHREAD_ONCE_INIT;

static void
cache_index_new(void)
{
	cache_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/*
 * A session came (after the handshake in TLS 1.2, with a ticket after
 * it in 1.3): it replaces the slot's. Returns 1: the reference is ours.
 */
static void
slot_clear(struct cache_slot *s)
{
	while (s->n > 0)
		SSL_SESSION_free(s->sess[--s->n]);
}

static int
cache_new_session(SSL *ssl, SSL_SESSION *sess)
{
	struct cache_slot	*s = SSL_get_ex_data(ssl, cache_index);

	if (s == NULL || s->key[0] == '\0')
		return 0;
	/* Full: the oldest goes. */
	if (s->n == SLOT_SESSIONS) {
		SSL_SESSION_free(s->sess[0]);
		memmove(&s->sess[0], &s->sess[1], (SLOT_SESSIONS - 1) *
		    sizeof(s->sess[0]));
		s->n--;
	}
	s->sess[s->n++] = sess;
	return 1;
}

static void
settings_free(struct cli_settings *t)
{
	free(t->ca);
	free(t->cert);
	free(t->key);
	free(t->sni);
	memset(t, 0, sizeof(*t));
}

static int
settings_copy(struct cli_settings *t, const struct zp_config *cfg)
{
	memset(t, 0, sizeof(*t));
	t->verify = cfg->upstream_verify;
	if ((cfg->upstream_ca != NULL &&
	    (t->ca = strdup(cfg->upstream_ca)) == NULL) ||
	    (cfg->upstream_cert != NULL &&
	    (t->cert = strdup(cfg->upstream_cert)) == NULL) ||
	    (cfg->upstream_key != NULL &&
	    (t->key = strdup(cfg->upstream_key)) == NULL) ||
	    (cfg->upstream_sni != NULL &&
	    (t->sni = strdup(cfg->upstream_sni)) == NULL)) {
		settings_free(t);
		return -1;
	}
	return 0;
}

/*
 * A client context from the settings. NULL with err filled. Reads the
 * files: start-up, or the loader thread.
 */
static SSL_CTX *
cli_ctx_build(const struct cli_settings *set, char *err, size_t errlen)
{
	SSL_CTX	*ctx;

	ERR_clear_error();
	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		zp_tls_fail(err, errlen, "TLS", NULL);
		return NULL;
	}
	if (zp_tls_common(ctx, ZP_TLS_V12, NULL, NULL, err, errlen) == -1)
		goto fail;
	if (set->ca != NULL) {
		if (zp_tls_readable("--upstream-ca", set->ca, err,
		    errlen) == -1)
			goto fail;
		if (SSL_CTX_load_verify_locations(ctx, set->ca, NULL) != 1) {
			zp_tls_fail(err, errlen, "--upstream-ca", set->ca);
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		zp_tls_fail(err, errlen, "the system's trust store", NULL);
		goto fail;
	}
	if (set->cert != NULL && zp_tls_use_cert_key(ctx, set->cert,
	    set->key, "--upstream-cert", "--upstream-key", err, errlen) == -1)
		goto fail;
	SSL_CTX_set_verify(ctx, set->verify == ZP_TLS_VERIFY_NONE ?
	    SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
	/* Sessions are kept by each thread (zp_tls_cache), not here. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT |
	    SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, cache_new_session);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

/* The files' notAfter, read outside the lock. */
static void
cli_expiry(const struct cli_settings *set, SSL_CTX *ctx, const char **file,
    time_t *not_after)
{
	X509	*leaf;

	file[0] = set->cert;
	not_after[0] = 0;
	if (set->cert != NULL &&
	    (not_after[0] = zp_tls_file_expiry(set->cert)) == 0 &&
	    (leaf = SSL_CTX_get0_certificate(ctx)) != NULL)
		not_after[0] = zp_tls_time(X509_get0_notAfter(leaf));
	file[1] = set->ca;
	not_after[1] = set->ca != NULL ? zp_tls_file_expiry(set->ca) : 0;
}

/* n contexts from the settings, or NULL with err filled (none kept). */
static SSL_CTX **
cli_ctxs_build(const struct cli_settings *set, int n, char *err,
    size_t errlen)
{
	SSL_CTX	**v;
	int	  i;

	if ((v = calloc((size_t)n, sizeof(*v))) == NULL) {
		zp_seterr(err, errlen, "TLS: %s", strerror(ENOMEM));
		return NULL;
	}
	for (i = 0; i < n; i++)
		if ((v[i] = cli_ctx_build(set, err, errlen)) == NULL) {
			while (i-- > 0)
				SSL_CTX_free(v[i]);
			free(v);
			return NULL;
		}
	return v;
}

static void
cli_ctxs_free(SSL_CTX **v, int n)
{
	int	i;

	if (v == NULL)
		return;
	for (i = 0; i < n; i++)
		SSL_CTX_free(v[i]);
	free(v);
}

int
zp_tls_cli_new(const struct zp_config *cfg, int nthreads,
    struct zp_tls_cli **out, char *err, size_t errlen)
{
	struct zp_tls_cli	*c;

	*out = NULL;
	if (!zp_config_tls_upstreams(cfg) && !zp_config_tls_mirrors(cfg))
		return 0;
	(void)pthread_once(&cache_once, cache_index_new);
	if (cache_index < 0 || (c = calloc(1, sizeof(*c))) == NULL) {
		zp_seterr(err, errlen, "TLS: %s", strerror(ENOMEM));
		return -1;
	}
	if (settings_copy(&c->set, cfg) == -1) {
		free(c);
		zp_seterr(err, errlen, "TLS: %s", strerror(ENOMEM));
		return -1;
	}
	/* The last one is the spool's I/O thread's (ZP_TLS_CLI_SPOOL). */
	c->nctx = (nthreads > 0 ? nthreads : 1) + 1;
	if ((c->ctx = cli_ctxs_build(&c->set, c->nctx, err, errlen)) == NULL) {
		settings_free(&c->set);
		free(c);
		return -1;
	}
	pthread_mutex_init(&c->mu, NULL);
	cli_expiry(&c->set, c->ctx[0], c->file, c->not_after);
	*out = c;
	return 0;
}

int
zp_tls_cli_reload(struct zp_tls_cli *c, char *err, size_t errlen)
{
	const char	*file[CLI_FILES];
	time_t		 not_after[CLI_FILES];
	SSL_CTX		**v, **old;

	if ((v = cli_ctxs_build(&c->set, c->nctx, err, errlen)) == NULL)
		return -1;
	cli_expiry(&c->set, v[0], file, not_after);
	pthread_mutex_lock(&c->mu);
	old = c->ctx;
	c->ctx = v;
	c->gen++;
	memcpy(c->file, file, sizeof(c->file));
	memcpy(c->not_after, not_after, sizeof(c->not_after));
	pthread_mutex_unlock(&c->mu);
	/* Their sessions hold references: each goes with its last one. */
	cli_ctxs_free(old, c->nctx);
	return 0;
}

size_t
zp_tls_cli_expiry(struct zp_tls_cli *c, const char **files, int64_t *secs,
    size_t max)
{
	time_t	now = time(NULL);
	size_t	i, n = 0;

	pthread_mutex_lock(&c->mu);
	for (i = 0; i < CLI_FILES && n < max; i++) {
		if (c->file[i] == NULL || c->not_after[i] == 0)
			continue;
		files[n] = c->file[i];
		secs[n++] = (int64_t)c->not_after[i] - (int64_t)now;
	}
	pthread_mutex_unlock(&c->mu);
	return n;
}

int
zp_tls_cli_verifies(const struct zp_tls_cli *c)
{
	return c->set.verify != ZP_TLS_VERIFY_NONE;
}

struct zp_tls_cache *
zp_tls_cache_new(void)
{
	return calloc(1, sizeof(struct zp_tls_cache));
}

void
zp_tls_cache_free(struct zp_tls_cache *cache)
{
	size_t	i;

	if (cache == NULL)
		return;
	for (i = 0; i < CACHE_SLOTS; i++)
		slot_clear(&cache->slot[i]);
	free(cache);
}

/*
 * The slot of key: its own, or a free one, or the oldest taken (its
 * session forgotten).
 */
static struct cache_slot *
cache_slot(struct zp_tls_cache *cache, const char *key)
{
	struct cache_slot	*s;
	size_t			 i;

	for (i = 0; i < CACHE_SLOTS; i++)
		if (strcmp(cache->slot[i].key, key) == 0)
			return &cache->slot[i];
	s = &cache->slot[cache->next];
	cache->next = (cache->next + 1) % CACHE_SLOTS;
	slot_clear(s);
	snprintf(s->key, sizeof(s->key), "%s", key);
	return s;
}

SSL *
zp_tls_cli_session(struct zp_tls_cli *c, int thread,
    struct zp_tls_cache *cache, int fd, const char *host, const char *port)
{
	const char		*name = c->set.sni != NULL ? c->set.sni : host;
	struct cache_slot	*slot = NULL;
	unsigned char		 ip[16];
	char			 key[sizeof(slot->key)];
	int			 literal;
	unsigned		 gen;
	SSL			*ssl;
	SSL_SESSION		*sess;

	pthread_mutex_lock(&c->mu);
	ssl = SSL_new(c->ctx[thread == ZP_TLS_CLI_SPOOL ? c->nctx - 1 :
	    thread >= 0 && thread < c->nctx - 1 ? thread : 0]);
	gen = c->gen;
	pthread_mutex_unlock(&c->mu);
	if (ssl == NULL)
		return NULL;
	if (SSL_set_fd(ssl, fd) != 1)
		goto fail;
	SSL_set_connect_state(ssl);
	literal = inet_pton(AF_INET, name, ip) == 1 ||
	    inet_pton(AF_INET6, name, ip) == 1;
	/* SNI names a host, never an address (RFC 6066, 3). */
	if (!literal && SSL_set_tlsext_host_name(ssl, name) != 1)
		goto fail;
	if (c->set.verify != ZP_TLS_VERIFY_NONE) {
		if (literal ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl),
		    name) != 1 : SSL_set1_host(ssl, name) != 1)
			goto fail;
	}
	/*
	 * The session kept for this upstream and name, if any: resumed only
	 * with the host it was made with, and under the certificates loaded
	 * when it was (a CA taken out by a reload must not live on in
	 * resumed sessions). A TLS 1.3 ticket is offered once (RFC 8446,
	 * C.4: the connection brings new ones); a TLS 1.2 session as often
	 * as the upstream takes it.
	 */
	if (cache != NULL) {
		snprintf(key, sizeof(key), "%s %s %s", host, port, name);
		slot = cache_slot(cache, key);
		if (slot->gen != gen)
			slot_clear(slot);
		slot->gen = gen;
		/* The newest that can still be resumed. */
		while (slot->n > 0 &&
		    !SSL_SESSION_is_resumable(slot->sess[slot->n - 1]))
			SSL_SESSION_free(slot->sess[--slot->n]);
		if (slot->n > 0) {
			sess = slot->sess[slot->n - 1];
			if (SSL_set_session(ssl, sess) != 1)
				ERR_clear_error();
			if (SSL_SESSION_get_protocol_version(sess) ==
			    TLS1_3_VERSION) {
				SSL_SESSION_free(sess);
				slot->n--;
			}
		}
		if (SSL_set_ex_data(ssl, cache_index, slot) != 1)
			goto fail;
	}
	return ssl;
fail:
	ERR_clear_error();
	SSL_free(ssl);
	return NULL;
}

void
zp_tls_cli_free(struct zp_tls_cli *c)
{
	if (c == NULL)
		return;
	cli_ctxs_free(c->ctx, c->nctx);
	settings_free(&c->set);
	pthread_mutex_destroy(&c->mu);
	free(c);
}
