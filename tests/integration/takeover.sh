#!/bin/bash
# takeover.sh - restarts that refuse no client (issue 14): a running
# zproxy with --control PATH hands its listening sockets to a new one
# started with --takeover PATH, which may have other options; the old one
# stops accepting, drains and exits 0.
#   a. under load, in splice and in copy mode: clients connect at 1,000 a
#      second (each an echoed, verified message) and four long transfers
#      run while 10 takeovers happen in a row, the upstream changing
#      between A and B each time: not one client refused, reset or
#      short; every long transfer byte for byte; each new zproxy relays
#      to its own upstream; every old one exits 0 after its drain;
#   b. refused clearly: no zproxy behind PATH (exit 69); another listen
#      address (exit 78), after which the old one serves on; the control
#      socket is 0600 and its user's, replaced (not removed) by the new
#      one's, and removed at an ordinary stop;
#   c. the service manager hears it: RELOADING=1 from the old one, then
#      MAINPID= and READY=1 from the new one, which goes on with the old
#      one's watchdog; after a failed takeover READY=1 again;
#   d. --daemon: the command returns once zproxy serves (exit 0), or with
#      the start-up error's status.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

TAKEOVERS=${ZP_TAKEOVERS:-10}

# The control sockets' directory: the user zproxy runs as must be able to
# remove its socket at exit (systemd's RuntimeDirectory= is the unit's).
RUN=$T/run
mkdir -p "$RUN" || fail "mkdir $RUN"
zp_user_dir "$RUN"

# takeover_start ARGS...: start a zproxy that takes over from $CTL (and
# offers its own there); sets ZPID, ZLOG like start_zproxy, and waits for
# it to say it took over.
takeover_start() {
	start_zproxy -l "127.0.0.1:$LPORT" --control "$CTL" --takeover "$CTL" \
	    "$@"
	wait_line "$ZLOG" 'took over from pid [0-9]+' 10 "$ZPID" >/dev/null ||
		fail "zproxy ${*} did not take over: $(tail -n 3 "$ZLOG")"
}

# A port for the takeovers' listener.
pick_port() {
	LPORT=$(free_port) || fail "no free port"
}

case_load() {
	local mode=$1 pids=() logs=() i up rc churn_pid long_pid n want
	local attempted line
	# Echo servers of this case's own: a server that served thousands
	# already accepts more slowly.
	peer_listen a-$mode --echo -n 0 -t 300
	APORT=$PEER_PORT
	peer_listen b-$mode --echo -n 0 -t 300
	BPORT=$PEER_PORT
	CTL=$RUN/ctl-$mode
	pick_port
	start_zproxy -l "127.0.0.1:$LPORT" --control "$CTL" -u "127.0.0.1:$APORT" \
	    -m "$mode" --drain-timeout 60 -v
	pids+=("$ZPID"); logs+=("$ZLOG")
	# Four long transfers that outlast every takeover: they stay on the
	# first zproxy, which drains them.
	zp_bg long-$mode "$ZP_PEER" connect 127.0.0.1 "$LPORT" -n 4 \
	    --send-gen 24M --expect-gen 24M --read-rate 3M -t 60
	long_pid=$BG_PID
	wait_estab "$LPORT" 4 10 ||
		fail "$mode: the long transfers did not connect"
	# Until every takeover is done (SIGUSR1 ends it; 120 s at most).
	zp_bg churn-$mode "$ZP_PEER" churn 127.0.0.1 "$LPORT" --rate 1000 \
	    --duration 120 -t 10
	churn_pid=$BG_PID
	sleep 0.5	# the churn's first half-second on the first zproxy
	for i in $(seq 1 "$TAKEOVERS"); do
		if [ $((i % 2)) = 1 ]; then up=$BPORT; else up=$APORT; fi
		takeover_start -u "127.0.0.1:$up" -m "$mode" --drain-timeout 60 \
		    -v --idle-timeout $((100 + i))
		pids+=("$ZPID"); logs+=("$ZLOG")
		# Clients for this one before the next takes over; the pace
		# spreads the takeovers over the churn.
		sleep 0.3
		# A conn= line comes at a client's close: under the sanitizers
		# with the churn's client and server saturating both CPUs, a
		# 100-byte echo took up to 5.6 s (it did before --threads too).
		wait_line "$ZLOG" ' conn=[0-9]+ ' 15 "$ZPID" >/dev/null ||
			fail "$mode: zproxy $i relayed no client within 15 s"
	done
	sleep 0.5	# and the last one serves a while too
	alive "$churn_pid" || fail "$mode: the churn ended before the last takeover"
	kill -USR1 "$churn_pid"
	peer_wait "$churn_pid" churn-$mode 30
	rc=$?
	line=$(grep '^churn ' "$T/churn-$mode.out")
	[ "$rc" = 0 ] || fail "$mode: the churn failed ($rc): $line $(head -c 300 "$T/churn-$mode.err")"
	attempted=$(field attempted "$line")
	# 1,000 a second are asked for; a sanitizer build on a loaded
	# machine reaches less: the rate is reported, not asserted.
	[ "$attempted" -ge 2000 ] ||
		fail "$mode: only $attempted connections: $line"
	ok "$mode: $TAKEOVERS takeovers under load: $line"
	peer_wait "$long_pid" long-$mode 60 ||
		fail "$mode: a long transfer failed: $(head -c 300 "$T/long-$mode.err")"
	ok "$mode: 4 long transfers of 24 MiB each way, across every takeover, byte for byte"
	# Every zproxy but the last was taken over, drained and exited 0.
	n=${#pids[@]}
	for i in $(seq 0 $((n - 2))); do
		zp_wait_exit "${pids[$i]}" 60
		rc=$?
		[ "$rc" = 0 ] || fail "$mode: zproxy $i exited $rc after its takeover"
		grep -q "taken over by pid ${pids[$((i + 1))]}: " "${logs[$i]}" ||
			fail "$mode: zproxy $i does not say who took over: $(grep -m 2 'taken over\|takeover' "${logs[$i]}")"
		sanitizer_clean "${logs[$i]}" || fail "$mode: sanitizer report in zproxy $i's log"
		sandbox_clean "${logs[$i]}" || fail "$mode: the sandbox refused a call in zproxy $i"
		# Its own upstream: A for the first, then B, A, ...
		if [ $((i % 2)) = 0 ]; then up=$APORT; else up=$BPORT; fi
		grep -q "upstream=127.0.0.1:$up " "${logs[$i]}" ||
			fail "$mode: zproxy $i relayed nothing to its upstream $up"
		if grep -q "upstream=127.0.0.1:$([ "$up" = "$APORT" ] && echo "$BPORT" || echo "$APORT") " "${logs[$i]}"; then
			fail "$mode: zproxy $i relayed to the other upstream"
		fi
	done
	ok "$mode: each of the $((n - 1)) old zproxies relayed to its own upstream, drained and exited 0"
	ZPID=${pids[$((n - 1))]}
	ZLOG=${logs[$((n - 1))]}
	stop_zproxy
	[ ! -e "$CTL" ] || fail "$mode: the control socket is still there after the last stop"
}

case_refused() {
	local rc old oldlog ino
	CTL=$RUN/ctl-refused
	pick_port
	"$ZPROXY" -l "127.0.0.1:$LPORT" -u "127.0.0.1:$APORT" \
	    --takeover "$T/nobody-here" >"$T/none.out" 2>"$T/none.err" </dev/null
	rc=$?
	[ "$rc" = 69 ] || fail "--takeover with nothing there: exit $rc, want 69"
	grep -q "no zproxy answers there (No such file or directory)" "$T/none.err" ||
		fail "--takeover with nothing there: $(cat "$T/none.err")"
	ok "--takeover with nothing there: exit 69, '$(sed 's/^[^ ]* [^ ]* //' "$T/none.err")'"

	start_zproxy -l "127.0.0.1:$LPORT" --control "$CTL" -u "127.0.0.1:$APORT" -v
	old=$ZPID; oldlog=$ZLOG
	[ -S "$CTL" ] || fail "no control socket at $CTL"
	want=root
	[ "$ZP_USER_ACTIVE" = 1 ] && want=$ZP_USER
	[ "$(stat -c '%a %U' "$CTL")" = "600 $want" ] ||
		fail "the control socket is $(stat -c '%a %U' "$CTL"), want 600 $want"
	ok "the control socket is mode 600, owned by $want"
	ino=$(stat -c %i "$CTL")
	"$ZPROXY" -l "127.0.0.1:$LPORT" -l 127.0.0.1:1 -u "127.0.0.1:$APORT" \
	    --takeover "$CTL" >"$T/more.out" 2>"$T/more.err" </dev/null
	rc=$?
	[ "$rc" = 78 ] || fail "another listen address: exit $rc, want 78"
	grep -q "does not listen on 127.0.0.1:1: the listen addresses cannot change across a takeover" "$T/more.err" ||
		fail "another listen address: $(cat "$T/more.err")"
	ok "another listen address: exit 78, '$(sed 's/^[^ ]* [^ ]* //' "$T/more.err")'"
	wait_line "$oldlog" 'takeover by pid [0-9]+ failed: it hung up; serving on' 5 "$old" >/dev/null ||
		fail "the old zproxy does not say the takeover failed"
	peer after connect 127.0.0.1 "$LPORT" --send "$T/data" --recv "$T/after" \
	    -t 10 || fail "the old zproxy does not serve after a failed takeover"
	same_file "$T/data" "$T/after" "a client after the failed takeover"
	[ "$(stat -c %i "$CTL")" = "$ino" ] || fail "a failed takeover replaced the control socket"
	ok "after the refused takeover the old one serves on, its control socket in place"

	takeover_start -u "127.0.0.1:$BPORT"
	[ "$(stat -c %i "$CTL")" != "$ino" ] ||
		fail "the new zproxy did not put its own control socket there"
	zp_wait_exit "$old" 10
	rc=$?
	[ "$rc" = 0 ] || fail "the old zproxy exited $rc"
	[ -S "$CTL" ] || fail "the old zproxy removed the new one's control socket"
	ok "the new zproxy's control socket replaced the old one's; the old one exited 0 and left it"
	stop_zproxy
	[ ! -e "$CTL" ] || fail "the control socket outlived an ordinary stop"
	ok "an ordinary stop removes the control socket"
}

case_notify() {
	local old a b new deadline
	command -v socat >/dev/null || fail "socat not found"
	CTL=$RUN/ctl-notify
	pick_port
	notify_listen sd
	WATCHDOG_USEC=400000 NOTIFY_SOCKET=$NSOCK start_zproxy \
	    -l "127.0.0.1:$LPORT" --control "$CTL" -u "127.0.0.1:$APORT"
	old=$ZPID
	wait_line "$NMSGS" '^READY=1$' 10 "$ZPID" >/dev/null || fail "no READY=1"
	# A takeover that fails: RELOADING=1, then READY=1 again.
	"$ZPROXY" -l 127.0.0.1:1 -u "127.0.0.1:$APORT" --takeover "$CTL" \
	    >/dev/null 2>&1 </dev/null
	wait_line "$NMSGS" '^RELOADING=1$' 5 "$old" >/dev/null ||
		fail "no RELOADING=1 when a takeover began"
	deadline=$(( $(now_ms) + 5000 ))
	until [ "$(grep -c -x 'READY=1' "$NMSGS")" -ge 2 ]; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "no READY=1 after the failed takeover"
		sleep 0.02
	done
	ok "a failed takeover: RELOADING=1, then READY=1 again from the old one"
	# One that works: the new one is the main process, with the watchdog.
	: >"$NMSGS"
	NOTIFY_SOCKET=$NSOCK takeover_start -u "127.0.0.1:$BPORT"
	new=$ZPID
	wait_line "$NMSGS" "^MAINPID=$new\$" 5 "$new" >/dev/null ||
		fail "the new zproxy did not say MAINPID=$new: $(cat "$NMSGS")"
	grep -A1 -x "MAINPID=$new" "$NMSGS" | grep -qx 'READY=1' ||
		fail "MAINPID= without READY=1: $(cat "$NMSGS")"
	a=$(grep -n -x -m 1 'RELOADING=1' "$NMSGS" | cut -d: -f1)
	b=$(grep -n -x -m 1 "MAINPID=$new" "$NMSGS" | cut -d: -f1)
	[ -n "$a" ] && [ "$a" -lt "$b" ] ||
		fail "no RELOADING=1 before the new MAINPID=: $(head -n 5 "$NMSGS")"
	ok "a takeover: RELOADING=1 from the old one, then MAINPID=$new and READY=1 from the new one"
	zp_wait_exit "$old" 10 || fail "the old zproxy did not exit 0"
	grep -qx 'STOPPING=1' "$NMSGS" && fail "STOPPING=1 after a takeover: the service would stop"
	a=$(grep -c -x 'WATCHDOG=1' "$NMSGS")
	sleep 1
	b=$(grep -c -x 'WATCHDOG=1' "$NMSGS")
	[ $((b - a)) -ge 2 ] ||
		fail "the new zproxy does not keep the watchdog: $((b - a)) pings in 1 s"
	ok "no STOPPING=1 from the old one; the new one keeps its watchdog ($((b - a)) pings in 1 s)"
	stop_zproxy
}

case_daemon() {
	local rc pid user=()
	[ "$ZP_USER_ACTIVE" = 1 ] && user=(--user "$ZP_USER")
	pick_port
	# Without start_zproxy: the command itself must return.
	timeout 20 "$ZPROXY" -l "127.0.0.1:$LPORT" -u "127.0.0.1:$APORT" \
	    --daemon --log-file "$T/daemon.log" --drain-timeout 1 \
	    "${user[@]}" >"$T/daemon.out" \
	    2>"$T/daemon.err" </dev/null
	rc=$?
	[ "$rc" = 0 ] || fail "--daemon: exit $rc: $(cat "$T/daemon.err")"
	# The log thread writes the line; it may land after the parent returned.
	pid=$(wait_line "$T/daemon.log" 'zproxy\[[0-9]+\]: listening on' 10 |
	    sed -n 's/.*zproxy\[\([0-9]*\)\]: listening on.*/\1/p')
	[ -n "$pid" ] && [ -d "/proc/$pid" ] || fail "--daemon: no zproxy runs"
	listening "$LPORT" || { kill "$pid"; fail "--daemon returned before it listened"; }
	peer dmn connect 127.0.0.1 "$LPORT" --send "$T/data" --recv "$T/dmn" -t 10 ||
		{ kill "$pid"; fail "--daemon: a client failed"; }
	kill -TERM "$pid"
	same_file "$T/data" "$T/dmn" "a client of the daemon"
	ok "--daemon: exit 0 once it listens; the background zproxy (pid $pid) relays"
	timeout 20 "$ZPROXY" -l "127.0.0.1:$LPORT" -u "127.0.0.1:$APORT" \
	    --daemon --takeover "$T/nobody-here" >"$T/dfail.out" 2>"$T/dfail.err" </dev/null
	rc=$?
	[ "$rc" = 69 ] || fail "--daemon that cannot start: exit $rc, want 69"
	grep -q 'no zproxy answers there' "$T/dfail.err" ||
		fail "--daemon that cannot start: $(cat "$T/dfail.err")"
	ok "--daemon that cannot start: exit 69 with its error"
}

mkdata data 256K
peer_listen a --echo -n 0 -t 300
APORT=$PEER_PORT
peer_listen b --echo -n 0 -t 300
BPORT=$PEER_PORT

subcase case_load splice
subcase case_load copy
subcase case_refused
subcase case_notify
subcase case_daemon

zp_done
