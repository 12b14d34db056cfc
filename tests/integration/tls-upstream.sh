#!/bin/bash
# tls-upstream.sh - -u tls@HOST:PORT: zproxy is its collectors' TLS
# client. Certificates are made here (tlslib.sh): a CA, a server
# certificate for localhost and 127.0.0.1, certificates of another CA and
# of no such name.
#   a. byte-exact both ways, plain client -> zproxy -> TLS echo upstream
#      (tests/tools/zp-peer --tls): 4 MiB of the --send-gen stream each
#      way verified byte by byte and a file by SHA-256, in splice and copy
#      modes (a TLS upstream makes the pair copy); the log says
#      mode=tls tls_upstream=TLSv1.3, and the next connection resumes its
#      session (tls_upstream=TLSv1.3+resumed); TLS to TLS (a tls@ listener
#      too) with --threads 2;
#   b. half-close: the client's FIN reaches the TLS upstream after every
#      byte (close_notify, FIN), whose answer still reaches the client;
#   c. the upstream's certificate is verified: upstreams of another CA
#      (unknown-ca), of another name (name-mismatch), one that speaks no
#      TLS (not-tls), then a good one (--balance first): each bad one is
#      refused and counted as a failed connect of its own, the client's
#      bytes reach the good one only (verified), zproxy_tls_handshakes_total
#      {side="upstream",result} counts each; with the bad ones only, the
#      client's line says end=upstream-tls-failed and why;
#   c2. zproxy ctl add upstream tls@ with --threads 2: both threads speak
#      TLS to it (their copies of the options predate it); refused by a
#      zproxy that started without a tls@ upstream;
#   d. mutual TLS to the upstream: a collector that requires a client
#      certificate refuses zproxy without --upstream-cert (TLS 1.3: after
#      the handshake, an upstream error for the connection) and takes it
#      with one (the collector sees its serial);
#   e. --send-proxy v1 and v2 before the ClientHello, to nginx's stream
#      module (`listen ... ssl proxy_protocol`), which answers with the
#      address the header named;
#   f. syslog-ng as two TLS collectors (RFC 5425, octet counting): 10
#      framed streams (zp-logsend, numbered messages with CRCs) through
#      --replay-window 1M; one collector is killed (SIGKILL) mid-run: the
#      streams on it move to the other, and every message is in one file
#      or both, each whole;
#   f2. syslog over UDP in, TLS out: 5 devices' datagrams (zp-logsend
#      dgram) through -l udp@ to a syslog-ng TLS collector, one TLS
#      stream per device, every message exactly once;
#   g. planned moves between two syslog-ng TLS collectors (zproxy ctl
#      drains one mid-stream): the next one's handshake before the
#      switch, the old one's close_notify and FIN at a message boundary:
#      4 x 300 messages, every one exactly once.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1
. "${ZP_TESTLIB%/*}/tlslib.sh" || exit 1

cert nobody ca /CN=nobody 30 "subjectAltName=DNS:nobody.example"
# zp-peer as a TLS server with certificate NAME (in $C).
tls_srv() { echo --tls --tls-cert "$C/$1.pem" --tls-key "$C/$1.key"; }
UP_CA=(--upstream-ca "$C/ca.pem")

# zproxy_up ARGS...: zproxy -v with --stats and the test CA.
zproxy_up() {
	SPORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	start_zproxy -v --stats "127.0.0.1:$SPORT" "${UP_CA[@]}" "$@"
}

# ---- a. bytes, both ways ------------------------------------------------------

case_bytes() {
	local mode=$1 n=$((4 * 1024 * 1024)) epid

	# shellcheck disable=SC2046 # the options are words
	peer_listen echo_$mode --echo -n 0 -t 120 $(tls_srv srv)
	epid=$PEER_PID
	zproxy_up -m "$mode" --threads 1 -u "tls@127.0.0.1:$PEER_PORT"
	peer gen connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" --seed 7 -t 60 ||
		fail "$mode: --send-gen to a TLS upstream: $(cat "$T/gen.err")"
	expect_conn_log "upstream=127.0.0.1:$PEER_PORT mode=tls tls_upstream=TLSv1.3 up=$n down=$n .*end=closed" \
	    "$mode: the generated stream"
	peer file connect 127.0.0.1 "$ZPORT" -s "$T/data" -o "$T/back" -t 60 ||
		fail "$mode: a file to a TLS upstream: $(cat "$T/file.err")"
	same_file "$T/data" "$T/back" "$mode: the file's echo"
	expect_conn_log "mode=tls tls_upstream=TLSv1.3[+]resumed .*end=closed" \
	    "$mode: the second connection resumes its session"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="upstream",result="ok"}' == 2 \
	    "$mode: handshakes"
	stop_zproxy
	# TLS on both sides, two threads.
	zproxy_up -m "$mode" --threads 2 -l "tls@127.0.0.1:@PORT@" \
	    --tls-cert "$C/srv.pem" --tls-key "$C/srv.key" \
	    -u "tls@localhost:$PEER_PORT"
	peer tt connect 127.0.0.1 "$ZPORT" --tls --tls-ca "$C/ca.pem" \
	    --tls-name localhost -g "$n" -x "$n" --seed 8 -t 60 ||
		fail "$mode: TLS to TLS: $(cat "$T/tt.err")"
	expect_conn_log "mode=tls tls=TLSv1.3 tls_upstream=TLSv1.3 up=$n down=$n .*end=closed" \
	    "$mode: TLS to TLS"
	stop_zproxy
	kill "$epid" 2>/dev/null
	ok "$mode: 4 MiB each way to a TLS upstream verified byte by byte, a file by SHA-256, the next connection resumed (TLSv1.3+resumed); TLS to TLS with --threads 2, 4 MiB each way verified"
}

# ---- b. half-close -----------------------------------------------------------

case_halfclose() {
	local n=$((1024 * 1024))

	# shellcheck disable=SC2046
	peer_listen hc_up --after-eof -g "$n" --seed 3 -x "$n" -n 1 -t 60 \
	    $(tls_srv srv)
	zproxy_up -u "tls@127.0.0.1:$PEER_PORT"
	peer hc1 connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" --seed 3 -t 30 ||
		fail "client first: $(cat "$T/hc1.err")"
	peer_wait "$PEER_PID" hc_up 10 ||
		fail "client first: the TLS upstream: $(cat "$T/hc_up.err")"
	expect_conn_log "tls_upstream=TLSv1.3 up=$n down=$n .*end=closed" \
	    "client first"
	stop_zproxy
	# shellcheck disable=SC2046
	peer_listen hc_up2 -g "$n" --seed 4 -x "$n" -n 1 -t 60 $(tls_srv srv)
	zproxy_up -u "tls@127.0.0.1:$PEER_PORT"
	peer hc2 connect 127.0.0.1 "$ZPORT" --after-eof -g "$n" --seed 4 \
	    -x "$n" -t 30 || fail "upstream first: $(cat "$T/hc2.err")"
	peer_wait "$PEER_PID" hc_up2 10 ||
		fail "upstream first: the TLS upstream: $(cat "$T/hc_up2.err")"
	expect_conn_log "tls_upstream=TLSv1.3 up=$n down=$n .*end=closed" \
	    "upstream first"
	stop_zproxy
	ok "half-close both ways with a TLS upstream: FIN -> close_notify+FIN after every byte, close_notify+FIN -> FIN, and the other way goes on (1 MiB each, verified)"
}

# ---- c. verification ------------------------------------------------------------

case_verify() {
	local n=$((1024 * 1024)) p1 p2 p3 pg r

	# Each refuses zproxy's handshake or gets garbage: --tls-fail says so.
	# shellcheck disable=SC2046
	peer_listen v_ca --echo -n 0 -t 60 --tls-fail $(tls_srv other)
	p1=$PEER_PORT
	# shellcheck disable=SC2046
	peer_listen v_name --echo -n 0 -t 60 --tls-fail $(tls_srv nobody)
	p2=$PEER_PORT
	# A plain server that answers a ClientHello with an HTTP error.
	printf 'HTTP/1.0 400 Bad Request\r\n\r\n' >"$T/http400"
	peer_listen v_plain -s "$T/http400" -o "$T/plain_got" -n 1 -t 60
	p3=$PEER_PORT
	# shellcheck disable=SC2046
	peer_listen v_good --echo -n 0 -t 60 $(tls_srv srv)
	pg=$PEER_PORT
	zproxy_up --balance first -u "tls@127.0.0.1:$p1" \
	    -u "tls@127.0.0.1:$p2" -u "tls@127.0.0.1:$p3" -u "tls@127.0.0.1:$pg"
	peer vg connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" --seed 5 -t 30 ||
		fail "past three bad upstreams: $(cat "$T/vg.err")"
	expect_conn_log "upstream=127.0.0.1:$pg mode=tls tls_upstream=TLSv1.3 up=$n down=$n .*end=closed" \
	    "the client, on the good upstream"
	for r in "127.0.0.1:$p1: unknown-ca: " "127.0.0.1:$p2: name-mismatch: " \
	    "127.0.0.1:$p3: not-tls: "; do
		grep -qF "TLS handshake failed (upstream $r" "$ZLOG" ||
			fail "no line says: TLS handshake failed (upstream $r...: $(grep -m 3 'TLS handshake' "$ZLOG")"
	done
	stats_scrape
	for r in unknown-ca name-mismatch not-tls ok; do
		expect "zproxy_tls_handshakes_total{side=\"upstream\",result=\"$r\"}" == 1 "$r"
	done
	# Each bad one failed a connect of its own; the good one none.
	for r in "$p1" "$p2" "$p3"; do
		expect "zproxy_upstream_connections_failed_total{upstream=\"tls@127.0.0.1:$r\"}" == 1 \
		    "tls@127.0.0.1:$r's failed connects"
	done
	expect "zproxy_upstream_connections_failed_total{upstream=\"tls@127.0.0.1:$pg\"}" == 0 \
	    "the good one's failed connects"
	# What the plain one got is a ClientHello, none of the client's bytes.
	[ "$(head -c 1 "$T/plain_got" | od -An -tx1 | tr -d ' ')" = 16 ] ||
		fail "the plain upstream got no TLS record: $(head -c 16 "$T/plain_got" | od -An -tx1)"
	stop_zproxy
	# Bad ones only: the client's line says why.
	zproxy_up -u "tls@127.0.0.1:$p1"
	peer vb connect 127.0.0.1 "$ZPORT" -g 100 -t 10 --allow-reset >/dev/null 2>&1
	expect_conn_log "upstream=tls@127.0.0.1:$p1 mode=tls up=0 down=0 .*end=upstream-tls-failed error=\"upstream 127.0.0.1:$p1: unknown-ca: " \
	    "a client with no upstream that verifies"
	stop_zproxy
	# --upstream-verify none takes any certificate, and says so once.
	zproxy_up --upstream-verify none -u "tls@127.0.0.1:$p1"
	grep -q 'upstream-verify none: the upstreams.* certificates are not checked' "$ZLOG" ||
		fail "--upstream-verify none: no warning at start-up"
	peer vn connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" --seed 6 -t 30 ||
		fail "--upstream-verify none: $(cat "$T/vn.err")"
	stop_zproxy
	ok "verification: another CA, another name, no TLS: each refused, counted (unknown-ca, name-mismatch, not-tls) as one failed connect of its own; the client (1 MiB each way, verified) served by the good one; alone, end=upstream-tls-failed with the reason; --upstream-verify none warned and took the other CA"
}

# case_ctl: zproxy ctl add upstream tls@ on a zproxy with --threads 2
# (every thread must speak TLS to it, though its copy of the options
# predates it), and refused on one that started with no tls@ upstream.
case_ctl() {
	local n=$((256 * 1024)) ctl=$T/ctl.sock pa pb i

	# shellcheck disable=SC2046
	peer_listen c_a --echo -n 0 -t 60 $(tls_srv srv)
	pa=$PEER_PORT
	# shellcheck disable=SC2046
	peer_listen c_b --echo -n 0 -t 60 $(tls_srv srv)
	pb=$PEER_PORT
	zproxy_up --threads 2 --control "$ctl" -u "tls@127.0.0.1:$pa"
	"$ZPROXY" ctl --control "$ctl" add upstream "tls@127.0.0.1:$pb" \
	    >"$T/ctl.out" 2>&1 || fail "ctl add tls@: $(cat "$T/ctl.out")"
	"$ZPROXY" ctl --control "$ctl" set upstream "tls@127.0.0.1:$pa" \
	    state maint >"$T/ctl.out" 2>&1 || fail "ctl set maint: $(cat "$T/ctl.out")"
	for i in 1 2 3 4; do
		peer "cb$i" connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" \
		    --seed "$i" -t 30 || fail "client $i to the added upstream: $(cat "$T/cb$i.err")"
	done
	[ "$(grep -c "upstream=127.0.0.1:$pb mode=tls tls_upstream=TLSv1.3.* up=$n down=$n .*end=closed" "$ZLOG")" = 4 ] ||
		fail "the 4 clients did not all go over TLS to the added upstream: $(grep ' conn=' "$ZLOG" | tail -n 4)"
	stop_zproxy
	# Started without a tls@ upstream: its pairs may splice.
	start_zproxy -v --control "$ctl" -u "127.0.0.1:$pa"
	! "$ZPROXY" ctl --control "$ctl" add upstream "tls@127.0.0.1:$pb" \
	    >"$T/ctl.out" 2>&1 || fail "ctl add tls@ was taken by a zproxy without one"
	grep -q 'cannot be added to a zproxy that started without one' "$T/ctl.out" ||
		fail "ctl add tls@ refused, but said: $(cat "$T/ctl.out")"
	stop_zproxy
	ok "zproxy ctl add upstream tls@ with --threads 2: 4 clients (256 KiB each way, verified) over TLS to it from both threads; refused by a zproxy started without a tls@ upstream"
}

# ---- d. mutual TLS to the upstream ---------------------------------------------

case_mutual() {
	local n=$((256 * 1024)) serial

	# The collector requires a certificate of the CA.
	# shellcheck disable=SC2046
	peer_listen m_up --echo -n 0 -t 60 --tls-fail --tls-print \
	    --tls-ca "$C/ca.pem" $(tls_srv srv)
	zproxy_up -u "tls@127.0.0.1:$PEER_PORT"
	# TLS 1.3: the client's handshake is done before the server reads
	# its (missing) certificate; the refusal comes as an alert after it,
	# an upstream error for the connection (nothing of it was taken).
	peer m0 connect 127.0.0.1 "$ZPORT" -g 100 -t 10 --allow-reset >/dev/null 2>&1
	wait_line "$T/m_up.out" '^tls-failed: .*certificate' 10 \
	    "$PEER_PID" >/dev/null ||
		fail "no client certificate: the collector said $(cat "$T/m_up.out")"
	expect_conn_log "upstream=127.0.0.1:$PEER_PORT mode=tls tls_upstream=TLSv1.3 up=[0-9]* down=0 .*end=upstream-" \
	    "no client certificate"
	stop_zproxy
	zproxy_up -u "tls@127.0.0.1:$PEER_PORT" --upstream-cert "$C/cli.pem" \
	    --upstream-key "$C/cli.key"
	peer m1 connect 127.0.0.1 "$ZPORT" -g "$n" -x "$n" --seed 9 -t 30 ||
		fail "with --upstream-cert: $(cat "$T/m1.err")"
	serial=$(openssl x509 -in "$C/cli.pem" -noout -serial | sed 's/^serial=//')
	wait_line "$T/m_up.out" "^tls: TLSv1.3 serial=$serial" 10 "$PEER_PID" >/dev/null ||
		fail "the collector did not see zproxy's certificate $serial: $(cat "$T/m_up.out")"
	stats_scrape
	expect 'zproxy_tls_cert_expiry_seconds{file="'"$C/cli.pem"'"}' -gt $((29 * 86400)) \
	    "--upstream-cert's expiry"
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "mutual TLS: without --upstream-cert the collector refuses (certificate required; an upstream error for the connection); with it, the collector sees its serial and 256 KiB each way pass, verified"
}

# ---- e. PROXY header before the ClientHello -----------------------------------

NGINX=${NGINX:-$(command -v nginx 2>/dev/null || true)}
NGX_STREAM_MOD=${NGX_STREAM_MOD:-/usr/lib/nginx/modules/ngx_stream_module.so}

case_proxy() {
	local v=$1 d=$T/ngx$1 port got

	[ -n "$NGINX" ] || fail "nginx not found: install nginx"
	[ -f "$NGX_STREAM_MOD" ] || fail "$NGX_STREAM_MOD missing: install libnginx-mod-stream"
	mkdir -p "$d"
	port=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	cat >"$d/nginx.conf" <<-EOF
	load_module $NGX_STREAM_MOD;
	error_log $d/error.log info;
	pid $d/nginx.pid;
	events { worker_connections 64; }
	stream {
	    server {
	        listen 127.0.0.1:$port ssl proxy_protocol;
	        ssl_certificate $C/srv.pem;
	        ssl_certificate_key $C/srv.key;
	        return "from \$proxy_protocol_addr:\$proxy_protocol_port\n";
	    }
	}
	EOF
	zp_bg "ngx$v" "$NGINX" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" \
	    -g 'daemon off; master_process off;'
	wait_port "$port" 10 || fail "nginx does not listen on $port: $(head -c 300 "$d/error.log")"
	zproxy_up --send-proxy "$v" -u "tls@127.0.0.1:$port"
	peer "px$v" connect 127.0.0.1 "$ZPORT" -o "$T/px$v.got" -t 10 ||
		fail "--send-proxy $v: $(cat "$T/px$v.err")"
	got=$(cat "$T/px$v.got")
	[[ $got =~ ^from\ 127\.0\.0\.1:[0-9]+$ ]] ||
		fail "--send-proxy $v: nginx answered '$got' ($(tail -n 2 "$d/error.log"))"
	stop_zproxy
	kill "$BG_PID" 2>/dev/null
	ok "--send-proxy $v: the header before the ClientHello, as nginx's listen ssl proxy_protocol takes it ($got)"
}

# ---- f. TLS collectors, one killed ----------------------------------------------

CONNS=10
MSGS=${ZP_TLSUP_MSGS:-600}

case_collectors() {
	local mode=$1 name=col-$1 seed=$RANDOM go kpid kport klog sport slog spid
	local out

	go=$T/$name.go
	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name-a" "" octet
	kpid=$C_PID kport=$C_PORT klog=$C_LOG
	start_collector syslog-ng "$name-b" "" octet
	sport=$C_PORT slog=$C_LOG
	local spid_c=$C_PID
	unset C_TLS_CERT C_TLS_KEY
	zproxy_up -m "$mode" --framing octet --replay-window 1M \
	    --balance roundrobin -u "tls@127.0.0.1:$kport" \
	    -u "tls@127.0.0.1:$sport"
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns "$CONNS" --msgs "$MSGS" --framing octet --seed "$seed" \
	    --pause-at $((MSGS / 2)) --go "$go" --timeout 80
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 60 "$spid" >/dev/null ||
		fail "$mode: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	kill9_collector "$kpid" "$kport" "$mode: the killed collector"
	: >"$go"
	peer_wait "$spid" "$name.send" 90 ||
		fail "$mode: the sender failed: $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$mode" "$name" "$CONNS" "$MSGS"
	settle "$slog" 30 || note "$mode: the survivor's file still grows after 30s"
	logsend_verify "$mode: both files" "$name" "$CONNS" "$MSGS" --tail-ok \
	    "$slog" "$klog"
	out=$VERIFIED
	grep -q 'connection [0-9]* moved: .* reason=upstream-failed' "$ZLOG" ||
		fail "$mode: no stream moved off the killed collector"
	stop_zproxy
	kill "$spid_c" 2>/dev/null
	ok "$mode: two syslog-ng TLS collectors, one killed with $((CONNS * MSGS / 2)) messages sent: every message in one file or both, each whole ($out)"
}

# case_drain MODE: planned moves between two TLS collectors (zproxy
# ctl drains A: its streams move to B at a message boundary, the next
# one's handshake done before the switch, A's close_notify and FIN
# after its last whole message): nothing lost, nothing twice.
case_drain() {
	local mode=$1 name=dr-$1 apid aport alog bpid bport blog spid moves
	local ctl=$T/$name.sock deadline go=$T/$1.drgo

	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name-a" "" octet
	apid=$C_PID aport=$C_PORT alog=$C_LOG
	start_collector syslog-ng "$name-b" "" octet
	bpid=$C_PID bport=$C_PORT blog=$C_LOG
	unset C_TLS_CERT C_TLS_KEY
	zproxy_up -m "$mode" --framing octet --balance roundrobin \
	    --control "$ctl" -u "tls@127.0.0.1:$aport" -u "tls@127.0.0.1:$bport"
	zp_bg "$name.send" "$ZP_LOGSEND" send 127.0.0.1 "$ZPORT" \
	    --conns 4 --msgs 300 --framing octet --pause-at 150 --go "$go" \
	    --timeout 60
	spid=$BG_PID
	wait_line "$T/$name.send.out" '^paused$' 30 "$spid" >/dev/null ||
		fail "$mode: the sender did not pause: $(tail -n 1 "$T/$name.send.err")"
	"$ZPROXY" ctl --control "$ctl" set upstream "tls@127.0.0.1:$aport" \
	    state drain >"$T/$name.ctl" 2>&1 ||
		fail "$mode: zproxy ctl set ... drain: $(cat "$T/$name.ctl")"
	deadline=$(( $(now_ms) + 15000 ))
	until [ "$(grep -c 'moved: .* reason=drain' "$ZLOG")" -ge 2 ]; do
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$mode: $(grep -c 'moved: .* reason=drain' "$ZLOG") streams moved off the drained collector in 15 s, want 2"
		sleep 0.05
	done
	: >"$go"
	peer_wait "$spid" "$name.send" 60 ||
		fail "$mode: the sender failed: $(tail -n 1 "$T/$name.send.err")"
	logsend_sent "$mode" "$name" 4 300
	settle "$blog" 20 || note "$mode: b's file still grows"
	logsend_verify "$mode: both files" "$name" 4 300 "$alog" "$blog"
	case $VERIFIED in
	*" duplicates=0 missing=0 bad=0"*) ;;
	*) fail "$mode: planned moves lost or doubled messages: $VERIFIED" ;;
	esac
	moves=$(grep -c "moved: .* from=127.0.0.1:$aport to=127.0.0.1:$bport reason=drain" "$ZLOG")
	[ "$moves" = 2 ] || fail "$mode: $moves moves from A to B, want 2"
	stop_zproxy
	kill "$apid" "$bpid" 2>/dev/null
	ok "$mode: zproxy ctl drained a TLS collector mid-stream: its 2 streams moved to the other (a new handshake each, close_notify to the old one), every message exactly once ($VERIFIED)"
}

# case_udp: syslog over UDP in, TLS out: 5 devices (127.0.0.2-6, zp-logsend
# dgram) -> zproxy -l udp@ -> a syslog-ng TLS collector; each device's
# stream its own TLS connection, every message exactly once.
case_udp() {
	local name=udp-tls cpid clog n

	C_TLS_CERT=$C/srv.pem C_TLS_KEY=$C/srv.key
	start_collector syslog-ng "$name-c" "" octet
	cpid=$C_PID clog=$C_LOG
	unset C_TLS_CERT C_TLS_KEY
	zproxy_up -l "udp@127.0.0.1:@PORT@" -u "tls@127.0.0.1:$C_PORT"
	timeout -k 5 120 "$ZP_LOGSEND" dgram 127.0.0.1 "$ZPORT" --conns 5 \
	    --msgs 200 --rate 1000 --max 1000 --from 127.0.0.2 \
	    >"$T/$name.out" 2>"$T/$name.err" ||
		fail "the sender failed: $(tail -n 2 "$T/$name.err")"
	wait_lines "$clog" 1000 30 ||
		fail "the collector wrote $(lines "$clog") of 1000 messages"
	logsend_verify "UDP to TLS" "$name" 5 200 --exactly-once "$clog"
	stop_zproxy
	n=$(grep -c ' conn=.* mode=tls tls_upstream=TLSv1.3.* end=' "$ZLOG")
	[ "$n" = 5 ] || fail "$n TLS streams logged, want one per device (5)"
	kill "$cpid" 2>/dev/null
	ok "UDP in, TLS out: 5 devices x 200 datagrams -> a syslog-ng TLS collector, one TLS stream per device, every message exactly once ($VERIFIED)"
}

head -c 3000000 /dev/urandom >"$T/data"
for m in $MODES; do
	subcase case_bytes "$m"
done
subcase case_halfclose
subcase case_verify
subcase case_ctl
subcase case_mutual
subcase case_proxy v1
subcase case_proxy v2
subcase case_udp
for m in $MODES; do
	subcase case_collectors "$m"
	subcase case_drain "$m"
done
zp_done
