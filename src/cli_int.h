/*
 * cli_int.h - what the parts of the command line share (cli.c: the
 * table of options and the help text; cli_value.c: reading one value;
 * cli_parse.c: argv through getopt_long, and the checks across
 * options), for them only: every other module goes through cli.h.
 */
#ifndef ZP_CLI_INT_H
#define ZP_CLI_INT_H

#include <stddef.h>

struct zp_config;

enum {
	OPT_PIPE_SIZE = 256,
	OPT_BUFFER_SIZE,
	OPT_SPLICE_MIN,
	OPT_COALESCE,
	OPT_MAX_CONNS,
	OPT_THREADS,
	OPT_CONNECT_TIMEOUT,
	OPT_BALANCE,
	OPT_RETRIES,
	OPT_MAX_FAILS,
	OPT_FAIL_TIMEOUT,
	OPT_CHECK_INTERVAL,
	OPT_RESOLVE_INTERVAL,
	OPT_IDLE_TIMEOUT,
	OPT_FIN_TIMEOUT,
	OPT_LINGER_TIMEOUT,
	OPT_KEEPALIVE,
	OPT_DRAIN_TIMEOUT,
	OPT_LOG_FILE,
	OPT_SYSLOG,
	OPT_LOG_FORMAT,
	OPT_STATS,
	OPT_STATS_MAX_CONNS,
	OPT_STATS_TIMEOUT,
	OPT_SEND_PROXY,
	OPT_DNS_SERVER,
	OPT_SOURCE,
	OPT_MIRROR,
	/* who may connect */
	OPT_ALLOW,
	OPT_DENY,
	OPT_MAX_CONNS_PER_SOURCE,
	/* behind a balancer */
	OPT_ACCEPT_PROXY,
	OPT_PROXY_FROM,
	OPT_PROXY_TIMEOUT,
	/* privileges */
	OPT_USER,
	OPT_GROUP,
	OPT_NO_SANDBOX,
	OPT_IO_URING,
	/* transparent modes */
	OPT_TPROXY,
	OPT_ALLOW_DST,
	/* log streams */
	OPT_FRAMING,
	OPT_MAX_FRAME,
	OPT_MAX_LIFETIME,
	OPT_STALL_TIMEOUT,
	OPT_REBALANCE,
	OPT_REBALANCE_RATE,
	OPT_REPLAY_WINDOW,
	OPT_SPOOL,
	OPT_SPOOL_MAX,
	OPT_SPOOL_SENDERS,
	OPT_SPOOL_SYNC,
	/* syslog over UDP */
	OPT_UDP_IDLE,
	OPT_UDP_MAX_SOURCES,
	OPT_UDP_RCVBUF,
	/* TLS */
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_TLS_CLIENT_CA,
	OPT_TLS_MIN_VERSION,
	OPT_TLS_CIPHERS,
	OPT_TLS_CIPHERSUITES,
	OPT_TLS_HANDSHAKE_TIMEOUT,
	OPT_TLS_MAX_PENDING,
	OPT_UPSTREAM_CA,
	OPT_UPSTREAM_SNI,
	OPT_UPSTREAM_CERT,
	OPT_UPSTREAM_KEY,
	OPT_UPSTREAM_VERIFY,
	/* restarts */
	OPT_CONTROL,
	OPT_TAKEOVER,
	OPT_DAEMON,
	/* the configuration file */
	OPT_CHECK,
};

/* How an option's value is read into its field. */
enum cli_kind {
	CLI_FLAG,		/* no value: an int set to 1 */
	CLI_FLAG_WORD,		/* no value, an int set to min; or one of
				   word()'s words, as --opt=WORD or the next
				   argument (what: the words) */
	CLI_MORE,		/* no value: an int counted up (-vv) */
	CLI_EXIT,		/* no value: parsing returns min (-h, -V) */
	CLI_INT,		/* an int from min to max */
	CLI_LONG,		/* a long from min to max */
	CLI_SECONDS,		/* a double, seconds */
	CLI_SECONDS_OFF,	/* the same, or "off" for 0 */
	CLI_SIZE,		/* a size_t: 64K, 1M; "0" too when min is 0;
				   at most max when max is not 0 (what: in
				   words) */
	CLI_WORD,		/* an int, one of the words word() knows
				   (what: the words, for the message) */
	CLI_STRING,		/* a char *, not empty (what: the thing) */
	CLI_CALL,		/* call() reads it */
};

struct cli_opt {
	const char	*name;		/* the long name */
	int		 val;		/* a letter, or an OPT_ */
	enum cli_kind	 kind;
	size_t		 off;		/* the field in struct zp_config */
	long		 min, max;
	const char	*what;
	int		(*word)(const char *);
	int		(*call)(struct zp_config *, const struct cli_opt *,
			    const char *, char *, size_t);
	int		 list;		/* may be given again: adds one more */
};

/*
 * The options, one entry each (cli.c). CLI_NOPTS is their number: an
 * entry added or removed without it is a compile error in cli.c, where
 * the table's own size must match this declaration.
 */
#define CLI_NOPTS	79
extern const struct cli_opt cli_opts[CLI_NOPTS];

/* Does the option take a value? (CLI_FLAG_WORD's is optional: 0.) */
int	cli_has_value(const struct cli_opt *);

/* The table entry of a getopt value, or NULL. */
const struct cli_opt *cli_find(int val);

/*
 * An option that takes one value takes it once: given[] (CLI_NOPTS)
 * holds each option's value so far (cli_parse.c). Returns 0, or -1 with
 * err filled.
 */
int	cli_check_once(const struct cli_opt *o, const char *arg,
	    const char **given, char *err, size_t errlen);

/*
 * Keep an option as read (value NULL for a flag; copied), for --check.
 * Returns 0, or -1 when out of memory.
 */
int	cli_item_add(struct zp_config *cfg, const char *name,
	    const char *value);

/*
 * cli_file.c: read path's options into cfg (one "name [value]" a line,
 * long names, # comments), but those the command line gives (skip[i]
 * for cli_opts[i]); given[] as cli_check_once() keeps it. Returns 0, or
 * -1 with err "PATH:LINE: what is wrong" (or "-f PATH: why").
 */
int	cli_file_read(struct zp_config *cfg, const char *path,
	    const unsigned char *skip, const char **given, char *err,
	    size_t errlen);

/*
 * Read one option's value s into its field of cfg, as its entry says.
 * Returns 0, or -1 with err (errlen bytes) naming the option and value.
 */
int	cli_opt_set(struct zp_config *cfg, const struct cli_opt *o,
	    const char *s, char *err, size_t errlen);

/*
 * The readers of the CLI_CALL options (the same contract as
 * cli_opt_set()) and of the CLI_WORD ones (the word's value, or -1),
 * named in the table; cli_value.c.
 */
int	cli_opt_listen(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_upstream(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_stats(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_dns_server(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_acl(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_allow_dst(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_source(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_mirror(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_control(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_opt_spool_max(struct zp_config *, const struct cli_opt *,
		    const char *, char *, size_t);
int	cli_word_mode(const char *);
int	cli_word_log_format(const char *);
int	cli_word_send_proxy(const char *);

#endif
