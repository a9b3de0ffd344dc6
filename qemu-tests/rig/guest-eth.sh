#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-eth.sh): Linux mlx5_core's Ethernet driver
# (mlx5e) on two model HCAs whose ports are Ethernet. The second netdev moves into network
# namespace "peer", so traffic between 10.20.0.1 and 10.20.0.2 crosses the model's wire and not
# the kernel's loopback. Then: ping, UDP datagrams echoed (small, MTU-sized, fragmented), a TCP
# transfer checked by checksum (checksum offload and LSO), the vport counters read back,
# interfaces down, mlx5_core removed. Every step runs and reports; exit 0 only if all passed.
# Kernel command-line settings (all optional):
#   PING_COUNT=N   echo requests (default 5)
#   UDP_SIZES=a,b  datagram sizes, 4 of each (default 32,1472,3000)
#   TCP_KIB=N      KiB sent over TCP (default 512)
#   PROBE_WAIT=S   deadline for each module load and unload (default 100)
#   APPLIANCE=1    instead: the first function goes to vfio-pci and runs bareverbs'
#                  eth_appliance (10.20.0.2, UDP echo on port 7) through VFIO; Linux mlx5e on
#                  the second (10.20.0.1) pings it and sends UDP datagrams (udp-probe), the
#                  appliance's ARP reply first; no namespace needed
# shellcheck source=guest-ib-lib.sh
. /bin/guest-ib-lib.sh

ping_count=${PING_COUNT:-5}
udp_sizes=${UDP_SIZES:-32,1472,3000}
tcp_kib=${TCP_KIB:-512}
wait_s=${PROBE_WAIT:-100}
IP=/usr/bin/ip
peer() { "$IP" netns exec peer "$@"; }

# The appliance over VFIO on the first function, Linux on the second.
appliance() {
  [ -d /sys/module/vfio ] || insmod /m/vfio.ko
  while read -r m; do [ -d "/sys/module/${m%.ko}" ] || insmod "/m/$m" 2>/dev/null; done </m/vfio.order
  first=
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
    first=${d##*/}
    echo vfio-pci >"$d/driver_override"
    echo "$first" >/sys/bus/pci/drivers_probe
    say "appliance function $first driver=$(basename "$(readlink "$d/driver")")"
    break
  done
  insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
  n=
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x15b3 ] && [ "${d##*/}" != "$first" ] || continue
    n=$(ls "$d/net" 2>/dev/null | head -n 1)
    say "netdev ${d##*/} ${n:-none}"
  done
  [ -n "$n" ] || { fail "a Linux netdev on the second function"; return 1; }
  /bin/eth_appliance --pci "$first" --ip 10.20.0.2 --udp-port 7 --seconds 240 >/tmp/app.out 2>&1 &
  apid=$!
  "$IP" addr add 10.20.0.1/24 dev "$n" && "$IP" link set "$n" up || fail "$n up"
  i=0
  while [ $i -lt 100 ] && [ "$(cat "/sys/class/net/$n/carrier" 2>/dev/null)" != 1 ]; do
    sleep 0.2
    i=$((i + 1))
  done
  # The appliance is up once it printed its address.
  i=0
  while [ $i -lt 300 ] && ! grep -q 'UDP echo port' /tmp/app.out; do
    sleep 0.2
    i=$((i + 1))
  done
  sed 's/^/RIG-OUT appliance| /' /tmp/app.out
  ping -c "$ping_count" -W 3 10.20.0.2 >/tmp/ping.out 2>&1
  rc=$?
  sed 's/^/RIG-OUT ping| /' /tmp/ping.out
  say "ping rc=$rc"
  [ $rc = 0 ] || fail "ping the appliance"
  IFS=,
  for size in $udp_sizes; do
    unset IFS
    [ "$size" -le 1472 ] || continue
    /bin/udp-probe client 10.20.0.2 7 4 "$size" >/tmp/udp-cli.out 2>&1
    crc=$?
    sed 's/^/RIG-OUT udp-cli| /' /tmp/udp-cli.out
    say "udp size=$size client=$crc"
    [ "$crc" = 0 ] || fail "udp echo of $size-byte datagrams by the appliance"
    IFS=,
  done
  unset IFS
  "$IP" neigh show dev "$n" | sed 's/^/RIG-OUT neigh| /'
  kill "$apid" 2>/dev/null
  wait_exit "$apid" 10
  "$IP" link set "$n" down
  rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
  dmesg | grep -iE 'mlx5|WARNING|BUG|Call Trace|DMAR' | sed 's/^/RIG-DMESG /'
  say "done failures=$FAILS uptime=$(up)s"
  [ "$FAILS" = 0 ]
}

say "start uptime=$(up)s"
if [ -n "${APPLIANCE:-}" ]; then
  appliance
  exit $?
fi
insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
devs=
for d in /sys/bus/pci/devices/*; do
  [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
  n=$(ls "$d/net" 2>/dev/null | head -n 1)
  say "netdev ${d##*/} ${n:-none} mac=$(cat "$d/net/$n/address" 2>/dev/null)"
  devs="$devs $n"
done
set -- $devs
n0=${1:-} n1=${2:-}
[ -n "$n0" ] && [ -n "$n1" ] || fail "two mlx5 netdevs (found:$devs)"

mkdir -p /run/netns /var/run
"$IP" netns add peer || fail "ip netns add peer"
"$IP" link set "$n1" netns peer || fail "move $n1 into netns peer"
{ "$IP" addr add 10.20.0.1/24 dev "$n0" && "$IP" link set "$n0" up; } || fail "$n0 up with 10.20.0.1"
{ peer "$IP" addr add 10.20.0.2/24 dev "$n1" && peer "$IP" link set "$n1" up &&
  peer "$IP" link set lo up; } || fail "$n1 up with 10.20.0.2 in peer"
i=0
while [ $i -lt 100 ]; do
  c0=$(cat "/sys/class/net/$n0/carrier" 2>/dev/null)
  c1=$(peer cat "/sys/class/net/$n1/carrier" 2>/dev/null)
  [ "$c0$c1" = 11 ] && break
  sleep 0.2
  i=$((i + 1))
done
say "carrier $n0=$c0 $n1=$c1"
[ "$c0$c1" = 11 ] || fail "carrier on both netdevs"
"$IP" -d link show "$n0" | sed 's/^/RIG-OUT link0| /'

ping -c "$ping_count" -W 3 10.20.0.2 >/tmp/ping.out 2>&1
rc=$?
sed 's/^/RIG-OUT ping| /' /tmp/ping.out
say "ping rc=$rc"
[ $rc = 0 ] || fail "ping 10.20.0.2"
received=$(sed -n 's/.* \([0-9]*\) packets received.*/\1/p' /tmp/ping.out)
[ "$received" = "$ping_count" ] || fail "ping: $received of $ping_count replies"

IFS=,
for size in $udp_sizes; do
  unset IFS
  # Not through peer(): $! must be the server itself (ip netns exec execs it), to be killed.
  "$IP" netns exec peer /bin/udp-probe server 7777 4 >/tmp/udp-srv.out 2>&1 &
  spid=$!
  sleep 0.5
  /bin/udp-probe client 10.20.0.2 7777 4 "$size" >/tmp/udp-cli.out 2>&1
  crc=$?
  wait_exit "$spid" 10
  sed 's/^/RIG-OUT udp-srv| /' /tmp/udp-srv.out
  sed 's/^/RIG-OUT udp-cli| /' /tmp/udp-cli.out
  say "udp size=$size server=$WAIT_RC client=$crc"
  [ "$crc" = 0 ] && [ "$WAIT_RC" = 0 ] || fail "udp echo of $size-byte datagrams"
  IFS=,
done
unset IFS

dd if=/dev/urandom of=/tmp/tcp.in bs=1024 count="$tcp_kib" 2>/dev/null
want=$(md5sum </tmp/tcp.in | cut -d' ' -f1)
# busybox nc ends the connection when its stdin ends: the server's stays open.
sleep 60 | "$IP" netns exec peer nc -l -p 8000 >/tmp/tcp.out 2>/tmp/tcp-srv.err &
spid=$!
sleep 0.5
nc -w 10 10.20.0.2 8000 </tmp/tcp.in 2>/tmp/tcp-cli.err
crc=$?
wait_exit "$spid" 30
got=$(md5sum </tmp/tcp.out | cut -d' ' -f1)
say "tcp kib=$tcp_kib client=$crc server=$WAIT_RC bytes=$(wc -c </tmp/tcp.out) md5 want=$want got=$got"
cat /tmp/tcp-srv.err /tmp/tcp-cli.err 2>/dev/null | sed 's/^/RIG-OUT tcp| /'
[ "$want" = "$got" ] || fail "tcp transfer of $tcp_kib KiB arrived changed or short"

"$IP" -s link show "$n0" | sed 's/^/RIG-OUT stats0| /'
peer "$IP" -s link show "$n1" | sed 's/^/RIG-OUT stats1| /'
"$IP" link set "$n0" down || fail "$n0 down"
peer "$IP" link set "$n1" down || fail "$n1 down"
"$IP" link set "$n1" netns 1 2>/dev/null || peer "$IP" link set "$n1" netns 1 || fail "$n1 back"
rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
dmesg | grep -iE 'mlx5|WARNING|BUG|Call Trace' | sed 's/^/RIG-DMESG /'
say "done failures=$FAILS uptime=$(up)s"
[ "$FAILS" = 0 ]
