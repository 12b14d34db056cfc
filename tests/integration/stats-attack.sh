#!/bin/bash
# stats-attack.sh - the --stats endpoint under attack must never stop the
# relay. zproxy runs under `ulimit -n 1024` (soft and hard, so that it
# cannot raise it) with --stats on a free port, relaying to an echo server.
# `zp-peer trickle` keeps 1,000 connections to the stats port, each sending
# one header byte a second (a request that never ends), every 10th one
# sending junk instead (TLS bytes, HTTP/9.9, an unknown method, a negative
# Content-Length, bare CRLFs), and reopens each one the server closes.
# Throughout, relay clients run back to back and every byte they get back
# is checked (a generated stream, and a file by SHA-256).
#   a. the default --stats-max-conns 16: connections beyond it are closed
#      at once (nearly all of them, and zproxy_stats_refused_total says
#      so); the 16 admitted ones trickle until the deadline and are closed
#      about 5 s after accept (none lives past 6.5 s, though each sends a
#      byte a second: the deadline is absolute, not an inactivity timer);
#   b. --stats-max-conns 1024 with --max-conns 100, so that the cap cannot
#      save the relay and the descriptor reserve must: stats refuses
#      connections for descriptors, 16 relay clients at a time are served,
#      and the relay never even hits EMFILE (stats never has to shed);
#   c. the same with --max-conns 200 and 40 relay clients at a time, more
#      than the reserve holds: the relay hits EMFILE, stats gives its
#      descriptors back (every stats connection closed, logged) and the
#      relay accepts again at once.
# In both, the relay never pauses for descriptors (no EMFILE, no accept
# pause), and once the attack stops a plain GET /metrics answers 200.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

NOFILE=1024
NTRICKLE=1000

# fetch_metrics OUT: one GET /metrics to $SPORT; FETCH_STATUS gets the
# status (000 when nothing came). curl if there is one, else /dev/tcp.
fetch_metrics() {
	local out=$1
	FETCH_STATUS=
	if command -v curl >/dev/null; then
		FETCH_STATUS=$(curl -sS -m 5 -o "$out" -w '%{http_code}' \
		    "http://127.0.0.1:$SPORT/metrics" 2>"$out.err")
	else
		timeout -k 2 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
			printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
		    "$SPORT" >"$out.raw" 2>"$out.err"
		FETCH_STATUS=$(sed -n '1s/^HTTP\/1\.[01] \([0-9]*\).*/\1/p' "$out.raw")
		sed '1,/^\r$/d' "$out.raw" >"$out"
	fi
	[ -n "$FETCH_STATUS" ] || FETCH_STATUS=000
}

# scrape_when_back SECS: GET /metrics until it answers 200 (stats may rest
# after refusing for descriptors); the text is in $T/metrics.
scrape_when_back() {
	local deadline=$(( $(now_ms) + $1 * 1000 ))
	while :; do
		fetch_metrics "$T/metrics"
		[ "$FETCH_STATUS" = 200 ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "GET /metrics after the attack: status $FETCH_STATUS within ${1}s: $(cat "$T/metrics.err" 2>/dev/null)"
		sleep 0.1
	done
}

# tval KEY: a field of the trickle summary line.
tval() { sed -n "s/.* $1=\\([0-9.]*\\).*/\\1/p" "$T/trickle.out"; }

# attack WHAT CONNS FILL ARGS...: start zproxy (ulimit -n $NOFILE) with
# ARGS, trickle for 9 s; once the attack holds FILL more descriptors of
# zproxy's, run relay clients of CONNS connections each back to back;
# every one must get its bytes back. Leaves zproxy running, the trickle
# summary in $T/trickle.out.
attack() {
	local what=$1 conns=$2 fill=$3 tpid rounds=0 base deadline
	shift 3
	peer_listen echo --echo -n 0 -t 120
	SPORT=$(free_port) || fail "zp-peer port failed"
	ZP_WRAP=(bash -c "ulimit -n $NOFILE && exec \"\$0\" \"\$@\"")
	start_zproxy -u "127.0.0.1:$PEER_PORT" --stats "127.0.0.1:$SPORT" "$@"
	ZP_WRAP=()
	grep -q "RLIMIT_NOFILE $NOFILE, " "$ZLOG" ||
		fail "$what: zproxy does not run at RLIMIT_NOFILE $NOFILE: $(grep -o 'RLIMIT_NOFILE [0-9]*' "$ZLOG")"
	wait_port "$SPORT" 5 || fail "$what: stats port $SPORT not listening"
	mkdata blob 4M
	base=$(fd_count "$ZPID")
	zp_bg trickle "$ZP_PEER" trickle 127.0.0.1 "$SPORT" -n "$NTRICKLE" \
	    --duration 9 --interval 1 --deadline 5 --garbage-every 10
	tpid=$BG_PID
	deadline=$(( $(now_ms) + 5000 ))
	until [ "$(fd_count "$ZPID")" -ge $((base + fill)) ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: the attack holds only $(( $(fd_count "$ZPID") - base )) of zproxy's descriptors after 5 s, want $fill"
		sleep 0.05
	done
	note "$what: the attack holds $(( $(fd_count "$ZPID") - base )) of zproxy's descriptors"
	while alive "$tpid"; do
		peer relay connect 127.0.0.1 "$ZPORT" -n "$conns" -g 256K \
		    -x 256K -t 10 -q ||
			fail "$what: relay client $rounds not served during the attack: $(cat "$T/relay.err")"
		rounds=$((rounds + 1))
		if [ $((rounds % 5)) = 1 ]; then
			peer file connect 127.0.0.1 "$ZPORT" -s "$T/blob" \
			    -o "$T/blob.back" -t 10 -q ||
				fail "$what: file client not served during the attack: $(cat "$T/file.err")"
			same_file "$T/blob" "$T/blob.back" "$what: 4 MiB echoed during the attack"
			rm -f "$T/blob.back"
		fi
		zproxy_alive "$what: during the attack"
	done
	peer_wait "$tpid" trickle 5 || fail "$what: zp-peer trickle failed: $(cat "$T/trickle.err")"
	[ "$rounds" -ge 5 ] || fail "$what: only $rounds relay rounds in 7 s"
	note "$what: $(cat "$T/trickle.out")"
	ok "$what: $rounds rounds of $conns relay client(s) of 256 KiB each way, and 4 MiB files, byte-exact while $NTRICKLE stats connections trickled"
	# stats' own accept may fail (its clients then wait); the relay's not
	grep -v 'stats: accept:' "$ZLOG" | grep -q 'Too many open files' &&
		fail "$what: the relay ran out of descriptors: $(grep -v 'stats: accept:' "$ZLOG" | grep -m1 'Too many open files')"
	[ "$(tval late)" = 0 ] ||
		fail "$what: $(tval late) stats connections lived past 6.5 s (longest $(tval maxlife) s)"
	ok "$what: no stats connection lived past 6.5 s (longest $(tval maxlife) s)"
}

# after_attack WHAT: /metrics answers a plain client; the relay never
# paused accepting.
after_attack() {
	scrape_when_back 5
	[ "$(val zproxy_accept_pauses_total)" = 0 ] ||
		fail "$1: the relay paused accepting $(val zproxy_accept_pauses_total) time(s)"
	ok "$1: afterwards GET /metrics answers 200; the relay never paused accepting"
}

# a. the default cap
capped() {
	local n d i r
	attack "max-conns 16" 1 16
	n=$(tval conns); d=$(tval deadline); i=$(tval immediate)
	[ "$d" -ge 16 ] ||
		fail "max-conns 16: only $d connections lived to the deadline (4-6.5 s): the admitted ones were not held, or not closed at 5 s"
	[ "$i" -ge $(( (n - d) * 9 / 10 )) ] && [ "$i" -ge "$NTRICKLE" ] ||
		fail "max-conns 16: only $i of $n connections were closed at once (under 0.5 s)"
	ok "max-conns 16: $i of $n stats connections closed at once, $d at the 5 s deadline"
	after_attack "max-conns 16"
	r=$(val 'zproxy_stats_refused_total{reason="max-conns"}')
	[ "${r:-0}" -ge "$NTRICKLE" ] ||
		fail "max-conns 16: zproxy_stats_refused_total{reason=\"max-conns\"} is ${r:-missing}"
	[ "$(val zproxy_stats_timeouts_total)" -ge 16 ] ||
		fail "max-conns 16: zproxy_stats_timeouts_total is $(val zproxy_stats_timeouts_total)"
	[ "$(val zproxy_stats_max_connections)" = 16 ] ||
		fail "max-conns 16: zproxy_stats_max_connections is $(val zproxy_stats_max_connections)"
	ok "max-conns 16: /metrics counts $r refused, $(val zproxy_stats_timeouts_total) timed out"
	stop_zproxy
}

# b. no cap to speak of: the descriptor reserve
reserve() {
	local r
	attack "max-conns 1024" 16 850 --stats-max-conns 1024 --max-conns 100
	after_attack "max-conns 1024"
	# the reserve alone kept the relay's room: it never had to take
	# descriptors back from stats (zp_stats_shed)
	grep -q 'the relay is out of descriptors' "$ZLOG" &&
		fail "max-conns 1024: the relay hit EMFILE and stats had to give way: $(grep -m1 'the relay is out of descriptors' "$ZLOG")"
	r=$(val 'zproxy_stats_refused_total{reason="descriptors"}')
	[ "${r:-0}" -ge 1 ] ||
		fail "max-conns 1024: stats never refused for descriptors (${r:-missing}): the reserve was not reached"
	ok "max-conns 1024: stats refused $r connections to keep the relay's descriptors"
	stop_zproxy
}

# c. beyond the reserve: stats gives way
shed() {
	attack "shed" 40 850 --stats-max-conns 1024 --max-conns 200
	after_attack "shed"
	grep -q 'stats: the relay is out of descriptors: closed [1-9]' "$ZLOG" ||
		fail "shed: the relay never needed stats' descriptors: the case tested nothing"
	ok "shed: $(grep -c 'the relay is out of descriptors' "$ZLOG") time(s) the relay ran out, stats gave its descriptors back, the relay went on"
	stop_zproxy
}

subcase capped
subcase reserve
subcase shed
zp_done
