#!/bin/bash
# source.sh - --source ADDR and --source client, on the three hosts of
# netns.sh (client zc, the proxy here, server zs):
#   a. --source 10.10.0.3 / fd10::3 (a second address of the proxy host):
#      a socat server in zs answers each connection with the peer address
#      it sees, which must be that address, both families, both modes;
#      an upstream of the other family is skipped (-u [fd10::2] first,
#      --balance first): the IPv4 one relays, nothing is marked down, and
#      with only the other family the pair ends end=source-family;
#   b. --source client in front of rsyslog (imtcp, %fromhost-ip%) in zs,
#      with the return path of docs/TRANSPARENT.md's recipe (nft socket transparent,
#      the fwmark rule, the local route, both families): messages from
#      10.9.0.2, 10.9.0.3, fd09::2 and fd09::3 through one dual-stack
#      listener (IPv4 clients v4-mapped there) arrive attributed to those
#      addresses, in both modes;
#   b1. the same for syslog over UDP: -l udp@ --source client, datagrams
#      from those four addresses, attributed to them by rsyslog; and UDP
#      to UDP (-u udp@ --source client) into rsyslog's imudp;
#   b2. behind a balancer, --accept-proxy --source client: a real HAProxy
#      (send-proxy-v2, crc32c) in front; rsyslog attributes the message
#      to the client that connected to HAProxy (10.9.0.3), and those of
#      hand-made headers to 192.0.2.77 and 2001:db8::77, on no network
#      here, whose answers zs routes back through the proxy host;
#   c. --source client: iperf3 both ways (-R), and 3 MiB each way with
#      zp-peer from 10.9.0.3, byte-exact (sha256), both modes; as root,
#      with --user nobody: CapPrm and CapEff are CAP_NET_RAW alone;
#   d. the return path broken (the nft rule deleted): the pair ends
#      end=upstream-timeout within --connect-timeout 1 (no hang), the
#      upstream is not marked down (--max-fails 1: a spoofed connect that
#      timed out is not counted), and with the rule back the next
#      connection relays;
#   e. start-up: --source with a bad literal exits 64, with an address
#      the host lacks 71 (one line), --source client without
#      CAP_NET_ADMIN and CAP_NET_RAW (setpriv) 77 with the line naming
#      them.
. "${ZP_TESTLIB%/*}/netns.sh" || exit 1
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

command -v socat >/dev/null || fail "socat is not installed"
. "${ZP_TESTLIB%/*}/proxypeers.sh" || exit 1
: "${ZP_HDR:?ZP_HDR must name tests/tools/zp-hdr}"
RSYSLOGD=${RSYSLOGD:-$(command -v rsyslogd 2>/dev/null || true)}
if [ -z "$RSYSLOGD" ] && [ -x /opt/zp-rsyslog/usr/sbin/rsyslogd ]; then
	RSYSLOGD=/opt/zp-rsyslog/usr/sbin/rsyslogd
fi
[ -n "$RSYSLOGD" ] && [ -x "$RSYSLOGD" ] ||
	fail "rsyslogd not found: install rsyslog, or unpack its .deb into /opt/zp-rsyslog (see .ci/run), or set RSYSLOGD"
RS_MOD=()
if [ -z "${RSYSLOG_MODDIR:-}" ] && [ "$RSYSLOGD" != /usr/sbin/rsyslogd ]; then
	for d in "${RSYSLOGD%/sbin/rsyslogd}"/lib/*/rsyslog; do
		[ -f "$d/imtcp.so" ] && RSYSLOG_MODDIR=$d
	done
fi
[ -n "${RSYSLOG_MODDIR:-}" ] && RS_MOD=(-M "$RSYSLOG_MODDIR")
IPERF3=${IPERF3:-$(command -v iperf3 2>/dev/null || true)}
[ -n "$IPERF3" ] || fail "iperf3 is not installed"

zp_netns_topology
out=$( {
	set -e
	ip addr add 10.10.0.3/24 dev zp1
	ip addr add fd10::3/64 dev zp1 nodad
	ip -n zc addr add 10.9.0.3/24 dev zc0
	ip -n zc addr add fd09::3/64 dev zc0 nodad
} 2>&1 ) || fail "cannot add the second addresses: $out"

# docs/TRANSPARENT.md's recipe for the return path of --source client, verbatim.
return_path() {
	nft -f - <<-'EOF' &&
	table inet zproxy {
		chain prerouting {
			type filter hook prerouting priority mangle; policy accept;
			meta l4proto tcp socket transparent 1 meta mark set 0x1 accept
		}
	}
	EOF
	ip rule add fwmark 1 lookup 100 &&
	ip route add local 0.0.0.0/0 dev lo table 100 &&
	ip -6 rule add fwmark 1 lookup 100 &&
	ip -6 route add local ::/0 dev lo table 100
}
out=$(return_path 2>&1) || fail "cannot install the return path: $out"

mkdata up.bin 3M
mkdata down.bin 3M

# ---- a. --source ADDR ---------------------------------------------------

# A server in zs that tells each client the address it came from.
SPORT=7000
zp_bg who4 ip netns exec zs socat TCP4-LISTEN:$SPORT,bind=10.10.0.2,reuseaddr,fork \
    'SYSTEM:echo peer=$SOCAT_PEERADDR'
zp_bg who6 ip netns exec zs socat TCP6-LISTEN:$SPORT,bind=[fd10::2],reuseaddr,fork \
    'SYSTEM:echo peer=$SOCAT_PEERADDR'
ns_wait_port zs "$SPORT" || fail "socat does not listen in zs"

# who HOST WHAT: connect from zc through zproxy; print the peer= line.
who() {
	in_zc timeout -k 2 10 socat -T 5 - "TCP:$1:$ZPORT" </dev/null \
	    2>"$T/who.err" | sed -n 's/^peer=//p'
}

source_addr() {
	local mode=$1 got
	set_mode "$mode"
	start_zproxy -v "${MODE_ARGS[@]}" -l "10.9.0.1:@PORT@" \
	    -u "10.10.0.2:$SPORT" --source 10.10.0.3
	grep -q 'source 10.10.0.3:0' "$ZLOG" ||
		fail "$mode: the start-up line does not name the source: $(grep -m1 'listening on' "$ZLOG")"
	got=$(who 10.9.0.1)
	[ "$got" = 10.10.0.3 ] ||
		fail "$mode: --source 10.10.0.3: the server saw '${got:-nothing}' ($(cat "$T/who.err"))"
	expect_conn_log "end=closed .*|mode=$MODE_LOGGED" "$mode: --source 10.10.0.3"
	ok "$mode: --source 10.10.0.3: the server sees 10.10.0.3"
	stop_zproxy

	start_zproxy -v "${MODE_ARGS[@]}" -l "[fd09::1]:@PORT@" \
	    -u "[fd10::2]:$SPORT" --source fd10::3
	got=$(who '[fd09::1]')
	case $got in
	# socat writes IPv6 addresses in full
	*fd10::3*|*fd10:0000:0000:0000:0000:0000:0000:0003*) ;;
	*) fail "$mode: --source fd10::3: the server saw '${got:-nothing}' ($(cat "$T/who.err"))" ;;
	esac
	expect_conn_log "end=closed" "$mode: --source fd10::3"
	ok "$mode: --source fd10::3: the server sees $got"
	stop_zproxy
}

source_family() {
	local got
	# The IPv6 upstream first: skipped, not failed.
	start_zproxy -v -l "10.9.0.1:@PORT@" --balance first --max-fails 1 \
	    -u "[fd10::2]:$SPORT" -u "10.10.0.2:$SPORT" --source 10.10.0.3
	got=$(who 10.9.0.1)
	[ "$got" = 10.10.0.3 ] ||
		fail "skip: the server saw '${got:-nothing}' ($(cat "$T/who.err"))"
	expect_conn_log "upstream=10\.10\.0\.2:$SPORT .*end=closed" "skip"
	! grep -q 'is down' "$ZLOG" ||
		fail "skip: an upstream skipped for its family was marked down: $(grep -m1 'is down' "$ZLOG")"
	ok "an IPv6 upstream is skipped for --source 10.10.0.3, the IPv4 one relays, none is marked down"
	stop_zproxy

	start_zproxy -v -l "10.9.0.1:@PORT@" -u "[fd10::2]:$SPORT" \
	    --source 10.10.0.3
	who 10.9.0.1 >/dev/null
	expect_conn_log "end=source-family" "only the other family"
	ok "only an IPv6 upstream for --source 10.10.0.3: end=source-family, $(echo "$LAST_CONN_LOG" | grep -o 'error="[^"]*"')"
	stop_zproxy
}

for mode in $MODES; do
	subcase source_addr "$mode"
done
subcase source_family

# ---- b. --source client in front of rsyslog ------------------------------

RS_PORT=6514
RS_D=$T/rs.d
RS_LOG=$T/rs.log
mkdir -p "$RS_D"
cat >"$RS_D/rsyslog.conf" <<EOF
global(workDirectory="$RS_D" net.enableDNS="off")
module(load="imtcp")
template(name="fromip" type="string" string="%fromhost-ip% %msg%\n")
ruleset(name="collect") {
  action(type="omfile" file="$RS_LOG" template="fromip"
         flushOnTXEnd="on" asyncWriting="off")
}
input(type="imtcp" port="$RS_PORT" ruleset="collect")
module(load="imudp")
input(type="imudp" port="$RS_PORT" ruleset="collect")
EOF
zp_bg rsyslog ip netns exec zs "$RSYSLOGD" -n -f "$RS_D/rsyslog.conf" \
    -i "$RS_D/pid" "${RS_MOD[@]}"
RS_PID=$BG_PID
ns_wait_port zs "$RS_PORT" ||
	fail "rsyslogd does not listen in zs: $(head -c 300 "$T/rsyslog.err")"

# send_syslog FROM TO TAG: one message from zc's address FROM to zproxy.
send_syslog() {
	printf '<13>Dec  3 12:00:00 zc zptest: %s\n' "$3" >"$T/msg.$3"
	timeout -k 2 20 ip netns exec zc "$ZP_PEER" connect "$2" "$ZPORT" \
	    -b "$1" -s "$T/msg.$3" -t 10 >/dev/null 2>"$T/send.err" ||
		fail "$3: zp-peer connect from $1: $(cat "$T/send.err")"
}

client_rsyslog() {
	local mode=$1 from to tag
	set_mode "$mode"
	# One dual-stack listener: an IPv4 client is v4-mapped there. Each
	# family skips the other's upstream.
	start_zproxy -v "${MODE_ARGS[@]}" -l ":@PORT@" --source client \
	    -u "10.10.0.2:$RS_PORT" -u "[fd10::2]:$RS_PORT"
	for from in 10.9.0.2 10.9.0.3 fd09::2 fd09::3; do
		to=10.9.0.1
		case $from in *:*) to=fd09::1 ;; esac
		tag=$mode-from-${from//:/_}
		send_syslog "$from" "$to" "$tag"
		wait_line "$RS_LOG" " $tag\$" 10 >/dev/null ||
			fail "$mode: rsyslog did not get the message from $from"
		grep -q "^$from .*$tag\$" "$RS_LOG" ||
			fail "$mode: the message from $from is attributed otherwise: $(grep " $tag\$" "$RS_LOG")"
		expect_conn_log "end=closed" "$mode: from $from"
	done
	! grep -q 'is down' "$ZLOG" || fail "$mode: an upstream went down: $(grep -m1 'is down' "$ZLOG")"
	ok "$mode: --source client: rsyslog attributes each message to its client (10.9.0.2, 10.9.0.3, fd09::2, fd09::3)"
	stop_zproxy
}

for mode in $MODES; do
	subcase client_rsyslog "$mode"
done

# The same for devices that send syslog over UDP (issue 28): -l udp@,
# each source's stream connects from the device's own address.
client_rsyslog_udp() {
	local mode=$1 from to tag sock
	set_mode "$mode"
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@:@PORT@" --source client \
	    -u "10.10.0.2:$RS_PORT" -u "[fd10::2]:$RS_PORT"
	for from in 10.9.0.2 10.9.0.3 fd09::2 fd09::3; do
		to=10.9.0.1 sock=UDP4-SENDTO:10.9.0.1:$ZPORT,bind=$from
		case $from in
		*:*) to=fd09::1 sock=UDP6-SENDTO:[fd09::1]:$ZPORT,bind=[$from] ;;
		esac
		tag=$mode-udp-from-${from//:/_}
		printf '<13>Dec  3 12:00:00 zc zptest: %s' "$tag" |
		    timeout -k 2 10 ip netns exec zc socat -u - "$sock" ||
			fail "$mode: cannot send a datagram from $from to $to"
		wait_line "$RS_LOG" " $tag\$" 10 >/dev/null ||
			fail "$mode: rsyslog did not get the datagram from $from"
		grep -q "^$from .*$tag\$" "$RS_LOG" ||
			fail "$mode: the datagram from $from is attributed otherwise: $(grep " $tag\$" "$RS_LOG")"
	done
	! grep -q 'is down' "$ZLOG" || fail "$mode: an upstream went down: $(grep -m1 'is down' "$ZLOG")"
	ok "$mode: -l udp@ --source client: rsyslog attributes each device's datagram to it (10.9.0.2, 10.9.0.3, fd09::2, fd09::3), no header"
	stop_zproxy
}

for mode in $MODES; do
	subcase client_rsyslog_udp "$mode"
done

# UDP to UDP: -u udp@ --source client, rsyslog's imudp attributes each
# datagram to its device; each family's devices to that family's
# upstream (the other is skipped, as for TCP).
client_udp_relay() {
	local from sock tag
	start_zproxy -v -l "udp@:@PORT@" --source client \
	    -u "udp@10.10.0.2:$RS_PORT" -u "udp@[fd10::2]:$RS_PORT"
	for from in 10.9.0.2 10.9.0.3 fd09::2 fd09::3; do
		sock=UDP4-SENDTO:10.9.0.1:$ZPORT,bind=$from
		case $from in
		*:*) sock=UDP6-SENDTO:[fd09::1]:$ZPORT,bind=[$from] ;;
		esac
		tag=relay-from-${from//:/_}
		printf '<13>Dec  3 12:00:00 zc zptest: %s' "$tag" |
		    timeout -k 2 10 ip netns exec zc socat -u - "$sock" ||
			fail "cannot send a datagram from $from"
		wait_line "$RS_LOG" " $tag\$" 10 >/dev/null ||
			fail "-u udp@: rsyslog imudp did not get the datagram from $from"
		grep -q "^$from .*$tag\$" "$RS_LOG" ||
			fail "-u udp@: the datagram from $from is attributed otherwise: $(grep " $tag\$" "$RS_LOG")"
	done
	! grep -q 'cannot make a socket' "$ZLOG" ||
		fail "-u udp@: $(grep -m1 'cannot make a socket' "$ZLOG")"
	ok "-u udp@ --source client: rsyslog imudp attributes each device's datagram to it (10.9.0.2, 10.9.0.3, fd09::2, fd09::3)"
	stop_zproxy
}
subcase client_udp_relay

# ---- b2. behind a balancer: --accept-proxy --source client ---------------

# A real HAProxy on the proxy host (send-proxy-v2, with a CRC32c) in front
# of zproxy --accept-proxy --source client: rsyslog sees the client that
# connected to HAProxy, 10.9.0.3, not HAProxy nor zproxy. And a header by
# hand naming 192.0.2.77 and [2001:db8::77], on no network here: zs
# routes its answers back through the proxy host like any other.
client_balancer() {
	local mode=$1 tag from
	set_mode "$mode"
	start_zproxy -v "${MODE_ARGS[@]}" --accept-proxy --source client \
	    -u "10.10.0.2:$RS_PORT" -u "[fd10::2]:$RS_PORT"
	start_haproxy_tx "hap-$mode" 10.9.0.1 "$ZPORT" send-proxy-v2 \
	    proxy-v2-options crc32c
	tag=$mode-via-haproxy
	printf '<13>Dec  3 12:00:00 zc zptest: %s\n' "$tag" >"$T/msg.$tag"
	timeout -k 2 20 ip netns exec zc "$ZP_PEER" connect 10.9.0.1 \
	    "$TX_PORT" -b 10.9.0.3 -s "$T/msg.$tag" -t 10 >/dev/null \
	    2>"$T/send.err" || fail "$tag: zp-peer connect: $(cat "$T/send.err")"
	wait_line "$RS_LOG" " $tag\$" 10 >/dev/null ||
		fail "$mode: rsyslog did not get the message through HAProxy"
	grep -q "^10\.9\.0\.3 .*$tag\$" "$RS_LOG" ||
		fail "$mode: through HAProxy, rsyslog attributes it otherwise: $(grep " $tag\$" "$RS_LOG")"
	expect_conn_log "client=10\.9\.0\.3:[0-9]+ peer=127\.0\.0\.1:[0-9]+ .*end=closed" "$mode: through HAProxy"
	for from in 192.0.2.77 2001:db8::77; do
		tag=$mode-hdr-${from//:/_}
		case $from in
		*:*) printf 'PROXY TCP6 %s fd09::1 40000 514\r\n' "$from" ;;
		*) printf 'PROXY TCP4 %s 10.9.0.1 40000 514\r\n' "$from" ;;
		esac >"$T/hdr.$tag"
		printf '<13>Dec  3 12:00:00 zc zptest: %s\n' "$tag" >>"$T/hdr.$tag"
		"$ZP_HDR" 127.0.0.1 "$ZPORT" "$T/hdr.$tag" --timeout 10 \
		    >"$T/hdr.out" 2>&1 || fail "$tag: zp-hdr: $(cat "$T/hdr.out")"
		wait_line "$RS_LOG" " $tag\$" 10 >/dev/null ||
			fail "$mode: rsyslog did not get the message of the header from $from"
		grep -q "^$from .*$tag\$" "$RS_LOG" ||
			fail "$mode: the header's $from is attributed otherwise: $(grep " $tag\$" "$RS_LOG")"
	done
	ok "$mode: --accept-proxy --source client: rsyslog attributes the message through HAProxy to 10.9.0.3, and hand-made headers' clients to 192.0.2.77 and 2001:db8::77"
	stop_zproxy
}

for mode in $MODES; do
	subcase client_balancer "$mode"
done

# ---- c. --source client: iperf3 and byte-exact transfers ----------------

IPORT=5201
zp_bg iperf3-server ip netns exec zs "$IPERF3" -s -B 10.10.0.2 -p "$IPORT"
IPID=$BG_PID
ns_wait_port zs "$IPORT" || fail "iperf3 -s does not listen in zs"

run_iperf3() {
	local dir=${1:-} what bps json=$T/iperf3.json
	what="$mode: --source client: iperf3 -c -t 2 ${dir:-(client sends)}"
	# shellcheck disable=SC2086
	timeout -k 5 30 ip netns exec zc "$IPERF3" -c 10.9.0.1 -p "$ZPORT" \
	    -B 10.9.0.3 -t 2 $dir --json >"$json" 2>"$T/iperf3-client.err" ||
		fail "$what: iperf3 failed: $(grep -m1 '"error"' "$json") $(head -c 300 "$T/iperf3-client.err")"
	bps=$(tr -d ' \n\t' <"$json" |
		sed -n 's/.*"sum_received":{[^}]*"bits_per_second":\([0-9.e+]*\).*/\1/p')
	awk -v b="${bps:-0}" 'BEGIN { exit !(b > 0) }' ||
		fail "$what: throughput '${bps:-none}' bit/s"
	# iperf3 -s resets its data connection at the end: any end will do
	expect_conn_log "client=10\.9\.0\.3:" "$what: a connection"
	expect_conn_log "client=10\.9\.0\.3:" "$what: the other connection"
	ok "$what: $(awk -v b="$bps" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }'), both connections from 10.9.0.3"
}

# transfer_up PORT WHAT: 3 MiB each way between zc (from 10.9.0.3) and a
# zp-peer in zs, through the current zproxy; both checked byte-exact.
transfer() {
	local what=$1 port
	rm -f "$T/got-up" "$T/got-down"
	zp_bg up ip netns exec zs "$ZP_PEER" listen -b 10.10.0.2 -p "$2" \
	    -s "$T/down.bin" -o "$T/got-up" -t 30
	port=$(wait_line "$T/up.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "$what: zp-peer listen did not start: $(head -c 300 "$T/up.err")"
	timeout -k 2 40 ip netns exec zc "$ZP_PEER" connect 10.9.0.1 "$ZPORT" \
	    -b 10.9.0.3 -s "$T/up.bin" -o "$T/got-down" -t 30 \
	    >/dev/null 2>"$T/down.err" ||
		fail "$what: zp-peer connect: $(cat "$T/down.err")"
	peer_wait "$BG_PID" up 30 || fail "$what: zp-peer listen failed: $(cat "$T/up.err")"
	same_file "$T/up.bin" "$T/got-up" "$what: client to server"
	same_file "$T/down.bin" "$T/got-down" "$what: server to client"
	expect_conn_log "client=10\.9\.0\.3:.*end=closed" "$what"
	ok "$what: 3 MiB each way byte-exact"
}

client_data() {
	local mode=$1 tport
	set_mode "$mode"
	start_zproxy -v "${MODE_ARGS[@]}" -l "10.9.0.1:@PORT@" --source client \
	    -u "10.10.0.2:$IPORT"
	run_iperf3
	run_iperf3 -R
	stop_zproxy
	tport=$(ip netns exec zs "$ZP_PEER" port -b 10.10.0.2) || fail "zp-peer port"
	start_zproxy -v "${MODE_ARGS[@]}" -l "10.9.0.1:@PORT@" --source client \
	    -u "10.10.0.2:$tport"
	transfer "$mode: --source client" "$tport"
	stop_zproxy
}

for mode in $MODES; do
	subcase client_data "$mode"
done

# As root, --user nobody keeps CAP_NET_RAW alone, and relays.
client_nobody() {
	local tport want=0000000000002000
	tport=$(ip netns exec zs "$ZP_PEER" port -b 10.10.0.2) || fail "zp-peer port"
	start_zproxy -v -l "10.9.0.1:@PORT@" --source client --user nobody \
	    -u "10.10.0.2:$tport"
	for f in CapPrm CapEff; do
		v=$(sed -n "s/^$f:[[:space:]]*//p" "/proc/$ZPID/status")
		[ "$v" = "$want" ] ||
			fail "--user nobody --source client: $f is $v, want $want (CAP_NET_RAW)"
	done
	[ "$(sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$ZPID/status")" = "$(id -u nobody)" ] ||
		fail "--user nobody: not nobody"
	transfer "--user nobody --source client" "$tport"
	ok "--user nobody --source client: CapPrm and CapEff hold CAP_NET_RAW alone"
	stop_zproxy
}
if [ "$ZP_NETNS_USERNS" = 0 ] && id nobody >/dev/null 2>&1; then
	subcase client_nobody
else
	note "not root: --user nobody with --source client not tried"
fi

# ---- d. the return path broken -------------------------------------------

broken_return() {
	local t0 dt
	set_mode copy
	start_zproxy -v -l "10.9.0.1:@PORT@" --source client --max-fails 1 \
	    --connect-timeout 1 -u "10.10.0.2:$RS_PORT"
	nft delete table inet zproxy || fail "cannot delete the nft table"
	t0=$(now_ms)
	timeout -k 2 20 ip netns exec zc "$ZP_PEER" connect 10.9.0.1 "$ZPORT" \
	    -b 10.9.0.2 --no-shut --expect-close 10 -t 15 >"$T/broken.out" 2>"$T/broken.err"
	expect_conn_log "end=upstream-timeout" "return path broken" 10
	dt=$(( $(now_ms) - t0 ))
	[ "$dt" -lt 3000 ] || fail "return path broken: the pair ended after ${dt} ms"
	grep -q 'closed after' "$T/broken.out" ||
		fail "return path broken: the client was not closed: $(cat "$T/broken.out" "$T/broken.err")"
	! grep -q 'is down' "$ZLOG" ||
		fail "return path broken: the upstream was marked down: $(grep -m1 'is down' "$ZLOG")"
	ok "return path broken: end=upstream-timeout after ${dt} ms, the upstream not marked down"
	out=$(nft -f - 2>&1 <<-'EOF'
	table inet zproxy {
		chain prerouting {
			type filter hook prerouting priority mangle; policy accept;
			meta l4proto tcp socket transparent 1 meta mark set 0x1 accept
		}
	}
	EOF
	) || fail "cannot restore the nft table: $out"
	send_syslog 10.9.0.2 10.9.0.1 restored
	wait_line "$RS_LOG" "^10\.9\.0\.2 .*restored\$" 10 >/dev/null ||
		fail "return path restored: rsyslog did not get the message"
	expect_conn_log "end=closed" "return path restored"
	ok "return path restored: the next connection relays"
	stop_zproxy
}
subcase broken_return

# ---- e. start-up checks --------------------------------------------------

# startup WANT_RC REGEX WHAT ARGS...: zproxy must exit WANT_RC at once with
# one line matching REGEX.
startup() {
	local want=$1 re=$2 what=$3 rc lines
	shift 3
	timeout -k 2 10 "$@" >"$T/start.out" 2>"$T/start.err"
	rc=$?
	[ "$rc" = "$want" ] ||
		fail "$what: exit $rc, want $want: $(head -n 3 "$T/start.err")"
	lines=$(wc -l <"$T/start.err")
	[ "$lines" = 1 ] && grep -Eq -- "$re" "$T/start.err" ||
		fail "$what: want one line matching '$re', got: $(head -n 3 "$T/start.err")"
	ok "$what: exit $rc: $(cat "$T/start.err")"
}

startup_checks() {
	local port
	port=$(free_port) || fail "zp-peer port"
	startup 64 "invalid source '10\.10\.0'" "--source 10.10.0" \
	    "$ZPROXY" -l "127.0.0.1:$port" -u 10.10.0.2:1 --source 10.10.0
	startup 64 "invalid source '10\.10\.0\.3:80'" "--source with a port" \
	    "$ZPROXY" -l "127.0.0.1:$port" -u 10.10.0.2:1 --source 10.10.0.3:80
	startup 71 "--source 10\.10\.0\.99: cannot bind to it: .*no such address" \
	    "--source 10.10.0.99 (not this host's)" \
	    "$ZPROXY" -l "127.0.0.1:$port" -u 10.10.0.2:1 --source 10.10.0.99
	startup 71 "--source fd10::99: cannot bind to it" \
	    "--source fd10::99 (not this host's)" \
	    "$ZPROXY" -l "127.0.0.1:$port" -u 10.10.0.2:1 --source fd10::99
	startup 77 "--source client needs CAP_NET_ADMIN or CAP_NET_RAW \(IP_TRANSPARENT: Operation not permitted\)" \
	    "--source client without the capabilities" \
	    setpriv --inh-caps=-all --bounding-set=-net_admin,-net_raw \
	    "$ZPROXY" -l "127.0.0.1:$port" -u 10.10.0.2:1 --source client
	! listening "$port" || fail "a failed start-up left something listening"
}
subcase startup_checks

zp_done
