#!/bin/bash
# timeouts.sh - idle and half-close timeouts, keepalive:
#   a. --idle-timeout 1: a pair with no byte either way is closed after
#      about 1 s (0.8-2.5 s: one CI run under load saw 1.602 s): the
#      client sees the close, so does the upstream (its session ends at
#      about 1 s), the log says
#      end=idle-timeout; meanwhile a pair through the same zproxy whose
#      client sends a byte every 0.2 s for 2.6 s (one way only: the
#      upstream never answers) survives and ends end=closed, all 13 bytes
#      received;
#   b. --fin-timeout 1: the client sends 4 KiB and shuts its write side,
#      the upstream never answers nor closes (it does not even read for
#      1.5 s): the pair is closed after about 1 s, end=fin-timeout
#      up=4096, and the upstream then finds the 4 KiB and EOF; the other
#      way round too (the upstream sends 4 KiB + FIN, the client is silent:
#      the upstream sees the close after about 1 s, down=4096);
#      A half-closed pair that still moves bytes is not closed: the
#      client sends 4 KiB + FIN, the upstream answers 6 MiB after its EOF,
#      the client reads it at 2 MiB/s (3 s, three times the timeout):
#      end=closed, every byte (--fin-timeout counts from the last byte);
#   c. without those flags an idle pair and a half-closed pair are still
#      open after 2 s (no conn= line, both sockets established);
#   d. --keepalive: `ss -tnpo` shows timer:(keepalive on both of zproxy's
#      sockets of a pair; without it, on neither.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

# between X LO HI: LO <= X <= HI (decimals).
between() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'; }

# trickle PORT N INTERVAL: connect with bash's /dev/tcp, send one byte N
# times, INTERVAL apart; then close. Prints "ok N" or what went wrong (a
# write fails once the peer has reset the connection).
trickle() {
	local i
	exec 3<>"/dev/tcp/127.0.0.1/$1" || { echo "connect failed"; return 1; }
	for ((i = 0; i < $2; i++)); do
		printf x >&3 2>/dev/null || { echo "write of byte $i failed"; return 1; }
		sleep "$3"	# the pace being tested
	done
	exec 3>&-
	echo "ok $i"
}

# a. idle timeout
idle() {
	local what="$mode: --idle-timeout 1" upid tpid line up_s n
	peer_listen a-up -n 2 -v --no-shut --allow-reset -t 30
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --idle-timeout 1
	zp_bg trickle trickle "$ZPORT" 13 0.2
	tpid=$BG_PID
	peer a-idle connect 127.0.0.1 "$ZPORT" --no-shut --expect-close 3 -t 10 ||
		fail "$what: idle client not closed within 3 s: $(cat "$T/a-idle.out" "$T/a-idle.err" | head -n 2 | tr '\n' ' ')"
	CLOSE_S=$(sed -n 's/^closed after \([0-9.]*\)s.*/\1/p' "$T/a-idle.out")
	between "$CLOSE_S" 0.8 2.5 ||
		fail "$what: idle client closed after ${CLOSE_S}s, expected about 1 s"
	expect_conn_log "up=0 down=0 duration=[0-9.]+s end=idle-timeout" "$what: idle pair"
	between "$(field duration "$LAST_CONN_LOG" | tr -d s)" 0.8 2.5 ||
		fail "$what: idle pair's duration: $LAST_CONN_LOG"
	zp_wait_exit "$tpid" 10
	[ "$(cat "$T/trickle.out")" = "ok 13" ] ||
		fail "$what: the trickling pair: $(cat "$T/trickle.out" "$T/trickle.err")"
	expect_conn_log "up=13 down=0 .*end=closed" "$what: trickling pair"
	peer_wait "$upid" a-up 10 || fail "$what: upstream: $(cat "$T/a-up.err")"
	# the upstream saw the idle pair end, at about the same time
	line=$(grep -E 'conn [0-9]+: sent 0 received 0 end ' "$T/a-up.err") ||
		fail "$what: upstream: no session with nothing received: $(cat "$T/a-up.err")"
	up_s=$(echo "$line" | sed -n 's/.* after \([0-9.]*\)s$/\1/p')
	between "$up_s" 0.8 2.5 ||
		fail "$what: the upstream's idle session ended after ${up_s}s: $line"
	n=$(grep -c 'sent 0 received 13 end eof' "$T/a-up.err")
	[ "$n" -eq 1 ] || fail "$what: upstream: the trickling session: $(cat "$T/a-up.err")"
	stop_zproxy
	ok "$what: idle pair closed after ${CLOSE_S}s at the client, ${up_s}s at the upstream, end=idle-timeout; a byte every 0.2 s upward for 2.6 s kept the other pair alive (end=closed, 13 bytes)"
}

# b. fin timeout
fin() {
	local what="$mode: --fin-timeout 1" upid t0 ms d
	peer_listen b-up --read-delay 1.5 --no-shut -o "$T/b.got" -t 30
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --fin-timeout 1
	t0=$(now_ms)
	peer b-client connect 127.0.0.1 "$ZPORT" -g 4K -t 10 ||
		fail "$what: client: $(cat "$T/b-client.err")"
	ms=$(( $(now_ms) - t0 ))
	[ "$ms" -ge 800 ] && [ "$ms" -le 1600 ] ||
		fail "$what: the half-closed pair ended after $ms ms, expected about 1 s"
	expect_conn_log "up=4096 down=0 duration=[0-9.]+s end=fin-timeout" "$what"
	d=$(field duration "$LAST_CONN_LOG" | tr -d s)
	between "$d" 0.8 2.5 || fail "$what: duration ${d}s: $LAST_CONN_LOG"
	# Had zproxy not closed its side, this upstream (--no-shut) would
	# wait for an EOF until its -t.
	peer_wait "$upid" b-up 10 || fail "$what: upstream: $(cat "$T/b-up.err")"
	[ "$(stat -c %s "$T/b.got")" -eq 4096 ] || fail "$what: upstream got $(stat -c %s "$T/b.got") bytes"
	ok "$what: client sent 4 KiB + FIN, upstream silent: closed after $ms ms (log ${d}s), end=fin-timeout, upstream got the 4 KiB and EOF"

	# the other way: the upstream sends 4 KiB and shuts its write side,
	# the client neither reads (for 1.5 s) nor closes
	rm -f "$T/b.got"
	peer_listen b-up2 -g 4K -t 30
	upid=$PEER_PID
	stop_zproxy
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --fin-timeout 1
	zp_bg b-client2 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --read-delay 1.5 --no-shut -o "$T/b.got" -t 30
	t0=$(now_ms)
	peer_wait "$upid" b-up2 10 || fail "$what, upstream half-closed: upstream: $(cat "$T/b-up2.err")"
	ms=$(( $(now_ms) - t0 ))
	[ "$ms" -ge 800 ] && [ "$ms" -le 1600 ] ||
		fail "$what, upstream half-closed: the upstream saw the close after $ms ms, expected about 1 s"
	expect_conn_log "up=0 down=4096 duration=[0-9.]+s end=fin-timeout" "$what, upstream half-closed"
	peer_wait "$BG_PID" b-client2 10 || fail "$what, upstream half-closed: client: $(cat "$T/b-client2.err")"
	[ "$(stat -c %s "$T/b.got")" -eq 4096 ] || fail "$what: the client got $(stat -c %s "$T/b.got") bytes"
	stop_zproxy
	ok "$what: upstream sent 4 KiB + FIN, client silent: closed after $ms ms (at the upstream), end=fin-timeout, the client got the 4 KiB and EOF"
}

# b2. a half-closed pair that moves bytes outlives --fin-timeout
fin_moving() {
	local what="$mode: --fin-timeout 1, half-closed but moving" upid t0 ms
	mkdata b3.down 6M
	peer_listen b3-up --after-eof -s "$T/b3.down" -o "$T/b3.got-up" -t 30
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --fin-timeout 1
	t0=$(now_ms)
	peer b3-client connect 127.0.0.1 "$ZPORT" -g 4K --read-rate 2M \
	    -o "$T/b3.got-down" -t 30 ||
		fail "$what: client: $(cat "$T/b3-client.err")"
	ms=$(( $(now_ms) - t0 ))
	peer_wait "$upid" b3-up 10 || fail "$what: upstream: $(cat "$T/b3-up.err")"
	[ "$ms" -ge 2000 ] || fail "$what: done in $ms ms: the read rate did not hold"
	expect_conn_log "up=4096 down=6291456 duration=[0-9.]+s end=closed" "$what"
	same_file "$T/b3.down" "$T/b3.got-down" "$what (upstream->client)"
	stop_zproxy
	ok "$what: 6 MiB read at 2 MiB/s after the client's FIN, $ms ms, end=closed"
}

# c. no timeouts by default
no_flags() {
	local what="$mode: no timeout flags" upid hpid gpid
	peer_listen c-up -n 2 --read-delay 20 --no-shut --allow-reset -t 30
	upid=$PEER_PID
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	zp_bg c-hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --hold --allow-reset -t 30
	hpid=$BG_PID
	wait_line "$T/c-hold.out" '^connected 1$' 5 "$hpid" >/dev/null ||
		fail "$what: held client: $(cat "$T/c-hold.err")"
	wait_estab "$PEER_PORT" 1 5 "01|08" || fail "$what: the upstream did not get the idle pair"
	zp_bg c-half "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g 1K --allow-reset -t 30
	gpid=$BG_PID
	wait_estab "$PEER_PORT" 2 5 "01|08" || fail "$what: the upstream did not get the half-closed pair"
	sleep 2		# the idle time being tested
	alive "$hpid" || fail "$what: the idle client is gone: $(cat "$T/c-hold.err")"
	alive "$gpid" || fail "$what: the half-closed client is gone: $(cat "$T/c-half.err")"
	[ "$(estab "$PEER_PORT" "01|08")" -eq 2 ] || fail "$what: the upstream has $(estab "$PEER_PORT" "01|08") connections, expected 2"
	[ "$(conn_lines)" -eq 0 ] || fail "$what: a pair ended: $(grep ' conn=' "$ZLOG")"
	zp_stop "$hpid"; zp_stop "$gpid"; zp_stop "$upid"
	zp_wait_exit "$hpid" 5; zp_wait_exit "$gpid" 5; zp_wait_exit "$upid" 5
	stop_zproxy
	ok "$what: an idle pair and a half-closed pair are both open after 2 s"
}

# zp_ka: zproxy's established sockets, and those with a keepalive timer.
zp_ka() {
	local out
	out=$(ss -tnpoH state established 2>/dev/null | grep "pid=$ZPID,")
	ZP_SOCKS=$(printf '%s' "$out" | grep -c .)
	ZP_KA=$(printf '%s' "$out" | grep -c 'timer:(keepalive')
}

# d. keepalive
keepalive() {
	local what="$mode: --keepalive" upid hpid flag
	command -v ss >/dev/null || fail "$what: ss (iproute2) is not installed"
	for flag in --keepalive ""; do
		peer_listen d-up --no-shut --allow-reset -t 30
		upid=$PEER_PID
		# shellcheck disable=SC2086
		start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT" $flag
		zp_bg d-hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --hold --allow-reset -t 30
		hpid=$BG_PID
		wait_line "$T/d-hold.out" '^connected 1$' 5 "$hpid" >/dev/null ||
			fail "$what: held client: $(cat "$T/d-hold.err")"
		wait_estab "$PEER_PORT" 1 5 "01|08" || fail "$what: the upstream did not get the pair"
		zp_ka
		[ "$ZP_SOCKS" -eq 2 ] ||
			fail "$what: ss shows $ZP_SOCKS established sockets of zproxy, expected 2: $(ss -tnpo state established | grep "pid=$ZPID,")"
		if [ -n "$flag" ]; then
			[ "$ZP_KA" -eq 2 ] ||
				fail "$what: $ZP_KA of zproxy's 2 sockets show timer:(keepalive: $(ss -tnpoH state established | grep "pid=$ZPID,")"
		else
			[ "$ZP_KA" -eq 0 ] ||
				fail "$mode: without --keepalive, $ZP_KA of zproxy's sockets show timer:(keepalive"
		fi
		zp_stop "$hpid"; zp_wait_exit "$hpid" 5
		peer_wait "$upid" d-up 5 || fail "$what: upstream: $(cat "$T/d-up.err")"
		stop_zproxy
	done
	ok "$what: ss shows timer:(keepalive on both sockets of the pair (client and upstream side); without the flag on neither"
}

for mode in $MODES; do
	subcase idle
	subcase fin
	subcase fin_moving
	subcase no_flags
	subcase keepalive
done

zp_done
