#!/bin/sh
# Runs inside the rig guest (rig=run RUN=/bin/guest-verbs-cost.sh): Linux mlx5_core + mlx5_ib
# drive the model HCA, then /bin/verbs-cost (rdma-core's mlx5 provider posting and polling)
# runs once per case under callgrind, collecting only inside its bench_* functions. Prints one
# line per case: RIG-COST MODE KIND BATCH ITERS INSTRUCTIONS SHORT_POLLS.
# Kernel command-line settings: COST_CASES=MODE:KIND:BATCH,... COST_ITERS=N (default 20).
# shellcheck source=guest-ib-lib.sh
. /bin/guest-ib-lib.sh

cases=${COST_CASES:-post:inline64:1,post:inline64:32,post:write4k:1,post:write4k:32,wr:inline64:1,wr:inline64:32,wr:write4k:1,wr:write4k:32,poll:write4k:1,poll:write4k:32,start-poll:write4k:1,start-poll:write4k:32}
iters=${COST_ITERS:-20}
wait_s=${PROBE_WAIT:-100}

say "start uptime=$(up)s"
insmod_bounded "$wait_s" mlx5_core || fail "insmod mlx5_core"
insmod_bounded 30 ib_core || fail "insmod ib_core"
insmod_bounded 30 ib_uverbs || fail "insmod ib_uverbs"
insmod_bounded "$wait_s" mlx5_ib || fail "insmod mlx5_ib"
wait_ports_active 30 mlx5_0 || fail "port not ACTIVE"
mkdir -p /tmp
for c in $(echo "$cases" | tr , ' '); do
  mode=${c%%:*}
  rest=${c#*:}
  kind=${rest%%:*}
  batch=${rest#*:}
  case $mode in
    post) fn=bench_post ;;
    wr) fn=bench_wr ;;
    poll) fn=bench_poll ;;
    start-poll) fn=bench_start_poll ;;
    *) fail "unknown mode $mode"; continue ;;
  esac
  out=/tmp/cg.$mode.$kind.$batch
  log=/tmp/vg.$mode.$kind.$batch
  # Debian's /usr/bin/valgrind is a shell wrapper around valgrind.bin, the launcher.
  # LD_BIND_NOW: every library call bound at load, as our Rust binaries are, so that a lazily
  # bound libc call (libmlx5's memcpy of inline data) does not count the dynamic linker.
  LD_BIND_NOW=1 valgrind.bin --tool=callgrind --collect-atstart=no --toggle-collect="$fn" \
    --callgrind-out-file="$out" /bin/verbs-cost "$mode" "$kind" "$batch" "$iters" >"$log" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    sed 's/^/RIG-OUT verbs-cost| /' "$log" | tail -n 20
    fail "verbs-cost $mode $kind $batch (status $rc)"
    continue
  fi
  ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  [ -n "$ir" ] || ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out" | head -n 1)
  short=$(sed -n 's/.* short_polls \([0-9]*\) ok$/\1/p' "$log")
  say "cost $mode $kind $batch uptime=$(up)s"
  echo "RIG-COST $mode $kind $batch $iters ${ir:-none} ${short:-none}"
done
rmmod_bounded "$wait_s" mlx5_ib || fail "rmmod mlx5_ib"
rmmod_bounded "$wait_s" mlx5_core || fail "rmmod mlx5_core"
say "done failures=$FAILS uptime=$(up)s"
[ "$FAILS" = 0 ]
