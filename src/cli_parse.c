/*
 * cli_parse.c - argv into struct zp_config: getopt_long over the table
 * (cli.c), each value read once (cli_value.c), then the checks across
 * options.
 */

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "tls/tls.h"
#include "cli.h"
#include "cli_int.h"
#include "core/config.h"
#include "lib/framing.h"
#include "lib/log.h"
#include "core/upstream.h"

/*
 * Name what getopt_long refused. It sets optopt to a flag's letter when a
 * long flag was given a value ("--verbose=2"), so look at the word itself.
 */
static void
bad_option(const char *word, int opt, char *err, size_t errlen)
{
	const struct cli_opt	*o;
	size_t			 len;
	char			 q[ZP_ESCLEN], flag[3];

	if (strncmp(word, "--", 2) == 0) {
		len = strcspn(word + 2, "=");
		for (o = cli_opts; o < cli_opts + CLI_NOPTS; o++)
			if (strlen(o->name) == len &&
			    strncmp(o->name, word + 2, len) == 0 &&
			    word[2 + len] == '=') {
				zp_seterr(err, errlen, "option '--%s' takes no "
				    "value", o->name);
				return;
			}
		/* No escape makes a '=': the first one is the word's. */
		zp_escape(word, q, sizeof(q));
		q[strcspn(q, "=")] = '\0';
		zp_seterr(err, errlen, "unknown option '%s'", q);
	} else if (opt != 0) {
		flag[0] = '-';
		flag[1] = (char)opt;
		flag[2] = '\0';
		zp_seterr(err, errlen, "unknown option '%s'",
		    zp_escape(flag, q, sizeof(q)));
	} else
		zp_seterr(err, errlen, "unknown option '%s'",
		    zp_escape(word, q, sizeof(q)));
}

/*
 * An option that takes a value takes one, but for those that add one more
 * of a list each time (o->list): a second value is refused, as nginx
 * refuses a duplicate single-valued directive, rather than silently
 * replacing the first (a unit file and its drop-in both setting it).
 * Flags may be repeated: they mean the same each time, and -vv counts.
 * given[] holds, per cli_opts entry, the value it was given. Returns 0,
 * or -1 with err filled.
 */
int
cli_check_once(const struct cli_opt *o, const char *arg, const char **given,
    char *err, size_t errlen)
{
	char	q1[ZP_ESCLEN / 2], q2[ZP_ESCLEN / 2];
	size_t	i = (size_t)(o - cli_opts);

	if ((!cli_has_value(o) && o->kind != CLI_FLAG_WORD) || o->list)
		return 0;
	if (arg == NULL)
		arg = "";	/* a bare CLI_FLAG_WORD */
	/* A flag's word said again: the same, as a flag is. */
	if (given[i] != NULL && o->kind == CLI_FLAG_WORD &&
	    strcmp(given[i], arg) == 0)
		return 0;
	if (given[i] != NULL) {
		zp_seterr(err, errlen,
		    "option --%s given twice ('%s', then '%s'): "
		    "it takes one value", o->name, zp_escape(given[i], q1,
		    sizeof(q1)), zp_escape(arg, q2, sizeof(q2)));
		return -1;
	}
	given[i] = arg;
	return 0;
}

/* Was the option with this val given a value? */
static int
given_opt(const char **given, int val)
{
	const struct cli_opt	*o = cli_find(val);

	return o != NULL && given[o - cli_opts] != NULL;
}

/*
 * `-u original` is the only upstream when given: a fixed upstream beside
 * it would be a second policy (which one, when?) with no clear answer.
 * What serves a list of fixed addresses does not apply to it and is
 * refused rather than silently ignored: active checks and re-resolution
 * (there is no address to check or name to look up). --balance,
 * --retries, --max-fails and --fail-timeout are ignored: with one
 * upstream there is nothing to choose, and one destination's refusal says
 * nothing about the next client's (zp_upstream_report). --allow-dst
 * limits original alone.
 */
static int
check_original(const struct zp_config *cfg, char *err, size_t errlen)
{
	if (!cfg->original) {
		if (cfg->allow_dst.n > 0) {
			zp_seterr(err, errlen, "--allow-dst needs -u original");
			return -1;
		}
		return 0;
	}
	if (cfg->nupstreams > 1) {
		zp_seterr(err, errlen, "-u original must be the only "
		    "--upstream (%zu given)", cfg->nupstreams);
		return -1;
	}
	/*
	 * Behind a balancer the socket's original destination is zproxy's
	 * own (the balancer came to it), and the header's is the balancer's
	 * front: neither is where the client meant to go.
	 */
	if (cfg->accept_proxy) {
		zp_seterr(err, errlen, "-u original does not apply to "
		    "--accept-proxy: the balancer chose the destination");
		return -1;
	}
	if (cfg->check_interval > 0) {
		zp_seterr(err, errlen, "--check-interval does not apply to "
		    "-u original: there is no fixed address to check");
		return -1;
	}
	if (cfg->resolve_interval > 0) {
		zp_seterr(err, errlen, "--resolve-interval does not apply to "
		    "-u original: there is no name to resolve");
		return -1;
	}
	return 0;
}

/*
 * Several -l: each once. The same address twice could never bind; the
 * same systemd name twice would take its sockets twice.
 */
static int
check_listens(const struct zp_config *cfg, char *err, size_t errlen)
{
	const struct zp_listen_spec	*a, *b;
	char				 buf[ZP_ADDRSTRLEN + ZP_FDNAME_MAX];
	size_t				 i, j;

	for (i = 0; i < cfg->nlistens; i++)
		for (j = 0; j < i; j++) {
			a = &cfg->listens[i];
			b = &cfg->listens[j];
			if (a->systemd != b->systemd || a->any != b->any ||
			    a->port != b->port || a->udp != b->udp)
				continue;
			if (a->systemd ? strcmp(a->name, b->name) != 0 :
			    !a->any && (a->addr.len != b->addr.len ||
			    memcmp(&a->addr.ss, &b->addr.ss, a->addr.len) != 0))
				continue;
			zp_seterr(err, errlen, "--listen %s given twice",
			    zp_listen_spec_str(a, buf, sizeof(buf)));
			return -1;
		}
	return 0;
}

/*
 * -u udp@: every upstream one, every listener UDP, and none of what
 * needs a stream or a connection. Returns 0, or -1 with err filled.
 */
static int
check_udp_upstreams(const struct zp_config *cfg, const char **given,
    int maybe_udp, char *err, size_t errlen)
{
	static const struct {
		int		 opt;
		const char	*name;
	} streams[] = {
		{ OPT_FRAMING, "framing" }, { OPT_REPLAY_WINDOW, "replay-window" },
		{ OPT_SPOOL, "spool" }, { OPT_SEND_PROXY, "send-proxy" },
		{ OPT_REBALANCE, "rebalance" },
		{ OPT_MAX_LIFETIME, "max-lifetime" },
		{ OPT_STALL_TIMEOUT, "stall-timeout" },
		{ OPT_CHECK_INTERVAL, "check-interval" },
		{ 0, NULL },
	};
	size_t	i, n = 0;
	int	tcp_listen = 0;

	for (i = 0; i < cfg->nupstreams; i++)
		n += cfg->upstreams[i].udp;
	if (n == 0)
		return 0;
	if (n < cfg->nupstreams) {
		zp_seterr(err, errlen, "-u udp@ and TCP upstreams cannot be "
		    "mixed: every --upstream is udp@HOST:PORT, or none");
		return -1;
	}
	for (i = 0; i < cfg->nlistens; i++)
		tcp_listen |= !cfg->listens[i].udp && !cfg->listens[i].systemd;
	if (tcp_listen || !maybe_udp) {
		zp_seterr(err, errlen, "-u udp@ takes datagrams from -l udp@ "
		    "only: a TCP client has none");
		return -1;
	}
	/* Lists and flags are not in given[]: their fields say. */
	if (cfg->nmirrors > 0 || cfg->accept_proxy) {
		zp_seterr(err, errlen, "--%s does not apply to -u udp@ "
		    "(datagrams are relayed as datagrams, with no stream nor "
		    "connection)", cfg->nmirrors > 0 ? "mirror" :
		    "accept-proxy");
		return -1;
	}
	for (i = 0; streams[i].name != NULL; i++)
		if (given_opt(given, streams[i].opt)) {
			zp_seterr(err, errlen, "--%s does not apply to -u udp@ "
			    "(datagrams are relayed as datagrams, with no "
			    "stream nor connection)", streams[i].name);
			return -1;
		}
	/* No connection to count; health is ICMP refusals only. */
	if (cfg->balance == ZP_BALANCE_LEASTCONN) {
		zp_seterr(err, errlen, "--balance leastconn does not apply to "
		    "-u udp@: roundrobin, source or first");
		return -1;
	}
	return 0;
}

/*
 * -u tls@, --mirror tls@: the --upstream-* options go with one, a
 * client certificate with its key. Returns 0, or -1 with err filled.
 */
static int
check_tls_upstreams(const struct zp_config *cfg, const char **given,
    char *err, size_t errlen)
{
	const char	*opt = cfg->upstream_ca != NULL ? "upstream-ca" :
			    cfg->upstream_sni != NULL ? "upstream-sni" :
			    cfg->upstream_cert != NULL ? "upstream-cert" :
			    cfg->upstream_key != NULL ? "upstream-key" :
			    given_opt(given, OPT_UPSTREAM_VERIFY) ?
			    "upstream-verify" : NULL;

	if (!zp_config_tls_upstreams(cfg) && !zp_config_tls_mirrors(cfg)) {
		if (opt == NULL)
			return 0;
		zp_seterr(err, errlen, "--%s applies to -u tls@HOST:PORT or "
		    "--mirror tls@HOST:PORT, and none is one", opt);
		return -1;
	}
	if ((cfg->upstream_cert == NULL) != (cfg->upstream_key == NULL)) {
		zp_seterr(err, errlen, "--%s needs --%s", cfg->upstream_cert !=
		    NULL ? "upstream-cert" : "upstream-key",
		    cfg->upstream_cert != NULL ? "upstream-key" :
		    "upstream-cert");
		return -1;
	}
	return 0;
}

/*
 * -l udp@: what a datagram has not (an original destination, a
 * transparent socket's), and the UDP options without one. Returns 0, or
 * -1 with err filled.
 */
static int
check_udp(const struct zp_config *cfg, const char **given, char *err,
    size_t errlen)
{
	size_t	i;
	int	udp = 0, maybe = 0;

	for (i = 0; i < cfg->nlistens; i++) {
		udp |= cfg->listens[i].udp;
		maybe |= cfg->listens[i].udp || cfg->listens[i].systemd;
	}
	if (!maybe && (given_opt(given, OPT_UDP_IDLE) ||
	    given_opt(given, OPT_UDP_MAX_SOURCES) ||
	    given_opt(given, OPT_UDP_RCVBUF))) {
		zp_seterr(err, errlen, "--%s needs -l udp@[ADDR]:PORT",
		    given_opt(given, OPT_UDP_IDLE) ? "udp-idle" :
		    given_opt(given, OPT_UDP_MAX_SOURCES) ? "udp-max-sources" :
		    "udp-rcvbuf");
		return -1;
	}
	if (udp && cfg->original) {
		zp_seterr(err, errlen, "-u original does not apply to -l udp@: "
		    "a datagram has no connection to follow");
		return -1;
	}
	if (udp && cfg->tproxy) {
		zp_seterr(err, errlen, "--tproxy takes TCP listeners only, "
		    "not -l udp@");
		return -1;
	}
	return check_udp_upstreams(cfg, given, maybe, err, errlen);
}

/*
 * getopt_long over argv, each value into cfg; given[] (CLI_NOPTS) gets
 * each option's value. Returns ZP_PARSE_OK to go on to the checks, or
 * what zp_config_parse() returns now (-h, -V, an error in err).
 */
/* getopt_long's table, from cli_opts. */
static void
long_opts(struct option *lo)
{
	size_t	i;

	memset(lo, 0, sizeof(*lo) * (CLI_NOPTS + 1));
	for (i = 0; i < CLI_NOPTS; i++) {
		lo[i].name = cli_opts[i].name;
		lo[i].has_arg = cli_has_value(&cli_opts[i]) ?
		    required_argument : cli_opts[i].kind == CLI_FLAG_WORD ?
		    optional_argument : no_argument;
		lo[i].val = cli_opts[i].val;
	}
}

/*
 * A CLI_FLAG_WORD's value: --opt=WORD (optarg), or the next argument
 * when it is one of its words ("--rebalance load"), taken from argv.
 * NULL: bare. zproxy takes no arguments but options, so a word there
 * can be nothing else.
 */
static const char *
flag_word(const struct cli_opt *o, int argc, char **argv)
{
	if (o->kind != CLI_FLAG_WORD || optarg != NULL)
		return optarg;
	if (optind < argc && o->word(argv[optind]) != -1)
		return argv[optind++];
	return NULL;
}

/*
 * Which options argv gives (on[i] for cli_opts[i]), and -f's FILE: a
 * first look, before the file is read, so that the command line's win.
 * What is wrong in argv is said by parse_argv().
 */
static const char *
scan_argv(int argc, char **argv, unsigned char *on)
{
	struct option		 lo[CLI_NOPTS + 1];
	const struct cli_opt	*o;
	const char		*file = NULL;
	int			 c;

	long_opts(lo);
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":l:u:m:f:vqhV", lo, NULL)) != -1)
		if ((o = cli_find(c)) != NULL) {
			on[o - cli_opts] = 1;
			(void)flag_word(o, argc, argv);
			if (c == 'f' && file == NULL)
				file = optarg;
		}
	return file;
}

static int
parse_argv(struct zp_config *cfg, int argc, char **argv, const char **given,
    char *err, size_t errlen)
{
	struct option		 lo[CLI_NOPTS + 1];
	const struct cli_opt	*o;
	const char		*arg;
	char			 q[ZP_ESCLEN];
	int			 c;

	long_opts(lo);
	opterr = 0;
	optind = 0;	/* 0 makes glibc reinitialise, for the unit tests */
	while ((c = getopt_long(argc, argv, ":l:u:m:f:vqhV", lo, NULL)) != -1) {
		if (c == ':') {
			zp_seterr(err, errlen, "option '%s' needs a value",
			    zp_escape(argv[optind - 1], q, sizeof(q)));
			return ZP_PARSE_ERROR;
		}
		if ((o = cli_find(c)) == NULL) {
			bad_option(argv[optind - 1], optopt, err, errlen);
			return ZP_PARSE_ERROR;
		}
		arg = flag_word(o, argc, argv);
		if (cli_check_once(o, arg, given, err, errlen) == -1)
			return ZP_PARSE_ERROR;
		if (o->kind == CLI_EXIT)
			return (int)o->min;
		if (cli_opt_set(cfg, o, arg, err, errlen) == -1)
			return ZP_PARSE_ERROR;
		/* What --check prints: not itself, nor where it read. */
		if (o->val != 'f' && o->val != OPT_CHECK &&
		    cli_item_add(cfg, o->name, cli_has_value(o) ||
		    o->kind == CLI_FLAG_WORD ? arg : NULL) == -1) {
			zp_seterr(err, errlen, "out of memory");
			return ZP_PARSE_ERROR;
		}
	}
	if (optind < argc) {
		zp_seterr(err, errlen, "unexpected argument '%s'",
		    zp_escape(argv[optind], q, sizeof(q)));
		return ZP_PARSE_ERROR;
	}
	return ZP_PARSE_OK;
}

/*
 * What a run needs: -l and -u, each -l once, -u original's rules, one
 * log destination, --user with --group. Returns 0, or -1 with err filled.
 */
static int
check_needs(const struct zp_config *cfg, char *err, size_t errlen)
{
	if (cfg->nlistens == 0) {
		zp_seterr(err, errlen, "missing --listen [ADDR]:PORT");
		return -1;
	}
	if (check_listens(cfg, err, errlen) == -1)
		return -1;
	if (cfg->nupstreams == 0) {
		zp_seterr(err, errlen, "missing --upstream HOST:PORT");
		return -1;
	}
	if (check_original(cfg, err, errlen) == -1)
		return -1;
	if (cfg->log_file != NULL && cfg->use_syslog) {
		zp_seterr(err, errlen, "--log-file and --syslog exclude each "
		    "other");
		return -1;
	}
	/*
	 * A group alone would leave uid 0 and its capabilities: the drop
	 * the operator expects would not happen.
	 */
	if (cfg->group != NULL && cfg->user == NULL) {
		zp_seterr(err, errlen, "--group needs --user");
		return -1;
	}
	return 0;
}

/*
 * Options that mean something only with another: --proxy-from and
 * --proxy-timeout with --accept-proxy, the moves with --framing, the
 * spool's with --spool (--rebalance-rate paces zproxy ctl's drains as
 * well as --rebalance: it needs --framing only); and those that
 * exclude each other. given[] as parse_argv() filled it. Returns 0, or
 * -1 with err filled.
 */
static int
check_depends(const struct zp_config *cfg, const char **given, char *err,
    size_t errlen)
{
	/* Said of headers nobody would read: a mistake, not a no-op. */
	if (!cfg->accept_proxy && (cfg->proxy_from.n > 0 ||
	    given_opt(given, OPT_PROXY_TIMEOUT))) {
		zp_seterr(err, errlen, "--%s needs --accept-proxy",
		    cfg->proxy_from.n > 0 ? "proxy-from" : "proxy-timeout");
		return -1;
	}
	if (check_udp(cfg, given, err, errlen) == -1)
		return -1;
	/*
	 * --io-uring is a build option's: a build without it refuses it,
	 * rather than relay in a way the operator did not ask for. Only
	 * copy-mode pairs are eligible (relay_ring.h): with splice it
	 * would do nothing.
	 */
#ifndef ZP_HAVE_IO_URING
	if (cfg->io_uring) {
		zp_seterr(err, errlen, "--io-uring: this zproxy was built "
		    "without io_uring (configure --enable-io-uring)");
		return -1;
	}
#endif
	if (cfg->io_uring && cfg->mode != ZP_MODE_COPY) {
		zp_seterr(err, errlen, "--io-uring needs -m copy (spliced "
		    "pairs keep the epoll path)");
		return -1;
	}
	/* A pause that long holds the thread's timers and control too. */
	if (cfg->coalesce > ZP_COALESCE_MAX) {
		zp_seterr(err, errlen, "--coalesce %g: at most %g second, or "
		    "off", cfg->coalesce, ZP_COALESCE_MAX);
		return -1;
	}
	/*
	 * Only a framed stream has boundaries to move at (a UDP source's
	 * is always framed).
	 */
	if (!zp_config_framed(cfg) && (given_opt(given,
	    OPT_MAX_FRAME) || given_opt(given, OPT_MAX_LIFETIME) ||
	    given_opt(given, OPT_STALL_TIMEOUT) ||
	    cfg->rebalance || given_opt(given, OPT_REBALANCE_RATE) ||
	    cfg->replay_window > 0)) {
		zp_seterr(err, errlen, "--%s needs --framing (or -l udp@)",
		    given_opt(given, OPT_MAX_FRAME) ? "max-frame" :
		    given_opt(given, OPT_MAX_LIFETIME) ? "max-lifetime" :
		    given_opt(given, OPT_STALL_TIMEOUT) ? "stall-timeout" :
		    cfg->rebalance ? "rebalance" :
		    cfg->replay_window > 0 ? "replay-window" :
		    "rebalance-rate");
		return -1;
	}
	/* A spool file is cut, and a spooled stream sent on, at messages. */
	if (cfg->spool_dir != NULL && !zp_config_framed(cfg)) {
		zp_seterr(err, errlen, "--spool needs --framing (or -l udp@)");
		return -1;
	}
	if (cfg->spool_dir == NULL && (given_opt(given, OPT_SPOOL_MAX) ||
	    given_opt(given, OPT_SPOOL_SENDERS) ||
	    given_opt(given, OPT_SPOOL_SYNC))) {
		zp_seterr(err, errlen, "--%s needs --spool",
		    given_opt(given, OPT_SPOOL_MAX) ? "spool-max" :
		    given_opt(given, OPT_SPOOL_SENDERS) ? "spool-senders" :
		    "spool-sync");
		return -1;
	}
	if (zp_tls_config_check(cfg, err, errlen) == -1)
		return -1;
	if (!zp_config_tls(cfg) && (given_opt(given, OPT_TLS_MIN_VERSION) ||
	    given_opt(given, OPT_TLS_HANDSHAKE_TIMEOUT) ||
	    given_opt(given, OPT_TLS_MAX_PENDING))) {
		zp_seterr(err, errlen, "--%s applies to -l tls@[ADDR]:PORT, "
		    "and no listener is one", given_opt(given,
		    OPT_TLS_MIN_VERSION) ? "tls-min-version" : given_opt(given,
		    OPT_TLS_HANDSHAKE_TIMEOUT) ? "tls-handshake-timeout" :
		    "tls-max-pending");
		return -1;
	}
	if (check_tls_upstreams(cfg, given, err, errlen) == -1)
		return -1;
	/* Sent on later to "the upstream": -u original has none to name. */
	if (cfg->spool_dir != NULL && cfg->original) {
		zp_seterr(err, errlen, "--spool cannot be used with "
		    "-u original");
		return -1;
	}
	/* An even spread is what leastconn and roundrobin aim at. */
	if (cfg->rebalance == ZP_REBALANCE_COUNT &&
	    cfg->balance != ZP_BALANCE_LEASTCONN &&
	    cfg->balance != ZP_BALANCE_ROUNDROBIN) {
		zp_seterr(err, errlen, "--rebalance count needs --balance "
		    "leastconn or roundrobin");
		return -1;
	}
	/* Which one was meant is a guess: say so rather than take the last. */
	if (cfg->verbose > 0 && cfg->quiet) {
		zp_seterr(err, errlen,
		    "--verbose (-v) and --quiet (-q) exclude "
		    "each other");
		return -1;
	}
	return 0;
}

/* Parse argv into cfg. */
int
zp_config_parse(struct zp_config *cfg, int argc, char **argv, char *err,
    size_t errlen)
{
	const char	*given[CLI_NOPTS] = { NULL };
	unsigned char	 on_argv[CLI_NOPTS] = { 0 };
	const char	*file;
	int		 rc;

	/* -f's file first: the command line's options replace its own. */
	if ((file = scan_argv(argc, argv, on_argv)) != NULL &&
	    cli_file_read(cfg, file, on_argv, given, err, errlen) == -1)
		return ZP_PARSE_ERROR;
	if ((rc = parse_argv(cfg, argc, argv, given, err, errlen)) !=
	    ZP_PARSE_OK)
		return rc;
	if (check_needs(cfg, err, errlen) == -1 ||
	    check_depends(cfg, given, err, errlen) == -1)
		return ZP_PARSE_ERROR;
	return ZP_PARSE_OK;
}
