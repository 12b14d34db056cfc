#!/bin/bash
# moves.sh - --framing: a framed stream whose upstream fails moves to
# another upstream at a message boundary, the client still connected
# (issue 12). The stream is a file of numbered messages (1 B to 16 KiB,
# with spaces; octet bodies also hold newlines), made here with the offset
# of every boundary; upstream A (zp-peer) resets after taking 2 MiB,
# upstream B takes the rest. Byte-exact checks, every mode and framing:
#   a. the client's one connection sends everything and reads to EOF
#      without an error (it was never dropped);
#   b. A's bytes are the stream's first bytes; B's are its last bytes and
#      begin at a message boundary (no half message, nothing merged);
#   c. one "moved" line from A to B, its frames= is the number of whole
#      messages A took; what is missing between the two is cut= (the rest
#      of the message A had begun) plus what A's kernel took but A did not
#      read; the conn= line's up= is the stream less cut=;
#   d. a framing error (a bad octet header, a line over --max-frame,
#      binary garbage where an octet header should be) makes the stream a
#      plain byte relay: it reaches A whole, counted in the counters line,
#      nothing moved (a long lf line only in copy mode: splice mode
#      does not read lf lines, and the bytes must still arrive whole);
#   e. with one upstream nothing moves: end=upstream-reset, as without
#      framing;
#   f. --max-lifetime 0.3: 3 connections (zp-logsend) pause mid-stream
#      until they moved 12 times between two mini collectors (round
#      robin over an odd number of streams: the balancer's choice is the
#      other upstream at each look; a stream moves only to another, never
#      from=X to=X), then send on
#      at full speed (moving on while busy); every message arrives exactly
#      once, whole, in order per upstream connection (verify --raw --runs
#      --exactly-once); no client reconnects, all end=closed (lf in
#      splice mode knows it stopped at a boundary from the last byte of
#      its pipe);
#   g. --rebalance: 10 connections all on B while A is down; A comes up
#      (--check-interval 0.2): exactly 5 move to it (reason=rebalance),
#      none more; then exactly once as in f;
#   h. lossless idle close: 4 connections pause beyond --idle-timeout 0.5;
#      zproxy winds each down (a FIN to the client) instead of closing;
#      the clients, which do not read, send the rest of their messages
#      into what they think is an open connection, and every message
#      arrives, once, in order (end=idle-timeout);
#   i. the drain (SIGTERM) does the same for every framed stream, and
#      zproxy exits 0 once the clients closed, before --drain-timeout;
#   j. health checks: A stops listening (its streams still served); once
#      the checks mark it down, its 4 streams move to B (a planned move:
#      "marked down by the health checks"), exactly once, in order;
#   k. the old upstream of a planned move closes while the stream moves
#      on: A (--hold: open after zproxy's FIN) is drained with zproxy
#      ctl, the stream moves to B, B resets it and is gone, and the move
#      on waits for C, whose connects hang (a blackhole); A closes then.
#      The stream must not end on that (it read the closed upstream's
#      descriptor: end=upstream-error, "Bad file descriptor"): it ends
#      only when the connect to C times out.
# auto runs on the octet stream (its first byte picks octet). In splice
# mode lf messages are spliced unread: frames= is then a lower bound.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"

MSGS=${ZP_MOVES_MSGS:-3000}
CUT_AT=$((2 * 1024 * 1024))

# mkstream NAME FRAMING NMSG [BAD]: the stream $T/NAME and the stream
# offset of every boundary, one per line, in $T/NAME.b (0 first). With
# BAD, the octet header of message BAD is malformed ("x12 ...").
mkstream() {
	awk -v fr="$2" -v n="$3" -v bad="${4:-0}" -v out="$T/$1" \
	    -v bo="$T/$1.b" 'BEGIN {
		srand(12);
		base = "";
		for (i = 0; i < 4096; i++) {
			c = substr("abcdefghij klmnopqrstuvwxyz ABCDEFGH", int(rand() * 36) + 1, 1);
			base = base c;
		}
		base = base base base base base;
		off = 0;
		print 0 > bo;
		for (i = 1; i <= n; i++) {
			len = int(rand() * 16384) + 1;
			start = int(rand() * 4096) + 1;
			body = "s=" i " " substr(base, start, len);
			if (fr == "octet" && i % 7 == 0)
				body = body "\nsecond line";
			if (fr == "octet")
				msg = (i == bad ? "x" : "") length(body) " " body;
			else
				msg = body "\n";
			printf "%s", msg > out;
			off += length(msg);
			print off > bo;
		}
	}' || fail "mkstream $1 failed"
}

# check_move MODE FRAMING KIND: KIND (lf, octet) is the stream's.
check_move() {
	local mode=$1 framing=$2 kind=$3 sent a b start gap line frames
	local want_frames unacked cut up
	set_mode "$mode"
	mkstream "s-$framing" "$kind" "$MSGS"
	sent=$(size "$T/s-$framing")
	peer_listen "A-$mode-$framing" --recv "$T/A-$mode-$framing" \
	    --reset-after-recv "$CUT_AT" --no-shut -t 60
	local pa=$PEER_PORT
	peer_listen "B-$mode-$framing" --recv "$T/B-$mode-$framing" --no-shut \
	    -t 60
	local pb=$PEER_PORT pbpid=$PEER_PID
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
	    --balance first -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	peer "c-$mode-$framing" connect 127.0.0.1 "$ZPORT" \
	    --send "$T/s-$framing" -t 60 ||
		fail "$mode/$framing: the client failed (status $?): $(tail -n 2 "$T/c-$mode-$framing.err")"
	peer_wait "$pbpid" B 20 || fail "$mode/$framing: B did not end cleanly"
	expect_conn_log ' end=closed' "$mode/$framing: the client's connection"
	line=$(grep 'connection [0-9]* moved:' "$ZLOG")
	[ "$(echo "$line" | grep -c .)" = 1 ] ||
		fail "$mode/$framing: want one 'moved' line, got: $line"
	echo "$line" | grep -q "from=127.0.0.1:$pa to=127.0.0.1:$pb reason=upstream-failed" ||
		fail "$mode/$framing: the move line names the wrong upstreams: $line"
	a=$(size "$T/A-$mode-$framing")
	b=$(size "$T/B-$mode-$framing")
	[ "$a" -ge "$CUT_AT" ] || fail "$mode/$framing: A took $a bytes, want $CUT_AT or more"
	head -c "$a" "$T/s-$framing" | cmp -s - "$T/A-$mode-$framing" ||
		fail "$mode/$framing: A's bytes are not the stream's first $a"
	tail -c "$b" "$T/s-$framing" | cmp -s - "$T/B-$mode-$framing" ||
		fail "$mode/$framing: B's $b bytes are not the stream's last"
	start=$((sent - b))
	grep -qx "$start" "$T/s-$framing.b" ||
		fail "$mode/$framing: B's bytes begin at $start, not at a message boundary"
	frames=$(field frames "$line")
	cut=$(field cut "$line")
	unacked=$(field unacked "$line")
	gap=$((start - a))
	# A's whole messages: the boundaries at or below what it took, less
	# the stream's start. It may have taken more than it read.
	want_frames=$(awk -v s="$start" -v c="$cut" '$1 > 0 && $1 <= s - c' "$T/s-$framing.b" | wc -l)
	# Exact where zproxy sees the ends: copy mode, octet frames.
	if [ "$mode" = copy ] || [ "$kind" = octet ]; then
		[ "$frames" = "$want_frames" ] ||
			fail "$mode/$framing: frames=$frames, but $want_frames whole messages went to A"
	else
		[ "$frames" -le "$want_frames" ] ||
			fail "$mode/$framing: frames=$frames, more than the $want_frames whole messages A got"
	fi
	# What went missing is cut= and what A's kernel got but A never
	# read; unacked= is what A's kernel did not acknowledge, at most
	# what went to A (an ACK delayed when A reset never comes: the
	# RST's own is not taken, so it may also exceed what A missed).
	[ "$cut" -le "$gap" ] && [ "$unacked" -le $((start - cut)) ] ||
		fail "$mode/$framing: $gap bytes between A and B, but cut=$cut unacked=$unacked"
	up=$(field up "$LAST_CONN_LOG")
	[ "$up" = $((sent - cut)) ] ||
		fail "$mode/$framing: up=$up, want the stream ($sent) less cut=$cut"
	ok "$mode/$framing: moved at a boundary; A read $a bytes of $((start - cut)) sent to it, B $b from $start; frames=$frames cut=$cut unacked=$unacked"
	stop_zproxy
}

# check_error MODE KIND: a framing error, plain bytes from there on; no
# move, so A's reset ends the client. KIND: header (message 50's octet
# header is "x12 ..."), oversize (lf, --max-frame 32K, message 50 is a
# line of 40000 bytes), garbage (octet, 64 KiB of random bytes after
# message 50).
check_error() {
	local mode=$1 kind=$2 sent framing why extra=()
	set_mode "$mode"
	case $kind in
	header)
		framing=octet
		why='octet frame does not start with a length'
		mkstream "s-bad-$kind" octet 400 50
		;;
	oversize)
		framing=lf
		why='frame over max-frame'
		extra=(--max-frame 32K)
		mkstream "s-bad-a" lf 49
		mkstream "s-bad-b" lf 350
		{ cat "$T/s-bad-a"; head -c 40000 /dev/zero | tr '\0' 'x'
		  echo; cat "$T/s-bad-b"; } >"$T/s-bad-$kind"
		;;
	garbage)
		framing=octet
		why='octet (frame does not start with a length|length starts with 0|length not followed by a space|length over max-frame)'
		mkstream "s-bad-a" octet 50
		mkstream "s-bad-b" octet 350
		# a first byte of 0 or a letter: never a valid length
		{ cat "$T/s-bad-a"; printf 'Z'; head -c 65536 /dev/urandom
		  cat "$T/s-bad-b"; } >"$T/s-bad-$kind"
		;;
	esac
	sent=$(size "$T/s-bad-$kind")
	peer_listen "Abad-$mode" --recv "$T/Abad-$mode" --no-shut -t 60
	local pa=$PEER_PORT papid=$PEER_PID
	peer_listen "Bbad-$mode" --recv "$T/Bbad-$mode" --no-shut -t 60
	local pb=$PEER_PORT
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" "${extra[@]}" \
	    --balance first -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	peer "cbad-$mode" connect 127.0.0.1 "$ZPORT" --send "$T/s-bad-$kind" \
	    -t 60 ||
		fail "$mode: the client with a bad stream ($kind) failed: $(tail -n 2 "$T/cbad-$mode.err")"
	peer_wait "$papid" A 20 || fail "$mode: A did not end cleanly"
	expect_conn_log ' end=closed' "$mode: the bad stream's connection ($kind)"
	cmp -s "$T/s-bad-$kind" "$T/Abad-$mode" ||
		fail "$mode: the stream with $kind did not reach A whole ($(size "$T/Abad-$mode") of $sent bytes)"
	if [ "$kind" = oversize ] && [ "$mode" != copy ]; then
		# Spliced lf lines are not read: a long one goes unseen.
		ok "$mode: $kind: $sent bytes relayed whole (lf spliced unread: $(grep -c 'framing error' "$ZLOG") framing errors seen)"
		stop_zproxy
		return
	fi
	wait_line "$ZLOG" "framing error at byte [0-9]* \\(($why)\\)" 5 "$ZPID" >/dev/null ||
		fail "$mode: no framing error logged for $kind: $(grep -m 1 'framing error' "$ZLOG")"
	kill -USR1 "$ZPID"
	wait_line "$ZLOG" 'moves=0 framing-errors=1 replayed=0;' 5 "$ZPID" >/dev/null ||
		fail "$mode: the counters line does not say moves=0 framing-errors=1"
	ok "$mode: $kind: $sent bytes relayed whole as plain bytes, counted ($(grep -m 1 -o 'framing error at byte [0-9]* ([^)]*)' "$ZLOG"))"
	stop_zproxy
}

check_retire_move() {
	local mode=$1 what="$1: the old upstream closes while the stream moves"
	local pa papid pb pbpid pc bhpid ctl=$T/ctl-rm-$1.sock line
	set_mode "$mode"
	peer_listen "Arm-$mode" --conns 1 --hold -t 0 --recv "$T/Arm-$mode"
	pa=$PEER_PORT papid=$PEER_PID
	peer_listen "Brm-$mode" --conns 1 --reset-after-recv 3000 -t 0
	pb=$PEER_PORT pbpid=$PEER_PID
	zp_bg "bh-rm-$mode" "$ZP_PEER" blackhole -t 60
	bhpid=$BG_PID
	pc=$(wait_line "$T/bh-rm-$mode.out" '^[0-9]+$' 10 "$bhpid") ||
		fail "$what: blackhole peer: $(cat "$T/bh-rm-$mode.err")"
	start_zproxy -v "${MODE_ARGS[@]}" --framing lf --balance first \
	    -u "127.0.0.1:$pa" -u "127.0.0.1:$pb" -u "127.0.0.1:$pc" \
	    --connect-timeout 4 --drain-timeout 60 --control "$ctl"
	zp_bg "crm-$mode" timeout -k 5 60 "$ZP_LOGSEND" send 127.0.0.1 \
	    "$ZPORT" --conns 1 --msgs 4000 --framing lf --min 1 --max 300 \
	    --rate 200 --timeout 50
	until [ "$(size "$T/Arm-$mode" 2>/dev/null || echo 0)" -gt 2000 ]; do
		alive "$ZPID" || fail "$what: zproxy died"
		sleep 0.05
	done
	"$ZPROXY" ctl --control "$ctl" set upstream "127.0.0.1:$pa" state drain \
	    >"$T/rm-ctl.out" 2>&1 || fail "$what: ctl: $(cat "$T/rm-ctl.out")"
	wait_line "$ZLOG" "connection 1 moved: .*reason=drain" 20 "$ZPID" \
	    >/dev/null || fail "$what: no planned move to B"
	# B resets it and is gone; the move on connects to C, which hangs
	zp_wait_exit "$pbpid" 20 >/dev/null
	until ss -Htn state syn-sent "dport = :$pc" | grep -q .; do
		alive "$ZPID" || fail "$what: zproxy died"
		grep -q "conn=1 client=" "$ZLOG" &&
			fail "$what: it ended before its move on: $(grep -m 1 'conn=1 client=' "$ZLOG")"
		sleep 0.05
	done
	kill -TERM "$papid"
	zp_wait_exit "$papid" 5 >/dev/null
	line=$(wait_line "$ZLOG" "conn=1 client=" 15 "$ZPID") ||
		fail "$what: connection 1 did not end"
	# the connect to C timed out: nothing else may have ended it
	case $line in
	*end=upstream-timeout*) ;;
	*) fail "$what: $line" ;;
	esac
	stop_zproxy
	ok "$what: it waited for C's connect to time out (${line##* end=})"
}

# One upstream: nowhere to move, the old behaviour.
check_single() {
	local mode=$1
	set_mode "$mode"
	mkstream s-one lf 600
	peer_listen "A1-$mode" --recv "$T/A1-$mode" --reset-after-recv 1048576 \
	    --no-shut -t 60
	local pa=$PEER_PORT
	start_zproxy -v "${MODE_ARGS[@]}" --framing lf -u "127.0.0.1:$pa"
	wait_line "$ZLOG" 'but there is only one upstream' 5 "$ZPID" >/dev/null ||
		fail "$mode: no warning that one upstream cannot take a move"
	PEER_TIMEOUT=30 peer "c1-$mode" connect 127.0.0.1 "$ZPORT" \
	    --send "$T/s-one" --allow-reset -t 20
	expect_conn_log ' end=upstream-reset' "$mode: one upstream"
	! grep -q 'moved:' "$ZLOG" || fail "$mode: moved with one upstream"
	ok "$mode: one upstream: end=upstream-reset, nothing moved"
	stop_zproxy
}

# collect NAME [PORT]: a mini collector writing $T/NAME/conn-N.raw; sets
# COL_PID, COL_PORT.
collect() {
	mkdir -p "$T/$1"
	zp_bg "$1.collect" "$ZP_LOGSEND" collect --dir "$T/$1" ${2:+--port "$2"}
	COL_PID=$BG_PID
	COL_PORT=$(wait_line "$T/$1.collect.out" '^[0-9]+$' 10 "$COL_PID") ||
		fail "zp-logsend collect $1 did not start: $(head -c 300 "$T/$1.collect.err")"
}

# send_paused NAME CONNS MSGS FRAMING K: zp-logsend send in the background
# through zproxy, pausing after K messages on each connection until
# $T/NAME.go exists; waits for the pause. Sets SEND_PID.
send_paused() {
	zp_bg "$1" timeout -k 5 90 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$2" --msgs "$3" --framing "$4" --min 1 --max 2000 \
	    --pause-at "$5" --go "$T/$1.go" --timeout 80
	SEND_PID=$BG_PID
	wait_line "$T/$1.out" '^paused$' 20 "$SEND_PID" >/dev/null ||
		fail "$1: the sender did not pause: $(tail -n 1 "$T/$1.err")"
}

# moves_at_least N REASON SECS: wait for N "moved" lines of REASON.
moves_at_least() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	while [ "$(grep -c "moved: .* reason=$2 " "$ZLOG")" -lt "$1" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$(grep -c "moved: .* reason=$2 " "$ZLOG") moves ($2) within ${3}s, want $1"
		sleep 0.02
	done
}

# finish_send NAME CONNS MSGS FRAMING WHAT DIRS...: let the sender go on,
# it must end well, then every message once, whole, in order per file.
finish_send() {
	local name=$1 conns=$2 msgs=$3 framing=$4 what=$5 rc i files=() d
	shift 5
	: >"$T/$name.go"
	peer_wait "$SEND_PID" "$name" 60
	rc=$?
	[ "$rc" = 0 ] || fail "$what: the sender failed (status $rc): $(tail -n 1 "$T/$name.err")"
	grep -q "^connects=$conns " "$T/$name.out" ||
		fail "$what: the sender did not make exactly $conns connects: $(cat "$T/$name.out")"
	for ((i = 0; i < conns; i++)); do
		expect_conn_log ' end=closed' "$what: connection $((i + 1)) of $conns" 20
	done
	stop_zproxy
	for d in "$@"; do
		for f in "$T/$d"/conn-*.raw; do [ -s "$f" ] && files+=("$f"); done
	done
	"$ZP_LOGSEND" verify -v --raw --runs --exactly-once --conns "$conns" \
	    --msgs "$msgs" --framing "$framing" "${files[@]}" \
	    >"$T/$name.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/$name.verify" | tr '\n' ' ')"
	VERIFIED=$(tail -n 1 "$T/$name.verify")
}

check_lifetime() {
	local mode=$1 framing=$2 name="lt-$1-$2" n
	set_mode "$mode"
	collect "$name-A"
	local pa=$COL_PORT
	collect "$name-B"
	local pb=$COL_PORT
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
	    --max-lifetime 0.3 --balance roundrobin \
	    -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	send_paused "$name" 3 20000 "$framing" 300
	moves_at_least 12 max-lifetime 20
	finish_send "$name" 3 20000 "$framing" "$mode/$framing lifetime" \
	    "$name-A" "$name-B"
	n=$(grep -c 'moved: .* reason=max-lifetime ' "$ZLOG")
	! grep -q 'could not move\|stays:' "$ZLOG" ||
		fail "$mode/$framing lifetime: a move failed: $(grep -m1 'could not move\|stays:' "$ZLOG")"
	! grep -E 'moved: .* from=([^ ]+) to=\1 ' "$ZLOG" | grep -q . ||
		fail "$mode/$framing lifetime: a stream moved to the upstream it was on: $(grep -m1 -E 'moved: .* from=([^ ]+) to=\1 ' "$ZLOG")"
	ok "$mode/$framing: --max-lifetime 0.3: $n moves, each to the other upstream, 3 connections kept; $VERIFIED"
}

check_rebalance() {
	local mode=$1 framing=$2 name="rb-$1-$2" pa n
	set_mode "$mode"
	pa=$(free_port) || fail "zp-peer port failed"
	collect "$name-B"
	local pb=$COL_PORT
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
	    --balance leastconn --rebalance --check-interval 0.2 \
	    -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	send_paused "$name" 10 2000 "$framing" 500
	# (health checks show as empty files)
	[ "$(find "$T/$name-B" -name 'conn-*.raw' -size +0 | wc -l)" = 10 ] ||
		fail "$mode/$framing rebalance: B has $(find "$T/$name-B" -name 'conn-*.raw' -size +0 | wc -l) connections with data, want all 10"
	collect "$name-A" "$pa"
	moves_at_least 5 rebalance 20
	# Balanced at 5 and 5: give a sixth move its chance to (wrongly) come.
	wait_line "$ZLOG" 'moved: .* reason=rebalance ' 1 "$ZPID" >/dev/null
	sleep 0.5
	n=$(grep -c 'moved: .* reason=rebalance ' "$ZLOG")
	[ "$n" = 5 ] || fail "$mode/$framing rebalance: $n moves, want 5"
	grep 'moved: .* reason=rebalance ' "$ZLOG" | grep -vq "from=127.0.0.1:$pb to=127.0.0.1:$pa " &&
		fail "$mode/$framing rebalance: a move not from B to A"
	finish_send "$name" 10 2000 "$framing" "$mode/$framing rebalance" \
	    "$name-A" "$name-B"
	ok "$mode/$framing: --rebalance: 5 of 10 streams moved to the upstream that came back; $VERIFIED"
}

# winddown_case MODE FRAMING idle|drain
winddown_case() {
	local mode=$1 framing=$2 how=$3 name="wd-$1-$2-$3" rc end
	set_mode "$mode"
	collect "$name-A"
	local pa=$COL_PORT
	if [ "$how" = idle ]; then
		start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
		    --idle-timeout 0.5 --fin-timeout 20 -u "127.0.0.1:$pa"
		end=idle-timeout
	else
		start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
		    --drain-timeout 20 -u "127.0.0.1:$pa"
		end=closed
	fi
	zp_bg "$name" timeout -k 5 90 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns 4 --msgs 4000 --framing "$framing" --min 1 --max 2000 \
	    --pause-at 2000 --go "$T/$name.go" --early-fin-ok --timeout 80
	SEND_PID=$BG_PID
	wait_line "$T/$name.out" '^paused$' 20 "$SEND_PID" >/dev/null ||
		fail "$name: the sender did not pause: $(tail -n 1 "$T/$name.err")"
	[ "$how" = drain ] && kill -TERM "$ZPID"
	deadline=$(( $(now_ms) + 10000 ))
	while [ "$(grep -c "winds down ($( [ "$how" = idle ] && echo idle-timeout || echo shutdown))" "$ZLOG")" -lt 4 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode/$framing $how: $(grep -c 'winds down' "$ZLOG") of 4 connections wound down within 10s"
		sleep 0.02
	done
	: >"$T/$name.go"
	peer_wait "$SEND_PID" "$name" 60
	rc=$?
	[ "$rc" = 0 ] || fail "$mode/$framing $how: the sender failed (status $rc): $(tail -n 1 "$T/$name.err")"
	grep -q ' early-fins=4$' "$T/$name.out" ||
		fail "$mode/$framing $how: not every client saw the FIN before its own: $(cat "$T/$name.out")"
	for i in 1 2 3 4; do
		expect_conn_log " end=$end" "$mode/$framing $how: connection $i" 20
	done
	if [ "$how" = drain ]; then
		zp_wait_exit "$ZPID" 10
		rc=$?
		[ "$rc" = 0 ] || fail "$mode/$framing drain: zproxy exited with $rc"
	else
		stop_zproxy
	fi
	"$ZP_LOGSEND" verify -v --raw --streams --exactly-once --conns 4 \
	    --msgs 4000 --framing "$framing" "$T/$name-A"/conn-*.raw \
	    >"$T/$name.verify" 2>&1 ||
		fail "$mode/$framing $how: $(tail -n 3 "$T/$name.verify" | tr '\n' ' ')"
	ok "$mode/$framing: $how: 4 clients told with a FIN, then sent their 2000 more messages each: $(tail -n 1 "$T/$name.verify")"
}

check_down() {
	local mode=$1 framing=$2 name="dn-$1-$2" n
	set_mode "$mode"
	collect "$name-A"
	local pa=$COL_PORT apid=$COL_PID
	collect "$name-B"
	local pb=$COL_PORT
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$framing" \
	    --balance first --check-interval 0.2 \
	    -u "127.0.0.1:$pa" -u "127.0.0.1:$pb"
	send_paused "$name" 4 2000 "$framing" 1000
	ours "$apid" || fail "$name: collector A is not ours"
	kill -USR1 "$apid"
	moves_at_least 4 upstream-failed 20
	grep 'moved: .* reason=upstream-failed ' "$ZLOG" |
	    grep -v "from=127.0.0.1:$pa to=127.0.0.1:$pb .*error=\"marked down by the health checks\"" |
	    grep -q . && fail "$mode/$framing down: a move not from A to B by the checks: $(grep -m1 'moved:' "$ZLOG")"
	finish_send "$name" 4 2000 "$framing" "$mode/$framing down" \
	    "$name-A" "$name-B"
	n=$(grep -c 'moved: .* reason=upstream-failed ' "$ZLOG")
	[ "$n" = 4 ] || fail "$mode/$framing down: $n moves, want 4"
	ok "$mode/$framing: the checks marked A down: its 4 streams moved to B; $VERIFIED"
}

# The modes side by side (subcase_bg: each its own zproxy, peers and $T):
# most of the time goes on --max-lifetime, --check-interval and pauses.
moves_mode() {
	local mode=$1
	subcase check_move "$mode" octet octet
	subcase check_move "$mode" lf lf
	subcase check_move "$mode" auto octet
	subcase check_error "$mode" header
	subcase check_error "$mode" oversize
	subcase check_error "$mode" garbage
	subcase check_single "$mode"
	subcase check_lifetime "$mode" octet
	subcase check_lifetime "$mode" lf
	subcase check_rebalance "$mode" octet
	subcase winddown_case "$mode" lf idle
	subcase winddown_case "$mode" octet drain
	subcase check_down "$mode" lf
	subcase check_retire_move "$mode"
}
# At most one splice-mode zproxy at a time: each prepares a quarter of
# the per-user pipe budget (fs.pipe-user-pages-soft) when unprivileged,
# shared with the other tests' zproxies (stall.sh says more); copy mode
# prepares none. So copy beside the first of the others (splice), then
# the next (splice-eager) alone.
m_splice=
for mode in $MODES_ALL; do
	case $mode in
	copy) subcase_bg moves_mode "$mode" ;;
	*) m_splice="$m_splice $mode" ;;
	esac
done
for mode in $m_splice; do
	subcase_bg moves_mode "$mode"
	subcases_wait
done
subcases_wait
zp_done
