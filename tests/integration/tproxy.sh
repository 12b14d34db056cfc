#!/bin/bash
# tproxy.sh - zproxy --tproxy behind an nft tproxy rule, on a private
# three-host network (netns.sh: client zc, this shell the proxy, server
# zs), as docs/TRANSPARENT.md's recipe has it:
#   a. a client in zc connects to 198.51.100.9:514 (2001:db8::9 for IPv6),
#      an address nobody owns; the proxy host's prerouting rule diverts it
#      to zproxy, which relays it to its -u upstream in zs: an echo of
#      256 KiB, byte-exact both ways; the conn= line names
#      dst=198.51.100.9:514, in text and in JSON;
#   b. --tproxy -u original: the client connects to the server's own
#      10.10.0.2:514 (fd10::2); the rule diverts it and zproxy connects to
#      that original destination: byte-exact, upstream and dst named,
#      upstream="original" in /metrics;
#   c. start-up: --tproxy without CAP_NET_ADMIN and CAP_NET_RAW (setpriv
#      drops them) exits 77 with the line that names them.
# Both families, both modes (a and b).
. "${ZP_TESTLIB%/*}/netns.sh" || exit 1
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

zp_netns_topology
zp_netns_local_routes

PAYLOAD_SIZE=262144
mkdata pay $PAYLOAD_SIZE

# ns_peer_listen NS NAME ARGS...: zp-peer listen in namespace NS; sets
# PEER_PID and PEER_PORT (`ip netns exec` execs: the PID is the peer's).
ns_peer_listen() {
	local ns=$1 name=$2; shift 2
	zp_bg "$name" ip netns exec "$ns" "$ZP_PEER" listen "$@"
	PEER_PID=$BG_PID
	PEER_PORT=$(wait_line "$T/$name.out" '^[0-9]+$' 10 "$PEER_PID") ||
		fail "zp-peer listen $* in $ns did not start: $(head -c 300 "$T/$name.err")"
}

# tproxy_rules PORT V4DST V6DST: divert TCP to V4DST:514 and [V6DST]:514
# arriving at the proxy host to zproxy's PORT, marked for the local route.
tproxy_rules() {
	local out
	out=$(nft -f - 2>&1 <<NFT
table inet zp_tproxy
delete table inet zp_tproxy
table inet zp_tproxy {
	chain pre {
		type filter hook prerouting priority mangle; policy accept;
		meta l4proto tcp ip daddr $2 tcp dport 514 tproxy ip to :$1 meta mark set 1 accept
		meta l4proto tcp ip6 daddr $3 tcp dport 514 tproxy ip6 to :$1 meta mark set 1 accept
	}
}
NFT
) || fail "nft tproxy rules: $out"
}

# echo_through CLIENT_SRC DST WHAT: from zc, send the payload to DST:514
# and read the echo back; both must be byte-exact.
echo_through() {
	rm -f "$T/back"
	ip netns exec zc "$ZP_PEER" connect "$2" 514 -b "$1" --send "$T/pay" \
	    --recv "$T/back" -t 20 >"$T/client.out" 2>"$T/client.err" ||
		fail "$3: client: $(head -c 300 "$T/client.err")"
	same_file "$T/pay" "$T/back" "$3: echo"
}

# a. a fixed upstream, any destination diverted.
fixed() {
	local mode=$1 fam=$2 fmt=$3 src dst up what c d upa
	set_mode "$mode"
	if [ "$fam" = 4 ]; then
		src=10.9.0.2 dst=198.51.100.9 up=10.10.0.2
	else
		src=fd09::2 dst=2001:db8::9 up=fd10::2
	fi
	[ "$fam" = 4 ] && c="${src//./\\.}" || c="\\[$src\\]"
	what="$mode IPv$fam $fmt: --tproxy to $dst:514"
	ns_peer_listen zs server -b "$up" -e -n 1 -t 20
	[ "$fam" = 4 ] && upa="$up:$PEER_PORT" || upa="[$up]:$PEER_PORT"
	start_zproxy -v "${MODE_ARGS[@]}" --log-format "$fmt" --tproxy \
	    -l ":@PORT@" -u "$upa"
	tproxy_rules "$ZPORT" 198.51.100.9 2001:db8::9
	echo_through "$src" "$dst" "$what"
	peer_wait "$PEER_PID" server 10 || fail "$what: server: $(head -c 300 "$T/server.err")"
	[ "$fam" = 4 ] && d="$dst:514" || d="\\[$dst\\]:514"
	if [ "$fmt" = text ]; then
		expect_conn_log "client=$c:[0-9]+ upstream=[^ ]+ dst=${d//./\\.} mode=$MODE_LOGGED up=$PAYLOAD_SIZE down=$PAYLOAD_SIZE .*end=closed" "$what"
	else
		grep -F "\"dst\":\"${d//\\/}\"" "$ZLOG" | grep -q "\"end\":\"closed\"" ||
			fail "$what: no JSON conn line with \"dst\":\"${d//\\/}\": $(grep -m1 '"conn"' "$ZLOG")"
	fi
	stop_zproxy
	ok "$what: relayed to $upa byte-exact, the log names the destination"
}

# b. -u original: the destination the client meant, really listening.
original() {
	local mode=$1 fam=$2 src dst what d
	set_mode "$mode"
	if [ "$fam" = 4 ]; then
		src=10.9.0.2 dst=10.10.0.2 d="10\\.10\\.0\\.2:514"
	else
		src=fd09::2 dst=fd10::2 d="\\[fd10::2\\]:514"
	fi
	what="$mode IPv$fam: --tproxy -u original to $dst:514"
	ns_peer_listen zs server -b "$dst" -p 514 -e -n 1 -t 20
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" --tproxy -l ":@PORT@" -u original \
	    --stats "127.0.0.1:$SPORT"
	wait_line "$ZLOG" '-u original without --allow-dst: clients may reach any destination' 5 "$ZPID" >/dev/null ||
		fail "$what: no start-up warning about --allow-dst: $(head -n 5 "$ZLOG")"
	tproxy_rules "$ZPORT" 10.10.0.2 fd10::2
	echo_through "$src" "$dst" "$what"
	peer_wait "$PEER_PID" server 10 || fail "$what: server: $(head -c 300 "$T/server.err")"
	expect_conn_log "client=[^ ]+ upstream=$d dst=$d mode=$MODE_LOGGED up=$PAYLOAD_SIZE down=$PAYLOAD_SIZE .*end=closed" "$what"
	stats_scrape
	grep -q '^zproxy_upstream_connections_total{upstream="original"} 1$' "$T/metrics" ||
		fail "$what: no upstream=\"original\" series counting 1: $(grep -m3 upstream_connections_total "$T/metrics")"
	stop_zproxy
	ok "$what: connected to the original destination, byte-exact"
}

# c. no capability: exit 77 and one line naming it.
nocap() {
	local port rc
	port=$(free_port) || fail "zp-peer port failed"
	setpriv --inh-caps=-all --bounding-set=-net_admin,-net_raw \
	    "$ZPROXY" --tproxy -l "127.0.0.1:$port" -u 127.0.0.1:9 \
	    >"$T/nocap.out" 2>"$T/nocap.err"
	rc=$?
	[ "$rc" = 77 ] || fail "--tproxy without the capability: exit $rc, want 77: $(head -n 3 "$T/nocap.err")"
	grep -q -- '--tproxy needs CAP_NET_ADMIN or CAP_NET_RAW (IP_TRANSPARENT: Operation not permitted)' "$T/nocap.err" ||
		fail "--tproxy without the capability: no line naming it: $(head -n 3 "$T/nocap.err")"
	ok "--tproxy without CAP_NET_ADMIN/CAP_NET_RAW: exit 77, the line names them"
}

subcase nocap
for mode in $MODES; do
	for fam in 4 6; do
		subcase fixed "$mode" "$fam" text
		subcase original "$mode" "$fam"
	done
done
subcase fixed copy 4 json
subcase fixed splice 6 json

zp_done
