/*
 * cli.h - the command line: argv into a struct zp_config, and the usage
 * text. The values are read by config.c's parsers.
 */
#ifndef ZP_CLI_H
#define ZP_CLI_H

#include <stddef.h>
#include <stdio.h>

struct zp_config;

/* What zp_config_parse() asks the caller to do. */
enum zp_parse_result {
	ZP_PARSE_OK = 0,	/* run */
	ZP_PARSE_HELP,		/* print usage on stdout, exit 0 */
	ZP_PARSE_VERSION,	/* print version on stdout, exit 0 */
	ZP_PARSE_ERROR = -1,	/* err holds the reason; exit ZP_EX_USAGE */
};

/*
 * Parse argv into cfg (getopt_long; resets optind). Returns a
 * zp_parse_result; on ZP_PARSE_ERROR err holds one line naming the problem.
 */
int	zp_config_parse(struct zp_config *, int, char **, char *, size_t);

/* Usage text, for -h and after a usage error. */
void	zp_config_usage(FILE *, const char *);

#endif
