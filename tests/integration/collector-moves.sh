#!/bin/bash
# collector-moves.sh - kill -9 a real collector mid-run (issue 12): two
# collectors behind zproxy --framing lf|octet --balance leastconn, CONNS
# long-lived connections of MSGS numbered messages each (zp-logsend send,
# payloads 1..16384 bytes). The sender pauses once KILL_AT messages went
# out on every connection; one collector is killed with SIGKILL, its port
# closes, the sender goes on. Then, in splice and copy mode, lf and octet
# framing, rsyslog and syslog-ng each killed and each surviving:
#   a. the sender exits 0: no client connection was reset or ended early;
#      zproxy logged CONNS connections end=closed, each ending on the
#      survivor;
#   b. one "moved:" line per connection that was on the killed collector
#      (from= it, to= the survivor), none "could not move";
#   c. the survivor's file: every message intact, none twice; the killed
#      collector's file: every line a whole message too, but a last
#      one its SIGKILL cut mid-write; no message in both (zproxy never
#      sends a message twice);
#   d. /metrics: zproxy_stream_moves_total{reason="upstream-failed"} is
#      the number of move lines; zproxy_frames_total of the survivor is
#      the number of messages it wrote (exact in copy mode and for octet
#      frames; in splice mode lf frames are spliced unread and counted
#      only where zproxy reads them: > 0 there);
#   e. every message made after the kill (seq >= KILL_AT, every
#      connection) reached the survivor: the moved streams go on whole.
# A collector restarted under --rebalance (one case a mode, case_restart
# below): its streams leave it, come back, exactly once.
# With --replay-window 1M (one case a mode), c. becomes: every message is
# in one file or both (resent), none missing, each intact; and no move
# cuts (cut=0) or replays nothing.
# What is missing overall is noted with the moves' unacked= and cut=: the
# messages a collector had read but not yet written at SIGKILL are lost
# with it, which no proxy sees, so missing is not bounded by them.
# Counts: 20 x 1000 messages a case (about 165 MB), the kill at 500. At
# the pause each connection has sent about 4 MB, more than its socket
# buffers and pipes and the 1M replay window hold, and the collectors
# have written it all (the notes say so); the 500 after the kill are
# 4 MB a moved stream. 20 x 2000 (the count until December 2026) proved
# nothing more and took twice as long (~45 s under ASan, 200 s under
# TSan); ZP_CM_CONNS, ZP_CM_MSGS and ZP_CM_KILL_AT override.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
note "$(collector_versions)"

CONNS=${ZP_CM_CONNS:-20}
MSGS=${ZP_CM_MSGS:-1000}
KILL_AT=${ZP_CM_KILL_AT:-$((MSGS / 2))}

# verify_file NAME FILE...: zp-logsend verify; its summary in VERIFY,
# its numbers in V_RECEIVED, V_DUPS, V_MISSING, V_BAD. It fails only on
# a bad message (partial, merged, wrong CRC, an id out of range).
verify_file() {
	local name=$1
	shift
	"$ZP_LOGSEND" verify -v --conns "$CONNS" --msgs "$MSGS" "$@" \
	    >"$T/$name.verify.out" 2>"$T/$name.verify.err"
	VERIFY_RC=$?
	VERIFY=$(cat "$T/$name.verify.out")
	V_RECEIVED=$(field received "$VERIFY")
	V_DUPS=$(field duplicates "$VERIFY")
	V_MISSING=$(field missing "$VERIFY")
	V_BAD=$(field bad "$VERIFY")
	[ -n "$V_BAD" ] ||
		fail "$name: zp-logsend verify said '$VERIFY': $(tail -n 2 "$T/$name.verify.err")"
}

# after_kill FILE: how many distinct messages with seq >= KILL_AT FILE
# holds; the first few ids missing go to $T/after.missing.
after_kill() {
	awk -v k="$KILL_AT" -v conns="$CONNS" -v msgs="$MSGS" \
	    -v miss="$T/after.missing" '
	match($0, /(^| )c=[0-9]+ s=[0-9]+ /) {
		split(substr($0, RSTART, RLENGTH), f, /[ =]/)
		# f: "" or "c", ...: take the numbers after c= and s=
		for (i = 1; i in f; i++) {
			if (f[i] == "c") c = f[i + 1]
			if (f[i] == "s") s = f[i + 1]
		}
		if (s + 0 >= k && !seen[c, s]++)
			n++
	}
	END {
		shown = 0
		for (c = 0; c < conns && shown < 5; c++)
			for (s = k; s < msgs && shown < 5; s++)
				if (!((c, s) in seen)) {
					print "c=" c " s=" s > miss
					shown++
				}
		print n + 0
	}' "$1"
}

# to_port PORT STATE: TCP sockets whose remote port is PORT in STATE (a
# hex code of /proc/net/tcp: 08 close-wait), deduplicated like estab.
to_port() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" -v st="$2" \
		    '$3 ~ p"$" && $4 == st && !seen[$2 " " $3]++ { n++ } END { print n + 0 }'
}

# to_port_held PORT: TCP sockets whose remote port is PORT that are
# still open here (any state but TIME-WAIT, 06).
to_port_held() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" \
		    '$3 ~ p"$" && $4 != "06" && !seen[$2 " " $3]++ { n++ } END { print n + 0 }'
}

# case_kill MODE FRAMING KILLED SURVIVOR [WINDOW]: collectors of kind
# KILLED and SURVIVOR (rsyslog, syslog-ng), the first killed. With
# WINDOW, zproxy runs with --replay-window WINDOW: a message may then be
# in both files (resent), none may be missing from the two together, and
# each move says replayed= more than 0.
case_kill() {
	local mode=$1 fr=$2 kkind=$3 skind=$4 window=${5:-} what name seed go
	local kpid kport klog sport slog nk ns moves n ids bad spid rc
	local unacked cut lines v after deadline replayed
	what="$mode, $fr: kill -9 $kkind, $skind survives${window:+, --replay-window $window}"
	name=$mode-$fr-$kkind${window:+-replay}
	seed=$RANDOM
	go=$T/$name.go
	set_mode "$mode"
	start_collector "$kkind" "$name-killed" "" "$fr"
	kpid=$C_PID kport=$C_PORT klog=$C_LOG
	start_collector "$skind" "$name-survivor" "" "$fr"
	local scpid=$C_PID
	sport=$C_PORT slog=$C_LOG
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$fr" --balance leastconn \
	    ${window:+--replay-window "$window"} \
	    --stats "127.0.0.1:$SPORT" -u "127.0.0.1:$kport" -u "127.0.0.1:$sport"
	local K="127.0.0.1:$kport" S="127.0.0.1:$sport"

	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$CONNS" --msgs "$MSGS" --framing "$fr" --seed "$seed" \
	    --pause-at "$KILL_AT" --go "$go" --timeout 80
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$what: the sender did not pause at $KILL_AT messages: $(tail -n 1 "$T/$name.send.err")"
	# The collectors' own ends of zproxy's connections.
	nk=$(estab "$kport")
	ns=$(estab "$sport")
	[ "$nk" -ge 1 ] && [ $((nk + ns)) = "$CONNS" ] ||
		fail "$what: at the pause $nk connections on $kkind and $ns on $skind, want $CONNS in all, some on each"
	kill9_collector "$kpid" "$kport" "$what: $kkind"
	zproxy_alive "after the kill"
	# Its kernel sent FIN where it had read everything, RST elsewhere.
	# The go only once zproxy acted on each (closed its end): a byte
	# written after a FIN that zproxy has not read yet is lost with the
	# collector, which only --replay-window can help (its own case).
	deadline=$(( $(now_ms) + 15000 ))
	while [ "$(to_port_held "$kport")" -gt 0 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: 15s after the kill zproxy still holds $(to_port_held "$kport") of its $nk connections to the killed $kkind ($(to_port "$kport" 08) in CLOSE-WAIT)"
		sleep 0.02
	done
	: >"$go"
	peer_wait "$spid" "$name.send" 90
	rc=$?
	[ "$rc" = 0 ] ||
		fail "$what: the sender failed (status $rc): a client was dropped? $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$what" "$name" "$CONNS" "$MSGS"
	ok "$what: the sender sent $((CONNS * MSGS)) messages ($SENT_BYTES bytes) on $CONNS connections and read each to EOF ($nk were on $kkind at the kill)"

	# a. every connection ended closed, on the survivor
	deadline=$(( $(now_ms) + 15000 ))
	while [ "$(conn_lines)" -lt "$CONNS" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: zproxy logged $(conn_lines) connections within 15s, want $CONNS"
		sleep 0.05
	done
	[ "$(conn_lines)" = "$CONNS" ] ||
		fail "$what: zproxy logged $(conn_lines) connections, want $CONNS"
	n=$(grep ' conn=[0-9]' "$ZLOG" | grep -c " upstream=$S .* end=closed\$")
	[ "$n" = "$CONNS" ] ||
		fail "$what: $n of $CONNS connections ended end=closed on $S: $(grep ' conn=[0-9]' "$ZLOG" | grep -v -m 1 " upstream=$S .* end=closed\$")"
	ok "$what: zproxy logged $CONNS connections end=closed, all on the survivor"

	# b. one move per connection that was on the killed collector
	! grep -q 'could not move' "$ZLOG" ||
		fail "$what: $(grep -m 1 'could not move' "$ZLOG")"
	grep 'connection [0-9]* moved:' "$ZLOG" >"$T/$name.moves"
	moves=$(grep -c . "$T/$name.moves")
	[ "$moves" = "$nk" ] ||
		fail "$what: $moves move lines, but $nk connections were on $kkind"
	bad=$(grep -v -m 1 " from=$K to=$S reason=upstream-failed " "$T/$name.moves")
	[ -z "$bad" ] || fail "$what: a move not from $K to $S: $bad"
	ids=$(sed 's/.*connection \([0-9]*\) moved:.*/\1/' "$T/$name.moves" | sort -u | grep -c .)
	[ "$ids" = "$moves" ] || fail "$what: a connection moved twice: $(cat "$T/$name.moves")"
	unacked=$(sed 's/.* unacked=\([0-9]*\) .*/\1/' "$T/$name.moves" | awk '{ s += $1 } END { print s + 0 }')
	cut=$(sed 's/.* cut=\([0-9]*\) .*/\1/' "$T/$name.moves" | awk '{ s += $1 } END { print s + 0 }')
	replayed=$(sed 's/.* replayed=\([0-9]*\)$/\1/' "$T/$name.moves" | awk '{ s += $1 } END { print s + 0 }')
	if [ -n "$window" ]; then
		! grep -q ' replayed=0$' "$T/$name.moves" ||
			fail "$what: a move replayed nothing: $(grep -m 1 ' replayed=0$' "$T/$name.moves")"
		[ "$cut" = 0 ] || fail "$what: cut=$cut with a replay window"
	fi
	ok "$what: $moves moves from $K to $S, one for each connection that was there, none failed (unacked=$unacked cut=$cut replayed=$replayed in all)"

	# c. whole messages in both files, none twice
	settle "$slog" 30 || note "$what: the survivor's file still grows after 30s"
	verify_file "$name-survivor" "$slog"
	[ "$V_BAD" = 0 ] && [ "$V_DUPS" = 0 ] && [ "$VERIFY_RC" = 0 ] ||
		fail "$what: the survivor's file: $VERIFY: $(grep -v '^zp-logsend: missing' "$T/$name-survivor.verify.err" | head -n 3 | tr '\n' ' ')"
	lines=$V_RECEIVED
	ok "$what: the survivor ($skind) wrote $lines messages, each intact, none twice"
	# SIGKILL may cut the killed collector's own last write (rsyslog
	# writes a long message in 4 KiB pieces): its last line may be
	# partial, a loss no proxy sees.
	verify_file "$name-killed" --tail-ok "$klog"
	[ "$V_BAD" = 0 ] && [ "$VERIFY_RC" = 0 ] ||
		fail "$what: the killed collector's file: $VERIFY: $(grep -v '^zp-logsend: \(missing\|duplicate\)' "$T/$name-killed.verify.err" | head -n 3 | tr '\n' ' ')"
	[ "$V_DUPS" = 0 ] || fail "$what: the killed collector wrote a message twice: $VERIFY"
	local klines=$V_RECEIVED
	verify_file "$name-both" --tail-ok "$slog" "$klog"
	if [ -n "$window" ]; then
		[ "$V_BAD" = 0 ] && [ "$V_MISSING" = 0 ] ||
			fail "$what: the two files together: $VERIFY"
		ok "$what: the killed $kkind wrote $klines messages, each intact; every message is in one file or both ($V_DUPS in both: resent)"
	else
		[ "$V_BAD" = 0 ] && [ "$V_DUPS" = 0 ] ||
			fail "$what: $V_DUPS messages in both files: $(grep -m 3 '^zp-logsend: duplicate' "$T/$name-both.verify.err" | tr '\n' ' ')"
		ok "$what: the killed $kkind wrote $klines messages, each intact; none is in both files"
	fi
	note "$what: sent $((CONNS * MSGS)) received $V_RECEIVED duplicated $V_DUPS missing $V_MISSING; moves $moves, unacked=$unacked cut=$cut replayed=$replayed bytes in all"

	# d. the metrics
	stats_scrape
	stats_is 'zproxy_stream_moves_total{reason="upstream-failed"}' "$moves" "$what"
	v=$(series "zproxy_frames_total{upstream=\"$S\"}")
	[ -n "$v" ] || fail "$what: no zproxy_frames_total for $S: $(grep frames_total "$T/metrics" | tr '\n' ' ')"
	if [ "$mode" = copy ] || [ "$fr" = octet ]; then
		[ "$v" = "$lines" ] ||
			fail "$what: zproxy_frames_total{upstream=\"$S\"} is $v, the survivor wrote $lines messages"
	else
		[ "$v" -gt 0 ] ||
			fail "$what: zproxy_frames_total{upstream=\"$S\"} is $v"
	fi
	ok "$what: /metrics: $moves moves, $v frames to the survivor ($(series "zproxy_frames_total{upstream=\"$K\"}") to the killed one)"
	stop_zproxy
	kill_collector "$scpid" "$sport" "$what: $skind"
	# e. what was made after the kill reached the survivor (checked
	# last, with zproxy stopped clean: nothing else is left to see)
	note "$what: the killed $kkind wrote $klines of the $((nk * KILL_AT)) messages made before the kill on its $nk connections"
	after=$(after_kill "$slog")
	[ "$after" = $((CONNS * (MSGS - KILL_AT))) ] ||
		fail "$what: $after of the $((CONNS * (MSGS - KILL_AT))) messages made after the kill (s >= $KILL_AT) reached the survivor (the moves' unacked=$unacked cut=$cut), missing: $(tr '\n' ' ' <"$T/after.missing")"
	ok "$what: all $after messages made after the kill reached the survivor"
}

# case_restart MODE FRAMING KIND: two collectors of KIND, A and B, under
# 20 streams (10 on each, --balance leastconn). A is stopped (SIGTERM) with
# the senders paused: its streams move to B. A starts again on its port:
# --rebalance (--check-interval 0.2) moves streams back, exactly 10, until
# each holds 10. The senders go on: none was dropped (one connect each),
# and every message is in A's or B's file exactly once, intact.
case_restart() {
	local mode=$1 fr=$2 kind=$3 conns=20 msgs=600 at=200 what name go
	local apid aport alog bpid bport blog spid na nb n rc deadline
	what="$mode, $fr: $kind restarted under --rebalance"
	name=$mode-$fr-$kind-restart
	go=$T/$name.go
	set_mode "$mode"
	start_collector "$kind" "$name-A" "" "$fr"
	apid=$C_PID aport=$C_PORT alog=$C_LOG
	start_collector "$kind" "$name-B" "" "$fr"
	bpid=$C_PID bport=$C_PORT blog=$C_LOG
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$fr" --balance leastconn \
	    --rebalance --check-interval 0.2 \
	    -u "127.0.0.1:$aport" -u "127.0.0.1:$bport"
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$conns" --msgs "$msgs" --framing "$fr" --seed "$RANDOM" \
	    --pause-at "$at" --go "$go" --timeout 80
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$what: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	na=$(estab "$aport")
	nb=$(estab "$bport")
	[ "$na" = $((conns / 2)) ] && [ "$nb" = $((conns / 2)) ] ||
		fail "$what: $na streams on A and $nb on B at the pause, want $((conns / 2)) each"
	kill_collector "$apid" "$aport" "$what: A"
	deadline=$(( $(now_ms) + 15000 ))
	while [ "$(grep -c 'moved: .* reason=upstream-failed ' "$ZLOG")" -lt "$na" ] ||
	    [ "$(estab "$bport")" != "$conns" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: $(grep -c 'moved: .* reason=upstream-failed ' "$ZLOG") moves and $(estab "$bport") streams on B within 15s of A's stop, want $na and $conns"
		sleep 0.05
	done
	ok "$what: A stopped, its $na streams moved to B"
	start_collector "$kind" "$name-A" "$aport" "$fr"
	apid=$C_PID
	deadline=$(( $(now_ms) + 20000 ))
	while [ "$(grep -c 'moved: .* reason=rebalance ' "$ZLOG")" -lt $((conns / 2)) ] ||
	    [ "$(estab "$aport")" != $((conns / 2)) ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: $(grep -c 'moved: .* reason=rebalance ' "$ZLOG") rebalance moves and $(estab "$aport") streams on A within 20s of its restart, want $((conns / 2))"
		sleep 0.05
	done
	# Balanced: give an eleventh move its chance to (wrongly) come.
	sleep 1
	n=$(grep -c 'moved: .* reason=rebalance ' "$ZLOG")
	[ "$n" = $((conns / 2)) ] || fail "$what: $n rebalance moves, want $((conns / 2))"
	! grep 'moved: .* reason=rebalance ' "$ZLOG" |
	    grep -vq "from=127.0.0.1:$bport to=127.0.0.1:$aport " ||
		fail "$what: a rebalance move not from B to A"
	ok "$what: A back, $n streams moved to it: $(estab "$aport") on A, $(estab "$bport") on B"
	: >"$go"
	peer_wait "$spid" "$name.send" 90
	rc=$?
	[ "$rc" = 0 ] ||
		fail "$what: the sender failed (status $rc): a client was dropped? $(tail -n 1 "$T/$name.send.err")"
	grep -q "^connects=$conns " "$T/$name.send.out" ||
		fail "$what: the sender did not make exactly $conns connects: $(cat "$T/$name.send.out")"
	stop_zproxy
	kill_collector "$apid" "$aport" "$what: A"
	kill_collector "$bpid" "$bport" "$what: B"
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" --exactly-once \
	    "$alog" "$blog" >"$T/$name.verify.out" 2>"$T/$name.verify.err" ||
		fail "$what: $(cat "$T/$name.verify.out") $(grep -v '^zp-logsend: missing' "$T/$name.verify.err" | head -n 3 | tr '\n' ' ')"
	ok "$what: every message exactly once across A and B: $(cat "$T/$name.verify.out")"
}

for mode in $MODES; do
	if [ "$mode" = copy ]; then
		subcase case_kill "$mode" lf syslog-ng rsyslog
		subcase case_kill "$mode" octet rsyslog syslog-ng
	else
		subcase case_kill "$mode" lf rsyslog syslog-ng
		subcase case_kill "$mode" octet syslog-ng rsyslog
	fi
done
for mode in $MODES; do
	if [ "$mode" = copy ]; then
		subcase case_restart "$mode" octet syslog-ng
	else
		subcase case_restart "$mode" lf rsyslog
	fi
done
# --replay-window: one case a mode, the killed collector of each kind
# (the window matters at the kill: it is full there, 4 MB sent before).
for mode in $MODES; do
	if [ "$mode" = copy ]; then
		subcase case_kill "$mode" octet rsyslog syslog-ng 1M
	else
		subcase case_kill "$mode" lf syslog-ng rsyslog 1M
	fi
done

zp_done
