/*
 * listener.h - the listening sockets: accept, hand each client to a new
 * pair, pause under descriptor pressure or at --max-conns. ctx->listener
 * is a list (several -l); the calls below that take it act on the whole
 * list from there.
 */
#ifndef ZP_LISTENER_H
#define ZP_LISTENER_H

#include "core/config.h"

struct zp_ctx;
struct zp_listener;

/*
 * Bind and listen as spec says and register with ctx->base. Returns the
 * listener, or NULL with err filled (address in use, no permission...)
 * and errno kept: EPERM when --tproxy lacks its capability.
 */
struct zp_listener *zp_listener_new(struct zp_ctx *,
	    const struct zp_listen_spec *, char *, size_t);

/*
 * Serve on fd, a listening socket systemd or another zproxy made (label:
 * the -l it answers, for messages and the takeover; tls: it is tls@).
 * Checks that it is a listening TCP socket; with --tproxy makes it
 * transparent if it is not. Takes fd, also on failure: NULL with err
 * filled.
 */
struct zp_listener *zp_listener_adopt(struct zp_ctx *, int fd,
	    const char *label, int tls, char *, size_t);

/* Put a listener at the end of a list. */
void	zp_listener_link(struct zp_listener **, struct zp_listener *);

/* The list's next listener, or NULL. */
struct zp_listener *zp_listener_next(const struct zp_listener *);

/* The socket (for a takeover) and the -l it answers ("systemd:web"). */
int	zp_listener_fd(const struct zp_listener *);
const char *zp_listener_label(const struct zp_listener *);

/* Stop accepting on every listener while at the connection limit. */
void	zp_listener_pause(struct zp_listener *);

/* Accept again if paused for the limit (called when a pair closes): the list. */
void	zp_listener_resume(struct zp_listener *);

/*
 * Stop or go on accepting as the pairs waiting for a local resource
 * (ctx->stats.conns_waiting) say: none may be accepted while one waits.
 */
void	zp_listener_update(struct zp_listener *);

/* The bound address, for the start-up log line. */
const struct zp_addr *zp_listener_addr(const struct zp_listener *);

/* Close the sockets and free: the list. */
void	zp_listener_free(struct zp_listener *);

#endif
