/*
 * clock.h - the time for deadlines and intervals.
 *
 * CLOCK_MONOTONIC, as a struct timeval (what libevent's timers and the
 * timersub() arithmetic take): it never steps. Wall time (gettimeofday)
 * steps when NTP corrects it or a virtual machine resumes, and a
 * deadline counted in it fires early or stalls; it is for log lines,
 * file names and headers, and the start time, only.
 */
#ifndef ZP_CLOCK_H
#define ZP_CLOCK_H

#include <sys/time.h>
#include <time.h>

static inline void
zp_clock_now(struct timeval *tv)
{
	struct timespec	ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
}

#endif
