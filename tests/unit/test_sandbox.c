/*
 * test_sandbox.c - unit tests for sandbox.c: once the filter is on, a
 * call outside the allow-list fails with EPERM (the process goes on),
 * is logged once by name however often it is made, and the calls the
 * relay makes still work.
 *
 * A filter cannot be removed, so each test installs it in a forked
 * child, which reports through its exit status and a log file.
 *
 * A build without libseccomp has no filter to test: it runs only
 * test_unavailable and exits 77, so that automake reports the file as
 * SKIP, never as a PASS of tests that did not run.
 */

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <event2/event.h>

#include "lib/log.h"
#include "ops/sandbox.h"

/* Child exit statuses: which check failed. */
enum {
	CHILD_OK = 0,
	CHILD_INSTALL,
	CHILD_NOT_EPERM,
	CHILD_ALLOWED_BROKEN,
	CHILD_LOOP,
};

/* Count the lines of path that contain needle. */
static int
count_lines(const char *path, const char *needle)
{
	char	 line[ZP_LOG_LINE_MAX];
	FILE	*fp;
	int	 n = 0;

	if ((fp = fopen(path, "r")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), fp) != NULL)
		if (strstr(line, needle) != NULL)
			n++;
	fclose(fp);
	return n;
}

/* Run fn in a child logging to path; return its exit status. */
static int
in_child(int (*fn)(struct zp_log *), const char *path)
{
	struct zp_log	 lg;
	FILE		*fp;
	pid_t		 pid;
	int		 st;

	pid = fork();
	assert_true(pid != -1);
	if (pid == 0) {
		if ((fp = fopen(path, "w")) == NULL)
			_exit(100);
		setvbuf(fp, NULL, _IONBF, 0);
		zp_log_init(&lg, fp, ZP_LOG_NOTICE);
		_exit(fn(&lg));
	}
	assert_true(waitpid(pid, &st, 0) == pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/*
 * chdir(2) and an AF_PACKET socket are nothing the relay does: both fail
 * with EPERM, three times each, and zp_sandbox_report() logs each once;
 * getpid, a pipe and a write still work.
 */
static int
child_refused(struct zp_log *lg)
{
	struct zp_sandbox	*sb;
	char			 err[256];
	int			 i, fds[2];

	if ((sb = zp_sandbox_install(NULL, lg, 0, err, sizeof(err))) == NULL) {
		zp_log(lg, ZP_LOG_ERROR, "install: %s", err);
		return CHILD_INSTALL;
	}
	for (i = 0; i < 3; i++) {
		errno = 0;
		if (chdir("/") != -1 || errno != EPERM)
			return CHILD_NOT_EPERM;
		errno = 0;
		if (socket(AF_PACKET, SOCK_RAW, 0) != -1 || errno != EPERM)
			return CHILD_NOT_EPERM;
	}
	if (getpid() <= 0 || pipe2(fds, O_CLOEXEC) == -1 ||
	    write(fds[1], "x", 1) != 1 || close(fds[0]) == -1 ||
	    close(fds[1]) == -1)
		return CHILD_ALLOWED_BROKEN;
	zp_sandbox_report(sb);
	zp_sandbox_report(sb);		/* nothing new: nothing more */
	zp_sandbox_free(sb);
	return CHILD_OK;
}

static void
test_refused_eperm_logged_once(void **state)
{
	char	path[] = "/tmp/zp-test-sandbox.XXXXXX";
	int	fd;

	assert_true((fd = mkstemp(path)) != -1);
	close(fd);
	assert_int_equal(in_child(child_refused, path), CHILD_OK);
	assert_int_equal(count_lines(path, "sandbox: system call chdir "), 1);
	assert_int_equal(count_lines(path, "sandbox: system call socket "),
	    1);
	assert_int_equal(count_lines(path, "refused with EPERM"), 2);
	unlink(path);
}

/*
 * With an event base, the SIGSYS handler wakes the loop, which logs the
 * refused call without being asked: the daemon's path.
 */
static int
child_loop(struct zp_log *lg)
{
	struct event_base	*base;
	struct zp_sandbox	*sb;
	char			 err[256];
	int			 i;

	if ((base = event_base_new()) == NULL)
		return CHILD_LOOP;
	if ((sb = zp_sandbox_install(base, lg, 0, err, sizeof(err))) == NULL)
		return CHILD_INSTALL;
	if (chdir("/") != -1 || errno != EPERM)
		return CHILD_NOT_EPERM;
	for (i = 0; i < 4; i++)
		if (event_base_loop(base, EVLOOP_NONBLOCK) == -1)
			return CHILD_LOOP;
	zp_sandbox_free(sb);
	event_base_free(base);
	return CHILD_OK;
}

static void
test_refused_logged_from_loop(void **state)
{
	char	path[] = "/tmp/zp-test-sandbox.XXXXXX";
	int	fd;

	assert_true((fd = mkstemp(path)) != -1);
	close(fd);
	assert_int_equal(in_child(child_loop, path), CHILD_OK);
	assert_int_equal(count_lines(path, "sandbox: system call chdir "), 1);
	unlink(path);
}

/* Built without libseccomp, installing says so and installs nothing. */
static void
test_unavailable(void **state)
{
	char	err[256] = "";

	assert_null(zp_sandbox_install(NULL, NULL, 0, err, sizeof(err)));
	assert_non_null(strstr(err, "libseccomp"));
}

/* The filter's tests where it is built; else test_unavailable, then 77. */
int
main(void)
{
	const struct CMUnitTest filter[] = {
		cmocka_unit_test(test_refused_eperm_logged_once),
		cmocka_unit_test(test_refused_logged_from_loop),
	};
	const struct CMUnitTest none[] = {
		cmocka_unit_test(test_unavailable),
	};
	int	failed;

	if (zp_sandbox_available())
		return cmocka_run_group_tests(filter, NULL, NULL);
	if ((failed = cmocka_run_group_tests(none, NULL, NULL)) != 0)
		return failed;
	fprintf(stderr, "SKIP: built without libseccomp: no filter to test\n");
	return 77;
}
