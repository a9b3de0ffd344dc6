#!/usr/bin/env bash
# Build a gzip'd newc initramfs for the rig guest: busybox-static, the mlx5, rdma and VFIO
# kernel modules of the rig's kernel (decompressed, with their modules.dep dependencies), a
# busybox /init whose mode is chosen with rig=MODE on the kernel command line, extra files, and
# programs from the rig chroot with their shared libraries.
#
# Usage: make-initramfs.sh [options] OUTPUT [FILE[:GUEST_PATH]]...
#   OUTPUT             where to write the initramfs (e.g. /tmp/rig/initrd.gz)
#   FILE[:GUEST_PATH]  extra host file to add; without GUEST_PATH it goes to /bin/<name>
#                      (use static binaries, or --chroot-bin). FILE:/init replaces /init.
#   --module NAME      also add kernel module NAME and its dependencies (group "extra":
#                      load it in the guest with MODULES=extra on the command line)
#   --chroot-bin PATH[:GUEST_PATH]  add program PATH of the rig chroot (e.g. /usr/bin/ibv_devinfo)
#                      at GUEST_PATH (default: the same path; the guest's PATH has /usr/bin) with
#                      every shared library it needs and the dynamic loader, as the chroot's
#                      ldd resolves them. If that pulls in libibverbs, the verbs providers
#                      (--verbs-provider) come too. Repeatable.
#   --verbs-provider NAME  libibverbs provider to add with libibverbs: its
#                      /etc/libibverbs.d/NAME.driver and libibverbs/libNAME-rdmav*.so with
#                      their libraries (repeatable; default: mlx5)
# Guest modes (rig=...): smoke (default), probe, vfio, run, shell, hang, none. See README.md.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
rig_trap_err

usage() { sed -n '2,22s/^# \{0,1\}//p' "$0"; }

extra_mods=()
out=""
files=()
chroot_bins=()
providers=()
while [ $# -gt 0 ]; do
  case $1 in
    --module)
      [ $# -ge 2 ] || rig_die "--module needs a module name"
      extra_mods+=("$2")
      shift
      ;;
    --chroot-bin)
      [ $# -ge 2 ] || rig_die "--chroot-bin needs a path inside the rig chroot"
      chroot_bins+=("$2")
      shift
      ;;
    --verbs-provider)
      [ $# -ge 2 ] || rig_die "--verbs-provider needs a provider name (e.g. mlx5)"
      case $2 in *[!a-z0-9_]* | '') rig_die "--verbs-provider: bad name '$2'" ;; esac
      providers+=("$2")
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

# Module groups. Each becomes /m/<group>.order in the guest: file names in load order, the
# whole dependency closure (loading skips what is already loaded, so "mlx5" then "rdma" works).
GROUP_MLX5=(mlx5_core)
GROUP_RDMA=(ib_core ib_uverbs mlx5_ib)
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
write_group rdma "${GROUP_RDMA[@]}"
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
export PATH=/bin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
# Loopback up (the kernel gives lo 127.0.0.1/8): the pingpongs exchange addresses over TCP.
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

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
modload() { # GROUP (mlx5, rdma, vfio, extra)
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

# ---- programs from the rig chroot, with their shared-library closure -----------------------
declare -A CHROOT_DONE
# Copy chroot path P (absolute) into the initramfs at the same path, recreating every symlink on
# the way (the merged-/usr links /lib -> usr/lib and /lib64 -> usr/lib64, library soname links),
# so that the guest's loader finds each library where the chroot's ldd saw it.
copy_chroot_path() {
  local p=$1 depth=${2:-0} cur="" rest comp t next
  [ "$depth" -lt 40 ] || rig_die "too many symlinks resolving $1 in the rig chroot"
  case $p in /*) ;; *) rig_die "chroot path '$p' is not absolute" ;; esac
  [ -z "${CHROOT_DONE[$p]:-}" ] || return 0
  CHROOT_DONE[$p]=1
  rest=${p#/}
  while [ -n "$rest" ]; do
    comp=${rest%%/*}
    if [ "$comp" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
    cur=$cur/$comp
    if [ -L "$RIG_ROOTFS$cur" ]; then
      t=$(readlink "$RIG_ROOTFS$cur")
      if [ -d "$base$cur" ] && [ ! -L "$base$cur" ]; then
        rig_die "$cur is a symlink in the chroot but a directory in the initramfs (asked for $p)"
      fi
      mkdir -p "$base${cur%/*}"
      [ -L "$base$cur" ] || ln -s "$t" "$base$cur"
      case $t in /*) next=$t ;; *) next=${cur%/*}/$t ;; esac
      # Lexical clean-up is right here: every component before $cur is a real directory.
      next=$(realpath -s -m "$next${rest:+/$rest}")
      copy_chroot_path "$next" $((depth + 1))
      return 0
    fi
  done
  [ -e "$RIG_ROOTFS$p" ] || rig_die "$p does not exist in the rig chroot"
  [ -f "$RIG_ROOTFS$p" ] || rig_die "$p in the rig chroot is not a regular file"
  mkdir -p "$base${p%/*}"
  cp "$RIG_ROOTFS$p" "$base$p"
}
# The shared libraries chroot file P needs (recursively) and the loader, one path a line, as
# the chroot's ldd resolves them. Nothing for a static file.
chroot_closure() {
  local out
  if ! out=$(rig_chroot "$RIG_ROOTFS" ldd "$1" 2>&1); then
    case $out in *"not a dynamic executable"* | *"statically linked"*) return 0 ;; esac
    rig_die "ldd $1 in the rig chroot failed: $out"
  fi
  if printf '%s\n' "$out" | grep -q 'not found'; then
    rig_die "ldd $1 in the rig chroot: missing libraries: $(printf '%s\n' "$out" | grep 'not found' | tr -s ' \t' ' ')"
  fi
  printf '%s\n' "$out" | awk '$2 == "=>" && $3 ~ /^\// { print $3; next } $1 ~ /^\// { print $1 }'
}
add_with_closure() { # CHROOT-PATH: the file (symlinks kept) and its libraries
  local lib
  copy_chroot_path "$1"
  while IFS= read -r lib; do
    [ -n "$lib" ] || continue
    copy_chroot_path "$lib"
    case $lib in */libibverbs.so.*) verbs_dir=${lib%/*}/libibverbs ;; esac
  done < <(chroot_closure "$1")
}
verbs_dir=""
for spec in "${chroot_bins[@]+"${chroot_bins[@]}"}"; do
  src=${spec%%:*}
  if [ "$src" = "$spec" ]; then dst=$src; else dst=${spec#*:}; fi
  case $src$dst in *[!A-Za-z0-9_./+-]*) rig_die "--chroot-bin '$spec': unexpected characters" ;; esac
  case $src in /*) ;; *) rig_die "--chroot-bin path '$src' must be absolute (inside the rig chroot)" ;; esac
  case $dst in /*) ;; *) rig_die "--chroot-bin guest path '$dst' must be absolute" ;; esac
  [ -f "$RIG_ROOTFS$src" ] || rig_die "--chroot-bin: $src is not a file in the rig chroot (build-rig.sh installs it?)"
  add_with_closure "$src"
  if [ "$dst" != "$src" ]; then
    mkdir -p "$base${dst%/*}"
    cp -L "$RIG_ROOTFS$src" "$base$dst"
  fi
  rig_log "added chroot program $src as $dst with its libraries"
done
if [ -n "$verbs_dir" ]; then
  # libibverbs finds providers at run time: it reads /etc/libibverbs.d/*.driver and dlopens
  # <libdir>/libibverbs/lib<name>-rdmav<ABI>.so. Only the chosen providers go in, so that
  # libibverbs does not warn about drivers it cannot load.
  [ "${#providers[@]}" -gt 0 ] || providers=(mlx5)
  for pr in "${providers[@]}"; do
    drv=/etc/libibverbs.d/$pr.driver
    [ -f "$RIG_ROOTFS$drv" ] || rig_die "verbs provider '$pr': $drv not in the rig chroot"
    copy_chroot_path "$drv"
    mapfile -t plibs < <(cd "$RIG_ROOTFS$verbs_dir" && compgen -G "lib$pr-rdmav*.so" | LC_ALL=C sort)
    [ "${#plibs[@]}" -gt 0 ] || rig_die "verbs provider '$pr': no $verbs_dir/lib$pr-rdmav*.so in the rig chroot"
    for pl in "${plibs[@]}"; do add_with_closure "$verbs_dir/$pl"; done
    rig_log "added verbs provider $pr ($drv, ${plibs[*]})"
  done
fi

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
