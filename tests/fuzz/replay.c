/*
 * replay.c - a main() for a fuzz target outside libFuzzer: feed it every
 * file of its seed corpus once, so that `make check` (with gcc, with or
 * without sanitizers) keeps the targets building and the corpus passing.
 *
 *   replay_<target> [FILE|DIR]...
 *
 * Without arguments it reads ZP_FUZZ_CORPUS, the target's corpus in the
 * source tree, compiled in. A broken check aborts, which fails the test.
 */

#include <sys/stat.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

/*
 * Run the target on one file of size bytes, from a buffer of exactly that
 * size as libFuzzer gives, so that ASan sees a read past it. Returns 0, or
 * -1 when it cannot be read.
 */
static int
replay_file(const char *path, size_t size)
{
	FILE	*fp;
	uint8_t	*buf;
	int	 rc = -1;

	if ((fp = fopen(path, "rb")) == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if ((buf = malloc(size == 0 ? 1 : size)) == NULL) {
		fprintf(stderr, "replay: out of memory\n");
		goto fail;
	}
	if (fread(buf, 1, size, fp) != size) {
		fprintf(stderr, "replay: %s: short read\n", path);
		goto fail;
	}
	LLVMFuzzerTestOneInput(buf, size);
	rc = 0;
fail:
	free(buf);
	fclose(fp);
	return rc;
}

/* Run the target on a file, or on every file of a directory. */
static int
replay_path(const char *path, size_t *count)
{
	struct stat	 st;
	struct dirent	*de;
	DIR		*d;
	char		*sub;
	int		 rc = 0;

	if (stat(path, &st) == -1) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		if (replay_file(path, (size_t)st.st_size) == -1)
			return -1;
		(*count)++;
		return 0;
	}
	if ((d = opendir(path)) == NULL) {
		fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		if ((sub = malloc(strlen(path) + strlen(de->d_name) + 2)) ==
		    NULL) {
			rc = -1;
			break;
		}
		sprintf(sub, "%s/%s", path, de->d_name);
		if (replay_path(sub, count) == -1)
			rc = -1;
		free(sub);
	}
	closedir(d);
	return rc;
}

int
main(int argc, char **argv)
{
	size_t	count = 0;
	int	i, rc = 0;

	if (argc < 2)
		rc = replay_path(ZP_FUZZ_CORPUS, &count);
	for (i = 1; i < argc; i++)
		if (replay_path(argv[i], &count) == -1)
			rc = -1;
	if (count == 0) {
		fprintf(stderr, "replay: no input found\n");
		return 1;
	}
	printf("replay: %zu inputs passed\n", count);
	return rc == 0 ? 0 : 1;
}
