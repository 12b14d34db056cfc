/*
 * ctlcmd.h - the words of a zproxy ctl command, parsed: the grammar both
 * ends share (the daemon parses what a client sent; zproxy ctl checks a
 * command before it connects). Pure: no I/O, no state.
 *
 *   show upstreams
 *   show streams [UPSTREAM]
 *   set upstream NAME state ready|drain|maint
 *   set upstream NAME weight N		(0-256)
 *   move STREAM-ID [UPSTREAM]
 *   add upstream HOST:PORT [weight N] [backup]
 *   del upstream NAME
 *   reload
 *
 * "--json" may stand anywhere. Words are separated by blanks; a NAME is
 * an upstream's HOST:PORT as given in -u.
 */
#ifndef ZP_CTLCMD_H
#define ZP_CTLCMD_H

#include <stddef.h>
#include <stdint.h>

#define ZP_CTL_NAME_MAX	300	/* bytes of an upstream's name, NUL too */

enum zp_ctl_verb {
	ZP_CTL_SHOW_UPSTREAMS = 0,
	ZP_CTL_SHOW_STREAMS,
	ZP_CTL_SET_STATE,
	ZP_CTL_SET_WEIGHT,
	ZP_CTL_MOVE,
	ZP_CTL_ADD,
	ZP_CTL_DEL,
	ZP_CTL_RELOAD,
};

struct zp_ctl_cmd {
	enum zp_ctl_verb verb;
	int		 json;		/* --json */
	char		 name[ZP_CTL_NAME_MAX];	/* the upstream; "" none */
	int		 state;		/* enum zp_admin (core/upstream.h) */
	int		 weight;
	int		 has_weight;	/* add: weight given (else 1) */
	int		 backup;	/* add */
	uint64_t	 id;		/* move: the stream */
};

/*
 * Parse line (NUL-terminated) into cmd. Returns 0, or -1 with err
 * filled: one line naming what is wrong.
 */
int	zp_ctl_parse(const char *line, struct zp_ctl_cmd *cmd, char *err,
	    size_t errlen);

/* The commands, one a line, for zproxy ctl's usage and errors. */
extern const char zp_ctl_usage[];

#endif
