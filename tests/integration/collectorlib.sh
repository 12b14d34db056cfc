# collectorlib.sh - real log collectors for zproxy's integration tests:
# rsyslog (imtcp) and syslog-ng, each on its own loopback port, writing
# every message it gets as one line to its own file. Sourced after lib.sh:
#   . "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1
#
# rsyslog and syslog-ng-core conflict as Debian packages: RSYSLOGD names
# rsyslogd, else rsyslogd in PATH, else /opt/zp-rsyslog/usr/sbin/rsyslogd
# (the rsyslog .deb unpacked there with dpkg-deb -x, as .ci/run does);
# RSYSLOG_MODDIR its module directory (found beside it when unpacked).
# SYSLOG_NG names syslog-ng, else the one in PATH. A collector missing is
# a failure, not a skip.

# ---- the programs ------------------------------------------------------

RSYSLOGD=${RSYSLOGD:-$(command -v rsyslogd 2>/dev/null || true)}
if [ -z "$RSYSLOGD" ] && [ -x /opt/zp-rsyslog/usr/sbin/rsyslogd ]; then
	RSYSLOGD=/opt/zp-rsyslog/usr/sbin/rsyslogd
fi
[ -n "$RSYSLOGD" ] && [ -x "$RSYSLOGD" ] ||
	fail "rsyslogd not found: install rsyslog, or unpack its .deb into /opt/zp-rsyslog (see .ci/run), or set RSYSLOGD"
RS_MOD=()
if [ -z "${RSYSLOG_MODDIR:-}" ] && [ "$RSYSLOGD" != /usr/sbin/rsyslogd ]; then
	for d in "${RSYSLOGD%/sbin/rsyslogd}"/lib/*/rsyslog; do
		[ -f "$d/imtcp.so" ] && RSYSLOG_MODDIR=$d
	done
fi
[ -n "${RSYSLOG_MODDIR:-}" ] && RS_MOD=(-M "$RSYSLOG_MODDIR")
SYSLOG_NG=${SYSLOG_NG:-$(command -v syslog-ng 2>/dev/null || true)}
[ -n "$SYSLOG_NG" ] || fail "syslog-ng not found: install syslog-ng-core"

# collector_versions: "rsyslog: V; syslog-ng: V" for a note.
collector_versions() {
	echo "rsyslog: $("$RSYSLOGD" -v 2>/dev/null | head -n 1 | awk '{ print $2 }');" \
	    "syslog-ng: $("$SYSLOG_NG" --version 2>/dev/null | sed -n 's/^syslog-ng [0-9]* (\(.*\))/\1/p')"
}

# ---- collectors --------------------------------------------------------

# start_collector KIND NAME [PORT [FRAMING]]: start rsyslog or syslog-ng
# in the foreground on 127.0.0.1:PORT (a free one if PORT is empty),
# writing each message it gets as one line "${MSG}" to $T/NAME.log
# (appended: a restart keeps it). FRAMING is how the stream is framed:
#   lf     newline-terminated messages (default);
#   octet  RFC 6587 octet counting, "LEN SP MSG".
# rsyslog's imtcp takes both on one input (octet counting is on by
# default, told from a frame starting with a digit), so FRAMING changes
# nothing for it. syslog-ng's network(transport("tcp")) reads lf only,
# its syslog(transport("tcp")) octet counting only (and parses RFC 5424,
# falling back to BSD syslog). Messages up to 64 KiB (rsyslog's default
# is 8 KiB); syslog-ng with flow control, so that a busy file destination
# slows its readers instead of dropping messages. Waits for its listening
# socket. Sets C_PID, C_PORT, C_LOG.
start_collector() {
	local kind=$1 name=$2 want=${3:-} framing=${4:-lf} port d conf
	local deadline src tls
	d=$T/$name.d
	mkdir -p "$d"
	C_LOG=$T/$name.log
	case $framing in
	lf|octet) ;;
	*) fail "start_collector: unknown framing $framing" ;;
	esac
	for _ in 1 2 3 4 5; do
		port=$want
		[ -n "$port" ] || port=$(free_port -b 127.0.0.1) ||
			fail "zp-peer port failed"
		conf=$d/$kind.conf
		case $kind in
		rsyslog)
			cat >"$conf" <<-EOF
			global(workDirectory="$d" net.enableDNS="off"
			       maxMessageSize="64k")
			module(load="imtcp" maxSessions="1000")
			template(name="msgline" type="string" string="%msg%\n")
			ruleset(name="collect") {
			  action(type="omfile" file="$C_LOG" template="msgline"
			         flushOnTXEnd="on" asyncWriting="off")
			}
			input(type="imtcp" address="127.0.0.1" port="$port" ruleset="collect")
			EOF
			zp_bg "$name" "$RSYSLOGD" -n -f "$conf" -i "$d/pid" "${RS_MOD[@]}"
			;;
		syslog-ng)
			if [ "$framing" = octet ]; then
				src=syslog
			else
				src=network
			fi
			# C_TLS_CERT, C_TLS_KEY: a TLS collector (RFC 5425)
			if [ -n "${C_TLS_CERT:-}" ]; then
				tls="transport(\"tls\") tls(cert-file(\"$C_TLS_CERT\")
				    key-file(\"$C_TLS_KEY\") peer-verify(optional-untrusted))"
			else
				tls='transport("tcp")'
			fi
			cat >"$conf" <<-EOF
			@version: 3.38
			options { use_dns(no); use_fqdn(no); dns_cache(no);
			          stats_freq(0); flush_lines(1); keep_hostname(yes);
			          log_msg_size(65536); };
			source s_net { $src(ip("127.0.0.1") port($port)
			    $tls max_connections(1000) log_iw_size(100000)); };
			destination d_file { file("$C_LOG" template("\${MSG}\n")
			    flush_lines(1) fsync(no)); };
			log { source(s_net); destination(d_file); flags(flow-control); };
			EOF
			zp_bg "$name" "$SYSLOG_NG" -F --no-caps -f "$conf" \
			    -R "$d/persist" -p "$d/pid" -c "$d/ctl"
			;;
		*) fail "start_collector: unknown kind $kind" ;;
		esac
		C_PID=$BG_PID
		deadline=$(( $(now_ms) + 10000 ))
		while alive "$C_PID" && ! listening "$port"; do
			[ "$(now_ms)" -ge "$deadline" ] &&
				fail "$kind ($name) does not listen on $port within 10s"
			sleep 0.02
		done
		if alive "$C_PID"; then
			C_PORT=$port
			return 0
		fi
		wait "$C_PID" 2>/dev/null
		# a fixed port must be ours; a picked one may have been taken
		[ -z "$want" ] && grep -qiE 'in use|could not bind|bind' "$T/$name.err" &&
			continue
		fail "$kind ($name) exited at start-up: $(head -c 400 "$T/$name.err")"
	done
	fail "$kind ($name): no free port after 5 tries"
}

# kill_collector PID PORT WHAT: stop a collector; its port must be closed
# (new connects refused) before this returns.
kill_collector() {
	local deadline
	ours "$1" || fail "$3: not our process"
	kill -TERM "$1"
	zp_wait_exit "$1" 5 >/dev/null 2>&1
	[ $? = 124 ] && { kill -KILL "$1"; zp_wait_exit "$1" 5; }
	deadline=$(( $(now_ms) + 5000 ))
	while listening "$2"; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "$3: port $2 still listening"
		sleep 0.02
	done
}

# kill9_collector PID PORT WHAT: SIGKILL a collector of ours, wait until
# it is gone and its port no longer listens.
kill9_collector() {
	local deadline
	ours "$1" || fail "$3: not our process"
	kill -KILL "$1"
	zp_wait_exit "$1" 5 >/dev/null 2>&1
	[ $? = 124 ] && fail "$3: still running 5s after SIGKILL"
	deadline=$(( $(now_ms) + 5000 ))
	while listening "$2"; do
		[ "$(now_ms)" -ge "$deadline" ] && fail "$3: port $2 still listening"
		sleep 0.02
	done
}

# ---- what they wrote -----------------------------------------------------

# lines FILE: how many lines FILE holds now.
lines() { wc -l <"$1" 2>/dev/null || echo 0; }

# wait_lines FILE N SECS: until FILE has N lines (or more).
wait_lines() {
	local deadline=$(( $(now_ms) + $3 * 1000 ))
	until [ "$(lines "$1")" -ge "$2" ]; do
		[ "$(now_ms)" -ge "$deadline" ] && return 1
		sleep 0.05
	done
}

# settle FILE SECS: until FILE has stopped growing (the same size over
# 1 s) or SECS passed. A collector that read everything may still be
# writing; nothing else tells when it is done.
settle() {
	local deadline=$(( $(now_ms) + $2 * 1000 )) last=-1 same=0 s
	while [ "$(now_ms)" -lt "$deadline" ]; do
		s=$(size "$1")
		if [ "$s" = "$last" ]; then
			same=$((same + 1))
			[ "$same" -ge 5 ] && return 0
		else
			same=0
			last=$s
		fi
		sleep 0.2
	done
	return 1
}

# series NAME: its value in $T/metrics ("" when it is not there).
series() { awk -v k="$1" '$1 == k { print $2 }' "$T/metrics"; }

# logsend_sent WHAT NAME CONNS MSGS: $T/NAME.send.out's last line must be
# zp-logsend send's summary of all CONNS x MSGS messages. Sets SENT_BYTES.
logsend_sent() {
	local out want="connects=$3 messages=$(($3 * $4)) bytes="
	out=$(tail -n 1 "$T/$2.send.out")
	case $out in
	"$want"[0-9]*) SENT_BYTES=${out#"$want"} ;;
	*) fail "$1: zp-logsend send said '$out', want '$want...'" ;;
	esac
}

# logsend_verify WHAT NAME CONNS MSGS ARGS... FILE...: zp-logsend verify
# -v must pass (ZP_LOGSEND); its summary, on one line, in VERIFIED.
logsend_verify() {
	local what=$1 name=$2 conns=$3 msgs=$4
	shift 4
	"$ZP_LOGSEND" verify -v --conns "$conns" --msgs "$msgs" "$@" \
	    >"$T/$name.verify.out" 2>"$T/$name.verify.err" ||
		fail "$what: $(tr '\n' ' ' <"$T/$name.verify.out"): $(head -n 4 "$T/$name.verify.err" | tr '\n' ' ')"
	VERIFIED=$(tr '\n' ' ' <"$T/$name.verify.out" | sed 's/ $//')
}
