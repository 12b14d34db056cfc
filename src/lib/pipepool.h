/*
 * pipepool.h - pipes prepared in advance for the splice relay.
 *
 * Every pipe in the pool is empty, non-blocking, close-on-exec and holds
 * exactly the size asked for: the kernel may silently hand back a smaller
 * pipe (the per-user pipe budget, fs.pipe-user-pages-soft), and such a pipe
 * is closed and counted as "the kernel will not give more".
 */
#ifndef ZP_PIPEPOOL_H
#define ZP_PIPEPOOL_H

#include <stddef.h>

/* A pipe and what it holds: whoever moves bytes through it counts them. */
struct zp_pipe {
	int	rfd;		/* read end, -1 when none */
	int	wfd;		/* write end */
	size_t	data;		/* bytes in it */
};

/* Why the pool last failed to hand out a pipe. */
enum zp_pipe_shortage {
	ZP_PIPE_OK = 0,
	ZP_PIPE_LIMIT,		/* the pool's cap was reached */
	ZP_PIPE_NOFD,		/* EMFILE/ENFILE from pipe2 */
	ZP_PIPE_BUDGET,		/* F_SETPIPE_SZ refused or the pipe shrank */
	ZP_PIPE_ERROR,		/* anything else; errno kept in last_errno */
};

/* Close both ends of a pipe (-1 ends are fine); it holds nothing then. */
void	zp_pipe_close(struct zp_pipe *);

/* The pool is pipepool.c's (fields in pipepool_int.h, for its tests). */
struct zp_pipepool;


/*
 * A pool of pipes of `size` bytes, at most `cap` alive, `prepare` of them
 * made now. Returns the pool when prepare is 0 or at least one pipe
 * could be made at the right size (a pool that prepared fewer than asked
 * is fine); NULL with err filled and *shortage (enum zp_pipe_shortage)
 * set when not even one could (size above fs.pipe-max-size, say).
 */
struct zp_pipepool *zp_pipepool_new(size_t size, size_t cap, size_t prepare,
	    int *shortage, char *err, size_t errlen);

/*
 * Take an empty pipe: from the stack, else a new one if under the cap.
 * Returns 0 and fills *p, or -1 and notes why (the stats' shortage).
 */
int	zp_pipepool_get(struct zp_pipepool *, struct zp_pipe *);

/*
 * Give back a pipe. An empty one (p->data 0) goes back on the stack,
 * unless the stack holds more than `keep` and twice the pipes in use (a
 * burst is over); one with bytes is closed (its contents belong to a
 * dead connection). *p is reset to -1s and 0. Safe on a -1 pipe.
 */
void	zp_pipepool_put(struct zp_pipepool *, struct zp_pipe *);

/* The pool's figures, for the metrics and the counters line. */
struct zp_pipepool_stats {
	size_t		alive;		/* in the stack and handed out */
	size_t		pooled;		/* empty, in the stack */
	unsigned long	created;
	unsigned long	killed;		/* closed because they held bytes */
	int		shortage;	/* enum zp_pipe_shortage, the last */
};

void	zp_pipepool_stats(const struct zp_pipepool *,
	    struct zp_pipepool_stats *);

/* Close every pipe on the stack and free the pool; NULL is fine. */
void	zp_pipepool_free(struct zp_pipepool *);

/* Name of a shortage, for logs and counters. */
const char *zp_pipe_shortage_str(int);

#endif
