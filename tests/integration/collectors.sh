#!/bin/bash
# collectors.sh - zproxy in front of two real log collectors, rsyslog
# (imtcp) and syslog-ng (network(transport("tcp"))), each on its own
# loopback port and writing what it receives to its own file. Messages are
# sent with logger(1), RFC 3164, newline framed, one TCP connection per
# logger run unless said otherwise; each is unique: "msg-<id>-<seq>".
#   a. roundrobin, 200 messages: each arrives exactly once across the two
#      collectors (sorted seq set compared, no loss, no duplicate, every
#      line intact), and each collector's count equals the number of
#      connections zproxy logged for that upstream;
#   b. same run: both got a share (each > 20%); two more connections of
#      300 lines each (logger -f) each land whole and in order at one
#      collector;
#   c. roundrobin failover: 100 messages, one collector is killed, 100
#      more on new connections all reach the other one; no logger run
#      fails; zproxy logs the dead upstream down exactly once (default
#      --max-fails 3) and never the live one;
#   d. --balance first: everything goes to the first collector while it
#      is up, to the second once it is killed (down logged once);
#   e. --balance first failback: with --check-interval 1, the first
#      collector is restarted on its port; once zproxy logs it up, new
#      messages go to it again.
# The collector killed is syslog-ng in splice mode and rsyslog in copy
# mode (and it is the "first" one in d/e). Both modes.
#
# The collectors, how they are found (RSYSLOGD, RSYSLOG_MODDIR, SYSLOG_NG)
# and started: collectorlib.sh.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

command -v logger >/dev/null || fail "logger not found: install bsdutils"
note "$(collector_versions);" "logger: $(logger -V 2>/dev/null | awk '{ print $NF }')"

RUN=$(date +%s)x$$

# ---- messages ----------------------------------------------------------

# send_msgs ID FROM TO: one logger run (one connection) per message
# "msg-ID-SEQ", SEQ from FROM to TO; every run must succeed.
send_msgs() {
	local id=$1 i
	for ((i = $2; i <= $3; i++)); do
		timeout -k 2 10 logger -T -n 127.0.0.1 -P "$ZPORT" --rfc3164 \
		    -t zptest "msg-$id-$i" 2>>"$T/logger.err" ||
			fail "logger for msg-$id-$i failed (status $?): $(tail -n 1 "$T/logger.err")"
	done
}

# seqs ID FILE: the SEQ of every intact line "msg-ID-SEQ" in FILE.
seqs() {
	[ -f "$2" ] || return 0
	sed -n "s/^ *msg-$1-\([0-9][0-9]*\)\$/\1/p" "$2"
}

# count ID FILE: how many intact lines.
count() { seqs "$1" "$2" | wc -l; }

# bad_lines ID FILE: lines that are not one intact message of ours.
bad_lines() {
	[ -f "$2" ] || { echo 0; return 0; }
	grep -v -c -E "^ *msg-$1-[0-9]+\$" "$2"
}

# wait_total ID N SECS FILE...: wait until the files hold N intact
# messages between them (or more: the checks after say what is wrong).
wait_total() {
	local id=$1 n=$2 deadline=$(( $(now_ms) + $3 * 1000 )) f sum
	shift 3
	while :; do
		sum=0
		for f in "$@"; do sum=$((sum + $(count "$id" "$f"))); done
		[ "$sum" -ge "$n" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] && {
			WAIT_GOT=$sum
			return 1
		}
		sleep 0.05
	done
}

# wait_conns N SECS: wait until zproxy logged N conn= lines (N client
# connections ended: everything they sent was handed to an upstream).
wait_conns() {
	local deadline=$(( $(now_ms) + $2 * 1000 ))
	while [ "$(conn_lines)" -lt "$1" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "zproxy logged $(conn_lines) connections within ${2}s, want $1"
		sleep 0.05
	done
}

# exactly_once ID FROM TO WHAT FILE...: after all messages FROM..TO were
# sent: wait for them, then the multiset of seqs across FILEs must be
# exactly FROM..TO and every line intact. With FROM "-", TO names a file
# of the seqs wanted instead.
exactly_once() {
	local id=$1 what=$4 f n late
	if [ "$2" = - ]; then
		sort "$3" >"$T/want.seqs"
	else
		seq "$2" "$3" | sort >"$T/want.seqs"
	fi
	shift 4
	n=$(wc -l <"$T/want.seqs")
	late=
	wait_total "$id" "$n" 10 "$@" ||
		late="$WAIT_GOT of $n messages arrived within 10s;"
	for f in "$@"; do
		[ "$(bad_lines "$id" "$f")" = 0 ] ||
			fail "$what: ${f##*/} has lines that are not one message: $(grep -v -m 3 -E "^ *msg-$id-[0-9]+\$" "$f" | head -c 300)"
	done
	for f in "$@"; do seqs "$id" "$f"; done | sort >"$T/got.seqs"
	cmp -s "$T/want.seqs" "$T/got.seqs" ||
		fail "$what: $late not each of the $n messages exactly once: $(wc -l <"$T/got.seqs") lines," \
		    "duplicates: $(uniq -d "$T/got.seqs" | head -n 5 | tr '\n' ' ')" \
		    "missing: $(comm -23 "$T/want.seqs" <(sort -u "$T/got.seqs") | head -n 5 | tr '\n' ' ')" \
		    "unexpected: $(comm -13 "$T/want.seqs" <(sort -u "$T/got.seqs") | head -n 5 | tr '\n' ' ')"
}

# up_conns ADDR: conn= lines of the current zproxy whose upstream is ADDR.
up_conns() { grep ' conn=[0-9]' "$ZLOG" | grep -c " upstream=$1 "; }

# down_lines ADDR: "upstream ADDR is down" lines.
down_lines() { grep -c "upstream $1 is down" "$ZLOG"; }

# both modes: which collector is "first" (and killed in c, d, e)
kinds() {
	if [ "$mode" = splice ]; then
		K1=syslog-ng K2=rsyslog
	else
		K1=rsyslog K2=syslog-ng
	fi
}

# ---- a + b -------------------------------------------------------------

case_rr() {
	local id=${RUN}${mode}a what="$mode: roundrobin" a b ca cb n i
	local la lb
	kinds
	start_collector "$K1" "rr-$mode-1"; a=$C_PORT; la=$C_LOG
	start_collector "$K2" "rr-$mode-2"; b=$C_PORT; lb=$C_LOG
	start_zproxy -v -m "$mode" --balance roundrobin \
	    -u "127.0.0.1:$a" -u "127.0.0.1:$b"
	send_msgs "$id" 1 200
	wait_conns 200 15
	exactly_once "$id" 1 200 "$what (a)" "$la" "$lb"
	ca=$(count "$id" "$la"); cb=$(count "$id" "$lb")
	ok "$what: 200 messages on 200 connections, each exactly once ($K1 $ca, $K2 $cb)"
	[ "$(grep -c ' conn=[0-9].* end=closed' "$ZLOG")" = 200 ] ||
		fail "$what: not every connection ended end=closed: $(grep ' conn=[0-9]' "$ZLOG" | grep -v -m 1 end=closed)"
	[ "$(up_conns "127.0.0.1:$a")" = "$ca" ] && [ "$(up_conns "127.0.0.1:$b")" = "$cb" ] ||
		fail "$what: zproxy logged $(up_conns "127.0.0.1:$a")/$(up_conns "127.0.0.1:$b") connections to $K1/$K2, they got $ca/$cb"
	ok "$what: per-upstream connection counts in zproxy's log match what each collector got"
	[ "$ca" -gt 40 ] && [ "$cb" -gt 40 ] ||
		fail "$what (b): uneven share: $K1 $ca, $K2 $cb of 200 (each must be > 20%)"
	ok "$what (b): both collectors got a share (> 20% each)"

	# two connections of 300 lines each: each must land whole, in order
	for n in 1 2; do
		for ((i = 1; i <= 300; i++)); do
			echo "msg-$id-$((n * 1000 + i))"
		done >"$T/bulk$n.txt"
		timeout -k 2 10 logger -T -n 127.0.0.1 -P "$ZPORT" --rfc3164 \
		    -t zptest -f "$T/bulk$n.txt" 2>>"$T/logger.err" ||
			fail "$what: logger -f bulk$n.txt failed: $(tail -n 1 "$T/logger.err")"
	done
	wait_conns 202 15
	wait_total "$id" 800 15 "$la" "$lb" ||
		fail "$what: bulk: $WAIT_GOT of 800 messages arrived within 15s"
	for n in 1 2; do
		seqs "$id" "$la" | awk -v n=$n '$1 > n * 1000 && $1 < (n + 1) * 1000' >"$T/bulk$n.a"
		seqs "$id" "$lb" | awk -v n=$n '$1 > n * 1000 && $1 < (n + 1) * 1000' >"$T/bulk$n.b"
		seq $((n * 1000 + 1)) $((n * 1000 + 300)) >"$T/bulk$n.want"
		{ cmp -s "$T/bulk$n.a" "$T/bulk$n.want" && [ ! -s "$T/bulk$n.b" ]; } ||
			{ cmp -s "$T/bulk$n.b" "$T/bulk$n.want" && [ ! -s "$T/bulk$n.a" ]; } ||
			fail "$what: bulk connection $n: not its 300 lines whole and in order at one collector ($(wc -l <"$T/bulk$n.a") + $(wc -l <"$T/bulk$n.b"))"
	done
	{ seq 1 200; seq 1001 1300; seq 2001 2300; } >"$T/all.want"
	exactly_once "$id" - "$T/all.want" "$what: after bulk" "$la" "$lb"
	ok "$what: two 300-line connections each arrived whole and in order at one collector"
	stop_zproxy
}

# ---- c -----------------------------------------------------------------

case_failover() {
	local id=${RUN}${mode}c what="$mode: roundrobin failover" a b la lb apid
	local ca cb
	kinds
	start_collector "$K1" "fo-$mode-1"; a=$C_PORT; la=$C_LOG; apid=$C_PID
	start_collector "$K2" "fo-$mode-2"; b=$C_PORT; lb=$C_LOG
	start_zproxy -v -m "$mode" --balance roundrobin \
	    -u "127.0.0.1:$a" -u "127.0.0.1:$b"
	send_msgs "$id" 1 100
	wait_conns 100 15
	exactly_once "$id" 1 100 "$what: before the kill" "$la" "$lb"
	ca=$(count "$id" "$la"); cb=$(count "$id" "$lb")
	[ "$ca" -gt 0 ] && [ "$cb" -gt 0 ] || fail "$what: before the kill: $K1 $ca, $K2 $cb"
	kill_collector "$apid" "$a" "$what: $K1"
	note "$what: $K1 (127.0.0.1:$a) killed after $ca of 100 messages"
	send_msgs "$id" 101 200
	wait_conns 200 15
	exactly_once "$id" 1 200 "$what" "$la" "$lb"
	[ "$(count "$id" "$la")" = "$ca" ] ||
		fail "$what: $K1 file changed after its death"
	[ "$(seqs "$id" "$lb" | awk '$1 > 100' | wc -l)" = 100 ] ||
		fail "$what: not all of 101..200 at $K2"
	ok "$what: every message after the kill of $K1 reached $K2, none lost or doubled"
	[ "$(up_conns "127.0.0.1:$b")" = $((cb + 100)) ] ||
		fail "$what: zproxy logged $(up_conns "127.0.0.1:$b") connections to $K2, want $((cb + 100))"
	[ "$(grep -c ' conn=[0-9].* end=closed' "$ZLOG")" = 200 ] ||
		fail "$what: not every connection ended end=closed: $(grep ' conn=[0-9]' "$ZLOG" | grep -v -m 1 end=closed)"
	[ "$(down_lines "127.0.0.1:$a")" = 1 ] ||
		fail "$what: 'upstream 127.0.0.1:$a is down' logged $(down_lines "127.0.0.1:$a") times, want 1"
	[ "$(down_lines "127.0.0.1:$b")" = 0 ] ||
		fail "$what: the live upstream was logged down: $(grep -m 1 "upstream 127.0.0.1:$b is down" "$ZLOG")"
	ok "$what: zproxy logged $K1 down once: $(grep -m 1 "is down" "$ZLOG" | sed 's/.*upstream/upstream/')"
	stop_zproxy
}

# ---- d -----------------------------------------------------------------

case_first() {
	local id=${RUN}${mode}d what="$mode: balance first" a b la lb apid
	kinds
	start_collector "$K1" "fi-$mode-1"; a=$C_PORT; la=$C_LOG; apid=$C_PID
	start_collector "$K2" "fi-$mode-2"; b=$C_PORT; lb=$C_LOG
	start_zproxy -v -m "$mode" --balance first \
	    -u "127.0.0.1:$a" -u "127.0.0.1:$b"
	send_msgs "$id" 1 60
	wait_conns 60 15
	exactly_once "$id" 1 60 "$what" "$la" "$lb"
	[ "$(count "$id" "$la")" = 60 ] ||
		fail "$what: $K1 (first) got $(count "$id" "$la") of 60, $K2 $(count "$id" "$lb")"
	ok "$what: all 60 messages went to the first upstream ($K1) while it was up"
	kill_collector "$apid" "$a" "$what: $K1"
	send_msgs "$id" 61 120
	wait_conns 120 15
	exactly_once "$id" 1 120 "$what" "$la" "$lb"
	[ "$(count "$id" "$lb")" = 60 ] && [ "$(count "$id" "$la")" = 60 ] ||
		fail "$what: after the kill of $K1: $K2 got $(count "$id" "$lb") of 60"
	[ "$(down_lines "127.0.0.1:$a")" = 1 ] ||
		fail "$what: 'upstream 127.0.0.1:$a is down' logged $(down_lines "127.0.0.1:$a") times, want 1"
	ok "$what: after $K1 was killed all 60 went to $K2; $K1 logged down once"
	stop_zproxy
}

# ---- e -----------------------------------------------------------------

case_failback() {
	local id=${RUN}${mode}e what="$mode: balance first failback" a b la lb apid
	kinds
	start_collector "$K1" "fb-$mode-1"; a=$C_PORT; la=$C_LOG; apid=$C_PID
	start_collector "$K2" "fb-$mode-2"; b=$C_PORT; lb=$C_LOG
	start_zproxy -v -m "$mode" --balance first --check-interval 1 \
	    --fail-timeout 1 -u "127.0.0.1:$a" -u "127.0.0.1:$b"
	send_msgs "$id" 1 20
	wait_conns 20 15
	kill_collector "$apid" "$a" "$what: $K1"
	# the active check must see it dead by itself
	wait_line "$ZLOG" "upstream 127.0.0.1:$a is down" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'upstream 127.0.0.1:$a is down' within 10s of the kill (--check-interval 1)"
	send_msgs "$id" 21 40
	wait_conns 40 15
	exactly_once "$id" 1 40 "$what" "$la" "$lb"
	# one connection per message: a collector may write two of them in
	# either order, so the sets are compared, not the order
	[ "$(seqs "$id" "$la" | sort -n | tr '\n' ' ')" = "$(seq 1 20 | tr '\n' ' ')" ] &&
		[ "$(seqs "$id" "$lb" | sort -n | tr '\n' ' ')" = "$(seq 21 40 | tr '\n' ' ')" ] ||
		fail "$what: 1..20 must be at $K1, 21..40 at $K2"
	ok "$what: check marked $K1 down, 1..20 at $K1, 21..40 at $K2"
	start_collector "$K1" "fb-$mode-1" "$a"
	wait_line "$ZLOG" "upstream 127.0.0.1:$a is up" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'upstream 127.0.0.1:$a is up' within 10s of the restart"
	send_msgs "$id" 41 60
	wait_conns 60 15
	exactly_once "$id" 1 60 "$what" "$la" "$lb"
	[ "$(seqs "$id" "$la" | awk '$1 > 40' | wc -l)" = 20 ] ||
		fail "$what: after the restart $K1 got $(seqs "$id" "$la" | awk '$1 > 40' | wc -l) of 41..60"
	[ "$(down_lines "127.0.0.1:$a")" = 1 ] ||
		fail "$what: 'upstream 127.0.0.1:$a is down' logged $(down_lines "127.0.0.1:$a") times, want 1"
	ok "$what: $K1 restarted, logged up, and took 41..60 again"
	stop_zproxy
}

for mode in $MODES; do
	subcase case_rr
	subcase case_failover
	subcase case_first
	subcase case_failback
done

zp_done
