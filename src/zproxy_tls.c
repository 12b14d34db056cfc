/*
 * zproxy_tls.c - the TLS certificates read again (SIGHUP, zproxy ctl
 * reload) on a thread of their own: reading files is never a relay
 * thread's work. The new context is swapped in under the server's lock
 * (tls/tls.h); new handshakes use it, established sessions keep theirs;
 * a file that does not load leaves the old context in use, said in one
 * line.
 */

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "lib/log.h"
#include "lib/thread.h"
#include "relay/ctx.h"
#include "tls/tls.h"
#include "zproxy_int.h"

struct zproxy_tls {
	pthread_t	 tid;
	pthread_mutex_t	 mu;
	pthread_cond_t	 cv;
	int		 asked;		/* a reload is due */
	int		 stop;
	struct zp_ctx	*root;		/* its log and tls_srv only */
};

/* The days left of what was loaded, for the line that says it worked. */
static void
tls_said_loaded(struct zp_ctx *root)
{
	const char	*files[4];
	int64_t		 secs[4];
	size_t		 i, n;
	char		 text[600];
	int		 off = 0, k;

	n = root->tls_srv != NULL ? zp_tls_srv_expiry(root->tls_srv, files,
	    secs, 4) : 0;
	if (root->tls_cli != NULL)
		n += zp_tls_cli_expiry(root->tls_cli, files + n, secs + n,
		    4 - n);
	text[0] = '\0';
	for (i = 0; i < n && off < (int)sizeof(text); i++) {
		k = snprintf(text + off, sizeof(text) - (size_t)off, "%s%s %s "
		    "%lld days%s", i > 0 ? ", " : "", files[i],
		    secs[i] < 0 ? "expired" : "expires in",
		    (long long)((secs[i] < 0 ? -secs[i] : secs[i]) / 86400),
		    secs[i] < 0 ? " ago" : "");
		if (k < 0)
			break;
		off += k;
	}
	zp_log(root->log, ZP_LOG_NOTICE, "TLS: certificates read again; new "
	    "handshakes use them (%s)", text);
}

static void *
tls_main(void *arg)
{
	struct zproxy_tls	*t = arg;
	char			 err[ZP_ERRLEN];
	int			 ok;

	pthread_mutex_lock(&t->mu);
	for (;;) {
		while (!t->asked && !t->stop)
			pthread_cond_wait(&t->cv, &t->mu);
		if (t->stop)
			break;
		t->asked = 0;
		pthread_mutex_unlock(&t->mu);
		/* Each side on its own: one's bad file keeps the other's. */
		ok = 1;
		if (t->root->tls_srv != NULL && zp_tls_srv_reload(
		    t->root->tls_srv, err, sizeof(err)) == -1) {
			zp_log(t->root->log, ZP_LOG_ERROR, "TLS: %s; the "
			    "certificates in use stay", err);
			ok = 0;
		}
		if (t->root->tls_cli != NULL && zp_tls_cli_reload(
		    t->root->tls_cli, err, sizeof(err)) == -1) {
			zp_log(t->root->log, ZP_LOG_ERROR, "TLS: %s; the "
			    "upstreams' certificates in use stay", err);
			ok = 0;
		}
		if (ok)
			tls_said_loaded(t->root);
		pthread_mutex_lock(&t->mu);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

int
zproxy_tls_start(struct zp_ctx *root, char *err, size_t errlen)
{
	struct zproxy_tls	*t;
	sigset_t		 all, old;
	int			 e;

	if (root->tls_srv == NULL && root->tls_cli == NULL)
		return 0;
	if ((t = calloc(1, sizeof(*t))) == NULL) {
		snprintf(err, errlen, "TLS: out of memory");
		return -1;
	}
	t->root = root;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cv, NULL);
	/* The signals are the main thread's: blocked here while it is made. */
	zp_thread_sigset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if ((e = pthread_create(&t->tid, NULL, tls_main, t)) == 0)
		zp_thread_name(t->tid, "zp-tls");
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e != 0) {
		snprintf(err, errlen, "TLS: cannot start the certificates' "
		    "thread");
		pthread_cond_destroy(&t->cv);
		pthread_mutex_destroy(&t->mu);
		free(t);
		return -1;
	}
	root->tls_loader = t;
	return 0;
}

int
zproxy_tls_reload(struct zp_ctx *root)
{
	struct zproxy_tls	*t = root->tls_loader;

	if (t == NULL)
		return 0;
	pthread_mutex_lock(&t->mu);
	t->asked = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	return 1;
}

void
zproxy_tls_free(struct zp_ctx *root)
{
	struct zproxy_tls	*t = root->tls_loader;

	if (t == NULL)
		return;
	pthread_mutex_lock(&t->mu);
	t->stop = 1;
	pthread_cond_signal(&t->cv);
	pthread_mutex_unlock(&t->mu);
	/* It reads a few small files at most: the wait is that long. */
	pthread_join(t->tid, NULL);
	pthread_cond_destroy(&t->cv);
	pthread_mutex_destroy(&t->mu);
	free(t);
	root->tls_loader = NULL;
}
