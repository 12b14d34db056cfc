/*
 * acl.h - who may connect: --allow/--deny CIDR rules and the count of
 * open pairs per client source for --max-conns-per-source.
 *
 * Pure functions of addresses and tables: no I/O, no context, no clock.
 * A client of a dual-stack listener arrives as a v4-mapped IPv6 address
 * (::ffff:10.1.2.3); everything here sees it as the IPv4 address it is.
 */
#ifndef ZP_ACL_H
#define ZP_ACL_H

#include <sys/socket.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

/* Rules per list (--allow, --deny): matching is a linear scan. */
#define ZP_ACL_MAX_RULES	256

/* "ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255/128" and a NUL. */
#define ZP_CIDRSTRLEN		(46 + 4)

/* One network: an address with its host bits zero, and a prefix length. */
struct zp_cidr {
	int		family;		/* AF_INET or AF_INET6 */
	unsigned char	addr[16];	/* network order; v4 uses 4 */
	unsigned	len;		/* 0-32 or 0-128 */
};

struct zp_acl {
	struct zp_cidr	v[ZP_ACL_MAX_RULES];
	size_t		n;
};

/*
 * Parse "ADDR" (a host: /32 or /128) or "ADDR/LEN", ADDR a numeric IPv4
 * or IPv6 address. A v4-mapped network (::ffff:10.0.0.0/104) becomes the
 * IPv4 one (10.0.0.0/8). Host bits set under the mask (10.1.2.3/8) are
 * an error, not masked away: in an access rule that is usually a typo
 * for a narrower network. Returns 0, or -1 with err filled.
 */
int	zp_cidr_parse(const char *, struct zp_cidr *, char *, size_t);

/* Format a network as "10.0.0.0/8" or "2001:db8::/32" into buf. */
const char *zp_cidr_str(const struct zp_cidr *, char *, size_t);

/*
 * Does the address fall in the network? A v4-mapped client matches IPv4
 * networks only; an IPv6 network (even ::/0) matches IPv6 clients only.
 */
int	zp_cidr_match(const struct zp_cidr *, const struct sockaddr *);

/*
 * Parse s and append it to acl; opt names the option for the message.
 * Returns 0, or -1 with err filled (bad CIDR, more than ZP_ACL_MAX_RULES).
 */
int	zp_acl_add(struct zp_acl *, const char *opt, const char *s, char *,
	    size_t);

/* Does any rule of acl match the address? */
int	zp_acl_match(const struct zp_acl *, const struct sockaddr *);

/*
 * May this client be relayed? Not when a --deny rule matches (deny is
 * checked first), nor when there are --allow rules and none matches.
 */
int	zp_acl_permits(const struct zp_acl *allow, const struct zp_acl *deny,
	    const struct sockaddr *);

/*
 * --allow-dst: where `-u original` may connect. A rule is a network and
 * an optional port (0: any port).
 */
struct zp_dstrule {
	struct zp_cidr	net;
	unsigned short	port;
};

struct zp_dstacl {
	struct zp_dstrule	v[ZP_ACL_MAX_RULES];
	size_t			n;
};

/*
 * Parse "CIDR", "IPv4CIDR:PORT" or "[IPv6CIDR]:PORT" (brackets also
 * without a port: "[2001:db8::/32]"). An IPv6 address always has two
 * colons or more, so one colon is an IPv4 rule's port, and a port after
 * IPv6 needs the brackets. Returns 0, or -1 with err filled.
 */
int	zp_dstrule_parse(const char *, struct zp_dstrule *, char *, size_t);

/* Parse s and append it; opt names the option. Returns 0 or -1. */
int	zp_dstacl_add(struct zp_dstacl *, const char *opt, const char *s,
	    char *, size_t);

/*
 * May `-u original` connect to this address and port? Yes with no rules;
 * else when a rule's network holds it and the rule has its port or none.
 */
int	zp_dstacl_permits(const struct zp_dstacl *, const struct sockaddr *);

/*
 * What --max-conns-per-source counts by: the IPv4 address, or the /64
 * prefix of an IPv6 one (what one host or one site is usually given).
 * Returns 0, or -1 for an address that is neither.
 */
struct zp_source_key {
	uint64_t	prefix;		/* v4 address, or v6 /64 */
	int		v6;
};
int	zp_source_key(const struct sockaddr *, struct zp_source_key *);

/*
 * Open pairs per source: a chained hash table that holds an entry only
 * while its count is above zero, so it never outgrows the open pairs.
 * The hash is seeded (give it secret random bits), so that a client
 * cannot choose prefixes that all land in one chain.
 */
struct zp_srcent;
struct zp_srctab {
	pthread_mutex_t	   mu;		/* --threads: every call takes it */
	struct zp_srcent **b;		/* NULL until the first add */
	size_t		   nb;		/* a power of two */
	size_t		   n;		/* entries: sources with pairs open */
	uint64_t	   seed;
	int		   on;		/* zp_srctab_init() was called */
};

/* Set up an empty table; until this is called add and del do nothing. */
void	zp_srctab_init(struct zp_srctab *, uint64_t seed);

/* Pairs open now from the address's source (0 when the table is off). */
unsigned zp_srctab_count(const struct zp_srctab *, const struct sockaddr *);

/*
 * One more pair from the address's source. Returns 0 (also when the
 * table is off or the address has no key), or -1 with errno ENOMEM and
 * nothing counted. zp_srctab_take() is the same below a limit: it
 * returns 1 and counts nothing when the source has max pairs open
 * already (max 0: no limit); the check and the count are one step, so
 * that two threads cannot both take the last place.
 */
int	zp_srctab_add(struct zp_srctab *, const struct sockaddr *);
int	zp_srctab_take(struct zp_srctab *, const struct sockaddr *,
	    unsigned max);

/* One pair fewer; the entry goes when its count reaches zero. */
void	zp_srctab_del(struct zp_srctab *, const struct sockaddr *);

/* Free every entry; the table is off afterwards. */
void	zp_srctab_free(struct zp_srctab *);

#endif
