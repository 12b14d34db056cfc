/*
 * notify.h - tell a service manager how zproxy is doing, by the
 * sd_notify(3) protocol: one datagram of KEY=VALUE lines to the Unix
 * socket named by $NOTIFY_SOCKET (a path, or '@' for the abstract
 * namespace). systemd documents the protocol as stable; speaking it
 * directly costs no library in a process that runs under a seccomp
 * allow-list, and does what libsystemd's sd_notify() does.
 *
 *   READY=1    once every listener (and --stats) is up
 *   STATUS=    the live counters, with READY=1 and every
 *              ZP_NOTIFY_STATUS_SEC seconds
 *   STOPPING=1 when the drain begins
 *   RELOADING=1 when a takeover begins (the old process), then
 *   MAINPID=, READY=1 from the new one, which becomes the service's main
 *              process (the unit needs NotifyAccess=all); READY=1 again
 *              from the old one if the takeover failed
 *   WATCHDOG=1 every half of $WATCHDOG_USEC, from the event loop itself,
 *              so that a loop that stops turning stops the pings (and
 *              only when $WATCHDOG_PID, if set, is this process)
 *
 * Without $NOTIFY_SOCKET it does nothing, at no cost. A datagram that
 * cannot be sent is logged once and never stops the relay.
 */
#ifndef ZP_NOTIFY_H
#define ZP_NOTIFY_H

#include <stddef.h>

struct event_base;
struct zp_log;
struct zp_notify;

#define ZP_NOTIFY_STATUS_SEC	5

/*
 * Writes the STATUS= text (no newline) into buf; called for each
 * status sent.
 */
typedef void	(*zp_notify_status_fn)(void *arg, char *buf, size_t len);

/*
 * Read $NOTIFY_SOCKET, $WATCHDOG_USEC and $WATCHDOG_PID, open the socket
 * (before privileges are dropped: the path may be root's). Returns NULL
 * and *err 0 when there is no $NOTIFY_SOCKET; NULL with a message in err
 * when it is unusable (a relative path, too long, socket() failed).
 */
struct zp_notify *zp_notify_new(struct event_base *, struct zp_log *,
	    zp_notify_status_fn, void *arg, char *err, size_t errlen);

/* READY=1 with a STATUS=, and start the status and watchdog timers. */
void	zp_notify_ready(struct zp_notify *);

/*
 * This process takes over from another (--takeover) or went to the
 * background (--daemon): READY=1 will say MAINPID= too; and when its own
 * environment has no watchdog (a process that ExecReload= started has
 * none), keep the one the old process had (watchdog_usec, 0: none).
 */
void	zp_notify_takeover(struct zp_notify *, unsigned long long);

/* RELOADING=1: a new process takes over. */
void	zp_notify_reloading(struct zp_notify *);

/* READY=1 again: the takeover failed, this one serves on. */
void	zp_notify_resume(struct zp_notify *);

/* STOPPING=1 with a STATUS=; the watchdog goes on until the loop ends. */
void	zp_notify_stopping(struct zp_notify *);

/* Stop the timers and close the socket. Safe on NULL. */
void	zp_notify_free(struct zp_notify *);

/*
 * The watchdog interval $WATCHDOG_USEC asks for, in microseconds, or 0
 * when there is none for this process (unset, bad, or $WATCHDOG_PID
 * names another one). For the start-up line and the tests.
 */
unsigned long long zp_notify_watchdog_usec(const struct zp_notify *);

#endif
