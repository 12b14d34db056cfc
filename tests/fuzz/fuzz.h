/*
 * fuzz.h - what the libFuzzer targets in tests/fuzz share.
 *
 * A target is LLVMFuzzerTestOneInput() over one input. It checks what the
 * code under test promises, not only that it does not crash: a broken
 * promise is reported with FUZZ_CHECK, which aborts so that libFuzzer
 * saves the input as a crash.
 */
#ifndef ZP_FUZZ_H
#define ZP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#define FUZZ_CHECK(cond) do {						\
	if (!(cond)) {							\
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,	\
		    __LINE__, #cond);					\
		abort();						\
	}								\
} while (0)

/*
 * The input as a C string in a buffer of exactly its size, so that ASan
 * sees any read past the terminator; NULL when it holds a NUL (argv
 * strings cannot) or allocation fails.
 */
static inline char *
fuzz_cstr(const uint8_t *data, size_t size)
{
	char	*s;

	if (memchr(data, '\0', size) != NULL)
		return NULL;
	if ((s = malloc(size + 1)) == NULL)
		return NULL;
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/*
 * An error message as the parsers promise it: terminated within the buffer
 * and not empty.
 */
static inline void
fuzz_check_err(const char *err, size_t errlen)
{
	FUZZ_CHECK(memchr(err, '\0', errlen) != NULL);
	FUZZ_CHECK(err[0] != '\0');
}

#endif
