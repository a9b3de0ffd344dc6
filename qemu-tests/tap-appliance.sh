#!/usr/bin/env bash
# Real Linux traffic against the packet appliance (examples/src/eth_appliance.rs), in this
# process's host kernel (root): the appliance runs on an in-process model HCA whose wire is
# joined to a TAP interface in a fresh network namespace; from that namespace Linux's own
# ping and a UDP client (python3 sockets) talk to it, resolving its MAC with ARP first. The
# wire is captured to a pcap file that tcpdump must read back as ARP, ICMP and UDP.
# Passes only when every ping and every datagram gets its answer, intact.
# Usage: tap-appliance.sh [WORKDIR]   (default /tmp/bareverbs-tap)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
work=${1:-/tmp/bareverbs-tap}
mkdir -p "$work"
[ "$(id -u)" = 0 ] || { echo "tap-appliance.sh: needs root (TAP interface, network namespace)" >&2; exit 2; }
command -v tcpdump >/dev/null || apt-get install -y -q tcpdump >/dev/null
command -v ping >/dev/null || apt-get install -y -q iputils-ping >/dev/null
command -v python3 >/dev/null || apt-get install -y -q python3 >/dev/null
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-examples --bin eth_appliance

ns=bvtap$$
tap=bvtap0
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ip netns add "$ns"
cleanup() {
  kill "$apid" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns exec "$ns" "$target/release/eth_appliance" --tap "$tap" --ip 10.77.0.2 --udp-port 7 \
  --seconds 60 --pcap "$work/tap.pcap" >"$work/appliance.log" 2>&1 &
apid=$!
for _ in $(seq 100); do
  ip netns exec "$ns" ip link show "$tap" >/dev/null 2>&1 && break
  sleep 0.1
done
ip netns exec "$ns" ip addr add 10.77.0.1/24 dev "$tap"
ip netns exec "$ns" ip link set "$tap" up
ip netns exec "$ns" ip link set lo up

if ip netns exec "$ns" ping -c 5 -W 2 10.77.0.2 >"$work/ping.log" 2>&1; then
  grep -q ' 0% packet loss' "$work/ping.log" || bad "ping lost replies: $(tail -2 "$work/ping.log")"
else
  bad "ping 10.77.0.2 failed: $(tail -3 "$work/ping.log")"
fi
cat "$work/ping.log"

ip netns exec "$ns" python3 - >"$work/udp.log" 2>&1 <<'EOF' || bad "UDP echo failed: $(cat "$work/udp.log")"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
for n, size in enumerate([1, 64, 700, 1472]):
    data = bytes((i * 7 + n) & 0xff for i in range(size))
    s.sendto(data, ("10.77.0.2", 7))
    got, peer = s.recvfrom(4096)
    if got != data or peer != ("10.77.0.2", 7):
        sys.exit(f"datagram {n}: {len(got)} bytes from {peer} differ")
    print(f"UDP echo of {size} bytes intact")
EOF
cat "$work/udp.log"
# Nothing answers on another UDP port.
ip netns exec "$ns" python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1)
s.sendto(b"x", ("10.77.0.2", 9))
try:
    s.recvfrom(100); raise SystemExit("port 9 answered")
except socket.timeout:
    pass' || bad "the appliance answered a port it does not serve"

kill -INT "$apid" 2>/dev/null || true
kill "$apid" 2>/dev/null || true
wait "$apid" 2>/dev/null || true
tcpdump -nr "$work/tap.pcap" >"$work/tap.txt" 2>/dev/null || bad "tcpdump cannot read $work/tap.pcap"
grep -q 'ARP, Reply 10.77.0.2 is-at' "$work/tap.txt" || bad "no ARP reply in the capture"
grep -q 'ICMP echo reply' "$work/tap.txt" || bad "no ICMP echo reply in the capture"
grep -q '10.77.0.2.7 > 10.77.0.1.[0-9]*: UDP' "$work/tap.txt" || bad "no UDP echo in the capture"
echo "capture: $(wc -l <"$work/tap.txt") frames ($work/tap.pcap)"
[ "$fail" = 0 ] && echo "PASS: Linux ping, ARP and UDP answered by the appliance on a model HCA through a TAP interface"
exit "$fail"
