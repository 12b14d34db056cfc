#!/bin/bash
# spool-slowdisk.sh - a slow disk under --spool stalls no connection
# (issue 25 §2). zproxy runs one thread (--threads 1: the main thread
# accepts, relays and writes the spool's files), --framing lf, --spool
# with --spool-sync 0.1, and fdatasync(2) made to take 2 s
# (tests/tools/zp-slowsync.so, LD_PRELOAD: a disk busy elsewhere, a
# full journal, NFS). One client spools (its upstream was down when it
# came) and writes a line every 20 ms throughout: its files are synced
# one 2 s fdatasync after another. The upstream, an echo server that
# never closes a connection first (so that no spool file is ever
# delivered and the client spools on), is then started, and other
# clients ping-pong through zproxy, on that same thread (10 round trips
# each, then a reset, since the upstream would not close), until three
# slow fdatasyncs have ended meanwhile:
#   a. every round trip takes less than MAXMS (500 ms); while the disk
#      calls ran on the relay thread, each one waited for the sync in
#      progress (up to 2 s);
#   b. the syncs ran, on a thread other than the main one;
#   c. zproxy stops cleanly (its I/O thread's queue drained), no
#      sanitizer report, no system call refused by the sandbox.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_SLOWSYNC:?ZP_SLOWSYNC must name tests/tools/zp-slowsync.so}"
[ -f "$ZP_SLOWSYNC" ] || fail "ZP_SLOWSYNC=$ZP_SLOWSYNC does not exist"

MAXMS=500	# a round trip while the spool syncs: at most this long
SYNCS=3		# slow fdatasyncs that end while the clients measure

# syncs_ended: how many slowed fdatasyncs have ended so far.
syncs_ended() { grep -c '^end ' "$SLOG" 2>/dev/null; }

run_mode() {
	local mode=$1 up sdir c0 runs=0 worst=0 ms out deadline tids
	set_mode "$mode"
	sdir=$T/$mode.spool
	mkdir -p "$sdir" "$T/$mode.ctl" || fail "mkdir"
	zp_user_dir "$sdir"
	zp_user_dir "$T/$mode.ctl"
	SLOG=$T/$mode.syncs
	: >"$SLOG"
	up=$(free_port) || fail "zp-peer port failed"
	# The sanitizers' runtime is not first in the list with a shim
	# preloaded: ASan would refuse to start.
	ZP_WRAP=(env "LD_PRELOAD=$ZP_SLOWSYNC" ZP_SLOWSYNC_MS=2000
	    "ZP_SLOWSYNC_LOG=$SLOG" "ZP_SLOWSYNC_OFF=$T/$mode.ctl/off"
	    "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0")
	start_zproxy -v "${MODE_ARGS[@]}" --threads 1 --framing lf \
	    -u "127.0.0.1:$up" --fail-timeout 1 --max-fails 1 \
	    --spool "$sdir" --spool-sync 0.1
	ZP_WRAP=()

	# The spooling client: a line every 20 ms, until told to stop.
	exec {SFD}<>"/dev/tcp/127.0.0.1/$ZPORT" || fail "$mode: connect"
	(
		i=0
		while [ ! -e "$T/$mode.ctl/stop" ] &&
		    printf 'spooled line %d\n' "$i" >&"$SFD"; do
			i=$((i + 1))
			sleep 0.02
		done
	) &
	SENDER=$!
	ZP_PIDS+=("$SENDER")
	wait_line "$ZLOG" 'spooling client' 10 "$ZPID" >/dev/null ||
		fail "$mode: the client did not spool"
	wait_line "$SLOG" '^end ' 20 "$ZPID" >/dev/null ||
		fail "$mode: no fdatasync of the spool ended within 20 s"

	# The upstream: echoes, never closes first (the files stay).
	peer_listen "$mode.up" --echo --hold --allow-reset -n 0 -t 0 -p "$up"
	wait_line "$ZLOG" "upstream 127.0.0.1:$up is up" 30 "$ZPID" >/dev/null ||
		fail "$mode: zproxy did not see the upstream back within 30 s"

	# a. round trips through the main thread while the spool syncs.
	c0=$(syncs_ended)
	deadline=$(( $(now_ms) + 120000 ))
	while [ "$(syncs_ended)" -lt $((c0 + SYNCS)) ]; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$mode: fewer than $SYNCS slow syncs in 120 s"
		PEER_TIMEOUT=60 peer "$mode.pp" connect 127.0.0.1 "$ZPORT" \
		    --pingpong 10 --reset-after-recv 1000 -t 50 ||
			fail "$mode: a ping-pong client failed: $(head -c 300 "$T/$mode.pp.err")"
		out=$(grep '^rtt ' "$T/$mode.pp.out") ||
			fail "$mode: no rtt line from zp-peer"
		ms=$(field max "$out")
		ms=${ms%ms}
		runs=$((runs + 1))
		awk -v a="$ms" -v b="$worst" 'BEGIN { exit !(a > b) }' &&
			worst=$ms
		awk -v a="$ms" -v b="$MAXMS" 'BEGIN { exit !(a < b) }' ||
			fail "$mode: a round trip took ${ms} ms (run $runs, $(($(syncs_ended) - c0)) slow syncs ended since the first), want < $MAXMS ms"
	done
	ok "$mode: $runs ping-pong clients x 10 round trips while $SYNCS fdatasyncs of 2 s ended: the slowest took ${worst} ms (< $MAXMS)"

	# b. which thread synced.
	tids=$(awk '$1 == "end" { print $2 }' "$SLOG" | sort -u | tr '\n' ' ')
	awk -v main="$ZPID" '$1 == "end" && $2 == main { f = 1 } END { exit f }' \
	    "$SLOG" || fail "$mode: the main thread ($ZPID) made a slow fdatasync (threads: $tids)"
	ok "$mode: the spool's fdatasyncs ran on thread(s) $tids, not the main one ($ZPID)"

	# c. a clean stop, with the disk fast again.
	: >"$T/$mode.ctl/off"
	: >"$T/$mode.ctl/stop"
	wait "$SENDER" 2>/dev/null
	exec {SFD}>&-
	stop_zproxy
	zp_stop "$PEER_PID"
	ok "$mode: zproxy stopped cleanly"
}

for mode in $MODES; do
	subcase run_mode "$mode"
done
zp_done
