#!/bin/bash
# localfault.sh - out of descriptors is zproxy's fault, not the upstream's.
# zproxy runs with --max-fails 1, so that a single failure counted against
# the upstream would mark it down; its soft RLIMIT_NOFILE is lowered at run
# time (prlimit) to exactly what it holds, plus what the case needs, so that
# which call meets EMFILE is known, not raced for:
#   a. clients: with 3 clients relaying and one descriptor left, a 4th
#      client is accepted into it and its upstream socket() fails with
#      EMFILE. It waits (a warning says so), a 5th client waits in the
#      backlog (nothing is accepted while one waits); when the 3 leave,
#      both are served, 64 KiB echoed byte-exact each; then, with no
#      descriptor to free, a client waits --connect-timeout (4 s) and
#      ends end=local-resource with error=Too many open files. Never an
#      "is down" line; /metrics: the upstream up with 0 failures, no
#      failed connection on it, the local errors and the local failure
#      counted, nothing waiting;
#   b. health checks (--check-interval 0.2) with no descriptor left: each
#      round is skipped (warned once, then at debug level), never a
#      failure; /metrics afterwards: up, 0 failures.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

command -v prlimit >/dev/null || { echo "not ok - prlimit (util-linux) is needed"; exit 1; }

# count REGEX: lines of the zproxy log matching the extended REGEX.
count() { grep -cE -- "$1" "$ZLOG" 2>/dev/null; }

# limit_to FREE: lower zproxy's soft RLIMIT_NOFILE so that exactly FREE
# more descriptors can be opened. A new descriptor takes the lowest free
# number, and fails with EMFILE when that is not below the limit: so the
# limit is the (FREE+1)th free number. Descriptors open above it (one the
# test harness passed down) are no matter. A number counts as taken only
# if it is open in each of a few samples: a health check's socket comes
# and goes.
limit_to() {
	local lim i
	for i in 1 2 3 4; do
		ls "/proc/$ZPID/fd"
		sleep 0.02
	done | awk -v free="$1" '
		{ seen[$1]++ }
		END {
			for (n = 0; ; n++) {
				if (seen[n] == 4)
					continue
				if (free-- == 0)
					break
			}
			print n
		}' >"$T/limit" || fail "cannot read /proc/$ZPID/fd"
	lim=$(cat "$T/limit")
	zp_as_zproxy prlimit --pid "$ZPID" --nofile="$lim:" ||
		fail "prlimit --pid $ZPID --nofile=$lim: failed"
	LIMIT_SET=$lim
}

# unlimit: give zproxy its hard limit back as the soft one.
unlimit() {
	zp_as_zproxy prlimit --pid "$ZPID" --nofile="$NOFILE_SOFT:" ||
		fail "prlimit --pid $ZPID --nofile=$NOFILE_SOFT: failed"
}

no_down() {
	[ "$(count 'is down')" = 0 ] ||
		fail "$1: the upstream was marked down: $(grep -m1 'is down' "$ZLOG")"
}

# a. clients meet EMFILE on their upstream socket
clients() {
	local up hpid w1 w2 w3 line
	peer_listen echo --echo -n 0 -t 120
	up="127.0.0.1:$PEER_PORT"
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v -m "$mode" -u "$up" --max-fails 1 --fail-timeout 60 \
		--connect-timeout 4 --stats "127.0.0.1:$SPORT"
	NOFILE_SOFT=$(awk '/^Max open files/ { print $4 }' "/proc/$ZPID/limits")
	fd_baseline

	zp_bg hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 3 --hold -t 60
	hpid=$BG_PID
	wait_line "$T/hold.out" '^connected 3$' 10 "$hpid" >/dev/null ||
		fail "$mode: 3 clients could not connect: $(cat "$T/hold.err")"
	# each of the 3 relays: a client and an upstream socket
	local deadline=$(( $(now_ms) + 10000 ))
	until [ "$(sock_count "$ZPID")" -eq $((BASE_SOCK + 6)) ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode: the 3 pairs never all connected upstream ($(sock_count "$ZPID") sockets, baseline $BASE_SOCK)"
		sleep 0.02
	done
	limit_to 1

	# the 4th client gets the last descriptor, its upstream socket none
	zp_bg w1 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g 64K -x 64K -t 20
	w1=$BG_PID
	line=$(wait_line "$ZLOG" 'connect for client .* Too many open files; retrying' 5) ||
		no_down "$mode: a client's upstream socket() met EMFILE"
	[ -n "$line" ] ||
		fail "$mode: no 'retrying' line for a client whose upstream socket met EMFILE (limit $LIMIT_SET)"
	ok "$mode: upstream socket() met EMFILE; logged: ${line#*: }"
	zp_bg w2 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g 64K -x 64K --seed 2 -t 20
	w2=$BG_PID
	# w2 completes its handshake in the backlog; nothing is accepted
	# (established, or close-wait: the two sent their bytes and a FIN)
	wait_estab "$ZPORT" 5 5 '01|08' ||
		fail "$mode: expected 5 connections to zproxy's port (3 held, 1 waiting, 1 in the backlog): $(estab "$ZPORT" '01|08')"
	[ "$(count 'connect for client')" = 1 ] ||
		fail "$mode: a client was accepted while one waited for a descriptor"
	alive "$w1" || fail "$mode: the waiting client was let go: $(cat "$T/w1.err")"
	no_down "$mode: while a client waits for a descriptor"

	zp_stop "$hpid"
	peer_wait "$hpid" hold 5
	peer_wait "$w1" w1 15 || fail "$mode: the client that waited: $(cat "$T/w1.err")"
	peer_wait "$w2" w2 15 || fail "$mode: the client from the backlog: $(cat "$T/w2.err")"
	ok "$mode: once 3 clients left, the one that waited and the one in the backlog got 64 KiB echoed byte-exact"
	wait_fd_baseline 10 "$mode: after the clients left"

	# nothing will free a descriptor: the next one gives up
	limit_to 1
	zp_bg w3 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --expect-close 8 -t 15
	w3=$BG_PID
	peer_wait "$w3" w3 15 ||
		fail "$mode: a client that cannot be served is not let go within 8 s: $(cat "$T/w3.out" "$T/w3.err")"
	line=$(wait_line "$ZLOG" ' end=local-resource' 2) ||
		fail "$mode: no end=local-resource line"
	echo "$line" | grep -q 'error="*Too many open files' ||
		fail "$mode: the local-resource line does not name EMFILE: $line"
	ok "$mode: with no descriptor to be had, the client is let go after --connect-timeout: $(cat "$T/w3.out"); ${line#*: }"
	no_down "$mode: after a client ended local-resource"
	unlimit
	wait_fd_baseline 10 "$mode: after the local-resource end"

	stats_scrape
	stats_is "zproxy_upstream_up{upstream=\"$up\"}" 1 "$mode"
	stats_is "zproxy_upstream_consecutive_failures{upstream=\"$up\"}" 0 "$mode"
	stats_is "zproxy_upstream_connections_failed_total{upstream=\"$up\"}" 0 "$mode"
	stats_is "zproxy_upstream_connections_total{upstream=\"$up\"}" 5 "$mode"
	stats_is zproxy_connections_failed_total 0 "$mode"
	stats_is zproxy_connections_local_failed_total 1 "$mode"
	stats_is zproxy_connections_waiting 0 "$mode"
	awk '$1 == "zproxy_connect_local_errors_total" && $2 >= 2 { f = 1 } END { exit !f }' "$T/metrics" ||
		fail "$mode: zproxy_connect_local_errors_total is $(awk '$1 == "zproxy_connect_local_errors_total" { print $2 }' "$T/metrics"), want >= 2"
	ok "$mode: /metrics: upstream up, 0 failures on it, $(awk '$1 == "zproxy_connect_local_errors_total" { print $2 }' "$T/metrics") local errors, 1 local-resource end"
	no_down "$mode"
	stop_zproxy
}

# b. health checks meet EMFILE
checks() {
	local up line n
	peer_listen echo --echo -n 0 -t 120
	up="127.0.0.1:$PEER_PORT"
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -vv -m "$mode" -u "$up" --max-fails 1 --fail-timeout 60 \
		--check-interval 0.2 --stats "127.0.0.1:$SPORT"
	NOFILE_SOFT=$(awk '/^Max open files/ { print $4 }' "/proc/$ZPID/limits")
	# a check holds a socket only briefly: wait until none is open
	fd_baseline
	limit_to 0
	line=$(wait_line "$ZLOG" 'health check of .* skipped: Too many open files' 5) ||
		no_down "$mode: a health check's socket() met EMFILE"
	[ -n "$line" ] ||
		fail "$mode: no 'skipped' line for a health check that met EMFILE"
	n=$(count 'health check of .* skipped')
	local deadline=$(( $(now_ms) + 5000 ))
	until [ "$(count 'health check of .* skipped')" -ge $((n + 3)) ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode: health checks did not go on being skipped"
		sleep 0.05
	done
	no_down "$mode: health checks out of descriptors"
	unlimit
	stats_scrape
	stats_is "zproxy_upstream_up{upstream=\"$up\"}" 1 "$mode"
	stats_is "zproxy_upstream_consecutive_failures{upstream=\"$up\"}" 0 "$mode"
	ok "$mode: $(count 'health check of .* skipped') health check round(s) skipped for EMFILE, the upstream still up; ${line#*: }"
	no_down "$mode"
	stop_zproxy
}

for mode in $MODES; do
	subcase clients
	subcase checks
done

zp_done
