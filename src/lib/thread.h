/*
 * thread.h - what every thread zproxy makes needs, whoever makes it: the
 * signals it blocks and its name. A leaf: it knows no other module.
 */
#ifndef ZP_THREAD_H
#define ZP_THREAD_H

#include <pthread.h>
#include <signal.h>

/*
 * The signals a thread other than the main one blocks while it is made
 * (it inherits them): all but the faults it causes itself.
 */
void	zp_thread_sigset(sigset_t *);

/*
 * Name a thread (printf-like, at most 15 characters kept) for top -H,
 * ps -L and /proc/PID/task/TID/comm: zp-relay-N, zp-spool-io, zp-log.
 * From the thread that made it, before the sandbox (it writes /proc).
 */
void	zp_thread_name(pthread_t, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

#endif
