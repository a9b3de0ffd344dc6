#!/usr/bin/env bash
# Guest test: Linux mlx5_core + mlx5_ib and rdma-core 56 on two model HCAs (IB ports, one
# fabric, one vfio-user server), no IOMMU. In the guest (guest-mlx5-ib.sh): ibv_devinfo -v,
# ibv_rc/uc/ud/srq_pingpong with data checks at several sizes (16 bytes: scatter to CQE),
# ibv_xsrq_pingpong (XRC), perftest
# ib_write_bw, ib_read_bw, ib_atomic_bw, ib_send_lat between mlx5_0 and mlx5_1 over 127.0.0.1, then
# rmmod. Passes only when
#   - both modules load and both IB devices exist, every port PORT_ACTIVE with a LID and GID 0,
#     non-zero GUIDs;
#   - every pingpong and perftest pair exits 0 on both sides;
#   - mlx5_ib and mlx5_core unload;
#   - the kernel prints no WARNING/BUG/Call Trace and no mlx5/RDMA complaint;
#   - every firmware command in the model's traces succeeded and both HCAs end clean.
# Usage: test-mlx5-ib.sh [WORKDIR]   (default /tmp/bareverbs-mlx5-ib)
# Environment: PP_CASES, PERF_TESTS, PERF_ITERS (see guest-mlx5-ib.sh), TIMEOUT (guest deadline, s).
#   SELFCHECK=rxe: check this test itself and rdma-core in the guest without the model: the same
#   steps on a soft-RoCE device (rdma_rxe on a dummy netdev, both sides on rxe0); no model server, no
#   mlx5 modules, no traces. Default WORKDIR then /tmp/bareverbs-mlx5-ib-rxe.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
selfcheck=${SELFCHECK:-}
case $selfcheck in '' | rxe) ;; *) echo "SELFCHECK must be rxe or empty" >&2; exit 2 ;; esac
work=${1:-/tmp/bareverbs-mlx5-ib${selfcheck:+-$selfcheck}}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# shellcheck source=ib-test-lib.sh
. "$here/ib-test-lib.sh"

cases=${PP_CASES:-rc:16:50,rc:64:50,rc:4096:50,rc:65536:10,uc:16:50,uc:64:50,uc:4096:50,ud:64:50,ud:1024:50,srq:16:20,srq:4096:20,xsrq:4096:20}
# Soft-RoCE has no XRC ("Couldn't Open the XRC Domain 95": EOPNOTSUPP): the self-check runs
# every other case.
if [ -n "$selfcheck" ]; then cases=$(echo "$cases" | tr , '\n' | grep -v '^xsrq:' | paste -sd, -); fi
perf=${PERF_TESTS:-ib_write_bw,ib_read_bw,ib_atomic_bw,ib_send_lat}
# Over DC too (mlx5 only: soft-RoCE has no DC).
perf_dc=${PERF_DC_TESTS-ib_write_bw,ib_read_bw,ib_send_bw}
[ -z "$selfcheck" ] || perf_dc=

append="RUN=/bin/guest-mlx5-ib.sh PP_CASES=$cases PERF_TESTS=$perf PERF_DC_TESTS=$perf_dc PERF_ITERS=${PERF_ITERS:-20}"
devs=()
if [ -n "$selfcheck" ]; then
  # RoCE needs a GID: index 1 is the dummy netdev's IPv4 address (IPv4-mapped).
  # rxe computes its ICRC with the crypto API's "crc32": crc32_generic.
  IB_INITRAMFS_ARGS=(--module rdma_rxe --module dummy --module crc32_generic --chroot-bin /usr/bin/rdma --chroot-bin /usr/bin/ip
    --verbs-provider rxe)
  append+=" SOFT_RDMA=rxe PP_EXTRA=-g1 PERF_EXTRA=-x1"
  ib_make_initramfs "$work/initrd.gz" "$here/guest-mlx5-ib.sh"
else
  cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user
  ib_make_initramfs "$work/initrd.gz" "$here/guest-mlx5-ib.sh"
  ib_start_server 2
  trap 'kill $spid 2>/dev/null || true' EXIT
  devs=(--vfio-user "$work/mlx5-0.sock" --vfio-user "$work/mlx5-1.sock")
fi
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode run --smp 2 "${devs[@]}" --append "$append" \
  --timeout "${TIMEOUT:-1200}" --quiet --log "$work/guest.raw.log" || rc=$?
[ -n "$selfcheck" ] || wait "$spid" 2>/dev/null || true
log=$work/guest.log
tr -d '\r' <"$work/guest.raw.log" >"$log"

[ "$rc" = 0 ] || bad "guest run failed (status $rc; the guest script reports each failed step as RIG-IB FAIL)"
if [ -n "$selfcheck" ]; then
  wants=("RIG-IB ibdevs=rxe0" "RIG-IB uverbs=uverbs0" "RIG-IB ibv_devices rc=0" "RIG-IB devinfo end rc=0"
    "RIG-IB rmmod-rdma_rxe rc=0")
  ibdevs=(rxe0)
else
  wants=("RIG-IB insmod-mlx5_core rc=0" "RIG-IB driver 0000:01:00.0 mlx5_core"
    "RIG-IB driver 0000:02:00.0 mlx5_core" "RIG-IB insmod-mlx5_ib rc=0" "RIG-IB ibdevs=mlx5_0 mlx5_1"
    "RIG-IB uverbs=uverbs0 uverbs1" "RIG-IB ibv_devices rc=0" "RIG-IB devinfo end rc=0"
    "RIG-IB rmmod-mlx5_ib rc=0" "RIG-IB rmmod-mlx5_core rc=0")
  ibdevs=(mlx5_0 mlx5_1)
fi
for want in "${wants[@]}"; do
  grep -qxF "$want" "$log" || grep -qF "$want (" "$log" || bad "guest log lacks '$want'"
done
grep -q '^RIG-IB lo inet 127.0.0.1/8' "$log" || bad "loopback not up in the guest"
if grep -E '^RIG-IB FAIL ' "$log"; then bad "guest steps failed (above)"; fi
ib_check_devinfo "$log" "${ibdevs[@]}"
names=()
IFS=, read -r -a case_list <<<"$cases"
for c in "${case_list[@]}"; do
  t=${c%%:*} r=${c#*:}
  names+=("ibv_${t}_pingpong-s${r%%:*}-n${r#*:}")
done
IFS=, read -r -a perfs <<<"$perf"
IFS=, read -r -a perfs_dc <<<"$perf_dc"
for p in "${perfs_dc[@]}"; do perfs+=("$p-dc"); done
ib_check_pairs "$log" "${names[@]}" "${perfs[@]}"
ib_check_kernel "$log"
[ -n "$selfcheck" ] || ib_check_traces "$work/hca0.trace" "$work/hca1.trace"
[ -n "$selfcheck" ] || ib_check_umr "$work/hca0.trace" "$work/hca1.trace"
# The 16-byte cases: Linux sets cs_res on rdma-core's RC/UC QPs, the model puts the data in the
# CQE, rdma-core's poll copies it and the pingpong checks it (-c).
[ -n "$selfcheck" ] || ib_check_scatter "$work/hca0.trace" "$work/hca1.trace"

ib_summary "$log"
if [ -z "$selfcheck" ]; then
  echo "== what the model did besides commands (UMRs, port 1 packets, queues at a page offset)"
  grep -H '^WORK' "$work/hca0.trace" "$work/hca1.trace" || true
fi
if [ "$fail" = 0 ] && [ -n "$selfcheck" ]; then echo "PASS: self-check on soft-RoCE $selfcheck (no model)"; fi
if [ "$fail" = 0 ] && [ -z "$selfcheck" ]; then echo "PASS: mlx5_ib and rdma-core (pingpongs, perftest) on two model HCAs"; fi
exit "$fail"
