#!/bin/bash
# tls.sh - -l tls@: zproxy ends its clients' TLS and relays the plain
# bytes. Certificates are made here with openssl req/x509: a CA, a server
# certificate for 127.0.0.1, a client one, one from another CA, an
# expired one.
#   a. byte-exact both ways: 4 MiB of the --send-gen stream up and its
#      echo down, verified byte by byte, and a file by SHA-256, through
#      the TLS client (tests/tools/zp-peer --tls, verifying the server's
#      certificate and name) -> zproxy tls@ -> a plain echo upstream; in
#      splice and copy modes, with --threads 1 and 2; the log line says
#      mode=tls tls=TLSv1.3; a client that only writes and closes (as
#      shippers do) loses nothing (no TLS 1.3 ticket is left unread in
#      its socket to make its close a reset);
#   b. half-close both ways: the client's close_notify and FIN reach the
#      upstream as a FIN after every byte, and the upstream's answer still
#      reaches the client; the upstream's FIN reaches the client as
#      close_notify and FIN, and the client's late bytes still go up;
#   c. mutual TLS (--tls-client-ca): a client without a certificate, with
#      one of another CA, with an expired one: each refused before any
#      upstream is contacted, its reason in the log (end=tls-handshake-
#      failed error="no-certificate: ...", "unknown-ca: ...", "expired:
#      ...") and in zproxy_tls_handshakes_total{side="client",result};
#      a good client meanwhile streams 4 MiB through, and its line names
#      its certificate's subject (tls_client="O=Test Org,CN=shipper 1");
#   d. hostile clients: an HTTP request (not-tls), a TLS 1.1 hello
#      (protocol-version), 100 connections that send nothing and a
#      ClientHello trickled a byte at a time (--tls-handshake-timeout 1:
#      each closed at the deadline, counted as timeout), while a real
#      client is served; the upstream never saw one of them;
#   e. openssl s_client (a real TLS client) through zproxy: its bytes
#      arrive whole, verified byte by byte;
#   g. rsyslog as a TLS shipper (its gtls driver, RFC 5425: octet-counted
#      over TLS, verifying zproxy's certificate and name) -> zproxy tls@
#      --framing octet -> rsyslog imtcp as the collector: 4 x 500
#      numbered messages with CRCs fed to the shipper arrive exactly once,
#      each whole;
#   h. certificates rotated without a restart: 50 clients stream (512
#      KiB each way, read at 50 KB/s) while the certificate and key files are
#      replaced and zproxy gets SIGHUP; a new client then sees the new
#      certificate (its serial), every one of the 50 ends whole, and
#      zproxy_tls_cert_expiry_seconds follows (30 days, then 90); a file
#      that does not load (a key of another certificate) keeps the old
#      one in use, said in one line, and SIGHUP serves the next good one;
#      zproxy ctl reload (no -f) reads them again too;
#   i. --tls-max-pending: 200 connections that send nothing against
#      --tls-max-pending 40 and --max-conns 20 (a handshake counts
#      against the first only), the handshake timeout 30 s: the oldest
#      are closed to make room (result="evicted", at least 160), never
#      more than 40 pending, and a real client gets through at once,
#      though more silent ones are open than --max-conns allows; then
#      under ulimit -n 1024, 1000 of them against the default: each
#      bounded (no descriptor shortage, no crash), and a real client
#      served; 6 clients against --max-conns 2 wait for room once their
#      handshake is done (2 upstream connections at most), all served;
#   f. start-up errors: -l tls@ without --tls-cert, a missing certificate
#      file, a key of another certificate, --tls-cert without a tls@
#      listener: each one line naming the problem and exit 64 or 78.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1
. "${ZP_TESTLIB%/*}/tlslib.sh" || exit 1

TLS_SRV=(--tls-cert "$C/srv.pem" --tls-key "$C/srv.key")
# The client side of zp-peer: verify zproxy's certificate and name.
TLS_CLI=(--tls --tls-ca "$C/ca.pem" --tls-name 127.0.0.1)

# zproxy_tls ARGS...: zproxy -v with a tls@ listener and --stats.
zproxy_tls() {
	SPORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	start_zproxy -v -l "tls@127.0.0.1:@PORT@" "${TLS_SRV[@]}" \
	    --stats "127.0.0.1:$SPORT" "$@"
}

# ---- a. bytes, both ways ------------------------------------------------------

case_bytes() {
	local mode=$1 threads=$2 n=$((4 * 1024 * 1024)) epid

	peer_listen echo_$mode$threads --echo -n 0 -t 120
	epid=$PEER_PID
	zproxy_tls -m "$mode" --threads "$threads" -u "127.0.0.1:$PEER_PORT"
	peer gen connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -g "$n" -x "$n" \
	    --seed 7 -t 60 || fail "$mode x$threads: --send-gen through TLS: $(cat "$T/gen.err")"
	expect_conn_log "mode=tls tls=TLSv1.3 up=$n down=$n .*end=closed" \
	    "$mode x$threads: the generated stream"
	peer file connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -s "$T/data" \
	    -o "$T/back" -t 60 || fail "$mode x$threads: a file through TLS: $(cat "$T/file.err")"
	same_file "$T/data" "$T/back" "$mode x$threads: the file's echo"
	expect_conn_log "mode=tls tls=TLSv1.3 .*end=closed" \
	    "$mode x$threads: the file"
	# A shipper that only writes, and closes at once: nothing zproxy
	# sent it may be left unread (a TLS 1.3 ticket would be), or its
	# kernel resets the connection and drops its unsent tail.
	peer_listen wo_$mode$threads --no-shut -o "$T/wo_got" -n 1 -t 60
	stop_zproxy
	zproxy_tls -m "$mode" --threads "$threads" -u "127.0.0.1:$PEER_PORT"
	peer wo connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -s "$T/data" \
	    --no-read -t 60 || fail "$mode x$threads: a write-only client: $(cat "$T/wo.err")"
	peer_wait "$PEER_PID" "wo_$mode$threads" 20 ||
		fail "$mode x$threads: the write-only client's upstream: $(cat "$T/wo_$mode$threads.err")"
	same_file "$T/data" "$T/wo_got" "$mode x$threads: a write-only client's file"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="client",result="ok"}' == 1 \
	    "$mode x$threads: handshakes"
	stop_zproxy
	kill "$epid" 2>/dev/null
	ok "$mode, --threads $threads: 4 MiB each way through TLS verified byte by byte, a file by SHA-256, a write-only client's file whole; mode=tls tls=TLSv1.3"
}

# ---- b. half-close ------------------------------------------------------------

case_halfclose() {
	local n=$((1024 * 1024))

	# The client finishes first; the upstream answers after its EOF.
	peer_listen hc_up --after-eof -g "$n" --seed 3 -x "$n" -n 1 -t 60
	zproxy_tls -u "127.0.0.1:$PEER_PORT"
	peer hc1 connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -g "$n" -x "$n" \
	    --seed 3 -t 30 || fail "client first: $(cat "$T/hc1.err")"
	peer_wait "$PEER_PID" hc_up 10 || fail "client first: the upstream: $(cat "$T/hc_up.err")"
	expect_conn_log "up=$n down=$n .*end=closed" "client first"
	stop_zproxy
	# The upstream finishes first; the client sends after its EOF.
	peer_listen hc_up2 -g "$n" --seed 4 -x "$n" -n 1 -t 60
	zproxy_tls -u "127.0.0.1:$PEER_PORT"
	peer hc2 connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" --after-eof \
	    -g "$n" --seed 4 -x "$n" -t 30 || fail "upstream first: $(cat "$T/hc2.err")"
	peer_wait "$PEER_PID" hc_up2 10 || fail "upstream first: the upstream: $(cat "$T/hc_up2.err")"
	expect_conn_log "up=$n down=$n .*end=closed" "upstream first"
	stop_zproxy
	ok "half-close both ways: close_notify+FIN -> FIN after every byte, FIN -> close_notify+FIN, and the other way goes on (1 MiB each, verified)"
}

# ---- c. mutual TLS ---------------------------------------------------------

case_mutual() {
	local n=$((4 * 1024 * 1024)) name pid

	peer_listen mt_up --echo -n 0 -t 120
	zproxy_tls --tls-client-ca "$C/ca.pem" -u "127.0.0.1:$PEER_PORT"
	# A good client stays meanwhile: it reads its echo at 2 MB/s and
	# closes once it is whole (--no-shut: no FIN before), about 2 s.
	zp_bg mt_good "$ZP_PEER" connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" \
	    --tls-cert "$C/cli.pem" --tls-key "$C/cli.key" -g "$n" -x "$n" \
	    --no-shut --read-rate 2M -t 60
	pid=$BG_PID
	peer mt_none connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -g 100 \
	    -t 10 --tls-fail || fail "no certificate: $(cat "$T/mt_none.err")"
	for name in other old; do
		peer "mt_$name" connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" \
		    --tls-cert "$C/$name.pem" --tls-key "$C/$name.key" -g 100 \
		    -t 10 --tls-fail || fail "$name: $(cat "$T/mt_$name.err")"
	done
	grep -q 'certificate required' "$T/mt_none.out" ||
		fail "no certificate: the client heard $(cat "$T/mt_none.out")"
	grep -q 'unknown ca' "$T/mt_other.out" ||
		fail "another CA: the client heard $(cat "$T/mt_other.out")"
	grep -q 'certificate expired' "$T/mt_old.out" ||
		fail "expired: the client heard $(cat "$T/mt_old.out")"
	for name in 'no-certificate' 'unknown-ca' 'expired'; do
		expect_conn_log "upstream=none mode=tls .*end=tls-handshake-failed error=\"$name: " \
		    "refused: $name"
	done
	alive "$pid" || fail "the good client ended while the others were refused"
	peer_wait "$pid" mt_good 60 || fail "the good client: $(cat "$T/mt_good.err")"
	expect_conn_log "tls=TLSv1.3 tls_client=\"O=Test Org,CN=shipper 1\" up=$n down=$n " \
	    "the good client"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="client",result="ok"}' == 1 "good"
	for name in no-certificate unknown-ca expired; do
		expect "zproxy_tls_handshakes_total{side=\"client\",result=\"$name\"}" == 1 "$name"
	done
	# The upstream saw the good client only: one connection, echoed.
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "mutual TLS: no certificate, another CA, expired: each refused with its reason, logged and counted; the good client (4 MiB, verified) streamed meanwhile, its subject logged"
}

# ---- d. hostile clients -------------------------------------------------------

case_hostile() {
	local n=$((1024 * 1024)) t0 t1 hpid tpid

	peer_listen h_up --echo -n 0 -t 120
	zproxy_tls --tls-handshake-timeout 1 -u "127.0.0.1:$PEER_PORT"
	printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' |
		timeout 5 socat - "TCP:127.0.0.1:$ZPORT" >/dev/null 2>&1
	expect_conn_log 'upstream=none .*end=tls-handshake-failed error="not-tls: ' \
	    "an HTTP request"
	peer h_old connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" \
	    --tls-max-version 1.1 -t 10 --tls-fail || fail "TLS 1.1: $(cat "$T/h_old.err")"
	expect_conn_log 'end=tls-handshake-failed error="protocol-version: ' \
	    "a TLS 1.1 hello"
	skip_conn_logs
	# 100 that send nothing, and one that trickles a ClientHello.
	zp_bg h_idle "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n 100 --hold -t 30
	hpid=$BG_PID
	wait_line "$T/h_idle.out" '^connected 100$' 10 "$hpid" >/dev/null ||
		fail "100 idle connections: $(cat "$T/h_idle.err")"
	# A real ClientHello, a byte every 0.25 s: closed at 1 s from
	# accept however the bytes keep coming.
	trickle_hello &
	tpid=$!
	t0=$(now_ms)
	# A real client is served meanwhile.
	peer h_real connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -g "$n" -x "$n" \
	    -t 30 || fail "a real client beside the idle ones: $(cat "$T/h_real.err")"
	wait_metric 'zproxy_tls_handshakes_total{side="client",result="timeout"}' '>=' 101 10 \
	    "100 silent handshakes and a trickle end at --tls-handshake-timeout"
	t1=$(now_ms)
	peer_wait "$hpid" h_idle 10
	[ $((t1 - t0)) -lt 8000 ] || fail "the silent ones took $((t1 - t0)) ms to close (timeout 1 s)"
	wait "$tpid"
	grep ' conn=[0-9]' "$ZLOG" | grep 'error="timeout: ' |
		grep -Ev ' up=0 down=0 duration=(0\.9|[12]\.)' >"$T/late" &&
		fail "a handshake closed late: $(head -n 2 "$T/late")"
	expect 'zproxy_tls_handshakes_total{side="client",result="ok"}' '>=' 1 "the real client"
	zproxy_alive
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "hostile: an HTTP request (not-tls), TLS 1.1 (protocol-version), 100 silent connections and a trickle closed at --tls-handshake-timeout 1, counted; a real client served meanwhile"
}

# The first bytes openssl s_client sends: a real ClientHello, in
# $T/hello.
capture_hello() {
	peer_listen hello_cap -o "$T/hello" -n 1 -t 10 --no-shut
	timeout 2 openssl s_client -connect "127.0.0.1:$PEER_PORT" </dev/null \
	    >/dev/null 2>&1
	peer_wait "$PEER_PID" hello_cap 5
	[ "$(size "$T/hello")" -gt 100 ] || fail "no ClientHello captured"
}

# The ClientHello to zproxy a byte every 0.25 s, for 4 s at most.
trickle_hello() {
	local i n
	n=$(size "$T/hello")
	for ((i = 0; i < n && i < 16; i++)); do
		dd if="$T/hello" bs=1 skip="$i" count=1 2>/dev/null
		sleep 0.25
	done | timeout 6 socat -t 2 - "TCP:127.0.0.1:$ZPORT" >/dev/null 2>&1
}

# ---- e. openssl s_client ------------------------------------------------------

case_s_client() {
	local n=262144

	# The upstream verifies the stream and closes once it is whole:
	# s_client (-quiet: it waits for the server's close) ends then.
	peer_listen sc_up -x "$n" --seed 5 --no-shut -n 1 -t 60
	zproxy_tls -u "127.0.0.1:$PEER_PORT"
	"$ZP_PEER" gen -g "$n" --seed 5 -o "$T/sc_in" ||
		fail "zp-peer gen failed"
	timeout 20 openssl s_client -quiet -connect "127.0.0.1:$ZPORT" \
	    -CAfile "$C/ca.pem" -verify_return_error <"$T/sc_in" \
	    >"$T/sc.out" 2>"$T/sc.err" || fail "openssl s_client: $(tail -n 3 "$T/sc.err")"
	peer_wait "$PEER_PID" sc_up 10 || fail "s_client's upstream: $(cat "$T/sc_up.err")"
	expect_conn_log "mode=tls tls=TLSv1.3 up=$n " "s_client"
	stop_zproxy
	ok "openssl s_client -> zproxy tls@ -> upstream: $n bytes, verified"
}

# ---- g. rsyslog over TLS --------------------------------------------------

case_rsyslog() {
	local d=$T/shipper conns=4 msgs=500 port

	[ -f "$RSYSLOG_MODDIR/lmnsd_gtls.so" ] ||
		fail "rsyslog's gtls driver (lmnsd_gtls.so) is not in $RSYSLOG_MODDIR: install rsyslog-gnutls, or unpack it there (see .ci/run)"
	start_collector rsyslog rs_coll "" octet
	zproxy_tls --framing octet -u "127.0.0.1:$C_PORT"
	mkdir -p "$d"
	port=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
	cat >"$d/rsyslog.conf" <<-EOF
	global(workDirectory="$d" net.enableDNS="off" maxMessageSize="64k"
	       DefaultNetstreamDriverCAFile="$C/ca.pem")
	module(load="imtcp" maxSessions="100")
	template(name="fwd" type="string"
	         string="<%PRI%>%TIMESTAMP% %HOSTNAME% %syslogtag%%msg%")
	ruleset(name="ship") {
	  action(type="omfwd" target="127.0.0.1" port="$ZPORT" protocol="tcp"
	         template="fwd" TCP_Framing="octet-counted"
	         StreamDriver="gtls" StreamDriverMode="1"
	         StreamDriverAuthMode="x509/name"
	         StreamDriverPermittedPeers="localhost")
	}
	input(type="imtcp" address="127.0.0.1" port="$port" ruleset="ship")
	EOF
	zp_bg rs_ship "$RSYSLOGD" -n -f "$d/rsyslog.conf" -i "$d/pid" "${RS_MOD[@]}"
	wait_port "$port" 10 || fail "the rsyslog shipper does not listen: $(head -c 400 "$T/rs_ship.err")"
	"$ZP_LOGSEND" send 127.0.0.1 "$port" --conns "$conns" --msgs "$msgs" \
	    --framing lf --seed 11 --min 20 --max 400 >"$T/rsl.send.out" \
	    2>"$T/rsl.send.err" || fail "zp-logsend to the shipper: $(cat "$T/rsl.send.err")"
	logsend_sent "rsyslog over TLS" rsl "$conns" "$msgs"
	wait_lines "$C_LOG" $((conns * msgs)) 30 ||
		fail "the collector has $(lines "$C_LOG") of $((conns * msgs)) lines: $(tail -n 3 "$T/rs_ship.err")"
	settle "$C_LOG" 5
	logsend_verify "rsyslog over TLS" rsl "$conns" "$msgs" --exactly-once \
	    "$C_LOG"
	stats_scrape
	expect 'zproxy_tls_handshakes_total{side="client",result="ok"}' '>=' 1 "the shipper's handshake"
	stop_zproxy
	ok "rsyslog (gtls, RFC 5425) -> zproxy tls@ --framing octet -> rsyslog: $VERIFIED"
}

# ---- h. rotation ----------------------------------------------------------

# serial_of FILE: the certificate's serial, as zp-peer --tls-print says it.
serial_of() { openssl x509 -in "$1" -noout -serial | sed 's/^serial=//'; }

# expect_serial NAME FILE WHAT: a new client (zp-peer NAME) is served
# the certificate of FILE.
expect_serial() {
	peer "$1" connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" --tls-print \
	    -g 100 -x 100 || fail "$3: $(cat "$T/$1.err")"
	grep -qx "tls: TLSv1.3 serial=$(serial_of "$2")" "$T/$1.out" ||
		fail "$3: $(cat "$T/$1.out"), want serial $(serial_of "$2")"
}

# expiry_days FILE: zproxy_tls_cert_expiry_seconds{file=FILE} in whole days.
expiry_days() {
	stats_scrape
	val "zproxy_tls_cert_expiry_seconds{file=\"$1\"}" |
		awk '{ printf "%d\n", $1 / 86400 }'
}

case_rotate() {
	local n=$((512 * 1024)) pid live=$T/live
	mkdir -p "$live"
	cp "$C/srv.pem" "$live/cert.pem"
	cp "$C/srv.key" "$live/key.pem"
	# Read again as --user: the files must be that user's to read.
	zp_user_dir "$live" "$live/cert.pem" "$live/key.pem"
	cert srv2 ca /CN=localhost 90 "subjectAltName=DNS:localhost,IP:127.0.0.1"
	peer_listen rot_up --echo -n 0 -t 120
	TLS_SRV=(--tls-cert "$live/cert.pem" --tls-key "$live/key.pem")
	zproxy_tls -u "127.0.0.1:$PEER_PORT" --control "$T/rot.ctl"
	TLS_SRV=(--tls-cert "$C/srv.pem" --tls-key "$C/srv.key")
	[ "$(expiry_days "$live/cert.pem")" = 29 ] ||
		fail "expiry before: $(expiry_days "$live/cert.pem") days, want 29"
	expect_serial rot_old "$C/srv.pem" "before"
	# Each holds its connection until its echo is whole (--no-shut: its
	# 512 KiB fit in the socket buffers at once, and a FIN after them
	# would half-close it long before the rotation).
	zp_bg rot_50 "$ZP_PEER" connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" \
	    -n 50 -g "$n" -x "$n" --read-rate 50K --no-shut -t 60
	pid=$BG_PID
	wait_estab "$ZPORT" 50 10 || fail "50 clients: $(estab "$ZPORT") connected"
	# A bad pair first: the old one stays, said once.
	cp "$C/cli.key" "$live/key.pem"
	kill -HUP "$ZPID"
	wait_line "$ZLOG" 'TLS: --tls-key .* does not match .*; the certificates in use stay' 10 \
	    >/dev/null || fail "a bad key: no line: $(tail -n 3 "$ZLOG")"
	expect_serial rot_mid "$C/srv.pem" "after a bad reload"
	# The good pair: new handshakes get it.
	cp "$C/srv2.pem" "$live/cert.pem"
	cp "$C/srv2.key" "$live/key.pem"
	kill -HUP "$ZPID"
	wait_line "$ZLOG" 'TLS: certificates read again; new handshakes use them' 10 \
	    >/dev/null || fail "a good reload: no line: $(tail -n 3 "$ZLOG")"
	expect_serial rot_new "$C/srv2.pem" "after the reload"
	[ "$(expiry_days "$live/cert.pem")" = 89 ] ||
		fail "expiry after: $(expiry_days "$live/cert.pem") days, want 89"
	# zproxy ctl reload does the same (no -f: only the certificates).
	cp "$C/srv.pem" "$live/cert.pem"
	cp "$C/srv.key" "$live/key.pem"
	"$ZPROXY" ctl --control "$T/rot.ctl" reload >"$T/ctl_reload.out" \
	    2>"$T/ctl_reload.err" || fail "zproxy ctl reload: $(cat "$T/ctl_reload.err" "$T/ctl_reload.out")"
	grep -q 'TLS certificates are read again' "$T/ctl_reload.out" ||
		fail "zproxy ctl reload said: $(cat "$T/ctl_reload.out")"
	wait_line "$ZLOG" 'TLS: certificates read again.*expires in 29 days' 10 \
	    >/dev/null || fail "zproxy ctl reload: no line: $(tail -n 3 "$ZLOG")"
	expect_serial rot_back "$C/srv.pem" "after zproxy ctl reload"
	alive "$pid" || fail "the 50 ended before the reload was checked"
	peer_wait "$pid" rot_50 60 || fail "the 50 streams: $(cat "$T/rot_50.err")"
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "rotation: SIGHUP with a bad key kept the old certificate (one line), with a good pair served the new one (serial checked), zproxy ctl reload the first again, while 50 streams of 512 KiB each way (about 10 s) went on whole; expiry 29 -> 89 days"
}

# ---- i. --tls-max-pending ------------------------------------------------------

# flood N NAME: N connections to zproxy that send nothing, held open
# until zproxy closes them (zp-peer connect --hold); waits until all are
# up. Sets FLOOD_PID.
flood() {
	zp_bg "$2" "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -n "$1" --hold -t 60
	FLOOD_PID=$BG_PID
	wait_line "$T/$2.out" "^connected $1\$" 20 "$FLOOD_PID" >/dev/null ||
		fail "$1 silent connections: $(cat "$T/$2.err")"
}

# real_client WHAT: a TLS client (1 MiB each way, verified) is served
# within 5 s.
real_client() {
	local t0 n=$((1024 * 1024))
	t0=$(now_ms)
	peer real connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" -g "$n" -x "$n" \
	    -t 20 || fail "$1: a real client: $(cat "$T/real.err")"
	[ $(( $(now_ms) - t0 )) -lt 5000 ] ||
		fail "$1: a real client took $(( $(now_ms) - t0 )) ms"
}

case_pending() {
	local v max six most up

	peer_listen pd_up --echo -n 0 -t 120
	zproxy_tls --tls-max-pending 40 --max-conns 20 --threads 2 \
	    --tls-handshake-timeout 30 -u "127.0.0.1:$PEER_PORT"
	flood 200 pd_flood
	wait_metric 'zproxy_tls_handshakes_total{side="client",result="evicted"}' '>=' 160 10 \
	    "200 silent against --tls-max-pending 40"
	v=$(val zproxy_tls_handshakes_pending)
	[ "$v" -le 40 ] || fail "$v handshakes pending, --tls-max-pending 40"
	real_client "200 silent, --max-conns 20"
	grep -q 'error="evicted: closed to make room' "$ZLOG" ||
		fail "no evicted line in the log"
	stop_zproxy
	peer_wait "$FLOOD_PID" pd_flood 10
	ZP_WRAP=(bash -c 'ulimit -n 1024 && exec "$0" "$@"')
	zproxy_tls -u "127.0.0.1:$PEER_PORT"
	ZP_WRAP=()
	flood 1000 pd_flood2
	real_client "1000 silent, ulimit -n 1024"
	# (the threads publish their counters every so often)
	wait_metric zproxy_tls_handshakes_pending '>=' 50 10 \
	    "1000 silent, ulimit -n 1024: handshakes pending"
	v=$(val zproxy_tls_handshakes_pending)
	max=$(sed -n 's/.*at most \([0-9]*\) under way (--tls-max-pending).*/\1/p' "$ZLOG")
	[ -n "$max" ] && [ "$max" -gt 0 ] && [ "$v" -le "$max" ] ||
		fail "ulimit -n 1024: $v pending, the start-up line says at most '$max'"
	expect 'zproxy_tls_handshakes_total{side="client",result="evicted"}' '>=' $((1000 - max)) \
	    "1000 silent, ulimit -n 1024"
	expect zproxy_accept_pauses_total == 0 "1000 silent, ulimit -n 1024: no descriptor shortage"
	zproxy_alive
	stop_zproxy
	peer_wait "$FLOOD_PID" pd_flood2 10
	# Done handshakes wait for room under --max-conns: 6 clients, 2
	# pairs at most at any time, every one served whole.
	zproxy_tls --max-conns 2 --threads 2 -u "127.0.0.1:$PEER_PORT"
	# (--no-shut: a pair lasts until its client read the echo, 1 s)
	zp_bg pd_six "$ZP_PEER" connect 127.0.0.1 "$ZPORT" "${TLS_CLI[@]}" \
	    -n 6 -g 512K -x 512K --read-rate 512K --no-shut -t 60
	six=$BG_PID
	most=0
	while alive "$six"; do
		up=$(estab "$PEER_PORT")
		[ "$up" -gt "$most" ] && most=$up
		sleep 0.05
	done
	peer_wait "$six" pd_six 5 || fail "--max-conns 2: $(cat "$T/pd_six.err")"
	[ "$most" = 2 ] ||
		fail "--max-conns 2: $most upstream connections at once"
	stop_zproxy
	kill "$PEER_PID" 2>/dev/null
	ok "--tls-max-pending: 200 silent against 40 (and --max-conns 20): the oldest evicted, a real client served at once; 1000 silent under ulimit -n 1024 (at most $max pending by default): $v pending, the rest evicted, no accept pause, a real client served; 6 clients against --max-conns 2: $most upstream connections at most, all served"
}

# ---- f. start-up errors --------------------------------------------------------

# bad_start WANT_STATUS WANT_TEXT ARGS...
bad_start() {
	local want=$1 text=$2 rc; shift 2
	timeout 10 "$ZPROXY" -l "tls@127.0.0.1:$(free_port)" -u 127.0.0.1:9 \
	    "$@" >"$T/bad.out" 2>"$T/bad.err"
	rc=$?
	[ "$rc" = "$want" ] || fail "$*: exit $rc, want $want: $(cat "$T/bad.err")"
	grep -qF -- "$text" "$T/bad.err" || fail "$*: said $(cat "$T/bad.err")"
	[ "$(wc -l <"$T/bad.err")" -le 2 ] || fail "$*: more than one line: $(cat "$T/bad.err")"
}

case_errors() {
	bad_start 64 "-l tls@ needs --tls-cert and --tls-key"
	bad_start 78 "--tls-cert $T/nope.pem: No such file or directory" \
	    --tls-cert "$T/nope.pem" --tls-key "$C/srv.key"
	bad_start 78 "does not match the certificate" --tls-cert "$C/srv.pem" \
	    --tls-key "$C/cli.key"
	timeout 10 "$ZPROXY" -l "127.0.0.1:$(free_port)" -u 127.0.0.1:9 \
	    "${TLS_SRV[@]}" >"$T/bad.out" 2>"$T/bad.err"
	[ $? = 64 ] && grep -q 'no listener is one' "$T/bad.err" ||
		fail "--tls-cert without tls@: $(cat "$T/bad.err")"
	ok "start-up errors: one line each, exit 64 (usage) or 78 (a file)"
}

mkdata data 3M
capture_hello

for mode in $MODES; do
	subcase case_bytes "$mode" 1
done
subcase case_bytes splice 2
subcase case_halfclose
subcase case_mutual
subcase case_hostile
subcase case_s_client
subcase case_rsyslog
subcase case_rotate
subcase case_pending
subcase case_errors
zp_done
