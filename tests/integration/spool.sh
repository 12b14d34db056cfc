#!/bin/bash
# spool.sh - --spool DIR (issue 15): a framed client whose every upstream
# refuses is read into files in DIR, and the files are sent on, oldest
# first, once an upstream answers again. zproxy runs with one upstream
# that nothing listens on at first, --fail-timeout 1 --max-fails 1 (the
# sender tries it again each second) and --stats. Messages are
# zp-logsend's, numbered and CRC-checked, and logger(1) lines.
#   a. rsyslog down: 20 clients, 100,000 messages in all (19 zp-logsend
#      connections x 5,000, lf, and one `logger --tcp -f` of 5,000
#      lines); zp-logsend's connections are read to EOF; once no stream
#      is spooling, DIR holds one .spool file a client, named and headed
#      as documented ("ZPSPOOL 1 client=... dst=... framing=lf
#      started=MS"), as many and as big as the metrics say. rsyslog is
#      started on the port: the spool empties, every message arrives
#      exactly once, each connection's in order (the logger lines too),
#      replayed bytes = spooled bytes, one "delivered" line a file;
#   b. kill -9 while spooling: 20 connections of a 20 x 50,000 send
#      pause after 2,000 messages each (--pause-at); once zproxy wrote
#      exactly those bytes (counted beforehand with the same seed),
#      kill -9; the sender then fails (expected). zproxy restarted on
#      the same DIR with rsyslog up says 20 files were left, all cut
#      short (.open -> .partial), and sends them: the first 2,000 of
#      each connection arrive exactly once, in order, nothing beyond;
#   c. kill -9 while replaying: 10 x 5,000 messages of up to 3,400
#      bytes (two files a stream: the 8 MiB cut; 20 files, more than the
#      5 + 4 the kill needs, 85 MB; 20 streams, until December 2026,
#      proved the same with twice the bytes) spooled; a mini
#      collector (zp-logsend collect, one raw file per connection, i.e.
#      per file sent) takes 5 files and exits; a second one is started
#      and stopped (SIGSTOP) just after a refused try of zproxy's, so
#      that it has read nothing; zproxy's senders connect to it and send
#      what its buffers take; kill -9 with 5 files delivered and 4 in
#      flight; the collector, resumed, reads what the dead zproxy's
#      sockets still hold (cut short), and zproxy is restarted on DIR
#      (the files left found, none cut short): every message arrives at least
#      once, each delivery one connection's run without a gap (only the
#      4 cut by the kill may end inside a message); the deliveries but
#      those hold each message at most once, each connection's in order
#      across them; what came twice is within what the collector got of
#      the files in flight (a file is sent again whole, or from its
#      sent= checkpoint);
#   d. a full spool refuses: (1) DIR a 16 MiB tmpfs: two logger runs
#      (8,000 lines of 400-odd bytes each) leave whole files, then one
#      zp-logsend connection of 12,000 messages of up to 1,400 bytes
#      fills it: its writer stops (the client waits) while the file
#      system keeps (about) 4 MiB free; (2) the same with --spool-max 2M
#      on a plain DIR (1,500 lines a run, 4,000 messages). A new client
#      is then refused (closed; zproxy_spool_refused_total 1; its line
#      says end=spool-full), nothing failed to write, zproxy lives.
#      rsyslog is started: the spool drains, the waiting client finishes
#      (read to EOF), each of its messages arrives exactly once and in
#      order, each logger line once, each run in order, and new clients
#      are relayed (100 more logger lines); (3) --spool-max 2M filled by
#      2 clients x 4,000 still sending (their files all .open): once
#      rsyslog is up, files must go and the clients finish, every
#      message exactly once, in order;
#   e. octet framing (RFC 6587) with syslog-ng (syslog() source):
#      5 x 2,000 spooled, then delivered exactly once, in order;
#   f. start-up: --spool on a missing directory or a file is an exit
#      with one line naming it; --spool without --framing exits 64;
#   g. a collector whose kernel acknowledged bytes it never read (it is
#      stopped, then killed): 2 x 10,000 messages spooled, the collector
#      stopped once zproxy sends to it and killed after at most 2.5 s
#      (twice --spool-sync); with a second collector, every message
#      arrives at least once, each delivery a run without a gap.
#   h. many files under the sandbox (issue 32): 200 clients spooled into
#      200 files, then rsyslog is started: the sender's scan sorts 200
#      names (glibc's qsort asked sysinfo(2) of the sandbox past 128),
#      the log holds no refused system call, and every message arrives
#      exactly once, in order.
#   i. a sent= inside a message (a corrupted or hand-edited header,
#      issue 32), lf and octet: 200 messages spooled into one file,
#      zproxy stopped, the header's sent= set 5 bytes into the 100th
#      message, zproxy started again with a mini collector up: it warns
#      and resumes at that message's start, so the collector gets
#      messages 100 to 200, whole, in order, none torn.
#   j. live streams when every collector is down (issue 32): 10 streams
#      on rsyslog (the other upstream down, --replay-window 1M) pause at
#      500 messages; rsyslog is killed (-9): no stream is cut ("could
#      not move"), every one spools its replay window, connected;
#      rsyslog comes back on its port: the files go to it and every
#      stream goes live again; then the sender goes on, reads each
#      connection to EOF, and every one of the 20,000 messages is at
#      rsyslog (either run) at least once, whole. A --mirror (a mini
#      collector) had each stream: the spool's writer reads the client
#      where no mirror follows, so each mirror stream ends when its
#      stream spools (zproxy_mirror_dropped_total reaches 10 then, not
#      later) at a message boundary: the mirror's files hold whole
#      messages only, each connection's a run without a gap (it was a
#      gap, and once a cut message merged with a later one, in
#      attack.sh).
# ZP_SPOOL_CASES (default "a b c d e f g h i j") runs only the subcases named.
# Both modes. (d1 is skipped, with a note, where a tmpfs cannot be
# mounted: it needs root.)
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
[ -x "$ZP_LOGSEND" ] || fail "ZP_LOGSEND=$ZP_LOGSEND is not executable"
command -v logger >/dev/null || fail "logger not found: install bsdutils"
note "$(collector_versions);" "logger: $(logger -V 2>/dev/null | awk '{ print $NF }')"

RUN=$(date +%s)x$$
SENDERS=4		# --spool-senders' default

# ---- helpers -----------------------------------------------------------

# spool_dir NAME: a new directory $T/NAME for a spool (zproxy's user
# may write it); its path in SDIR.
spool_dir() {
	SDIR=$T/$1
	mkdir -p "$SDIR" || fail "mkdir $SDIR"
	zp_user_dir "$SDIR"
}

# spool_zproxy DIR UP ARGS...: zproxy in the current mode, spooling to
# DIR, with the one upstream 127.0.0.1:UP tried again each second and
# --stats on a new SPORT; ARGS give --framing and the rest.
spool_zproxy() {
	local dir=$1 up=$2
	shift 2
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$up" --spool "$dir" \
	    --fail-timeout 1 --max-fails 1 --stats "127.0.0.1:$SPORT" "$@"
}

# kill9_zproxy: SIGKILL the current zproxy, and reap it.
kill9_zproxy() {
	ours "$ZPID" || fail "zproxy ($ZPID) is not ours to kill"
	kill -KILL "$ZPID"
	zp_wait_exit "$ZPID" 10
	[ $? = 124 ] && fail "zproxy still there 10s after SIGKILL"
	ZPID=
}

# send_bg NAME CONNS MSGS MAX FRAMING [ARGS...]: zp-logsend send through
# zproxy in the background (SEND_PID); ARGS after ours (a --seed there
# wins).
send_bg() {
	local name=$1 conns=$2 msgs=$3 max=$4 fr=$5
	shift 5
	zp_bg "$name.send" timeout -k 5 120 "$ZP_LOGSEND" send 127.0.0.1 \
	    "$ZPORT" --conns "$conns" --msgs "$msgs" --framing "$fr" \
	    --max "$max" --seed "$RANDOM" --timeout 100 "$@"
	SEND_PID=$BG_PID
}

# send_done NAME CONNS MSGS SECS: send_bg's zp-logsend must end well
# within SECS (every connection read to EOF) and say it sent them all.
# Sets SENT_BYTES.
send_done() {
	local name=$1 conns=$2 msgs=$3 rc
	peer_wait "$SEND_PID" "$name.send" "$4"
	rc=$?
	[ "$rc" = 0 ] ||
		fail "$name: zp-logsend send failed (status $rc): $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$name" "$name" "$conns" "$msgs"
}

# collect NAME PORT [ARGS...]: a mini collector on 127.0.0.1:PORT
# writing $T/NAME/conn-<i>.raw, i the accept order; COL_PID.
collect() {
	local name=$1 port=$2
	shift 2
	mkdir -p "$T/$name"
	zp_bg "$name.collect" "$ZP_LOGSEND" collect --port "$port" \
	    --dir "$T/$name" "$@"
	COL_PID=$BG_PID
	wait_line "$T/$name.collect.out" '^[0-9]+$' 10 "$COL_PID" >/dev/null ||
		fail "zp-logsend collect $name did not start: $(head -c 300 "$T/$name.collect.err")"
}

# next_refused_try PORT WHAT: until zproxy's next refused try of PORT
# (within 10 s).
next_refused_try() {
	local nf deadline=$(( $(now_ms) + 10000 ))
	nf=$(refused_tries "$1")
	until [ "$(refused_tries "$1")" -gt "$nf" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$2: no refused try of port $1 within 10s"
		sleep 0.02
	done
}

# spool_all WHAT NAME FRAMING CONNS MSGS MAX SECS: zproxy spooling to a
# new DIR ($T/NAME.spool) with its upstream UP down, and CONNS x MSGS
# zp-logsend messages of up to MAX bytes sent through it within SECS;
# returns once no stream is spooling.
spool_all() {
	local what=$1 name=$2 fr=$3 conns=$4 msgs=$5
	UP=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	spool_zproxy "$SDIR" "$UP" --framing "$fr"
	send_bg "$name" "$conns" "$msgs" "$6" "$fr"
	send_done "$name" "$conns" "$msgs" "$7"
	wait_metric zproxy_spool_streams == 0 20 "$what: every stream ended"
}

# all_delivered WHAT NAME CONNS MSGS WHEN: the spool empties (within
# 60 s: WHEN says on what), the collector writes CONNS x MSGS lines to
# C_LOG (30 s), each message exactly once, each connection's in order;
# DIR is empty. VERIFIED is verify's summary.
all_delivered() {
	local n=$(($3 * $4))
	wait_metric zproxy_spool_files == 0 60 "$1: $5"
	wait_lines "$C_LOG" "$n" 30 ||
		note "$1: $(lines "$C_LOG") of $n lines within 30s"
	logsend_verify "$1" "$2" "$3" "$4" --exactly-once --ordered "$C_LOG"
	spool_empty "$SDIR" "$1"
}

# metric SERIES: its value in a new scrape.
metric() { stats_scrape; val "$1" || fail "no series $1 in /metrics"; }

# check_spool DIR WHAT FRAMING SUFFIXES: what zproxy has in DIR now:
# only files of the documented name
# <yyyymmddThhmmss.mmmZ>-127.0.0.1_<port>-c<conn>-<6 digits>.<suffix>,
# suffix one of SUFFIXES (an ERE: "spool", "open|spool"), each headed
# "ZPSPOOL 1 client=127.0.0.1:<port> dst=127.0.0.1:$ZPORT framing=FRAMING
# started=<ms>"; as many files and bytes as zproxy_spool_files and
# zproxy_spool_bytes say. Sets SP_FILES, SP_BYTES, SP_STREAMS (client
# streams: names up to the last '-').
check_spool() {
	local dir=$1 what=$2 fr=$3 suf=$4 f name port hdr re hre
	SP_FILES=0 SP_BYTES=0
	re="^[0-9]{8}T[0-9]{6}\.[0-9]{3}Z-127\.0\.0\.1_([0-9]+)-c[0-9]+-[0-9]{6}\.($suf)\$"
	for f in "$dir"/* "$dir"/.[!.]*; do
		[ -e "$f" ] || continue
		name=${f##*/}
		[[ $name =~ $re ]] ||
			fail "$what: '$name' in the spool: not <time>-<client>-c<conn>-<seq>.($suf)"
		port=${BASH_REMATCH[1]}
		hdr=$(head -n 1 "$f")
		hre="^ZPSPOOL 1 client=127\.0\.0\.1:$port dst=127\.0\.0\.1:$ZPORT framing=$fr started=[0-9]{13}( [a-z]+=[^ ]+)*\$"
		[[ $hdr =~ $hre ]] ||
			fail "$what: $name begins '$(head -c 120 "$f")', want '$hre'"
		SP_FILES=$((SP_FILES + 1))
		SP_BYTES=$((SP_BYTES + $(size "$f")))
	done
	# The gauges are recounted from the directory each second: a write
	# counted as it went may be a recount away from the files' sizes.
	wait_metric zproxy_spool_files == "$SP_FILES" 5 "$what: $SP_FILES files in $dir"
	wait_metric zproxy_spool_bytes == "$SP_BYTES" 5 "$what: $SP_BYTES bytes in $dir's files"
	SP_STREAMS=$(ls -A "$dir" | sed 's/-[0-9]*\.[a-z]*$//' | sort -u | wc -l)
}

# spool_empty DIR WHAT: nothing at all is left in DIR.
spool_empty() {
	[ -z "$(ls -A "$1")" ] ||
		fail "$2: the spool still holds $(ls -A "$1" | head -n 3 | tr '\n' ' ')"
}

# delivered_lines [REGEX]: the "spool: NAME delivered to ..." lines so
# far (NAME matching REGEX: [^ ]* by default).
delivered_lines() { grep -c "spool: ${1:-[^ ]*} delivered to " "$ZLOG"; }

# wait_delivered_lines N [REGEX]: until there are N of them (10 s): the
# log thread writes a line after the counter the scrape saw was raised.
wait_delivered_lines() {
	local deadline=$(( $(now_ms) + 10000 ))
	until [ "$(delivered_lines "${2:-}")" -ge "$1" ]; do
		[ "$(now_ms)" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

# refused_tries UP: the sender's connects refused so far.
refused_tries() { grep -c "not delivered to 127.0.0.1:$1 (connect: " "$ZLOG"; }

# rx_busy PORT: established sockets on the listening side of PORT that
# hold unread bytes (a collector that does not read).
rx_busy() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" '$2 ~ p"$" && $4 == "01" && !seen[$2 " " $3]++ {
			split($5, q, ":"); if (q[2] != "00000000") n++
		} END { print n + 0 }'
}

# avail DIR: bytes free for us on DIR's file system.
avail() { stat -f -c '%a %S' "$1" | awk '{ printf "%.0f\n", $1 * $2 }'; }

# lg_file FILE ID FROM TO PAD: logger input, a line "lg-ID-N" for each
# N from FROM to TO, then " " and PAD x's when PAD > 0.
lg_file() {
	local pad=
	[ "$5" -gt 0 ] && pad=" $(printf '%*s' "$5" '' | tr ' ' x)"
	seq -f "lg-$2-%.0f$pad" "$3" "$4" >"$1" || fail "seq failed"
}

# lg_send WHAT FILE: one logger run (one connection) sending FILE's
# lines, RFC 3164, newline framed; it must end well.
lg_send() {
	timeout -k 2 60 logger -T -n 127.0.0.1 -P "$ZPORT" --rfc3164 \
	    -t zptest -f "$2" 2>"$2.err" ||
		fail "$1: logger -f ${2##*/} failed (status $?): $(tail -n 1 "$2.err")"
}

# logger_lines ID FILE PAD: N of each line of a collector's FILE that is
# one whole logger message of lg_file ID ... PAD.
logger_lines() {
	local pad=
	[ "$3" -gt 0 ] && pad=" $(printf '%*s' "$3" '' | tr ' ' x)"
	awk -v pre="lg-$1-" -v pad="$pad" '{
		sub(/^ +/, "")
		if (index($0, pre) != 1)
			next
		n = substr($0, length(pre) + 1)
		if (substr(n, length(n) - length(pad) + 1) != pad)
			next
		n = substr(n, 1, length(n) - length(pad))
		if (n ~ /^[0-9]+$/)
			print n
	}' "$2"
}

# logger_check WHAT ID FILE PAD FROM-TO...: FILE holds each logger line
# of the ranges (lg_file ID ... PAD) exactly once and whole, and each
# range's lines in order (a range: one logger run).
logger_check() {
	local what=$1 id=$2 file=$3 pad=$4 r from to got=$T/lg.$BASHPID
	shift 4
	logger_lines "$id" "$file" "$pad" >"$got"
	: >"$got.want"
	for r in "$@"; do
		from=${r%-*} to=${r#*-}
		seq "$from" "$to" >>"$got.want"
		awk -v a="$from" -v b="$to" '$1 >= a && $1 <= b' "$got" |
			cmp -s - <(seq "$from" "$to") ||
			fail "$what: logger lines $r: $(awk -v a="$from" -v b="$to" '$1 >= a && $1 <= b' "$got" | wc -l) whole ones, not each once in order"
	done
	cmp -s <(sort -n "$got") <(sort -n "$got.want") &&
		[ "$(grep -c -E "^ *lg-$id-" "$file")" = "$(wc -l <"$got.want")" ] ||
		fail "$what: $(grep -c -E "^ *lg-$id-" "$file") logger lines, $(wc -l <"$got") of them whole, want $(wc -l <"$got.want")"
}

# left_line SECS: the restarted zproxy's line on the files it found in
# $SDIR ("spool DIR: N files (B bytes) ..., P of them cut short ..."), in
# LEFT_LINE; N, B and P in LEFT_FILES, LEFT_BYTES, LEFT_CUT.
left_line() {
	LEFT_LINE=$(wait_line "$ZLOG" "spool $SDIR: [0-9]+ files \\([0-9]+ bytes\\)" "$1" "$ZPID") ||
		fail "the restarted zproxy said nothing of the files in $SDIR"
	LEFT_FILES=$(echo "$LEFT_LINE" | sed -n 's/.*: \([0-9]*\) files (\([0-9]*\) bytes).*/\1/p')
	LEFT_BYTES=$(echo "$LEFT_LINE" | sed -n 's/.*: \([0-9]*\) files (\([0-9]*\) bytes).*/\2/p')
	LEFT_CUT=$(echo "$LEFT_LINE" | sed -n 's/.* \([0-9]*\) of them cut short.*/\1/p')
}

# ---- a -----------------------------------------------------------------

# rsyslog down: 19 zp-logsend connections and one logger run spooled,
# then delivered once rsyslog is up.
case_spool() {
	local mode=$1 name=a-$mode what up id n=100000 conns=19 msgs=5000 lg=5000
	local up_sum spooled files
	what="$mode: rsyslog down, $conns x $msgs + $lg logger lines"
	set_mode "$mode"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	spool_zproxy "$SDIR" "$up" --framing lf
	id=$RUN-$mode
	lg_file "$T/$name.lg" "$id" 1 "$lg" 0
	send_bg "$name" "$conns" "$msgs" 600 lf
	lg_send "$what" "$T/$name.lg"
	send_done "$name" "$conns" "$msgs" 60
	ok "$what: zp-logsend's $conns connections were read to EOF ($SENT_BYTES bytes), logger ended well, no upstream up"
	wait_metric zproxy_spool_streams == 0 20 "$what: every stream ended"
	[ "$(grep -c ' conn=[0-9].* end=spooled' "$ZLOG")" = 20 ] ||
		fail "$what: $(grep -c ' conn=[0-9].* end=spooled' "$ZLOG") connections logged end=spooled, want 20: $(grep -m 1 ' conn=[0-9]' "$ZLOG")"
	[ "$(grep -c "no upstream answered (.*); spooling client 127.0.0.1:[0-9]* to $SDIR\$" "$ZLOG")" = 20 ] ||
		fail "$what: not 20 'spooling client' lines: $(grep -m 1 'no upstream answered' "$ZLOG")"
	check_spool "$SDIR" "$what" lf spool
	[ "$SP_FILES" -gt 0 ] && [ "$SP_BYTES" -gt 0 ] && [ "$SP_STREAMS" = 20 ] ||
		fail "$what: $SP_FILES files, $SP_BYTES bytes, $SP_STREAMS streams in the spool, want 20 streams"
	up_sum=$(grep ' conn=[0-9].* end=spooled' "$ZLOG" |
	    sed 's/.* up=\([0-9]*\) .*/\1/' | awk '{ s += $1 } END { print s + 0 }')
	spooled=$(metric zproxy_spooled_bytes_total)
	[ "$spooled" = "$up_sum" ] && [ "$spooled" -gt "$SENT_BYTES" ] ||
		fail "$what: zproxy_spooled_bytes_total $spooled, the conn lines' up= $up_sum, zp-logsend sent $SENT_BYTES"
	files=$SP_FILES
	ok "$what: $files .spool files ($SP_BYTES bytes, $SP_STREAMS streams) named and headed as documented, spooled bytes as logged"
	note "$what: $n messages ($((conns * msgs)) zp-logsend + $lg logger) from 20 clients spooled into $files files"

	start_collector rsyslog "$name" "$up"
	wait_metric zproxy_spool_files == 0 60 "$what: the spool empties once rsyslog is up"
	wait_lines "$C_LOG" "$n" 30 ||
		note "$what: $(lines "$C_LOG") of $n lines within 30s"
	logger_check "$what" "$id" "$C_LOG" 0 "1-$lg"
	grep -v -E "^ *lg-$id-" "$C_LOG" >"$T/$name.zp"
	logsend_verify "$what" "$name" "$conns" "$msgs" --exactly-once --ordered "$T/$name.zp"
	[ "$(lines "$C_LOG")" = "$n" ] ||
		fail "$what: rsyslog wrote $(lines "$C_LOG") lines, want $n"
	spool_empty "$SDIR" "$what"
	stats_scrape
	stats_is zproxy_spool_bytes 0 "$what"
	stats_is zproxy_spool_streams 0 "$what"
	stats_is zproxy_spool_replayed_bytes_total "$spooled" "$what: replayed = spooled"
	stats_is zproxy_spool_delivered_files_total "$files" "$what"
	stats_is zproxy_spool_refused_total 0 "$what"
	wait_delivered_lines "$files"
	[ "$(delivered_lines)" = "$files" ] ||
		fail "$what: $(delivered_lines) 'delivered' lines, want $files"
	grep -q "spool: [^ ]*\.spool delivered to 127\.0\.0\.1:$up ([0-9]* bytes)\$" "$ZLOG" ||
		fail "$what: no 'spool: NAME delivered to 127.0.0.1:$up (N bytes)' line"
	ok "$what: once rsyslog was up, each of the $n messages arrived exactly once, each client's in order ($VERIFIED; $lg logger lines 1..$lg); $files files delivered, $spooled bytes replayed = spooled; the spool is empty"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
	rm -f "$C_LOG" "$T/$name.zp"
}

# ---- b -----------------------------------------------------------------

# kill -9 while spooling, at a known point; the next run sends it all.
case_crash_spooling() {
	local mode=$1 name=b-$mode what up seed conns=20 k=2000 m=50000 rc
	local want pre nopen
	what="$mode: kill -9 while spooling $conns x $m, paused at $k"
	set_mode "$mode"
	seed=$RANDOM
	# What the first k messages of each connection weigh, with this seed.
	collect "$name.pre" 0 --conns "$conns"
	timeout -k 5 60 "$ZP_LOGSEND" send 127.0.0.1 \
	    "$(head -n 1 "$T/$name.pre.collect.out")" --conns "$conns" \
	    --msgs "$k" --framing lf --max 600 --seed "$seed" \
	    >"$T/$name.pre.out" 2>"$T/$name.pre.err" ||
		fail "$what: the weighing send failed: $(tail -n 1 "$T/$name.pre.err")"
	want=$(sed -n 's/^connects=[0-9]* messages=[0-9]* bytes=\([0-9]*\)$/\1/p' "$T/$name.pre.out")
	[ -n "$want" ] || fail "$what: the weighing send said '$(cat "$T/$name.pre.out")'"
	peer_wait "$COL_PID" "$name.pre.collect" 10 || fail "$what: the weighing collector failed"

	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	spool_zproxy "$SDIR" "$up" --framing lf
	send_bg "$name" "$conns" "$m" 600 lf --seed "$seed" --pause-at "$k" \
	    --go "$T/$name.go"
	wait_line "$T/$name.send.out" '^paused$' 30 "$SEND_PID" >/dev/null ||
		fail "$what: zp-logsend did not pause: $(tail -n 1 "$T/$name.send.err")"
	# zproxy wrote every byte sent before the pause
	wait_metric zproxy_spooled_bytes_total == "$want" 30 "$what: spooled before the kill"
	stats_is zproxy_spool_streams "$conns" "$what: streams spooling"
	check_spool "$SDIR" "$what" lf 'open|spool'
	[ "$SP_STREAMS" = "$conns" ] || fail "$what: $SP_STREAMS streams in the spool"
	pre=$SP_BYTES
	ls -A "$SDIR" | sort >"$T/$name.before"
	nopen=$(grep -c '\.open$' "$T/$name.before")
	kill9_zproxy
	ok "$what: killed with $want bytes of $((conns * k)) messages in $SP_FILES files being written"
	peer_wait "$SEND_PID" "$name.send" 15
	rc=$?
	[ "$rc" != 0 ] && [ "$rc" != 124 ] ||
		fail "$what: zp-logsend send, its proxy killed, ended with status $rc"
	ls -A "$SDIR" | sort | cmp -s - "$T/$name.before" ||
		fail "$what: the spool changed after the kill: $(ls -A "$SDIR" | head -n 3 | tr '\n' ' ')"

	start_collector rsyslog "$name" "$up"
	spool_zproxy "$SDIR" "$up" --framing lf
	left_line 10
	[ "$LEFT_FILES" = "$SP_FILES" ] && [ "$LEFT_BYTES" = "$pre" ] &&
		[ "$LEFT_CUT" = "$nopen" ] ||
		fail "$what: '$LEFT_LINE', want $SP_FILES files ($pre bytes), $nopen cut short"
	ok "$what: restarted on the same spool: '${LEFT_LINE#*: spool }'"
	all_delivered "$what" "$name" "$conns" "$k" "the spool empties after the restart"
	stats_scrape
	stats_is zproxy_spool_replayed_bytes_total "$want" "$what"
	stats_is zproxy_spool_delivered_files_total "$SP_FILES" "$what"
	wait_delivered_lines "$nopen" '[^ ]*\.partial'
	[ "$(delivered_lines '[^ ]*\.partial')" = "$nopen" ] ||
		fail "$what: $(delivered_lines '[^ ]*\.partial') .partial files delivered, want $nopen"
	ok "$what: the first $k messages of each connection arrived exactly once, in order, none after ($VERIFIED); $want bytes replayed"
	note "$what: $((conns * k)) messages spooled before the kill, delivered after it"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
}

# ---- c -----------------------------------------------------------------

# verified_field NAME FIELD: a number of NAME's verify summary.
verified_field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$T/$1.verify.out" | head -n 1; }

# kill -9 while files are being sent; the next run sends them on.
case_crash_replay() {
	local mode=$1 name=c-$mode what up conns=10 msgs=5000 total c1 c2 rc
	local nf deadline atkill i f pre=() post=() inflight got dups cut busy
	what="$mode: kill -9 while replaying $conns x $msgs"
	set_mode "$mode"
	spool_all "$what" "$name" lf "$conns" "$msgs" 3400 90
	up=$UP
	check_spool "$SDIR" "$what" lf spool
	total=$SP_FILES
	[ "$total" -gt $((SENDERS + 5)) ] ||
		fail "$what: only $total files spooled"
	note "$what: $((conns * msgs)) messages ($SENT_BYTES bytes) spooled into $total files"

	# A collector that takes 5 files, then is gone.
	collect "$name.c1" "$up" --conns 5
	c1=$COL_PID
	peer_wait "$c1" "$name.c1.collect" 30
	rc=$?
	[ "$rc" = 0 ] || fail "$what: the first collector ended with status $rc"
	wait_metric zproxy_spool_delivered_files_total == 5 10 "$what: the first collector's files"
	# Just after a refused try, the next is a second away: a collector
	# started and stopped now has accepted nothing yet.
	next_refused_try "$up" "$what"
	collect "$name.c2" "$up"
	c2=$COL_PID
	kill -STOP "$c2"
	# zproxy's senders connect to it and fill what its sockets take. All
	# four, as a rule; in copy mode three, now and then, within 15 s, the
	# fourth later (why is not known yet): the case goes on with those
	# connected at the kill (a sender that never came back would leave its
	# file undelivered, and the spool must empty after the restart).
	busy=$SENDERS
	if ! wait_estab "$up" "$SENDERS" 15; then
		busy=$(estab "$up")
		[ "$busy" -ge 1 ] ||
			fail "$what: no connection to the stopped collector, want $SENDERS"
		note "$what: $busy of $SENDERS senders connected to the stopped collector within 15 s"
	fi
	# Bytes in flight at the kill: all of them got some, as a rule; a
	# file resumed at a checkpoint at its end has only its FIN to send.
	deadline=$(( $(now_ms) + 10000 ))
	until [ "$(rx_busy "$up")" -ge "$busy" ]; do
		if [ "$(now_ms)" -ge "$deadline" ]; then
			[ "$(rx_busy "$up")" -ge 1 ] ||
				fail "$what: none of $busy connections got bytes"
			note "$what: $(rx_busy "$up") of $busy connections got bytes"
			break
		fi
		sleep 0.02
	done
	atkill=$(metric zproxy_spool_delivered_files_total)
	[ "$atkill" -ge 1 ] && [ "$atkill" -lt "$total" ] ||
		fail "$what: $atkill of $total files delivered at the kill"
	kill9_zproxy
	# Those connected at the kill, counted after it: a sender that
	# connected between a count before it and the kill was missed (CI saw
	# 4 files against 3). The stopped collector's side of each is
	# established, or closing since the kill, until it reads on.
	busy=$(estab "$up" '01|08')
	kill -CONT "$c2"
	ok "$what: killed with $atkill of $total files delivered, $busy being sent to a stopped collector"
	# it reads what the dead zproxy's sockets still send, to their FIN
	wait_estab "$up" 0 15 '01|08' ||
		fail "$what: the collector did not finish the killed zproxy's connections"
	for f in "$T/$name.c2"/conn-*.raw; do
		[ -e "$f" ] && pre+=("$f")
	done
	# in flight: the senders' files (and any delivered while it stopped)
	inflight=$((busy + atkill - 5))
	[ "${#pre[@]}" -ge 1 ] && [ "${#pre[@]}" -le "$inflight" ] ||
		fail "$what: the stopped collector got ${#pre[@]} connections, want 1 to $inflight"

	spool_zproxy "$SDIR" "$up" --framing lf
	left_line 10
	[ "$LEFT_FILES" = $((total - atkill)) ] && [ "$LEFT_CUT" = 0 ] ||
		fail "$what: '$LEFT_LINE', want $((total - atkill)) files, none cut short"
	wait_metric zproxy_spool_files == 0 60 "$what: the spool empties after the restart"
	spool_empty "$SDIR" "$what"
	stats_is zproxy_spool_delivered_files_total $((total - atkill)) "$what: files delivered after the restart"
	for ((i = ${#pre[@]}; ; i++)); do
		f=$T/$name.c2/conn-$i.raw
		[ -e "$f" ] || break
		post+=("$f")
	done
	[ "${#post[@]}" = $((total - atkill)) ] ||
		fail "$what: the collector got ${#post[@]} connections after the restart, want $((total - atkill))"

	# What the collector got before the restart: runs of one connection
	# each, the last message maybe cut by the kill.
	logsend_verify "$what: before the restart" "$name.pre" "$conns" "$msgs" \
	    --raw --runs --tail-ok "${pre[@]}"
	got=$(verified_field "$name.pre" received)
	cut=$(grep -c 'truncated tail' "$T/$name.pre.verify.err")
	# The deliveries without those: whole, none twice, each connection
	# in order (a file's files one after the other, over the restart).
	logsend_verify "$what: without the cut ones" "$name.rest" "$conns" "$msgs" \
	    --raw --runs --ordered "$T/$name.c1"/conn-{0..4}.raw "${post[@]}"
	[ "$(verified_field "$name.rest" duplicates)" = 0 ] ||
		fail "$what: delivered twice without a kill in between: $VERIFIED"
	# All of it: every message at least once; what came twice is in
	# what the collector got of the files in flight at the kill.
	logsend_verify "$what" "$name" "$conns" "$msgs" --raw --runs --tail-ok \
	    --at-least-once "$T/$name.c1"/conn-{0..4}.raw "${pre[@]}" "${post[@]}"
	dups=$(verified_field "$name" duplicates)
	[ "$dups" -le "$got" ] ||
		fail "$what: $dups messages came twice, more than the $got sent before the kill ($VERIFIED)"
	ok "$what: every message arrived ($VERIFIED), each delivery one connection's run, each connection in order; $dups twice, all of them in the ${#pre[@]} files in flight at the kill"
	grep -q ' resumes after ' "$ZLOG" &&
		note "$what: $(grep -c ' resumes after ' "$ZLOG") files resumed at their sent= checkpoint"
	note "$what: $((conns * msgs)) messages; $atkill files delivered before the kill, ${#pre[@]} in flight ($got messages, $cut cut short); $dups came twice"
	stop_zproxy
	zp_stop "$c2"
	# about 90 MB: gone once checked
	rm -rf "$T/$name.c1" "$T/$name.c2"
}

# ---- d -----------------------------------------------------------------

# A full spool: KIND tmpfs (DIR a 16 MiB file system: 4 MiB stay free)
# or max (--spool-max 2M). Two earlier clients (logger runs) left whole
# files; one zp-logsend connection fills the rest and waits.
case_full() {
	local mode=$1 kind=$2 name=d-$2-$1 what up args=() id a rc free low
	local lg pad=400 msgs deadline
	set_mode "$mode"
	spool_dir "$name.spool"
	id=$RUN-$name
	if [ "$kind" = tmpfs ]; then
		lg=8000 msgs=12000
		what="$mode: a 16 MiB tmpfs spool"
		if ! mount -t tmpfs -o size=16m,mode=0700 tmpfs "$SDIR" 2>"$T/$name.mount.err"; then
			note "$what: skipped: cannot mount a tmpfs: $(head -n 1 "$T/$name.mount.err")"
			return 0
		fi
		# zproxy first, then the file system
		trap 'zp_kill_pids; umount "$SDIR" 2>/dev/null || umount -l "$SDIR"' EXIT
		zp_user_dir "$SDIR"
		low=$((4 * 1024 * 1024))
	else
		lg=1500 msgs=4000
		what="$mode: --spool-max 2M"
		args=(--spool-max 2M)
	fi
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_zproxy "$SDIR" "$up" --framing lf "${args[@]}"
	# earlier clients, gone: their files are whole
	lg_file "$T/$name.lg1" "$id" 1 "$lg" "$pad"
	lg_file "$T/$name.lg2" "$id" $((lg + 1)) $((2 * lg)) "$pad"
	lg_send "$what" "$T/$name.lg1"
	lg_send "$what" "$T/$name.lg2"
	wait_metric zproxy_spool_streams == 0 10 "$what: the logger runs ended"
	check_spool "$SDIR" "$what" lf spool
	[ "$SP_FILES" = 2 ] || fail "$what: $SP_FILES files after two logger runs"
	# one that fills the spool: it is read no more, it waits
	send_bg "$name" 1 "$msgs" 1400 lf
	a=$SEND_PID
	if [ "$kind" = tmpfs ]; then
		deadline=$(( $(now_ms) + 30000 ))
		until [ "$(avail "$SDIR")" -lt "$low" ]; do
			[ "$(now_ms)" -ge "$deadline" ] &&
				fail "$what: $(avail "$SDIR") bytes still free after 30s"
			alive "$a" || fail "$what: the sender ended: $(tail -n 1 "$T/$name.send.err")"
			sleep 0.02
		done
	else
		wait_metric zproxy_spool_bytes '>=' $((2 * 1024 * 1024)) 30 "$what: the spool fills"
	fi
	# a new client is refused
	timeout -k 2 20 "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" --conns 1 \
	    --msgs 10 --framing lf --timeout 10 >"$T/$name.refused.out" \
	    2>"$T/$name.refused.err"
	rc=$?
	[ "$rc" = 1 ] ||
		fail "$what: a client while the spool is full: zp-logsend ended with status $rc, want 1: $(cat "$T/$name.refused.out" "$T/$name.refused.err")"
	# The log thread writes the line when it can: after the client saw
	# the close, on a busy machine (a TSan run grepped too early).
	wait_line "$ZLOG" 'conn=[0-9]* client=127\.0\.0\.1:[0-9]* .* end=spool-full error="Connection refused"' 10 "$ZPID" >/dev/null ||
		fail "$what: no 'end=spool-full' line for the refused client within 10 s"
	stats_scrape
	stats_is zproxy_spool_refused_total 1 "$what"
	zproxy_alive "with a full spool"
	alive "$a" || fail "$what: the spooling client's sender ended: $(tail -n 1 "$T/$name.send.err")"
	grep -q 'spool-failed\|No space left' "$ZLOG" &&
		fail "$what: the spool's writes failed: $(grep -m 1 'spool-failed\|No space left' "$ZLOG")"
	free=$(avail "$SDIR")
	if [ "$kind" = tmpfs ]; then
		# what a writer read before it saw the room gone comes on top
		[ "$free" -ge $((2 * 1024 * 1024)) ] ||
			fail "$what: $free bytes free on the spool's file system, want about 4 MiB"
		free=", $free bytes free"
	else
		[ "$(val zproxy_spool_bytes)" -le $((3 * 1024 * 1024)) ] ||
			fail "$what: $(val zproxy_spool_bytes) bytes in the spool, --spool-max 2M"
		free=
	fi
	ok "$what: full at $(val zproxy_spool_bytes) bytes in $(val zproxy_spool_files) files$free: a new client refused ($(tail -n 1 "$T/$name.refused.err")), the spooling one waits, no write failed"

	start_collector rsyslog "$name" "$up"
	send_done "$name" 1 "$msgs" 60
	ok "$what: once rsyslog was up, the waiting client finished (read to EOF)"
	wait_metric zproxy_spool_files == 0 60 "$what: the spool empties"
	wait_metric zproxy_spool_streams == 0 10 "$what: no stream spooling"
	# new clients are relayed
	lg_file "$T/$name.lg3" "$id" $((2 * lg + 1)) $((2 * lg + 100)) "$pad"
	lg_send "$what" "$T/$name.lg3"
	wait_lines "$C_LOG" $((2 * lg + 100 + msgs)) 30 ||
		note "$what: $(lines "$C_LOG") of $((2 * lg + 100 + msgs)) lines within 30s"
	logger_check "$what" "$id" "$C_LOG" "$pad" "1-$lg" \
	    "$((lg + 1))-$((2 * lg))" "$((2 * lg + 1))-$((2 * lg + 100))"
	grep -v -E "^ *lg-$id-" "$C_LOG" >"$T/$name.zp"
	logsend_verify "$what" "$name" 1 "$msgs" --exactly-once --ordered "$T/$name.zp"
	spool_empty "$SDIR" "$what"
	ok "$what: each of the $msgs messages of the waiting client arrived exactly once, in order ($VERIFIED); the earlier logger runs' $((2 * lg)) lines and 100 relayed after it, each once, in order"
	note "$what: $((2 * lg)) logger lines + $msgs messages through a full spool, 10 refused, 100 relayed after"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
}

# A spool filled by streams still written, their files all open: once
# an upstream answers they must go on (their files cut and sent).
case_full_open() {
	local mode=$1 name=d-open-$1 what up conns=2 msgs=4000
	what="$mode: --spool-max 2M filled by $conns clients still sending"
	set_mode "$mode"
	spool_dir "$name.spool"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_zproxy "$SDIR" "$up" --framing lf --spool-max 2M
	send_bg "$name" "$conns" "$msgs" 1400 lf
	wait_metric zproxy_spool_bytes '>=' $((2 * 1024 * 1024)) 30 "$what: the spool fills"
	check_spool "$SDIR" "$what" lf open
	[ "$SP_STREAMS" = "$conns" ] || fail "$what: $SP_STREAMS streams in the spool"
	alive "$SEND_PID" || fail "$what: the sender ended: $(tail -n 1 "$T/$name.send.err")"
	ok "$what: full at $SP_BYTES bytes, $SP_FILES files being written"
	start_collector rsyslog "$name" "$up"
	wait_metric zproxy_spool_delivered_files_total '>=' 1 15 \
	    "$what: a file delivered once rsyslog is up (the spool holds: $(ls -A "$SDIR" | sed 's/.*-c/c/' | tr '\n' ' '))"
	send_done "$name" "$conns" "$msgs" 60
	all_delivered "$what" "$name" "$conns" "$msgs" "the spool empties"
	ok "$what: once rsyslog was up the clients finished, each message exactly once, in order ($VERIFIED)"
	note "$what: $((conns * msgs)) messages"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
}

# ---- e -----------------------------------------------------------------

# octet framing, syslog-ng.
case_octet() {
	local mode=$1 name=e-$mode what up conns=5 msgs=2000 files
	what="$mode: octet framing, syslog-ng down, $conns x $msgs"
	set_mode "$mode"
	spool_all "$what" "$name" octet "$conns" "$msgs" 600 60
	up=$UP
	check_spool "$SDIR" "$what" octet spool
	files=$SP_FILES
	[ "$SP_STREAMS" = "$conns" ] || fail "$what: $SP_STREAMS streams in the spool"
	start_collector syslog-ng "$name" "$up" octet
	all_delivered "$what" "$name" "$conns" "$msgs" "the spool empties once syslog-ng is up"
	stats_scrape
	stats_is zproxy_spool_replayed_bytes_total "$SENT_BYTES" "$what"
	ok "$what: $files files delivered, each message exactly once, in order ($VERIFIED)"
	note "$what: $((conns * msgs)) messages"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: syslog-ng"
}

# ---- g -----------------------------------------------------------------

# sent_field FILE: the number a spool file's header says in sent=, 0
# when it has none.
sent_field() {
	head -n 1 "$1" 2>/dev/null | sed -n 's/.* sent=0*\([0-9][0-9]*\).*/\1/p;t;s/.*/0/p'
}

# A collector that dies holding bytes its kernel acknowledged but it
# never read: they must be sent again.
case_collector_dies() {
	local mode=$1 name=g-$mode what up conns=2 msgs=10000 nf deadline c1 f
	local sent=0 files=()
	what="$mode: the collector killed with acknowledged bytes unread"
	set_mode "$mode"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	spool_dir "$name.spool"
	spool_zproxy "$SDIR" "$up" --framing lf
	send_bg "$name" "$conns" "$msgs" 600 lf
	send_done "$name" "$conns" "$msgs" 60
	wait_metric zproxy_spool_streams == 0 20 "$what: every stream ended"
	check_spool "$SDIR" "$what" lf spool
	# a collector that accepts (its kernel does) and never reads
	next_refused_try "$up" "$what"
	collect "$name.c1" "$up"
	c1=$COL_PID
	kill -STOP "$c1"
	deadline=$(( $(now_ms) + 10000 ))
	until [ "$(rx_busy "$up")" -ge 1 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: no bytes sent to the stopped collector within 10s"
		sleep 0.02
	done
	# Whatever zproxy writes down of what was acknowledged, it does so
	# every --spool-sync (1 s): give it that, twice at most.
	deadline=$(( $(now_ms) + 2500 ))
	while [ "$(now_ms)" -lt "$deadline" ]; do
		for f in "$SDIR"/*.spool; do
			[ "$(sent_field "$f")" -gt 0 ] && sent=$(sent_field "$f")
		done
		[ "$sent" -gt 0 ] && break
		sleep 0.05
	done
	kill -KILL "$c1"
	zp_wait_exit "$c1" 5 >/dev/null 2>&1
	ok "$what: the collector killed; it had written $(cat "$T/$name.c1"/conn-*.raw 2>/dev/null | wc -c) bytes, its kernel held more (a spool header said sent=$sent)"
	collect "$name.c2" "$up"
	wait_metric zproxy_spool_files == 0 30 "$what: the spool empties with a second collector"
	files=()
	for f in "$T/$name.c1"/conn-*.raw "$T/$name.c2"/conn-*.raw; do
		[ -e "$f" ] && files+=("$f")
	done
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" --raw --runs \
	    --at-least-once "${files[@]}" >"$T/$name.verify.out" \
	    2>"$T/$name.verify.err" ||
		fail "$what: not every message reached a collector that read it: $(tr '\n' ' ' <"$T/$name.verify.out")($(grep -m 1 missing "$T/$name.verify.err")); zproxy: '$(grep -m 1 ' resumes after ' "$ZLOG" | sed 's/.*spool: //')'"
	VERIFIED=$(tr '\n' ' ' <"$T/$name.verify.out" | sed 's/ $//')
	spool_empty "$SDIR" "$what"
	ok "$what: every message reached the second collector ($VERIFIED)"
	note "$what: $((conns * msgs)) messages"
	stop_zproxy
}

# ---- h -----------------------------------------------------------------

# 200 files in the spool, sorted by the sender under the sandbox.
case_many_files() {
	local mode=$1 name=h-$mode what conns=200 msgs=5
	what="$mode: $conns files in the spool under the sandbox"
	set_mode "$mode"
	spool_all "$what" "$name" lf "$conns" "$msgs" 200 60
	check_spool "$SDIR" "$what" lf spool
	[ "$SP_FILES" = "$conns" ] ||
		fail "$what: $SP_FILES files in the spool, want $conns"
	start_collector rsyslog "$name" "$UP"
	all_delivered "$what" "$name" "$conns" "$msgs" "the spool empties once rsyslog is up"
	sandbox_clean "$ZLOG" ||
		fail "$what: $(grep -m 1 'sandbox: system call' "$ZLOG")"
	ok "$what: no system call refused, $conns files delivered, each message exactly once, in order ($VERIFIED)"
	stop_zproxy
	kill_collector "$C_PID" "$C_PORT" "$what: rsyslog"
}

# ---- i -----------------------------------------------------------------

# set_sent FILE N: write N as FILE's header's sent=, in place.
set_sent() {
	local at
	at=$(head -n 1 "$1" | grep -bo 'sent=[0-9]*' | cut -d: -f1)
	[ -n "$at" ] || fail "no sent= in $(head -n 1 "$1")"
	printf 'sent=%016d' "$2" |
		dd of="$1" bs=1 seek="$at" conv=notrunc status=none ||
		fail "dd into $1 failed"
}

# A sent= inside a message: the send resumes at its start, not torn.
case_torn_sent() {
	local mode=$1 fr=$2 name=i-$mode-$2 what f hl at n=200 k=100
	what="$mode: $fr, sent= inside message $k of $n"
	set_mode "$mode"
	spool_all "$what" "$name" "$fr" 1 "$n" 300 30
	stop_zproxy
	f=$(ls "$SDIR"/*.spool) && [ "$(echo "$f" | wc -l)" = 1 ] ||
		fail "$what: not one .spool file: $(ls "$SDIR")"
	hl=$(head -n 1 "$f" | wc -c)
	# Every message's body begins "<13>": 5 bytes into the k-th one.
	at=$(tail -c +$((hl + 1)) "$f" | grep -abo '<13>' | sed -n "${k}p" |
	    cut -d: -f1)
	[ -n "$at" ] || fail "$what: no message $k in $f"
	set_sent "$f" $((at + 5))
	collect "$name.c" "$UP"
	spool_zproxy "$SDIR" "$UP" --framing "$fr"
	wait_metric zproxy_spool_files == 0 30 "$what: the file is delivered"
	logsend_verify "$what" "$name" 1 "$n" --raw --runs --framing "$fr" \
	    "$T/$name.c"/conn-*.raw
	wait_line "$ZLOG" "sent=$((at + 5)) is not a message boundary; resumes after [0-9]+ bytes" 5 "$ZPID" >/dev/null ||
		fail "$what: no warning: $(grep -m 1 'spool: .*resumes' "$ZLOG")"
	[[ $VERIFIED == *" received=$((n - k + 1)) "* ]] ||
		fail "$what: the collector got $VERIFIED, want messages $k to $n"
	ok "$what: resumed at that message's start, none torn ($VERIFIED)"
	stop_zproxy
	zp_stop "$COL_PID"
}

# ---- f -----------------------------------------------------------------

# start_bad NAME ARGS...: zproxy ARGS must exit at start-up (within 10
# s); its status in RC, its stderr in $T/NAME.err.
start_bad() {
	local name=$1 port
	shift
	port=$(free_port) || fail "zp-peer port failed"
	timeout -k 2 10 "$ZPROXY" -l "127.0.0.1:$port" "$@" \
	    >"$T/$name.out" 2>"$T/$name.err"
	RC=$?
	[ "$RC" != 124 ] && [ "$RC" != 137 ] ||
		fail "zproxy $* did not exit at start-up"
}

case_startup() {
	local mode=$1 what="$mode: start-up" d
	set_mode "$mode"
	d=$T/f-$mode-nonexistent
	start_bad "f-$mode-missing" "${MODE_ARGS[@]}" -u 127.0.0.1:9 \
	    --framing lf --spool "$d"
	[ "$RC" != 0 ] && [ "$(wc -l <"$T/f-$mode-missing.err")" = 1 ] &&
		grep -q -- "--spool $d: No such file or directory" "$T/f-$mode-missing.err" ||
		fail "$what: --spool $d: status $RC, '$(cat "$T/f-$mode-missing.err")'"
	ok "$what: --spool on a missing directory: status $RC, '$(sed 's/^.*zproxy\[[0-9]*\]: //' "$T/f-$mode-missing.err")'"
	d=$T/f-$mode-file
	: >"$d"
	start_bad "f-$mode-file" "${MODE_ARGS[@]}" -u 127.0.0.1:9 \
	    --framing lf --spool "$d"
	[ "$RC" != 0 ] && [ "$(wc -l <"$T/f-$mode-file.err")" = 1 ] &&
		grep -q -- "--spool $d: " "$T/f-$mode-file.err" ||
		fail "$what: --spool on a file: status $RC, '$(cat "$T/f-$mode-file.err")'"
	ok "$what: --spool on a file: status $RC, '$(sed 's/^.*zproxy\[[0-9]*\]: //' "$T/f-$mode-file.err")'"
	spool_dir "f-$mode.spool"
	start_bad "f-$mode-noframing" "${MODE_ARGS[@]}" -u 127.0.0.1:9 \
	    --spool "$SDIR"
	[ "$RC" = 64 ] && grep -q -- '--spool needs --framing' "$T/f-$mode-noframing.err" ||
		fail "$what: --spool without --framing: status $RC, '$(cat "$T/f-$mode-noframing.err")'"
	ok "$what: --spool without --framing: status 64, '$(cat "$T/f-$mode-noframing.err")'"
}

# case_live MODE: live framed streams whose collector dies while every
# other is down go to the spool, stay connected and go back live (issue
# 32, section 2).
case_live() {
	local mode=$1 name=j-$mode what up down conns=10 msgs=2000 k=500 rc
	local alog1 alog2 spooled mport mdrop
	what="$mode: live streams spooled when every collector is down"
	set_mode "$mode"
	up=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	down=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	mport=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	mdrop="zproxy_mirror_dropped_total{mirror=\"127.0.0.1:$mport\"}"
	start_collector rsyslog "$name-1" "$up"
	local cpid=$C_PID
	alog1=$C_LOG
	collect "$name-m" "$mport"
	local mpid=$COL_PID
	spool_dir "$name.spool"
	spool_zproxy "$SDIR" "$up" -u "127.0.0.1:$down" --framing lf \
	    --balance first --replay-window 1M --mirror "127.0.0.1:$mport"
	send_bg "$name" "$conns" "$msgs" 2000 lf --pause-at "$k" \
	    --go "$T/$name.go"
	wait_line "$T/$name.send.out" '^paused$' 30 "$SEND_PID" >/dev/null ||
		fail "$what: zp-logsend did not pause: $(tail -n 1 "$T/$name.send.err")"
	stats_scrape
	stats_is "$mdrop" 0 "$what: the mirror before the kill"
	ours "$cpid" || fail "$what: rsyslog is not ours"
	kill -KILL "$cpid"
	zp_wait_exit "$cpid" 5 >/dev/null 2>&1
	# Every stream fails over to nothing (the clients are paused: the
	# collector's end tells), and spools, connected; its mirror ends.
	wait_metric zproxy_spool_streams == "$conns" 30 "$what: every stream spooling"
	wait_metric "$mdrop" == "$conns" 10 "$what: every mirror stream ended as its stream spooled"
	! grep -q 'could not move' "$ZLOG" ||
		fail "$what: $(grep -m 1 'could not move' "$ZLOG")"
	spooled=$(grep -c 'spooling client' "$ZLOG")
	[ "$spooled" = "$conns" ] ||
		fail "$what: $spooled 'spooling client' lines, want $conns"
	# The collector comes back: the files go to it, the streams follow,
	# live again, before the clients go on.
	start_collector rsyslog "$name-2" "$up"
	alog2=$C_LOG
	wait_metric zproxy_spool_streams == 0 30 "$what: every stream live again"
	wait_metric zproxy_spool_files == 0 30 "$what: every file delivered"
	[ "$(grep -c 'its spool was delivered' "$ZLOG")" = "$conns" ] ||
		fail "$what: $(grep -c 'its spool was delivered' "$ZLOG") of $conns streams went live again"
	: >"$T/$name.go"
	send_done "$name" "$conns" "$msgs" 100
	stop_zproxy
	settle "$alog2" 30 || note "$what: rsyslog's file still grows after 30s"
	kill_collector "$C_PID" "$up" "$what: rsyslog"
	# SIGKILL may cut rsyslog's own last write in the first file.
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" --tail-ok \
	    --at-least-once "$alog2" "$alog1" >"$T/$name.verify.out" \
	    2>"$T/$name.verify.err" ||
		fail "$what: $(cat "$T/$name.verify.out") $(grep -v '^zp-logsend: duplicate' "$T/$name.verify.err" | head -n 3 | tr '\n' ' ')"
	note "$what: $(head -n 1 "$T/$name.verify.out")"
	ok "$what: $conns streams spooled, none cut, all live again, and every message of the $((conns * msgs)) at rsyslog at least once: $(head -n 1 "$T/$name.verify.out")"
	# The mirror: whole messages, a run without a gap a connection.
	zp_stop "$mpid"
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" --raw \
	    --runs "$T/$name-m"/conn-*.raw >"$T/$name-m.verify.out" \
	    2>"$T/$name-m.verify.err" ||
		fail "$what: the mirror's files: $(cat "$T/$name-m.verify.out") $(grep -v '^zp-logsend: \(missing\|duplicate\)' "$T/$name-m.verify.err" | head -n 3 | tr '\n' ' ')"
	ok "$what: the mirror's ${conns} streams ended as they spooled, whole messages only, each a run: $(head -n 1 "$T/$name-m.verify.out")"
}

# ZP_SPOOL_CASES: the subcases to run (default all: "a b c d e f g h i").
CASES=" ${ZP_SPOOL_CASES:-a b c d e f g h i j} "
# One mode after the other, not side by side (subcase_bg): case j holds
# a 1M replay window a stream in pipes, from the per-user budget
# (fs.pipe-user-pages-soft) that every unprivileged zproxy of the
# parallel tests shares (stall.sh says more).
spool_mode() {
	local mode=$1
	[[ $CASES == *" f "* ]] && subcase case_startup "$mode"
	[[ $CASES == *" a "* ]] && subcase case_spool "$mode"
	[[ $CASES == *" b "* ]] && subcase case_crash_spooling "$mode"
	[[ $CASES == *" c "* ]] && subcase case_crash_replay "$mode"
	[[ $CASES == *" d "* ]] && subcase case_full "$mode" tmpfs
	[[ $CASES == *" d "* ]] && subcase case_full "$mode" max
	[[ $CASES == *" d "* ]] && subcase case_full_open "$mode"
	[[ $CASES == *" e "* ]] && subcase case_octet "$mode"
	[[ $CASES == *" g "* ]] && subcase case_collector_dies "$mode"
	[[ $CASES == *" h "* ]] && subcase case_many_files "$mode"
	[[ $CASES == *" i "* ]] && subcase case_torn_sent "$mode" lf
	[[ $CASES == *" i "* ]] && subcase case_torn_sent "$mode" octet
	[[ $CASES == *" j "* ]] && subcase case_live "$mode"
	return 0
}
for mode in $MODES; do
	spool_mode "$mode"
done

zp_done
