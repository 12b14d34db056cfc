/*
 * acl.c - who may connect: CIDR rules and the open pairs per source.
 *
 * Pure functions: they see addresses and tables, never a socket, the
 * context or the clock, so that test_acl can check every edge alone.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/acl.h"
#include "lib/log.h"

/* Buckets of a table at its first add; it doubles past one entry each. */
#define SRCTAB_MIN_BUCKETS	64

struct zp_srcent {
	struct zp_srcent	*next;
	uint64_t		 prefix;
	unsigned		 count;
	unsigned char		 v6;
};

/*
 * The address bytes of a sockaddr into out (4 for IPv4, 16 for IPv6),
 * a v4-mapped IPv6 address as IPv4. Returns AF_INET, AF_INET6 or -1.
 */
static int
addr_bytes(const struct sockaddr *sa, unsigned char out[16])
{
	static const unsigned char	mapped[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	const struct sockaddr_in	*sin;
	const struct sockaddr_in6	*sin6;

	switch (sa->sa_family) {
	case AF_INET:
		sin = (const struct sockaddr_in *)(const void *)sa;
		memcpy(out, &sin->sin_addr, 4);
		return AF_INET;
	case AF_INET6:
		sin6 = (const struct sockaddr_in6 *)(const void *)sa;
		if (memcmp(sin6->sin6_addr.s6_addr, mapped, 12) == 0) {
			memcpy(out, sin6->sin6_addr.s6_addr + 12, 4);
			return AF_INET;
		}
		memcpy(out, sin6->sin6_addr.s6_addr, 16);
		return AF_INET6;
	default:
		return -1;
	}
}

/* Clear the bits of addr (size bytes) from bit len on. */
static void
mask_bits(unsigned char *addr, size_t size, unsigned len)
{
	size_t	i;

	for (i = 0; i < size; i++) {
		if (len >= 8 * (i + 1))
			continue;
		if (len <= 8 * i)
			addr[i] = 0;
		else
			addr[i] &= (unsigned char)(0xff << (8 - (len - 8 * i)));
	}
}

/* Do the first len bits of a and b agree? */
static int
prefix_eq(const unsigned char *a, const unsigned char *b, unsigned len)
{
	size_t		whole = len / 8;
	unsigned char	m;

	if (memcmp(a, b, whole) != 0)
		return 0;
	if (len % 8 == 0)
		return 1;
	m = (unsigned char)(0xff << (8 - len % 8));
	return (a[whole] & m) == (b[whole] & m);
}

/* Parse "ADDR" or "ADDR/LEN". */
int
zp_cidr_parse(const char *s, struct zp_cidr *c, char *err, size_t errlen)
{
	static const unsigned char	mapped[12] = {
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
	};
	char		 host[ZP_CIDRSTRLEN + 1], net[ZP_CIDRSTRLEN];
	const char	*slash, *p;
	unsigned char	 masked[16];
	unsigned	 len = 0, max;
	size_t		 hlen, size;

	memset(c, 0, sizeof(*c));
	slash = strchr(s, '/');
	hlen = slash != NULL ? (size_t)(slash - s) : strlen(s);
	if (hlen == 0 || hlen >= sizeof(host))
		goto bad;
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	if (strchr(host, ':') != NULL) {
		if (inet_pton(AF_INET6, host, c->addr) != 1)
			goto bad;
		c->family = AF_INET6;
		max = 128;
	} else {
		if (inet_pton(AF_INET, host, c->addr) != 1)
			goto bad;
		c->family = AF_INET;
		max = 32;
	}
	if (slash == NULL)
		len = max;	/* a bare address is one host */
	else {
		p = slash + 1;
		if (*p == '\0' || strlen(p) > 3 ||
		    strspn(p, "0123456789") != strlen(p))
			goto badlen;
		len = (unsigned)atoi(p);
		if (len > max)
			goto badlen;
	}
	size = c->family == AF_INET ? 4 : 16;
	memcpy(masked, c->addr, size);
	mask_bits(masked, size, len);
	if (memcmp(masked, c->addr, size) != 0) {
		memcpy(c->addr, masked, size);
		c->len = len;
		zp_seterr(err, errlen, "invalid CIDR '%s': host bits set after "
		    "/%u; the network is %s", s, len,
		    zp_cidr_str(c, net, sizeof(net)));
		memset(c, 0, sizeof(*c));
		return -1;
	}
	c->len = len;
	/* ::ffff:10.0.0.0/104 is how a dual-stack socket sees 10.0.0.0/8. */
	if (c->family == AF_INET6 && len >= 96 &&
	    memcmp(c->addr, mapped, sizeof(mapped)) == 0) {
		memmove(c->addr, c->addr + 12, 4);
		memset(c->addr + 4, 0, 12);
		c->family = AF_INET;
		c->len = len - 96;
	}
	return 0;
bad:
	zp_seterr(err, errlen, "invalid CIDR '%s': expected ADDR or ADDR/LEN "
	    "with a numeric IPv4 or IPv6 address", s);
	memset(c, 0, sizeof(*c));
	return -1;
badlen:
	zp_seterr(err, errlen, "invalid CIDR '%s': the prefix length must be "
	    "0-%u for %s", s, max, max == 32 ? "IPv4" : "IPv6");
	memset(c, 0, sizeof(*c));
	return -1;
}

/* Format a network. */
const char *
zp_cidr_str(const struct zp_cidr *c, char *buf, size_t len)
{
	char	host[INET6_ADDRSTRLEN];

	if (inet_ntop(c->family, c->addr, host, sizeof(host)) == NULL)
		snprintf(buf, len, "?");
	else
		snprintf(buf, len, "%s/%u", host, c->len);
	return buf;
}

/* Does the address fall in the network? */
int
zp_cidr_match(const struct zp_cidr *c, const struct sockaddr *sa)
{
	unsigned char	a[16];

	return addr_bytes(sa, a) == c->family && prefix_eq(a, c->addr,
	    c->len);
}

/* Parse s and append it. */
int
zp_acl_add(struct zp_acl *acl, const char *opt, const char *s, char *err,
    size_t errlen)
{
	char	why[256];

	if (acl->n == ZP_ACL_MAX_RULES) {
		zp_seterr(err, errlen, "too many --%s: at most %d", opt,
		    ZP_ACL_MAX_RULES);
		return -1;
	}
	if (zp_cidr_parse(s, &acl->v[acl->n], why, sizeof(why)) == -1) {
		zp_seterr(err, errlen, "--%s: %s", opt, why);
		return -1;
	}
	acl->n++;
	return 0;
}

/* Does any rule match? */
int
zp_acl_match(const struct zp_acl *acl, const struct sockaddr *sa)
{
	size_t	i;

	for (i = 0; i < acl->n; i++)
		if (zp_cidr_match(&acl->v[i], sa))
			return 1;
	return 0;
}

/* Deny first; then, if there are allow rules, one must match. */
int
zp_acl_permits(const struct zp_acl *allow, const struct zp_acl *deny,
    const struct sockaddr *sa)
{
	if (zp_acl_match(deny, sa))
		return 0;
	return allow->n == 0 || zp_acl_match(allow, sa);
}

/* Parse "CIDR", "IPv4CIDR:PORT" or "[IPv6CIDR]:PORT". */
int
zp_dstrule_parse(const char *s, struct zp_dstrule *r, char *err,
    size_t errlen)
{
	char		 net[ZP_CIDRSTRLEN + 1], why[256];
	const char	*end, *colon = NULL, *arg = s;
	unsigned long	 port;
	size_t		 n;
	int		 bracket = s[0] == '[';

	memset(r, 0, sizeof(*r));
	if (bracket) {
		if ((end = strchr(s, ']')) == NULL ||
		    (end[1] != '\0' && end[1] != ':'))
			goto bad;
		n = (size_t)(end - s - 1);
		if (end[1] == ':')
			colon = end + 1;
		s++;
	} else {
		colon = strchr(s, ':');
		/* Two colons or more: an IPv6 network, without a port. */
		if (colon != NULL && strchr(colon + 1, ':') != NULL)
			colon = NULL;
		n = colon != NULL ? (size_t)(colon - s) : strlen(s);
	}
	if (n == 0 || n >= sizeof(net))
		goto bad;
	memcpy(net, s, n);
	net[n] = '\0';
	if (zp_cidr_parse(net, &r->net, why, sizeof(why)) == -1) {
		zp_seterr(err, errlen, "%s", why);
		return -1;
	}
	/* "[10.0.0.0/8]" would read as IPv6 to a user: refuse it. */
	if (bracket && strchr(net, ':') == NULL)
		goto bad;
	if (colon != NULL) {
		char *e;

		if (colon[1] < '0' || colon[1] > '9')
			goto bad;
		errno = 0;
		port = strtoul(colon + 1, &e, 10);
		if (errno != 0 || *e != '\0' || port == 0 || port > 65535)
			goto bad;
		r->port = (unsigned short)port;
	}
	return 0;
bad:
	zp_seterr(err, errlen, "invalid destination '%s': expected CIDR, "
	    "IPv4CIDR:PORT or [IPv6CIDR]:PORT (port 1-65535)", arg);
	memset(r, 0, sizeof(*r));
	return -1;
}

/* Parse s and append it. */
int
zp_dstacl_add(struct zp_dstacl *acl, const char *opt, const char *s,
    char *err, size_t errlen)
{
	char	why[256];

	if (acl->n == ZP_ACL_MAX_RULES) {
		zp_seterr(err, errlen, "too many --%s: at most %d", opt,
		    ZP_ACL_MAX_RULES);
		return -1;
	}
	if (zp_dstrule_parse(s, &acl->v[acl->n], why, sizeof(why)) == -1) {
		zp_seterr(err, errlen, "--%s: %s", opt, why);
		return -1;
	}
	acl->n++;
	return 0;
}

/* No rules: anywhere; else a rule's network, and its port if it has one. */
int
zp_dstacl_permits(const struct zp_dstacl *acl, const struct sockaddr *sa)
{
	unsigned short	port;
	size_t		i;

	if (acl->n == 0)
		return 1;
	if (sa->sa_family == AF_INET)
		port = ntohs(((const struct sockaddr_in *)(const void *)
		    sa)->sin_port);
	else if (sa->sa_family == AF_INET6)
		port = ntohs(((const struct sockaddr_in6 *)(const void *)
		    sa)->sin6_port);
	else
		return 0;
	for (i = 0; i < acl->n; i++)
		if (zp_cidr_match(&acl->v[i].net, sa) &&
		    (acl->v[i].port == 0 || acl->v[i].port == port))
			return 1;
	return 0;
}

/* The IPv4 address, or the IPv6 /64, as a key. */
int
zp_source_key(const struct sockaddr *sa, struct zp_source_key *k)
{
	unsigned char	a[16];
	int		i, fam;

	memset(k, 0, sizeof(*k));
	if ((fam = addr_bytes(sa, a)) == -1)
		return -1;
	for (i = 0; i < (fam == AF_INET ? 4 : 8); i++)
		k->prefix = k->prefix << 8 | a[i];
	k->v6 = fam == AF_INET6;
	return 0;
}

/*
 * The bucket of a key: splitmix64's finaliser over the key and the
 * seed. Not a keyed PRF like SipHash, but without the seed a client
 * cannot tell which prefixes share a chain.
 */
static size_t
srctab_bucket(const struct zp_srctab *t, const struct zp_source_key *k)
{
	uint64_t	x = k->prefix ^ t->seed;

	if (k->v6)
		x ^= 0x9e3779b97f4a7c15ULL;
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return (size_t)(x & (t->nb - 1));
}

/* The entry of a key, or NULL. */
static int	srctab_take(struct zp_srctab *, const struct zp_source_key *,
		    unsigned);

static struct zp_srcent *
srctab_find(const struct zp_srctab *t, const struct zp_source_key *k)
{
	struct zp_srcent	*e;

	if (t->b == NULL)
		return NULL;
	for (e = t->b[srctab_bucket(t, k)]; e != NULL; e = e->next)
		if (e->prefix == k->prefix && e->v6 == k->v6)
			return e;
	return NULL;
}

/* Double the buckets (or make the first ones). Returns 0 or -1. */
static int
srctab_grow(struct zp_srctab *t)
{
	struct zp_srcent	**nb, **ob = t->b, *e, *next;
	struct zp_source_key	  k;
	size_t			  i, onb = t->nb, n;

	n = onb == 0 ? SRCTAB_MIN_BUCKETS : onb * 2;
	if ((nb = calloc(n, sizeof(*nb))) == NULL)
		return -1;
	t->b = nb;
	t->nb = n;
	for (i = 0; i < onb; i++)
		for (e = ob[i]; e != NULL; e = next) {
			next = e->next;
			k.prefix = e->prefix;
			k.v6 = e->v6;
			e->next = nb[srctab_bucket(t, &k)];
			nb[srctab_bucket(t, &k)] = e;
		}
	free(ob);
	return 0;
}

/* Set up an empty table. */
void
zp_srctab_init(struct zp_srctab *t, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	pthread_mutex_init(&t->mu, NULL);
	t->seed = seed;
	t->on = 1;
}

/* Pairs open now from the address's source. */
unsigned
zp_srctab_count(const struct zp_srctab *t, const struct sockaddr *sa)
{
	struct zp_source_key	 k;
	struct zp_srcent	*e;

	unsigned		 n;

	if (!t->on || zp_source_key(sa, &k) == -1)
		return 0;
	pthread_mutex_lock((pthread_mutex_t *)&t->mu);
	n = (e = srctab_find(t, &k)) != NULL ? e->count : 0;
	pthread_mutex_unlock((pthread_mutex_t *)&t->mu);
	return n;
}

/* One more pair from the address's source. */
int
zp_srctab_add(struct zp_srctab *t, const struct sockaddr *sa)
{
	return zp_srctab_take(t, sa, 0);
}

/* The same, below a limit: see acl.h. */
int
zp_srctab_take(struct zp_srctab *t, const struct sockaddr *sa, unsigned max)
{
	struct zp_source_key	 k;
	int			 rc;

	if (!t->on || zp_source_key(sa, &k) == -1)
		return 0;
	pthread_mutex_lock(&t->mu);
	rc = srctab_take(t, &k, max);
	pthread_mutex_unlock(&t->mu);
	return rc;
}

static int
srctab_take(struct zp_srctab *t, const struct zp_source_key *kp,
    unsigned max)
{
	struct zp_source_key	 k = *kp;
	struct zp_srcent	*e;
	size_t			 i;

	if ((e = srctab_find(t, &k)) != NULL) {
		if (max > 0 && e->count >= max)
			return 1;
		e->count++;
		return 0;
	}
	/* A full table still takes the entry when it cannot grow. */
	if (t->n >= t->nb && srctab_grow(t) == -1 && t->b == NULL)
		goto nomem;
	if ((e = calloc(1, sizeof(*e))) == NULL)
		goto nomem;
	e->prefix = k.prefix;
	e->v6 = (unsigned char)k.v6;
	e->count = 1;
	i = srctab_bucket(t, &k);
	e->next = t->b[i];
	t->b[i] = e;
	t->n++;
	return 0;
nomem:
	errno = ENOMEM;
	return -1;
}

/* One pair fewer. */
void
zp_srctab_del(struct zp_srctab *t, const struct sockaddr *sa)
{
	struct zp_source_key	  k;
	struct zp_srcent	**pp, *e;

	if (!t->on || zp_source_key(sa, &k) == -1)
		return;
	pthread_mutex_lock(&t->mu);
	for (pp = t->b != NULL ? &t->b[srctab_bucket(t, &k)] : NULL;
	    pp != NULL && (e = *pp) != NULL; pp = &e->next)
		if (e->prefix == k.prefix && e->v6 == k.v6)
			break;
	e = pp != NULL ? *pp : NULL;
	/* Every del has its add: a missing entry is a counting bug. */
	assert(e != NULL && e->count > 0);
	if (e != NULL && --e->count == 0) {
		*pp = e->next;
		free(e);
		t->n--;
	}
	pthread_mutex_unlock(&t->mu);
}

/* Free every entry. */
void
zp_srctab_free(struct zp_srctab *t)
{
	struct zp_srcent	*e, *next;
	size_t			 i;

	for (i = 0; i < t->nb; i++)
		for (e = t->b[i]; e != NULL; e = next) {
			next = e->next;
			free(e);
		}
	free(t->b);
	if (t->on)
		pthread_mutex_destroy(&t->mu);
	memset(t, 0, sizeof(*t));
}
