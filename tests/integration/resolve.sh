#!/bin/bash
# resolve.sh - --resolve-interval with --dns-server: upstream names are
# re-resolved in the loop, with evdns, asking only that server (zp-dns,
# tests/tools/zp-dns.c, answering from a file).
#   a. -u localhost:P (start-up resolution: the system resolver, so
#      127.0.0.1), --resolve-interval 0.3 --dns-server 127.0.0.1:DNSPORT;
#      collector A listens on 127.0.0.1:P, B on 127.0.0.2:P. zp-dns is
#      asked (its query lines), and while it says 127.0.0.1 connections
#      land on A; once the file says 127.0.0.2, zproxy logs "upstream
#      localhost:P now resolves to ... 127.0.0.2:P" within about a second
#      (once), and new connections land on B (the log and B's files),
#      byte-exact;
#   b. zp-dns answers SERVFAIL: a warning "lookup failed" is logged once
#      (not once per interval), the addresses are kept: connections still
#      land on B;
#   c. zp-dns answers again, then is stopped: the addresses are kept,
#      connections still land on B, and one more warning is logged once
#      the lookup times out (evdns' own timeouts: up to ~25 s);
#   d. every line zproxy wrote is one of its own log lines (nothing
#      printed behind its logger's back, e.g. by libevent).
# Runs in one mode (the first of $MODES): the data path is not what is
# tested here.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_DNS:?ZP_DNS must name tests/tools/zp-dns}"
[ -x "$ZP_DNS" ] || { echo "not ok - ZP_DNS=$ZP_DNS is not executable"; exit 1; }

mode=${MODES%% *}
mkdata up.dat 32K
mkdata down.dat 48K
UPSZ=32768
DOWNSZ=49152

count() { grep -cE -- "$1" "$ZLOG" 2>/dev/null; }

# dns_say WHAT: what zp-dns answers from now on (a new file renamed over
# the old one: zp-dns never reads half a file).
dns_say() {
	printf '%s\n' "$@" >"$T/dns.txt.new" && mv -f "$T/dns.txt.new" "$T/dns.txt"
}

# queries REGEX: zp-dns' query lines matching REGEX so far.
queries() { grep -cE -- "$1" "$T/dns.out" 2>/dev/null; }

# wait_queries REGEX N SECS: until zp-dns logged more than N such lines.
wait_queries() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	until [ "$(queries "$1")" -gt "$2" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# xfer WHAT COLLECTOR: one connection through zproxy that must land on
# COLLECTOR (A or B): byte-exact both ways, the log names its address, and
# the collector wrote what it got to its next file.
NA=0
NB=0
xfer() {
	local what=$1 c=$2 addr n f
	if [ "$c" = A ]; then addr=127.0.0.1; n=$NA; else addr=127.0.0.2; n=$NB; fi
	rm -f "$T/xfer.got"
	peer xfer connect 127.0.0.1 "$ZPORT" -s "$T/up.dat" -o "$T/xfer.got" -t 20 ||
		fail "$what: client: $(cat "$T/xfer.err")"
	same_file "$T/down.dat" "$T/xfer.got" "$what (upstream->client)"
	expect_conn_log "upstream=${addr//./\\.}:$P .*up=$UPSZ down=$DOWNSZ .*end=closed" "$what"
	f="$T/$c.got.$n"
	wait_size "$f" "$UPSZ" 5 || fail "$what: collector $c did not get the connection"
	same_file "$T/up.dat" "$f" "$what (client->upstream)"
	if [ "$c" = A ]; then NA=$((NA + 1)); else NB=$((NB + 1)); fi
}

resolve() {
	local what="re-resolving localhost" dpid dport t0 ms n0 n q line
	getent ahosts localhost | grep -q '^127\.0\.0\.1 ' ||
		fail "$what: the system resolver does not give 127.0.0.1 for localhost"
	P=$(free_port)
	peer_listen A -b 127.0.0.1 -p "$P" -n 0 -o "$T/A.got.%d" -s "$T/down.dat" -t 60
	peer_listen B -b 127.0.0.2 -p "$P" -n 0 -o "$T/B.got.%d" -s "$T/down.dat" -t 60
	dns_say 127.0.0.1
	zp_bg dns "$ZP_DNS" -p 0 -f "$T/dns.txt" -t 60
	dpid=$BG_PID
	dport=$(wait_line "$T/dns.out" '^[0-9]+$' 5 "$dpid") ||
		fail "zp-dns did not start: $(cat "$T/dns.err")"
	start_zproxy -v -m "$mode" -u "localhost:$P" --resolve-interval 0.3 \
	    --dns-server "127.0.0.1:$dport"
	# two lookups answered: the first one may have changed the start-up
	# addresses (::1 from /etc/hosts)
	wait_queries '^query [0-9]+ A [Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt] -> 127\.0\.0\.1$' 1 5 ||
		fail "$what: zp-dns was not asked for localhost twice within 5 s: $(tail -n 3 "$T/dns.out")"
	xfer "$what: DNS says 127.0.0.1" A
	n0=$(count "upstream localhost:$P now resolves to")
	ok "$what: zproxy asks zp-dns only (its query lines), connections land on A (127.0.0.1)"

	dns_say 127.0.0.2
	t0=$(now_ms)
	line=$(wait_line "$ZLOG" "upstream localhost:$P now resolves to .*127\.0\.0\.2:$P" 3 "$ZPID") ||
		fail "$what: no 'now resolves to ... 127.0.0.2' within 3 s of the DNS change"
	ms=$(( $(now_ms) - t0 ))
	[ "$ms" -le 1500 ] || fail "$what: 'now resolves' came $ms ms after the change (interval 0.3 s)"
	echo "$line" | grep -q 'resolves to 1 address' || fail "$what: $line"
	xfer "$what: DNS says 127.0.0.2, connection 1" B
	xfer "$what: DNS says 127.0.0.2, connection 2" B
	q=$(queries ' A ')
	wait_queries ' A ' "$((q + 2))" 3 || fail "$what: zp-dns is not asked any more"
	n=$(count "upstream localhost:$P now resolves to")
	[ "$n" -eq $((n0 + 1)) ] || fail "$what: 'now resolves' logged $((n - n0)) times for one change"
	ok "$what: 'now resolves to 1 address, first 127.0.0.2:$P' $ms ms after the DNS change, logged once; new connections land on B"

	# b. SERVFAIL
	dns_say servfail
	t0=$(now_ms)
	wait_line "$ZLOG" "upstream localhost:$P: lookup failed" 5 "$ZPID" >/dev/null ||
		fail "$what: SERVFAIL: no 'lookup failed' warning within 5 s"
	ms=$(( $(now_ms) - t0 ))
	q=$(queries 'servfail$')
	wait_queries 'servfail$' "$((q + 2))" 3 || fail "$what: SERVFAIL: zp-dns is not asked any more"
	n=$(count 'lookup failed')
	[ "$n" -eq 1 ] || fail "$what: SERVFAIL: 'lookup failed' logged $n times, expected once"
	xfer "$what: SERVFAIL, connection 1" B
	ok "$what: SERVFAIL: one warning after $ms ms (not one per lookup), the addresses kept: connections still land on B"

	# c. the DNS server goes away
	dns_say 127.0.0.2
	q=$(queries '127\.0\.0\.2$')
	wait_queries '127\.0\.0\.2$' "$((q + 1))" 3 || fail "$what: zp-dns is not asked after SERVFAIL"
	wait_queries '127\.0\.0\.2$' "$((q + 2))" 3 || fail "$what: zp-dns is not asked after SERVFAIL"
	zp_stop "$dpid"
	zp_wait_exit "$dpid" 5 >/dev/null
	t0=$(now_ms)
	xfer "$what: zp-dns stopped, connection 1" B
	n=0
	while [ "$(count 'lookup failed')" -lt 2 ]; do
		[ $(( $(now_ms) - t0 )) -lt 25000 ] ||
			fail "$what: zp-dns stopped: no second 'lookup failed' within 25 s"
		sleep 0.1
	done
	ms=$(( $(now_ms) - t0 ))
	xfer "$what: zp-dns stopped, connection 2" B
	sleep 1		# more lookups fail: no more warnings
	n=$(count 'lookup failed')
	[ "$n" -eq 2 ] || fail "$what: zp-dns stopped: 'lookup failed' logged $((n - 1)) times, expected once"
	n=$(count "now resolves to")
	[ "$n" -eq $((n0 + 1)) ] || fail "$what: the addresses changed while the DNS was down"
	zproxy_alive "after the DNS outage"
	ok "$what: zp-dns stopped: connections still land on B, one warning after $ms ms"

	# d. nothing but zproxy's own lines
	n=$(grep -cvE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z zproxy\[[0-9]+\]: ' "$ZLOG")
	[ "$n" -eq 0 ] ||
		fail "$what: $n line(s) in zproxy's stderr that are not its log lines (they bypass --log-file, --syslog and --log-format json): $(grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z zproxy\[[0-9]+\]: ' "$ZLOG" | head -n 3 | tr '\n' '|')"
	stop_zproxy
	ok "$what: every line zproxy wrote is one of its log lines"
}

subcase resolve

zp_done
