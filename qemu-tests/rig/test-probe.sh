#!/usr/bin/env bash
# Guest test: the unmodified Linux mlx5_core probes the model (served over vfio-user) and is
# removed again. Passes only when
#   - insmod succeeds, the PCI device is bound to mlx5_core and its auxiliary device exists;
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
trace="$work/hca0.trace"

for want in "RIG-PROBE insmod rc=0" "RIG-PROBE driver=mlx5_core" "RIG-PROBE aux=mlx5_core.rdma.0" \
            "RIG-PROBE rmmod rc=0"; do
  grep -q "$want" "$log" || bad "guest log lacks '$want'"
done
# Informational lines real ConnectX-5s print too.
ok_info='firmware version:|available PCIe bandwidth|PTM is not supported by PCIe'
if grep -E 'mlx5_core' "$log" | grep -vE "$ok_info" | grep -iE 'err|fail|warn|timeout|leak|unable|cannot|invalid|giving up' ; then
  bad "mlx5_core complained (lines above)"
fi
if grep -E 'WARNING:|BUG:|Call Trace' "$log"; then bad "kernel warning (lines above)"; fi
if grep -E '^RIG-RMMOD' "$log" | grep -vE "$ok_info"; then bad "rmmod printed messages (lines above)"; fi

[ -s "$trace" ] || bad "no command trace at $trace"
if grep '^CMD' "$trace" | grep -v ' OK$'; then bad "firmware commands failed (lines above)"; fi
grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$trace" ||
  bad "model not clean at the end: $(grep '^END' "$trace" || echo 'no END line')"

echo "== commands Linux issued (model trace)"
grep '^CMD' "$trace" | awk '{print $4, $6}' | uniq -c
if [ "$fail" = 0 ]; then echo "PASS: clean mlx5_core probe and removal"; fi
exit "$fail"
