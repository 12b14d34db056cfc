#!/usr/bin/env bash
#
# contrib/quickstart.sh - build zproxy and measure it in front of a local
# iperf3 server: throughput, and zproxy's CPU seconds per GiB relayed, in
# splice mode and in copy mode, both directions.
#
# usage: bash contrib/quickstart.sh [--time SECONDS] [--no-install]
#
#   --time SECONDS   length of each iperf3 run (default 5)
#   --no-install     never run apt-get; fail if something is missing
#
# On a fresh Debian 12 machine, as root, it installs what it needs (build
# tools, libevent, iperf3), builds zproxy in the repository if src/zproxy
# is not there yet, and prints a Markdown table on standard output (the
# progress goes to standard error). Everything it starts is on 127.0.0.1,
# on ports that were free, and is stopped when it exits.

set -euo pipefail

usage() {
	sed -n '7,10s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
}

duration=5
install=1
while [ $# -gt 0 ]; do
	case $1 in
	--time)
		[ $# -ge 2 ] || { usage >&2; exit 64; }
		duration=$2
		shift 2
		;;
	--time=*)
		duration=${1#--time=}
		shift
		;;
	--no-install)
		install=0
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "quickstart: unknown argument: $1" >&2
		usage >&2
		exit 64
		;;
	esac
done
case $duration in
'' | *[!0-9]* | 0)
	echo "quickstart: --time wants a whole number of seconds > 0" >&2
	exit 64
	;;
esac

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"
export LC_ALL=C

log() {
	printf 'quickstart: %s\n' "$*" >&2
}

die() {
	log "$*"
	exit 1
}

# ---- dependencies ------------------------------------------------------

zproxy=$top/src/zproxy

# Is Debian package $1 installed (not merely known to dpkg)?
have_pkg() {
	dpkg-query -W -f='${Status}' "$1" 2>/dev/null |
	    grep -q 'install ok installed'
}

# Debian packages that are missing: iperf3 always, the build tools and
# libraries only while zproxy is still to be built.
missing_packages() {
	local pkg
	command -v iperf3 >/dev/null 2>&1 || echo iperf3
	[ ! -x "$zproxy" ] || return 0
	for pkg in build-essential autoconf automake libtool pkg-config \
	    libevent-dev libcap-dev libseccomp-dev libssl-dev; do
		have_pkg "$pkg" || echo "$pkg"
	done
}

mapfile -t missing < <(missing_packages | sort -u)
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "$install" -eq 0 ]; then
		die "missing (and --no-install given): ${missing[*]}"
	fi
	[ "$(id -u)" -eq 0 ] ||
	    die "missing: ${missing[*]}; run as root or install them yourself"
	log "installing: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	{
		apt-get update
		apt-get install -y --no-install-recommends "${missing[@]}"
	} </dev/null >&2
fi

# ---- build -------------------------------------------------------------

if [ ! -x "$zproxy" ]; then
	log "building zproxy in $top"
	{
		if [ ! -f Makefile ]; then
			autoreconf -fi
			./configure
		fi
		make -j"$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
	} </dev/null >&2
fi
[ -x "$zproxy" ] || die "no $zproxy after the build"

# ---- helpers -----------------------------------------------------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/zp-quickstart.XXXXXX")
pids=()

cleanup() {
	local pid
	for pid in "${pids[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Is anything bound to local TCP port $1 (any address, any state)?
port_in_use() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'FNR > 1 && substr($2, length($2) - 4) == p \
	    { found = 1 } END { exit !found }' /proc/net/tcp /proc/net/tcp6 \
	    2>/dev/null
}

# Is something listening on 127.0.0.1:$1?
port_listening() {
	local hex
	hex=$(printf '0100007F:%04X' "$1")
	awk -v a="$hex" 'FNR > 1 && $2 == a && $4 == "0A" { found = 1 }
	    END { exit !found }' /proc/net/tcp
}

# A port that nothing uses now, between 10000 and the ephemeral range.
free_port() {
	local lo port try
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
	[ "$lo" -gt 11024 ] || lo=30000
	for try in $(seq 1 100); do
		port=$((10000 + (RANDOM + try) % (lo - 10000)))
		if ! port_in_use "$port"; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

# Wait until pid $1 listens on 127.0.0.1:$2; fail if it dies first or
# after 10 seconds.
wait_listening() {
	local pid=$1 port=$2 deadline
	deadline=$((SECONDS + 10))
	while ! port_listening "$port"; do
		kill -0 "$pid" 2>/dev/null || return 1
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.05
	done
}

# Stop a process this script started, and forget it.
stop_pid() {
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	for i in "${!pids[@]}"; do
		[ "${pids[$i]}" != "$pid" ] || unset 'pids[i]'
	done
}

# Start a listener on a free port, and retry on another port when it
# cannot listen there. $1 names it, $2 is a function that execs the
# program for the port given as its argument. Sets started_pid and
# started_port.
start_listener() {
	local name=$1 cmdfn=$2 port pid try out
	for try in 1 2 3 4 5; do
		port=$(free_port) || die "no free port for $name"
		out=$tmp/$name.$port.log
		"$cmdfn" "$port" </dev/null >"$out" 2>&1 &
		pid=$!
		pids+=("$pid")
		if wait_listening "$pid" "$port"; then
			started_pid=$pid
			started_port=$port
			return 0
		fi
		log "$name did not listen on 127.0.0.1:$port (try $try):"
		sed 's/^/    /' "$out" >&2 || true
		stop_pid "$pid"
	done
	die "could not start $name"
}

iperf_server_cmd() {
	exec iperf3 -s -B 127.0.0.1 -p "$1"
}

zproxy_mode=splice
zproxy_cmd() {
	exec "$zproxy" -q -l "127.0.0.1:$1" -u "127.0.0.1:$iperf_port" \
	    -m "$zproxy_mode"
}

# utime + stime of pid $1, in clock ticks.
cpu_ticks() {
	local stat rest
	stat=$(cat "/proc/$1/stat") || return 1
	rest=${stat##*) }	# comm may hold spaces and parentheses
	# shellcheck disable=SC2086
	set -- $rest
	# fields 3.. are now $1..: utime is field 14, stime field 15
	echo $((${12} + ${13}))
}

# Pull end.sum_received.{bytes,seconds} out of iperf3's --json output.
json_sum_received() {
	awk '
		/"sum_received"[ \t]*:/ { in_sum = 1; next }
		in_sum && /"bytes"[ \t]*:/ { gsub(/[^0-9.]/, "", $2); b = $2 }
		in_sum && /"seconds"[ \t]*:/ { gsub(/[^0-9.eE+-]/, "", $2); s = $2 }
		in_sum && /}/ { in_sum = 0 }
		END { if (b == "" || s == "") exit 1; print b, s }
	' "$1"
}

clk_tck=$(getconf CLK_TCK)
rows=()

# One iperf3 run against port $2; $1 names the arm, $3 is "" or "-R",
# $4 is the zproxy pid to measure (or empty).
measure() {
	local arm=$1 port=$2 rev=$3 zpid=$4 json t0 t1 bytes secs dir deadline
	json=$tmp/$arm$rev.json
	if [ -n "$rev" ]; then
		dir="download (-R)"
	else
		dir="upload"
	fi
	log "iperf3 ${duration}s, $arm, $dir"
	[ -z "$zpid" ] || t0=$(cpu_ticks "$zpid")
	deadline=$((SECONDS + 10))
	# shellcheck disable=SC2086
	until iperf3 -c 127.0.0.1 -p "$port" -t "$duration" --json $rev \
	    >"$json" 2>"$json.err" </dev/null; do
		# The server may still be tearing down the previous test.
		if grep -q 'busy' "$json" && [ "$SECONDS" -lt "$deadline" ]; then
			sleep 0.2
			continue
		fi
		cat "$json.err" >&2
		grep '"error"' "$json" >&2 || true
		die "iperf3 failed ($arm, $dir)"
	done
	[ -z "$zpid" ] || t1=$(cpu_ticks "$zpid")
	read -r bytes secs < <(json_sum_received "$json") ||
	    die "no end.sum_received in iperf3's output ($arm, $dir)"
	if [ -n "$zpid" ]; then
		rows+=("$(awk -v arm="$arm" -v dir="$dir" -v b="$bytes" \
		    -v s="$secs" -v t="$((t1 - t0))" -v hz="$clk_tck" 'BEGIN {
			cpu = t / hz
			gib = b / 1073741824
			printf "| %s | %s | %.2f | %.2f | %.3f |", arm, dir,
			    b * 8 / s / 1e9, cpu, (gib > 0 ? cpu / gib : 0)
		}')")
	else
		rows+=("$(awk -v arm="$arm" -v dir="$dir" -v b="$bytes" \
		    -v s="$secs" 'BEGIN {
			printf "| %s | %s | %.2f | - | - |", arm, dir,
			    b * 8 / s / 1e9
		}')")
	fi
}

# ---- run ---------------------------------------------------------------

start_listener iperf3-server iperf_server_cmd
iperf_port=$started_port
log "iperf3 server on 127.0.0.1:$iperf_port"

measure direct "$iperf_port" "" ""
measure direct "$iperf_port" "-R" ""

for zproxy_mode in splice copy; do
	start_listener "zproxy-$zproxy_mode" zproxy_cmd
	zpid=$started_pid
	zport=$started_port
	log "zproxy -m $zproxy_mode on 127.0.0.1:$zport (pid $zpid)"
	measure "zproxy $zproxy_mode" "$zport" "" "$zpid"
	measure "zproxy $zproxy_mode" "$zport" "-R" "$zpid"
	stop_pid "$zpid"
done

echo
echo "$("$zproxy" -V 2>/dev/null | head -n 1 || true)," \
    "iperf3 ${duration}s per run, 127.0.0.1, $(uname -sr)," \
    "$(getconf _NPROCESSORS_ONLN) CPUs"
echo
echo "| arm | direction | Gbit/s | zproxy CPU s | CPU-s per GiB relayed |"
echo "|---|---|---:|---:|---:|"
printf '%s\n' "${rows[@]}"
