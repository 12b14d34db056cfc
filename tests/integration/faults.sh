#!/bin/bash
# faults.sh - upstream failures and resets: the client is let go promptly,
# the pair is closed, nothing leaks, zproxy serves the next connection.
#   a. refused: a port nobody listens on; 10 clients each see EOF/reset
#      within 1 s (connect-timeout is 5 s), the log says end=upstream-refused,
#      sockets back to baseline; then a listener appears on that port and
#      the next connection is relayed byte-exact;
#   b. a name with several addresses, the first refusing: only 127.0.0.1
#      listens, the name resolves to ::1 and 127.0.0.1; the connect must
#      still succeed (and with nothing listening: end=upstream-refused).
#      Uses localhost when it has both addresses, else a private
#      /etc/hosts in a mount namespace (unshare -m) naming ::1 and
#      127.0.0.1, or, without IPv6, 127.0.0.1 (which glibc sorts first)
#      and 127.0.0.2 with only 127.0.0.2 listening; a SKIP (not a pass)
#      when neither can be set up;
#   c. connect timeout: the upstream's accept queue is full (SYNs dropped);
#      with --connect-timeout 0.5 the client is let go after ~0.5 s and the
#      log says end=upstream-timeout; a client that sends data at once
#      while the connect hangs must not make zproxy spin (<= 10 ticks/2 s);
#   d. resets mid-transfer (SO_LINGER 0 close) from the client and from the
#      upstream, while uploading and while downloading: the log names the
#      side (end=client-reset / end=upstream-reset), zproxy's sockets
#      return to baseline, and a byte-exact transfer works afterwards;
#   e. churn: 200 clients resetting right after connect, then 100 upstream
#      connections reset right after accept, all at once: no crash, no
#      leak, served byte-exact afterwards.
# Both modes.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata rt.up 1M
mkdata rt.down 1M

# healthy WHAT [ADDR]: a 1 MiB each-way transfer through the current
# zproxy to a fresh upstream on ADDR (127.0.0.1) port $UPORT (-u must
# point there), sha256 both ways.
healthy() {
	local what=$1
	peer_listen h-up -b "${2:-127.0.0.1}" -p "$UPORT" -s "$T/rt.down" \
	    -o "$T/h.got-up" -t 30
	peer h-client connect 127.0.0.1 "$ZPORT" -s "$T/rt.up" -o "$T/h.got-down" -t 30 ||
		fail "$what: client: $(cat "$T/h-client.err")"
	peer_wait "$PEER_PID" h-up 10 || fail "$what: upstream: $(cat "$T/h-up.err")"
	same_file "$T/rt.up" "$T/h.got-up" "$what (client->upstream)"
	same_file "$T/rt.down" "$T/h.got-down" "$what (upstream->client)"
	expect_conn_log 'end=closed' "$what"
}

# closed_within SECS NAME WHAT: a client that sends nothing must be closed
# by zproxy within SECS; sets CLOSE_S (seconds, as printed by zp-peer).
closed_within() {
	local secs=$1 name=$2 what=$3
	peer "$name" connect 127.0.0.1 "$ZPORT" --expect-close "$secs" -t 30 ||
		fail "$what: $(cat "$T/$name.out" "$T/$name.err" | head -n 2 | tr '\n' ' ')"
	CLOSE_S=$(sed -n 's/^closed after \([0-9.]*\)s.*/\1/p' "$T/$name.out")
	CLOSE_HOW=$(sed -n 's/^closed after .*(\(.*\))/\1/p' "$T/$name.out")
}

# multi_setup: a name whose first address refuses and whose second is
# MULTI_UP, where the upstream will listen: localhost, or zp-multi.test in
# a private /etc/hosts for zproxy. Sets ZP_WRAP, MULTI_NAME, MULTI_UP, or
# returns 1 (and says why in MULTI_WHY).
multi_setup() {
	local u first
	MULTI_UP=127.0.0.1
	if getent ahosts localhost | grep -q '^::1 ' &&
	    getent ahosts localhost | grep -q '^127\.0\.0\.1 '; then
		MULTI_NAME=localhost
		ZP_WRAP=()
		return 0
	fi
	MULTI_WHY="no unshare"
	command -v unshare >/dev/null || return 1
	if have_ipv6; then
		first=::1
		printf '::1 zp-multi.test\n127.0.0.1 zp-multi.test\n' >"$T/hosts"
	else
		# RFC 6724 sorting puts 127.0.0.1 first whatever the file says
		first=127.0.0.1 MULTI_UP=127.0.0.2
		printf '127.0.0.2 zp-multi.test\n127.0.0.1 zp-multi.test\n' >"$T/hosts"
	fi
	MULTI_WHY="no private /etc/hosts where zp-multi.test is $first first"
	for u in "unshare -m" "unshare -rm"; do
		# shellcheck disable=SC2086
		if [ "$($u sh -c 'mount --bind "$1" /etc/hosts && getent ahosts zp-multi.test' \
		    _ "$T/hosts" 2>/dev/null | awk 'NR == 1 { print $1 }')" = "$first" ]; then
			# shellcheck disable=SC2206
			ZP_WRAP=($u sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$T/hosts")
			MULTI_NAME=zp-multi.test
			return 0
		fi
	done
	return 1
}

# a. refused
refused() {
	local worst=0 i
	UPORT=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" -u "127.0.0.1:$UPORT" --connect-timeout 5
	fd_baseline
	for i in 1 2 3 4 5 6 7 8 9 10; do
		closed_within 1 refused "$mode: upstream refused, client $i"
		expect_conn_log 'end=upstream-refused' "$mode: upstream refused, client $i"
		worst=$(echo "$CLOSE_S $worst" | awk '{ printf "%.3f", ($1 > $2) ? $1 : $2 }')
	done
	zproxy_alive "after refused upstreams"
	wait_fd_baseline 5 "$mode: after 10 refused upstream connects"
	ok "$mode: upstream refused: 10 clients closed within ${worst}s (<= 1 s), end=upstream-refused, no fd leak"
	healthy "$mode: first connection after the upstream came up"
	wait_fd_baseline 5 "$mode: after a healthy connection"
	stop_zproxy
	ok "$mode: then a listener on that port is served byte-exact"
}

# b. several addresses, the first refuses
multi_address() {
	if ! multi_setup; then
		skip "$mode: several-address upstream: localhost has one address, $MULTI_WHY"
		return 0
	fi
	UPORT=$(free_port)	# free on both families
	start_zproxy -v -m "$mode" -u "$MULTI_NAME:$UPORT"
	ZP_WRAP=()
	closed_within 1 refused2 "$mode: -u $MULTI_NAME:PORT, nothing listens"
	expect_conn_log 'end=upstream-refused' "$mode: -u $MULTI_NAME:PORT, both addresses refuse"
	ok "$mode: upstream $MULTI_NAME, both addresses refuse: client let go after ${CLOSE_S}s, end=upstream-refused"
	healthy "$mode: -u $MULTI_NAME:PORT, only $MULTI_UP listens" "$MULTI_UP"
	echo "$LAST_CONN_LOG" | grep -qF "upstream=$MULTI_UP:" ||
		fail "$mode: multi-address: log names another upstream: $LAST_CONN_LOG"
	stop_zproxy
	ok "$mode: upstream $MULTI_NAME resolving to two addresses, the first refuses: connected to $MULTI_UP, byte-exact"
}

# c. connect timeout
connect_timeout() {
	local bhpid i
	zp_bg blackhole "$ZP_PEER" blackhole -t 60
	bhpid=$BG_PID
	BHPORT=$(wait_line "$T/blackhole.out" '^[0-9]+$' 10 "$bhpid") ||
		fail "$mode: blackhole peer: $(cat "$T/blackhole.err")"
	start_zproxy -v -m "$mode" -u "127.0.0.1:$BHPORT" --connect-timeout 0.5
	fd_baseline
	for i in 1 2; do
		closed_within 3 timeout "$mode: connect timeout, client $i"
		awk -v s="$CLOSE_S" 'BEGIN { exit !(s >= 0.4 && s <= 1.5) }' ||
			fail "$mode: --connect-timeout 0.5: client let go after ${CLOSE_S}s, expected ~0.5 s"
		expect_conn_log 'end=upstream-timeout' "$mode: connect timeout, client $i"
	done
	zproxy_alive "after connect timeouts"
	wait_fd_baseline 5 "$mode: after connect timeouts"
	stop_zproxy
	ok "$mode: --connect-timeout 0.5 against a full accept queue: client let go after ${CLOSE_S}s ($CLOSE_HOW), end=upstream-timeout, no fd leak"

	# A client that sends at once, while the upstream connect hangs: its
	# bytes must wait in its socket, not wake zproxy in a loop.
	local cpid c1 c2
	start_zproxy -v -m "$mode" -u "127.0.0.1:$BHPORT" --connect-timeout 2.5
	zp_bg eager "$ZP_PEER" connect 127.0.0.1 "$ZPORT" -g 64K --no-shut \
	    --expect-close 6 -t 30
	cpid=$BG_PID
	sleep 0.3	# the connect is pending: the stall itself
	c1=$(cpu_ticks "$ZPID")
	sleep 2
	c2=$(cpu_ticks "$ZPID")
	[ $((c2 - c1)) -le 10 ] ||
		fail "$mode: zproxy used $((c2 - c1)) CPU ticks in 2 s while connecting with client data waiting: busy loop"
	peer_wait "$cpid" eager 10 || fail "$mode: client with data, connect timeout: $(cat "$T/eager.out" "$T/eager.err")"
	expect_conn_log 'end=upstream-timeout' "$mode: connect timeout, client with data"
	stop_zproxy
	zp_stop "$bhpid"
	ok "$mode: client sends 64 KiB while the upstream connect hangs: $((c2 - c1)) CPU ticks in 2 s, let go after $(sed -n 's/^closed after //p' "$T/eager.out"), end=upstream-timeout"
}

# reset_case WHAT LOG-REGEX "UPSTREAM-OPTS" "CLIENT-OPTS": one connection
# through the running zproxy to a fresh upstream on $UPORT.
reset_case() {
	local what="$mode: $1" re=$2 upid
	# shellcheck disable=SC2086
	peer_listen r-up -p "$UPORT" --allow-reset $3 -t 30
	upid=$PEER_PID
	# shellcheck disable=SC2086
	peer r-client connect 127.0.0.1 "$ZPORT" --allow-reset $4 -t 30 ||
		fail "$what: client: $(cat "$T/r-client.err")"
	peer_wait "$upid" r-up 10 || fail "$what: upstream: $(cat "$T/r-up.err")"
	expect_conn_log "$re" "$what"
	zproxy_alive "after: $what"
	wait_fd_baseline 5 "$what"
	ok "$what: $(echo "$LAST_CONN_LOG" | grep -o 'up=[0-9]* down=[0-9]* .*end=[a-z-]*'), fds back to baseline"
}

# d. resets mid-transfer
resets() {
	UPORT=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" -u "127.0.0.1:$UPORT"
	healthy "$mode: warm-up before resets"
	fd_baseline
	reset_case "client resets after sending 4 MiB of 32" 'end=client-reset' \
	    "" "-g 32M --reset-after-send 4M"
	reset_case "upstream resets after receiving 4 MiB of 32" 'end=upstream-reset' \
	    "--reset-after-recv 4M" "-g 32M"
	reset_case "upstream resets after sending 4 MiB of 32" 'end=upstream-reset' \
	    "-g 32M --reset-after-send 4M --no-shut" "--no-shut"
	reset_case "client resets after receiving 4 MiB of 32" 'end=client-reset' \
	    "-g 32M --no-shut" "--reset-after-recv 4M --no-shut"
	healthy "$mode: after the resets"
	wait_fd_baseline 5 "$mode: after the resets and a healthy connection"
	stop_zproxy
	ok "$mode: after four resets zproxy relays byte-exact, no fd leak"
}

# e. churn: 200 clients that reset right after connecting, and 100
# connections whose upstream resets right after accepting, all at once:
# zproxy survives, every pair is closed, sockets back to baseline.
churn() {
	local upid n
	UPORT=$(free_port -b 127.0.0.1)
	start_zproxy -v -m "$mode" -u "127.0.0.1:$UPORT"
	healthy "$mode: warm-up before churn"
	fd_baseline
	peer_listen c-up -p "$UPORT" -n 200 --allow-reset -t 30
	upid=$PEER_PID
	peer churn connect 127.0.0.1 "$ZPORT" -n 200 -g 1K --reset-after-send 0 -t 30 ||
		fail "$mode: 200 clients resetting at once: $(cat "$T/churn.err")"
	wait_fd_baseline 10 "$mode: after 200 client resets" sockets
	zproxy_alive "after 200 client resets"
	zp_stop "$upid"
	peer_wait "$upid" c-up 5
	peer_listen c-up -p "$UPORT" -n 100 -g 1K --reset-after-send 0 -t 30
	upid=$PEER_PID
	peer churn connect 127.0.0.1 "$ZPORT" -n 100 --allow-reset --no-shut -t 30 ||
		fail "$mode: 100 upstream resets at once: $(cat "$T/churn.err")"
	peer_wait "$upid" c-up 10 || fail "$mode: upstream resetting: $(cat "$T/c-up.err")"
	wait_fd_baseline 10 "$mode: after 100 upstream resets" sockets
	zproxy_alive "after 100 upstream resets"
	n=$(grep -c ' conn=[0-9]' "$ZLOG")
	skip_conn_logs
	healthy "$mode: after the churn"
	stop_zproxy
	ok "$mode: 200 client resets and 100 upstream resets at once: $((n - 1)) pairs logged, no fd leak, then byte-exact"
}

for mode in $MODES; do
	subcase refused
	subcase multi_address
	subcase connect_timeout
	subcase resets
	subcase churn
done

zp_done
