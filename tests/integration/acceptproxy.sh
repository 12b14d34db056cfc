#!/bin/bash
# acceptproxy.sh - zproxy --accept-proxy behind real balancers, and against
# every header a balancer may send and an attacker may:
#   a. client 127.0.0.5 (a port it bound) -> a balancer on 127.0.0.7 ->
#      zproxy --accept-proxy --send-proxy v1 -> a real PROXY receiver. The
#      balancers: HAProxy `send-proxy` (v1), HAProxy `send-proxy-v2` with
#      `proxy-v2-options crc32c,unique-id,authority` (real TLVs and a real
#      checksum), nginx stream `proxy_protocol on`. The receivers: HAProxy
#      `accept-proxy` logging %ci:%cp %fi:%fp (256 KiB behind it, SHA-256
#      compared) and syslog-ng proxied-tcp writing ${PROXIED_SRCIP} on each
#      of 200 messages. The receiver must see the client and the address
#      it connected to (the balancer's), never zproxy or the balancer;
#      zproxy's line says client=127.0.0.5:CPORT peer=127.0.0.1:...;
#      HAProxy v2 with an IPv6 client ([::1]) too;
#   b. hand-made headers straight to zproxy (tests/tools/zp-hdr), the
#      upstream a zp-peer writing each connection to a file: every v1 form
#      (and a v4-mapped client to an IPv6 address: sent on as TCP6, the
#      client kept, not UNKNOWN),
#      v2 with each family, LOCAL, TLVs (AWS 0xEA, authority, unique-id,
#      NOOP), CRC32c good, a header split over many segments, a header and
#      64 KiB of data in one segment: each arrives as the right v1 header
#      and the data, byte-exact. Then the bad ones: garbage, CRC32c bad,
#      truncated, oversized, bad v1 forms, a trickle slower than
#      --proxy-timeout (closed at the deadline, not later), silence: each
#      closed, end=bad-proxy-header with its reason, and never connected
#      upstream (the upstream saw exactly the good ones; /metrics counts
#      the bad ones);
#   c. --proxy-from: a peer outside it is refused at accept (end=denied);
#      --deny and --max-conns-per-source judge the header's client, not
#      the balancer.
# a and b in both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/proxypeers.sh" || exit 1

: "${ZP_HDR:?ZP_HDR must name tests/tools/zp-hdr}"
PAYLOAD_SIZE=262144
mkdata pay $PAYLOAD_SIZE
RUN=$(date +%s)x$$

# zproxy_ap ARGS...: zproxy -v -m $mode --accept-proxy ARGS.
zproxy_ap() {
	SPORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	start_zproxy -vv -m "$mode" --accept-proxy --stats "127.0.0.1:$SPORT" "$@"
}

# balancer KIND NAME: start balancer KIND in front of zproxy (ZPORT),
# listening on ZSOCK's address. Sets DST_PORT (where the client goes).
balancer() {
	local addr=$ZADDR
	[ "$ZADDR" = ::1 ] && addr=::1
	case $1 in
	hap-v1)	start_haproxy_tx "$2" "$addr" "$ZPORT" send-proxy ;;
	hap-v2)	start_haproxy_tx "$2" "$addr" "$ZPORT" send-proxy-v2 \
		    proxy-v2-options crc32c,unique-id,authority ;;
	nginx)	start_nginx_tx "$2" "$ZSOCK" "$ZPORT" ;;
	esac
	DST_PORT=$TX_PORT
}

# ---- a: real balancers in front, real receivers behind ---------------------

case_to_haproxy() {
	local fam=$1 kind=$2 n=a-$mode-$1-$2 line bpid
	local what="$mode: $kind -> zproxy --accept-proxy -> haproxy accept-proxy, IPv$fam client"
	fam_setup "$fam"
	peer_listen "$n-be" --no-shut -o "$T/$n.got" -t 30
	bpid=$PEER_PID
	start_haproxy "$n-rx" "$PEER_PORT"
	zproxy_ap --send-proxy v1 -u "127.0.0.1:$RX_PORT"
	balancer "$kind" "$n-tx"
	client_send "$T/pay"
	line=$(wait_line "$T/$n-rx.out" '^pp ' 10 "$RX_PID") ||
		fail "$what: no log line from the receiving haproxy within 10s: $(tail -n 3 "$T/$n-rx.out" "$T/$n-rx.err")"
	check_line "$what" "$line" "pp src=$CADDR:$CPORT dst=$ZADDR:$DST_PORT bytes=$PAYLOAD_SIZE"
	peer_wait "$bpid" "$n-be" 20 || fail "$what: backend: $(cat "$T/$n-be.err")"
	same_file "$T/pay" "$T/$n.got" "$what: payload"
	expect_conn_log "client=$CLOG:$CPORT peer=127\.0\.0\.1:[0-9]+ upstream=127\.0\.0\.1:$RX_PORT .*up=$PAYLOAD_SIZE .*end=closed" "$what"
	if [ "$kind" = hap-v2 ]; then
		# HAProxy's own TLVs: its unique-id and a CRC32c zproxy checked
		grep -Eq "PROXY v2 header of connection [0-9]+ \([0-9]+ bytes\): client=$CLOG:$CPORT, [2-9] TLVs, crc32c ok" "$ZLOG" ||
			fail "$what: no PROXY v2 header with a checked CRC32c in zproxy's debug log: $(grep 'PROXY v' "$ZLOG" | head -n 2)"
	fi
	stop_zproxy
	ok "$what: the receiver saw $CADDR:$CPORT -> $ZADDR:$DST_PORT, 256 KiB intact"
}

case_to_syslog_ng() {
	local kind=$1 n=s-$mode-$1 id=$RUN$mode$1 i size
	local what="$mode: $kind -> zproxy --accept-proxy --send-proxy v1 -> syslog-ng proxied-tcp"
	fam_setup 4
	for ((i = 1; i <= 200; i++)); do
		printf '<13>Dec  3 21:00:00 zphost zptest: msg-%s-%d\n' "$id" "$i"
	done >"$T/$n.msgs"
	size=$(stat -c %s "$T/$n.msgs")
	start_syslog_ng "$n-rx"
	zproxy_ap --send-proxy v1 -u "127.0.0.1:$RX_PORT"
	balancer "$kind" "$n-tx"
	client_send "$T/$n.msgs"
	expect_conn_log "client=$CLOG:$CPORT peer=127\.0\.0\.1:[0-9]+ upstream=127\.0\.0\.1:$RX_PORT .*up=$size .*end=closed" "$what"
	wait_line "$T/$n-rx.log" "msg=msg-$id-200\$" 10 "$RX_PID" >/dev/null ||
		fail "$what: $(grep -c . "$T/$n-rx.log" 2>/dev/null) of 200 messages in syslog-ng's file within 10s: $(tail -n 3 "$T/$n-rx.err")"
	for ((i = 1; i <= 200; i++)); do
		echo "pp src=$CADDR:$CPORT dst=$ZADDR:$DST_PORT ipv=4 sourceip=127.0.0.1 host=zphost msg=msg-$id-$i"
	done >"$T/$n.want"
	cmp -s "$T/$n.want" "$T/$n-rx.log" ||
		fail "$what: syslog-ng's file is not the 200 messages with the client's address: $(diff "$T/$n.want" "$T/$n-rx.log" | head -n 3 | tr '\n' ' ' | head -c 400)"
	stop_zproxy
	ok "$what: PROXIED_SRCIP:PORT $CADDR:$CPORT on each of 200 messages"
}

# ---- b: hand-made headers --------------------------------------------------

SIG='\x0d\x0a\x0d\x0a\x00\x0d\x0a\x51\x55\x49\x54\x0a'
# be16 N: N as two bytes for printf.
be16() { printf '\\x%02x\\x%02x' $(($1 >> 8)) $(($1 & 255)); }

# hdr NAME PRINTF-FORMAT: write a header file $T/h.NAME.
hdr() { printf "$2" >"$T/h.$1"; }

make_headers() {
	local tlv_aws tlv_auth tlv_uid tlv_noop a4 a6
	# 192.0.2.10:40000 -> 198.51.100.20:514
	a4='\xc0\x00\x02\x0a\xc6\x33\x64\x14\x9c\x40\x02\x02'
	# [2001:db8::10]:40000 -> [2001:db8::20]:6514
	a6='\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x10'
	a6+='\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x20'
	a6+='\x9c\x40\x19\x72'
	tlv_aws='\xea\x00\x17\x01vpce-0123456789abcdef0'	# 26 bytes
	tlv_auth='\x02\x00\x10logs.example.com'		# 19
	tlv_uid='\x05\x00\x08uniqueid'			# 11
	tlv_noop='\x04\x00\x03\x00\x00\x00'		# 6

	# good: NAME, and the v1 line the upstream must get ("local": the
	# connection's own addresses)
	hdr v1-tcp4 'PROXY TCP4 192.0.2.10 198.51.100.20 40000 514\r\n'
	hdr v1-tcp6 'PROXY TCP6 2001:db8::10 2001:db8::20 40000 6514\r\n'
	# a v4-mapped client on an IPv6 address (issue 32)
	hdr v1-tcp6-mapped 'PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 514\r\n'
	hdr v1-unknown 'PROXY UNKNOWN\r\n'
	hdr v1-unknown-addr 'PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n'
	hdr v2-inet "$SIG\\x21\\x11$(be16 12)$a4"
	hdr v2-inet6 "$SIG\\x21\\x21$(be16 36)$a6"
	hdr v2-local "$SIG\\x20\\x00$(be16 0)"
	hdr v2-local-inet "$SIG\\x20\\x11$(be16 12)$a4"
	hdr v2-unspec "$SIG\\x21\\x00$(be16 0)"
	hdr v2-tlvs "$SIG\\x21\\x11$(be16 $((12 + 26 + 19 + 11 + 6)))$a4$tlv_aws$tlv_auth$tlv_uid$tlv_noop"
	# CRC32c TLV last, its value filled in by zp-hdr --crc32c
	hdr v2-crc "$SIG\\x21\\x11$(be16 $((12 + 26 + 7)))$a4$tlv_aws\\x03\\x00\\x04\\x00\\x00\\x00\\x00"
	"$ZP_HDR" --crc32c-at $((16 + 12 + 26 + 3)) --fix "$T/h.v2-crc" ||
		fail "zp-hdr --fix failed"
	# bad
	hdr bad-garbage 'GET / HTTP/1.0\r\n\r\n'
	cp "$T/h.v2-crc" "$T/h.bad-crc"
	printf '\xff' | dd of="$T/h.bad-crc" bs=1 seek=20 conv=notrunc status=none
	hdr bad-truncated "$SIG\\x21\\x11$(be16 12)\\xc0\\x00\\x02"
	hdr bad-oversized "$SIG\\x21\\x11$(be16 60000)$a4"
	hdr bad-version "$SIG\\x31\\x11$(be16 12)$a4"
	hdr bad-v1-spaces 'PROXY TCP4  192.0.2.10 198.51.100.20 40000 514\r\n'
	hdr bad-v1-port 'PROXY TCP4 192.0.2.10 198.51.100.20 40000 65536\r\n'
	hdr bad-v1-family 'PROXY TCP4 2001:db8::10 2001:db8::20 40000 514\r\n'
	hdr bad-v1-lf 'PROXY TCP4 192.0.2.10 198.51.100.20 40000 514\n'
	hdr bad-v1-long "PROXY UNKNOWN $(head -c 200 /dev/zero | tr '\0' x)\\r\\n"
	hdr bad-v1-short 'PROXY TCP4 192.0.2.10 198.51.100.20 40000'
}

# The v1 line the upstream must get for header NAME; CP: the client port.
want_line() {
	case $1 in
	v1-tcp4|v2-inet|v2-tlvs|v2-crc|split|with-data)
		printf 'PROXY TCP4 192.0.2.10 198.51.100.20 40000 514\r\n' ;;
	v1-tcp6|v2-inet6)
		printf 'PROXY TCP6 2001:db8::10 2001:db8::20 40000 6514\r\n' ;;
	v1-tcp6-mapped)
		printf 'PROXY TCP6 ::ffff:192.0.2.7 ::1 40000 514\r\n' ;;
	*)	printf 'PROXY TCP4 127.0.0.9 127.0.0.1 %s %s\r\n' "$2" "$ZPORT" ;;
	esac
}

# The client in the conn= line for header NAME.
want_client() {
	case $1 in
	v1-tcp4|v2-inet|v2-tlvs|v2-crc|split|with-data) echo '192\.0\.2\.10:40000 peer=127\.0\.0\.9:[0-9]+' ;;
	v1-tcp6|v2-inet6) echo '\[2001:db8::10\]:40000 peer=127\.0\.0\.9:[0-9]+' ;;
	v1-tcp6-mapped) echo '192\.0\.2\.7:40000 peer=127\.0\.0\.9:[0-9]+' ;;
	*)	echo '127\.0\.0\.9:[0-9]+' ;;
	esac
}

case_handmade() {
	local what="$mode: hand-made headers" good bad h i=0 out cp got line
	local nbad=0 trickle
	good="v1-tcp4 v1-tcp6 v1-tcp6-mapped v1-unknown v1-unknown-addr v2-inet v2-inet6 v2-local v2-local-inet v2-unspec v2-tlvs v2-crc split with-data"
	bad="bad-garbage bad-crc bad-truncated bad-oversized bad-version bad-v1-spaces bad-v1-port bad-v1-family bad-v1-lf bad-v1-long bad-v1-short"
	make_headers
	cp "$T/h.v2-tlvs" "$T/h.split"
	cp "$T/h.v1-tcp4" "$T/h.with-data"
	head -c 65536 "$T/pay" >"$T/small"
	peer_listen hm-be --conns 0 --no-shut -o "$T/hm.%d" -t 60
	zproxy_ap --send-proxy v1 --proxy-timeout 1 -u "127.0.0.1:$PEER_PORT"
	for h in $good; do
		cat "$T/h.$h" "$T/small" >"$T/send"
		local args=()
		[ "$h" = split ] && args=(--chunk 3 --gap 0.005)
		[ "$h" = with-data ] || args+=(--pause-at "$(stat -c %s "$T/h.$h")")
		out=$("$ZP_HDR" --bind 127.0.0.9 "${args[@]}" 127.0.0.1 "$ZPORT" "$T/send" --timeout 10) ||
			fail "$what: $h: zp-hdr failed: $out"
		next_conn_log 10 || fail "$what: $h: no conn= line"
		line=$CONN_LOG
		echo "$line" | grep -Eq "client=$(want_client "$h") upstream=127\.0\.0\.1:$PEER_PORT .*up=65536 .*end=closed" ||
			fail "$what: $h: zproxy logged: $line"
		cp=$(echo "$line" | sed -n 's/.*client=127\.0\.0\.9:\([0-9]*\) .*/\1/p; s/.*peer=127\.0\.0\.9:\([0-9]*\) .*/\1/p')
		{ want_line "$h" "$cp"; cat "$T/small"; } >"$T/want"
		wait_size "$T/hm.$i" "$(stat -c %s "$T/want")" 10 ||
			fail "$what: $h: upstream got $(size "$T/hm.$i") bytes, want $(stat -c %s "$T/want")"
		cmp -s "$T/want" "$T/hm.$i" ||
			fail "$what: $h: upstream got '$(head -n 1 "$T/hm.$i" | tr -d '\r')', want '$(head -n 1 "$T/want" | tr -d '\r')' and the data"
		i=$((i + 1))
	done
	ok "$what: $i good headers (every v1 form, a v4-mapped client to IPv6, v2 INET/INET6/UNSPEC/LOCAL, TLVs, CRC32c, split in 3-byte segments, data in the header's segment) relayed as the right v1 header and 64 KiB intact"
	for h in $bad; do
		out=$("$ZP_HDR" --bind 127.0.0.9 127.0.0.1 "$ZPORT" "$T/h.$h" --timeout 10) ||
			fail "$what: $h: zp-hdr failed: $out"
		next_conn_log 10 || fail "$what: $h: no conn= line"
		line=$CONN_LOG
		echo "$line" | grep -Eq 'client=127\.0\.0\.9:[0-9]+ upstream=none .*end=bad-proxy-header error="[^"]+"' ||
			fail "$what: $h: zproxy logged: $line"
		case $out in *end=eof*|*end=reset*) ;; *) fail "$what: $h: the client saw $out" ;; esac
		nbad=$((nbad + 1))
		note "$h: $(echo "$line" | sed 's/.*error=//')"
	done
	# a trickle: one byte every 0.3 s of a valid header, never done in 1 s
	out=$("$ZP_HDR" --bind 127.0.0.9 --chunk 1 --gap 0.3 --no-shut 127.0.0.1 "$ZPORT" "$T/h.v1-tcp4" --timeout 10) ||
		fail "$what: trickle: zp-hdr failed: $out"
	next_conn_log 10 || fail "$what: trickle: no conn= line"
		line=$CONN_LOG
	echo "$line" | grep -Eq 'end=bad-proxy-header error="header incomplete after --proxy-timeout"' ||
		fail "$what: trickle: zproxy logged: $line"
	awk -v l="$out" 'BEGIN { split(l, f, "after="); exit !(f[2] + 0 >= 0.9 && f[2] + 0 < 2.5) }' ||
		fail "$what: trickle: closed at the wrong time: $out (want about 1 s: --proxy-timeout)"
	trickle=${out##*after=}
	nbad=$((nbad + 1))
	# silence
	: >"$T/empty"
	out=$("$ZP_HDR" --bind 127.0.0.9 --no-shut 127.0.0.1 "$ZPORT" "$T/empty" --timeout 10) ||
		fail "$what: silence: zp-hdr failed: $out"
	next_conn_log 10 || fail "$what: silence: no conn= line"
		line=$CONN_LOG
	echo "$line" | grep -Eq 'end=bad-proxy-header error="no header within --proxy-timeout"' ||
		fail "$what: silence: zproxy logged: $line"
	nbad=$((nbad + 1))
	ok "$what: $nbad bad headers (garbage, CRC32c bad, truncated, oversized, bad version, 6 bad v1 lines, a byte every 0.3 s closed after ${trickle}s, silence) closed with end=bad-proxy-header"
	stats_scrape
	stats_is zproxy_bad_proxy_headers_total "$nbad" "$what"
	stats_is "zproxy_upstream_connections_total{upstream=\"127.0.0.1:$PEER_PORT\"}" "$i" "$what: upstream connects"
	[ ! -e "$T/hm.$i" ] || fail "$what: the upstream saw a connection for a bad header"
	stop_zproxy
	ok "$what: the upstream saw only the $i good ones; zproxy_bad_proxy_headers_total $nbad"
}

# ---- c: who may send headers, and whose address the rules judge ------------

case_access() {
	local what="access rules" out line mode=splice
	make_headers
	peer_listen ac-be --conns 0 --no-shut -t 60
	zproxy_ap --proxy-from 127.0.0.9 --deny 192.0.2.66 --max-conns-per-source 1 \
	    --send-proxy v1 -u "127.0.0.1:$PEER_PORT"
	out=$("$ZP_HDR" --bind 127.0.0.8 127.0.0.1 "$ZPORT" "$T/h.v1-tcp4" --timeout 10) ||
		fail "$what: zp-hdr failed: $out"
	next_conn_log 10 || fail "$what: no conn= line"
		line=$CONN_LOG
	echo "$line" | grep -Eq 'client=127\.0\.0\.8:[0-9]+ upstream=none .*end=denied' ||
		fail "$what: a header from outside --proxy-from: zproxy logged: $line"
	ok "$what: a peer outside --proxy-from is refused at accept (end=denied)"
	printf 'PROXY TCP4 192.0.2.66 198.51.100.20 40000 514\r\nhello\n' >"$T/denied"
	out=$("$ZP_HDR" --bind 127.0.0.9 127.0.0.1 "$ZPORT" "$T/denied" --timeout 10) ||
		fail "$what: zp-hdr failed: $out"
	next_conn_log 10 || fail "$what: no conn= line"
		line=$CONN_LOG
	echo "$line" | grep -Eq 'client=192\.0\.2\.66:40000 peer=127\.0\.0\.9:[0-9]+ upstream=none .*end=denied' ||
		fail "$what: --deny of the header's client: zproxy logged: $line"
	ok "$what: --deny judges the header's client (192.0.2.66), not the balancer"
	# one held pair from 192.0.2.10 (its header, then silence), a second
	# from the same client through the same balancer is source-limited,
	# a third from another client is relayed
	zp_bg held "$ZP_HDR" --bind 127.0.0.9 --no-shut 127.0.0.1 "$ZPORT" "$T/h.v1-tcp4" --timeout 30
	wait_estab "$PEER_PORT" 1 10 ||
		fail "$what: the held pair never reached the upstream"
	out=$("$ZP_HDR" --bind 127.0.0.9 127.0.0.1 "$ZPORT" "$T/h.v1-tcp4" --timeout 10) ||
		fail "$what: zp-hdr failed: $out"
	next_conn_log 10 || fail "$what: no conn= line"
		line=$CONN_LOG
	echo "$line" | grep -Eq 'client=192\.0\.2\.10:40000 peer=127\.0\.0\.9:[0-9]+ upstream=none .*end=source-limit' ||
		fail "$what: --max-conns-per-source of the header's client: zproxy logged: $line"
	ok "$what: --max-conns-per-source counts the header's client"
	stats_scrape
	stats_is zproxy_clients_denied_total 2 "$what"
	stats_is zproxy_clients_source_limited_total 1 "$what"
	stop_zproxy
}

# d. the command line, and what start-up says.
case_cli() {
	local rc args
	for args in "--proxy-from 10.0.0.0/8" "--proxy-timeout 2" \
	    "--accept-proxy --proxy-from 10.0.0.0/33" \
	    "--accept-proxy --proxy-timeout 0" \
	    "--accept-proxy --proxy-timeout 1 --proxy-timeout 2"; do
		# shellcheck disable=SC2086
		"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:9 $args 2>"$T/cli.err"
		rc=$?
		[ "$rc" = 64 ] || fail "$args: exit $rc, want 64"
		[ "$(wc -l <"$T/cli.err")" = 1 ] ||
			fail "$args: not one line: $(cat "$T/cli.err")"
	done
	grep -q -- "--proxy-timeout" "$T/cli.err" || fail "twice: $(cat "$T/cli.err")"
	ok "--proxy-from or --proxy-timeout without --accept-proxy, a bad CIDR or time, one given twice: exit 64, one line"
	start_zproxy --accept-proxy -u 127.0.0.1:9
	grep -q 'warning.*PROXY headers required, within 3s, from any peer\|PROXY headers required, within 3s, from any peer' "$ZLOG" ||
		fail "no start-up line for --accept-proxy: $(head -n 3 "$ZLOG")"
	stop_zproxy
	start_zproxy --accept-proxy --proxy-from 10.0.0.0/8 --proxy-from ::1 --proxy-timeout 1.5 -u 127.0.0.1:9
	grep -q 'PROXY headers required, within 1.5s, from --proxy-from 10.0.0.0/8,::1/128' "$ZLOG" ||
		fail "the start-up line does not name the rules: $(grep -m1 'PROXY headers' "$ZLOG")"
	stop_zproxy
	ok "start-up says where headers are taken from, and warns without --proxy-from"
}

if have_ipv6; then
	note "IPv6 loopback present: the [::1] client sub-case runs"
fi
subcase case_cli
subcase case_access
for mode in $MODES; do
	subcase case_handmade
	for kind in hap-v1 hap-v2 nginx; do
		subcase case_to_haproxy 4 "$kind"
		subcase case_to_syslog_ng "$kind"
	done
	have_ipv6 && subcase case_to_haproxy 6 hap-v2
done

zp_done
