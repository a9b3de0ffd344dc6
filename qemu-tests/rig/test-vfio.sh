#!/usr/bin/env bash
# Guest test: our driver (examples/devinfo, a static binary) brings the model HCA up and tears
# it down inside the guest, through Linux vfio-pci behind the emulated Intel IOMMU, with its
# DMA memory from guest hugepages. Passes only when devinfo exits 0 and prints the device,
# every firmware command succeeded, and firmware ends disabled with no pages and no DMA fault.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
work=${1:-/tmp/bareverbs-vfio}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" \
  --target x86_64-unknown-linux-musl -p bareverbs-examples --bin devinfo
"$here/make-initramfs.sh" "$work/initrd.gz" \
  "$target/x86_64-unknown-linux-musl/release/devinfo:/bin/devinfo" >/dev/null

rm -f "$work/mlx5.sock" "$work"/hca*.trace
"$target/release/mlx5-vfio-user" --socket "$work/mlx5.sock" --trace-dir "$work" \
  >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode vfio --iommu --vfio-user "$work/mlx5.sock" \
  --append 'hugepages=16 VFIO_PROG=/bin/devinfo VFIO_PROG_ARGS="--pci @BDF -v --trace"' \
  --timeout "${TIMEOUT:-240}" --quiet --log "$work/guest.log" || rc=$?
wait $spid 2>/dev/null || true
log="$work/guest.log"
trace="$work/hca0.trace"

[ "$rc" = 0 ] || bad "guest run failed (status $rc)"
for want in "RIG-VFIO prog rc=0" "fw_ver:				16.35.2000" "board_id:			MT_0000000008" \
            "state:			PORT_ACTIVE (4)" "fw_pages:" "teardown: OK"; do
  grep -qF "$want" "$log" || bad "guest log lacks '$want'"
done
if grep -E 'DMAR: .*fault|WARNING:|BUG:' "$log"; then bad "IOMMU fault or kernel warning (above)"; fi
[ -s "$trace" ] || bad "no command trace at $trace"
if grep '^CMD' "$trace" | grep -v ' OK$'; then bad "firmware commands failed (above)"; fi
grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$trace" ||
  bad "model not clean at the end: $(grep '^END' "$trace" || echo 'no END line')"

echo "== devinfo in the guest"
sed -n '/^hca_id/,/teardown: OK/p' "$log"
if [ "$fail" = 0 ]; then echo "PASS: bareverbs brought the HCA up and down over Linux VFIO in the guest"; fi
exit "$fail"
