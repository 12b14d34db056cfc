/*
 * fuzz_addr.c - the address parsers on any string: zp_parse_listen()
 * (--listen, --stats, --dns-server), zp_parse_hostport() (--upstream)
 * and zp_parse_port().
 *
 * Besides not crashing or leaking: an accepted listen address formats
 * (zp_addr_str) to text that parses back to the same address; an accepted
 * HOST:PORT has a host of 1 to 253 bytes with no ':' unless it was given
 * in brackets, and a port of 1-65535 that the input ends with.
 */

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "core/config.h"
#include "core/net.h"
#include "fuzz.h"

/* The same address and port, after v4-mapped normalisation. */
static int
same_addr(const struct zp_addr *a, const struct zp_addr *b)
{
	char	sa[ZP_ADDRSTRLEN], sb[ZP_ADDRSTRLEN];

	/* zp_addr_str shows a v4-mapped address as the IPv4 one. */
	zp_addr_str(a, sa, sizeof(sa));
	zp_addr_str(b, sb, sizeof(sb));
	return strcmp(sa, sb) == 0;
}

static void
check_listen(const char *s)
{
	struct zp_listen_spec	ls, back;
	char			err[ZP_ERRLEN], text[ZP_ADDRSTRLEN];
	const struct sockaddr_in	*sin;
	const struct sockaddr_in6	*sin6;

	memset(err, 'X', sizeof(err));
	if (zp_parse_listen(s, &ls, err, sizeof(err)) == -1) {
		fuzz_check_err(err, sizeof(err));
		return;
	}
	FUZZ_CHECK(ls.port >= 1);
	if (ls.any) {
		FUZZ_CHECK(s[0] == ':');
		return;
	}
	if (ls.addr.ss.ss_family == AF_INET) {
		sin = (const void *)&ls.addr.ss;
		FUZZ_CHECK(ls.addr.len == sizeof(*sin));
		FUZZ_CHECK(ntohs(sin->sin_port) == ls.port);
		FUZZ_CHECK(s[0] != '[');
	} else {
		sin6 = (const void *)&ls.addr.ss;
		FUZZ_CHECK(ls.addr.ss.ss_family == AF_INET6);
		FUZZ_CHECK(ls.addr.len == sizeof(*sin6));
		FUZZ_CHECK(ntohs(sin6->sin6_port) == ls.port);
		FUZZ_CHECK(s[0] == '[');
	}
	zp_addr_str(&ls.addr, text, sizeof(text));
	FUZZ_CHECK(zp_parse_listen(text, &back, err, sizeof(err)) == 0);
	FUZZ_CHECK(!back.any && back.port == ls.port);
	FUZZ_CHECK(same_addr(&ls.addr, &back.addr));
}

static void
check_hostport(const char *s)
{
	char		 err[ZP_ERRLEN], port[6], *host = NULL;
	const char	*tail;
	unsigned short	 p;
	size_t		 hlen;

	memset(err, 'X', sizeof(err));
	memset(port, 'X', sizeof(port));
	if (zp_parse_hostport(s, &host, port, sizeof(port), err,
	    sizeof(err)) == -1) {
		FUZZ_CHECK(host == NULL);
		fuzz_check_err(err, sizeof(err));
		return;
	}
	FUZZ_CHECK(host != NULL);
	hlen = strlen(host);
	FUZZ_CHECK(hlen >= 1 && hlen <= 253);
	FUZZ_CHECK(memchr(port, '\0', sizeof(port)) != NULL);
	FUZZ_CHECK(zp_parse_port(port, &p, err, sizeof(err)) == 0);
	if (s[0] == '[') {
		FUZZ_CHECK(strncmp(s + 1, host, hlen) == 0);
		FUZZ_CHECK(s[1 + hlen] == ']' && s[2 + hlen] == ':');
		FUZZ_CHECK(strchr(host, ']') == NULL);
		tail = s + 3 + hlen;
	} else {
		FUZZ_CHECK(strncmp(s, host, hlen) == 0 && s[hlen] == ':');
		FUZZ_CHECK(strchr(host, ':') == NULL);
		tail = s + 1 + hlen;
	}
	/* The port given, leading zeros and all, is the port kept. */
	FUZZ_CHECK(strtoul(tail, NULL, 10) == p);
	free(host);
}

static void
check_port(const char *s)
{
	char		err[ZP_ERRLEN];
	unsigned short	p = 0;

	memset(err, 'X', sizeof(err));
	if (zp_parse_port(s, &p, err, sizeof(err)) == -1) {
		fuzz_check_err(err, sizeof(err));
		return;
	}
	FUZZ_CHECK(p >= 1);
	FUZZ_CHECK(strspn(s, "0123456789") == strlen(s));
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	*s;

	if ((s = fuzz_cstr(data, size)) == NULL)
		return 0;
	check_listen(s);
	check_hostport(s);
	check_port(s);
	free(s);
	return 0;
}
