# contrib/bench/lib.sh - what the benchmark scripts share (sourced; the
# script defines log and die): the process tree below a PID, stopping it,
# its CPU time, a free port.

# Every process below PID (nginx's workers), PID included.
descendants() {
	{ cat /proc/[0-9]*/stat 2>/dev/null || true; } | awk -v root="$1" '
	{ s = $0; sub(/^.*\) /, "", s); split(s, f, " "); pp[$1] = f[2] }
	END {
		if (!(root in pp)) exit
		keep[root] = 1; more = 1
		while (more) { more = 0
			for (p in pp) if (!(p in keep) && (pp[p] in keep)) {
				keep[p] = 1; more = 1 } }
		for (p in keep) print p
	}'
}
stop_pid() {
	local p kids
	kids=$(descendants "$1" || true)
	kill -TERM "$1" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
	for p in $kids; do kill -KILL "$p" 2>/dev/null || true; done
}
# CPU nanoseconds of every thread of the tree below $1.
cpu_ns() {
	local p t sum=0 ns
	for p in $(descendants "$1"); do
		for t in /proc/"$p"/task/*/schedstat; do
			read -r ns _ <"$t" 2>/dev/null || continue
			sum=$((sum + ns))
		done
	done
	echo "$sum"
}

# A port below the ephemeral range that no TCP or UDP socket holds now.
free_port() {
	local lo port
	read -r lo _ </proc/sys/net/ipv4/ip_local_port_range
	for _ in $(seq 200); do
		port=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
		[ -z "$(ss -Htuan "sport = :$port")" ] && { echo "$port"; return; }
	done
	die "no free port"
}


# CPU nanoseconds of the processes of the tree below $1, from
# /proc/PID/stat (utime + stime, in clock ticks): unlike the threads'
# schedstat, it keeps what threads that ended took (stunnel's, one a
# connection), at the ticks' resolution.
cpu_proc_ns() {
	local p sum=0 hz
	hz=$(getconf CLK_TCK)
	for p in $(descendants "$1"); do
		sum=$((sum + $(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null |
		    awk '{ print $12 + $13 }' || echo 0)))
	done
	echo $((sum * 1000000000 / hz))
}
