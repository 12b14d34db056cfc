#!/bin/bash
# ctl.sh - zproxy ctl over --control (issue 27, section 1): a running
# zproxy is looked at and changed without a restart.
#   a. drain, with real collectors, in each mode (ZP_MODES) and both
#      framings: lf with rsyslog drained and syslog-ng beside it, octet
#      with syslog-ng (syslog() source) drained and rsyslog beside it.
#      zproxy --framing F --balance roundrobin --rebalance-rate 10 (no
#      --rebalance); CONNS connections of MSGS numbered messages (zp-
#      logsend send) pause at half, each stream idle at a message
#      boundary; `ctl set upstream A state drain`: `ctl show streams A`
#      is empty within CONNS / 10 s plus a margin (the wait is noted;
#      idle streams move too), `show upstreams` says drain and 0
#      streams; then the sender goes on: every message arrived exactly once, each
#      connection's in order in each file (zp-logsend verify --ordered)
#      and all of a connection's messages on A before any on B (nothing
#      goes back without --rebalance); the sender made CONNS connects
#      and read each to EOF (no client reconnected); one "moved:" line a
#      stream that was on A, reason=drain, cut=0; the drained collector
#      logged no error (clean closes); /metrics counts the drain moves.
#      Then `state ready`: new clients go to A again.
#   b. show, --json, weight, move, maint without --framing (zp-peer
#      sinks for upstreams, bash /dev/tcp clients):
#      show upstreams/streams in text and JSON (jq) name what runs;
#      weight 3 on A: 40 new clients split 30/10 (smooth round robin);
#      weight 0 on A: none of 10 go to A; maint on B with --drain-timeout
#      2: B's streams are closed (EOF to their clients) after about 2 s,
#      A's stay open and answer, new clients go to A only; framed move:
#      `move ID B` moves one stream (reason=ctl), `move ID` to a drained
#      upstream or of an unknown id fails with exit 1 and one line.
#   b2. add and del: `add upstream B weight 1` to a zproxy of one
#      upstream: listed ready, 2 of 4 new clients go there, a second add
#      is refused; `del` is refused while streams are on it (the answer
#      says how many and to use maint); in maint its framed streams move
#      off, then del removes it (no longer listed); added again as
#      weight 2, backup; a name is refused without --resolve-interval,
#      and with it `add upstream localhost:PORT` is looked up at once;
#      add, weight 3, weight 0 and del in a loop beside zp-peer churn at
#      1,000 connections a second for 5 s: every connection answered
#      (no reset, bad, timeout or error).
#   c. the socket under abuse, zproxy as --user (ZP_USER) with the
#      sandbox: a bad hello, a command of 5,000 bytes, 20 words, an
#      unknown verb, each one failed answer (the long one also closed);
#      a client that says nothing is closed after 10 s (not before 9);
#      ctl as a user who is not the socket's owner is refused by the
#      file's permissions (exit 1, one line); zproxy serves on, its log
#      clean.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
command -v jq >/dev/null || fail "jq is needed (apt-get install jq)"
note "$(collector_versions)"

CONNS=${ZP_CTL_CONNS:-20}
MSGS=${ZP_CTL_MSGS:-1000}
RATE=10

# ctl ARGS...: zproxy ctl on this test's socket; output in $T/ctl.out,
# errors in $T/ctl.err, status returned.
ctl() {
	"$ZPROXY" ctl --control "$CTL" "$@" >"$T/ctl.out" 2>"$T/ctl.err"
}

# ctl_ok ARGS...: ctl must succeed.
ctl_ok() {
	ctl "$@" || fail "zproxy ctl $*: status $?: $(head -c 300 "$T/ctl.err")"
}

# streams_on NAME: how many streams `show streams NAME` lists.
streams_on() {
	ctl_ok --json show streams "$1"
	jq length "$T/ctl.out"
}

# ---- a. drain with real collectors -------------------------------------

case_drain() {
	local mode=$1 fr=$2 akind=$3 bkind=$4 what name go spid apid aport
	local alog bpid bport blog A B na t0 waited moves bad rc v
	what="$mode, $fr: drain $akind, $bkind beside it"
	name=drain-$mode-$fr
	zp_user_dir "$T"
	go=$T/$name.go
	set_mode "$mode"
	start_collector "$akind" "$name-a" "" "$fr"
	apid=$C_PID aport=$C_PORT alog=$C_LOG
	start_collector "$bkind" "$name-b" "" "$fr"
	bpid=$C_PID bport=$C_PORT blog=$C_LOG
	A="127.0.0.1:$aport" B="127.0.0.1:$bport"
	CTL=$T/$name.ctl
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" --framing "$fr" \
	    --balance roundrobin --rebalance-rate "$RATE" --control "$CTL" \
	    --stats "127.0.0.1:$SPORT" -u "$A" -u "$B"
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$CONNS" --msgs "$MSGS" --framing "$fr" --seed "$RANDOM" \
	    --pause-at $((MSGS / 2)) --go "$go" --timeout 120
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$what: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	na=$(streams_on "$A")
	[ "$na" -ge 1 ] && [ "$(streams_on "$B")" -ge 1 ] ||
		fail "$what: at the pause $na streams on $A, $(streams_on "$B") on $B: want some on each"
	ctl_ok set upstream "$A" state drain
	grep -q "state drain (was ready), $na stream(s) on it; its streams move" "$T/ctl.out" ||
		fail "$what: set state drain said: $(cat "$T/ctl.out")"
	t0=$(now_ms)
	until [ "$(streams_on "$A")" = 0 ]; do
		[ $(( $(now_ms) - t0 )) -lt $(( (CONNS / RATE + 20) * 1000 )) ] ||
			fail "$what: $(streams_on "$A") streams still on $A $(( CONNS / RATE + 20 )) s after the drain"
		sleep 0.1
	done
	waited=$(( $(now_ms) - t0 ))
	ok "$what: the $na streams on $A left it in $waited ms (--rebalance-rate $RATE)"
	: >"$go"
	note "$what: $na streams drained in $waited ms"
	ctl_ok --json show upstreams
	v=$(jq -r --arg a "$A" '.[] | select(.name == $a) | "\(.state) \(.streams)"' "$T/ctl.out")
	[ "$v" = "drain 0" ] || fail "$what: show upstreams says $A is '$v', want 'drain 0'"

	peer_wait "$spid" "$name.send" 120
	rc=$?
	[ "$rc" = 0 ] || fail "$what: the sender failed (status $rc): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$what" "$name" "$CONNS" "$MSGS"
	wait_lines "$alog" 1 5
	settle "$alog" 20
	settle "$blog" 20
	logsend_verify "$what" "$name" "$CONNS" "$MSGS" --framing "$fr" \
	    --exactly-once --ordered "$alog" "$blog"
	ok "$what: $CONNS x $MSGS messages exactly once, in order in each file ($VERIFIED); $CONNS connects, each read to EOF"
	# A connection's last message on A comes before its first on B.
	bad=$(awk '
	match($0, /(^| )c=[0-9]+ s=[0-9]+ /) {
		split(substr($0, RSTART, RLENGTH), f, /[ =]/)
		for (i = 1; i in f; i++) {
			if (f[i] == "c") c = f[i + 1]
			if (f[i] == "s") s = f[i + 1] + 0
		}
		if (FILENAME == ARGV[1]) { if (!(c in a) || s > a[c]) a[c] = s }
		else if (!(c in b) || s < b[c]) b[c] = s
	}
	END { for (c in a) if ((c in b) && b[c] < a[c]) { print "c=" c " A to s=" a[c] " B from s=" b[c]; exit } }
	' "$alog" "$blog")
	[ -z "$bad" ] || fail "$what: a stream went back to the drained collector: $bad"

	grep 'connection [0-9]* moved:' "$ZLOG" >"$T/$name.moves"
	moves=$(grep -c . "$T/$name.moves")
	[ "$moves" = "$na" ] ||
		fail "$what: $moves move lines, $na streams were on $A: $(head -n 3 "$T/$name.moves")"
	bad=$(grep -v -m 1 " from=$A to=$B reason=drain .* cut=0 " "$T/$name.moves")
	[ -z "$bad" ] || fail "$what: a move that is not a clean drain from $A to $B: $bad"
	! grep -q 'could not move' "$ZLOG" || fail "$what: $(grep -m 1 'could not move' "$ZLOG")"
	! grep -qiE 'error|reset' "$T/$name-a.err" ||
		fail "$what: the drained $akind logged: $(grep -m 2 -iE 'error|reset' "$T/$name-a.err")"
	ok "$what: one move a stream, from $A to $B, reason=drain, cut=0; $akind logged no error"
	stats_scrape "$SPORT"
	v=$(series 'zproxy_stream_moves_total{reason="drain"}')
	[ "$v" = "$na" ] || fail "$what: zproxy_stream_moves_total{reason=\"drain\"} is '$v', want $na"

	# Ready again: the next client goes there (round robin, one each).
	ctl_ok set upstream "$A" state ready
	"$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" --conns 2 --msgs 10 \
	    --framing "$fr" --seed 7 >"$T/$name.send2.out" 2>&1 ||
		fail "$what: 2 clients after ready: $(tail -n 1 "$T/$name.send2.out")"
	t0=$(now_ms)
	until [ "$(conn_lines)" -ge $((CONNS + 2)) ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] ||
			fail "$what: the 2 clients after ready were not logged"
		sleep 0.05
	done
	grep ' conn=[0-9]' "$ZLOG" | tail -n 2 | grep -q " upstream=$A " ||
		fail "$what: after state ready neither new client went to $A: $(grep ' conn=[0-9]' "$ZLOG" | tail -n 2 | tr '\n' ' ')"
	ok "$what: state ready: new clients go to $A again"
	stop_zproxy
	kill_collector "$apid" "$aport" "$what: $akind"
	kill_collector "$bpid" "$bport" "$what: $bkind"
}

# ---- b. show, weight, maint, move ------------------------------------------

# client_open VAR: a bash /dev/tcp connection to zproxy in fd VAR.
client_open() {
	local _cfd
	exec {_cfd}<>"/dev/tcp/127.0.0.1/$ZPORT" || fail "connect to zproxy"
	printf -v "$1" '%s' "$_cfd"
}

# clients N: N clients connect and close at once; until zproxy logged
# N more connections (from ZP_SEEN: skip_conn_logs first).
clients() {
	local i fd t0
	for i in $(seq 1 "$1"); do
		exec {fd}<>"/dev/tcp/127.0.0.1/$ZPORT" && exec {fd}>&-
	done
	t0=$(now_ms)
	until [ $(( $(conn_lines) - ZP_SEEN )) -ge "$1" ]; do
		[ $(( $(now_ms) - t0 )) -lt 20000 ] ||
			fail "$what: $1 clients not logged within 20 s"
		sleep 0.05
	done
}

# two_sinks: two upstreams that read and discard, hold every connection
# until its peer closes, and never close first; their addresses in A, B.
two_sinks() {
	peer_listen sinkA -n 0 -t 0 --no-shut --allow-reset
	A="127.0.0.1:$PEER_PORT"
	peer_listen sinkB -n 0 -t 0 --no-shut --allow-reset
	B="127.0.0.1:$PEER_PORT"
}

# upstream_of ID: the upstream show streams names for stream ID.
upstream_of() {
	ctl_ok --json show streams
	jq -r --argjson id "$1" '.[] | select(.id == $id) | .upstream' "$T/ctl.out"
}

case_controls() {
	local what="show, weight, maint, move" A B fds=() fd n i ids
	local nA nB t0 line v
	zp_user_dir "$T"
	two_sinks
	CTL=$T/controls.ctl
	start_zproxy -v --control "$CTL" --drain-timeout 2 -u "$A" -u "$B"
	for i in 1 2 3 4; do
		client_open fd
		fds+=("$fd")
		echo "hello $i" >&"$fd"
	done
	n=0
	t0=$(now_ms)
	until [ "$n" = 4 ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: show streams lists $n of 4"
		ctl_ok --json show streams
		n=$(jq length "$T/ctl.out")
	done
	ctl_ok show streams
	[ "$(grep -c ' relaying$' "$T/ctl.out")" = 4 ] && head -n 1 "$T/ctl.out" | grep -q '^ID .*STATE$' ||
		fail "$what: show streams: $(cat "$T/ctl.out")"
	ctl_ok --json show upstreams
	v=$(jq -r '[.[] | "\(.name)=\(.state),\(.weight),\(.backup),\(.streams)"] | join(" ")' "$T/ctl.out")
	[ "$v" = "$A=ready,1,false,2 $B=ready,1,false,2" ] ||
		fail "$what: show upstreams --json: $v"
	ctl_ok show upstreams
	grep -q "^$A .* ready  *1  *no  *2 " "$T/ctl.out" ||
		fail "$what: show upstreams: $(cat "$T/ctl.out")"
	ok "$what: show streams and upstreams, text and JSON: 4 streams, 2 on each"

	# weight 3 on A: smooth round robin gives 3 of every 4 to A
	ctl_ok set upstream "$A" weight 3
	grep -q "weight 3 (was 1)" "$T/ctl.out" || fail "$what: weight: $(cat "$T/ctl.out")"
	skip_conn_logs
	clients 40
	nA=$(grep ' conn=[0-9]' "$ZLOG" | tail -n 40 | grep -c " upstream=$A ")
	nB=$(grep ' conn=[0-9]' "$ZLOG" | tail -n 40 | grep -c " upstream=$B ")
	[ "$nA" = 30 ] && [ "$nB" = 10 ] ||
		fail "$what: weights 3:1 gave $nA to A and $nB to B of 40"
	ok "$what: set weight 3 on A: 40 clients split $nA/$nB"
	ctl_ok set upstream "$A" weight 0
	skip_conn_logs
	clients 10
	nA=$(grep ' conn=[0-9]' "$ZLOG" | tail -n 10 | grep -c " upstream=$A ")
	[ "$nA" = 0 ] || fail "$what: weight 0, yet $nA of 10 clients went to A"
	ok "$what: set weight 0 on A: none of 10 clients went there"
	ctl_ok set upstream "$A" weight 1

	# maint on B: its unframed streams close after --drain-timeout
	ctl_ok --json show streams "$B"
	ids=$(jq -r '.[].id' "$T/ctl.out" | tr '\n' ' ')
	t0=$(now_ms)
	ctl_ok set upstream "$B" state maint
	grep -q "its streams close after --drain-timeout" "$T/ctl.out" ||
		fail "$what: maint said: $(cat "$T/ctl.out")"
	client_open fd
	fds+=("$fd")
	until [ "$(streams_on "$B")" = 0 ]; do
		[ $(( $(now_ms) - t0 )) -lt 15000 ] || fail "$what: B's streams still open 15 s after maint"
		sleep 0.1
	done
	v=$(( $(now_ms) - t0 ))
	[ "$v" -ge 1500 ] || fail "$what: B's streams closed after $v ms, before --drain-timeout 2"
	n=0
	for fd in "${fds[@]}"; do
		# A closed one reads EOF at once; an open one times out.
		if read -r -t 0.2 line <&"$fd"; then
			fail "$what: a client read '$line'"
		elif [ $? -le 128 ]; then
			n=$((n + 1))
		fi
	done
	[ "$n" = 2 ] || fail "$what: $n clients saw EOF after maint, want B's 2 (ids $ids)"
	[ "$(streams_on "$A")" = 3 ] || fail "$what: A holds $(streams_on "$A") streams, want 3 (2 and the one after maint)"
	grep -q "maint: closed 2 stream(s)" "$ZLOG" || fail "$what: no 'maint: closed 2' line"
	ok "$what: maint on B: its 2 streams closed after $v ms (--drain-timeout 2), A's 3 open, the new client on A"
	for fd in "${fds[@]}"; do exec {fd}>&-; done
	stop_zproxy

	# move, framed
	CTL=$T/move.ctl
	start_zproxy -v --control "$CTL" --framing lf -u "$A" -u "$B"
	client_open fd
	echo "one" >&"$fd"
	t0=$(now_ms)
	until [ "$(upstream_of 1)" = "$A" ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: stream 1 is on '$(upstream_of 1)', want $A"
		sleep 0.05
	done
	ctl_ok move 1 "$B"
	grep -q "stream 1 is moving" "$T/ctl.out" || fail "$what: move said: $(cat "$T/ctl.out")"
	t0=$(now_ms)
	while [ "$(upstream_of 1)" != "$B" ]; do
		echo "tick" >&"$fd"
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: stream 1 is on $(upstream_of 1) 10 s after move"
		sleep 0.1
	done
	grep -q "connection 1 moved: .* from=$A to=$B reason=ctl " "$ZLOG" ||
		fail "$what: no reason=ctl move line: $(grep -m 1 'moved:' "$ZLOG")"
	ctl_ok set upstream "$A" state drain
	ctl move 1 "$A" && fail "$what: a move to a drained upstream succeeded"
	grep -q "is drain: no stream moves there" "$T/ctl.err" ||
		fail "$what: move to drained: $(cat "$T/ctl.err")"
	ctl move 99 && fail "$what: a move of an unknown stream succeeded"
	[ "$(cat "$T/ctl.err")" = "zproxy ctl: no stream 99" ] ||
		fail "$what: move 99: $(cat "$T/ctl.err")"
	ok "$what: move 1 to B (reason=ctl); to a drained upstream and of stream 99: refused, one line"
	exec {fd}>&-
	stop_zproxy
}

# ---- b2. add and del ---------------------------------------------------------

# upstream_field NAME FIELD: FIELD of upstream NAME in show upstreams
# --json ("" when it is not listed).
upstream_field() {
	ctl_ok --json show upstreams
	jq -r --arg n "$1" --arg f "$2" '.[] | select(.name == $n) | .[$f]' "$T/ctl.out"
}

# wait_streams NAME N SECS WHY: until show upstreams says N streams on
# NAME; fail (saying WHY) after SECS.
wait_streams() {
	local t0
	t0=$(now_ms)
	until [ "$(upstream_field "$1" streams)" = "$2" ]; do
		[ $(( $(now_ms) - t0 )) -lt $(($3 * 1000)) ] ||
			fail "$what: $1 holds $(upstream_field "$1" streams) streams $4, want $2"
		sleep 0.05
	done
}

case_add_del() {
	local what="add and del" A B t0 fds=() fd i v
	zp_user_dir "$T"
	two_sinks
	CTL=$T/add.ctl
	start_zproxy -v --control "$CTL" --framing lf -u "$A"
	ctl_ok add upstream "$B" weight 1
	[ "$(cat "$T/ctl.out")" = "upstream $B added: weight 1" ] ||
		fail "$what: add said: $(cat "$T/ctl.out")"
	v=$(upstream_field "$B" state),$(upstream_field "$B" weight),$(upstream_field "$B" address)
	[ "$v" = "ready,1,$B" ] || fail "$what: the added upstream shows as $v"
	ctl add upstream "$B" && fail "$what: adding $B twice succeeded"
	grep -q "upstream $B exists" "$T/ctl.err" || fail "$what: $(cat "$T/ctl.err")"
	for i in 1 2 3 4; do
		client_open fd
		fds+=("$fd")
		echo "m$i" >&"$fd"
	done
	wait_streams "$B" 2 10 "of 4 new clients on the added upstream"
	ok "$what: add upstream $B: listed ready, weight 1; 2 of 4 new clients on it; a second add refused"
	ctl del upstream "$B" && fail "$what: del of an upstream with streams succeeded"
	grep -q "has 2 stream(s) on it: put it in maint" "$T/ctl.err" ||
		fail "$what: del with streams said: $(cat "$T/ctl.err")"
	ctl_ok set upstream "$B" state maint
	wait_streams "$B" 0 15 "in maint"
	ctl_ok del upstream "$B"
	[ -z "$(upstream_field "$B" name)" ] || fail "$what: $B still listed after del"
	ok "$what: del refused while 2 streams were on $B; in maint they moved to $A, then del removed it"
	ctl_ok add upstream "$B" weight 2 backup
	v=$(upstream_field "$B" weight),$(upstream_field "$B" backup)
	[ "$v" = "2,true" ] || fail "$what: $B added again shows $v"
	ctl add upstream "not-a-host.invalid:514" && fail "$what: a name without --resolve-interval was added"
	grep -q "a name is looked up only with --resolve-interval" "$T/ctl.err" ||
		fail "$what: add of a name said: $(cat "$T/ctl.err")"
	ok "$what: $B added again as weight 2, backup; a name refused without --resolve-interval"
	for fd in "${fds[@]}"; do exec {fd}>&-; done
	stop_zproxy

	# A name, looked up at once with --resolve-interval.
	CTL=$T/add-name.ctl
	start_zproxy -v --control "$CTL" --resolve-interval 60 -u "$A"
	ctl_ok add upstream "localhost:${B##*:}"
	grep -q "down until its name is looked up and it answers" "$T/ctl.out" ||
		fail "$what: add of a name said: $(cat "$T/ctl.out")"
	t0=$(now_ms)
	until v=$(upstream_field "localhost:${B##*:}" address) && [ "$v" != "-" ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: localhost not looked up within 10 s"
		sleep 0.1
	done
	case $v in
	127.0.0.1:"${B##*:}"*|"[::1]:${B##*:}"*) ;;
	*) fail "$what: localhost looked up as $v" ;;
	esac
	ok "$what: add upstream localhost:${B##*:} with --resolve-interval: looked up at once ($v)"
	stop_zproxy
}

# add, weight and del while clients come and go at 1,000 a second.
case_churn() {
	local what="add, weight, del under 1,000 connections a second" A B
	local cpid n=0 t0 out
	zp_user_dir "$T"
	peer_listen echoA --echo -n 0 -t 0 --allow-reset
	A="127.0.0.1:$PEER_PORT"
	peer_listen echoB --echo -n 0 -t 0 --allow-reset
	B="127.0.0.1:$PEER_PORT"
	CTL=$T/churn.ctl
	start_zproxy --control "$CTL" -u "$A"
	zp_bg churn "$ZP_PEER" churn 127.0.0.1 "$ZPORT" --rate 1000 --duration 5
	cpid=$BG_PID
	t0=$(now_ms)
	while alive "$cpid" && [ $(( $(now_ms) - t0 )) -lt 4500 ]; do
		ctl_ok add upstream "$B"
		ctl_ok set upstream "$B" weight 3
		ctl_ok set upstream "$B" weight 0
		# Its last clients end within a moment: del once it is empty.
		until ctl del upstream "$B"; do
			grep -q "stream(s) on it" "$T/ctl.err" ||
				fail "$what: del: $(cat "$T/ctl.err")"
			[ $(( $(now_ms) - t0 )) -lt 15000 ] || fail "$what: $B never emptied"
			sleep 0.01
		done
		n=$((n + 1))
	done
	peer_wait "$cpid" churn 30 || fail "$what: $(tail -n 2 "$T/churn.err")"
	out=$(tail -n 1 "$T/churn.out")
	case $out in
	*" reset=0 bad=0 timeout=0 error=0 "*) ;;
	*) fail "$what: churn said: $out" ;;
	esac
	[ "$n" -ge 3 ] || fail "$what: only $n rounds of add, weight, del"
	grep -q "upstream $B added" "$ZLOG" || fail "$what: no 'added' line"
	ok "$what: $n rounds of add, weight 3, weight 0, del beside churn: $out"
	zproxy_alive "after the churn"
	stop_zproxy
}

# ---- c. abuse ---------------------------------------------------------------

# raw_ctl TEXT: send TEXT as one message on the socket, print what came.
raw_ctl() {
	printf '%s' "$1" | timeout 15 socat -t 1 - "UNIX-CONNECT:$CTL,type=5" 2>&1 | tr -d '\0'
}

case_abuse() {
	local what="the socket under abuse" out t0 el owner other
	zp_user_dir "$T"
	peer_listen sinkC -n 0 -t 0 --no-shut --allow-reset
	CTL=$T/abuse.ctl
	start_zproxy -v --control "$CTL" -u "127.0.0.1:$PEER_PORT"
	out=$(raw_ctl "hello there")
	[ "$out" = "1not a zproxy ctl command" ] || fail "$what: a bad hello got '$out'"
	out=$(raw_ctl "zproxy-ctl 1
$(head -c 5000 /dev/zero | tr '\0' x)")
	[ "$out" = "1a command longer than 1024 bytes" ] || fail "$what: 5000 bytes got '$out'"
	out=$(raw_ctl "zproxy-ctl 1
show a b c d e f g h i")
	[ "$out" = "1too many words" ] || fail "$what: 10 words got '$out'"
	ctl frobnicate && fail "$what: an unknown verb succeeded"
	grep -q 'unknown command "frobnicate"' "$T/ctl.err" || fail "$what: $(cat "$T/ctl.err")"
	ok "$what: a bad hello, 5000 bytes, 10 words, an unknown verb: one failed answer each"
	t0=$(now_ms)
	timeout 30 socat -u "UNIX-CONNECT:$CTL,type=5" - >/dev/null 2>&1
	el=$(( $(now_ms) - t0 ))
	[ "$el" -ge 9000 ] && [ "$el" -lt 25000 ] ||
		fail "$what: a silent client was closed after $el ms, want about 10 s"
	grep -q "said nothing for 10 s: closed" "$ZLOG" || fail "$what: no line for the silent client"
	ok "$what: a silent client closed after $el ms"
	owner=$(stat -c %u "$CTL")
	other=65534
	[ "$owner" = 65534 ] && other=1
	# A copy of the binary the other user can run, in a folder it can
	# enter; the socket stays 0600.
	chmod 0755 "$ZP_T0" "$T" || fail "chmod $T"
	cp "$ZPROXY" "$T/zproxy-copy" && chmod 0755 "$T/zproxy-copy" ||
		fail "cp $ZPROXY"
	setpriv --reuid "$other" --regid "$other" --clear-groups \
	    "$T/zproxy-copy" ctl --control "$CTL" show upstreams >"$T/ctl.out" 2>"$T/ctl.err" &&
		fail "$what: uid $other got an answer from a socket of uid $owner"
	grep -q "Permission denied (the socket is its user's, mode 0600)" "$T/ctl.err" ||
		fail "$what: uid $other: $(cat "$T/ctl.err")"
	[ "$(stat -c %a "$CTL")" = 600 ] || fail "$what: the socket's mode is $(stat -c %a "$CTL")"
	ok "$what: uid $other refused by the socket's mode 600 (owner uid $owner)"
	ctl_ok show upstreams
	zproxy_alive "after the abuse"
	stop_zproxy
}

# ZP_CTL_CASES: some of drain controls add_del churn abuse (all).
want() { case " ${ZP_CTL_CASES:-drain controls add_del churn abuse} " in *" $1 "*) return 0 ;; esac; return 1; }
# The churn first, alone: 1,000 connections a second beside the drains'
# collectors starved a sanitized zproxy into 10 s timeouts.
want churn && subcase case_churn
if want drain; then
	for mode in $MODES; do
		subcase_bg case_drain "$mode" lf rsyslog syslog-ng
		subcase_bg case_drain "$mode" octet syslog-ng rsyslog
	done
fi
for c in controls add_del abuse; do
	want "$c" && subcase_bg "case_$c"
done
subcases_wait
zp_done
