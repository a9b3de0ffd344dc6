#!/usr/bin/env bash
# Guest test: rdma-core's own user-space VFIO driver (mlx5_vfio, rdma-core 56 from Debian
# trixie) opens the model HCA bound to vfio-pci behind the emulated IOMMU, allocates a PD,
# registers and deregisters two MRs (one unaligned), frees the PD and closes the device
# (rdma-vfio-client.c, linked statically inside the rig chroot). Passes only when the client completes every step,
# no firmware command failed and the model ends clean (disabled, no pages, no DMA fault).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$top/target}
work=${1:-/tmp/bareverbs-rdma-vfio}
mkdir -p "$work"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# shellcheck source=lib.sh
. "$here/lib.sh"
rig_require_built
for f in usr/bin/gcc usr/include/infiniband/mlx5dv.h usr/lib/x86_64-linux-gnu/libibverbs.a \
         usr/lib/x86_64-linux-gnu/libmlx5.a usr/lib/x86_64-linux-gnu/libnl-route-3.a; do
  [ -e "$RIG_ROOTFS/$f" ] ||
    rig_die "rig chroot lacks /$f: rebuild it with build-rig.sh (gcc libc6-dev libibverbs-dev)"
done

cargo build --release --locked -q --manifest-path "$top/Cargo.toml" -p bareverbs-model --bin mlx5-vfio-user

# The client, linked statically against the chroot's rdma-core (the initramfs has no libc).
build=$(mktemp -d "$RIG_ROOTFS/tmp/rdma-vfio.XXXXXX")
trap 'rm -rf --one-file-system -- "$build"' EXIT
cp "$here/rdma-vfio-client.c" "$build/"
rel=/${build#"$RIG_ROOTFS"/}
rig_chroot "$RIG_ROOTFS" gcc -O2 -Wall -Wextra -Werror=implicit-function-declaration -static \
  -o "$rel/rdma-vfio-client" "$rel/rdma-vfio-client.c" \
  -lmlx5 -libverbs -lnl-route-3 -lnl-3 -lpthread 2>&1 | grep -v -E 'statically linked applications|in function .nl_' || true
[ -x "$build/rdma-vfio-client" ] || rig_die "building rdma-vfio-client in the rig chroot failed"
cp "$build/rdma-vfio-client" "$work/rdma-vfio-client"
"$here/make-initramfs.sh" "$work/initrd.gz" "$work/rdma-vfio-client:/bin/rdma-vfio-client" >/dev/null

# One guest run per case: plain, then firmware asking for pages (before CREATE_MKEY) and
# returning pages (before DESTROY_MKEY) once rdma-core runs its commands in event mode
# (page-request EQE, MANAGE_PAGES on the last slot, completion EQEs; mlx5_vfio.c
# mlx5_vfio_handle_page_req_event).
run_case() { # NAME WANT-SLOT31-LINE SERVER-ARGS...
  local name=$1 want=$2 dir="$work/$1" rc=0 step spid
  shift 2
  mkdir -p "$dir"
  rm -f "$dir/mlx5.sock" "$dir"/hca*.trace
  "$target/release/mlx5-vfio-user" --socket "$dir/mlx5.sock" --trace-dir "$dir" "$@" \
    >"$dir/server.log" 2>&1 &
  spid=$!
  "$here/run-guest.sh" --initrd "$work/initrd.gz" --mode vfio --iommu --vfio-user "$dir/mlx5.sock" \
    --append 'VFIO_PROG=/bin/rdma-vfio-client VFIO_PROG_ARGS=@BDF' \
    --timeout "${TIMEOUT:-240}" --quiet --log "$dir/guest.log" || rc=$?
  # The server writes its END line and exits when QEMU disconnects; stop it only if it hangs.
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  local log="$dir/guest.log" trace="$dir/hca0.trace"

  [ "$rc" = 0 ] || bad "$name: guest run failed (status $rc)"
  for step in mlx5dv_get_vfio_device_list ibv_open_device ibv_alloc_pd 'ibv_reg_mr ' \
              'ibv_reg_mr(unaligned)' 'ibv_dereg_mr(unaligned)' 'ibv_dereg_mr[[:space:]]*$' \
              ibv_dealloc_pd ibv_close_device ibv_free_device_list; do
    grep -q "^RDMA-VFIO OK $step" "$log" || bad "$name: client step '$step' did not succeed"
  done
  grep -q "^RDMA-VFIO DONE" "$log" || bad "$name: client did not finish"
  grep -q "RIG-VFIO prog rc=0" "$log" || bad "$name: client exit status not 0"
  if grep -E 'DMAR: .*fault|WARNING:|BUG:|mlx5_vfio_op_code' "$log"; then
    bad "$name: IOMMU fault, kernel warning or rdma-core command error (above)"
  fi
  [ -s "$trace" ] || { bad "$name: no command trace at $trace"; return; }
  if grep '^CMD' "$trace" | grep -v ' OK$'; then bad "$name: firmware commands failed (above)"; fi
  if [ -n "$want" ]; then
    sed -n '/CREATE_EQ/,$p' "$trace" | grep -qE "$want" ||
      bad "$name: no '$want' after CREATE_EQ (page request not served in event mode)"
  fi
  grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$trace" ||
    bad "$name: model not clean at the end: $(grep '^END' "$trace" || echo 'no END line')"
  echo "== $name: rdma-core mlx5_vfio in the guest"
  grep -E '^RDMA-VFIO' "$log" || true
  echo "== $name: commands the model executed (opcode(op_mod) xcount, in first-seen order)"
  grep '^CMD' "$trace" | awk '{ k = $4 "(" $6 ")"; if (!(k in n)) o[++m] = k; n[k]++ } END { for (i = 1; i <= m; i++) printf "%s x%d\n", o[i], n[o[i]] }' || true
}
run_case plain ''
run_case pages-give '^CMD slot 31 MANAGE_PAGES +op_mod 0x0001 OK' --pages-before 0x200:8
run_case pages-take '^CMD slot 31 MANAGE_PAGES +op_mod 0x0002 OK' --pages-before 0x202:-8

if [ "$fail" = 0 ]; then
  echo "PASS: rdma-core's mlx5_vfio opened the model HCA, PD and MRs, and closed it (also with page requests in event mode)"
fi
exit "$fail"
