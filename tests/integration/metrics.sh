#!/bin/bash
# metrics.sh - the --stats endpoint of a running zproxy: GET /metrics
# answers 200 with the Prometheus content type and a text that `promtool
# check metrics` accepts without a single lint problem; the numbers are the
# traffic the test pushed through (connections, bytes each way overall and
# per upstream, exactly), open pairs show in the pairs gauge by mode and
# their bytes count before they close; an upstream that refuses goes to
# upstream_up 0 after --max-fails 1 while clients are served by the other;
# the idle-timeout and failed-connection counters move; other paths are
# 404, other methods 405; a stats port in use makes zproxy exit 71.
# Pipes follow bulk: short pairs hold none, --splice-min 0 pairs hold two,
# a bulk transfer is spliced but for its head (zproxy_spliced_bytes_total).
# Runs the traffic in splice and copy mode.
#
# Needs promtool (Debian package "prometheus"): without it the test fails.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

CT='text/plain; version=0.0.4; charset=utf-8'
NCONN=4			# clients in the batch, after the first one
UP=100000		# bytes each client sends
DOWN=50000		# bytes the upstream sends each client
if command -v promtool >/dev/null; then PT="promtool clean"; else PT="promtool MISSING"; fi

# fetch PATH OUT [METHOD]: one HTTP request to the stats port ($SPORT);
# the body goes to OUT, the headers to OUT.hdr, the status to FETCH_STATUS.
# curl when there is one (ZP_NO_CURL=1 forces the fallback), else bash's
# /dev/tcp, bounded by timeout(1) either way.
fetch() {
	local path=$1 out=$2 method=${3:-GET}
	FETCH_STATUS=
	if [ -z "${ZP_NO_CURL:-}" ] && command -v curl >/dev/null; then
		FETCH_STATUS=$(curl -sS -m 5 -X "$method" -o "$out" -D "$out.hdr" \
		    -w '%{http_code}' "http://127.0.0.1:$SPORT$path" 2>"$out.err")
	else
		timeout -k 2 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
			printf "%s %s HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n" "$2" "$1" >&3 &&
			cat <&3' "$SPORT" "$path" "$method" >"$out.raw" 2>"$out.err"
		sed -n '1,/^\r$/p' "$out.raw" >"$out.hdr"
		sed '1,/^\r$/d' "$out.raw" >"$out"
		FETCH_STATUS=$(sed -n '1s/^HTTP\/1\.[01] \([0-9]*\).*/\1/p' "$out.hdr")
	fi
	[ -n "$FETCH_STATUS" ] || FETCH_STATUS=000
}

# scrape: GET /metrics into $T/metrics, asserting 200 and the content type.
scrape() {
	fetch /metrics "$T/metrics"
	[ "$FETCH_STATUS" = 200 ] ||
		fail "GET /metrics: status $FETCH_STATUS $(cat "$T/metrics.err" 2>/dev/null)"
	grep -qiF "Content-Type: $CT" "$T/metrics.hdr" ||
		fail "GET /metrics: wrong content type: $(grep -i content-type "$T/metrics.hdr")"
}
SCRAPE_FN=scrape	# wait_metric (lib.sh) checks these too

# start_stats ARGS...: start_zproxy with --stats on a free port ($SPORT).
start_stats() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy --stats "127.0.0.1:$SPORT" "$@"
	grep -q "serving metrics on http://127.0.0.1:$SPORT/metrics" "$ZLOG" ||
		fail "no 'serving metrics on' line: $(head -n 3 "$ZLOG")"
}

# The traffic case, in $mode: a refusing upstream first, a zp-peer second
# that sends each client $DOWN bytes and closes after the client's FIN (so
# that a --hold client keeps its pair open).
traffic() {
	local what="$mode" refused good hid total
	refused=$(free_port) || fail "zp-peer port failed"
	peer_listen up -n 0 -t 0 -g "$DOWN" --no-shut
	good="127.0.0.1:$PEER_PORT"
	start_stats -m "$mode" --max-conns 100 --max-fails 1 --fail-timeout 60 \
	    -u "127.0.0.1:$refused" -u "$good"
	local R="upstream=\"127.0.0.1:$refused\"" G="upstream=\"$good\""

	scrape
	promcheck "$what: at start"
	expect zproxy_connections_total == 0 "$what: at start"
	expect "zproxy_upstream_up{$R}" == 1 "$what: at start"
	expect zproxy_max_connections == 100 "$what: --max-conns 100"
	expect zproxy_start_time_seconds ">=" "$(( $(date +%s) - 600 ))" "$what: start time"
	expect zproxy_start_time_seconds "<=" "$(( $(date +%s) + 1 ))" "$what: start time"
	ok "$what: /metrics at start: 200, $CT, $PT"

	# One client first: round robin sends it to the refusing upstream,
	# which --max-fails 1 marks down, and on to the good one.
	peer first connect 127.0.0.1 "$ZPORT" -g "$UP" -t 30 ||
		fail "$what: first client: $(cat "$T/first.err")"
	peer batch connect 127.0.0.1 "$ZPORT" -n "$NCONN" -g "$UP" -t 30 ||
		fail "$what: batch: $(cat "$T/batch.err")"
	total=$((NCONN + 1))
	wait_metric zproxy_connections_open == 0 10 "$what: after the clients"
	promcheck "$what: after traffic"
	expect zproxy_connections_total == "$total" "$what"
	expect zproxy_connections_failed_total == 0 "$what: every client served"
	expect 'zproxy_bytes_total{direction="up"}' == $((total * UP)) "$what: bytes up"
	expect 'zproxy_bytes_total{direction="down"}' == $((total * DOWN)) "$what: bytes down"
	expect "zproxy_upstream_bytes_total{$G,direction=\"up\"}" == $((total * UP)) "$what"
	expect "zproxy_upstream_bytes_total{$G,direction=\"down\"}" == $((total * DOWN)) "$what"
	expect "zproxy_upstream_bytes_total{$R,direction=\"up\"}" == 0 "$what"
	expect "zproxy_upstream_connections_total{$G}" == "$total" "$what"
	expect "zproxy_upstream_connections_total{$R}" == 0 "$what"
	expect "zproxy_upstream_connections_failed_total{$R}" == 1 "$what"
	expect "zproxy_upstream_connections_failed_total{$G}" == 0 "$what"
	expect "zproxy_upstream_up{$R}" == 0 "$what: refusing upstream after --max-fails 1"
	expect "zproxy_upstream_up{$G}" == 1 "$what"
	expect "zproxy_upstream_consecutive_failures{$R}" == 1 "$what"
	expect "zproxy_upstream_connections_open{$G}" == 0 "$what"
	expect zproxy_cpu_seconds_total ">" 0 "$what"
	ok "$what: $total connections, $((total * UP)) bytes up and $((total * DOWN)) down counted exactly, overall and per upstream; refusing upstream up=0 after 1 failure"

	# Two held connections: open pairs in the gauge, their bytes counted.
	zp_bg hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 2 --hold -t 30
	hid=$BG_PID
	wait_line "$T/hold.out" '^connected 2' 10 "$hid" >/dev/null ||
		fail "$what: held clients did not connect: $(cat "$T/hold.err")"
	wait_metric 'zproxy_bytes_total{direction="down"}' == $(((total + 2) * DOWN)) 10 \
	    "$what: open pairs' bytes"
	promcheck "$what: with open pairs"
	expect zproxy_connections_open == 2 "$what: held"
	expect "zproxy_upstream_connections_open{$G}" == 2 "$what: held"
	expect "zproxy_upstream_bytes_total{$G,direction=\"down\"}" == $(((total + 2) * DOWN)) \
	    "$what: open pairs' bytes per upstream"
	local ps pc pm fb
	ps=$(val 'zproxy_pairs{mode="splice"}'); pc=$(val 'zproxy_pairs{mode="copy"}')
	pm=$(val 'zproxy_pairs{mode="mixed"}')
	[ $((ps + pc + pm)) = 2 ] || fail "$what: pairs gauge splice=$ps copy=$pc mixed=$pm, 2 open"
	if [ "$mode" = copy ]; then
		[ "$pc" = 2 ] || fail "$what: pairs{mode=\"copy\"} is $pc with -m copy"
		expect zproxy_pipes_in_use == 0 "$what: no pipes in copy mode"
	else
		fb=$(val 'zproxy_copy_fallbacks_total{reason="no-pipe"}')
		if [ "$ps" != 2 ] && [ "$fb" -gt 0 ]; then
			# no pipe to be had (pipe-user-pages-soft, fds): zproxy
			# rightly copied, but the gauge was not tested
			skip "$what: pairs{mode=\"splice\"} and pipes in use: $fb copy fallbacks (no pipe), pairs splice=$ps copy=$pc mixed=$pm"
		else
			[ "$ps" = 2 ] || fail "$what: pairs{mode=\"splice\"} is $ps with -m splice"
			# A direction holds a pipe only once it saw bulk (the
			# lazy subcase pins down which).
			expect zproxy_pipes_in_use "<=" 4 "$what: 2 pairs, at most 2 pipes each"
		fi
	fi
	ok "$what: 2 held connections: connections_open 2, pairs splice=$ps copy=$pc mixed=$pm, their bytes counted while open"
	zp_stop "$hid"
	peer_wait "$hid" hold 10 >/dev/null
	wait_metric zproxy_connections_open == 0 10 "$what: after the held clients"
	expect zproxy_connections_total == $((total + 2)) "$what"
	expect 'zproxy_pairs{mode="splice"}' == 0 "$what"
	expect 'zproxy_pairs{mode="copy"}' == 0 "$what"
	stop_zproxy
	ok "$what: gauges back to 0 when the pairs closed; clean stop"
}

# HTTP surface: 404, 405, HEAD, and promtool on a scrape.
http_surface() {
	peer_listen up -n 0 -t 0
	start_stats -u "127.0.0.1:$PEER_PORT"
	fetch /nope "$T/nope"
	[ "$FETCH_STATUS" = 404 ] || fail "GET /nope: status $FETCH_STATUS"
	fetch / "$T/root"
	[ "$FETCH_STATUS" = 404 ] || fail "GET /: status $FETCH_STATUS"
	fetch /metrics "$T/post" POST
	[ "$FETCH_STATUS" = 405 ] || fail "POST /metrics: status $FETCH_STATUS"
	grep -qi '^Allow: GET, HEAD' "$T/post.hdr" || fail "POST /metrics: no Allow header"
	fetch /metrics "$T/put" PUT
	[ "$FETCH_STATUS" = 405 ] || fail "PUT /metrics: status $FETCH_STATUS"
	if [ -z "${ZP_NO_CURL:-}" ] && command -v curl >/dev/null; then
		FETCH_STATUS=$(curl -sS -m 5 -I -o "$T/head.hdr" -w '%{http_code}' \
		    "http://127.0.0.1:$SPORT/metrics")
		[ "$FETCH_STATUS" = 200 ] || fail "HEAD /metrics: status $FETCH_STATUS"
		grep -qiF "Content-Type: $CT" "$T/head.hdr" || fail "HEAD /metrics: content type"
	fi
	scrape
	promcheck "fresh zproxy"
	zproxy_alive "after the HTTP requests"
	stop_zproxy
	ok "GET /nope and / 404, POST and PUT 405 with Allow, HEAD 200, GET 200 with $CT, $PT"
}

# The idle-timeout and failed-connection counters.
counters() {
	local hid refused
	peer_listen up -n 0 -t 0 --no-shut
	start_stats --idle-timeout 0.3 -u "127.0.0.1:$PEER_PORT"
	zp_bg idle "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --hold -t 30
	hid=$BG_PID
	wait_metric 'zproxy_timeouts_total{kind="idle"}' == 1 10 "idle timeout"
	expect 'zproxy_timeouts_total{kind="fin"}' == 0 "idle timeout"
	expect zproxy_connections_open == 0 "idle timeout"
	zp_stop "$hid"
	stop_zproxy
	ok "an idle connection closed by --idle-timeout: timeouts_total{kind=\"idle\"} 1"

	refused=$(free_port) || fail "zp-peer port failed"
	start_stats --max-fails 1 -u "127.0.0.1:$refused"
	peer refused connect 127.0.0.1 "$ZPORT" --expect-close 5 -t 10 ||
		fail "client of a refusing upstream: $(cat "$T/refused.err")"
	wait_metric zproxy_connections_failed_total == 1 10 "refusing upstream"
	expect "zproxy_upstream_up{upstream=\"127.0.0.1:$refused\"}" == 0 "refusing upstream"
	expect "zproxy_upstream_connections_failed_total{upstream=\"127.0.0.1:$refused\"}" == 1 \
	    "refusing upstream"
	promcheck "after a failed connection"
	stop_zproxy
	ok "a client whose only upstream refuses: connections_failed_total 1, upstream_up 0"
}

# A stats port in use: exit 71 with the documented message.
in_use() {
	local rc port
	peer_listen up -n 0 -t 0
	start_stats -u "127.0.0.1:$PEER_PORT"
	port=$(free_port) || fail "zp-peer port failed"
	timeout -k 2 10 "$ZPROXY" -l "127.0.0.1:$port" -u "127.0.0.1:$PEER_PORT" \
	    --stats "127.0.0.1:$SPORT" >"$T/inuse.out" 2>"$T/inuse.err"
	rc=$?
	[ "$rc" = 71 ] || fail "--stats on a port in use: status $rc, want 71: $(cat "$T/inuse.err")"
	grep -q "cannot serve stats on 127.0.0.1:$SPORT: Address already in use" "$T/inuse.err" ||
		fail "--stats on a port in use: $(cat "$T/inuse.err")"
	scrape
	stop_zproxy
	ok "--stats on a port in use: exit 71, 'cannot serve stats on 127.0.0.1:$SPORT: Address already in use'"
}

# Pipes follow bulk. Two held pairs that carried 100 bytes each way hold
# no pipe and spliced nothing, yet count as splice pairs; with
# --splice-min 0 they hold two pipes each and spliced every byte. Then one
# connection with 16 MiB each way, verified at both ends: all but its
# first reads go through the pipes (zproxy_spliced_bytes_total), the
# pipes are back in the pool when it closes; in copy mode nothing is
# spliced.
lazy() {
	local mode min what hid upid up down bulk=$((16 * 1024 * 1024))
	for min in 4K 0; do
		what="--splice-min $min, 2 pairs of 100 bytes each way"
		peer_listen up -n 0 -t 0 -g 100 --no-shut
		start_stats --splice-min "$min" -u "127.0.0.1:$PEER_PORT"
		zp_bg hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 2 -g 100 --hold -t 30
		hid=$BG_PID
		wait_line "$T/hold.out" '^connected 2' 10 "$hid" >/dev/null ||
			fail "$what: held clients did not connect: $(cat "$T/hold.err")"
		wait_metric 'zproxy_bytes_total{direction="up"}' == 200 10 "$what"
		wait_metric 'zproxy_bytes_total{direction="down"}' == 200 10 "$what"
		promcheck "$what"
		expect 'zproxy_pairs{mode="splice"}' == 2 "$what"
		if [ "$min" = 0 ]; then
			expect zproxy_pipes_in_use == 4 "$what: 2 pipes a pair from the start"
			expect 'zproxy_spliced_bytes_total{direction="up"}' == 200 "$what"
			expect 'zproxy_spliced_bytes_total{direction="down"}' == 200 "$what"
		else
			expect zproxy_pipes_in_use == 0 "$what: no pipe without bulk"
			expect 'zproxy_spliced_bytes_total{direction="up"}' == 0 "$what"
			expect 'zproxy_spliced_bytes_total{direction="down"}' == 0 "$what"
		fi
		expect 'zproxy_copy_fallbacks_total{reason="no-pipe"}' == 0 "$what"
		zp_stop "$hid"
		peer_wait "$hid" hold 10 >/dev/null
		wait_metric zproxy_connections_open == 0 10 "$what: after the clients"
		expect zproxy_pipes_in_use == 0 "$what: pipes back in the pool"
		stop_zproxy
		ok "$what: pairs{mode=\"splice\"} 2, pipes in use $([ "$min" = 0 ] && echo 4 || echo 0), spliced bytes $([ "$min" = 0 ] && echo 200 || echo 0) each way"
	done

	for mode in $MODES; do
		what="$mode: 16 MiB each way on one connection"
		peer_listen up -g "$bulk" -x "$bulk" -t 60
		upid=$PEER_PID
		start_stats -m "$mode" -u "127.0.0.1:$PEER_PORT"
		peer bulk connect 127.0.0.1 "$ZPORT" -g "$bulk" -x "$bulk" -t 60 ||
			fail "$what: client: $(cat "$T/bulk.err")"
		peer_wait "$upid" up 30 || fail "$what: upstream: $(cat "$T/up.err")"
		wait_metric zproxy_connections_open == 0 10 "$what: closed"
		promcheck "$what"
		expect 'zproxy_bytes_total{direction="up"}' == "$bulk" "$what"
		expect 'zproxy_bytes_total{direction="down"}' == "$bulk" "$what"
		up=$(val 'zproxy_spliced_bytes_total{direction="up"}')
		down=$(val 'zproxy_spliced_bytes_total{direction="down"}')
		if [ "$mode" = copy ]; then
			[ "$up" = 0 ] && [ "$down" = 0 ] ||
				fail "$what: spliced bytes up=$up down=$down in copy mode"
		else
			# The head before the first bulk read is copied: at most
			# a buffer or so; 1 MiB leaves room for a slow start.
			for v in "$up" "$down"; do
				[ "$v" -le "$bulk" ] && [ "$v" -ge $((bulk - 1024 * 1024)) ] ||
					fail "$what: spliced bytes up=$up down=$down of $bulk each way"
			done
			expect zproxy_pipes_in_use == 0 "$what: pipes back in the pool"
		fi
		stop_zproxy
		ok "$what, verified at both ends: spliced bytes up=$up down=$down"
	done
}

need_promtool() {
	command -v promtool >/dev/null ||
		fail "promtool not found: install Debian's prometheus package"
	ok "promtool: $(promtool --version 2>&1 | head -n 1)"
}

subcase need_promtool
for mode in $MODES; do
	subcase traffic
done
subcase lazy
subcase http_surface
subcase counters
subcase in_use
zp_done
