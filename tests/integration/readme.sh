#!/bin/bash
# readme.sh - the documents stay true:
#   a. every shell block of README.md and docs/*.md marked with a line
#      "<!-- readme-test -->" just before it runs as written, with host
#      names, ports and system paths made local (below): a block must
#      either keep running with zproxy listening, or exit 0 leaving one
#      (--daemon); a message sent through it must reach a real collector
#      (rsyslog); a block marked "<!-- readme-test client -->" right
#      after one runs against it and must exit 0 with its message
#      delivered; SIGTERM then stops what the block started, which must
#      exit 0;
#   b. the option tables of docs/OPTIONS.md are `zproxy --help`: the same
#      groups in the same order, the same options spelled the same way;
#   c. the metric table of docs/METRICS.md is a live /metrics scrape
#      (with --framing, --mirror, --spool and a UDP listener, then with a
#      tls@ listener, so that every family is there): the same names,
#      types and label names.
# What a block gets instead of what it names:
#   logs-a.example.net:514, collector.example.net:514  collector A
#   logs-b.example.net:514                             collector B
#   siem-new.example.net:514                           collector C
#   -l :514, -l :5140, --port 5140                     a free port
#   -l udp@:514, --port 514 (logger --udp)             the same port, UDP
#   listen :514, listen :5140 (a file's line)          a free port
#   127.0.0.1:9514 (--stats)                           a free port
#   /var/log/zproxy, /var/spool/zproxy, /run/zproxy,
#   /etc/zproxy                                        below $T
#   zproxy                                             $ZPROXY
. "${ZP_TESTLIB:?ZP_TESTLIB must name tests/integration/lib.sh}" || exit 1
. "${ZP_TESTLIB%/*}/collectorlib.sh" || exit 1

TOP=$(cd "${ZP_TESTLIB%/*}/../.." && pwd)
MARK=ZP_README_RUN=$T

# marked FILE: print each marked block of FILE as "@@ KIND LINE" then
# its lines (KIND: run or client).
marked() {
	awk '
	/^ *<!-- readme-test( client)? -->$/ { kind = ($0 ~ /client/) ? "client" : "run"; want = NR + 1; next }
	want == NR && /^ *```sh$/ { inb = 1; print "@@ " kind " " NR; next }
	inb && /^ *```$/ { inb = 0; next }
	inb { sub(/^  /, ""); print }
	' "$1"
}

# localise: the block on stdin, made local.
localise() {
	sed -e "s/logs-a\.example\.net:514/127.0.0.1:$CA/g" \
	    -e "s/collector\.example\.net:514/127.0.0.1:$CA/g" \
	    -e "s/logs-b\.example\.net:514/127.0.0.1:$CB/g" \
	    -e "s/siem-new\.example\.net:514/127.0.0.1:$CC/g" \
	    -e "s/-l :514\b/-l 127.0.0.1:$ZP/g; s/-l :5140\b/-l 127.0.0.1:$ZP/g" \
	    -e "s/-l udp@:514\b/-l udp@127.0.0.1:$ZP/g" \
	    -e "s/--port 514\(0\)\{0,1\}\b/--port $ZP/g" \
	    -e "s/^listen :514\(0\)\{0,1\}$/listen 127.0.0.1:$ZP/" \
	    -e "s#/etc/zproxy#$T/etc/zproxy#g" \
	    -e "s/127\.0\.0\.1:9514/127.0.0.1:$SP/g" \
	    -e "s#/var/log/zproxy#$T/var/log/zproxy#g" \
	    -e "s#/var/spool/zproxy#$T/var/spool/zproxy#g" \
	    -e "s#/run/zproxy#$T/run/zproxy#g" \
	    -e "s#^zproxy #\"\$ZPROXY\" #; s#\\(^\\|[;&|] *\\)zproxy #\\1\"\$ZPROXY\" #g"
}

# ours_marked: the PIDs of processes a block started (the daemons too):
# those whose environment holds $MARK.
ours_marked() {
	local e p
	for e in /proc/[0-9]*/environ; do
		p=${e#/proc/}; p=${p%/environ}
		{ tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qx "$MARK" && echo "$p"
	done
}

# stop_marked WHAT: SIGTERM every process a block started; each must be
# gone within 10 s of its SIGTERM. A process the first look missed (its
# environ unreadable for a moment, or a daemon's child forked since) is
# sent its own when it shows, and said: a process signalled that stays
# is a failure.
stop_marked() {
	local p deadline sent=" "
	for p in $(ours_marked); do
		kill -TERM "$p" 2>/dev/null
		sent+="$p "
	done
	deadline=$(( $(now_ms) + 10000 ))
	while [ -n "$(ours_marked)" ]; do
		for p in $(ours_marked); do
			[[ $sent == *" $p "* ]] && continue
			note "$1: $p was not seen at the first look: SIGTERM now"
			kill -TERM "$p" 2>/dev/null
			sent+="$p "
			deadline=$(( $(now_ms) + 10000 ))
		done
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$1: still running 10s after SIGTERM: $(ours_marked | tr '\n' ' ')"
		sleep 0.05
	done
}

# delivered WHAT TEXT: TEXT must reach collector A, B or C within 10 s.
delivered() {
	local deadline=$(( $(now_ms) + 10000 ))
	until cat "$T"/c?.log 2>/dev/null | grep -qF -- "$2"; do
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$1: '$2' reached no collector: $(tail -n 5 "$T/block.err")"
		sleep 0.05
	done
}

# run_block WHAT FILE: run the block in FILE; leave it serving.
run_block() {
	local what=$1 deadline rc
	: >"$T/block.err"
	env "$MARK" ZPROXY="$ZPROXY" bash -e "$2" >"$T/block.out" 2>"$T/block.err" &
	BLOCK_PID=$!
	ZP_PIDS+=("$BLOCK_PID")
	deadline=$(( $(now_ms) + 15000 ))
	until listening "$ZP"; do
		if ! alive "$BLOCK_PID"; then
			wait "$BLOCK_PID"; rc=$?
			[ "$rc" = 0 ] || fail "$what: exited $rc: $(head -n 3 "$T/block.err")"
			listening "$ZP" || fail "$what: exited 0, nothing listens on $ZP"
			break
		fi
		[ "$(now_ms)" -lt "$deadline" ] ||
			fail "$what: nothing listens on $ZP within 15s: $(head -n 3 "$T/block.err")"
		sleep 0.05
	done
}

examples() {
	local f kind line n=0 msg what rc
	start_collector rsyslog ca; CA=$C_PORT
	start_collector rsyslog cb; CB=$C_PORT
	start_collector rsyslog cc; CC=$C_PORT
	for f in "$TOP/README.md" "$TOP"/docs/*.md; do
		marked "$f" >"$T/marked"
		grep -q '^@@ ' "$T/marked" || continue
		awk -v d="$T/blk" '/^@@ / { n++; f = d "." n "." $2 "." $3; next } { print > f }' "$T/marked"
		for b in $(ls "$T"/blk.* 2>/dev/null | sort -t. -k2,2n); do
			kind=$(echo "$b" | awk -F. '{ print $(NF-1) }')
			line=${b##*.}
			what="${f#"$TOP"/}:$line"
			ZP=$(free_port) && SP=$(free_port) || fail "zp-peer port failed"
			if [ "$kind" = run ]; then
				[ -n "${SERVING:-}" ] && stop_marked "$SERVING"
				localise <"$b" >"$T/block.sh"
				# the previous block's run is over: its port too
				LAST_ZP=$ZP
				run_block "$what" "$T/block.sh"
				msg="readme-test-$n-$RANDOM$RANDOM"
				exec 3<>"/dev/tcp/127.0.0.1/$ZP" || fail "$what: cannot connect to $ZP"
				printf '<13>%s zp-test readme: %s\n' "$(date '+%b %e %H:%M:%S')" "$msg" >&3
				exec 3>&-
				delivered "$what" "$msg"
				SERVING=$what
				n=$((n + 1))
				ok "$what: runs as written (made local), relays to a collector"
			else
				[ -n "${SERVING:-}" ] || fail "$what: a client block with no block before it"
				ZP=$LAST_ZP
				localise <"$b" >"$T/client.sh"
				env "$MARK" timeout 20 bash -e "$T/client.sh" >"$T/client.out" 2>"$T/client.err"
				rc=$?
				[ "$rc" = 0 ] || fail "$what: exited $rc: $(head -n 3 "$T/client.err")"
				msg=$(grep -o '"[^"]*"' "$b" | tail -n 1 | tr -d '"')
				delivered "$what" "$msg"
				n=$((n + 1))
				ok "$what: runs as written against the block before it; '$msg' delivered"
			fi
		done
		[ -n "${SERVING:-}" ] && stop_marked "$SERVING"
		SERVING=
		rm -f "$T"/blk.*
	done
	[ "$n" -ge 8 ] || fail "only $n marked blocks found (the README's examples lost their markers?)"
	sanitizer_clean "$T/block.err" || fail "sanitizer report"
}

# b. docs/OPTIONS.md's tables against --help: "GROUP<TAB>SPEC" lines.
help_options() {
	"$ZPROXY" --help | awk '
	BEGIN { group = "-" }
	/^[A-Z][A-Za-z ]*:$/ { group = substr($0, 1, length($0) - 1); next }
	/^(  -[A-Za-z], --|      --)[a-z]/ {
		line = $0; sub(/^ +/, "", line)
		n = split(line, w, " ")
		spec = ""; i = 1
		if (w[1] ~ /^-[A-Za-z],$/) { spec = w[1] " "; i = 2 }
		spec = spec w[i]
		# its value: the next word, one space away, shaped like one
		if (i < n && index(line, w[i] " " w[i + 1]) &&
		    w[i + 1] ~ /[A-Z|:\[]/ && w[i + 1] !~ /^[A-Z][a-z]/ &&
		    w[i + 1] != "TCP")
			spec = spec " " w[i + 1]
		print group "\t" spec
	}'
}

# The tables: a line "Group:" before a table names its group; a table
# with none before it is the first, unnamed one ("-").
doc_options() {
	awk '
	BEGIN { group = "-" }
	/^[A-Z][A-Za-z ]*:$/ { group = substr($0, 1, length($0) - 1); next }
	/^\| `-/ {
		s = $0; sub(/^\| `/, "", s); sub(/` \|.*/, "", s)
		gsub(/\\\|/, "|", s)
		print group "\t" s
	}' "$TOP/docs/OPTIONS.md"
}

options_table() {
	help_options >"$T/help.tsv"
	doc_options >"$T/doc.tsv"
	[ "$(grep -c . "$T/help.tsv")" -ge 50 ] || fail "--help: only $(grep -c . "$T/help.tsv") options read"
	diff -u "$T/help.tsv" "$T/doc.tsv" >"$T/options.diff" ||
		fail "docs/OPTIONS.md's tables differ from zproxy --help (- help, + docs): $(grep '^[-+][^-+]' "$T/options.diff" | head -n 8 | tr '\n' ';')"
	ok "docs/OPTIONS.md: $(grep -c . "$T/doc.tsv") options in $(cut -f1 "$T/doc.tsv" | uniq | wc -l) groups, as zproxy --help has them"
}

# c. docs/METRICS.md's table against a scrape: "NAME TYPE LABELS".
metrics_table() {
	local up mp sp
	peer_listen up -n 0 --allow-reset -t 60; up=$PEER_PORT
	peer_listen mirror -n 0 --allow-reset -t 60; mp=$PEER_PORT
	sp=$(free_port) || fail "zp-peer port failed"
	mkdir -p "$T/spool"
	zp_user_dir "$T/spool"
	start_zproxy -l "127.0.0.1:@PORT@" -l "udp@127.0.0.1:@PORT@" \
	    -u "127.0.0.1:$up" --framing lf --mirror "127.0.0.1:$mp" \
	    --spool "$T/spool" --stats "127.0.0.1:$sp"
	wait_port "$sp" 10 || fail "--stats does not listen"
	curl -sS -m 5 -o "$T/metrics" "http://127.0.0.1:$sp/metrics" ||
		fail "scrape failed"
	stop_zproxy
	# The TLS families need a tls@ listener, which --spool refuses.
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	    -keyout "$T/tls.key" -out "$T/tls.pem" -days 30 -subj /CN=localhost \
	    2>"$T/openssl.err" || fail "openssl req: $(cat "$T/openssl.err")"
	sp=$(free_port) || fail "zp-peer port failed"
	start_zproxy -l "tls@127.0.0.1:@PORT@" -u "127.0.0.1:$up" \
	    --tls-cert "$T/tls.pem" --tls-key "$T/tls.key" \
	    --stats "127.0.0.1:$sp"
	wait_port "$sp" 10 || fail "--stats does not listen"
	curl -sS -m 5 "http://127.0.0.1:$sp/metrics" >>"$T/metrics" ||
		fail "scrape failed"
	awk '
	/^# TYPE / { type[$3] = $4; if (!($3 in labels)) labels[$3] = ""; next }
	/^#/ { next }
	{
		name = $1; l = ""
		if (match(name, /\{.*\}/)) {
			s = substr(name, RSTART + 1, RLENGTH - 2)
			name = substr(name, 1, RSTART - 1)
			n = split(s, kv, /",/)
			for (i = 1; i <= n; i++) { k = kv[i]; sub(/=.*/, "", k); l = l (l == "" ? "" : ",") k }
		}
		if (l != "") labels[name] = l
	}
	END { for (m in type) print m, type[m], (labels[m] == "" ? "-" : labels[m]) }
	' "$T/metrics" | sort >"$T/scrape.txt"
	awk -F' \\| ' '
	/^\| `zproxy_/ {
		name = $1; sub(/^\| `/, "", name); sub(/`$/, "", name)
		l = $3; sub(/ *=.*/, "", l)
		keys = ""
		while (match(l, /`[a-z_]+`/)) {
			keys = keys (keys == "" ? "" : ",") substr(l, RSTART + 1, RLENGTH - 2)
			l = substr(l, RSTART + RLENGTH)
		}
		print name, $2, (keys == "" ? "-" : keys)
	}' "$TOP/docs/METRICS.md" | sort >"$T/doc-metrics.txt"
	stop_zproxy
	[ "$(grep -c . "$T/scrape.txt")" -ge 50 ] || fail "/metrics: only $(grep -c . "$T/scrape.txt") families"
	diff -u "$T/scrape.txt" "$T/doc-metrics.txt" >"$T/metrics.diff" ||
		fail "docs/METRICS.md's table differs from /metrics (- scrape, + docs): $(grep '^[-+][^-+]' "$T/metrics.diff" | head -n 8 | tr '\n' ';')"
	ok "docs/METRICS.md: $(grep -c . "$T/doc-metrics.txt") families, names, types and labels as /metrics serves them"
}

subcase options_table
subcase metrics_table
subcase examples

zp_done
