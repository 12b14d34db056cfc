#!/bin/bash
# mirror-fdlimit.sh - --mirror under descriptor pressure (issue 32): zproxy
# runs under `ulimit -n 256` (soft and hard) with one mirror and --framing
# lf; 300 zp-logsend clients of 50 messages each connect at once; the
# primary and the mirror are zp-logsend collectors (one file a
# connection, outside the limit).
#   a. the default (derived) --max-conns: it reserves the mirror's
#      descriptors, its copies of closed pairs still finishing included,
#      so nothing runs out: no "Too many open files" in the log, every
#      client's stream whole at the mirror (each message once, in order),
#      zproxy_mirror_streams_total 300, zproxy_mirror_dropped_total 0;
#   b. --max-conns 200, far beyond what 256 descriptors hold: mirror
#      streams are lost, and each one lost is counted: the clients whose
#      stream reached the mirror whole are 300 - dropped_total, the
#      mirror got exactly zproxy_mirror_streams_total connections, and
#      none of them empty (a stream that could not begin opens no
#      connection and is not counted as mirrored).
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"

NOFILE=256
CONNS=300
MSGS=50
LIMIT=(bash -c "ulimit -n $NOFILE && exec \"\$0\" \"\$@\"")

# collector NAME: a zp-logsend collector writing $T/NAME/conn-<i>.raw;
# its port in CPORT.
collector() {
	mkdir -p "$T/$1"
	zp_bg "$1" "$ZP_LOGSEND" collect --port 0 --dir "$T/$1"
	CPORT=$(wait_line "$T/$1.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "zp-logsend collect $1 did not start: $(head -c 300 "$T/$1.err")"
}

# run NAME ARGS...: zproxy (ARGS added) under the limit in front of a
# primary and a mirror collector; CONNS clients x MSGS messages through
# it, all read to EOF; returns once every mirror stream is over (open
# mirror sockets back to 0 within 30 s). Leaves the metrics scraped, the
# mirror's files in $T/NAME.mir and zproxy stopped.
run() {
	local name=$1 up mir
	shift
	collector "$name.up"
	up=$CPORT
	collector "$name.mir"
	mir=$CPORT
	SPORT=$(free_port) || fail "zp-peer port failed"
	ZP_WRAP=("${LIMIT[@]}")
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$up" \
	    --mirror "127.0.0.1:$mir" --framing lf --stats "127.0.0.1:$SPORT" "$@"
	ZP_WRAP=()
	timeout -k 5 120 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" --conns "$CONNS" \
	    --msgs "$MSGS" --framing lf --max 200 --seed "$RANDOM" \
	    --timeout 100 >"$T/$name.send.out" 2>"$T/$name.send.err" ||
		fail "$name: zp-logsend send failed (status $?): $(tail -n 1 "$T/$name.send.err")"
	wait_metric zproxy_connections_open == 0 30 "$name: every pair closed"
	wait_estab "$mir" 0 30 ||
		fail "$name: $(estab "$mir") mirror connections still open after 30s"
	stats_scrape
	stop_zproxy
}

# whole DIR: how many of DIR's files hold one connection's MSGS lines.
whole() {
	wc -l "$1"/conn-*.raw 2>/dev/null |
		awk -v m="$MSGS" '$2 != "total" && $1 == m { n++ } END { print n + 0 }'
}

# a. the default --max-conns
derived() {
	local what="$mode: ulimit -n $NOFILE, derived max-conns, one mirror"
	set_mode "$mode"
	run "a-$mode"
	grep -q 'Too many open files' "$ZLOG" &&
		fail "$what: out of descriptors: $(grep -m 1 'Too many open files' "$ZLOG")"
	stats_is "zproxy_mirror_dropped_total{mirror=\"127.0.0.1:$CPORT\"}" 0 "$what"
	stats_is "zproxy_mirror_streams_total{mirror=\"127.0.0.1:$CPORT\"}" "$CONNS" "$what"
	"$ZP_LOGSEND" verify --raw --streams --exactly-once --conns "$CONNS" \
	    --msgs "$MSGS" "$T/a-$mode.mir"/conn-*.raw >"$T/a-$mode.verify" 2>&1 ||
		fail "$what: the mirror's streams: $(tr '\n' ' ' <"$T/a-$mode.verify")"
	ok "$what ($(grep -o ', max-conns [0-9]*' "$ZLOG" | head -n 1 | cut -c3-)): $CONNS clients, every stream whole at the mirror, none dropped, no EMFILE"
}

# b. --max-conns beyond the budget: losses, each counted
beyond() {
	local what="$mode: ulimit -n $NOFILE, --max-conns 200, one mirror"
	local streams dropped files empty full
	set_mode "$mode"
	run "b-$mode" --max-conns 200
	streams=$(val "zproxy_mirror_streams_total{mirror=\"127.0.0.1:$CPORT\"}")
	dropped=$(val "zproxy_mirror_dropped_total{mirror=\"127.0.0.1:$CPORT\"}")
	files=$(ls "$T/b-$mode.mir" | wc -l)
	empty=$(find "$T/b-$mode.mir" -name 'conn-*.raw' -size 0 | wc -l)
	full=$(whole "$T/b-$mode.mir")
	note "$what: streams_total $streams, dropped_total $dropped; the mirror: $files connections, $empty empty, $full whole; $(grep -c 'Too many open files' "$ZLOG") EMFILE line(s)"
	[ "$dropped" -gt 0 ] ||
		note "$what: no mirror stream was lost this time; the counts are checked all the same"
	[ "$empty" = 0 ] ||
		fail "$what: $empty mirror connections carried nothing (streams_total $streams, dropped_total $dropped)"
	[ "$files" = "$streams" ] ||
		fail "$what: the mirror got $files connections, zproxy_mirror_streams_total says $streams"
	[ "$full" = $((CONNS - dropped)) ] ||
		fail "$what: $full streams whole at the mirror, want $CONNS - dropped_total $dropped"
	"$ZP_LOGSEND" verify --raw --runs --conns "$CONNS" --msgs "$MSGS" \
	    "$T/b-$mode.mir"/conn-*.raw >"$T/b-$mode.verify" 2>&1 ||
		fail "$what: the mirror's streams: $(tr '\n' ' ' <"$T/b-$mode.verify")"
	ok "$what: every lost stream counted as dropped ($dropped), none counted as mirrored without reaching the mirror ($streams streams, $full whole)"
}

for mode in $MODES; do
	subcase derived
	subcase beyond
done

zp_done
