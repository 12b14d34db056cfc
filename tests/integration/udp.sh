#!/bin/bash
# udp.sh - syslog over UDP (issue 28): -l udp@ takes datagrams, one
# message each, into one framed TCP stream per source address.
#
# Senders: zp-logsend dgram (numbered messages with a CRC, each source a
# socket bound to its own address, 127.0.0.2 and up, or ::1). Collector:
# zp-logsend collect (each connection's bytes in a file of its own).
# In splice and copy mode:
#   a. 6 sources x MSGS messages (1 to 1,000 bytes): exactly 6 collector
#      connections, each one source's messages, octet-framed, every one
#      once, whole, in order (verify --raw --streams); the metrics count
#      every datagram (zproxy_udp_datagrams_total), 6 sources open, none
#      dropped; an empty datagram is counted (reason="empty"), not sent;
#   b. --send-proxy v1: each stream begins "PROXY TCP4 SRC DST SPORT DPORT"
#      with its own source's address and the listener's; v2: the DGRAM
#      transport (0x12) and the same addresses; the messages after the
#      header as in a;
#   c. --framing lf: lf-framed streams; a datagram with a newline inside
#      arrives as one line, the newline written #012, and counts in
#      zproxy_framing_errors_total;
#   d. --udp-idle 1: every stream closes (end=closed) once its source is
#      quiet, zproxy_udp_sources goes back to 0, and the next datagram of
#      a source opens a stream anew;
#   e. --udp-max-sources 2, 4 sources: 2 streams of their own, the other
#      sources' datagrams on a shared stream that names none (counted in
#      zproxy_udp_shared_datagrams_total, said once); every message once;
#   f. an IPv6 listener and source ([::1]);
#   g. no collector listens yet: the streams wait (said), and once one
#      starts, every message reaches it once, in order;
#   h. SIGTERM while every thread's socket holds datagrams and no stream
#      is open: they are read, delivered, and zproxy exits 0;
#   i. a takeover (--control, --takeover) while 4 sources send: the old
#      zproxy drains and exits 0, the new one reads the same sockets:
#      every message once, each stream in order (both read the sockets
#      for a moment: a source's messages may be in an old and a new one);
#   j. overload: zproxy stopped (SIGSTOP) under a burst larger than its
#      receive buffer: what the collector lacks is exactly what
#      zproxy_udp_dropped_total{reason="rcvbuf"} counts.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"

MSGS=${ZP_UDP_MSGS:-400}
RATE=${ZP_UDP_RATE:-800}

# collect NAME: a mini collector writing $T/NAME/conn-N.raw; sets
# COL_PID, COL_PORT.
collect() {
	mkdir -p "$T/$1"
	zp_bg "$1.collect" "$ZP_LOGSEND" collect --dir "$T/$1"
	COL_PID=$BG_PID
	COL_PORT=$(wait_line "$T/$1.collect.out" '^[0-9]+$' 10 "$COL_PID") ||
		fail "zp-logsend collect $1 did not start: $(head -c 300 "$T/$1.collect.err")"
}

# start_udp ARGS...: zproxy on udp@127.0.0.1 (a free port, ZPORT) and
# --stats (SPORT), with ARGS.
start_udp() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@${UDP_LISTEN:-127.0.0.1}:@PORT@" \
	    --stats "127.0.0.1:$SPORT" "$@"
}

# dgram NAME SOURCES MSGS [ARGS...]: zp-logsend dgram to zproxy, waited
# for; SOURCES from 127.0.0.2 on (unless ARGS say otherwise).
dgram() {
	local name=$1 n=$2 m=$3
	shift 3
	timeout -k 5 120 "$ZP_LOGSEND" dgram "${UDP_HOST:-127.0.0.1}" "$ZPORT" \
	    --conns "$n" --msgs "$m" --rate "$RATE" --max 1000 "$@" \
	    >"$T/$name.out" 2>"$T/$name.err" ||
		fail "$name: the sender failed: $(tail -n 2 "$T/$name.err")"
}

# files DIR: its non-empty conn-*.raw files.
files() {
	local f
	for f in "$T/$1"/conn-*.raw; do [ -s "$f" ] && echo "$f"; done
}

# verify WHAT SOURCES MSGS FRAMING FILE...: every message once, whole,
# each file one source's messages in order; sets VERIFIED.
verify() {
	local what=$1 n=$2 m=$3 framing=$4
	shift 4
	"$ZP_LOGSEND" verify -v --raw --streams --exactly-once --conns "$n" \
	    --msgs "$m" --framing "$framing" "$@" >"$T/verify.out" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/verify.out" | tr '\n' ' ')"
	VERIFIED=$(grep '^sent=' "$T/verify.out" | tail -n 1)
}

# wait_delivered DIR BYTES SECS: until DIR's files hold BYTES in all.
wait_delivered() {
	local deadline=$(( $(now_ms) + $3 * 1000 )) have
	while :; do
		have=$(cat "$T/$1"/conn-*.raw 2>/dev/null | wc -c)
		[ "$have" -ge "$2" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$1: $have bytes delivered after ${3}s, want $2"
		sleep 0.05
	done
}

# sent_bytes NAME FRAMING: what the datagrams of NAME make as frames.
sent_bytes() {
	local line
	line=$(cat "$T/$1.out")
	if [ "$2" = lf ]; then
		echo $(( $(field bytes "$line") + $(field datagrams "$line") ))
	else
		field octet "$line"
	fi
}

L=
# udp_series NAME [REASON]: the series of this test's listener.
udp_series() {
	if [ -n "${2:-}" ]; then
		echo "$1{listener=\"$L\",reason=\"$2\"}"
	else
		echo "$1{listener=\"$L\"}"
	fi
}

case_basic() {
	local mode=$1 what="$1: 6 sources" n
	set_mode "$mode"
	collect "b-$mode"
	start_udp -u "127.0.0.1:$COL_PORT"
	L="udp@127.0.0.1:$ZPORT"
	dgram "b-$mode" 6 "$MSGS" --from 127.0.0.2
	# an empty datagram: counted, never a frame
	dgram "b-$mode-empty" 1 1 --from 127.0.0.2 --text ''
	wait_metric "$(udp_series zproxy_udp_datagrams_total)" == $((6 * MSGS + 1)) 20 "$what"
	wait_delivered "b-$mode" "$(sent_bytes "b-$mode" octet)" 20
	stats_scrape
	stats_is "$(udp_series zproxy_udp_sources)" 6 "$what"
	stats_is "$(udp_series zproxy_udp_dropped_total empty)" 1 "$what"
	stats_is "$(udp_series zproxy_udp_dropped_total rcvbuf)" 0 "$what"
	stats_is "$(udp_series zproxy_udp_shared_datagrams_total)" 0 "$what"
	n=$(grep -c "$L: source 127\.0\.0\.[2-7]:" "$ZLOG")
	[ "$n" = 6 ] || fail "$what: $n source lines, want 6"
	stop_zproxy
	mapfile -t fs < <(files "b-$mode")
	[ "${#fs[@]}" = 6 ] || fail "$what: ${#fs[@]} collector connections, want 6 (one a source)"
	verify "$what" 6 "$MSGS" octet "${fs[@]}"
	# a UDP source's stream copies (its frames are in memory), either mode
	n=$(grep -c ' conn=[0-9]* client=127\.0\.0\.[2-7]:[0-9]* .* dst=127\.0\.0\.1:'"$ZPORT"' mode=copy .* end=closed' "$ZLOG")
	[ "$n" = 6 ] || fail "$what: $n streams ended closed with their source as client, want 6"
	ok "$what: one stream each, every message once, in order: $VERIFIED; an empty datagram counted, not sent"
}

# header_case MODE VERSION: --send-proxy names each stream's source.
case_proxy() {
	local mode=$1 v=$2 what="$1: --send-proxy $2" f i hdr src port want
	set_mode "$mode"
	collect "p-$mode-$v"
	start_udp -u "127.0.0.1:$COL_PORT" --send-proxy "$v"
	dgram "p-$mode-$v" 3 "$MSGS" --from 127.0.0.2
	wait_metric "zproxy_udp_datagrams_total{listener=\"udp@127.0.0.1:$ZPORT\"}" == $((3 * MSGS)) 20 "$what"
	stop_zproxy
	mapfile -t fs < <(files "p-$mode-$v")
	[ "${#fs[@]}" = 3 ] || fail "$what: ${#fs[@]} collector connections, want 3"
	mkdir -p "$T/p-$mode-$v.body"
	: >"$T/p-$mode-$v.srcs"
	for f in "${fs[@]}"; do
		if [ "$v" = v1 ]; then
			hdr=$(head -n 1 "$f" | tr -d '\r')
			set -- $hdr
			[ "$1 $2 $4 $6" = "PROXY TCP4 127.0.0.1 $ZPORT" ] ||
				fail "$what: header '$hdr', want PROXY TCP4 127.0.0.x 127.0.0.1 PORT $ZPORT"
			echo "$3" >>"$T/p-$mode-$v.srcs"
			tail -c +$(( ${#hdr} + 3 )) "$f" >"$T/p-$mode-$v.body/${f##*/}"
		else
			# signature, 0x21, 0x12 (INET, DGRAM), length 12
			hdr=$(od -An -tx1 -N 28 "$f" | tr -d ' \n')
			[ "${hdr:0:32}" = 0d0a0d0a000d0a515549540a2112000c ] ||
				fail "$what: v2 header ${hdr:0:32}, want the signature, 21 12 000c"
			src=$((16#${hdr:32:2})).$((16#${hdr:34:2})).$((16#${hdr:36:2})).$((16#${hdr:38:2}))
			[ "${hdr:40:8}" = 7f000001 ] || fail "$what: v2 destination ${hdr:40:8}, want 127.0.0.1"
			port=$((16#${hdr:52:4}))
			[ "$port" = "$ZPORT" ] || fail "$what: v2 destination port $port, want $ZPORT"
			echo "$src" >>"$T/p-$mode-$v.srcs"
			tail -c +29 "$f" >"$T/p-$mode-$v.body/${f##*/}"
		fi
	done
	want=$(printf '127.0.0.%s\n' 2 3 4)
	[ "$(sort "$T/p-$mode-$v.srcs")" = "$want" ] ||
		fail "$what: the headers name $(tr '\n' ' ' <"$T/p-$mode-$v.srcs"), want 127.0.0.2-4 once each"
	verify "$what" 3 "$MSGS" octet "$T/p-$mode-$v.body"/conn-*.raw
	ok "$what: each stream's header names its own source, DGRAM for v2; then every message once, in order: $VERIFIED"
}

case_lf() {
	local mode=$1 what="$1: --framing lf" line
	set_mode "$mode"
	collect "l-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --framing lf
	dgram "l-$mode" 3 "$MSGS" --from 127.0.0.2
	wait_delivered "l-$mode" "$(sent_bytes "l-$mode" lf)" 20
	stats_scrape
	stats_is zproxy_framing_errors_total 0 "$what: before the newline"
	# from 127.0.0.1: a stream of its own
	dgram "l-$mode-nl" 1 1 --text $'<13>one\ntwo\n'
	wait_metric zproxy_framing_errors_total == 1 10 "$what: a newline inside"
	stop_zproxy
	mapfile -t fs < <(files "l-$mode")
	[ "${#fs[@]}" = 4 ] || fail "$what: ${#fs[@]} collector connections, want 4"
	line=$(cat "${fs[@]}" | grep -a '^<13>one')
	[ "$line" = '<13>one#012two' ] || fail "$what: the datagram arrived as '$line', want '<13>one#012two' on one line"
	grep -L '^<13>one#012two$' "${fs[@]}" >"$T/l-$mode.rest"
	mapfile -t fs <"$T/l-$mode.rest"
	verify "$what" 3 "$MSGS" lf "${fs[@]}"
	ok "$what: one line a datagram, a newline inside written #012 and counted: $VERIFIED"
}

case_idle() {
	local mode=$1 what="$1: --udp-idle 1"
	set_mode "$mode"
	collect "i-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --udp-idle 1
	L="udp@127.0.0.1:$ZPORT"
	dgram "i-$mode-1" 3 50 --from 127.0.0.2
	wait_metric "$(udp_series zproxy_udp_sources)" == 3 5 "$what: open"
	wait_metric "$(udp_series zproxy_udp_sources)" == 0 10 "$what: closed when quiet"
	[ "$(grep -c ' conn=[0-9]* client=127\.0\.0\.[2-4]:.* end=closed' "$ZLOG")" = 3 ] ||
		fail "$what: the 3 streams did not end closed: $(grep ' conn=' "$ZLOG" | tail -n 3)"
	dgram "i-$mode-2" 3 50 --from 127.0.0.2 --seed 9
	wait_metric "$(udp_series zproxy_udp_sources)" == 3 5 "$what: open again"
	stop_zproxy
	mapfile -t fs < <(files "i-$mode")
	[ "${#fs[@]}" = 6 ] || fail "$what: ${#fs[@]} collector connections, want 6 (3, closed, 3 more)"
	ok "$what: 3 streams closed once quiet (end=closed), 3 new ones for the next datagrams"
}

case_shared() {
	local mode=$1 what="$1: --udp-max-sources 2" n
	set_mode "$mode"
	collect "s-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --udp-max-sources 2 --threads 1
	L="udp@127.0.0.1:$ZPORT"
	dgram "s-$mode" 4 "$MSGS" --from 127.0.0.2
	wait_metric "$(udp_series zproxy_udp_datagrams_total)" == $((4 * MSGS)) 20 "$what"
	stats_scrape
	stats_is "$(udp_series zproxy_udp_sources)" 2 "$what"
	stats_is "$(udp_series zproxy_udp_shared_datagrams_total)" $((2 * MSGS)) "$what"
	n=$(grep -c 'datagrams of new sources share connection' "$ZLOG")
	[ "$n" = 1 ] || fail "$what: the shared stream was said $n times, want once"
	stop_zproxy
	mapfile -t fs < <(files "s-$mode")
	[ "${#fs[@]}" = 3 ] || fail "$what: ${#fs[@]} collector connections, want 3 (2 sources, 1 shared)"
	"$ZP_LOGSEND" verify -v --raw --exactly-once --ordered --conns 4 \
	    --msgs "$MSGS" --framing octet "${fs[@]}" >"$T/verify.out" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/verify.out" | tr '\n' ' ')"
	ok "$what: 2 streams of their own, 2 sources shared one, every message once, in order: $(grep '^sent=' "$T/verify.out")"
}

case_v6() {
	local mode=$1 what="$1: IPv6"
	set_mode "$mode"
	collect "v-$mode"
	UDP_LISTEN='[::1]' start_udp -u "127.0.0.1:$COL_PORT" --send-proxy v1
	UDP_HOST=::1 dgram "v-$mode" 2 "$MSGS"
	wait_metric "zproxy_udp_datagrams_total{listener=\"udp@[::1]:$ZPORT\"}" == $((2 * MSGS)) 20 "$what"
	stop_zproxy
	mapfile -t fs < <(files "v-$mode")
	[ "${#fs[@]}" = 1 ] || fail "$what: ${#fs[@]} collector connections, want 1 (::1 is one source)"
	head -n 1 "${fs[0]}" | grep -q "^PROXY TCP6 ::1 ::1 [0-9]* $ZPORT"$'\r'"\$" ||
		fail "$what: header '$(head -n 1 "${fs[0]}")'"
	ok "$what: one stream for ::1, PROXY TCP6 ::1"
}

case_hold() {
	local mode=$1 what="$1: no collector yet" cp
	set_mode "$mode"
	cp=$(free_port) || fail "zp-peer port failed"
	start_udp -u "127.0.0.1:$cp" --fail-timeout 1 --max-conns-per-source 1
	dgram "h-$mode" 3 "$MSGS" --from 127.0.0.2
	wait_line "$ZLOG" 'UDP source 127\.0\.0\.[2-4]:[0-9]*\): no upstream takes it' \
	    10 "$ZPID" >/dev/null || fail "$what: no 'no upstream takes it' line"
	mkdir -p "$T/h-$mode"
	zp_bg "h-$mode.collect" "$ZP_LOGSEND" collect --dir "$T/h-$mode" --port "$cp"
	wait_line "$T/h-$mode.collect.out" '^[0-9]+$' 10 "$BG_PID" >/dev/null ||
		fail "$what: the collector did not start"
	wait_delivered "h-$mode" "$(sent_bytes "h-$mode" octet)" 30
	stop_zproxy
	mapfile -t fs < <(files "h-$mode")
	[ "${#fs[@]}" = 3 ] || fail "$what: ${#fs[@]} collector connections, want 3"
	verify "$what" 3 "$MSGS" octet "${fs[@]}"
	ok "$what: the streams waited for the collector (--max-conns-per-source 1 does not count them), then every message once, in order: $VERIFIED"
}

case_drain() {
	local mode=$1 what="$1: SIGTERM with datagrams queued" rc
	set_mode "$mode"
	collect "d-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --udp-idle 1
	L="udp@127.0.0.1:$ZPORT"
	# every stream closed: no connection is open when the drain begins
	dgram "d-$mode-0" 4 1 --from 127.0.0.2 --text '<13>first'
	wait_metric "$(udp_series zproxy_udp_sources)" == 4 5 "$what: open"
	wait_metric "$(udp_series zproxy_udp_sources)" == 0 10 "$what: closed"
	kill -STOP "$ZPID"
	dgram "d-$mode" 4 "$MSGS" --from 127.0.0.2
	kill -TERM "$ZPID"
	kill -CONT "$ZPID"
	zp_wait_exit "$ZPID" 20
	rc=$?
	[ "$rc" = 0 ] || fail "$what: zproxy exited $rc"
	sanitizer_clean "$ZLOG" || fail "$what: sanitizer report"
	ZPID=
	mapfile -t fs < <(grep -La '<13>first' $(files "d-$mode"))
	[ "${#fs[@]}" = 4 ] || fail "$what: ${#fs[@]} streams after the first ones, want 4"
	verify "$what" 4 "$MSGS" octet "${fs[@]}"
	ok "$what: what every thread's socket held was read and delivered before the exit: $VERIFIED"
}

case_takeover() {
	local mode=$1 what="$1: a takeover while datagrams come" old oldlog p rc
	local ctl spid
	set_mode "$mode"
	collect "t-$mode"
	mkdir -p "$T/run"
	zp_user_dir "$T/run"
	ctl=$T/run/ctl-$mode
	start_udp -u "127.0.0.1:$COL_PORT" --control "$ctl" --drain-timeout 10
	p=$ZPORT old=$ZPID oldlog=$ZLOG
	zp_bg "t-$mode" timeout -k 5 60 "$ZP_LOGSEND" dgram 127.0.0.1 "$p" \
	    --conns 4 --msgs 1500 --rate 1000 --max 500 --from 127.0.0.2
	spid=$BG_PID
	wait_delivered "t-$mode" 20000 10
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@127.0.0.1:$p" \
	    -u "127.0.0.1:$COL_PORT" --control "$ctl" --takeover "$ctl"
	wait_line "$ZLOG" 'took over from pid [0-9]+' 10 "$ZPID" >/dev/null ||
		fail "$what: no takeover: $(tail -n 3 "$ZLOG")"
	zp_wait_exit "$old" 20
	rc=$?
	[ "$rc" = 0 ] || fail "$what: the old zproxy exited $rc"
	sanitizer_clean "$oldlog" || fail "$what: sanitizer report (old)"
	peer_wait "$spid" sender 60 || fail "$what: the sender failed: $(tail -n 2 "$T/t-$mode.err")"
	grep -q '^datagrams=6000 ' "$T/t-$mode.out" || fail "$what: $(cat "$T/t-$mode.out")"
	wait_delivered "t-$mode" "$(field octet "$(cat "$T/t-$mode.out")")" 20
	stop_zproxy
	mapfile -t fs < <(files "t-$mode")
	"$ZP_LOGSEND" verify -v --raw --exactly-once --conns 4 \
	    --msgs 1500 --framing octet "${fs[@]}" >"$T/verify.out" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/verify.out" | tr '\n' ' ')"
	# Both read the sockets for a moment: a source's messages may be in
	# an old stream and a new one, each in order.
	for f in "${fs[@]}"; do
		"$ZP_LOGSEND" verify --raw --ordered --conns 4 --msgs 1500 \
		    --framing octet "$f" >"$T/order.out" 2>&1 ||
			fail "$what: ${f##*/}: $(tail -n 2 "$T/order.out" | tr '\n' ' ')"
	done
	ok "$what: the old one drained and exited 0, the new one read on: every message once, each stream in order: $(grep '^sent=' "$T/verify.out")"
}

case_overload() {
	local mode=$1 what="$1: a burst zproxy cannot take" got dropped v
	set_mode "$mode"
	collect "o-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --threads 1 --udp-rcvbuf 64K
	L="udp@127.0.0.1:$ZPORT"
	kill -STOP "$ZPID"
	RATE=1000000 dgram "o-$mode" 4 2000 --from 127.0.0.2 --min 100 --max 200
	kill -CONT "$ZPID"
	# read or dropped, every one: the kernel's count is read each second
	for _ in $(seq 100); do
		stats_scrape
		got=$(val "$(udp_series zproxy_udp_datagrams_total)")
		dropped=$(val "$(udp_series zproxy_udp_dropped_total rcvbuf)")
		[ $((got + dropped)) -ge 8000 ] && break
		sleep 0.1
	done
	[ $((got + dropped)) = 8000 ] || fail "$what: $got read and $dropped dropped of 8000"
	[ "$dropped" -gt 0 ] || fail "$what: nothing dropped: the test cannot tell"
	wait_delivered "o-$mode" 1 10
	stop_zproxy
	mapfile -t fs < <(files "o-$mode")
	"$ZP_LOGSEND" verify -v --raw --conns 4 --msgs 2000 --framing octet \
	    "${fs[@]}" >"$T/verify.out" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/verify.out" | tr '\n' ' ')"
	v=$(grep '^sent=' "$T/verify.out")
	[ "$(field missing "$v")" = "$dropped" ] && [ "$(field duplicates "$v")" = 0 ] ||
		fail "$what: $v, but zproxy_udp_dropped_total{reason=\"rcvbuf\"} is $dropped"
	ok "$what: $dropped of 8000 dropped by the kernel, and exactly those missing: $v"
}

# A burst of big datagrams from one source, queued while zproxy is
# stopped: a read callback takes far more than the pair's pump budget a
# pass, then nothing more comes. Every message must still arrive (the
# pair takes its frames from memory: no socket wakes it for the rest).
case_bigburst() {
	local mode=$1 what="$1: a burst of 12 MB from one source, then quiet"
	set_mode "$mode"
	collect "bb-$mode"
	start_udp -u "127.0.0.1:$COL_PORT" --threads 1 --udp-rcvbuf 32M
	kill -STOP "$ZPID"
	RATE=1000000 dgram "bb-$mode" 1 400 --from 127.0.0.2 --min 30000 \
	    --max 30000
	kill -CONT "$ZPID"
	wait_delivered "bb-$mode" "$(sent_bytes "bb-$mode" octet)" 20
	stop_zproxy
	mapfile -t fs < <(files "bb-$mode")
	verify "$what" 1 400 octet "${fs[@]}"
	ok "$what: every message once, in order: $VERIFIED"
}

# The drain while the streams hold megabytes for a collector that reads
# slowly: what a stream holds in memory and what goes through its socket
# at the end must reach the collector in order, each message once.
case_drain_held() {
	local mode=$1 what="$1: the drain with megabytes held for a slow collector"
	set_mode "$mode"
	mkdir -p "$T/dh-$mode"
	zp_bg "dh-$mode.collect" "$ZP_LOGSEND" collect --dir "$T/dh-$mode" \
	    --read-rate 4M
	COL_PID=$BG_PID
	COL_PORT=$(wait_line "$T/dh-$mode.collect.out" '^[0-9]+$' 10 "$COL_PID") ||
		fail "$what: the collector did not start"
	start_udp -u "127.0.0.1:$COL_PORT" --threads 1 --udp-rcvbuf 32M \
	    --drain-timeout 30
	kill -STOP "$ZPID"
	RATE=1000000 dgram "dh-$mode" 2 300 --from 127.0.0.2 --min 20000 \
	    --max 20000
	kill -CONT "$ZPID"
	# the streams hold most of it now: stop while they do
	wait_delivered "dh-$mode" 100000 10
	kill -TERM "$ZPID"
	zp_wait_exit "$ZPID" 40 >/dev/null
	[ $? = 0 ] || fail "$what: zproxy did not exit 0 within 40 s"
	sanitizer_clean "$ZLOG" || fail "$what: sanitizer report in the zproxy log"
	ZPID=
	# the collector reads on what the kernel holds for it
	wait_delivered "dh-$mode" "$(sent_bytes "dh-$mode" octet)" 30
	mapfile -t fs < <(files "dh-$mode")
	verify "$what" 2 300 octet "${fs[@]}"
	ok "$what: every message once, in order: $VERIFIED"
}

for mode in $MODES; do
	subcase case_basic "$mode"
	subcase case_proxy "$mode" v1
	subcase case_proxy "$mode" v2
	subcase case_lf "$mode"
	subcase case_idle "$mode"
	subcase case_shared "$mode"
	subcase case_v6 "$mode"
	subcase case_hold "$mode"
	subcase case_drain "$mode"
	subcase case_takeover "$mode"
	subcase case_overload "$mode"
	subcase case_bigburst "$mode"
	subcase case_drain_held "$mode"
done

zp_done
