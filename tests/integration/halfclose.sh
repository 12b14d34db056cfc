#!/bin/bash
# halfclose.sh - a FIN is carried each way, after every byte before it, and
# the other direction goes on:
#   a. client sends 32 MiB and shuts its write side; the upstream reads to
#      EOF, only then answers 32 MiB and closes: the client gets it all;
#   b. an upstream that sends 16 MiB and closes without reading anything;
#      the client (which never shuts down) gets every byte and the EOF;
#   c. the other way round: the upstream sends 8 MiB and shuts its write
#      side first; the client reads to EOF, then sends 8 MiB and closes;
#   d. trap 1: 64 MiB + SHUT_WR while the upstream stalls 1 s, so that the
#      FIN arrives while the pipe/buffer is full; the reply (after EOF)
#      proves the FIN did not overtake bytes;
#   e. trap 3: the upstream sends 16 MiB and shuts its write side at once,
#      but reads only after 1 s, while the client sends 32 MiB: zproxy must
#      keep relaying upward after the downward FIN, and must not close the
#      client while its bytes are unread (that would be a RST, which can
#      destroy the 16 MiB already queued to the client).
# SHA-256 both ways, end=closed, byte counts in the log. Splice, splice with
# --splice-min 0 and copy.
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1

mkdata a.up 32M
mkdata a.down 32M
mkdata b.down 16M
mkdata c.up 8M
mkdata c.down 8M
mkdata d.up 64M
mkdata d.down 1M
mkdata e.up 32M
mkdata e.down 16M

# run_case NAME WHAT "UPSTREAM-OPTS" "CLIENT-OPTS" UPFILE DOWNFILE
# UPFILE/DOWNFILE may be "-" for "nothing that way".
run_case() {
	local name=$1 what="$mode: $2" uopts=$3 copts=$4 upf=$5 downf=$6 t0 ms
	local usend=() urecv=() csend=() crecv=() upid
	[ "$downf" = - ] || usend=(-s "$T/$downf")
	[ "$upf" = - ] || { csend=(-s "$T/$upf"); urecv=(-o "$T/$name.got-up"); }
	[ "$downf" = - ] || crecv=(-o "$T/$name.got-down")
	# shellcheck disable=SC2086
	peer_listen "$name-up" $uopts "${usend[@]}" "${urecv[@]}" -t 60
	upid=$PEER_PID
	start_zproxy -v "${MODE_ARGS[@]}" -u "127.0.0.1:$PEER_PORT"
	t0=$(now_ms)
	# shellcheck disable=SC2086
	peer "$name-client" connect 127.0.0.1 "$ZPORT" $copts "${csend[@]}" \
	    "${crecv[@]}" -t 60 ||
		fail "$what: client: $(cat "$T/$name-client.err")"
	peer_wait "$upid" "$name-up" 30 ||
		fail "$what: upstream: $(cat "$T/$name-up.err")"
	ms=$(( $(now_ms) - t0 ))
	[ "$upf" = - ] || same_file "$T/$upf" "$T/$name.got-up" "$what: client->upstream"
	[ "$downf" = - ] || same_file "$T/$downf" "$T/$name.got-down" "$what: upstream->client"
	local up=0 down=0
	[ "$upf" = - ] || up=$(stat -c %s "$T/$upf")
	[ "$downf" = - ] || down=$(stat -c %s "$T/$downf")
	expect_conn_log "up=$up down=$down .*end=closed" "$what"
	stop_zproxy
	ok "$what (${ms} ms)"
	rm -f "$T/$name.got-up" "$T/$name.got-down"
}

for mode in $MODES_ALL; do
	set_mode "$mode"
	subcase run_case a "client SHUT_WR after 32 MiB, upstream answers 32 MiB after EOF" \
	    "--after-eof" "" a.up a.down
	subcase run_case b "upstream sends 16 MiB and closes unread, client never shuts" \
	    "--no-read" "--no-shut" - b.down
	subcase run_case c "upstream SHUT_WR after 8 MiB, client answers 8 MiB after EOF" \
	    "" "--after-eof" c.up c.down
	subcase run_case d "trap 1: 64 MiB + SHUT_WR into a 1 s stall, 1 MiB reply after EOF" \
	    "--after-eof --read-delay 1" "" d.up d.down
	subcase run_case e "trap 3: upstream sends 16 MiB + SHUT_WR at once, reads 32 MiB after 1 s" \
	    "--read-delay 1" "" e.up e.down
done

zp_done
