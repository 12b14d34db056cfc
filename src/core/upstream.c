/*
 * upstream.c - balancers and health for the upstream list.
 */

#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/log.h"
#include "core/net.h"
#include "core/upstream.h"
#include "core/upstream_int.h"

#define LOCK(us)	pthread_mutex_lock((pthread_mutex_t *)&(us)->mu)
#define UNLOCK(us)	pthread_mutex_unlock((pthread_mutex_t *)&(us)->mu)

static int	report_locked(struct zp_upstreams *, size_t, int, int,
		    const struct timeval *, char *, size_t);
static void	slot_init(struct zp_upstream *, struct zp_upstream_spec *,
		    struct zp_addr *, size_t);

/* Set up one zp_upstream per spec, all up. */
int
zp_upstreams_init(struct zp_upstreams *us, struct zp_upstream_spec *specs,
    size_t n, enum zp_balance balance, int max_fails, double fail_timeout,
    struct zp_log *lg)
{
	size_t	i;

	memset(us, 0, sizeof(*us));
	/*
	 * Room for every upstream zproxy ctl may add: the array never
	 * moves, so that a slot read without the lock (its spec) stays put.
	 */
	assert(n <= ZP_MAX_UPSTREAMS);
	if ((us->v = calloc(ZP_MAX_UPSTREAMS, sizeof(*us->v))) == NULL)
		return -1;
	pthread_mutex_init(&us->mu, NULL);
	us->n = n;
	us->balance = balance;
	us->max_fails = max_fails;
	us->fail_timeout = zp_seconds_tv(fail_timeout);
	us->log = lg;
	for (i = 0; i < n; i++) {
		slot_init(&us->v[i], &specs[i], NULL, 0);
		if (specs[i].naddrs == 0)
			continue;
		us->v[i].addrs = calloc(specs[i].naddrs, sizeof(struct zp_addr));
		if (us->v[i].addrs == NULL) {
			zp_upstreams_clear(us);
			return -1;
		}
		memcpy(us->v[i].addrs, specs[i].addrs,
		    specs[i].naddrs * sizeof(struct zp_addr));
		us->v[i].naddrs = specs[i].naddrs;
	}
	return 0;
}

void
zp_upstream_set_addrs(struct zp_upstreams *us, size_t i, struct zp_addr *v,
    size_t n)
{
	struct zp_addr	*old;

	LOCK(us);
	old = us->v[i].addrs;
	us->v[i].addrs = v;
	us->v[i].naddrs = n;
	UNLOCK(us);
	free(old);
}

void
zp_upstreams_clear(struct zp_upstreams *us)
{
	size_t	i;

	if (us->v == NULL)
		return;
	for (i = 0; i < us->n; i++)
		free(us->v[i].addrs);
	free(us->v);
	pthread_mutex_destroy(&us->mu);
	us->v = NULL;
	us->n = 0;
}

struct zp_upstreams *
zp_upstreams_new(struct zp_upstream_spec *specs, size_t n,
    enum zp_balance balance, int max_fails, double fail_timeout,
    struct zp_log *lg)
{
	struct zp_upstreams	*us;

	if ((us = malloc(sizeof(*us))) == NULL)
		return NULL;
	if (zp_upstreams_init(us, specs, n, balance, max_fails, fail_timeout,
	    lg) == -1) {
		free(us);
		return NULL;
	}
	return us;
}

void
zp_upstreams_free(struct zp_upstreams *us)
{
	if (us == NULL)
		return;
	zp_upstreams_clear(us);
	free(us);
}

size_t
zp_upstreams_count(const struct zp_upstreams *us)
{
	/* Slots only grow (zp_upstreams_add): a new one is whole when seen. */
	return __atomic_load_n(&us->n, __ATOMIC_ACQUIRE);
}

/* A slot's state for a spec, as at start-up; its addresses taken. */
static void
slot_init(struct zp_upstream *u, struct zp_upstream_spec *spec,
    struct zp_addr *addrs, size_t naddrs)
{
	memset(u, 0, sizeof(*u));
	u->spec = spec;
	u->up = 1;
	u->weight = spec->has_weight ? spec->weight : 1;
	u->backup = spec->backup;
	u->addrs = addrs;
	u->naddrs = naddrs;
}

int
zp_upstreams_add(struct zp_upstreams *us, struct zp_upstream_spec *spec,
    struct zp_addr *addrs, size_t naddrs)
{
	struct zp_upstream	*u;
	uint64_t		 total, failed;
	char			 name[300];
	size_t			 i;
	int			 idx = -1;

	LOCK(us);
	/* A name deleted before comes back in its old slot. */
	for (i = 0; i < us->n; i++)
		if (us->v[i].admin == ZP_ADMIN_REMOVED &&
		    us->v[i].spec == spec)
			idx = (int)i;
	if (idx == -1 && us->n < ZP_MAX_UPSTREAMS)
		idx = (int)us->n;
	if (idx != -1) {
		u = &us->v[idx];
		free(u->addrs);
		/* Its counters stay: /metrics' counters never go back. */
		total = u->conns_total;
		failed = u->conns_failed;
		slot_init(u, spec, addrs, naddrs);
		u->conns_total = total;
		u->conns_failed = failed;
		/* A name not resolved yet: down until it is and answers. */
		u->up = naddrs > 0;
		if ((size_t)idx == us->n)
			__atomic_store_n(&us->n, us->n + 1, __ATOMIC_RELEASE);
	}
	UNLOCK(us);
	if (idx == -1)
		return -1;
	zp_log(us->log, ZP_LOG_NOTICE, "upstream %s added (weight %d%s, %zu "
	    "address%s)", zp_upstream_label(us, (size_t)idx, name,
	    sizeof(name)), spec->has_weight ? spec->weight : 1,
	    spec->backup ? ", backup" : "", naddrs, naddrs == 1 ? "" : "es");
	return idx;
}

int
zp_upstream_remove(struct zp_upstreams *us, size_t i)
{
	char	name[300];
	int	rc = 0;

	LOCK(us);
	assert(us->v[i].admin != ZP_ADMIN_REMOVED);
	if (us->v[i].active > 0)
		rc = -1;
	else
		us->v[i].admin = ZP_ADMIN_REMOVED;
	UNLOCK(us);
	if (rc == 0)
		zp_log(us->log, ZP_LOG_NOTICE, "upstream %s removed",
		    zp_upstream_label(us, i, name, sizeof(name)));
	return rc;
}

struct zp_upstream_spec *
zp_upstreams_removed_spec(const struct zp_upstreams *us, const char *name)
{
	char	buf[300];
	size_t	i, n = zp_upstreams_count(us);

	for (i = 0; i < n; i++)
		if (us->v[i].admin == ZP_ADMIN_REMOVED &&
		    strcmp(zp_upstream_label(us, i, buf,
		    sizeof(buf)), name) == 0)
			return us->v[i].spec;
	return NULL;
}

void
zp_upstream_get(const struct zp_upstreams *us, size_t i,
    struct zp_upstream *out)
{
	LOCK(us);
	*out = us->v[i];
	UNLOCK(us);
	out->addrs = NULL;
}

size_t
zp_upstream_addr(const struct zp_upstreams *us, size_t i, size_t k,
    struct zp_addr *out)
{
	size_t	n;

	LOCK(us);
	n = us->v[i].naddrs;
	if (k < n)
		*out = us->v[i].addrs[k];
	UNLOCK(us);
	return n;
}

const char *
zp_upstream_label(const struct zp_upstreams *us, size_t i, char *buf,
    size_t len)
{
	/* The spec never changes after start-up: no lock. */
	return zp_upstream_name(&us->v[i], buf, len);
}

enum zp_balance
zp_upstreams_balance(const struct zp_upstreams *us)
{
	enum zp_balance	b;

	LOCK(us);
	b = us->balance;
	UNLOCK(us);
	return b;
}

/* "name:port", with brackets for a literal IPv6 address. */
const char *
zp_upstream_name(const struct zp_upstream *u, char *buf, size_t len)
{
	const char	*pre = u->spec->udp ? "udp@" : u->spec->tls ? "tls@" :
			    "";

	if (u->spec->original)
		snprintf(buf, len, "original");
	else if (strchr(u->spec->host, ':') != NULL)
		snprintf(buf, len, "%s[%s]:%s", pre, u->spec->host,
		    u->spec->port);
	else
		snprintf(buf, len, "%s%s:%s", pre, u->spec->host,
		    u->spec->port);
	return buf;
}

/* FNV-1a over the client's address (not its port: that changes). */
static uint32_t
client_hash(const struct zp_addr *a)
{
	const unsigned char	*p = NULL;
	size_t			 len = 0, i;
	uint32_t		 h = 2166136261u;

	if (a == NULL)
		return 0;
	/* A v4-mapped client hashes as the plain IPv4 one it is. */
	if ((p = zp_addr_v4(a)) != NULL)
		len = 4;
	else if (a->ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *sin6 = (const void *)&a->ss;

		p = sin6->sin6_addr.s6_addr;
		len = 16;
	}
	for (i = 0; i < len; i++) {
		h ^= p[i];
		h *= 16777619u;
	}
	return h;
}

/*
 * Rendezvous hashing with weights: upstream u's score for a client is
 * weight / -ln(h), h in (0, 1) from the client's address and u's name
 * (not its index: adding or removing an upstream moves only the clients
 * whose best score was or becomes that one's, about 1/N of them, where
 * a modulo moves nearly all).
 */
static double
hrw_score(uint32_t client, const struct zp_upstream *u)
{
	const char	*s;
	uint32_t	 h = client ^ 2166136261u;
	double		 x;

	for (s = u->spec->host; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	for (s = u->spec->port; *s != '\0'; s++) {
		h ^= (unsigned char)*s;
		h *= 16777619u;
	}
	/* FNV's low bits mix poorly: finish with a 32-bit avalanche. */
	h ^= h >> 16;
	h *= 0x7feb352du;
	h ^= h >> 15;
	h *= 0x846ca68bu;
	h ^= h >> 16;
	x = ((double)h + 1.0) / 4294967297.0;
	return u->weight / -log(x);
}

/* May upstream i be tried now, in this round (live, or back-off over)? */
static int
usable(const struct zp_upstream *u, const struct timeval *now)
{
	return u->up || !timercmp(now, &u->retry_at, <);
}

/* Choose among the candidates flagged in cand[] by the balancer. */
static int
pick_among(struct zp_upstreams *us, const unsigned char *cand, size_t ncand,
    const struct zp_addr *client)
{
	size_t		i, k, best = 0;
	int		found = 0;
	int64_t		total = 0;
	uint32_t	h;
	double		score, top = 0;

	if (ncand == 0)
		return -1;
	switch (us->balance) {
	case ZP_BALANCE_FIRST:
		for (i = 0; i < us->n; i++)
			if (cand[i])
				return (int)i;
		break;
	case ZP_BALANCE_SOURCE:
		/*
		 * The candidate of the highest weighted rendezvous score:
		 * the same client lands on the same upstream while that one
		 * is a candidate, whatever happens to the others.
		 */
		h = client_hash(client);
		for (i = 0; i < us->n; i++) {
			if (!cand[i])
				continue;
			score = hrw_score(h, &us->v[i]);
			if (!found || score > top) {
				best = i;
				top = score;
				found = 1;
			}
		}
		return found ? (int)best : -1;
	case ZP_BALANCE_LEASTCONN:
		/*
		 * Fewest open pairs for its weight (active / weight, compared
		 * without dividing); ties go round, starting at rr_next.
		 */
		for (k = 0; k < us->n; k++) {
			i = (us->rr_next + k) % us->n;
			if (!cand[i])
				continue;
			if (!found || us->v[i].active * (uint64_t)us->v[best].weight <
			    us->v[best].active * (uint64_t)us->v[i].weight) {
				best = i;
				found = 1;
			}
		}
		us->rr_next = (best + 1) % us->n;
		return (int)best;
	case ZP_BALANCE_ROUNDROBIN:
		/*
		 * Smooth weighted round robin (nginx's): each candidate's
		 * current weight grows by its weight, the largest is chosen
		 * and pays back the total; weights 1:3 give b a b b, a b b b
		 * spread out rather than in runs. Equal weights: in turn.
		 */
		for (i = 0; i < us->n; i++) {
			if (!cand[i])
				continue;
			us->v[i].cw += us->v[i].weight;
			total += us->v[i].weight;
			if (!found || us->v[i].cw > us->v[best].cw) {
				best = i;
				found = 1;
			}
		}
		if (!found)
			break;
		us->v[best].cw -= total;
		return (int)best;
	}
	return -1;
}

/* zp_upstream_pick, the lock held. */
static int
pick_locked(struct zp_upstreams *us, const struct zp_addr *client,
    const unsigned char *tried, const struct timeval *now)
{
	unsigned char	 cand[ZP_MAX_UPSTREAMS];
	size_t		 i, n = 0;
	int		 rc, pass;

	/*
	 * On the stack: a failed allocation here would turn a client away
	 * as if no upstream were left, for a fault of this host's.
	 */
	assert(us->n <= ZP_MAX_UPSTREAMS);
	/*
	 * Pass 0: the upstreams that are not backups, up or down with
	 * their back-off over; pass 1: the backups so; passes 2 and 3: any
	 * left of each. A weight of 0 takes no new client at all.
	 */
	for (pass = 0, rc = -1; pass < 4 && rc == -1; pass++) {
		for (i = 0, n = 0; i < us->n; i++) {
			cand[i] = !tried[i] && us->v[i].weight > 0 &&
			    us->v[i].admin == ZP_ADMIN_READY &&
			    us->v[i].backup == (pass & 1) &&
			    (pass >= 2 || usable(&us->v[i], now));
			n += cand[i];
		}
		rc = pick_among(us, cand, n, client);
	}
	return rc;
}

/* Choose the next upstream for a client. */
int
zp_upstream_pick(struct zp_upstreams *us, const struct zp_addr *client,
    const unsigned char *tried, const struct timeval *now)
{
	int	idx;

	LOCK(us);
	idx = pick_locked(us, client, tried, now);
	UNLOCK(us);
	return idx;
}

int
zp_upstream_pick_moving(struct zp_upstreams *ups, size_t from,
    const struct zp_addr *client, const unsigned char *tried,
    const struct timeval *now)
{
	int	idx;

	LOCK(ups);
	ups->v[from].active--;
	idx = pick_locked(ups, client, tried, now);
	ups->v[from].active++;
	UNLOCK(ups);
	return idx;
}

void
zp_upstream_acquire(struct zp_upstreams *ups, size_t i)
{
	LOCK(ups);
	ups->v[i].active++;
	ups->v[i].conns_total++;
	UNLOCK(ups);
}

void
zp_upstream_release(struct zp_upstreams *ups, size_t i)
{
	LOCK(ups);
	/* An underflow would show as 2^64 open pairs on /metrics. */
	assert(ups->v[i].active > 0);
	ups->v[i].active--;
	UNLOCK(ups);
}

void
zp_upstream_connect_failed(struct zp_upstreams *ups, size_t i)
{
	LOCK(ups);
	ups->v[i].conns_failed++;
	UNLOCK(ups);
}

/*
 * Report a connect or check result for upstream i. The state changes
 * under the lock (one failure counts once, and one thread finds the
 * change to say while the others see it made already); the line that
 * says so is written after the lock is let go, so that a slow log never
 * holds a connect of another thread.
 */
int
zp_upstream_report(struct zp_upstreams *us, size_t i, int ok, int err,
    const struct timeval *now)
{
	char	line[400];
	int	change;

	LOCK(us);
	change = report_locked(us, i, ok, err, now, line, sizeof(line));
	UNLOCK(us);
	if (change != 0)
		zp_log(us->log, ZP_LOG_NOTICE, "%s", line);
	return change;
}

/* The change a result makes (1 up, -1 down, 0 none), said in line. */
static int
report_locked(struct zp_upstreams *us, size_t i, int ok, int err,
    const struct timeval *now, char *line, size_t len)
{
	struct zp_upstream	*u = &us->v[i];
	char			 name[300];

	/*
	 * "original" is every client's own destination: one refusing says
	 * nothing about the next, so it is never marked down.
	 */
	if (u->spec->original)
		return 0;
	if (ok) {
		u->fails = 0;
		u->last_err = 0;
		if (!u->up) {
			u->up = 1;
			snprintf(line, len, "upstream %s is up",
			    zp_upstream_name(u, name, sizeof(name)));
			return 1;
		}
		return 0;
	}
	u->last_err = err;
	u->last_err_at = time(NULL);
	if (u->fails < 1000000)
		u->fails++;
	if (u->fails >= us->max_fails) {
		/* Down, or still down: the back-off starts over. */
		timeradd(now, &us->fail_timeout, &u->retry_at);
		if (u->up) {
			/* NOTICE: a state change must not be rate-limited away. */
			u->up = 0;
			snprintf(line, len, "upstream %s is down: %d "
			    "connects failed in a row (%s); next try in "
			    "%ld.%03lds", zp_upstream_name(u, name,
			    sizeof(name)), u->fails, strerror(err),
			    (long)us->fail_timeout.tv_sec,
			    (long)(us->fail_timeout.tv_usec / 1000));
			return -1;
		}
	}
	return 0;
}

enum zp_admin
zp_upstream_set_admin(struct zp_upstreams *us, size_t i, enum zp_admin a)
{
	enum zp_admin	old;
	char		name[300];

	/* Among ready, drain and maint: removal has calls of its own. */
	assert(a != ZP_ADMIN_REMOVED);
	LOCK(us);
	old = us->v[i].admin;
	assert(old != ZP_ADMIN_REMOVED);
	us->v[i].admin = a;
	UNLOCK(us);
	if (old != a)
		zp_log(us->log, ZP_LOG_NOTICE, "upstream %s: state %s (was %s)",
		    zp_upstream_label(us, i, name, sizeof(name)),
		    zp_admin_str(a), zp_admin_str(old));
	return old;
}

int
zp_upstream_set_weight(struct zp_upstreams *us, size_t i, int w)
{
	int	old;
	char	name[300];

	assert(w >= 0 && w <= ZP_WEIGHT_MAX);
	LOCK(us);
	old = us->v[i].weight;
	us->v[i].weight = w;
	/* Smooth round robin starts over, as nginx does on a change. */
	us->v[i].cw = 0;
	UNLOCK(us);
	if (old != w)
		zp_log(us->log, ZP_LOG_NOTICE, "upstream %s: weight %d (was "
		    "%d)", zp_upstream_label(us, i, name, sizeof(name)), w,
		    old);
	return old;
}

int
zp_upstream_set_backup(struct zp_upstreams *us, size_t i, int backup)
{
	int	old;

	LOCK(us);
	old = us->v[i].backup;
	us->v[i].backup = backup != 0;
	UNLOCK(us);
	return old;
}

void
zp_upstreams_set_policy(struct zp_upstreams *us, enum zp_balance balance,
    int max_fails, double fail_timeout)
{
	LOCK(us);
	us->balance = balance;
	us->max_fails = max_fails;
	us->fail_timeout = zp_seconds_tv(fail_timeout);
	UNLOCK(us);
}

size_t
zp_upstreams_draining(const struct zp_upstreams *us)
{
	size_t	i, n = 0;

	LOCK(us);
	for (i = 0; i < us->n; i++)
		n += us->v[i].admin == ZP_ADMIN_DRAIN ||
		    us->v[i].admin == ZP_ADMIN_MAINT;
	UNLOCK(us);
	return n;
}

int
zp_upstreams_find(const struct zp_upstreams *us, const char *name)
{
	struct zp_upstream	u;
	char			buf[300];
	size_t			i, n = zp_upstreams_count(us);

	for (i = 0; i < n; i++) {
		zp_upstream_get(us, i, &u);
		if (u.admin != ZP_ADMIN_REMOVED && strcmp(zp_upstream_label(us,
		    i, buf, sizeof(buf)), name) == 0)
			return (int)i;
	}
	return -1;
}

const char *
zp_admin_str(enum zp_admin a)
{
	switch (a) {
	case ZP_ADMIN_READY:	return "ready";
	case ZP_ADMIN_DRAIN:	return "drain";
	case ZP_ADMIN_MAINT:	return "maint";
	case ZP_ADMIN_REMOVED:	return "removed";
	}
	return "?";
}

int
zp_admin_parse(const char *s)
{
	if (strcmp(s, "ready") == 0)
		return ZP_ADMIN_READY;
	if (strcmp(s, "drain") == 0)
		return ZP_ADMIN_DRAIN;
	if (strcmp(s, "maint") == 0)
		return ZP_ADMIN_MAINT;
	return -1;
}

const char *
zp_upstream_state_str(const struct zp_upstream *u)
{
	if (u->admin != ZP_ADMIN_READY)
		return zp_admin_str(u->admin);
	return u->up ? "ready" : "down";
}

const char *
zp_balance_str(enum zp_balance b)
{
	switch (b) {
	case ZP_BALANCE_FIRST:		return "first";
	case ZP_BALANCE_LEASTCONN:	return "leastconn";
	case ZP_BALANCE_SOURCE:		return "source";
	case ZP_BALANCE_ROUNDROBIN:	return "roundrobin";
	}
	return "?";
}

int
zp_balance_parse(const char *s)
{
	if (strcmp(s, "roundrobin") == 0)
		return ZP_BALANCE_ROUNDROBIN;
	if (strcmp(s, "first") == 0)
		return ZP_BALANCE_FIRST;
	if (strcmp(s, "leastconn") == 0)
		return ZP_BALANCE_LEASTCONN;
	if (strcmp(s, "source") == 0)
		return ZP_BALANCE_SOURCE;
	return -1;
}

int
zp_upstream_primary_up(const struct zp_upstream *u, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (u[i].up && u[i].weight > 0 && !u[i].backup &&
		    u[i].admin == ZP_ADMIN_READY)
			return 1;
	return 0;
}

int
zp_upstream_takes(const struct zp_upstream *u, int primary_up)
{
	return u->up && u->weight > 0 && u->admin == ZP_ADMIN_READY &&
	    (!u->backup || !primary_up);
}

/* Does some upstream look up; see upstream.h. */
int
zp_upstreams_any_up(const struct zp_upstreams *ups)
{
	struct zp_upstream	u;
	size_t			i, n = zp_upstreams_count(ups);

	for (i = 0; i < n; i++) {
		zp_upstream_get(ups, i, &u);
		if (u.up && u.admin != ZP_ADMIN_REMOVED)
			return 1;
	}
	return 0;
}
