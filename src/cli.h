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
 * Parse argv into cfg (getopt_long; resets optind), after -f's file when
 * given (cli_file.c: the command line's options replace the file's).
 * Returns a zp_parse_result; on ZP_PARSE_ERROR err holds one line naming
 * the problem ("FILE:LINE: ..." for a line of the file).
 */
int	zp_config_parse(struct zp_config *, int, char **, char *, size_t);

/*
 * --check: the options as read (the file's, then the command line's),
 * one "name value" a line, as a file of its own would hold them.
 */
void	zp_config_print(FILE *, const struct zp_config *);

/* Usage text, for -h and after a usage error. */
void	zp_config_usage(FILE *, const char *);

#endif
