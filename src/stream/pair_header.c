/*
 * pair_header.c - --accept-proxy: a pair reads its client's PROXY header
 * before anything else, then begins as any (pair_begin).
 */

#include <sys/socket.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <event2/event.h>

#include "lib/clock.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "lib/proxyproto.h"

/* End a pair whose header was missing, malformed, too long or late. */
static void
header_refuse(struct zp_pair *p, const char *why)
{
	p->hdr_why = why;
	zp_pair_close(p, ZP_END_BAD_PROXY_HEADER);
}

/*
 * The header named the client: it stands for the peer from now on, in
 * the log, the balancer, --send-proxy and the access rules, which are
 * checked here rather than at accept. LOCAL (a balancer's own health
 * check) and UNKNOWN keep the connection's addresses. Returns 1 when the
 * pair was freed (or moved on, once connected).
 */
static int ZP_MAY_FREE
header_done(struct zp_pair *p, const struct zp_proxy_info *info)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_config	*cfg = ctx->cfg;
	const struct sockaddr	*sa;
	size_t			 hlen;

	event_free(p->client.rev);
	p->client.rev = NULL;
	hlen = p->hdr->len;
	free(p->hdr);
	p->hdr = NULL;
	if (!info->local) {
		if ((p->px = calloc(1, sizeof(*p->px))) == NULL) {
			zp_pair_close(p, ZP_END_NOMEM);
			return 1;
		}
		p->px->peer_addr = p->client_addr;
		/* The parser gives IPv4 or IPv6 (else it says local). */
		(void)zp_addr_set(&p->client_addr,
		    (const struct sockaddr *)&info->src, info->srclen);
		(void)zp_addr_set(&p->px->proxy_dst,
		    (const struct sockaddr *)&info->dst, info->dstlen);
	}
	if (zp_log_enabled(ctx->log, ZP_LOG_DEBUG)) {
		char	cbuf[ZP_ADDRSTRLEN], q1[ZP_ESCLEN], q2[ZP_ESCLEN];

		/* Not "conn=": scripts count those as connection lines. */
		zp_log(ctx->log, ZP_LOG_DEBUG, "PROXY v%d header of "
		    "connection %llu (%zu bytes): client=%s, %u TLVs%s%s%s%s%s",
		    info->version, (unsigned long long)p->id, hlen,
		    info->local ? "local" : zp_addr_str(&p->client_addr, cbuf,
		    sizeof(cbuf)), info->ntlvs,
		    info->crc32c ? ", crc32c ok" : "",
		    info->authority[0] != '\0' ? ", authority=" : "",
		    zp_escape(info->authority, q1, sizeof(q1)),
		    info->aws_vpce[0] != '\0' ? ", aws-vpce=" : "",
		    zp_escape(info->aws_vpce, q2, sizeof(q2)));
	}
	sa = (const struct sockaddr *)&p->client_addr.ss;
	if (!zp_acl_permits(&cfg->allow, &cfg->deny, sa)) {
		zp_pair_close(p, ZP_END_DENIED);
		return 1;
	}
	/* --max-conns-per-source: counted in pair_begin. */
	return pair_admitted(p);
}

/*
 * Header bytes arrived (or the deadline passed). Peek at what is there,
 * after what was taken already; while the header is incomplete every
 * byte seen belongs to it (zp_proxy_parse's contract) and is taken, so a
 * level-triggered read never spins on bytes left behind; once complete,
 * exactly the rest of it is taken, and the client's first bytes wait in
 * the socket for the relay, for splice as for copy. The deadline counts
 * from accept: a trickle does not push it back.
 */
static void
header_read_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zp_pair		*p = arg;
	struct zp_proxy_info	 info;
	struct pair_hdr		*h = p->hdr;
	struct timeval		 now, left;
	const char		*why = "malformed";
	ssize_t			 n, hl, got;
	size_t			 want;

	if (what & EV_TIMEOUT) {
		header_refuse(p, h->len == 0 ? "no header within "
		    "--proxy-timeout" : "header incomplete after "
		    "--proxy-timeout");
		return;
	}
	do {
		n = recv(fd, h->buf + h->len, ZP_PROXY_ACCEPT_MAX - h->len,
		    MSG_PEEK);
	} while (n == -1 && errno == EINTR);
	if (n == -1 && errno != EAGAIN) {
		p->client.err = errno;
		zp_pair_close(p, zp_half_end(&p->client, 1));
		return;
	}
	if (n == 0) {
		header_refuse(p, h->len == 0 ? "closed before a header" :
		    "closed inside the header");
		return;
	}
	if (n > 0) {
		hl = zp_proxy_parse(h->buf, h->len + (size_t)n, &info, &why);
		if (hl == -1) {
			header_refuse(p, why);
			return;
		}
		want = hl == 0 ? (size_t)n : (size_t)hl - h->len;
		do {
			got = recv(fd, h->buf + h->len, want, 0);
		} while (got == -1 && errno == EINTR);
		if (got != (ssize_t)want) {
			/* What was peeked is there: only a reset takes it. */
			p->client.err = got == -1 ? errno : EIO;
			zp_pair_close(p, zp_half_end(&p->client, 1));
			return;
		}
		h->len += want;
		if (hl > 0) {
			if (header_done(p, &info) == 0)
				pair_check(p);
			return;
		}
	}
	zp_clock_now(&now);
	if (!timercmp(&now, &h->deadline, <)) {
		header_refuse(p, "header incomplete after --proxy-timeout");
		return;
	}
	timersub(&h->deadline, &now, &left);
	if (event_add(p->client.rev, &left) == -1)
		zp_pair_close(p, ZP_END_NOMEM);
}

/*
 * Wait for the client's PROXY header, for --proxy-timeout at most.
 * Returns 1 when the pair was freed.
 */
int ZP_MAY_FREE
pair_header_start(struct zp_pair *p)
{
	struct zp_ctx	*ctx = p->ctx;
	struct timeval	 now, tv;

	pair_set_state(p, ZP_PAIR_HEADER);
	tv = zp_seconds_tv(ctx->cfg->proxy_timeout);
	if ((p->hdr = malloc(sizeof(*p->hdr))) == NULL) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	p->hdr->len = 0;
	zp_clock_now(&now);
	timeradd(&now, &tv, &p->hdr->deadline);
	if ((p->client.rev = event_new(ctx->base, p->client.fd, EV_READ,
	    header_read_cb, p)) == NULL ||
	    event_add(p->client.rev, &tv) == -1) {
		zp_pair_close(p, ZP_END_NOMEM);
		return 1;
	}
	return 0;
}
