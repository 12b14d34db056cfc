#!/bin/bash
# transfer.sh - bytes flow both ways untouched: 64 MiB each way at once on
# one connection; the same with tiny pipes and buffers; an empty and a
# one-byte connection; and trap 5 (lost wake-ups): 1000-byte TCP_NODELAY
# writes with no FIN behind them, echoed back, the tail must arrive; and
# small-message latency (500 ping-pongs of 100 bytes: p50 < 20 ms, p99 <
# 100 ms), which catches bytes held back by MSG_MORE/SPLICE_F_MORE or Nagle.
# Every sub-case checks SHA-256 in both directions and the log line (its
# documented form, mode=, up=, down=, end=closed). Runs in splice, in
# splice with --splice-min 0 (every byte through the pipes) and in copy mode.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata big.up 64M
mkdata big.down 64M
mkdata small.up $((4 * 1024 * 1024 + 4321))
mkdata small.down $((4 * 1024 * 1024 + 1234))
mkdata one.up 1
mkdata one.down 1
: >"$T/empty"

# The documented connection line, e.g.
# 2026-12-02T15:22:26.123Z zproxy[PID]: conn=12 client=127.0.0.1:40000
#   upstream=127.0.0.1:8080 mode=splice up=1048576 down=0 duration=0.512s
#   end=closed
LOGLINE_RE='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z zproxy\[[0-9]+\]: conn=[0-9]+ client=[^ ]+:[0-9]+ upstream=[^ ]+:[0-9]+ mode=(splice|copy|mixed) up=[0-9]+ down=[0-9]+ duration=[0-9]+\.[0-9]{3}s end=(closed|client-reset|upstream-reset|client-error|upstream-error|upstream-refused|upstream-timeout|upstream-unreachable|out-of-memory|shutdown)( |$)'

# run_case NAME UPFILE DOWNFILE WHAT ZPROXY-ARGS...: a fresh upstream peer
# and zproxy (-m $mode ARGS); send UPFILE client->upstream while DOWNFILE
# goes upstream->client on one connection; check both files, the log line,
# a clean stop.
run_case() {
	local name=$1 upf=$2 downf=$3 what="$mode: $4" t0 ms line up down
	shift 4
	peer_listen "$name-up" -s "$downf" -o "$T/$name.got-up" -t 60
	local upid=$PEER_PID
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$PEER_PORT" "$@"
	t0=$(now_ms)
	peer "$name-client" connect 127.0.0.1 "$ZPORT" -s "$upf" \
	    -o "$T/$name.got-down" -t 60 ||
		fail "$what: client: $(cat "$T/$name-client.err")"
	peer_wait "$upid" "$name-up" 30 ||
		fail "$what: upstream: $(cat "$T/$name-up.err")"
	ms=$(( $(now_ms) - t0 ))
	same_file "$upf" "$T/$name.got-up" "$what: client->upstream"
	same_file "$downf" "$T/$name.got-down" "$what: upstream->client"
	expect_conn_log 'end=closed' "$what"
	line=$LAST_CONN_LOG
	echo "$line" | grep -Eq "$LOGLINE_RE" ||
		fail "$what: log line not in the documented form: $line"
	echo "$line" | grep -q "zproxy\[$ZPID\]: " ||
		fail "$what: log line does not carry zproxy's PID $ZPID: $line"
	up=$(stat -c %s "$upf"); down=$(stat -c %s "$downf")
	[ "$(field up "$line")" = "$up" ] ||
		fail "$what: log says up=$(field up "$line"), $up bytes went up: $line"
	[ "$(field down "$line")" = "$down" ] ||
		fail "$what: log says down=$(field down "$line"), $down bytes went down: $line"
	if [ "$(field mode "$line")" != "$MODE_LOGGED" ]; then
		# Unprivileged, zproxy runs share the per-user pipe budget
		# (fs.pipe-user-pages-soft) with every parallel test: a copy
		# fallback is right then, as long as zproxy said so.
		if [ "$(id -u)" != 0 ] && [ "$MODE_LOGGED" = splice ] &&
		    grep -qi 'pipe' "$ZLOG" && grep -qi 'copy' "$ZLOG"; then
			note "$what: relayed in copy mode, unprivileged: $(grep -i -m1 'pipe.*copy\|copy.*pipe' "$ZLOG")"
		else
			fail "$what: log says mode=$(field mode "$line") in ${MODE_ARGS[*]}: $line"
		fi
	fi
	stop_zproxy
	ok "$what: $up bytes up and $down down at once, sha256 equal both ways, log up=/down=/mode= right (${ms} ms)"
	rm -f "$T/$name.got-up" "$T/$name.got-down"
}

# trap 5: 1000-byte writes with TCP_NODELAY both ways, no FIN after
# the last one: only the tail's own wake-up can carry it. Small pipes
# fill at ~32 KB with such segments.
trap5() {
	local ps=$1 what n epid t0 ms
	what="$mode: trap 5, 1000-byte TCP_NODELAY writes echoed, no FIN, --pipe-size $ps"
	n=$((8 * 1024 * 1024 + 777))
	peer_listen echo --echo --chunk 1000 --nodelay -t 60
	epid=$PEER_PID
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$PEER_PORT" --pipe-size "$ps"
	t0=$(now_ms)
	peer nodelay connect 127.0.0.1 "$ZPORT" --chunk 1000 --nodelay \
	    --no-shut -g "$n" -x "$n" -t 30 ||
		fail "$what: client: $(cat "$T/nodelay.err")"
	ms=$(( $(now_ms) - t0 ))
	peer_wait "$epid" echo 10 || fail "$what: echo peer: $(cat "$T/echo.err")"
	expect_conn_log "up=$n down=$n" "$what"
	stop_zproxy
	ok "$what: all $n bytes back, verified (${ms} ms)"
}

# latency CHUNK: 500 ping-pongs of a 100-byte message (written in CHUNK-byte
# pieces) through zproxy to a TCP_NODELAY echo: no hold-up in zproxy
# (SPLICE_F_MORE/MSG_MORE, Nagle without TCP_NODELAY: ~40-200 ms each).
latency() {
	local chunk=$1 what="$mode: 500 x 100-byte ping-pong, written $1 bytes at a time" rtt p50 p99
	peer_listen echo --echo --nodelay -t 60
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$PEER_PORT"
	peer pp connect 127.0.0.1 "$ZPORT" --pingpong 500 --msg-size 100 \
	    --chunk "$chunk" --nodelay -t 60 ||
		fail "$what: $(cat "$T/pp.err")"
	rtt=$(grep '^rtt ' "$T/pp.out")
	p50=$(echo "$rtt" | sed 's/.*p50=\([0-9.]*\)ms.*/\1/')
	p99=$(echo "$rtt" | sed 's/.*p99=\([0-9.]*\)ms.*/\1/')
	awk -v a="$p50" -v b="$p99" 'BEGIN { exit !(a < 20 && b < 100) }' ||
		fail "$what: round trips too slow (p50 must be < 20 ms, p99 < 100 ms): $rtt"
	expect_conn_log 'up=50000 down=50000 .*end=closed' "$what"
	stop_zproxy
	ok "$what: $rtt"
}

for mode in $MODES_ALL; do
	set_mode "$mode"
	subcase run_case big "$T/big.up" "$T/big.down" "64 MiB each way, default sizes"
	subcase run_case tiny "$T/small.up" "$T/small.down" \
	    "4 MiB each way, --pipe-size 4K --buffer-size 1K" \
	    --pipe-size 4K --buffer-size 1K
	subcase run_case empty "$T/empty" "$T/empty" "empty connection (FIN both ways, no data)"
	subcase run_case one "$T/one.up" "$T/one.down" "one byte each way"

	for ps in 4K 64K 1M; do
		subcase trap5 "$ps"
	done
	subcase latency 100
	subcase latency 50
done

zp_done
