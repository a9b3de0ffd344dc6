#!/usr/bin/env bash
# Instructions per forwarded packet of examples/src/l2fwd.rs's forwarder, counted with
# callgrind (the same on every run): everything inside `forward_burst` — rx_burst (CQEs read,
# buffers handed over and replaced, doorbell record), the MAC rewrite in the buffer, tx_burst
# (completions reclaimed, WQEs written, doorbell) — except the model's doorbell handler, which
# plays the hardware. Prints a markdown table. Anchors, not same-work baselines: ixy's C driver
# ~127 and ixy.rs ~209 instructions per packet at batch 32 on real hardware (ixy paper).
# Usage: qemu-tests/bench/l2fwd-cost.sh [BURSTS]   (needs valgrind)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
bursts=${1:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-examples --bin l2fwd
echo "| burst | instructions per forwarded packet | packets |"
echo "|---|---|---|"
for b in 1 8 32; do
  out="$work/cg.out"
  valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
    --toggle-collect='*::forward_burst*' --toggle-collect='*SimMmio*try_write64*' \
    "$target/release/l2fwd" --burst "$b" --bursts "$bursts" >"$work/log" 2>&1 ||
    { cat "$work/log" >&2; exit 1; }
  n=$(sed -n 's/^l2fwd: \([0-9]*\) frames.*/\1/p' "$work/log")
  # forward_burst's inclusive count: the model's doorbell handler inside it is toggled off;
  # the summary is not used because the generator's doorbells, outside it, toggle
  # collection back on.
  ir=$(callgrind_annotate --inclusive=yes "$out" 2>/dev/null |
    awk '/l2fwd::forward_burst/ && !done { gsub(",", "", $1); print $1; done = 1 }')
  echo "| $b | $(awk -v t="$ir" -v n="$n" 'BEGIN { printf "%.1f", t / n }') | $n |"
done
