#!/bin/bash
# proxyproto.sh - zproxy --send-proxy v1|v2 in front of real receivers of
# the PROXY protocol, each of which must report the client's own address
# and port (and zproxy's listen address as the destination), and pass on
# the client's bytes intact, without the header:
#   a. HAProxy, `bind ... accept-proxy`, mode tcp, logging %ci:%cp and
#      %fi:%fp, forwarding to a zp-peer that checks the payload (256 KiB,
#      SHA-256); v1 and v2;
#   b. nginx stream, `listen ... proxy_protocol`, access log of
#      $proxy_protocol_addr:$proxy_protocol_port (and _server_), proxying
#      to a zp-peer that checks the payload; v1 and v2;
#   c. syslog-ng network(transport("proxied-tcp")), writing
#      ${PROXIED_SRCIP}:${PROXIED_SRCPORT} (3.38 leaves ${SOURCEIP} the
#      TCP peer, i.e. zproxy) with each of 200 messages of one
#      connection; v1 only (3.38 reads no v2);
#   d. the client is IPv4 from 127.0.0.5 and a port it bound, to zproxy on
#      127.0.0.7: none of the reported addresses can come from the TCP
#      connection to the receiver (127.0.0.1 both ends); with IPv6
#      loopback also [::1] -> [::1] (TCP6 / AF_INET6 headers over an IPv4
#      upstream connection), and, against HAProxy, an IPv4 client of a
#      dual-stack listener (-l :PORT): the header must carry plain IPv4
#      addresses, not ::ffff:127.0.0.5;
#   e. controls: the same receivers behind zproxy without --send-proxy
#      reject the connection (so the checks above are not vacuous).
# zproxy's own conn= line must name the same client. Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

HAPROXY=${HAPROXY:-$(command -v haproxy 2>/dev/null || true)}
NGINX=${NGINX:-$(command -v nginx 2>/dev/null || true)}
NGX_STREAM_MOD=${NGX_STREAM_MOD:-/usr/lib/nginx/modules/ngx_stream_module.so}
SYSLOG_NG=${SYSLOG_NG:-$(command -v syslog-ng 2>/dev/null || true)}
[ -n "$HAPROXY" ] || fail "haproxy not found: install haproxy"
[ -n "$NGINX" ] || fail "nginx not found: install nginx-light"
[ -f "$NGX_STREAM_MOD" ] || fail "$NGX_STREAM_MOD missing: install libnginx-mod-stream"
[ -n "$SYSLOG_NG" ] || fail "syslog-ng not found: install syslog-ng-core"
command -v socat >/dev/null || fail "socat not found: install socat"
note "$("$HAPROXY" -v 2>/dev/null | head -n 1 | awk '{ print "haproxy " $3 }');" \
    "$("$NGINX" -v 2>&1 | sed 's|.*nginx/|nginx |');" \
    "syslog-ng $("$SYSLOG_NG" --version 2>/dev/null | sed -n 's/^syslog-ng [0-9]* (\(.*\))/\1/p');" \
    "$(socat -V 2>/dev/null | sed -n 's/^socat version \([^ ]*\).*/socat \1/p')"

PAYLOAD_SIZE=262144
mkdata pay $PAYLOAD_SIZE
RUN=$(date +%s)x$$

# ---- daemons -------------------------------------------------------------

# daemon_up NAME PID PORT: wait until PID listens on PORT (0), or exits (1).
daemon_up() {
	local deadline=$(( $(now_ms) + 10000 ))
	while alive "$2"; do
		listening "$3" && return 0
		[ "$(now_ms)" -ge "$deadline" ] &&
			fail "$1 does not listen on $3 within 10s: $(tail -n 3 "$T/$1.err")"
		sleep 0.02
	done
	wait "$2" 2>/dev/null
	return 1
}

# start_haproxy NAME BACKEND_PORT: haproxy -db, `accept-proxy` on
# 127.0.0.1:RX_PORT, a raw log line "pp src=%ci:%cp dst=%fi:%fp bytes=%U"
# on its stdout ($T/NAME.out) per connection. Sets RX_PID, RX_PORT.
start_haproxy() {
	local name=$1 be=$2 conf=$T/$1.cfg
	for _ in 1 2 3 4 5; do
		RX_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
		cat >"$conf" <<-EOF
		global
		    log stdout format raw local0
		defaults
		    mode tcp
		    log global
		    timeout connect 5s
		    timeout client 20s
		    timeout server 20s
		frontend fe
		    bind 127.0.0.1:$RX_PORT accept-proxy
		    log-format "pp src=%ci:%cp dst=%fi:%fp bytes=%U"
		    default_backend be
		backend be
		    server s1 127.0.0.1:$be
		EOF
		zp_bg "$name" "$HAPROXY" -f "$conf" -db
		RX_PID=$BG_PID
		daemon_up "$name" "$RX_PID" "$RX_PORT" && return 0
		grep -qiE 'cannot bind|in use' "$T/$name.err" "$T/$name.out" && continue
		fail "haproxy exited at start-up: $(head -c 400 "$T/$name.err")"
	done
	fail "haproxy: no free port after 5 tries"
}

# start_nginx NAME BACKEND_PORT: nginx in the foreground (no master),
# stream `listen 127.0.0.1:RX_PORT proxy_protocol`, an access log line per
# session in $T/NAME.d/access.log, errors in $T/NAME.d/error.log.
start_nginx() {
	local name=$1 be=$2 d=$T/$1.d
	mkdir -p "$d"
	for _ in 1 2 3 4 5; do
		RX_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
		cat >"$d/nginx.conf" <<-EOF
		load_module $NGX_STREAM_MOD;
		error_log $d/error.log info;
		pid $d/nginx.pid;
		events { worker_connections 64; }
		stream {
		    log_format pp 'pp src=\$proxy_protocol_addr:\$proxy_protocol_port dst=\$proxy_protocol_server_addr:\$proxy_protocol_server_port remote=\$remote_addr bytes=\$bytes_received';
		    access_log $d/access.log pp;
		    server {
		        listen 127.0.0.1:$RX_PORT proxy_protocol;
		        proxy_pass 127.0.0.1:$be;
		    }
		}
		EOF
		: >"$d/error.log"
		zp_bg "$name" "$NGINX" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" \
		    -g 'daemon off; master_process off;'
		RX_PID=$BG_PID
		daemon_up "$name" "$RX_PID" "$RX_PORT" && return 0
		grep -qiE 'in use' "$d/error.log" "$T/$name.err" && continue
		fail "nginx exited at start-up: $(tail -n 3 "$d/error.log" "$T/$name.err" | head -c 400)"
	done
	fail "nginx: no free port after 5 tries"
}

# start_syslog_ng NAME: syslog-ng -F, network(transport("proxied-tcp")) on
# 127.0.0.1:RX_PORT, one line per message in $T/NAME.log; its internal
# messages on stderr ($T/NAME.err).
start_syslog_ng() {
	local name=$1 d=$T/$1.d
	mkdir -p "$d"
	for _ in 1 2 3 4 5; do
		RX_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
		cat >"$d/syslog-ng.conf" <<-EOF
		@version: 3.38
		options { use_dns(no); use_fqdn(no); dns_cache(no); stats_freq(0);
		          flush_lines(1); keep_hostname(yes); };
		source s_pp { network(ip("127.0.0.1") port($RX_PORT)
		    transport("proxied-tcp") log_iw_size(10000)); };
		destination d_file { file("$T/$name.log" flush_lines(1) fsync(no)
		    template("pp src=\${PROXIED_SRCIP}:\${PROXIED_SRCPORT} dst=\${PROXIED_DSTIP}:\${PROXIED_DSTPORT} ipv=\${PROXIED_IP_VERSION} sourceip=\${SOURCEIP} host=\${HOST} msg=\${MSG}\n")); };
		log { source(s_pp); destination(d_file); };
		EOF
		zp_bg "$name" "$SYSLOG_NG" -F -e --no-caps -f "$d/syslog-ng.conf" \
		    -R "$d/persist" -p "$d/pid" -c "$d/ctl"
		RX_PID=$BG_PID
		daemon_up "$name" "$RX_PID" "$RX_PORT" && return 0
		grep -qiE 'in use|bind' "$T/$name.err" && continue
		fail "syslog-ng exited at start-up: $(head -c 400 "$T/$name.err")"
	done
	fail "syslog-ng: no free port after 5 tries"
}

# ---- client and zproxy ------------------------------------------------------

# fam_setup FAM: the addresses for family 4, 6 or "dual" (an IPv4 client
# of zproxy on :PORT). CADDR/ZADDR as the receivers print them, CSOCK and
# ZSOCK as socat wants them, ZLISTEN for -l (@PORT@ stands for the port).
fam_setup() {
	case $1 in
	4)	CADDR=127.0.0.5 ZADDR=127.0.0.7 CSOCK=127.0.0.5 ZSOCK=127.0.0.7
		ZLISTEN=127.0.0.7:@PORT@ CLOG=127.0.0.5 SOCAT_TCP=TCP4 ;;
	dual)	CADDR=127.0.0.5 ZADDR=127.0.0.7 CSOCK=127.0.0.5 ZSOCK=127.0.0.7
		ZLISTEN=:@PORT@ CLOG=127.0.0.5 SOCAT_TCP=TCP4 ;;
	6)	CADDR=::1 ZADDR=::1 CSOCK='[::1]' ZSOCK='[::1]'
		ZLISTEN='[::1]:@PORT@' CLOG='\[::1\]' SOCAT_TCP=TCP6 ;;
	esac
}

# client_send FILE [may-fail]: connect from CSOCK:a port picked here to
# zproxy, send FILE, shut down, close. Sets CPORT.
client_send() {
	local rc
	for _ in 1 2 3 4 5; do
		CPORT=$(free_port -b "${CADDR}") || fail "zp-peer port -b $CADDR failed"
		timeout -k 2 20 socat -u "FILE:$1" \
		    "$SOCAT_TCP:$ZSOCK:$ZPORT,bind=$CSOCK:$CPORT" 2>"$T/socat.err"
		rc=$?
		[ "$rc" = 0 ] && return 0
		grep -qi 'in use' "$T/socat.err" && continue
		[ "${2:-}" = may-fail ] && return 0
		fail "socat client ($CSOCK:$CPORT -> $ZSOCK:$ZPORT) failed ($rc): $(head -c 300 "$T/socat.err")"
	done
	fail "client: no free source port after 5 tries"
}

# zproxy_pp VERSION RX_PORT: zproxy -v -m $mode, listening on ZLISTEN,
# --send-proxy VERSION ("none": no header) to 127.0.0.1:RX_PORT.
zproxy_pp() {
	local pp=()
	[ "$1" = none ] || pp=(--send-proxy "$1")
	start_zproxy -v -m "$mode" -l "$ZLISTEN" "${pp[@]}" -u "127.0.0.1:$2"
}

# check_line WHAT GOT WANT
check_line() {
	[ "$2" = "$3" ] || fail "$1: receiver logged '$2', want '$3'"
}

# ---- a: HAProxy ------------------------------------------------------------

case_haproxy() {
	local fam=$1 v=$2 what="$mode: haproxy, --send-proxy $2, IPv$1 client" line bpid
	local n=hap-$mode-$1-$2
	[ "$fam" = dual ] && what="$mode: haproxy, --send-proxy $v, IPv4 client of -l :PORT"
	fam_setup "$fam"
	peer_listen "$n-be" --no-shut -o "$T/$n.got" -t 30
	bpid=$PEER_PID
	start_haproxy "$n" "$PEER_PORT"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/pay"
	line=$(wait_line "$T/$n.out" '^pp ' 10 "$RX_PID") ||
		fail "$what: no log line from haproxy within 10s: $(tail -n 3 "$T/$n.out" "$T/$n.err")"
	check_line "$what" "$line" "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT bytes=$PAYLOAD_SIZE"
	peer_wait "$bpid" "$n-be" 20 || fail "$what: backend: $(cat "$T/$n-be.err")"
	same_file "$T/pay" "$T/$n.got" "$what: payload behind haproxy"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$PAYLOAD_SIZE .*end=closed" "$what"
	stop_zproxy
	ok "$what: haproxy saw $CADDR:$CPORT -> $ZADDR:$ZPORT, 256 KiB intact behind it"
}

# ---- b: nginx ----------------------------------------------------------------

case_nginx() {
	local fam=$1 v=$2 what="$mode: nginx, --send-proxy $2, IPv$1 client" line bpid
	local n=ngx-$mode-$1-$2
	fam_setup "$fam"
	peer_listen "$n-be" --no-shut -o "$T/$n.got" -t 30
	bpid=$PEER_PID
	start_nginx "$n" "$PEER_PORT"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/pay"
	line=$(wait_line "$T/$n.d/access.log" '^pp ' 10 "$RX_PID") ||
		fail "$what: no access log line from nginx within 10s: $(tail -n 3 "$T/$n.d/error.log")"
	check_line "$what" "$line" "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT remote=127.0.0.1 bytes=$PAYLOAD_SIZE"
	peer_wait "$bpid" "$n-be" 20 || fail "$what: backend: $(cat "$T/$n-be.err")"
	same_file "$T/pay" "$T/$n.got" "$what: payload behind nginx"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$PAYLOAD_SIZE .*end=closed" "$what"
	stop_zproxy
	ok "$what: nginx saw $CADDR:$CPORT -> $ZADDR:$ZPORT, 256 KiB intact behind it"
}

# ---- c: syslog-ng ------------------------------------------------------------

case_syslog_ng() {
	local fam=$1 v=$2 what="$mode: syslog-ng proxied-tcp, --send-proxy $2, IPv$1 client"
	local id=$RUN$mode$fam i ipv=4 size n=sng-$mode-$1-$2
	[ "$fam" = 6 ] && ipv=6
	fam_setup "$fam"
	for ((i = 1; i <= 200; i++)); do
		printf '<13>Dec  2 16:00:00 zphost zptest: msg-%s-%d\n' "$id" "$i"
	done >"$T/sng.msgs"
	size=$(stat -c %s "$T/sng.msgs")
	start_syslog_ng "$n"
	zproxy_pp "$v" "$RX_PORT"
	client_send "$T/sng.msgs"
	expect_conn_log "client=$CLOG:$CPORT upstream=127\.0\.0\.1:$RX_PORT .*up=$size .*end=closed" "$what"
	wait_line "$T/$n.log" "msg=msg-$id-200\$" 10 "$RX_PID" >/dev/null ||
		fail "$what: $(grep -c . "$T/$n.log" 2>/dev/null) of 200 messages in syslog-ng's file within 10s: $(head -n 2 "$T/$n.log" 2>/dev/null) $(tail -n 3 "$T/$n.err")"
	for ((i = 1; i <= 200; i++)); do
		echo "pp src=$CADDR:$CPORT dst=$ZADDR:$ZPORT ipv=$ipv sourceip=127.0.0.1 host=zphost msg=msg-$id-$i"
	done >"$T/sng.want"
	cmp -s "$T/sng.want" "$T/$n.log" ||
		fail "$what: syslog-ng's file is not the 200 messages with the client's address, first difference: $(diff "$T/sng.want" "$T/$n.log" | head -n 3 | tr '\n' ' ' | head -c 400)"
	stop_zproxy
	ok "$what: syslog-ng saw PROXIED_SRCIP:PORT $CADDR:$CPORT, DST $ZADDR:$ZPORT on each of 200 messages, intact"
}

# ---- e: controls -----------------------------------------------------------

case_controls() {
	local what="$mode: controls without --send-proxy"
	fam_setup 4
	echo "not a PROXY header" >"$T/ctl.pay"

	peer_listen "ctlh-$mode-be" --no-shut -o "$T/ctlh-$mode.got" -t 30
	start_haproxy "ctlh-$mode" "$PEER_PORT"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: haproxy"
	wait_line "$T/ctlh-$mode.out" 'PROXY protocol header' 10 "$RX_PID" >/dev/null ||
		fail "$what: haproxy took a connection without a header: $(tail -n 2 "$T/ctlh-$mode.out")"
	[ ! -s "$T/ctlh-$mode.got" ] || fail "$what: haproxy passed bytes on without a header"
	stop_zproxy
	ok "$what: haproxy rejects: $(grep -m 1 'PROXY protocol header' "$T/ctlh-$mode.out" | sed 's/.*: //')"

	peer_listen "ctln-$mode-be" --no-shut -o "$T/ctln-$mode.got" -t 30
	start_nginx "ctln-$mode" "$PEER_PORT"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: nginx"
	wait_line "$T/ctln-$mode.d/error.log" 'broken header' 10 "$RX_PID" >/dev/null ||
		fail "$what: nginx took a connection without a header: $(tail -n 2 "$T/ctln-$mode.d/error.log")"
	[ ! -s "$T/ctln-$mode.got" ] || fail "$what: nginx passed bytes on without a header"
	stop_zproxy
	ok "$what: nginx rejects (broken header)"

	start_syslog_ng "ctls-$mode"
	zproxy_pp none "$RX_PORT"
	client_send "$T/ctl.pay" may-fail
	expect_conn_log "client=$CLOG:$CPORT " "$what: syslog-ng"
	wait_line "$T/ctls-$mode.err" 'Error parsing PROXY protocol header' 10 "$RX_PID" >/dev/null ||
		fail "$what: syslog-ng took a connection without a header: $(tail -n 2 "$T/ctls-$mode.err")"
	[ ! -s "$T/ctls-$mode.log" ] || fail "$what: syslog-ng logged a message without a header: $(head -n 1 "$T/ctls-$mode.log")"
	stop_zproxy
	ok "$what: syslog-ng rejects (Error parsing PROXY protocol header)"
}

if have_ipv6; then
	FAMS="4 6"
	note "IPv6 loopback present: the [::1] and dual-stack sub-cases run"
else
	FAMS=4
	note "no IPv6 loopback: the ::1 and dual-stack sub-cases are left out"
fi

for mode in $MODES; do
	for fam in $FAMS; do
		for v in v1 v2; do
			subcase case_haproxy "$fam" "$v"
			subcase case_nginx "$fam" "$v"
		done
		subcase case_syslog_ng "$fam" v1
	done
	if have_ipv6; then
		subcase case_haproxy dual v1
		subcase case_haproxy dual v2
	fi
	subcase case_controls
done

zp_done
