#!/bin/bash
# mirror-collectors.sh - --mirror between real collectors: rsyslog (imtcp)
# is the upstream, syslog-ng (network(transport("tcp"))) the mirror, each
# writing every message it gets as one line. zp-logsend sends numbered,
# CRC-checked messages, newline framed, zproxy relays with --framing lf.
#   a. 20 connections x 2,500 messages: each collector wrote each of the
#      50,000 messages exactly once and intact; zproxy counted 20 mirror
#      streams, none dropped, and as many bytes to the mirror as up.
#   b. the mirror stops reading (SIGSTOP) during 4 connections of about
#      40 MB in all: the upstream still gets every message exactly once;
#      the mirror's streams are dropped (counted, logged as ending at a
#      message boundary); once it reads again (SIGCONT) and has closed
#      every connection, every line it wrote is one whole message, none
#      twice: cut at boundaries, never inside a message.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
note "$(collector_versions)"

# send NAME CONNS MSGS MAX [ARGS...]: zp-logsend send through zproxy; it
# must succeed (every connection read to EOF: the upstream took all).
send() {
	local name=$1 conns=$2 msgs=$3 max=$4
	shift 4
	timeout -k 5 120 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" --conns "$conns" \
	    --msgs "$msgs" --framing lf --seed "$RANDOM" --max "$max" \
	    --timeout 100 "$@" >"$T/$name.send.out" 2>"$T/$name.send.err" ||
		fail "$name: zp-logsend send failed (status $?): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$name" "$name" "$conns" "$msgs"
}

# settled FILE SECS: wait until FILE stops growing (the same line count
# twice, 0.3 s apart), at most SECS.
settled() {
	local deadline=$(( $(now_ms) + $2 * 1000 )) a b
	a=$(lines "$1")
	while :; do
		sleep 0.3
		b=$(lines "$1")
		[ "$a" = "$b" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		a=$b
	done
}

# no_mirror_conns PORT SECS: wait until no connection to the mirror's
# PORT is established any more (each stream ended, both FINs).
no_mirror_conns() {
	local deadline=$(( $(now_ms) + $2 * 1000 ))
	while [ "$(estab "$1")" -gt 0 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$(estab "$1") connections to the mirror still open after ${2}s"
		sleep 0.05
	done
}

# setup NAME MODE: rsyslog as the upstream (UP_LOG), syslog-ng as the
# mirror (M_PORT, M_LOG, M_PID), zproxy between them in MODE with
# --framing lf and --stats ($SPORT).
setup() {
	local up_port
	set_mode "$2"
	start_collector rsyslog "$1-up"
	up_port=$C_PORT UP_LOG=$C_LOG
	start_collector syslog-ng "$1-mirror"
	M_PORT=$C_PORT M_LOG=$C_LOG M_PID=$C_PID
	SPORT=$(free_port)
	start_zproxy -v "${MODE_ARGS[@]}" --framing lf -u "127.0.0.1:$up_port" \
	    --mirror "127.0.0.1:$M_PORT" --stats "127.0.0.1:$SPORT"
}

whole_copy() {
	local mode=$1 what n=50000 name up mbytes
	what="$mode: rsyslog upstream, syslog-ng mirror, 20 x 2500 messages"
	name=a-$mode
	setup "$name" "$mode"
	send "$name" 20 2500 600
	no_mirror_conns "$M_PORT" 30
	wait_lines "$UP_LOG" "$n" 30 || true
	wait_lines "$M_LOG" "$n" 30 || true
	logsend_verify "$what: upstream" "$name-up" 20 2500 --exactly-once "$UP_LOG"
	logsend_verify "$what: mirror" "$name-mirror" 20 2500 --exactly-once "$M_LOG"
	stats_scrape
	stats_is "zproxy_mirror_streams_total{mirror=\"127.0.0.1:$M_PORT\"}" 20 "$what"
	stats_is "zproxy_mirror_dropped_total{mirror=\"127.0.0.1:$M_PORT\"}" 0 "$what"
	up=$(val 'zproxy_bytes_total{direction="up"}')
	mbytes=$(val "zproxy_mirror_bytes_total{mirror=\"127.0.0.1:$M_PORT\"}")
	[ -n "$up" ] && [ "$up" = "$mbytes" ] ||
		fail "$what: $mbytes bytes to the mirror, $up up"
	stop_zproxy
	ok "$what: each collector wrote all $n exactly once, intact; 20 mirror streams, $mbytes bytes each way, none dropped"
}

slow_mirror() {
	local mode=$1 what name got
	what="$mode: the syslog-ng mirror stops reading during 4 x 10000 messages of up to 2000 bytes"
	name=b-$mode
	setup "$name" "$mode"
	kill -STOP "$M_PID"
	send "$name" 4 10000 2000
	kill -CONT "$M_PID"
	wait_lines "$UP_LOG" 40000 60 || true
	logsend_verify "$what: upstream" "$name-up" 4 10000 --exactly-once "$UP_LOG"
	stats_scrape
	stats_is "zproxy_mirror_dropped_total{mirror=\"127.0.0.1:$M_PORT\"}" 4 "$what"
	grep -q "mirror 127.0.0.1:$M_PORT conn=[0-9]* dropped: too slow; ends at a message boundary" "$ZLOG" ||
		fail "$what: no drop at a message boundary logged: $(grep -m 2 'mirror' "$ZLOG")"
	no_mirror_conns "$M_PORT" 40
	settled "$M_LOG" 10 || fail "$what: the mirror's file still grows"
	got=$(lines "$M_LOG")
	[ "$got" -gt 0 ] || fail "$what: the mirror wrote nothing"
	logsend_verify "$what: mirror" "$name-mirror" 4 10000 --max-missing 40000 "$M_LOG"
	stop_zproxy
	ok "$what: upstream got all 40000 exactly once; the mirror's 4 streams dropped, its $got lines each one whole message, none twice ($VERIFIED)"
}

for mode in $MODES; do
	subcase whole_copy "$mode"
	subcase slow_mirror "$mode"
done

zp_done
