/*
 * control.h - restarts that refuse no client. A running zproxy with
 * --control PATH listens on a Unix socket there (mode 0600, its user's);
 * a new zproxy started with --takeover PATH asks it for its listening
 * sockets, gets them (SCM_RIGHTS), starts accepting on them, and says
 * so; the old one then stops accepting without closing the sockets
 * (the new process holds them), drains its pairs and exits. Clients that
 * wait in the backlog meanwhile are accepted by one or the other.
 *
 * The exchange, SOCK_SEQPACKET (one message each, in order):
 *   new -> old   "zproxy-takeover 1\n"
 *   old -> new   an offer: "zproxy-takeover 1\n", "pid N\n",
 *                "watchdog USEC\n", then one line per descriptor passed,
 *                in their order: "listen LABEL\n" or "stats LABEL\n"
 *                (LABEL: the -l or --stats as the old one was given it)
 *   new -> old   "done\n" once it accepts
 * Anything else, or the new process gone, or ZP_CONTROL_TIMEOUT_SEC
 * without an answer, and the old one goes on as if nothing happened.
 *
 * zproxy ctl speaks on the same socket, many clients at once (at most
 * ZP_CTL_CLIENTS_MAX), each a command at a time:
 *   ctl -> zproxy  ZP_CTL_HELLO and one line of words ("show upstreams"),
 *                  at most ZP_CTL_LINE_MAX bytes
 *   zproxy -> ctl  the answer: messages of output, each ZP_CTL_OUTPUT
 *                  and text to print; then one ZP_CTL_OK or ZP_CTL_FAILED
 *                  and a line that says what was done, or why not
 * then the next command. A client that sends nothing, or reads nothing
 * of its answer, for ZP_CTL_IDLE_SEC is closed; so is one whose command
 * is too long (after a ZP_CTL_FAILED that says so).
 */
#ifndef ZP_CONTROL_H
#define ZP_CONTROL_H

#include <stddef.h>
#include <sys/types.h>

#include "ops/inherit.h"

struct event_base;
struct zp_log;
struct zp_control;

#define ZP_CONTROL_TIMEOUT_SEC	30
#define ZP_CONTROL_REQUEST	"zproxy-takeover 1\n"
#define ZP_CONTROL_DONE		"done\n"
#define ZP_OFFER_MAX		8192	/* bytes of an offer's text */

#define ZP_CTL_HELLO		"zproxy-ctl 1\n"
#define ZP_CTL_LINE_MAX		1024
#define ZP_CTL_LINE_MAX_STR	"1024"
#define ZP_CTL_MSG_MAX		16384	/* bytes of output a message */
#define ZP_CTL_IDLE_SEC		10
#define ZP_CTL_CLIENTS_MAX	64
#define ZP_CTL_OUTPUT		'o'
#define ZP_CTL_OK		'0'
#define ZP_CTL_FAILED		'1'

/* A ctl command under way; the daemon's until zp_ctl_done(). */
struct zp_ctl_req;

/* What the old side asks of the daemon, in the order it happens. */
struct zp_control_ops {
	/* A takeover starts (RELOADING=1); pid is the new process's. */
	void	(*begin)(void *arg, long pid);
	/* The sockets to hand over, labelled; and the watchdog interval. */
	void	(*offer)(void *arg, struct zp_inherit *,
		    unsigned long long *watchdog_usec);
	/* It failed: go on serving (READY=1 again). */
	void	(*abort)(void *arg, long pid, const char *why);
	/* The new process accepts: stop accepting and drain. May free the
	 * control (it is the last thing the control does). */
	void	(*done)(void *arg, long pid);
	/*
	 * A ctl command (line: its words, NUL-terminated, the hello gone).
	 * The daemon answers with zp_ctl_output() and ends with
	 * zp_ctl_done(), now or later: the request is its until then,
	 * also when the client hung up meanwhile or the control was freed.
	 */
	void	(*command)(void *arg, struct zp_ctl_req *, const char *line);
};

/* Add text to a command's answer (printed by zproxy ctl as it is). */
void	zp_ctl_output(struct zp_ctl_req *, const char *, size_t);
void	zp_ctl_printf(struct zp_ctl_req *, const char *, ...)
	    __attribute__((format(printf, 2, 3)));

/*
 * End a command: ok or not, with one line (fmt may be NULL: none) that
 * zproxy ctl prints (on stderr, failed); frees the request.
 */
void	zp_ctl_done(struct zp_ctl_req *, int ok, const char *fmt, ...)
	    __attribute__((format(printf, 3, 4)));

/*
 * Listen on path: made at PATH.tmp.PID (mode 0600, chown'd to uid:gid
 * unless uid is (uid_t)-1) and renamed over PATH, so that PATH always
 * names a live socket, also while a takeover replaces it. Returns the
 * control, or NULL with err filled and errno kept.
 */
struct zp_control *zp_control_new(struct event_base *, struct zp_log *,
	    const char *path, uid_t, gid_t, const struct zp_control_ops *,
	    void *arg, char *, size_t);

/*
 * Stop listening and free; PATH is unlinked when it still names this
 * control's socket (not when a newer zproxy's replaced it). Safe on NULL.
 */
void	zp_control_free(struct zp_control *);

/*
 * A client's socket for the control socket at path (a takeover, zproxy
 * ctl): SOCK_SEQPACKET, its sends and receives bounded by timeout_sec,
 * not connected; *sun is path's address to connect to. Returns it, or
 * -1 with errno (ENAMETOOLONG: path does not fit).
 */
struct sockaddr_un;
int	zp_control_socket(const char *path, struct sockaddr_un *,
	    int timeout_sec);

/* The new side: what the old zproxy offered. */
struct zp_offer {
	struct zp_inherit	set;		/* the sockets and their labels */
	long			pid;		/* the old process */
	unsigned long long	watchdog_usec;	/* its $WATCHDOG_USEC, or 0 */
	int			conn;		/* to the old one; -1 when done */
};

/*
 * Connect to path, ask, and receive the offer (blocking, at start-up,
 * at most ZP_CONTROL_TIMEOUT_SEC). Returns 0; or ZP_EX_UNAVAILABLE with
 * err filled (nothing answers at path, the answer was malformed).
 */
int	zp_takeover_fetch(const char *path, struct zp_offer *, char *,
	    size_t);

/* Tell the old one that this one accepts now, and hang up. */
int	zp_takeover_done(struct zp_offer *, char *, size_t);

/* Hang up (if not done) and close every offered socket not taken. */
void	zp_offer_free(struct zp_offer *);

/*
 * Parse an offer's text (len bytes, not NUL-terminated) that came with
 * nfds descriptors fds into o->set, o->pid and o->watchdog_usec. Returns
 * 0, or -1 with err filled. Exposed for the tests and the fuzzer.
 */
int	zp_offer_parse(const char *, size_t, const int *fds, size_t nfds,
	    struct zp_offer *, char *, size_t);

#endif
