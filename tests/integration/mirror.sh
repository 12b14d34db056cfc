#!/bin/bash
# mirror.sh - --mirror HOST:PORT: each pair's client->upstream bytes also go
# to every mirror, over a connection of their own, while the mirror never
# slows the primary.
#   a. 50 clients at once (from 127.0.0.2), each sending its own
#      pseudo-random stream (10 each of 256K, 448K, 640K, 832K and 1M) and
#      a FIN: the primary upstream and the mirror store each connection;
#      the multiset of SHA-256 sums of what the clients sent (zp-peer gen)
#      equals the primary's and the mirror's; every mirror connection ends
#      with a FIN (the mirror reads to EOF); metrics: streams 50, dropped
#      0, bytes the sum sent, up 1; 50 conn= lines end=closed; no mirror
#      warning logged; zproxy's sockets back to baseline. With --threads 1,
#      with --threads 2, and with --send-proxy v1: then each mirror
#      connection starts with a PROXY line naming the client's address
#      (127.0.0.2, the port zproxy logged for it) and zproxy's, and is byte
#      for byte what the primary got for that client;
#   b. two mirrors at once: both get the same multiset of streams (20
#      clients), each counted under its own label;
#   c. a mirror that stops reading (SIGSTOP): a 32 MiB client through
#      zproxy to an echo primary gets its whole stream back (verified),
#      the mirror stream is dropped within 20 s (dropped_total 1, a
#      "mirror ... dropped" line); 4 more bulk clients: each dropped, the
#      drop lines at most one a second (--threads 1); once the mirror runs
#      again it reads every dropped stream to its end (zproxy closed them),
#      the first one a correct prefix of what its client sent;
#   d. a mirror nobody listens on: a 4M client (more than a pipe holds
#      while the connect is pending) relays intact, the stream counts
#      as dropped, "mirror ... down" is logged once, up goes to 0; with a
#      listener there now, pairs within the --fail-timeout (30 s here, so
#      that a sanitizer build's slow clients stay well inside it; the
#      clock starts before the first client, before the down) do not try
#      it (no connection arrives, streams_total does not move), each
#      counted dropped (--threads 2); clients that outlast the window
#      make the check a SKIP, never a pass;
#   e. --fail-timeout 1: after the down, a listener on the port; new
#      clients, one after another, are mirrored again within 10 s (bounded
#      poll): its stream arrives whole, up is 1 again, down logged once;
#   f. a mirror whose connects hang (zp-peer blackhole), --connect-timeout
#      3: a 16M client is served at once, not after the mirror's connect;
#      the connect times out: down logged, dropped counted, up 0, and the
#      next client does not try it;
#   g. a mirror that resets its connection after 1M: the stream counted
#      dropped and a "dropped" line; the client's 8M go through intact;
#   h. a mirror that echoes everything (16 MiB) back: the client gets
#      exactly what the primary sent (its own echo, once), the mirror's
#      echo is read and thrown away (it could send all of it; no drop);
#   i. bad command lines exit 64 with one line naming --mirror: a 5th
#      --mirror, no port, an empty port, port 0, port 70000; a name that
#      does not resolve (looked up in /etc/hosts only) exits 68, as -u's
#      does (EX_NOHOST); 4 mirrors start.
# a-h in each mode of $MODES; i once. Needs zp-peer gen (the clients'
# streams, for their SHA-256) and blackhole.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

# The clients of a and b: SIZE:SEED, 10 connections each (zp-peer connect
# -n 10 -g SIZE --seed SEED: index i of seed S sends stream (S, i)).
GROUPS_ALL=(256K:11 448K:12 640K:13 832K:14 1M:15)
GROUPS_TWO=(256K:11 1M:15)
PER_GROUP=10

# ---- helpers -----------------------------------------------------------

# start_stats ARGS...: start_zproxy with --stats on a free port ($SPORT).
start_stats() {
	SPORT=$(free_port) || fail "zp-peer port failed"
	start_zproxy --stats "127.0.0.1:$SPORT" "$@"
}

# scrape: GET /metrics into $T/metrics.
scrape() { stats_scrape; }

# series KIND LABEL: the name of mirror series KIND (streams_total,
# dropped_total, bytes_total, up) for the --mirror argument LABEL.
series() { echo "zproxy_mirror_$1{mirror=\"$2\"}"; }

# mirror_zero LABEL WHAT: at start, the four series of LABEL exist:
# counters 0, up 1.
mirror_zero() {
	scrape
	expect "$(series streams_total "$1")" == 0 "$2: at start"
	expect "$(series dropped_total "$1")" == 0 "$2: at start"
	expect "$(series bytes_total "$1")" == 0 "$2: at start"
	expect "$(series up "$1")" == 1 "$2: at start"
}

# group_bytes GROUP...: total bytes the clients of GROUPs send.
group_bytes() {
	local g sz total=0
	for g in "$@"; do
		sz=$(numfmt --from=iec "${g%:*}") || fail "bad size in $g"
		total=$((total + sz * PER_GROUP))
	done
	echo "$total"
}

# ref_sums OUT GROUP...: the sorted SHA-256 sums of the streams the
# clients of GROUPs send (zp-peer gen makes the same bytes), into OUT.
ref_sums() {
	local out=$1 g d=$T/ref; shift
	: >"$out.tmp"
	for g in "$@"; do
		rm -rf "$d"; mkdir -p "$d"
		"$ZP_PEER" gen -g "${g%:*}" --seed "${g#*:}" -n "$PER_GROUP" \
		    -o "$d/%d" || fail "zp-peer gen -g ${g%:*} --seed ${g#*:} failed"
		(cd "$d" && sha256sum -- *) | cut -d' ' -f1 >>"$out.tmp"
	done
	rm -rf "$d"
	sort "$out.tmp" >"$out" && rm -f "$out.tmp"
}

# dir_sums DIR OUT [proxy]: the sorted SHA-256 sums of DIR's files; with
# "proxy", of each without its first line (the PROXY v1 header).
dir_sums() {
	local f h
	if [ "${3:-}" != proxy ]; then
		(cd "$1" && sha256sum -- *) | cut -d' ' -f1 | sort >"$2"
		return
	fi
	for f in "$1"/*; do
		IFS= read -r h <"$f"
		tail -c +$(( ${#h} + 2 )) "$f" | sha256sum | cut -d' ' -f1
	done | sort >"$2"
}

# same_sums WANT GOT WHAT: the two sorted lists are equal, else say how not.
same_sums() {
	cmp -s "$1" "$2" && return 0
	fail "$3: $(wc -l <"$2") streams, $(comm -13 "$1" "$2" | wc -l) not sent by any client," \
	    "$(comm -23 "$1" "$2" | wc -l) sent but not received (as multisets of SHA-256)"
}

# run_clients WHAT GROUP...: one zp-peer connect per GROUP (10
# connections each, from 127.0.0.2), all at once, to zproxy; each sends
# its stream and a FIN and reads to EOF; all must end well within 90 s.
run_clients() {
	local what=$1 i=0 g pids=(); shift
	for g in "$@"; do
		zp_bg "cl$i" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -b 127.0.0.2 \
		    -n "$PER_GROUP" -g "${g%:*}" --seed "${g#*:}" -t 90
		pids+=("$BG_PID")
		i=$((i + 1))
	done
	for i in "${!pids[@]}"; do
		peer_wait "${pids[$i]}" "cl$i" 100 ||
			fail "$what: clients of group $i: $(cat "$T/cl$i.err")"
	done
}

# receiver NAME N: a zp-peer that accepts N connections and stores each in
# $T/NAME/INDEX, reading to EOF and sending nothing (no FIN of its own
# before the client's: a collector); sets RX_PID, RX_PORT.
receiver() {
	rm -rf "${T:?}/$1"; mkdir -p "$T/$1"
	peer_listen "$1" -n "$2" --no-shut -o "$T/$1/%d" -t 120
	RX_PID=$PEER_PID
	RX_PORT=$PEER_PORT
}

# pair_lines: the conn= lines of pairs that ended (not the "mirror ...
# conn=N dropped" ones).
pair_lines() { grep -E ' conn=[0-9]+ client=' "$ZLOG"; }

# wait_pairs N SECS WHAT: until N pairs were logged.
wait_pairs() {
	local deadline=$(( $(now_ms) + $2 * 1000 ))
	until [ "$(pair_lines | wc -l)" -ge "$1" ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$3: $(pair_lines | wc -l) pairs logged within ${2}s, want $1"
		sleep 0.05
	done
}

# mirror_lines LABEL KIND: lines "mirror LABEL ..." of the current log of
# KIND (down: marked down; dropped: a stream dropped).
mirror_lines() {
	local re="mirror ${1//./\\.} "
	case $2 in
	down) grep -cE -- "${re}down" "$ZLOG" ;;
	dropped) grep -cE -- "${re}.*dropped" "$ZLOG" ;;
	esac
}

# ---- a: 50 clients, one mirror ----------------------------------------

# fanout VARIANT: base (--threads 1), threads (--threads 2), proxy
# (--send-proxy v1).
fanout() {
	local variant=$1 extra what ppid pport mpid label n total t0 ms hb v
	case $variant in
	base) extra=(--threads 1); what="$mode: 50 clients, one mirror" ;;
	threads) extra=(--threads 2); what="$mode, --threads 2: 50 clients, one mirror" ;;
	proxy) extra=(--send-proxy v1); what="$mode, --send-proxy v1: 50 clients, one mirror" ;;
	esac
	n=$(( ${#GROUPS_ALL[@]} * PER_GROUP ))
	total=$(group_bytes "${GROUPS_ALL[@]}")
	receiver prim "$n"; ppid=$RX_PID; pport=$RX_PORT
	receiver mir "$n"; mpid=$RX_PID; label=127.0.0.1:$RX_PORT
	start_stats "${MODE_ARGS[@]}" -v -u "127.0.0.1:$pport" \
	    --mirror "$label" "${extra[@]}"
	fd_baseline
	mirror_zero "$label" "$what"

	t0=$(now_ms)
	run_clients "$what" "${GROUPS_ALL[@]}"
	peer_wait "$ppid" prim 30 ||
		fail "$what: the primary: $(cat "$T/prim.err")"
	peer_wait "$mpid" mir 30 ||
		fail "$what: the mirror did not get $n streams each ended by a FIN: $(cat "$T/mir.err")"
	ms=$(( $(now_ms) - t0 ))
	zproxy_alive "after $what"
	wait_pairs "$n" 10 "$what"

	if [ "$variant" = proxy ]; then
		proxy_check "$what" "$n"
		dir_sums "$T/prim" "$T/prim.sums" proxy
		dir_sums "$T/mir" "$T/mir.sums" proxy
	else
		dir_sums "$T/prim" "$T/prim.sums"
		dir_sums "$T/mir" "$T/mir.sums"
	fi
	same_sums "$ZP_T0/ref-all.sums" "$T/prim.sums" "$what: the primary"
	same_sums "$ZP_T0/ref-all.sums" "$T/mir.sums" "$what: the mirror"
	ok "$what: primary and mirror each got the $n streams sent, SHA-256 as multisets (${ms} ms)"

	wait_metric "$(series streams_total "$label")" == "$n" 10 "$what"
	if [ "$variant" = proxy ]; then
		# the payload; or the payload and the headers, which the mirror
		# got too (zproxy_bytes_total{direction="up"} counts no header)
		hb=$(cat "$T/hdr.bytes")
		wait_metric "$(series bytes_total "$label")" ">=" "$total" 10 "$what"
		v=$(val "$(series bytes_total "$label")")
		[ "$v" = "$total" ] || [ "$v" = $((total + hb)) ] ||
			fail "$what: $(series bytes_total "$label") is $v: neither the $total bytes of payload nor $((total + hb)) with the PROXY headers"
		note "$what: bytes_total $v ($([ "$v" = "$total" ] && echo "payload only" || echo "payload and headers"))"
	else
		wait_metric "$(series bytes_total "$label")" == "$total" 10 "$what"
	fi
	expect "$(series dropped_total "$label")" == 0 "$what"
	expect "$(series up "$label")" == 1 "$what"
	wait_metric 'zproxy_bytes_total{direction="up"}' == "$total" 10 "$what"
	promcheck "$what"
	ok "$what: metrics: streams_total $n, dropped_total 0, bytes_total $(val "$(series bytes_total "$label")"), up 1"

	[ "$(pair_lines | grep -c 'end=closed')" = "$n" ] ||
		fail "$what: $(pair_lines | wc -l) conn= lines, $(pair_lines | grep -c 'end=closed') end=closed, want $n: $(pair_lines | grep -v -m 1 end=closed)"
	[ "$(mirror_lines "$label" dropped)" = 0 ] && [ "$(mirror_lines "$label" down)" = 0 ] ||
		fail "$what: a mirror warning: $(grep -m 1 "mirror $label" "$ZLOG")"
	wait_fd_baseline 10 "$what" sockets
	stop_zproxy
	ok "$what: $n x end=closed, no mirror warning, sockets back to baseline"
}

# proxy_check WHAT N: every file of $T/mir starts with a PROXY v1 line
# from 127.0.0.2:CPORT to 127.0.0.1:$ZPORT, CPORT one of the client ports
# zproxy logged, each once; the primary got a file with the same line and
# the very same bytes. Writes the headers' total length to $T/hdr.bytes.
proxy_check() {
	local what=$1 n=$2 f h re cport hb=0
	local -A prim_by_hdr=() seen=() logged=()
	re="^PROXY TCP4 127\\.0\\.0\\.2 127\\.0\\.0\\.1 ([0-9]+) $ZPORT"$'\r'"\$"
	for f in "$T"/prim/*; do
		IFS= read -r h <"$f"
		[[ $h =~ $re ]] || fail "$what: the primary's ${f##*/} starts with '$(printf '%q' "${h:0:80}")', not a PROXY v1 line for a client of 127.0.0.2"
		prim_by_hdr[$h]=$f
	done
	for cport in $(pair_lines | sed -n 's/.* client=127\.0\.0\.2:\([0-9]*\) .*/\1/p'); do
		logged[$cport]=1
	done
	[ "${#logged[@]}" = "$n" ] ||
		fail "$what: zproxy logged ${#logged[@]} distinct clients of 127.0.0.2, want $n"
	for f in "$T"/mir/*; do
		IFS= read -r h <"$f"
		[[ $h =~ $re ]] || fail "$what: mirror stream ${f##*/} starts with '$(printf '%q' "${h:0:80}")', not a PROXY v1 line for a client of 127.0.0.2"
		cport=${BASH_REMATCH[1]}
		[ -n "${logged[$cport]:-}" ] ||
			fail "$what: mirror stream ${f##*/} names client port $cport, which zproxy did not log"
		[ -z "${seen[$cport]:-}" ] ||
			fail "$what: two mirror streams name client port $cport"
		seen[$cport]=1
		[ -n "${prim_by_hdr[$h]:-}" ] ||
			fail "$what: the primary got no stream with the mirror's header '$(printf '%q' "$h")'"
		cmp -s "$f" "${prim_by_hdr[$h]}" ||
			fail "$what: for client port $cport the mirror got $(size "$f") bytes, the primary $(size "${prim_by_hdr[$h]}"), not the same"
		hb=$((hb + ${#h} + 1))
	done
	[ "${#seen[@]}" = "$n" ] || fail "$what: ${#seen[@]} mirror streams, want $n"
	echo "$hb" >"$T/hdr.bytes"
	ok "$what: each mirror stream starts with the PROXY v1 line of its client (127.0.0.2, port as logged) and is byte for byte the primary's"
}

# ---- b: two mirrors ---------------------------------------------------

two_mirrors() {
	local what="$mode: two mirrors, 20 clients" n total ppid apid bpid la lb pport
	n=$(( ${#GROUPS_TWO[@]} * PER_GROUP ))
	total=$(group_bytes "${GROUPS_TWO[@]}")
	receiver prim "$n"; ppid=$RX_PID; pport=$RX_PORT
	receiver mira "$n"; apid=$RX_PID; la=127.0.0.1:$RX_PORT
	receiver mirb "$n"; bpid=$RX_PID; lb=127.0.0.1:$RX_PORT
	start_stats "${MODE_ARGS[@]}" -v -u "127.0.0.1:$pport" \
	    --mirror "$la" --mirror "$lb"
	mirror_zero "$la" "$what"
	mirror_zero "$lb" "$what"
	run_clients "$what" "${GROUPS_TWO[@]}"
	peer_wait "$ppid" prim 30 || fail "$what: the primary: $(cat "$T/prim.err")"
	peer_wait "$apid" mira 30 || fail "$what: mirror A: $(cat "$T/mira.err")"
	peer_wait "$bpid" mirb 30 || fail "$what: mirror B: $(cat "$T/mirb.err")"
	dir_sums "$T/prim" "$T/prim.sums"
	dir_sums "$T/mira" "$T/mira.sums"
	dir_sums "$T/mirb" "$T/mirb.sums"
	same_sums "$ZP_T0/ref-two.sums" "$T/prim.sums" "$what: the primary"
	same_sums "$ZP_T0/ref-two.sums" "$T/mira.sums" "$what: mirror A"
	same_sums "$ZP_T0/ref-two.sums" "$T/mirb.sums" "$what: mirror B"
	ok "$what: the primary and both mirrors got the same $n streams (SHA-256 multisets)"
	for l in "$la" "$lb"; do
		wait_metric "$(series bytes_total "$l")" == "$total" 10 "$what: $l"
		expect "$(series streams_total "$l")" == "$n" "$what: $l"
		expect "$(series dropped_total "$l")" == 0 "$what: $l"
		expect "$(series up "$l")" == 1 "$what: $l"
	done
	promcheck "$what"
	stop_zproxy
	ok "$what: each mirror counted under its own label: streams $n, bytes $total, dropped 0"
}

# ---- c: a mirror that stops reading -----------------------------------

# drop_spacing LABEL: the smallest gap in ms between two "mirror LABEL
# ... dropped" lines (their time stamps); 999999 when fewer than two.
drop_spacing() {
	grep -E "mirror ${1//./\\.} .*dropped" "$ZLOG" |
		sed -n 's/^[0-9-]*T\([0-9]*\):\([0-9]*\):\([0-9]*\)\.\([0-9]*\)Z .*/\1 \2 \3 \4/p' |
		awk 'BEGIN { min = 999999 }
		     { t = (($1 * 60 + $2) * 60 + $3) * 1000 + $4
		       if (NR > 1 && t - last < min) min = t - last
		       last = t }
		     END { print min }'
}

slow_mirror() {
	local what="$mode: a mirror that stops reading (SIGSTOP)" epid smpid
	# big: a stopped mirror's stream is dropped once its pipe and
	# socket buffers are full, a few MiB (never read, its receive
	# buffer does not grow); 32M as for the 4 clients below (128M until
	# December 2026: the same drop, the same checks, and under TSan
	# its echo alone took 40-60 s)
	local label bpid t0 tdrop tdone got bytes lines gap big=32M
	peer_listen echo --echo -n 0 -t 120
	epid=$PEER_PID
	peer_listen slowm -n 5 --no-shut --allow-reset -o "$T/slowm.%d" -t 120 -v
	smpid=$PEER_PID
	label=127.0.0.1:$PEER_PORT
	ours "$smpid" || fail "$what: the mirror is not ours"
	kill -STOP "$smpid"
	# whatever happens, our stopped mirror runs again before it is stopped
	trap 'ours '"$smpid"' && kill -CONT '"$smpid"' 2>/dev/null; zp_kill_pids' EXIT
	start_stats "${MODE_ARGS[@]}" -v --threads 1 -u "127.0.0.1:$(head -n 1 "$T/echo.out")" \
	    --mirror "$label"
	mirror_zero "$label" "$what"

	t0=$(now_ms)
	zp_bg bulk "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g "$big" -x "$big" --seed 21 -t 60
	bpid=$BG_PID
	wait_metric "$(series dropped_total "$label")" == 1 20 "$what: the stream was not dropped within 20 s"
	tdrop=$(( $(now_ms) - t0 ))
	wait_line "$ZLOG" "mirror ${label//./\\.} .*dropped" 5 >/dev/null ||
		fail "$what: dropped_total is 1 but no 'mirror $label ... dropped' line"
	peer_wait "$bpid" bulk 60 ||
		fail "$what: the primary did not go on: $(cat "$T/bulk.err")"
	tdone=$(( $(now_ms) - t0 ))
	scrape
	expect "$(series streams_total "$label")" == 1 "$what"
	expect "$(series bytes_total "$label")" "<" "$(numfmt --from=iec $big)" "$what"
	ok "$what: the client got its $big back intact in ${tdone} ms; the mirror stream dropped after ${tdrop} ms ($(val "$(series bytes_total "$label")") bytes delivered): $(grep -m 1 -oE "mirror ${label//./\\.} .*dropped.*" "$ZLOG")"

	# four more at once: each dropped, said at most once a second
	zp_bg bulk4 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 4 -g 32M -x 32M --seed 22 -t 60
	bpid=$BG_PID
	wait_metric "$(series dropped_total "$label")" == 5 20 "$what: 4 more bulk clients"
	peer_wait "$bpid" bulk4 60 ||
		fail "$what: 4 more bulk clients: the primary did not go on: $(cat "$T/bulk4.err")"
	expect "$(series streams_total "$label")" == 5 "$what: 4 more bulk clients"
	lines=$(mirror_lines "$label" dropped)
	gap=$(drop_spacing "$label")
	[ "$gap" -ge 900 ] ||
		fail "$what: two 'dropped' lines only ${gap} ms apart (at most one a second): $(grep -E "mirror ${label//./\\.} .*dropped" "$ZLOG" | tail -n 3)"
	ok "$what: 4 more bulk clients served, each mirror stream dropped (dropped_total 5); $lines drop line(s), none within a second of another"
	zproxy_alive "$what"

	# the mirror runs again: it reads what its 5 connections hold, to
	# their end (zproxy closed each), the first a prefix of its stream
	kill -CONT "$smpid"
	peer_wait "$smpid" slowm 20 ||
		fail "$what: after SIGCONT the mirror did not see its 5 connections end: $(tail -n 3 "$T/slowm.err")"
	got=$(size "$T/slowm.0")
	cmp -s -n "$got" "$T/slowm.0" <("$ZP_PEER" gen -g "$big" --seed 21 2>/dev/null) ||
		fail "$what: the $got bytes the mirror got first are not the head of the client's stream"
	bytes=$(val "$(series bytes_total "$label")")
	ok "$what: once running again the mirror saw its 5 connections end; the first brought $got bytes, the head of the client's stream ($bytes counted delivered in all)"
	stop_zproxy
	zp_stop "$epid"
}

# ---- d-g: a mirror that is down, times out, resets --------------------------------------

# echo_client NAME SEED [SIZE]: one client of 256K (SIZE) through zproxy to
# the echo primary; its echo must come back intact.
echo_client() {
	peer "$1" connect 127.0.0.1 "$ZPORT" -g "${3:-256K}" -x "${3:-256K}" \
	    --seed "$2" -t 30 || fail "$1: $(cat "$T/$1.err")"
}

mirror_down() {
	local what="$mode: a mirror nobody listens on" mport label tdown s0 el
	local window=30
	peer_listen echo --echo -n 0 -t 120
	mport=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	label=127.0.0.1:$mport
	start_stats "${MODE_ARGS[@]}" -v --threads 2 -u "127.0.0.1:$PEER_PORT" \
	    --mirror "$label" --fail-timeout "$window"
	mirror_zero "$label" "$what"
	# no down before the first client starts: the window is measured
	# from here, a bound that can only make it look longer
	tdown=$(now_ms)
	# 4M: more than the mirror's pipe takes while its connect is pending
	echo_client first 41 4M
	wait_line "$ZLOG" "mirror ${label//./\\.} down" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'mirror $label down' line within 10 s"
	wait_metric "$(series up "$label")" == 0 5 "$what"
	wait_metric "$(series dropped_total "$label")" == 1 5 "$what"
	s0=$(val "$(series streams_total "$label")")
	[ "$s0" -le 1 ] || fail "$what: streams_total $s0 after one client"
	ok "$what: the client relayed intact, the stream dropped, up 0: $(grep -m 1 -oE "mirror ${label//./\\.} down.*" "$ZLOG")"

	# now someone listens there, but within --fail-timeout no pair may
	# try it
	rm -rf "$T/late"; mkdir -p "$T/late"
	peer_listen late -b 127.0.0.1 -p "$mport" -n 0 --no-shut -o "$T/late/%d" -t 60
	peer "down9" connect 127.0.0.1 "$ZPORT" -n 9 -g 256K -x 256K --seed 42 -t 30 ||
		fail "$what: 9 clients while down: $(cat "$T/down9.err")"
	# A pair tries the mirror when it starts: all did by now.
	el=$(( $(now_ms) - tdown ))
	if [ "$el" -ge $(( (window - 1) * 1000 )) ]; then
		stop_zproxy
		skip "$what: the 9 clients took until ${el} ms after the first began, not inside the ${window} s --fail-timeout: the window was not tested"
		return 0
	fi
	wait_metric "$(series dropped_total "$label")" == 10 5 "$what: 9 clients while down"
	expect "$(series streams_total "$label")" == "$s0" "$what: 9 clients while down"
	expect "$(series up "$label")" == 0 "$what: 9 clients while down"
	[ "$(estab "$mport" '01|08')" = 0 ] && [ -z "$(ls "$T/late")" ] ||
		fail "$what: a connection reached the mirror within the --fail-timeout"
	[ "$(mirror_lines "$label" down)" = 1 ] ||
		fail "$what: 'mirror $label down' logged $(mirror_lines "$label" down) times, want 1"
	stop_zproxy
	ok "$what: 9 more clients relayed intact within ${el} ms of the first client's start, none tried the mirror (which listened by then), dropped_total 10, down logged once"
}

mirror_back() {
	local what="$mode: --fail-timeout 1, the mirror comes back" mport label
	local tdown k s0 deadline f want
	peer_listen echo --echo -n 0 -t 120
	mport=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	label=127.0.0.1:$mport
	start_stats "${MODE_ARGS[@]}" -v --fail-timeout 1 -u "127.0.0.1:$PEER_PORT" \
	    --mirror "$label"
	echo_client first 51 16K
	wait_line "$ZLOG" "mirror ${label//./\\.} down" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'mirror $label down' line within 10 s"
	tdown=$(now_ms)
	wait_metric "$(series up "$label")" == 0 5 "$what"
	s0=$(val "$(series streams_total "$label")")
	rm -rf "$T/back"; mkdir -p "$T/back"
	peer_listen back -b 127.0.0.1 -p "$mport" -n 1 --no-shut -o "$T/back/%d" -t 60
	# one client after another (a seed each) until one is mirrored
	deadline=$(( tdown + 10000 ))
	k=0
	while :; do
		k=$((k + 1))
		echo_client "c$k" $((60 + k)) 64K
		scrape
		[ "$(val "$(series streams_total "$label")")" -gt "$s0" ] && break
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$what: $k clients over 10 s since the down, none mirrored"
		sleep 0.1
	done
	el=$(( $(now_ms) - tdown ))
	peer_wait "$PEER_PID" back 10 ||
		fail "$what: the mirror did not get client $k's stream and a FIN: $(cat "$T/back.err")"
	f=$T/back/0
	want=$("$ZP_PEER" gen -g 64K --seed $((60 + k)) | sha256sum | cut -d' ' -f1)
	[ "$(sha "$f")" = "$want" ] ||
		fail "$what: the mirror got $(size "$f") bytes, not client $k's 64K stream"
	wait_metric "$(series bytes_total "$label")" == 65536 5 "$what"
	expect "$(series up "$label")" == 1 "$what"
	expect "$(series dropped_total "$label")" == "$k" "$what"
	[ "$(mirror_lines "$label" down)" = 1 ] ||
		fail "$what: 'mirror $label down' logged $(mirror_lines "$label" down) times, want 1"
	stop_zproxy
	ok "$what: client $k, ${el} ms after the down, was mirrored again (its 64K intact, up 1, dropped_total $k, down logged once)"
}

# mirror_timeout: a mirror whose connects hang (zp-peer blackhole: SYNs
# dropped), --connect-timeout 8: a client of 16M (more than any pipe holds
# meanwhile) is served before the connect could time out, without waiting
# for the mirror; the connect times out, the mirror is logged down and the
# stream counted dropped. (8 s, not 3: under ThreadSanitizer the 16M echo
# alone took 3.7 s once; a client that waited would take 8 s or more.)
mirror_timeout() {
	local what="$mode: a mirror whose connect times out" label t0 ms s0
	peer_listen echo --echo -n 0 -t 120
	zp_bg hole "$ZP_PEER" blackhole -b 127.0.0.1 -t 120
	label=127.0.0.1:$(wait_line "$T/hole.out" '^[0-9]+$' 10 "$BG_PID") ||
		fail "$what: zp-peer blackhole did not start: $(cat "$T/hole.err")"
	start_stats "${MODE_ARGS[@]}" -v --connect-timeout 8 \
	    -u "127.0.0.1:$PEER_PORT" --mirror "$label"
	t0=$(now_ms)
	echo_client first 81 16M
	ms=$(( $(now_ms) - t0 ))
	[ "$ms" -lt 8000 ] ||
		fail "$what: the client took ${ms} ms: it waited for the mirror's connect (--connect-timeout 8)"
	[ "$(mirror_lines "$label" down)" = 0 ] ||
		fail "$what: down before its connect could time out: $(grep -m 1 "mirror $label down" "$ZLOG")"
	wait_line "$ZLOG" "mirror ${label//./\\.} down" 10 "$ZPID" >/dev/null ||
		fail "$what: no 'mirror $label down' line within 10 s (a stream dropped while its connect was pending must still have the timeout counted)"
	wait_metric "$(series dropped_total "$label")" == 1 5 "$what"
	wait_metric "$(series up "$label")" == 0 5 "$what"
	s0=$(val "$(series streams_total "$label")")
	echo_client second 82 16M
	wait_metric "$(series dropped_total "$label")" == 2 5 "$what: a client while down"
	expect "$(series streams_total "$label")" == "$s0" "$what: a client while down"
	stop_zproxy
	ok "$what: the client was served in ${ms} ms, then: $(grep -m 1 -oE "mirror ${label//./\\.} down.*" "$ZLOG"); the next client did not try it"
}

# reset_mirror: a mirror that resets its connection after 1M: the stream
# is counted dropped and said so; the client's 8M go through intact.
reset_mirror() {
	local what="$mode: a mirror that resets" label
	peer_listen echo --echo -n 0 -t 120
	peer_listen rmir -n 1 --reset-after-recv 1M -t 60
	label=127.0.0.1:$PEER_PORT
	start_stats "${MODE_ARGS[@]}" -v -u "127.0.0.1:$(head -n 1 "$T/echo.out")" \
	    --mirror "$label"
	echo_client big 91 8M
	wait_metric "$(series dropped_total "$label")" == 1 10 "$what"
	wait_line "$ZLOG" "mirror ${label//./\\.} .*dropped" 5 >/dev/null ||
		fail "$what: dropped_total is 1 but no 'mirror $label ... dropped' line"
	expect "$(series streams_total "$label")" == 1 "$what"
	expect "$(series up "$label")" == 1 "$what"
	stop_zproxy
	ok "$what: the client's 8M went through intact; $(grep -m 1 -oE "mirror ${label//./\\.} .*dropped.*" "$ZLOG")"
}

# ---- h: a mirror that talks back --------------------------------------

echo_mirror() {
	local what="$mode: a mirror that echoes everything back" ppid mpid label
	peer_listen prim --echo -n 1 -t 60
	ppid=$PEER_PID
	peer_listen emir --echo -n 1 -t 60 -v
	mpid=$PEER_PID
	label=127.0.0.1:$PEER_PORT
	start_stats "${MODE_ARGS[@]}" -v -u "127.0.0.1:$(head -n 1 "$T/prim.out")" \
	    --mirror "$label"
	# the client must get its 16M back once: a byte more (the mirror's
	# echo) or another byte fails it. At 16 MB/s: a mirror that echoes
	# must keep up with the client as any mirror must (else it is cut,
	# too slow), and an unpaced burst outran the echoing peer under a
	# loaded CI's sanitizers.
	peer talk connect 127.0.0.1 "$ZPORT" -g 16M -x 16M --seed 71 \
	    --send-rate 16M -t 60 ||
		fail "$what: the client: $(cat "$T/talk.err")"
	peer_wait "$ppid" prim 10 || fail "$what: the primary: $(cat "$T/prim.err")"
	peer_wait "$mpid" emir 30 ||
		fail "$what: the mirror could not send its echo: $(cat "$T/emir.err")"
	grep -q 'conn 0: sent 16777216 received 16777216 end eof' "$T/emir.err" ||
		fail "$what: the mirror: $(grep 'conn 0' "$T/emir.err")"
	wait_metric "$(series bytes_total "$label")" == 16777216 10 "$what"
	expect "$(series dropped_total "$label")" == 0 "$what"
	expect "$(series streams_total "$label")" == 1 "$what"
	wait_metric 'zproxy_bytes_total{direction="down"}' == 16777216 10 "$what"
	stop_zproxy
	ok "$what: the client got exactly the primary's 16M; the mirror echoed all 16M to zproxy, which threw it away (dropped 0)"
}

# ---- i: bad command lines ---------------------------------------------

# bad WHAT ARGS...: zproxy ARGS exits $WANT_RC (64) within 10 s with
# exactly one line on stderr naming --mirror, nothing on stdout.
bad() { subcase bad_check "$@"; }
bad_check() {
	local what=$1 rc lines want=${WANT_RC:-64}; shift
	timeout -k 2 10 "$ZPROXY" "$@" >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	what="--mirror $what -> exit $rc"
	[ "$rc" -eq 124 ] && fail "$what: hung (killed after 10 s)"
	[ "$rc" -ge 128 ] && fail "$what: killed by signal $((rc - 128))"
	sanitizer_clean "$T/bad.err" || fail "$what: sanitizer report: $(head -c 300 "$T/bad.err")"
	[ "$rc" -eq "$want" ] || fail "$what, expected $want: $(head -c 300 "$T/bad.err")"
	lines=$(wc -l <"$T/bad.err")
	[ "$lines" -eq 1 ] ||
		fail "$what: $lines lines on stderr, expected 1: $(head -n 5 "$T/bad.err" | tr '\n' '|')"
	grep -q -- '--mirror' "$T/bad.err" ||
		fail "$what: stderr does not name --mirror: $(cat "$T/bad.err")"
	[ -s "$T/bad.out" ] && fail "$what: wrote to stdout: $(head -c 200 "$T/bad.out")"
	ok "$what: $(cat "$T/bad.err")"
}

bad_cli() {
	local UP L M=() i real
	UP=127.0.0.1:$(free_port)
	L=127.0.0.1:$(free_port)
	for i in 1 2 3 4 5; do M+=(--mirror "127.0.0.1:$(free_port)"); done
	bad "given 5 times" -l "$L" -u "$UP" "${M[@]}"
	bad "127.0.0.1 (no port)" -l "$L" -u "$UP" --mirror 127.0.0.1
	bad "127.0.0.1: (empty port)" -l "$L" -u "$UP" --mirror 127.0.0.1:
	bad "127.0.0.1:0" -l "$L" -u "$UP" --mirror 127.0.0.1:0
	bad "127.0.0.1:70000" -l "$L" -u "$UP" --mirror 127.0.0.1:70000
	# a name that does not resolve, looked up in /etc/hosts only (a
	# private nsswitch.conf in zproxy's own mount namespace, as cli.sh
	# does), so that no DNS query leaves this machine
	printf 'hosts: files\n' >"$T/nsswitch.conf"
	unshare -m sh -c 'mount --bind "$0" /etc/nsswitch.conf' "$T/nsswitch.conf" 2>/dev/null ||
		fail "cannot make a mount namespace (unshare -m) to test an unresolvable name without DNS"
	printf '#!/bin/sh\nexec unshare -m sh -c '"'"'mount --bind "$0" /etc/nsswitch.conf && exec "$@"'"'"' "%s" "%s" "$@"\n' \
	    "$T/nsswitch.conf" "$ZPROXY" >"$T/zproxy-nodns"
	chmod +x "$T/zproxy-nodns"
	real=$ZPROXY
	ZPROXY=$T/zproxy-nodns
	WANT_RC=68 bad "nonexistent.invalid:80 (does not resolve)" -l "$L" -u "$UP" --mirror nonexistent.invalid:80
	ZPROXY=$real
	subcase four_mirrors "${M[@]:0:8}"
}

# four_mirrors ARGS: 4 --mirror (nobody listening) are fine: it starts.
four_mirrors() {
	start_zproxy -u "127.0.0.1:$(free_port)" "$@"
	stop_zproxy
	ok "--mirror given 4 times: zproxy starts and stops cleanly"
}

# ---- main ---------------------------------------------------------------

note "zp-peer gen: the clients' streams (SHA-256)"
ref_sums "$ZP_T0/ref-all.sums" "${GROUPS_ALL[@]}"
ref_sums "$ZP_T0/ref-two.sums" "${GROUPS_TWO[@]}"
[ "$(sort -u "$ZP_T0/ref-all.sums" | wc -l)" = $(( ${#GROUPS_ALL[@]} * PER_GROUP )) ] ||
	fail "the clients' streams are not all distinct"

bad_cli
# One mode after the other, not side by side (subcase_bg): echo_mirror's
# mirror is dropped as too slow once its pipe fills, which a second mode
# running beside it on a loaded machine made happen (the echo peer
# descheduled for a moment).
for mode in $MODES; do
	set_mode "$mode"
	subcase fanout base
	subcase fanout threads
	subcase fanout proxy
	subcase two_mirrors
	subcase slow_mirror
	subcase mirror_down
	subcase mirror_back
	subcase mirror_timeout
	subcase reset_mirror
	subcase echo_mirror
done

zp_done
