/*
 * pair_spool.c - --spool, the pair's side: a client no upstream took (or
 * a framed stream whose move found none) goes into the spool's files,
 * and on live when an upstream took them (pair_spool_done).
 */

#include <sys/socket.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <event2/event.h>

#include "relay/ctx.h"
#include "lib/log.h"
#include "core/net.h"
#include "stream/pair.h"
#include "stream/pair_int.h"
#include "spool/spool.h"

/*
 * The spool's writer is done with the client's stream: it ended, or an
 * upstream took every file of it and the client goes on live, from a
 * frame boundary, as a new connect (the balancer's choice); should that
 * fail too, it spools again.
 */
static void
pair_spool_done(void *arg, enum zp_spool_end end, int err)
{
	struct zp_pair	*p = arg;
	struct zp_ctx	*ctx = p->ctx;

	p->spooled += zp_spool_writer_bytes(p->spool);
	p->client.err = err;
	switch (end) {
	case ZP_SPOOL_ENDED:
		zp_pair_close(p, ZP_END_SPOOLED);
		return;
	case ZP_SPOOL_DISK_FAILED:
		zp_pair_close(p, ZP_END_SPOOL_FAILED);
		return;
	case ZP_SPOOL_CLIENT_FAILED:
		zp_pair_close(p, zp_half_end(&p->client, 1));
		return;
	case ZP_SPOOL_LIVE:
		break;
	}
	zp_spool_writer_free(p->spool);
	p->spool = NULL;
	pair_set_state(p, p->spool_live ? ZP_PAIR_MOVING :
	    ZP_PAIR_CONNECTING);
	if (p->spool_live) {
		/*
		 * It was live: it goes on as a move (its client's events are
		 * there; its mirrors ended when it spooled), from the boundary
		 * the writer stopped at; what the replay held went into the
		 * files.
		 */
		struct zp_dframe	*fr = p->up.fr;

		(void)zp_framer_resume(&fr->f, zp_framer_kind(&fr->f),
		    fr->f.max_asked, fr->sent, 1);
		fr->mcount = 0;
		zp_dframe_cut(fr, 0);
		zp_dframe_seek(fr, 0);
		fr->teed = 0;
		if (fr->rp != NULL)
			zp_replay_reset(fr->rp, fr->sent, 1);
	}
	/* Told to finish (the drain): it does so into the spool. */
	if (p->winding) {
		if (pair_spool(p) == -1)
			zp_pair_close(p, errno == ENOSPC ? ZP_END_SPOOL_FULL :
			    ZP_END_SPOOL_FAILED);
		return;
	}
	zp_log(ctx->log, ZP_LOG_NOTICE, "connection %llu: its spool was "
	    "delivered (%llu bytes); it goes on to an upstream",
	    (unsigned long long)p->id, (unsigned long long)p->spooled);
	p->connect_err = 0;
	/* A fresh connect phase: pair_connect_upstream() makes it anew. */
	if (p->dial != NULL) {
		p->dial->tried = 0;
		p->dial->attempts = 0;
		timerclear(&p->dial->retry_until);
	}
	if (pair_connect_upstream(p) == 0)
		pair_check(p);
}

/*
 * --spool: no upstream took the client: its stream goes into files, to
 * be sent on when one answers. The PROXY header they will get is the one
 * this pair would have sent. Returns 0, or -1 with errno (ENOSPC: the
 * spool is full) when the pair is to be refused as without it.
 */
int
pair_spool(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_addr		 dst;
	char			 cbuf[ZP_ADDRSTRLEN];
	int			 err = p->connect_err, spool_err;

	memset(&dst, 0, sizeof(dst));
	if (p->px != NULL && p->px->proxy_dst.len > 0)
		dst = p->px->proxy_dst;
	else if (p->dst.len > 0)
		dst = p->dst;
	else {
		dst.len = sizeof(dst.ss);
		if (getsockname(p->client.fd, (struct sockaddr *)&dst.ss,
		    &dst.len) == -1)
			dst.len = 0;
	}
	zp_addr_unmap(&dst);
	/* The writer reads the socket: the frames in memory go there. */
	zp_half_feed_detach(&p->client);
	if ((p->spool = zp_spool_writer_new(ctx, p->client.fd,
	    p->client.tls, p->id,
	    &p->client_addr, &dst, p->framing, p->max_frame, p->dgram,
	    pair_spool_done, p)) == NULL) {
		/* Full: the connection's line says so (end=spool-full). */
		if ((spool_err = errno) != ENOSPC)
			zp_log(ctx->log, ZP_LOG_ERROR, "connection %llu: no "
			    "upstream answered (%s) and the spool failed (%s): "
			    "client %s refused", (unsigned long long)p->id,
			    strerror(err), strerror(spool_err),
			    zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf)));
		p->connect_err = err;
		errno = spool_err;
		return -1;
	}
	pair_set_state(p, ZP_PAIR_SPOOLING);
	zp_log(ctx->log, ZP_LOG_NOTICE, "connection %llu: %s%s%s; spooling "
	    "client %s to %s", (unsigned long long)p->id, err != 0 ?
	    "no upstream answered (" : "zproxy is stopping",
	    err != 0 ? strerror(err) : "", err != 0 ? ")" : "",
	    zp_addr_str(&p->client_addr, cbuf, sizeof(cbuf)),
	    ctx->cfg->spool_dir);
	return 0;
}

/*
 * --spool, a framed stream whose move found no upstream (every one down
 * or failed): instead of ending the client, its stream goes into files
 * from where it stood, a frame boundary (the replay window, then what
 * the store held; or, without one, the rest of a frame whose start went
 * to the failed upstream dropped), and the client stays connected. Once
 * an upstream takes the files it goes on live, as a move
 * (pair_spool_done). Returns 0 (spooling), 1 (the pair was freed), or -1
 * with errno when the spool did not take it (ENOSPC: full).
 */
int
pair_spool_moved(struct zp_pair *p)
{
	struct zp_ctx		*ctx = p->ctx;
	struct zp_dir		*d = &p->up;
	struct zp_dframe	*fr = d->fr;

	if (fr == NULL || p->client.dead ||
	    zp_framer_error(&fr->f, NULL) != NULL) {
		errno = EPROTO;
		return -1;
	}
	/* An old upstream still being read is done with: nothing follows. */
	if (pair_retiring(p))
		pair_retire_done(p, 0);
	if (p->mv != NULL)
		p->mv->rewind_due = 0;
	zp_dframe_seek(fr, 0);
	if (pair_spool(p) == -1)
		return -1;
	p->spool_live = 1;
	/* The spool's writer reads the client: no mirror sees those bytes. */
	if (p->mir != NULL)
		zp_mirror_set_leave(p->mir, "its stream went to the spool");
	if (zp_spool_writer_prefix(p->spool, d->buf != NULL ? d->buf + d->off :
	    NULL, d->len, zp_dframe_cutting(fr) ? &fr->f : NULL) == -1) {
		p->client.err = errno;
		zp_pair_close(p, ZP_END_SPOOL_FAILED);
		return 1;
	}
	/* What the store held is the files' now. */
	d->len = d->off = 0;
	if (d->buf != NULL) {
		zp_buf_put(d->bufs, d->buf, d->bufsize);
		d->buf = NULL;
		d->bufsize = ctx->cfg->buffer_size;
	}
	zp_dframe_cut(fr, 0);
	/* Its timers (idle, fin, lifetime, a stall) wait for it to be live. */
	if (p->timer != NULL)
		evtimer_del(p->timer);
	timerclear(&p->stall_since);
	pair_fin_set(p, ZP_FIN_OPEN);
	return 0;
}
