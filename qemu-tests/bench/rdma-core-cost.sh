#!/usr/bin/env bash
# The anchor of the data-path cost table: rdma-core's own mlx5 provider (trixie's rdma-core,
# libmlx5) posting and polling on a model HCA that Linux 6.12 mlx5_core + mlx5_ib drive in the
# rig guest, counted by callgrind inside the guest (qemu-tests/rig/verbs-cost.c: the same
# requests as wqe-cost.sh gives our driver; only the bench_* functions are counted: the
# provider's work in user space, not the doorbell's trip to the device). Prints a markdown table
# of instructions per work request and per completion.
# Usage: qemu-tests/bench/rdma-core-cost.sh [ITERS] [WORKDIR]   (needs the rig: build-rig.sh)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
rig=$top/qemu-tests/rig
here=$rig # what the rig libraries call their directory
target=${CARGO_TARGET_DIR:-$top/target}
iters=${1:-20}
work=${2:-/tmp/bareverbs-rdma-core-cost}
mkdir -p "$work"
# shellcheck source=../rig/lib.sh
. "$rig/lib.sh"
rig_need_root
rig_require_built
for f in usr/bin/gcc usr/include/infiniband/verbs.h usr/bin/valgrind usr/libexec/valgrind/callgrind-amd64-linux; do
  [ -e "$RIG_ROOTFS/$f" ] || rig_die "rig chroot lacks /$f: rebuild it with build-rig.sh"
done
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# shellcheck source=../rig/ib-test-lib.sh
. "$rig/ib-test-lib.sh"

# verbs-cost, built in the rig chroot against its rdma-core (not stripped: callgrind finds the
# bench_* functions by name).
build=$(mktemp -d "$RIG_ROOTFS/tmp/verbs-cost.XXXXXX")
trap 'rm -rf "$build"' EXIT
cp "$rig/verbs-cost.c" "$build/"
rel=/${build#"$RIG_ROOTFS"/}
rig_chroot "$RIG_ROOTFS" gcc -O2 -Wall -Wextra -Werror -o "$rel/verbs-cost" "$rel/verbs-cost.c" -libverbs || true
[ -x "$build/verbs-cost" ] || rig_die "building verbs-cost in the rig chroot failed"

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
vg=(--chroot-bin /usr/bin/valgrind.bin)
for f in callgrind-amd64-linux vgpreload_core-amd64-linux.so default.supp; do
  vg+=(--chroot-bin "/usr/libexec/valgrind/$f")
done
IB_INITRAMFS_ARGS=(--chroot-bin "$rel/verbs-cost:/bin/verbs-cost" "${vg[@]}")
ib_make_initramfs "$work/initrd.gz" "$rig/guest-verbs-cost.sh"
ib_start_server 1
trap 'kill $spid 2>/dev/null || true; rm -rf "$build"' EXIT
rc=0
"$rig/run-guest.sh" --initrd "$work/initrd.gz" --mode run --mem 2G --vfio-user "$work/mlx5-0.sock" \
  --append "RUN=/bin/guest-verbs-cost.sh COST_ITERS=$iters" --timeout "${TIMEOUT:-1800}" --quiet \
  --log "$work/guest.raw.log" || rc=$?
wait "$spid" 2>/dev/null || true
log=$work/guest.log
tr -d '\r' <"$work/guest.raw.log" >"$log"
[ "$rc" = 0 ] || bad "guest run failed (status $rc)"
if grep -E '^RIG-IB FAIL ' "$log"; then bad "guest steps failed (above)"; fi
grep -E '^RIG-OUT ' "$log" | tail -n 40 || true

per() { awk -v t="$1" -v n="$2" 'BEGIN { printf "%.1f", t / n }'; }
echo "| rdma-core call (libmlx5, in the guest) | request | batch | instructions per request or completion | polls that found fewer than the batch |"
echo "|---|---|---|---|---|"
while read -r _ mode kind batch it ir short; do
  case $ir in '' | none | *[!0-9]*) bad "no count for $mode $kind $batch"; continue ;; esac
  case $mode in
    post) call='`ibv_post_send` (WR list)' ;;
    wr) call='`ibv_wr_*` batch API' ;;
    poll) call='`ibv_poll_cq`' ;;
    start-poll) call='`ibv_start_poll` / `ibv_next_poll`' ;;
  esac
  what=$([ "$kind" = inline64 ] && echo "64-byte inline SEND" || echo "4 KiB RDMA WRITE")
  [ "${mode%poll}" = "$mode" ] || what="completion of a $what"
  echo "| $call | $what | $batch | $(per "$ir" $((it * batch))) | $short |"
done < <(grep -E '^RIG-COST ' "$log")
[ "$(grep -cE '^RIG-COST ' "$log")" -ge 12 ] || bad "expected 12 cases, got $(grep -cE '^RIG-COST ' "$log")"
ib_check_kernel "$log"
ib_check_traces "$work/hca0.trace"
exit "$fail"
