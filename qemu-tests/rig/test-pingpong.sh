#!/usr/bin/env bash
# Guest test: rc_pingpong, or the program named by PINGPONG (srq_pingpong, xsrq_pingpong,
# mcast, dc_pingpong, the perftest tools ib_write_bw ... ib_send_lat; our driver; PP_EVENTS=1: event-driven, -e) between two model HCAs served by one vfio-user server
# (one fabric), both bound to vfio-pci in one guest behind the emulated IOMMU. Passes when
# both sides finish with their data checked and both HCAs end clean (no failed command, no
# pages held, no DMA fault).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
prog=${PINGPONG:-rc_pingpong}
work=${1:-/tmp/bareverbs-$prog}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" \
  --target x86_64-unknown-linux-musl -p bareverbs-examples --bin "$prog"
"$here/make-initramfs.sh" "$work/initrd.gz" \
  "$target/x86_64-unknown-linux-musl/release/$prog:/bin/$prog" \
  "$here/guest-pingpong.sh:/bin/guest-pingpong.sh" >/dev/null

rm -f "$work"/mlx5-*.sock "$work"/hca*.trace
"$target/release/mlx5-vfio-user" --socket "$work/mlx5-0.sock" --socket "$work/mlx5-1.sock" \
  --trace-dir "$work" >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode run --iommu \
  --vfio-user "$work/mlx5-0.sock" --vfio-user "$work/mlx5-1.sock" \
  --append "hugepages=32 PINGPONG=$prog ${PP_EVENTS:+PP_EVENTS=1 }RUN=/bin/guest-pingpong.sh" \
  --timeout "${TIMEOUT:-300}" --quiet --log "$work/guest.log" || rc=$?
wait $spid 2>/dev/null || true
log="$work/guest.log"

# What success prints: both sides' status, and the program's report line.
case $prog in
  mcast) ok="RIG-PINGPONG both=0" report='^[0-9]+ datagrams of .* every copy checked' ;;
  xsrq_pingpong) ok="RIG-PINGPONG client=0 server=0" report='^success' ;;
  # perftest's result row: bytes, iterations, then the figures.
  ib_*) ok="RIG-PINGPONG client=0 server=0" report='^ [0-9]+ +[0-9]+ +[0-9.]+ ' ;;
  *) ok="RIG-PINGPONG client=0 server=0" report='^[0-9]+ iters in' ;;
esac
[ "$rc" = 0 ] || bad "guest run failed (status $rc)"
grep -q "$ok" "$log" || bad "$prog did not succeed (no '$ok')"
grep -qE "$report" "$log" || bad "no $prog report"
if grep -E 'DMAR: .*fault|WARNING:|BUG:' "$log"; then bad "IOMMU fault or kernel warning (above)"; fi
for t in "$work/hca0.trace" "$work/hca1.trace"; do
  [ -s "$t" ] || { bad "no command trace at $t"; continue; }
  if grep '^CMD' "$t" | grep -v ' OK$'; then bad "firmware commands failed in $t (above)"; fi
  grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$t" ||
    bad "$t not clean at the end: $(grep '^END' "$t" || echo 'no END line')"
done
echo "== ping-pong in the guest"
grep -E "RIG-PINGPONG|address:|bytes in|iters in|local:|remote:|^success|datagrams of|^ #bytes|^ [0-9]+ +[0-9]+ " "$log" || true
if [ "$fail" = 0 ]; then echo "PASS: $prog between two model HCAs over VFIO in the guest"; fi
exit "$fail"
