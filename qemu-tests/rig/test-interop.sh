#!/usr/bin/env bash
# Guest test: interop across the model's fabric. Two model HCAs (one vfio-user server), the
# emulated IOMMU on, hugepages: HCA A under Linux mlx5_core + mlx5_ib with rdma-core 56, HCA B
# bound to vfio-pci and driven by bareverbs' rc_pingpong/ud_pingpong (static musl builds).
# In the guest (guest-interop.sh), for RC and UD at a few sizes: bareverbs server against
# ibv_*_pingpong client, and the reverse, with the same options and -c (data checked).
# Passes only when
#   - A binds to mlx5_core, B to vfio-pci, mlx5_ib brings up mlx5_0 with every port PORT_ACTIVE,
#     a LID, GID 0 and non-zero GUIDs;
#   - every pair exits 0 on both sides;
#   - mlx5_ib and mlx5_core unload;
#   - the kernel prints no WARNING/BUG/Call Trace, no IOMMU fault, no mlx5/RDMA complaint;
#   - every firmware command in both model traces succeeded and both HCAs end clean.
# Usage: test-interop.sh [WORKDIR]   (default /tmp/bareverbs-interop)
# Environment: IOP_CASES (see guest-interop.sh), TIMEOUT (guest deadline, s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
work=${1:-/tmp/bareverbs-interop}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# shellcheck source=ib-test-lib.sh
. "$here/ib-test-lib.sh"

cases=${IOP_CASES:-rc:64:50,rc:4096:50,ud:64:50,ud:1024:50}

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" \
  --target x86_64-unknown-linux-musl -p bareverbs-examples --bin rc_pingpong --bin ud_pingpong
musl=$target/x86_64-unknown-linux-musl/release
ib_make_initramfs "$work/initrd.gz" "$here/guest-interop.sh" \
  "$musl/rc_pingpong:/bin/rc_pingpong" "$musl/ud_pingpong:/bin/ud_pingpong"
ib_start_server 2
trap 'kill $spid 2>/dev/null || true' EXIT
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode run --smp 2 --iommu \
  --vfio-user "$work/mlx5-0.sock" --vfio-user "$work/mlx5-1.sock" \
  --append "hugepages=16 RUN=/bin/guest-interop.sh IOP_CASES=$cases" \
  --timeout "${TIMEOUT:-1200}" --quiet --log "$work/guest.raw.log" || rc=$?
wait "$spid" 2>/dev/null || true
log=$work/guest.log
tr -d '\r' <"$work/guest.raw.log" >"$log"

[ "$rc" = 0 ] || bad "guest run failed (status $rc; the guest script reports each failed step as RIG-IB FAIL)"
for want in "RIG-IB driver 0000:01:00.0 mlx5_core" "RIG-IB driver 0000:02:00.0 vfio-pci" \
  "RIG-IB insmod-mlx5_core rc=0" "RIG-IB insmod-mlx5_ib rc=0" "RIG-IB ibdevs=mlx5_0" \
  "RIG-IB uverbs=uverbs0" "RIG-IB ibv_devices rc=0" "RIG-IB devinfo end rc=0" \
  "RIG-IB rmmod-mlx5_ib rc=0" "RIG-IB rmmod-mlx5_core rc=0"; do
  grep -qxF "$want" "$log" || grep -qF "$want (" "$log" || bad "guest log lacks '$want'"
done
grep -q '^RIG-IB lo inet 127.0.0.1/8' "$log" || bad "loopback not up in the guest"
if grep -E '^RIG-IB FAIL ' "$log"; then bad "guest steps failed (above)"; fi
ib_check_devinfo "$log" mlx5_0
names=()
IFS=, read -r -a case_list <<<"$cases"
for c in "${case_list[@]}"; do
  t=${c%%:*} r=${c#*:}
  names+=("$t-bareverbs_srv-s${r%%:*}-n${r#*:}" "$t-rdmacore_srv-s${r%%:*}-n${r#*:}")
done
ib_check_pairs "$log" "${names[@]}"
ib_check_kernel "$log"
ib_check_traces "$work/hca0.trace" "$work/hca1.trace"

ib_summary "$log"
if [ "$fail" = 0 ]; then echo "PASS: bareverbs and rdma-core (mlx5_ib) exchange RC and UD traffic across the model's fabric"; fi
exit "$fail"
