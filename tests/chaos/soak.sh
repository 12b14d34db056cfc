#!/bin/bash
# soak.sh - a bounded chaos soak through zproxy (issue 10).
#
# tests/tools/zp-chaos plays both ends: `drive` keeps 300 flows running
# through zproxy, each of a random kind (clean upload, download or both;
# request/response; half-close either way; a reset by either side after
# TIOCOUTQ 0 or in mid-stream; a slow reader, 4 KiB per 50 ms, or a slow
# writer, 1 byte per 50 ms, on either side; an upstream that never reads)
# with 0-8 MiB each way, most of them small; `serve` is the upstream. Both
# check every byte they receive on arrival and keep a SHA-256 of each
# direction; `check` joins their result lines per flow and asserts, per
# kind (the header of tests/tools/zp-chaos.c has the table):
#   - clean kinds: every byte both ways, EOF on both ends, equal SHA-256;
#   - a reset after TIOCOUTQ 0 (and the never-reading upstream's): the
#     survivor got EVERY byte the resetting side sent, equal SHA-256, then
#     EOF (zproxy's reset guarantee, docs/DESIGN.md "Pair life cycle" 6-7);
#   - a reset in mid-stream: each direction an exact prefix;
#   - a flow cut by the upstream's death: the client saw an exact prefix.
# At a third of the run the upstream is killed (SIGKILL) and restarted on
# the same port 2 s later: the flows it was running are cut, those that
# start meanwhile are refused by zproxy (counted), every flow that starts
# after it is back must pass in full (a flow without an upstream result
# that overlaps no down time fails).
# First 3 s without zproxy (the harness loses nothing by itself), then,
# per mode (splice, copy): zproxy logged one line per flow, its
# sockets are back to the baseline, its RSS within 8 MiB of the baseline
# (32 MiB under ASan, whose quarantine is capped at 16 MiB for this
# zproxy), no sanitizer report in zproxy or the tools.
#
# ZP_CHAOS_SECONDS (default 15; CI's sanitizer run sets 60): how long new
# flows start, per mode; the running ones then finish (bounded by
# ZP_CHAOS_FLOW_TIMEOUT, 60 s a flow). ZP_CHAOS_SEED replays a run's
# plans (a random seed otherwise; it is printed); `zp-chaos plan --seed S
# --first ID` shows a flow's plan, and `zp-chaos drive --seed S --first ID
# --flows 1` runs it alone; ZP_CHAOS_KEEP=DIR keeps the result files and
# zproxy's log there. A longer soak:
#   ZP_CHAOS_SECONDS=600 make check TESTS=tests/chaos/soak.sh
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_CHAOS:?ZP_CHAOS must name tests/tools/zp-chaos}"
[ -x "$ZP_CHAOS" ] || fail "ZP_CHAOS=$ZP_CHAOS is not executable"

SECS=${ZP_CHAOS_SECONDS:-15}
FLOW_TIMEOUT=${ZP_CHAOS_FLOW_TIMEOUT:-60}
CONC=${ZP_CHAOS_CONCURRENCY:-300}
SEED=${ZP_CHAOS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
case $SECS$FLOW_TIMEOUT$CONC$SEED in
*[!0-9]*) fail "ZP_CHAOS_SECONDS, _FLOW_TIMEOUT, _CONCURRENCY and _SEED are whole numbers" ;;
esac
[ "$SECS" -ge 3 ] || fail "ZP_CHAOS_SECONDS=$SECS: at least 3"
note "seed $SEED ($SECS s a mode, $CONC flows at once; replay with ZP_CHAOS_SEED=$SEED)"

# RSS may grow by this much over the soak (KiB): glibc gives back what 300
# pairs used at their peak (it grows by under 1 MiB in a plain build);
# ASan's allocator keeps it, and its quarantine (capped below at 16 MiB)
# holds freed memory: it grows by about 23 MiB there, whatever the length
# of the run. A leak of a few hundred bytes a flow over the thousands of
# flows, or buffers kept per closed pair, go beyond either bound.
RSS_SLACK_PLAIN=8192
RSS_SLACK_ASAN=32768

# serve_start NAME PORT: start the upstream; sets SERVE_PID.
serve_start() {
	zp_bg "$1" "$ZP_CHAOS" serve --port "$2" --results "$UPRES" \
	    --timeout "$FLOW_TIMEOUT"
	SERVE_PID=$BG_PID
	wait_line "$T/$1.out" '^listening ' 10 "$SERVE_PID" >/dev/null ||
		fail "zp-chaos serve did not start: $(head -c 300 "$T/$1.err")"
}

tools_clean() {
	local f
	for f in "$T"/serve-*.err "$T"/drive-*.err; do
		[ -f "$f" ] || continue
		sanitizer_clean "$f" || fail "sanitizer report in ${f##*/}"
	done
}

# Without zproxy: the harness itself loses nothing (survivors see the
# resets themselves: check --direct).
case_direct() {
	local up deadline
	UPRES=$T/up-direct.res
	: >"$UPRES"
	up=$(free_port -b 127.0.0.1)
	serve_start serve-direct "$up"
	timeout -k 5 $((FLOW_TIMEOUT + 30)) "$ZP_CHAOS" drive --connect "$up" \
	    --results "$T/client-direct.res" --concurrency "$CONC" --seconds 3 \
	    --seed "$SEED" --timeout "$FLOW_TIMEOUT" >"$T/drive-direct.out" \
	    2>"$T/drive-direct.err" ||
		fail "direct: zp-chaos drive failed: $(head -n 3 "$T/drive-direct.err")"
	deadline=$(( $(now_ms) + 30000 ))
	until [ "$(sock_count "$SERVE_PID")" -le 1 ]; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "direct: the upstream still holds connections"
		sleep 0.05
	done
	"$ZP_CHAOS" check --direct --client "$T/client-direct.res" \
	    --upstream "$UPRES" >"$T/check-direct.out" 2>&1 ||
		fail "direct: seed $SEED: $(grep -m1 '^not ok' "$T/check-direct.out")"
	tools_clean
	ok "no relay, 3 s: $(sed -n 's/^total //p' "$T/check-direct.out")"
}

case_soak() {
	local mode=$1 up rss0 rss1 down_ms up_ms drv rc flows conns refused lingered
	local deadline kill_at rss_slack
	set_mode "$mode"
	UPRES=$T/up-$mode.res
	CRES=$T/client-$mode.res
	: >"$UPRES"; : >"$CRES"
	up=$(free_port -b 127.0.0.1)
	serve_start "serve-$mode-1" "$up"
	# Freed memory in ASan's quarantine would count as RSS (256 MiB by
	# default): cap it for this zproxy; use-after-free of what was freed
	# last (16 MiB of it) is still caught.
	ZP_WRAP=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=16")
	# --linger-timeout 10: a pair that lingers on a survivor which died
	# meanwhile (see the note at the end) holds on that long, not 30 s.
	# A live survivor on loopback acknowledges within milliseconds.
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$up" --linger-timeout 10
	ZP_WRAP=()
	fd_baseline
	rss0=$(rss_kb "$ZPID")
	rss_slack=$RSS_SLACK_PLAIN
	grep -q libasan "/proc/$ZPID/maps" 2>/dev/null && rss_slack=$RSS_SLACK_ASAN

	zp_bg "drive-$mode" timeout -k 5 $((SECS + FLOW_TIMEOUT + 60)) \
	    "$ZP_CHAOS" drive --connect "$ZPORT" --results "$CRES" \
	    --concurrency "$CONC" --seconds "$SECS" --seed "$SEED" \
	    --timeout "$FLOW_TIMEOUT"
	drv=$BG_PID

	# The upstream's death at a third of the run: that moment is what
	# the test is about, hence a plain sleep.
	kill_at=$((SECS / 3))
	sleep "$kill_at"
	alive "$drv" || fail "$mode: zp-chaos drive ended early: $(head -n 3 "$T/drive-$mode.err")"
	down_ms=$(now_ms)
	kill -KILL "$SERVE_PID"
	wait "$SERVE_PID" 2>/dev/null
	sleep 2		# down for 2 s: new flows are refused meanwhile
	zproxy_alive "after the upstream was killed"
	serve_start "serve-$mode-2" "$up"
	up_ms=$(now_ms)
	note "$mode: upstream killed at ${kill_at}s, back $((up_ms - down_ms)) ms later"

	zp_wait_exit "$drv" $((SECS + FLOW_TIMEOUT + 70))
	rc=$?
	[ "$rc" = 0 ] || fail "$mode: zp-chaos drive exited with $rc: $(head -n 3 "$T/drive-$mode.err")"
	zproxy_alive "after the soak"
	# Every pair closed in zproxy, and the upstream read what they had
	# delivered to it (a slow reader takes seconds): then it has
	# written the line of every flow it saw to its end.
	wait_fd_baseline 30 "$mode: after the soak" sockets
	deadline=$(( $(now_ms) + 30000 ))
	until [ "$(sock_count "$SERVE_PID")" -le 1 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode: the upstream still holds $(( $(sock_count "$SERVE_PID") - 1 )) connections 30 s after the soak"
		sleep 0.05
	done

	"$ZP_CHAOS" check --client "$CRES" --upstream "$UPRES" \
	    --cut "$down_ms,$up_ms" >"$T/check-$mode.out" 2>&1
	rc=$?
	[ -n "${ZP_CHAOS_KEEP:-}" ] && mkdir -p "$ZP_CHAOS_KEEP" &&
		cp "$CRES" "$UPRES" "$ZLOG" "$T/check-$mode.out" "$ZP_CHAOS_KEEP/"
	sed 's/^/# /' "$T/check-$mode.out"
	[ "$rc" = 0 ] || fail "$mode: seed $SEED: $(grep -m1 '^not ok' "$T/check-$mode.out")"
	flows=$(wc -l <"$CRES")

	# Every flow ended in zproxy too, and was logged once.
	conns=$(grep -c ' conn=[0-9]* client=' "$ZLOG")
	[ "$conns" -eq "$flows" ] ||
		fail "$mode: $flows flows, $conns connection lines in the log"
	refused=$(grep -c ' end=upstream-refused' "$ZLOG")
	lingered=$(grep -c ' linger-timeout: ' "$ZLOG")
	# The allocator may hand memory back a little later.
	deadline=$(( $(now_ms) + 10000 ))
	while rss1=$(rss_kb "$ZPID"); [ $((rss1 - rss0)) -gt "$rss_slack" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode: RSS ${rss0} KiB before, ${rss1} KiB after the soak (more than $rss_slack KiB)"
		sleep 0.2
	done
	stop_zproxy
	[ -n "${ZP_CHAOS_KEEP:-}" ] && cp "$ZLOG" "$ZP_CHAOS_KEEP/zproxy-$mode.log"
	zp_stop "$SERVE_PID"
	zp_wait_exit "$SERVE_PID" 5 >/dev/null
	tools_clean
	ok "$mode: seed $SEED, $(sed -n 's/^flows [0-9]* next [0-9]* seconds \([0-9.]*\)$/\1/p' "$T/drive-$mode.out") s: $(sed -n 's/^total //p' "$T/check-$mode.out")"
	ok "$mode: $conns connections logged ($refused upstream-refused while it was down, $lingered linger timeouts), sockets back to $BASE_SOCK, RSS ${rss0} -> ${rss1} KiB, no sanitizer report"
	# KNOWN FAILING, a zproxy bug (the note at the end): no pair of the
	# soak should wait out --linger-timeout, every survivor here reads or
	# dies. Fails about one mode in two. Leave this commit out to keep
	# CI green until zproxy notices a survivor's reset while it lingers.
	[ "$lingered" -eq 0 ] ||
		fail "$mode: KNOWN FAILING (zproxy linger bug): $lingered pairs waited out --linger-timeout, e.g. $(grep -m1 ' linger-timeout: ' "$ZLOG" | sed 's/.*: conn=/conn=/')"
	ok "$mode: no pair waited out --linger-timeout"
}

# Note (a zproxy bug the soak found, issue 10): a pair lingering on its
# survivor (the other side reset) does not notice when the survivor is
# reset in turn after its EOF: SIOCOUTQ keeps counting what was never
# acknowledged, and the pair waits out --linger-timeout (then counts those
# bytes as delivered). Here: a client resets while the upstream is being
# killed. Such pairs are counted as "linger timeouts" above, and fail the
# soak (KNOWN FAILING until zproxy is fixed).

subcase case_direct
for mode in $MODES; do
	subcase case_soak "$mode"
done
zp_done
