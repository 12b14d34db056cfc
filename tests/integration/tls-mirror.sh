#!/bin/bash
# tls-mirror.sh - --mirror tls@HOST:PORT: each client's stream is copied
# to a collector over TLS, checked as -u tls@ upstreams are (--upstream-ca,
# the mirror's HOST or --upstream-sni), while the pairs themselves keep
# their mode (a tls@ mirror forces no copy). Certificates from tlslib.sh.
#   a. bytes: 3 clients at once, 3 MiB each (the --send-gen streams,
#      sent by bash: the first byte, then the rest once the mirror's
#      handshakes are done, as a stream's pipe holds only so much while
#      its handshake is under way), plain client -> zproxy -> plain
#      upstream, and the mirror a TLS zp-peer:
#      the SHA-256 of each stream the upstream and the mirror received is
#      one of those sent, every one once; the pairs' lines say the mode
#      asked for (mode=splice: the mirror's pipe is tee'd, read and
#      encrypted); handshakes{side="mirror",result="ok"} 3, the mirror's
#      bytes 9 MiB, dropped 0; in each mode of $MODES;
#   b. framed: --framing lf, 4 x 500 numbered messages (zp-logsend) to a
#      plain syslog-ng upstream and a syslog-ng TLS mirror (the rest
#      after the first message once the handshakes are done): every
#      message in each file exactly once, whole; in each mode of $MODES;
#   c. verification: a mirror whose certificate names another host: its
#      stream dropped ("TLS handshake failed: name-mismatch: ..."), the
#      mirror down ("down for"), handshakes{side="mirror",
#      result="name-mismatch"} 1, the primary's 16 KiB and, the mirror
#      down, the next client's 3 MB all delivered (SHA-256), 1 stream
#      begun, 2 dropped; a mirror that takes the connect and never answers the
#      ClientHello: dropped after --connect-timeout ("TLS handshake
#      failed: timeout"), result="timeout" 1, the primary served;
#   d. --send-proxy v1: the header before the ClientHello, in the clear,
#      to nginx's `listen ... ssl proxy_protocol`, which passes the bytes
#      on (proxy_pass) to a zp-peer: its file is the client's (SHA-256),
#      nginx logged the client's address from the header, the primary
#      got the header and then the same bytes;
#   e. --threads 2, a mirror named localhost (SNI and the DNS name
#      checked): 8 clients at once, 1 MiB each, all mirrored whole;
#   f. the command line: the --upstream-* options with a tls@ mirror and
#      no tls@ upstream are taken; with a plain mirror only, refused with
#      one line naming both; a -f file's `mirror tls@...` reloads
#      unchanged ("nothing changed").
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1
. "${ZP_TESTLIB%/*}/tlslib.sh" || exit 1

cert nobody ca /CN=nobody 30 "subjectAltName=DNS:nobody.example"
# zp-peer as a TLS server with certificate NAME (in $C).
tls_srv() { echo --tls --tls-cert "$C/$1.pem" --tls-key "$C/$1.key"; }

# zproxy_up ARGS...: zproxy -v with --stats and the test CA.
zproxy_up() {
	SPORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	start_zproxy -v --stats "127.0.0.1:$SPORT" --upstream-ca "$C/ca.pem" "$@"
}

# same_set WHAT WANT GOT: the files WANT.0.. and GOT.0.. hold the same
# multiset of SHA-256s (a listener numbers its connections in accept
# order, not the client's).
same_set() {
	local a b
	a=$(cat "$2".[0-9]* | wc -c; for f in "$2".[0-9]*; do sha "$f"; done | sort)
	b=$(cat "$3".[0-9]* 2>/dev/null | wc -c; for f in "$3".[0-9]*; do [ -f "$f" ] && sha "$f"; done | sort)
	[ "$a" = "$b" ] ||
		fail "$1: what was received is not what was sent: $(stat -c %s "$3".[0-9]* 2>&1 | tr '\n' ' ')"
}

# mseries KIND LABEL: mirror series KIND of the --mirror argument LABEL.
mseries() { echo "zproxy_mirror_$1{mirror=\"$2\"}"; }

# send_synced WHAT FILE...: a connection to zproxy ($ZPORT) per FILE, at
# once (bash's /dev/tcp). Each sends its first byte, then waits until
# that many mirror handshakes are done (zproxy_tls_handshakes_total
# {side="mirror",result="ok"}), then the rest, and closes. A mirror's
# stream holds no more than its pipe while its handshake is under way
# (it never holds the client back: beyond, it is cut), and here every
# byte is to reach the mirror.
send_synced() {
	local what=$1 f fd fds=() pids=() i=0 rc=0
	shift
	for f in "$@"; do
		exec {fd}<>"/dev/tcp/127.0.0.1/$ZPORT" ||
			fail "$what: cannot connect to zproxy"
		fds+=("$fd")
		head -c 1 "$f" >&"$fd"
	done
	wait_metric 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' \
	    '>=' $# 10 "$what: the mirror's handshakes"
	for f in "$@"; do
		timeout -k 5 60 tail -c +2 "$f" >&"${fds[i]}" &
		pids+=($!)
		i=$((i + 1))
	done
	for i in "${pids[@]}"; do
		wait "$i" || rc=$?
	done
	for fd in "${fds[@]}"; do
		exec {fd}>&-
	done
	[ "$rc" = 0 ] || fail "$what: a client's send failed (status $rc)"
}

# ---- a. bytes ----------------------------------------------------------------

case_bytes() {
	local mode=$1 n=$((3 * 1024 * 1024)) k=3 upid mpid up mp i

	set_mode "$mode"
	peer_listen "b_up_$mode" -o "$T/b_up_$mode.%d" -n "$k" -t 120
	upid=$PEER_PID up=$PEER_PORT
	# shellcheck disable=SC2046 # the options are words
	peer_listen "b_mir_$mode" -o "$T/b_mir_$mode.%d" -n "$k" -t 120 \
	    $(tls_srv srv)
	mpid=$PEER_PID mp=$PEER_PORT
	zproxy_up "${MODE_ARGS[@]}" --threads 1 -u "127.0.0.1:$up" \
	    --mirror "tls@127.0.0.1:$mp"
	"$ZP_PEER" gen -g "$n" --seed 21 -n "$k" -o "$T/b_exp.%d" ||
		fail "zp-peer gen failed"
	send_synced "$mode" "$T"/b_exp.[0-9]*
	peer_wait "$upid" "b_up_$mode" 30 ||
		fail "$mode: the upstream: $(cat "$T/b_up_$mode.err")"
	peer_wait "$mpid" "b_mir_$mode" 30 ||
		fail "$mode: the TLS mirror: $(cat "$T/b_mir_$mode.err")"
	same_set "$mode: the upstream" "$T/b_exp" "$T/b_up_$mode"
	same_set "$mode: the TLS mirror" "$T/b_exp" "$T/b_mir_$mode"
	for i in $(seq "$k"); do
		expect_conn_log "upstream=127.0.0.1:$up mode=$MODE_LOGGED up=$n down=0 .*end=closed" \
		    "$mode: client $i (a tls@ mirror leaves the pair's mode alone)"
	done
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' == "$k" \
	    "$mode: the mirror's handshakes"
	expect 'zproxy_tls_handshakes_total{side="upstream",result="ok"}' == 0 \
	    "$mode: no upstream handshake"
	expect "$(mseries bytes_total "tls@127.0.0.1:$mp")" == $((k * n)) \
	    "$mode: the mirror's bytes"
	expect "$(mseries dropped_total "tls@127.0.0.1:$mp")" == 0 \
	    "$mode: dropped"
	stop_zproxy
	ok "$mode: 3 clients x 3 MiB to a plain upstream and a TLS mirror, each stream whole on both (SHA-256), the pairs mode=$MODE_LOGGED, 3 mirror handshakes, 9 MiB mirrored, none dropped"
}

# ---- b. framed -----------------------------------------------------------------

case_framed() {
	local mode=$1 name=fr-$1 mlog ulog mpid upid spid

	set_mode "$mode"
	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name-mir" "" lf
	mpid=$C_PID mlog=$C_LOG
	local mport=$C_PORT
	unset C_TLS_CERT C_TLS_KEY
	start_collector syslog-ng "$name-up" "" lf
	upid=$C_PID ulog=$C_LOG
	zproxy_up "${MODE_ARGS[@]}" --framing lf -u "127.0.0.1:$C_PORT" \
	    --mirror "tls@127.0.0.1:$mport"
	# The first message of each, then the rest once the mirror's four
	# handshakes are done (see send_synced).
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" --conns 4 \
	    --msgs 500 --framing lf --seed "$RANDOM" --pause-at 1 \
	    --go "$T/$name.go" --timeout 60
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 30 "$spid" >/dev/null ||
		fail "$mode: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	wait_metric 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' \
	    '>=' 4 10 "$mode: the mirror's handshakes"
	: >"$T/$name.go"
	peer_wait "$spid" "$name.send" 90 ||
		fail "$mode: the sender failed: $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$mode" "$name" 4 500
	wait_lines "$ulog" 2000 30 ||
		fail "$mode: the upstream wrote $(lines "$ulog") of 2000 messages"
	wait_lines "$mlog" 2000 30 ||
		fail "$mode: the TLS mirror wrote $(lines "$mlog") of 2000 messages"
	settle "$mlog" 10 || note "$mode: the mirror's file still grows"
	logsend_verify "$mode: the upstream" "$name-up" 4 500 --exactly-once "$ulog"
	logsend_verify "$mode: the TLS mirror" "$name-mir" 4 500 --exactly-once "$mlog"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' == 4 \
	    "$mode: the mirror's handshakes"
	expect "$(mseries dropped_total "tls@127.0.0.1:$mport")" == 0 \
	    "$mode: dropped"
	stop_zproxy
	kill "$mpid" "$upid" 2>/dev/null
	ok "$mode: --framing lf, 4 x 500 messages to a syslog-ng upstream and a syslog-ng TLS mirror: each has every message exactly once, whole ($VERIFIED)"
}

# ---- c. verification -------------------------------------------------------------

case_verify() {
	local n=3000000 upid mp label

	# A mirror whose certificate is for nobody.example, not 127.0.0.1.
	# shellcheck disable=SC2046
	peer_listen v_name -n 0 -t 60 --tls-fail $(tls_srv nobody)
	mp=$PEER_PORT label=tls@127.0.0.1:$PEER_PORT
	peer_listen v_up -o "$T/v_up.%d" -n 2 -t 60
	upid=$PEER_PID
	zproxy_up --threads 1 -u "127.0.0.1:$PEER_PORT" --mirror "$label"
	# Small enough for the stream's pipe: it waits for the handshake.
	head -c 16384 "$T/data" >"$T/v_small"
	peer v_cli connect 127.0.0.1 "$ZPORT" -s "$T/v_small" -t 30 ||
		fail "a client with a bad mirror: $(cat "$T/v_cli.err")"
	wait_line "$ZLOG" "mirror $label conn=1 dropped: TLS handshake failed: name-mismatch: " 10 >/dev/null ||
		fail "no line says the mirror's stream was dropped for its name: $(grep -m 3 "mirror $label" "$ZLOG")"
	wait_line "$ZLOG" "mirror $label down for [0-9.]+s: TLS handshake failed: name-mismatch" 10 >/dev/null ||
		fail "no line says the mirror is down: $(grep -m 3 "mirror $label" "$ZLOG")"
	# The next client, 3 MB: the mirror is down, the primary serves it.
	head -c "$n" "$T/data" >"$T/v_data"
	peer v_cli1 connect 127.0.0.1 "$ZPORT" -s "$T/v_data" -t 30 ||
		fail "a client with a bad mirror: $(cat "$T/v_cli1.err")"
	peer_wait "$upid" v_up 30 || fail "the upstream: $(cat "$T/v_up.err")"
	cat "$T/v_small" "$T/v_data" >"$T/v_both"
	cat "$T"/v_up.[0-9] >"$T/v_up.got"
	same_file "$T/v_both" "$T/v_up.got" "the primary, its mirror refused"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="name-mismatch"}' == 1 \
	    "the name mismatch counted"
	expect 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' == 0 \
	    "no handshake ok"
	expect "$(mseries dropped_total "$label")" == 2 \
	    "the stream dropped, the next one not begun (down)"
	expect "$(mseries streams_total "$label")" == 1 "one stream begun"
	expect "$(mseries up "$label")" == 0 "the mirror down"
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	# A mirror that takes the connect and never answers the ClientHello.
	peer_listen v_mute --hold -n 0 -t 60
	label=tls@127.0.0.1:$PEER_PORT
	peer_listen v_up2 -o "$T/v_up2.got" -n 1 -t 60
	upid=$PEER_PID
	zproxy_up --threads 1 --connect-timeout 1 -u "127.0.0.1:$PEER_PORT" \
	    --mirror "$label"
	head -c 16384 "$T/data" >"$T/v_small"
	peer v_cli2 connect 127.0.0.1 "$ZPORT" -s "$T/v_small" -t 30 ||
		fail "a client with a mute mirror: $(cat "$T/v_cli2.err")"
	peer_wait "$upid" v_up2 30 || fail "the upstream: $(cat "$T/v_up2.err")"
	same_file "$T/v_small" "$T/v_up2.got" "the primary, its mirror mute"
	wait_line "$ZLOG" "mirror $label conn=[0-9]+ dropped: TLS handshake failed: timeout: no handshake within --connect-timeout" 10 >/dev/null ||
		fail "no line says the mute mirror's handshake timed out: $(grep -m 3 "mirror $label" "$ZLOG")"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="timeout"}' == 1 \
	    "the timeout counted"
	expect "$(mseries dropped_total "$label")" == 1 "the mute one's stream dropped"
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "verification: a mirror certified for another name refused (name-mismatch: dropped, down, counted), a mute one dropped at --connect-timeout (timeout, counted); the primary got every byte both times (SHA-256)"
}

# ---- d. PROXY header before the ClientHello ----------------------------------------

NGINX=${NGINX:-$(command -v nginx 2>/dev/null || true)}
NGX_STREAM_MOD=${NGX_STREAM_MOD:-/usr/lib/nginx/modules/ngx_stream_module.so}

case_proxy() {
	local d=$T/ngx port spid upid hdr hlen cport got n=2000000

	[ -n "$NGINX" ] || fail "nginx not found: install nginx"
	[ -f "$NGX_STREAM_MOD" ] || fail "$NGX_STREAM_MOD missing: install libnginx-mod-stream"
	mkdir -p "$d"
	peer_listen p_sink -o "$T/p_sink.got" -n 1 -t 60
	spid=$PEER_PID
	port=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	cat >"$d/nginx.conf" <<-EOF
	load_module $NGX_STREAM_MOD;
	error_log $d/error.log info;
	pid $d/nginx.pid;
	events { worker_connections 64; }
	stream {
	    log_format pp '\$proxy_protocol_addr:\$proxy_protocol_port \$bytes_received';
	    server {
	        listen 127.0.0.1:$port ssl proxy_protocol;
	        ssl_certificate $C/srv.pem;
	        ssl_certificate_key $C/srv.key;
	        access_log $d/access.log pp;
	        proxy_pass 127.0.0.1:$PEER_PORT;
	        proxy_half_close on;
	    }
	}
	EOF
	zp_bg ngx "$NGINX" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" \
	    -g 'daemon off; master_process off;'
	wait_port "$port" 10 || fail "nginx does not listen on $port: $(head -c 300 "$d/error.log")"
	local npid=$BG_PID
	peer_listen p_up -o "$T/p_up.got" -n 1 -t 60
	upid=$PEER_PID
	zproxy_up --send-proxy v1 -u "127.0.0.1:$PEER_PORT" \
	    --mirror "tls@127.0.0.1:$port"
	head -c "$n" "$T/data" >"$T/p_data"
	send_synced "--send-proxy v1" "$T/p_data"
	peer_wait "$upid" p_up 30 || fail "the upstream: $(cat "$T/p_up.err")"
	peer_wait "$spid" p_sink 30 ||
		fail "nginx's backend: $(cat "$T/p_sink.err") ($(tail -n 2 "$d/error.log"))"
	same_file "$T/p_data" "$T/p_sink.got" "the TLS mirror behind nginx"
	# The primary: the header, then the same bytes.
	hdr=$(head -n 1 "$T/p_up.got")
	[[ $hdr =~ ^PROXY\ TCP4\ 127\.0\.0\.1\ 127\.0\.0\.1\ ([0-9]+)\ $ZPORT$'\r'$ ]] ||
		fail "the primary's header: '$hdr'"
	cport=${BASH_REMATCH[1]}
	hlen=$(( ${#hdr} + 1 ))
	tail -c +$((hlen + 1)) "$T/p_up.got" >"$T/p_up.data"
	same_file "$T/p_data" "$T/p_up.data" "the primary after its header"
	got=$(wait_line "$d/access.log" "^127\.0\.0\.1:$cport $n$" 10) ||
		fail "nginx did not log the client's address from the header: $(cat "$d/access.log" 2>&1)"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' == 1 \
	    "the handshake with nginx"
	stop_zproxy
	kill "$npid" 2>/dev/null
	ok "--send-proxy v1: the header in the clear before the ClientHello, as nginx's listen ssl proxy_protocol takes it ($got), the 2 MB behind it whole (SHA-256), the primary's too"
}

# ---- e. two threads -------------------------------------------------------------------

case_threads() {
	local n=$((1024 * 1024)) k=8 upid mpid up mp

	peer_listen t_up -o "$T/t_up.%d" -n "$k" -t 120
	upid=$PEER_PID up=$PEER_PORT
	# shellcheck disable=SC2046
	peer_listen t_mir -o "$T/t_mir.%d" -n "$k" -t 120 $(tls_srv srv)
	mpid=$PEER_PID mp=$PEER_PORT
	zproxy_up --threads 2 -u "127.0.0.1:$up" --mirror "tls@localhost:$mp"
	"$ZP_PEER" gen -g "$n" --seed 41 -n "$k" -o "$T/t_exp.%d" ||
		fail "zp-peer gen failed"
	send_synced "--threads 2" "$T"/t_exp.[0-9]*
	peer_wait "$upid" t_up 30 || fail "the upstream: $(cat "$T/t_up.err")"
	peer_wait "$mpid" t_mir 30 || fail "the TLS mirror: $(cat "$T/t_mir.err")"
	same_set "--threads 2: the upstream" "$T/t_exp" "$T/t_up"
	same_set "--threads 2: the TLS mirror" "$T/t_exp" "$T/t_mir"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="mirror",result="ok"}' == "$k" \
	    "--threads 2: the mirror's handshakes"
	expect "$(mseries bytes_total "tls@localhost:$mp")" == $((k * n)) \
	    "--threads 2: the mirror's bytes"
	stop_zproxy
	ok "--threads 2: 8 clients x 1 MiB, each stream whole on the upstream and on a TLS mirror named localhost (SNI, DNS name checked)"
}

# ---- f. the command line ----------------------------------------------------------------

case_cli() {
	local rc f=$T/m.conf ctl=$T/m.ctl mp

	"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:2 --mirror 127.0.0.1:3 \
	    --upstream-ca "$C/ca.pem" >"$T/cli.out" 2>&1
	rc=$?
	[ "$rc" = 64 ] || fail "--upstream-ca with a plain mirror only: status $rc: $(cat "$T/cli.out")"
	grep -qF -- "--upstream-ca applies to -u tls@HOST:PORT or --mirror tls@HOST:PORT, and none is one" "$T/cli.out" ||
		fail "--upstream-ca with a plain mirror only: $(cat "$T/cli.out")"
	"$ZPROXY" -l 127.0.0.1:1 -u 127.0.0.1:2 --mirror tls@127.0.0.1:0 \
	    >"$T/cli.out" 2>&1
	rc=$?
	[ "$rc" = 64 ] && grep -q -- '--mirror' "$T/cli.out" ||
		fail "--mirror tls@ with port 0: status $rc: $(cat "$T/cli.out")"
	# shellcheck disable=SC2046
	peer_listen c_mir -n 0 -t 60 $(tls_srv srv)
	mp=$PEER_PORT
	peer_listen c_up -n 0 -t 60
	cat >"$f" <<-EOF
	upstream 127.0.0.1:$PEER_PORT
	mirror tls@127.0.0.1:$mp
	upstream-ca $C/ca.pem
	upstream-sni localhost
	EOF
	zp_user_dir "$f"
	start_zproxy -v -f "$f" --control "$ctl"
	grep -q "mirror tls@127.0.0.1:$mp (1 address)" "$ZLOG" ||
		fail "-f: the mirror is not tls@127.0.0.1:$mp: $(grep -m 1 'listening on' "$ZLOG")"
	grep -q -- "--mirror tls@: upstream certificates verified against $C/ca.pem" "$ZLOG" ||
		fail "-f: no line says what the mirror's certificate is checked against"
	"$ZPROXY" ctl --control "$ctl" reload >"$T/reload.out" 2>&1 &&
		grep -q "nothing changed" "$T/reload.out" ||
		fail "reload of an unchanged tls@ mirror: $(cat "$T/reload.out")"
	stop_zproxy
	ok "the --upstream-* options taken with a tls@ mirror alone; refused with a plain one (one line); tls@ port 0 refused; -f's 'mirror tls@' started, reloaded unchanged"
}

head -c 3000000 /dev/urandom >"$T/data"
for m in $MODES; do
	subcase case_bytes "$m"
	subcase case_framed "$m"
done
subcase case_verify
subcase case_proxy
subcase case_threads
subcase case_cli
zp_done
