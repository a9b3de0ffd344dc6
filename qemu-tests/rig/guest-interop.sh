#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-interop.sh, with the emulated IOMMU):
# interop across the model's fabric. The first Mellanox function (A) runs under Linux
# mlx5_core + mlx5_ib and rdma-core (mlx5_0); the second (B) is bound to vfio-pci before
# mlx5_core loads and is driven by bareverbs' rc_pingpong/ud_pingpong (--pci B). For each case,
# bareverbs serves and ibv_*_pingpong is the client, then the reverse; same options, data
# checked. Every step runs and reports, even after a failure. Exit status 0 only if all passed.
# Kernel command-line settings (all optional):
#   IOP_CASES=TYPE:SIZE:ITERS,...  (TYPE rc or ud; default rc:64:50,rc:4096:50,ud:64:50,ud:1024:50)
#   PP_TIMEOUT=S                   per-side deadline of one pair (default 120)
#   PROBE_WAIT=S                   deadline for each module load and unload (default 100)
# shellcheck source=guest-ib-lib.sh
. /bin/guest-ib-lib.sh

cases=${IOP_CASES:-rc:64:50,rc:4096:50,ud:64:50,ud:1024:50}
pp_timeout=${PP_TIMEOUT:-120}
wait_s=${PROBE_WAIT:-100}

say "start uptime=$(up)s"
say "lo $(ip -4 addr show dev lo 2>/dev/null | grep -o 'inet [0-9./]*' | head -n 1)"
grep -i '^HugePages_Total' /proc/meminfo | sed 's/^/RIG-IB /'
bdfs=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
  g=$(readlink "$d/iommu_group" 2>/dev/null)
  say "pci ${d##*/} device=$(cat "$d/device") iommu_group=${g##*/}"
  bdfs="$bdfs ${d##*/}"
done
# shellcheck disable=SC2086 # split on purpose
set -- $bdfs
if [ $# -lt 2 ]; then
  fail "need two Mellanox functions, found $#"
  say "done failures=$FAILS"
  exit 1
fi
A=$1 B=$2
say "A=$A (mlx5_core, mlx5_ib, rdma-core) B=$B (vfio-pci, bareverbs)"

# B first: with driver_override set, mlx5_core never binds it.
echo vfio-pci >"/sys/bus/pci/devices/$B/driver_override"
load_group_before vfio __all__ || fail "vfio modules"
echo "$B" >/sys/bus/pci/drivers_probe
insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
for d in "$A" "$B"; do
  drv=$(readlink "/sys/bus/pci/devices/$d/driver" 2>/dev/null)
  say "driver $d ${drv##*/}"
done
[ "$(basename "$(readlink "/sys/bus/pci/devices/$B/driver" 2>/dev/null)")" = vfio-pci ] ||
  fail "$B is not bound to vfio-pci"
insmod_bounded 30 ib_core || fail "insmod ib_core"
insmod_bounded 30 ib_uverbs || fail "insmod ib_uverbs"
insmod_bounded "$wait_s" mlx5_ib || fail "insmod mlx5_ib"
show_rdma || fail "ibv_devices"
[ -d /sys/class/infiniband/mlx5_0 ] || fail "no IB device mlx5_0"
wait_ports_active 30 mlx5_0 || fail "ports of mlx5_0 not all ACTIVE"
say "devinfo begin"
ibv_devinfo -v 2>&1
rc=$?
say "devinfo end rc=$rc"
[ "$rc" = 0 ] || fail "ibv_devinfo -v"

# A bareverbs side that was killed leaves B's firmware enabled (nobody tore it down): reset
# the function through sysfs so that the next case starts from a clean device.
reset_b() {
  _rm=$(cat "/sys/bus/pci/devices/$B/reset_method" 2>/dev/null)
  if echo 1 >"/sys/bus/pci/devices/$B/reset"; then say "reset $B ok (method $_rm)"; else fail "reset $B"; fi
}

port=18515
for c in $(echo "$cases" | tr , ' '); do
  t=${c%%:*}
  rest=${c#*:}
  size=${rest%%:*}
  iters=${rest#*:}
  args="-c -s $size -n $iters -p $port"
  ours="/bin/${t}_pingpong --pci $B $args"
  theirs="ibv_${t}_pingpong -d mlx5_0 $args"
  pair "${t}-bareverbs_srv-s$size-n$iters" "$pp_timeout" "$port" "$ours" "$theirs" ||
    fail "$t: bareverbs server, ibv_${t}_pingpong client, -s $size -n $iters"
  [ "$PAIR_SRV" = 0 ] || reset_b
  port=$((port + 1))
  args="-c -s $size -n $iters -p $port"
  ours="/bin/${t}_pingpong --pci $B $args"
  theirs="ibv_${t}_pingpong -d mlx5_0 $args"
  pair "${t}-rdmacore_srv-s$size-n$iters" "$pp_timeout" "$port" "$theirs" "$ours" ||
    fail "$t: ibv_${t}_pingpong server, bareverbs client, -s $size -n $iters"
  [ "$PAIR_CLI" = 0 ] || reset_b
  port=$((port + 1))
done

rmmod_bounded "$wait_s" mlx5_ib || fail "rmmod mlx5_ib"
rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
dmesg_rdma
say "done failures=$FAILS uptime=$(up)s"
[ "$FAILS" = 0 ]
