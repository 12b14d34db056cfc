#!/bin/bash
# uring.sh - --io-uring (experimental, issue 30): plain copy-mode pairs
# relayed through the thread's io_uring carry every byte, every FIN and
# every reset as the epoll path does. With a zproxy built with
# --enable-io-uring, -m copy --io-uring:
#   a. bulk: 16 MiB each way on one connection, SHA-256 both ways, the
#      byte counts in the log; and the ring did the work (its fdinfo shows
#      requests submitted, the strace-free way to know);
#   b. 50 connections at once, 200 ping-pongs of 100 bytes each to an
#      echo: every connection's counts, end=closed, and no completion
#      waits for a tick (p50 < 10 ms; about 1 ms here under ASan, 32 ms
#      when the ring was set up with DEFER_TASKRUN: see ring.c);
#   c. a refused upstream: the client is closed, end=upstream-refused;
#   d. client resets mid-stream (tests/tools/zp-reset, 300 flows): not one
#      short or corrupt, the log's up= add up to what the clients sent;
#   e. half-close each way: client SHUT_WR, the upstream answers after
#      EOF; upstream SHUT_WR, the client answers after EOF; SHA-256;
#   f. --threads 2: the same bulk through a worker's ring;
#   g. the pair's timer: an idle pair ends with end=idle-timeout
#      (--idle-timeout 1) while its recvs are in flight;
#   h. stop with 8 idle pairs open (recvs in flight on both sides of
#      each, across 2 threads): their requests are cancelled, every
#      completion reaped before the rings go, no leak (LeakSanitizer).
# Every case stops zproxy cleanly (stop_zproxy: exit 0, "stopping:", no
# sanitizer report, no sandbox refusal: the sandbox is on).
# With a zproxy built without it: --io-uring is refused with one line
# naming the problem, exit 64.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

# built: does this zproxy take --io-uring? (Its refusal is case_refused.)
built() {
	"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:2 -m copy --io-uring --check \
	    >/dev/null 2>&1
}

case_refused() {
	local rc
	"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:2 -m copy --io-uring --check \
	    >"$T/r.out" 2>"$T/r.err"
	rc=$?
	[ "$rc" = 64 ] || fail "--io-uring without the build option: exit $rc, want 64"
	[ "$(wc -l <"$T/r.err")" = 1 ] &&
	    grep -q -- '--io-uring: this zproxy was built without io_uring' \
	    "$T/r.err" || fail "--io-uring: said '$(cat "$T/r.err")'"
	ok "--io-uring refused by a build without it: one line, exit 64"
}

# ring_used: the current zproxy's rings took requests (fdinfo's SqHead).
ring_used() {
	local fd n=0 h
	for fd in /proc/"$ZPID"/fd/*; do
		[ "$(readlink "$fd")" = 'anon_inode:[io_uring]' ] || continue
		h=$(sed -n 's/^SqHead:[[:space:]]*//p' \
		    "/proc/$ZPID/fdinfo/${fd##*/}")
		n=$((n + ${h:-0}))
	done
	RING_SQES=$n
	[ "$n" -gt 0 ]
}

case_bulk() {
	local threads=$1 what="16 MiB each way, --threads $1"
	peer_listen bulk-up -s "$T/big.down" -o "$T/bulk.got-up" -t 60
	local upid=$PEER_PID
	start_zproxy -v "${URING[@]}" --threads "$threads" \
	    -u "127.0.0.1:$PEER_PORT"
	peer bulk-client connect 127.0.0.1 "$ZPORT" -s "$T/big.up" \
	    -o "$T/bulk.got-down" -t 60 ||
		fail "$what: client: $(cat "$T/bulk-client.err")"
	peer_wait "$upid" bulk-up 30 ||
		fail "$what: upstream: $(cat "$T/bulk-up.err")"
	same_file "$T/big.up" "$T/bulk.got-up" "$what: client->upstream"
	same_file "$T/big.down" "$T/bulk.got-down" "$what: upstream->client"
	expect_conn_log "up=$(size "$T/big.up") down=$(size "$T/big.down") .*end=closed" "$what"
	ring_used || fail "$what: no request went through a ring"
	stop_zproxy
	rm -f "$T/bulk.got-up" "$T/bulk.got-down"
	ok "$what: both ways verified (SHA-256), $RING_SQES requests through the rings"
}

case_pingpong() {
	local conns=50 n=200 what="50 connections x 200 ping-pongs of 100 bytes"
	local upid bad rtt p50
	peer_listen echo --echo --nodelay -n "$conns" -t 60
	upid=$PEER_PID
	start_zproxy -v "${URING[@]}" -u "127.0.0.1:$PEER_PORT"
	peer pp connect 127.0.0.1 "$ZPORT" -n "$conns" --pingpong "$n" \
	    --msg-size 100 --nodelay -t 60 || fail "$what: $(cat "$T/pp.err")"
	peer_wait "$upid" echo 30 || fail "$what: echo: $(cat "$T/echo.err")"
	wait_line "$ZLOG" "conn=$conns " 10 >/dev/null ||
		fail "$what: $(conn_lines) connection lines of $conns"
	bad=$(grep ' conn=[0-9]' "$ZLOG" |
	    grep -vc "up=$((n * 100)) down=$((n * 100)) .*end=closed")
	[ "$(conn_lines)" = "$conns" ] && [ "$bad" = 0 ] ||
		fail "$what: $bad of $(conn_lines) lines not up=down=$((n * 100)) end=closed"
	rtt=$(grep '^rtt ' "$T/pp.out")
	p50=$(echo "$rtt" | sed 's/.*p50=\([0-9.]*\)ms.*/\1/')
	awk -v a="$p50" 'BEGIN { exit !(a < 10) }' ||
		fail "$what: completions are late (p50 must be < 10 ms): $rtt"
	ring_used || fail "$what: no request went through a ring"
	stop_zproxy
	ok "$what: every count right, end=closed ($(grep '^rtt ' "$T/pp.out"))"
}

case_upstream_refused() {
	local what="a refused upstream" up
	up=$(free_port -b 127.0.0.1)
	start_zproxy -v "${URING[@]}" -u "127.0.0.1:$up"
	PEER_TIMEOUT=20 peer refused connect 127.0.0.1 "$ZPORT" -t 10 \
	    --allow-reset
	expect_conn_log 'end=upstream-refused' "$what"
	stop_zproxy
	ok "$what: the client is closed, end=upstream-refused"
}

# zp-reset's client resets (reset.sh's case_flows, through the ring).
case_client_reset() {
	local flows=300 what="client resets mid-stream, 300 flows" up rc
	local bytes got
	for _ in 1 2 3; do
		up=$(free_port -b 127.0.0.1)
		start_zproxy -v "${URING[@]}" -u "127.0.0.1:$up"
		timeout 120 "$ZP_RESET" --connect "$ZPORT" --upstream-port "$up" \
		    --side client --flows "$flows" --concurrency 32 \
		    --max-size 524288 --seed "$RANDOM" >"$T/rs.out" 2>"$T/rs.err"
		rc=$?
		if [ "$rc" -ne 0 ] && grep -q 'Address already in use' "$T/rs.err"; then
			stop_zproxy
			continue
		fi
		break
	done
	[ "$rc" -eq 0 ] || fail "$what: $(head -n 5 "$T/rs.err")"
	bytes=$(sed -n 's/.* bytes \([0-9]*\) .*/\1/p' "$T/rs.out")
	wait_line "$ZLOG" "conn=$flows " 10 >/dev/null ||
		fail "$what: $(conn_lines) connection lines of $flows"
	[ "$(grep -c ' end=client-reset ' "$ZLOG")" -eq "$flows" ] ||
		fail "$what: $(grep -c ' end=client-reset ' "$ZLOG") of $flows lines say end=client-reset"
	got=$(grep ' end=client-reset ' "$ZLOG" | tr ' ' '\n' |
	    sed -n 's/^up=//p' | awk '{ s += $1 } END { printf "%d\n", s }')
	[ "$got" -eq $((bytes + 8 * flows)) ] ||
		fail "$what: the log's up= add up to $got, the flows sent $((bytes + 8 * flows))"
	stop_zproxy
	ok "$what: $(cat "$T/rs.out"); up= add up to what was sent"
}

# halfclose.sh's a and c, through the ring.
case_halfclose() {
	local name=$1 what="$2" uopts=$3 copts=$4 upid
	# shellcheck disable=SC2086
	peer_listen "$name-up" $uopts -s "$T/hc.down" -o "$T/$name.got-up" -t 60
	upid=$PEER_PID
	start_zproxy -v "${URING[@]}" -u "127.0.0.1:$PEER_PORT"
	# shellcheck disable=SC2086
	peer "$name-client" connect 127.0.0.1 "$ZPORT" $copts -s "$T/hc.up" \
	    -o "$T/$name.got-down" -t 60 ||
		fail "$what: client: $(cat "$T/$name-client.err")"
	peer_wait "$upid" "$name-up" 30 ||
		fail "$what: upstream: $(cat "$T/$name-up.err")"
	same_file "$T/hc.up" "$T/$name.got-up" "$what: client->upstream"
	same_file "$T/hc.down" "$T/$name.got-down" "$what: upstream->client"
	expect_conn_log "up=$(size "$T/hc.up") down=$(size "$T/hc.down") .*end=closed" "$what"
	stop_zproxy
	ok "$what: both ways verified (SHA-256), end=closed"
}

case_idle() {
	local what="an idle pair, --idle-timeout 1" upid
	peer_listen idle-up -n 1 -t 30
	upid=$PEER_PID
	start_zproxy -v "${URING[@]}" --idle-timeout 1 \
	    -u "127.0.0.1:$PEER_PORT"
	exec 7<>"/dev/tcp/127.0.0.1/$ZPORT" || fail "$what: cannot connect"
	expect_conn_log 'up=0 down=0 .*end=idle-timeout' "$what" 5
	exec 7>&-
	peer_wait "$upid" idle-up 10 >/dev/null
	stop_zproxy
	ok "$what: end=idle-timeout"
}

case_stop_open() {
	local what="stop with 8 idle pairs open, --threads 2" fd upid
	peer_listen open-up -n 8 --hold -t 30
	upid=$PEER_PID
	start_zproxy -v "${URING[@]}" --threads 2 -u "127.0.0.1:$PEER_PORT"
	for fd in 20 21 22 23 24 25 26 27; do
		eval "exec $fd<>/dev/tcp/127.0.0.1/$ZPORT" ||
			fail "$what: cannot connect"
	done
	wait_estab "$PEER_PORT" 8 10 || fail "$what: $(estab "$PEER_PORT") of 8 upstream connections"
	stop_zproxy
	for fd in 20 21 22 23 24 25 26 27; do
		eval "exec $fd>&-"
	done
	zp_stop "$upid"
	peer_wait "$upid" open-up 5 >/dev/null
	grep -c ' end=shutdown' "$ZLOG" | grep -qx 8 ||
		fail "$what: $(grep -c ' end=shutdown' "$ZLOG") of 8 lines say end=shutdown"
	ok "$what: exit 0, 8 x end=shutdown, no sanitizer report"
}

if ! built; then
	subcase case_refused
	zp_done
fi

: "${ZP_RESET:?ZP_RESET must name tests/tools/zp-reset}"
URING=(-m copy --io-uring)
mkdata big.up $((16 * 1024 * 1024 + 77))
mkdata big.down $((16 * 1024 * 1024 + 5))
mkdata hc.up $((8 * 1024 * 1024 + 3))
mkdata hc.down $((8 * 1024 * 1024 + 11))

subcase case_bulk 1
subcase case_bulk 2
subcase case_pingpong
subcase case_upstream_refused
subcase case_client_reset
subcase case_idle
subcase case_stop_open
subcase case_halfclose hc-client "client SHUT_WR first, upstream answers after EOF" \
    --after-eof ""
subcase case_halfclose hc-upstream "upstream SHUT_WR first, client answers after EOF" \
    "" --after-eof
zp_done
