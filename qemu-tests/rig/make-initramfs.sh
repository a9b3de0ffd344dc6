#!/usr/bin/env bash
# Build a gzip'd newc initramfs for the rig guest: busybox-static, the mlx5 and VFIO kernel
# modules of the rig's kernel (decompressed, with their modules.dep dependencies), a busybox
# /init whose mode is chosen with rig=MODE on the kernel command line, and extra files.
#
# Usage: make-initramfs.sh [--module NAME]... OUTPUT [FILE[:GUEST_PATH]]...
#   OUTPUT             where to write the initramfs (e.g. /tmp/rig/initrd.gz)
#   FILE[:GUEST_PATH]  extra host file to add; without GUEST_PATH it goes to /bin/<name>
#                      (use static binaries: the initramfs has no libc). FILE:/init replaces /init.
#   --module NAME      also add kernel module NAME and its dependencies (group "extra":
#                      load it in the guest with MODULES=extra on the command line)
# Guest modes (rig=...): smoke (default), probe, vfio, run, shell, hang, none. See README.md.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
rig_trap_err

usage() { sed -n '2,13s/^# \{0,1\}//p' "$0"; }

extra_mods=()
out=""
files=()
while [ $# -gt 0 ]; do
  case $1 in
    --module)
      [ $# -ge 2 ] || rig_die "--module needs a module name"
      extra_mods+=("$2")
      shift
      ;;
    -h | --help) usage; exit 0 ;;
    -*) usage >&2; rig_die "unknown option '$1'" ;;
    *)
      if [ -z "$out" ]; then out=$1; else files+=("$1"); fi
      ;;
  esac
  shift
done
[ -n "$out" ] || { usage >&2; rig_die "missing OUTPUT path"; }

rig_need_root
rig_require_built
start=$SECONDS

# Module groups. Each becomes /m/<group>.order in the guest: file names in load order.
GROUP_MLX5=(mlx5_core)
GROUP_VFIO=(vfio vfio_iommu_type1 irqbypass vfio-pci-core vfio-pci)

moddir=/lib/modules/$RIG_KREL
depfile=$RIG_ROOTFS$moddir/modules.dep
[ -f "$depfile" ] || rig_die "$depfile missing: run build-rig.sh --rebuild"

# name (dashes as underscores) -> path relative to $moddir, and -> its dependency paths.
declare -A MOD_PATH MOD_DEPS
modname() {
  local b=${1##*/}
  b=${b%%.ko*}
  printf '%s' "${b//-/_}"
}
while IFS= read -r line; do
  p=${line%%:*}
  n=$(modname "$p")
  MOD_PATH[$n]=$p
  MOD_DEPS[$n]=${line#*:}
done <"$depfile"

# Append the load order of module NAME (dependencies first) to the array named ORDER.
ORDER=()
add_module() {
  local n
  n=$(modname "$1")
  [ -n "${MOD_PATH[$n]:-}" ] || rig_die "module '$1' is not in $moddir/modules.dep (not built as a module in $RIG_KREL?)"
  local deps=() i d
  read -r -a deps <<<"${MOD_DEPS[$n]}"
  # modules.dep lists the full dependency closure; modprobe loads it from the end.
  for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
    d=$(modname "${deps[i]}")
    in_order "$d" || ORDER+=("$d")
  done
  in_order "$n" || ORDER+=("$n")
}
in_order() {
  local x
  for x in "${ORDER[@]}"; do [ "$x" = "$1" ] && return 0; done
  return 1
}

stage=$(mktemp -d "$RIG_ROOTFS/tmp/initramfs.XXXXXX")
cleanup() { rm -rf --one-file-system -- "$stage"; }
trap cleanup EXIT
base=$stage/base
mkdir -p "$base"/{bin,dev,proc,sys,m,tmp,etc}
cp "$RIG_ROOTFS/usr/bin/busybox" "$base/bin/busybox"
mknod -m 600 "$base/dev/console" c 5 1

copied=()
copy_module() { # NAME -> $base/m/<file>.ko (decompressed); prints the file name
  local n=$1 rel src f x
  rel=${MOD_PATH[$n]}
  src=$moddir/$rel
  f=${rel##*/}
  f=${f%%.ko*}.ko
  for x in "${copied[@]}"; do
    if [ "$x" = "$f" ]; then
      printf '%s\n' "$f"
      return 0
    fi
  done
  case $src in
    *.ko) cp "$RIG_ROOTFS$src" "$base/m/$f" ;;
    *.ko.xz) rig_chroot "$RIG_ROOTFS" xz -dc "$src" >"$base/m/$f" ;;
    *.ko.gz) rig_chroot "$RIG_ROOTFS" gzip -dc "$src" >"$base/m/$f" ;;
    *.ko.zst) rig_chroot "$RIG_ROOTFS" zstd -qdc "$src" >"$base/m/$f" ||
      rig_die "cannot decompress $src: zstd is not in the chroot (add it to build-rig.sh)" ;;
    *) rig_die "unknown module file type: $src" ;;
  esac
  printf '%s\n' "$f"
}
write_group() { # GROUP-NAME MODULE...
  local g=$1 n f
  shift
  ORDER=()
  for n in "$@"; do add_module "$n"; done
  : >"$base/m/$g.order"
  for n in "${ORDER[@]}"; do
    f=$(copy_module "$n")
    copied+=("$f")
    printf '%s\n' "$f" >>"$base/m/$g.order"
  done
  rig_log "module group $g: $(tr '\n' ' ' <"$base/m/$g.order")"
}
write_group mlx5 "${GROUP_MLX5[@]}"
write_group vfio "${GROUP_VFIO[@]}"
if [ "${#extra_mods[@]}" -gt 0 ]; then
  write_group extra "${extra_mods[@]}"
fi
printf '%s\n' "$RIG_KREL" >"$base/etc/rig-kernel"

cat >"$base/init" <<'INIT'
#!/bin/busybox sh
# bareverbs rig guest /init (written by qemu-tests/rig/make-initramfs.sh).
# Mode: rig=MODE on the kernel command line. KEY=VAL arguments the kernel does not know
# arrive here as environment variables (WAIT, VFIO_ARGS, VFIO_PROG, RUN, RUN_ARGS, MODULES, RIG_BDF).
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev

up() { cut -d' ' -f1 /proc/uptime; }
MODE=$(tr ' ' '\n' </proc/cmdline | sed -n 's/^rig=//p' | tail -n 1)
[ -n "$MODE" ] || MODE=smoke
echo "RIG-INIT mode=$MODE kernel=$(uname -r) uptime=$(up)s"

finish() {
  echo "GUEST-DONE mode=$MODE rc=$1 uptime=$(up)s"
  # poweroff -f hangs while a probe is stuck holding the device lock: reboot via sysrq
  # after 2 s (QEMU runs with -no-reboot, so a reboot ends it too).
  (sleep 2; echo b >/proc/sysrq-trigger) &
  poweroff -f
  sleep 30
  exit "$1"
}

pci_list() {
  for d in /sys/bus/pci/devices/*; do
    [ -e "$d" ] || continue
    g=$(readlink "$d/iommu_group" 2>/dev/null)
    echo "PCI ${d##*/} vendor=$(cat "$d/vendor") device=$(cat "$d/device") class=$(cat "$d/class") iommu_group=${g##*/}"
  done
}

# Load the modules listed (in order) in FILE; skip those already loaded.
modload_file() {
  while read -r f; do
    [ -n "$f" ] || continue
    n=$(echo "${f%.ko}" | tr - _)
    [ -d "/sys/module/$n" ] && continue
    insmod "/m/$f" || { echo "RIG-ERROR insmod $f failed"; return 1; }
  done <"$1"
}
modload() { # GROUP (mlx5, vfio, extra)
  [ -f "/m/$1.order" ] || { echo "RIG-ERROR no module group '$1'"; return 1; }
  modload_file "/m/$1.order"
}

# The device under test: RIG_BDF=0000:01:00.0, else the first Mellanox (0x15b3) function.
find_dev() {
  if [ -n "$RIG_BDF" ]; then
    DEV=/sys/bus/pci/devices/$RIG_BDF
  else
    DEV=$(grep -l 0x15b3 /sys/bus/pci/devices/*/vendor 2>/dev/null | head -n 1)
    DEV=${DEV%/vendor}
  fi
  BDF=${DEV##*/}
  if [ -z "$BDF" ] || [ ! -d "$DEV" ]; then
    echo "RIG-ERROR no device under test (no 15b3 PCI function; RIG_BDF='$RIG_BDF')"
    return 1
  fi
  echo "RIG-DEV $BDF"
}

for g in $(echo "$MODULES" | tr ',' ' '); do
  modload "$g" || finish 1
done

rc=0
case "$MODE" in
smoke)
  pci_list
  echo "RIG-SMOKE-OK pci_functions=$(find /sys/bus/pci/devices -mindepth 1 -maxdepth 1 | wc -l) uptime=$(up)s"
  ;;
none)
  pci_list
  ;;
probe)
  pci_list
  find_dev || finish 1
  grep -v '^mlx5_core.ko$' /m/mlx5.order >/tmp/mlx5-deps.order
  modload_file /tmp/mlx5-deps.order || finish 1
  ( insmod /m/mlx5_core.ko; r=$?; echo "RIG-PROBE insmod rc=$r at $(up)s"; echo "$r" >/tmp/insmod.done ) &
  i=0
  while [ $i -lt "${WAIT:-20}" ] && [ ! -e /tmp/insmod.done ] &&
    ! dmesg | grep -q -E "mlx5_core.*(timeout|leak)"; do
    sleep 1
    i=$((i + 1))
  done
  sleep 2
  grep -i -E "mlx|PCI-MSI" /proc/interrupts
  dmesg | grep -i -E "mlx5|$BDF|DMAR|vfio"
  if [ -e /tmp/insmod.done ]; then rc=$(cat /tmp/insmod.done); else
    echo "RIG-PROBE insmod still running after ${WAIT:-20}s"
    rc=124
  fi
  if [ "$rc" = 0 ]; then
    echo "RIG-PROBE driver=$(basename "$(readlink "$DEV/driver" 2>/dev/null)" 2>/dev/null)"
    for a in /sys/bus/auxiliary/devices/*; do [ -e "$a" ] && echo "RIG-PROBE aux=$(basename "$a")"; done
  fi
  if [ "$rc" = 0 ] && [ "${RMMOD:-0}" = 1 ]; then
    n=$(dmesg | wc -l)
    rmmod mlx5_core
    r=$?
    sleep 1
    echo "RIG-PROBE rmmod rc=$r"
    dmesg | tail -n +"$((n + 1))" | sed 's/^/RIG-RMMOD /'
    [ "$r" = 0 ] || rc=$r
  fi
  if [ "$rc" = 0 ] && [ "${REPROBE:-0}" = 1 ]; then
    # Function reset of every Mellanox device, then a second probe and removal.
    for d in /sys/bus/pci/devices/*; do
      [ "$(cat "$d/vendor")" = 0x15b3 ] || continue
      echo 1 >"$d/reset" && echo "RIG-PROBE reset $(basename "$d") ok" || echo "RIG-PROBE reset $(basename "$d") failed"
    done
    n=$(dmesg | wc -l)
    insmod /m/mlx5_core.ko
    r=$?
    sleep 1
    echo "RIG-PROBE reinsmod rc=$r"
    for a in /sys/bus/auxiliary/devices/*; do [ -e "$a" ] && echo "RIG-PROBE reaux=$(basename "$a")"; done
    rmmod mlx5_core
    r2=$?
    sleep 1
    echo "RIG-PROBE rermmod rc=$r2"
    dmesg | tail -n +"$((n + 1))" | sed 's/^/RIG-REPROBE /'
    [ "$r" = 0 ] && [ "$r2" = 0 ] || rc=1
  fi
  ;;
vfio)
  pci_list
  grep -i huge /proc/meminfo
  find_dev || finish 1
  # shellcheck disable=SC2086 # VFIO_ARGS holds module parameters, split on purpose
  [ -d /sys/module/vfio ] || insmod /m/vfio.ko $VFIO_ARGS || finish 1
  modload vfio || finish 1
  echo vfio-pci >"$DEV/driver_override"
  echo "$BDF" >/sys/bus/pci/drivers_probe
  drv=$(readlink "$DEV/driver")
  GROUP=$(readlink "$DEV/iommu_group")
  GROUP=${GROUP##*/}
  echo "RIG-VFIO bdf=$BDF driver=${drv##*/} group=$GROUP"
  [ "${drv##*/}" = vfio-pci ] || { echo "RIG-ERROR $BDF did not bind to vfio-pci"; finish 1; }
  prog=${VFIO_PROG:-/bin/vfiotest}
  if [ -x "$prog" ]; then
    # VFIO_PROG_ARGS may name the device as @BDF and @GROUP; default: "GROUP BDF".
    args=${VFIO_PROG_ARGS:-@GROUP @BDF}
    args=$(echo "$args" | sed "s/@BDF/$BDF/g; s/@GROUP/$GROUP/g")
    # shellcheck disable=SC2086 # the arguments are split on purpose
    "$prog" $args
    rc=$?
    echo "RIG-VFIO prog rc=$rc"
  else
    echo "RIG-ERROR $prog not in the initramfs (add it: make-initramfs.sh OUT prog:$prog)"
    rc=1
  fi
  ;;
run)
  if [ -z "$RUN" ] || [ ! -x "$RUN" ]; then
    echo "RIG-ERROR rig=run needs RUN=/path/to/program in the initramfs (got '$RUN')"
    rc=1
  else
    # shellcheck disable=SC2086 # RUN_ARGS is split on purpose
    "$RUN" $RUN_ARGS
    rc=$?
  fi
  ;;
shell)
  echo "RIG-SHELL: exit the shell to power off"
  setsid cttyhack sh || sh
  ;;
hang)
  echo "RIG-HANG: sleeping forever (tests the host-side deadline)"
  while :; do sleep 3600; done
  ;;
*)
  echo "RIG-ERROR unknown mode rig=$MODE (smoke, none, probe, vfio, run, shell, hang)"
  rc=2
  ;;
esac
finish "$rc"
INIT
chmod 755 "$base/init"

# True if FILE is a 64-bit ELF with a PT_INTERP program header (dynamically linked).
has_interp() {
  local f=$1 phoff phsz phnum i
  [ "$(od -An -c -N 5 "$f" 2>/dev/null | tr -d ' ')" = '177ELF002' ] || return 1
  phoff=$(od -An -t u8 -j 32 -N 8 "$f" | tr -d ' ')
  phsz=$(od -An -t u2 -j 54 -N 2 "$f" | tr -d ' ')
  phnum=$(od -An -t u2 -j 56 -N 2 "$f" | tr -d ' ')
  for ((i = 0; i < phnum; i++)); do
    [ "$(od -An -t u4 -j $((phoff + i * phsz)) -N 4 "$f" | tr -d ' ')" = 3 ] && return 0
  done
  return 1
}
for spec in "${files[@]+"${files[@]}"}"; do
  src=${spec%%:*}
  if [ "$src" = "$spec" ]; then dst=/bin/${src##*/}; else dst=${spec#*:}; fi
  case $dst in /*) ;; *) rig_die "guest path '$dst' must be absolute (in '$spec')" ;; esac
  [ -f "$src" ] || rig_die "extra file '$src' not found"
  mkdir -p "$base$(dirname "$dst")"
  cp "$src" "$base$dst"
  if has_interp "$src"; then
    rig_warn "$src looks dynamically linked; the initramfs has no libc (build it static)"
  fi
  rig_log "added $src as $dst"
done

# Fixed timestamps, sorted names and owner 0: the same inputs give the same bytes.
find "$base" -exec touch -h -d @0 {} +
mkdir -p "$(dirname "$out")"
rel=/${stage#"$RIG_ROOTFS"/}/base
# shellcheck disable=SC2016 # $1 expands in the chroot's sh
rig_chroot "$RIG_ROOTFS" /bin/sh -c \
  'cd "$1" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -9n' \
  sh "$rel" >"$out.tmp"
mv "$out.tmp" "$out"
rig_log "wrote $out ($(du -h "$out" | cut -f1), kernel $RIG_KREL) in $((SECONDS - start)) s"
