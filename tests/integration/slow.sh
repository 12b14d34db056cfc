#!/bin/bash
# slow.sh - back-pressure: a stalled peer makes zproxy stop reading the
# other side, without spinning (trap 4) or buffering without bound, and no
# byte is lost once the peer reads again.
#   a. slow upstream: it sleeps 5 s before reading while the client sends
#      64 MiB; once the buffers are full (zproxy's CPU, utime+stime from
#      /proc/PID/stat, still for 200 ms, or 2.5 s before the stall ends),
#      during 2 s of the stall that CPU must grow by at most 10 ticks and
#      zproxy's RSS by at most 4 MiB, and the sender must still be blocked
#      (the stall is real); a window that ran past the stall (a loaded
#      machine) is a SKIP, not a pass or a failure;
#   b. slow client reader: the same, the other way;
#   c. a rate-limited upstream reader (4 MiB/s): every byte arrives;
#   d. trap 2: the upstream sleeps 2 s, the client sends and closes (FIN,
#      then close without reading) while bytes wait in zproxy: 2 MiB (all
#      of it buffered when the client leaves, else a SKIP: the case was
#      not made) and 64 MiB. All bytes arrive.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

MAX_TICKS=${ZP_MAX_STALL_TICKS:-10}
MAX_RSS_KB=4096

mkdata big 64M
mkdata mid 4M
mkdata small 2M

# The stalled peer's --read-delay: 2 s of measuring, the time the buffers
# take to fill (slow under sanitizers) and room for a loaded machine.
STALL_S=5

# stall_check WHAT SENDER_PID T0: measure zproxy over 2 s of a stall of
# STALL_S that began after T0 (ms, taken before the client started): the
# stall ends at T0 + STALL_S at the earliest. The sender must still be
# blocked (alive) at the end, or there was no back-pressure to measure.
# Returns 1 (after a skip) when the window ran past the stall.
stall_check() {
	local what=$1 spid=$2 t_end=$(( $3 + STALL_S * 1000 )) c0 c1 c2 r1 r2
	# let the buffers fill: until zproxy's CPU stands still for 200 ms
	# (a busy loop never does: then the window shows it)
	c1=$(cpu_ticks "$ZPID")
	while [ "$(now_ms)" -lt $((t_end - 2500)) ]; do
		sleep 0.2
		c0=$c1; c1=$(cpu_ticks "$ZPID")
		[ "$c1" = "$c0" ] && break
	done
	c1=$(cpu_ticks "$ZPID"); r1=$(rss_kb "$ZPID")
	sleep 2		# the measured stall
	c2=$(cpu_ticks "$ZPID"); r2=$(rss_kb "$ZPID")
	if [ "$(now_ms)" -ge "$t_end" ]; then
		skip "$what: the 2 s window ended $(( $(now_ms) - t_end )) ms after the earliest end of the stall: CPU and RSS not judged"
		return 1
	fi
	alive "$spid" || fail "$what: the sender was done before the stall ended: no back-pressure to measure"
	[ $((c2 - c1)) -le "$MAX_TICKS" ] ||
		fail "$what: zproxy used $((c2 - c1)) CPU ticks in 2 s of stall (max $MAX_TICKS): busy loop"
	[ $((r2 - r1)) -le "$MAX_RSS_KB" ] ||
		fail "$what: zproxy RSS grew from $r1 to $r2 kB during the stall"
	STALL_NOTE="$((c2 - c1)) ticks, RSS $r1 -> $r2 kB in 2 s"
}

# stall_ok WHAT JUDGED: the last word of a stall case: its "ok" (with what
# stall_check measured when JUDGED is 1).
stall_ok() {
	if [ "$2" = 1 ]; then
		ok "$1: CPU flat and RSS flat ($STALL_NOTE), then every byte (sha256)"
	else
		ok "$1: every byte (sha256)"
	fi
}

# a. slow upstream
slow_upstream() {
	local what="$mode: upstream stalls $STALL_S s while the client sends 64 MiB"
	local upid cpid t0 judged=1
	peer_listen a-up --read-delay "$STALL_S" -o "$T/a.got" -t 60
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	t0=$(now_ms)
	zp_bg a-client "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -s "$T/big" -t 60
	cpid=$BG_PID
	stall_check "$what" "$cpid" "$t0" || judged=0
	peer_wait "$cpid" a-client 30 || fail "$what: client: $(cat "$T/a-client.err")"
	peer_wait "$upid" a-up 30 || fail "$what: upstream: $(cat "$T/a-up.err")"
	same_file "$T/big" "$T/a.got" "$what"
	expect_conn_log "up=67108864 down=0 .*end=closed" "$what"
	stop_zproxy
	stall_ok "$what" "$judged"
	rm -f "$T/a.got"
}

# b. slow client reader
slow_client() {
	local what="$mode: client stalls $STALL_S s while the upstream sends 64 MiB"
	local upid cpid t0 judged=1
	peer_listen b-up -s "$T/big" -t 60
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	t0=$(now_ms)
	zp_bg b-client "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --read-delay "$STALL_S" \
	    -o "$T/b.got" -t 60
	cpid=$BG_PID
	stall_check "$what" "$upid" "$t0" || judged=0
	peer_wait "$cpid" b-client 30 || fail "$what: client: $(cat "$T/b-client.err")"
	peer_wait "$upid" b-up 30 || fail "$what: upstream: $(cat "$T/b-up.err")"
	same_file "$T/big" "$T/b.got" "$what"
	expect_conn_log "up=0 down=67108864 .*end=closed" "$what"
	stop_zproxy
	stall_ok "$what" "$judged"
	rm -f "$T/b.got"
}

# c. rate-limited reader
rate_limited() {
	local what="$mode: upstream reads 4 MiB at 4 MiB/s" upid t0
	peer_listen c-up --read-rate 4M -o "$T/c.got" -t 60
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	t0=$(now_ms)
	peer c-client connect 127.0.0.1 "$ZPORT" -s "$T/mid" -t 30 ||
		fail "$what: client: $(cat "$T/c-client.err")"
	peer_wait "$upid" c-up 30 || fail "$what: upstream: $(cat "$T/c-up.err")"
	same_file "$T/mid" "$T/c.got" "$what"
	expect_conn_log "up=4194304 down=0 .*end=closed" "$what"
	stop_zproxy
	ok "$what: every byte (sha256, $(( $(now_ms) - t0 )) ms)"
	rm -f "$T/c.got"
}

# d. trap 2: the client closes while its bytes still wait in zproxy
trap2() {
	local size=$1 f delay what upid
	f=$T/small; [ "$size" = 64M ] && f=$T/big
	# 2 s: the client's 2 MiB must be in zproxy before the upstream
	# wakes (1 s was close under sanitizers on a loaded machine)
	delay=2
	what="$mode: trap 2, client sends $size + FIN and closes while the upstream sleeps ${delay} s"
	peer_listen d-up --read-delay "$delay" -o "$T/d.got" -t 60
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	peer d-client connect 127.0.0.1 "$ZPORT" -s "$f" --no-read -t 30 ||
		fail "$what: client: $(cat "$T/d-client.err")"
	if [ "$size" = 2M ]; then
		alive "$upid" && [ ! -s "$T/d.got" ] ||
			skip "$what: the upstream read before the client left: no bytes were waiting, trap 2 not tested"
	fi
	peer_wait "$upid" d-up 30 || fail "$what: upstream: $(cat "$T/d-up.err")"
	same_file "$f" "$T/d.got" "$what"
	expect_conn_log "up=$(stat -c %s "$f") down=0 .*end=closed" "$what"
	stop_zproxy
	ok "$what: all bytes arrive (sha256)"
	rm -f "$T/d.got"
}

for mode in $MODES; do
	subcase slow_upstream
	subcase slow_client
	subcase rate_limited
	subcase trap2 2M
	subcase trap2 64M
done

zp_done
