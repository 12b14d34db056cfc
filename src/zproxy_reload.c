/*
 * zproxy_reload.c - zproxy ctl reload: the command line parsed again,
 * -f FILE read anew, and what may change in a running zproxy changed in
 * place: the upstreams (added, removed, weights, backups), the timeouts,
 * the balancer and --rebalance, who may connect, the log level. A change
 * of anything else (listen addresses, threads, mode, user, ...) refuses
 * the whole reload, naming it: a takeover does those. The file is the
 * source of truth: an upstream that zproxy ctl added and the file does
 * not name goes, one it re-weighted gets the file's weight back.
 *
 * Everything runs on the root's thread. The root's configuration is
 * changed in place (only its thread reads it); each worker is handed a
 * fresh copy (zp_ctx_set_cfg). The upstreams have their own lock.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <event2/event.h>

#include "cli.h"
#include "core/config.h"
#include "core/net.h"
#include "core/upstream.h"
#include "lib/log.h"
#include "lib/thread.h"
#include "lib/wake.h"
#include "ops/control.h"
#include "relay/ctx.h"
#include "relay/worker.h"
#include "upstream/resolver.h"
#include "zproxy_int.h"

/* What a reload may change in place: the options by their long names. */
static const char *const reload_changeable[] = {
	"upstream", "balance", "retries", "max-fails", "fail-timeout",
	"connect-timeout", "idle-timeout", "fin-timeout", "linger-timeout",
	"drain-timeout", "stall-timeout", "max-lifetime", "rebalance",
	"rebalance-rate", "allow", "deny", "verbose", "quiet",
};

/* The answer being made: the changes, one "; "-separated list. */
struct reload_said {
	char	text[900];
	size_t	len;
	int	n;
};

static void
said(struct reload_said *s, struct zp_ctx *root, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One change: logged, and added to the answer. */
static void
said(struct reload_said *s, struct zp_ctx *root, const char *fmt, ...)
{
	char	line[400];
	va_list	ap;
	int	k;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	zp_log(root->log, ZP_LOG_NOTICE, "reload: %s", line);
	s->n++;
	if (s->len < sizeof(s->text)) {
		k = snprintf(s->text + s->len, sizeof(s->text) - s->len, "%s%s",
		    s->len > 0 ? "; " : "", line);
		if (k > 0)
			s->len += (size_t)k;
	}
}

/* Option name's values in cfg, in order, one string ("\n"-joined). */
static void
option_values(const struct zp_config *cfg, const char *name, char *buf,
    size_t len)
{
	size_t	i, off = 0;

	buf[0] = '\0';
	for (i = 0; i < cfg->nitems && off < len; i++)
		if (strcmp(cfg->items[i].name, name) == 0)
			off += (size_t)snprintf(buf + off, len - off, "%s\n",
			    cfg->items[i].value != NULL ?
			    cfg->items[i].value : "(set)");
}

static int
is_changeable(const char *name)
{
	size_t	i;

	for (i = 0; i < sizeof(reload_changeable) /
	    sizeof(reload_changeable[0]); i++)
		if (strcmp(reload_changeable[i], name) == 0)
			return 1;
	return 0;
}

/*
 * The options whose values differ between a and b and may not change in
 * place, named into bad ("" when none). Returns how many.
 */
static int
reload_fixed(const struct zp_config *a, const struct zp_config *b,
    char *bad, size_t badlen)
{
	const struct zp_config	*c;
	char			 va[2048], vb[2048];
	size_t			 i, off = 0;
	int			 n = 0, pass;

	bad[0] = '\0';
	for (pass = 0; pass < 2; pass++) {
		c = pass == 0 ? a : b;
		for (i = 0; i < c->nitems; i++) {
			const char *name = c->items[i].name;

			if (is_changeable(name) || (off > 0 &&
			    strstr(bad, name) != NULL))
				continue;
			option_values(a, name, va, sizeof(va));
			option_values(b, name, vb, sizeof(vb));
			if (strcmp(va, vb) == 0)
				continue;
			off += (size_t)snprintf(bad + off, off < badlen ?
			    badlen - off : 0, "%s--%s", n > 0 ? ", " : "",
			    name);
			n++;
		}
	}
	return n;
}

/*
 * "host:port" of a spec, with brackets for an IPv6 literal, "udp@"
 * first for a UDP one: as zp_upstream_name() names it.
 */
static const char *
spec_name(const struct zp_upstream_spec *s, char *buf, size_t len)
{
	snprintf(buf, len, strchr(s->host, ':') != NULL ? "%s[%s]:%s" :
	    "%s%s:%s", s->udp ? "udp@" : s->tls ? "tls@" : "", s->host,
	    s->port);
	return buf;
}

/*
 * Can n's upstreams be had in place: "original" neither before nor
 * after, a name only with the resolver, room for the new ones. Returns
 * 0, or -1 with why filled.
 */
static int
reload_upstreams_check(struct zp_ctx *root, const struct zp_config *n,
    char *why, size_t len)
{
	struct zp_addr	a;
	char		name[300];
	size_t		i, fresh = 0;

	if (root->cfg->original || n->original) {
		zp_seterr(why, len, "-u original cannot change in place");
		return -1;
	}
	for (i = 0; i < n->nupstreams; i++) {
		spec_name(&n->upstreams[i], name, sizeof(name));
		if (zp_upstreams_find(root->ups, name) != -1 ||
		    zp_upstreams_removed_spec(root->ups, name) != NULL)
			continue;
		fresh++;
		if (zp_addr_literal(n->upstreams[i].host, n->upstreams[i].port,
		    &a) == -1 && root->resolver == NULL) {
			zp_seterr(why, len, "upstream %s is a name: a running "
			    "zproxy looks names up only with --resolve-interval",
			    name);
			return -1;
		}
	}
	if (root->cfg->nupstreams + fresh > ZP_MAX_UPSTREAMS) {
		zp_seterr(why, len, "more than %d upstreams in all (removed "
		    "ones keep their place)", ZP_MAX_UPSTREAMS);
		return -1;
	}
	return 0;
}

/* One upstream of the file: there already (weights), back, or new. */
static void
reload_upstream_want(struct zp_ctx *root, const struct zp_upstream_spec *w,
    struct reload_said *s)
{
	struct zp_config	*cfg = root->cfg;
	struct zp_upstream_spec	*spec;
	struct zp_upstream	 u;
	struct zp_addr		 a, *addrs = NULL;
	char			 name[300];
	int			 idx, weight = w->has_weight ? w->weight : 1;

	spec_name(w, name, sizeof(name));
	if ((idx = zp_upstreams_find(root->ups, name)) != -1) {
		zp_upstream_get(root->ups, (size_t)idx, &u);
		if (u.weight != weight) {
			zp_upstream_set_weight(root->ups, (size_t)idx, weight);
			said(s, root, "upstream %s weight %d (was %d)", name,
			    weight, u.weight);
		}
		if (u.backup != w->backup) {
			zp_upstream_set_backup(root->ups, (size_t)idx,
			    w->backup);
			said(s, root, "upstream %s %s", name, w->backup ?
			    "a backup" : "no longer a backup");
		}
		return;
	}
	if ((spec = zp_upstreams_removed_spec(root->ups, name)) == NULL) {
		spec = &cfg->upstreams[cfg->nupstreams];
		memset(spec, 0, sizeof(*spec));
		if ((spec->host = strdup(w->host)) == NULL) {
			said(s, root, "upstream %s not added: out of memory",
			    name);
			return;
		}
		snprintf(spec->port, sizeof(spec->port), "%s", w->port);
		spec->udp = w->udp;
		spec->tls = w->tls;
		cfg->nupstreams++;
	}
	spec->weight = weight;
	spec->has_weight = 1;
	spec->backup = w->backup;
	if (zp_addr_literal(spec->host, spec->port, &a) == 0 &&
	    (addrs = malloc(sizeof(*addrs))) != NULL)
		*addrs = a;
	if ((idx = zp_upstreams_add(root->ups, spec, addrs,
	    addrs != NULL)) == -1) {
		free(addrs);
		said(s, root, "upstream %s not added: no room", name);
		return;
	}
	if (addrs == NULL)
		zp_resolver_now(root->resolver, (size_t)idx);
	said(s, root, "upstream %s added (weight %d%s)", name, weight,
	    w->backup ? ", backup" : "");
}

/* The upstreams as n names them. */
static void
reload_upstreams(struct zp_ctx *root, const struct zp_config *n,
    struct reload_said *s)
{
	struct zp_upstream	u;
	char			name[300], want[300];
	size_t			i, k, count = zp_upstreams_count(root->ups);

	for (i = 0; i < n->nupstreams; i++)
		reload_upstream_want(root, &n->upstreams[i], s);
	/* Those the file no longer names go: now if empty, else drained. */
	for (i = 0; i < count; i++) {
		zp_upstream_get(root->ups, i, &u);
		if (u.admin == ZP_ADMIN_REMOVED)
			continue;
		zp_upstream_label(root->ups, i, name, sizeof(name));
		for (k = 0; k < n->nupstreams; k++)
			if (strcmp(spec_name(&n->upstreams[k], want,
			    sizeof(want)), name) == 0)
				break;
		if (k < n->nupstreams)
			continue;
		if (u.active == 0 && zp_upstream_remove(root->ups, i) == 0)
			said(s, root, "upstream %s removed", name);
		else {
			zproxy_ctl_remove_later(root, (int)i);
			said(s, root, "upstream %s in maint, %llu stream(s) on "
			    "it: removed once it is empty", name,
			    (unsigned long long)u.active);
		}
	}
}

/* The log level the options ask for. */
static int
reload_level(const struct zp_config *c)
{
	if (c->quiet)
		return ZP_LOG_ERROR;
	if (c->verbose == 0)
		return ZP_LOG_NOTICE;
	return c->verbose == 1 ? ZP_LOG_CONN : ZP_LOG_DEBUG;
}

#define SCALAR(field, opt) do {						\
	if (c->field != n->field) {					\
		said(s, root, "--%s %g (was %g)", opt, (double)n->field,	\
		    (double)c->field);					\
		c->field = n->field;					\
	}								\
} while (0)

/* The options but the upstreams, into the root's configuration. */
static void
reload_scalars(struct zp_ctx *root, struct zp_config *n,
    struct reload_said *s)
{
	struct zp_config	*c = root->cfg;
	int			 rearm;

	SCALAR(retries, "retries");
	SCALAR(max_fails, "max-fails");
	SCALAR(fail_timeout, "fail-timeout");
	SCALAR(connect_timeout, "connect-timeout");
	SCALAR(idle_timeout, "idle-timeout");
	SCALAR(fin_timeout, "fin-timeout");
	SCALAR(linger_timeout, "linger-timeout");
	SCALAR(drain_timeout, "drain-timeout");
	SCALAR(stall_timeout, "stall-timeout");
	SCALAR(max_lifetime, "max-lifetime");
	if (c->balance != n->balance) {
		said(s, root, "--balance %s (was %s)",
		    zp_balance_str((enum zp_balance)n->balance),
		    zp_balance_str((enum zp_balance)c->balance));
		c->balance = n->balance;
	}
	zp_upstreams_set_policy(root->ups, (enum zp_balance)c->balance,
	    c->max_fails, c->fail_timeout);
	rearm = c->rebalance != n->rebalance ||
	    c->rebalance_rate != n->rebalance_rate;
	if (c->rebalance != n->rebalance) {
		said(s, root, "--rebalance %s (was %s)",
		    zp_rebalance_str(n->rebalance),
		    zp_rebalance_str(c->rebalance));
		c->rebalance = n->rebalance;
		/* What load saw before is no evidence for the next. */
		zp_loadbal_reset(root->loadbal);
	}
	SCALAR(rebalance_rate, "rebalance-rate");
	if (rearm && root->rebalance_timer != NULL) {
		(void)event_del(root->rebalance_timer);
		zproxy_rebalance_arm(root);
	}
	if (memcmp(&c->allow, &n->allow, sizeof(c->allow)) != 0 ||
	    memcmp(&c->deny, &n->deny, sizeof(c->deny)) != 0) {
		c->allow = n->allow;
		c->deny = n->deny;
		said(s, root, "--allow and --deny: %zu and %zu rules",
		    c->allow.n, c->deny.n);
	}
	if (reload_level(c) != reload_level(n)) {
		zp_log_set_level(root->log, reload_level(n));
		said(s, root, "log level %s", n->quiet ? "quiet" :
		    n->verbose == 0 ? "notice" : n->verbose == 1 ?
		    "-v" : "-vv");
	}
	c->verbose = n->verbose;
	c->quiet = n->quiet;
}

/*
 * The file is read on a thread of its own, made at start-up (before the
 * sandbox, which allows no new thread): no disk call on a relay thread.
 * One reload at a time; the root applies what it read.
 */
struct zproxy_reload {
	struct zp_ctx		*root;
	pthread_t		 tid;
	pthread_mutex_t		 mu;	/* all below */
	pthread_cond_t		 cv;
	int			 stop;
	int			 asked;	/* the thread has a file to read */
	struct zp_config	*n;	/* what it read (the root's then) */
	int			 rc;	/* zp_config_parse()'s */
	char			 err[ZP_ERRLEN];
	struct zp_ctl_req	*req;	/* the root's: the command */
	struct event		*done;	/* the root's: n is read */
};

static void *
reload_main(void *arg)
{
	struct zproxy_reload	*r = arg;
	struct zp_config	*n, *c = r->root->cfg;
	char			 err[ZP_ERRLEN];
	int			 rc;

	pthread_mutex_lock(&r->mu);
	for (;;) {
		while (!r->asked && !r->stop)
			pthread_cond_wait(&r->cv, &r->mu);
		if (r->stop)
			break;
		r->asked = 0;
		pthread_mutex_unlock(&r->mu);
		/*
		 * argc, argv and config_file never change: read without the
		 * root's help. The parse touches nothing the root owns.
		 */
		rc = ZP_PARSE_ERROR;
		err[0] = '\0';
		if ((n = calloc(1, sizeof(*n))) != NULL) {
			zp_config_init(n);
			rc = zp_config_parse(n, c->argc, c->argv, err,
			    sizeof(err));
		} else
			snprintf(err, sizeof(err), "out of memory");
		pthread_mutex_lock(&r->mu);
		r->n = n;
		r->rc = rc;
		memcpy(r->err, err, sizeof(err));
		/* Under mu: zproxy_reload_free forgets it only once stopped. */
		if (!r->stop)
			zp_wake_post(r->root->wake, r->done);
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

/* What the thread read is in: apply it, answer. */
static void
reload_done_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zproxy_reload	*r = arg;
	struct zp_ctx		*root = r->root;
	struct zp_config	*c = root->cfg, *n;
	struct zp_config_item	*items;
	struct zp_ctl_req	*req;
	struct reload_said	 s;
	char			 err[ZP_ERRLEN], bad[400];
	size_t			 nitems;
	int			 rc;

	pthread_mutex_lock(&r->mu);
	n = r->n;
	rc = r->rc;
	memcpy(err, r->err, sizeof(err));
	r->n = NULL;
	req = r->req;
	r->req = NULL;
	pthread_mutex_unlock(&r->mu);
	if (req == NULL)
		goto out;
	if (n == NULL || rc != ZP_PARSE_OK) {
		zp_ctl_done(req, 0, "reload: %s; nothing changed", err);
		goto out;
	}
	if (reload_fixed(c, n, bad, sizeof(bad)) > 0) {
		zp_ctl_done(req, 0, "reload: %s cannot change in a running "
		    "zproxy (a takeover can: --takeover); nothing changed",
		    bad);
		goto out;
	}
	/* The readers chose streams or datagrams at start-up. */
	if (zp_config_udp_upstreams(c) != zp_config_udp_upstreams(n)) {
		zp_ctl_done(req, 0, "reload: the upstreams cannot change "
		    "between TCP and UDP (udp@) in a running zproxy (a "
		    "takeover can: --takeover); nothing changed");
		goto out;
	}
	/* Pairs chose pipes or TLS at start-up; a new tls@ needs TLS. */
	if (zp_config_tls_upstreams(n) && !root->tls_upstreams) {
		zp_ctl_done(req, 0, "reload: a tls@ upstream cannot be added "
		    "to a running zproxy that started without one (its "
		    "connections splice; a takeover can: --takeover); nothing "
		    "changed");
		goto out;
	}
	if (reload_upstreams_check(root, n, err, sizeof(err)) == -1) {
		zp_ctl_done(req, 0, "reload: %s; nothing changed", err);
		goto out;
	}
	memset(&s, 0, sizeof(s));
	reload_upstreams(root, n, &s);
	reload_scalars(root, n, &s);
	/* What a reload compares with next time: what was read now. */
	items = c->items;
	nitems = c->nitems;
	c->items = n->items;
	c->nitems = n->nitems;
	n->items = items;
	n->nitems = nitems;
	if (zp_ctx_set_cfg(root) == -1)
		zp_log(root->log, ZP_LOG_ERROR, "reload: a thread keeps the "
		    "old options (out of memory)");
	zproxy_rebalance_arm(root);
	if (s.n == 0)
		zp_ctl_done(req, 1, "reloaded %s: nothing changed",
		    c->config_file);
	else
		zp_ctl_done(req, 1, "reloaded %s: %d change(s): %s",
		    c->config_file, s.n, s.text);
out:
	if (n != NULL) {
		zp_config_free(n);
		free(n);
	}
}

int
zproxy_reload_start(struct zp_ctx *root, char *err, size_t errlen)
{
	struct zproxy_reload	*r;
	sigset_t		 all, old;
	int			 e = -1;

	if ((r = calloc(1, sizeof(*r))) == NULL) {
		snprintf(err, errlen, "reload: out of memory");
		return -1;
	}
	r->root = root;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	/* The signals are the main thread's: blocked here while it is made. */
	zp_thread_sigset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	if ((r->done = event_new(root->base, -1, 0, reload_done_cb, r)) !=
	    NULL && (e = pthread_create(&r->tid, NULL, reload_main, r)) == 0)
		zp_thread_name(r->tid, "zp-reload");
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r->done == NULL || e != 0) {
		snprintf(err, errlen, "reload: cannot start its thread");
		if (r->done != NULL)
			event_free(r->done);
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
		free(r);
		return -1;
	}
	root->reload = r;
	return 0;
}

void
zproxy_reload(struct zp_ctx *root, struct zp_ctl_req *req)
{
	struct zproxy_reload	*r = root->reload;
	int			 tls = zproxy_tls_reload(root);

	if (root->cfg->config_file == NULL || r == NULL) {
		if (tls)
			zp_ctl_done(req, 1, "reload: the TLS certificates are "
			    "read again (the log says how it went); no -f "
			    "FILE to read");
		else
			zp_ctl_done(req, 0, "reload: zproxy runs without -f "
			    "FILE: nothing to read again");
		return;
	}
	pthread_mutex_lock(&r->mu);
	if (r->req != NULL) {
		pthread_mutex_unlock(&r->mu);
		zp_ctl_done(req, 0, "reload: another one is under way");
		return;
	}
	r->req = req;
	r->asked = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
}

void
zproxy_reload_free(struct zp_ctx *root)
{
	struct zproxy_reload	*r = root->reload;

	if (r == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	r->stop = 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	/* It reads a small file at most: the wait is that long. */
	pthread_join(r->tid, NULL);
	zp_wake_forget(root->wake, r->done);
	event_free(r->done);
	if (r->req != NULL)
		zp_ctl_done(r->req, 0, "reload: zproxy is stopping");
	if (r->n != NULL) {
		zp_config_free(r->n);
		free(r->n);
	}
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r);
	root->reload = NULL;
}
