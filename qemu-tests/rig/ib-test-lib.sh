# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034 # here, top, target, work come from the caller; spid goes back to it
# Shared host-side parts of the RDMA guest tests (test-mlx5-ib.sh, test-interop.sh). Sourced.
# The caller defines bad() (records a failure) and sets here, top, target, work.

# rdma-core programs the guests run, taken from the rig chroot with their libraries (and,
# through libibverbs, the mlx5 provider).
RDMA_BINS=(/usr/bin/ibv_devices /usr/bin/ibv_devinfo /usr/bin/ibv_rc_pingpong /usr/bin/ibv_uc_pingpong
  /usr/bin/ibv_ud_pingpong /usr/bin/ibv_srq_pingpong /usr/bin/ibv_xsrq_pingpong
  /usr/bin/ib_write_bw /usr/bin/ib_read_bw /usr/bin/ib_atomic_bw /usr/bin/ib_send_lat /usr/bin/ib_send_bw)

# ib_make_initramfs OUTPUT GUEST-SCRIPT [EXTRA-FILE]...: the initramfs with rdma-core, the
# guest helper library and the guest script as /bin/<name>; IB_INITRAMFS_ARGS (an array) holds
# more make-initramfs.sh options.
IB_INITRAMFS_ARGS=()
ib_make_initramfs() {
  local out=$1 script=$2 b args=()
  shift 2
  for b in "${RDMA_BINS[@]}"; do args+=(--chroot-bin "$b"); done
  "$here/make-initramfs.sh" "${args[@]}" --verbs-provider mlx5 "${IB_INITRAMFS_ARGS[@]}" "$out" \
    "$here/guest-ib-lib.sh:/bin/guest-ib-lib.sh" "$script:/bin/${script##*/}" "$@" >"$out.log" 2>&1 ||
    { cat "$out.log" >&2; return 1; }
}

# ib_start_server N: the model server with N HCAs (sockets $work/mlx5-<n>.sock) on one fabric,
# command traces in $work/hca<n>.trace. Sets spid.
ib_start_server() {
  local n socks=()
  rm -f "$work"/mlx5-*.sock "$work"/hca*.trace
  for ((n = 0; n < $1; n++)); do socks+=(--socket "$work/mlx5-$n.sock"); done
  "$target/release/mlx5-vfio-user" "${socks[@]}" --trace-dir "$work" >"$work/server.log" 2>&1 &
  spid=$!
}

# ib_check_kernel LOG: kernel warnings, and mlx5/RDMA complaints on the console.
ib_check_kernel() {
  local log=$1 ok_info='firmware version:|available PCIe bandwidth|PTM is not supported by PCIe'
  # Not the programs' own output (RIG-OUT lines: perftest prints "WARNING: BW peak ...").
  if grep -v '^RIG-OUT ' "$log" | grep -E 'WARNING:|BUG:|Call Trace|DMAR: .*fault'; then
    bad "kernel warning or IOMMU fault (above)"
  fi
  # Console lines ("[  12.345678] ...") only: the guest script's own lines are judged elsewhere.
  if grep -E '^\[ *[0-9]+\.[0-9]+\] ' "$log" | grep -iE 'mlx5|infiniband|ib_core|uverbs' | grep -vE "$ok_info" |
    grep -iE 'err|fail|warn|timeout|leak|unable|cannot|invalid|giving up|not supported'; then
    bad "mlx5/RDMA kernel messages complain (above)"
  fi
}

# ib_check_traces TRACE...: every firmware command succeeded and each HCA ended clean.
ib_check_traces() {
  local t
  for t in "$@"; do
    [ -s "$t" ] || { bad "no command trace at $t"; continue; }
    if grep '^CMD' "$t" | grep -v ' OK$'; then bad "firmware commands failed in $t (above)"; fi
    grep -q '^END state=Disabled pages_held=0 eqs=0 uars=0 dma_faults=0$' "$t" ||
      bad "$t not clean at the end: $(grep '^END' "$t" || echo 'no END line')"
  done
}

# ib_check_umr TRACE...: mlx5_ib registered memory with UMR work requests (the model's WORK
# line counts those it executed) and none was refused.
ib_check_umr() {
  local t
  for t in "$@"; do
    grep -qE '^WORK umr_ok=[1-9][0-9]* umr_failed=0 ' "$t" ||
      bad "$t: expected UMR work requests, none refused: $(grep '^WORK' "$t" || echo 'no WORK line')"
  done
}

# ib_check_scatter TRACE...: some CQEs carried their message inside (scatter to CQE, which Linux
# asks for on rdma-core's RC and UC QPs and rdma-core's poll copies out), on at least one HCA.
ib_check_scatter() {
  local t n=0
  for t in "$@"; do
    n=$((n + $(sed -n 's/^WORK .*scattered_to_cqe=\([0-9]*\).*/\1/p' "$t" | head -1)))
  done
  [ "$n" -gt 0 ] || bad "no CQE carried its data (scatter to CQE never ran): $(grep -h '^WORK' "$@")"
}

# ib_check_devinfo LOG DEV...: in the guest's `ibv_devinfo -v` output, each DEV is listed with
# non-zero node and system-image GUIDs, and every port of it is PORT_ACTIVE with GID 0 and, on an
# InfiniBand link layer, a LID.
ib_check_devinfo() {
  local log=$1 problems
  shift
  problems=$(sed -n '/^RIG-IB devinfo begin/,/^RIG-IB devinfo end/p' "$log" | awk -v want="$*" '
    $1 == "hca_id:" { hca = $2; seen[hca] = 1; port = ""; next }
    $1 == "node_guid:" { ng[hca] = $2 }
    $1 == "sys_image_guid:" { sg[hca] = $2 }
    $1 == "port:" { port = hca " port " $2; nports[hca]++; ports[port] = hca; next }
    port != "" && $1 == "state:" { st[port] = $2 }
    port != "" && $1 == "port_lid:" { lid[port] = $2 }
    port != "" && $1 == "link_layer:" { ll[port] = $2 }
    port != "" && $1 == "GID[" && $2 == "0]:" { gid[port] = $3 }
    END {
      n = split(want, w, " ")
      for (i = 1; i <= n; i++) {
        h = w[i]
        if (!seen[h]) { print h ": not listed"; continue }
        if (ng[h] == "" || ng[h] ~ /^[0:]+$/) print h ": node_guid missing or zero (" ng[h] ")"
        if (sg[h] == "" || sg[h] ~ /^[0:]+$/) print h ": sys_image_guid missing or zero (" sg[h] ")"
        if (!nports[h]) print h ": no ports"
      }
      for (p in ports) {
        if (st[p] != "PORT_ACTIVE") print p ": state " st[p]
        if (ll[p] != "Ethernet" && (lid[p] == "" || lid[p] == "0" || lid[p] == "0x0000")) print p ": no LID (" lid[p] ")"
        if (gid[p] == "") print p ": no GID[0]"
      }
    }')
  if [ -n "$problems" ]; then
    printf '%s\n' "$problems" | sed 's/^/  ibv_devinfo: /'
    bad "ibv_devinfo -v does not show every device and port ready (above)"
  fi
}

# ib_check_pairs LOG NAME...: each server/client pair NAME ended with both sides at 0.
ib_check_pairs() {
  local log=$1 n
  shift
  for n in "$@"; do
    grep -qE "^RIG-PAIR $n server=0 client=0 " "$log" ||
      bad "pair $n: $(grep -E "^RIG-PAIR $n " "$log" | sed 's/^RIG-PAIR //' || echo 'did not run')"
  done
}

# ib_summary LOG: what the guest saw, for the reader.
ib_summary() {
  local log=$1
  echo "== guest steps"
  grep -E '^RIG-IB ' "$log" | grep -vE '^RIG-IB (pair|devinfo (begin|end))' || true
  echo "== ibv_devinfo -v (excerpt)"
  sed -n '/^RIG-IB devinfo begin/,/^RIG-IB devinfo end/p' "$log" |
    grep -E 'hca_id|transport:|fw_ver|node_guid|sys_image_guid|port:|[^_]state:|port_lid|sm_lid|active_mtu|link_layer|GID\[ *0\]' || true
  echo "== pairs (server/client exit status)"
  grep -E '^RIG-PAIR ' "$log" || true
  echo "== pingpong reports and perftest results"
  grep -E '^RIG-OUT [^ ]+ (srv|cli)\| ' "$log" |
    grep -E 'bytes in|iters in|^RIG-OUT [^ ]+ (srv|cli)\| +[0-9]+ +[0-9]+ +[0-9.]+' || true
  echo "== failing pair outputs (first lines)"
  awk '/^RIG-PAIR / && !/server=0 client=0 / { bad[$2] = 1 } { lines[NR] = $0 }
    END { for (i = 1; i <= NR; i++) { split(lines[i], f, " ")
            if (f[1] == "RIG-OUT" && bad[f[2]] && shown[f[2]]++ < 6) print lines[i] } }' "$log"
  echo "== kernel messages about mlx5/RDMA (guest dmesg at the end)"
  grep -E '^RIG-DMESG ' "$log" | grep -viE 'mlx5_core [0-9a-f:.]+: (firmware version|PTM|.*PCIe bandwidth)' | tail -n 40 || true
}
