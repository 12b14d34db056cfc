#!/bin/bash
# activation.sh - socket activation (issue 14): zproxy takes its listening
# sockets from systemd ($LISTEN_FDS, $LISTEN_FDNAMES) with -l systemd or
# -l systemd:NAME, started here by systemd-socket-activate, which binds
# the sockets, waits for the first client and then execs zproxy with them
# (as systemd does for a socket unit):
#   a. -l systemd: the client that woke it, and those after, are relayed
#      byte for byte both ways; the start-up line names the socket;
#   b. named sockets: -l systemd:web and -l systemd:admin each take their
#      own (two of "web"), to different upstreams; a passed socket no -l
#      takes is closed with a warning;
#   c. a takeover of systemd's sockets (what `systemctl reload` of
#      zproxy-socket.service does): the new zproxy, with no $LISTEN_FDS
#      of its own, takes -l systemd:web from the running one and relays
#      to its new upstream; the old one exits 0;
#   d. a restart refuses no client: a holder of the socket (zp-peer
#      activate, as systemd holds a socket unit's) restarts zproxy three
#      times while clients connect at 1,000 a second; those that come
#      while no zproxy runs wait in the backlog and are served (and,
#      to show the difference, a restart without the holder refuses some);
#   e. a UDP socket (-d): a UDP listener (issue 28); the datagram that
#      woke zproxy and those after reach the collector, one stream per
#      source, every message once, in order;
#   f. refused clearly, at start-up, with exit 78: a name that was not
#      passed, and no $LISTEN_FDS at all.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

command -v systemd-socket-activate >/dev/null ||
	fail "systemd-socket-activate not found: install systemd"

# activate NAME SSA-ARGS... -- ZPROXY-ARGS...: systemd-socket-activate
# SSA-ARGS, which execs zproxy ZPROXY-ARGS (and --user when the suite runs
# as one) once a client comes. Sets APID (zproxy's pid once it runs: the
# activator execs it) and ALOG.
activate() {
	local name=$1 ssa=() zp=()
	shift
	while [ "$1" != -- ]; do ssa+=("$1"); shift; done
	shift
	zp=("$@")
	[ "$ZP_USER_ACTIVE" = 1 ] && zp+=(--user "$ZP_USER")
	zp_bg "$name" systemd-socket-activate "${ssa[@]}" \
	    "$ZPROXY" "${zp[@]}" --drain-timeout 1
	APID=$BG_PID
	ALOG=$T/$name.err
}

# wake PORT: wait until the activator listens on PORT.
wake_wait() {
	wait_port "$1" 10 || fail "systemd-socket-activate is not listening on $1"
}

case_one() {
	local p
	p=$(free_port) || fail "no free port"
	activate one -l "127.0.0.1:$p" -- -l systemd -u "127.0.0.1:$EPORT" -v
	wake_wait "$p"
	# This client wakes zproxy: it waits in the backlog meanwhile.
	peer c1 connect 127.0.0.1 "$p" --send "$T/data" --recv "$T/back1" \
	    -t 20 || fail "the first client failed: $(cat "$T/c1.err")"
	same_file "$T/data" "$T/back1" "the client that woke zproxy"
	peer c2 connect 127.0.0.1 "$p" --send "$T/data" --recv "$T/back2" \
	    -t 20 || fail "the second client failed: $(cat "$T/c2.err")"
	same_file "$T/data" "$T/back2" "the next client"
	grep -q "listening on 127.0.0.1:$p (systemd), upstream" "$ALOG" ||
		fail "the start-up line: $(grep 'listening on' "$ALOG")"
	ok "-l systemd: the client that woke zproxy and the next were relayed byte for byte ($(stat -c %s "$T/data") bytes each way)"
	kill -TERM "$APID"
	zp_wait_exit "$APID" 10
	p=$?
	[ "$p" = 0 ] || fail "zproxy exited $p after SIGTERM"
	sanitizer_clean "$ALOG" || fail "sanitizer report: $(grep -m 3 -i sanitizer "$ALOG")"
	sandbox_clean "$ALOG" || fail "the sandbox refused a call"
	ok "it drains and exits 0 at SIGTERM"
}

case_named() {
	local pw1 pw2 pa po
	peer_listen other --echo -n 0 -t 120
	pw1=$(free_port) && pw2=$(free_port) && pa=$(free_port) &&
		po=$(free_port) || fail "no free port"
	[ "$pw1" != "$pw2" ] || pw2=$(free_port)
	activate named -l "127.0.0.1:$pw1" -l "127.0.0.1:$pa" \
	    -l "127.0.0.1:$pw2" -l "127.0.0.1:$po" --fdname=web:admin:web:other \
	    -- -l systemd:web -l systemd:admin -u "127.0.0.1:$EPORT" -v
	wake_wait "$po"
	for p in "$pw1" "$pa" "$pw2"; do
		peer "c$p" connect 127.0.0.1 "$p" --send "$T/data" \
		    --recv "$T/back$p" -t 20 ||
			fail "a client on $p failed: $(cat "$T/c$p.err")"
		same_file "$T/data" "$T/back$p" "a client on port $p"
	done
	grep -q "listening on 127.0.0.1:$pw1 (systemd:web), 127.0.0.1:$pw2 (systemd:web), 127.0.0.1:$pa (systemd:admin), upstream" "$ALOG" ||
		fail "the start-up line: $(grep 'listening on' "$ALOG")"
	ok "-l systemd:web took both web sockets, -l systemd:admin its own: each relayed byte for byte"
	grep -q "\-l systemd: closing descriptor 6 (systemd:other): no -l takes it" "$ALOG" ||
		fail "no warning for the socket nobody took: $(grep -i closing "$ALOG")"
	peer late connect 127.0.0.1 "$po" --expect-close 5 -t 10 ||
		fail "the socket nobody took still answers: $(cat "$T/late.err")"
	grep -q refused "$T/late.out" ||
		fail "the socket nobody took: $(cat "$T/late.out")"
	ok "the socket no -l takes was closed, with a warning: its clients are refused"
	kill -TERM "$APID"
	zp_wait_exit "$APID" 10 || fail "zproxy did not exit 0"
}

case_takeover() {
	local p old rc new
	peer_listen b --echo -n 0 -t 120
	p=$(free_port) || fail "no free port"
	activate tk -l "127.0.0.1:$p" --fdname=web -- -l systemd:web \
	    --control "$T/ctl" -u "127.0.0.1:$EPORT" -v
	old=$APID
	wake_wait "$p"
	peer t1 connect 127.0.0.1 "$p" --send "$T/data" --recv "$T/t1" -t 20 ||
		fail "the first client failed: $(cat "$T/t1.err")"
	# The reload's zproxy: started by no socket unit, so no LISTEN_FDS.
	start_zproxy -l systemd:web --control "$T/ctl" --takeover "$T/ctl" \
	    -u "127.0.0.1:$PEER_PORT" -v
	new=$ZPID
	wait_line "$ZLOG" 'took over from pid' 10 "$ZPID" >/dev/null ||
		fail "the new zproxy did not take over: $(tail -n 2 "$ZLOG")"
	grep -q "listening on 127.0.0.1:$p (systemd:web)" "$ZLOG" ||
		fail "the new zproxy: $(grep 'listening on' "$ZLOG")"
	zp_wait_exit "$old" 10
	rc=$?
	[ "$rc" = 0 ] || fail "the old zproxy exited $rc"
	peer t2 connect 127.0.0.1 "$p" --send "$T/data" --recv "$T/t2" -t 20 ||
		fail "a client after the takeover failed: $(cat "$T/t2.err")"
	same_file "$T/data" "$T/t2" "a client after the takeover"
	grep -q "upstream=127.0.0.1:$PEER_PORT " "$ZLOG" ||
		fail "the client after the takeover did not go to the new upstream"
	ok "-l systemd:web taken over by a zproxy without \$LISTEN_FDS: the old one exited 0, the new one relays to its own upstream"
	stop_zproxy
}

case_restart() {
	local p i line n deadline user=()
	[ "$ZP_USER_ACTIVE" = 1 ] && user=(--user "$ZP_USER")
	zp_bg holder "$ZP_PEER" activate -- "$ZPROXY" -l systemd \
	    -u "127.0.0.1:$EPORT" --drain-timeout 5 "${user[@]}"
	p=$(wait_line "$T/holder.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "zp-peer activate did not start: $(cat "$T/holder.err")"
	HOLDER=$BG_PID
	wait_line "$T/holder.err" 'listening on' 10 "$HOLDER" >/dev/null ||
		fail "zproxy did not start: $(cat "$T/holder.err")"
	zp_bg churn "$ZP_PEER" churn 127.0.0.1 "$p" --rate 1000 --duration 120
	CHURN=$BG_PID
	for i in 1 2 3; do
		sleep 0.5	# clients on this zproxy before the next restart
		kill -HUP "$HOLDER"
		wait_line "$T/holder.out" "^restarted $i\$" 20 "$HOLDER" \
		    >/dev/null || fail "no restart $i: $(tail -n 3 "$T/holder.err")"
		deadline=$(( $(now_ms) + 10000 ))
		until [ "$(grep -c 'listening on' "$T/holder.err")" = $((i + 1)) ]; do
			[ "$(now_ms)" -ge "$deadline" ] &&
				fail "restart $i: zproxy did not start again"
			sleep 0.02
		done
	done
	sleep 0.5
	kill -USR1 "$CHURN"
	peer_wait "$CHURN" churn 30 ||
		fail "clients failed across the restarts: $(cat "$T/churn.out") $(head -c 300 "$T/churn.err")"
	line=$(cat "$T/churn.out")
	[ "$(field refused "$line")" = 0 ] && [ "$(field reset "$line")" = 0 ] ||
		fail "across the restarts: $line"
	ok "3 restarts with the socket held: $line"
	kill -TERM "$HOLDER"
	zp_wait_exit "$HOLDER" 10
	n=$?
	[ "$n" = 0 ] || fail "zproxy exited $n at the end"
	sanitizer_clean "$T/holder.err" || fail "sanitizer report"
	sandbox_clean "$T/holder.err" || fail "the sandbox refused a call"

	# The same without a holder: the socket closes with zproxy, and the
	# clients of the gap are refused (what the holder saves them from).
	p=$(free_port) || fail "no free port"
	start_zproxy -l "127.0.0.1:$p" -u "127.0.0.1:$EPORT"
	zp_bg churn2 "$ZP_PEER" churn 127.0.0.1 "$p" --rate 1000 --duration 120
	CHURN=$BG_PID
	sleep 0.5
	stop_zproxy
	sleep 0.2	# the gap a restart leaves
	start_zproxy -l "127.0.0.1:$p" -u "127.0.0.1:$EPORT"
	sleep 0.5
	kill -USR1 "$CHURN"
	peer_wait "$CHURN" churn2 30
	line=$(cat "$T/churn2.out")
	[ "$(field refused "$line")" -gt 0 ] ||
		fail "a restart without a held socket refused nobody: $line"
	ok "without the held socket, a restart refuses clients: $line"
	stop_zproxy
}

# refused NAME WANT SSA-ARGS... -- ZPROXY-ARGS: zproxy must exit 78 with a
# line holding WANT, once woken (a client, or a datagram for -d).
refused() {
	local name=$1 want=$2 p rc
	shift 2
	p=$(free_port) || fail "no free port"
	activate "$name" "${@//@PORT@/$p}"
	if [ "${1:-}" = -d ]; then
		local hex deadline=$(( $(now_ms) + 10000 ))
		hex=$(printf '%04X' "$p")
		until grep -q ":$hex " /proc/net/udp; do
			[ "$(now_ms)" -ge "$deadline" ] &&
				fail "$name: no UDP socket on $p"
			sleep 0.02
		done
		echo x | socat -u - "UDP:127.0.0.1:$p" ||
			fail "$name: cannot send a datagram"
	else
		wake_wait "$p"
		"$ZP_PEER" connect 127.0.0.1 "$p" -t 5 -q --allow-reset \
		    >/dev/null 2>&1 || true
	fi
	zp_wait_exit "$APID" 10
	rc=$?
	[ "$rc" = 78 ] || fail "$name: exit $rc, want 78: $(cat "$ALOG")"
	grep -q -- "$want" "$ALOG" || fail "$name: $(tail -n 2 "$ALOG")"
	ok "$name: exit 78, '$(grep -m 1 -- "$want" "$ALOG" | sed 's/^[^ ]* [^ ]* //')'"
}

case_udp() {
	local p cp hex deadline n
	: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
	mkdir -p "$T/udpcol"
	zp_bg udpcol "$ZP_LOGSEND" collect --dir "$T/udpcol"
	cp=$(wait_line "$T/udpcol.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "zp-logsend collect did not start"
	p=$(free_port) || fail "no free port"
	activate udp -d -l "127.0.0.1:$p" -- -l systemd -u "127.0.0.1:$cp" -v
	hex=$(printf '%04X' "$p")
	deadline=$(( $(now_ms) + 10000 ))
	until grep -q ":$hex " /proc/net/udp; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "udp: no UDP socket on $p"
		sleep 0.02
	done
	echo '<13>wake' | socat -u - "UDP:127.0.0.1:$p" ||
		fail "udp: cannot send a datagram"
	wait_line "$ALOG" "listening on udp@127\.0\.0\.1:$p \(1 socket, systemd\)" \
	    10 "$APID" >/dev/null ||
		fail "udp: the start-up line: $(grep -m 1 'listening on' "$ALOG")"
	"$ZP_LOGSEND" dgram 127.0.0.1 "$p" --conns 3 --msgs 200 --max 500 \
	    --from 127.0.0.2 --rate 1000 >"$T/udp-send.out" 2>&1 ||
		fail "udp: the sender failed: $(cat "$T/udp-send.out")"
	kill -TERM "$APID"
	zp_wait_exit "$APID" 10
	n=$?
	[ "$n" = 0 ] || fail "udp: zproxy exited $n after SIGTERM"
	sanitizer_clean "$ALOG" || fail "udp: sanitizer report"
	sandbox_clean "$ALOG" || fail "udp: the sandbox refused a call"
	grep -lqa '^9 <13>wake$' "$T/udpcol"/conn-*.raw ||
		fail "udp: the datagram that woke zproxy did not arrive"
	mapfile -t fs < <(grep -La '<13>wake' "$T/udpcol"/conn-*.raw)
	[ "${#fs[@]}" = 3 ] || fail "udp: ${#fs[@]} streams besides the waking one, want 3"
	"$ZP_LOGSEND" verify --raw --streams --exactly-once --conns 3 \
	    --msgs 200 --framing octet "${fs[@]}" >"$T/udp.verify" 2>&1 ||
		fail "udp: $(tail -n 2 "$T/udp.verify")"
	ok "udp: a passed UDP socket is a UDP listener: the waking datagram and 600 more relayed, one stream a source, $(tail -n 1 "$T/udp.verify")"
}

case_refused() {
	local rc
	refused unnamed "-l systemd:web: systemd passed no socket of that name" \
	    -l "127.0.0.1:@PORT@" --fdname=api -- -l systemd:web \
	    -u "127.0.0.1:$EPORT"
	env -u LISTEN_FDS -u LISTEN_PID "$ZPROXY" -l systemd \
	    -u "127.0.0.1:$EPORT" >"$T/none.out" 2>"$T/none.err" </dev/null
	rc=$?
	[ "$rc" = 78 ] || fail "no LISTEN_FDS: exit $rc, want 78"
	grep -q 'no sockets were passed (\$LISTEN_FDS is unset' "$T/none.err" ||
		fail "no LISTEN_FDS: $(cat "$T/none.err")"
	ok "no LISTEN_FDS: exit 78, '$(sed 's/^[^ ]* [^ ]* //' "$T/none.err")'"
}

mkdata data 1M
peer_listen echo --echo -n 0 -t 120
EPORT=$PEER_PORT

subcase case_one
subcase case_named
subcase case_takeover
subcase case_restart
subcase case_udp
subcase case_refused

zp_done
