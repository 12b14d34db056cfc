/*
 * udp_out.h - -u udp@HOST:PORT: datagrams relayed as datagrams. Each
 * datagram goes, whole, to the upstream the balancer picks for it
 * (roundrobin: per datagram; source: per source address; first), from a
 * connected UDP socket of the reading thread's for that upstream: bound
 * to --source ADDR, or with --source client one of each device's own,
 * bound to its address (IP_TRANSPARENT), closed after --udp-idle without
 * a datagram from it; beyond --udp-max-sources devices, from this host's
 * address (counted as shared).
 *
 * Health: an ICMP port unreachable comes back on the connected socket
 * as a refusal (ECONNREFUSED, on the next send or as a socket error):
 * each counts as a failed connect of the upstream (--max-fails marks it
 * down for --fail-timeout) and as a datagram lost
 * (zproxy_udp_dropped_total{reason="unreachable"}); an upstream sent to
 * for a second without a refusal is up again. What a socket cannot take
 * at once (its send buffer full) waits here, and the reader stops while
 * too much waits: nothing read is dropped here.
 */
#ifndef ZP_UDP_OUT_H
#define ZP_UDP_OUT_H

#include <stddef.h>

struct zp_ctx;
struct zp_addr;
struct zp_udp_tally;
struct udp_outs;

/*
 * A reader's sockets to the upstreams, made as they are first needed,
 * on ctx's thread; t the reader's counters; max_peers: --udp-max-sources
 * (over every thread); resume(arg) is called when what waited was sent
 * (the reader may read again). NULL: no memory.
 */
struct udp_outs *udp_outs_new(struct zp_ctx *, struct zp_udp_tally *t,
	    long max_peers, void (*resume)(void *), void *arg);

/*
 * Send datagram d (len bytes, 1 or more) from source a; now: its batch's.
 * It goes with the others of the reader's batch, at udp_outs_flush()
 * (sooner when many wait): d must stay as it is until then.
 */
struct timeval;
void	udp_outs_send(struct udp_outs *, const void *d, size_t len,
	    const struct zp_addr *a, const struct timeval *now);

/*
 * The end of a reader's batch: what udp_outs_send() took goes, one
 * sendmmsg per socket; what a socket does not take is copied to wait.
 */
void	udp_outs_flush(struct udp_outs *);

/* Bytes waiting for a socket to take them. */
size_t	udp_outs_pending(const struct udp_outs *);

/*
 * Every second: upstreams sent to without a refusal are up; devices
 * quiet for --udp-idle lose their sockets.
 */
void	udp_outs_tick(struct udp_outs *);

/* Close the sockets; what still waits is said and dropped. */
void	udp_outs_free(struct udp_outs *);

#endif
