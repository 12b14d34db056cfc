# netns.sh - a private network of three hosts for the transparent-mode
# tests: a client, the proxy and a server, joined by veth pairs.
#
# Source it FIRST, before lib.sh:
#
#   . "${ZP_TESTLIB%/*}/netns.sh" || exit 1
#   . "$ZP_TESTLIB" || exit 1
#
# It runs the test again inside a network and mount namespace of its own
# (`unshare --net --mount`, with `--user --map-root-user` when not root),
# so that its addresses, routes and nft rules touch nothing outside, and
# two tests can use the same names at once. Where namespaces cannot be
# made the test fails, loudly: it never skips.
#
# The test's own shell (and zproxy, started by start_zproxy as usual) is
# the proxy host. zp_netns_topology then adds, as in docs/DESIGN.md and
# ../shared/TRANSPARENT.md:
#
#   zc (client)  10.9.0.2/24  fd09::2/64 -- zc0 | zp0 -- 10.9.0.1   fd09::1
#   zs (server)  10.10.0.2/24 fd10::2/64 -- zs0 | zp1 -- 10.10.0.1  fd10::1
#
# with the proxy host forwarding, zc routed through 10.9.0.1/fd09::1 and
# zs through 10.10.0.1/fd10::1; `in_zc CMD...` and `in_zs CMD...` run a
# command on those hosts. ZP_NETNS_USERNS is 1 when the namespaces hang off
# a user namespace (not root): users other than root do not exist there,
# so ZP_USER is cleared.

if [ -z "${ZP_NETNS_INNER:-}" ]; then
	zp_netns_how=(unshare --net --mount)
	[ "$(id -u)" = 0 ] || zp_netns_how=(unshare --user --map-root-user --net --mount)
	if ! zp_netns_err=$("${zp_netns_how[@]}" true 2>&1); then
		echo "not ok - ${0##*/}: cannot make network namespaces (${zp_netns_how[*]}): $zp_netns_err"
		echo "# the transparent-mode tests need them: run as root, or allow user namespaces (kernel.unprivileged_userns_clone=1)"
		exit 1
	fi
	ZP_NETNS_USERNS=0
	[ "$(id -u)" = 0 ] || ZP_NETNS_USERNS=1
	export ZP_NETNS_USERNS
	ZP_NETNS_INNER=1 exec "${zp_netns_how[@]}" -- bash "$0" "$@"
fi

# Inside now. `ip netns` keeps its names under /run/netns: a tmpfs there
# (or over the whole of /run, where a user namespace may not create the
# directory) keeps them this test's own; the mount namespace is private.
zp_netns_run() {
	if mkdir -p /run/netns 2>/dev/null &&
	    mount -t tmpfs zp-netns /run/netns 2>/dev/null; then
		return 0
	fi
	mount -t tmpfs zp-run /run && mkdir /run/netns
}
zp_netns_err=$(zp_netns_run 2>&1) || {
	echo "not ok - ${0##*/}: cannot mount a private /run/netns: $zp_netns_err"
	exit 1
}
[ "${ZP_NETNS_USERNS:-0}" = 1 ] && ZP_USER=

for zp_netns_tool in ip nft; do
	command -v "$zp_netns_tool" >/dev/null || {
		echo "not ok - ${0##*/}: $zp_netns_tool is not installed (iproute2, nftables)"
		exit 1
	}
done

in_zc() { ip netns exec zc "$@"; }
in_zs() { ip netns exec zs "$@"; }

# zp_netns_topology: build the three hosts; fail() on any error.
zp_netns_topology() {
	local out
	out=$( {
		set -e
		ip link set lo up
		ip netns add zc
		ip netns add zs
		ip link add zc0 netns zc type veth peer name zp0
		ip link add zs0 netns zs type veth peer name zp1
		ip addr add 10.9.0.1/24 dev zp0
		ip addr add fd09::1/64 dev zp0 nodad
		ip addr add 10.10.0.1/24 dev zp1
		ip addr add fd10::1/64 dev zp1 nodad
		ip link set zp0 up
		ip link set zp1 up
		ip -n zc link set lo up
		ip -n zc addr add 10.9.0.2/24 dev zc0
		ip -n zc addr add fd09::2/64 dev zc0 nodad
		ip -n zc link set zc0 up
		ip -n zc route add default via 10.9.0.1
		ip -n zc -6 route add default via fd09::1
		ip -n zs link set lo up
		ip -n zs addr add 10.10.0.2/24 dev zs0
		ip -n zs addr add fd10::2/64 dev zs0 nodad
		ip -n zs link set zs0 up
		ip -n zs route add default via 10.10.0.1
		ip -n zs -6 route add default via fd10::1
		sysctl -qw net.ipv4.ip_forward=1
		sysctl -qw net.ipv6.conf.all.forwarding=1
	} 2>&1 ) || fail "cannot build the namespace topology: $out"
}

# zp_netns_local_routes: on the proxy host, deliver packets marked 1 to
# local sockets whatever their destination (TPROXY, and the return path
# of --source client): the policy route of docs/TRANSPARENT.md's recipes.
zp_netns_local_routes() {
	local out
	out=$( {
		set -e
		ip rule add fwmark 1 lookup 100
		ip route add local 0.0.0.0/0 dev lo table 100
		ip -6 rule add fwmark 1 lookup 100
		ip -6 route add local ::/0 dev lo table 100
	} 2>&1 ) || fail "cannot add the fwmark 1 local routes: $out"
}

# ns_listening NS PORT: does a socket LISTEN on PORT in namespace NS?
ns_listening() {
	local hex
	hex=$(printf '%04X' "$2")
	ip netns exec "$1" cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
		awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }'
}

# ns_wait_port NS PORT [SECS]: wait until something listens on PORT in NS.
ns_wait_port() {
	local deadline=$(( $(date +%s%N) / 1000000 + ${3:-10} * 1000 ))
	until ns_listening "$1" "$2"; do
		[ "$(( $(date +%s%N) / 1000000 ))" -ge "$deadline" ] && return 1
		sleep 0.02
	done
}
