/*
 * fuzz_handover.c - the two parsers of sockets handed to zproxy: a
 * takeover's offer (zp_offer_parse: what an old zproxy sends over
 * --control) and systemd's environment (zp_inherit_parse_env:
 * LISTEN_PID, LISTEN_FDS, LISTEN_FDNAMES).
 *
 * The first byte chooses. For an offer, its low bits are how many
 * descriptors came with it; an accepted offer names exactly those, in
 * their order, with printable labels and a process id. For the
 * environment, the rest is split at NUL bytes into the three values; an
 * accepted one has 1 to ZP_INHERIT_MAX sockets from descriptor 3 on,
 * labelled "systemd:NAME" with printable names without ':'.
 */

#include "ops/control.h"
#include "fuzz.h"
#include "ops/inherit.h"
#include "lib/log.h"

static void
check_label(const char *label)
{
	size_t	i, n = strlen(label);

	FUZZ_CHECK(n > 0 && n < ZP_INHERIT_LABELLEN);
	for (i = 0; i < n; i++)
		FUZZ_CHECK(label[i] > 0x20 && label[i] < 0x7f);
}

static void
fuzz_offer(const uint8_t *data, size_t size, size_t nfds)
{
	struct zp_offer	 o;
	char		 err[ZP_ERRLEN];
	int		 fds[ZP_INHERIT_MAX];
	size_t		 i;

	for (i = 0; i < nfds; i++)
		fds[i] = 100 + (int)i;
	memset(&o, 0, sizeof(o));
	o.conn = -1;
	memset(err, 'X', sizeof(err));
	if (zp_offer_parse((const char *)data, size, fds, nfds, &o, err,
	    sizeof(err)) == -1) {
		fuzz_check_err(err, sizeof(err));
		FUZZ_CHECK(o.conn == -1);
		return;
	}
	FUZZ_CHECK(o.conn == -1);
	FUZZ_CHECK(o.set.n == nfds);
	FUZZ_CHECK(o.pid > 0);
	FUZZ_CHECK(size >= strlen(ZP_CONTROL_REQUEST));
	FUZZ_CHECK(data[size - 1] == '\n');
	for (i = 0; i < o.set.n; i++) {
		FUZZ_CHECK(o.set.socks[i].fd == fds[i]);
		FUZZ_CHECK(!o.set.socks[i].taken);
		check_label(o.set.socks[i].label);
	}
}

static void
fuzz_env(const uint8_t *data, size_t size)
{
	struct zp_inherit	 set;
	char			 err[ZP_ERRLEN], *buf, *v[3] = { NULL, NULL, NULL };
	char			*p;
	size_t			 i, k = 0;

	if ((buf = malloc(size + 1)) == NULL)
		return;
	memcpy(buf, data, size);
	buf[size] = '\0';
	/* "" stands for unset: the two differ and both must be handled. */
	for (p = buf; k < 3; k++) {
		v[k] = *p != '\0' ? p : NULL;
		p += strlen(p);
		if (p == buf + size)
			break;
		p++;
	}
	memset(err, 'X', sizeof(err));
	if (zp_inherit_parse_env(&set, v[0], v[1], v[2], 4242, err,
	    sizeof(err)) == -1) {
		fuzz_check_err(err, sizeof(err));
		free(buf);
		return;
	}
	/* This process's id, in decimal (leading zeros are still it). */
	FUZZ_CHECK(v[0] != NULL && strspn(v[0], "0123456789") ==
	    strlen(v[0]) && strtoul(v[0], NULL, 10) == 4242);
	FUZZ_CHECK(set.n >= 1 && set.n <= ZP_INHERIT_MAX);
	for (i = 0; i < set.n; i++) {
		FUZZ_CHECK(set.socks[i].fd == 3 + (int)i);
		FUZZ_CHECK(strncmp(set.socks[i].label, "systemd:", 8) == 0);
		FUZZ_CHECK(strchr(set.socks[i].label + 8, ':') == NULL);
		FUZZ_CHECK(strlen(set.socks[i].label + 8) <= ZP_FDNAME_MAX);
		for (p = set.socks[i].label; *p != '\0'; p++)
			FUZZ_CHECK(*p >= 0x20 && *p < 0x7f);
	}
	free(buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 0x80)
		fuzz_env(data + 1, size - 1);
	else
		fuzz_offer(data + 1, size - 1, data[0] % 8);
	return 0;
}
