#!/bin/bash
# redirect.sh - zproxy -u original behind nft `redirect` rules (NAT), on
# a private three-host network (netns.sh), as docs/TRANSPARENT.md's recipe has it:
#   a. OUTPUT (nat, hook output): a client on the proxy host itself,
#      from 10.9.0.1 (fd09::1), connects to the server's 10.10.0.2:514
#      (fd10::2); the rule redirects it to zproxy, which recovers the
#      destination with SO_ORIGINAL_DST (IP6T_SO_ORIGINAL_DST) and
#      connects there (from 10.10.0.1, which the rule does not match):
#      an echo of 256 KiB byte-exact both ways, dst= and upstream= the
#      server's address, with --allow-dst holding it;
#   b. PREROUTING (nat, hook prerouting): the same from a client in zc;
#   c. refused, end=bad-destination, zproxy_bad_destinations_total up,
#      the client reset, nothing connected upstream: a client that
#      connects to zproxy's own address (no redirect: a loop), and one
#      redirected to a destination --allow-dst does not hold;
#   d. start-up: a bad --allow-dst, and -u original with another -u,
#      exit 64 with one line.
# Both families; a and b in both modes.
. "${ZP_TESTLIB%/*}/netns.sh" || exit 1
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

zp_netns_topology

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

# redirect_rules PORT: TCP to the server's port 514 goes to zproxy's PORT:
# from the proxy host's 10.9.0.1/fd09::1 (output), or arriving on zp0
# (prerouting). zproxy's own connects leave from 10.10.0.1/fd10::1.
redirect_rules() {
	local out
	out=$(nft -f - 2>&1 <<NFT
table inet zp_nat
delete table inet zp_nat
table inet zp_nat {
	chain out {
		type nat hook output priority -100; policy accept;
		ip saddr 10.9.0.1 ip daddr 10.10.0.2 tcp dport 514 redirect to :$1
		ip6 saddr fd09::1 ip6 daddr fd10::2 tcp dport 514 redirect to :$1
	}
	chain pre {
		type nat hook prerouting priority dstnat; policy accept;
		iifname "zp0" ip daddr 10.10.0.2 tcp dport 514 redirect to :$1
		iifname "zp0" ip6 daddr fd10::2 tcp dport 514 redirect to :$1
	}
}
NFT
) || fail "nft redirect rules: $out"
}

# start_original ARGS...: zproxy -u original on :PORT with --stats, rules.
start_original() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v -l ":@PORT@" -u original --stats "127.0.0.1:$SPORT" "$@"
	redirect_rules "$ZPORT"
}

# a, b. redirected, the original destination recovered.
redir() {
	local mode=$1 fam=$2 where=$3 src dst d what ns=()
	set_mode "$mode"
	if [ "$fam" = 4 ]; then
		dst=10.10.0.2 d="10\\.10\\.0\\.2:514"
		[ "$where" = output ] && src=10.9.0.1 || src=10.9.0.2
	else
		dst=fd10::2 d="\\[fd10::2\\]:514"
		[ "$where" = output ] && src=fd09::1 || src=fd09::2
	fi
	[ "$where" = prerouting ] && ns=(ip netns exec zc)
	what="$mode IPv$fam $where: redirect to -u original, $dst:514"
	ns_peer_listen zs server -b "$dst" -p 514 -e -n 1 -t 20
	start_original "${MODE_ARGS[@]}" --allow-dst 10.10.0.0/24:514 \
	    --allow-dst '[fd10::/64]:514'
	rm -f "$T/back"
	"${ns[@]}" "$ZP_PEER" connect "$dst" 514 -b "$src" --send "$T/pay" \
	    --recv "$T/back" -t 20 >"$T/client.out" 2>"$T/client.err" ||
		fail "$what: client: $(head -c 300 "$T/client.err")"
	same_file "$T/pay" "$T/back" "$what: echo"
	peer_wait "$PEER_PID" server 10 || fail "$what: server: $(head -c 300 "$T/server.err")"
	expect_conn_log "upstream=$d dst=$d mode=$MODE_LOGGED up=$PAYLOAD_SIZE down=$PAYLOAD_SIZE .*end=closed" "$what"
	stats_scrape
	stats_is zproxy_bad_destinations_total 0 "$what"
	stop_zproxy
	ok "$what: the original destination recovered, byte-exact"
}

# expect_refused WHAT CLIENT...: CLIENT must be reset at once, the conn
# line say end=bad-destination with upstream=none.
expect_refused() {
	local what=$1 out; shift
	out=$("$@" --expect-close 5 -t 10 2>"$T/client.err") ||
		fail "$what: client: $(head -c 300 "$T/client.err")"
	echo "$out" | grep -q '(reset)' || fail "$what: the client was not reset: $out"
	expect_conn_log "upstream=none dst=[^ ]+ .*end=bad-destination" "$what"
}

# c. a loop and a destination outside --allow-dst.
refused() {
	local fam=$1 own dst src what n
	if [ "$fam" = 4 ]; then
		own=10.9.0.1 dst=10.10.0.2 src=10.9.0.2
	else
		own=fd09::1 dst=fd10::2 src=fd09::2
	fi
	what="IPv$fam"
	ns_peer_listen zs server -b "$dst" -p 514 -n 1 -t 20
	start_original --allow-dst 10.10.0.2:515 --allow-dst '[fd10::2]:515'
	# zproxy's own address, no redirect: SO_ORIGINAL_DST says ENOENT
	expect_refused "$what: a client of zproxy's own $own:$ZPORT (a loop)" \
	    ip netns exec zc "$ZP_PEER" connect "$own" "$ZPORT" -b "$src"
	echo "$LAST_CONN_LOG" | grep -q "dst=[^ ]*:$ZPORT " ||
		fail "$what: the loop's line does not name zproxy's port: $LAST_CONN_LOG"
	# redirected to port 514, which --allow-dst does not hold
	expect_refused "$what: redirected to $dst:514, outside --allow-dst" \
	    ip netns exec zc "$ZP_PEER" connect "$dst" 514 -b "$src"
	stats_scrape
	stats_is zproxy_bad_destinations_total 2 "$what"
	n=$(awk '$1 == "zproxy_upstream_connections_total{upstream=\"original\"}" { print $2 }' "$T/metrics")
	[ "$n" = 0 ] || fail "$what: upstream connections $n, want 0"
	alive "$PEER_PID" || fail "$what: the server saw a connection"
	grep -q 'accepted\|connection' "$T/server.err" && note "server: $(cat "$T/server.err")"
	stop_zproxy
	ok "$what: a loop and a destination outside --allow-dst: reset, end=bad-destination, counted, nothing connected"
}

# d. the command line.
bad_cli() {
	local rc
	"$ZPROXY" -l :1 -u original --allow-dst 'fd00::/8:514' 2>"$T/cli.err"
	rc=$?
	[ "$rc" = 64 ] || fail "bad --allow-dst: exit $rc, want 64"
	grep -q -- "--allow-dst: invalid" "$T/cli.err" || fail "bad --allow-dst: $(cat "$T/cli.err")"
	[ "$(wc -l <"$T/cli.err")" = 1 ] || fail "bad --allow-dst: more than one line: $(cat "$T/cli.err")"
	"$ZPROXY" -l :1 -u original -u 127.0.0.1:9 2>"$T/cli.err"
	rc=$?
	[ "$rc" = 64 ] || fail "-u original with another -u: exit $rc, want 64"
	grep -q -- "-u original must be the only --upstream" "$T/cli.err" ||
		fail "-u original with another -u: $(cat "$T/cli.err")"
	"$ZPROXY" -l :1 -u 127.0.0.1:9 --allow-dst 10.0.0.0/8 2>"$T/cli.err"
	rc=$?
	[ "$rc" = 64 ] || fail "--allow-dst without -u original: exit $rc, want 64"
	"$ZPROXY" -l :1 -u original --accept-proxy 2>"$T/cli.err"
	rc=$?
	[ "$rc" = 64 ] || fail "-u original with --accept-proxy: exit $rc, want 64"
	grep -q -- "-u original does not apply to --accept-proxy" "$T/cli.err" ||
		fail "-u original with --accept-proxy: $(cat "$T/cli.err")"
	ok "bad --allow-dst, -u original mixed or with --accept-proxy, --allow-dst alone: exit 64, one line"
}

subcase bad_cli
for mode in $MODES; do
	for fam in 4 6; do
		subcase redir "$mode" "$fam" output
		subcase redir "$mode" "$fam" prerouting
	done
done
subcase refused 4
subcase refused 6

zp_done
