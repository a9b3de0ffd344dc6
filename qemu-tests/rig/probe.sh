#!/usr/bin/env bash
# Boots the rig guest with the model served over vfio-user and lets the unmodified Linux
# mlx5_core probe it, then unloads it. Prints the model's command trace and the guest's mlx5
# messages. Usage: probe.sh [WORKDIR]   (builds the server and the initramfs if needed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
work=${1:-/tmp/bareverbs-probe}
mkdir -p "$work"
cargo build --release --locked -q -p bareverbs-model --bin mlx5-vfio-user --manifest-path "$top/Cargo.toml"
server="$top/target/release/mlx5-vfio-user"
[ -f "$work/initrd.gz" ] || "$here/make-initramfs.sh" "$work/initrd.gz" >/dev/null
rm -f "$work/mlx5.sock" "$work"/hca*.trace
"$server" --socket "$work/mlx5.sock" --trace-dir "$work" >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode probe --vfio-user "$work/mlx5.sock" \
  --append "WAIT=${WAIT:-90} RMMOD=1" --timeout "${TIMEOUT:-240}" --quiet --log "$work/guest.log" || rc=$?
wait $spid 2>/dev/null || true
echo "== model command trace ($work/hca0.trace)"
cat "$work/hca0.trace" 2>/dev/null || true
echo "== guest mlx5 messages ($work/guest.log)"
grep -E "mlx5|GUEST-DONE|RMMOD|insmod" "$work/guest.log" || true
exit $rc
