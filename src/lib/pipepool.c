/*
 * pipepool.c - a stack of empty pipes of one size.
 */

#include <sys/ioctl.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/pipepool.h"
#include "lib/pipepool_int.h"

/* Close both ends of a pipe and mark it empty. */
void
zp_pipe_close(struct zp_pipe *p)
{
	if (p->rfd != -1)
		close(p->rfd);
	if (p->wfd != -1)
		close(p->wfd);
	p->rfd = p->wfd = -1;
	p->data = 0;
}

/*
 * Make one pipe of the pool's size. Returns 0, or -1 with pool->shortage
 * set. Over the per-user budget the kernel hands out 2-page pipes and
 * refuses F_SETPIPE_SZ with EPERM: such a pipe is closed, never used.
 */
static int
pipe_make(struct zp_pipepool *pool, struct zp_pipe *p)
{
	int	fds[2], got;

	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
		pool->last_errno = errno;
		pool->shortage = (errno == EMFILE || errno == ENFILE) ?
		    ZP_PIPE_NOFD : ZP_PIPE_ERROR;
		return -1;
	}
	p->rfd = fds[0];
	p->wfd = fds[1];
	p->data = 0;
	if (fcntl(p->wfd, F_SETPIPE_SZ, (int)pool->size) == -1) {
		pool->last_errno = errno;
		pool->shortage = (errno == EPERM || errno == EBUSY) ?
		    ZP_PIPE_BUDGET : ZP_PIPE_ERROR;
		zp_pipe_close(p);
		return -1;
	}
	got = fcntl(p->wfd, F_GETPIPE_SZ);
	if (got == -1 || (size_t)got < pool->size) {
		pool->last_errno = got == -1 ? errno : EPERM;
		pool->shortage = ZP_PIPE_BUDGET;
		zp_pipe_close(p);
		return -1;
	}
	pool->created++;
	return 0;
}

/* Set up the pool and prepare some pipes. */
int
zp_pipepool_init(struct zp_pipepool *pool, size_t size, size_t cap,
    size_t prepare, char *err, size_t errlen)
{
	struct zp_pipe	p;

	memset(pool, 0, sizeof(*pool));
	pool->size = size;
	pool->cap = cap;
	if (cap == 0 || size > (size_t)0x7fffffff) {
		snprintf(err, errlen, "invalid pipe pool: %zu pipes of %zu "
		    "bytes", cap, size);
		pool->shortage = ZP_PIPE_ERROR;
		return -1;
	}
	if ((pool->free = calloc(cap, sizeof(*pool->free))) == NULL) {
		snprintf(err, errlen, "pipe pool: %s", strerror(errno));
		pool->shortage = ZP_PIPE_ERROR;
		pool->last_errno = errno;
		return -1;
	}
	if (prepare > cap)
		prepare = cap;
	pool->keep = prepare > 0 ? prepare : 1;
	while (pool->nfree < prepare) {
		if (pipe_make(pool, &p) == -1)
			break;
		pool->free[pool->nfree++] = p;
		pool->nalive++;
	}
	if (prepare > 0 && pool->nfree == 0) {
			int shortage = pool->shortage, last = pool->last_errno;

		snprintf(err, errlen, "cannot make a pipe of %zu bytes (%s): %s",
		    size, zp_pipe_shortage_str(shortage), strerror(last));
		zp_pipepool_clear(pool);
		pool->shortage = shortage;
		pool->last_errno = last;
		return -1;
	}
	return 0;
}

/* A pool of our own; see pipepool.h. */
struct zp_pipepool *
zp_pipepool_new(size_t size, size_t cap, size_t prepare, int *shortage,
    char *err, size_t errlen)
{
	struct zp_pipepool	*pool;

	*shortage = ZP_PIPE_ERROR;
	if ((pool = malloc(sizeof(*pool))) == NULL) {
		snprintf(err, errlen, "pipe pool: %s", strerror(errno));
		return NULL;
	}
	if (zp_pipepool_init(pool, size, cap, prepare, err, errlen) == -1) {
		*shortage = pool->shortage;
		free(pool);
		return NULL;
	}
	*shortage = ZP_PIPE_OK;
	return pool;
}

/* Take an empty pipe. */
int
zp_pipepool_get(struct zp_pipepool *pool, struct zp_pipe *p)
{
	if (pool->nfree > 0) {
		*p = pool->free[--pool->nfree];
		return 0;
	}
	if (pool->nalive >= pool->cap) {
		pool->shortage = ZP_PIPE_LIMIT;
		return -1;
	}
	if (pipe_make(pool, p) == -1)
		return -1;
	pool->nalive++;
	return 0;
}

void
zp_pipepool_stats(const struct zp_pipepool *pool, struct zp_pipepool_stats *st)
{
	st->alive = pool->nalive;
	st->pooled = pool->nfree;
	st->created = pool->created;
	st->killed = pool->killed;
	st->shortage = pool->shortage;
}

/* Bytes in a pipe, as the kernel counts them; -1 when it cannot say. */
static int
pipe_unread(int rfd)
{
	int	n = 0;

	return ioctl(rfd, FIONREAD, &n) == -1 ? -1 : n;
}

/* Give back a pipe; one that still holds bytes is closed. */
void
zp_pipepool_put(struct zp_pipepool *pool, struct zp_pipe *p)
{
	if (p->rfd == -1)
		return;
	/*
	 * The caller's count, checked against the kernel's: a pipe that
	 * still holds bytes its count forgot would hand them to the next
	 * connection. Killed like any pipe with bytes; in a debug build
	 * (the sanitizer runs), a bug that stops the test there.
	 */
	if (p->data == 0 && pipe_unread(p->rfd) != 0) {
#ifdef ZP_DEBUG
		assert(!"a pipe given back holds bytes its count does not");
#endif
		p->data = 1;
	}
	if (p->data == 0 && pool->nfree < pool->cap) {
		pool->free[pool->nfree++] = *p;
		p->rfd = p->wfd = -1;
	} else {
		if (p->data > 0)
			pool->killed++;
		zp_pipe_close(p);
		pool->nalive--;
	}
	p->data = 0;
	/*
	 * Hold no more than what was prepared or twice what is in use: a
	 * burst that ends gives its descriptors (and pipe budget) back, while
	 * steady churn never pays pipe2, fcntl and close per connection.
	 */
	while (pool->nfree > pool->keep &&
	    pool->nfree > 2 * (pool->nalive - pool->nfree)) {
		zp_pipe_close(&pool->free[--pool->nfree]);
		pool->nalive--;
	}
}

/* Close every pipe on the stack and free the stack. */
void
zp_pipepool_clear(struct zp_pipepool *pool)
{
	while (pool->nfree > 0) {
		zp_pipe_close(&pool->free[--pool->nfree]);
		pool->nalive--;
	}
	free(pool->free);
	pool->free = NULL;
}

/* The same, and the pool itself. */
void
zp_pipepool_free(struct zp_pipepool *pool)
{
	if (pool == NULL)
		return;
	zp_pipepool_clear(pool);
	free(pool);
}

/* Name of a shortage. */
const char *
zp_pipe_shortage_str(int s)
{
	switch (s) {
	case ZP_PIPE_OK:
		return "none";
	case ZP_PIPE_LIMIT:
		return "pool limit reached";
	case ZP_PIPE_NOFD:
		return "out of descriptors";
	case ZP_PIPE_BUDGET:
		return "per-user pipe budget exhausted";
	default:
		return "pipe creation failed";
	}
}
