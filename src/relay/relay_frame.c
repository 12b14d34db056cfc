/*
 * relay_frame.c - a framed direction's bookkeeping (struct zp_dframe):
 * its boundary work as a state machine (zp_dframe_seek, zp_dframe_cut),
 * the frame ends a pipe holds, and what was sent and seen. It moves no
 * byte: relay.c and the backends call it as bytes move.
 */

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "lib/framing.h"
#include "lib/log.h"
#include "lib/replay.h"
#include "relay/relay.h"

static const char *const fr_state_names[] = {
	[ZP_FR_RELAYING] = "relaying",
	[ZP_FR_SEEKING] = "seeking",
	[ZP_FR_CUTTING] = "cutting",
	[ZP_FR_CUT_SEEK] = "cutting, then seeking",
};

/*
 * The moves a framed direction's boundary work may make (docs/DESIGN.md,
 * "Framed direction states"): bit `to` of fr_moves[from]. Asking for
 * what already is, is no move.
 */
#define FR(s)	(1u << (s))
static const unsigned fr_moves[] = {
	[ZP_FR_RELAYING] = FR(ZP_FR_SEEKING) | FR(ZP_FR_CUTTING),
	[ZP_FR_SEEKING] = FR(ZP_FR_RELAYING),
	[ZP_FR_CUTTING] = FR(ZP_FR_RELAYING) | FR(ZP_FR_CUT_SEEK),
	[ZP_FR_CUT_SEEK] = FR(ZP_FR_SEEKING) | FR(ZP_FR_CUTTING) |
	    FR(ZP_FR_RELAYING),
};
#undef FR

static void
dframe_set(struct zp_dframe *fr, enum zp_fr_state to)
{
	if (to == fr->state)
		return;
	assert((size_t)fr->state < sizeof(fr_moves) / sizeof(fr_moves[0]));
	assert(fr_moves[fr->state] & (1u << to));
	if (fr->log != NULL && zp_log_enabled(fr->log, ZP_LOG_DEBUG))
		zp_log(fr->log, ZP_LOG_DEBUG, "connection %llu: framing %s -> "
		    "%s", (unsigned long long)fr->id,
		    fr_state_names[fr->state], fr_state_names[to]);
	fr->state = to;
}

void
zp_dframe_seek(struct zp_dframe *fr, int on)
{
	int	cut = zp_dframe_cutting(fr);

	dframe_set(fr, on ? (cut ? ZP_FR_CUT_SEEK : ZP_FR_SEEKING) :
	    (cut ? ZP_FR_CUTTING : ZP_FR_RELAYING));
}

void
zp_dframe_cut(struct zp_dframe *fr, int on)
{
	int	seek = zp_dframe_seeking(fr);

	dframe_set(fr, on ? (seek ? ZP_FR_CUT_SEEK : ZP_FR_CUTTING) :
	    (seek ? ZP_FR_SEEKING : ZP_FR_RELAYING));
}

void
zp_dframe_mark(struct zp_dframe *fr, uint64_t off)
{
	fr->marks[(fr->mhead + fr->mcount) % ZP_MARKS] = off;
	fr->mcount++;
	if (fr->rp != NULL)
		zp_replay_mark(fr->rp, off);
}

void
zp_dframe_sent(struct zp_dframe *fr, size_t n)
{
	fr->sent += n;
	if (fr->rp != NULL) {
		/* What went out unkept breaks the replay's continuity. */
		if (n > fr->teed) {
			fr->teed = 0;
			zp_replay_reset(fr->rp, fr->sent, 0);
		} else
			fr->teed -= n;
		assert(fr->rp->end == fr->sent + fr->teed);
	}
	while (fr->mcount > 0 && fr->marks[fr->mhead] <= fr->sent) {
		fr->last_mark = fr->marks[fr->mhead];
		fr->mhead = (fr->mhead + 1) % ZP_MARKS;
		fr->mcount--;
		fr->frames++;
	}
}

void
zp_dframe_seen(struct zp_dframe *fr, const void *buf, size_t n)
{
	uint64_t	before = zp_framer_frames(&fr->f);
	size_t		k;

	k = zp_framer_feed(&fr->f, buf, n);
	fr->frames += zp_framer_frames(&fr->f) - before;
	if (fr->rp != NULL) {
		zp_replay_copy(fr->rp, buf, n);
		if (k > 0)
			zp_replay_mark(fr->rp, fr->sent + k);
	}
	fr->sent += n;
	if (zp_framer_at_boundary(&fr->f))
		fr->last_mark = fr->sent;
}
