/*
 * iptab.h - a chained hash table of entries keyed by an IP address (the
 * address, not the port: a v4-mapped IPv6 address is the IPv4 address
 * it maps), for the UDP sources (stream/udp.c, stream/udp_out.c). The
 * hash is FNV-1a from a secret seed, so that senders who choose their
 * addresses (UDP sources are easy to forge) cannot aim at one chain.
 * Entries are the caller's: struct zp_iptab_ent goes first in its own
 * struct. Not thread-safe: one table a thread.
 */
#ifndef ZP_IPTAB_H
#define ZP_IPTAB_H

#include <stddef.h>
#include <stdint.h>

#include "core/config.h"

struct zp_iptab_ent {
	struct zp_iptab_ent	*next;		/* its bucket's chain */
	struct zp_addr		 addr;		/* the key (its IP) */
};

struct zp_iptab {
	struct zp_iptab_ent	**b;		/* NULL until the first add */
	size_t			  nb;		/* a power of two */
	size_t			  n;
	uint64_t		  seed;
};

/* An empty table; seed: secret bits. */
void	zp_iptab_init(struct zp_iptab *, uint64_t seed);

/* Is a an IPv4 or IPv6 address, one a table can hold? */
int	zp_iptab_keyed(const struct zp_addr *a);

/* The entry whose address has a's IP, or NULL. */
struct zp_iptab_ent *zp_iptab_find(const struct zp_iptab *,
	    const struct zp_addr *a);

/*
 * Add e (its addr set, keyed, its IP not in the table yet). Returns 0, or
 * -1 when there is no memory for the first buckets (e not added).
 */
int	zp_iptab_add(struct zp_iptab *, struct zp_iptab_ent *e);

/* Take e out (it must be in). */
void	zp_iptab_del(struct zp_iptab *, struct zp_iptab_ent *e);

/* Free the buckets (the entries are the caller's). */
void	zp_iptab_free(struct zp_iptab *);

#endif
