# lib.sh - shared helpers for zproxy's integration tests.
#
# Sourced by each test with `. "$ZP_TESTLIB"`. Needs ZPROXY (the daemon) and
# ZP_PEER (tests/tools/zp-peer); both are set by `make check`.
#
# Conventions:
#   - every test writes only below $T (mktemp -d), removed at exit;
#   - every background process a test starts goes through zp_bg (or the
#     helpers built on it) so that cleanup kills exactly those PIDs;
#   - every wait has a deadline; sleeps are poll intervals or the stall a
#     test is about;
#   - ports are never fixed: peers bind port 0 and print what they got,
#     zproxy gets a port from `zp-peer port` and retries if it was taken;
#   - each check prints "ok - ..." or "not ok - ..."; fail() prints the
#     logs that explain it and exits 1: the whole test, or, inside
#     `subcase FUNC`, only that subcase (the test goes on and zp_done
#     exits 1 at the end);
#   - a check that cannot be made on this machine (a tool or a kernel
#     feature missing) is never an "ok": skip() prints
#     "ok - # SKIP reason" (TAP's form) and zp_done makes the whole test
#     a SKIP (exit 77) unless something failed, so that automake's
#     summary shows it.

set -u

: "${ZPROXY:?ZPROXY must name the zproxy binary}"
: "${ZP_PEER:?ZP_PEER must name the zp-peer binary}"
[ -x "$ZPROXY" ] || { echo "not ok - ZPROXY=$ZPROXY is not executable"; exit 1; }
[ -x "$ZP_PEER" ] || { echo "not ok - ZP_PEER=$ZP_PEER is not executable"; exit 1; }

T=$(mktemp -d "${TMPDIR:-/tmp}/zp-test.XXXXXX") || exit 1
ZP_T0=$T	# the test's own $T (subcase_bg's have theirs below it)
ZP_PIDS=()		# everything we started in the background
ZP_NAME=${0##*/}
ZPID=		# current zproxy
ZQUIET=0	# it was started with -q
ZPORT=
ZLOG=
ZP_SEEN=0	# conn= log lines already looked at
ZP_TEST_START=$SECONDS

# ours PID: is PID a live child of this shell? (A PID reaped earlier may
# have been reused by a process that is none of ours.)
ours() {
	[ -r "/proc/$1/stat" ] &&
		[ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f2)" = "$BASHPID" ]
}

# zp_stop PID: SIGTERM a process of ours, if it still runs.
zp_stop() { ours "$1" && kill -TERM "$1" 2>/dev/null; return 0; }

# Stop every background process this shell started and that still runs:
# SIGTERM, then SIGKILL for those still there after 2 s.
zp_kill_pids() {
	local p
	for p in "${ZP_PIDS[@]}"; do
		ours "$p" && kill -TERM "$p" 2>/dev/null
	done
	for p in "${ZP_PIDS[@]}"; do
		ours "$p" || continue
		zp_wait_exit "$p" 2 >/dev/null 2>&1 || kill -KILL "$p" 2>/dev/null
	done
	wait 2>/dev/null
}

zp_cleanup() {
	local p
	[ -n "${ZP_SUB:-}" ] && kill -TERM "$ZP_SUB" 2>/dev/null && wait "$ZP_SUB" 2>/dev/null
	# concurrent subcases cut short (a timeout): stop them, show their
	# output so far
	for p in "${ZP_BG_SUBS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	[ "${#ZP_BG_SUBS[@]}" -eq 0 ] || wait 2>/dev/null
	for p in "${ZP_BG_OUTS[@]}"; do
		[ -f "$p" ] && cat "$p"
	done
	zp_kill_pids
	rm -rf "$T"
}
trap zp_cleanup EXIT
trap 'echo "not ok - interrupted"; exit 1' INT TERM HUP

ZP_SUB=		# the running subcase
ZP_FAILS=0	# subcases that failed

# subcase FUNC ARGS...: run FUNC in a subshell of its own, so that a
# fail() in it ends only that subcase (its processes are stopped) and the
# test goes on with the next; zp_done reports. Variables set in FUNC do not
# come back.
subcase() {
	local t0=$SECONDS
	: >"$T/.subcase-start"
	(
		ZP_PIDS=()
		ZP_SUB=
		trap zp_kill_pids EXIT
		trap 'exit 1' INT TERM HUP
		"$@"
	) &
	ZP_SUB=$!
	wait "$ZP_SUB"
	[ $? -eq 0 ] || ZP_FAILS=$((ZP_FAILS + 1))
	ZP_SUB=
	echo "# subcase $*: $((SECONDS - t0))s"
	return 0
}

ZP_BG_N=0	# subcase_bg's started so far
ZP_BG_SUBS=()	# the running ones: PIDs, output files, names, start times
ZP_BG_OUTS=()
ZP_BG_NAMES=()
ZP_BG_T0S=()

# subcase_bg FUNC ARGS...: subcase, but in the background, alongside
# others, until subcases_wait: for independent subcases that spend their
# time waiting (on a timeout, a pause, a collector) rather than
# computing. Each gets a directory of its own as $T ($ZP_T0/sub-N: no
# name it writes meets a concurrent one's), its own zproxy, processes
# and ports; its output is kept and printed whole by subcases_wait. FUNC
# may itself run subcases one after the other (a group: one mode's); it
# fails if any of them failed.
subcase_bg() {
	local dir out
	ZP_BG_N=$((ZP_BG_N + 1))
	dir=$ZP_T0/sub-$ZP_BG_N
	out=$ZP_T0/sub-$ZP_BG_N.out
	mkdir -p "$dir" || fail "mkdir $dir"
	(
		T=$dir
		ZP_PIDS=() ZP_SUB= ZP_FAILS=0
		ZP_BG_SUBS=() ZP_BG_OUTS=() ZP_BG_NAMES=() ZP_BG_T0S=()
		ZPID= ZPORT= ZLOG= ZP_SEEN=0
		trap 'zp_kill_pids; [ "$ZP_FAILS" -eq 0 ] || echo "$ZP_FAILS" >"$T/.fails"' EXIT
		trap 'exit 1' INT TERM HUP
		"$@" && [ "$ZP_FAILS" -eq 0 ]
	) >"$out" 2>&1 &
	ZP_BG_SUBS+=("$!")
	ZP_BG_OUTS+=("$out")
	ZP_BG_NAMES+=("$*")
	ZP_BG_T0S+=("$SECONDS")
}

# subcases_wait: wait for every subcase_bg started, print the output of
# each in the order they were started; each failed subcase counts (those
# of a group each).
subcases_wait() {
	local i rc n f
	for i in "${!ZP_BG_SUBS[@]}"; do
		wait "${ZP_BG_SUBS[$i]}"
		rc=$?
		cat "${ZP_BG_OUTS[$i]}"
		echo "# subcase ${ZP_BG_NAMES[$i]} (concurrent): ended after $((SECONDS - ZP_BG_T0S[i]))s"
		if [ "$rc" -ne 0 ]; then
			n=1
			f=${ZP_BG_OUTS[$i]%.out}/.fails
			[ -s "$f" ] && n=$(cat "$f")
			ZP_FAILS=$((ZP_FAILS + n))
		fi
	done
	ZP_BG_SUBS=() ZP_BG_OUTS=() ZP_BG_NAMES=() ZP_BG_T0S=()
	return 0
}

# zp_done: the test's last word: exit 1 if a subcase failed, else 77
# (automake's SKIP) if a check was skipped, else 0. A test that passed
# all it could check but skipped one thing is a SKIP, never a PASS: the
# log (and .ci/run's summary) says what was not tested.
zp_done() {
	local took="$((SECONDS - ZP_TEST_START))s" n=0
	[ -f "$ZP_T0/.skipped" ] && n=$(grep -c . "$ZP_T0/.skipped")
	if [ "$ZP_FAILS" -gt 0 ]; then
		echo "# $ZP_NAME: $ZP_FAILS subcase(s) failed, $n check(s) skipped ($took)"
		exit 1
	fi
	if [ "$n" -gt 0 ]; then
		echo "# $ZP_NAME: SKIP: $n check(s) skipped, the rest passed ($took):"
		sed 's/^/#   /' "$ZP_T0/.skipped"
		exit 77
	fi
	echo "# $ZP_NAME: all passed ($took)"
	exit 0
}

ok() { echo "ok - $*"; }

# skip WHY: a check that cannot be made here (WHY names what is missing).
# Recorded in $T, so that a skip in a subcase reaches zp_done.
skip() {
	echo "ok - # SKIP $*"
	echo "$*" >>"$ZP_T0/.skipped"
}

# Print the logs that explain a failure, then exit 1.
fail() {
	local f
	echo "not ok - $*"
	if [ -n "$ZLOG" ] && [ -f "$ZLOG" ]; then
		echo "# --- zproxy log ($ZLOG), last 30 lines:"
		tail -n 30 "$ZLOG" | sed 's/^/#   /'
	fi
	for f in "$T"/*.err; do
		[ -s "$f" ] || continue
		# only what this subcase wrote
		[ -e "$T/.subcase-start" ] && ! [ "$f" -nt "$T/.subcase-start" ] &&
			continue
		echo "# --- ${f##*/}:"
		tail -n 5 "$f" | sed 's/^/#   /'
	done
	exit 1
}

note() { echo "# $*"; }

# Milliseconds since the epoch.
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# sleep_until MS: sleep until now_ms reaches MS (return at once if it has).
sleep_until() {
	local d=$(( $1 - $(now_ms) ))
	[ "$d" -le 0 ] || sleep "$(awk -v d="$d" 'BEGIN { printf "%.3f", d / 1000 }')"
}

# proc_state PID: its state letter (R, S, T stopped, Z...), or nothing.
proc_state() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1; }

# True while PID exists and is not a zombie.
alive() {
	local st
	st=$(proc_state "$1")
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# zp_wait_exit PID SECS: wait up to SECS for a child to exit; return its
# exit status, or 124 (still running) after the deadline.
zp_wait_exit() {
	local pid=$1 deadline=$(( $(now_ms) + ${2:-10} * 1000 ))
	while alive "$pid"; do
		[ "$(now_ms)" -ge "$deadline" ] && return 124
		sleep 0.02
	done
	wait "$pid" 2>/dev/null
}

# zp_bg NAME CMD...: run CMD in the background, stdout to $T/NAME.out,
# stderr to $T/NAME.err; the PID is in BG_PID and remembered for cleanup.
zp_bg() {
	local name=$1; shift
	# Empty them here: the child's own truncation comes too late for a
	# reader that starts right away and would see a previous run's port.
	: >"$T/$name.out"; : >"$T/$name.err"
	"$@" >"$T/$name.out" 2>"$T/$name.err" &
	BG_PID=$!
	ZP_PIDS+=("$BG_PID")
}

# wait_line FILE REGEX SECS [PID]: wait until FILE has a line matching the
# extended REGEX; gives up early when PID exits. Prints the line.
wait_line() {
	local file=$1 re=$2 deadline=$(( $(now_ms) + $3 * 1000 )) pid=${4:-}
	while :; do
		if [ -f "$file" ] && grep -Eq -- "$re" "$file"; then
			grep -E -m1 -- "$re" "$file"
			return 0
		fi
		[ -n "$pid" ] && ! alive "$pid" && {
			grep -Eq -- "$re" "$file" 2>/dev/null && {
				grep -E -m1 -- "$re" "$file"; return 0; }
			return 1
		}
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# peer_listen NAME ARGS...: start `zp-peer listen ARGS`, wait for the port
# it prints. Sets PEER_PID, PEER_PORT.
peer_listen() {
	local name=$1; shift
	zp_bg "$name" "$ZP_PEER" listen "$@"
	PEER_PID=$BG_PID
	PEER_PORT=$(wait_line "$T/$name.out" '^[0-9]+$' 10 "$PEER_PID") ||
		fail "zp-peer listen $* did not start: $(head -c 300 "$T/$name.err")"
}

# peer_wait PID NAME SECS: wait for a peer started in the background;
# return its status (124 when it had to be killed at the deadline).
peer_wait() {
	local pid=$1 name=$2 rc
	zp_wait_exit "$pid" "${3:-30}"
	rc=$?
	if [ "$rc" = 124 ]; then
		kill -TERM "$pid" 2>/dev/null
		zp_wait_exit "$pid" 2 >/dev/null
		note "$name still running after ${3:-30}s: killed"
	fi
	return "$rc"
}

# peer NAME ARGS...: run zp-peer in the foreground (bounded by timeout),
# stdout to $T/NAME.out, stderr to $T/NAME.err; returns its status.
peer() {
	local name=$1; shift
	timeout -k 5 "${PEER_TIMEOUT:-60}" "$ZP_PEER" "$@" \
		>"$T/$name.out" 2>"$T/$name.err"
}

# A port nobody listens on right now (it may be taken by the time it is
# used; start_zproxy retries).
free_port() { "$ZP_PEER" port "$@"; }

# Create a file of random bytes: mkdata NAME SIZE (head -c syntax: 64M).
mkdata() { head -c "$2" /dev/urandom >"$T/$1" || fail "cannot write $T/$1"; }

sha() { sha256sum <"$1" | cut -d' ' -f1; }

# same_file A B WHAT: assert both files have the same SHA-256.
same_file() {
	local a b
	[ -f "$2" ] || fail "$3: $2 missing"
	a=$(sha "$1"); b=$(sha "$2")
	[ "$a" = "$b" ] ||
		fail "$3: sha256 differs ($(stat -c %s "$1") bytes sent, $(stat -c %s "$2") received)"
}

have_ipv6() {
	[ -z "${ZP_NO_IPV6:-}" ] && [ -r /proc/net/if_inet6 ] &&
		grep -q '^0\{31\}1 ' /proc/net/if_inet6
}

# Is a TCP socket LISTENing on port P (any address)? Reads /proc/net/tcp*:
# no connection is made, so nobody sees a stray client.
listening() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }'
}

# wait_port PORT [SECS]: wait until something listens on PORT.
wait_port() {
	local deadline=$(( $(now_ms) + ${2:-10} * 1000 ))
	until listening "$1"; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# ---- zproxy ------------------------------------------------------------

# ZP_WRAP: an optional command prefix for zproxy (an array), e.g.
#   ZP_WRAP=(bash -c 'ulimit -n 64 && exec "$0" "$@"')
# The prefix must exec zproxy so that ZPID is zproxy itself.
ZP_WRAP=()

# ZP_USER (from the environment): when set and the test runs as root,
# every zproxy start_zproxy starts gets --user $ZP_USER (unless the test
# gives --user itself), so that the whole suite runs as that user (CI:
# ZP_USER=nobody). ZP_USER_ACTIVE is 1 when that happens. A test whose
# zproxy must open files after the drop (the log file at SIGHUP) makes
# them reachable with zp_user_dir.
ZP_USER=${ZP_USER:-}
ZP_USER_ACTIVE=0
if [ -n "$ZP_USER" ] && [ "$(id -u)" = 0 ]; then
	ZP_USER_ACTIVE=1
fi

# zp_as_zproxy CMD...: run CMD as the user zproxy runs as: $ZP_USER under
# ZP_USER, else as we are. For what acts on zproxy from outside
# (prlimit --pid): root without CAP_SYS_RESOURCE (some containers) may
# not change another user's limits, but that user may.
zp_as_zproxy() {
	if [ "$ZP_USER_ACTIVE" = 1 ]; then
		setpriv --reuid "$ZP_USER" --regid "$(id -g "$ZP_USER")" \
		    --clear-groups "$@"
	else
		"$@"
	fi
}

# zp_user_dir DIR...: make DIR (and $T, its parent here) usable by
# $ZP_USER when the suite runs as that user; nothing otherwise.
zp_user_dir() {
	[ "$ZP_USER_ACTIVE" = 1 ] || return 0
	chmod 0755 "$ZP_T0" "$T" || fail "chmod $T"
	chown "$ZP_USER" "$@" || fail "chown $ZP_USER $*"
}

# start_zproxy ARGS...: start zproxy with ARGS, where @PORT@ stands for a
# free port picked here; without -l/--listen, "-l 127.0.0.1:@PORT@" is
# added. Waits for "listening on" (or, with -q, for the socket in
# /proc/net/tcp). Sets ZPID, ZPORT, ZLOG. Retries when the port was taken.
start_zproxy() {
	local args a has_l=0 quiet=0 has_drain=0 has_user=0
	for a in "$@"; do
		case $a in
		--user|--user=*) has_user=1 ;;
		-l|--listen|--listen=*|-l?*) has_l=1 ;;
		-q|--quiet) quiet=1 ;;
		--drain-timeout|--drain-timeout=*) has_drain=1 ;;
		esac
	done
	for _ in 1 2 3 4 5; do
		ZPORT=$(free_port) || fail "zp-peer port failed"
		args=()
		[ "$has_l" = 1 ] || args=(-l "127.0.0.1:$ZPORT")
		# Tests that do not test the drain stop with pairs still open
		# (the 30 s default would outlast stop_zproxy's wait).
		[ "$has_drain" = 1 ] || args+=(--drain-timeout 1)
		if [ "$ZP_USER_ACTIVE" = 1 ] && [ "$has_user" = 0 ]; then
			args+=(--user "$ZP_USER")
		fi
		for a in "$@"; do
			args+=("${a//@PORT@/$ZPORT}")
		done
		# a new, empty log made here: a log of a previous run (another
		# subcase's) must never be taken for this one's
		ZLOG=$(mktemp "$T/zproxy.XXXXXX") || fail "mktemp failed"
		"${ZP_WRAP[@]}" "$ZPROXY" "${args[@]}" 2>"$ZLOG" >"$ZLOG.out" &
		ZPID=$!
		ZP_PIDS+=("$ZPID")
		ZP_SEEN=0
		ZQUIET=$quiet
		if [ "$quiet" = 1 ]; then
			wait_port "$ZPORT" 10 && alive "$ZPID" && return 0
		else
			wait_line "$ZLOG" 'listening on' 10 "$ZPID" >/dev/null &&
				alive "$ZPID" && return 0
		fi
		if alive "$ZPID"; then
			fail "zproxy ${args[*]} did not report 'listening on' within 10s"
		fi
		wait "$ZPID" 2>/dev/null
		grep -qi 'in use' "$ZLOG" && continue
		fail "zproxy ${args[*]} exited at start-up: $(head -n 3 "$ZLOG")"
	done
	fail "zproxy: no free port after 5 tries"
}

# A system call the sandbox refused, in a log? (The allow-list lacks it:
# every test fails on it, so that the list cannot fall behind the code.)
sandbox_clean() {
	! grep -q 'sandbox: system call .* refused' "$1"
}

# Sanitizer reports in a log?
sanitizer_clean() {
	! grep -Eq 'ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error:|SUMMARY: .*Sanitizer' "$1"
}

# stop_zproxy [SIGNAL]: stop the current zproxy (SIGTERM), assert it exits
# 0 within 10 s, logs "stopping:" (unless started with -q) and no sanitizer
# report.
stop_zproxy() {
	local sig=${1:-TERM} rc
	[ -n "$ZPID" ] || return 0
	alive "$ZPID" || { wait "$ZPID"; rc=$?; fail "zproxy had died already (status $rc)"; }
	kill -"$sig" "$ZPID"
	zp_wait_exit "$ZPID" 10
	rc=$?
	[ "$rc" = 124 ] && { kill -KILL "$ZPID"; fail "zproxy did not exit within 10s of SIG$sig"; }
	[ "$rc" = 0 ] || fail "zproxy exited with status $rc after SIG$sig"
	sanitizer_clean "$ZLOG" || fail "sanitizer report in the zproxy log"
	sandbox_clean "$ZLOG" || fail "the sandbox refused a system call: $(grep -m 3 'sandbox: system call' "$ZLOG")"
	[ "$ZQUIET" = 1 ] || grep -q 'stopping:' "$ZLOG" ||
		fail "no 'stopping:' line in the zproxy log"
	ZPID=
}

# Assert the current zproxy still runs.
zproxy_alive() {
	alive "$ZPID" || { wait "$ZPID"; fail "zproxy died (status $?) $*"; }
}

# ---- a service manager ------------------------------------------------

# notify_listen NAME [ADDR]: a socket like systemd's NOTIFY_SOCKET:
# datagrams to $T/NAME.sock (or to the abstract ADDR) land in
# $T/NAME.msgs; sets NSOCK (what NOTIFY_SOCKET names) and NMSGS.
notify_listen() {
	local name=$1 deadline
	NMSGS=$T/$name.msgs
	: >"$NMSGS"
	if [ -n "${2:-}" ]; then
		NSOCK=@$2
		zp_bg "$name.recv" socat -u "ABSTRACT-RECV:$2" "OPEN:$NMSGS,append"
		deadline=$(( $(now_ms) + 5000 ))
		until grep -q "@$2" /proc/net/unix; do
			[ "$(now_ms)" -ge "$deadline" ] && fail "socat: no @$2"
			sleep 0.02
		done
		return
	fi
	NSOCK=$T/$name.sock
	zp_bg "$name.recv" socat -u "UNIX-RECV:$NSOCK" "OPEN:$NMSGS,append"
	deadline=$(( $(now_ms) + 5000 ))
	until [ -S "$NSOCK" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "socat: no $NSOCK"
		sleep 0.02
	done
	# zproxy may send as --user: the socket must let it (systemd's does).
	chmod 0777 "$NSOCK"
	zp_user_dir "$NSOCK"
}

# ---- /proc probes ------------------------------------------------------

fd_count() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
sock_count() { ls -l "/proc/$1/fd" 2>/dev/null | grep -c 'socket:'; }
pipe_count() { ls -l "/proc/$1/fd" 2>/dev/null | grep -c 'pipe:'; }
# utime + stime in clock ticks (fields 14 and 15; comm may hold spaces)
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

# fd_baseline: remember zproxy's sockets and other descriptors now.
fd_baseline() {
	BASE_SOCK=$(sock_count "$ZPID")
	BASE_OTHER=$(( $(fd_count "$ZPID") - BASE_SOCK ))
}

# wait_fd_baseline SECS WHAT [sockets]: wait until zproxy holds exactly as
# many sockets as at fd_baseline and no more other descriptors (pipes may
# be fewer: a pipe that held bytes of a dead connection is closed). With
# "sockets", only sockets count (after many connections at once a pipe
# pool may rightly keep more pipes than it prepared).
wait_fd_baseline() {
	local deadline=$(( $(now_ms) + $1 * 1000 )) s o
	while :; do
		s=$(sock_count "$ZPID"); o=$(( $(fd_count "$ZPID") - s ))
		[ "$s" -eq "$BASE_SOCK" ] &&
			{ [ "${3:-}" = sockets ] || [ "$o" -le "$BASE_OTHER" ]; } &&
			return 0
		[ "$(now_ms)" -ge "$deadline" ] && break
		sleep 0.05
	done
	fail "$2: zproxy holds $s sockets and $o other fds after ${1}s (baseline $BASE_SOCK and $BASE_OTHER)"
}

# ---- the connection log ------------------------------------------------

conn_lines() { grep -c ' conn=[0-9]' "$ZLOG" 2>/dev/null; }

# next_conn_log [SECS]: wait for the next "conn=" line of the current
# zproxy's log (the connection that ended next); put it in CONN_LOG.
# (Not meant for $(...): it counts the lines seen in ZP_SEEN.)
next_conn_log() {
	local deadline=$(( $(now_ms) + ${1:-10} * 1000 ))
	while [ "$(conn_lines)" -le "$ZP_SEEN" ]; do
		if [ "$(now_ms)" -ge "$deadline" ]; then
			CONN_LOG="(no conn= line within ${1:-10}s)"
			return 1
		fi
		sleep 0.02
	done
	ZP_SEEN=$((ZP_SEEN + 1))
	CONN_LOG=$(grep ' conn=[0-9]' "$ZLOG" | sed -n "${ZP_SEEN}p")
}

# skip_conn_logs: treat every conn= line so far as seen.
skip_conn_logs() { ZP_SEEN=$(conn_lines); }

# expect_conn_log REGEX WHAT [SECS]: the next conn= line must match REGEX;
# it is left in LAST_CONN_LOG.
expect_conn_log() {
	next_conn_log "${3:-10}" || fail "$2: $CONN_LOG"
	LAST_CONN_LOG=$CONN_LOG
	echo "$CONN_LOG" | grep -Eq -- "$1" ||
		fail "$2: log line does not match '$1': $CONN_LOG"
}

# field NAME LINE: value of NAME=... in a log line.
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -n 1; }

# Modes to run: ZP_MODES overrides (e.g. ZP_MODES=copy). MODES_ALL adds
# splice-eager for the scripts that test the data path's traps: -m splice
# with --splice-min 0, so that every byte, not only bulk, goes through the
# pipes.
MODES=${ZP_MODES:-splice copy}
MODES_ALL=${ZP_MODES:-splice splice-eager copy}

# set_mode MODE: MODE_ARGS, zproxy's options for it, and MODE_LOGGED, the
# mode= its log lines must show.
set_mode() {
	case $1 in
	splice-eager)
		MODE_ARGS=(-m splice --splice-min 0); MODE_LOGGED=splice ;;
	*)
		MODE_ARGS=(-m "$1"); MODE_LOGGED=$1 ;;
	esac
}

# estab PORT [STATES]: TCP sockets whose local port is PORT in one of
# STATES, hex codes of /proc/net/tcp joined by | (default 01, established;
# 08 is close-wait). /proc/net/tcp is no snapshot: a socket may be listed
# twice while the table changes, hence the dedup by address pair.
estab() {
	local hex
	hex=$(printf '%04X' "$1")
	cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" -v st="^(${2:-01})\$" \
		    '$2 ~ p"$" && $4 ~ st && !seen[$2 " " $3]++ { n++ } END { print n + 0 }'
}

# wait_estab PORT N SECS [STATES]: until estab PORT STATES is N.
wait_estab() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	until [ "$(estab "$1" "${4:-01}")" -eq "$2" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# size FILE: its size in bytes, 0 when it does not exist (yet).
size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# wait_size FILE SIZE SECS: until FILE holds at least SIZE bytes.
wait_size() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	until [ "$(size "$1")" -ge "$2" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}

# ---- metrics -----------------------------------------------------------

# stats_scrape: GET /metrics from zproxy's --stats port $SPORT into
# $T/metrics (curl, or bash's /dev/tcp where curl is missing).
stats_scrape() {
	if command -v curl >/dev/null; then
		curl -sS -m 5 -o "$T/metrics" "http://127.0.0.1:$SPORT/metrics" \
		    2>"$T/metrics.err" || fail "GET /metrics: $(cat "$T/metrics.err")"
	else
		timeout -k 2 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$0" &&
			printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' \
		    "$SPORT" | sed '1,/^\r$/d' >"$T/metrics" ||
			fail "GET /metrics failed"
	fi
}

# promcheck WHAT: `promtool check metrics` accepts $T/metrics quietly;
# where promtool is missing, nothing is checked and the test is a SKIP
# (one skip however many scrapes; metrics.sh fails without it).
promcheck() {
	local out rc why="promtool check metrics: promtool is not installed"
	if ! command -v promtool >/dev/null; then
		grep -qsxF "$why" "$ZP_T0/.skipped" || skip "$why"
		return 0
	fi
	out=$(promtool check metrics <"$T/metrics" 2>&1)
	rc=$?
	[ "$rc" = 0 ] && [ -z "$out" ] ||
		fail "$1: promtool check metrics (status $rc): $out"
}

# val SERIES: the value of one series ('name{labels}') in $T/metrics.
val() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { exit !f }' "$T/metrics"; }

# expect SERIES OP N WHAT: assert the scraped value compares (awk: ==, >=...).
expect() {
	local v
	v=$(val "$1") || fail "$4: no series $1 in /metrics"
	awk -v a="$v" -v b="$3" "BEGIN { exit !(a $2 b) }" ||
		fail "$4: $1 is $v, want $2 $3"
}

# wait_metric SERIES OP N SECS WHAT: scrape ($SCRAPE_FN, stats_scrape by
# default) until it holds.
wait_metric() {
	local deadline=$(( $(now_ms) + $4 * 1000 )) v
	while :; do
		"${SCRAPE_FN:-stats_scrape}"
		v=$(val "$1") && awk -v a="$v" -v b="$3" "BEGIN { exit !(a $2 b) }" &&
			return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$5: $1 is ${v:-missing} after ${4}s, want $2 $3"
		sleep 0.05
	done
}

# stats_is SERIES WANT WHAT: after stats_scrape, SERIES must be WANT.
stats_is() {
	local v
	v=$(awk -v k="$1" '$1 == k { print $2 }' "$T/metrics")
	[ "$v" = "$2" ] || fail "$3: $1 is '${v:-missing}', want $2"
}
