/*
 * ctl_client.c - zproxy ctl: one command to a running zproxy over its
 * --control socket (ops/control.h says how they speak), its answer
 * printed, the exit status 0 when it was done and 1 when not.
 */

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl_client.h"
#include "ops/control.h"
#include "ops/ctlcmd.h"

/* How long zproxy ctl waits for each message of an answer. */
#define CTL_WAIT_SEC	30

static void
ctl_usage(FILE *f)
{
	fprintf(f, "usage: zproxy ctl [--control PATH] [--json] COMMAND...\n"
	    "  PATH: the running zproxy's --control socket (default %s)\n"
	    "commands:\n%s", ZP_CTL_DEFAULT_PATH, zp_ctl_usage);
}

/* Connect to path; -1 with a message on stderr. */
static int
ctl_connect(const char *path)
{
	struct sockaddr_un	sun;
	int			fd;

	if ((fd = zp_control_socket(path, &sun, CTL_WAIT_SEC)) == -1) {
		if (errno == ENAMETOOLONG)
			fprintf(stderr, "zproxy ctl: --control %s: path too "
			    "long\n", path);
		else
			fprintf(stderr, "zproxy ctl: socket: %s\n",
			    strerror(errno));
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		fprintf(stderr, "zproxy ctl: cannot connect to %s: %s%s\n",
		    path, strerror(errno), errno == ENOENT ||
		    errno == ECONNREFUSED ? " (is zproxy running with "
		    "--control there?)" : errno == EACCES ? " (the socket is "
		    "its user's, mode 0600)" : "");
		close(fd);
		return -1;
	}
	return fd;
}

/* Print the answer; its exit status. */
static int
ctl_answer(int fd, const char *path)
{
	char	msg[ZP_CTL_MSG_MAX + ZP_CTL_LINE_MAX + 2];
	ssize_t	r;

	for (;;) {
		do {
			r = recv(fd, msg, sizeof(msg) - 1, 0);
		} while (r == -1 && errno == EINTR);
		if (r <= 0) {
			fprintf(stderr, "zproxy ctl: %s: %s\n", path, r == 0 ?
			    "zproxy hung up before it answered" :
			    errno == EAGAIN ? "no answer in time" :
			    strerror(errno));
			return 1;
		}
		msg[r] = '\0';
		switch (msg[0]) {
		case ZP_CTL_OUTPUT:
			fwrite(msg + 1, 1, (size_t)r - 1, stdout);
			continue;
		case ZP_CTL_OK:
			if (r > 1)
				printf("%s\n", msg + 1);
			return fflush(stdout) == 0 ? 0 : 1;
		case ZP_CTL_FAILED:
			fflush(stdout);
			fprintf(stderr, "zproxy ctl: %s\n", msg + 1);
			return 1;
		default:
			fprintf(stderr, "zproxy ctl: %s: not a zproxy ctl "
			    "answer\n", path);
			return 1;
		}
	}
}

int
zp_ctl_main(int argc, char **argv)
{
	struct zp_ctl_cmd	 cmd;
	const char		*path = ZP_CTL_DEFAULT_PATH;
	char			 line[ZP_CTL_LINE_MAX + 1], msg[sizeof(line) + 16];
	char			 err[200];
	size_t			 off = 0, l;
	int			 i, fd, rc, n;

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 ||
		    strcmp(argv[i], "--help") == 0) {
			ctl_usage(stdout);
			return 0;
		}
		if (strcmp(argv[i], "--control") == 0) {
			if (++i == argc) {
				fprintf(stderr, "zproxy ctl: --control needs "
				    "a path\n");
				return 1;
			}
			path = argv[i];
			continue;
		}
		if (strncmp(argv[i], "--control=", 10) == 0) {
			path = argv[i] + 10;
			continue;
		}
		l = strlen(argv[i]);
		if (l == 0 || strpbrk(argv[i], " \t\n") != NULL) {
			fprintf(stderr, "zproxy ctl: \"%.40s\": a word may not "
			    "be empty or hold blanks\n", argv[i]);
			return 1;
		}
		if (off + l + 1 >= sizeof(line)) {
			fprintf(stderr, "zproxy ctl: a command longer than %d "
			    "bytes\n", ZP_CTL_LINE_MAX);
			return 1;
		}
		memcpy(line + off, argv[i], l);
		off += l;
		line[off++] = ' ';
	}
	line[off > 0 ? off - 1 : 0] = '\0';
	if (off == 0) {
		ctl_usage(stderr);
		return 1;
	}
	/* Said here, before the daemon is bothered. */
	if (zp_ctl_parse(line, &cmd, err, sizeof(err)) == -1) {
		fprintf(stderr, "zproxy ctl: %s\n", err);
		return 1;
	}
	if ((fd = ctl_connect(path)) == -1)
		return 1;
	n = snprintf(msg, sizeof(msg), "%s%s\n", ZP_CTL_HELLO, line);
	if (send(fd, msg, (size_t)n, MSG_NOSIGNAL) != n) {
		fprintf(stderr, "zproxy ctl: %s: %s\n", path, strerror(errno));
		close(fd);
		return 1;
	}
	rc = ctl_answer(fd, path);
	close(fd);
	return rc;
}
