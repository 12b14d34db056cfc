#!/bin/bash
# replay.sh - --replay-window (issue 12): a collector killed with messages
# it had acknowledged but not yet written loses nothing when zproxy keeps
# the last bytes it sent and sends them again to the next collector.
#
# Collector A is a mini collector (zp-logsend collect --lag LAG) that
# holds each connection's last LAG bytes in memory before writing them,
# like a collector's own queue: a kill -9 loses exactly those, although
# A's kernel acknowledged them long before. B is a plain mini collector.
# CONNS connections (zp-logsend send, --balance first: all on A) send
# MSGS numbered messages each and pause half-way; A is killed with
# SIGKILL; the senders go on. In splice and copy mode, lf and octet:
#   a. with --replay-window 1M: the senders end well (no client dropped,
#      one connect each), every connection moved from A to B once and
#      ended closed on B; each move line says replayed= at least LAG;
#   b. every message is in A's or B's files at least once, intact, and
#      each file is one connection's messages in order without a gap
#      (verify --raw --runs --at-least-once; A's last frame may be cut
#      by the kill); some are there twice (what A had kept is resent);
#   c. zproxy_replayed_bytes_total and the counters line's replayed= are
#      the sum of the move lines' replayed=;
#   d. without --replay-window the same run loses messages (the part of
#      the test that shows it can fail): A's held bytes are gone, B
#      starts after them.
# Counts: ZP_REPLAY_CONNS (8) x ZP_REPLAY_MSGS (3000) messages of 1 to
# 2000 bytes a case, LAG 100000.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"

CONNS=${ZP_REPLAY_CONNS:-8}
MSGS=${ZP_REPLAY_MSGS:-3000}
LAG=100000

# collect NAME [--lag N]: a mini collector writing $T/NAME/conn-N.raw;
# sets COL_PID, COL_PORT.
collect() {
	local name=$1
	shift
	mkdir -p "$T/$name"
	zp_bg "$name.collect" "$ZP_LOGSEND" collect --dir "$T/$name" "$@"
	COL_PID=$BG_PID
	COL_PORT=$(wait_line "$T/$name.collect.out" '^[0-9]+$' 10 "$COL_PID") ||
		fail "zp-logsend collect $name did not start: $(head -c 300 "$T/$name.collect.err")"
}

# raw_files DIR...: the non-empty conn-*.raw files of each DIR.
raw_files() {
	local d f
	for d in "$@"; do
		for f in "$T/$d"/conn-*.raw; do
			[ -s "$f" ] && echo "$f"
		done
	done
}

# to_port_queued PORT: bytes waiting, unread, in the receive queues of
# the established sockets on the listening side of PORT.
to_port_queued() {
	ss -Htn state established "( sport = :$1 )" 2>/dev/null |
		awk '{ s += $1 } END { print s + 0 }'
}

# replay_case MODE FRAMING WINDOW: WINDOW 0 runs without a replay.
replay_case() {
	local mode=$1 framing=$2 window=$3 name="rp-$1-$2-$3" what rc
	local apid pa pb deadline moves line r sum=0 files v
	what="$mode/$framing, --replay-window $window"
	set_mode "$mode"
	collect "$name-A" --lag "$LAG"
	apid=$COL_PID pa=$COL_PORT
	collect "$name-B"
	pb=$COL_PORT
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
	    --balance first --replay-window "$window" \
	    --stats "127.0.0.1:$SPORT" -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	zp_bg "$name" timeout -k 5 90 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$CONNS" --msgs "$MSGS" --framing "$framing" \
	    --min 1 --max 2000 --pause-at "$((MSGS / 2))" --go "$T/$name.go" \
	    --timeout 80
	local spid=$BG_PID
	wait_line "$T/$name.out" '^paused$' 30 "$spid" >/dev/null ||
		fail "$what: the sender did not pause: $(tail -n 1 "$T/$name.err")"
	[ "$(estab "$pa")" = "$CONNS" ] ||
		fail "$what: $(estab "$pa") connections on A at the pause, want $CONNS"
	# What A read of the first half must be in its hands before the kill.
	deadline=$(( $(now_ms) + 10000 ))
	while [ "$(to_port_queued "$pa")" != 0 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: A did not read what it was sent within 10s"
		sleep 0.02
	done
	ours "$apid" || fail "$what: A is not ours"
	kill -KILL "$apid"
	zp_wait_exit "$apid" 5 >/dev/null 2>&1
	deadline=$(( $(now_ms) + 10000 ))
	while [ "$(grep -c 'connection [0-9]* moved:' "$ZLOG")" -lt "$CONNS" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: $(grep -c 'connection [0-9]* moved:' "$ZLOG") moves within 10s of the kill, want $CONNS: $(grep -m 1 'could not move' "$ZLOG")"
		sleep 0.02
	done
	: >"$T/$name.go"
	peer_wait "$spid" "$name" 60
	rc=$?
	[ "$rc" = 0 ] || fail "$what: the sender failed (status $rc): $(tail -n 1 "$T/$name.err")"
	grep -q "^connects=$CONNS " "$T/$name.out" ||
		fail "$what: the sender did not make exactly $CONNS connects: $(cat "$T/$name.out")"
	for ((i = 0; i < CONNS; i++)); do
		expect_conn_log " upstream=127.0.0.1:$pb .* end=closed" \
		    "$what: connection $((i + 1)) of $CONNS" 20
	done
	grep 'connection [0-9]* moved:' "$ZLOG" >"$T/$name.moves"
	moves=$(grep -c . "$T/$name.moves")
	[ "$moves" = "$CONNS" ] || fail "$what: $moves move lines, want $CONNS"
	! grep -v -q " from=127.0.0.1:$pa to=127.0.0.1:$pb reason=upstream-failed " "$T/$name.moves" ||
		fail "$what: a move not from A to B: $(grep -v -m 1 " from=127.0.0.1:$pa to=127.0.0.1:$pb " "$T/$name.moves")"
	while read -r line; do
		r=$(field replayed "$line")
		[ -n "$r" ] || fail "$what: no replayed= in: $line"
		if [ "$window" = 0 ]; then
			[ "$r" = 0 ] || fail "$what: replayed=$r without a window: $line"
		else
			[ "$r" -ge "$LAG" ] ||
				fail "$what: replayed=$r, less than what A held ($LAG): $line"
		fi
		sum=$((sum + r))
	done <"$T/$name.moves"
	stats_scrape
	stats_is zproxy_replayed_bytes_total "$sum" "$what"
	stop_zproxy
	grep -q "moves=$CONNS framing-errors=0 replayed=$sum;" "$ZLOG" ||
		fail "$what: the counters line does not say moves=$CONNS framing-errors=0 replayed=$sum: $(grep -m 1 'replayed=' "$ZLOG")"
	mapfile -t files < <(raw_files "$name-A" "$name-B")
	"$ZP_LOGSEND" verify -v --raw --runs --tail-ok --conns "$CONNS" \
	    --msgs "$MSGS" --framing "$framing" "${files[@]}" \
	    >"$T/$name.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/$name.verify" | tr '\n' ' ')"
	v=$(grep '^sent=' "$T/$name.verify" | tail -n 1)
	if [ "$window" = 0 ]; then
		[ "$(field missing "$v")" -gt 0 ] ||
			fail "$what: nothing lost without a replay ($v): the test cannot tell"
		[ "$(field duplicates "$v")" = 0 ] ||
			fail "$what: duplicates without a replay: $v"
		ok "$what: A's kill lost what it held: $v"
		return
	fi
	[ "$(field missing "$v")" = 0 ] || fail "$what: messages lost: $v"
	[ "$(field duplicates "$v")" -gt 0 ] ||
		fail "$what: no message twice, so nothing was replayed: $v"
	ok "$what: no client dropped, $moves moves, $sum bytes replayed; every message at least once, whole, in order per file: $v"
}

for mode in $MODES; do
	for framing in lf octet; do
		subcase replay_case "$mode" "$framing" 1M
	done
	subcase replay_case "$mode" lf 0
done

zp_done
