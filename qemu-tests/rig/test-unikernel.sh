#!/usr/bin/env bash
# The bareverbs unikernel (examples/unikernel) boots under the rig's QEMU with two model HCAs
# (vfio-user-pci, one model server) and no Linux: bring-up of both, devinfo, an RC ping-pong
# and a UD exchange with data checked, teardown with every page back, exit through
# isa-debug-exit. Fails on a non-zero exit, the deadline, a missing console line, or a model
# HCA not clean at the end.
# With UK_ETH=1 the model's ports are Ethernet and the image runs the packet appliance on one
# HCA and a peer on the other instead (ARP, pings and UDP echoes checked byte for byte).
# Usage: test-unikernel.sh [WORKDIR]   (default /tmp/bareverbs-unikernel, -eth with UK_ETH)
#   UK_PCAP=FILE: the model server also captures its fabric to FILE (pcap)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
eth=${UK_ETH:-}
work=${1:-/tmp/bareverbs-unikernel${eth:+-eth}}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
(cd "$top/examples/unikernel" && cargo build --release --locked -q)
cp "$top/examples/unikernel/target/x86_64-unknown-none/release/bareverbs-unikernel" "$work/image.elf"

rm -f "$work"/mlx5-*.sock "$work"/hca*.trace
"$target/release/mlx5-vfio-user" --socket "$work/mlx5-0.sock" --socket "$work/mlx5-1.sock" \
  --trace-dir "$work" ${UK_PCAP:+--pcap "$UK_PCAP"} ${eth:+--eth} >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT

if [ -n "$eth" ]; then
  traffic=(--expect "eth: ARP reply from the appliance, MAC checked" --expect "eth: 20 pings answered, checked byte for byte"
    --expect "eth: 20 UDP echoes checked byte for byte")
else
  traffic=(--expect "state:		PORT_ACTIVE (4)" --expect "rc: 200 round trips checked byte for byte"
    --expect "ud: 50 exchanges checked byte for byte")
fi
rc=0
"$here/run-guest.sh" --kernel "$work/image.elf" --mode unikernel --debug-exit \
  --vfio-user "$work/mlx5-0.sock" --vfio-user "$work/mlx5-1.sock" \
  --timeout "${TIMEOUT:-600}" --quiet --log "$work/guest.log" \
  --expect "hca_id:	mlx5_0" --expect "hca_id:	mlx5_1" "${traffic[@]}" \
  --expect "teardown: both HCAs down, every DMA page back" --expect "stack: " \
  --expect "bareverbs unikernel: PASS" || rc=$?
wait "$spid" 2>/dev/null || true
trap - EXIT

echo "== console"
grep -av '^#' "$work/guest.log" | tr -d '\r' || true
[ "$rc" -eq 0 ] || bad "the unikernel run failed (status $rc)"
for t in "$work/hca0.trace" "$work/hca1.trace"; do
  [ -s "$t" ] || { bad "no command trace at $t"; continue; }
  if grep '^CMD' "$t" | grep -v ' OK$'; then bad "firmware commands failed in $t (above)"; fi
  grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$t" ||
    bad "$t not clean at the end: $(grep '^END' "$t" || echo 'no END line')"
done
[ "$fail" -eq 0 ] || exit 1
if [ -n "$eth" ]; then
  echo "PASS: the unikernel ran the packet appliance on two model Ethernet HCAs with no Linux"
else
  echo "PASS: the unikernel drove two model HCAs with no Linux"
fi
