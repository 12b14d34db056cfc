# proxypeers.sh - the real PROXY protocol peers of proxyproto.sh (zproxy
# sends headers) and acceptproxy.sh (zproxy receives them): HAProxy, nginx
# stream and syslog-ng, started on loopback with configs of their own.
# Source it after lib.sh.

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


# ---- the client ----------------------------------------------------------

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
# ZSOCK:$DST_PORT (default zproxy's port, ZPORT), send FILE, shut down,
# close. Sets CPORT.
client_send() {
	local rc
	for _ in 1 2 3 4 5; do
		CPORT=$(free_port -b "${CADDR}") || fail "zp-peer port -b $CADDR failed"
		timeout -k 2 20 socat -u "FILE:$1" \
		    "$SOCAT_TCP:$ZSOCK:${DST_PORT:-$ZPORT},bind=$CSOCK:$CPORT" 2>"$T/socat.err"
		rc=$?
		[ "$rc" = 0 ] && return 0
		grep -qi 'in use' "$T/socat.err" && continue
		[ "${2:-}" = may-fail ] && return 0
		fail "socat client ($CSOCK:$CPORT -> $ZSOCK:${DST_PORT:-$ZPORT}) failed ($rc): $(head -c 300 "$T/socat.err")"
	done
	fail "client: no free source port after 5 tries"
}

# check_line WHAT GOT WANT
check_line() {
	[ "$2" = "$3" ] || fail "$1: receiver logged '$2', want '$3'"
}

# ---- senders: balancers in front of zproxy --accept-proxy -------------------

# start_haproxy_tx NAME ADDR BACKEND_PORT SERVER_OPTS...: haproxy -db, mode
# tcp, listening on ADDR:TX_PORT (ADDR as haproxy's bind wants it), each
# connection relayed to zproxy on 127.0.0.1:BACKEND_PORT with the server
# options given (send-proxy, send-proxy-v2 ...). Sets TX_PID, TX_PORT.
start_haproxy_tx() {
	local name=$1 addr=$2 be=$3 conf=$T/$1.cfg
	shift 3
	for _ in 1 2 3 4 5; do
		TX_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
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
		    bind $addr:$TX_PORT
		    unique-id-format zp-%ci-%cp
		    log-format "tx src=%ci:%cp id=%ID"
		    default_backend be
		backend be
		    server z 127.0.0.1:$be $*
		EOF
		zp_bg "$name" "$HAPROXY" -f "$conf" -db
		TX_PID=$BG_PID
		daemon_up "$name" "$TX_PID" "$TX_PORT" && return 0
		grep -qiE 'cannot bind|in use' "$T/$name.err" "$T/$name.out" && continue
		fail "haproxy exited at start-up: $(head -c 400 "$T/$name.err")"
	done
	fail "haproxy: no free port after 5 tries"
}

# start_nginx_tx NAME ADDR BACKEND_PORT: nginx stream in the foreground,
# listening on ADDR:TX_PORT, proxying to zproxy on 127.0.0.1:BACKEND_PORT
# with `proxy_protocol on` (a v1 header). Sets TX_PID, TX_PORT.
start_nginx_tx() {
	local name=$1 addr=$2 be=$3 d=$T/$1.d
	mkdir -p "$d"
	for _ in 1 2 3 4 5; do
		TX_PORT=$(free_port -b 127.0.0.1) || fail "zp-peer port failed"
		cat >"$d/nginx.conf" <<-EOF
		load_module $NGX_STREAM_MOD;
		error_log $d/error.log info;
		pid $d/nginx.pid;
		events { worker_connections 64; }
		stream {
		    server {
		        listen $addr:$TX_PORT;
		        proxy_pass 127.0.0.1:$be;
		        proxy_protocol on;
		    }
		}
		EOF
		: >"$d/error.log"
		zp_bg "$name" "$NGINX" -c "$d/nginx.conf" -p "$d" -e "$d/error.log" \
		    -g 'daemon off; master_process off;'
		TX_PID=$BG_PID
		daemon_up "$name" "$TX_PID" "$TX_PORT" && return 0
		grep -qiE 'in use' "$d/error.log" "$T/$name.err" && continue
		fail "nginx exited at start-up: $(tail -n 3 "$d/error.log" "$T/$name.err" | head -c 400)"
	done
	fail "nginx: no free port after 5 tries"
}
