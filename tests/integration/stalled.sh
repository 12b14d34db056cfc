#!/bin/bash
# stalled.sh - --threads 2 with thread 1 held inside a callback, as a
# worker busy in one long callback (or stopped) would be: the main thread
# still accepts, relays and answers. The hold is a debug build's test
# hook (ZP_TEST_HOLD names a file: while it exists, thread 1 is held); a
# release build has none, and the test is a SKIP there.
#   a. while thread 1 is held, GET and HEAD /metrics answer within 1 s
#      (the answer waits ZP_REFRESH_MS, 200 ms, for the held thread, then
#      gives its last snapshot: its one connection);
#   b. a new client is accepted, relayed to the upstream and counted by
#      the main thread meanwhile; the one after it, handed to thread 1,
#      counts where it waits (zproxy_connections_open leaves it out:
#      thread 1 has not started it);
#   c. a scraper that gives up before the answer (50 ms) leaves nothing
#      behind: the next scrape answers, zproxy stays sanitizer-clean;
#   d. let go, thread 1 starts its client; the next scrape answers at
#      once and counts every thread exactly, SIGUSR1's line too;
#   e. --stats-timeout 0.1, shorter than the wait for the held thread:
#      each scrape is closed unanswered at its deadline (the wait ends
#      with its connection), counted in zproxy_stats_timeouts_total, and
#      zproxy stays sanitizer-clean.
# (Before the root stopped waiting for the workers, a scrape while thread
# 1 was held answered only once it was let go.)
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

# The hold file, where zproxy can see it after dropping to ZP_USER.
mkdir -p "$T/hold.d" || fail "mkdir $T/hold.d"
zp_user_dir "$T/hold.d"
HOLD=$T/hold.d/hold

MAXMS=1000	# a scrape while thread 1 is held: at most this long

# scrape_ms [CURL ARGS...]: GET /metrics into $T/metrics (stats_scrape);
# with args, a curl of those instead (its status returned). Sets MS to
# how long it took.
scrape_ms() {
	local t0 rc
	t0=$(now_ms)
	if [ $# -eq 0 ]; then
		stats_scrape
	else
		curl "$@" "http://127.0.0.1:$SPORT/metrics"
	fi
	rc=$?
	MS=$(( $(now_ms) - t0 ))
	return "$rc"
}

# connect NAME N: N more clients that connect and hold (zp-peer).
connect() {
	zp_bg "$1" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n "$2" --hold -t 60
	wait_line "$T/$1.out" "^connected $2\$" 20 "$BG_PID" >/dev/null ||
		fail "clients $1: $(cat "$T/$1.err")"
}

# per_thread_is OPEN T0 T1 WHAT: what the last scrape said.
per_thread_is() {
	stats_is zproxy_connections_open "$1" "$4"
	stats_is 'zproxy_thread_connections{thread="0"}' "$2" "$4"
	stats_is 'zproxy_thread_connections{thread="1"}' "$3" "$4"
}

stalled() {
	local what="--threads 2, thread 1 held" ms_get ms_head ms_after rc
	peer_listen up -n 0 -t 0 --no-shut --allow-reset
	SPORT=$(free_port) || fail "zp-peer port failed"
	ZP_TEST_HOLD="$HOLD" start_zproxy --stats "127.0.0.1:$SPORT" \
	    --threads 2 -u "127.0.0.1:$PEER_PORT"
	wait_port "$SPORT" 10 || fail "nothing listens on the --stats port"
	# one client on each thread (the least loaded; ties to thread 0)
	connect first 2
	wait_metric zproxy_connections_open == 2 10 "$what: before"
	per_thread_is 2 1 1 "$what: before"

	hold_or_skip || return 0

	# a.
	scrape_ms
	ms_get=$MS
	[ "$ms_get" -lt "$MAXMS" ] ||
		fail "$what: GET /metrics took $ms_get ms, want under $MAXMS"
	per_thread_is 2 1 1 "$what: thread 1's last snapshot"
	scrape_ms -sS -m 5 -I -o "$T/head" 2>"$T/head.err" ||
		fail "$what: HEAD /metrics: $(cat "$T/head.err")"
	ms_head=$MS
	[ "$ms_head" -lt "$MAXMS" ] ||
		fail "$what: HEAD /metrics took $ms_head ms, want under $MAXMS"
	grep -q '^HTTP/1.1 200' "$T/head" && grep -qi '^Content-Length: [1-9]' "$T/head" ||
		fail "$what: HEAD /metrics: $(head -n 3 "$T/head" | tr '\r\n' '  ')"

	# b. the next goes to thread 0 (a tie), the one after to thread 1
	connect second 1
	wait_estab "$PEER_PORT" 3 10 ||
		fail "$what: the upstream has $(estab "$PEER_PORT") connections, want 3"
	wait_metric zproxy_connections_open == 3 10 "$what: a new client"
	per_thread_is 3 2 1 "$what: a new client on thread 0"
	connect third 1
	scrape_ms
	[ "$MS" -lt "$MAXMS" ] || fail "$what: GET /metrics took $MS ms, want under $MAXMS"
	per_thread_is 3 2 1 "$what: a client waiting for thread 1"

	# c.
	scrape_ms -s -m 0.05 -o /dev/null
	rc=$?
	[ "$rc" = 28 ] || fail "$what: a scraper that gives up after 50 ms: curl status $rc, want 28 (timed out)"
	zproxy_alive "after a scraper gave up"
	scrape_ms
	[ "$MS" -lt "$MAXMS" ] || fail "$what: GET /metrics took $MS ms, want under $MAXMS"
	grep -q "thread 1: held while" "$ZLOG" && ! grep -q "thread 1: let go" "$ZLOG" ||
		fail "$what: thread 1 was let go too early"

	# d.
	rm -f "$HOLD"
	wait_line "$ZLOG" 'thread 1: let go' 5 "$ZPID" >/dev/null ||
		fail "$what: thread 1 was not let go"
	scrape_ms
	ms_after=$MS
	per_thread_is 4 2 2 "$what: let go"
	wait_estab "$PEER_PORT" 4 10 ||
		fail "$what: the upstream has $(estab "$PEER_PORT") connections, want 4"
	kill -USR1 "$ZPID"
	wait_line "$ZLOG" 'stats: connections open=4 total=4 ' 5 "$ZPID" >/dev/null ||
		fail "$what: SIGUSR1: $(grep 'stats: connections' "$ZLOG" | tail -n 1)"
	stop_zproxy
	ok "$what: GET /metrics in $ms_get ms, HEAD in $ms_head ms (under $MAXMS), with thread 1's last snapshot; a client accepted and relayed by thread 0 meanwhile; a scraper gone after 50 ms left nothing behind; let go: $ms_after ms, every thread counted exactly, SIGUSR1 too"
}

# hold_or_skip: create the hold file and wait for thread 1 to be held;
# status 1 (and a SKIP) in a build without the hook.
hold_or_skip() {
	: >"$HOLD"
	wait_line "$ZLOG" 'thread 1: held while' 5 "$ZPID" >/dev/null && return 0
	skip "no ZP_TEST_HOLD in this zproxy (a release build)"
	rm -f "$HOLD"
	stop_zproxy
	return 1
}

timeout_held() {
	local what="--threads 2, thread 1 held, --stats-timeout 0.1" i rc
	SPORT=$(free_port) || fail "zp-peer port failed"
	ZP_TEST_HOLD="$HOLD" start_zproxy --stats "127.0.0.1:$SPORT" \
	    --stats-timeout 0.1 --threads 2 -u 127.0.0.1:1
	wait_port "$SPORT" 10 || fail "nothing listens on the --stats port"
	hold_or_skip || return 0
	for i in 1 2 3; do
		scrape_ms -s -m 5 -o "$T/timedout"
		rc=$?
		[ "$rc" = 52 ] && [ ! -s "$T/timedout" ] ||
			fail "$what: scrape $i: curl status $rc after $MS ms, want 52 (closed unanswered)"
		[ "$MS" -lt "$MAXMS" ] || fail "$what: scrape $i took $MS ms"
	done
	rm -f "$HOLD"
	wait_line "$ZLOG" 'thread 1: let go' 5 "$ZPID" >/dev/null ||
		fail "$what: thread 1 was not let go"
	stats_scrape
	stats_is zproxy_stats_timeouts_total 3 "$what"
	stop_zproxy
	ok "$what: 3 scrapes closed unanswered at their deadline, counted; sanitizer-clean"
}

subcase stalled
subcase timeout_held
zp_done
