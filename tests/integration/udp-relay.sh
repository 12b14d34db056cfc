#!/bin/bash
# udp-relay.sh - UDP to UDP (issue 28): -l udp@ with -u udp@ relays each
# datagram as one datagram, beside nginx's stream UDP relay (the anchor,
# run on the same traffic; its figures are noted, zproxy's asserted).
# Receivers: zp-logsend dgram-collect (a line per datagram); senders:
# zp-logsend dgram, SOURCES sources from 127.0.0.2 on, MSGS numbered
# messages each.
#   a. --balance roundrobin, 2 upstreams: every message once over both,
#      whole, and each upstream half of them (per datagram; nginx's UDP
#      balances per client session); zproxy_frames_total by upstream;
#   b. --balance source: each source's messages all at one upstream;
#   c. one upstream does not listen (ICMP port unreachable): it is marked
#      down ("is down" said, --max-fails 3), the rest reach the other,
#      and sent = delivered + zproxy_udp_dropped_total{reason=
#      "unreachable"}: every loss counted;
#   d. zproxy ctl reload keeps the UDP upstreams as they are, and
#      refuses to make them TCP; zproxy ctl add takes udp@HOST:PORT
#      (a third of the next datagrams go to it) and refuses HOST:PORT;
#   e. refused at start-up: TCP and UDP upstreams mixed, -u udp@ behind a
#      TCP listener, --framing, --spool, --mirror with -u udp@.
# (--source client with -u udp@ is in source.sh, in network namespaces.)
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

: "${ZP_LOGSEND:?ZP_LOGSEND must name tests/tools/zp-logsend}"
NGINX=${NGINX:-$(command -v nginx 2>/dev/null || true)}
NGX_STREAM_MOD=${NGX_STREAM_MOD:-/usr/lib/nginx/modules/ngx_stream_module.so}
[ -n "$NGINX" ] || fail "nginx not found: install nginx"
[ -f "$NGX_STREAM_MOD" ] || fail "$NGX_STREAM_MOD missing: install libnginx-mod-stream"

SOURCES=8
MSGS=${ZP_UDPR_MSGS:-400}
RATE=500	# rounds a second (a datagram from each source); empty: at once

# udp_bound PORT: is a UDP socket bound to PORT?
udp_bound() {
	grep -q ":$(printf '%04X' "$1") " /proc/net/udp /proc/net/udp6 2>/dev/null
}

# receiver NAME: a UDP receiver writing $T/NAME/dgrams; sets RPORT.
receiver() {
	mkdir -p "$T/$1"
	zp_bg "$1" "$ZP_LOGSEND" dgram-collect --dir "$T/$1"
	RPORT=$(wait_line "$T/$1.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "receiver $1 did not start: $(head -c 300 "$T/$1.err")"
}

# lines NAME: datagrams receiver NAME wrote.
lines() { wc -l <"$T/$1/dgrams" 2>/dev/null || echo 0; }

# wait_total N SECS NAME...: until the receivers hold N datagrams.
wait_total() {
	local n=$1 deadline=$(( $(now_ms) + $2 * 1000 )) have r
	shift 2
	while :; do
		have=0
		for r in "$@"; do have=$((have + $(lines "$r"))); done
		[ "$have" -ge "$n" ] && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$have datagrams at $* after the wait, want $n"
		sleep 0.05
	done
}

# settle_total N NAME...: until the receivers hold N datagrams, or their
# count stayed the same for a second (20 s at most).
settle_total() {
	local n=$1 deadline=$(( $(now_ms) + 20000 )) have last=-1 since r
	shift
	since=$(now_ms)
	while [ "$(now_ms)" -lt "$deadline" ]; do
		have=0
		for r in "$@"; do have=$((have + $(lines "$r"))); done
		[ "$have" -ge "$n" ] && return 0
		[ "$have" != "$last" ] && { last=$have; since=$(now_ms); }
		[ $(( $(now_ms) - since )) -ge 1000 ] && return 0
		sleep 0.05
	done
}

# send PORT NAME: the sources' messages to PORT.
send() {
	timeout -k 5 60 "$ZP_LOGSEND" dgram 127.0.0.1 "$1" --conns "$SOURCES" \
	    --msgs "$MSGS" ${RATE:+--rate "$RATE"} --max 300 --from 127.0.0.2 \
	    >"$T/$2.send" 2>&1 || fail "$2: the sender failed: $(tail -n 2 "$T/$2.send")"
}

# start_nginx NAME BALANCE PORT_A PORT_B: nginx's stream UDP relay to two
# upstreams (BALANCE: "" or "hash $remote_addr consistent;"); sets NPORT.
start_nginx() {
	local name=$1 bal=$2 d=$T/$1.d
	mkdir -p "$d"
	for _ in 1 2 3 4 5; do
		NPORT=$(free_port) || fail "zp-peer port failed"
		cat >"$d/nginx.conf" <<-EOF
		load_module $NGX_STREAM_MOD;
		error_log $d/error.log info;
		pid $d/nginx.pid;
		events { worker_connections 1024; }
		stream {
		    upstream ups { $bal server 127.0.0.1:$3 max_fails=3; server 127.0.0.1:$4 max_fails=3; }
		    server {
		        listen 127.0.0.1:$NPORT udp;
		        proxy_pass ups;
		        proxy_responses 0;
		        proxy_timeout 2s;
		    }
		}
		EOF
		: >"$d/error.log"
		zp_bg "$name" "$NGINX" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" \
		    -g 'daemon off; master_process off;'
		local deadline=$(( $(now_ms) + 10000 ))
		while alive "$BG_PID" && ! udp_bound "$NPORT"; do
			[ "$(now_ms)" -ge "$deadline" ] && fail "nginx: no UDP socket on $NPORT"
			sleep 0.02
		done
		alive "$BG_PID" && { NGX_PID=$BG_PID; return 0; }
		grep -qiE 'in use' "$d/error.log" "$T/$name.err" && continue
		fail "nginx exited at start-up: $(tail -n 3 "$d/error.log" | head -c 400)"
	done
	fail "nginx: no free port after 5 tries"
}

# pinned NAME...: how many sources have messages at more than one of
# the receivers.
split_sources() {
	local r
	for r in "$@"; do
		grep -ao ' c=[0-9]* ' "$T/$r/dgrams" | sort -u | sed "s/\$/ $r/"
	done | awk '{ n[$1]++ } END { k = 0; for (c in n) if (n[c] > 1) k++; print k }'
}

case_balance() {
	local mode=$1 bal=$2 what="$1: --balance $2" a b na nb total v nginx
	set_mode "$mode"
	receiver "ra-$mode-$bal"; a=$RPORT
	receiver "rb-$mode-$bal"; b=$RPORT
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@127.0.0.1:@PORT@" \
	    -u "udp@127.0.0.1:$a" -u "udp@127.0.0.1:$b" --balance "$bal" \
	    --stats "127.0.0.1:$SPORT"
	send "$ZPORT" "z-$mode-$bal"
	total=$((SOURCES * MSGS))
	wait_total "$total" 20 "ra-$mode-$bal" "rb-$mode-$bal"
	stats_scrape
	stats_is "zproxy_frames_total{upstream=\"udp@127.0.0.1:$a\"}" \
	    "$(lines "ra-$mode-$bal")" "$what"
	stop_zproxy
	"$ZP_LOGSEND" verify -v --exactly-once --conns "$SOURCES" --msgs "$MSGS" \
	    "$T/ra-$mode-$bal/dgrams" "$T/rb-$mode-$bal/dgrams" \
	    >"$T/v-$mode-$bal" 2>&1 || fail "$what: $(tail -n 2 "$T/v-$mode-$bal" | tr '\n' ' ')"
	v=$(grep '^sent=' "$T/v-$mode-$bal")
	na=$(lines "ra-$mode-$bal") nb=$(lines "rb-$mode-$bal")
	if [ "$bal" = roundrobin ]; then
		[ $((na - nb)) -le 2 ] && [ $((nb - na)) -le 2 ] ||
			fail "$what: $na and $nb datagrams, want half each"
	else
		[ "$(split_sources "ra-$mode-$bal" "rb-$mode-$bal")" = 0 ] ||
			fail "$what: a source's messages went to both upstreams"
	fi
	# The anchor, on the same traffic.
	receiver "na-$mode-$bal"; a=$RPORT
	receiver "nb-$mode-$bal"; b=$RPORT
	start_nginx "ngx-$mode-$bal" "$([ "$bal" = source ] &&
	    echo 'hash $remote_addr consistent;')" "$a" "$b"
	send "$NPORT" "n-$mode-$bal"
	# nginx may lose some (its figure is noted, not asserted): until
	# all arrived, or none more for a second
	settle_total "$total" "na-$mode-$bal" "nb-$mode-$bal"
	nginx="nginx: $(lines "na-$mode-$bal")/$(lines "nb-$mode-$bal") of $total, $(split_sources "na-$mode-$bal" "nb-$mode-$bal") sources split"
	ok "$what: $v; $na/$nb a upstream, $(split_sources "ra-$mode-$bal" "rb-$mode-$bal") sources split ($nginx)"
}

# case_unreachable MODE [burst]: paced, or queued while zproxy is stopped
# (its read batches are then full, half of each for the dead upstream's
# socket, sent with one sendmmsg: a refusal that stops one within the
# call must still be counted; 800 datagrams, well within the buffer).
case_unreachable() {
	local mode=$1 what="$1: an upstream that does not listen" a dead na
	local unr total RATE=$RATE MSGS=$MSGS burst=
	if [ "${2:-}" = burst ]; then
		what="$what, a burst of full read batches"
		RATE= MSGS=100 burst=1
		mode=$1-burst
	fi
	set_mode "$1"
	receiver "ua-$mode"; a=$RPORT
	dead=$(free_port) || fail "zp-peer port failed"
	udp_bound "$dead" && fail "$what: port $dead has a UDP socket"
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy -v "${MODE_ARGS[@]}" -l "udp@127.0.0.1:@PORT@" \
	    -u "udp@127.0.0.1:$dead" -u "udp@127.0.0.1:$a" --max-fails 3 \
	    --fail-timeout 1 --stats "127.0.0.1:$SPORT"
	[ -z "$burst" ] || kill -STOP "$ZPID"
	send "$ZPORT" "u-$mode"
	[ -z "$burst" ] || kill -CONT "$ZPID"
	total=$((SOURCES * MSGS))
	# every datagram delivered, or its refusal counted
	local deadline=$(( $(now_ms) + 20000 ))
	while :; do
		stats_scrape
		unr=$(val "zproxy_udp_dropped_total{listener=\"udp@127.0.0.1:$ZPORT\",reason=\"unreachable\"}")
		na=$(lines "ua-$mode")
		[ $((na + unr)) -ge "$total" ] && break
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: $na delivered, $unr refused, of $total"
		sleep 0.1
	done
	[ $((na + unr)) = "$total" ] || fail "$what: $na delivered + $unr refused != $total"
	[ "$unr" -ge 3 ] || fail "$what: only $unr refusals counted"
	grep -q "upstream udp@127.0.0.1:$dead.* down" "$ZLOG" ||
		fail "$what: the dead upstream was not said down: $(grep -m 3 'udp@127.0.0.1:'"$dead" "$ZLOG")"
	[ "$na" -gt $((total * 3 / 4)) ] ||
		fail "$what: only $na of $total reached the live upstream"
	stop_zproxy
	"$ZP_LOGSEND" verify --conns "$SOURCES" --msgs "$MSGS" \
	    "$T/ua-$mode/dgrams" >"$T/uv-$mode" 2>&1 ||
		fail "$what: $(tail -n 2 "$T/uv-$mode")"
	ok "$what: marked down after its refusals; $na of $total delivered, whole and once, and the $unr refused counted as unreachable"
}

# A reload with UDP upstreams keeps them (names, kind); one that would
# make them TCP is refused.
case_reload() {
	local a b conf out
	receiver rla; a=$RPORT
	receiver rlb; b=$RPORT
	mkdir -p "$T/run"
	zp_user_dir "$T/run"
	conf=$T/relay.conf
	printf 'upstream udp@127.0.0.1:%s\nupstream udp@127.0.0.1:%s\n' \
	    "$a" "$b" >"$conf"
	chmod 644 "$conf"
	start_zproxy -v -l "udp@127.0.0.1:@PORT@" -f "$conf" \
	    --control "$T/run/ctl"
	out=$("$ZPROXY" ctl --control "$T/run/ctl" reload 2>&1) ||
		fail "reload, the file unchanged: $out"
	out=$("$ZPROXY" ctl --control "$T/run/ctl" show upstreams 2>&1)
	[ "$(grep -c '^udp@127\.0\.0\.1:' <<<"$out")" = 2 ] &&
	    [ "$(grep -vc '^udp@\|^NAME' <<<"$out")" = 0 ] ||
		fail "after a reload: $out"
	SOURCES=2 MSGS=50 send "$ZPORT" reload
	wait_total 100 10 rla rlb
	[ "$(lines rla)" = 50 ] && [ "$(lines rlb)" = 50 ] ||
		fail "after a reload: $(lines rla)/$(lines rlb), want 50/50"
	# zproxy ctl add: udp@ among UDP upstreams, never a TCP one
	out=$("$ZPROXY" ctl --control "$T/run/ctl" add upstream "127.0.0.1:$a" 2>&1) &&
		fail "add upstream 127.0.0.1:$a was taken: $out"
	grep -q 'the upstreams are UDP' <<<"$out" || fail "add upstream TCP: $out"
	receiver rlc
	out=$("$ZPROXY" ctl --control "$T/run/ctl" add upstream \
	    "udp@127.0.0.1:$RPORT" 2>&1) || fail "add upstream udp@: $out"
	SOURCES=3 MSGS=30 send "$ZPORT" reload2
	wait_total 190 10 rla rlb rlc
	[ "$(lines rlc)" = 30 ] ||
		fail "the added UDP upstream got $(lines rlc) of the next 90, want 30"
	printf 'upstream 127.0.0.1:%s\n' "$a" >"$conf"
	out=$("$ZPROXY" ctl --control "$T/run/ctl" reload 2>&1) &&
		fail "a reload to a TCP upstream was taken: $out"
	grep -q 'cannot change between TCP and UDP' <<<"$out" ||
		fail "a reload to a TCP upstream: $out"
	stop_zproxy
	ok "reload: the UDP upstreams stay as they were (2 udp@, 50/50 after it); zproxy ctl add takes udp@ (30 of 90 to it), refuses a TCP one; a reload to a TCP upstream refused, '$out'"
}

case_refused() {
	local out rc
	while IFS='|' read -r want args; do
		# shellcheck disable=SC2086 # the arguments, split
		out=$("$ZPROXY" $args 2>&1)
		rc=$?
		[ "$rc" = 64 ] || fail "zproxy $args: exit $rc, want 64"
		grep -qF -- "$want" <<<"$out" || fail "zproxy $args: '$out'"
	done <<-EOF
	cannot be mixed|-l udp@:1 -u udp@127.0.0.1:2 -u 127.0.0.1:3
	takes datagrams from -l udp@ only|-l :1 -u udp@127.0.0.1:2
	--framing does not apply to -u udp@|-l udp@:1 -u udp@127.0.0.1:2 --framing lf
	--spool does not apply to -u udp@|-l udp@:1 -u udp@127.0.0.1:2 --spool /tmp
	--mirror does not apply to -u udp@|-l udp@:1 -u udp@127.0.0.1:2 --mirror 127.0.0.1:3
	--balance leastconn does not apply|-l udp@:1 -u udp@127.0.0.1:2 --balance leastconn
	EOF
	ok "refused with exit 64 and a line naming it: mixed upstreams, a TCP listener, --framing, --spool, leastconn"
}

for mode in $MODES; do
	subcase case_balance "$mode" roundrobin
	subcase case_balance "$mode" source
	subcase case_unreachable "$mode"
	subcase case_unreachable "$mode" burst
done
subcase case_reload
subcase case_refused

zp_done
