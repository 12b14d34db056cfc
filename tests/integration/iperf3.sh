#!/bin/bash
# iperf3.sh - a real program through zproxy: iperf3 -c for 2 s, forward and
# reverse (-R), in both modes; iperf3 (control and data connections both go
# through zproxy) must exit 0 and report a non-zero throughput in --json
# (no speed is asserted). Skipped (77) when IPERF3 is empty.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

if [ -z "${IPERF3:-}" ]; then
	echo "# SKIP: IPERF3 is empty (iperf3 not found at configure time)"
	exit 77
fi
[ -x "$IPERF3" ] || { echo "not ok - IPERF3=$IPERF3 is not executable"; exit 1; }

# start_iperf3_server: on a free 127.0.0.1 port; waits until it listens
# (read from /proc/net/tcp: a probe connection would be taken for a test).
start_iperf3_server() {
	for _ in 1 2 3 4 5; do
		IPORT=$(free_port -b 127.0.0.1)
		zp_bg iperf3-server "$IPERF3" -s -B 127.0.0.1 -p "$IPORT"
		IPID=$BG_PID
		wait_port "$IPORT" 10 && alive "$IPID" && return 0
		alive "$IPID" && fail "iperf3 -s did not listen on $IPORT within 10 s"
		wait "$IPID" 2>/dev/null
	done
	fail "iperf3 -s could not start: $(head -c 300 "$T/iperf3-server.out" "$T/iperf3-server.err")"
}

# run_iperf3 [-R]: 2 s through the current zproxy; asserts success and a
# non-zero bits_per_second in the end summary.
run_iperf3() {
	local dir=${1:-} what bps json=$T/iperf3.json
	what="$mode: iperf3 -c -t 2 ${dir:-(client sends)}"
	[ "$dir" = -R ] && what="$mode: iperf3 -c -t 2 -R (server sends)"
	# shellcheck disable=SC2086
	timeout -k 5 30 "$IPERF3" -c 127.0.0.1 -p "$ZPORT" -t 2 $dir --json \
	    >"$json" 2>"$T/iperf3-client.err" ||
		fail "$what: iperf3 failed: $(grep -m1 '"error"' "$json") $(head -c 300 "$T/iperf3-client.err")"
	# "sum_received": { ... "bits_per_second": N ... } in the "end" section
	bps=$(tr -d ' \n\t' <"$json" |
		sed -n 's/.*"sum_received":{[^}]*"bits_per_second":\([0-9.e+]*\).*/\1/p')
	[ -n "$bps" ] || fail "$what: no sum_received.bits_per_second in its JSON"
	awk -v b="$bps" 'BEGIN { exit !(b > 0) }' ||
		fail "$what: throughput $bps bit/s"
	# a control and a data connection, both through zproxy
	local deadline=$(( $(now_ms) + 5000 )) ends
	while [ "$(conn_lines)" -lt $((ZP_SEEN + 2)) ] && [ "$(now_ms)" -lt "$deadline" ]; do
		sleep 0.05
	done
	[ "$(conn_lines)" -ge $((ZP_SEEN + 2)) ] ||
		fail "$what: zproxy logged $(( $(conn_lines) - ZP_SEEN )) connection(s), expected a control and a data connection"
	ends=$(grep ' conn=[0-9]' "$ZLOG" | tail -n +$((ZP_SEEN + 1)) | grep -o 'end=[a-z-]*' | sort | uniq -c | tr -s ' \n' ' ')
	skip_conn_logs
	ok "$what: exit 0, $(awk -v b="$bps" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }') received; zproxy logged$ends"
}

through_zproxy() {
	start_zproxy -v -m "$mode" -u "127.0.0.1:$IPORT"
	run_iperf3
	run_iperf3 -R
	stop_zproxy
}

start_iperf3_server
for mode in $MODES; do
	subcase through_zproxy
done
zp_stop "$IPID"

zp_done
