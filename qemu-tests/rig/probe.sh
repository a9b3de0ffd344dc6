#!/usr/bin/env bash
# Boots the rig guest with HCAS (default 2) model HCAs served over vfio-user and lets the
# unmodified Linux mlx5_core probe them, unloads it, resets the functions, probes and unloads
# again. Prints the model's command traces and the guest's mlx5 messages.
# Usage: probe.sh [WORKDIR]   (builds the server and the initramfs if needed)
#   SERVER_ARGS="--eth": extra arguments for the model server (e.g. the Ethernet port type)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
work=${1:-/tmp/bareverbs-probe}
mkdir -p "$work"
cargo build --release --locked -q -p bareverbs-model --bin mlx5-vfio-user --manifest-path "$top/Cargo.toml"
server="$target/release/mlx5-vfio-user"
[ -f "$work/initrd.gz" ] || "$here/make-initramfs.sh" "$work/initrd.gz" >/dev/null
rm -f "$work"/mlx5-*.sock "$work"/hca*.trace
socks=() devs=()
for n in $(seq 0 $((${HCAS:-2} - 1))); do
  socks+=(--socket "$work/mlx5-$n.sock")
  devs+=(--vfio-user "$work/mlx5-$n.sock")
done
"$server" "${socks[@]}" --trace-dir "$work" ${SERVER_ARGS:-} >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode probe "${devs[@]}" \
  --append "WAIT=${WAIT:-90} RMMOD=1 REPROBE=1" --timeout "${TIMEOUT:-300}" --quiet \
  --log "$work/guest.log" || rc=$?
wait $spid 2>/dev/null || true
for t in "$work"/hca*.trace; do
  echo "== model command trace ($t)"
  cat "$t" 2>/dev/null || true
done
echo "== guest mlx5 messages ($work/guest.log)"
grep -E "mlx5|GUEST-DONE|RIG-" "$work/guest.log" || true
exit $rc
