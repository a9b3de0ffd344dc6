# shellcheck shell=bash
# Shared helpers for the bareverbs QEMU rig scripts. Sourced, never run.
#
# Layout of the cache directory (outside the repository):
#   $RIG_CACHE/rootfs         the trixie chroot that holds QEMU, the kernel and busybox
#   $RIG_CACHE/stamp          written last by build-rig.sh; the rig is complete only if it exists
#   $RIG_CACHE/versions.env   exact installed versions, KEY=VALUE lines
#   $RIG_CACHE/build.log      full output of the last build
#   $RIG_CACHE/.lock          flock: build-rig.sh takes it exclusive, the others shared

RIG_CACHE=${BAREVERBS_RIG_CACHE:-/var/cache/bareverbs-rig}
RIG_ROOTFS=$RIG_CACHE/rootfs
RIG_STAMP=$RIG_CACHE/stamp
RIG_VERSIONS=$RIG_CACHE/versions.env
RIG_LOCK=$RIG_CACHE/.lock
RIG_PROG=${0##*/}

rig_log() { printf '[%s %s] %s\n' "$RIG_PROG" "$(date +%H:%M:%S)" "$*" >&2; }
rig_warn() { printf '[%s] WARNING: %s\n' "$RIG_PROG" "$*" >&2; }
rig_die() {
  printf '[%s] ERROR: %s\n' "$RIG_PROG" "$*" >&2
  exit 1
}

# Report the failing command and line when `set -e` fires.
rig_on_err() {
  printf '[%s] ERROR: command failed (exit %s) at line %s: %s\n' "$RIG_PROG" "$1" "$2" "$3" >&2
}
rig_trap_err() {
  trap 'rig_on_err "$?" "$LINENO" "$BASH_COMMAND"' ERR
}

rig_need_root() {
  [ "$(id -u)" -eq 0 ] || rig_die "must run as root (it uses chroot, mount and unshare)"
}

rig_need_cmds() {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || rig_die "required host command '$c' not found"
  done
}

# Re-run the calling script in a private mount namespace, so that every mount it makes
# disappears with it, even on SIGKILL, and two runs never see each other's mounts.
# Usage: rig_enter_mount_ns ORIGINAL-ARGS...  (the script's own, unshifted; before any mount)
rig_enter_mount_ns() {
  if [ -n "${BAREVERBS_RIG_IN_NS:-}" ]; then
    return 0
  fi
  if [ -n "${BAREVERBS_RIG_NO_NS:-}" ]; then
    rig_warn "BAREVERBS_RIG_NO_NS set: mounts are made in the host namespace (trap cleanup only)"
    return 0
  fi
  if unshare --mount --propagation private true 2>/dev/null; then
    export BAREVERBS_RIG_IN_NS=1
    exec unshare --mount --propagation private -- "$BASH" "$0" "$@"
  fi
  rig_warn "unshare --mount failed: mounts are made in the host namespace (trap cleanup only)"
}

# Mounts made by this process, unmounted in reverse order by rig_umount_all.
RIG_MOUNTS=()

# rig_mount TARGET MOUNT-ARGS...  (skips the mount if TARGET is already a mount point,
# and then leaves it alone at cleanup: it belongs to someone else)
rig_mount() {
  local target=$1
  shift
  mkdir -p "$target"
  if mountpoint -q "$target"; then
    rig_warn "$target is already a mount point; using it as it is"
    return 0
  fi
  mount "$@" "$target" || rig_die "mount $* $target failed"
  RIG_MOUNTS+=("$target")
}

rig_umount_all() {
  local i t
  for ((i = ${#RIG_MOUNTS[@]} - 1; i >= 0; i--)); do
    t=${RIG_MOUNTS[i]}
    if mountpoint -q "$t"; then
      umount "$t" 2>/dev/null || umount -l "$t" 2>/dev/null || rig_warn "could not unmount $t"
    fi
  done
  RIG_MOUNTS=()
}

# Every mount point at or below DIR, deepest first (reads this namespace's mount table).
rig_mounts_under() {
  local dir=$1
  awk -v d="$dir" '{ m = $5; gsub(/\\040/, " ", m); if (m == d || index(m, d "/") == 1) print m }' \
    /proc/self/mountinfo | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2-
}

# Remove a directory tree that may once have been a chroot. A bind mount of a directory on
# the same file system (for example the repository) is invisible to rm --one-file-system,
# so refuse to delete anything while a mount is left below it.
rig_safe_rmtree() {
  local dir=$1 m
  [ -e "$dir" ] || return 0
  case $dir in
    / | /usr | /var | /etc | /home | /root | /work | "") rig_die "refusing to delete '$dir'" ;;
  esac
  while IFS= read -r m; do
    [ -n "$m" ] || continue
    rig_warn "unmounting leftover mount $m"
    umount "$m" 2>/dev/null || umount -l "$m" || true
  done < <(rig_mounts_under "$dir")
  if [ -n "$(rig_mounts_under "$dir")" ]; then
    rig_die "mounts remain below $dir; unmount them by hand before deleting it: $(rig_mounts_under "$dir" | tr '\n' ' ')"
  fi
  rm -rf --one-file-system -- "$dir"
}

# Run a command inside the rig chroot with a clean, predictable environment.
rig_chroot() {
  local root=$1
  shift
  local envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C
    DEBIAN_FRONTEND=noninteractive)
  local v
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY TERM; do
    if [ -n "${!v:-}" ]; then envs+=("$v=${!v}"); fi
  done
  chroot "$root" /usr/bin/env -i "${envs[@]}" "$@"
}

# Value of KEY from versions.env (plain KEY=VALUE lines; never sourced).
rig_version() {
  sed -n "s/^$1=//p" "$RIG_VERSIONS" | head -n 1
}

# Take the cache lock shared (readers: make-initramfs, run-guest) and check that the rig is
# complete. Sets RIG_KREL (kernel release) and RIG_VMLINUZ (path inside the chroot).
rig_require_built() {
  [ -d "$RIG_CACHE" ] || rig_die "no rig at $RIG_CACHE: run qemu-tests/rig/build-rig.sh first"
  exec 9>>"$RIG_LOCK"
  if ! flock -s -n 9; then
    rig_log "waiting for the rig lock ($RIG_LOCK): a build is running"
    flock -s -w 3600 9 || rig_die "timed out waiting for the rig lock $RIG_LOCK"
  fi
  [ -f "$RIG_STAMP" ] || rig_die "rig at $RIG_CACHE is incomplete (no stamp): run qemu-tests/rig/build-rig.sh"
  [ -f "$RIG_VERSIONS" ] || rig_die "missing $RIG_VERSIONS: run qemu-tests/rig/build-rig.sh --rebuild"
  RIG_KREL=$(rig_version KERNEL_RELEASE)
  [ -n "$RIG_KREL" ] || rig_die "KERNEL_RELEASE missing from $RIG_VERSIONS: run build-rig.sh --rebuild"
  RIG_VMLINUZ=/boot/vmlinuz-$RIG_KREL
  [ -f "$RIG_ROOTFS$RIG_VMLINUZ" ] || rig_die "kernel $RIG_ROOTFS$RIG_VMLINUZ missing: run build-rig.sh --rebuild"
}
