#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-pingpong.sh): binds every Mellanox
# function to vfio-pci and runs PINGPONG (default rc_pingpong) between the first two, server on
# one and client on the other, over loopback TCP, through real VFIO. PINGPONG=mcast runs one
# process that drives both functions (sender and receivers on one, receivers on the other).
name=${PINGPONG:-rc_pingpong}
prog=/bin/$name
case $name in
  xsrq_pingpong) args=${PP_ARGS:--c 1 -n 50 -s 1024} ;;
  mcast) args=${PP_ARGS:--n 100 -s 1024} ;;
  ib_*_bw) args=${PP_ARGS:--n 200 -s 4096 -q 2} ;;
  ib_*_lat) args=${PP_ARGS:--n 200} ;;
  *) args=${PP_ARGS:--n 200 -s 1024 -c} ;;
esac
# PP_EVENTS=1: wait on completion events (-e, a completion channel) instead of spinning.
[ -n "${PP_EVENTS:-}" ] && args="$args -e"
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up
[ -d /sys/module/vfio ] || insmod /m/vfio.ko
while read -r m; do [ -d "/sys/module/${m%.ko}" ] || insmod "/m/$m" 2>/dev/null; done </m/vfio.order
bdfs=""
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
  echo vfio-pci >"$d/driver_override"
  basename "$d" >/sys/bus/pci/drivers_probe
  echo "RIG-PINGPONG $(basename "$d") driver=$(basename "$(readlink "$d/driver")")"
  bdfs="$bdfs $(basename "$d")"
done
# shellcheck disable=SC2086 # split on purpose
set -- $bdfs
[ $# -ge 2 ] || { echo "RIG-ERROR need two Mellanox functions, found $#"; exit 1; }
if [ "$name" = mcast ]; then
  # shellcheck disable=SC2086
  "$prog" --pci "$1" --pci "$2" $args
  rc=$?
  echo "RIG-PINGPONG both=$rc"
  exit "$rc"
fi
# shellcheck disable=SC2086
"$prog" --pci "$1" $args &
server=$!
sleep 1
# shellcheck disable=SC2086
"$prog" --pci "$2" $args 127.0.0.1
client=$?
wait "$server"
srv=$?
echo "RIG-PINGPONG client=$client server=$srv"
[ "$client" = 0 ] && [ "$srv" = 0 ]
