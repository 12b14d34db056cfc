#!/bin/bash
# failover.sh - several upstreams: balancers, retries, passive and active
# health.
#   a. --balance first with 3 upstreams, #1 refusing: every connection
#      lands on #2 (the log's upstream= field, and the files #2 received;
#      #3 gets nothing), byte-exact both ways; #1 is logged down once;
#   b. --retries: 0 with #1 refusing lets the client go (end=upstream-
#      refused, upstream=#1) and #2 is never connected to; 1 with #1 and #2
#      refusing tries those two only (upstream=#2 in the log, #3 untouched);
#      the default tries every one: it lands on #3;
#   c. passive health (--retries 0 so that every attempt shows in the log):
#      --max-fails 2 --fail-timeout 4 (4 s: three transfers, or a listener's
#      start and a transfer, must fit inside a back-off; under sanitizers
#      on a loaded 2-core machine 2 s left too little room):
#      after two refusals "is down" is logged exactly once, then
#      connections skip #1 (no new refusal lines) and land on #2; after the
#      back-off #1 is tried again (one more refusal, still one "is down");
#      once a server listens there, after the back-off it is "is up"
#      (once) and used again;
#   d. active health: --check-interval 0.3 marks a dead upstream down with
#      no client traffic at all and up again when it comes back, one log
#      line each; while it is down clients skip it (--retries 0);
#   e. leastconn: with two held connections on #1, new connections go to #2
#      (three in a row: roundrobin would alternate);
#   f. source: zp-peer cannot bind a client address, so stability: 10
#      connections from 127.0.0.1 all land on the same one of 3 upstreams;
#   g. weights: -u A,weight=1 -u B,weight=3 with roundrobin: 40
#      connections land 10 on A and 30 on B (the log's upstream= and the
#      files each received), never more than 3 in a row on B; 400 clients
#      of zp-peer churn (200 a second) split 1:3 within 5 % (/metrics);
#   h. backup: -u A -u B -u C,backup --check-interval 0.3: C gets nothing
#      while A or B is up; with both stopped (each logged down), every
#      connection lands on C, byte-exact; once A listens again ('is up'),
#      connections land on A and C gets no more.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata up.dat 64K
mkdata down.dat 96K
UPSZ=65536
DOWNSZ=98304

# count REGEX: lines of the zproxy log matching the extended REGEX.
count() { grep -cE -- "$1" "$ZLOG" 2>/dev/null; }

# server NAME ARGS...: an upstream that serves connections until killed,
# each sending down.dat and writing what it got to $T/NAME.got.N. Sets
# SRV_PORT and SRV_PID.
server() {
	local name=$1; shift
	rm -f "$T/$name".got.*	# another subcase's
	peer_listen "$name" -n 0 -o "$T/$name.got.%d" -s "$T/down.dat" --allow-reset -t 60 "$@"
	SRV_PORT=$PEER_PORT
	SRV_PID=$PEER_PID
}

# xfer WHAT UPORT: one connection through zproxy that must land on the
# upstream listening on UPORT: the client sends up.dat and gets down.dat,
# the log line names that upstream and the byte counts.
xfer() {
	local what=$1 uport=$2
	rm -f "$T/xfer.got"
	peer xfer connect 127.0.0.1 "$ZPORT" -s "$T/up.dat" -o "$T/xfer.got" -t 20 ||
		fail "$what: client: $(cat "$T/xfer.err")"
	same_file "$T/down.dat" "$T/xfer.got" "$what (upstream->client)"
	expect_conn_log "upstream=127\.0\.0\.1:$uport mode=$mode up=$UPSZ down=$DOWNSZ .*end=closed" "$what"
}

# got_all NAME N WHAT: server NAME accepted exactly N connections (files
# NAME.got.0 .. NAME.got.N-1, no more), each holding up.dat.
got_all() {
	local name=$1 n=$2 what=$3 i have
	for ((i = 0; i < n; i++)); do
		wait_size "$T/$name.got.$i" "$UPSZ" 5 ||
			fail "$what: $name got no (complete) connection #$i"
		same_file "$T/up.dat" "$T/$name.got.$i" "$what: client->upstream, connection $i at $name"
	done
	have=$(find "$T" -maxdepth 1 -name "$name.got.*" | wc -l)
	[ "$have" -eq "$n" ] || fail "$what: $name accepted $have connections, expected $n"
}

# refused WHAT UPORT: one client must be let go within 3 s and the log say
# end=upstream-refused, naming UPORT's upstream. (A refusal takes
# milliseconds; 3 s is room for a loaded machine and still short of the
# 5 s --connect-timeout a client of a zproxy that missed it would wait.)
refused() {
	peer refused connect 127.0.0.1 "$ZPORT" --expect-close 3 -t 10 ||
		fail "$1: client not let go within 3 s: $(cat "$T/refused.out" "$T/refused.err" | head -n 2 | tr '\n' ' ')"
	expect_conn_log "upstream=127\.0\.0\.1:$2 .*end=upstream-refused" "$1"
}

# a. --balance first
balance_first() {
	local what="$mode: --balance first, #1 refuses" u1 u2 u3 i n
	server a2; u2=$SRV_PORT
	server a3; u3=$SRV_PORT
	u1=$(free_port -b 127.0.0.1)	# after the servers: none of theirs
	start_zproxy -v -m "$mode" --balance first \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2" -u "127.0.0.1:$u3"
	for i in 1 2 3 4 5 6; do
		xfer "$what: connection $i" "$u2"
	done
	got_all a2 6 "$what"
	got_all a3 0 "$what"
	n=$(count "upstream 127\.0\.0\.1:$u1 is down")
	[ "$n" -eq 1 ] || fail "$what: 'upstream 127.0.0.1:$u1 is down' logged $n times, expected once"
	[ "$(count 'is down')" -eq 1 ] || fail "$what: another upstream was logged down: $(grep 'is down' "$ZLOG")"
	stop_zproxy
	ok "$what: 6 connections all on #2 (log and server), byte-exact both ways, #3 untouched, #1 logged down once"
}

# b. --retries
retries() {
	local what u1 u2 u3
	what="$mode: --balance first --retries 0, #1 refuses"
	server b2; u2=$SRV_PORT
	u1=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" --balance first --retries 0 --max-fails 100 \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2"
	refused "$what: client 1" "$u1"
	refused "$what: client 2" "$u1"
	refused "$what: client 3" "$u1"
	got_all b2 0 "$what"
	[ "$(estab "$u2")" -eq 0 ] || fail "$what: #2 has connections"
	stop_zproxy
	zp_stop "$SRV_PID"
	ok "$what: 3 clients let go within 3 s, end=upstream-refused upstream=#1, #2 never connected to"

	what="$mode: --balance first --retries 1, #1 and #2 refuse"
	server b3; u3=$SRV_PORT
	u1=$(free_port -b 127.0.0.1)
	u2=$(free_port -b 127.0.0.1)
	[ "$u1" != "$u2" ] || u2=$(free_port -b 127.0.0.1)
	[ "$u1" != "$u2" ] || fail "$what: free_port gave $u1 twice"
	start_zproxy -v -m "$mode" --balance first --retries 1 --max-fails 100 \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2" -u "127.0.0.1:$u3"
	refused "$what: client 1" "$u2"
	refused "$what: client 2" "$u2"
	got_all b3 0 "$what"
	stop_zproxy
	ok "$what: let go after #1 and #2 (log names #2), #3 never connected to"

	what="$mode: --balance first, default --retries, #1 and #2 refuse"
	start_zproxy -v -m "$mode" --balance first --max-fails 100 \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2" -u "127.0.0.1:$u3"
	xfer "$what: client 1" "$u3"
	xfer "$what: client 2" "$u3"
	got_all b3 2 "$what"
	stop_zproxy
	ok "$what: every upstream tried once: lands on #3, byte-exact"
}

# c. passive health
passive() {
	local ft=4 u1 u2 t_down t_ref n
	local what="$mode: --max-fails 2 --fail-timeout $ft --retries 0"
	server c2; u2=$SRV_PORT
	u1=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" --balance first --retries 0 --max-fails 2 \
	    --fail-timeout "$ft" -u "127.0.0.1:$u1" -u "127.0.0.1:$u2"
	refused "$what: refusal 1" "$u1"
	[ "$(count 'is down')" -eq 0 ] || fail "$what: down after 1 refusal: $(grep 'is down' "$ZLOG")"
	refused "$what: refusal 2" "$u1"
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u1 is down" 5 "$ZPID" >/dev/null ||
		fail "$what: no 'upstream 127.0.0.1:$u1 is down' after 2 refusals"
	t_down=$(now_ms)
	xfer "$what: in the back-off, connection 1" "$u2"
	xfer "$what: in the back-off, connection 2" "$u2"
	xfer "$what: in the back-off, connection 3" "$u2"
	n=$(count 'end=upstream-refused')
	[ "$n" -eq 2 ] || fail "$what: $n refusals logged, expected 2 (the down upstream was tried)"
	ok "$what: 2 refusals, 'is down' logged, the next 3 connections skip #1 (no refusal) and land on #2"

	# wait out the back-off: the thing being timed
	sleep_until $((t_down + ft * 1000 + 200))
	refused "$what: after the back-off" "$u1"
	t_ref=$(now_ms)
	n=$(count "is down")
	[ "$n" -eq 1 ] || fail "$what: 'is down' logged $n times, expected once"
	ok "$what: after the back-off #1 is tried again (refused), 'is down' still logged once"

	rm -f "$T"/c1.got.*
	peer_listen c1 -p "$u1" -n 0 -o "$T/c1.got.%d" -s "$T/down.dat" --allow-reset -t 60
	xfer "$what: #1 listens again, still in its back-off" "$u2"
	[ "$(count 'is up')" -eq 0 ] || fail "$what: up before its back-off ended"
	sleep_until $((t_ref + ft * 1000 + 200))
	xfer "$what: #1 back, after the back-off" "$u1"
	xfer "$what: #1 back, next connection" "$u1"
	n=$(count "upstream 127\.0\.0\.1:$u1 is up")
	[ "$n" -eq 1 ] || fail "$what: 'upstream 127.0.0.1:$u1 is up' logged $n times, expected once"
	[ "$(count 'is down')" -eq 1 ] || fail "$what: 'is down' logged again"
	got_all c1 2 "$what"
	got_all c2 4 "$what"
	stop_zproxy
	ok "$what: once #1 listens and the back-off is over: 'is up' once, connections back on #1, byte-exact"
}

# d. active health
active() {
	local what="$mode: --check-interval 0.3" u1 u2 p1 t0 ms n
	peer_listen d1 -n 0 --allow-reset -t 60; u1=$PEER_PORT; p1=$PEER_PID
	server d2; u2=$SRV_PORT
	start_zproxy -v -m "$mode" --balance first --retries 0 --check-interval 0.3 \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2"
	zp_stop "$p1"
	zp_wait_exit "$p1" 5 >/dev/null
	t0=$(now_ms)
	# deadlines, not bounds: a loaded machine may take its time
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u1 is down" 10 "$ZPID" >/dev/null ||
		fail "$what: #1 stopped listening: no 'is down' within 10 s"
	ms=$(( $(now_ms) - t0 ))
	[ "$(conn_lines)" -eq 0 ] || fail "$what: there was client traffic?"
	sleep 0.7	# two more checks fail: nothing more may be logged
	n=$(count "is down")
	[ "$n" -eq 1 ] || fail "$what: 'is down' logged $n times, expected once"
	xfer "$what: #1 down, connection 1" "$u2"
	xfer "$what: #1 down, connection 2" "$u2"
	ok "$what: dead upstream logged down once after ${ms} ms with no client traffic; clients skip it"

	peer_listen d1b -p "$u1" -n 0 -o "$T/d1b.got.%d" -s "$T/down.dat" --allow-reset -t 60
	t0=$(now_ms)
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u1 is up" 10 "$ZPID" >/dev/null ||
		fail "$what: #1 listens again: no 'is up' within 10 s"
	ms=$(( $(now_ms) - t0 ))
	sleep 0.7	# two more checks pass: nothing more may be logged
	n=$(count "is up")
	[ "$n" -eq 1 ] || fail "$what: 'is up' logged $n times, expected once"
	[ "$(count 'is down')" -eq 1 ] || fail "$what: 'is down' logged again"
	xfer "$what: #1 back" "$u1"
	stop_zproxy
	ok "$what: back up after ${ms} ms, logged once; the next connection lands on #1"
}

# e. leastconn
leastconn() {
	local what="$mode: --balance leastconn" u1 u2 i holders=()
	peer_listen e1 -n 0 --no-shut --allow-reset -t 60; u1=$PEER_PORT
	u2=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" --balance leastconn --max-fails 100 \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2"
	# Two held connections on #1: the second one tries #2 (fewer pairs),
	# is refused there, and falls back to #1.
	for i in 1 2; do
		zp_bg "e-hold$i" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --hold -t 60
		holders+=("$BG_PID")
		wait_line "$T/e-hold$i.out" '^connected 1$' 5 "$BG_PID" >/dev/null ||
			fail "$what: held client $i: $(cat "$T/e-hold$i.err")"
		wait_estab "$u1" "$i" 5 ||
			fail "$what: #1 has $(estab "$u1") connections, expected $i"
	done
	server e2 -p "$u2"
	for i in 1 2 3; do
		xfer "$what: #1 holds 2, connection $i" "$u2"
	done
	got_all e2 3 "$what"
	[ "$(estab "$u1")" -eq 2 ] || fail "$what: #1 has $(estab "$u1") connections, expected 2"
	for i in "${holders[@]}"; do
		zp_stop "$i"
		zp_wait_exit "$i" 5 >/dev/null
	done
	stop_zproxy
	ok "$what: with 2 pairs held on #1, 3 new connections in a row go to #2, byte-exact"
}

# f. source
source_hash() {
	local what="$mode: --balance source" u1 u2 u3 i first up
	server f1; u1=$SRV_PORT
	server f2; u2=$SRV_PORT
	server f3; u3=$SRV_PORT
	start_zproxy -v -m "$mode" --balance source \
	    -u "127.0.0.1:$u1" -u "127.0.0.1:$u2" -u "127.0.0.1:$u3"
	first=
	for i in 1 2 3 4 5 6 7 8 9 10; do
		peer f-client connect 127.0.0.1 "$ZPORT" -s "$T/up.dat" -o "$T/f.got" -t 20 ||
			fail "$what: client $i: $(cat "$T/f-client.err")"
		same_file "$T/down.dat" "$T/f.got" "$what: client $i"
		expect_conn_log "client=127\.0\.0\.1:[0-9]+ upstream=127\.0\.0\.1:[0-9]+ .*end=closed" "$what: client $i"
		up=$(field upstream "$LAST_CONN_LOG")
		[ -n "$first" ] || first=$up
		[ "$up" = "$first" ] || fail "$what: client $i went to $up, earlier ones to $first"
	done
	case $first in
	"127.0.0.1:$u1") got_all f1 10 "$what"; got_all f2 0 "$what"; got_all f3 0 "$what" ;;
	"127.0.0.1:$u2") got_all f2 10 "$what"; got_all f1 0 "$what"; got_all f3 0 "$what" ;;
	"127.0.0.1:$u3") got_all f3 10 "$what"; got_all f1 0 "$what"; got_all f2 0 "$what" ;;
	*) fail "$what: upstream $first is none of the three" ;;
	esac
	stop_zproxy
	ok "$what: 10 connections from 127.0.0.1 all on $first (log and server), byte-exact"
}

# g. weights
weights() {
	local what="$mode: -u ...,weight=1 -u ...,weight=3" u1 u2 i up run=0 last=
	local n1=0 n2=0
	server g1; u1=$SRV_PORT
	server g2; u2=$SRV_PORT
	start_zproxy -v -m "$mode" --balance roundrobin --max-fails 100 \
	    -u "127.0.0.1:$u1,weight=1" -u "127.0.0.1:$u2,weight=3"
	for ((i = 1; i <= 40; i++)); do
		peer g-client connect 127.0.0.1 "$ZPORT" -s "$T/up.dat" -o "$T/g.got" -t 20 ||
			fail "$what: client $i: $(cat "$T/g-client.err")"
		same_file "$T/down.dat" "$T/g.got" "$what: client $i"
		expect_conn_log "upstream=127\.0\.0\.1:[0-9]+ .*end=closed" "$what: client $i"
		up=$(field upstream "$LAST_CONN_LOG")
		case $up in
		"127.0.0.1:$u1") n1=$((n1 + 1)) ;;
		"127.0.0.1:$u2") n2=$((n2 + 1)) ;;
		*) fail "$what: client $i went to $up" ;;
		esac
		if [ "$up" = "$last" ]; then run=$((run + 1)); else run=1; fi
		last=$up
		[ "$run" -le 3 ] || fail "$what: $run clients in a row on $up"
	done
	[ "$n1" -eq 10 ] && [ "$n2" -eq 30 ] ||
		fail "$what: $n1 and $n2 of 40 connections, expected 10 and 30"
	got_all g1 10 "$what"
	got_all g2 30 "$what"
	stop_zproxy
	ok "$what: 40 connections, 10 on the first and 30 on the second (log and servers), byte-exact, spread out"
	# 400 clients, many at once (zp-peer churn, 200 a second, each
	# answered byte for byte by echo servers): 1:3 within 5 %.
	peer_listen g3 --echo -n 0 -t 0 --allow-reset; u1=$PEER_PORT
	peer_listen g4 --echo -n 0 -t 0 --allow-reset; u2=$PEER_PORT
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -m "$mode" --balance roundrobin --stats "127.0.0.1:$SPORT" \
	    -u "127.0.0.1:$u1,weight=1" -u "127.0.0.1:$u2,weight=3"
	peer g-churn churn 127.0.0.1 "$ZPORT" --rate 200 --duration 2 ||
		fail "$what: 400 clients: $(tail -n 2 "$T/g-churn.err")"
	stats_scrape
	n1=$(val "zproxy_upstream_connections_total{upstream=\"127.0.0.1:$u1\"}")
	n2=$(val "zproxy_upstream_connections_total{upstream=\"127.0.0.1:$u2\"}")
	[ $((n1 + n2)) -eq 400 ] && [ "$n1" -ge 95 ] && [ "$n1" -le 105 ] ||
		fail "$what: 400 clients split $n1 and $n2, want 100 and 300 within 5 %"
	stop_zproxy
	ok "$what: 400 clients at 200 a second, $n1 and $n2 (1:3 within 5 %), each answered whole: $(cat "$T/g-churn.out")"
}

# whole NAME: how many of server NAME's connections brought all of up.dat
# (the health checks' connections bring nothing).
whole() {
	local f n=0
	for f in "$T/$1".got.*; do
		[ -e "$f" ] && cmp -s "$T/up.dat" "$f" && n=$((n + 1))
	done
	echo "$n"
}

# h. backup
backup() {
	local what="$mode: -u A -u B -u C,backup" u1 u2 u3 p1 p2 i
	peer_listen h1 -n 0 -o "$T/h1.got.%d" -s "$T/down.dat" --allow-reset -t 60
	u1=$PEER_PORT; p1=$PEER_PID
	peer_listen h2 -n 0 -o "$T/h2.got.%d" -s "$T/down.dat" --allow-reset -t 60
	u2=$PEER_PORT; p2=$PEER_PID
	server h3; u3=$SRV_PORT
	start_zproxy -v -m "$mode" --balance roundrobin --retries 0 \
	    --check-interval 0.3 -u "127.0.0.1:$u1" -u "127.0.0.1:$u2" \
	    -u "127.0.0.1:$u3,backup"
	for i in 1 2 3 4; do
		xfer "$what: A and B up, connection $i" "$([ $((i % 2)) -eq 1 ] && echo "$u1" || echo "$u2")"
	done
	for i in "$p1" "$p2"; do
		zp_stop "$i"
		zp_wait_exit "$i" 5 >/dev/null
	done
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u1 is down" 10 "$ZPID" >/dev/null ||
		fail "$what: A stopped: no 'is down' within 10 s"
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u2 is down" 10 "$ZPID" >/dev/null ||
		fail "$what: B stopped: no 'is down' within 10 s"
	[ "$(whole h3)" -eq 0 ] || fail "$what: C got a client while A or B was up"
	for i in 1 2 3 4; do
		xfer "$what: A and B down, connection $i" "$u3"
	done
	[ "$(whole h3)" -eq 4 ] || fail "$what: C holds $(whole h3) whole connections, expected 4"
	peer_listen h1b -p "$u1" -n 0 -o "$T/h1b.got.%d" -s "$T/down.dat" --allow-reset -t 60
	wait_line "$ZLOG" "upstream 127\.0\.0\.1:$u1 is up" 10 "$ZPID" >/dev/null ||
		fail "$what: A listens again: no 'is up' within 10 s"
	for i in 1 2 3; do
		xfer "$what: A back, connection $i" "$u1"
	done
	[ "$(whole h3)" -eq 4 ] || fail "$what: C got more clients once A was back"
	[ "$(whole h1b)" -eq 3 ] || fail "$what: A holds $(whole h1b) whole connections, expected 3"
	stop_zproxy
	ok "$what: the backup got nothing while A or B was up, all 4 connections once both were down, none once A was back; byte-exact"
}

for mode in $MODES; do
	subcase balance_first
	subcase retries
	subcase passive
	subcase active
	subcase leastconn
	subcase source_hash
	subcase weights
	subcase backup
done

zp_done
