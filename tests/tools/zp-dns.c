/*
 * zp-dns.c - a tiny DNS server for zproxy's integration tests, on
 * libevent's evdns server API.
 *
 *   zp-dns [-b ADDR] -p PORT -f FILE [-t SEC] [-q]
 *
 * Listens on UDP ADDR:PORT (127.0.0.1; PORT 0 = any) and prints the bound
 * port as the first line of stdout. Every A query, for any name, is
 * answered with the IPv4 addresses listed in FILE, which is read again on
 * every query, so that a test changes the answer by rewriting the file
 * (write a new file and rename it over FILE: a reader never sees half a
 * file). AAAA and every other type get an empty NOERROR answer then.
 *
 * FILE: one IPv4 address per line; blank lines and #comments are ignored.
 * A line with one of these words instead is the answer to every query,
 * whatever its type:
 *   servfail   answer SERVFAIL        nxdomain   answer NXDOMAIN
 *   refused    answer REFUSED         drop       do not answer at all
 * A missing or unreadable FILE (or one with no address) is SERVFAIL.
 *
 * After the port, one line per question goes to stdout, flushed:
 *   query N TYPE NAME -> ANSWER
 * (N counts questions from 1; ANSWER is the addresses, "empty", or the
 * error word), unless -q. The server exits 0 on SIGTERM/SIGINT and after
 * -t SEC (120; 0 = never), so that a forgotten one cannot linger.
 * Exit status: 0, 1 when it cannot start, 2 for a bad command line.
 *
 * Only for well-formed queries (a resolver's): libevent 2.1.12's server
 * parser crashes on some truncated datagrams (e.g. 7 bytes of text).
 */
#include <sys/socket.h>
#include <sys/types.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/dns_struct.h>
#include <event2/event.h>
#include <event2/util.h>

/* evdns' DNS type numbers are not all public. */
#define ZD_TYPE_A	1
#define ZD_TYPE_AAAA	28
#define ZD_MAX_ADDRS	32

/* RCODEs. */
#define ZD_NOERROR	0
#define ZD_SERVFAIL	2
#define ZD_NXDOMAIN	3
#define ZD_REFUSED	5
#define ZD_DROP		(-1)

struct zd {
	struct event_base	*base;
	const char		*file;
	int			 quiet;
	unsigned long		 nquery;
};

/* What FILE says now: addresses, or an rcode (or ZD_DROP). */
struct answer {
	struct in_addr	addrs[ZD_MAX_ADDRS];
	int		naddrs;
	int		rcode;
};

static void
usage(int status)
{
	fprintf(status ? stderr : stdout,
	    "usage: zp-dns [-b ADDR] -p PORT -f FILE [-t SEC] [-q]\n"
	    "\n"
	    "Answer every A query with the IPv4 addresses in FILE (re-read on\n"
	    "every query); AAAA and other types get an empty NOERROR answer.\n"
	    "FILE lines: an IPv4 address, or servfail|nxdomain|refused|drop\n"
	    "(then the answer to every query); #comments and blank lines are\n"
	    "ignored; a missing FILE or one without an address: SERVFAIL.\n"
	    "\n"
	    "  -b, --bind ADDR     UDP address to listen on (127.0.0.1)\n"
	    "  -p, --port N        UDP port (0 = any); printed as the first\n"
	    "                      line of stdout\n"
	    "  -f, --file FILE     the answers\n"
	    "  -t, --timeout SEC   exit after SEC seconds (120; 0 = never)\n"
	    "  -q, --quiet         no per-query lines on stdout\n"
	    "  -h, --help          this text\n");
	exit(status);
}

static const char *
rcode_str(int rcode)
{
	switch (rcode) {
	case ZD_NOERROR:	return "empty";
	case ZD_SERVFAIL:	return "servfail";
	case ZD_NXDOMAIN:	return "nxdomain";
	case ZD_REFUSED:	return "refused";
	case ZD_DROP:		return "drop";
	}
	return "?";
}

/* Read FILE into a. */
static void
read_answer(const char *path, struct answer *a)
{
	FILE	*fp;
	char	 line[256], *s, *e;

	memset(a, 0, sizeof(*a));
	a->rcode = ZD_SERVFAIL;
	if ((fp = fopen(path, "r")) == NULL)
		return;
	while (fgets(line, sizeof(line), fp) != NULL) {
		if ((s = strchr(line, '#')) != NULL)
			*s = '\0';
		for (s = line; isspace((unsigned char)*s); s++)
			;
		for (e = s + strlen(s); e > s &&
		    isspace((unsigned char)e[-1]); e--)
			;
		*e = '\0';
		if (*s == '\0')
			continue;
		if (strcmp(s, "servfail") == 0 || strcmp(s, "nxdomain") == 0 ||
		    strcmp(s, "refused") == 0 || strcmp(s, "drop") == 0) {
			a->rcode = s[0] == 's' ? ZD_SERVFAIL : s[0] == 'n' ?
			    ZD_NXDOMAIN : s[0] == 'r' ? ZD_REFUSED : ZD_DROP;
			a->naddrs = 0;
			break;
		}
		if (a->naddrs < ZD_MAX_ADDRS &&
		    inet_pton(AF_INET, s, &a->addrs[a->naddrs]) == 1)
			a->naddrs++;
		else if (a->naddrs < ZD_MAX_ADDRS)
			fprintf(stderr, "zp-dns: %s: ignoring \"%s\"\n", path,
			    s);
	}
	fclose(fp);
	if (a->naddrs > 0)
		a->rcode = ZD_NOERROR;
}

static void
request_cb(struct evdns_server_request *req, void *arg)
{
	struct zd		*zd = arg;
	struct answer		 a;
	char			 what[ZD_MAX_ADDRS * 17 + 16], abuf[INET_ADDRSTRLEN];
	int			 i, j, rcode = ZD_NOERROR;
	size_t			 off;

	for (i = 0; i < req->nquestions; i++) {
		const struct evdns_server_question *q = req->questions[i];
		const char *type = q->type == ZD_TYPE_A ? "A" :
		    q->type == ZD_TYPE_AAAA ? "AAAA" : "other";

		zd->nquery++;
		snprintf(what, sizeof(what), "empty");
		read_answer(zd->file, &a);
		if (a.rcode != ZD_NOERROR) {
			rcode = a.rcode;
			snprintf(what, sizeof(what), "%s", rcode_str(a.rcode));
		} else if (q->type == ZD_TYPE_A) {
			for (j = 0, off = 0; j < a.naddrs; j++) {
				/*
				 * One record per address: add_a_reply with
				 * n > 1 makes one record of 4n bytes.
				 */
				if (evdns_server_request_add_a_reply(req,
				    q->name, 1, &a.addrs[j], 0) == -1) {
					fprintf(stderr, "zp-dns: cannot add "
					    "a reply\n");
					rcode = ZD_SERVFAIL;
					break;
				}
				inet_ntop(AF_INET, &a.addrs[j], abuf,
				    sizeof(abuf));
				off += snprintf(what + off, sizeof(what) - off,
				    "%s%s", j ? " " : "", abuf);
				if (off >= sizeof(what))
					off = sizeof(what) - 1;
			}
		}
		if (!zd->quiet) {
			printf("query %lu %s %s -> %s\n", zd->nquery, type,
			    q->name, what);
			fflush(stdout);
		}
	}
	if (rcode == ZD_DROP) {
		/* No answer: the client times out. */
		evdns_server_request_drop(req);
		return;
	}
	if (evdns_server_request_respond(req, rcode) == -1) {
		fprintf(stderr, "zp-dns: cannot send the answer\n");
		evdns_server_request_drop(req);
	}
}

static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
	struct zd	*zd = arg;

	event_base_loopbreak(zd->base);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "bind",	required_argument,	NULL, 'b' },
		{ "port",	required_argument,	NULL, 'p' },
		{ "file",	required_argument,	NULL, 'f' },
		{ "timeout",	required_argument,	NULL, 't' },
		{ "quiet",	no_argument,		NULL, 'q' },
		{ "help",	no_argument,		NULL, 'h' },
		{ NULL,		0,			NULL, 0 },
	};
	struct zd		 zd;
	struct sockaddr_in	 sin;
	socklen_t		 len;
	struct evdns_server_port *port;
	struct event		*sigterm, *sigint, *timer;
	struct timeval		 tv;
	const char		*bind_addr = "127.0.0.1", *port_s = NULL;
	double			 timeout = 120;
	char			*end;
	long			 pnum;
	int			 c, fd;

	memset(&zd, 0, sizeof(zd));
	while ((c = getopt_long(argc, argv, "b:p:f:t:qh", longopts,
	    NULL)) != -1) {
		switch (c) {
		case 'b': bind_addr = optarg; break;
		case 'p': port_s = optarg; break;
		case 'f': zd.file = optarg; break;
		case 't':
			errno = 0;
			timeout = strtod(optarg, &end);
			if (errno != 0 || end == optarg || *end != '\0' ||
			    timeout < 0) {
				fprintf(stderr, "zp-dns: bad --timeout %s\n",
				    optarg);
				usage(2);
			}
			break;
		case 'q': zd.quiet = 1; break;
		case 'h': usage(0); break;
		default: usage(2); break;
		}
	}
	if (optind != argc || port_s == NULL || zd.file == NULL)
		usage(2);
	errno = 0;
	pnum = strtol(port_s, &end, 10);
	if (errno != 0 || end == port_s || *end != '\0' || pnum < 0 ||
	    pnum > 65535) {
		fprintf(stderr, "zp-dns: bad --port %s\n", port_s);
		usage(2);
	}
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_port = htons((unsigned short)pnum);
	if (inet_pton(AF_INET, bind_addr, &sin.sin_addr) != 1) {
		fprintf(stderr, "zp-dns: bad --bind %s (an IPv4 address)\n",
		    bind_addr);
		usage(2);
	}

	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0)) == -1 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1) {
		fprintf(stderr, "zp-dns: cannot bind UDP %s:%ld: %s\n",
		    bind_addr, pnum, strerror(errno));
		return 1;
	}
	len = sizeof(sin);
	if (getsockname(fd, (struct sockaddr *)&sin, &len) == -1) {
		fprintf(stderr, "zp-dns: getsockname: %s\n", strerror(errno));
		return 1;
	}
	if ((zd.base = event_base_new()) == NULL) {
		fprintf(stderr, "zp-dns: cannot create the event loop\n");
		return 1;
	}
	if ((port = evdns_add_server_port_with_base(zd.base, fd, 0,
	    request_cb, &zd)) == NULL) {
		fprintf(stderr, "zp-dns: cannot start the DNS server\n");
		return 1;
	}
	sigterm = evsignal_new(zd.base, SIGTERM, stop_cb, &zd);
	sigint = evsignal_new(zd.base, SIGINT, stop_cb, &zd);
	timer = evtimer_new(zd.base, stop_cb, &zd);
	if (sigterm == NULL || sigint == NULL || timer == NULL ||
	    event_add(sigterm, NULL) == -1 || event_add(sigint, NULL) == -1) {
		fprintf(stderr, "zp-dns: cannot set up signals\n");
		return 1;
	}
	if (timeout > 0) {
		tv.tv_sec = (time_t)timeout;
		tv.tv_usec = (suseconds_t)((timeout - (double)tv.tv_sec) * 1e6);
		if (event_add(timer, &tv) == -1) {
			fprintf(stderr, "zp-dns: cannot set up its timer\n");
			return 1;
		}
	}
	printf("%u\n", (unsigned)ntohs(sin.sin_port));
	fflush(stdout);

	if (event_base_dispatch(zd.base) == -1) {
		fprintf(stderr, "zp-dns: event loop failed\n");
		return 1;
	}
	evdns_close_server_port(port);
	event_free(timer);
	event_free(sigint);
	event_free(sigterm);
	event_base_free(zd.base);
	close(fd);
	return 0;
}
