/*
 * upstream.h - the upstreams a pair may connect to: which one to try next
 * (the balancer), and whether each is up (passive and active health).
 */
#ifndef ZP_UPSTREAM_H
#define ZP_UPSTREAM_H

#include <sys/time.h>
#include <time.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

struct zp_log;

enum zp_balance {
	ZP_BALANCE_ROUNDROBIN = 0,
	ZP_BALANCE_FIRST,	/* failover in the order given */
	ZP_BALANCE_LEASTCONN,
	ZP_BALANCE_SOURCE,	/* hash of the client address */
};

/*
 * What an operator made of an upstream (zproxy ctl set upstream NAME
 * state ...): ready serves; drain takes no new client and its framed
 * streams move away; maint the same, and its unframed streams are
 * closed after --drain-timeout; removed (zproxy ctl del, a reload) is
 * gone: its slot stays, unnamed, taking nothing. Changed only by
 * zp_upstream_set_admin() among the first three, zp_upstream_remove()
 * to removed and zp_upstreams_add() back to ready.
 */
enum zp_admin {
	ZP_ADMIN_READY = 0,
	ZP_ADMIN_DRAIN,
	ZP_ADMIN_MAINT,
	ZP_ADMIN_REMOVED,
};

struct zp_upstream {
	struct zp_upstream_spec	*spec;		/* name, port (as given) */
	struct zp_addr		*addrs;		/* live: resolved again with
						   --resolve-interval */
	size_t			 naddrs;
	int			 up;
	int			 fails;		/* connects failed in a row */
	int			 last_err;
	time_t			 last_err_at;	/* wall clock, 0: never */
	enum zp_admin		 admin;
	struct timeval		 retry_at;	/* a down upstream's next try */
	int			 weight;	/* 0-256 (-u ...,weight=N; 1) */
	int			 backup;	/* -u ...,backup */
	int64_t			 cw;		/* smooth weighted round robin:
						   its current weight */
	uint64_t		 active;	/* open pairs */
	uint64_t		 conns_total;
	uint64_t		 conns_failed;
};

/*
 * The set of upstreams is upstream.c's (fields in upstream_int.h, for
 * its tests): others read a copy of one upstream through
 * zp_upstream_get() and change it only through the calls below. Every
 * call is safe from any thread (--threads): the set has its own lock.
 */
struct zp_upstreams;


/*
 * One zp_upstream per spec, all up, each with a copy of the addresses
 * the spec resolved to at start-up. Returns NULL when out of memory.
 */
struct zp_upstreams *zp_upstreams_new(struct zp_upstream_spec *, size_t,
	    enum zp_balance, int max_fails, double fail_timeout,
	    struct zp_log *);

/* Free them all; NULL is fine. */
void	zp_upstreams_free(struct zp_upstreams *);

/*
 * How many; a copy of upstream i's state now (i below that; addrs is
 * NULL in the copy: a re-resolution may free the list at any time);
 * the balancer.
 */
size_t	zp_upstreams_count(const struct zp_upstreams *);

/* Does some upstream look up (the health checks and passive health)? */
int	zp_upstreams_any_up(const struct zp_upstreams *);
void	zp_upstream_get(const struct zp_upstreams *, size_t,
	    struct zp_upstream *);
enum zp_balance zp_upstreams_balance(const struct zp_upstreams *);

/*
 * How many addresses upstream i has now; copies the k-th to *out when k
 * is below that.
 */
size_t	zp_upstream_addr(const struct zp_upstreams *, size_t i, size_t k,
	    struct zp_addr *out);

/*
 * Upstream i's addresses are v[0..n) from now on (re-resolution); takes
 * v. A connect under way keeps the address it started on (pair.c).
 */
void	zp_upstream_set_addrs(struct zp_upstreams *, size_t,
	    struct zp_addr *v, size_t n);

/*
 * Choose the next upstream for a client, among those not yet tried
 * (tried[i] != 0). Upstreams that are up come first, by the balancer;
 * a down one whose back-off is over is tried again; when nothing else is
 * left, down ones are tried too rather than turning the client away.
 * Returns the index, or -1 when every upstream was tried.
 */
int	zp_upstream_pick(struct zp_upstreams *, const struct zp_addr *client,
	    const unsigned char *tried, const struct timeval *now);

/*
 * The same for a pair on upstream from that may move: where it would go
 * now, itself not counted on from (leastconn would keep it otherwise).
 */
int	zp_upstream_pick_moving(struct zp_upstreams *, size_t from,
	    const struct zp_addr *client, const unsigned char *tried,
	    const struct timeval *now);

/*
 * Report a connect (or health check) result for upstream i: success
 * marks it up, max_fails failures in a row mark it down for
 * fail_timeout. State changes are logged once. Returns 1 when this
 * report marked it up, -1 when it marked it down, 0 otherwise.
 */
int	zp_upstream_report(struct zp_upstreams *, size_t, int ok, int err,
	    const struct timeval *now);

/*
 * The upstream's counters, each changed by one call, never written
 * from outside: a pair connected to upstream i (one more open, one more
 * in all); it closed or moved away (one fewer open); every address of
 * it failed for a client (one more failed connection). Its bytes and
 * messages are tallied as they go (ctx.h, zp_traffic).
 */
void	zp_upstream_acquire(struct zp_upstreams *, size_t);
void	zp_upstream_release(struct zp_upstreams *, size_t);
void	zp_upstream_connect_failed(struct zp_upstreams *, size_t);

/*
 * The operator's state of upstream i (enum zp_admin) and its weight
 * (0-256): what the balancer and --rebalance see from the next pick on.
 * Each returns the old value, and logs the change.
 */
enum zp_admin zp_upstream_set_admin(struct zp_upstreams *, size_t,
	    enum zp_admin);
int	zp_upstream_set_weight(struct zp_upstreams *, size_t, int);

/*
 * zproxy ctl add: an upstream more for spec (which must outlive the
 * set), with addrs[0..naddrs) (taken; 0 of them: none yet, it is down
 * until some are set and a connect answers). A spec of a removed upstream takes its
 * old slot back (its counters go on). Returns its index, or -1 when
 * every one of the ZP_MAX_UPSTREAMS slots is taken (addrs not taken).
 */
int	zp_upstreams_add(struct zp_upstreams *, struct zp_upstream_spec *,
	    struct zp_addr *addrs, size_t naddrs);

/*
 * zproxy ctl del: upstream i takes nothing from now on and is no longer
 * named; its slot stays (indexes never change). -1 while it has open
 * pairs.
 */
int	zp_upstream_remove(struct zp_upstreams *, size_t i);

/* The spec of the removed upstream named name, or NULL. */
struct zp_upstream_spec *zp_upstreams_removed_spec(
	    const struct zp_upstreams *, const char *name);

/* -u ...,backup from now on; returns the old one (not logged). */
int	zp_upstream_set_backup(struct zp_upstreams *, size_t, int);

/*
 * --balance, --max-fails and --fail-timeout from now on (zproxy ctl
 * reload): the next pick and the next failure see them.
 */
void	zp_upstreams_set_policy(struct zp_upstreams *, enum zp_balance,
	    int max_fails, double fail_timeout);

/* How many upstreams are in drain or maint. */
size_t	zp_upstreams_draining(const struct zp_upstreams *);

/* The upstream named name (its HOST:PORT as given in -u), or -1. */
/* (A removed one is not named.) */
int	zp_upstreams_find(const struct zp_upstreams *, const char *name);

/*
 * "ready", "drain", "maint"; and the reverse, -1 if unknown. An
 * upstream's state as zproxy ctl shows it: its admin state, else "down"
 * when the health checks say so, else "ready".
 */
const char *zp_admin_str(enum zp_admin);
int	zp_admin_parse(const char *);
const char *zp_upstream_state_str(const struct zp_upstream *);

/*
 * Of n upstreams as zp_upstream_get() read them: is one up, ready and
 * weighted that is not a backup? (Backups take streams only without.)
 */
int	zp_upstream_primary_up(const struct zp_upstream *, size_t n);

/* May u take streams, new and moved, primary_up as above? */
int	zp_upstream_takes(const struct zp_upstream *u, int primary_up);

/* "first", "roundrobin", ...; and the reverse, -1 if unknown. */
const char *zp_balance_str(enum zp_balance);
int	zp_balance_parse(const char *);

/* "name:port" of an upstream, and of upstream i, for logs. */
#define ZP_UPSTREAM_NAMELEN	300	/* a 255-byte name, ':', a port */
const char *zp_upstream_name(const struct zp_upstream *, char *, size_t);
const char *zp_upstream_label(const struct zp_upstreams *, size_t i,
	    char *, size_t);

#endif
