/*
 * fuzz_config.c - -f FILE: zp_config_parse() on any configuration file.
 *
 * The input is the file (read through a memfd). The parser must not
 * crash, leak, print or exit. A refused file says where: "PATH:LINE: "
 * or "-f PATH: ". An accepted one has a listen and an upstream, and
 * what --check prints of it (zp_config_print) read back as a file
 * prints the very same.
 */

#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "core/config.h"
#include "fuzz.h"

/* Parse the file of fd; 0 or -1, err filled. */
static int
parse_fd(int fd, struct zp_config *cfg, char *err, size_t errlen)
{
	char	 path[64], f[] = "-f", prog[] = "zproxy";
	char	*argv[] = { prog, f, path, NULL };

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	zp_config_init(cfg);
	return zp_config_parse(cfg, 3, argv, err, errlen) == ZP_PARSE_OK ?
	    0 : -1;
}

/* A memfd holding len bytes of data; -1 on failure. */
static int
memfile(const void *data, size_t len)
{
	int	fd;

	if ((fd = memfd_create("fuzz_config", MFD_CLOEXEC)) == -1)
		return -1;
	if (len > 0 && write(fd, data, len) != (ssize_t)len) {
		close(fd);
		return -1;
	}
	return fd;
}

/* What --check prints of cfg, in a malloc'd buffer. */
static char *
printed(const struct zp_config *cfg, size_t *len)
{
	char	*buf = NULL;
	FILE	*fp;

	if ((fp = open_memstream(&buf, len)) == NULL)
		return NULL;
	zp_config_print(fp, cfg);
	fclose(fp);
	return buf;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct zp_config	 cfg, again;
	char			 err[ZP_ERRLEN], *out, *out2, *a, *b;
	size_t			 len, len2;
	int			 fd, fd2;

	if ((fd = memfile(data, size)) == -1)
		return 0;
	err[0] = '\0';
	if (parse_fd(fd, &cfg, err, sizeof(err)) == -1) {
		FUZZ_CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
		zp_config_free(&cfg);
		close(fd);
		return 0;
	}
	FUZZ_CHECK(cfg.nlistens >= 1 && cfg.nupstreams >= 1);
	out = printed(&cfg, &len);
	FUZZ_CHECK(out != NULL);
	fd2 = memfile(out, len);
	FUZZ_CHECK(fd2 != -1);
	FUZZ_CHECK(parse_fd(fd2, &again, err, sizeof(err)) == 0);
	out2 = printed(&again, &len2);
	FUZZ_CHECK(out2 != NULL);
	/* The same options, whatever the header says of the path. */
	a = strstr(out, "\n# (and");
	b = strstr(out2, "\n# (and");
	FUZZ_CHECK(a != NULL && b != NULL && strcmp(a, b) == 0);
	free(out);
	free(out2);
	zp_config_free(&cfg);
	zp_config_free(&again);
	close(fd);
	close(fd2);
	return 0;
}
