#!/usr/bin/env bash
# Guest test: Linux 6.12 mlx5_core's Ethernet driver (mlx5e) on two model HCAs with Ethernet
# ports on one model wire (one vfio-user server, --eth), no IOMMU. In the guest (guest-eth.sh)
# the second netdev sits in its own network namespace; ping, UDP echoes (32 B, 1472 B, and
# 3000 B in IP fragments; udp-probe.c, linked statically in the rig chroot) and a TCP transfer
# (checksum offload, LSO) cross the model between them. Passes only when
#   - mlx5_core loads, makes a netdev on each function and unloads;
#   - both carriers come up, every echo comes back intact and the TCP data arrives unchanged;
#   - the kernel prints no WARNING/BUG/Call Trace and no mlx5 complaint;
#   - every firmware command in the model's traces succeeded and both HCAs end clean;
#   - the model counted frames both ways, checksum offloads and RSS on each HCA, and LSO.
# With APPLIANCE=1 the first HCA goes to vfio-pci behind the emulated IOMMU instead and runs
# bareverbs' eth_appliance (musl build); Linux mlx5e on the second pings it and gets its UDP
# echoes (ARP resolved by the appliance first): the driver's Ethernet path over real VFIO,
# judged by Linux.
# Usage: test-eth.sh [WORKDIR]   (default /tmp/bareverbs-eth, /tmp/bareverbs-eth-appliance)
# Environment: PING_COUNT, UDP_SIZES, TCP_KIB (see guest-eth.sh), TIMEOUT (guest deadline, s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
appliance=${APPLIANCE:-}
work=${1:-/tmp/bareverbs-eth${appliance:+-appliance}}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=ib-test-lib.sh
. "$here/ib-test-lib.sh"
rig_require_built
[ -e "$RIG_ROOTFS/usr/bin/gcc" ] || rig_die "rig chroot lacks /usr/bin/gcc: rebuild it with build-rig.sh"

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user

build=$(mktemp -d "$RIG_ROOTFS/tmp/udp-probe.XXXXXX")
cp "$here/udp-probe.c" "$build/"
rel=/${build#"$RIG_ROOTFS"/}
rig_chroot "$RIG_ROOTFS" gcc -O2 -Wall -Wextra -Werror -static -o "$rel/udp-probe" "$rel/udp-probe.c" || true
[ -x "$build/udp-probe" ] || rig_die "building udp-probe in the rig chroot failed"
cp "$build/udp-probe" "$work/udp-probe"
rm -rf --one-file-system -- "$build"
extra=()
if [ -n "$appliance" ]; then
  cargo build --release --locked -q --manifest-path "$top/Cargo.toml" \
    --target x86_64-unknown-linux-musl -p bareverbs-examples --bin eth_appliance
  extra=("$target/x86_64-unknown-linux-musl/release/eth_appliance:/bin/eth_appliance")
fi
"$here/make-initramfs.sh" --chroot-bin /usr/bin/ip "$work/initrd.gz" \
  "$here/guest-ib-lib.sh:/bin/guest-ib-lib.sh" "$here/guest-eth.sh:/bin/guest-eth.sh" \
  "$work/udp-probe:/bin/udp-probe" "${extra[@]}" >"$work/initrd.log" 2>&1 || { cat "$work/initrd.log" >&2; exit 1; }

rm -f "$work"/mlx5-*.sock "$work"/hca*.trace
"$target/release/mlx5-vfio-user" --socket "$work/mlx5-0.sock" --socket "$work/mlx5-1.sock" --eth \
  --trace-dir "$work" ${SERVER_ARGS:-} >"$work/server.log" 2>&1 &
spid=$!
trap 'kill $spid 2>/dev/null || true' EXIT
append="RUN=/bin/guest-eth.sh PING_COUNT=${PING_COUNT:-5} UDP_SIZES=${UDP_SIZES:-32,1472,3000} TCP_KIB=${TCP_KIB:-512}"
iommu=()
if [ -n "$appliance" ]; then
  append="hugepages=32 $append APPLIANCE=1"
  iommu=(--iommu)
fi
rc=0
"$here/run-guest.sh" --initrd "$work/initrd.gz" --mode run --smp 2 "${iommu[@]}" \
  --vfio-user "$work/mlx5-0.sock" --vfio-user "$work/mlx5-1.sock" --append "$append" \
  --timeout "${TIMEOUT:-600}" --quiet --log "$work/guest.raw.log" || rc=$?
wait "$spid" 2>/dev/null || true
log=$work/guest.log
tr -d '\r' <"$work/guest.raw.log" >"$log"

[ "$rc" = 0 ] || bad "guest run failed (status $rc; the guest script reports each failed step as RIG-IB FAIL)"
wants=("RIG-IB insmod-mlx5_core rc=0" "RIG-IB ping rc=0" "RIG-IB rmmod-mlx5_core rc=0")
[ -n "$appliance" ] || wants+=("RIG-IB carrier")
for want in "${wants[@]}"; do
  grep -qF "$want" "$log" || bad "guest log lacks '$want'"
done
if grep -E '^RIG-IB FAIL ' "$log"; then bad "guest steps failed (above)"; fi
grep -E '^RIG-IB (netdev|carrier|ping|udp|tcp|appliance) ' "$log" || true
ib_check_kernel "$log"
ib_check_traces "$work/hca0.trace" "$work/hca1.trace"
if [ -z "$appliance" ]; then
  # The model's own account: frames both ways, checksum offload and RSS picking the RQ of
  # received frames on each HCA; the TCP sender's segments cut by LSO.
  lso=0
  for t in "$work/hca0.trace" "$work/hca1.trace"; do
    w=$(grep '^WORK' "$t" || echo 'no WORK line')
    echo "$w" | grep -qE 'eth_frames_sent=[1-9][0-9]* eth_frames_received=[1-9][0-9]* .*csum_offloads=[1-9][0-9]* rss_hashed=[1-9][0-9]*' ||
      bad "$t: expected frames both ways, checksum offload and RSS: $w"
    lso=$((lso + $(echo "$w" | sed -n 's/.* lso_segments=\([0-9]*\).*/\1/p')))
  done
  [ "$lso" -gt 0 ] || bad "no LSO segments in the model's traces (the TCP transfer should use TSO)"
else
  grep -q '^RIG-OUT appliance| eth_appliance: MAC' "$log" || bad "the appliance did not start"
fi
grep -h '^WORK' "$work/hca0.trace" "$work/hca1.trace" || true
if [ "$fail" = 0 ] && [ -n "$appliance" ]; then echo "PASS: Linux mlx5e pings bareverbs' eth_appliance (over VFIO) and gets its UDP echoes across the model's wire"; fi
if [ "$fail" = 0 ] && [ -z "$appliance" ]; then echo "PASS: Linux mlx5e on two model HCAs: ping, UDP and TCP across the model's wire"; fi
exit "$fail"
