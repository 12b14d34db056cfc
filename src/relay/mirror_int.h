/*
 * mirror_int.h - what mirror.c and mirror_tls.c (a --mirror tls@
 * stream's TLS) share: the structs, and the steps of a stream each
 * calls in the other. Nobody else includes it.
 */
#ifndef ZP_MIRROR_INT_H
#define ZP_MIRROR_INT_H

#include <sys/queue.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/connect.h"
#include "lib/framing.h"
#include "lib/pipepool.h"

struct event;
struct zp_ctx;
struct zp_mtls;

struct zp_mirror_target {
	const char	*label;		/* --mirror as given */
	const char	*host;		/* tls@: the name checked (and SNI) */
	const char	*port;
	int		 tls;		/* tls@HOST:PORT */
	const struct zp_addr *addrs;	/* the configuration's */
	size_t		 naddrs;
	unsigned	 cursor;	/* atomic: the address to try next */
	unsigned	 fails;		/* atomic: connects failed in a row */
	int64_t		 down_until;	/* atomic: monotonic us; 0: up */
};

struct zp_mirrors {
	size_t			 n;
	double			 fail_timeout;
	struct zp_mirror_target	 t[ZP_MAX_MIRRORS];
};

/* One mirror stream of a pair. */
struct zp_mstream {
	struct zp_mirror_set	*set;
	size_t			 idx;		/* which --mirror */
	struct zp_connecting	 conn;		/* fd -1: connected or closed */
	int			 fd;		/* -1: connecting or closed */
	struct zp_pipe		 pipe;		/* .data: bytes not sent yet */
	struct zp_mtls		*tls;		/* tls@: mirror_tls.c's; NULL:
						   a plain stream */
	struct event		*rev;		/* what it sends: discarded */
	struct event		*wev;		/* room to send */
	struct event		*timer;		/* the end (tls@: first the
						   handshake's deadline) */
	size_t			 teed;		/* of the head of the pair's pipe */
	/*
	 * Stream offsets, the PROXY header's bytes included. Its pipe
	 * starts at out (tls@: after the bytes staged for the session).
	 */
	uint64_t		 base;		/* the header's length */
	uint64_t		 in;		/* handed to the stream */
	uint64_t		 out;		/* delivered to the socket (tls@:
						   taken by the session) */
	uint64_t		 cut_at;	/* cutting: where it ends */
	char			*held;		/* cutting: its pipe, read out;
						   it ends at cut_at */
	size_t			 held_len;
	unsigned		 cutting:1;	/* dropped: takes no more, ends at
						   cut_at, a message boundary */
	unsigned		 won:1;		/* wev is added */
	unsigned		 wshut:1;	/* FIN sent */
	unsigned		 rdeof:1;	/* the mirror's FIN came */
};

struct zp_mirror_set {
	struct zp_ctx		*ctx;
	uint64_t		 id;		/* the pair's conn= */
	size_t			 n;
	size_t			 open;		/* streams not closed */
	/*
	 * --framing: the client's stream offset of the next byte handed to
	 * the streams (copy: read; splice: the head of the pair's pipe),
	 * the last two message boundaries known before it, and the framer
	 * that finds them in copy mode.
	 */
	uint64_t		 off;
	uint64_t		 bound[2];	/* [0] the last, [1] the one before */
	int			 framed;
	struct zp_framer	 f;
	unsigned		 ended:1;	/* the client's stream is over */
	unsigned		 released:1;	/* the pair is gone: on the list */
	unsigned		 counted:1;	/* ... in ctx->load while it
						   finishes (set_maybe_free) */
	TAILQ_ENTRY(zp_mirror_set) entry;
	struct zp_mstream	 s[ZP_MAX_MIRRORS];
};

/* mirror.c: a stream's steps. */

/* Closed, counted as dropped and said (why), unless cut already. */
void	mstream_drop(struct zp_mstream *, const char *why);

/* Closed: everything it holds (tls@: its session too). */
void	mstream_close(struct zp_mstream *);

/* Everything is out: the FIN (tls@: close_notify first), maybe the end. */
void	mstream_finish(struct zp_mstream *);

void	mstream_want_write(struct zp_mstream *, int on);

/* Wait for the mirror's FIN at most --linger-timeout (once sending). */
void	mstream_end_timer(struct zp_mstream *);

/*
 * What the stream holds (its pipe, or what a cut kept in memory), to
 * the socket as it is, up to stream offset `until`: a plain stream's
 * bytes, a tls@ stream's PROXY header. Returns 1 once nothing is left
 * to send before until, 0 when the socket is full (wev added), -1 when
 * the stream was dropped.
 */
int	mstream_send_raw(struct zp_mstream *, uint64_t until);

/* Mirror i's connect (tls@: and handshake) failed, why; or answered. */
void	mirror_failed(struct zp_ctx *, size_t i, const char *why);
void	mirror_answered(struct zp_ctx *, size_t i);

/* mirror_tls.c: a tls@ stream's TLS (m->tls). */

/* The stream begins: its deadline. -1: out of memory. */
int	mtls_new(struct zp_mstream *);

/* Connected: its session; the deadline armed. -1: out of memory. */
int	mtls_start(struct zp_mstream *);

/* Its part of mstream_drain: the header, the handshake, the bytes. */
void	mtls_drain(struct zp_mstream *);

/* Its read event: the handshake's, or what the mirror sends. */
void	mtls_read(struct zp_mstream *);

/* Its timer: 1 when it was the handshake's deadline (handled). */
int	mtls_timeout(struct zp_mstream *);

/* close_notify: 1 sent, 0 waits for room (wev), -1 dropped. */
int	mtls_notify(struct zp_mstream *);

/* The handshake is done: its bytes may go. */
int	mtls_ready(const struct zp_mstream *);

/* Bytes read out of its pipe, not yet taken by the session. */
size_t	mtls_staged(const struct zp_mstream *);

void	mtls_free(struct zp_mstream *);

#endif
