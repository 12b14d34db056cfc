/*
 * replay.h - the last bytes a framed stream delivered to its upstream,
 * kept so that when that upstream fails the stream can go to the next
 * one again from the first whole message held (--replay-window):
 * at-least-once delivery of everything within the window.
 *
 * What is kept does not shrink when the upstream acknowledges it: a
 * collector's kernel acknowledges bytes that its process then loses (a
 * kill -9 with a receive queue, or with messages in its own memory
 * queue), and nothing a TCP proxy can see tells those apart from bytes
 * that were written to disk. So the window is simply the last
 * `window` bytes delivered, and a move sends all of it again.
 *
 * The store is a pipe in both modes, so that its bytes stay in stream
 * order when a direction goes from copy to splice and back: splice mode
 * duplicates the page references of its data pipe into it with tee(2)
 * (nothing is copied), copy mode writes what it sent into it. The oldest
 * bytes are dropped by splicing them to /dev/null. A pipe holds at most
 * capacity/4096 pieces, whatever their size, and a tee'd piece is what
 * splice read (often one small segment): when the pieces run out first,
 * the store is compacted (read out and written back whole pages, a copy
 * of what it holds) while that frees a quarter of them or more, and
 * only then drops its oldest bytes. So it keeps at least 3/4 of the
 * window (or of its pipe, made 4 x window where the process may) however
 * small the segments; a stream of full pages is never copied.
 *
 * Stream offsets are those of the direction's zp_dframe: the replay
 * holds [start, end), and every byte delivered either goes in at `end`
 * or, when it could not be kept, makes the replay start again after it
 * (zp_replay_reset()).
 */
#ifndef ZP_REPLAY_H
#define ZP_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "lib/framing.h"
#include "lib/pipepool.h"

/* Frame boundaries remembered within a window: one per window/16. */
#define ZP_REPLAY_MARKS	32

struct zp_replay {
	struct zp_pipe	 pipe;		/* made at the first byte kept */
	size_t		 window;	/* --replay-window */
	size_t		 cap;		/* the pipe's capacity, in bytes */
	uint64_t	 compactions;	/* times its pieces were rewritten */
	int		 devnull;	/* the context's, to drop bytes into */
	uint64_t	 start;		/* offset of the first byte held */
	uint64_t	 end;		/* one past the last */
	unsigned	 known:1;	/* start is a frame boundary */
	unsigned	 broken:1;	/* no pipe could be had: keep nothing */
	unsigned	 roomy:1;	/* may ask for 4 x window */
	int		 err;		/* why, when broken */
	uint64_t	 marks[ZP_REPLAY_MARKS]; /* boundaries seen, a ring */
	unsigned	 mhead;
	unsigned	 mcount;
};

/*
 * A replay of `window` bytes for a stream at offset 0, at a boundary;
 * devnull is an open descriptor of /dev/null that it does not own;
 * roomy: the process is exempt from the per-user pipe budget (root
 * without --user), so its pipe may have four times the pieces the window
 * needs. No pipe is made until the first byte is kept.
 */
void	zp_replay_init(struct zp_replay *, size_t window, int devnull,
	    int roomy);

/* Close its pipe. Safe on an initialised replay in any state. */
void	zp_replay_free(struct zp_replay *);

/*
 * Make a pipe that holds `window` bytes. Returns 0 and fills *p, or -1
 * with errno (EPERM: over fs.pipe-max-size or the per-user pipe budget;
 * EMFILE). For the start-up check as well as the replay itself.
 */
int	zp_replay_pipe(size_t window, struct zp_pipe *p);

/* Copy mode: the n bytes at buf were just delivered: keep them. */
void	zp_replay_copy(struct zp_replay *, const void *buf, size_t n);

/* The most splice mode keeps ahead of delivery: an eighth of the window. */
#define ZP_REPLAY_AHEAD(w)	((w) / 8 > 0 ? (w) / 8 : 1)

/*
 * Splice mode, before a flush of the data pipe rfd that holds n bytes
 * none of which were kept yet: duplicate as many of them as the window
 * takes, at most ZP_REPLAY_AHEAD (what is kept and not yet sent takes
 * room from what was), with tee(2), page references only, and return
 * how many. The flush
 * must then send at most that many, so that the head of the data pipe
 * is again bytes not kept. 0: none could be (the bytes then go out
 * unkept, and the caller says so with zp_replay_reset()).
 */
size_t	zp_replay_tee(struct zp_replay *, int rfd, size_t n);

/*
 * The bytes up to offset `at` went out unkept, or were dropped: start
 * again, empty, at `at`, a boundary when at_boundary says so.
 */
void	zp_replay_reset(struct zp_replay *, uint64_t at, int at_boundary);

/*
 * Why no pipe could be had for the replay (an errno: EPERM for the pipe
 * budget, EMFILE), or 0; and let it try again at its next byte. For a
 * move, which must say that it had nothing to send again.
 */
int	zp_replay_retry(struct zp_replay *);

/* The stream has a frame boundary at offset off (a sample is kept). */
void	zp_replay_mark(struct zp_replay *, uint64_t off);

/*
 * The upstream failed after bytes up to offset `upto` were delivered to
 * it: the bytes held from the first frame boundary in [start, upto] up
 * to `upto`, framed as kind (LF, NUL: a boundary follows each
 * delimiter; OCTET: only the boundaries marked are known). Returns 0
 * with *buf (malloc'd, the caller frees it; NULL when *len is 0), *len
 * and *from (the boundary they start at: from + len == upto); or -1
 * when there is no boundary to start at (nothing held, or a window
 * within one message) or the pipe could not be read (errno). Either way
 * the replay is then empty.
 */
int	zp_replay_take(struct zp_replay *, enum zp_framing kind,
	    uint64_t upto, char **buf, size_t *len, uint64_t *from);

#endif
