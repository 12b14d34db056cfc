/*
 * zproxy_ctl.c - the daemon's side of zproxy ctl: each command from the
 * --control socket (ops/control.c) parsed (ops/ctlcmd.c), carried out on
 * the root, and answered. What concerns the pairs (show streams, move,
 * maint's close) is asked of every thread (zp_ctx_each) and answered
 * once they did; nothing here waits.
 */

#include <sys/queue.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <event2/buffer.h>
#include <event2/event.h>

#include "core/config.h"
#include "core/net.h"
#include "core/upstream.h"
#include "lib/log.h"
#include "ops/control.h"
#include "ops/ctlcmd.h"
#include "relay/ctx.h"
#include "relay/worker.h"
#include "stream/pair.h"
#include "upstream/resolver.h"
#include "zproxy_int.h"

/* A command waiting for the threads' answers. */
struct ctl_job {
	struct zp_ctx		*root;
	struct zp_ctl_req	*req;		/* NULL: maint's close */
	struct zp_each		*each;
	struct zp_ctl_cmd	 cmd;
	int			 idx;		/* the upstream named, or -1 */
	TAILQ_ENTRY(ctl_job)	 entry;
};

TAILQ_HEAD(ctl_jobs, ctl_job);

/* What a thread is asked (a copy goes to each). */
struct ctl_ask {
	int		verb;
	int		idx;		/* show: the upstream, -1 every one;
					   move: where to; maint: which */
	int		json;
	uint64_t	id;
};

/* maint's deadline for one upstream: --drain-timeout after it began. */
struct ctl_maint {
	struct zp_ctx	*root;
	int		 idx;
	struct event	*timer;
};

struct zproxy_ctl {
	struct ctl_jobs		 jobs;
	struct ctl_maint	 maint[ZP_MAX_UPSTREAMS];
	unsigned char		 leaving[ZP_MAX_UPSTREAMS]; /* removed once
						   empty (a reload) */
};

static struct zproxy_ctl *
ctl_get(struct zp_ctx *root)
{
	if (root->ctl == NULL && (root->ctl = calloc(1,
	    sizeof(*root->ctl))) != NULL)
		TAILQ_INIT(&root->ctl->jobs);
	return root->ctl;
}

/* ---- show upstreams --------------------------------------------------- */

/* An upstream's first address now, or "-" ("original": none). */
static const char *
ctl_address(struct zp_ctx *root, size_t i, char *buf, size_t len)
{
	struct zp_addr	a;
	size_t		n = zp_upstream_addr(root->ups, i, 0, &a);

	if (n == 0)
		return "-";
	zp_addr_str(&a, buf, len);
	if (n > 1) {
		size_t	l = strlen(buf);

		snprintf(buf + l, len - l, "(+%zu)", n - 1);
	}
	return buf;
}

static void
ctl_show_upstreams(struct zp_ctx *root, struct zp_ctl_req *req, int json)
{
	struct zp_totals	 t;
	struct zp_upstream	 u;
	const struct zp_traffic	*tr;
	char			 name[300], addr[ZP_ADDRSTRLEN + 16], when[32];
	const char		*load;
	char			 loadj[16];	/* ... as JSON */
	size_t			 i, n = zp_upstreams_count(root->ups), shown = 0;

	/* The workers' counters as last published: a second old at most. */
	zp_ctx_totals(root, &t);
	if (json)
		zp_ctl_printf(req, "[");
	else
		zp_ctl_printf(req, "%-22s %-22s %-6s %-6s %-6s %-7s %-12s "
		    "%-12s %-10s %-6s %s\n", "NAME", "ADDRESS", "STATE",
		    "WEIGHT", "BACKUP", "STREAMS", "BYTES_UP", "BYTES_DOWN",
		    "MESSAGES", "LOAD", "LAST_ERROR");
	for (i = 0; i < n; i++) {
		zp_upstream_get(root->ups, i, &u);
		if (u.admin == ZP_ADMIN_REMOVED)
			continue;
		tr = &t.stats.ups[i];
		zp_upstream_label(root->ups, i, name, sizeof(name));
		ctl_address(root, i, addr, sizeof(addr));
		/* --rebalance load's view of it: "-" without, or unseen. */
		load = root->cfg->rebalance == ZP_REBALANCE_LOAD ?
		    zp_loadbal_state(root->loadbal, i) : "-";
		if (*load == '-')
			snprintf(loadj, sizeof(loadj), "null");
		else
			snprintf(loadj, sizeof(loadj), "\"%s\"", load);
		when[0] = '\0';
		if (u.last_err != 0 && u.last_err_at != 0) {
			struct tm	tm;

			gmtime_r(&u.last_err_at, &tm);
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		}
		if (json) {
			zp_ctl_printf(req, "%s{\"name\":\"%s\",\"address\":"
			    "\"%s\",\"state\":\"%s\",\"weight\":%d,"
			    "\"backup\":%s,\"streams\":%llu,\"bytes_up\":%llu,"
			    "\"bytes_down\":%llu,\"messages\":%llu,"
			    "\"load\":%s,",
			    shown++ > 0 ? "," : "", name, addr,
			    zp_upstream_state_str(&u), u.weight,
			    u.backup ? "true" : "false",
			    (unsigned long long)u.active,
			    (unsigned long long)tr->up.bytes,
			    (unsigned long long)tr->down.bytes,
			    (unsigned long long)tr->up.frames, loadj);
			if (u.last_err != 0)
				zp_ctl_printf(req, "\"last_error\":\"%s\","
				    "\"last_error_at\":\"%s\"}",
				    strerror(u.last_err), when);
			else
				zp_ctl_printf(req, "\"last_error\":null,"
				    "\"last_error_at\":null}");
			continue;
		}
		zp_ctl_printf(req, "%-22s %-22s %-6s %-6d %-6s %-7llu %-12llu "
		    "%-12llu %-10llu %-6s ", name, addr,
		    zp_upstream_state_str(&u), u.weight, u.backup ? "yes" :
		    "no", (unsigned long long)u.active,
		    (unsigned long long)tr->up.bytes,
		    (unsigned long long)tr->down.bytes,
		    (unsigned long long)tr->up.frames, load);
		if (u.last_err != 0)
			zp_ctl_printf(req, "%s at %s\n", strerror(u.last_err),
			    when);
		else
			zp_ctl_printf(req, "-\n");
	}
	if (json)
		zp_ctl_printf(req, "]\n");
	zp_ctl_done(req, 1, NULL);
}

/* ---- what the threads are asked -------------------------------------- */

/* On every thread: its part of the answer. */
static void
ctl_ask_fn(struct zp_ctx *ctx, const void *arg, struct evbuffer *out)
{
	const struct ctl_ask	*a = arg;
	char			 why[160];
	int			 rc;

	switch (a->verb) {
	case ZP_CTL_SHOW_STREAMS:
		zp_pairs_show(ctx, a->idx, a->json, out);
		break;
	case ZP_CTL_MOVE:
		rc = zp_pairs_move_id(ctx, a->id, a->idx, why, sizeof(why));
		if (rc != 0)
			evbuffer_add_printf(out, "%c%s", rc == 1 ? '+' : '-',
			    why);
		break;
	case ZP_CTL_SET_STATE:	/* maint's deadline */
		rc = zp_pairs_close_on(ctx, a->idx);
		evbuffer_add_printf(out, "%d", rc);
		break;
	}
}

static void
job_free(struct ctl_job *j)
{
	TAILQ_REMOVE(&j->root->ctl->jobs, j, entry);
	free(j);
}

/* show streams: each thread's lines, as one table or one JSON array. */
static void
job_streams_done(struct ctl_job *j, struct evbuffer **parts, int n,
    int missing)
{
	struct zp_ctl_req	*req = j->req;
	char			*l;
	int			 t, first = 1;

	if (j->cmd.json)
		zp_ctl_printf(req, "[");
	else
		zp_ctl_printf(req, "%-8s %-22s %-22s %-6s %-8s %-12s %-12s "
		    "%-10s %-7s %s\n", "ID", "CLIENT", "UPSTREAM", "THREAD",
		    "AGE", "BYTES_UP", "BYTES_DOWN", "MESSAGES", "FRAMING",
		    "STATE");
	for (t = 0; t < n; t++) {
		if (parts[t] == NULL)
			continue;
		while ((l = evbuffer_readln(parts[t], NULL,
		    EVBUFFER_EOL_LF)) != NULL) {
			if (j->cmd.json)
				zp_ctl_printf(req, "%s%s", first ? "" : ",", l);
			else
				zp_ctl_printf(req, "%s\n", l);
			first = 0;
			free(l);
		}
	}
	if (j->cmd.json)
		zp_ctl_printf(req, "]\n");
	if (missing > 0)
		zp_ctl_done(req, 0, "%d thread(s) did not answer in time: the "
		    "list lacks their streams", missing);
	else
		zp_ctl_done(req, 1, NULL);
}

/* move: the thread that has the stream said what it did ('+' or '-'). */
static void
job_move_done(struct ctl_job *j, struct evbuffer **parts, int n, int missing)
{
	char	line[200];
	size_t	len;
	int	t;

	for (t = 0; t < n; t++) {
		if (parts[t] == NULL ||
		    (len = evbuffer_get_length(parts[t])) == 0)
			continue;
		if (len >= sizeof(line))
			len = sizeof(line) - 1;
		evbuffer_remove(parts[t], line, len);
		line[len] = '\0';
		zp_ctl_done(j->req, line[0] == '+', "%s", line + 1);
		return;
	}
	zp_ctl_done(j->req, 0, "no stream %llu%s", (unsigned long long)j->cmd.id,
	    missing > 0 ? " (a thread did not answer in time)" : "");
}

/* maint's deadline: how many each thread closed. */
static void
job_maint_done(struct ctl_job *j, struct evbuffer **parts, int n)
{
	char	num[16], name[300];
	size_t	len;
	int	t, closed = 0;

	for (t = 0; t < n; t++) {
		if (parts[t] == NULL ||
		    (len = evbuffer_get_length(parts[t])) == 0 ||
		    len >= sizeof(num))
			continue;
		evbuffer_remove(parts[t], num, len);
		num[len] = '\0';
		closed += atoi(num);
	}
	zp_log(j->root->log, ZP_LOG_NOTICE, "upstream %s: maint: closed %d "
	    "stream(s) still on it after --drain-timeout",
	    zp_upstream_label(j->root->ups, (size_t)j->idx, name,
	    sizeof(name)), closed);
	zproxy_ctl_tick(j->root);
}

/* Every thread answered (or the deadline came): say it. */
static void
ctl_job_done(void *arg, struct evbuffer **parts, int n)
{
	struct ctl_job	*j = arg;
	int		 t, missing = 0;

	for (t = 0; t < n; t++)
		missing += parts[t] == NULL;
	switch (j->cmd.verb) {
	case ZP_CTL_SHOW_STREAMS:
		job_streams_done(j, parts, n, missing);
		break;
	case ZP_CTL_MOVE:
		job_move_done(j, parts, n, missing);
		break;
	case ZP_CTL_SET_STATE:
		job_maint_done(j, parts, n);
		break;
	default:
		break;
	}
	job_free(j);
}

/* Ask every thread for cmd; the answer comes in ctl_job_done. */
static void
ctl_ask(struct zp_ctx *root, struct zp_ctl_req *req,
    const struct zp_ctl_cmd *cmd, int idx)
{
	struct zproxy_ctl	*c = ctl_get(root);
	struct ctl_job		*j;
	struct ctl_ask		 a;

	if (c == NULL || (j = calloc(1, sizeof(*j))) == NULL) {
		if (req != NULL)
			zp_ctl_done(req, 0, "out of memory");
		return;
	}
	j->root = root;
	j->req = req;
	j->cmd = *cmd;
	j->idx = idx;
	TAILQ_INSERT_TAIL(&c->jobs, j, entry);
	memset(&a, 0, sizeof(a));
	a.verb = cmd->verb;
	a.idx = idx;
	a.json = cmd->json;
	a.id = cmd->id;
	if ((j->each = zp_ctx_each(root, ctl_ask_fn, &a, sizeof(a),
	    ctl_job_done, j)) == NULL) {
		if (req != NULL)
			zp_ctl_done(req, 0, "out of memory");
		job_free(j);
	}
}

/* ---- set upstream NAME state ----------------------------------------- */

/* maint's deadline: close the unframed streams still on it. */
static void
ctl_maint_cb(evutil_socket_t fd, short what, void *arg)
{
	struct ctl_maint	*m = arg;
	struct zp_upstream	 u;
	struct zp_ctl_cmd	 cmd;

	zp_upstream_get(m->root->ups, (size_t)m->idx, &u);
	if (u.admin != ZP_ADMIN_MAINT)
		return;
	memset(&cmd, 0, sizeof(cmd));
	cmd.verb = ZP_CTL_SET_STATE;
	ctl_ask(m->root, NULL, &cmd, m->idx);
}

static void
ctl_set_state(struct zp_ctx *root, struct zp_ctl_req *req, int idx,
    const struct zp_ctl_cmd *cmd)
{
	struct zproxy_ctl	*c = ctl_get(root);
	struct ctl_maint	*m;
	struct zp_upstream	 u;
	struct timeval		 tv;
	enum zp_admin		 old;
	const char		*what = "";

	if (c == NULL) {
		zp_ctl_done(req, 0, "out of memory");
		return;
	}
	m = &c->maint[idx];
	if (cmd->state == ZP_ADMIN_MAINT && m->timer == NULL) {
		m->root = root;
		m->idx = idx;
		if ((m->timer = evtimer_new(root->base, ctl_maint_cb, m)) ==
		    NULL) {
			zp_ctl_done(req, 0, "out of memory");
			return;
		}
	}
	old = zp_upstream_set_admin(root->ups, (size_t)idx,
	    (enum zp_admin)cmd->state);
	zp_upstream_get(root->ups, (size_t)idx, &u);
	if (cmd->state == ZP_ADMIN_MAINT && old != ZP_ADMIN_MAINT) {
		tv = zp_seconds_tv(root->cfg->drain_timeout);
		(void)evtimer_add(m->timer, &tv);
	} else if (cmd->state != ZP_ADMIN_MAINT && m->timer != NULL)
		(void)evtimer_del(m->timer);
	zproxy_rebalance_arm(root);
	if (cmd->state != ZP_ADMIN_READY) {
		if (root->cfg->framing == ZP_FRAMING_NONE)
			what = cmd->state == ZP_ADMIN_MAINT ? "; its streams "
			    "close after --drain-timeout" : "; its streams stay "
			    "until they end (no --framing)";
		else
			what = "; its streams move at their next message "
			    "boundary, --rebalance-rate a second";
	}
	zp_ctl_done(req, 1, "upstream %s: state %s (was %s), %llu stream(s) "
	    "on it%s", cmd->name, zp_admin_str((enum zp_admin)cmd->state),
	    zp_admin_str(old), (unsigned long long)u.active, what);
}

/* ---- add and del --------------------------------------------------------- */

static void
ctl_add(struct zp_ctx *root, struct zp_ctl_req *req,
    const struct zp_ctl_cmd *cmd)
{
	struct zp_config	*cfg = root->cfg;
	struct zp_upstream_spec	*spec;
	struct zp_addr		 a, *addrs = NULL;
	char			 err[200], *host = NULL, port[6];
	size_t			 naddrs = 0;
	int			 idx, fresh = 0;
	int			 udp = strncmp(cmd->name, "udp@", 4) == 0;
	int			 tls = strncmp(cmd->name, "tls@", 4) == 0;

	if (zp_upstreams_find(root->ups, cmd->name) != -1) {
		zp_ctl_done(req, 0, "upstream %s exists (set its weight or "
		    "state instead)", cmd->name);
		return;
	}
	/* Datagrams go to UDP upstreams only, streams to TCP ones. */
	if (udp != zp_config_udp_upstreams(cfg)) {
		zp_ctl_done(req, 0, "add upstream %s: the upstreams are %s",
		    cmd->name, udp ? "TCP (HOST:PORT)" : "UDP (udp@HOST:PORT)");
		return;
	}
	/* Pairs chose pipes or TLS at start-up. */
	if (tls && !root->tls_upstreams) {
		zp_ctl_done(req, 0, "add upstream %s: a tls@ upstream cannot "
		    "be added to a zproxy that started without one (its "
		    "connections splice)", cmd->name);
		return;
	}
	if (zp_parse_hostport(cmd->name + (udp || tls ? 4 : 0), &host, port,
	    sizeof(port), err, sizeof(err)) == -1) {
		zp_ctl_done(req, 0, "%s", err);
		return;
	}
	if (zp_addr_literal(host, port, &a) == 0) {
		if ((addrs = malloc(sizeof(*addrs))) == NULL) {
			free(host);
			zp_ctl_done(req, 0, "out of memory");
			return;
		}
		*addrs = a;
		naddrs = 1;
	} else if (root->resolver == NULL) {
		free(host);
		zp_ctl_done(req, 0, "add upstream %s: a name is looked up "
		    "only with --resolve-interval; give an address",
		    cmd->name);
		return;
	}
	/* A name deleted before takes its slot (and its spec) back. */
	if ((spec = zp_upstreams_removed_spec(root->ups, cmd->name)) != NULL)
		free(host);
	else if (cfg->nupstreams < ZP_MAX_UPSTREAMS &&
	    cfg->nupstreams == zp_upstreams_count(root->ups)) {
		spec = &cfg->upstreams[cfg->nupstreams];
		memset(spec, 0, sizeof(*spec));
		spec->host = host;
		spec->udp = udp;
		spec->tls = tls;
		snprintf(spec->port, sizeof(spec->port), "%s", port);
		fresh = 1;
	} else {
		free(host);
		free(addrs);
		zp_ctl_done(req, 0, "add upstream %s: at most %d upstreams",
		    cmd->name, ZP_MAX_UPSTREAMS);
		return;
	}
	spec->weight = cmd->has_weight ? cmd->weight : 1;
	spec->has_weight = 1;
	spec->backup = cmd->backup;
	if ((idx = zp_upstreams_add(root->ups, spec, addrs, naddrs)) == -1) {
		free(addrs);
		zp_ctl_done(req, 0, "add upstream %s: at most %d upstreams",
		    cmd->name, ZP_MAX_UPSTREAMS);
		return;
	}
	/* The config frees the host with the others at the end. */
	if (fresh)
		cfg->nupstreams++;
	if (naddrs == 0)
		zp_resolver_now(root->resolver, (size_t)idx);
	zproxy_rebalance_arm(root);
	zp_ctl_done(req, 1, "upstream %s added: weight %d%s%s", cmd->name,
	    spec->weight, spec->backup ? ", backup" : "", naddrs == 0 ?
	    "; down until its name is looked up and it answers" : "");
}

static void
ctl_del(struct zp_ctx *root, struct zp_ctl_req *req, int idx,
    const struct zp_ctl_cmd *cmd)
{
	struct zp_upstream	u;

	zp_upstream_get(root->ups, (size_t)idx, &u);
	if (u.active > 0) {
		zp_ctl_done(req, 0, "upstream %s has %llu stream(s) on it: put "
		    "it in maint (set upstream %s state maint) and del it once "
		    "it is empty", cmd->name, (unsigned long long)u.active,
		    cmd->name);
		return;
	}
	if (zp_upstream_remove(root->ups, (size_t)idx) == -1) {
		zp_ctl_done(req, 0, "upstream %s has a stream on it again",
		    cmd->name);
		return;
	}
	zp_ctl_done(req, 1, "upstream %s removed", cmd->name);
}

/* ---- upstreams a reload no longer names -------------------------------- */

void
zproxy_ctl_remove_later(struct zp_ctx *root, int idx)
{
	struct zproxy_ctl	*c = ctl_get(root);
	struct timeval		 tv;

	zp_upstream_set_admin(root->ups, (size_t)idx, ZP_ADMIN_MAINT);
	if (c == NULL)
		return;		/* it stays in maint: del removes it */
	c->leaving[idx] = 1;
	if (c->maint[idx].timer == NULL) {
		c->maint[idx].root = root;
		c->maint[idx].idx = idx;
		c->maint[idx].timer = evtimer_new(root->base, ctl_maint_cb,
		    &c->maint[idx]);
	}
	if (c->maint[idx].timer != NULL) {
		tv = zp_seconds_tv(root->cfg->drain_timeout);
		(void)evtimer_add(c->maint[idx].timer, &tv);
	}
	zproxy_rebalance_arm(root);
}

void
zproxy_ctl_tick(struct zp_ctx *root)
{
	struct zproxy_ctl	*c = root->ctl;
	struct zp_upstream	 u;
	char			 name[300];
	size_t			 i, n = zp_upstreams_count(root->ups);

	for (i = 0; c != NULL && i < n; i++) {
		if (!c->leaving[i])
			continue;
		zp_upstream_get(root->ups, i, &u);
		if (u.admin != ZP_ADMIN_MAINT) {
			c->leaving[i] = 0;	/* del'd, or ready again */
			continue;
		}
		if (u.active == 0 && zp_upstream_remove(root->ups, i) == 0) {
			c->leaving[i] = 0;
			zp_log(root->log, ZP_LOG_NOTICE, "reload: upstream %s "
			    "is empty: removed", zp_upstream_label(root->ups,
			    i, name, sizeof(name)));
		}
	}
}

/* ---- the commands ----------------------------------------------------- */

void
zproxy_ctl_command(void *arg, struct zp_ctl_req *req, const char *line)
{
	struct zp_ctx		*root = arg;
	struct zp_ctl_cmd	 cmd;
	char			 err[200];
	int			 idx = -1, old;

	if (zp_ctl_parse(line, &cmd, err, sizeof(err)) == -1) {
		zp_ctl_done(req, 0, "%s", err);
		return;
	}
	if (cmd.name[0] != '\0' && cmd.verb != ZP_CTL_ADD &&
	    (idx = zp_upstreams_find(root->ups, cmd.name)) == -1) {
		zp_ctl_done(req, 0, "no upstream %s (zproxy ctl show "
		    "upstreams lists them)", cmd.name);
		return;
	}
	if (root->stopping && cmd.verb != ZP_CTL_SHOW_UPSTREAMS &&
	    cmd.verb != ZP_CTL_SHOW_STREAMS) {
		zp_ctl_done(req, 0, "zproxy is draining: it changes nothing "
		    "more");
		return;
	}
	/* What changes something is logged; what only looks, with -vv. */
	zp_log(root->log, cmd.verb == ZP_CTL_SHOW_UPSTREAMS ||
	    cmd.verb == ZP_CTL_SHOW_STREAMS ? ZP_LOG_DEBUG : ZP_LOG_NOTICE,
	    "control: %s", line);
	if (cmd.verb == ZP_CTL_MOVE && idx >= 0) {
		struct zp_upstream	u;

		zp_upstream_get(root->ups, (size_t)idx, &u);
		if (u.admin != ZP_ADMIN_READY || !u.up) {
			zp_ctl_done(req, 0, "upstream %s is %s: no stream "
			    "moves there", cmd.name,
			    zp_upstream_state_str(&u));
			return;
		}
	}
	switch (cmd.verb) {
	case ZP_CTL_SHOW_UPSTREAMS:
		ctl_show_upstreams(root, req, cmd.json);
		break;
	case ZP_CTL_SHOW_STREAMS:
	case ZP_CTL_MOVE:
		ctl_ask(root, req, &cmd, idx);
		break;
	case ZP_CTL_SET_STATE:
		ctl_set_state(root, req, idx, &cmd);
		break;
	case ZP_CTL_ADD:
		ctl_add(root, req, &cmd);
		break;
	case ZP_CTL_RELOAD:
		zproxy_reload(root, req);
		break;
	case ZP_CTL_DEL:
		ctl_del(root, req, idx, &cmd);
		break;
	case ZP_CTL_SET_WEIGHT:
		old = zp_upstream_set_weight(root->ups, (size_t)idx,
		    cmd.weight);
		zp_ctl_done(req, 1, "upstream %s: weight %d (was %d)",
		    cmd.name, cmd.weight, old);
		break;
	}
}

void
zproxy_ctl_free(struct zp_ctx *root)
{
	struct zproxy_ctl	*c = root->ctl;
	struct ctl_job		*j;
	int			 i;

	zproxy_reload_free(root);
	if (c == NULL)
		return;
	while ((j = TAILQ_FIRST(&c->jobs)) != NULL) {
		zp_ctx_each_cancel(j->each);
		if (j->req != NULL)
			zp_ctl_done(j->req, 0, "zproxy is stopping");
		job_free(j);
	}
	for (i = 0; i < ZP_MAX_UPSTREAMS; i++)
		if (c->maint[i].timer != NULL)
			event_free(c->maint[i].timer);
	free(c);
	root->ctl = NULL;
}
