#!/usr/bin/env bash
# Build (or reuse) the bareverbs QEMU rig: a Debian trixie chroot holding QEMU 11 from
# trixie-backports, the trixie 6.12 kernel, busybox-static, rdma-core's user space (libibverbs,
# the mlx5 provider, ibv_* utilities, perftest) and a C compiler with libibverbs-dev.
# See README.md beside this file.
#
# Usage: build-rig.sh [--rebuild] [--help]
# Environment:
#   BAREVERBS_RIG_CACHE    cache directory (default /var/cache/bareverbs-rig)
#   BAREVERBS_RIG_MIRROR   Debian mirror (default http://deb.debian.org/debian)
#   BAREVERBS_RIG_SECURITY Debian security mirror (default http://deb.debian.org/debian-security)
#   BAREVERBS_RIG_ANY_VERSION=1  accept a QEMU other than 11.x or a kernel other than 6.12.x
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
rig_trap_err
orig_args=("$@") # for the re-exec into a private mount namespace

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }

rebuild=0
while [ $# -gt 0 ]; do
  case $1 in
    --rebuild) rebuild=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; rig_die "unknown argument '$1'" ;;
  esac
  shift
done

MIRROR=${BAREVERBS_RIG_MIRROR:-http://deb.debian.org/debian}
SECURITY=${BAREVERBS_RIG_SECURITY:-http://deb.debian.org/debian-security}
SUITE=trixie
# Packages from the suite itself, and packages taken from trixie-backports. cpio and
# xz-utils are used by make-initramfs.sh, so the host needs neither.
PKGS_MAIN=(linux-image-amd64 busybox-static cpio xz-utils)
# rdma-core's user space, copied into guests by make-initramfs.sh --chroot-bin: libibverbs
# and the providers (libmlx5), the ibv_* utilities, perftest (ib_write_bw, ...); iproute2 for
# `rdma link add` (a soft-RoCE device, the RDMA tests' self-check without the model).
PKGS_RDMA=(ibverbs-utils ibverbs-providers perftest iproute2)
# A compiler to build small C verbs programs against trixie's rdma-core, inside the chroot.
PKGS_CC=(gcc libc6-dev libibverbs-dev)
# Callgrind, to count rdma-core's own instructions per work request inside the guest
# (qemu-tests/bench/rdma-core-cost.sh).
PKGS_TOOLS=(valgrind)
PKGS_BPO=(qemu-system-x86)

# What the stamp must say for the cache to be reused. Bump RECIPE when the build steps change.
RECIPE=3
recipe_text() {
  printf 'recipe=%s\nsuite=%s\nmirror=%s\nsecurity=%s\npackages=%s\nrdma-packages=%s\ncc-packages=%s\ntools-packages=%s\nbackports-packages=%s\n' \
    "$RECIPE" "$SUITE" "$MIRROR" "$SECURITY" "${PKGS_MAIN[*]}" "${PKGS_RDMA[*]}" "${PKGS_CC[*]}" "${PKGS_TOOLS[*]}" "${PKGS_BPO[*]}"
}

print_versions() {
  rig_log "rig versions ($RIG_VERSIONS):"
  sed 's/^/    /' "$RIG_VERSIONS" >&2
}

rig_need_root
rig_need_cmds chroot mount umount mountpoint flock awk sed sort
rig_enter_mount_ns "${orig_args[@]}"

mkdir -p "$RIG_CACHE"
exec 9>>"$RIG_LOCK"
if ! flock -x -n 9; then
  rig_log "waiting for the rig lock $RIG_LOCK (another build or a guest run holds it)"
  flock -x -w 3600 9 || rig_die "timed out waiting for the rig lock $RIG_LOCK"
fi

# ---- reuse a complete rig ---------------------------------------------------------------
complete_reason=""
if [ "$rebuild" -eq 1 ]; then
  complete_reason="--rebuild given"
elif [ ! -f "$RIG_STAMP" ]; then
  complete_reason="no stamp at $RIG_STAMP"
elif [ "$(sed -n '/^recipe=/,/^backports-packages=/p' "$RIG_STAMP")" != "$(recipe_text)" ]; then
  complete_reason="stamp records a different recipe (mirror, packages or recipe version changed)"
elif [ ! -f "$RIG_VERSIONS" ]; then
  complete_reason="no $RIG_VERSIONS"
else
  krel=$(rig_version KERNEL_RELEASE)
  for f in /usr/bin/qemu-system-x86_64 "/boot/vmlinuz-$krel" "/lib/modules/$krel/modules.dep" \
    /usr/bin/busybox /usr/bin/cpio /usr/bin/xz /usr/bin/ibv_devinfo /usr/bin/ib_write_bw \
    /usr/bin/gcc /usr/include/infiniband/verbs.h; do
    if [ -z "$krel" ] || [ ! -e "$RIG_ROOTFS$f" ]; then
      complete_reason="stamp present but $RIG_ROOTFS$f is missing"
      break
    fi
  done
fi
if [ -z "$complete_reason" ]; then
  rig_log "rig at $RIG_CACHE is complete; reusing it (pass --rebuild to start from nothing)"
  print_versions
  exit 0
fi
rig_log "building the rig from nothing in $RIG_CACHE ($complete_reason)"

start=$SECONDS
step() { rig_log "[$((SECONDS - start))s] $*"; }
BUILD_LOG=$RIG_CACHE/build.log
: >"$BUILD_LOG"
# Run a command with its output in build.log; on failure show the end of the log.
logged() {
  if ! "$@" >>"$BUILD_LOG" 2>&1; then
    rig_log "failed: $*"
    rig_log "last lines of $BUILD_LOG:"
    tail -n 30 "$BUILD_LOG" | sed 's/^/    | /' >&2
    rig_die "build step failed; full log in $BUILD_LOG"
  fi
}

# Invalidate first: from here on, a crash leaves no stamp, so the next run rebuilds.
rm -f "$RIG_STAMP" "$RIG_VERSIONS"
NEW=$RIG_CACHE/rootfs.new
cleanup() {
  local rc=$?
  rig_umount_all
  if [ "$rc" -ne 0 ]; then
    rig_log "build FAILED (exit $rc); nothing is stamped, so the next run starts again from nothing"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- host: debootstrap --------------------------------------------------------------------
if ! command -v debootstrap >/dev/null 2>&1; then
  step "debootstrap missing on the host: apt-get install debootstrap"
  logged apt-get update
  logged env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap
fi
[ -e /usr/share/debootstrap/scripts/$SUITE ] ||
  rig_die "this debootstrap ($(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null || echo '?')) does not know '$SUITE'; install a newer debootstrap"

# ---- debootstrap --------------------------------------------------------------------------
step "removing any previous partial build ($NEW)"
rig_safe_rmtree "$NEW"
step "debootstrap --variant=minbase $SUITE from $MIRROR (a few minutes; log: $BUILD_LOG)"
# Show debootstrap's own progress lines (I: ...) while keeping everything in the log.
if ! debootstrap --variant=minbase --components=main "$SUITE" "$NEW" "$MIRROR" 2>&1 |
  tee -a "$BUILD_LOG" | grep --line-buffered -E '^(I: (Retrieving|Validating|Extracting|Installing|Configuring|Base system)|E:|W:)' |
  awk '$2 ~ /^(Retrieving|Validating|Extracting|Installing|Configuring)$/ { if (seen[$2]++) next }
       { print "    " $0; fflush() }' >&2; then
  tail -n 30 "$BUILD_LOG" | sed 's/^/    | /' >&2
  [ -f "$NEW/debootstrap/debootstrap.log" ] && tail -n 20 "$NEW/debootstrap/debootstrap.log" | sed 's/^/    | /' >&2
  rig_die "debootstrap failed (network? mirror $MIRROR?); full log in $BUILD_LOG"
fi

# ---- apt configuration inside the chroot -----------------------------------------------------
step "configuring apt in the chroot (trixie, trixie-updates, trixie-security, trixie-backports)"
rm -f "$NEW/etc/apt/sources.list"
cat >"$NEW/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates $SUITE-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
cat >"$NEW/etc/apt/apt.conf.d/90bareverbs-rig" <<'EOF'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
EOF
# No service may start inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$NEW/usr/sbin/policy-rc.d"
chmod 755 "$NEW/usr/sbin/policy-rc.d"
cp -L /etc/resolv.conf "$NEW/etc/resolv.conf" 2>/dev/null || rig_warn "could not copy /etc/resolv.conf"

rig_mount "$NEW/proc" -t proc proc
rig_mount "$NEW/dev" --bind /dev
rig_mount "$NEW/dev/pts" --bind /dev/pts # else apt says "Can not write log (Is /dev/pts mounted?)"

step "apt-get update in the chroot"
logged rig_chroot "$NEW" apt-get update
step "apt-get install ${PKGS_MAIN[*]} (the kernel postinst also builds an unused initrd)"
logged rig_chroot "$NEW" apt-get install -y "${PKGS_MAIN[@]}"
step "apt-get install ${PKGS_RDMA[*]} (rdma-core user space)"
logged rig_chroot "$NEW" apt-get install -y "${PKGS_RDMA[@]}"
step "apt-get install ${PKGS_CC[*]}"
logged rig_chroot "$NEW" apt-get install -y "${PKGS_CC[@]}"
step "apt-get install ${PKGS_TOOLS[*]}"
logged rig_chroot "$NEW" apt-get install -y --no-install-recommends "${PKGS_TOOLS[@]}"
step "apt-get install -t $SUITE-backports ${PKGS_BPO[*]}"
logged rig_chroot "$NEW" apt-get install -y -t "$SUITE-backports" "${PKGS_BPO[@]}"
logged rig_chroot "$NEW" apt-get clean
# The Debian initrd is not used (make-initramfs.sh builds its own); drop it to save space.
rm -f "$NEW"/boot/initrd.img-*

# ---- verify and record versions ---------------------------------------------------------------
step "verifying the installation"
mapfile -t krels < <(find "$NEW/lib/modules" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort)
[ "${#krels[@]}" -eq 1 ] || rig_die "expected exactly one kernel in $NEW/lib/modules, found: ${krels[*]:-none}"
krel=${krels[0]}
[ -f "$NEW/boot/vmlinuz-$krel" ] || rig_die "kernel image $NEW/boot/vmlinuz-$krel missing"
[ -f "$NEW/lib/modules/$krel/modules.dep" ] || rig_die "modules.dep missing for $krel"
[ -x "$NEW/usr/bin/busybox" ] || rig_die "busybox-static did not install /usr/bin/busybox"
for f in /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ib_write_bw /etc/libibverbs.d/mlx5.driver /usr/bin/rdma \
  /usr/include/infiniband/verbs.h /usr/bin/gcc; do
  [ -e "$NEW$f" ] || rig_die "$f missing after installing ${PKGS_RDMA[*]} ${PKGS_CC[*]}"
done
compgen -G "$NEW/usr/lib/x86_64-linux-gnu/libibverbs/libmlx5-rdmav*.so" >/dev/null ||
  rig_die "the mlx5 provider (libibverbs/libmlx5-rdmav*.so) is missing"
qemu_line=$(rig_chroot "$NEW" qemu-system-x86_64 --version | head -n 1) ||
  rig_die "qemu-system-x86_64 --version failed inside the chroot"

# shellcheck disable=SC2016 # ${Version} is dpkg-query's format, not a shell expansion
pkgver() { rig_chroot "$NEW" dpkg-query -W -f='${Version}' "$1"; }
kpkg=linux-image-$krel
qemu_ver=$(pkgver qemu-system-x86)
kernel_ver=$(pkgver "$kpkg")
busybox_ver=$(pkgver busybox-static)
seabios_ver=$(pkgver seabios 2>/dev/null || echo none)
rdma_ver=$(pkgver libibverbs1)
providers_ver=$(pkgver ibverbs-providers)
perftest_ver=$(pkgver perftest)
gcc_ver=$(pkgver gcc)
qemu_upstream=$(printf '%s\n' "$qemu_line" | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p')

if [ -z "${BAREVERBS_RIG_ANY_VERSION:-}" ]; then
  case $qemu_upstream in 11.*) ;; *)
    rig_die "QEMU is '$qemu_line', not 11.x (trixie-backports moved?). Set BAREVERBS_RIG_ANY_VERSION=1 to accept it" ;;
  esac
  case $krel in 6.12.*) ;; *)
    rig_die "kernel is $krel, not 6.12.x. Set BAREVERBS_RIG_ANY_VERSION=1 to accept it" ;;
  esac
fi

{
  printf 'QEMU_PACKAGE_VERSION=%s\n' "$qemu_ver"
  printf 'QEMU_VERSION=%s\n' "$qemu_upstream"
  printf 'KERNEL_PACKAGE=%s\n' "$kpkg"
  printf 'KERNEL_PACKAGE_VERSION=%s\n' "$kernel_ver"
  printf 'KERNEL_RELEASE=%s\n' "$krel"
  printf 'BUSYBOX_PACKAGE_VERSION=%s\n' "$busybox_ver"
  printf 'SEABIOS_PACKAGE_VERSION=%s\n' "$seabios_ver"
  printf 'RDMA_CORE_PACKAGE_VERSION=%s\n' "$rdma_ver"
  printf 'IBVERBS_PROVIDERS_PACKAGE_VERSION=%s\n' "$providers_ver"
  printf 'PERFTEST_PACKAGE_VERSION=%s\n' "$perftest_ver"
  printf 'GCC_PACKAGE_VERSION=%s\n' "$gcc_ver"
  printf 'SUITE=%s\n' "$SUITE"
  printf 'BUILT_AT=%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} >"$NEW/.rig-versions"

rig_umount_all

# ---- swap in and stamp ---------------------------------------------------------------------------
step "installing the new chroot as $RIG_ROOTFS"
rig_safe_rmtree "$RIG_ROOTFS"
mv "$NEW" "$RIG_ROOTFS"
mv "$RIG_ROOTFS/.rig-versions" "$RIG_VERSIONS"
{
  recipe_text
  printf '# installed:\n'
  cat "$RIG_VERSIONS"
  printf '# all packages in the chroot:\n'
  # shellcheck disable=SC2016 # dpkg-query's format
  rig_chroot "$RIG_ROOTFS" dpkg-query -W -f='${Package} ${Version}\n'
} >"$RIG_STAMP.tmp"
mv "$RIG_STAMP.tmp" "$RIG_STAMP"

step "done: rig built in $((SECONDS - start)) s, $(du -sh "$RIG_ROOTFS" | cut -f1) on disk"
print_versions
