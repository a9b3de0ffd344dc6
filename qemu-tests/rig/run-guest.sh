#!/usr/bin/env bash
# Boot the rig guest: QEMU (TCG, q35) inside the rig chroot, with the rig kernel, a given
# initramfs and optional vfio-user-pci devices, under a hard deadline. The guest's serial
# console goes to a log file (and to stdout unless --quiet).
#
# Usage: run-guest.sh --initrd PATH [options]   or   run-guest.sh --kernel IMAGE [options]
#   --initrd PATH         initramfs from make-initramfs.sh (required with the rig kernel)
#   --kernel IMAGE        boot IMAGE (a PVH ELF, e.g. the unikernel) instead of the rig kernel:
#                         no initramfs, no kernel command line
#   --debug-exit          add isa-debug-exit (port 0xf4): the guest ends QEMU by writing its
#                         rc there, QEMU exits (rc << 1) | 1; status 1 counts as a clean exit
#   --mode MODE           guest mode, rig=MODE on the kernel command line (default smoke)
#   --vfio-user SOCKET    add a vfio-user-pci device served on the UNIX socket SOCKET, behind
#                         its own pcie-root-port (repeatable; start the server first)
#   --iommu               add intel-iommu,caching-mode=on and intel_iommu=on (q35 only)
#   --append ARGS         extra kernel command-line arguments (repeatable)
#   --timeout SECS        hard deadline for the whole QEMU run (default 120): SIGTERM, and
#                         SIGKILL 10 s later
#   --log PATH            guest log file (default: guest-MODE.log beside the initramfs)
#   --dir DIR             directory bind-mounted at the same path inside the chroot (default:
#                         the initramfs's directory; socket directories are added as needed)
#   --mem SIZE            guest RAM (default 512M)      --smp N        vCPUs (default 1)
#   --machine q35|pc      machine type (default q35)    --qemu-arg ARG extra QEMU argument (repeatable)
#   --expect TEXT         fail unless TEXT appears in the guest log (repeatable)
#   --socket-wait SECS    wait this long for each socket to appear (default 10)
#   --interactive         keep stdin on the serial console (for --mode shell; Ctrl-C quits QEMU)
#   --quiet               do not copy the guest log to stdout
#   --dry-run             print the QEMU command line and exit
# Exit status: 0 the guest finished (GUEST-DONE rc=0) and QEMU exited by itself; 124 the
# deadline was hit; 3 the guest failed (no GUEST-DONE, rc != 0 or an --expect text missing);
# 1 a rig error; another value is QEMU's own non-zero exit status.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
rig_trap_err
orig_args=("$@") # for the re-exec into a private mount namespace

usage() { sed -n '2,28s/^# \{0,1\}//p' "$0"; }

initrd="" kernel="" debug_exit=0 mode=smoke iommu=0 deadline=120 log="" dir="" mem=512M smp=1 machine=q35
socket_wait=10 interactive=0 quiet=0 dry_run=0
sockets=() appends=() expects=() qemu_extra=()
need_arg() { [ "$2" -ge 2 ] || rig_die "$1 needs a value"; }
while [ $# -gt 0 ]; do
  case $1 in
    --initrd) need_arg "$1" $#; initrd=$2; shift ;;
    --kernel) need_arg "$1" $#; kernel=$2; shift ;;
    --debug-exit) debug_exit=1 ;;
    --mode) need_arg "$1" $#; mode=$2; shift ;;
    --vfio-user) need_arg "$1" $#; sockets+=("$2"); shift ;;
    --iommu) iommu=1 ;;
    --append) need_arg "$1" $#; appends+=("$2"); shift ;;
    --timeout) need_arg "$1" $#; deadline=$2; shift ;;
    --log) need_arg "$1" $#; log=$2; shift ;;
    --dir) need_arg "$1" $#; dir=$2; shift ;;
    --mem) need_arg "$1" $#; mem=$2; shift ;;
    --smp) need_arg "$1" $#; smp=$2; shift ;;
    --machine) need_arg "$1" $#; machine=$2; shift ;;
    --qemu-arg) need_arg "$1" $#; qemu_extra+=("$2"); shift ;;
    --expect) need_arg "$1" $#; expects+=("$2"); shift ;;
    --socket-wait) need_arg "$1" $#; socket_wait=$2; shift ;;
    --interactive) interactive=1 ;;
    --quiet) quiet=1 ;;
    --dry-run) dry_run=1 ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; rig_die "unknown argument '$1'" ;;
  esac
  shift
done

if [ -n "$kernel" ]; then
  [ -z "$initrd" ] || rig_die "--kernel boots an image without an initramfs: drop --initrd"
  [ -f "$kernel" ] || rig_die "kernel image '$kernel' not found"
else
  [ -n "$initrd" ] || { usage >&2; rig_die "--initrd is required (build one with make-initramfs.sh)"; }
  [ -f "$initrd" ] || rig_die "initramfs '$initrd' not found"
fi
case $deadline in '' | *[!0-9]*) rig_die "--timeout must be whole seconds, got '$deadline'" ;; esac
[ "$deadline" -gt 0 ] || rig_die "--timeout must be > 0"
case $socket_wait in '' | *[!0-9]*) rig_die "--socket-wait must be whole seconds" ;; esac
case $smp in '' | *[!0-9]*) rig_die "--smp must be a number" ;; esac
case $mem in *[!0-9KMGkmg]* | '') rig_die "--mem must look like 512M or 1G" ;; esac
case $mode in *[!a-z0-9_]* | '') rig_die "--mode must be [a-z0-9_]+" ;; esac
case $machine in q35 | pc) ;; *) rig_die "--machine must be q35 or pc" ;; esac
[ "$iommu" -eq 0 ] || [ "$machine" = q35 ] || rig_die "--iommu needs --machine q35"

rig_need_root
rig_need_cmds chroot mount umount mountpoint flock timeout realpath tail
[ "$dry_run" -eq 1 ] || rig_enter_mount_ns "${orig_args[@]}"
rig_require_built

boot_file=${kernel:-$initrd}
boot_file=$(realpath "$boot_file")
[ -z "$kernel" ] || kernel=$boot_file
[ -n "$kernel" ] || initrd=$boot_file
[ -n "$dir" ] || dir=$(dirname "$boot_file")
dir=$(realpath -m "$dir")
[ -n "$log" ] || log=$(dirname "$boot_file")/guest-$mode.log
log=$(realpath -m "$log")

# Directories to bind-mount at the same path inside the chroot: DIR, then the directory of
# the initramfs and of each socket unless it is already below a bound directory.
binds=()
under_bind() {
  local p=$1 b
  for b in "${binds[@]}"; do
    case $p/ in "$b"/*) return 0 ;; esac
  done
  return 1
}
add_bind() {
  local d=$1
  case $d in
    / | /proc | /proc/* | /dev | /dev/* | /sys | /sys/*) rig_die "will not bind-mount '$d' into the chroot: use a dedicated directory" ;;
  esac
  case $RIG_CACHE/ in "$d"/*) rig_die "'$d' contains the rig cache $RIG_CACHE: use a directory outside it" ;; esac
  case $d/ in "$RIG_CACHE"/*) rig_die "'$d' is inside the rig cache $RIG_CACHE: use a directory outside it" ;; esac
  [ -d "$d" ] || rig_die "directory '$d' does not exist"
  under_bind "$d" || binds+=("$d")
}
add_bind "$dir"
add_bind "$(dirname "$boot_file")"
abs_sockets=()
for s in "${sockets[@]}"; do
  case $s in *'"'* | *\\*) rig_die "socket path may not contain '\"' or '\\': $s" ;; esac
  s=$(realpath -m "$s")
  abs_sockets+=("$s")
  add_bind "$(dirname "$s")"
done

# ---- QEMU command line (RIG.md §3.4) -----------------------------------------------------
cmdline="console=ttyS0 panic=-1 rig=$mode"
[ "$iommu" -eq 0 ] || cmdline+=" intel_iommu=on"
for a in "${appends[@]}"; do cmdline+=" $a"; done

qemu=(qemu-system-x86_64 -accel tcg -cpu max -smp "$smp" -m "$mem"
  -object "memory-backend-memfd,id=mem,size=$mem,share=on" -machine "$machine,memory-backend=mem"
  -nodefaults -display none -serial stdio -no-reboot)
if [ -n "$kernel" ]; then
  qemu+=(-kernel "$kernel")
else
  qemu+=(-kernel "$RIG_VMLINUZ" -initrd "$initrd" -append "$cmdline")
fi
[ "$debug_exit" -eq 0 ] || qemu+=(-device isa-debug-exit,iobase=0xf4,iosize=0x04)
# The vIOMMU must come before the root ports and the devices.
[ "$iommu" -eq 0 ] || qemu+=(-device "intel-iommu,caching-mode=on")
i=0
for s in "${abs_sockets[@]}"; do
  json='{"driver":"vfio-user-pci","id":"vfu'$i'"'
  if [ "$machine" = q35 ]; then
    qemu+=(-device "pcie-root-port,id=rp$i,chassis=$((i + 1)),slot=$((i + 1))")
    json+=',"bus":"rp'$i'"'
  fi
  json+=',"socket":{"type":"unix","path":"'$s'"}}'
  qemu+=(-device "$json")
  i=$((i + 1))
done
qemu+=("${qemu_extra[@]}")

if [ "$dry_run" -eq 1 ]; then
  printf 'chroot %q' "$RIG_ROOTFS"
  printf ' %q' "${qemu[@]}"
  printf '\n'
  exit 0
fi

# ---- mounts and cleanup --------------------------------------------------------------------
qpid="" tpid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$qpid" ] && kill -0 "$qpid" 2>/dev/null; then
    rig_log "stopping QEMU (timeout pid $qpid)"
    kill -TERM "$qpid" 2>/dev/null || true
    wait "$qpid" 2>/dev/null || true # timeout's own --kill-after bounds this wait
  fi
  if [ -n "$tpid" ]; then kill "$tpid" 2>/dev/null || true; fi
  rig_umount_all
  if [ "$interactive" -eq 1 ] && [ -t 0 ]; then stty sane 2>/dev/null || true; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rig_mount "$RIG_ROOTFS/proc" --bind /proc
rig_mount "$RIG_ROOTFS/dev" --bind /dev
for b in "${binds[@]}"; do
  rig_mount "$RIG_ROOTFS$b" --bind "$b"
done

for s in "${abs_sockets[@]}"; do
  w=0
  while [ ! -S "$s" ] && [ "$w" -lt "$socket_wait" ]; do
    sleep 1
    w=$((w + 1))
  done
  [ -S "$s" ] || rig_die "vfio-user socket $s does not exist after ${socket_wait}s: start the server first"
done

# ---- run ----------------------------------------------------------------------------------
mkdir -p "$(dirname "$log")"
{
  printf '# run-guest.sh %s kernel %s qemu %s deadline %ss\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "$RIG_KREL" "$(rig_version QEMU_PACKAGE_VERSION)" "$deadline"
  printf '# chroot %q' "$RIG_ROOTFS"
  printf ' %q' "${qemu[@]}"
  printf '\n'
} >"$log"
rig_log "booting rig=$mode (${#abs_sockets[@]} vfio-user device(s), iommu=$iommu, deadline ${deadline}s); log: $log"

t0=$(date +%s%N)
rc=0
if [ "$interactive" -eq 1 ]; then
  [ -t 0 ] || rig_warn "--interactive without a terminal on stdin"
  # --foreground: QEMU may read the terminal; chroot execs QEMU, so it is still the one killed.
  set +o pipefail
  timeout --foreground -k 10 "$deadline" chroot "$RIG_ROOTFS" "${qemu[@]}" 2>&1 | tee -a "$log"
  rc=${PIPESTATUS[0]}
  set -o pipefail
else
  hdr=$(stat -c %s "$log")
  timeout -k 10 "$deadline" chroot "$RIG_ROOTFS" "${qemu[@]}" </dev/null >>"$log" 2>&1 &
  qpid=$!
  if [ "$quiet" -eq 0 ]; then
    tail -c +$((hdr + 1)) -f --pid="$qpid" "$log" &
    tpid=$!
  fi
  wait "$qpid" || rc=$?
  qpid=""
  if [ -n "$tpid" ]; then
    wait "$tpid" || true
    tpid=""
  fi
fi
t1=$(date +%s%N)
wall=$(((t1 - t0) / 1000000))
wall_s=$((wall / 1000)).$(printf '%03d' $((wall % 1000)))

rig_umount_all

done_line=$(grep -a 'GUEST-DONE' "$log" | tail -n 1 | tr -d '\r') || true
guest_rc=$(printf '%s\n' "$done_line" | sed -n 's/.* rc=\([0-9]*\).*/\1/p')
missing=()
for e in "${expects[@]}"; do
  grep -a -q -F -- "$e" "$log" || missing+=("$e")
done

# isa-debug-exit: the guest's rc 0 is QEMU's status 1; any other odd status is the guest's
# failure, which its GUEST-DONE line reports.
if [ "$debug_exit" -eq 1 ] && [ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] && [ $((rc % 2)) -eq 1 ]; then
  rig_log "isa-debug-exit: QEMU status $rc is guest rc $((rc >> 1))"
  rc=0
fi
# timeout exits 124 when it sent SIGTERM, 137 when it had to SIGKILL as well. 137 before
# the deadline means someone else killed QEMU (the OOM killer, a user): not a deadline.
if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$wall" -ge $((deadline * 1000)) ]; }; then
  rig_log "DEADLINE: QEMU did not exit within ${deadline}s and was killed (wall ${wall_s}s; status $rc); log: $log"
  exit 124
fi
rig_log "QEMU exited with status $rc after ${wall_s}s; ${done_line:-no GUEST-DONE line}"
if [ "$rc" -ne 0 ]; then
  rig_log "FAILED: QEMU exit status $rc (see the end of $log)"
  exit "$rc"
fi
if [ -z "$done_line" ]; then
  rig_log "FAILED: the guest never printed GUEST-DONE (kernel panic or init failure?); log: $log"
  exit 3
fi
if [ "$guest_rc" != 0 ]; then
  rig_log "FAILED: the guest reported rc=$guest_rc; log: $log"
  exit 3
fi
if [ "${#missing[@]}" -gt 0 ]; then
  rig_log "FAILED: expected text not in the log: ${missing[*]}"
  exit 3
fi
rig_log "OK (wall ${wall_s}s)"
