#!/bin/bash
# privs.sh - --user, --group and the sandbox, on a root-started zproxy:
#   a. --user nobody, both modes: a 3 MiB file each way relayed
#      byte-exact; /proc/PID/status says Uid and Gid are nobody's and
#      nogroup's in all four fields, Groups holds that group alone,
#      CapEff and CapPrm are 0000000000000000, NoNewPrivs 1, Seccomp 2
#      (a filter); the start-up line says "user nobody:nogroup, sandbox
#      on"; SIGTERM ends it with status 0;
#   b. --no-sandbox: Seccomp 0 and "sandbox off", still NoNewPrivs 1 and
#      no capability; without --user the sandbox alone gives uid 0,
#      Seccomp 2 and NoNewPrivs 1;
#   c. -l 127.0.0.1:PORT with a PORT below 1024 and --user nobody: bound
#      before the drop, relays byte-exact afterwards;
#   d. --user nobody --log-file in a root-only directory, the file moved
#      away and SIGHUP: nobody cannot create a new one there, so the old
#      file gets "cannot reopen log file ... Permission denied; still
#      writing to the old file", zproxy stays up, relays, and stops 0
#      (at -q: errors only);
#   e. bad names: an unknown --user or --group exits 67 (EX_NOUSER) with
#      one line naming it, before binding anything; --group without
#      --user exits 64;
#   f. not root: --user naming another user exits 77 (EX_NOPERM) with one
#      line; naming the user it runs as is fine (it relays).
# A refused system call fails the test in stop_zproxy (lib.sh); the
# refusal itself (EPERM, logged once) is tests/unit/test_sandbox's: no
# client can make the relay call outside its list. a-d need root: as
# another user they are reported and the test SKIPs (exit 77).
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

ROOT=0; [ "$(id -u)" = 0 ] && ROOT=1
NOBODY_UID=$(id -u nobody 2>/dev/null) || NOBODY_UID=
NOBODY_GID=$(id -g nobody 2>/dev/null) || NOBODY_GID=
NOBODY_GROUP=$(id -gn nobody 2>/dev/null) || NOBODY_GROUP=
[ -n "$NOBODY_UID" ] || { echo "not ok - no user nobody on this system"; exit 1; }

mkdata up.bin 3M
mkdata down.bin 3M

# status_field KEY: the value of KEY: in zproxy's /proc status.
status_field() {
	sed -n "s/^$1:[[:space:]]*//p" "/proc/$ZPID/status"
}

# want_status KEY VALUE WHAT
want_status() {
	local v
	v=$(status_field "$1")
	[ "$v" = "$2" ] || fail "$3: /proc/$ZPID/status $1 is '$v', want '$2'"
}

# An upstream that serves one client; sets UPORT for start_zproxy.
upstream() {
	peer_listen up -s "$T/down.bin" -o "$T/got-up" -t 30
	UPID=$PEER_PID
	UPORT=$PEER_PORT
}

# client WHAT [PORT]: the client of upstream()'s peer; both files checked.
client() {
	local what=$1 port=${2:-$ZPORT}
	rm -f "$T/got-down"
	peer client connect 127.0.0.1 "$port" -s "$T/up.bin" -o "$T/got-down" \
	    -t 30 || fail "$what: client: $(cat "$T/client.err")"
	peer_wait "$UPID" up 30 || fail "$what: upstream: $(cat "$T/up.err")"
	same_file "$T/up.bin" "$T/got-up" "$what: client->upstream"
	same_file "$T/down.bin" "$T/got-down" "$what: upstream->client"
}

# a. --user nobody: ids, capabilities, no_new_privs, seccomp; relays
dropped() {
	local what="$mode: --user nobody"
	upstream
	start_zproxy -m "$mode" -u "127.0.0.1:$UPORT" --user nobody
	want_status Uid "$NOBODY_UID	$NOBODY_UID	$NOBODY_UID	$NOBODY_UID" "$what"
	want_status Gid "$NOBODY_GID	$NOBODY_GID	$NOBODY_GID	$NOBODY_GID" "$what"
	want_status Groups "$NOBODY_GID " "$what"	# the kernel ends the list with a space
	want_status CapEff 0000000000000000 "$what"
	want_status CapPrm 0000000000000000 "$what"
	want_status CapInh 0000000000000000 "$what"
	want_status CapAmb 0000000000000000 "$what"
	want_status NoNewPrivs 1 "$what"
	want_status Seccomp 2 "$what"
	grep -q "listening on .*, user nobody:$NOBODY_GROUP, sandbox on$" "$ZLOG" ||
		fail "$what: start-up line: $(grep 'listening on' "$ZLOG")"
	client "$what"
	stop_zproxy
	ok "$what: uid/gid $NOBODY_UID/$NOBODY_GID in all four fields, groups $NOBODY_GID only, CapEff/CapPrm/CapInh/CapAmb 0, NoNewPrivs 1, Seccomp 2; 3 MiB each way byte-exact; stopped 0"
}

# b. --no-sandbox, and the sandbox without --user
nosandbox() {
	local what="--user nobody --no-sandbox"
	upstream
	start_zproxy -u "127.0.0.1:$UPORT" --user nobody --no-sandbox
	want_status Seccomp 0 "$what"
	want_status NoNewPrivs 1 "$what"
	want_status CapEff 0000000000000000 "$what"
	want_status Uid "$NOBODY_UID	$NOBODY_UID	$NOBODY_UID	$NOBODY_UID" "$what"
	grep -q "listening on .*, sandbox off$" "$ZLOG" ||
		fail "$what: start-up line: $(grep 'listening on' "$ZLOG")"
	client "$what"
	stop_zproxy
	ok "$what: Seccomp 0, NoNewPrivs 1, CapEff 0, 'sandbox off'; relays"

	what="sandbox alone (no --user)"
	upstream
	ZP_USER_ACTIVE=0 start_zproxy -u "127.0.0.1:$UPORT"
	want_status Uid "0	0	0	0" "$what"
	want_status Seccomp 2 "$what"
	want_status NoNewPrivs 1 "$what"
	grep -q "listening on .*, uid 0, sandbox on$" "$ZLOG" ||
		fail "$what: start-up line: $(grep 'listening on' "$ZLOG")"
	client "$what"
	stop_zproxy
	ok "$what: uid 0, Seccomp 2, NoNewPrivs 1, 'uid 0, sandbox on'; relays"
}

# c. a port below 1024, bound as root, served as nobody
lowport() {
	local what="--user nobody on a port below 1024" p port=
	upstream
	for p in $(shuf -i 600-1000 -n 40); do
		listening "$p" && continue
		zp_bg low "$ZPROXY" -l "127.0.0.1:$p" -u "127.0.0.1:$UPORT" \
		    --user nobody --drain-timeout 1
		ZPID=$BG_PID
		ZLOG=$T/low.err
		if wait_line "$ZLOG" 'listening on' 10 "$ZPID" >/dev/null; then
			port=$p
			break
		fi
		alive "$ZPID" && fail "$what: no 'listening on' within 10s"
		grep -qi 'in use' "$ZLOG" || fail "$what: $(head -n 3 "$ZLOG")"
	done
	[ -n "$port" ] || fail "$what: no free port in 600-1000 after 40 tries"
	want_status Uid "$NOBODY_UID	$NOBODY_UID	$NOBODY_UID	$NOBODY_UID" "$what"
	want_status CapEff 0000000000000000 "$what"
	client "$what (port $port)" "$port"
	stop_zproxy
	ok "$what: 127.0.0.1:$port bound before the drop, relayed byte-exact as uid $NOBODY_UID"
}

# d. SIGHUP when nobody cannot create the log file again
hup_denied() {
	local what="--user nobody, SIGHUP with the log directory root's" d=$T/rootlog
	mkdir -m 0755 "$d" || fail "mkdir $d"
	chmod 0755 "$T"		# nobody may write the old file it holds open
	upstream
	# -q: start_zproxy waits for the port (the log is not on stderr);
	# the error line still shows.
	start_zproxy -q -u "127.0.0.1:$UPORT" --user nobody --log-file "$d/zp.log"
	mv "$d/zp.log" "$d/zp.log.1" || fail "$what: mv"
	kill -HUP "$ZPID"
	wait_line "$d/zp.log.1" "cannot reopen log file '$d/zp.log': Permission denied; still writing to the old file" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'cannot reopen' line: $(tail -n 3 "$d/zp.log.1")"
	[ ! -e "$d/zp.log" ] || fail "$what: $d/zp.log was created"
	zproxy_alive "after the failed reopen"
	client "$what"
	kill -TERM "$ZPID"
	zp_wait_exit "$ZPID" 10 || fail "$what: exit status $? after SIGTERM"
	sandbox_clean "$d/zp.log.1" || fail "$what: the sandbox refused a call: $(grep sandbox "$d/zp.log.1")"
	ZPID=
	ok "$what: 'cannot reopen ... Permission denied' logged in the old file, zproxy stayed up, relayed and stopped 0"
}

# expect_exit RC WHAT PATTERN ARGS...: zproxy ARGS exits RC at once with
# one line on stderr matching PATTERN, and binds nothing.
expect_exit() {
	local want=$1 what=$2 pat=$3 rc=0 port
	shift 3
	port=$(free_port) || fail "zp-peer port failed"
	timeout -k 2 10 "$@" -l "127.0.0.1:$port" -u 127.0.0.1:9 \
	    >"$T/bad.out" 2>"$T/bad.err" || rc=$?
	[ "$rc" = "$want" ] || fail "$what: exit $rc, want $want: $(head -c 300 "$T/bad.err")"
	[ "$(wc -l <"$T/bad.err")" = 1 ] ||
		fail "$what: want one line, got: $(cat "$T/bad.err")"
	grep -Eq "$pat" "$T/bad.err" || fail "$what: message: $(cat "$T/bad.err")"
	ok "$what: exit $want, '$(cat "$T/bad.err")'"
}

# e. bad names
badnames() {
	expect_exit 67 "--user no-such-user-zp" "^zproxy: unknown user 'no-such-user-zp'$" \
	    "$ZPROXY" --user no-such-user-zp
	expect_exit 67 "--group no-such-group-zp" "^zproxy: unknown group 'no-such-group-zp'$" \
	    "$ZPROXY" --user nobody --group no-such-group-zp
	expect_exit 64 "--group alone" "^zproxy: --group needs --user \(see zproxy --help\)$" \
	    "$ZPROXY" --group "$NOBODY_GROUP"
}

# f. not root
notroot() {
	local what="as nobody: --user root"
	local -a asnobody=()
	if [ "$ROOT" = 1 ]; then
		asnobody=(setpriv --reuid "$NOBODY_UID" --regid "$NOBODY_GID" --clear-groups)
		expect_exit 77 "$what" "^zproxy: --user root needs root: this process runs as uid $NOBODY_UID gid $NOBODY_GID$" \
		    "${asnobody[@]}" "$ZPROXY" --user root
	else
		expect_exit 77 "as $(id -un): --user root" "^zproxy: --user root needs root: " \
		    "$ZPROXY" --user root
	fi
	what="as $( [ "$ROOT" = 1 ] && echo nobody || id -un): --user naming itself"
	upstream
	ZP_WRAP=("${asnobody[@]}")
	ZP_USER_ACTIVE=0 start_zproxy -u "127.0.0.1:$UPORT" \
	    --user "$( [ "$ROOT" = 1 ] && echo nobody || id -un)"
	ZP_WRAP=()
	grep -q "listening on .*, user " "$ZLOG" ||
		fail "$what: start-up line: $(grep 'listening on' "$ZLOG")"
	client "$what"
	stop_zproxy
	ok "$what: runs and relays"
}

subcase badnames
subcase notroot
if [ "$ROOT" = 1 ]; then
	for mode in splice copy; do
		subcase dropped
	done
	subcase nosandbox
	subcase lowport
	subcase hup_denied
else
	note "not root: --user nobody, the /proc checks, the low port and the SIGHUP case (a-d) need root and were NOT run"
	[ "$ZP_FAILS" -gt 0 ] && zp_done
	exit 77
fi
zp_done
