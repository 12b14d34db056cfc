/*
 * thread.c - the signals a thread blocks and its name (thread.h).
 */

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>

#include "lib/thread.h"

void
zp_thread_name(pthread_t t, const char *fmt, ...)
{
	char	name[16];
	va_list	ap;

	va_start(ap, fmt);
	(void)vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	(void)pthread_setname_np(t, name);	/* a name is not worth a fault */
}

void
zp_thread_sigset(sigset_t *set)
{
	/*
	 * Signals are the root's (libevent's handlers, SIGTERM's drain);
	 * the faults a thread causes itself stay its own, SIGSYS from the
	 * sandbox among them: a blocked one would kill the process.
	 */
	sigfillset(set);
	sigdelset(set, SIGSYS);
	sigdelset(set, SIGSEGV);
	sigdelset(set, SIGBUS);
	sigdelset(set, SIGFPE);
	sigdelset(set, SIGILL);
	sigdelset(set, SIGABRT);
}
