#!/bin/bash
# logging.sh - where log lines go and what they look like:
#   a. --log-file: lines are appended to the file (what it held stays),
#      nothing goes to stderr; logrotate: mv the file away + SIGHUP ->
#      "log reopened" and the next lines go to a fresh file at the path
#      (mode 0640), the old file keeps the old lines and gets no new ones;
#      a SIGHUP when the path cannot be opened again (its directory moved
#      away) logs an error to the old file and goes on writing there;
#      (under ZP_USER the directories are that user's, so that the fresh
#      file can be created after the drop; privs.sh covers a reopen the
#      user may not make);
#   b. --log-file /nonexistent/dir/x.log (and a directory): exit 73 at
#      once, one line on stderr naming the path, nothing listens;
#   c. --log-format json: every line is one JSON object (jq) with time,
#      level and pid; the connection record has event=conn, conn, client,
#      upstream, mode, up/down (the bytes sent: 1000 and 3000), duration,
#      end=closed, level=info; SIGUSR1's stats line and a refused
#      connection's record (with its error text) are JSON too;
#   d. SIGUSR1 logs a "stats:" line with the counters (open=1 total=2 with
#      one pair open and one done) and zproxy goes on;
#   e. rate limit: 300 connections to a refusing upstream at once: far
#      fewer than 300 warning lines (<= 100), then "N log lines
#      suppressed", and the lines written plus N account for all 300;
#      SIGUSR1's stats line counts every failed client (failed=N >= 300);
#      with -v the same storm (200 clients) gives exactly 200 connection
#      lines, no "suppressed" line (not even at exit), failed=200;
#   f. --syslog: zproxy serves (byte-exact) and writes no per-connection
#      line to stderr; in a private mount namespace (unshare -m) whose
#      /dev/log is a socat datagram socket, the lines arrive there with
#      ident zproxy[PID] and facility daemon (<29> notice, <30> info).
#      Without unshare or socat, or where the namespace cannot be made,
#      the first half passes and the second is a SKIP (so is the test);
#   g. --syslog where /dev/log is missing (the same namespace, before
#      socat listens): one warning on stderr at start-up, the lines
#      counted in zproxy_log_dropped_total; once socat listens, lines
#      reach it again, among them "log: N lines dropped: nothing
#      listened on /dev/log" (daemon.warning) with N the counter's value.
# json runs in both modes; the rest in the first of $MODES.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata up.dat 1000
mkdata down.dat 3000
mkdata small 64K

count() { grep -cE -- "$2" "$1" 2>/dev/null; }

# start_port LOGCHECK ARGS...: start zproxy like start_zproxy, but wait for
# its port (its lines may go elsewhere than stderr); then, if LOGCHECK is
# a file, for "listening on" in it. ZLOG is zproxy's stderr.
start_port() {
	local logf=$1 args a
	shift
	for _ in 1 2 3 4 5; do
		ZPORT=$(free_port) || fail "zp-peer port failed"
		args=(-l "127.0.0.1:$ZPORT")
		for a in "$@"; do args+=("$a"); done
		[ "$ZP_USER_ACTIVE" = 0 ] || args+=(--user "$ZP_USER")
		ZLOG=$(mktemp "$T/zproxy.XXXXXX") || fail "mktemp failed"
		"${ZP_WRAP[@]}" "$ZPROXY" "${args[@]}" 2>"$ZLOG" >"$ZLOG.out" &
		ZPID=$!
		ZP_PIDS+=("$ZPID")
		ZP_SEEN=0
		if wait_port "$ZPORT" 10 && alive "$ZPID"; then
			[ -z "$logf" ] && return 0
			wait_line "$logf" 'listening on' 5 "$ZPID" >/dev/null ||
				fail "zproxy ${args[*]}: no 'listening on' in $logf"
			return 0
		fi
		alive "$ZPID" && fail "zproxy ${args[*]} did not listen within 10s"
		wait "$ZPID" 2>/dev/null
		grep -qi 'in use' "$ZLOG" ${logf:+"$logf"} 2>/dev/null && continue
		fail "zproxy ${args[*]} exited at start-up: $(head -n 3 "$ZLOG")"
	done
	fail "zproxy: no free port after 5 tries"
}

# stop_at WHAT LOGFILE: SIGTERM, exit 0 within 10 s, "stopping:" in LOGFILE.
stop_at() {
	local rc
	kill -TERM "$ZPID"
	zp_wait_exit "$ZPID" 10
	rc=$?
	[ "$rc" = 0 ] || fail "$1: zproxy's exit status after SIGTERM: $rc"
	grep -q 'stopping:' "$2" || fail "$1: no 'stopping:' line in $2"
	sanitizer_clean "$ZLOG" || fail "$1: sanitizer report on stderr"
	ZPID=
}

# xfer WHAT: 1000 bytes up, 3000 down through zproxy, byte-exact.
xfer() {
	rm -f "$T/xfer.got"
	peer xfer connect 127.0.0.1 "$ZPORT" -s "$T/up.dat" -o "$T/xfer.got" -t 20 ||
		fail "$1: client: $(cat "$T/xfer.err")"
	same_file "$T/down.dat" "$T/xfer.got" "$1"
}

server() {
	peer_listen "$1" -n 0 -s "$T/down.dat" --allow-reset -t 60
}

# a. --log-file and SIGHUP
log_file() {
	local what="--log-file" lf="$T/alog/zp.log" n1
	server a-up
	rm -rf "$T/alog"
	mkdir "$T/alog"
	# Under ZP_USER zproxy reopens as that user: the directory is its.
	zp_user_dir "$T/alog"
	echo "a line that was there before" >"$lf"
	start_port "$lf" -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --log-file "$lf"
	xfer "$what: connection 1"
	wait_line "$lf" ' conn=1 .*up=1000 down=3000 .*end=closed' 5 >/dev/null ||
		fail "$what: no conn=1 line in the log file: $(tail -n 3 "$lf")"
	[ "$(head -n 1 "$lf")" = "a line that was there before" ] ||
		fail "$what: the file was not appended to: $(head -n 1 "$lf")"
	[ -s "$ZLOG" ] && fail "$what: zproxy wrote to stderr: $(head -n 3 "$ZLOG")"
	ok "$what: lines appended to the file (start-up, conn=1), none on stderr"

	mv "$lf" "$lf.1"
	n1=$(wc -l <"$lf.1")
	kill -HUP "$ZPID"
	wait_line "$lf" 'log reopened' 5 "$ZPID" >/dev/null ||
		fail "$what: no fresh file with 'log reopened' at $lf after SIGHUP"
	[ "$(stat -c %a "$lf")" = 640 ] ||
		fail "$what: the fresh log file has mode $(stat -c %a "$lf"), expected 640"
	xfer "$what: connection 2, after SIGHUP"
	wait_line "$lf" ' conn=2 .*up=1000 down=3000 .*end=closed' 5 >/dev/null ||
		fail "$what: no conn=2 line in the fresh file: $(tail -n 3 "$lf")"
	[ "$(wc -l <"$lf.1")" -eq "$n1" ] ||
		fail "$what: the moved-away file got new lines: $(tail -n 2 "$lf.1")"
	[ "$(count "$lf.1" ' conn=1 ')" -eq 1 ] || fail "$what: the old file lost conn=1"
	[ "$(count "$lf" ' conn=1 ')" -eq 0 ] || fail "$what: conn=1 is in the fresh file too"
	zproxy_alive "after SIGHUP"
	stop_at "$what" "$lf"
	[ -s "$ZLOG" ] && fail "$what: zproxy wrote to stderr: $(head -n 3 "$ZLOG")"
	ok "$what: mv + SIGHUP: fresh file (0640) gets 'log reopened', conn=2 and 'stopping:', the old file keeps its $n1 lines, stderr empty"
}

# a2. SIGHUP when the path cannot be opened again (its directory was
# moved away): an error line in the old file, which is kept, zproxy runs
log_reopen_fails() {
	local what="--log-file, SIGHUP with the directory gone" lf="$T/logdir/zp.log" old="$T/logdir.old/zp.log"
	server a2-up
	rm -rf "$T/logdir" "$T/logdir.old"
	mkdir "$T/logdir"
	zp_user_dir "$T/logdir"
	start_port "$lf" -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --log-file "$lf"
	mv "$T/logdir" "$T/logdir.old"
	kill -HUP "$ZPID"
	wait_line "$old" 'cannot reopen' 5 "$ZPID" >/dev/null ||
		fail "$what: no 'cannot reopen' error in the old file: $(tail -n 2 "$old")"
	zproxy_alive "after a failed reopen"
	xfer "$what"
	wait_line "$old" ' conn=1 .*end=closed' 5 >/dev/null ||
		fail "$what: conn=1 did not go to the old file: $(tail -n 2 "$old")"
	[ -e "$lf" ] && fail "$what: $lf exists?"
	stop_at "$what" "$old"
	[ -s "$ZLOG" ] && fail "$what: zproxy wrote to stderr: $(head -n 3 "$ZLOG")"
	ok "$what: '$(grep -o 'cannot reopen.*' "$old" | head -n 1)'; later lines still go to the old file"
}

# b. a log file that cannot be opened
bad_log_file() {
	local what p rc n path
	for path in /nonexistent/dir/x.log "$T"; do
		what="--log-file $path"
		p=$(free_port)
		timeout -k 2 10 "$ZPROXY" -l "127.0.0.1:$p" -u 127.0.0.1:9 \
		    --log-file "$path" >"$T/bad.out" 2>"$T/bad.err"
		rc=$?
		[ "$rc" = 73 ] || fail "$what: exit status $rc, expected 73: $(head -n 3 "$T/bad.err")"
		n=$(wc -l <"$T/bad.err")
		[ "$n" -eq 1 ] || fail "$what: $n lines on stderr, expected one: $(head -n 3 "$T/bad.err")"
		grep -qF -- "$path" "$T/bad.err" || fail "$what: stderr does not name the path: $(cat "$T/bad.err")"
		[ -s "$T/bad.out" ] && fail "$what: something on stdout: $(head -n 2 "$T/bad.out")"
		listening "$p" && fail "$what: it listened"
		ok "$what: exit 73, one line: $(cat "$T/bad.err")"
	done
}

# jq_lines FILE: every line must be a JSON object with time, level, pid.
jq_lines() {
	local total good
	total=$(wc -l <"$1")
	good=$(jq -R -r 'fromjson | select(type == "object" and
	    (.time | type) == "string" and
	    (.time | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$")) and
	    (.level | type) == "string" and (.pid | type) == "number") | "ok"' \
	    <"$1" 2>"$T/jq.err" | grep -c '^ok$')
	[ -s "$T/jq.err" ] && fail "$2: a line is not JSON: $(cat "$T/jq.err") in: $(head -n 5 "$1")"
	[ "$total" -gt 0 ] && [ "$good" -eq "$total" ] ||
		fail "$2: $good of $total lines are JSON objects with time, level, pid: $(head -n 5 "$1")"
}

# c. JSON
json() {
	local what="$mode: --log-format json" uport rec refusing
	command -v jq >/dev/null || fail "$what: jq is not installed (apt-get install jq)"
	server c-up; uport=$PEER_PORT
	start_zproxy -v -m "$mode" --log-format json -u "127.0.0.1:$uport"
	xfer "$what"
	wait_line "$ZLOG" '"event":"conn"' 5 "$ZPID" >/dev/null || fail "$what: no conn record"
	kill -USR1 "$ZPID"
	wait_line "$ZLOG" '"msg":"stats: ' 5 "$ZPID" >/dev/null || fail "$what: no stats line after SIGUSR1"
	stop_zproxy
	jq_lines "$ZLOG" "$what"
	[ "$(jq -R -c 'fromjson | select(.event == "conn")' <"$ZLOG" | wc -l)" -eq 1 ] ||
		fail "$what: expected one conn record"
	rec=$(jq -R -c 'fromjson | select(.event == "conn")' <"$ZLOG")
	jq -e --arg mode "$mode" --arg up "127.0.0.1:$uport" '
	    .level == "info" and (.conn | type) == "number" and .conn == 1 and
	    (.client | test("^127\\.0\\.0\\.1:[0-9]+$")) and .upstream == $up and
	    .mode == $mode and .up == 1000 and .down == 3000 and
	    (.duration | type) == "number" and .duration >= 0 and .duration < 5 and
	    .end == "closed"' <<<"$rec" >/dev/null ||
		fail "$what: the conn record has wrong fields: $rec"
	ok "$what: every line a JSON object (time, level, pid), conn record: $rec"

	refusing=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" --log-format json -u "127.0.0.1:$refusing"
	peer refused connect 127.0.0.1 "$ZPORT" --expect-close 2 -t 10 ||
		fail "$what: refused client: $(cat "$T/refused.err")"
	wait_line "$ZLOG" '"event":"conn"' 5 "$ZPID" >/dev/null || fail "$what: no conn record for the refused client"
	stop_zproxy
	jq_lines "$ZLOG" "$what, refused upstream"
	rec=$(jq -R -c 'fromjson | select(.event == "conn")' <"$ZLOG")
	jq -e --arg up "127.0.0.1:$refusing" '.end == "upstream-refused" and
	    .upstream == $up and .up == 0 and .down == 0 and
	    (.error | type) == "string" and (.error | length) > 0 and
	    .level != "info"' <<<"$rec" >/dev/null ||
		fail "$what: the refused connection's record: $rec"
	ok "$what: a refused connection's record is JSON too: $rec"
}

# d. SIGUSR1
stats() {
	local what="SIGUSR1" hpid line
	peer_listen d-up -n 2 --no-shut --allow-reset -t 30
	start_zproxy -v -m "$mode" -u "127.0.0.1:$PEER_PORT"
	peer d-client connect 127.0.0.1 "$ZPORT" -g 5000 -t 10 ||
		fail "$what: client: $(cat "$T/d-client.err")"
	expect_conn_log 'up=5000 down=0 .*end=closed' "$what: first connection"
	zp_bg d-hold "$ZP_PEER" connect 127.0.0.1 "$ZPORT" --hold --allow-reset -t 30
	hpid=$BG_PID
	wait_line "$T/d-hold.out" '^connected 1$' 5 "$hpid" >/dev/null || fail "$what: held client"
	# the pair is up once the upstream has it
	local deadline=$(( $(now_ms) + 5000 ))
	until [ "$(estab "$PEER_PORT")" -eq 1 ]; do
		[ "$(now_ms)" -lt "$deadline" ] || fail "$what: the upstream did not get the held pair"
		sleep 0.02
	done
	kill -USR1 "$ZPID"
	line=$(wait_line "$ZLOG" 'stats: ' 5 "$ZPID") || fail "$what: no 'stats:' line"
	echo "$line" | grep -q 'stats: connections open=1 total=2 ' ||
		fail "$what: expected open=1 total=2: $line"
	echo "$line" | grep -q 'bytes up=5000 down=0' || fail "$what: expected bytes up=5000 down=0: $line"
	zproxy_alive "after SIGUSR1"
	zp_stop "$hpid"; zp_wait_exit "$hpid" 5 >/dev/null
	expect_conn_log 'end=closed' "$what: the held connection"
	stop_zproxy
	ok "$what: $line"
}

# e. rate limit
rate_limit() {
	local what="rate limit" refusing n t0 sup how
	refusing=$(free_port -b 127.0.0.1)
	start_zproxy -m "$mode" -u "127.0.0.1:$refusing"
	peer burst connect 127.0.0.1 "$ZPORT" -n 300 --expect-close 10 -t 30 ||
		fail "$what: 300 clients to a refusing upstream: $(cat "$T/burst.err")"
	# The count may come by itself once the window is over, or only with
	# the next line (or at exit): wait 2 s, then bring it out with
	# another refused client every 0.5 s.
	how="by itself"
	wait_line "$ZLOG" 'suppressed' 2 "$ZPID" >/dev/null || how="with the next line"
	t0=$(now_ms)
	until grep -q 'suppressed' "$ZLOG"; do
		[ $(( $(now_ms) - t0 )) -lt 5000 ] || fail "$what: no 'suppressed' line within 5 s"
		sleep 0.5
		peer late connect 127.0.0.1 "$ZPORT" --expect-close 2 -t 10 >/dev/null
	done
	n=$(count "$ZLOG" 'end=upstream-refused')
	[ "$n" -le 100 ] || fail "$what: $n refused lines for 300+ refused clients: no rate limit"
	sup=$(sed -n 's/.*: \([0-9][0-9]*\) log lines suppressed.*/\1/p' "$ZLOG" | head -n 1)
	[ -n "$sup" ] || fail "$what: cannot read the count: $(grep suppressed "$ZLOG")"
	[ $((n + sup)) -ge 300 ] ||
		fail "$what: $n lines written + $sup suppressed < 300 refused clients"
	failed_counted "$what" 300 ge
	zproxy_alive "after the storm"
	stop_zproxy
	ok "$what: 300 refused clients: $n warning lines, then '$sup log lines suppressed' ($how); $FAILED"
}

# failed_counted WHAT N OP: SIGUSR1's stats line says failed=F with F -OP N
# (every failed client counted, logged or not). Sets FAILED to "failed=F".
failed_counted() {
	local line f
	kill -USR1 "$ZPID"
	line=$(wait_line "$ZLOG" 'stats: ' 5 "$ZPID") || fail "$1: no 'stats:' line"
	f=$(echo "$line" | sed -n 's/.* failed=\([0-9][0-9]*\).*/\1/p')
	[ -n "$f" ] && [ "$f" -"$3" "$2" ] ||
		fail "$1: expected failed -$3 $2 in the stats line: $line"
	FAILED="failed=$f"
}

# e, with -v: a failed client is a connection like any other, and -v asked
# for every connection's line, so none of them is held back.
rate_limit_verbose() {
	local what="rate limit, -v" refusing n
	refusing=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" -u "127.0.0.1:$refusing"
	peer burst connect 127.0.0.1 "$ZPORT" -n 200 --expect-close 10 -t 30 ||
		fail "$what: 200 clients to a refusing upstream: $(cat "$T/burst.err")"
	# zproxy logs a pair before it closes the client: all 200 are in.
	n=$(count "$ZLOG" ' conn=[0-9]+ .*end=upstream-refused')
	[ "$n" -eq 200 ] ||
		fail "$what: $n connection lines for 200 refused clients, expected 200"
	failed_counted "$what" 200 eq
	zproxy_alive "after the storm"
	stop_zproxy
	grep -q 'suppressed' "$ZLOG" &&
		fail "$what: lines were held back: $(grep suppressed "$ZLOG")"
	ok "$what: 200 refused clients: 200 connection lines, none suppressed (at exit either); $FAILED"
}

# f. syslog. syslog_ns: can we give zproxy a /dev/log of our own? If
# not, SYSLOG_WHY says why.
syslog_ns() {
	SYSLOG_WHY="unshare or socat is missing"
	command -v unshare >/dev/null && command -v socat >/dev/null || return 1
	SYSLOG_WHY="no mount namespace with a /dev/log of our own (unshare -m)"
	# shellcheck disable=SC2016
	ZP_WRAP=(unshare -m sh -c 'd=$0
		mkdir -p "$d/olddev" && mount --bind /dev "$d/olddev" &&
		mount -t tmpfs -o mode=755 zp-dev /dev || exit 97
		for f in null zero full random urandom tty; do
			ln -s "$d/olddev/$f" "/dev/$f"
		done
		ln -s "$d/devlog" /dev/log && exec "$@"' "$T")
	"${ZP_WRAP[@]}" sh -c '[ -L /dev/log ] && [ -c /dev/null ]' 2>/dev/null && return 0
	ZP_WRAP=()
	return 1
}

use_syslog() {
	local what="--syslog" spid private=0 out zpid
	server f-up
	if syslog_ns; then
		private=1
		rm -f "$T/devlog"
		zp_bg syslogd socat -u UNIX-RECV:"$T/devlog" STDOUT
		spid=$BG_PID
		local deadline=$(( $(now_ms) + 5000 ))
		until [ -S "$T/devlog" ]; do
			[ "$(now_ms)" -lt "$deadline" ] && alive "$spid" ||
				fail "$what: socat did not make $T/devlog: $(cat "$T/syslogd.err")"
			sleep 0.02
		done
	fi
	start_port "" -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --syslog
	ZP_WRAP=()
	xfer "$what"
	xfer "$what"
	if [ "$private" = 1 ]; then
		wait_line "$T/syslogd.out" "zproxy\[$ZPID\]: conn=2 " 5 >/dev/null ||
			fail "$what: no conn=2 line reached /dev/log: $(head -c 600 "$T/syslogd.out")"
	fi
	grep -q 'conn=' "$ZLOG" && fail "$what: per-connection lines on stderr: $(grep conn= "$ZLOG" | head -n 2)"
	zpid=$ZPID
	kill -TERM "$ZPID"
	zp_wait_exit "$ZPID" 10 || fail "$what: zproxy's exit status after SIGTERM: $?"
	ZPID=
	# Without a /dev/log of our own, the host's may be missing: that
	# one warning is what zproxy must say then (g. checks it).
	[ "$private" = 1 ] || sed -i '1{/^zproxy: --syslog: \/dev\/log: .*until a syslog daemon listens there$/d}' "$ZLOG"
	[ -s "$ZLOG" ] && fail "$what: zproxy wrote to stderr: $(head -n 3 "$ZLOG")"
	if [ "$private" = 0 ]; then
		ok "$what: serves byte-exact, nothing on stderr"
		skip "$what: what reached /dev/log: $SYSLOG_WHY"
		return 0
	fi
	# one datagram per line, no newline of their own: split at "<PRI>"
	wait_line "$T/syslogd.out" 'stopping:' 5 >/dev/null || fail "$what: no 'stopping:' line reached /dev/log"
	out=$(sed 's/<[0-9]\{1,3\}>/\n&/g' "$T/syslogd.out" | grep .)
	echo "$out" | grep -Eq "^<29>.*zproxy\[$zpid\]: listening on " ||
		fail "$what: no 'listening on' at daemon.notice (<29>): $(echo "$out" | head -n 3)"
	[ "$(echo "$out" | grep -Ec "^<30>.*zproxy\[$zpid\]: conn=[12] .*up=1000 down=3000 .*end=closed")" -eq 2 ] ||
		fail "$what: expected conn=1 and conn=2 at daemon.info (<30>): $(echo "$out" | grep conn= | head -n 3)"
	ok "$what: serves byte-exact, nothing on stderr; /dev/log got 'listening on' (<29> daemon.notice), 2 conn lines (<30> daemon.info), 'stopping:' with ident zproxy[$zpid]"
}

# g. --syslog where /dev/log is missing (a private one, not there yet).
# dropped_total: zproxy_log_dropped_total from a scrape of $SP.
dropped_total() {
	curl -sS -m 5 "http://127.0.0.1:$SP/metrics" 2>/dev/null |
		awk '$1 == "zproxy_log_dropped_total" { print $2 }'
}

syslog_down() {
	local what="--syslog without /dev/log" n deadline line
	syslog_ns || { skip "$what: $SYSLOG_WHY"; return 0; }
	rm -f "$T/devlog"
	server g-up
	SP=$(free_port) || fail "zp-peer port failed"
	start_port "" -v -m "$mode" -u "127.0.0.1:$PEER_PORT" --syslog \
	    --stats "127.0.0.1:$SP"
	ZP_WRAP=()
	wait_port "$SP" 10 || fail "$what: --stats does not listen"
	[ "$(grep -c . "$ZLOG")" = 1 ] &&
		grep -qx 'zproxy: --syslog: /dev/log: No such file or directory: log lines are dropped, counted in zproxy_log_dropped_total, until a syslog daemon listens there' "$ZLOG" ||
		fail "$what: want one warning on stderr, got: $(head -n 3 "$ZLOG")"
	xfer "$what"
	xfer "$what"
	# the start-up lines and the two conn= lines, counted
	deadline=$(( $(now_ms) + 5000 ))
	until n=$(dropped_total) && [ "${n:-0}" -ge 3 ]; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$what: zproxy_log_dropped_total is '$n', want 3 or more"
		sleep 0.05
	done
	# A syslog daemon comes: zproxy tries /dev/log again (at most once
	# a second, when it has a line), and says what it lost.
	zp_bg syslogd socat -u UNIX-RECV:"$T/devlog" STDOUT
	deadline=$(( $(now_ms) + 5000 ))
	until [ -S "$T/devlog" ]; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$what: socat did not make $T/devlog: $(cat "$T/syslogd.err")"
		sleep 0.02
	done
	chmod 0777 "$T/devlog"
	zp_user_dir "$T/devlog"
	deadline=$(( $(now_ms) + 10000 ))
	until grep -q 'lines dropped: nothing listened on /dev/log' "$T/syslogd.out"; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$what: no 'lines dropped' line once /dev/log came: $(head -c 600 "$T/syslogd.out")"
		xfer "$what"
	done
	line=$(sed 's/<[0-9]\{1,3\}>/\n&/g' "$T/syslogd.out" | grep -m1 'lines dropped')
	n=$(dropped_total)
	echo "$line" | grep -Eq "^<28>.*zproxy\[$ZPID\]: log: $n lines dropped: nothing listened on /dev/log\$" ||
		fail "$what: want '<28>... log: $n lines dropped: nothing listened on /dev/log' (N = zproxy_log_dropped_total), got: $line"
	stop_at "$what" "$T/syslogd.out"
	ZPID=
	[ "$(grep -c . "$ZLOG")" = 1 ] || fail "$what: more on stderr: $(head -n 3 "$ZLOG")"
	ok "$what: one warning on stderr at start-up; $n lines counted in zproxy_log_dropped_total; once /dev/log answered, lines reached it, with 'log: $n lines dropped: nothing listened on /dev/log' (daemon.warning)"
}

mode=${MODES%% *}
subcase log_file
subcase log_reopen_fails
subcase bad_log_file
for mode in $MODES; do
	subcase json
done
mode=${MODES%% *}
subcase stats
subcase rate_limit
subcase rate_limit_verbose
subcase use_syslog
subcase syslog_down

zp_done
