#!/bin/bash
# acl.sh - who may connect: --allow, --deny and --max-conns-per-source on
# a dual-stack listener (-l :PORT), with real clients from 127.0.0.1 (an
# IPv4 client: v4-mapped on that socket), 127.0.0.2, 127.0.0.3, 127.0.0.5
# (zp-peer -b binds the source) and ::1.
#   a. --allow 127.0.0.0/30 --allow ::1 --deny 127.0.0.2: 127.0.0.2 (in
#      the allow list too: deny is checked first) and 127.0.0.5 (in no
#      allow rule) are reset right after accept, logged end=denied with
#      upstream=none; then 127.0.0.1 (a 300 KiB file, sha256 compared) and
#      ::1 (256 KiB, verified) are relayed byte-exact. The upstream,
#      which serves exactly 2 connections, saw those 2 and no other: it
#      exits having served 2, both allowed clients got their bytes, and
#      /metrics says upstream connections 2, zproxy_connections_total 2,
#      zproxy_clients_denied_total 2, source-limited 0;
#   b. rules written the other way: --allow ::/0 --allow ::ffff:127.0.0.3
#      --deny ::ffff:127.0.0.2 (v4-mapped forms, shown at start-up as the
#      IPv4 rules they are): ::1 and 127.0.0.3 relayed, 127.0.0.1 denied
#      (::/0 is every IPv6 client, not the IPv4 ones) and 127.0.0.2 denied;
#   c. --max-conns-per-source 2: 2 held pairs from 127.0.0.1 and 2 from
#      ::1, a third from each is reset at accept (end=source-limit) while
#      127.0.0.2 is still relayed byte-exact; once the held 127.0.0.1
#      pairs close, 127.0.0.1 is served again; /metrics counts 2
#      source-limited, 0 denied, 6 upstream connections;
#   d. bad rules on the command line: exit 64, one line naming them;
#   e. 100 clients from a denied source at once, at -v: every one reset
#      and counted, at most 40 end=denied lines (the 20-a-second limit,
#      over at most two windows), and lines + "N log lines suppressed"
#      add up to 100.
# a and c in both modes. The ::1 parts need the IPv6 loopback (said so).
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

if have_ipv6; then V6=1; else V6=0; note "no IPv6 loopback: the ::1 clients are left out"; fi

# start ARGS...: zproxy on a dual-stack :PORT with --stats on $SPORT.
start() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v -l ":@PORT@" --stats "127.0.0.1:$SPORT" "$@"
	grep -q "listening on \[::\]:$ZPORT" "$ZLOG" || [ "$V6" = 0 ] ||
		fail "not listening dual-stack: $(grep 'listening on' "$ZLOG")"
}

# refused NAME SRC WHY WHAT: a client from SRC (to 127.0.0.1, or ::1 when
# SRC is ::1) is reset at once; the next conn= line says end=WHY.
refused() {
	local name=$1 src=$2 why=$3 what=$4 dst=127.0.0.1 esc
	[ "$src" = ::1 ] && dst=::1
	peer "$name" connect "$dst" "$ZPORT" -b "$src" --expect-close 5 -t 10 ||
		fail "$what: client from $src: $(cat "$T/$name.err")"
	grep -q '(reset)' "$T/$name.out" ||
		fail "$what: client from $src was not reset: $(cat "$T/$name.out")"
	esc=${src//./\\.}
	[ "$src" = ::1 ] && esc='\[::1\]'
	expect_conn_log "client=$esc:[0-9]+ upstream=none mode=- up=0 down=0 .*end=$why\$" \
	    "$what: client from $src"
}

# a. allow, deny, deny first, both families
rules() {
	local what="$mode: --allow 127.0.0.0/30 --allow ::1 --deny 127.0.0.2" upid uport
	local n=1
	[ "$V6" = 1 ] && n=2
	peer_listen a-up -n "$n" -e -t 30
	upid=$PEER_PID; uport=$PEER_PORT
	set_mode "$mode"
	start "${MODE_ARGS[@]}" --allow 127.0.0.0/30 --allow ::1 \
	    --deny 127.0.0.2 -u "127.0.0.1:$uport"
	grep -q 'who may connect: --deny 127.0.0.2/32 --allow 127.0.0.0/30,::1/128$' "$ZLOG" ||
		fail "$what: start-up line: $(grep 'who may connect' "$ZLOG")"

	refused a-deny 127.0.0.2 denied "$what: denied though allowed"
	refused a-other 127.0.0.5 denied "$what: in no allow rule"
	ok "$what: 127.0.0.2 (denied, though in an allow rule) and 127.0.0.5 (in no allow rule) reset at accept, logged end=denied upstream=none"

	mkdata a.data 300K
	peer a-v4 connect 127.0.0.1 "$ZPORT" -s "$T/a.data" -o "$T/a.back" -t 20 ||
		fail "$what: 127.0.0.1: $(cat "$T/a-v4.err")"
	same_file "$T/a.data" "$T/a.back" "$what: 127.0.0.1 through the echo"
	expect_conn_log "client=127\.0\.0\.1:[0-9]+ .*up=307200 down=307200 .*end=closed" \
	    "$what: 127.0.0.1"
	if [ "$V6" = 1 ]; then
		peer a-v6 connect ::1 "$ZPORT" -g 256K -x 256K -t 20 ||
			fail "$what: ::1: $(cat "$T/a-v6.err")"
		expect_conn_log "client=\[::1\]:[0-9]+ .*up=262144 down=262144 .*end=closed" \
		    "$what: ::1"
	fi
	peer_wait "$upid" a-up 10 || fail "$what: upstream: $(cat "$T/a-up.err")"
	grep -q "zp-peer: $n connection" "$T/a-up.err" ||
		fail "$what: the upstream did not serve exactly $n: $(cat "$T/a-up.err")"
	stats_scrape
	stats_is "zproxy_upstream_connections_total{upstream=\"127.0.0.1:$uport\"}" "$n" "$what"
	stats_is "zproxy_upstream_connections_failed_total{upstream=\"127.0.0.1:$uport\"}" 0 "$what"
	stats_is zproxy_connections_total "$n" "$what"
	stats_is zproxy_clients_denied_total 2 "$what"
	stats_is zproxy_clients_source_limited_total 0 "$what"
	stop_zproxy
	grep -q 'clients denied=2 source-limited=0' "$ZLOG" ||
		fail "$what: totals line: $(grep 'stopping:' "$ZLOG")"
	ok "$what: 127.0.0.1 (v4-mapped) relayed 300 KiB sha256-equal$([ "$V6" = 1 ] && echo ", ::1 256 KiB verified"); the upstream served exactly $n, metrics: $n upstream connections, 2 denied"
}

# b. v4-mapped and IPv6 rule forms
forms() {
	local what="--allow ::/0 --allow ::ffff:127.0.0.3 --deny ::ffff:127.0.0.2" upid uport
	local n=1
	[ "$V6" = 1 ] && n=2
	peer_listen b-up -n "$n" -e -t 30
	upid=$PEER_PID; uport=$PEER_PORT
	start --allow ::/0 --allow ::ffff:127.0.0.3 --deny ::ffff:127.0.0.2 \
	    -u "127.0.0.1:$uport"
	grep -q 'who may connect: --deny 127.0.0.2/32 --allow ::/0,127.0.0.3/32$' "$ZLOG" ||
		fail "$what: start-up line: $(grep 'who may connect' "$ZLOG")"
	refused b-v4 127.0.0.1 denied "$what: ::/0 is not IPv4"
	refused b-deny 127.0.0.2 denied "$what: v4-mapped deny"
	peer b-three connect 127.0.0.1 "$ZPORT" -b 127.0.0.3 -g 64K -x 64K -t 20 ||
		fail "$what: 127.0.0.3: $(cat "$T/b-three.err")"
	expect_conn_log "client=127\.0\.0\.3:[0-9]+ .*up=65536 down=65536 .*end=closed" \
	    "$what: 127.0.0.3"
	if [ "$V6" = 1 ]; then
		peer b-v6 connect ::1 "$ZPORT" -g 64K -x 64K -t 20 ||
			fail "$what: ::1: $(cat "$T/b-v6.err")"
		expect_conn_log "client=\[::1\]:[0-9]+ .*up=65536 down=65536 .*end=closed" \
		    "$what: ::1"
	fi
	peer_wait "$upid" b-up 10 || fail "$what: upstream: $(cat "$T/b-up.err")"
	stats_scrape
	stats_is zproxy_connections_total "$n" "$what"
	stats_is zproxy_clients_denied_total 2 "$what"
	stop_zproxy
	ok "$what: shown as the IPv4 rules they are; 127.0.0.3$([ "$V6" = 1 ] && echo " and ::1") relayed, 127.0.0.1 (::/0 holds no IPv4 client) and 127.0.0.2 denied"
}

# c. --max-conns-per-source 2
per_source() {
	local what="$mode: --max-conns-per-source 2" upid uport h4 h6 n=4
	[ "$V6" = 1 ] && n=6
	peer_listen c-up -n 0 -e --allow-reset -t 60
	upid=$PEER_PID; uport=$PEER_PORT
	set_mode "$mode"
	start "${MODE_ARGS[@]}" --max-conns-per-source 2 -u "127.0.0.1:$uport"

	zp_bg c-hold4 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 2 --hold -t 30
	h4=$BG_PID
	wait_line "$T/c-hold4.out" '^connected 2$' 5 "$h4" >/dev/null ||
		fail "$what: 2 held from 127.0.0.1: $(cat "$T/c-hold4.err")"
	if [ "$V6" = 1 ]; then
		zp_bg c-hold6 "$ZP_PEER" connect ::1 "$ZPORT" -n 2 --hold -t 30
		h6=$BG_PID
		wait_line "$T/c-hold6.out" '^connected 2$' 5 "$h6" >/dev/null ||
			fail "$what: 2 held from ::1: $(cat "$T/c-hold6.err")"
	fi
	# the pairs are up once the upstream has them
	wait_estab "$uport" $((n - 2)) 5 ||
		fail "$what: the upstream has $(estab "$uport") connections, expected $((n - 2))"

	refused c-third4 127.0.0.1 source-limit "$what: a third from 127.0.0.1"
	[ "$V6" = 1 ] && refused c-third6 ::1 source-limit "$what: a third from ::1"
	peer c-other connect 127.0.0.1 "$ZPORT" -b 127.0.0.2 -g 128K -x 128K -t 20 ||
		fail "$what: 127.0.0.2 meanwhile: $(cat "$T/c-other.err")"
	expect_conn_log "client=127\.0\.0\.2:[0-9]+ .*up=131072 down=131072 .*end=closed" \
	    "$what: 127.0.0.2"
	ok "$what: 2 held from 127.0.0.1$([ "$V6" = 1 ] && echo " and 2 from ::1"), a third from each reset at accept (end=source-limit), 127.0.0.2 relayed 128 KiB verified meanwhile"

	zp_stop "$h4"
	zp_wait_exit "$h4" 5 >/dev/null
	expect_conn_log "client=127\.0\.0\.1:" "$what: held pair 1 closed"
	expect_conn_log "client=127\.0\.0\.1:" "$what: held pair 2 closed"
	peer c-again connect 127.0.0.1 "$ZPORT" -g 64K -x 64K -t 20 ||
		fail "$what: 127.0.0.1 after its pairs closed: $(cat "$T/c-again.err")"
	expect_conn_log "client=127\.0\.0\.1:[0-9]+ .*up=65536 down=65536 .*end=closed" \
	    "$what: 127.0.0.1 again"
	stats_scrape
	stats_is zproxy_clients_source_limited_total $((n / 2 - 1)) "$what"
	stats_is zproxy_clients_denied_total 0 "$what"
	stats_is "zproxy_upstream_connections_total{upstream=\"127.0.0.1:$uport\"}" "$n" "$what"
	stats_is zproxy_connections_open $((n - 4)) "$what"
	stop_zproxy
	ok "$what: once its 2 pairs closed, 127.0.0.1 was served again; metrics: $((n / 2 - 1)) source-limited, 0 denied, $n upstream connections"
}

# e. a flood of refused clients is logged under the rate limit
flood() {
	local what="100 denied clients at -v" lines supp
	start --deny 127.0.0.2 -u "127.0.0.1:$(free_port)"
	peer e-flood connect 127.0.0.1 "$ZPORT" -b 127.0.0.2 -n 100 \
	    --expect-close 10 -t 20 || fail "$what: $(cat "$T/e-flood.err")"
	[ "$(grep -c '(reset)' "$T/e-flood.out")" -eq 100 ] ||
		fail "$what: not all reset: $(sort "$T/e-flood.out" | uniq -c | head -n 3)"
	stats_scrape
	stats_is zproxy_clients_denied_total 100 "$what"
	stop_zproxy
	lines=$(grep -c 'end=denied' "$ZLOG")
	supp=$(sed -n 's/.* \([0-9]*\) log lines suppressed$/\1/p' "$ZLOG" |
	    awk '{ n += $1 } END { print n + 0 }')
	[ "$lines" -le 40 ] || fail "$what: $lines end=denied lines: not rate-limited"
	[ $((lines + supp)) -eq 100 ] ||
		fail "$what: $lines lines + $supp suppressed, expected 100 in all"
	ok "$what: all reset and counted; $lines logged, $supp reported as suppressed"
}

# d. bad rules
bad() {
	local want=$1 rc; shift
	timeout -k 2 10 "$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:1 "$@" \
	    >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	[ "$rc" = 64 ] || fail "zproxy $*: exit $rc, expected 64: $(head -c 300 "$T/bad.err")"
	[ "$(wc -l <"$T/bad.err")" -eq 1 ] ||
		fail "zproxy $*: not one line: $(head -n 5 "$T/bad.err" | tr '\n' '|')"
	grep -qF -- "$want" "$T/bad.err" ||
		fail "zproxy $*: '$want' not in: $(cat "$T/bad.err")"
	ok "$(echo "$*" | cut -c1-50) -> 64: $(cat "$T/bad.err")"
}
bad_rules() {
	local i args=()
	bad "--allow: invalid CIDR '10.0.0.1/8': host bits set after /8; the network is 10.0.0.0/8" --allow 10.0.0.1/8
	bad "--deny: invalid CIDR '10.0.0.0/33': the prefix length must be 0-32 for IPv4" --deny 10.0.0.0/33
	bad "--deny: invalid CIDR '::/129'" --deny ::/129
	bad "--allow: invalid CIDR 'localhost': expected ADDR or ADDR/LEN" --allow localhost
	bad "--allow: invalid CIDR '2001:db8::1/32': host bits set" --allow 2001:db8::1/32
	bad "invalid max-conns-per-source '0'" --max-conns-per-source 0
	bad "invalid max-conns-per-source 'x'" --max-conns-per-source x
	for i in $(seq 0 256); do args+=(--deny "10.$((i / 256)).$((i % 256)).0/24"); done
	bad "too many --deny: at most 256" "${args[@]}"
}

subcase bad_rules
for mode in $MODES; do
	subcase rules
	subcase per_source
done
subcase forms
subcase flood

zp_done
