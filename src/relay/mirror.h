/*
 * mirror.h - --mirror: every client's stream also goes to other
 * collectors, each over a connection of its own per pair.
 *
 * A mirror never slows the primary. Each mirror stream has a pipe of its
 * own: splice mode tee(2)s the direction's pipe into it before the bytes
 * go to the upstream, copy mode sends the bytes it read (and writes what
 * the socket would not take into the pipe). A mirror stream whose pipe is
 * full is dropped; the primary goes on. What a mirror sends back is read
 * and thrown away. A mirror whose connect fails is left alone for
 * --fail-timeout, as an upstream is.
 *
 * The relay (relay_copy.c, relay_splice.c, relay.c) hands bytes over
 * through the zp_mirror_* calls on the direction's set (d->mir); the pair
 * makes the set when its upstream answers, ends it with its client's
 * stream, and releases it when it closes. A released set finishes on its
 * own (what its pipes hold, then a FIN) within --linger-timeout.
 */
#ifndef ZP_MIRROR_H
#define ZP_MIRROR_H

#include <sys/queue.h>
#include <stddef.h>
#include <stdint.h>

struct zp_ctx;
struct zp_config;

/* Every --mirror's address and health, shared by the threads. */
struct zp_mirrors;

/*
 * From the configuration's --mirror list (resolved already). Returns NULL
 * with errno when out of memory; with no --mirror, an empty set.
 */
struct zp_mirrors *zp_mirrors_new(const struct zp_config *);
void	zp_mirrors_free(struct zp_mirrors *);

/* How many, and is mirror i up (not within --fail-timeout of a failure). */
size_t	zp_mirrors_count(const struct zp_mirrors *);
int	zp_mirror_up(const struct zp_mirrors *, size_t i);

/* Each mirror's counters (in struct zp_stats: uint64_t only). */
struct zp_mirror_tally {
	uint64_t	streams;	/* connections begun (socket and
					   pipe had) */
	uint64_t	dropped;	/* streams that ended before their
					   client's: slow, failed, or not
					   begun (mirror down, out of
					   descriptors) */
	uint64_t	bytes;		/* delivered */
};

/* One pair's mirror streams (mirror.c's own). */
struct zp_mirror_set;
TAILQ_HEAD(zp_mirror_sets, zp_mirror_set);

/*
 * The mirror streams of pair `id` on ctx: one connect begun to each
 * mirror that is up, its pipe holding hdr (the PROXY header, or NULL)
 * to go first; framing and max_frame the pair's stream's (enum
 * zp_framing: a mirror drops at message boundaries). Returns NULL when
 * there is no --mirror, or none could begin (each counted as dropped).
 */
struct zp_mirror_set *zp_mirror_set_new(struct zp_ctx *, uint64_t id,
	    int framing, size_t max_frame, const void *hdr, size_t hdrlen);

/* Copy mode: n bytes read from the client. */
void	zp_mirror_copy(struct zp_mirror_set *, const void *buf, size_t n);

/*
 * Splice mode, before a flush of at most len bytes from the head of the
 * direction's pipe (rfd): each mirror stream that has none of the head
 * yet tee(2)s it. Returns how much of the head every stream has, the
 * most the flush may send (len when every stream was dropped).
 */
size_t	zp_mirror_tee(struct zp_mirror_set *, int rfd, size_t len);

/*
 * Splice mode: n bytes left the head of the pipe for the upstream, the
 * first `whole` of them ending at a message boundary (--framing; 0: no
 * boundary known among them). A stream that is too slow ends at the
 * last boundary known in what it holds unsent.
 */
void	zp_mirror_sent(struct zp_mirror_set *, size_t n, size_t whole);

/*
 * The pipe was read into buf (len bytes, a move to copy): the streams
 * get what of it they have not had. f (or NULL): the direction's framer,
 * which stands after those bytes.
 */
struct zp_framer;
void	zp_mirror_unpipe(struct zp_mirror_set *, const void *buf,
	    size_t len, const struct zp_framer *f);

/*
 * A framed direction goes from splice to copy with an empty pipe: the
 * set finds the boundaries itself again, from where f stands.
 */
void	zp_mirror_follow(struct zp_mirror_set *, const struct zp_framer *f);

/*
 * The client's stream goes on where the mirrors cannot follow it (into
 * the spool, whose writer reads the client itself): each stream takes no
 * more, ends at the last message boundary it holds (else where it stands,
 * as a slow one), and is counted as dropped with why in the log. After
 * this the set takes nothing; it is released with the pair as before.
 */
void	zp_mirror_set_leave(struct zp_mirror_set *, const char *why);

/* The client's stream is over: a FIN after what the pipes hold. */
void	zp_mirror_set_end(struct zp_mirror_set *);

/*
 * The pair is gone: the set ends, finishes on its own and frees itself
 * (held on ctx's list meanwhile). NULL is fine.
 */
void	zp_mirror_set_release(struct zp_mirror_set *);

/* Close every released set of ctx that is still finishing (exit). */
void	zp_mirror_sets_close(struct zp_ctx *);

#endif
