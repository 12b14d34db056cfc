/*
 * spool.h - --spool DIR: a framed client stream that no upstream would
 * take is written to files, and the files are sent on once an upstream
 * answers again.
 *
 * A file is one piece of one client's stream, whole frames only (but
 * for a last one cut short by the client's end, or by a crash):
 *
 *   DIR/<UTC yyyymmddThhmmss.mmmZ>-<client>-c<conn>-<seq>.<state>
 *
 * the time being when the stream began to spool (so names sort oldest
 * stream first, then by seq: one stream's files in order), state "open"
 * while it is written, "spool" once whole, "partial" when it ends inside
 * a frame (or was open when a previous run died). Its first line is the
 * header (zp_spool_hdr_*), then the client's bytes as they came.
 *
 * The writer (zp_spool_writer_*) runs on the thread of its pair, and
 * only splices (or writes) into a file it has open: its files are made,
 * synced, renamed and looked for by the spool's I/O thread, which it
 * asks by messages and whose answers come back in its loop; no relay
 * thread makes a disk call or waits for another thread. The sender, on
 * that I/O thread too, sends finished files with sendfile(2), oldest
 * first, at most --spool-senders at once and one file of a stream at a
 * time, each over a connection of its own, and unlinks a file once the
 * upstream acknowledged all of it and closed. The accounting that
 * bounds the spool (--spool-max) is shared by atomics.
 */
#ifndef ZP_SPOOL_H
#define ZP_SPOOL_H

#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "tls/tls_io.h"

struct zp_ctx;

/* ---- the header ---------------------------------------------------- */

/*
 * "ZPSPOOL 1 client=ADDR:PORT dst=ADDR:PORT framing=F started=MS
 * sent=N\n": ADDR an IPv4 literal or a bracketed IPv6 one, dst "-" when
 * unknown, F a --framing name, MS the Unix time in milliseconds, N how
 * many of the client's bytes after the header an upstream acknowledged
 * already, up to a frame boundary: written as ZP_SPOOL_SENT_DIGITS
 * digits, so that the sender can update it in place, and a send that
 * failed or a restart resumes there. Never longer than ZP_SPOOL_HDR_MAX.
 */
#define ZP_SPOOL_HDR_MAX	200
#define ZP_SPOOL_SENT_DIGITS	16

struct zp_spool_hdr {
	struct zp_addr	client;
	struct zp_addr	dst;		/* len 0: unknown */
	int		framing;	/* enum zp_framing */
	int		dgram;		/* a UDP source's stream ("transport=
					   dgram"): its PROXY header says so */
	uint64_t	started_ms;
	uint64_t	sent;		/* delivered already, from the start */
	int		sent_fixed;	/* sent= has ZP_SPOOL_SENT_DIGITS */
};

/* Write h into buf (ZP_SPOOL_HDR_MAX); returns its length, or -1. */
int	zp_spool_hdr_format(const struct zp_spool_hdr *h, char *buf,
	    size_t len);

/*
 * Read a header from the first len bytes of a file: returns its length
 * (the '\n' included) with *h filled, 0 when buf ends before its '\n'
 * and len is below ZP_SPOOL_HDR_MAX, or -1 when it is not one.
 */
int	zp_spool_hdr_parse(const void *buf, size_t len,
	    struct zp_spool_hdr *h);

/*
 * Where to resume sending a file whose header says sent (h.sent, checked
 * to lie within the file): the last message boundary at or before it,
 * as an offset from data (the header's length) in file fd. sent= is a
 * boundary when zproxy wrote it, but a corrupted or edited file may say
 * anything, and a resume inside a message sends a torn one. lf and nul
 * framing look back from sent for a delimiter; octet and auto follow the
 * frames from the start (max_frame: --max-frame). 0 when none is found
 * (the whole file again: a message twice, never torn).
 */
uint64_t zp_spool_resume(int fd, off_t data, uint64_t sent, int framing,
	    uint64_t max_frame);

/*
 * A file's name: the stream's key (its time, client and conn) and seq,
 * with suffix ("open", "spool", "partial"). Returns 0, or -1 when buf
 * is too small.
 */
#define ZP_SPOOL_NAME_MAX	128
int	zp_spool_name(char *buf, size_t len, uint64_t started_ms,
	    const struct zp_addr *client, uint64_t conn, unsigned seq,
	    const char *suffix);

/* ---- the spool ----------------------------------------------------- */

/* Each file is closed at the next frame boundary past this size. */
#define ZP_SPOOL_FILE_MAX	(8 * 1024 * 1024)
/* ... or past this age (ms), when an upstream answers: it can be sent. */
#define ZP_SPOOL_FILE_AGE_MS	2000
/* Free space the spool leaves on its file system, at least. */
#define ZP_SPOOL_RESERVE	(4 * 1024 * 1024)

/* The main thread's, run by its I/O thread; the writers of every thread
   share its counters. */
struct zp_spool;

/* Its counters, for the metrics (read at any time, from any thread). */
struct zp_spool_tally {
	uint64_t	bytes;		/* on disk now, headers included */
	uint64_t	files;		/* on disk now, open ones too */
	uint64_t	streams;	/* clients spooling now */
	uint64_t	spooled;	/* client bytes written, in all */
	uint64_t	replayed;	/* client bytes delivered from files */
	uint64_t	refused;	/* clients refused: the spool was full */
	uint64_t	delivered;	/* files delivered */
	uint64_t	tls_hs[ZP_TLS_FAIL_MAX]; /* handshakes with tls@
					   upstreams, by result */
};

/*
 * Open --spool DIR (at start-up, before the privileges are dropped):
 * count what a previous run left there, and rename the files it was
 * still writing to "partial" (they may end inside a frame). Returns NULL
 * with err filled.
 */
struct zp_spool *zp_spool_new(struct zp_ctx *, char *err, size_t errlen);

/*
 * After the privileges are dropped, before the sandbox: DIR must take a
 * file from who we are now; then the I/O thread starts (its event base
 * made here), and the sender on it. libevent's locks must be on
 * (evthread_use_pthreads()). Returns 0, or -1 with err filled.
 */
int	zp_spool_start(struct zp_spool *, char *err, size_t errlen);

/*
 * After every pair is closed (no writer is left) and before the
 * upstreams are freed: the I/O thread does what the writers asked,
 * then ends and is joined; stop sending (the files being sent stay for
 * the next run); free.
 */
void	zp_spool_free(struct zp_spool *);

void	zp_spool_tally(const struct zp_spool *, struct zp_spool_tally *);

/* ---- a client's stream --------------------------------------------- */

struct zp_spool_writer;

/* How a writer is done with its client's stream. */
enum zp_spool_end {
	ZP_SPOOL_ENDED = 0,	/* the client's EOF: all it sent is in files */
	ZP_SPOOL_CLIENT_FAILED,	/* its socket failed (err) */
	ZP_SPOOL_DISK_FAILED,	/* a file could not be written (err) */
	ZP_SPOOL_LIVE,		/* an upstream took every file: the client
				   goes on live from this frame boundary */
};

/*
 * The writer calls this once, when it is done; the pair then frees it.
 * ZP_SPOOL_LIVE: the stream stopped at a frame boundary (nothing after
 * it was read) once an upstream was up and had taken every file of it,
 * so that what the client sends next follows them in order.
 */
typedef void	(*zp_spool_done_fn)(void *arg, enum zp_spool_end, int err);

/*
 * Spool client socket fd of connection conn (ctx: the pair's thread):
 * its bytes go into files, spliced through a pipe of ctx's pool (lf and
 * nul framing; octet, auto's first byte, a cut and a pool out of pipes:
 * read and written; tls, the pair's TLS session on fd, or NULL: read
 * through it, the writer's own while it runs, the pair's again after),
 * cut at the boundaries of its framing (enum
 * zp_framing, messages up to max_frame; dgram: a UDP source's, which
 * its files say); nothing is sent back. The writer owns a read event on fd, not fd. Its first file is
 * made by the I/O thread: reading begins once it is open, and a file
 * that cannot be made ends the writer (done(ZP_SPOOL_DISK_FAILED)),
 * never from within this call. Returns NULL with errno: ENOSPC when the
 * spool is full (counted as refused), or another error.
 */
struct zp_tls;
struct zp_spool_writer *zp_spool_writer_new(struct zp_ctx *, int fd,
	    struct zp_tls *tls, uint64_t conn, const struct zp_addr *client,
	    const struct zp_addr *dst, int framing, size_t max_frame, int dgram,
	    zp_spool_done_fn done, void *arg);

/*
 * A stream that was live until now (a framed stream whose every upstream
 * failed): right after zp_spool_writer_new(), the bytes the pair held of
 * it go into the file before any the writer reads, from a frame
 * boundary (its replay window, then its store). cutting: the pair's
 * framer, when the stream stood inside a frame whose start went to the
 * failed upstream and nothing is held (len 0): the rest of that frame is
 * dropped from the socket, as the pair would have, and counted in
 * zp_spool_writer_cut(). Returns 0, or -1 with errno.
 */
struct zp_framer;
int	zp_spool_writer_prefix(struct zp_spool_writer *, const void *buf,
	    size_t len, const struct zp_framer *cutting);

/* Bytes of the stream written so far. */
uint64_t zp_spool_writer_bytes(const struct zp_spool_writer *);

/* Bytes dropped to reach a boundary (zp_spool_writer_prefix's cutting). */
uint64_t zp_spool_writer_cut(const struct zp_spool_writer *);

/*
 * End the stream where it is (the pair closes for another reason): the
 * open file (or the one being opened, with what waited for it) is
 * synced and kept, "partial" when it ends inside a frame, by the I/O
 * thread, after this returns. NULL is fine.
 */
void	zp_spool_writer_free(struct zp_spool_writer *);

#endif
