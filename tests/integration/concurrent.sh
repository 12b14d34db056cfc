#!/bin/bash
# concurrent.sh - 300 connections at once through zproxy to an echo server,
# each sending 128 KiB of its own pseudo-random stream and verifying every
# byte of the echo (zp-peer --send-gen/--expect-gen); every connection is
# logged end=closed; zproxy's sockets return to baseline afterwards, and a
# second round does not leave more pipes behind than the first (a pool
# may keep pipes, a leak would grow). And --max-conns 4 with 40 clients at
# once: never more than 4 pairs, all served. And fairness (trap 6): 100-byte
# ping-pongs next to a bulk flow, p99 < 100 ms. Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

N=${ZP_CONCURRENT_CONNS:-300}
K=128K

# rounds: two rounds of $N connections through one zproxy (-m $mode).
rounds() {
	local epid round what t0 ms deadline closed modes pipes pipes_after=
	peer_listen echo --echo -n 0 -t 120
	epid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	peer warm connect 127.0.0.1 "$ZPORT" -g 64K -x 64K -t 20 ||
		fail "$mode: warm-up connection: $(cat "$T/warm.err")"
	expect_conn_log 'end=closed' "$mode: warm-up connection"
	fd_baseline
	for round in 1 2; do
		what="$mode: round $round, $N concurrent connections x $K echoed"
		t0=$(now_ms)
		peer conc connect 127.0.0.1 "$ZPORT" -n "$N" -g "$K" -x "$K" -t 60 ||
			fail "$what: $(cat "$T/conc.err")"
		ms=$(( $(now_ms) - t0 ))
		zproxy_alive "after $what"
		wait_fd_baseline 10 "$what" sockets
		deadline=$(( $(now_ms) + 10000 ))
		while [ "$(conn_lines)" -lt $(( ZP_SEEN + N )) ] && [ "$(now_ms)" -lt "$deadline" ]; do
			sleep 0.05
		done
		closed=$(grep ' conn=[0-9]' "$ZLOG" | tail -n +$((ZP_SEEN + 1)) | grep -c 'end=closed')
		modes=$(grep ' conn=[0-9]' "$ZLOG" | tail -n +$((ZP_SEEN + 1)) | grep -o 'mode=[a-z]*' | sort | uniq -c | tr -s ' \n' ' ')
		[ "$closed" -eq "$N" ] ||
			fail "$what: $closed of $N connections logged end=closed: $(grep ' conn=' "$ZLOG" | tail -n +$((ZP_SEEN + 1)) | grep -v end=closed | head -n 3)"
		skip_conn_logs
		pipes=$(pipe_count "$ZPID")
		if [ -n "$pipes_after" ] && [ "$pipes" -gt "$pipes_after" ]; then
			fail "$what: zproxy holds $pipes pipe fds, $pipes_after after round 1: pipes leak"
		fi
		pipes_after=$pipes
		ok "$what: all verified, $N x end=closed ($modes), sockets back to baseline, $pipes pipe fds (${ms} ms)"
	done
	stop_zproxy
	zp_stop "$epid"
}

# max_conns: --max-conns 4 and 40 clients at once against an echo that
# waits 0.2 s before reading: never more than 4 pairs open (sampled from
# zproxy's sockets), the others wait in the backlog and all 40 are served.
max_conns() {
	local what="$mode: --max-conns 4, 40 clients at once" cpid most=0 s t0 ms
	peer_listen slowecho --echo --read-delay 0.2 -n 0 -t 60
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --max-conns 4
	fd_baseline
	t0=$(now_ms)
	zp_bg wave "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 40 -g 64K -x 64K -t 30
	cpid=$BG_PID
	while alive "$cpid"; do
		s=$(sock_count "$ZPID")
		[ "$s" -gt "$most" ] && most=$s
		sleep 0.02
	done
	peer_wait "$cpid" wave 1 || fail "$what: $(cat "$T/wave.err")"
	ms=$(( $(now_ms) - t0 ))
	[ $(( (most - BASE_SOCK) / 2 )) -le 4 ] ||
		fail "$what: up to $(( (most - BASE_SOCK) / 2 )) pairs were open at once"
	[ "$ms" -ge 1800 ] ||
		fail "$what: done in ${ms} ms: 10 waves of 0.2 s cannot be that fast, the limit did not hold"
	wait_fd_baseline 10 "$what" sockets
	stop_zproxy
	ok "$what: at most $(( (most - BASE_SOCK) / 2 )) pairs open at once, all 40 verified (${ms} ms)"
}

# fairness: a bulk flow (client sends as fast as it can, the echo sends it
# all back) and, next to it on the same zproxy, 1000 ping-pongs of 100
# bytes: the small flow must not wait behind the bulk one (p99 < 100 ms).
fairness() {
	local what="$mode: 1000 x 100-byte ping-pong next to a bulk flow" bpid rtt p99 bulk
	peer_listen echo --echo --nodelay -n 0 -t 60
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	zp_bg bulk "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g 64G -t 60
	bpid=$BG_PID
	sleep 0.3	# let the bulk flow fill every buffer
	peer pp connect 127.0.0.1 "$ZPORT" --pingpong 1000 --msg-size 100 --nodelay -t 30 ||
		fail "$what: $(cat "$T/pp.err")"
	# 64 GiB cannot be through yet: it ran all along (the echo reads
	# everything, so it was moving, not stalled)
	alive "$bpid" || fail "$what: the bulk flow ended early: $(cat "$T/bulk.err")"
	zp_stop "$bpid"
	rtt=$(grep '^rtt ' "$T/pp.out")
	p99=$(echo "$rtt" | sed 's/.*p99=\([0-9.]*\)ms.*/\1/')
	awk -v b="$p99" 'BEGIN { exit !(b < 100) }' ||
		fail "$what: the small flow waits behind the bulk one (p99 must be < 100 ms): $rtt"
	stop_zproxy
	bulk=$(grep ' conn=[0-9]' "$ZLOG" | grep -v ' up=100000 ' | grep -o 'up=[0-9]* down=[0-9]* duration=[0-9.]*s' | head -n 1)
	ok "$what: $rtt; bulk flow: $bulk"
}

for mode in $MODES; do
	subcase rounds
	subcase fairness
	subcase max_conns
done

zp_done
