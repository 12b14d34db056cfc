#!/bin/bash
# notify.sh - zproxy under a service manager (issue 14): the sd_notify
# protocol, read from a datagram socket of ours (socat UNIX-RECV) named
# by NOTIFY_SOCKET, as systemd would:
#   a. READY=1 comes once, with a STATUS= line, and when it comes the
#      listener is up: a client connects and is relayed at once;
#   b. STATUS= lines follow every 5 s with the live counters (the client
#      counted);
#   c. WATCHDOG=1 every half of WATCHDOG_USEC (400 ms: 200 ms) from the
#      event loop: over a window of about 2 s, timed by the test, no more
#      than one per 200 ms (a timer never fires early) and at least one
#      per 400 ms (what systemd needs); none while zproxy is stopped
#      (SIGSTOP), again after SIGCONT; none at all when WATCHDOG_PID names
#      another process;
#   d. STOPPING=1 at SIGTERM, and zproxy exits 0;
#   e. an abstract socket (@name) works too;
#   f. a NOTIFY_SOCKET that is neither an absolute path nor @name is a
#      start-up error: exit 71 and a line naming it.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

command -v socat >/dev/null || fail "socat not found: install socat"

# count WHAT: lines of $NMSGS that are WHAT.
count() { grep -c -x -- "$1" "$NMSGS"; }

case_ready() {
	local n s
	notify_listen ready
	NOTIFY_SOCKET=$NSOCK start_zproxy -v -u "127.0.0.1:$EPORT"
	wait_line "$NMSGS" '^READY=1$' 10 "$ZPID" >/dev/null ||
		fail "no READY=1 within 10s: $(cat "$NMSGS")"
	listening "$ZPORT" || fail "READY=1 came before the listener was up"
	peer c1 connect 127.0.0.1 "$ZPORT" --send "$T/data" --recv "$T/back" \
	    -t 10 || fail "a client right after READY=1 failed"
	same_file "$T/data" "$T/back" "the client after READY=1"
	[ "$(count READY=1)" = 1 ] || fail "READY=1 came $(count READY=1) times"
	s=$(grep -m 1 '^STATUS=' "$NMSGS")
	case $s in
	"STATUS=relaying; connections open=0 total=0; bytes up=0 down=0; upstreams up 1 of 1") ;;
	*) fail "the first STATUS= line is '$s'" ;;
	esac
	ok "READY=1 once, with '$s'; the listener was up, a client relayed"
	# b. the next status, with the client in it
	wait_line "$NMSGS" '^STATUS=relaying; connections open=0 total=1; bytes up=65536 down=65536;' 8 "$ZPID" >/dev/null ||
		fail "no STATUS= with the client counted within 8s: $(grep '^STATUS=' "$NMSGS" | tail -n 1)"
	n=$(grep -c '^STATUS=' "$NMSGS")
	ok "STATUS= lines every 5s with the live counters ($n so far)"
	grep -q 'ready, told NOTIFY_SOCKET' "$ZLOG" || fail "no 'ready' line in the log"
	# d. the drain says STOPPING=1
	kill -TERM "$ZPID"
	zp_wait_exit "$ZPID" 10
	n=$?
	[ "$n" = 0 ] || fail "zproxy exited $n after SIGTERM"
	grep -qx 'STOPPING=1' "$NMSGS" || fail "no STOPPING=1 at SIGTERM: $(tail -n 3 "$NMSGS")"
	ok "STOPPING=1 at SIGTERM, exit 0"
}

case_watchdog() {
	local a b n t0 el deadline
	notify_listen wd
	WATCHDOG_USEC=400000 NOTIFY_SOCKET=$NSOCK start_zproxy -u "127.0.0.1:$EPORT"
	wait_line "$NMSGS" '^READY=1$' 10 "$ZPID" >/dev/null ||
		fail "watchdog: no READY=1"
	grep -q 'ready, told NOTIFY_SOCKET .* (watchdog on)' "$ZLOG" ||
		fail "watchdog: the ready line does not say the watchdog is on"
	# The bounds follow the window as it was measured, not as it was
	# meant (a sleep on a loaded machine, sanitizers, oversleeps): at
	# most one ping per 200 ms, +2 for the edges (a ping socat wrote
	# just after the first count); at least one per 400 ms, -1 for
	# the edges: a zproxy slower than that would be killed by systemd.
	t0=$(now_ms)
	a=$(count WATCHDOG=1)
	sleep 2
	b=$(count WATCHDOG=1)
	el=$(( $(now_ms) - t0 ))
	n=$((b - a))
	[ "$n" -le $((el / 200 + 2)) ] && [ "$n" -ge $((el / 400 - 1)) ] ||
		fail "watchdog: $n pings in ${el} ms, want $((el / 400 - 1)) to $((el / 200 + 2))"
	kill -STOP "$ZPID"
	deadline=$(( $(now_ms) + 5000 ))
	until [ "$(proc_state "$ZPID")" = T ]; do
		[ "$(now_ms)" -lt "$deadline" ] || fail "watchdog: zproxy not stopped 5 s after SIGSTOP"
		sleep 0.02
	done
	sleep 0.2	# a ping sent just before the stop reaches the file
	a=$(count WATCHDOG=1)
	sleep 1
	b=$(count WATCHDOG=1)
	kill -CONT "$ZPID"
	[ "$a" = "$b" ] || fail "watchdog: $((b - a)) pings while stopped"
	deadline=$(( $(now_ms) + 5000 ))
	until [ "$(count WATCHDOG=1)" -gt "$b" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || fail "watchdog: no ping within 5 s of SIGCONT"
		sleep 0.02
	done
	ok "watchdog: $n pings in ${el} ms at WATCHDOG_USEC=400000, none while stopped, again after SIGCONT"
	stop_zproxy

	notify_listen wd-other
	WATCHDOG_PID=1 WATCHDOG_USEC=400000 NOTIFY_SOCKET=$NSOCK \
	    start_zproxy -u "127.0.0.1:$EPORT"
	wait_line "$NMSGS" '^READY=1$' 10 "$ZPID" >/dev/null ||
		fail "watchdog of pid 1: no READY=1"
	sleep 1
	[ "$(count WATCHDOG=1)" = 0 ] ||
		fail "watchdog: $(count WATCHDOG=1) pings although WATCHDOG_PID is 1"
	ok "no pings when WATCHDOG_PID names another process"
	stop_zproxy
}

case_abstract() {
	notify_listen abs "zp-notify-test-$$"
	NOTIFY_SOCKET=$NSOCK start_zproxy -u "127.0.0.1:$EPORT"
	wait_line "$NMSGS" '^READY=1$' 10 "$ZPID" >/dev/null ||
		fail "abstract: no READY=1 at $NSOCK"
	ok "an abstract NOTIFY_SOCKET ($NSOCK) gets READY=1"
	stop_zproxy
}

case_bad() {
	local rc
	NOTIFY_SOCKET=relative/notify "$ZPROXY" -l 127.0.0.1:1 \
	    -u "127.0.0.1:$EPORT" >"$T/bad.out" 2>"$T/bad.err" </dev/null
	rc=$?
	[ "$rc" = 71 ] || fail "a relative NOTIFY_SOCKET: exit $rc, want 71"
	grep -q "NOTIFY_SOCKET 'relative/notify': not an absolute path" "$T/bad.err" ||
		fail "a relative NOTIFY_SOCKET: $(cat "$T/bad.err")"
	ok "a relative NOTIFY_SOCKET: exit 71, '$(tail -n 1 "$T/bad.err" | sed 's/^[^ ]* [^ ]* //')'"
}

mkdata data 65536
peer_listen echo --echo -t 120
EPORT=$PEER_PORT

subcase case_ready
subcase case_watchdog
subcase case_abstract
subcase case_bad

zp_done
