#!/bin/bash
# logstream.sh - long-lived syslog streams through zproxy's plain byte
# relay (no framing of its own yet), in splice and copy modes. zp-logsend
# send opens CONNS connections at once, each sending MSGS numbered
# messages "<13>zptest: c=CONN s=SEQ n=LEN k=CRC PAYLOAD" (LEN 1..16384,
# so that the bulk is spliced), then FIN, then reads to EOF: any connect
# failure, reset or early EOF fails it.
#   a. a real collector behind zproxy, rsyslog (imtcp) and syslog-ng, lf
#      and octet-counted framing (RFC 6587): every message exactly once in
#      what the collector wrote, each intact (its length and CRC); zproxy
#      logged every connection end=closed with up= summing to the bytes
#      sent; then one logger(1) run per message, `logger --tcp` (lf) or
#      `logger --tcp --octet-count` (octet), and those lines arrive as
#      sent, after the rest;
#   b. the mini collector (zp-logsend collect, one raw file per
#      connection) behind zproxy, over IPv6 when there is ::1: each file
#      is one connection's whole byte stream, every message exactly once
#      and in order, header and framing as sent; octet payloads with
#      newlines in them.
# Counts: a uses 20 x 800 (about 130 MB a run), b 20 x 1000 (about 165
# MB, 8 MB a connection: many times what its socket buffers and pipes
# hold, so that each connection runs long in the steady state of the
# relay); ZP_LS_CONNS, ZP_LS_MSGS_COLLECTOR and ZP_LS_MSGS_RAW override.
# 20 x 2000 in both passes too, but takes twice as long (b was 20 x 2000
# until December 2026).
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
command -v logger >/dev/null || fail "logger not found: install bsdutils"
note "$(collector_versions);" "logger: $(logger -V 2>/dev/null | awk '{ print $NF }')"

CONNS=${ZP_LS_CONNS:-20}
MSGS_COLLECTOR=${ZP_LS_MSGS_COLLECTOR:-800}
MSGS_RAW=${ZP_LS_MSGS_RAW:-1000}
RUN=$(date +%s)x$$

# send_stream NAME MSGS FRAMING SEED HOST [ARGS...]: zp-logsend send
# CONNS x MSGS to zproxy at HOST; it must succeed and say so. Sets
# SENT_BYTES.
send_stream() {
	local name=$1 msgs=$2 fr=$3 seed=$4 host=$5
	shift 5
	timeout -k 5 90 "$ZP_LOGSEND" send "$host" "$ZPORT" --conns "$CONNS" \
	    --msgs "$msgs" --framing "$fr" --seed "$seed" --timeout 60 "$@" \
	    >"$T/$name.send.out" 2>"$T/$name.send.err" ||
		fail "$name: zp-logsend send failed (status $?): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$name" "$name" "$CONNS" "$msgs"
}

# check_relay WHAT N BYTES: zproxy logged N connections (within 15 s),
# each end=closed in the mode asked, nothing sent back, and their up=
# adding up to BYTES.
check_relay() {
	local what=$1 n=$2 bytes=$3 deadline=$(( $(now_ms) + 15000 )) modes up
	while [ "$(conn_lines)" -lt "$n" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: zproxy logged $(conn_lines) connections within 15s, want $n"
		sleep 0.05
	done
	[ "$(conn_lines)" = "$n" ] || fail "$what: zproxy logged $(conn_lines) connections, want $n"
	[ "$(grep ' conn=[0-9]' "$ZLOG" | grep -c ' down=0 .* end=closed')" = "$n" ] ||
		fail "$what: a connection did not end down=0 end=closed: $(grep ' conn=[0-9]' "$ZLOG" | grep -v -m 1 ' down=0 .* end=closed')"
	if [ "$MODE_LOGGED" = splice ]; then
		modes='mode=(splice|mixed) '
	else
		modes="mode=$MODE_LOGGED "
	fi
	[ "$(grep ' conn=[0-9]' "$ZLOG" | grep -Ec " $modes")" = "$n" ] ||
		fail "$what: a connection not in $MODE_LOGGED mode: $(grep ' conn=[0-9]' "$ZLOG" | grep -Ev -m 1 " $modes")"
	up=$(grep ' conn=[0-9]' "$ZLOG" | sed 's/.* up=\([0-9]*\) .*/\1/' |
	    awk '{ s += $1 } END { print s + 0 }')
	[ "$up" = "$bytes" ] ||
		fail "$what: zproxy relayed up=$up bytes in all, the sender sent $bytes"
}

# verify WHAT NAME MSGS ARGS... FILES: zp-logsend verify must pass; its
# summary line is noted.
verify() {
	local what=$1 name=$2 msgs=$3
	shift 3
	"$ZP_LOGSEND" verify -v --conns "$CONNS" --msgs "$msgs" "$@" \
	    >"$T/$name.verify.out" 2>"$T/$name.verify.err" ||
		fail "$what: $(cat "$T/$name.verify.out"): $(grep -v -m 3 '^zp-logsend: \(missing\|duplicate\) ' "$T/$name.verify.err" | tr '\n' ' ')" \
		    "$(grep -m 3 '^zp-logsend: \(missing\|duplicate\) ' "$T/$name.verify.err" | tr '\n' ' ')"
	note "$what: $(cat "$T/$name.verify.out")"
}

# ---- a -----------------------------------------------------------------

case_collector() {
	local mode=$1 kind=$2 fr=$3 what name seed n id lopt i k
	what="$mode: $kind, $fr framing"
	name=a-$mode-$kind-$fr
	seed=$RANDOM
	n=$((CONNS * MSGS_COLLECTOR))
	set_mode "$mode"
	start_collector "$kind" "$name" "" "$fr"
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$C_PORT"
	send_stream "$name" "$MSGS_COLLECTOR" "$fr" "$seed" 127.0.0.1
	check_relay "$what" "$CONNS" "$SENT_BYTES"
	ok "$what: $CONNS connections x $MSGS_COLLECTOR messages ($SENT_BYTES bytes) relayed, each connection closed cleanly"
	# the sender saw EOF: the collector read everything; it may not
	# have written it all yet
	wait_lines "$C_LOG" "$n" 30 ||
		note "$what: $(wc -l <"$C_LOG") of $n lines within 30s"
	verify "$what" "$name" "$MSGS_COLLECTOR" --exactly-once "$C_LOG"
	ok "$what: the collector wrote each of the $n messages exactly once, intact"

	# logger(1), one connection per message, after the rest
	id=${RUN}-$mode-$kind-$fr
	if [ "$fr" = octet ]; then
		lopt=(--octet-count --rfc5424)
	else
		lopt=(--rfc3164)
	fi
	printf '%s\n' "zplog-$id-1" "zplog-$id-2 with  two spaces" >"$T/$name.logger.want"
	# Each connection's message is at the collector before the next
	# connection starts: two connections are two streams, which a
	# collector may write in either order (syslog-ng did once, on a
	# loaded machine); the order below is that of their arrival.
	k=$n
	while IFS= read -r i; do
		timeout -k 2 10 logger -T -n 127.0.0.1 -P "$ZPORT" "${lopt[@]}" \
		    -t zptest "$i" 2>>"$T/logger.err" ||
			fail "$what: logger ${lopt[*]} failed (status $?): $(tail -n 1 "$T/logger.err")"
		k=$((k + 1))
		wait_lines "$C_LOG" "$k" 10 ||
			fail "$what: logger line $((k - n)) did not arrive within 10s"
	done <"$T/$name.logger.want"
	wait_lines "$C_LOG" $((n + 2)) 10 ||
		fail "$what: $(( $(wc -l <"$C_LOG") - n )) of 2 logger lines arrived within 10s"
	tail -n 2 "$C_LOG" | sed 's/^ *//' | cmp -s - "$T/$name.logger.want" ||
		fail "$what: logger lines: got '$(tail -n 2 "$C_LOG" | tr '\n' '|')', want '$(tr '\n' '|' <"$T/$name.logger.want")'"
	[ "$(wc -l <"$C_LOG")" = $((n + 2)) ] ||
		fail "$what: $(wc -l <"$C_LOG") lines in the end, want $((n + 2))"
	ok "$what: logger --tcp ${lopt[*]} lines through zproxy arrived as sent"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: $kind"
}

# ---- b -----------------------------------------------------------------

case_raw() {
	local mode=$1 fr=$2 what name seed dir cpid cport host=127.0.0.1 nl=()
	local got rc
	what="$mode: mini collector, $fr framing"
	name=b-$mode-$fr
	seed=$RANDOM
	dir=$T/$name.d
	mkdir -p "$dir"
	[ "$fr" = octet ] && nl=(--newlines) && what="$what with newlines"
	set_mode "$mode"
	zp_bg "$name.collect" "$ZP_LOGSEND" collect --dir "$dir" --conns "$CONNS"
	cpid=$BG_PID
	cport=$(wait_line "$T/$name.collect.out" '^[0-9]+$' 10 "$cpid") ||
		fail "$what: zp-logsend collect did not start: $(head -c 300 "$T/$name.collect.err")"
	if have_ipv6; then
		host=::1
		start_zproxy -v "${MODE_ARGS[@]}" -l "[::1]:@PORT@" -u "127.0.0.1:$cport"
	else
		start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$cport"
	fi
	send_stream "$name" "$MSGS_RAW" "$fr" "$seed" "$host" "${nl[@]}"
	# it exits once its CONNS connections reached EOF
	peer_wait "$cpid" "$name.collect" 30
	rc=$?
	[ "$rc" = 0 ] || fail "$what: zp-logsend collect exited with status $rc: $(tail -n 1 "$T/$name.collect.err")"
	check_relay "$what" "$CONNS" "$SENT_BYTES"
	got=$(cat "$dir"/conn-*.raw | wc -c)
	[ "$got" = "$SENT_BYTES" ] ||
		fail "$what: the collector got $got bytes, $SENT_BYTES were sent"
	verify "$what" "$name" "$MSGS_RAW" --raw --framing "$fr" --exactly-once \
	    --streams "$dir"/conn-*.raw
	ok "$what: over $host, each of the $CONNS files is one connection's whole stream ($SENT_BYTES bytes, $((CONNS * MSGS_RAW)) messages exactly once, in order)"
	stop_zproxy
}

have_ipv6 || note "no IPv6 loopback: the mini collector cases run over IPv4"
for mode in $MODES; do
	for kind in rsyslog syslog-ng; do
		for fr in lf octet; do
			subcase case_collector "$mode" "$kind" "$fr"
		done
	done
	for fr in lf octet; do
		subcase case_raw "$mode" "$fr"
	done
done

zp_done
