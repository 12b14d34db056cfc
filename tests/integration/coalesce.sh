#!/bin/bash
# coalesce.sh - --coalesce SEC: after a pass of its loop that left nothing
# waiting, a relay thread pauses SEC, so that small messages gather and
# go in fewer reads and writes. Nothing may be lost or held longer than
# the pause:
#   a. bulk: 16 MiB each way on one connection with --coalesce 0.02,
#      verified by SHA-256 both ways (passes stopped by their budget do not
#      pause: it must not crawl either, within the test's time);
#   b. the pause is there and bounded: 200 ping-pongs of 100 bytes to a
#      TCP_NODELAY echo with --coalesce 0.01: each round trip waits for
#      the pauses, one a way (p50 >= 5 ms; about 20 ms here, where it is
#      well under 1 ms without --coalesce), and they do not stack up
#      (p50 < 60 ms, p99 < 500 ms: the suite's load adds its own);
#   c. fan-in: 50 shippers x 400 lf messages (zp-logsend) through
#      --framing lf --coalesce 0.02, 1 and 2 threads, to rsyslog: every
#      message exactly once, each connection's in order;
#   d. start-up: --coalesce 0.0001 (below a millisecond), 2 (above a
#      second) and x are refused with one line and exit 64.
# In splice and copy modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

mkdata big.up $((16 * 1024 * 1024 + 77))
mkdata big.down $((16 * 1024 * 1024 + 5))

case_bulk() {
	local what="$mode: 16 MiB each way with --coalesce 0.02"
	peer_listen bulk-up -s "$T/big.down" -o "$T/bulk.got-up" -t 60
	local upid=$PEER_PID
	start_zproxy -v "${MODE_ARGS[@]}" --coalesce 0.02 \
	    -u "127.0.0.1:$PEER_PORT"
	peer bulk-client connect 127.0.0.1 "$ZPORT" -s "$T/big.up" \
	    -o "$T/bulk.got-down" -t 60 ||
		fail "$what: client: $(cat "$T/bulk-client.err")"
	peer_wait "$upid" bulk-up 30 ||
		fail "$what: upstream: $(cat "$T/bulk-up.err")"
	same_file "$T/big.up" "$T/bulk.got-up" "$what: client->upstream"
	same_file "$T/big.down" "$T/bulk.got-down" "$what: upstream->client"
	expect_conn_log "up=$(size "$T/big.up") down=$(size "$T/big.down") .*end=closed" "$what"
	stop_zproxy
	ok "$what: both ways verified (SHA-256)"
}

case_pingpong() {
	local what="$mode: 200 x 100-byte ping-pong with --coalesce 0.01"
	local rtt p50 p99
	peer_listen echo --echo --nodelay -t 60
	start_zproxy -v "${MODE_ARGS[@]}" --coalesce 0.01 \
	    -u "127.0.0.1:$PEER_PORT"
	peer pp connect 127.0.0.1 "$ZPORT" --pingpong 200 --msg-size 100 \
	    --nodelay -t 60 || fail "$what: $(cat "$T/pp.err")"
	rtt=$(grep '^rtt ' "$T/pp.out")
	p50=$(echo "$rtt" | sed 's/.*p50=\([0-9.]*\)ms.*/\1/')
	p99=$(echo "$rtt" | sed 's/.*p99=\([0-9.]*\)ms.*/\1/')
	awk -v a="$p50" 'BEGIN { exit !(a >= 5) }' ||
		fail "$what: round trips do not wait for the pause (p50 must be >= 5 ms): $rtt"
	# Two pauses a round trip; a loaded machine (the suite runs -j4
	# under ASan) adds its own: bounds that only a pause that does not
	# end, or that stacks up, would pass.
	awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(a < 60 && b < 500) }' ||
		fail "$what: round trips held too long (p50 must be < 60 ms, p99 < 500 ms): $rtt"
	expect_conn_log 'up=20000 down=20000 .*end=closed' "$what"
	stop_zproxy
	ok "$what: $rtt"
}

case_fanin() {
	local threads=$1 name=fanin-$mode-$1 conns=50 msgs=400
	local what="$mode: $conns shippers x $msgs lf messages, --coalesce 0.02, --threads $threads"
	start_collector rsyslog "$name"
	start_zproxy -v "${MODE_ARGS[@]}" --coalesce 0.02 --framing lf \
	    --threads "$threads" -u "127.0.0.1:$C_PORT"
	timeout -k 5 120 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$conns" --msgs "$msgs" --framing lf --max 400 \
	    --seed "$RANDOM" --timeout 100 >"$T/$name.send.out" \
	    2>"$T/$name.send.err" ||
		fail "$what: zp-logsend send: $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$what" "$name" "$conns" "$msgs"
	wait_lines "$C_LOG" $((conns * msgs)) 30 ||
		note "$what: $(lines "$C_LOG") of $((conns * msgs)) lines within 30s"
	logsend_verify "$what" "$name" "$conns" "$msgs" --exactly-once \
	    --ordered "$C_LOG"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
	ok "$what: every message exactly once, in order ($VERIFIED)"
}

case_startup() {
	local v rc
	for v in 0.0001 x 2; do
		"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:2 --coalesce "$v" --check \
		    >"$T/co.out" 2>"$T/co.err"
		rc=$?
		[ "$rc" = 64 ] || fail "--coalesce $v: exit $rc, want 64"
		[ "$(wc -l <"$T/co.err")" = 1 ] &&
		    grep -Eq "invalid coalesce '$v'|--coalesce $v: at most 1 second" \
		    "$T/co.err" ||
			fail "--coalesce $v: said '$(cat "$T/co.err")'"
	done
	ok "--coalesce 0.0001, x and 2 (above 1 s) refused, one line each, exit 64"
}

subcase case_startup
for mode in $MODES; do
	set_mode "$mode"
	subcase case_bulk
	subcase case_pingpong
	subcase case_fanin 1
	subcase case_fanin 2
done
zp_done
