#!/bin/bash
# threads.sh - --threads N: N worker threads relay, the main thread accepts
# and hands each new connection to the least-loaded one.
#   a. bad values (0, 65, abc, -1, 2x, 1e1, empty, one too big for a long,
#      given twice) exit 64 with one line on stderr naming threads (and
#      not as an unknown option);
#   b. --threads 1 and 64, the default (the CPUs zproxy may run on, also
#      under taskset) start and relay; /metrics says zproxy_threads N and
#      has one zproxy_thread_connections{thread="i"} for i = 0..N-1, and
#      /proc shows at least N threads;
#   c. --threads 2 and 4: 8 concurrent transfers, each of its own bytes
#      both ways at once (client: a file of its own up; upstream: the
#      --send-gen stream of its accept index down); while all 8 are open
#      (the upstream accepts only after 6 s) every thread holds some; the
#      SHA-256s of what arrived at each end are those that were sent, one
#      for one; each pair logged end=closed; afterwards every thread holds
#      0, and /metrics, SIGUSR1's stats line and the exit report count 8
#      connections and the bytes of all of them exactly;
#   d. --threads 2, 64 connections held open at once: both threads hold
#      some, 64 in all, the larger share at most 1.5 times the smaller;
#      all back to 0 when they close;
#   e. --threads 2, 16 held pairs that moved bytes: /metrics and SIGUSR1
#      count their bytes while open, summed over both threads; again once
#      they closed, and in the exit report;
#   f. --threads 2, SIGTERM during 4 slowly read downloads spread over
#      both threads: "not accepting" is logged, every transfer completes
#      byte-exact both ways (end=closed), zproxy exits 0 by itself and its
#      exit report counts every byte.
# c to f in splice and copy mode.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

NCLI=8				# c: concurrent transfers
DOWNSZ=$((4 * 1024 * 1024 + 4321))	# c: what the upstream sends each
for i in $(seq 0 $((NCLI - 1))); do
	# c, f: each client's own bytes, each of its own size
	mkdata "up.$i" $((3 * 1024 * 1024 + i * 7919))
done
DBIG=$((12 * 1024 * 1024))	# f: each download
DRATE=1M			# f: its reader's rate: 12 s, zproxy holding each for
				# the first 8 or so (the rest in socket buffers):
				# open still at SIGTERM on a loaded machine (at 2M,
				# 6 s, a CI run saw them all close before it)
DCLI=4				# f: downloads
mkdata dbig "$DBIG"

# shas FILE...: their SHA-256s, sorted, on one line (a multiset: which
# connection got which stream depends on the order of accepts).
shas() {
	local f
	for f in "$@"; do
		[ -f "$f" ] || { echo "($f missing)"; continue; }
		sha "$f"
	done | sort | tr '\n' ' '
}

# The streams a `zp-peer listen -g DOWNSZ` sends its connections 0..7,
# taken straight from one (no zproxy): what c's clients must get, in some
# order.
peer_listen ref-up -n "$NCLI" -g "$DOWNSZ" -t 60
peer ref connect 127.0.0.1 "$PEER_PORT" -n "$NCLI" -o "$T/ref.%d" -t 60 ||
	fail "reference streams: $(cat "$T/ref.err")"
peer_wait "$PEER_PID" ref-up 30 || fail "reference streams: $(cat "$T/ref-up.err")"
REF_SHAS=$(shas $(seq -f "$T/ref.%g" 0 $((NCLI - 1))))
UP_SHAS=$(shas $(seq -f "$ZP_T0/up.%g" 0 $((NCLI - 1))))
[ "$(echo "$REF_SHAS" | wc -w)" -eq "$NCLI" ] &&
    [ "$(echo "$REF_SHAS" | tr ' ' '\n' | sort -u | grep -c .)" -eq "$NCLI" ] ||
	fail "reference streams: not $NCLI different ones: $REF_SHAS"

# ---- helpers -----------------------------------------------------------

# start_stats ARGS...: start_zproxy with --stats on a free port ($SPORT).
start_stats() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy --stats "127.0.0.1:$SPORT" "$@"
	wait_port "$SPORT" 10 || fail "nothing listens on the --stats port $SPORT"
}

# mval SERIES: its value in $T/metrics (status 1 when it is missing).
mval() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { exit !f }' "$T/metrics"; }

# per_thread: "THREAD COUNT" for each zproxy_thread_connections series in
# $T/metrics, in thread order.
per_thread() {
	sed -n 's/^zproxy_thread_connections{thread="\([0-9]*\)"} \([0-9][0-9]*\)$/\1 \2/p' \
	    "$T/metrics" | sort -n
}

# check_threads N WHAT: /metrics says zproxy_threads N, has exactly one
# zproxy_thread_connections series for each of threads 0..N-1, and passes
# promtool; zproxy runs at least N threads.
check_threads() {
	local n=$1 what=$2 labels want tasks
	stats_scrape
	stats_is zproxy_threads "$n" "$what"
	labels=$(per_thread | cut -d' ' -f1 | tr '\n' ' ')
	want=$(seq 0 $((n - 1)) | tr '\n' ' ')
	[ "$labels" = "$want" ] ||
		fail "$what: zproxy_thread_connections for threads '${labels% }', want one each for ${want% }: $(grep thread "$T/metrics" | head -n 5 | tr '\n' '|')"
	promcheck "$what"
	tasks=$(ls "/proc/$ZPID/task" | wc -l)
	[ "$tasks" -ge "$n" ] || fail "$what: zproxy runs $tasks threads"
}

# wait_open N SECS WHAT: scrape until zproxy_connections_open is N and the
# per-thread counts add up to N (each one N or less: no wrapped unsigned);
# THREAD_COUNTS holds them, in thread order, space-separated.
wait_open() {
	local deadline=$(( $(now_ms) + $2 * 1000 )) open
	while :; do
		stats_scrape
		open=$(mval zproxy_connections_open)
		THREAD_COUNTS=$(per_thread | cut -d' ' -f2 | tr '\n' ' ')
		[ "$open" = "$1" ] &&
			echo "$THREAD_COUNTS" | awk -v n="$1" '{ for (i = 1; i <= NF; i++) { if ($i > n) exit 1; s += $i } }
			    END { exit !(NF > 0 && s == n) }' &&
			return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$3: zproxy_connections_open ${open:-missing}, per thread '${THREAD_COUNTS% }' after ${2}s, want $1 in all"
		sleep 0.05
	done
}

# busy_threads: how many of THREAD_COUNTS are above 0.
busy_threads() { echo "$THREAD_COUNTS" | awk '{ for (i = 1; i <= NF; i++) n += $i > 0 } END { print n + 0 }'; }

# wait_series SERIES VALUE SECS WHAT: scrape until SERIES is VALUE.
wait_series() {
	local deadline=$(( $(now_ms) + $3 * 1000 )) v
	while :; do
		stats_scrape
		v=$(mval "$1") && [ "$v" = "$2" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$4: $1 is ${v:-missing} after ${3}s, want $2"
		sleep 0.05
	done
}

# usr1 WHAT: SIGUSR1, then wait for the new "stats: connections" line;
# it is left in STATS_LINE.
usr1() {
	local before deadline
	before=$(grep -c 'stats: connections' "$ZLOG")
	kill -USR1 "$ZPID"
	deadline=$(( $(now_ms) + 5000 ))
	until [ "$(grep -c 'stats: connections' "$ZLOG")" -gt "$before" ]; do
		alive "$ZPID" || fail "$1: zproxy died after SIGUSR1"
		[ "$(now_ms)" -ge "$deadline" ] && fail "$1: no stats line within 5 s of SIGUSR1"
		sleep 0.02
	done
	STATS_LINE=$(grep 'stats: connections' "$ZLOG" | sed -n "$((before + 1))p")
}

# counters_are LINE WHAT OPEN TOTAL UP DOWN: a counters line (SIGUSR1's or
# the exit report) says connections open=OPEN total=TOTAL failed=0 and
# bytes up=UP down=DOWN.
counters_are() {
	echo "$1" | grep -q ": connections open=$3 total=$4 failed=0; bytes up=$5 down=$6;" ||
		fail "$2: want connections open=$3 total=$4 failed=0; bytes up=$5 down=$6: $1"
}

# exit_report WHAT TOTAL UP DOWN: the stopped zproxy's "stopping:" counters.
exit_report() {
	local line
	line=$(grep -m1 'stopping: connections open=' "$ZLOG") ||
		fail "$1: no exit report ('stopping: connections open=...') in the log"
	counters_are "$line" "$1: exit report" 0 "$2" "$3" "$4"
}

# sum_sizes FILE...: their sizes added up.
sum_sizes() { stat -c %s "$@" | awk '{ s += $1 } END { print s + 0 }'; }

# end_closed N WHAT: wait for N more conn= lines, all end=closed.
end_closed() {
	local i
	for i in $(seq 1 "$1"); do
		expect_conn_log 'end=closed' "$2: connection $i of $1"
	done
}

# ---- a. bad values -----------------------------------------------------

UP=127.0.0.1:$(free_port)	# well-formed but unused: the parse fails first
L=127.0.0.1:$(free_port)

# bad_threads ARGS...: zproxy -l L -u UP ARGS must exit 64 within 10 s,
# print nothing on stdout and one line on stderr that names threads, and
# know the option.
bad_threads() {
	local rc lines args what
	timeout -k 2 10 "$ZPROXY" -l "$L" -u "$UP" "$@" >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	args=$(printf '%q ' "$@")
	what="zproxy ${args% } -> exit $rc"
	[ "$rc" -eq 124 ] && fail "$what: hung (killed after 10 s)"
	[ "$rc" -eq 64 ] || fail "$what, expected 64: $(head -c 300 "$T/bad.err")"
	sanitizer_clean "$T/bad.err" || fail "$what: sanitizer report: $(head -c 300 "$T/bad.err")"
	lines=$(wc -l <"$T/bad.err")
	[ "$lines" -eq 1 ] ||
		fail "$what: $lines lines on stderr, expected 1: $(head -n 5 "$T/bad.err" | tr '\n' '|')"
	grep -qi -- 'threads' "$T/bad.err" ||
		fail "$what: stderr does not name --threads: $(cat "$T/bad.err")"
	grep -qi 'unknown option' "$T/bad.err" &&
		fail "$what: --threads is not an option yet: $(cat "$T/bad.err")"
	[ -s "$T/bad.out" ] && fail "$what: wrote to stdout: $(head -c 200 "$T/bad.out")"
	ok "${args% } -> 64: $(cat "$T/bad.err")"
}

bad_values() {
	local v
	for v in 0 65 abc -1 2x 1e1 '' 99999999999999999999; do
		bad_threads --threads "$v"
	done
	bad_threads --threads 2 --threads 2
}

# ---- b. how many -------------------------------------------------------

# relay_one WHAT ARGS...: start zproxy (ARGS) in front of an echo peer, check
# zproxy_threads is THREADS_WANT, relay 64 KiB each way, stop.
relay_one() {
	local what=$1 epid; shift
	peer_listen echo --echo -n 1 -t 30
	epid=$PEER_PID
	start_stats "$@" -u "127.0.0.1:$PEER_PORT"
	check_threads "$THREADS_WANT" "$what"
	peer one connect 127.0.0.1 "$ZPORT" -g 64K -x 64K -t 20 ||
		fail "$what: 64 KiB echoed: $(cat "$T/one.err")"
	peer_wait "$epid" echo 10 || fail "$what: echo: $(cat "$T/echo.err")"
	wait_open 0 10 "$what: after the connection"
	stop_zproxy
	ok "$what: zproxy_threads $THREADS_WANT, one zproxy_thread_connections each, 64 KiB echoed, clean stop"
}

# the CPUs this shell may run on, one a line
allowed_cpus() {
	sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status |
		tr ',' '\n' |
		awk -F- 'NF { e = (NF > 1) ? $2 : $1; for (c = $1; c <= e; c++) print c }'
}

counts() {
	local n cpus two
	THREADS_WANT=1 relay_one "--threads 1" --threads 1
	THREADS_WANT=64 relay_one "--threads 64" --threads 64
	n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) || fail "nproc failed"
	[ "$n" -gt 64 ] && n=64
	THREADS_WANT=$n relay_one "no --threads, $n CPUs allowed"
	command -v taskset >/dev/null || fail "taskset not found (util-linux)"
	cpus=$(allowed_cpus)
	ZP_WRAP=(taskset -c "$(echo "$cpus" | head -n 1)")
	THREADS_WANT=1 relay_one "no --threads, under taskset -c $(echo "$cpus" | head -n 1)"
	if [ "$(echo "$cpus" | wc -l)" -ge 2 ]; then
		two=$(echo "$cpus" | head -n 2 | paste -sd,)
		ZP_WRAP=(taskset -c "$two")
		THREADS_WANT=2 relay_one "no --threads, under taskset -c $two"
	else
		note "one CPU allowed: no taskset case with two"
	fi
	ZP_WRAP=()
}

# ---- c. integrity ------------------------------------------------------

# integrity N: --threads N, NCLI clients at once, each sending its up.i
# and receiving into got-down.i; the upstream sends each the -g stream of
# its accept index and receives into got-up.J.
integrity() {
	local n=$1 what="$mode, --threads $1: $NCLI transfers at once" i pids=() upid
	local busy counts upsum downsum t0 ms
	rm -f "$T"/got-up.* "$T"/got-down.*
	# no accept for 6 s from its start: in that window every pair is
	# open (its upstream connection waits in the backlog) and none ends
	peer_listen up -n "$NCLI" --accept-delay 6 -g "$DOWNSZ" -o "$T/got-up.%d" -t 60
	upid=$PEER_PID
	start_stats -v -m "$mode" --threads "$n" -u "127.0.0.1:$PEER_PORT"
	t0=$(now_ms)
	for i in $(seq 0 $((NCLI - 1))); do
		zp_bg "c$i" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -s "$ZP_T0/up.$i" \
		    -o "$T/got-down.$i" -t 60
		pids+=("$BG_PID")
	done
	wait_open "$NCLI" 10 "$what: all open before the upstream accepts (6 s after it started: if it did, the window was too short)"
	counts=${THREAD_COUNTS% }
	busy=$(busy_threads)
	[ "$busy" -eq "$n" ] ||
		fail "$what: with $NCLI pairs open only $busy of $n threads hold any: $counts"
	for i in $(seq 0 $((NCLI - 1))); do
		peer_wait "${pids[$i]}" "c$i" 60 || fail "$what: client $i: $(cat "$T/c$i.err")"
	done
	peer_wait "$upid" up 30 || fail "$what: upstream: $(cat "$T/up.err")"
	ms=$(( $(now_ms) - t0 ))
	[ "$(shas "$T"/got-up.*)" = "$UP_SHAS" ] ||
		fail "$what: client->upstream: the sha256s that arrived are not those sent (sizes $(stat -c %s "$T"/got-up.* | tr '\n' ' '))"
	[ "$(shas $(seq -f "$T/got-down.%g" 0 $((NCLI - 1))))" = "$REF_SHAS" ] ||
		fail "$what: upstream->client: the sha256s that arrived are not those sent (sizes $(stat -c %s "$T"/got-down.* | tr '\n' ' '))"
	end_closed "$NCLI" "$what"
	wait_open 0 10 "$what: after the transfers"
	check_threads "$n" "$what"
	upsum=$(sum_sizes $(seq -f "$ZP_T0/up.%g" 0 $((NCLI - 1))))
	downsum=$((NCLI * DOWNSZ))
	stats_is zproxy_connections_total "$NCLI" "$what"
	stats_is 'zproxy_bytes_total{direction="up"}' "$upsum" "$what: bytes up"
	stats_is 'zproxy_bytes_total{direction="down"}' "$downsum" "$what: bytes down"
	usr1 "$what"
	counters_are "$STATS_LINE" "$what: SIGUSR1" 0 "$NCLI" "$upsum" "$downsum"
	stop_zproxy
	exit_report "$what" "$NCLI" "$upsum" "$downsum"
	ok "$what: open on every thread ($counts), sha256 of each stream equal both ways, $NCLI x end=closed, $upsum bytes up and $downsum down in /metrics, SIGUSR1 and the exit report (${ms} ms)"
	rm -f "$T"/got-up.* "$T"/got-down.*
}

# ---- d. balance --------------------------------------------------------

balance() {
	local what="$mode, --threads 2: 64 connections held at once" hid counts
	peer_listen up -n 0 -t 0 --no-shut --allow-reset
	start_stats -m "$mode" --threads 2 -u "127.0.0.1:$PEER_PORT"
	check_threads 2 "$what"
	zp_bg hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 64 --hold -t 60
	hid=$BG_PID
	wait_line "$T/hold.out" '^connected 64$' 20 "$hid" >/dev/null ||
		fail "$what: the clients did not connect: $(cat "$T/hold.err")"
	wait_estab "$PEER_PORT" 64 10 ||
		fail "$what: the upstream has $(estab "$PEER_PORT") connections, want 64"
	wait_open 64 10 "$what"
	echo "$THREAD_COUNTS" | awk '{ min = $1; max = $1
		for (i = 2; i <= NF; i++) { if ($i < min) min = $i; if ($i > max) max = $i }
		exit !(NF == 2 && min > 0 && 2 * max <= 3 * min) }' ||
		fail "$what: per thread ${THREAD_COUNTS% }: want both above 0 and the larger at most 1.5 x the smaller"
	counts=${THREAD_COUNTS% }
	zproxy_alive "with 64 pairs"
	zp_stop "$hid"
	peer_wait "$hid" hold 10 >/dev/null
	wait_open 0 10 "$what: after the clients closed"
	stats_is zproxy_connections_total 64 "$what"
	stop_zproxy
	ok "$what: per thread $counts while open (64 in all), all 0 once closed"
}

# ---- e. counters over threads, pairs open ------------------------------

LA=123457	# e: what each of the first 8 held clients sends
LB=65537	# e: what each of the other 8 sends
LDOWN=54321	# e: what the upstream sends each

live_counters() {
	local what="$mode, --threads 2: 16 held pairs that moved bytes" apid bpid up down counts
	peer_listen up -n 0 -t 0 -g "$LDOWN" --no-shut --allow-reset
	start_stats -m "$mode" --threads 2 -u "127.0.0.1:$PEER_PORT"
	check_threads 2 "$what"
	zp_bg holda "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 8 -g "$LA" --hold -t 60
	apid=$BG_PID
	zp_bg holdb "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 8 -g "$LB" --hold -t 60
	bpid=$BG_PID
	wait_line "$T/holda.out" '^connected 8$' 20 "$apid" >/dev/null ||
		fail "$what: clients: $(cat "$T/holda.err")"
	wait_line "$T/holdb.out" '^connected 8$' 20 "$bpid" >/dev/null ||
		fail "$what: clients: $(cat "$T/holdb.err")"
	up=$((8 * LA + 8 * LB)); down=$((16 * LDOWN))
	wait_series 'zproxy_bytes_total{direction="up"}' "$up" 10 "$what: open pairs' bytes up"
	wait_series 'zproxy_bytes_total{direction="down"}' "$down" 10 "$what: open pairs' bytes down"
	wait_open 16 10 "$what"
	counts=${THREAD_COUNTS% }
	[ "$(busy_threads)" -eq 2 ] || fail "$what: per thread $counts: want both above 0"
	usr1 "$what, open"
	counters_are "$STATS_LINE" "$what: SIGUSR1 while open" 16 16 "$up" "$down"
	zp_stop "$apid"; zp_stop "$bpid"
	peer_wait "$apid" holda 10 >/dev/null
	peer_wait "$bpid" holdb 10 >/dev/null
	wait_open 0 10 "$what: after the clients closed"
	stats_is 'zproxy_bytes_total{direction="up"}' "$up" "$what: closed"
	stats_is 'zproxy_bytes_total{direction="down"}' "$down" "$what: closed"
	usr1 "$what, closed"
	counters_are "$STATS_LINE" "$what: SIGUSR1 once closed" 0 16 "$up" "$down"
	stop_zproxy
	exit_report "$what" 16 "$up" "$down"
	ok "$what: per thread $counts; $up bytes up and $down down, summed over the threads, in /metrics and SIGUSR1 while open and once closed, and in the exit report"
}

# ---- f. drain ----------------------------------------------------------

drain() {
	local what="$mode, --threads 2: SIGTERM during $DCLI slow downloads" i pids=() upid
	local counts rc at sig_t0 upsum
	rm -f "$T"/dgot-*
	peer_listen dup -n "$DCLI" -s "$ZP_T0/dbig" -o "$T/dgot-up.%d" -t 60
	upid=$PEER_PID
	start_stats -v -m "$mode" --threads 2 --drain-timeout 30 -u "127.0.0.1:$PEER_PORT"
	check_threads 2 "$what"
	for i in $(seq 0 $((DCLI - 1))); do
		zp_bg "d$i" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -s "$ZP_T0/up.$i" \
		    -o "$T/dgot-down.$i" --read-rate "$DRATE" -t 60
		pids+=("$BG_PID")
	done
	for i in $(seq 0 $((DCLI - 1))); do
		wait_size "$T/dgot-down.$i" 1048576 10 ||
			fail "$what: download $i did not start: $(cat "$T/d$i.err")"
	done
	wait_open "$DCLI" 10 "$what"
	counts=${THREAD_COUNTS% }
	[ "$(busy_threads)" -eq 2 ] || fail "$what: per thread $counts: want both above 0"
	kill -TERM "$ZPID"
	sig_t0=$(now_ms)
	for i in $(seq 0 $((DCLI - 1))); do
		at=$(size "$T/dgot-down.$i")
		alive "${pids[$i]}" && [ "$at" -lt "$DBIG" ] ||
			fail "$what: download $i was over before SIGTERM (slow the reader)"
	done
	wait_line "$ZLOG" 'not accepting' 2 "$ZPID" >/dev/null ||
		fail "$what: no 'not accepting' line within 2 s of SIGTERM"
	for i in $(seq 0 $((DCLI - 1))); do
		peer_wait "${pids[$i]}" "d$i" 30 || fail "$what: client $i: $(cat "$T/d$i.err")"
		same_file "$ZP_T0/dbig" "$T/dgot-down.$i" "$what: upstream->client $i"
	done
	peer_wait "$upid" dup 10 || fail "$what: upstream: $(cat "$T/dup.err")"
	[ "$(shas "$T"/dgot-up.*)" = "$(shas $(seq -f "$ZP_T0/up.%g" 0 $((DCLI - 1))))" ] ||
		fail "$what: client->upstream: the sha256s that arrived are not those sent"
	zp_wait_exit "$ZPID" 10
	rc=$?
	[ "$rc" = 124 ] && fail "$what: zproxy still runs 10 s after the transfers"
	[ "$rc" = 0 ] || fail "$what: zproxy exited with status $rc"
	sanitizer_clean "$ZLOG" || fail "$what: sanitizer report in the zproxy log"
	sandbox_clean "$ZLOG" || fail "$what: the sandbox refused a system call: $(grep -m 3 'sandbox: system call' "$ZLOG")"
	ZPID=
	end_closed "$DCLI" "$what"
	upsum=$(sum_sizes $(seq -f "$ZP_T0/up.%g" 0 $((DCLI - 1))))
	exit_report "$what" "$DCLI" "$upsum" $((DCLI * DBIG))
	ok "$what: per thread $counts at SIGTERM; every transfer completed byte-exact both ways (end=closed), zproxy exited 0 by itself $(( $(now_ms) - sig_t0 )) ms after SIGTERM, exit report exact"
	rm -f "$T"/dgot-*
}

subcase bad_values
subcase counts
# The modes side by side (subcase_bg: each its own zproxy, peers and $T;
# the clients' files are the test's, in $ZP_T0): integrity's upstream
# accepts after 6 s, drain's readers take 6 s.
threads_mode() {
	mode=$1
	subcase integrity 2
	subcase integrity 4
	subcase balance
	subcase live_counters
	subcase drain
}
for mode in $MODES; do
	subcase_bg threads_mode "$mode"
done
subcases_wait

zp_done
