#!/usr/bin/env bash
# How fast the model executes RDMA WRITEs in the synchronous drive (examples/src/model_rate.rs:
# an RC QP writing to another QP of the same model HCA, batches of 32, the last signaled):
# instructions per WQE inside the model's doorbell handler (`Hca::mmio_write64` and what it
# calls), counted by callgrind and the same on every run, and the wall-clock rate of the whole
# loop (driver included) on this machine, which varies with its load. The same again with the
# model behind its vfio-user server (`model_rate --vfio-user`: its own thread, one socket
# message per doorbell, WQEs and data read from the client's shared memory). Prints a
# markdown table.
# Usage: qemu-tests/bench/model-rate.sh [ITERS]   (needs valgrind)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
iters=${1:-5000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-examples --bin model_rate
bin="$target/release/model_rate"
echo "| RDMA WRITE size | where the model runs | model instructions per WQE | M WQE/s (wall clock) | GB/s of payload (wall clock) |"
echo "|---|---|---|---|---|"
# In process (the synchronous drive), then the vfio-user server on its own thread, reached
# over its socket by the driver's vfio-user client (what QEMU's vfio-user-pci talks to).
for mode in "" --vfio-user; do
  for size in 64 4096; do
    cg_iters=200
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" --collect-atstart=no \
      --toggle-collect='*Hca::mmio_write64*' "$bin" $mode "$size" "$cg_iters" >/dev/null 2>&1
    # model_rate runs a tenth more batches to warm up, all of 32 WQEs.
    per=$(awk -v n=$(( (cg_iters + cg_iters / 10) * 32 )) '/^summary:/ { printf "%.0f", $2 / n }' "$work/cg.out")
    line=$("$bin" $mode "$size" "$iters")
    rate=$(sed -n 's/.*: \([0-9.]*\) M WQE\/s.*/\1/p' <<<"$line")
    gbs=$(sed -n 's/.*, \([0-9.]*\) GB\/s.*/\1/p' <<<"$line")
    where=$([ -z "$mode" ] && echo "in process" || echo "vfio-user server")
    echo "| $size B | $where | $per | $rate | $gbs |"
  done
done
