/*
 * replay.c - a framed stream's last bytes delivered, kept in a pipe for a
 * move after its upstream failed (--replay-window). See replay.h.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE	/* tee, splice, F_SETPIPE_SZ */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/replay.h"

/* Pieces for a small window too: the kernel's default pipe. */
#define ZP_REPLAY_PIPE_MIN	(64 * 1024)

void
zp_replay_init(struct zp_replay *rp, size_t window, int devnull, int roomy)
{
	memset(rp, 0, sizeof(*rp));
	rp->pipe.rfd = rp->pipe.wfd = -1;
	rp->window = window;
	rp->devnull = devnull;
	rp->roomy = roomy != 0;
	rp->known = 1;
}

void
zp_replay_free(struct zp_replay *rp)
{
	if (rp->pipe.rfd != -1) {
		close(rp->pipe.rfd);
		close(rp->pipe.wfd);
	}
	rp->pipe.rfd = rp->pipe.wfd = -1;
}

/* Make a pipe of at least `window` bytes; see replay.h. */
int
zp_replay_pipe(size_t window, struct zp_pipe *p)
{
	int	fds[2], got, err;

	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1)
		return -1;
	/* Past the per-user budget the kernel says EPERM here. */
	if ((got = fcntl(fds[1], F_SETPIPE_SZ, (int)window)) == -1 ||
	    (size_t)got < window) {
		err = got == -1 ? errno : EPERM;
		close(fds[0]);
		close(fds[1]);
		errno = err;
		return -1;
	}
	p->rfd = fds[0];
	p->wfd = fds[1];
	return 0;
}

/*
 * The pipe, made on first use; -1 when none can be had. A pipe is full
 * by pieces as well as bytes, and tee'd pieces are what splice read:
 * an octet frame, a burst of lf lines, often far less than a page. Four
 * times the pieces that the window's bytes need keeps `window` bytes of
 * pieces of 1 KiB; where the kernel refuses that (fs.pipe-max-size), the
 * window's own size. Not as an ordinary user: the per-user pipe budget
 * counts capacity, and four times as much would spend it on a quarter
 * of the streams. A small window still gets the 16 pieces of a default
 * pipe.
 */
static int
replay_open(struct zp_replay *rp)
{
	int	cap;

	if (rp->pipe.rfd != -1)
		return 0;
	if (rp->broken)
		return -1;
	if ((!rp->roomy || rp->window > SIZE_MAX / 4 ||
	    zp_replay_pipe(rp->window * 4 < ZP_REPLAY_PIPE_MIN ?
	    ZP_REPLAY_PIPE_MIN : rp->window * 4, &rp->pipe) == -1) &&
	    zp_replay_pipe(rp->window < ZP_REPLAY_PIPE_MIN ?
	    ZP_REPLAY_PIPE_MIN : rp->window, &rp->pipe) == -1) {
		rp->broken = 1;
		rp->err = errno;
		return -1;
	}
	cap = fcntl(rp->pipe.wfd, F_GETPIPE_SZ);
	rp->cap = cap > 0 ? (size_t)cap : rp->window;
	return 0;
}

/* After start moved: forget the marks before it; is it a boundary? */
static void
replay_marks_trim(struct zp_replay *rp)
{
	while (rp->mcount > 0 && rp->marks[rp->mhead] < rp->start) {
		rp->mhead = (rp->mhead + 1) % ZP_REPLAY_MARKS;
		rp->mcount--;
	}
	rp->known = rp->mcount > 0 && rp->marks[rp->mhead] == rp->start;
}

/* The pipe failed: it is closed, and the replay empty at its end. */
static void
replay_lose(struct zp_replay *rp)
{
	zp_replay_free(rp);
	rp->start = rp->end;
	rp->mcount = 0;
	rp->known = 0;
}

/* Read the n bytes the pipe holds into buf. Returns 0, or -1. */
static int
replay_read(struct zp_replay *rp, char *buf, size_t n)
{
	size_t	got = 0;
	ssize_t	r;

	while (got < n) {
		r = read(rp->pipe.rfd, buf + got, n - got);
		if (r > 0)
			got += (size_t)r;
		else if (r == -1 && errno == EINTR)
			continue;
		else
			return -1;
	}
	return 0;
}

/*
 * Drop the oldest k bytes held: spliced to /dev/null (page references
 * released, nothing copied), read when that is refused. Returns 0, or
 * -1 when the pipe would not give them up (it is then closed: empty).
 */
static int
replay_drop(struct zp_replay *rp, size_t k)
{
	char	tmp[4096];
	ssize_t	n;

	while (k > 0) {
		n = -1;
		if (rp->devnull != -1)
			n = splice(rp->pipe.rfd, NULL, rp->devnull, NULL, k,
			    SPLICE_F_NONBLOCK);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			n = read(rp->pipe.rfd, tmp, k < sizeof(tmp) ? k :
			    sizeof(tmp));
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			replay_lose(rp);
			return -1;
		}
		rp->start += (uint64_t)n;
		k -= (size_t)n;
	}
	replay_marks_trim(rp);
	return 0;
}

/* Start again, empty, at `at`; see replay.h. */
void
zp_replay_reset(struct zp_replay *rp, uint64_t at, int at_boundary)
{
	if (rp->pipe.rfd != -1 && rp->end > rp->start)
		(void)replay_drop(rp, (size_t)(rp->end - rp->start));
	rp->start = rp->end = at;
	rp->mcount = 0;
	rp->known = at_boundary != 0;
}

/* What compaction moves at a time: 16 pages, on the stack. */
#define ZP_REPLAY_STEP	(64 * 1024)

/*
 * The pipe is out of pieces with `held` bytes in far fewer pages: move
 * them from its head to its tail through a buffer, a step at a time, so
 * that each piece is a whole page again (a pipe is a queue: read from
 * the head, written behind what is left, they stay in order). No
 * allocation: a step read frees at least 15 pieces of at most a page,
 * and its write takes 16 at most, merged into the last page written, so
 * that what waits in the buffer always goes once the next step is read.
 * Offsets and marks do not change. Returns 0, or -1 when the pipe failed
 * (it is then closed: empty, at its end).
 */
static int
replay_compact(struct zp_replay *rp, size_t held)
{
	char	 buf[2 * ZP_REPLAY_STEP];
	size_t	 got = 0, len = 0, n;
	ssize_t	 r;

	while (got < held || len > 0) {
		n = held - got;
		if (n > sizeof(buf) - len)
			n = sizeof(buf) - len;
		if (n > ZP_REPLAY_STEP)
			n = ZP_REPLAY_STEP;
		if (n > 0) {
			if (replay_read(rp, buf + len, n) == -1)
				goto fail;
			got += n;
			len += n;
		}
		r = write(rp->pipe.wfd, buf, len);
		if (r > 0) {
			memmove(buf, buf + r, len - (size_t)r);
			len -= (size_t)r;
		} else if (r == -1 && errno == EINTR)
			continue;
		else if (!(r == -1 && errno == EAGAIN && got < held))
			goto fail;	/* full with nothing left to read */
	}
	rp->compactions++;
	return 0;
fail:
	replay_lose(rp);
	return -1;
}

/*
 * The pipe said EAGAIN with bytes held: it is out of pieces. Compact it
 * when that frees a quarter of them or more (once a call: *compacted),
 * else drop the oldest, a step at a time (a piece is freed only when all
 * of it is gone). Returns 0 while there may be room now, -1 when nothing
 * is left to drop and no pipe can be had.
 */
static int
replay_squeeze(struct zp_replay *rp, size_t n, int *compacted)
{
	uint64_t	held = rp->end - rp->start;
	size_t		step = n > 16384 ? n : 16384;

	if (held == 0)
		return -1;
	if (!*compacted && held <= rp->cap - rp->cap / 4) {
		*compacted = 1;
		if (replay_compact(rp, (size_t)held) == 0)
			return 0;
		if (rp->pipe.rfd == -1)
			return replay_open(rp);
	}
	if (step > held)
		step = (size_t)held;
	if (replay_drop(rp, step) == -1 && replay_open(rp) == -1)
		return -1;
	return 0;
}

/* Room for n more within the window: drop the oldest. */
static void
replay_room(struct zp_replay *rp, size_t n)
{
	uint64_t	held = rp->end - rp->start;

	if (held + n > rp->window)
		(void)replay_drop(rp, (size_t)(held + n - rp->window));
}

void
zp_replay_copy(struct zp_replay *rp, const void *buf, size_t n)
{
	const char	*p = buf;
	ssize_t		 w;
	size_t		 skip;
	int		 compacted = 0;

	if (n == 0)
		return;
	if (replay_open(rp) == -1) {
		zp_replay_reset(rp, rp->end + n, 0);
		return;
	}
	if (n > rp->window) {
		skip = n - rp->window;
		zp_replay_reset(rp, rp->end + skip, 0);
		p += skip;
		n -= skip;
	}
	replay_room(rp, n);
	while (n > 0) {
		w = write(rp->pipe.wfd, p, n);
		if (w > 0) {
			rp->end += (uint64_t)w;
			p += w;
			n -= (size_t)w;
			compacted = 0;
		} else if (w == -1 && errno == EINTR)
			continue;
		else if (w == -1 && errno == EAGAIN) {
			/* Out of pieces (tee'd ones are not merged into). */
			if (replay_squeeze(rp, n, &compacted) == -1)
				break;
		} else
			break;
	}
	if (n > 0)
		zp_replay_reset(rp, rp->end + n, 0);
}

size_t
zp_replay_tee(struct zp_replay *rp, int rfd, size_t n)
{
	ssize_t	t;
	int	compacted = 0;

	if (n == 0 || replay_open(rp) == -1)
		return 0;
	/*
	 * What is tee'd counts in the window before it is delivered; when
	 * the upstream stops taking bytes, all that was tee'd and not sent
	 * would push delivered bytes out. Keep a step ahead of delivery.
	 */
	if (n > ZP_REPLAY_AHEAD(rp->window))
		n = ZP_REPLAY_AHEAD(rp->window);
	replay_room(rp, n);
	for (;;) {
		t = tee(rfd, rp->pipe.wfd, n, SPLICE_F_NONBLOCK);
		if (t > 0) {
			rp->end += (uint64_t)t;
			return (size_t)t;
		}
		if (t == -1 && errno == EINTR)
			continue;
		/*
		 * EAGAIN with bytes held: the pipe is out of pieces, not of
		 * bytes (each tee'd segment takes one). Make room and try
		 * again; an empty pipe that refuses cannot be helped.
		 */
		if (t == -1 && errno == EAGAIN) {
			if (replay_squeeze(rp, n, &compacted) == -1)
				return 0;
			continue;
		}
		return 0;
	}
}

int
zp_replay_retry(struct zp_replay *rp)
{
	int	err = rp->broken ? rp->err : 0;

	rp->broken = 0;
	rp->err = 0;
	return err;
}

void
zp_replay_mark(struct zp_replay *rp, uint64_t off)
{
	uint64_t	last, step = rp->window / 16;

	if (off < rp->start)
		return;
	if (rp->mcount > 0) {
		last = rp->marks[(rp->mhead + rp->mcount - 1) %
		    ZP_REPLAY_MARKS];
		if (off <= last || off - last < step)
			return;
	}
	if (rp->mcount == ZP_REPLAY_MARKS) {
		rp->mhead = (rp->mhead + 1) % ZP_REPLAY_MARKS;
		rp->mcount--;
	}
	rp->marks[(rp->mhead + rp->mcount) % ZP_REPLAY_MARKS] = off;
	rp->mcount++;
	if (off == rp->start)
		rp->known = 1;
}

/* The first boundary in the n bytes of buf (held from rp->start). */
static int
replay_first(const struct zp_replay *rp, enum zp_framing kind,
    const char *buf, size_t n, size_t *b)
{
	const char	*d;
	unsigned	 i;
	uint64_t	 m;

	if (rp->known) {
		*b = 0;
		return 0;
	}
	if (kind == ZP_FRAMING_LF || kind == ZP_FRAMING_NUL) {
		d = memchr(buf, kind == ZP_FRAMING_LF ? '\n' : '\0', n);
		if (d == NULL)
			return -1;
		*b = (size_t)(d - buf) + 1;
		return 0;
	}
	for (i = 0; i < rp->mcount; i++) {
		m = rp->marks[(rp->mhead + i) % ZP_REPLAY_MARKS];
		if (m >= rp->start && m - rp->start <= n) {
			*b = (size_t)(m - rp->start);
			return 0;
		}
	}
	return -1;
}

int
zp_replay_take(struct zp_replay *rp, enum zp_framing kind, uint64_t upto,
    char **bufp, size_t *len, uint64_t *from)
{
	size_t	held = (size_t)(rp->end - rp->start), n, b;
	char	*buf = NULL;
	int	rc = -1, read_out = 0;

	*bufp = NULL;
	*len = 0;
	if (rp->pipe.rfd == -1 || held == 0 || upto < rp->start ||
	    upto > rp->end)
		goto out;
	if ((buf = malloc(held)) == NULL)
		goto out;
	if (replay_read(rp, buf, held) == -1) {
		errno = EIO;
		goto out;
	}
	read_out = 1;
	n = (size_t)(upto - rp->start);
	if (replay_first(rp, kind, buf, n, &b) == -1)
		goto out;
	*from = rp->start + b;
	*len = n - b;
	if (*len > 0) {
		memmove(buf, buf + b, *len);
		*bufp = buf;
		buf = NULL;
	}
	rc = 0;
out:
	free(buf);
	/* Read out, or of no use: empty, at where the stream goes on. */
	if (!read_out)
		zp_replay_free(rp);
	rp->start = rp->end = rc == 0 ? *from : upto;
	rp->mcount = 0;
	rp->known = rc == 0;
	return rc;
}
