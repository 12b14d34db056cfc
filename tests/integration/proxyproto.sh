#!/bin/bash
# proxyproto.sh - zproxy --send-proxy v1|v2 in front of real receivers of
# the PROXY protocol, each of which must report the client's own address
# and port (and zproxy's listen address as the destination), and pass on
# the client's bytes intact, without the header:
#   a. HAProxy, `bind ... accept-proxy`, mode tcp, logging %ci:%cp and
#      %fi:%fp, forwarding to a zp-peer that checks the payload (256 KiB,
#      SHA-256); v1 and v2;
#   b. nginx stream, `listen ... proxy_protocol`, access log of
#      $proxy_protocol_addr:$proxy_protocol_port (and _server_), proxying
#      to a zp-peer that checks the payload; v1 and v2;
#   c. syslog-ng network(transport("proxied-tcp")), writing
#      ${PROXIED_SRCIP}:${PROXIED_SRCPORT} (3.38 leaves ${SOURCEIP} the
#      TCP peer, i.e. zproxy) with each of 200 messages of one
#      connection; v1 only (3.38 reads no v2);
#   d. the client is IPv4 from 127.0.0.5 and a port it bound, to zproxy on
#      127.0.0.7: none of the reported addresses can come from the TCP
#      connection to the receiver (127.0.0.1 both ends); with IPv6
#      loopback also [::1] -> [::1] (TCP6 / AF_INET6 headers over an IPv4
#      upstream connection), and, against HAProxy, an IPv4 client of a
#      dual-stack listener (-l :PORT): the header must carry plain IPv4
#      addresses, not ::ffff:127.0.0.5;
#   e. controls: the same receivers behind zproxy without --send-proxy
#      reject the connection (so the checks above are not vacuous).
# zproxy's own conn= line must name the same client. Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

. "${ZP_TESTLIB%/*}/proxypeers.sh" || exit 1

PAYLOAD_SIZE=262144
mkdata pay $PAYLOAD_SIZE
RUN=$(date +%s)x$$

# ---- client and zproxy ------------------------------------------------------

# zproxy_pp VERSION RX_PORT: zproxy -v -m $mode, listening on ZLISTEN,
# --send-proxy VERSION ("none": no header) to 127.0.0.1:RX_PORT.
zproxy_pp() {
	local pp=()
	[ "$1" = none ] || pp=(--send-proxy "$1")
	start_zproxy -v -m "$mode" -l "$ZLISTEN" "${pp[@]}" -u "127.0.0.1:$2"
}

# ---- a: HAProxy ------------------------------------------------------------

case_haproxy() {
	local fam=$1 v=$2 what="$mode: haproxy, --send-proxy $2, IPv$1 client" line bpid
	local n=hap-$mode-$1-$2
	[ "$fam" = dual ] && what="$mode: haproxy, --send-proxy $v, IPv4 client of -l :PORT"
	fam_setup "$fam"
	peer_listen "$n-be" --no-shut -o "$T/$n.got" -t 30
	bpid=$PEER_PID
	start_haproxy "$n" "$PEER_PORT"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/pay"
	line=$(wait_line "$T/$n.out" '^pp ' 10 "$RX_PID") ||
		fail "$what: no log line from haproxy within 10s: $(tail -n 3 "$T/$n.out" "$T/$n.err")"
	check_line "$what" "$line" "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT bytes=$PAYLOAD_SIZE"
	peer_wait "$bpid" "$n-be" 20 || fail "$what: backend: $(cat "$T/$n-be.err")"
	same_file "$T/pay" "$T/$n.got" "$what: payload behind haproxy"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$PAYLOAD_SIZE .*end=closed" "$what"
	stop_zproxy
	ok "$what: haproxy saw $CADDR:$CPORT -> $ZADDR:$ZPORT, 256 KiB intact behind it"
}

# ---- b: nginx ----------------------------------------------------------------

case_nginx() {
	local fam=$1 v=$2 what="$mode: nginx, --send-proxy $2, IPv$1 client" line bpid
	local n=ngx-$mode-$1-$2
	fam_setup "$fam"
	peer_listen "$n-be" --no-shut -o "$T/$n.got" -t 30
	bpid=$PEER_PID
	start_nginx "$n" "$PEER_PORT"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/pay"
	line=$(wait_line "$T/$n.d/access.log" '^pp ' 10 "$RX_PID") ||
		fail "$what: no access log line from nginx within 10s: $(tail -n 3 "$T/$n.d/error.log")"
	check_line "$what" "$line" "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT remote=127.0.0.1 bytes=$PAYLOAD_SIZE"
	peer_wait "$bpid" "$n-be" 20 || fail "$what: backend: $(cat "$T/$n-be.err")"
	same_file "$T/pay" "$T/$n.got" "$what: payload behind nginx"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$PAYLOAD_SIZE .*end=closed" "$what"
	stop_zproxy
	ok "$what: nginx saw $CADDR:$CPORT -> $ZADDR:$ZPORT, 256 KiB intact behind it"
}

# ---- c: syslog-ng ------------------------------------------------------------

case_syslog_ng() {
	local fam=$1 v=$2 what="$mode: syslog-ng proxied-tcp, --send-proxy $2, IPv$1 client"
	local id=$RUN$mode$fam i ipv=4 size n=sng-$mode-$1-$2
	[ "$fam" = 6 ] && ipv=6
	fam_setup "$fam"
	for ((i = 1; i <= 200; i++)); do
		printf '<13>Dec  2 16:00:00 zphost zptest: msg-%s-%d\n' "$id" "$i"
	done >"$T/sng.msgs"
	size=$(stat -c %s "$T/sng.msgs")
	start_syslog_ng "$n"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/sng.msgs"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$size .*end=closed" "$what"
	wait_line "$T/$n.log" "msg=msg-$id-200\$" 10 "$RX_PID" >/dev/null ||
		fail "$what: $(grep -c . "$T/$n.log" 2>/dev/null) of 200 messages in syslog-ng's file within 10s: $(head -n 2 "$T/$n.log" 2>/dev/null) $(tail -n 3 "$T/$n.err")"
	for ((i = 1; i <= 200; i++)); do
		echo "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT ipv=$ipv sourceip=127.0.0.1 host=zphost msg=msg-$id-$i"
	done >"$T/sng.want"
	cmp -s "$T/sng.want" "$T/$n.log" ||
		fail "$what: syslog-ng's file is not the 200 messages with the client's address, first difference: $(diff "$T/sng.want" "$T/$n.log" | head -n 3 | tr '\n' ' ' | head -c 400)"
	stop_zproxy
	ok "$what: syslog-ng saw PROXIED_SRCIP:PORT $CADDR:$CPORT, DST $ZADDR:$ZPORT on each of 200 messages, intact"
}

# ---- e: controls -----------------------------------------------------------

case_controls() {
	local what="$mode: controls without --send-proxy"
	fam_setup 4
	echo "not a PROXY header" >"$T/ctl.pay"

	peer_listen "ctlh-$mode-be" --no-shut -o "$T/ctlh-$mode.got" -t 30
	start_haproxy "ctlh-$mode" "$PEER_PORT"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: haproxy"
	wait_line "$T/ctlh-$mode.out" 'PROXY protocol header' 10 "$RX_PID" >/dev/null ||
		fail "$what: haproxy took a connection without a header: $(tail -n 2 "$T/ctlh-$mode.out")"
	[ ! -s "$T/ctlh-$mode.got" ] || fail "$what: haproxy passed bytes on without a header"
	stop_zproxy
	ok "$what: haproxy rejects: $(grep -m 1 'PROXY protocol header' "$T/ctlh-$mode.out" | sed 's/.*: //')"

	peer_listen "ctln-$mode-be" --no-shut -o "$T/ctln-$mode.got" -t 30
	start_nginx "ctln-$mode" "$PEER_PORT"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: nginx"
	wait_line "$T/ctln-$mode.d/error.log" 'broken header' 10 "$RX_PID" >/dev/null ||
		fail "$what: nginx took a connection without a header: $(tail -n 2 "$T/ctln-$mode.d/error.log")"
	[ ! -s "$T/ctln-$mode.got" ] || fail "$what: nginx passed bytes on without a header"
	stop_zproxy
	ok "$what: nginx rejects (broken header)"

	start_syslog_ng "ctls-$mode"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: syslog-ng"
	wait_line "$T/ctls-$mode.err" 'Error parsing PROXY protocol header' 10 "$RX_PID" >/dev/null ||
		fail "$what: syslog-ng took a connection without a header: $(tail -n 2 "$T/ctls-$mode.err")"
	[ ! -s "$T/ctls-$mode.log" ] || fail "$what: syslog-ng logged a message without a header: $(head -n 1 "$T/ctls-$mode.log")"
	stop_zproxy
	ok "$what: syslog-ng rejects (Error parsing PROXY protocol header)"
}

if have_ipv6; then
	FAMS="4 6"
	note "IPv6 loopback present: the [::1] and dual-stack sub-cases run"
else
	FAMS=4
	note "no IPv6 loopback: the ::1 and dual-stack sub-cases are left out"
fi

for mode in $MODES; do
	for fam in $FAMS; do
		for v in v1 v2; do
			subcase case_haproxy "$fam" "$v"
			subcase case_nginx "$fam" "$v"
		done
		subcase case_syslog_ng "$fam" v1
	done
	if have_ipv6; then
		subcase case_haproxy dual v1
		subcase case_haproxy dual v2
	fi
	subcase case_controls
done

zp_done
