#!/bin/bash
# config.sh - -f FILE / --config FILE and --check (issue 27, section 4,
# in part):
#   a. every option round-trips: two files that together name every
#      option of the table (but -f, --check, -h, -V) with a value other
#      than its default; `zproxy -f FILE --check` exits 0 and prints
#      exactly the file's options, in its order (comments and blank
#      lines, indented and padded ones, are read as the command line
#      reads them); and the printed file read back prints itself again;
#   b. the command line wins: an option it gives replaces the file's
#      (each -u of the file for a -u, the one value of --threads), one
#      it does not give is the file's;
#   c. each bad line is refused with "FILE:LINE: what" and exit 64:
#      an unknown option, a value missing, a flag with a value, a bad
#      value, a single-valued option twice, -f inside the file, a NUL
#      byte; a missing file is "-f FILE: No such file or directory";
#   d. a zproxy whose listen, upstream and mode come from a file relays
#      1 MiB each way, byte for byte, in each mode;
#   e. zproxy ctl reload: a running zproxy (-f FILE, --framing lf,
#      upstreams A and B, 4 clients: 2 on each) whose file now gives A
#      weight 3, a new C, no B, another idle-timeout, balance and log
#      level: the answer names the 6 changes; B goes to maint and, once
#      its 2 framed streams moved to A or C (leastconn now), is removed
#      (no longer listed);
#      A weighs 3, C is ready; the next 8 clients go to A and C only;
#      reloaded again unchanged: "nothing changed"; a broken line
#      (FILE:LINE) and a new listen address are refused, nothing
#      changed; a zproxy without -f refuses reload.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

command -v jq >/dev/null || fail "jq is needed (apt-get install jq)"

# check FILE [ARGS...]: zproxy -f FILE --check ARGS; its lines but the
# comments in $T/check.out, errors in $T/check.err; its status returned.
check() {
	local f=$1
	shift
	"$ZPROXY" -f "$f" --check "$@" >"$T/check.raw" 2>"$T/check.err"
	local rc=$?
	grep -v '^#' "$T/check.raw" >"$T/check.out"
	return $rc
}

case_roundtrip() {
	local what="every option round-trips" a b c
	a=$T/all-a.conf
	b=$T/all-b.conf
	c=$T/all-c.conf
	cat >"$a" <<-EOF
	# every option but those of file b, none at its default
	listen 127.0.0.1:1
	listen [::1]:2
	listen udp@127.0.0.1:5
	upstream 127.0.0.1:3,weight=2
	upstream 127.0.0.1:4,backup
	mode copy
	pipe-size 256K
	buffer-size 64K
	splice-min 8K
	coalesce 0.02
	framing octet
	max-frame 1M
	max-lifetime 3600
	stall-timeout 20
	rebalance load
	rebalance-rate 5
	replay-window 1M
	spool $T/spool
	spool-max 2G
	spool-senders 2
	spool-sync 2
	udp-idle 30
	udp-max-sources 500
	udp-rcvbuf 4M
	max-conns 1000
	threads 2
	connect-timeout 3
	balance leastconn
	retries 2
	max-fails 2
	fail-timeout 5
	check-interval 10
	resolve-interval 60
	idle-timeout 600
	fin-timeout 60
	linger-timeout 10
	keepalive
	drain-timeout 10
	log-file $T/zproxy.log
	log-format json
	stats 127.0.0.1:5
	stats-max-conns 8
	stats-timeout 3
	send-proxy v2
	dns-server 127.0.0.1:53
	source 127.0.0.1
	mirror 127.0.0.1:6
	allow 127.0.0.0/8
	deny 10.0.0.0/8
	max-conns-per-source 100
	accept-proxy
	proxy-from 127.0.0.1/32
	proxy-timeout 2
	user nobody
	group nogroup
	no-sandbox
	control $T/a.ctl
	takeover $T/b.ctl
	daemon
	verbose
	verbose
	EOF
	cat >"$b" <<-EOF
	listen 127.0.0.1:7
	listen tls@127.0.0.1:8
	upstream original
	tls-cert $T/c.pem
	tls-key $T/k.pem
	tls-client-ca $T/ca.pem
	tls-min-version 1.3
	tls-ciphers HIGH
	tls-ciphersuites TLS_AES_128_GCM_SHA256
	tls-handshake-timeout 5
	tls-max-pending 100
	tproxy
	allow-dst 10.0.0.0/8
	syslog
	quiet
	EOF
	cat >"$c" <<-EOF
	listen 127.0.0.1:9
	upstream tls@127.0.0.1:6514
	upstream-ca $T/ca.pem
	upstream-sni logs.example
	upstream-cert $T/c.pem
	upstream-key $T/k.pem
	upstream-verify none
	EOF
	for f in "$a" "$b" "$c"; do
		check "$f" || fail "$what: $f: status $?: $(cat "$T/check.err")"
		grep -v '^#' "$f" | diff -u - "$T/check.out" >"$T/check.diff" ||
			fail "$what: --check printed something else than ${f##*/}: $(grep '^[-+][^-+]' "$T/check.diff" | head -n 4 | tr '\n' ' ')"
		cp "$T/check.raw" "$T/printed.conf"
		check "$T/printed.conf" && grep -v '^#' "$T/printed.conf" | cmp -s - "$T/check.out" ||
			fail "$what: the printed ${f##*/} does not read back as itself"
	done
	# Every option of the table, but -f, --check, -h, -V, is in a or b
	# (and --io-uring, which a build without io_uring refuses: uring.sh).
	"$ZPROXY" --help | grep -o -- '--[a-z-]*' | sort -u >"$T/help.opts"
	cat "$a" "$b" "$c" | awk '!/^#/ { print "--" $1 }' | sort -u >"$T/file.opts"
	comm -23 "$T/help.opts" "$T/file.opts" | grep -v -x -e --config -e --check -e --help -e --version -e --json -e --io-uring >"$T/missing.opts"
	[ ! -s "$T/missing.opts" ] ||
		fail "$what: options in --help that no file gives: $(tr '\n' ' ' <"$T/missing.opts")"
	ok "$what: $(grep -vc '^#' "$a") and $(grep -vc '^#' "$b") lines: --check prints each file's options as given, and reads its own output back"

	# Blank lines, indentation and padding, as the command line reads them.
	printf '\n  # indented comment\n\tlisten   127.0.0.1:1  \r\nupstream 127.0.0.1:2\n\n  rebalance  \nframing lf\n' >"$T/loose.conf"
	check "$T/loose.conf" || fail "$what: a loosely written file: $(cat "$T/check.err")"
	printf 'listen 127.0.0.1:1\nupstream 127.0.0.1:2\nrebalance\nframing lf\n' |
		cmp -s - "$T/check.out" || fail "$what: a loosely written file read as: $(tr '\n' ';' <"$T/check.out")"
	ok "$what: blank lines, comments, tabs, padding and CRLF read as the command line reads them"
}

case_override() {
	local what="the command line wins" f=$T/over.conf
	printf 'listen 127.0.0.1:1\nupstream 127.0.0.1:2\nupstream 127.0.0.1:3\nthreads 2\nframing lf\n' >"$f"
	check "$f" -u 127.0.0.1:4 --threads 3 || fail "$what: status $?: $(cat "$T/check.err")"
	printf 'listen 127.0.0.1:1\nframing lf\nupstream 127.0.0.1:4\nthreads 3\n' |
		cmp -s - "$T/check.out" || fail "$what: read as: $(tr '\n' ';' <"$T/check.out")"
	ok "$what: -u and --threads on the command line replace the file's; its listen and framing stay"
}

case_errors() {
	local what="bad lines" f=$T/bad.conf line n want rc
	while IFS='|' read -r line n want; do
		printf 'listen 127.0.0.1:1\nupstream 127.0.0.1:2\n%b\n' "$line" >"$f"
		"$ZPROXY" -f "$f" >"$T/bad.out" 2>"$T/bad.err"
		rc=$?
		[ "$rc" = 64 ] || fail "$what: '$line': status $rc, want 64"
		[ "$(wc -l <"$T/bad.err")" = 1 ] && grep -qF "zproxy: $f:$n: $want" "$T/bad.err" ||
			fail "$what: '$line': said '$(cat "$T/bad.err")', want '$f:$n: $want'"
	done <<-'EOF'
	bogus 3|3|unknown option 'bogus'
	framing|3|option 'framing' needs a value
	keepalive yes|3|option 'keepalive' takes no value
	rebalance yes|3|invalid rebalance 'yes': expected count or load
	threads 0|3|invalid threads '0'
	mode copy\nmode splice|4|option --mode given twice ('copy', then 'splice')
	config other.conf|3|'config' belongs on the command line
	check|3|'check' belongs on the command line
	framing l\0f|3|a NUL byte
	framing l\rf|3|a control character (0x0d)
	EOF
	"$ZPROXY" -f "$T/nonexistent.conf" >/dev/null 2>"$T/bad.err"
	rc=$?
	[ "$rc" = 64 ] && grep -qF -- "-f $T/nonexistent.conf: No such file or directory" "$T/bad.err" ||
		fail "$what: a missing file: status $rc, '$(cat "$T/bad.err")'"
	ok "$what: each refused with FILE:LINE: and exit 64; a missing file too"
}

case_run() {
	local mode=$1 what="$1: a zproxy configured by a file" f lport user=()
	f=$T/run-$mode.conf
	peer_listen "up-$mode" --echo -t 60
	lport=$(free_port) || fail "zp-peer port failed"
	printf 'listen 127.0.0.1:%s\nupstream 127.0.0.1:%s\nmode %s\ndrain-timeout 1\n' \
	    "$lport" "$PEER_PORT" "$mode" >"$f"
	# Not start_zproxy: its -l would replace the file's.
	[ "$ZP_USER_ACTIVE" = 1 ] && user=(--user "$ZP_USER")
	ZLOG=$T/run-$mode.log
	"${ZP_WRAP[@]}" "$ZPROXY" -f "$f" -v "${user[@]}" 2>"$ZLOG" &
	ZPID=$!
	ZP_PIDS+=("$ZPID")
	ZQUIET=0
	wait_line "$ZLOG" "listening on 127.0.0.1:$lport" 10 "$ZPID" >/dev/null ||
		fail "$what: it does not listen on the file's port: $(head -n 3 "$ZLOG")"
	peer "client-$mode" connect 127.0.0.1 "$lport" -g 1M --seed 7 -x 1M ||
		fail "$what: $(cat "$T/client-$mode.err")"
	wait_line "$ZLOG" " mode=$mode .*end=closed" 10 >/dev/null ||
		fail "$what: the log names no mode=$mode connection"
	stop_zproxy
	ok "$what: 1 MiB each way through its listen and upstream, byte for byte, mode $mode"
}

# up_list: "NAME=state,weight,streams ..." from show upstreams --json.
up_list() {
	"$ZPROXY" ctl --control "$CTL" --json show upstreams >"$T/ups.json" ||
		fail "$what: show upstreams failed"
	jq -r '[.[] | "\(.name)=\(.state),\(.weight),\(.streams)"] | join(" ")' "$T/ups.json"
}

case_reload() {
	local what="zproxy ctl reload" f A B C lport fds=() fd i v user=() t0
	f=$T/reload.conf
	for i in A B C; do
		peer_listen "sink$i" -n 0 -t 0 --no-shut --allow-reset
		printf -v "$i" '127.0.0.1:%s' "$PEER_PORT"
	done
	lport=$(free_port) || fail "zp-peer port failed"
	CTL=$T/reload.ctl
	printf 'listen 127.0.0.1:%s\nupstream %s\nupstream %s\nframing lf\nidle-timeout 300\ncontrol %s\ndrain-timeout 1\n' \
	    "$lport" "$A" "$B" "$CTL" >"$f"
	[ "$ZP_USER_ACTIVE" = 1 ] && user=(--user "$ZP_USER") && zp_user_dir "$T"
	ZLOG=$T/reload.log
	"${ZP_WRAP[@]}" "$ZPROXY" -f "$f" "${user[@]}" 2>"$ZLOG" &
	ZPID=$!
	ZP_PIDS+=("$ZPID")
	ZQUIET=0
	wait_line "$ZLOG" "listening on 127.0.0.1:$lport" 10 "$ZPID" >/dev/null ||
		fail "$what: zproxy did not start: $(head -n 3 "$ZLOG")"
	for i in 1 2 3 4; do
		exec {fd}<>"/dev/tcp/127.0.0.1/$lport" || fail "$what: connect"
		fds+=("$fd")
		echo "m$i" >&"$fd"
	done
	t0=$(now_ms)
	until [ "$(up_list)" = "$A=ready,1,2 $B=ready,1,2" ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: before: $(up_list)"
		sleep 0.05
	done
	printf 'listen 127.0.0.1:%s\nupstream %s,weight=3\nupstream %s\nframing lf\nidle-timeout 60\nbalance leastconn\nverbose\ncontrol %s\ndrain-timeout 1\n' \
	    "$lport" "$A" "$C" "$CTL" >"$f"
	"$ZPROXY" ctl --control "$CTL" reload >"$T/reload.out" 2>&1 ||
		fail "$what: $(cat "$T/reload.out")"
	for v in "upstream $A weight 3 (was 1)" "upstream $C added (weight 1)" \
	    "upstream $B in maint, 2 stream(s) on it: removed once it is empty" \
	    "--idle-timeout 60 (was 300)" "--balance leastconn (was roundrobin)" \
	    "log level -v" "6 change(s)"; do
		grep -qF -- "$v" "$T/reload.out" || fail "$what: the answer lacks '$v': $(cat "$T/reload.out")"
	done
	# B's streams go to the idlest ready one (leastconn now): A or C.
	t0=$(now_ms)
	until v=$(up_list) && [ "$(jq '[.[].streams] | add' "$T/ups.json")" = 4 ] &&
	    case $v in "$A=ready,3,"*" $C=ready,1,"*) ! [[ $v == *" $B="* ]] ;; *) false ;; esac; do
		[ $(( $(now_ms) - t0 )) -lt 15000 ] || fail "$what: after: $v"
		sleep 0.1
	done
	wait_line "$ZLOG" "reload: upstream $B is empty: removed" 5 >/dev/null ||
		fail "$what: no 'removed' line for $B"
	ok "$what: 6 changes answered; $B's 2 framed streams moved off ($v) and $B was removed; $A weighs 3, $C added"
	for i in 1 2 3 4 5 6 7 8; do
		exec {fd}<>"/dev/tcp/127.0.0.1/$lport" || fail "$what: connect"
		fds+=("$fd")
		echo "n$i" >&"$fd"
	done
	t0=$(now_ms)
	until v=$(up_list) && [ "$(jq '[.[].streams] | add' "$T/ups.json")" = 12 ]; do
		[ $(( $(now_ms) - t0 )) -lt 10000 ] || fail "$what: 8 more clients: $v"
		sleep 0.05
	done
	case $v in
	"$A=ready,3,"*" $C=ready,1,"*) ;;
	*) fail "$what: the 8 clients went elsewhere: $v" ;;
	esac
	"$ZPROXY" ctl --control "$CTL" reload >"$T/reload.out" 2>&1 &&
		grep -q "nothing changed" "$T/reload.out" ||
		fail "$what: a second reload: $(cat "$T/reload.out")"
	ok "$what: 8 more clients on $A and $C only ($v); reloaded again: nothing changed"
	cp "$f" "$T/good.conf"
	printf 'bogus 1\n' >>"$f"
	"$ZPROXY" ctl --control "$CTL" reload >"$T/reload.out" 2>&1 &&
		fail "$what: a broken file was reloaded"
	grep -qF "reload: $f:10: unknown option 'bogus'; nothing changed" "$T/reload.out" ||
		fail "$what: a broken file: $(cat "$T/reload.out")"
	sed "s/^listen .*/listen 127.0.0.1:1/" "$T/good.conf" >"$f"
	"$ZPROXY" ctl --control "$CTL" reload >"$T/reload.out" 2>&1 &&
		fail "$what: a new listen address was reloaded"
	grep -qF "reload: --listen cannot change in a running zproxy" "$T/reload.out" ||
		fail "$what: a new listen: $(cat "$T/reload.out")"
	[ "$(up_list)" = "$v" ] || fail "$what: a refused reload changed the upstreams: $(up_list)"
	ok "$what: a broken line ($f:10) and a new listen address refused, nothing changed"
	for fd in "${fds[@]}"; do exec {fd}>&-; done
	stop_zproxy
	CTL=$T/nofile.ctl
	start_zproxy --control "$CTL" -u "$A"
	"$ZPROXY" ctl --control "$CTL" reload >"$T/reload.out" 2>&1 &&
		fail "$what: reload without -f succeeded"
	grep -q "runs without -f FILE" "$T/reload.out" || fail "$what: without -f: $(cat "$T/reload.out")"
	stop_zproxy
	ok "$what: without -f: refused"
}

subcase case_roundtrip
subcase case_override
subcase case_errors
for mode in $MODES; do
	subcase case_run "$mode"
done
subcase case_reload
zp_done
