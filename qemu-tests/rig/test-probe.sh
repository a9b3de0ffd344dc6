#!/usr/bin/env bash
# Guest test: the unmodified Linux mlx5_core probes two model HCAs (served over vfio-user by
# one server), is removed, the functions are reset through sysfs, and it probes and is removed
# again. Passes only when
#   - insmod succeeds, the PCI device is bound to mlx5_core and both auxiliary devices exist;
#   - both resets, the second insmod and the second rmmod succeed;
#   - no mlx5_core message is a warning or an error, and the kernel logs no WARNING/BUG;
#   - rmmod succeeds silently;
#   - every firmware command in the model's trace succeeded, and at the end firmware is
#     disabled, holds no pages and saw no DMA fault.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-/tmp/bareverbs-probe}
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$here/probe.sh" "$work" >"$work.out" 2>&1 || bad "probe run failed (status $?); see $work.out"
log="$work/guest.log"
for want in "RIG-PROBE insmod rc=0" "RIG-PROBE driver=mlx5_core" "RIG-PROBE aux=mlx5_core.rdma.0" \
            "RIG-PROBE aux=mlx5_core.rdma.1" "RIG-PROBE rmmod rc=0" "RIG-PROBE reinsmod rc=0" \
            "RIG-PROBE reaux=mlx5_core.rdma.1" "RIG-PROBE rermmod rc=0"; do
  grep -q "$want" "$log" || bad "guest log lacks '$want'"
done
# Informational lines real ConnectX-5s print too.
ok_info='firmware version:|available PCIe bandwidth|PTM is not supported by PCIe'
if grep -E 'mlx5_core' "$log" | grep -vE "$ok_info" | grep -iE 'err|fail|warn|timeout|leak|unable|cannot|invalid|giving up' ; then
  bad "mlx5_core complained (lines above)"
fi
if grep -E 'WARNING:|BUG:|Call Trace' "$log"; then bad "kernel warning (lines above)"; fi
if grep -E '^RIG-RMMOD' "$log" | grep -vE "$ok_info"; then bad "rmmod printed messages (lines above)"; fi
if grep -E 'RIG-PROBE reset .* failed' "$log"; then bad "a function reset failed"; fi
if [ "$(grep -c 'RIG-PROBE reset .* ok' "$log")" != 2 ]; then bad "expected two function resets"; fi

for trace in "$work/hca0.trace" "$work/hca1.trace"; do
  [ -s "$trace" ] || { bad "no command trace at $trace"; continue; }
  if grep '^CMD' "$trace" | grep -v ' OK$'; then bad "firmware commands failed in $trace (above)"; fi
  grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$trace" ||
    bad "model not clean at the end of $trace: $(grep '^END' "$trace" || echo 'no END line')"
  [ "$(grep -c 'CMD slot  0 INIT_HCA' "$trace")" = 2 ] || bad "$trace: expected two bring-ups"
  # The model offers atomics answerable in host byte order: Linux asks for that mode
  # (handle_hca_cap_atomic) on each bring-up, as bareverbs does.
  [ "$(grep -cE 'SET_HCA_CAP +op_mod 0x0006 OK' "$trace")" = 2 ] ||
    bad "$trace: expected Linux to set host-endian atomics on both bring-ups"
done

echo "== commands Linux issued to HCA 0 (both probes)"
grep '^CMD' "$work/hca0.trace" | awk '{print $4, $6}' | uniq -c
if [ "$fail" = 0 ]; then echo "PASS: clean mlx5_core probe and removal"; fi
exit "$fail"
