#!/usr/bin/env bash
# The model's fabric capture read by an outside dissector: rc_pingpong and ud_pingpong run in
# process with --pcap, then tshark (Wireshark's InfiniBand dissector, through the ERF
# records) decodes the files. Fails on a malformed packet or an expert warning, or when the
# packets are not the ones the messages make: per round trip of a 2500-byte RC SEND at MTU
# 1024, SEND First/Middle/Last with consecutive PSNs and an ACK of the last PSN, each way; per
# UD message one SEND Only with the Q_Key and source QP in its DETH.
# Needs tshark (installs it when missing, as root on Debian).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v tshark >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark >/dev/null
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ts() { tshark -r "$1" "${@:2}" 2>/dev/null; }

cargo run --locked -q -p bareverbs-examples --bin rc_pingpong -- -n 3 -s 2500 -m 1024 -c \
  -p $((20000 + RANDOM % 20000)) --pcap "$dir/rc.pcap" >/dev/null
cargo run --locked -q -p bareverbs-examples --bin ud_pingpong -- -n 2 -s 512 -c \
  -p $((20000 + RANDOM % 20000)) --pcap "$dir/ud.pcap" >/dev/null

for f in rc ud; do
  n=$(ts "$dir/$f.pcap" -Y '_ws.malformed || _ws.expert' | wc -l)
  [ "$n" -eq 0 ] || bad "$f.pcap: $n malformed packets or expert warnings"
  n=$(ts "$dir/$f.pcap" -Y '!infiniband' | wc -l)
  [ "$n" -eq 0 ] || bad "$f.pcap: $n packets not decoded as InfiniBand"
done

# RC: opcode, PSN, destination QP, AETH syndrome; 3 round trips = 6 messages of 4 packets.
ts "$dir/rc.pcap" -T fields -E separator=' ' -e infiniband.bth.opcode -e infiniband.bth.psn \
  -e infiniband.lrh.dlid -e infiniband.lrh.slid -e infiniband.aeth.syndrome >"$dir/rc.txt"
[ "$(wc -l <"$dir/rc.txt")" -eq 24 ] || bad "rc: $(wc -l <"$dir/rc.txt") packets, expected 24"
awk 'NR % 4 == 1 { op0 = $1; psn0 = $2; d = $3; s = $4 }
     NR % 4 == 2 && !($1 == 1 && $2 == (psn0 + 1) % 16777216 && $3 == d) { print "bad middle", NR; bad = 1 }
     NR % 4 == 3 && !($1 == 2 && $2 == (psn0 + 2) % 16777216 && $3 == d) { print "bad last", NR; bad = 1 }
     NR % 4 == 0 && !($1 == 17 && $2 == (psn0 + 2) % 16777216 && $3 == s && $4 == d && $5 == 31) { print "bad ack", NR; bad = 1 }
     NR % 4 == 1 && op0 != 0 { print "bad first", NR; bad = 1 }
     END { exit bad }' "$dir/rc.txt" || bad "rc packets (above; the capture: $(head -8 "$dir/rc.txt" | tr '\n' ';'))"

# UD: 2 iterations, each a message each way: SEND Only (100), Q_Key 0x11111111, the
# source QP in the DETH.
ts "$dir/ud.pcap" -T fields -E separator=' ' -e infiniband.bth.opcode -e infiniband.deth.q_key \
  -e infiniband.deth.srcqp >"$dir/ud.txt"
[ "$(wc -l <"$dir/ud.txt")" -eq 4 ] || bad "ud: $(wc -l <"$dir/ud.txt") packets, expected 4"
awk '!($1 == 100 && $2 ~ /^0x0*11111111$/ && $3 != "") { print "bad UD packet", NR, $0; bad = 1 } END { exit bad }' \
  "$dir/ud.txt" || bad "ud packets (above)"

[ "$fail" -eq 0 ] || exit 1
echo "PASS: tshark decodes the model's captures as the InfiniBand packets the messages make"
