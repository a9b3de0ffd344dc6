#!/usr/bin/env bash
# Counts instructions per WQE posted and per CQE polled with callgrind (instruction counts are
# the same on every run, whatever the machine is doing) for our driver, a same-work C
# implementation written as rdma-core's mlx5 provider does it (same_work.c: every check and
# book ours keeps, one lock per call) and the floor: the stores/loads a WQE (CQE) needs with
# every operand folded into a constant. Prints markdown tables.
# Usage: qemu-tests/bench/wqe-cost.sh [ITERS]   (needs valgrind, gcc, libibverbs-dev)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
iters=${1:-200}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
[ -f /usr/include/infiniband/mlx5dv.h ] || { echo "mlx5dv.h is needed (apt-get install libibverbs-dev)" >&2; exit 1; }
cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-examples --bin wqe_bench
# Bound at load (-z now), as Rust links its binaries: a lazily bound libc call would count
# the dynamic linker's first resolution inside the measured function.
gcc -O2 -march=x86-64 -Wl,-z,now -o "$work/c" "$here/same_work.c" -lpthread
bench="$target/release/wqe_bench"

# count PROGRAM MODE ARGS... : instructions inside the mode's bench_* function (bench_c_MODE
# in the C baseline, bench_MODE with '-' as '_' in ours). Collection toggles on entering that
# function; the pattern names it exactly, so closures it calls (`bench_x::{{closure}}`, when
# the compiler does not inline them) are counted with it instead of toggling it off. For posts
# the model's doorbell handler (which plays the hardware) is toggled back off.
count() {
  local out="$work/cg.out" extra=() fn
  case "$2" in driver-post|driver-batch|driver-dci) extra=(--toggle-collect='*SimMmio*try_write64*') ;; esac
  case "$1" in "$work/c") fn="bench_c_$2" ;; *) fn="*::bench_${2//-/_}" ;; esac
  # The compiler folds bench_driver_poll_empty into bench_driver_poll (the same code).
  [ "$2" = driver-poll-empty ] && fn="*::bench_driver_poll"
  valgrind --tool=callgrind --callgrind-out-file="$out" --collect-atstart=no \
    --toggle-collect="$fn" "${extra[@]}" "$@" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
per() { awk -v t="$1" -v n="$2" 'BEGIN { printf "%.1f", t / n }'; }

echo "| operation | batch | post_send (poll) | batch API | same-work C | floor | post_send (poll) / same-work C | batch API / same-work C |"
echo "|---|---|---|---|---|---|---|---|"
for kind in inline64 write4k; do
  for b in 1 8 32; do
    n=$((iters * b))
    d=$(per "$(count "$bench" driver-post "$kind" "$b" "$iters")" "$n")
    w=$(per "$(count "$bench" driver-batch "$kind" "$b" "$iters")" "$n")
    m=$(per "$(count "$bench" min-post "$kind" "$b" "$iters")" "$n")
    c=$(per "$(count "$work/c" post "$kind" "$b" "$iters")" "$n")
    label=$([ "$kind" = inline64 ] && echo "post 64-byte inline SEND" || echo "post 4 KiB RDMA WRITE")
    echo "| $label | $b | $d | $w | $c | $m | $(ratio "$d" "$c") | $(ratio "$w" "$c") |"
  done
done
for b in 1 8 32; do
  n=$((iters * b))
  d=$(per "$(count "$bench" driver-poll write4k "$b" "$iters")" "$n")
  m=$(per "$(count "$bench" min-poll write4k "$b" "$iters")" "$n")
  c=$(per "$(count "$work/c" poll write4k "$b" "$iters")" "$n")
  echo "| poll CQE | $b | $d | – | $c | $m | $(ratio "$d" "$c") | – |"
done
echo
echo '| DC initiator, batch API (`send_batch_dc`) | batch | instructions per WQE | RC batch API | DCI / RC |'
echo "|---|---|---|---|---|"
for kind in inline64 write4k; do
  for b in 1 8 32; do
    n=$((iters * b))
    d=$(per "$(count "$bench" driver-dci "$kind" "$b" "$iters")" "$n")
    w=$(per "$(count "$bench" driver-batch "$kind" "$b" "$iters")" "$n")
    label=$([ "$kind" = inline64 ] && echo "post 64-byte inline SEND" || echo "post 4 KiB RDMA WRITE")
    echo "| $label | $b | $d | $w | $(ratio "$d" "$w") |"
  done
done
e=$(per "$(count "$bench" driver-poll-empty write4k 1 "$iters")" "$iters")
echo
echo "Poll of an empty CQ (what a busy-polling loop mostly does): $e instructions per call."
