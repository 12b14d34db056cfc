#!/bin/bash
# fdlimit.sh - zproxy under `ulimit -n 64` (soft and hard, so that it cannot
# raise it):
#   a. --max-conns 200, far above what 64 descriptors allow, so that accept
#      or the upstream socket hits EMFILE: 100 clients connect and hold;
#      zproxy must serve some of them (at least one pair open), must not
#      spin (under 25 CPU ticks a second, over a window of about 2 s timed
#      by the test, at the limit), and once the clients
#      leave, its sockets return to baseline and a fresh connection is
#      relayed byte-exact (1 MiB each way through an echo server);
#   b. the default (derived) max-conns: 50 clients hold, same checks; then
#      40 clients at once against an echo that waits 0.2 s before reading,
#      so that most must wait for a free slot: none may be dropped, every
#      one gets its bytes back.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

NOFILE=64
# A spinning loop burns 100 ticks a second (a whole CPU); a quarter of that
# leaves room for a sanitizer build's accept retries at the limit. The
# bound is per second of the window as measured: a sleep on a loaded
# machine may last longer than asked.
MAX_TICKS_PER_S=25

# wait_fd_stable SECS: wait until zproxy's descriptor count stays the same
# over 3 samples 0.2 s apart; sets STABLE_FDS.
wait_fd_stable() {
	local deadline=$(( $(now_ms) + $1 * 1000 )) prev=-1 same=0 n
	while [ "$(now_ms)" -lt "$deadline" ]; do
		n=$(fd_count "$ZPID")
		if [ "$n" = "$prev" ]; then
			same=$((same + 1))
			[ "$same" -ge 2 ] && { STABLE_FDS=$n; return 0; }
		else
			same=0
		fi
		prev=$n
		sleep 0.2
	done
	fail "zproxy's descriptor count did not settle within ${1}s (last $n)"
}

# hold_check WHAT NCONNS: NCONNS clients connect and hold; zproxy serves
# some, does not spin; they leave; sockets back to baseline.
hold_check() {
	local what=$1 n=$2 hpid c1 c2 s t0 ms
	zp_bg hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n "$n" --hold -t 60
	hpid=$BG_PID
	wait_line "$T/hold.out" "^connected $n\$" 15 "$hpid" >/dev/null ||
		fail "$what: $n clients could not all connect within 15 s: $(cat "$T/hold.err")"
	wait_fd_stable 20
	s=$(sock_count "$ZPID")
	t0=$(now_ms)
	c1=$(cpu_ticks "$ZPID")
	sleep 2		# the stall being measured
	c2=$(cpu_ticks "$ZPID")
	ms=$(( $(now_ms) - t0 ))
	zproxy_alive "while $n clients wait"
	[ "$s" -gt "$BASE_SOCK" ] ||
		fail "$what: with $n clients waiting zproxy serves none: $s socket(s), $STABLE_FDS fds open, RLIMIT_NOFILE $NOFILE"
	[ $((c2 - c1)) -lt $((MAX_TICKS_PER_S * ms / 1000)) ] ||
		fail "$what: zproxy used $((c2 - c1)) CPU ticks in ${ms} ms at the limit (max $((MAX_TICKS_PER_S * ms / 1000))): busy loop"
	zp_stop "$hpid"
	peer_wait "$hpid" hold 5
	wait_fd_baseline 10 "$what: after the $n clients left"
	ok "$what: $n clients held: $(( (s - BASE_SOCK) / 2 )) pairs open, $STABLE_FDS fds, $((c2 - c1)) CPU ticks in ${ms} ms; released: sockets back to baseline"
}

# a. --max-conns 200: EMFILE bites
emfile() {
	local epid
	peer_listen echo --echo -n 0 -t 120
	epid=$PEER_PID
	ZP_WRAP=("${LIMIT[@]}")
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --max-conns 200
	ZP_WRAP=()
	fd_baseline
	hold_check "$mode: ulimit -n $NOFILE, --max-conns 200" 100
	peer fresh connect 127.0.0.1 "$ZPORT" -g 1M -x 1M -t 30 ||
		fail "$mode: ulimit -n $NOFILE, --max-conns 200: a fresh connection after the limit is not served: $(cat "$T/fresh.err")"
	wait_fd_baseline 10 "$mode: after the fresh connection"
	stop_zproxy
	note "$mode: zproxy's own account: $(grep -c 'Too many open files' "$ZLOG") EMFILE line(s), $(grep -o 'accept-pauses=[0-9]*' "$ZLOG")"
	ok "$mode: ulimit -n $NOFILE, --max-conns 200: afterwards a fresh connection echoes 1 MiB byte-exact"
}

# b. derived max-conns: clients beyond it wait and are served
derived() {
	local epid t0 ms
	peer_listen echo --echo -n 0 -t 120
	epid=$PEER_PID
	ZP_WRAP=("${LIMIT[@]}")
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	ZP_WRAP=()
	note "$mode: $(grep -o 'max-conns [0-9]*, RLIMIT_NOFILE [0-9]*' "$ZLOG")"
	fd_baseline
	hold_check "$mode: ulimit -n $NOFILE, derived max-conns" 50
	stop_zproxy
	zp_stop "$epid"

	peer_listen slowecho --echo --read-delay 0.2 -n 0 -t 120
	epid=$PEER_PID
	ZP_WRAP=("${LIMIT[@]}")
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	ZP_WRAP=()
	fd_baseline
	t0=$(now_ms)
	peer wave connect 127.0.0.1 "$ZPORT" -n 40 -g 64K -x 64K -t 30 ||
		fail "$mode: ulimit -n $NOFILE, derived max-conns: 40 clients at once: $(cat "$T/wave.err")"
	ms=$(( $(now_ms) - t0 ))
	wait_fd_baseline 10 "$mode: after 40 clients"
	stop_zproxy
	ok "$mode: ulimit -n $NOFILE, derived max-conns: 40 clients at once all served byte-exact, none dropped (${ms} ms)"
}

LIMIT=(bash -c "ulimit -n $NOFILE && exec \"\$0\" \"\$@\"")
for mode in $MODES; do
	subcase emfile
	subcase derived
done

zp_done
