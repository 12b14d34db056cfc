#!/bin/bash
# maxconns.sh - --max-conns: beyond N open pairs new clients wait in the
# listen backlog (not accepted, not dropped) and are served when a pair
# closes.
#   a. --max-conns 3: 3 held connections, then 2 more that send 256 KiB
#      each: their connect() succeeds (the kernel's backlog: zp-peer says
#      "connected 2") but zproxy does not accept them: the listen socket's
#      accept queue holds 2 (/proc/net/tcp), zproxy's socket count does not
#      move, the upstream still has 3 connections, no conn= line, and half
#      a second later they are still there, not reset. Closing the 3 held
#      ones lets the 2 in: both are echoed back byte-exact (zp-peer -x),
#      logged up=262144 down=262144 end=closed;
#   b. --max-conns 3 and a burst of 20 clients, 1 MiB echoed each: every
#      one is served byte-exact and zproxy never holds more than 6 sockets
#      beyond its listener (3 pairs; sampled every 20 ms).
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

# backlog PORT: connections waiting in the accept queue of the socket
# listening on PORT (rx_queue of a LISTEN line in /proc/net/tcp).
backlog() {
	local hex q n=0
	hex=$(printf '%04X' "$1")
	for q in $(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
	    awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" && !seen[$2]++ { split($5, q, ":"); print q[2] }'); do
		n=$((n + 16#$q))
	done
	echo "$n"
}

wait_backlog() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	until [ "$(backlog "$1")" -eq "$2" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# a. 3 held, 2 waiting
held() {
	local what="$mode: --max-conns 3" upid uport hpid wpid s0 n
	local lines held waited hmax wmin
	peer_listen a-up -n 5 -e --allow-reset -t 30
	upid=$PEER_PID; uport=$PEER_PORT
	start_zproxy -v -m "$mode" --max-conns 3 -u "127.0.0.1:$uport"
	zp_bg a-hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 3 --hold -t 30
	hpid=$BG_PID
	wait_line "$T/a-hold.out" '^connected 3$' 5 "$hpid" >/dev/null ||
		fail "$what: 3 held clients: $(cat "$T/a-hold.err")"
	wait_estab "$uport" 3 5 || fail "$what: the upstream has $(estab "$uport") connections, expected 3"
	s0=$(sock_count "$ZPID")

	zp_bg a-wait "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 2 -g 256K -x 256K --hold -t 30
	wpid=$BG_PID
	wait_line "$T/a-wait.out" '^connected 2$' 5 "$wpid" >/dev/null ||
		fail "$what: the 2 clients beyond the limit could not connect: $(cat "$T/a-wait.err")"
	wait_backlog "$ZPORT" 2 5 ||
		fail "$what: zproxy's accept queue holds $(backlog "$ZPORT"), expected the 2 clients beyond the limit"
	sleep 0.5	# the window in which nothing may happen
	n=$(backlog "$ZPORT")
	[ "$n" -eq 2 ] || fail "$what: after 0.5 s the accept queue holds $n, expected 2"
	[ "$(sock_count "$ZPID")" -eq "$s0" ] ||
		fail "$what: zproxy holds $(sock_count "$ZPID") sockets, $s0 before the 2 more clients: it accepted some"
	[ "$(estab "$uport")" -eq 3 ] || fail "$what: the upstream has $(estab "$uport") connections, expected 3"
	[ "$(conn_lines)" -eq 0 ] || fail "$what: pairs ended: $(grep ' conn=' "$ZLOG")"
	alive "$wpid" || fail "$what: the waiting clients are gone: $(cat "$T/a-wait.err")"
	zproxy_alive "with clients waiting"
	ok "$what: 3 held, 2 more connected (kernel backlog) but not accepted: accept queue 2, zproxy's sockets and the upstream's 3 unchanged after 0.5 s, not reset"

	zp_stop "$hpid"
	zp_wait_exit "$hpid" 5 >/dev/null
	peer_wait "$wpid" a-wait 20 ||
		fail "$what: the 2 waiting clients after the held ones closed: $(cat "$T/a-wait.err")"
	peer_wait "$upid" a-up 10 || fail "$what: upstream: $(cat "$T/a-up.err")"
	# 3 held pairs and the 2 that waited, accepted after them (higher
	# ids). Their lines may interleave: with --threads, pairs close on
	# their own threads, and a waiting pair can finish on one while a
	# held pair's close is still being logged on another.
	# (A "conn=N no pipe" warning is a conn= line too: skip those.)
	lines=""
	for n in 1 2 3 4 5 6 7 8 9 10 11 12; do
		[ "$(printf '%s' "$lines" | grep -c ' end=')" -lt 5 ] || break
		next_conn_log || fail "$what: pair line $n: $CONN_LOG"
		case $CONN_LOG in
		*" end="*) lines+="$CONN_LOG"$'\n' ;;
		esac
	done
	held=$(printf '%s' "$lines" | grep -c 'up=0 down=0 ')
	waited=$(printf '%s' "$lines" | grep -Ec 'up=262144 down=262144 .*end=closed')
	[ "$held" -eq 3 ] && [ "$waited" -eq 2 ] ||
		fail "$what: want 3 held (up=0 down=0) and 2 served (262144 each way) pairs: $lines"
	hmax=$(printf '%s' "$lines" | grep 'up=0 down=0 ' | sed 's/.* conn=\([0-9]*\) .*/\1/' | sort -n | tail -n 1)
	wmin=$(printf '%s' "$lines" | grep 'up=262144 ' | sed 's/.* conn=\([0-9]*\) .*/\1/' | sort -n | head -n 1)
	[ "$wmin" -gt "$hmax" ] ||
		fail "$what: a waiting client (conn $wmin) was accepted before a held one (conn $hmax)"
	n=$(backlog "$ZPORT")
	[ "$n" -eq 0 ] || fail "$what: accept queue still holds $n"
	stop_zproxy
	ok "$what: once the 3 held ones closed, the 2 waiting clients were served, 256 KiB echoed byte-exact each, end=closed"
}

# b. a burst of 20
burst() {
	local what="$mode: --max-conns 3, 20 clients at once" upid uport cpid n smax=0 s
	peer_listen b-up -n 20 -e --allow-reset -t 30
	upid=$PEER_PID; uport=$PEER_PORT
	start_zproxy -v -m "$mode" --max-conns 3 -u "127.0.0.1:$uport"
	fd_baseline
	zp_bg b-client "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 20 -g 1M -x 1M -t 30
	cpid=$BG_PID
	# zproxy's own descriptors: /proc/net/tcp is read bucket by bucket
	# while sockets change state, so it may show a closed pair's upstream
	# socket still established next to its successor's
	while alive "$cpid"; do
		s=$(( $(sock_count "$ZPID") - BASE_SOCK ))
		[ "$s" -gt "$smax" ] && smax=$s
		[ "$smax" -le 6 ] || break
		sleep 0.02
	done
	[ "$smax" -le 6 ] || fail "$what: zproxy held $smax sockets for pairs at once (3 pairs: 6)"
	peer_wait "$cpid" b-client 20 || fail "$what: clients: $(cat "$T/b-client.err")"
	peer_wait "$upid" b-up 10 || fail "$what: upstream: $(cat "$T/b-up.err")"
	for n in $(seq 20); do
		expect_conn_log "up=1048576 down=1048576 .*end=closed" "$what: pair $n"
	done
	stop_zproxy
	ok "$what: all served, 1 MiB echoed byte-exact each, zproxy held at most $smax pair sockets at once (sampled)"
}

for mode in $MODES; do
	subcase held
	subcase burst
done

zp_done
