#!/bin/bash
# stall.sh - a collector that stops reading (issue 32, section 1): two
# real collectors behind zproxy --framing lf --balance first
# --replay-window 1M --stall-timeout 2, the first rsyslog, the second
# syslog-ng; CONNS long-lived connections of MSGS numbered messages each
# (zp-logsend send), all on rsyslog (--balance first). Once STOP_AT
# messages went out on every connection, rsyslog is stopped (SIGSTOP: its
# connections stay open, its TCP windows shut) and the sender goes on.
# In splice and copy mode:
#   a. the sender sends everything and reads every connection to its EOF
#      (exit 0): no client waits on the stopped collector, none is reset;
#   b. every connection moved once, reason=upstream-stalled, from
#      rsyslog to syslog-ng, its replay window sent again (replayed= more
#      than 0), none "could not move";
#   c. every message reached a collector at least once, each intact,
#      but for at most one cut message a connection in rsyslog's file:
#      continued (SIGCONT), it writes what its kernel had acknowledged,
#      and a connection zproxy left in the middle of a message ends there
#      (the whole message went to syslog-ng, from the replay window);
#   d. /metrics: zproxy_stream_moves_total{reason="upstream-stalled"} is
#      the number of connections.
# The closing note's figures (written, received, duplicated, lost) come
# from c. Then case_lifetime (below): the attack's run of planned moves
# off a stopped rsyslog.
# ZP_STALL_CONNS, ZP_STALL_MSGS override the counts.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
note "$(collector_versions)"

CONNS=${ZP_STALL_CONNS:-10}
MSGS=${ZP_STALL_MSGS:-2000}
STOP_AT=$((MSGS / 4))

# collectors_start NAME: rsyslog (A) and syslog-ng (B), lf; sets the
# calling case's apid aport alog and bpid bport blog (bash's dynamic
# scope: they are its locals).
collectors_start() {
	start_collector rsyslog "$1-a" "" lf
	apid=$C_PID aport=$C_PORT alog=$C_LOG
	start_collector syslog-ng "$1-b" "" lf
	bpid=$C_PID bport=$C_PORT blog=$C_LOG
}

# collectors_stop WHAT: once their files stopped growing, stop both.
collectors_stop() {
	settle "$blog" 30 || note "$1: syslog-ng's file still grows after 30s"
	settle "$alog" 30 || note "$1: rsyslog's file still grows after 30s"
	kill_collector "$apid" "$aport" "$1: rsyslog"
	kill_collector "$bpid" "$bport" "$1: syslog-ng"
}

# case_stall MODE: the run above in MODE.
case_stall() {
	local mode=$1 what name go spid apid aport alog bpid bport blog rc
	local moves bad sport v
	what="$mode: rsyslog stopped (SIGSTOP), syslog-ng takes over"
	name=stall-$mode
	go=$T/$name.go
	set_mode "$mode"
	collectors_start "$name"
	sport=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" --framing lf --balance first \
	    --replay-window 1M --stall-timeout 2 --stats "127.0.0.1:$sport" \
	    -u "127.0.0.1:$aport" -u "127.0.0.1:$bport"
	SPORT=$sport
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$CONNS" --msgs "$MSGS" --framing lf --max 2000 \
	    --seed "$RANDOM" --pause-at "$STOP_AT" --go "$go" --timeout 100
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$what: the sender did not pause at $STOP_AT messages: $(tail -n 1 "$T/$name.send.err")"
	[ "$(estab "$aport")" = "$CONNS" ] ||
		fail "$what: $(estab "$aport") of $CONNS connections on rsyslog at the pause"
	ours "$apid" || fail "$what: rsyslog is not ours"
	kill -STOP "$apid"
	: >"$go"
	peer_wait "$spid" "$name.send" 100
	rc=$?
	kill -CONT "$apid"
	[ "$rc" = 0 ] ||
		fail "$what: the sender failed (status $rc): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$what" "$name" "$CONNS" "$MSGS"
	ok "$what: the sender sent $((CONNS * MSGS)) messages ($SENT_BYTES bytes) and read each of its $CONNS connections to EOF"

	# b. one move a connection, for the stall, with a replay
	! grep -q 'could not move' "$ZLOG" ||
		fail "$what: $(grep -m 1 'could not move' "$ZLOG")"
	grep 'connection [0-9]* moved:' "$ZLOG" >"$T/$name.moves"
	moves=$(grep -c . "$T/$name.moves")
	[ "$moves" = "$CONNS" ] ||
		fail "$what: $moves move lines, want $CONNS: $(head -n 3 "$T/$name.moves" | tr '\n' ' ')"
	bad=$(grep -v -m 1 " from=127.0.0.1:$aport to=127.0.0.1:$bport reason=upstream-stalled " "$T/$name.moves")
	[ -z "$bad" ] || fail "$what: a move not for the stall: $bad"
	! grep -q ' replayed=0$' "$T/$name.moves" ||
		fail "$what: a move replayed nothing: $(grep -m 1 ' replayed=0$' "$T/$name.moves")"
	ok "$what: $moves moves for the stall, each with a replay"

	# d. the metrics
	stats_scrape
	v=$(series 'zproxy_stream_moves_total{reason="upstream-stalled"}')
	[ "$v" = "$CONNS" ] ||
		fail "$what: zproxy_stream_moves_total{reason=\"upstream-stalled\"} is '$v', want $CONNS"
	stop_zproxy

	# c. at least once, each intact
	collectors_stop "$what"
	"$ZP_LOGSEND" verify -v --conns "$CONNS" --msgs "$MSGS" \
	    --max-partial "$CONNS" "$alog" >"$T/$name-a.verify.out" \
	    2>"$T/$name-a.verify.err" ||
		fail "$what: rsyslog's file: $(cat "$T/$name-a.verify.out") $(grep -v '^zp-logsend: \(missing\|duplicate\)' "$T/$name-a.verify.err" | head -n 3 | tr '\n' ' ')"
	"$ZP_LOGSEND" verify -v --conns "$CONNS" --msgs "$MSGS" \
	    "$blog" >"$T/$name-b.verify.out" 2>"$T/$name-b.verify.err" ||
		fail "$what: syslog-ng's file: $(cat "$T/$name-b.verify.out") $(grep -v '^zp-logsend: \(missing\|duplicate\)' "$T/$name-b.verify.err" | head -n 3 | tr '\n' ' ')"
	"$ZP_LOGSEND" verify -v --conns "$CONNS" --msgs "$MSGS" \
	    --max-partial "$CONNS" --at-least-once "$alog" "$blog" \
	    >"$T/$name.verify.out" 2>"$T/$name.verify.err" ||
		fail "$what: the two files together: $(cat "$T/$name.verify.out") $(grep -v '^zp-logsend: duplicate' "$T/$name.verify.err" | head -n 3 | tr '\n' ' ')"
	note "$what: rsyslog: $(head -n 1 "$T/$name-a.verify.out"); syslog-ng: $(head -n 1 "$T/$name-b.verify.out")"
	ok "$what: every message reached a collector at least once, intact: $(head -n 1 "$T/$name.verify.out")"
}

# case_lifetime MODE: the issue's own run: 20 streams, round robin over
# rsyslog and syslog-ng, --max-lifetime 2 --drain-timeout 3 (planned
# moves every 2 s, an old upstream given up after 3), rsyslog stopped
# mid-run. Streams leave it by a planned move (its unacknowledged bytes
# replayed when it is given up) or by the stall (--stall-timeout 4);
# every client reads its EOF, every message reaches a collector at least
# once, whole but for one cut message a stream in rsyslog's file. A
# stream whose last bytes the stopped rsyslog's kernel acknowledged
# (its receive buffer had grown while it read) has its FIN passed on and
# nothing to move: its client hears EOF at --fin-timeout (5 here, 300 by
# default), and rsyslog writes the bytes once it continues.
case_lifetime() {
	local mode=$1 what name go spid apid aport alog bpid bport blog rc
	local conns=20 msgs=1000
	what="$mode: --max-lifetime 2 --drain-timeout 3, rsyslog stopped"
	name=lt-$mode
	go=$T/$name.go
	set_mode "$mode"
	collectors_start "$name"
	start_zproxy -v "${MODE_ARGS[@]}" --framing lf --balance roundrobin \
	    --replay-window 1M --max-lifetime 2 --drain-timeout 3 \
	    --stall-timeout 4 --fin-timeout 5 \
	    -u "127.0.0.1:$aport" -u "127.0.0.1:$bport"
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$conns" --msgs "$msgs" --framing lf --min 900 --max 1100 \
	    --seed "$RANDOM" --pause-at $((msgs / 4)) --go "$go" --timeout 100
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$what: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	ours "$apid" || fail "$what: rsyslog is not ours"
	kill -STOP "$apid"
	: >"$go"
	peer_wait "$spid" "$name.send" 100
	rc=$?
	kill -CONT "$apid"
	[ "$rc" = 0 ] ||
		fail "$what: the sender failed (status $rc): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$what" "$name" "$conns" "$msgs"
	ok "$what: $conns clients sent $((conns * msgs)) messages and each read its EOF"
	stop_zproxy
	collectors_stop "$what"
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" \
	    --max-partial "$conns" --at-least-once "$alog" "$blog" \
	    >"$T/$name.verify.out" 2>"$T/$name.verify.err" ||
		fail "$what: $(cat "$T/$name.verify.out") $(grep -v '^zp-logsend: duplicate' "$T/$name.verify.err" | head -n 3 | tr '\n' ' ')"
	note "$what: moves: $(grep -c 'reason=max-lifetime' "$ZLOG") max-lifetime, $(grep -c 'reason=upstream-stalled' "$ZLOG") upstream-stalled; $(grep -c 'the replay window goes again to [0-9]' "$ZLOG") replays after an old upstream was given up"
	ok "$what: every message at a collector at least once: $(head -n 1 "$T/$name.verify.out")"
}

# One mode after the other, not side by side (subcase_bg): each case
# holds a 1M replay window a stream (20 streams in case_lifetime), in
# pipes, which an unprivileged zproxy takes from the per-user budget
# (fs.pipe-user-pages-soft, 64 MiB) that every zproxy of the parallel
# tests shares, a quarter of it prepared by each in splice mode: the two
# modes at once and collector-moves.sh beside them left a window
# without its pipe (EPERM, "no replay window could be kept").
for mode in $MODES; do
	subcase case_stall "$mode"
	subcase case_lifetime "$mode"
done

zp_done
