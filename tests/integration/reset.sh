#!/bin/bash
# reset.sh - a reset on one side loses no byte that the other side's kernel
# acknowledged (issue 10). tests/tools/zp-reset plays both ends of many
# flows at once: the resetting side sends 0-512 KiB, waits until its send
# queue is empty (TIOCOUTQ 0: zproxy's kernel acknowledged every byte),
# waits 0-2 ms and resets (SO_LINGER {1, 0}), while the survivor sends as
# fast as it can (quietly in one flow of eight) and reads to EOF, checking
# every byte.
#   a. without zproxy: the harness itself loses nothing (500 flows a side);
#   b. through zproxy, for each mode and each resetting side: 2000 flows
#      (500 for splice-eager), not one short or corrupt; the log's byte
#      counts are exactly what the resetting side sent (up= for client
#      resets, with the 8-byte flow header, down= for upstream resets);
#      zproxy's sockets return to their baseline;
#   c. linger: a survivor that sends on but reads only after 1 s still gets
#      every byte (--linger-timeout 5): zproxy kept its socket open until it
#      had acknowledged everything;
#   d. linger timeout, quiet survivor: --linger-timeout 0.3 and a survivor
#      that reads after 2 s: a graceful close, the kernel delivers the rest,
#      the log says "linger-timeout ... closing" and counts every byte;
#   e. linger timeout, survivor still sending: zproxy resets it; what the
#      survivor then reads is exactly the down= of the log (what its kernel
#      had acknowledged), less than was sent;
#   f. the survivor sends its FIN, then resets, while the pair lingers on
#      it (found by the chaos soak): the pair ends within a second of the
#      reset, not after --linger-timeout, and down= is exactly what the
#      survivor's kernel had taken.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_RESET:?ZP_RESET must name tests/tools/zp-reset}"
[ -x "$ZP_RESET" ] || fail "ZP_RESET=$ZP_RESET is not executable"

# reset_run NAME ARGS...: run zp-reset (bounded), output in $T/NAME.out and
# $T/NAME.err; retries once on a taken upstream port. Returns its status.
reset_run() {
	local name=$1 rc
	shift
	timeout 120 "$ZP_RESET" "$@" >"$T/$name.out" 2>"$T/$name.err"
	rc=$?
	if [ "$rc" -ne 0 ] && grep -q 'listen: Address already in use' "$T/$name.err"; then
		return 3
	fi
	return "$rc"
}

# sum FIELD END: the sum of FIELD= over the conn= lines ending with END.
sum() {
	grep " end=$2 " "$ZLOG" | tr ' ' '\n' | sed -n "s/^$1=//p" |
		awk '{ s += $1 } END { printf "%d\n", s }'
}

case_direct() {
	local side up
	for side in client upstream; do
		up=$(free_port -b 127.0.0.1)
		reset_run direct-$side --connect "$up" --upstream-port "$up" \
		    --side "$side" --flows 500 --concurrency 32 ||
			fail "direct, $side resets: $(head -n 3 "$T/direct-$side.err")"
		ok "no relay, $side resets: $(cat "$T/direct-$side.out")"
	done
}

# case_flows MODE SIDE FLOWS
case_flows() {
	local mode=$1 side=$2 flows=$3 up what bytes want got field end rc
	what="$mode, $side resets, $flows flows"
	set_mode "$mode"
	for _ in 1 2 3; do
		up=$(free_port -b 127.0.0.1)
		start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$up"
		fd_baseline
		reset_run flows --connect "$ZPORT" --upstream-port "$up" \
		    --side "$side" --flows "$flows" --concurrency 32 --max-size 524288 \
		    --seed "$RANDOM"
		rc=$?
		[ "$rc" -eq 3 ] && { stop_zproxy; continue; }
		break
	done
	[ "$rc" -eq 0 ] || fail "$what: $(head -n 5 "$T/flows.err")"
	bytes=$(sed -n 's/.* bytes \([0-9]*\) .*/\1/p' "$T/flows.out")
	if [ "$side" = client ]; then
		field=up; end=client-reset; want=$((bytes + 8 * flows))
	else
		field=down; end=upstream-reset; want=$bytes
	fi
	wait_fd_baseline 10 "$what" sockets
	[ "$(grep -c " end=$end " "$ZLOG")" -eq "$flows" ] ||
		fail "$what: $(grep -c " end=$end " "$ZLOG") of $flows lines say end=$end"
	got=$(sum "$field" "$end")
	[ "$got" -eq "$want" ] ||
		fail "$what: the log's $field= add up to $got, the flows sent $want"
	stop_zproxy
	ok "$what: $(cat "$T/flows.out"); $field= add up to $want"
}

# linger_case NAME WHAT LINGER ZP-RESET-ARGS...: one upstream reset of a
# fixed 1 MiB toward a client that reads after a delay; sets LOGLINE (the
# conn= line) and GOT (bytes the client read).
linger_case() {
	local name=$1 what=$2 linger=$3 up
	shift 3
	up=$(free_port -b 127.0.0.1)
	start_zproxy -v -u "127.0.0.1:$up" --linger-timeout "$linger"
	reset_run "$name" --connect "$ZPORT" --upstream-port "$up" \
	    --side upstream --flows 1 --max-size 1048576 --fixed --report "$@" ||
		fail "$what: $(head -n 3 "$T/$name.err")"
	LOGLINE=$(wait_line "$ZLOG" ' conn=1 client=.* end=upstream-reset' 10) ||
		fail "$what: no connection line"
	# The linger timeout's own warning (when there is one) comes first.
	skip_conn_logs
	GOT=$(sed -n 's/^flow 0 got \([0-9]*\) of .*/\1/p' "$T/$name.out")
	case $* in
	*--survivor-reset*) ;;
	*) [ -n "$GOT" ] || fail "$what: no report: $(cat "$T/$name.out")" ;;
	esac
}

case_linger() {
	local d
	linger_case linger "survivor reads after 1 s" 5 --read-delay 1
	[ "$GOT" -eq 1048576 ] || fail "linger: the client got $GOT of 1048576"
	[ "$(field down "$LOGLINE")" -eq 1048576 ] || fail "linger: $LOGLINE"
	d=$(field duration "$LOGLINE")
	awk -v d="${d%s}" 'BEGIN { exit !(d >= 0.9) }' ||
		fail "linger: the pair did not wait for the client: $LOGLINE"
	grep -q 'linger-timeout' "$ZLOG" && fail "linger: timed out"
	stop_zproxy
	ok "linger: a client that reads after 1 s got all 1048576 bytes ($d)"
}

case_linger_quiet() {
	linger_case quiet "quiet survivor" 0.3 --read-delay 2 --quiet-survivor
	grep -Eq 'linger-timeout: [0-9]+ bytes not acknowledged after 0.300s; closing' "$ZLOG" ||
		fail "quiet linger: no linger-timeout line"
	[ "$GOT" -eq 1048576 ] || fail "quiet linger: the client got $GOT"
	[ "$(field down "$LOGLINE")" -eq 1048576 ] || fail "quiet linger: $LOGLINE"
	stop_zproxy
	ok "linger timeout, quiet client: graceful close, all 1048576 bytes arrive and count"
}

case_linger_reset() {
	local down
	linger_case loud "sending survivor" 0.3 --read-delay 2
	grep -Eq 'linger-timeout: [0-9]+ bytes not acknowledged .*resetting' "$ZLOG" ||
		fail "sending linger: no linger-timeout line"
	down=$(field down "$LOGLINE")
	[ "$GOT" -lt 1048576 ] || fail "sending linger: the client got everything"
	[ "$down" -eq "$GOT" ] ||
		fail "sending linger: the log says down=$down, the client read $GOT"
	stop_zproxy
	ok "linger timeout, client still sending: reset; it read $GOT bytes, down=$down"
}

case_survivor_reset() {
	local d q
	linger_case sreset "survivor resets while lingered on" 10 \
	    --quiet-survivor --read-delay 5 --survivor-reset 2
	q=$(sed -n 's/^flow 0 survivor reset, 0 bytes read and \([0-9]*\) queued .*/\1/p' "$T/sreset.out")
	[ -n "$q" ] || fail "survivor reset: no report: $(cat "$T/sreset.out")"
	d=$(field duration "$LOGLINE")
	awk -v d="${d%s}" 'BEGIN { exit !(d < 3.5) }' ||
		fail "survivor reset: the pair waited ${d} (--linger-timeout 10): $LOGLINE"
	[ "$(field down "$LOGLINE")" -eq "$q" ] ||
		fail "survivor reset: the log says down=$(field down "$LOGLINE"), the client's kernel took $q"
	grep -q 'linger-timeout' "$ZLOG" && fail "survivor reset: linger timed out"
	stop_zproxy
	ok "survivor reset while lingered on: closed after $d, down=$q, what its kernel took"
}

subcase case_direct
for mode in $MODES_ALL; do
	n=2000
	[ "$mode" = splice-eager ] && n=500
	subcase case_flows "$mode" client "$n"
	subcase case_flows "$mode" upstream "$n"
done
subcase case_linger
subcase case_linger_quiet
subcase case_linger_reset
subcase case_survivor_reset

zp_done
