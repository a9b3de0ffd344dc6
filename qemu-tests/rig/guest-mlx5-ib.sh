#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-mlx5-ib.sh): Linux mlx5_core + mlx5_ib
# drive every Mellanox function, then rdma-core 56 (libibverbs with libmlx5) runs between the
# first two IB devices over loopback TCP: ibv_devinfo -v, ibv_{rc,uc,ud}_pingpong with data
# checks, perftest; then mlx5_ib and mlx5_core are removed. Every step runs and reports, even
# after a failure. Exit status 0 only if every step succeeded.
# Kernel command-line settings (all optional):
#   PP_CASES=TYPE:SIZE:ITERS,...  ibv_TYPE_pingpong runs (default rc:64:50,rc:4096:50,rc:65536:10,
#                                 uc:64:50,uc:4096:50,ud:64:50,ud:1024:50,srq:4096:20,xsrq:4096:20)
#   PERF_TESTS=a,b,...            perftest programs (default ib_write_bw,ib_read_bw,ib_atomic_bw,ib_send_lat)
#   PERF_DC_TESTS=a,b,...         perftest programs run again with --connection=DC (default none)
#   PERF_ITERS=N                  perftest -n (default 20)
#   PP_TIMEOUT=S PERF_TIMEOUT=S   per-side deadline of one pair (default 90 and 120)
#   PROBE_WAIT=S                  deadline for each module load and unload (default 100)
#   SOFT_RDMA=rxe                 self-check of this script and of rdma-core in the guest without
#                                 the model: a soft-RoCE device rxe0 on a dummy netdev with
#                                 10.11.12.1/24 (rxe refuses lo) serves both sides (module group
#                                 "extra" = rdma_rxe dummy crc32_generic; iproute2 ip and rdma)
#   PP_EXTRA=... PERF_EXTRA=...   more options for every pingpong / perftest (RoCE: -g N / -x N)
# shellcheck source=guest-ib-lib.sh
. /bin/guest-ib-lib.sh

cases=${PP_CASES:-rc:64:50,rc:4096:50,rc:65536:10,uc:64:50,uc:4096:50,ud:64:50,ud:1024:50,srq:4096:20,xsrq:4096:20}
perf=${PERF_TESTS:-ib_write_bw,ib_read_bw,ib_atomic_bw,ib_send_lat}
perf_iters=${PERF_ITERS:-20}
pp_timeout=${PP_TIMEOUT:-90}
perf_timeout=${PERF_TIMEOUT:-120}
wait_s=${PROBE_WAIT:-100}
soft=${SOFT_RDMA:-}
if [ -n "$soft" ]; then dev0=${soft}0 dev1=${soft}0; else dev0=mlx5_0 dev1=mlx5_1; fi

say "start uptime=$(up)s"
say "lo $(ip -4 addr show dev lo 2>/dev/null | grep -o 'inet [0-9./]*' | head -n 1)"
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] && say "pci ${d##*/} device=$(cat "$d/device")"
done

if [ -n "$soft" ]; then
  say "self-check: soft RDMA device $dev0 on a dummy netdev instead of the model's HCAs"
  load_group_before extra __all__ || fail "modules of group extra"
  { /usr/bin/ip link add rigdummy0 type dummy && /usr/bin/ip addr add 10.11.12.1/24 dev rigdummy0 &&
    /usr/bin/ip link set rigdummy0 up; } || fail "dummy netdev rigdummy0"
  rdma link add "$dev0" type "$soft" netdev rigdummy0 || fail "rdma link add $dev0 type $soft netdev rigdummy0"
  # The IPv4 GID (index 1) appears once the stack tells rxe about the address.
  i=0
  while [ $i -lt 50 ] && ! grep -q ':0a0b:0c01$' "/sys/class/infiniband/$dev0/ports/1/gids/1" 2>/dev/null; do
    sleep 0.2
    i=$((i + 1))
  done
  say "$dev0 gid1=$(cat "/sys/class/infiniband/$dev0/ports/1/gids/1" 2>/dev/null)"
else
  insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
    drv=$(readlink "$d/driver" 2>/dev/null)
    say "driver ${d##*/} ${drv##*/}"
  done
  insmod_bounded 30 ib_core || fail "insmod ib_core"
  insmod_bounded 30 ib_uverbs || fail "insmod ib_uverbs"
  insmod_bounded "$wait_s" mlx5_ib || fail "insmod mlx5_ib"
fi
show_rdma || fail "ibv_devices"
devs=$dev0
[ "$dev1" = "$dev0" ] || devs="$dev0 $dev1"
for dev in $devs; do
  [ -d "/sys/class/infiniband/$dev" ] || fail "no IB device $dev"
done
# shellcheck disable=SC2086 # split on purpose
wait_ports_active 30 $devs || fail "ports not all ACTIVE"

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
  # ibv_xsrq_pingpong has no data check; its -c is the number of clients (rdma-core 56
  # libibverbs/examples/xsrq_pingpong.c usage), left at its default of 1.
  chk=-c
  [ "$t" = xsrq ] && chk=
  args="$chk -s $size -n $iters -p $port ${PP_EXTRA:-}"
  pair "ibv_${t}_pingpong-s$size-n$iters" "$pp_timeout" "$port" \
    "ibv_${t}_pingpong -d $dev0 $args" "ibv_${t}_pingpong -d $dev1 $args" ||
    fail "ibv_${t}_pingpong -s $size -n $iters"
  port=$((port + 1))
done

for p in $(echo "$perf" | tr , ' '); do
  args="-n $perf_iters -F -p $port ${PERF_EXTRA:-}"
  pair "$p" "$perf_timeout" "$port" "$p -d $dev0 $args" "$p -d $dev1 $args" || fail "$p"
  port=$((port + 1))
done

# The same perftest programs over DC (mlx5dv DCI and DCT on an SRQ: mlx5_ib's CREATE_DCT,
# DRAIN_DCT and DCI QPs, rdma-core's DC WQEs).
for p in $(echo "${PERF_DC_TESTS:-}" | tr , ' '); do
  args="-n $perf_iters -F -p $port --connection=DC ${PERF_EXTRA:-}"
  pair "$p-dc" "$perf_timeout" "$port" "$p -d $dev0 $args" "$p -d $dev1 $args" ||
    fail "$p --connection=DC"
  port=$((port + 1))
done

if [ -n "$soft" ]; then
  rdma link delete "$dev0" || fail "rdma link delete $dev0"
  rmmod_bounded "$wait_s" "rdma_$soft" || fail "rmmod rdma_$soft"
else
  rmmod_bounded "$wait_s" mlx5_ib || fail "rmmod mlx5_ib"
  rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
fi
dmesg_rdma
say "done failures=$FAILS uptime=$(up)s"
[ "$FAILS" = 0 ]
