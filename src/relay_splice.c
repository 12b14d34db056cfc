/*
 * relay_splice.c - socket -> pipe -> socket, with splice(2).
 *
 * Nothing is copied through user space: the kernel moves page references
 * from the source socket's receive queue into the pipe and from the pipe
 * into the destination socket.
 */

#include <errno.h>
#include <fcntl.h>

#include "ctx.h"
#include "relay.h"

/*
 * Never pass SPLICE_F_MORE: it becomes MSG_MORE and holds a small tail
 * back for ~200 ms. SPLICE_F_NONBLOCK covers the pipe side; the sockets
 * are non-blocking themselves.
 */
#define ZP_SPLICE_FLAGS	(SPLICE_F_MOVE | SPLICE_F_NONBLOCK)

/*
 * Socket -> pipe. Returns bytes moved, 0 on EOF, -1 with errno, or
 * ZP_FILL_FALLBACK. EAGAIN is ambiguous: the socket is empty, or the pipe
 * is full - and a pipe is full by slots, not bytes, so its byte count
 * says nothing. Like HAProxy, take EAGAIN with bytes in the pipe as
 * "full": if the guess is wrong the next flush clears it at no cost.
 * With a FIN queued behind a full pipe splice says EAGAIN, not 0: the EOF
 * shows once the pipe is drained.
 */
static ssize_t
splice_fill(struct zp_dir *d, size_t max)
{
	ssize_t	n;

	for (;;) {
		n = splice(d->src->fd, NULL, d->pipe.wfd, NULL, max,
		    ZP_SPLICE_FLAGS);
		if (n > 0) {
			/*
			 * Short means the socket ran dry, or the pipe ran out
			 * of slots; guessing "dry" costs at most one more
			 * wake-up of the level-triggered read event.
			 */
			d->inpipe += n;
			if ((size_t)n < max)
				d->drained = 1;
			return n;
		}
		if (n == 0)
			return 0;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			if (d->inpipe > 0)
				d->full = 1;
			else
				d->drained = 1;
			return -1;
		}
		/*
		 * Refused before anything moved through the pipe: the kernel
		 * cannot splice these sockets (a sandbox, a socket type
		 * without splice_read). Nothing was consumed, and what a lazy
		 * direction copied before is delivered; copy on.
		 */
		if ((errno == EINVAL || errno == ENOSYS || errno == EPERM ||
		    errno == EBADF || errno == EOPNOTSUPP) && d->inpipe == 0 &&
		    d->spliced == 0)
			return ZP_FILL_FALLBACK;
		return -1;
	}
}

/* Pipe -> socket. Returns bytes moved or -1 with errno. */
static ssize_t
splice_flush(struct zp_dir *d)
{
	ssize_t	n;

	do {
		n = splice(d->pipe.rfd, NULL, d->dst->fd, NULL, d->inpipe,
		    ZP_SPLICE_FLAGS);
	} while (n == -1 && errno == EINTR);
	if (n > 0) {
		d->inpipe -= n;
		d->spliced += n;
	} else if (n == 0) {
		/* An empty pipe: cannot happen while inpipe counts right. */
		errno = EIO;
		return -1;
	}
	return n;
}

static size_t
splice_pending(const struct zp_dir *d)
{
	return d->inpipe;
}

/* The pipe goes back to the pool, or is closed if it holds bytes. */
static void
splice_release(struct zp_ctx *ctx, struct zp_dir *d)
{
	zp_pipepool_put(&ctx->pool, &d->pipe, d->inpipe);
	d->inpipe = 0;
}

const struct zp_relay_ops zp_relay_splice = {
	.name = "splice",
	.fill = splice_fill,
	.flush = splice_flush,
	.pending = splice_pending,
	.release = splice_release,
};
