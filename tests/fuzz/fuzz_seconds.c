/*
 * fuzz_seconds.c - zp_parse_seconds() on any string, and zp_seconds_tv()
 * on what it accepts.
 *
 * What it accepts is plain decimal (digits, at most one '.') from 0.001
 * to 86400; its timeval is within a microsecond of it, with tv_usec in
 * [0, 1000000).
 */

#include <math.h>

#include "core/config.h"
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct timeval	 tv;
	char		 err[ZP_ERRLEN];
	char		*s;
	double		 v = -1, back;
	int		 rc;

	if ((s = fuzz_cstr(data, size)) == NULL)
		return 0;
	memset(err, 'X', sizeof(err));
	rc = zp_parse_seconds("idle-timeout", s, &v, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		FUZZ_CHECK(s[0] != '\0');
		FUZZ_CHECK(strspn(s, "0123456789.") == strlen(s));
		FUZZ_CHECK(strchr(s, '.') == strrchr(s, '.'));
		FUZZ_CHECK(isfinite(v) && v >= 0.001 && v <= 86400.0);
		tv = zp_seconds_tv(v);
		FUZZ_CHECK(tv.tv_sec >= 0 && tv.tv_sec <= 86400);
		FUZZ_CHECK(tv.tv_usec >= 0 && tv.tv_usec < 1000000);
		back = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
		FUZZ_CHECK(fabs(back - v) <= 0.5e-6 + 1e-9);
	} else {
		FUZZ_CHECK(v == -1);	/* untouched on error */
		fuzz_check_err(err, sizeof(err));
		FUZZ_CHECK(strstr(err, "idle-timeout") != NULL);
	}
	free(s);
	return 0;
}
