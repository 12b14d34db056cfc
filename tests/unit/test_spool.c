/*
 * test_spool.c - unit tests for the spool's file header and names
 * (spool_hdr.c) and its resume point (spool_sender.c): what a restarted
 * zproxy, or another one, reads back from a file to send it on.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/config.h"
#include "lib/framing.h"
#include "spool/spool.h"

static struct zp_addr
v4(const char *ip, unsigned port)
{
	struct zp_addr		 a;
	struct sockaddr_in	*s = (struct sockaddr_in *)&a.ss;

	memset(&a, 0, sizeof(a));
	s->sin_family = AF_INET;
	s->sin_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET, ip, &s->sin_addr), 1);
	a.len = sizeof(*s);
	return a;
}

static struct zp_addr
v6(const char *ip, unsigned port)
{
	struct zp_addr		 a;
	struct sockaddr_in6	*s = (struct sockaddr_in6 *)&a.ss;

	memset(&a, 0, sizeof(a));
	s->sin6_family = AF_INET6;
	s->sin6_port = htons((uint16_t)port);
	assert_int_equal(inet_pton(AF_INET6, ip, &s->sin6_addr), 1);
	a.len = sizeof(*s);
	return a;
}

static void
assert_same_addr(const struct zp_addr *a, const struct zp_addr *b)
{
	assert_int_equal(a->len, b->len);
	if (a->len > 0)
		assert_memory_equal(&a->ss, &b->ss, a->len);
}

/* Written, then read back from a file's first bytes and more. */
static void
test_hdr_round_trip(void **state)
{
	struct zp_spool_hdr	h, r;
	char			buf[ZP_SPOOL_HDR_MAX + 64];
	int			n;

	(void)state;
	memset(&h, 0, sizeof(h));
	h.client = v4("192.0.2.7", 50350);
	h.dst = v4("127.0.0.1", 514);
	h.framing = ZP_FRAMING_LF;
	h.started_ms = 1796510350959ULL;
	n = zp_spool_hdr_format(&h, buf, sizeof(buf));
	assert_string_equal(buf, "ZPSPOOL 1 client=192.0.2.7:50350 "
	    "dst=127.0.0.1:514 framing=lf started=1796510350959 "
	    "sent=0000000000000000\n");
	assert_int_equal(n, (int)strlen(buf));
	/* The client's bytes follow the header in the file. */
	strcat(buf, "<13>hello\n");
	assert_int_equal(zp_spool_hdr_parse(buf, strlen(buf), &r), n);
	assert_same_addr(&r.client, &h.client);
	assert_same_addr(&r.dst, &h.dst);
	assert_int_equal(r.framing, ZP_FRAMING_LF);
	assert_true(r.started_ms == 1796510350959ULL);
	assert_true(r.sent == 0);
	assert_true(r.sent_fixed);

	h.client = v6("2001:db8::1", 6514);
	h.dst.len = 0;
	h.framing = ZP_FRAMING_OCTET;
	h.started_ms = 0;
	h.sent = 8388608;
	n = zp_spool_hdr_format(&h, buf, sizeof(buf));
	assert_string_equal(buf, "ZPSPOOL 1 client=[2001:db8::1]:6514 dst=- "
	    "framing=octet started=0 sent=0000000008388608\n");
	assert_int_equal(zp_spool_hdr_parse(buf, (size_t)n, &r), n);
	assert_same_addr(&r.client, &h.client);
	assert_int_equal(r.dst.len, 0);
	assert_int_equal(r.framing, ZP_FRAMING_OCTET);
	assert_true(r.sent == 8388608);
	assert_true(r.sent_fixed);
	/* A UDP source's stream says so, after its framing; read back. */
	h.dgram = 1;
	n = zp_spool_hdr_format(&h, buf, sizeof(buf));
	assert_string_equal(buf, "ZPSPOOL 1 client=[2001:db8::1]:6514 dst=- "
	    "framing=octet transport=dgram started=0 sent=0000000008388608\n");
	memset(&r, 0, sizeof(r));
	assert_int_equal(zp_spool_hdr_parse(buf, (size_t)n, &r), n);
	assert_int_equal(r.dgram, 1);
	assert_true(r.sent == 8388608);
	/* Only dgram is written there: anything else is not a header. */
	assert_int_equal(zp_spool_hdr_parse("ZPSPOOL 1 client=1.2.3.4:5 dst=- "
	    "framing=lf transport=stream started=1 sent=0\n", 78, &r), -1);
	/* A v4-mapped address is read as the IPv4 one it is. */
	assert_true(zp_spool_hdr_parse("ZPSPOOL 1 client=[::ffff:1.2.3.4]:5 "
	    "dst=- framing=lf started=1 sent=0\n", 70, &r) == 70);
	assert_int_equal(r.client.ss.ss_family, AF_INET);
	assert_int_equal(r.client.len, sizeof(struct sockaddr_in));
	/* Any width is read; only the fixed one is written over in place. */
	assert_true(zp_spool_hdr_parse("ZPSPOOL 1 client=1.2.3.4:5 dst=- "
	    "framing=lf started=1 sent=12\n", 62, &r) == 62);
	assert_true(r.sent == 12);
	assert_false(r.sent_fixed);
}

/* A file cut short by a crash inside its header: pending, not bad. */
static void
test_hdr_pending(void **state)
{
	static const char	 full[] = "ZPSPOOL 1 client=10.0.0.1:1 dst=- "
	    "framing=nul started=5 sent=0000000000000000\n";
	struct zp_spool_hdr	 r;
	size_t			 i;

	(void)state;
	for (i = 0; i < sizeof(full) - 1; i++)
		assert_int_equal(zp_spool_hdr_parse(full, i, &r), 0);
	assert_int_equal(zp_spool_hdr_parse(full, sizeof(full) - 1, &r),
	    (int)sizeof(full) - 1);
	assert_int_equal(r.framing, ZP_FRAMING_NUL);
}

/* Anything else is refused, as early as its bytes show it. */
static void
test_hdr_refused(void **state)
{
	static const char *const bad[] = {
		"zpspool 1 client=1.2.3.4:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 2 client=1.2.3.4:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1  client=1.2.3.4:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5  dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=1 \n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf\n",
		"ZPSPOOL 1 client=- dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:65536 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:123456 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=::1:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=[::1:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=[1.2.3.4]:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=x framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=none started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=LF started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=-1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf "
		    "started=12345678901234567890\n",
		"ZPSPOOL 1 dst=- client=1.2.3.4:5 framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=1\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=1 sent=\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=1 "
		    "sent=x000000000000000\n",
		"ZPSPOOL 1 client=1.2.3.4:5 dst=- framing=lf started=1 "
		    "sent=0 extra=1\n",
		"GET / HTTP/1.1\n",
	};
	static const char	nul[] = "ZPSPOOL 1 client=1.2.3.4:5\0dst=- "
	    "framing=lf started=1\n";
	struct zp_spool_hdr	r;
	char			buf[ZP_SPOOL_HDR_MAX + 8];
	size_t			i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (zp_spool_hdr_parse(bad[i], strlen(bad[i]), &r) != -1)
			fail_msg("taken: %s", bad[i]);
	/* A NUL in the line. */
	assert_int_equal(zp_spool_hdr_parse(nul, sizeof(nul) - 1, &r), -1);
	/* No '\n' within ZP_SPOOL_HDR_MAX bytes: not a header, ever. */
	memset(buf, 'x', sizeof(buf));
	memcpy(buf, "ZPSPOOL 1 ", 10);
	assert_int_equal(zp_spool_hdr_parse(buf, ZP_SPOOL_HDR_MAX - 1, &r), 0);
	assert_int_equal(zp_spool_hdr_parse(buf, ZP_SPOOL_HDR_MAX, &r), -1);
	assert_int_equal(zp_spool_hdr_parse(buf, sizeof(buf), &r), -1);
}

/* Names sort by the stream's time, then its files by seq. */
static void
test_names(void **state)
{
	struct zp_addr	c = v4("192.0.2.7", 50350), c6 = v6("::1", 9);
	struct zp_addr	cm = v6("::ffff:192.0.2.7", 50350);
	char		a[ZP_SPOOL_NAME_MAX], b[ZP_SPOOL_NAME_MAX];
	char		small[20];

	(void)state;
	assert_int_equal(zp_spool_name(a, sizeof(a), 1796510350959ULL, &c,
	    17, 1, "open"), 0);
	assert_string_equal(a, "20261205T223910.959Z-192.0.2.7_50350-c17-"
	    "000001.open");
	assert_int_equal(zp_spool_name(b, sizeof(b), 1796510350959ULL, &c,
	    17, 2, "spool"), 0);
	assert_true(strcmp(a, b) < 0);
	/* A later stream of the same client sorts after both. */
	assert_int_equal(zp_spool_name(a, sizeof(a), 1796510350960ULL, &c,
	    18, 1, "spool"), 0);
	assert_true(strcmp(b, a) < 0);
	assert_int_equal(zp_spool_name(a, sizeof(a), 0, &c6, 1, 999999,
	    "partial"), 0);
	assert_string_equal(a, "19700101T000000.000Z-::1_9-c1-999999.partial");
	/* A dual-stack listener's IPv4 client is named as the header names it. */
	assert_int_equal(zp_spool_name(a, sizeof(a), 1796510350959ULL, &cm,
	    17, 1, "open"), 0);
	assert_string_equal(a, "20261205T223910.959Z-192.0.2.7_50350-c17-"
	    "000001.open");
	assert_int_equal(zp_spool_name(small, sizeof(small), 0, &c6, 1, 1,
	    "spool"), -1);
}

/*
 * A file of a header of hl bytes then data (len bytes), as the sender
 * opens one; its descriptor.
 */
static int
data_file(size_t hl, const void *data, size_t len)
{
	FILE	*f;
	size_t	 i;

	assert_non_null(f = tmpfile());
	for (i = 0; i < hl; i++)
		assert_int_equal(fputc('H', f), 'H');
	assert_int_equal(fwrite(data, 1, len, f), len);
	assert_int_equal(fflush(f), 0);
	return fileno(f);
}

/*
 * A sent= at a boundary is where the send resumes; one inside a message
 * (a corrupted or edited header) resumes at the boundary before it, so
 * that the collector gets a message twice rather than torn, and one in
 * the first message at 0 (issue 32). lf and nul look back for their
 * delimiter, further back than one read too.
 */
static void
test_resume_delimited(void **state)
{
	static const char	lf[] = "<13>one\n<13>two two\n<13>three\n";
	static const char	nul[] = "{\"a\":1}\0{\"b\":22}\0";
	char			*big;
	size_t			 n = 100 * 1024;
	int			 fd;

	(void)state;
	fd = data_file(57, lf, sizeof(lf) - 1);
	assert_int_equal(zp_spool_resume(fd, 57, 8, ZP_FRAMING_LF, 0), 8);
	assert_int_equal(zp_spool_resume(fd, 57, 20, ZP_FRAMING_LF, 0), 20);
	assert_int_equal(zp_spool_resume(fd, 57, 30, ZP_FRAMING_LF, 0), 30);
	assert_int_equal(zp_spool_resume(fd, 57, 15, ZP_FRAMING_LF, 0), 8);
	assert_int_equal(zp_spool_resume(fd, 57, 9, ZP_FRAMING_LF, 0), 8);
	assert_int_equal(zp_spool_resume(fd, 57, 25, ZP_FRAMING_LF, 0), 20);
	assert_int_equal(zp_spool_resume(fd, 57, 3, ZP_FRAMING_LF, 0), 0);
	close(fd);
	fd = data_file(10, nul, sizeof(nul) - 1);
	assert_int_equal(zp_spool_resume(fd, 10, 8, ZP_FRAMING_NUL, 0), 8);
	assert_int_equal(zp_spool_resume(fd, 10, 12, ZP_FRAMING_NUL, 0), 8);
	assert_int_equal(zp_spool_resume(fd, 10, 5, ZP_FRAMING_NUL, 0), 0);
	close(fd);
	/* "a\n", a line of 100 KiB, "b\n": sent= 90 KiB into the long one. */
	assert_non_null(big = malloc(n + 4));
	memcpy(big, "a\n", 2);
	memset(big + 2, 'x', n);
	memcpy(big + 2 + n, "\nb", 2);
	fd = data_file(57, big, n + 4);
	assert_int_equal(zp_spool_resume(fd, 57, 2 + 90 * 1024,
	    ZP_FRAMING_LF, 0), 2);
	assert_int_equal(zp_spool_resume(fd, 57, n + 3, ZP_FRAMING_LF, 0),
	    n + 3);
	close(fd);
	free(big);
}

/*
 * Octet counting: a length is only known from the frame before it, so
 * the frames are followed from the start; a body that looks like frames
 * itself ("6 abc 3 xyz") does not fool it. auto decides by the first
 * byte, as the writer did.
 */
static void
test_resume_octet(void **state)
{
	static const char	oc[] = "5 hello11 6 abc 3 xyz2 ok";
	static const int	modes[] = { ZP_FRAMING_OCTET, ZP_FRAMING_AUTO };
	size_t			i;
	int			fd, fr;

	(void)state;
	fd = data_file(40, oc, sizeof(oc) - 1);
	for (i = 0; i < 2; i++) {
		fr = modes[i];
		assert_int_equal(zp_spool_resume(fd, 40, 7, fr, 0), 7);
		assert_int_equal(zp_spool_resume(fd, 40, 21, fr, 0), 21);
		/* In "11 6 abc 3 xyz", just before its "3 xyz". */
		assert_int_equal(zp_spool_resume(fd, 40, 16, fr, 0), 7);
		assert_int_equal(zp_spool_resume(fd, 40, 23, fr, 0), 21);
		assert_int_equal(zp_spool_resume(fd, 40, 4, fr, 0), 0);
	}
	close(fd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hdr_round_trip),
		cmocka_unit_test(test_hdr_pending),
		cmocka_unit_test(test_hdr_refused),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_resume_delimited),
		cmocka_unit_test(test_resume_octet),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
