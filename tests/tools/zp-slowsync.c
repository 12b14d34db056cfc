/*
 * zp-slowsync.c - an LD_PRELOAD shim for the integration tests: a slow
 * disk. fdatasync(2) takes ZP_SLOWSYNC_MS milliseconds (2000 unless
 * set) before it syncs, as on a disk busy elsewhere, a full journal or
 * NFS, until the file ZP_SLOWSYNC_OFF names exists. When ZP_SLOWSYNC_LOG
 * names a file, each call that was slowed appends "begin TID" and "end
 * TID" (the calling thread's id), so that a test can wait for syncs to
 * have happened, and see which thread made them, rather than sleep.
 *
 * Everything it needs after start-up is in zproxy's sandbox list:
 * nanosleep, newfstatat, write, gettid. The log is opened at load, while
 * zproxy may still open files as who it started as.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/stat.h>
#include <sys/syscall.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int	 slow_log = -1;
static long	 slow_ms = 2000;
static const char *slow_off;
static int	(*real_fdatasync)(int);

__attribute__((constructor)) static void
slow_init(void)
{
	const char	*s, *p;

	if ((s = getenv("ZP_SLOWSYNC_MS")) != NULL)
		slow_ms = atol(s);
	slow_off = getenv("ZP_SLOWSYNC_OFF");
	if ((p = getenv("ZP_SLOWSYNC_LOG")) != NULL)
		slow_log = open(p, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
		    0644);
	real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

/* One line "WHAT TID" in the log, in one write(2). */
static void
slow_note(const char *what)
{
	char	b[64];
	int	n;

	if (slow_log == -1)
		return;
	n = snprintf(b, sizeof(b), "%s %ld\n", what, (long)syscall(SYS_gettid));
	if (n > 0)
		(void)write(slow_log, b, (size_t)n);
}

int
fdatasync(int fd)
{
	struct timespec	ts = { slow_ms / 1000, (slow_ms % 1000) * 1000000L };
	struct stat	st;
	int		rc, slow;

	slow = slow_off == NULL || stat(slow_off, &st) == -1;
	if (slow) {
		slow_note("begin");
		while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
			;
	}
	rc = real_fdatasync != NULL ? real_fdatasync(fd) : 0;
	if (slow)
		slow_note("end");
	return rc;
}
