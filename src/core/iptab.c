/*
 * iptab.c - entries keyed by an IP address (iptab.h).
 */

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "core/net.h"
#include "core/iptab.h"

/* Buckets at first (a power of two); they double past one an entry. */
#define ZP_IPTAB_BUCKETS	64

void
zp_iptab_init(struct zp_iptab *t, uint64_t seed)
{
	memset(t, 0, sizeof(*t));
	t->seed = seed;
}

/* The bytes of a's IP: 4 (IPv4, mapped or not) or 16; NULL: none. */
static const unsigned char *
iptab_key(const struct zp_addr *a, size_t *len)
{
	const unsigned char	*v4 = zp_addr_v4(a);

	if (v4 != NULL) {
		*len = 4;
		return v4;
	}
	if (a->ss.ss_family == AF_INET6) {
		*len = 16;
		return a->ss.sin6.sin6_addr.s6_addr;
	}
	*len = 0;
	return NULL;
}

int
zp_iptab_keyed(const struct zp_addr *a)
{
	size_t	len;

	return iptab_key(a, &len) != NULL;
}

static size_t
iptab_hash(const struct zp_iptab *t, const struct zp_addr *a)
{
	const unsigned char	*k;
	uint64_t		 h = t->seed ^ 0xcbf29ce484222325ULL;
	size_t			 i, len;

	if ((k = iptab_key(a, &len)) == NULL)
		return 0;
	for (i = 0; i < len; i++)
		h = (h ^ k[i]) * 0x100000001b3ULL;
	h ^= h >> 29;
	return (size_t)h & (t->nb - 1);
}

static int
iptab_same(const struct zp_addr *a, const struct zp_addr *b)
{
	const unsigned char	*ka, *kb;
	size_t			 la, lb;

	ka = iptab_key(a, &la);
	kb = iptab_key(b, &lb);
	return ka != NULL && la == lb && memcmp(ka, kb, la) == 0;
}

struct zp_iptab_ent *
zp_iptab_find(const struct zp_iptab *t, const struct zp_addr *a)
{
	struct zp_iptab_ent	*e;

	if (t->b == NULL)
		return NULL;
	for (e = t->b[iptab_hash(t, a)]; e != NULL; e = e->next)
		if (iptab_same(&e->addr, a))
			return e;
	return NULL;
}

/*
 * Double the buckets once there are as many entries. Returns 0, or -1
 * when there is no table at all (no memory for the first one); without
 * memory for a larger one the chains just grow longer.
 */
static int
iptab_grow(struct zp_iptab *t)
{
	struct zp_iptab_ent	**old = t->b, *e, *next;
	size_t			  i, onb = t->nb, h;

	if (t->b != NULL && t->n < t->nb)
		return 0;
	t->nb = onb == 0 ? ZP_IPTAB_BUCKETS : onb * 2;
	if ((t->b = calloc(t->nb, sizeof(*t->b))) == NULL) {
		t->b = old;
		t->nb = onb;
		return old != NULL ? 0 : -1;
	}
	for (i = 0; i < onb; i++)
		for (e = old[i]; e != NULL; e = next) {
			next = e->next;
			h = iptab_hash(t, &e->addr);
			e->next = t->b[h];
			t->b[h] = e;
		}
	free(old);
	return 0;
}

int
zp_iptab_add(struct zp_iptab *t, struct zp_iptab_ent *e)
{
	size_t	h;

	if (iptab_grow(t) == -1)
		return -1;
	h = iptab_hash(t, &e->addr);
	e->next = t->b[h];
	t->b[h] = e;
	t->n++;
	return 0;
}

void
zp_iptab_del(struct zp_iptab *t, struct zp_iptab_ent *e)
{
	struct zp_iptab_ent	**pp;

	for (pp = &t->b[iptab_hash(t, &e->addr)]; *pp != NULL;
	    pp = &(*pp)->next)
		if (*pp == e) {
			*pp = e->next;
			t->n--;
			return;
		}
}

void
zp_iptab_free(struct zp_iptab *t)
{
	free(t->b);
	t->b = NULL;
	t->nb = t->n = 0;
}
