#!/bin/bash
# drain.sh - SIGTERM drains: stop accepting at once, let open pairs finish
# for up to --drain-timeout, then close what is left and exit 0.
#   a. 64 MiB from the upstream to a client reading at 24 MiB/s; SIGTERM
#      while it is in flight: "not accepting" is logged, a new connect is
#      refused at once, the transfer completes byte-exact (sha256), and
#      zproxy then exits 0 by itself with a "stopping:" line and the pair
#      logged end=closed down=67108864;
#   b. --drain-timeout 1 and a stalled transfer (the client does not
#      read): zproxy closes it and exits 0 about 1 s after SIGTERM
#      (0.8-2.5 s), "stopping:" logged, the pair end=shutdown, and the
#      upstream sees its connection go;
#   c. SIGTERM, then SIGINT (and SIGTERM, then SIGTERM again) with a
#      stalled transfer and --drain-timeout 30 (the default): zproxy
#      exits 0 at once after the second signal (under 1 s).
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata big 64M
BIGSZ=67108864

# zp_exit WHAT SECS: zproxy must exit 0 within SECS; sets EXIT_MS (since
# SIG_T0), checks the "stopping:" line and the sanitizers.
zp_exit() {
	local rc
	zp_wait_exit "$ZPID" "$2"
	rc=$?
	EXIT_MS=$(( $(now_ms) - SIG_T0 ))
	[ "$rc" = 124 ] && fail "$1: zproxy still runs ${2}s after the signal"
	[ "$rc" = 0 ] || fail "$1: zproxy exited with status $rc"
	grep -q 'stopping:' "$ZLOG" || fail "$1: no 'stopping:' line"
	sanitizer_clean "$ZLOG" || fail "$1: sanitizer report in the zproxy log"
	ZPID=
}

# a. the drain lets an open transfer finish
drain_completes() {
	local what="$mode: SIGTERM during a 64 MiB transfer" upid cpid at n how
	rm -f "$T/a.got"
	peer_listen a-up -s "$T/big" -t 60
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --drain-timeout 30
	zp_bg a-client "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --read-rate 24M -o "$T/a.got" -t 60
	cpid=$BG_PID
	wait_size "$T/a.got" 1048576 10 || fail "$what: the transfer did not start: $(cat "$T/a-client.err")"
	kill -TERM "$ZPID"
	SIG_T0=$(now_ms)
	at=$(size "$T/a.got")
	alive "$cpid" && [ "$at" -lt "$BIGSZ" ] ||
		fail "$what: the transfer was over before SIGTERM (slow the reader)"
	wait_line "$ZLOG" 'not accepting' 2 "$ZPID" >/dev/null ||
		fail "$what: no 'not accepting' line within 2 s of SIGTERM"
	peer late connect 127.0.0.1 "$ZPORT" --expect-close 1 -t 5 ||
		fail "$what: a new client during the drain: $(cat "$T/late.out" "$T/late.err" | head -n 2 | tr '\n' ' ')"
	how=$(sed -n 's/^closed after \(.*\)$/\1/p' "$T/late.out")
	echo "$how" | grep -Eq '^0\.0[0-9]{2}s \(refused\)$' ||
		fail "$what: a new client during the drain was not refused at once: closed after $how"
	alive "$ZPID" || fail "$what: zproxy did not wait for the open transfer"
	peer_wait "$cpid" a-client 30 || fail "$what: client: $(cat "$T/a-client.err")"
	peer_wait "$upid" a-up 10 || fail "$what: upstream: $(cat "$T/a-up.err")"
	same_file "$T/big" "$T/a.got" "$what"
	zp_exit "$what" 10
	n=$(grep -c ' conn=[0-9]' "$ZLOG")
	[ "$n" -eq 1 ] || fail "$what: $n conn= lines, expected 1 (the refused client must not be a pair)"
	expect_conn_log "up=0 down=$BIGSZ .*end=closed" "$what"
	ok "$what: SIGTERM at $((at / 1048576)) MiB: new connect refused at once ($how), the transfer completed byte-exact, zproxy exited 0 by itself $((EXIT_MS)) ms after SIGTERM with a 'stopping:' line"
	rm -f "$T/a.got"
}

# stalled NAME ARGS...: zproxy (ARGS) and a 64 MiB download that the
# client does not read: the pair stays open. Sets UPID, CPID.
stalled() {
	local name=$1; shift
	peer_listen "$name-up" -s "$T/big" --allow-reset -t 60
	UPID=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" "$@"
	zp_bg "$name-client" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --read-delay 50 --no-shut --allow-reset -t 60
	CPID=$BG_PID
	wait_estab "$PEER_PORT" 1 5 || fail "$mode: $name: the upstream got no connection"
}

# b. the drain timeout closes what is left
drain_timeout() {
	local what="$mode: --drain-timeout 1, stalled transfer"
	stalled b --drain-timeout 1
	kill -TERM "$ZPID"
	SIG_T0=$(now_ms)
	zp_exit "$what" 10
	[ "$EXIT_MS" -ge 800 ] && [ "$EXIT_MS" -le 2500 ] ||
		fail "$what: exited $EXIT_MS ms after SIGTERM, expected about 1 s"
	expect_conn_log "end=shutdown" "$what"
	peer_wait "$UPID" b-up 10 || fail "$what: upstream: $(cat "$T/b-up.err")"
	ok "$what: closed and exited 0 $EXIT_MS ms after SIGTERM, 'stopping:' logged, pair end=shutdown, the upstream saw it go"
}

# c. a second signal ends at once
second_signal() {
	local what sig
	for sig in INT TERM; do
		what="$mode: SIGTERM then SIG$sig, stalled transfer, drain-timeout 30"
		stalled "c$sig" --drain-timeout 30
		kill -TERM "$ZPID"
		wait_line "$ZLOG" 'not accepting' 2 "$ZPID" >/dev/null ||
			fail "$what: no 'not accepting' line within 2 s of SIGTERM"
		alive "$ZPID" || fail "$what: zproxy did not drain: it exited at the first signal"
		kill "-$sig" "$ZPID"
		SIG_T0=$(now_ms)
		zp_exit "$what" 5
		[ "$EXIT_MS" -le 1000 ] ||
			fail "$what: exited $EXIT_MS ms after the second signal, expected at once"
		zp_stop "$CPID"; zp_wait_exit "$CPID" 5 >/dev/null
		peer_wait "$UPID" "c$sig-up" 10 >/dev/null
		ok "$what: exited 0 $EXIT_MS ms after the second signal"
	done
}

for mode in $MODES; do
	subcase drain_completes
	subcase drain_timeout
	subcase second_signal
done

zp_done
