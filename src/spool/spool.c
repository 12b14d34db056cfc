/*
 * spool.c - --spool DIR: framed client streams kept in files while no
 * upstream answers, and sent on once one does (spool.h).
 *
 * Written socket -> pipe -> file with splice(2) (the file is created by
 * us alone and written at its own position: splice refuses O_APPEND
 * targets, and nothing else writes it), synced with fdatasync(2) at most
 * every --spool-sync seconds and before a file is renamed whole. Sent
 * file -> socket with sendfile(2), a file over a connection of its own,
 * and unlinked only once the upstream acknowledged every byte
 * (SIOCOUTQ 0 after our FIN) and closed: a failure or a crash before that
 * sends the whole file again (at least once).
 */
#include <sys/types.h>
#include <sys/queue.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "core/config.h"
#include "core/connect.h"
#include "relay/ctx.h"
#include "lib/log.h"
#include "spool/spool.h"
#include "spool/spool_int.h"
#include "lib/wake.h"
#include "tls/tls.h"

/*
 * The parts (spool_int.h): the codec of a file's header and names
 * (spool_hdr.c), DIR and its room (spool_dir.c), the I/O thread
 * (spool_io.c), the writer (spool_writer.c) and the
 * senders (spool_sender.c). This file is the spool object: made, started
 * and ended here, and its tallies.
 */

void
zp_spool_tally(const struct zp_spool *sp, struct zp_spool_tally *t)
{
	int	i;

	memset(t, 0, sizeof(*t));
	if (sp == NULL)
		return;
	t->bytes = spool_ld(&sp->bytes);
	t->files = spool_ld(&sp->files);
	t->streams = spool_ld(&sp->streams);
	t->spooled = spool_ld(&sp->spooled);
	t->replayed = spool_ld(&sp->replayed);
	t->refused = spool_ld(&sp->refused);
	t->delivered = spool_ld(&sp->delivered);
	for (i = 0; i < ZP_TLS_FAIL_MAX; i++)
		t->tls_hs[i] = spool_ld(&sp->tls_hs[i]);
}


struct zp_spool *
zp_spool_new(struct zp_ctx *ctx, char *err, size_t errlen)
{
	const char		*dir = ctx->cfg->spool_dir;
	struct zp_spool		*sp;
	size_t			 i;
	int			 partial = 0, fd, busy;

	if ((sp = calloc(1, sizeof(*sp))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	sp->ctx = ctx;
	zp_connecting_init(&sp->probe);
	sp->free_bytes = UINT64_MAX;	/* until looked at */
	pthread_mutex_init(&sp->mu, NULL);
	STAILQ_INIT(&sp->q);
	if ((sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) ==
	    -1) {
		snprintf(err, errlen, "--spool %s: %s", dir, strerror(errno));
		free(sp);
		return NULL;
	}
	if (spool_scan(sp) == -1) {
		snprintf(err, errlen, "--spool %s: cannot read it: %s", dir,
		    strerror(errno));
		zp_spool_free(sp);
		return NULL;
	}
	for (i = 0; i < sp->nnames; i++) {
		if (strcmp(spool_name_suffix(sp->names[i]), "open") != 0)
			continue;
		/* Still written: by the zproxy we take over from. */
		if ((fd = openat(sp->dirfd, sp->names[i], O_RDONLY |
		    O_CLOEXEC | O_NOFOLLOW)) == -1)
			continue;
		busy = spool_file_lock(fd) == -1;
		close(fd);
		/* Its writer died with the last run: it may end mid-frame. */
		if (!busy) {
			if (spool_rename(sp, sp->names[i], "partial") == -1) {
				snprintf(err, errlen, "--spool %s: cannot "
				    "rename %s: %s", dir, sp->names[i],
				    strerror(errno));
				zp_spool_free(sp);
				return NULL;
			}
			partial++;
		}
	}
	spool_names_clear(sp);
	if (sp->files > 0)
		zp_log(ctx->log, ZP_LOG_NOTICE, "spool %s: %llu files "
		    "(%llu bytes) found, %d of them cut short by the end "
		    "of a previous run: they are sent first", dir,
		    (unsigned long long)sp->files,
		    (unsigned long long)sp->bytes, partial);
	return sp;
}

int
zp_spool_start(struct zp_spool *sp, char *err, size_t errlen)
{
	struct zp_ctx	*ctx = sp->ctx;
	struct timeval	 tv = { SENDER_TICK_MS / 1000,
			    (SENDER_TICK_MS % 1000) * 1000 };
	struct timeval	 room = { 0, SPOOL_FREE_MS * 1000 };
	char		 probe[64];
	int		 fd;

	snprintf(probe, sizeof(probe), ".zproxy-probe.%ld", (long)getpid());
	if ((fd = openat(sp->dirfd, probe, O_WRONLY | O_CREAT | O_TRUNC |
	    O_CLOEXEC, 0600)) == -1) {
		snprintf(err, errlen, "--spool %s: cannot create a file "
		    "there: %s", ctx->cfg->spool_dir, strerror(errno));
		return -1;
	}
	close(fd);
	unlinkat(sp->dirfd, probe, 0);
	spool_free_look(sp);
	if (spool_senders_new(sp) == -1 || (ctx->tls_cli != NULL &&
	    (sp->tls_cache = zp_tls_cache_new()) == NULL))
		goto nomem;
	/* A persistent timer made active by hand loses its period. */
	if ((sp->base = event_base_new()) == NULL ||
	    (sp->wake = zp_wake_new(sp->base)) == NULL ||
	    (sp->inbox = event_new(sp->base, -1, 0, spool_io_inbox_cb, sp)) ==
	    NULL ||
	    (sp->room = event_new(sp->base, -1, EV_PERSIST, spool_free_cb,
	    sp)) == NULL || event_add(sp->room, &room) == -1 ||
	    (sp->tick = event_new(sp->base, -1, EV_PERSIST,
	    spool_sender_tick_cb, sp)) == NULL ||
	    event_add(sp->tick, &tv) == -1 ||
	    (sp->kick = event_new(sp->base, -1, 0, spool_sender_tick_cb,
	    sp)) == NULL)
		goto nomem;
	/* What a previous run left goes at once. */
	event_active(sp->kick, EV_TIMEOUT, 0);
	return spool_io_start(sp, err, errlen);
nomem:
	snprintf(err, errlen, "--spool: out of memory");
	return -1;
}

void
zp_spool_free(struct zp_spool *sp)
{
	if (sp == NULL)
		return;
	spool_io_stop(sp);
	spool_senders_free(sp);
	zp_tls_cache_free(sp->tls_cache);
	if (sp->tick != NULL)
		event_free(sp->tick);
	if (sp->kick != NULL)
		event_free(sp->kick);
	if (sp->room != NULL)
		event_free(sp->room);
	if (sp->inbox != NULL)
		event_free(sp->inbox);
	zp_connecting_cancel(&sp->probe);
	zp_wake_free(sp->wake);
	if (sp->base != NULL)
		event_base_free(sp->base);
	spool_names_clear(sp);
	free(sp->names);
	if (sp->dirfd != -1)
		close(sp->dirfd);
	pthread_mutex_destroy(&sp->mu);
	free(sp);
}
