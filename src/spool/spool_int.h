/*
 * spool_int.h - what the parts of the spool share (spool.c, spool_hdr.c,
 * spool_dir.c, spool_io.c, spool_writer.c, spool_sender.c),
 * for them only: every other module goes through spool.h.
 *
 * The parts and the threads they run on: spool.c is the object (made and
 * ended on the main thread); spool_hdr.c the pure codec of a file's
 * header and names; spool_dir.c the directory's scan and room (the I/O
 * thread, but spool_room(), asked by relay threads); spool_io.c the I/O
 * thread, which makes every disk call; spool_writer.c a spooling pair's
 * writer and its pump (its relay thread); spool_sender.c the senders
 * (the I/O thread).
 */
#ifndef ZP_SPOOL_INT_H
#define ZP_SPOOL_INT_H

#include <sys/types.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

#include "core/connect.h"
#include "lib/framing.h"
#include "lib/pipepool.h"
#include "spool/spool.h"

struct zp_ctx;
struct zp_sender;
struct zp_wake;

/* How often the senders look for files (spool_sender_tick_cb). */
#define SENDER_TICK_MS		1000
/* How often the file system's free space is looked at, at most. */
#define SPOOL_FREE_MS		100

/*
 * What the I/O thread is asked to do (io_run). A writer's requests carry
 * its box, and come back there answered; the others nobody waits for.
 */
enum io_kind {
	IO_OPEN = 0,	/* create name, lock it, write the header: fd */
	IO_SYNC,	/* fdatasync fd */
	IO_CLOSE,	/* fd's file is done: see io_close() */
	IO_GONE,	/* how many of a stream's files from seq `from` on
			   are delivered (gone from DIR) */
	IO_STOP,	/* the end: what was asked before is done */
};

struct io_box;

struct io_req {
	STAILQ_ENTRY(io_req)	 entry;
	enum io_kind		 kind;
	struct io_box		*box;		/* NULL: no answer */
	int			 fd;		/* OPEN: made; else the file */
	char			 name[ZP_SPOOL_NAME_MAX];
	char			 hdr[ZP_SPOOL_HDR_MAX + 1];	/* OPEN */
	int			 hdrlen;	/* OPEN: to write, then written */
	int			 whole;		/* CLOSE: "spool", else "partial" */
	uint64_t		 fsize;		/* CLOSE: header included */
	uint64_t		 fhdr;		/* CLOSE: no byte past it: unlink */
	struct zp_spool_hdr	 key;		/* GONE: the stream's names */
	uint64_t		 conn;
	unsigned		 from, to;
	unsigned		 gone;		/* GONE: the answer */
	int			 err;		/* the answer: 0 or an errno */
};

STAILQ_HEAD(io_reqs, io_req);

/*
 * Where the I/O thread answers a writer: mu guards all of it, and is
 * held to queue or take an answer, never across a system call. ev is the
 * writer's (its loop's); NULL once the writer was freed, when the I/O
 * thread disposes of the answers itself (an OPEN's file is finished with
 * what the writer still held for it, orphan). Freed by whoever drops the
 * last reference: the writer holds one, each request in flight one.
 */
struct io_box {
	pthread_mutex_t		 mu;
	int			 refs;
	struct event		*ev;		/* in its writer's loop */
	struct zp_wake		*wake;		/* that loop's */
	struct io_reqs		 done;
	char			*orphan;
	size_t			 norphan;
	int			 orphan_whole;
};

struct zp_spool {
	struct zp_ctx		*ctx;		/* the root */
	int			 dirfd;
	/* Shared by every thread's writers: atomics. */
	uint64_t		 bytes, files, streams, spooled, replayed;
	uint64_t		 refused, delivered;
	uint64_t		 tls_hs[ZP_TLS_FAIL_MAX]; /* the sender's */
	uint64_t		 free_bytes;	/* for us on DIR's file system */
	uint64_t		 free_base;	/* bytes (above) then */
	/*
	 * The I/O thread: every disk call of the spool after start-up (but
	 * a writer's writes into a file it has open) and the sender run on
	 * it, in its own loop. mu guards the queue and running.
	 */
	struct event_base	*base;
	pthread_t		 tid;
	pthread_mutex_t		 mu;
	struct io_reqs		 q;
	int			 running;
	struct event		*inbox;
	struct zp_wake		*wake;		/* relay threads post inbox */
	struct event		*room;		/* every SPOOL_FREE_MS */
	/* The I/O thread's. */
	struct event		*tick;		/* every second */
	struct event		*kick;		/* now: a file went */
	struct zp_tls_cache	*tls_cache;	/* -u tls@: sessions to resume */
	struct zp_sender	*senders;
	int			 nsenders;
	unsigned		 attempt;	/* rotates upstream addresses */
	struct timeval		 failed_at;	/* last send that failed */
	struct zp_connecting	 probe;		/* a connect to see an upstream
						   up, with nothing to send */
	int			 probe_idx;
	char			**names;	/* the last scan */
	size_t			 nnames, cap;
};

/* One spooling pair's stream on its way to files (spool_writer.c). */
struct zp_spool_writer {
	struct zp_ctx		*ctx;
	struct zp_spool		*sp;
	int			 sock;
	struct zp_tls		*tls;		/* the pair's, read through; or
						   NULL: sock's bytes as they are */
	struct event		*rev;
	struct event		*timer;
	int			 ron;
	struct zp_pipe		 pipe;		/* rfd -1: none */
	char			*buf;
	size_t			 bufsize;
	struct zp_framer	 f;
	size_t			 max_frame;	/* f's: its stream's bound */
	struct zp_spool_hdr	 hdr;
	uint64_t		 conn;
	unsigned		 seq;
	int			 fd;		/* the open file, or -1 */
	char			 name[ZP_SPOOL_NAME_MAX];
	uint64_t		 fsize;		/* header included */
	uint64_t		 hdrlen;
	unsigned char		 last;		/* the stream's last byte */
	struct timeval		 fopened;
	struct timeval		 synced;
	int			 dirty;		/* written since synced */
	int			 paused;	/* full: the timer resumes */
	int			 finished;
	int			 disk;		/* the spool failed, not fd */
	/*
	 * What the I/O thread does for it: answers come back to box
	 * (writer_io_cb). The file asked for (opening) gets what the stream
	 * gives meanwhile in held; creq, the open file's request, comes
	 * back to close it.
	 */
	struct io_box		*box;
	struct io_req		*creq;
	int			 opening;
	int			 syncing;
	int			 closing;	/* CLOSEs not answered yet */
	int			 asking;	/* a GONE not answered yet */
	char			*held;
	size_t			 nheld, heldcap;
	int			 ending;	/* done() once the file is */
	int			 end_err;
	int			 end_disk;
	enum {
		W_WRITING = 0,
		W_SEEKING,	/* an upstream takes the files: read up to
				   the next boundary, exactly */
		W_STOPPED,	/* at it: wait for the last file's delivery */
	}			 phase;
	unsigned		 delivered;	/* files (by seq) known gone */
	uint64_t		 bytes;
	int			 skip;		/* dropping the rest of a frame
						   whose start went elsewhere */
	uint64_t		 cut;		/* ... so many bytes */
	zp_spool_done_fn	 done;
	void			*arg;
};

/* The spool's gauges and counters are shared by every thread: atomics. */
static inline uint64_t
spool_ld(const uint64_t *v)
{
	return __atomic_load_n(v, __ATOMIC_RELAXED);
}

static inline void
spool_add(uint64_t *v, int64_t n)
{
	__atomic_add_fetch(v, (uint64_t)n, __ATOMIC_RELAXED);
}

/* ---- spool_hdr.c: names (pure: no system call, no state) ----------- */

/* The suffix of a name ("spool"), or NULL. */
const char *spool_name_suffix(const char *name);
/* A stream's key is its files' name up to the last '-': its length. */
size_t	spool_name_key_len(const char *name);
/* 1 when suffix is one of ours (spool, partial, open), else 0. */
int	spool_name_ours(const char *suffix);

/* ---- spool_dir.c: DIR's files and room ----------------------------- */

/*
 * May the spool take more (--spool-max, ZP_SPOOL_RESERVE)? 1 or 0. No
 * system call: a relay thread asks, before each read.
 */
int	spool_room(struct zp_spool *);
/* Look at DIR's file system's free space (the I/O thread, start-up). */
void	spool_free_look(struct zp_spool *);
/* sp->room's callback: spool_free_look() every SPOOL_FREE_MS. */
void	spool_free_cb(evutil_socket_t, short, void *);
/* Free the names of the last scan (sp->names stays, empty). */
void	spool_names_clear(struct zp_spool *);
/*
 * Read DIR's files of ours into sp->names, sorted, and count them and
 * their bytes into the gauges. Returns 0 or -1 (errno).
 */
int	spool_scan(struct zp_spool *);
/* Lock a spool file, not waiting: 0, or -1 (EWOULDBLOCK: someone has it). */
int	spool_file_lock(int fd);
/* Rename DIR/name to the same name with another suffix: 0 or -1. */
int	spool_rename(struct zp_spool *, const char *name,
	    const char *suffix);

/* ---- spool_io.c: the I/O thread ------------------------------------ */

/*
 * Write n bytes at fd's position, counted into the gauges (and spooled
 * when client). Returns 0 or -1 (errno).
 */
int	spool_io_write(struct zp_spool *, int fd, const char *b, size_t n,
	    int client);
/*
 * Queue r (the caller's no more) for the I/O thread and wake it; once
 * that thread ended, or before it runs, r is done in the caller.
 */
void	spool_io_post(struct zp_spool *, struct io_req *r);
/* Take the first request of q under mu, or NULL. */
struct io_req *spool_io_pop(pthread_mutex_t *mu, struct io_reqs *q);
/* sp->inbox's callback: run what was queued, in order. */
void	spool_io_inbox_cb(evutil_socket_t, short, void *);
/*
 * A new box for a writer of ctx's loop (cb runs there with arg when an
 * answer comes), holding the caller's reference; NULL without memory.
 */
struct io_box *spool_io_box_new(struct zp_ctx *, event_callback_fn cb,
	    void *arg);
/* Drop n references to box; the last one frees it. */
void	spool_io_box_put(struct io_box *, int n);
/*
 * Start the I/O thread on sp->base (made, with its events, by the
 * caller). Returns 0, or -1 with a message in err.
 */
int	spool_io_start(struct zp_spool *, char *err, size_t errlen);
/*
 * End it, if it runs, once what was queued before is done (the main
 * thread, at zp_spool_free()).
 */
void	spool_io_stop(struct zp_spool *);

/* ---- spool_sender.c: the senders (the I/O thread) ------------------ */

/* Make sp->senders (--spool-senders, idle): 0, or -1 without memory. */
int	spool_senders_new(struct zp_spool *);
/* End every sender's file and connection, and free them. */
void	spool_senders_free(struct zp_spool *);
/* sp->tick's and sp->kick's callback: start what may start. */
void	spool_sender_tick_cb(evutil_socket_t, short, void *);

#endif
