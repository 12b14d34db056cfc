#!/bin/bash
# rebalance-load.sh - --rebalance load (issue 27, section 3): framed
# streams leave a collector that cannot keep up for one that can, and
# stay there.
#   a. in each mode (ZP_MODES), two zp-logsend collectors: A reads
#      40 KB/s in all (--read-rate, --rcvbuf 64K: a collector behind), B
#      as fast as it can. zproxy --framing lf --balance roundrobin
#      --rebalance load --rebalance-rate 2; 8 connections of numbered
#      messages (100-300 bytes) at 200 a second each (about 40 KB/s a
#      connection: A's four come at 160 KB/s). Every stream leaves A
#      within 30 s (`zproxy ctl show streams A` empty; `show upstreams`
#      said A behind meanwhile, says B ok); each moved once,
#      reason=load, each move's decision logged with its figures
#      ("rebalance load: A is behind ... held back by its receive
#      window"); then for ZP_LOAD_WATCH seconds (60) nothing moves again
#      and A stays empty (no flapping); the senders end: every message
#      exactly once (each stream's runs whole and in order, zp-logsend
#      verify --raw --runs), no client reconnected (8 connects, each read
#      to EOF), /metrics counts the load moves; the collectors saw only
#      clean closes.
#   b. no false move: two fast collectors, --balance first (all 8
#      streams on A, 0 on B): --rebalance load moves nothing in 15 s (it
#      is not count), and every message arrives exactly once.
#   d. the client ends while its old upstream drains, in each mode: one
#      stream of 80 KB/s, --balance first onto A (40 KB/s), moves to the
#      empty B with half a megabyte still queued for A; it ends 8 s in:
#      its FIN waits for A to take what it had, and B (which took all it
#      was sent) is not failed meanwhile (--stall-timeout 2): no "has
#      failed" line, every message exactly once, no collector error.
#   c. a backup gives its framed streams back (issue 27 section 2):
#      -u A -u C,backup --check-interval 0.3, A not listening: 4 streams
#      on C; A starts: within 20 s none on C, each moved once to A
#      (reason=rebalance), every message exactly once.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
command -v jq >/dev/null || fail "jq is needed (apt-get install jq)"

CONNS=8
RATE=200			# messages a second a connection
# Everything of this test on 127.0.0.3: a port another test picked as
# free and then left unbound (an upstream meant to refuse) may be taken
# here meanwhile; its clients go to 127.0.0.1, never here.
ADDR=127.0.0.3
WATCH=${ZP_LOAD_WATCH:-60}	# seconds without a move, once settled

# ctl ARGS...: zproxy ctl on $CTL; output in $T/ctl.out, status returned.
ctl() {
	"$ZPROXY" ctl --control "$CTL" "$@" >"$T/ctl.out" 2>"$T/ctl.err" ||
		fail "zproxy ctl $*: $(head -c 300 "$T/ctl.err")"
}

# streams_on NAME: how many streams `show streams NAME` lists.
streams_on() {
	ctl --json show streams "$1"
	jq length "$T/ctl.out"
}

# load_of NAME: its state and its load, from show upstreams --json.
load_of() {
	ctl --json show upstreams
	jq -r --arg a "$1" '.[] | select(.name == $a) | "\(.state) \(.load)"' "$T/ctl.out"
}

# collect NAME ARGS...: a zp-logsend collector into $T/NAME/; sets C_PID,
# C_PORT.
collect() {
	local name=$1
	shift
	mkdir -p "$T/$name" || fail "mkdir $T/$name"
	zp_bg "$name" "$ZP_LOGSEND" collect -b "$ADDR" --dir "$T/$name" "$@"
	C_PID=$BG_PID
	C_PORT=$(wait_line "$T/$name.out" '^[0-9]+$' 10 "$C_PID") ||
		fail "zp-logsend collect did not start: $(head -c 300 "$T/$name.err")"
}

# moves_logged: the "moved:" lines in zproxy's log.
moves_logged() { grep -c ' moved: ' "$ZLOG"; }

case_behind() {
	local mode=$1 what="$mode: A behind" A B na t0 waited msgs moved n
	local id ids v spid apid bpid seen=0
	set_mode "$mode"
	collect a --read-rate 40K --rcvbuf 64K
	apid=$C_PID A=$ADDR:$C_PORT
	collect b
	bpid=$C_PID B=$ADDR:$C_PORT
	CTL=$T/ctl
	SPORT=$(free_port) || fail "zp-peer port failed"
	# What a moved stream had queued for A still goes to A, at A's
	# pace (a few hundred KB at 40 KB/s): --drain-timeout gives it time.
	start_zproxy -v -l "$ADDR:@PORT@" "${MODE_ARGS[@]}" --framing lf \
	    --balance roundrobin --rebalance load --rebalance-rate 2 --control "$CTL" \
	    --drain-timeout 60 --stats "127.0.0.1:$SPORT" -u "$A" -u "$B"
	# Long enough for the moves and the watch after them.
	msgs=$(( RATE * (WATCH + 25) ))
	zp_bg all.send "$ZP_LOGSEND" send "$ADDR" "$ZPORT" --conns "$CONNS" \
	    --msgs "$msgs" --framing lf --rate "$RATE" --min 100 --max 300 \
	    --seed "$RANDOM" --timeout $(( WATCH + 120 ))
	spid=$BG_PID
	t0=$(now_ms)
	# Every stream relaying, on A or B, before A's are counted.
	until [ $(( $(streams_on "$A") + $(streams_on "$B") )) -eq "$CONNS" ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: $(streams_on "$A") + $(streams_on "$B") streams, want $CONNS"
		sleep 0.05
	done
	# The streams A had: those that must move.
	ctl --json show streams "$A"
	ids=$(jq -r '.[].id' "$T/ctl.out" | sort -n | tr '\n' ' ')
	na=$(echo "$ids" | wc -w)
	[ "$na" -ge 1 ] || fail "$what: no stream on $A to begin with"
	t0=$(now_ms)
	until [ "$(streams_on "$A")" = 0 ]; do
		[ "$(load_of "$A")" = "ready behind" ] && seen=1
		[ $(( $(now_ms) - t0 )) -lt 30000 ] ||
			fail "$what: $(streams_on "$A") of $na streams still on $A after 30 s: $(grep -c 'rebalance load' "$ZLOG") load lines"
		alive "$spid" || fail "$what: the sender ended: $(head -c 300 "$T/all.send.err")"
		sleep 0.2
	done
	waited=$(( $(now_ms) - t0 ))
	[ "$seen" = 1 ] || fail "$what: show upstreams never said $A was behind"
	ok "$what: the $na streams on $A left it in $waited ms (show upstreams: behind)"
	note "$what: $na streams moved off the slow collector in $waited ms"
	for id in $ids; do
		n=$(grep -c "connection $id moved: .* from=$A to=$B reason=load " "$ZLOG")
		[ "$n" = 1 ] || fail "$what: connection $id moved $n times from $A to $B for load, want once: $(grep "connection $id moved" "$ZLOG" | head -n 3)"
	done
	n=$(grep -c "rebalance load: $A is behind (.*s): [0-9]* of [0-9]* streams held back by its receive window, [0-9]*% of the last second on average, [0-9]* at a zero window, [0-9]* bytes not sent, [0-9]* unacknowledged; one moves to $B " "$ZLOG")
	[ "$n" -ge "$na" ] || fail "$what: $n decisions logged with their figures for $na moves: $(grep 'rebalance load' "$ZLOG" | head -n 2)"
	ok "$what: each of the $na moved once, reason=load, the decision's figures logged"
	v=$(load_of "$B")
	[ "$v" = "ready ok" ] || fail "$what: show upstreams says $B is '$v', want 'ready ok'"
	# The watch: A stays empty, nothing moves any more.
	moved=$(moves_logged)
	t0=$(now_ms)
	while [ $(( $(now_ms) - t0 )) -lt $(( WATCH * 1000 )) ]; do
		[ "$(streams_on "$A")" = 0 ] ||
			fail "$what: a stream went back to $A $(( ($(now_ms) - t0) / 1000 )) s after they all left: $(grep ' moved: ' "$ZLOG" | tail -n 2)"
		[ "$(moves_logged)" = "$moved" ] ||
			fail "$what: a stream moved again after $(( ($(now_ms) - t0) / 1000 )) s: $(grep ' moved: ' "$ZLOG" | tail -n 1)"
		alive "$spid" || fail "$what: the sender ended during the watch: $(head -c 300 "$T/all.send.err")"
		sleep 1
	done
	ok "$what: no move and nothing back on $A for $WATCH s"
	stats_scrape
	expect 'zproxy_stream_moves_total{reason="load"}' == "$na" "$what"
	zp_wait_exit "$spid" $(( WATCH + 120 )) || fail "$what: the sender did not end"
	wait "$spid" || fail "$what: the sender: $(head -c 300 "$T/all.send.err")"
	logsend_sent "$what" all "$CONNS" "$msgs"
	# The old streams' last bytes reach A at its pace: its files are
	# whole once zproxy closed every connection to it.
	t0=$(now_ms)
	until [ "$(estab "${A##*:}")" = 0 ]; do
		[ $(( $(now_ms) - t0 )) -lt 60000 ] || fail "$what: connections to $A still open 60 s after the end"
		sleep 0.2
	done
	zp_stop "$apid"; zp_stop "$bpid"
	zp_wait_exit "$apid" 10; zp_wait_exit "$bpid" 10
	logsend_verify "$what" all "$CONNS" "$msgs" --raw --runs --exactly-once \
	    --framing lf "$T"/a/*.raw "$T"/b/*.raw
	ok "$what: $VERIFIED"
	! grep -q 'recv:' "$T/a.err" "$T/b.err" ||
		fail "$what: a collector saw an error: $(grep -h 'recv:' "$T/a.err" "$T/b.err" | head -n 2)"
	ok "$what: $CONNS connects, each read to EOF; the collectors saw clean closes"
	stop_zproxy
}

case_fast() {
	local what="no false move" A B spid msgs t0
	set_mode splice
	collect a
	A=$ADDR:$C_PORT
	collect b
	B=$ADDR:$C_PORT
	CTL=$T/ctl
	start_zproxy -v -l "$ADDR:@PORT@" --framing lf --balance first \
	    --rebalance load \
	    --rebalance-rate 10 --control "$CTL" -u "$A" -u "$B"
	msgs=$(( RATE * 15 ))
	zp_bg all.send "$ZP_LOGSEND" send "$ADDR" "$ZPORT" --conns "$CONNS" \
	    --msgs "$msgs" --framing lf --rate "$RATE" --min 100 --max 300 \
	    --seed "$RANDOM" --timeout 120
	spid=$BG_PID
	t0=$(now_ms)
	until [ "$(streams_on "$A")" = "$CONNS" ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: $(streams_on "$A") streams on $A, want all $CONNS"
		sleep 0.05
	done
	zp_wait_exit "$spid" 120 || fail "$what: the sender did not end"
	wait "$spid" || fail "$what: the sender: $(head -c 300 "$T/all.send.err")"
	logsend_sent "$what" all "$CONNS" "$msgs"
	[ "$(moves_logged)" = 0 ] || fail "$what: a stream moved: $(grep ' moved: ' "$ZLOG" | head -n 1)"
	! grep -q 'rebalance load' "$ZLOG" || fail "$what: $(grep 'rebalance load' "$ZLOG" | head -n 1)"
	logsend_verify "$what" all "$CONNS" "$msgs" --raw --streams --exactly-once \
	    --framing lf "$T"/a/*.raw
	ok "$what: all $CONNS streams on $A for 15 s, none moved ($A kept up); $VERIFIED"
	stop_zproxy
}

case_backup() {
	local what="a backup gives its streams back" pa C spid msgs t0 id ids n
	set_mode splice
	pa=$(free_port) || fail "zp-peer port failed"
	collect c
	C=$ADDR:$C_PORT
	CTL=$T/ctl
	start_zproxy -v -l "$ADDR:@PORT@" --framing lf --rebalance load \
	    --rebalance-rate 2 --check-interval 0.3 --control "$CTL" \
	    -u "$ADDR:$pa" -u "$C,backup"
	msgs=$(( 100 * 20 ))
	zp_bg all.send "$ZP_LOGSEND" send "$ADDR" "$ZPORT" --conns 4 \
	    --msgs "$msgs" --framing lf --rate 100 --min 100 --max 300 \
	    --seed "$RANDOM" --timeout 120
	spid=$BG_PID
	t0=$(now_ms)
	until [ "$(streams_on "$C")" = 4 ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: $(streams_on "$C") streams on the backup, want 4 (the primary is down)"
		sleep 0.05
	done
	ctl --json show streams "$C"
	ids=$(jq -r '.[].id' "$T/ctl.out" | tr '\n' ' ')
	collect a --port "$pa"
	t0=$(now_ms)
	until [ "$(streams_on "$C")" = 0 ]; do
		[ $(( $(now_ms) - t0 )) -lt 20000 ] || fail "$what: $(streams_on "$C") streams still on the backup 20 s after the primary came back"
		sleep 0.1
	done
	ok "$what: the backup's 4 streams on the primary $(( $(now_ms) - t0 )) ms after it came back"
	for id in $ids; do
		n=$(grep -c "connection $id moved: .* from=$C to=$ADDR:$pa reason=rebalance " "$ZLOG")
		[ "$n" = 1 ] || fail "$what: connection $id moved $n times from the backup, want once"
	done
	zp_wait_exit "$spid" 120 || fail "$what: the sender did not end"
	wait "$spid" || fail "$what: the sender: $(head -c 300 "$T/all.send.err")"
	logsend_sent "$what" all 4 "$msgs"
	logsend_verify "$what" all 4 "$msgs" --raw --runs --exactly-once \
	    --framing lf "$T"/c/*.raw "$T"/a/*.raw
	ok "$what: each moved once (reason=rebalance); $VERIFIED"
	stop_zproxy
}

# A stream moved off a slow collector ends while what it had queued for
# that collector still drains into it: its FIN waits for that (the old
# one may want a replay), and the collector it is on now, which took
# all it was sent, has not stalled meanwhile.
case_retiring() {
	local mode=$1 what="$1: the client ends while its old upstream drains"
	local A B spid msgs
	set_mode "$mode"
	collect ra --read-rate 40K --rcvbuf 64K
	A=$ADDR:$C_PORT
	collect rb
	B=$ADDR:$C_PORT
	CTL=$T/ctl
	start_zproxy -v -l "$ADDR:@PORT@" "${MODE_ARGS[@]}" --framing lf \
	    --balance first --rebalance load --rebalance-rate 2 \
	    --stall-timeout 2 --drain-timeout 60 --control "$CTL" \
	    -u "$A" -u "$B"
	# 80 KB/s for 8 s: A is behind from the first second, the stream
	# moves to the empty B about 3 s in with half a megabyte queued for
	# A, which takes it at 40 KB/s: long after the client's FIN.
	msgs=$(( 400 * 8 ))
	zp_bg all.send "$ZP_LOGSEND" send "$ADDR" "$ZPORT" --conns 1 \
	    --msgs "$msgs" --framing lf --rate 400 --min 100 --max 300 \
	    --seed "$RANDOM" --timeout 120
	spid=$BG_PID
	zp_wait_exit "$spid" 120 || fail "$what: the sender did not end"
	wait "$spid" || fail "$what: the sender: $(head -c 300 "$T/all.send.err")"
	logsend_sent "$what" all 1 "$msgs"
	grep -q "connection 1 moved: .* from=$A to=$B reason=load " "$ZLOG" ||
		fail "$what: the stream never moved off $A"
	! grep -q 'has failed' "$ZLOG" ||
		fail "$what: $(grep -m1 'has failed' "$ZLOG")"
	zp_stop "$C_PID"
	logsend_verify "$what" all 1 "$msgs" --raw --runs --exactly-once \
	    --framing lf "$T"/ra/*.raw "$T"/rb/*.raw
	! grep -q 'recv:' "$T/ra.err" "$T/rb.err" ||
		fail "$what: a collector saw an error: $(grep -h 'recv:' "$T/ra.err" "$T/rb.err" | head -n 1)"
	ok "$what: moved off $A, its FIN held until $A took what it had, $B not failed; $VERIFIED"
	stop_zproxy
}

for mode in $MODES; do
	subcase_bg case_behind "$mode"
	subcase_bg case_retiring "$mode"
done
subcase_bg case_fast
subcase_bg case_backup
subcases_wait
zp_done
