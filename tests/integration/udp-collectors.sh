#!/bin/bash
# udp-collectors.sh - syslog over UDP (issue 28) with real programs on
# both sides: util-linux's logger --udp and syslog-ng's loggen --dgram as
# the devices, rsyslog (imtcp) and syslog-ng as the collectors, and
# zp-logsend dgram for numbered, CRC'd messages from several addresses.
# In splice and copy mode:
#   a. logger --udp and 5 sources of zp-logsend (127.0.0.2-6) -> zproxy ->
#      rsyslog imtcp: logger's message arrives; every numbered message
#      once, in order per source (the octet-framed streams, as rsyslog
#      reads them);
#   b. loggen --dgram -> zproxy --send-proxy v1 --framing lf -> syslog-ng
#      network(transport("proxied-tcp")), which reads lines:
#      as many messages as loggen says it sent, each sequence number once,
#      ${PROXIED_SRCIP} 127.0.0.1 on each; then 3 sources from 127.0.0.2-4:
#      each message's PROXIED_SRCIP is its own source's;
#   c. --replay-window 1M, collectors A and B (zp-logsend collect; A holds
#      its last 20000 bytes of each connection in memory, --lag): A is
#      killed (SIGKILL) mid-run: every message reaches A or B at least
#      once, each file a run of one source's messages in order;
#   d. --spool --send-proxy v2, the only collector down: the streams
#      spool, and once it listens everything reaches it, each message
#      once, in order, each file after a v2 header saying DGRAM;
#   e. --mirror: the mirror gets every message too, once, in order;
#   f. a planned move whose next upstream fails while the old one still
#      retires: A (zp-peer --hold: it keeps its connection after
#      zproxy's FIN) is drained with zproxy ctl, and the stream moves to B
#      at a boundary; B resets it after 3000 bytes and is gone, A takes
#      nothing new, so the stream waits for an upstream. A closes during
#      that wait: the stream goes on (no "Bad file descriptor", no other
#      stream), and once a collector listens on B's port every message
#      has reached A, B or it, at least once (--replay-window 1M).
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
LOGGEN=$(command -v loggen) || fail "loggen not found: install syslog-ng-core"
command -v logger >/dev/null || fail "logger not found: install bsdutils"

MSGS=${ZP_UDPC_MSGS:-500}
RATE=1000

# collect NAME [ARGS...]: a zp-logsend collector writing $T/NAME/conn-N.raw;
# sets COL_PID, COL_PORT.
collect() {
	local name=$1
	shift
	mkdir -p "$T/$name"
	zp_bg "$name.collect" "$ZP_LOGSEND" collect --dir "$T/$name" "$@"
	COL_PID=$BG_PID
	COL_PORT=$(wait_line "$T/$name.collect.out" '^[0-9]+$' 10 "$COL_PID") ||
		fail "zp-logsend collect $name did not start: $(head -c 300 "$T/$name.collect.err")"
}

# start_udp ARGS...: zproxy on udp@127.0.0.1 (a free port, ZPORT) and
# --stats (SPORT), with ARGS.
start_udp() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@127.0.0.1:@PORT@" \
	    --stats "127.0.0.1:$SPORT" "$@"
}

# dgram NAME SOURCES MSGS [ARGS...]: zp-logsend dgram from 127.0.0.2 on.
dgram() {
	local name=$1 n=$2 m=$3
	shift 3
	timeout -k 5 120 "$ZP_LOGSEND" dgram 127.0.0.1 "$ZPORT" --conns "$n" \
	    --msgs "$m" --rate "$RATE" --max 1000 --from 127.0.0.2 "$@" \
	    >"$T/$name.out" 2>"$T/$name.err" ||
		fail "$name: the sender failed: $(tail -n 2 "$T/$name.err")"
}

# files DIR...: their non-empty conn-*.raw files.
files() {
	local d f
	for d in "$@"; do
		for f in "$T/$d"/conn-*.raw; do [ -s "$f" ] && echo "$f"; done
	done
}

# wait_grep FILE PATTERN N SECS: until FILE has N lines matching PATTERN.
wait_grep() {
	local deadline=$(( $(now_ms) + $4 * 1000 ))
	until [ "$(grep -ac -- "$2" "$1" 2>/dev/null)" -ge "$3" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$(grep -ac -- "$2" "$1" 2>/dev/null) lines of '$2' in ${1##*/} after ${4}s, want $3"
		sleep 0.05
	done
}

# wait_bytes DIR... -- BYTES SECS: until the DIRs' files hold BYTES.
wait_bytes() {
	local dirs=() have deadline
	while [ "$1" != -- ]; do dirs+=("$1"); shift; done
	deadline=$(( $(now_ms) + $3 * 1000 ))
	while :; do
		have=0
		for d in "${dirs[@]}"; do
			have=$((have + $(cat "$T/$d"/conn-*.raw 2>/dev/null | wc -c)))
		done
		[ "$have" -ge "$2" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "${dirs[*]}: $have bytes after ${3}s, want $2"
		sleep 0.05
	done
}

case_rsyslog() {
	local mode=$1 what="$1: logger and 5 sources -> rsyslog imtcp" msg
	set_mode "$mode"
	start_collector rsyslog "r-$mode"
	start_udp -u "127.0.0.1:$C_PORT"
	msg="logger-$mode-$RANDOM$RANDOM"
	logger --udp --server 127.0.0.1 --port "$ZPORT" -t zptest "$msg" ||
		fail "$what: logger failed"
	dgram "r-$mode" 5 "$MSGS"
	wait_grep "$C_LOG" ' c=' $((5 * MSGS)) 30
	grep -q -- "$msg" "$C_LOG" || fail "$what: logger's message did not arrive"
	stop_zproxy
	grep -a ' c=' "$C_LOG" >"$T/r-$mode.numbered"
	"$ZP_LOGSEND" verify -v --exactly-once --ordered --conns 5 \
	    --msgs "$MSGS" "$T/r-$mode.numbered" >"$T/r-$mode.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/r-$mode.verify" | tr '\n' ' ')"
	ok "$what: logger's line, and every message once, in order per source: $(grep '^sent=' "$T/r-$mode.verify")"
}

# start_pp NAME: syslog-ng network(transport("proxied-tcp")) writing
# "src=PROXIED_SRCIP msg=MSG" lines to $T/NAME.log; sets PP_PORT.
start_pp() {
	local name=$1 d=$T/$1.d
	mkdir -p "$d"
	for _ in 1 2 3 4 5; do
		PP_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
		cat >"$d/syslog-ng.conf" <<-EOF
		@version: 3.38
		options { use_dns(no); use_fqdn(no); dns_cache(no); stats_freq(0);
		          flush_lines(1); keep_hostname(yes); log_msg_size(65536); };
		source s_pp { network(ip("127.0.0.1") port($PP_PORT)
		    transport("proxied-tcp") max_connections(100)
		    log_iw_size(100000)); };
		destination d_file { file("$T/$name.log" flush_lines(1) fsync(no)
		    template("src=\${PROXIED_SRCIP} msg=\${MSG}\n")); };
		log { source(s_pp); destination(d_file); flags(flow-control); };
		EOF
		zp_bg "$name" "$SYSLOG_NG" -F -e --no-caps -f "$d/syslog-ng.conf" \
		    -R "$d/persist" -p "$d/pid" -c "$d/ctl"
		local deadline=$(( $(now_ms) + 10000 ))
		while alive "$BG_PID" && ! listening "$PP_PORT"; do
			[ "$(now_ms)" -ge "$deadline" ] &&
				fail "syslog-ng does not listen on $PP_PORT"
			sleep 0.02
		done
		alive "$BG_PID" && return 0
		grep -qiE 'in use|bind' "$T/$name.err" && continue
		fail "syslog-ng exited at start-up: $(head -c 400 "$T/$name.err")"
	done
	fail "syslog-ng: no free port after 5 tries"
}

case_loggen() {
	local mode=$1 what="$1: loggen -> zproxy --send-proxy v1 -> syslog-ng proxied-tcp"
	local count n bad
	set_mode "$mode"
	start_pp "p-$mode"
	# network() reads lines: one a datagram
	start_udp -u "127.0.0.1:$PP_PORT" --send-proxy v1 --framing lf
	timeout 30 "$LOGGEN" --dgram --rate 2000 --interval 2 --size 200 \
	    127.0.0.1 "$ZPORT" >"$T/loggen-$mode.out" 2>&1 ||
		fail "$what: loggen failed: $(tail -n 2 "$T/loggen-$mode.out")"
	count=$(grep -o 'count=[0-9]*' "$T/loggen-$mode.out" | tail -n 1 | cut -d= -f2)
	[ -n "$count" ] && [ "$count" -gt 100 ] ||
		fail "$what: loggen sent '${count:-?}' messages: $(cat "$T/loggen-$mode.out")"
	wait_grep "$T/p-$mode.log" 'seq: ' "$count" 30
	n=$(grep -ao 'seq: [0-9]*' "$T/p-$mode.log" | sort -u | wc -l)
	[ "$n" = "$count" ] ||
		fail "$what: $n distinct sequence numbers of $count at syslog-ng"
	bad=$(grep -a 'seq: ' "$T/p-$mode.log" | grep -vc '^src=127\.0\.0\.1 ')
	[ "$bad" = 0 ] || fail "$what: $bad messages without PROXIED_SRCIP 127.0.0.1"
	dgram "p-$mode" 3 200
	wait_grep "$T/p-$mode.log" ' msg=c=' 600 30
	for i in 0 1 2; do
		n=$(grep -ac "^src=127\.0\.0\.$((i + 2)) msg=c=$i s=" "$T/p-$mode.log")
		[ "$n" = 200 ] ||
			fail "$what: $n of source $i's 200 messages name 127.0.0.$((i + 2))"
	done
	stop_zproxy
	ok "$what: loggen's $count messages each once, PROXIED_SRCIP 127.0.0.1; 3 sources' 600, each naming its own address"
}

case_replay() {
	local mode=$1 what="$1: collector A killed, --replay-window 1M" pa pb v
	set_mode "$mode"
	collect "a-$mode" --lag 20000
	pa=$COL_PORT
	local apid=$COL_PID
	collect "b-$mode"
	pb=$COL_PORT
	start_udp -u "127.0.0.1:$pa" -u "127.0.0.1:$pb" --balance first \
	    --replay-window 1M --drain-timeout 20
	RATE=500 dgram "rp1-$mode" 4 400 --seed 1 &
	local spid=$!
	wait_bytes "a-$mode" -- 100000 20
	kill -KILL "$apid"
	wait "$spid" || fail "$what: the sender failed"
	wait_bytes "b-$mode" -- 1 20
	# the drain delivers what the streams still hold to B
	stop_zproxy
	mapfile -t fs < <(files "a-$mode" "b-$mode")
	"$ZP_LOGSEND" verify -v --raw --runs --tail-ok --at-least-once \
	    --conns 4 --msgs 400 --framing octet "${fs[@]}" \
	    >"$T/rp-$mode.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/rp-$mode.verify" | tr '\n' ' ')"
	v=$(grep '^sent=' "$T/rp-$mode.verify")
	[ "$(grep -c 'moved: .* reason=upstream-failed' "$ZLOG")" -ge 1 ] ||
		fail "$what: no stream moved"
	ok "$what: the streams moved to B, every message at least once (A's held bytes replayed): $v"
}

case_spool() {
	local mode=$1 what="$1: --spool, the collector down" cp
	set_mode "$mode"
	cp=$(free_port) || fail "zp-peer port failed"
	mkdir -p "$T/spool-$mode"
	zp_user_dir "$T/spool-$mode"
	start_udp -u "127.0.0.1:$cp" --spool "$T/spool-$mode" --fail-timeout 1 \
	    --send-proxy v2
	dgram "s-$mode" 3 "$MSGS"
	wait_metric zproxy_spooled_bytes_total '>' 0 10 "$what: spooled"
	collect "s-$mode" --port "$cp"
	# each connection a v2 header (28 bytes) and its frames
	wait_bytes "s-$mode" -- "$(( $(field octet "$(cat "$T/s-$mode.out")") + 3 * 28 ))" 40
	stop_zproxy
	mapfile -t fs < <(files "s-$mode")
	mkdir -p "$T/s-$mode.body"
	for f in "${fs[@]}"; do
		# v2, PROXY, then 0x12: a UDP source's stream, spooled or not
		[ "$(od -An -tx1 -j 12 -N 2 "$f" | tr -d ' \n')" = 2112 ] ||
			fail "$what: ${f##*/}'s header is not v2 DGRAM: $(od -An -tx1 -N 16 "$f")"
		tail -c +29 "$f" >"$T/s-$mode.body/${f##*/}"
	done
	"$ZP_LOGSEND" verify -v --raw --runs --exactly-once --conns 3 \
	    --msgs "$MSGS" --framing octet "$T/s-$mode.body"/conn-*.raw \
	    >"$T/s-$mode.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/s-$mode.verify" | tr '\n' ' ')"
	ok "$what: spooled, then delivered once the collector listened, each file's PROXY v2 header DGRAM: $(grep '^sent=' "$T/s-$mode.verify")"
}

case_mirror() {
	local mode=$1 what="$1: --mirror" pp pm
	set_mode "$mode"
	collect "mp-$mode"
	pp=$COL_PORT
	collect "mm-$mode"
	pm=$COL_PORT
	start_udp -u "127.0.0.1:$pp" --mirror "127.0.0.1:$pm"
	dgram "m-$mode" 3 "$MSGS"
	wait_bytes "mm-$mode" -- "$(field octet "$(cat "$T/m-$mode.out")")" 30
	stop_zproxy
	for d in "mp-$mode" "mm-$mode"; do
		mapfile -t fs < <(files "$d")
		"$ZP_LOGSEND" verify -v --raw --streams --exactly-once --conns 3 \
		    --msgs "$MSGS" --framing octet "${fs[@]}" >"$T/$d.verify" 2>&1 ||
			fail "$what ($d): $(tail -n 3 "$T/$d.verify" | tr '\n' ' ')"
	done
	ok "$what: the collector and the mirror each got every message once, in order: $(grep '^sent=' "$T/mm-$mode.verify")"
}

case_retire() {
	local mode=$1 what="$1: the old upstream closes while the stream waits for one"
	local pa pb apid bpid spid ctl=$T/ctl-rt-$1.sock deadline fs
	set_mode "$mode"
	zp_bg "rta-$mode" "$ZP_PEER" listen --conns 1 --hold -t 0 \
	    -o "$T/rta-$mode.raw"
	apid=$BG_PID
	pa=$(wait_line "$T/rta-$mode.out" '^[0-9]+$' 10 "$apid") ||
		fail "$what: zp-peer A did not start"
	zp_bg "rtb-$mode" "$ZP_PEER" listen --conns 1 --reset-after-recv 3000 \
	    -t 0 -o "$T/rtb-$mode.raw"
	bpid=$BG_PID
	pb=$(wait_line "$T/rtb-$mode.out" '^[0-9]+$' 10 "$bpid") ||
		fail "$what: zp-peer B did not start"
	start_udp -u "127.0.0.1:$pa" -u "127.0.0.1:$pb" --balance first \
	    --replay-window 1M --drain-timeout 60 --control "$ctl"
	RATE=100 dgram "rt-$mode" 1 800 --seed 3 &
	spid=$!
	deadline=$(( $(now_ms) + 20000 ))
	until [ "$(stat -c %s "$T/rta-$mode.raw" 2>/dev/null || echo 0)" -ge 20000 ]; do
		[ "$(now_ms)" -lt "$deadline" ] || fail "$what: A got too little"
		sleep 0.05
	done
	"$ZPROXY" ctl --control "$ctl" set upstream "127.0.0.1:$pa" state drain \
	    >"$T/rt-ctl.out" 2>&1 || fail "$what: ctl: $(cat "$T/rt-ctl.out")"
	wait_grep "$ZLOG" "connection 1 moved: .*reason=drain" 1 20
	# B resets it and is gone; A takes nothing new: the stream waits
	wait_grep "$ZLOG" "connection 1 (UDP source .*no upstream takes it" 1 20
	kill -TERM "$apid"
	wait "$apid" 2>/dev/null
	# zproxy saw the old upstream's end: its socket to A is closed
	deadline=$(( $(now_ms) + 10000 ))
	while ss -Htnp "dport = :$pa" | grep -q "pid=$ZPID,"; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$what: zproxy still holds its socket to A"
		sleep 0.05
	done
	collect "rtc-$mode" --port "$pb"
	wait "$spid" || fail "$what: the sender failed"
	wait_bytes "rtc-$mode" -- 1 20
	stop_zproxy
	grep -q "Bad file descriptor\|end=upstream-error" "$ZLOG" &&
		fail "$what: $(grep -m 1 "Bad file descriptor\|end=upstream-error" "$ZLOG")"
	grep -q "connection 2" "$ZLOG" &&
		fail "$what: the source needed a second stream: $(grep -m 1 'connection 2' "$ZLOG")"
	mapfile -t fs < <(files "rtc-$mode")
	"$ZP_LOGSEND" verify -v --raw --runs --tail-ok --at-least-once \
	    --conns 1 --msgs 800 --framing octet "$T/rta-$mode.raw" \
	    "$T/rtb-$mode.raw" "${fs[@]}" >"$T/rt-$mode.verify" 2>&1 ||
		fail "$what: $(tail -n 3 "$T/rt-$mode.verify" | tr '\n' ' ')"
	ok "$what: one stream from A (retiring) through B (reset) to a collector on B's port, every message at least once: $(grep '^sent=' "$T/rt-$mode.verify")"
}

note "$(collector_versions)"
for mode in $MODES; do
	subcase case_rsyslog "$mode"
	subcase case_loggen "$mode"
	subcase case_replay "$mode"
	subcase case_spool "$mode"
	subcase case_mirror "$mode"
	subcase case_retire "$mode"
done

zp_done
