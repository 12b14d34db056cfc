/*
 * sandbox.h - a seccomp allow-list of the system calls the running relay
 * makes, installed once start-up is over.
 *
 * A call outside the list fails with EPERM, as if the kernel refused it,
 * and is logged once per system call: the relay goes on, and the log says
 * which call the list lacks.
 */
#ifndef ZP_SANDBOX_H
#define ZP_SANDBOX_H

#include <stddef.h>

struct event_base;
struct zp_log;
struct zp_sandbox;

/* True when zproxy was built with libseccomp. */
int	zp_sandbox_available(void);

/*
 * Install the filter for this process, for good, and watch for refused
 * calls from base (logged to lg; base may be NULL, then only
 * zp_sandbox_report() logs them); flags: ZP_SANDBOX_*. Returns the sandbox, or NULL with err
 * filled (and nothing installed).
 */
/* flags: the rings' calls are allowed too (--io-uring). */
#define ZP_SANDBOX_RING	0x1

struct zp_sandbox *zp_sandbox_install(struct event_base *, struct zp_log *,
	    unsigned flags, char *err, size_t errlen);

/* Log each call refused since the last report, once per call. */
void	zp_sandbox_report(struct zp_sandbox *);

/* Free the watch (the filter stays: it cannot be removed). */
void	zp_sandbox_free(struct zp_sandbox *);

#endif
