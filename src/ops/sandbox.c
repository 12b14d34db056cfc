/*
 * sandbox.c - the seccomp allow-list of the running relay.
 *
 * The list holds what the loop does after start-up: epoll, accept,
 * connect (upstreams, health checks; bind for --source), splice and pipes, send/recv,
 * socket options and queue ioctls, the evdns UDP exchange, syslog's
 * reconnect, the log file's reopen at SIGHUP, --spool's files, malloc
 * and the signals libevent catches. It was taken from strace -f of zproxy under the
 * integration suite, not guessed; tests/integration/lib.sh fails a test
 * whose zproxy logged a refused call, so a missing one shows up there.
 *
 * A refused call must both fail with EPERM and be logged once.
 * SCMP_ACT_ERRNO(EPERM) alone cannot say which call it was, so the
 * default action is SCMP_ACT_TRAP: the kernel skips the call and raises
 * SIGSYS, whose handler puts -EPERM in the return register (the call
 * seems to fail with EPERM), notes the call's number and wakes the loop
 * through a pipe; the loop logs it like any other line. On an
 * architecture whose return register this file does not know, the
 * default is SCMP_ACT_ERRNO(EPERM), unlogged.
 */

#ifdef HAVE_LIBSECCOMP
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#endif
#include <stdio.h>
#include <event2/event.h>

#include "lib/log.h"
#include "ops/sandbox.h"

#ifndef HAVE_LIBSECCOMP

int
zp_sandbox_available(void)
{
	return 0;
}

struct zp_sandbox *
zp_sandbox_install(struct event_base *base, struct zp_log *lg,
    unsigned flags, char *err, size_t errlen)
{
	snprintf(err, errlen, "built without libseccomp");
	return NULL;
}

void
zp_sandbox_report(struct zp_sandbox *sb)
{
}

void
zp_sandbox_free(struct zp_sandbox *sb)
{
}

#else /* HAVE_LIBSECCOMP */

#if defined(__x86_64__)
#define ZP_SB_TRAP	1
#define ZP_SB_SETRET(uc, v)	((uc)->uc_mcontext.gregs[REG_RAX] = (v))
#elif defined(__aarch64__)
#define ZP_SB_TRAP	1
#define ZP_SB_SETRET(uc, v)	((uc)->uc_mcontext.regs[0] = (v))
#else
#define ZP_SB_TRAP	0
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(ZP_SANITIZERS)
#define ZP_SB_SANITIZERS	1
#else
#define ZP_SB_SANITIZERS	0
#endif

/* Refused calls kept for the loop to log; more are logged as "others". */
#define ZP_SB_RING	64
/* System call numbers tracked for "once" (x86_64 and aarch64 are < 512). */
#define ZP_SB_MAXNR	1024

struct zp_sandbox {
	struct zp_log	*log;
	struct event	*ev;
	int		 rfd, wfd;
	size_t		 reported;	/* entries of the ring logged */
};

/*
 * What the SIGSYS handler shares with the loop. A signal handler gets no
 * argument, so this is global; the handler only writes it, the loop only
 * reads it, and SIGSYS is blocked while the handler runs.
 */
static unsigned char		sb_seen[ZP_SB_MAXNR / 8];
static int			sb_ring[ZP_SB_RING];
static volatile sig_atomic_t	sb_nrefused;	/* distinct calls refused */
static volatile sig_atomic_t	sb_wakefd = -1;

/*
 * ZP_SANDBOX_RING (--io-uring, experimental): the ring's own calls (every
 * ring is made before the filter goes on: no io_uring_setup). What a
 * ring does is not seccomp's to see: its recv and send (and any other
 * opcode a bug or an exploit queued) run in the kernel without passing
 * the filter. The relay queues recv, send, cancel and no-ops only, and
 * each ring refuses every other opcode (IORING_REGISTER_RESTRICTIONS,
 * relay/ring.c): the ring's own allow-list.
 */
static const char *const sb_ring_calls[] = {
	"io_uring_enter", "io_uring_register",
};

/* Allowed with any arguments, in every build. */
static const char *const sb_calls[] = {
	/* the loop */
	"epoll_wait", "epoll_pwait", "epoll_ctl",
	"read", "write", "readv", "writev", "close",
	/* clients and upstreams */
	"accept4", "accept", "connect", "shutdown",
	/* --source: the upstream socket's address; -u original: is a
	 * destination this host's? (origdst.c) */
	"bind",
	"getsockopt", "setsockopt", "getsockname", "getpeername",
	"recvfrom", "recvmsg", "sendto", "sendmsg",
	/* -l udp@: datagrams in batches */
	"recvmmsg", "sendmmsg",
	/* the splice path (tee: a framed lf pipe's last byte) */
	"splice", "tee", "pipe2", "fcntl",
	/* time, counters */
	"clock_gettime", "gettimeofday", "time", "nanosleep",
	"clock_nanosleep", "getrusage", "getpid", "gettid", "getrandom",
	/* the log file, reopened at SIGHUP (stdio stats it) */
	"openat", "newfstatat", "fstat", "lseek",
	/* --control: its socket's path, removed at exit while still ours */
	"unlink", "unlinkat",
	/* --spool: its files made, synced, renamed, listed, sent, and the
	 * room left on their file system (its I/O thread, started before
	 * the filter: no clone here) */
	"fdatasync", "fsync", "rename", "renameat", "renameat2",
	"getdents64", "pread64", "pwrite64", "sendfile", "fstatfs", "statfs",
	"flock",
	/* malloc */
	"brk", "munmap", "mremap", "madvise",
	/* signals: libevent's handlers, ours, abort() */
	"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "tgkill",
	"restart_syscall",
	/* --threads: locks, and a worker's end (its stack unmapped) */
	"futex", "sched_yield", "set_robust_list", "rseq",
	/* the end */
	"exit", "exit_group",
};

/*
 * What the sanitizer runtimes need on top, at run time and at exit:
 * LeakSanitizer stops the world from a tracer it clones, which ptraces
 * every thread and reads /proc/self; ASan maps shadow memory, reports
 * through its own writes. Sanitizer builds only.
 */
static const char *const sb_sanitizer_calls[] = {
	"clone", "clone3", "ptrace", "wait4", "waitid", "prctl",
	"sched_yield", "getdents", "getdents64", "readlink", "readlinkat",
	"sigaltstack", "futex", "set_robust_list", "rseq", "getppid",
	"sched_getaffinity", "prlimit64", "getrlimit", "uname", "pread64",
	"kill", "mprotect", "mmap", "open", "stat", "lstat", "access",
	"faccessat", "statx", "dup", "dup2", "dup3", "pipe",
	"process_vm_readv", "setrlimit", "getuid", "geteuid",
};

/* SIGSYS from a refused call: make it fail with EPERM, note it. */
static void
sb_sigsys(int sig, siginfo_t *si, void *ucv)
{
	ucontext_t	*uc = ucv;
	ssize_t		 w = 0;
	int		 saved = errno, nr = si->si_syscall, n;
	char		 c = 'x';

#if ZP_SB_TRAP
	ZP_SB_SETRET(uc, -EPERM);
#else
	(void)uc;
#endif
	if (nr >= 0 && nr < ZP_SB_MAXNR) {
		if (sb_seen[nr / 8] & (1 << (nr % 8)))
			goto out;
		sb_seen[nr / 8] |= 1 << (nr % 8);
	}
	n = sb_nrefused;
	if (n < ZP_SB_RING)
		sb_ring[n] = nr;
	sb_nrefused = n + 1;
	/* A full pipe already wakes the loop: a lost byte loses nothing. */
	if (sb_wakefd != -1)
		w = write(sb_wakefd, &c, 1);
	(void)w;
out:
	errno = saved;
}

/* Log the calls refused since the last report. */
void
zp_sandbox_report(struct zp_sandbox *sb)
{
	char	*name;
	size_t	 n = (size_t)sb_nrefused;
	int	 nr;

	for (; sb->reported < n; sb->reported++) {
		if (sb->reported >= ZP_SB_RING) {
			zp_log(sb->log, ZP_LOG_ERROR, "sandbox: %zu more "
			    "system calls refused", n - sb->reported);
			sb->reported = n;
			break;
		}
		nr = sb_ring[sb->reported];
		name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_NATIVE, nr);
		zp_log(sb->log, ZP_LOG_ERROR, "sandbox: system call %s (%d) "
		    "refused with EPERM: it is missing from the allow-list "
		    "(a bug: please report it; --no-sandbox works around it)",
		    name != NULL ? name : "?", nr);
		free(name);
	}
}

/* The loop's side of the wake pipe. */
static void
sb_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	char	buf[64];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
	zp_sandbox_report(arg);
}

/* Allow name with any arguments; a name this kernel lacks is skipped. */
static int
sb_allow(scmp_filter_ctx f, const char *name)
{
	int	nr = seccomp_syscall_resolve_name(name);

	if (nr == __NR_SCMP_ERROR || nr < 0)
		return 0;
	return seccomp_rule_add(f, SCMP_ACT_ALLOW, nr, 0);
}

/*
 * The calls allowed with some arguments only: sockets of the families
 * zproxy speaks (no AF_PACKET, no AF_NETLINK), Unix socket pairs, the
 * queue ioctls, and no executable memory.
 */
static int
sb_allow_args(scmp_filter_ctx f)
{
	static const int	families[] = { AF_INET, AF_INET6, AF_UNIX };
	static const unsigned long ioctls[] = { SIOCINQ, SIOCOUTQ, FIONBIO,
				    FIOCLEX };
	size_t			i;
	int			rc = 0;

	for (i = 0; rc == 0 && i < sizeof(families) / sizeof(families[0]);
	    i++)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
		    SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i], 0));
	for (i = 0; rc == 0 && i < sizeof(ioctls) / sizeof(ioctls[0]); i++)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
		    SCMP_A1(SCMP_CMP_EQ, (scmp_datum_t)ioctls[i], 0));
	/* -l udp@: a source's datagrams reach its pair through one. */
	if (rc == 0)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(socketpair),
		    1, SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)AF_UNIX, 0));
	if (rc == 0 && !ZP_SB_SANITIZERS)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(mmap), 1,
		    SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	if (rc == 0 && !ZP_SB_SANITIZERS)
		rc = seccomp_rule_add(f, SCMP_ACT_ALLOW, SCMP_SYS(mprotect), 1,
		    SCMP_A2(SCMP_CMP_MASKED_EQ, PROT_EXEC, 0));
	return rc;
}

int
zp_sandbox_available(void)
{
	return 1;
}

/* Install the filter and the watch. */
struct zp_sandbox *
zp_sandbox_install(struct event_base *base, struct zp_log *lg,
    unsigned flags, char *err, size_t errlen)
{
	struct zp_sandbox	*sb;
	struct sigaction	 sa;
	scmp_filter_ctx		 f = NULL;
	size_t			 i;
	int			 fds[2], rc;

	if ((sb = calloc(1, sizeof(*sb))) == NULL) {
		snprintf(err, errlen, "sandbox: %s", strerror(errno));
		return NULL;
	}
	sb->log = lg;
	sb->rfd = sb->wfd = -1;
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
		snprintf(err, errlen, "sandbox: pipe2: %s", strerror(errno));
		goto fail;
	}
	sb->rfd = fds[0];
	sb->wfd = fds[1];
	if (base != NULL && ((sb->ev = event_new(base, sb->rfd,
	    EV_READ | EV_PERSIST, sb_wake_cb, sb)) == NULL ||
	    event_add(sb->ev, NULL) == -1)) {
		snprintf(err, errlen, "sandbox: cannot watch the wake pipe");
		goto fail;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = sb_sigsys;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (ZP_SB_TRAP && sigaction(SIGSYS, &sa, NULL) == -1) {
		snprintf(err, errlen, "sandbox: sigaction(SIGSYS): %s",
		    strerror(errno));
		goto fail;
	}
	sb_wakefd = sb->wfd;

	if ((f = seccomp_init(ZP_SB_TRAP ? SCMP_ACT_TRAP :
	    SCMP_ACT_ERRNO(EPERM))) == NULL) {
		snprintf(err, errlen, "sandbox: seccomp_init failed");
		goto fail;
	}
	rc = 0;
	for (i = 0; rc == 0 && i < sizeof(sb_calls) / sizeof(sb_calls[0]);
	    i++)
		rc = sb_allow(f, sb_calls[i]);
	for (i = 0; rc == 0 && ZP_SB_SANITIZERS && i <
	    sizeof(sb_sanitizer_calls) / sizeof(sb_sanitizer_calls[0]); i++)
		rc = sb_allow(f, sb_sanitizer_calls[i]);
	for (i = 0; rc == 0 && (flags & ZP_SANDBOX_RING) && i <
	    sizeof(sb_ring_calls) / sizeof(sb_ring_calls[0]); i++)
		rc = sb_allow(f, sb_ring_calls[i]);
	if (rc == 0)
		rc = sb_allow_args(f);
	/*
	 * --threads: the workers run already; TSYNC puts the filter on
	 * every thread of the process, or fails.
	 */
	if (rc == 0)
		rc = seccomp_attr_set(f, SCMP_FLTATR_CTL_TSYNC, 1);
	/* libseccomp sets PR_SET_NO_NEW_PRIVS itself (SCMP_FLTATR_CTL_NNP). */
	if (rc == 0)
		rc = seccomp_load(f);
	if (rc != 0) {
		snprintf(err, errlen, "sandbox: cannot install the seccomp "
		    "filter: %s", strerror(-rc));
		goto fail;
	}
	seccomp_release(f);
	return sb;
fail:
	if (f != NULL)
		seccomp_release(f);
	sb_wakefd = -1;
	zp_sandbox_free(sb);
	return NULL;
}

/* Free the watch; the filter stays with the process. */
void
zp_sandbox_free(struct zp_sandbox *sb)
{
	if (sb == NULL)
		return;
	if (sb->ev != NULL)
		event_free(sb->ev);
	/* A refused call after this has nowhere to say so: still EPERM. */
	sb_wakefd = -1;
	if (sb->rfd != -1)
		close(sb->rfd);
	if (sb->wfd != -1)
		close(sb->wfd);
	free(sb);
}

#endif /* HAVE_LIBSECCOMP */
