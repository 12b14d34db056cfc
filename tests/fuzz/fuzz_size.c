/*
 * fuzz_size.c - zp_parse_size() on any string.
 *
 * Besides not crashing: what it accepts is digits, or digits and one K/M/G
 * with an optional "i" and an optional "B" after it; its value is what
 * those spell, from 1 to ZP_MAX_SIZE; what it refuses comes with a message.
 */

#include <ctype.h>

#include "core/config.h"
#include "fuzz.h"

/* The value s spells by the documented grammar, or 0 when it spells none. */
static unsigned long long
size_spelled(const char *s)
{
	unsigned long long	v = 0, mult = 1;

	if (!isdigit((unsigned char)*s))
		return 0;
	for (; isdigit((unsigned char)*s); s++) {
		if (v > (ZP_MAX_SIZE + 9ULL) / 10)
			return 0;	/* too big already: refused */
		v = v * 10 + (unsigned)(*s - '0');
	}
	switch (*s) {
	case 'k': case 'K':
		mult = 1024ULL;
		break;
	case 'm': case 'M':
		mult = 1024ULL * 1024;
		break;
	case 'g': case 'G':
		mult = 1024ULL * 1024 * 1024;
		break;
	}
	/* "B" and "iB" only after a suffix: plain bytes are digits only. */
	if (mult > 1) {
		s++;
		if (*s == 'i')
			s++;
		if (*s == 'b' || *s == 'B')
			s++;
	}
	if (*s != '\0' || v == 0 || v > ZP_MAX_SIZE / mult)
		return 0;
	return v * mult;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	 err[ZP_ERRLEN];
	char	*s;
	size_t	 v = 0;
	int	 rc;

	if ((s = fuzz_cstr(data, size)) == NULL)
		return 0;
	memset(err, 'X', sizeof(err));
	rc = zp_parse_size(s, &v, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		FUZZ_CHECK(v >= 1 && v <= ZP_MAX_SIZE);
		FUZZ_CHECK(v == size_spelled(s));
	} else {
		FUZZ_CHECK(size_spelled(s) == 0);
		fuzz_check_err(err, sizeof(err));
	}
	/* No error buffer at all is allowed too. */
	FUZZ_CHECK(zp_parse_size(s, &v, NULL, 0) == rc);
	free(s);
	return 0;
}
