/*
 * zp-hdr - send hand-made bytes (a PROXY header and what follows it) to a
 * TCP server in pieces, with pauses, then read what comes back until the
 * server closes; the test tool of --accept-proxy.
 *
 *   zp-hdr HOST PORT FILE [--chunk N] [--gap SEC] [--pause-at N]
 *          [--bind ADDR] [--out FILE] [--no-shut] [--timeout SEC]
 *   zp-hdr --crc32c-at OFF --fix FILE
 *
 * FILE is sent --chunk bytes at a time (default: all at once), each piece
 * its own segment (TCP_NODELAY) after a --gap SEC pause; with --pause-at
 * N, only the first N bytes go so (the header), then 50 ms later the rest
 * at once (the data, as a balancer sends it); then the write
 * side is shut (unless --no-shut) and the reply read to EOF into --out.
 * A send the server refused (reset, EPIPE) ends the sending quietly: that
 * is an outcome here, not a failure. Prints one line:
 *
 *   sent=N recv=N end=eof|reset|timeout after=S.SSS
 *
 * (after: seconds from connect to the end). Exit status 0, or 1 when the
 * connection could not be made, 2 on a usage error.
 *
 * --fix writes into FILE, a PROXY v2 header, the CRC32c of the whole file
 * at byte OFF (the value of its CRC32C TLV, computed with those 4 bytes
 * zero, as the spec says), big-endian; bitwise, independent of zproxy's.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double
now(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
usage(void)
{
	fprintf(stderr, "usage: zp-hdr HOST PORT FILE [--chunk N] [--gap SEC] "
	    "[--pause-at N] [--bind ADDR] [--out FILE] [--no-shut] "
	    "[--timeout SEC]\n       zp-hdr --crc32c-at OFF --fix FILE\n");
	exit(2);
}

/* CRC32c (Castagnoli), reflected, bit by bit. */
static uint32_t
crc32c(const unsigned char *p, size_t n)
{
	uint32_t	c = 0xffffffffu;
	int		k;

	while (n-- > 0) {
		c ^= *p++;
		for (k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
	}
	return ~c;
}

static int
is_reset(int e)
{
	return e == ECONNRESET || e == EPIPE || e == ECONNABORTED;
}

/* Read a whole file into memory. */
static unsigned char *
slurp(const char *path, size_t *len)
{
	unsigned char	*buf = NULL, *nb;
	size_t		 cap = 0, n = 0;
	ssize_t		 r;
	int		 fd;

	if ((fd = open(path, O_RDONLY)) == -1) {
		fprintf(stderr, "zp-hdr: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	for (;;) {
		if (n == cap) {
			cap = cap ? cap * 2 : 65536;
			if ((nb = realloc(buf, cap)) == NULL) {
				fprintf(stderr, "zp-hdr: out of memory\n");
				exit(1);
			}
			buf = nb;
		}
		if ((r = read(fd, buf + n, cap - n)) == -1) {
			fprintf(stderr, "zp-hdr: %s: %s\n", path,
			    strerror(errno));
			exit(1);
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	*len = n;
	return buf;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "chunk",	required_argument,	NULL, 'c' },
		{ "gap",	required_argument,	NULL, 'g' },
		{ "bind",	required_argument,	NULL, 'b' },
		{ "out",	required_argument,	NULL, 'o' },
		{ "no-shut",	no_argument,		NULL, 'n' },
		{ "timeout",	required_argument,	NULL, 't' },
		{ "pause-at",	required_argument,	NULL, 'p' },
		{ "crc32c-at",	required_argument,	NULL, 'C' },
		{ "fix",	required_argument,	NULL, 'F' },
		{ NULL,		0,			NULL, 0 }
	};
	struct addrinfo		 hints, *res;
	struct pollfd		 pfd;
	unsigned char		*data, buf[65536];
	const char		*bindaddr = NULL, *out = NULL, *end = "eof";
	size_t			 len, off = 0, chunk = 0, recvd = 0;
	size_t			 pause_at = 0, crc_at = 0;
	const char		*fix = NULL;
	double			 gap = 0, timeout = 30, t0, left;
	ssize_t			 r;
	FILE			*of = NULL;
	int			 c, fd, on = 1, shut = 1, rc;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'c':	chunk = strtoul(optarg, NULL, 10); break;
		case 'g':	gap = strtod(optarg, NULL); break;
		case 'b':	bindaddr = optarg; break;
		case 'o':	out = optarg; break;
		case 'n':	shut = 0; break;
		case 't':	timeout = strtod(optarg, NULL); break;
		case 'p':	pause_at = strtoul(optarg, NULL, 10); break;
		case 'C':	crc_at = strtoul(optarg, NULL, 10); break;
		case 'F':	fix = optarg; break;
		default:	usage();
		}
	}
	if (fix != NULL) {
		uint32_t	crc;
		FILE		*fp;

		data = slurp(fix, &len);
		if (crc_at + 4 > len)
			usage();
		memset(data + crc_at, 0, 4);
		crc = crc32c(data, len);
		data[crc_at] = (unsigned char)(crc >> 24);
		data[crc_at + 1] = (unsigned char)(crc >> 16);
		data[crc_at + 2] = (unsigned char)(crc >> 8);
		data[crc_at + 3] = (unsigned char)crc;
		if ((fp = fopen(fix, "w")) == NULL ||
		    fwrite(data, 1, len, fp) != len || fclose(fp) != 0) {
			fprintf(stderr, "zp-hdr: %s: cannot write\n", fix);
			return 1;
		}
		free(data);
		return 0;
	}
	if (argc - optind != 3)
		usage();
	data = slurp(argv[optind + 2], &len);
	if (chunk == 0)
		chunk = len > 0 ? len : 1;
	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
	if ((rc = getaddrinfo(argv[optind], argv[optind + 1], &hints,
	    &res)) != 0) {
		fprintf(stderr, "zp-hdr: %s: %s\n", argv[optind],
		    gai_strerror(rc));
		return 1;
	}
	if ((fd = socket(res->ai_family, SOCK_STREAM, 0)) == -1) {
		fprintf(stderr, "zp-hdr: socket: %s\n", strerror(errno));
		return 1;
	}
	if (bindaddr != NULL) {
		struct addrinfo	*ba;

		hints.ai_flags |= AI_PASSIVE;
		if (getaddrinfo(bindaddr, "0", &hints, &ba) != 0 ||
		    bind(fd, ba->ai_addr, ba->ai_addrlen) == -1) {
			fprintf(stderr, "zp-hdr: bind %s: %s\n", bindaddr,
			    strerror(errno));
			return 1;
		}
		freeaddrinfo(ba);
	}
	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
	if (connect(fd, res->ai_addr, res->ai_addrlen) == -1) {
		fprintf(stderr, "zp-hdr: connect %s port %s: %s\n",
		    argv[optind], argv[optind + 1], strerror(errno));
		return 1;
	}
	freeaddrinfo(res);
	t0 = now();
	while (off < len) {
		size_t	n = len - off < chunk ? len - off : chunk;

		/* Past --pause-at, the data goes at once. */
		if (pause_at > 0 && off >= pause_at)
			n = len - off;
		else if (off > 0 && gap > 0)
			usleep((useconds_t)(gap * 1e6));
		if (pause_at > off && pause_at - off < n)
			n = pause_at - off;
		if (pause_at > 0 && off == pause_at)
			usleep(50000);
		r = send(fd, data + off, n, MSG_NOSIGNAL);
		if (r == -1) {
			if (errno == EINTR)
				continue;
			if (!is_reset(errno)) {
				fprintf(stderr, "zp-hdr: send: %s\n",
				    strerror(errno));
				return 1;
			}
			break;
		}
		off += (size_t)r;
	}
	if (shut)
		(void)shutdown(fd, SHUT_WR);
	if (out != NULL && (of = fopen(out, "w")) == NULL) {
		fprintf(stderr, "zp-hdr: %s: %s\n", out, strerror(errno));
		return 1;
	}
	for (;;) {
		left = t0 + timeout - now();
		if (left <= 0) {
			end = "timeout";
			break;
		}
		pfd.fd = fd;
		pfd.events = POLLIN;
		if (poll(&pfd, 1, (int)(left * 1000) + 1) == 0)
			continue;
		r = recv(fd, buf, sizeof(buf), 0);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			end = is_reset(errno) ? "reset" : "error";
			break;
		}
		if (r == 0)
			break;
		recvd += (size_t)r;
		if (of != NULL && fwrite(buf, 1, (size_t)r, of) != (size_t)r) {
			fprintf(stderr, "zp-hdr: %s: write failed\n", out);
			return 1;
		}
	}
	if (of != NULL)
		fclose(of);
	printf("sent=%zu recv=%zu end=%s after=%.3f\n", off, recvd, end,
	    now() - t0);
	close(fd);
	free(data);
	return 0;
}
