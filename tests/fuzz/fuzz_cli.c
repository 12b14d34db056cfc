/*
 * fuzz_cli.c - zp_config_parse() on any command line.
 *
 * The input is split into arguments at every NUL or newline, after an
 * argv[0] of "zproxy". The parser must not crash, leak (zp_config_free
 * releases all it kept, whatever the outcome), print or exit: it reports
 * through its result and the error buffer only. An accepted command line
 * holds what zp_config_parse promises main: 1 to ZP_MAX_LISTENS listen
 * specs (systemd names without ':'), control paths that fit, 1 to
 * ZP_MAX_UPSTREAMS upstreams, sizes within their limits, not both
 * --log-file and --syslog.
 */

#include "cli.h"
#include "core/config.h"
#include "fuzz.h"

#define FUZZ_MAXARGS	256

static void
check_config(const struct zp_config *cfg)
{
	size_t	i;

	FUZZ_CHECK(cfg->nlistens > 0 && cfg->nlistens <= ZP_MAX_LISTENS);
	for (i = 0; i < cfg->nlistens; i++) {
		const struct zp_listen_spec *l = &cfg->listens[i];

		FUZZ_CHECK(l->systemd || l->any || l->addr.len > 0);
		FUZZ_CHECK(strlen(l->name) <= ZP_FDNAME_MAX);
		FUZZ_CHECK(l->name[0] == '\0' || (l->systemd &&
		    strchr(l->name, ':') == NULL));
	}
	FUZZ_CHECK(cfg->control == NULL || (cfg->control[0] != '\0' &&
	    strlen(cfg->control) <= ZP_CONTROL_PATH_MAX));
	FUZZ_CHECK(cfg->takeover == NULL || (cfg->takeover[0] != '\0' &&
	    strlen(cfg->takeover) <= ZP_CONTROL_PATH_MAX));
	FUZZ_CHECK(cfg->nupstreams >= 1 &&
	    cfg->nupstreams <= ZP_MAX_UPSTREAMS);
	for (i = 0; i < cfg->nupstreams; i++) {
		FUZZ_CHECK(cfg->upstreams[i].host != NULL);
		FUZZ_CHECK(cfg->upstreams[i].host[0] != '\0');
		FUZZ_CHECK(cfg->upstreams[i].addrs == NULL);
		/* -u udp@: every upstream one, every listener UDP. */
		FUZZ_CHECK(cfg->upstreams[i].udp == cfg->upstreams[0].udp);
	}
	for (i = 0; cfg->upstreams[0].udp && i < cfg->nlistens; i++)
		FUZZ_CHECK(cfg->listens[i].udp || cfg->listens[i].systemd);
	FUZZ_CHECK(cfg->udp_idle > 0 && cfg->udp_rcvbuf >= 1);
	/* tls@: TCP, with a certificate and a key; TLS options need one. */
	for (i = 0; i < cfg->nlistens; i++)
		FUZZ_CHECK(!cfg->listens[i].tls || (!cfg->listens[i].udp &&
		    cfg->tls_cert != NULL && cfg->tls_key != NULL));
	FUZZ_CHECK(zp_config_tls(cfg) || (cfg->tls_cert == NULL &&
	    cfg->tls_key == NULL && cfg->tls_client_ca == NULL &&
	    cfg->tls_ciphers == NULL && cfg->tls_ciphersuites == NULL));
	FUZZ_CHECK(cfg->tls_min_version == 0 || cfg->tls_min_version == 1);
	FUZZ_CHECK(cfg->tls_handshake_timeout > 0);
	/*
	 * -u tls@: never udp@ too; the --upstream-* options only with one,
	 * or with a --mirror tls@.
	 */
	for (i = 0; i < cfg->nupstreams; i++)
		FUZZ_CHECK(!cfg->upstreams[i].tls || !cfg->upstreams[i].udp);
	for (i = 0; i < cfg->nmirrors; i++)
		FUZZ_CHECK(cfg->mirrors[i].to.host != NULL &&
		    cfg->mirrors[i].to.host[0] != '\0' &&
		    (!cfg->mirrors[i].to.tls ||
		    strncmp(cfg->mirrors[i].arg, "tls@", 4) == 0));
	FUZZ_CHECK(zp_config_tls_upstreams(cfg) || zp_config_tls_mirrors(cfg) ||
	    (cfg->upstream_ca == NULL &&
	    cfg->upstream_sni == NULL && cfg->upstream_cert == NULL &&
	    cfg->upstream_key == NULL && cfg->upstream_verify == 0));
	FUZZ_CHECK((cfg->upstream_cert == NULL) == (cfg->upstream_key == NULL));
	FUZZ_CHECK(cfg->pipe_size >= 1 && cfg->pipe_size <= ZP_MAX_SIZE);
	FUZZ_CHECK(cfg->buffer_size >= 1 && cfg->buffer_size <= ZP_MAX_SIZE);
	FUZZ_CHECK(cfg->splice_min <= ZP_MAX_SIZE);
	FUZZ_CHECK(cfg->max_conns >= 0);
	FUZZ_CHECK(cfg->retries >= -1 && cfg->retries <= ZP_MAX_UPSTREAMS);
	FUZZ_CHECK(cfg->max_fails >= 1);
	FUZZ_CHECK(cfg->connect_timeout > 0);
	FUZZ_CHECK(cfg->send_proxy >= 0 && cfg->send_proxy <= 2);
	FUZZ_CHECK(cfg->log_file == NULL || !cfg->use_syslog);
	FUZZ_CHECK(cfg->log_file == NULL || cfg->log_file[0] != '\0');
	FUZZ_CHECK(!cfg->have_dns_server || !cfg->dns_server.any);
	FUZZ_CHECK(!(cfg->verbose && cfg->quiet));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zp_config	 cfg;
	char			 err[ZP_ERRLEN];
	char			*argv[FUZZ_MAXARGS + 2];
	char			*copy[FUZZ_MAXARGS + 2];
	const uint8_t		*p = data, *end = data + size, *q;
	int			 argc = 0, i, rc;

	/*
	 * Each argument in its own allocation, so that ASan sees a read
	 * past one. getopt_long permutes argv: free the copies kept aside.
	 */
	if ((argv[argc++] = strdup("zproxy")) == NULL)
		return 0;
	while (p < end && argc <= FUZZ_MAXARGS) {
		for (q = p; q < end && *q != '\0' && *q != '\n'; q++)
			;
		if ((argv[argc] = malloc((size_t)(q - p) + 1)) == NULL)
			break;
		memcpy(argv[argc], p, (size_t)(q - p));
		argv[argc][q - p] = '\0';
		argc++;
		p = q + 1;
	}
	argv[argc] = NULL;
	memcpy(copy, argv, sizeof(argv[0]) * (size_t)(argc + 1));
	/*
	 * -f FILE would read whatever the input names (/dev/stdin: a wait
	 * for ever): files are fuzz_config.c's. Left out: any -f in a
	 * cluster of short options, and --conf... (--config's prefixes).
	 */
	for (i = 1; i < argc; i++)
		if ((argv[i][0] == '-' && argv[i][1] != '-' &&
		    strchr(argv[i], 'f') != NULL) ||
		    strncmp(argv[i], "--conf", 6) == 0)
			break;
	if (i < argc) {
		for (i = 0; i < argc; i++)
			free(copy[i]);
		return 0;
	}

	zp_config_init(&cfg);
	memset(err, 'X', sizeof(err));
	rc = zp_config_parse(&cfg, argc, argv, err, sizeof(err));
	switch (rc) {
	case ZP_PARSE_OK:
		check_config(&cfg);
		break;
	case ZP_PARSE_HELP:
	case ZP_PARSE_VERSION:
		break;
	case ZP_PARSE_ERROR:
		/* One line: no argument holds a newline here. */
		fuzz_check_err(err, sizeof(err));
		FUZZ_CHECK(strchr(err, '\n') == NULL);
		break;
	default:
		FUZZ_CHECK(!"zp_config_parse returned no zp_parse_result");
	}
	zp_config_free(&cfg);
	for (i = 0; i < argc; i++)
		free(copy[i]);
	return 0;
}
