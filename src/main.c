/*
 * main.c - zproxy: a transparent TCP forwarding proxy that relays with
 * splice(2).
 */

#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "ctl_client.h"
#include "core/config.h"
#include "zproxy.h"

int
main(int argc, char **argv)
{
	struct zp_config	cfg;
	char			err[ZP_ERRLEN];
	int			rc;

	/* zproxy ctl ...: a client of a running zproxy, not a proxy. */
	if (argc >= 2 && strcmp(argv[1], "ctl") == 0)
		return zp_ctl_main(argc - 1, argv + 1);
	zp_config_init(&cfg);
	switch (zp_config_parse(&cfg, argc, argv, err, sizeof(err))) {
	case ZP_PARSE_OK:
		break;
	case ZP_PARSE_HELP:
		zp_config_usage(stdout, "zproxy");
		zp_config_free(&cfg);
		return 0;
	case ZP_PARSE_VERSION:
		printf("zproxy %s\n", PACKAGE_VERSION);
		zp_config_free(&cfg);
		return 0;
	default:
		fprintf(stderr, "zproxy: %s (see zproxy --help)\n", err);
		zp_config_free(&cfg);
		return ZP_EX_USAGE;
	}
	if (zp_config_resolve(&cfg, err, sizeof(err)) == -1) {
		fprintf(stderr, "zproxy: %s\n", err);
		zp_config_free(&cfg);
		return ZP_EX_NOHOST;
	}
	/* What zproxy ctl reload parses again, -f FILE read anew. */
	cfg.argc = argc;
	cfg.argv = argv;
	/* --check: valid, and every upstream looked up; say what was read. */
	if (cfg.check) {
		zp_config_print(stdout, &cfg);
		rc = fflush(stdout) == 0 ? 0 : ZP_EX_OSERR;
		zp_config_free(&cfg);
		return rc;
	}
	rc = zp_run(&cfg);
	zp_config_free(&cfg);
	return rc;
}
