#!/bin/bash
# tls-spool.sh - --spool with TLS on either side: what a tls@ listener's
# clients send is read through their sessions into the files, and files
# go to -u tls@ collectors through sessions of the spool's own. TLS
# clients here are zp-logsend through a second zproxy (plain in, tls@
# out: the "shipper"); messages are zp-logsend's, numbered and
# CRC-checked.
#   a. TLS clients, collector down: 5 x 2,000 lf messages from TLS
#      clients (zproxy tls@ --spool) are spooled; rsyslog is started on
#      the port: each message arrives exactly once, in order, and the
#      spool empties;
#   b. spooled files to a TLS collector: 5 x 2,000 octet messages from
#      plain clients spooled (-u tls@, collector down); first a server
#      whose certificate is for another name takes the port: each try
#      is refused ("TLS handshake failed: name-mismatch"), the files
#      stay; then syslog-ng as a TLS collector (RFC 5425): each message
#      exactly once, in order, the spool empties; the handshakes are
#      counted (zproxy_tls_handshakes_total{side="upstream"});
#   c. TLS on both sides, live streams: 6 TLS streams (--framing octet,
#      --replay-window 1M, --threads 2) over two syslog-ng TLS
#      collectors; both are killed (SIGKILL), one after the other: every
#      stream spools, its client connected; a TLS collector comes back
#      on the first's port: the files go to it, every stream goes live
#      again, and the clients finish: every message at least once across
#      the files.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1
. "${ZP_TESTLIB%/*}/tlslib.sh" || exit 1

cert nobody ca /CN=nobody 30 "subjectAltName=DNS:nobody.example"
TLS_L=(--tls-cert "$C/srv.pem" --tls-key "$C/srv.key")
UP_CA=(--upstream-ca "$C/ca.pem")

# spool_dir NAME: a new directory $T/NAME that zproxy's user may write;
# its path in SDIR.
spool_dir() {
	SDIR=$T/$1
	mkdir -p "$SDIR" || fail "mkdir $SDIR"
	zp_user_dir "$SDIR"
}

# zproxy_spool DIR ARGS...: zproxy -v spooling to DIR, its upstreams
# tried again each second, --stats on a new SPORT.
zproxy_spool() {
	local dir=$1
	shift
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v --spool "$dir" --fail-timeout 1 \
	    --max-fails 1 --stats "127.0.0.1:$SPORT" "$@"
}

# shipper NAME: a second zproxy, plain in on SHIP_PORT, TLS out to the
# zproxy under test's tls@ listener ($ZPORT): zp-logsend's connections
# become TLS clients.
shipper() {
	local user=()
	SHIP_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	[ "$ZP_USER_ACTIVE" = 1 ] && user=(--user "$ZP_USER")
	zp_bg "$1.ship" "$ZPROXY" -l "127.0.0.1:$SHIP_PORT" "${user[@]}" \
	    -u "tls@localhost:$ZPORT" "${UP_CA[@]}" --drain-timeout 1
	SHIP_PID=$BG_PID
	wait_port "$SHIP_PORT" 10 ||
		fail "the shipper does not listen: $(head -n 3 "$T/$1.ship.err")"
}

# send_bg NAME PORT CONNS MSGS FRAMING [ARGS...]: zp-logsend send in the
# background (SEND_PID).
send_bg() {
	local name=$1 port=$2 conns=$3 msgs=$4 fr=$5
	shift 5
	zp_bg "$name.send" timeout -k 5 120 "$ZP_LOGSEND" send 127.0.0.1 \
	    "$port" --conns "$conns" --msgs "$msgs" --framing "$fr" \
	    --max 600 --seed "$RANDOM" --timeout 100 "$@"
	SEND_PID=$BG_PID
}

# send_done NAME CONNS MSGS SECS: zp-logsend ends well within SECS,
# every connection read to EOF, and says it sent them all.
send_done() {
	peer_wait "$SEND_PID" "$1.send" "$4" ||
		fail "$1: zp-logsend send failed: $(tail -n 1 "$T/$1.send.err")"
	logsend_sent "$1" "$1" "$2" "$3"
}

# spooled WHAT CONNS: every stream ended into files, one stream a client.
spooled() {
	local n
	wait_metric zproxy_spool_streams == 0 30 "$1: every stream ended"
	n=$(ls -A "$SDIR" | sed 's/-[0-9]*\.[a-z]*$//' | sort -u | wc -l)
	[ "$n" = "$2" ] || fail "$1: $n streams in the spool, want $2"
	[ -z "$(ls -A "$SDIR" | grep -v '\.spool$')" ] ||
		fail "$1: not all whole: $(ls -A "$SDIR" | head -n 3 | tr '\n' ' ')"
}

# delivered WHAT NAME CONNS MSGS: the spool empties within 60 s, the
# collector (C_LOG) has every message exactly once, each connection's in
# order.
delivered() {
	wait_metric zproxy_spool_files == 0 60 "$1: the spool empties"
	wait_lines "$C_LOG" $(($3 * $4)) 30 ||
		note "$1: $(lines "$C_LOG") of $(($3 * $4)) lines within 30s"
	logsend_verify "$1" "$2" "$3" "$4" --exactly-once --ordered "$C_LOG"
	[ -z "$(ls -A "$SDIR")" ] ||
		fail "$1: the spool still holds $(ls -A "$SDIR" | head -n 3 | tr '\n' ' ')"
}

# ---- a. TLS clients into the spool ---------------------------------------

case_tls_clients() {
	local mode=$1 name=a-$1 what up conns=5 msgs=2000
	what="$mode: TLS clients spooled, rsyslog down"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	zproxy_spool "$SDIR" -m "$mode" -l "tls@127.0.0.1:@PORT@" "${TLS_L[@]}" \
	    --framing lf -u "127.0.0.1:$up"
	shipper "$name"
	send_bg "$name" "$SHIP_PORT" "$conns" "$msgs" lf
	send_done "$name" "$conns" "$msgs" 60
	spooled "$what" "$conns"
	[ "$(grep -c ' conn=.* tls=TLSv1.3 .*end=spooled' "$ZLOG")" = "$conns" ] ||
		fail "$what: $(grep -c ' conn=.* tls=TLSv1.3 .*end=spooled' "$ZLOG") TLS clients ended spooled, want $conns"
	start_collector rsyslog "$name" "$up"
	delivered "$what" "$name" "$conns" "$msgs"
	stop_zproxy
	zp_stop "$SHIP_PID"
	kill_collector "$C_PID" "$up" "$what: rsyslog"
	ok "$what: $conns TLS clients' $((conns * msgs)) messages read through their sessions into the spool, then delivered exactly once, in order ($VERIFIED)"
}

# ---- b. files to a TLS collector -------------------------------------------

case_tls_collector() {
	local name=b what up conns=5 msgs=2000 bad n
	what="spooled files to a TLS collector"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	zproxy_spool "$SDIR" "${UP_CA[@]}" --framing octet \
	    -u "tls@127.0.0.1:$up"
	send_bg "$name" "$ZPORT" "$conns" "$msgs" octet
	send_done "$name" "$conns" "$msgs" 60
	spooled "$what" "$conns"
	# A collector whose certificate is for another name: refused.
	peer_listen "$name.bad" --echo -n 0 -t 60 --tls-fail --tls \
	    --tls-cert "$C/nobody.pem" --tls-key "$C/nobody.key" -p "$up"
	bad=$PEER_PID
	wait_line "$ZLOG" "spool: .* not delivered to 127.0.0.1:$up \(TLS handshake failed: name-mismatch" \
	    20 "$ZPID" >/dev/null ||
		fail "$what: no try refused for its name: $(grep -m 2 'spool:' "$ZLOG")"
	zp_stop "$bad"
	zp_wait_exit "$bad" 5 >/dev/null 2>&1
	n=$(ls -A "$SDIR" | wc -l)
	[ "$n" -ge "$conns" ] || fail "$what: $n files left after the refused tries"
	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name" "$up" octet
	unset C_TLS_CERT C_TLS_KEY
	delivered "$what" "$name" "$conns" "$msgs"
	grep -q "spool: .* delivered to 127.0.0.1:$up" "$ZLOG" ||
		fail "$what: no 'delivered' line"
	# The spool's handshakes are counted with the pairs'.
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="upstream",result="name-mismatch"}' '>=' 1 \
	    "$what: the refused handshakes"
	expect 'zproxy_tls_handshakes_total{side="upstream",result="ok"}' '>=' "$conns" \
	    "$what: a handshake a file"
	stop_zproxy
	kill_collector "$C_PID" "$up" "$what: syslog-ng"
	ok "$what: a wrong-name certificate refused (the files kept), then syslog-ng over TLS got every one of $((conns * msgs)) messages exactly once, in order ($VERIFIED)"
}

# ---- c. TLS both sides, live streams spooled and live again ---------------

case_live() {
	local name=c what conns=6 msgs=1500 k=500 apid aport alog bpid bport
	local blog spooled files f
	what="TLS streams spooled when every TLS collector is down"
	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name-a" "" octet
	apid=$C_PID aport=$C_PORT alog=$C_LOG
	start_collector syslog-ng "$name-b" "" octet
	bpid=$C_PID bport=$C_PORT blog=$C_LOG
	spool_dir "$name.spool"
	zproxy_spool "$SDIR" -l "tls@127.0.0.1:@PORT@" "${TLS_L[@]}" \
	    "${UP_CA[@]}" --framing octet --replay-window 1M --threads 2 \
	    --balance roundrobin -u "tls@127.0.0.1:$aport" \
	    -u "tls@127.0.0.1:$bport"
	shipper "$name"
	send_bg "$name" "$SHIP_PORT" "$conns" "$msgs" octet --pause-at "$k" \
	    --go "$T/$name.go"
	wait_line "$T/$name.send.out" '^paused$' 30 "$SEND_PID" >/dev/null ||
		fail "$what: zp-logsend did not pause: $(tail -n 1 "$T/$name.send.err")"
	kill9_collector "$apid" "$aport" "$what: collector a"
	kill9_collector "$bpid" "$bport" "$what: collector b"
	# The clients are paused: the collectors' ends tell; every stream
	# moves to nothing and spools, its client connected.
	wait_metric zproxy_spool_streams == "$conns" 30 "$what: every stream spooling"
	spooled=$(grep -c 'spooling client' "$ZLOG")
	[ "$spooled" = "$conns" ] ||
		fail "$what: $spooled 'spooling client' lines, want $conns"
	start_collector syslog-ng "$name-a2" "$aport" octet
	unset C_TLS_CERT C_TLS_KEY
	wait_metric zproxy_spool_streams == 0 30 "$what: every stream live again"
	wait_metric zproxy_spool_files == 0 30 "$what: every file delivered"
	[ "$(grep -c 'its spool was delivered' "$ZLOG")" = "$conns" ] ||
		fail "$what: $(grep -c 'its spool was delivered' "$ZLOG") of $conns streams went live again"
	: >"$T/$name.go"
	send_done "$name" "$conns" "$msgs" 100
	stop_zproxy
	zp_stop "$SHIP_PID"
	settle "$C_LOG" 20 || note "$what: the last file still grows after 20s"
	# A collector that had no message yet wrote no file.
	files=("$C_LOG")
	for f in "$alog" "$blog"; do
		[ -e "$f" ] && files+=("$f")
	done
	logsend_verify "$what" "$name" "$conns" "$msgs" --tail-ok \
	    --at-least-once "${files[@]}"
	kill_collector "$C_PID" "$aport" "$what: syslog-ng"
	ok "$what: $conns TLS streams moved, spooled (through their sessions), delivered over TLS and live again: every one of $((conns * msgs)) messages at least once ($VERIFIED)"
}

for m in $MODES; do
	subcase case_tls_clients "$m"
done
subcase case_tls_collector
subcase case_live
zp_done
