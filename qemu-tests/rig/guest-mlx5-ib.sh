#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-mlx5-ib.sh): Linux mlx5_core + mlx5_ib
# drive every Mellanox function, then rdma-core 56 (libibverbs with libmlx5) runs between the
# first two IB devices over loopback TCP: ibv_devinfo -v, ibv_{rc,uc,ud}_pingpong with data
# checks, perftest; then mlx5_ib and mlx5_core are removed. Every step runs and reports, even
# after a failure. Exit status 0 only if every step succeeded.
# Kernel command-line settings (all optional):
#   PP_CASES=TYPE:SIZE:ITERS,...  pingpongs (default rc:64:50,rc:4096:50,rc:65536:10,
#                                 uc:64:50,uc:4096:50,ud:64:50,ud:1024:50)
#   PERF_TESTS=a,b,...            perftest programs (default ib_write_bw,ib_read_bw,ib_atomic_bw,ib_send_lat)
#   PERF_ITERS=N                  perftest -n (default 20)
#   PP_TIMEOUT=S PERF_TIMEOUT=S   per-side deadline of one pair (default 90 and 120)
#   PROBE_WAIT=S                  deadline for each module load and unload (default 100)
# shellcheck source=guest-ib-lib.sh
. /bin/guest-ib-lib.sh

cases=${PP_CASES:-rc:64:50,rc:4096:50,rc:65536:10,uc:64:50,uc:4096:50,ud:64:50,ud:1024:50}
perf=${PERF_TESTS:-ib_write_bw,ib_read_bw,ib_atomic_bw,ib_send_lat}
perf_iters=${PERF_ITERS:-20}
pp_timeout=${PP_TIMEOUT:-90}
perf_timeout=${PERF_TIMEOUT:-120}
wait_s=${PROBE_WAIT:-100}

say "start uptime=$(up)s"
say "lo $(ip -4 addr show dev lo 2>/dev/null | grep -o 'inet [0-9./]*' | head -n 1)"
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] && say "pci ${d##*/} device=$(cat "$d/device")"
done

insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
  drv=$(readlink "$d/driver" 2>/dev/null)
  say "driver ${d##*/} ${drv##*/}"
done
insmod_bounded 30 ib_core || fail "insmod ib_core"
insmod_bounded 30 ib_uverbs || fail "insmod ib_uverbs"
insmod_bounded "$wait_s" mlx5_ib || fail "insmod mlx5_ib"
show_rdma || fail "ibv_devices"
for dev in mlx5_0 mlx5_1; do
  [ -d "/sys/class/infiniband/$dev" ] || fail "no IB device $dev"
done
wait_ports_active 30 mlx5_0 mlx5_1 || fail "ports not all ACTIVE"

say "devinfo begin"
ibv_devinfo -v 2>&1
rc=$?
say "devinfo end rc=$rc"
[ "$rc" = 0 ] || fail "ibv_devinfo -v"

port=18515
for c in $(echo "$cases" | tr , ' '); do
  t=${c%%:*}
  rest=${c#*:}
  size=${rest%%:*}
  iters=${rest#*:}
  args="-c -s $size -n $iters -p $port"
  pair "ibv_${t}_pingpong-s$size-n$iters" "$pp_timeout" "$port" \
    "ibv_${t}_pingpong -d mlx5_0 $args" "ibv_${t}_pingpong -d mlx5_1 $args" ||
    fail "ibv_${t}_pingpong -s $size -n $iters"
  port=$((port + 1))
done

for p in $(echo "$perf" | tr , ' '); do
  args="-n $perf_iters -F -p $port"
  pair "$p" "$perf_timeout" "$port" "$p -d mlx5_0 $args" "$p -d mlx5_1 $args" || fail "$p"
  port=$((port + 1))
done

rmmod_bounded "$wait_s" mlx5_ib || fail "rmmod mlx5_ib"
rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
dmesg_rdma
say "done failures=$FAILS uptime=$(up)s"
[ "$FAILS" = 0 ]
