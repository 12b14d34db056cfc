/*
 * test_pipepool.c - unit tests for pipepool.c.
 *
 * Linked with -Wl,--wrap=pipe2,--wrap=fcntl: the wrappers below pass
 * through to the real calls unless a test asks for a fault (EMFILE from
 * pipe2, EPERM from F_SETPIPE_SZ, a pipe that comes back smaller than
 * asked). Sizes are checked with the real F_GETPIPE_SZ and leaks by
 * counting /proc/self/fd.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/types.h>
#include <sys/wait.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lib/pipepool.h"
#include "lib/pipepool_int.h"

#define KIB	1024
#define MAXLOG	64

int	__real_pipe2(int [2], int);
int	__wrap_pipe2(int [2], int);
int	__real_fcntl(int, int, ...);
int	__wrap_fcntl(int, int, ...);

/*
 * Fault injection. Each fault lets `pass` calls through, then fails every
 * later call (until the test resets it). pass == -1: never fails.
 */
struct fault {
	int	pass;
	int	err;		/* errno of the failure */
	int	calls;		/* calls seen */
};

static struct {
	struct fault	pipe2;
	struct fault	setsz;		/* fcntl(F_SETPIPE_SZ) */
	int		setsz_lie;	/* F_SETPIPE_SZ "succeeds", does nothing */
	struct fault	getsz;		/* fcntl(F_GETPIPE_SZ) */
	int		getsz_value;	/* if > 0, the failure returns this */
	int		pipe2_flags;	/* flags of the last pipe2 */
	int		made[MAXLOG][2]; /* every pipe the wrapper created */
	int		nmade;
} inj;

static void
fault_reset(void)
{
	memset(&inj, 0, sizeof(inj));
	inj.pipe2.pass = inj.setsz.pass = inj.getsz.pass = -1;
}

/* True when the fault fires for this call. */
static int
fault_hit(struct fault *f)
{
	f->calls++;
	return f->pass >= 0 && f->calls > f->pass;
}

int
__wrap_pipe2(int fds[2], int flags)
{
	int	rc;

	inj.pipe2_flags = flags;
	if (fault_hit(&inj.pipe2)) {
		errno = inj.pipe2.err;
		return -1;
	}
	rc = __real_pipe2(fds, flags);
	if (rc == 0 && inj.nmade < MAXLOG) {
		inj.made[inj.nmade][0] = fds[0];
		inj.made[inj.nmade][1] = fds[1];
		inj.nmade++;
	}
	return rc;
}

/* fcntl is variadic: forward the third argument by the type cmd takes. */
int
__wrap_fcntl(int fd, int cmd, ...)
{
	va_list	ap;
	int	iarg = 0;
	void	*parg = NULL;

	va_start(ap, cmd);
	switch (cmd) {
	case F_GETFD:
	case F_GETFL:
	case F_GETOWN:
	case F_GETSIG:
	case F_GETLEASE:
	case F_GETPIPE_SZ:
	case F_GET_SEALS:
		break;
	case F_GETLK:
	case F_SETLK:
	case F_SETLKW:
	case F_OFD_GETLK:
	case F_OFD_SETLK:
	case F_OFD_SETLKW:
	case F_GETOWN_EX:
	case F_SETOWN_EX:
		parg = va_arg(ap, void *);
		break;
	default:
		iarg = va_arg(ap, int);
		break;
	}
	va_end(ap);

	if (cmd == F_SETPIPE_SZ) {
		if (fault_hit(&inj.setsz)) {
			if (inj.setsz_lie)
				return iarg;
			errno = inj.setsz.err;
			return -1;
		}
		return __real_fcntl(fd, cmd, iarg);
	}
	if (cmd == F_GETPIPE_SZ) {
		if (fault_hit(&inj.getsz)) {
			if (inj.getsz_value > 0)
				return inj.getsz_value;
			errno = inj.getsz.err;
			return -1;
		}
		return __real_fcntl(fd, cmd);
	}
	if (parg != NULL)
		return __real_fcntl(fd, cmd, parg);
	switch (cmd) {
	case F_GETFD:
	case F_GETFL:
	case F_GETOWN:
	case F_GETSIG:
	case F_GETLEASE:
	case F_GET_SEALS:
		return __real_fcntl(fd, cmd);
	default:
		return __real_fcntl(fd, cmd, iarg);
	}
}

/* Open descriptors of this process (the directory's own fd excluded). */
static int
count_fds(void)
{
	DIR		*dir;
	struct dirent	*de;
	int		 n = 0;

	if ((dir = opendir("/proc/self/fd")) == NULL)
		fail_msg("opendir /proc/self/fd: %s", strerror(errno));
	while ((de = readdir(dir)) != NULL)
		if (de->d_name[0] != '.')
			n++;
	closedir(dir);
	return n - 1;
}

/* A closed descriptor: F_GETFD fails with EBADF. */
static void
assert_closed(int fd)
{
	errno = 0;
	assert_int_equal(__real_fcntl(fd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
}

/*
 * A good pool pipe: open, non-blocking and close-on-exec at both ends,
 * holding at least `size` bytes by the real F_GETPIPE_SZ, and rfd/wfd the
 * two ends of one empty pipe.
 */
static void
assert_good_pipe(const struct zp_pipe *p, size_t size)
{
	char	c = 'z';
	int	got;

	assert_true(p->rfd >= 0);
	assert_true(p->wfd >= 0);
	assert_true(p->rfd != p->wfd);
	got = __real_fcntl(p->wfd, F_GETPIPE_SZ);
	assert_true(got > 0);
	assert_true((size_t)got >= size);
	assert_true(__real_fcntl(p->rfd, F_GETFL) & O_NONBLOCK);
	assert_true(__real_fcntl(p->wfd, F_GETFL) & O_NONBLOCK);
	assert_true(__real_fcntl(p->rfd, F_GETFD) & FD_CLOEXEC);
	assert_true(__real_fcntl(p->wfd, F_GETFD) & FD_CLOEXEC);
	/* Empty: a non-blocking read says EAGAIN. */
	assert_int_equal(read(p->rfd, &c, 1), -1);
	assert_int_equal(errno, EAGAIN);
	/* One pipe: what goes in at wfd comes out at rfd. */
	assert_int_equal(write(p->wfd, "q", 1), 1);
	assert_int_equal(read(p->rfd, &c, 1), 1);
	assert_int_equal(c, 'q');
}

/* Per-test state: a pool, the pipes a test took, the fd count before. */
struct pool_state {
	struct zp_pipepool	pool;
	int			inited;
	struct zp_pipe		taken[16];
	int			fds_before;
	char			err[256];
};

static int
pool_setup(void **state)
{
	struct pool_state	*s;
	size_t			 i;

	fault_reset();
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return -1;
	for (i = 0; i < sizeof(s->taken) / sizeof(s->taken[0]); i++)
		s->taken[i].rfd = s->taken[i].wfd = -1;
	s->fds_before = count_fds();
	*state = s;
	return 0;
}

/* Close what the test still holds, free the pool, check for fd leaks. */
static int
pool_teardown(void **state)
{
	struct pool_state	*s = *state;
	size_t			 i;
	int			 leaked;

	fault_reset();
	for (i = 0; i < sizeof(s->taken) / sizeof(s->taken[0]); i++) {
		if (s->taken[i].rfd != -1)
			close(s->taken[i].rfd);
		if (s->taken[i].wfd != -1)
			close(s->taken[i].wfd);
	}
	if (s->inited)
		zp_pipepool_clear(&s->pool);
	leaked = count_fds() - s->fds_before;
	free(s);
	if (leaked != 0) {
		fprintf(stderr, "teardown: %d descriptors leaked\n", leaked);
		return -1;
	}
	return 0;
}

/* Init a pool in the state, failing the test if it does not work. */
static void
pool_init(struct pool_state *s, size_t size, size_t cap, size_t prepare)
{
	if (zp_pipepool_init(&s->pool, size, cap, prepare, s->err,
	    sizeof(s->err)) != 0)
		fail_msg("zp_pipepool_init: %s", s->err);
	s->inited = 1;
}

/*
 * init prepares `prepare` pipes, each of the size asked for (by the real
 * F_GETPIPE_SZ), non-blocking and close-on-exec, and nothing else.
 */
static void
test_init_prepares(void **state)
{
	struct pool_state	*s = *state;
	size_t			 i;

	pool_init(s, 256 * KIB, 8, 4);
	assert_int_equal(s->pool.size, 256 * KIB);
	assert_int_equal(s->pool.cap, 8);
	assert_int_equal(s->pool.nfree, 4);
	assert_int_equal(s->pool.nalive, 4);
	assert_int_equal(s->pool.created, 4);
	assert_int_equal(s->pool.killed, 0);
	assert_int_equal(s->pool.shortage, ZP_PIPE_OK);
	assert_int_equal(inj.pipe2.calls, 4);
	assert_int_equal(inj.pipe2_flags, O_NONBLOCK | O_CLOEXEC);
	for (i = 0; i < s->pool.nfree; i++) {
		assert_good_pipe(&s->pool.free[i], 256 * KIB);
		assert_int_equal(__real_fcntl(s->pool.free[i].wfd,
		    F_GETPIPE_SZ), 256 * KIB);
	}
	assert_int_equal(count_fds(), s->fds_before + 8);
}

/* Sizes that are not a power of two pages are rounded up, and accepted. */
static void
test_init_odd_size(void **state)
{
	struct pool_state	*s = *state;

	pool_init(s, 5000, 2, 1);
	assert_int_equal(s->pool.nfree, 1);
	assert_good_pipe(&s->pool.free[0], 5000);
	assert_int_equal(__real_fcntl(s->pool.free[0].wfd, F_GETPIPE_SZ),
	    8192);
}

/* prepare is clamped to cap, and 0 makes none (the pool fills on demand). */
static void
test_init_prepare_bounds(void **state)
{
	struct pool_state	*s = *state;

	pool_init(s, 64 * KIB, 3, 10);
	assert_int_equal(s->pool.nfree, 3);
	assert_int_equal(s->pool.nalive, 3);
	zp_pipepool_clear(&s->pool);
	s->inited = 0;
	assert_int_equal(count_fds(), s->fds_before);

	pool_init(s, 64 * KIB, 3, 0);
	assert_int_equal(s->pool.nfree, 0);
	assert_int_equal(s->pool.nalive, 0);
	assert_int_equal(count_fds(), s->fds_before);
}

/*
 * Empty pipes stay pooled while the pool holds no more than `keep`
 * (prepared) or twice the pipes in use; once a burst is over the rest are
 * closed on put, giving their descriptors back.
 */
static void
test_keep_after_burst(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p[8];
	int			 i;

	pool_init(s, 64 * KIB, 8, 2);
	for (i = 0; i < 8; i++)
		assert_int_equal(zp_pipepool_get(&s->pool, &p[i]), 0);
	assert_int_equal(s->pool.nalive, 8);
	/* 8 in use: the first puts are kept for a load like this one. */
	for (i = 0; i < 4; i++)
		zp_pipepool_put(&s->pool, &p[i]);
	assert_int_equal(s->pool.nfree, 4);
	assert_int_equal(s->pool.nalive, 8);
	/* The burst ends: down to the prepared 2. */
	for (i = 4; i < 8; i++)
		zp_pipepool_put(&s->pool, &p[i]);
	assert_int_equal(s->pool.nfree, 2);
	assert_int_equal(s->pool.nalive, 2);
	assert_int_equal(s->pool.killed, 0);
	zp_pipepool_clear(&s->pool);
	s->inited = 0;
	assert_int_equal(count_fds(), s->fds_before);
}

/*
 * The bound is exactly twice the pipes in use, put by put: with one pipe
 * kept (prepare 1) and 6 taken, giving them back one at a time leaves
 * 1, 2, 3, 4 on the stack (4 free for 2 in use is twice, not more), then
 * the fifth put (1 in use) closes down to 2, and the last to the 1 kept.
 * Only empty pipes are closed this way: killed stays 0.
 */
static void
test_keep_twice_in_use(void **state)
{
	static const size_t	 nfree[] = { 1, 2, 3, 4, 2, 1 };
	static const size_t	 nalive[] = { 6, 6, 6, 6, 3, 1 };
	struct pool_state	*s = *state;
	size_t			 i;

	/* In s->taken: a failed test's pipes are closed by the teardown. */
	pool_init(s, 64 * KIB, 8, 1);
	assert_int_equal(s->pool.keep, 1);
	for (i = 0; i < 6; i++)
		assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[i]), 0);
	assert_int_equal(s->pool.nalive, 6);
	for (i = 0; i < 6; i++) {
		zp_pipepool_put(&s->pool, &s->taken[i]);
		if (s->pool.nfree != nfree[i] || s->pool.nalive != nalive[i])
			fail_msg("put %zu: %zu free of %zu alive, expected %zu "
			    "of %zu", i + 1, s->pool.nfree, s->pool.nalive,
			    nfree[i], nalive[i]);
		assert_int_equal(count_fds(), s->fds_before +
		    2 * (int)nalive[i]);
	}
	assert_int_equal(s->pool.killed, 0);
	assert_int_equal(s->pool.created, 6);
}

/*
 * The pool others get, zp_pipepool_new(): the pipes prepared, read back
 * through the stats; a refusal is NULL with its shortage and a message;
 * zp_pipepool_free() closes them all and takes NULL.
 */
static void
test_new_free(void **state)
{
	struct pool_state		*s = *state;
	struct zp_pipepool		*pool;
	struct zp_pipepool_stats	 st;
	struct zp_pipe			 p;
	int				 shortage = -1;

	assert_non_null(pool = zp_pipepool_new(64 * KIB, 4, 2, &shortage,
	    s->err, sizeof(s->err)));
	assert_int_equal(shortage, ZP_PIPE_OK);
	zp_pipepool_stats(pool, &st);
	assert_int_equal(st.alive, 2);
	assert_int_equal(st.pooled, 2);
	assert_int_equal(st.created, 2);
	assert_int_equal(st.shortage, ZP_PIPE_OK);
	assert_int_equal(zp_pipepool_get(pool, &p), 0);
	zp_pipepool_stats(pool, &st);
	assert_int_equal(st.pooled, 1);
	zp_pipepool_put(pool, &p);
	zp_pipepool_free(pool);
	assert_int_equal(count_fds(), s->fds_before);

	s->err[0] = '\0';
	assert_null(zp_pipepool_new((size_t)INT_MAX + 1, 4, 1, &shortage,
	    s->err, sizeof(s->err)));
	assert_int_equal(shortage, ZP_PIPE_ERROR);
	assert_true(s->err[0] != '\0');
	zp_pipepool_free(NULL);
	assert_int_equal(count_fds(), s->fds_before);
}

/* A cap of 0 or a size beyond what fcntl takes is refused with a message. */
static void
test_init_bad_args(void **state)
{
	struct pool_state	*s = *state;

	s->err[0] = '\0';
	assert_int_equal(zp_pipepool_init(&s->pool, 64 * KIB, 0, 1, s->err,
	    sizeof(s->err)), -1);
	assert_true(s->err[0] != '\0');
	assert_null(strchr(s->err, '\n'));
	zp_pipepool_clear(&s->pool);	/* safe after a failed init */

	s->err[0] = '\0';
	assert_int_equal(zp_pipepool_init(&s->pool, (size_t)INT_MAX + 1, 4, 1,
	    s->err, sizeof(s->err)), -1);
	assert_true(s->err[0] != '\0');
	zp_pipepool_clear(&s->pool);
	assert_int_equal(inj.pipe2.calls, 0);
	assert_int_equal(count_fds(), s->fds_before);
}

/*
 * get hands out the stack's pipes last-in first-out without making new
 * ones; put of an empty pipe puts it back and resets the caller's copy.
 */
static void
test_get_put_lifo(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 a, b, c;

	pool_init(s, 64 * KIB, 4, 2);
	assert_int_equal(zp_pipepool_get(&s->pool, &a), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &b), 0);
	assert_int_equal(s->pool.nfree, 0);
	assert_int_equal(s->pool.nalive, 2);
	assert_int_equal(s->pool.created, 2);
	assert_int_equal(inj.pipe2.calls, 2);
	assert_true(a.rfd != b.rfd);
	assert_good_pipe(&a, 64 * KIB);
	assert_good_pipe(&b, 64 * KIB);

	c = a;
	zp_pipepool_put(&s->pool, &a);
	assert_int_equal(a.rfd, -1);
	assert_int_equal(a.wfd, -1);
	zp_pipepool_put(&s->pool, &b);
	assert_int_equal(s->pool.nfree, 2);
	assert_int_equal(s->pool.nalive, 2);

	/* b went back last, so it comes out first; then a. */
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_int_equal(s->taken[1].rfd, c.rfd);
	assert_int_equal(s->taken[1].wfd, c.wfd);
	assert_true(s->taken[0].rfd != c.rfd);
	assert_int_equal(s->pool.created, 2);
	assert_int_equal(inj.pipe2.calls, 2);
	assert_int_equal(s->pool.killed, 0);

	zp_pipepool_put(&s->pool, &s->taken[0]);
	zp_pipepool_put(&s->pool, &s->taken[1]);
}

/*
 * A pipe given back with bytes in it is closed, never reused: killed
 * counts it, nalive drops, both fds are really closed, *p is reset.
 */
static void
test_put_with_bytes_kills(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p, old;

	pool_init(s, 64 * KIB, 4, 2);
	assert_int_equal(zp_pipepool_get(&s->pool, &p), 0);
	old = p;
	assert_int_equal(write(p.wfd, "0123456789", 10), 10);
	p.data = 10;
	zp_pipepool_put(&s->pool, &p);
	assert_int_equal(p.rfd, -1);
	assert_int_equal(p.wfd, -1);
	assert_int_equal(s->pool.killed, 1);
	assert_int_equal(s->pool.nalive, 1);
	assert_int_equal(s->pool.nfree, 1);
	assert_closed(old.rfd);
	assert_closed(old.wfd);
	assert_int_equal(count_fds(), s->fds_before + 2);

	/* The next get is the other, empty pipe; then a new one is made. */
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_good_pipe(&s->taken[0], 64 * KIB);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_good_pipe(&s->taken[1], 64 * KIB);
	assert_int_equal(s->pool.created, 3);
	assert_int_equal(s->pool.nalive, 2);
}

/*
 * A pipe given back with bytes its count (data 0) does not show: the
 * pool asks the kernel (FIONREAD) rather than trust the count. A debug
 * build stops there (the sanitizer runs: drift is a bug to see); any
 * other kills the pipe, as for bytes it was told of, so they never
 * reach the next connection.
 */
static void
test_put_lying_count(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p, old;
#ifdef ZP_DEBUG
	pid_t			 pid;
	int			 status;
#endif

	pool_init(s, 64 * KIB, 4, 1);
	assert_int_equal(zp_pipepool_get(&s->pool, &p), 0);
	old = p;
	assert_int_equal(write(p.wfd, "0123456789", 10), 10);
	p.data = 0;
#ifdef ZP_DEBUG
	pid = fork();
	assert_true(pid != -1);
	if (pid == 0) {
		zp_pipepool_put(&s->pool, &p);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	/* The parent's copy goes back with its real count. */
	p.data = 10;
#endif
	zp_pipepool_put(&s->pool, &p);
	assert_int_equal(s->pool.killed, 1);
	assert_int_equal(s->pool.nfree, 0);
	assert_closed(old.rfd);
	assert_closed(old.wfd);
}

/* put of a pipe that is already -1 does nothing. */
static void
test_put_empty_pipe_noop(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };

	pool_init(s, 64 * KIB, 4, 1);
	zp_pipepool_put(&s->pool, &p);
	p.data = 123;
	zp_pipepool_put(&s->pool, &p);
	assert_int_equal(s->pool.nfree, 1);
	assert_int_equal(s->pool.nalive, 1);
	assert_int_equal(s->pool.killed, 0);
}

/* No more than cap pipes alive at once: ZP_PIPE_LIMIT, without pipe2. */
static void
test_cap_enforced(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };
	int			 calls;

	pool_init(s, 64 * KIB, 2, 1);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_int_equal(s->pool.nalive, 2);
	calls = inj.pipe2.calls;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_LIMIT);
	assert_int_equal(inj.pipe2.calls, calls);
	assert_int_equal(s->pool.nalive, 2);

	/* Killing one frees a place under the cap. */
	s->taken[1].data = 1;
	zp_pipepool_put(&s->pool, &s->taken[1]);
	assert_int_equal(s->pool.nalive, 1);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_good_pipe(&s->taken[1], 64 * KIB);
	assert_int_equal(s->pool.nalive, 2);
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_LIMIT);
}

/*
 * Out of descriptors (EMFILE/ENFILE from pipe2): get returns -1 with
 * ZP_PIPE_NOFD; another errno is ZP_PIPE_ERROR with last_errno kept.
 * Nothing is counted alive, and get works again once pipe2 does.
 */
static void
test_get_nofd(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };

	pool_init(s, 64 * KIB, 8, 1);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_int_equal(count_fds(), s->fds_before + 2);

	inj.pipe2.pass = inj.pipe2.calls;
	inj.pipe2.err = EMFILE;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(p.rfd, -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_NOFD);
	assert_int_equal(s->pool.last_errno, EMFILE);
	assert_int_equal(s->pool.nalive, 1);

	inj.pipe2.err = ENFILE;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_NOFD);
	assert_int_equal(s->pool.last_errno, ENFILE);

	inj.pipe2.err = EFAULT;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_ERROR);
	assert_int_equal(s->pool.last_errno, EFAULT);
	assert_int_equal(s->pool.nalive, 1);
	assert_int_equal(s->pool.created, 1);
	assert_int_equal(count_fds(), s->fds_before + 2);

	inj.pipe2.pass = -1;
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_good_pipe(&s->taken[1], 64 * KIB);
	assert_int_equal(s->pool.nalive, 2);
}

/*
 * Over the per-user pipe budget F_SETPIPE_SZ fails with EPERM: get says
 * ZP_PIPE_BUDGET and the pipe it made is closed (no fd leak). EBUSY is the
 * budget too; any other errno is ZP_PIPE_ERROR.
 */
static void
test_setsz_refused(void **state)
{
	static const struct {
		int	err, shortage;
	} cases[] = {
		{ EPERM, ZP_PIPE_BUDGET },
		{ EBUSY, ZP_PIPE_BUDGET },
		{ EINVAL, ZP_PIPE_ERROR },
	};
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };
	size_t			 i;
	int			 fds, made;

	pool_init(s, 256 * KIB, 8, 1);
	fds = count_fds();
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		inj.setsz.pass = inj.setsz.calls;
		inj.setsz.err = cases[i].err;
		made = inj.nmade;
		assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
		assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
		assert_int_equal(p.rfd, -1);
		assert_int_equal(s->pool.shortage, cases[i].shortage);
		assert_int_equal(s->pool.last_errno, cases[i].err);
		assert_int_equal(inj.nmade, made + 1);
		assert_closed(inj.made[made][0]);
		assert_closed(inj.made[made][1]);
		assert_int_equal(s->pool.nalive, 1);
		assert_int_equal(s->pool.created, 1);
		assert_int_equal(count_fds(), fds);
		zp_pipepool_put(&s->pool, &s->taken[0]);
	}
}

/*
 * A pipe that comes back smaller than asked (F_SETPIPE_SZ "worked" but
 * the kernel kept 2 pages, or F_GETPIPE_SZ says less) is closed and
 * counted as the budget; F_GETPIPE_SZ failing is the budget too.
 */
static void
test_shrunken_pipe(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };
	int			 fds, made;

	pool_init(s, 256 * KIB, 8, 1);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	fds = count_fds();

	/* F_SETPIPE_SZ says yes and does nothing: the real size is 64K. */
	inj.setsz.pass = inj.setsz.calls;
	inj.setsz_lie = 1;
	made = inj.nmade;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_BUDGET);
	assert_closed(inj.made[made][0]);
	assert_closed(inj.made[made][1]);
	assert_int_equal(count_fds(), fds);
	inj.setsz.pass = -1;
	inj.setsz_lie = 0;

	/* F_GETPIPE_SZ reports 8 KiB, as over fs.pipe-user-pages-soft. */
	inj.getsz.pass = inj.getsz.calls;
	inj.getsz_value = 8 * KIB;
	made = inj.nmade;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_BUDGET);
	assert_closed(inj.made[made][0]);
	assert_closed(inj.made[made][1]);
	assert_int_equal(count_fds(), fds);

	/* One byte short is still short. */
	inj.getsz_value = 256 * KIB - 1;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_BUDGET);
	assert_int_equal(count_fds(), fds);

	/* F_GETPIPE_SZ failing outright. */
	inj.getsz_value = 0;
	inj.getsz.err = EIO;
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_BUDGET);
	assert_int_equal(count_fds(), fds);

	assert_int_equal(s->pool.nalive, 1);
	assert_int_equal(s->pool.created, 1);
	assert_int_equal(p.rfd, -1);
	inj.getsz.pass = -1;
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_good_pipe(&s->taken[1], 256 * KIB);
}

/*
 * When not even one pipe can be made, init fails with err naming the
 * reason, keeps no memory and no descriptor, and free is still safe.
 */
static void
test_init_fails(void **state)
{
	struct pool_state	*s = *state;

	inj.pipe2.pass = 0;
	inj.pipe2.err = EMFILE;
	s->err[0] = '\0';
	assert_int_equal(zp_pipepool_init(&s->pool, 64 * KIB, 4, 2, s->err,
	    sizeof(s->err)), -1);
	assert_true(s->err[0] != '\0');
	assert_null(strchr(s->err, '\n'));
	assert_non_null(strstr(s->err, zp_pipe_shortage_str(ZP_PIPE_NOFD)));
	assert_null(s->pool.free);
	assert_int_equal(s->pool.nfree, 0);
	zp_pipepool_clear(&s->pool);
	assert_int_equal(count_fds(), s->fds_before);

	fault_reset();
	inj.setsz.pass = 0;
	inj.setsz.err = EPERM;
	s->err[0] = '\0';
	assert_int_equal(zp_pipepool_init(&s->pool, 1024 * KIB, 4, 2, s->err,
	    sizeof(s->err)), -1);
	assert_true(s->err[0] != '\0');
	assert_non_null(strstr(s->err,
	    zp_pipe_shortage_str(ZP_PIPE_BUDGET)));
	assert_non_null(strstr(s->err, "1048576"));
	assert_null(s->pool.free);
	assert_int_equal(inj.nmade, 1);
	assert_closed(inj.made[0][0]);
	assert_closed(inj.made[0][1]);
	zp_pipepool_clear(&s->pool);
	assert_int_equal(count_fds(), s->fds_before);

	/* Only a shrunken pipe to be had is no pool either. */
	fault_reset();
	inj.getsz.pass = 0;
	inj.getsz_value = 8 * KIB;
	assert_int_equal(zp_pipepool_init(&s->pool, 1024 * KIB, 4, 2, s->err,
	    sizeof(s->err)), -1);
	assert_non_null(strstr(s->err,
	    zp_pipe_shortage_str(ZP_PIPE_BUDGET)));
	zp_pipepool_clear(&s->pool);
	assert_int_equal(count_fds(), s->fds_before);
}

/* A pool that could prepare only some of its pipes is still a pool. */
static void
test_init_partial(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p = { -1, -1, 0 };

	inj.pipe2.pass = 2;
	inj.pipe2.err = EMFILE;
	pool_init(s, 64 * KIB, 8, 4);
	assert_int_equal(s->pool.nfree, 2);
	assert_int_equal(s->pool.nalive, 2);
	assert_int_equal(s->pool.created, 2);
	assert_int_equal(s->pool.shortage, ZP_PIPE_NOFD);
	assert_int_equal(count_fds(), s->fds_before + 4);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[1]), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &p), -1);
	assert_int_equal(s->pool.shortage, ZP_PIPE_NOFD);
}

/*
 * zp_pipepool_clear closes every pipe on the stack: after all pipes came
 * back (one of them killed), every descriptor is gone.
 */
static void
test_free_closes_all(void **state)
{
	struct pool_state	*s = *state;
	struct zp_pipe		 p[5];
	int			 i;

	pool_init(s, 64 * KIB, 8, 5);
	assert_int_equal(count_fds(), s->fds_before + 10);
	for (i = 0; i < 5; i++)
		assert_int_equal(zp_pipepool_get(&s->pool, &p[i]), 0);
	assert_int_equal(zp_pipepool_get(&s->pool, &s->taken[0]), 0);
	assert_int_equal(count_fds(), s->fds_before + 12);
	assert_int_equal(write(p[2].wfd, "x", 1), 1);
	p[2].data = 1;
	zp_pipepool_put(&s->pool, &p[2]);
	for (i = 0; i < 5; i++)
		zp_pipepool_put(&s->pool, &p[i]);
	zp_pipepool_put(&s->pool, &s->taken[0]);
	assert_int_equal(s->pool.nfree, 5);
	assert_int_equal(s->pool.nalive, 5);
	zp_pipepool_clear(&s->pool);
	s->inited = 0;
	assert_null(s->pool.free);
	assert_int_equal(s->pool.nfree, 0);
	assert_int_equal(s->pool.nalive, 0);
	for (i = 0; i < inj.nmade; i++) {
		assert_closed(inj.made[i][0]);
		assert_closed(inj.made[i][1]);
	}
	assert_int_equal(count_fds(), s->fds_before);
}

/* Every shortage has its own non-empty name; unknown values have one too. */
static void
test_shortage_str(void **state)
{
	const char	*names[5];
	int		 i, j;

	for (i = ZP_PIPE_OK; i <= ZP_PIPE_ERROR; i++) {
		names[i] = zp_pipe_shortage_str(i);
		assert_non_null(names[i]);
		assert_true(names[i][0] != '\0');
		assert_null(strchr(names[i], '\n'));
		for (j = 0; j < i; j++)
			assert_string_not_equal(names[i], names[j]);
	}
	assert_string_equal(zp_pipe_shortage_str(ZP_PIPE_OK), "none");
	assert_non_null(zp_pipe_shortage_str(-1));
	assert_non_null(zp_pipe_shortage_str(99));
	assert_true(zp_pipe_shortage_str(99)[0] != '\0');
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f)	cmocka_unit_test_setup_teardown(f, pool_setup, pool_teardown)
		T(test_init_prepares),
		T(test_init_odd_size),
		T(test_init_prepare_bounds),
		T(test_new_free),
		T(test_init_bad_args),
		T(test_keep_after_burst),
		T(test_keep_twice_in_use),
		T(test_get_put_lifo),
		T(test_put_with_bytes_kills),
		T(test_put_empty_pipe_noop),
		T(test_put_lying_count),
		T(test_cap_enforced),
		T(test_get_nofd),
		T(test_setsz_refused),
		T(test_shrunken_pipe),
		T(test_init_fails),
		T(test_init_partial),
		T(test_free_closes_all),
		T(test_shortage_str),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
