#!/usr/bin/env bash
# Runs every bareverbs test on this machine: formatting, lints, unit and model tests, the
# no_std builds for bare metal, the examples, and the QEMU guest tests (root; the rig is built
# on first use and cached). Installs the Rust targets it needs.
# Usage: run-tests.sh [--no-guest]   (--no-guest: skip the QEMU tests, for quick local runs)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "rust targets"
rustup target add x86_64-unknown-none x86_64-unknown-linux-musl >/dev/null

step "format"
cargo fmt --all -- --check

step "floors: the driver's import graph by floor, the import loops the README states"
python3 qemu-tests/check-floors.py

step "lints"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests (layouts, model, driver against the model)"
cargo test --workspace --locked

step "driver tests with the tables on the heap (feature alloc)"
cargo clippy --locked -p bareverbs --all-targets --features alloc -- -D warnings
cargo test --locked -p bareverbs --features alloc

step "Miri over hal (DMA accessors, ring views: no data race, no out-of-bounds access)"
# Weak-memory emulation is off: Miri cannot emulate it for mixed-size atomics (read_bytes
# loads a region's words as u64 and its ends as u8), and aborts.
rustup toolchain install nightly --profile minimal --component miri,rust-src >/dev/null 2>&1
MIRIFLAGS="-Zmiri-disable-weak-memory-emulation" cargo +nightly miri test --locked -p bareverbs-hal

step "Miri over the driver: its unit tests, a device's life against the model (bring-up, RC and SRQ traffic, a fatal error's software flush, reset, bring-up again, teardown), and three threads (poster, poller, the model)"
MIRIFLAGS="-Zmiri-disable-weak-memory-emulation" cargo +nightly miri test --locked -p bareverbs --lib
MIRIFLAGS="-Zmiri-disable-weak-memory-emulation" cargo +nightly miri test --locked -p bareverbs \
  --test fatal_events after_a_fatal_error
# Threads: a poster, a poller and the model on its engine thread (data races between the
# driver's atomics and the device side).
MIRIFLAGS="-Zmiri-disable-weak-memory-emulation" cargo +nightly miri test --locked -p bareverbs \
  --test randomized one_thread_posts_while_another_polls

step "no_std crates for x86_64-unknown-none (default, log, defmt, alloc)"
cargo build --locked --target x86_64-unknown-none -p bareverbs-hal -p bareverbs-firmware-cmd -p bareverbs
cargo build --locked --target x86_64-unknown-none -p bareverbs --features log
cargo build --locked --target x86_64-unknown-none -p bareverbs --features defmt
cargo build --locked --target x86_64-unknown-none -p bareverbs --features alloc

step "the unikernel image (examples/unikernel, its own workspace): format, lints, release build, no driver stack frame above 4 KiB"
(cd examples/unikernel && cargo fmt -- --check && cargo clippy --locked --release -- -D warnings &&
  cargo build --locked --release)
if ! command -v objdump >/dev/null || ! command -v nm >/dev/null; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends binutils >/dev/null
fi
examples/unikernel/measure.py examples/unikernel/target/x86_64-unknown-none/release/bareverbs-unikernel \
  --max-driver-frame 4096

step "data-path cost benchmark still runs (instruction counts, no thresholds; README table)"
if ! command -v valgrind >/dev/null || ! command -v gcc >/dev/null ||
  [ ! -f /usr/include/infiniband/mlx5dv.h ]; then
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    valgrind gcc libc6-dev libibverbs-dev >/dev/null
fi
qemu-tests/bench/wqe-cost.sh 20
qemu-tests/bench/l2fwd-cost.sh 20
qemu-tests/bench/model-rate.sh 2000

step "examples"
cargo run --locked -q -p bareverbs-examples --bin devinfo -- -v --trace >/dev/null
cargo run --locked -q -p bareverbs-examples --bin devinfo -- --background >/dev/null
for t in rc uc ud; do
  cargo run --locked -q -p bareverbs-examples --bin ${t}_pingpong -- -n 200 -s 1024 -c -p $((20000 + RANDOM % 20000)) >/dev/null
done
cargo run --locked -q -p bareverbs-examples --bin srq_pingpong -- -n 200 -s 1024 -c -p $((20000 + RANDOM % 20000)) >/dev/null
cargo run --locked -q -p bareverbs-examples --bin mcast -- -n 200 -r 2 >/dev/null
cargo run --locked -q -p bareverbs-examples --bin dc_pingpong -- -n 200 -s 1024 -c -p $((20000 + RANDOM % 20000)) >/dev/null
cargo run --locked -q -p bareverbs-examples --bin umr_interleaved >/dev/null
cargo run --locked -q -p bareverbs-examples --bin xsrq_pingpong -- -c 3 -n 50 -s 1024 -p $((20000 + RANDOM % 20000)) >/dev/null
# Event-driven (-e): completion channels, req_notify, get_cq_event, ack_cq_events.
cargo run --locked -q -p bareverbs-examples --bin xsrq_pingpong -- -c 3 -n 50 -s 1024 -e -p $((20000 + RANDOM % 20000)) >/dev/null
for t in rc ud; do
  cargo run --locked -q -p bareverbs-examples --bin ${t}_pingpong -- -n 200 -s 1024 -c -e -p $((20000 + RANDOM % 20000)) >/dev/null
done

step "the model's fabric captured to pcap and decoded by tshark (Wireshark's InfiniBand dissector)"
qemu-tests/pcap-check.sh 2>/dev/null

# The perftest tools, both sides in process: bandwidth with two QPs, every size (-a), a
# duration (-D), latency.
for t in write_bw send_bw read_bw; do
  cargo run --locked -q -p bareverbs-examples --bin ib_$t -- -n 200 -s 4096 -q 2 -p $((20000 + RANDOM % 20000)) >/dev/null
done
cargo run --locked -q -p bareverbs-examples --bin ib_write_bw -- -a -n 4 -p $((20000 + RANDOM % 20000)) >/dev/null
cargo run --locked -q -p bareverbs-examples --bin ib_read_bw -- -D 1 --report_gbits -p $((20000 + RANDOM % 20000)) >/dev/null
for t in write_lat send_lat; do
  cargo run --locked -q -p bareverbs-examples --bin ib_$t -- -n 200 -p $((20000 + RANDOM % 20000)) >/dev/null
done

step "the Ethernet appliance: self-test in process (ARP, pings, UDP echoes checked), then real Linux ping and UDP through a TAP interface (root)"
cargo run --locked -q -p bareverbs-examples --bin eth_appliance -- --selftest 20 >/dev/null
cargo run --locked -q -p bareverbs-examples --bin l2fwd -- --bursts 200 >/dev/null
cargo run --locked -q -p bareverbs-examples --bin l2fwd -- --burst 1 --bursts 200 --size 1514 >/dev/null
qemu-tests/tap-appliance.sh >/dev/null

if [ "${1:-}" = "--no-guest" ]; then
  step "guest tests skipped (--no-guest)"
else
  step "QEMU rig (cached in ${BAREVERBS_RIG_CACHE:-/var/cache/bareverbs-rig})"
  qemu-tests/rig/build-rig.sh

  step "guest: Linux mlx5_core probes the model and is removed cleanly"
  qemu-tests/rig/test-probe.sh

  step "guest: bareverbs over Linux VFIO behind the emulated IOMMU"
  qemu-tests/rig/test-vfio.sh

  step "guest: rc_pingpong between two model HCAs over VFIO"
  qemu-tests/rig/test-pingpong.sh

  step "guest: rc_pingpong -e (completion channels) between two model HCAs over VFIO"
  PP_EVENTS=1 qemu-tests/rig/test-pingpong.sh /tmp/bareverbs-rc_pingpong-e

  step "guest: srq_pingpong (16 RC QPs on one SRQ) between two model HCAs over VFIO"
  PINGPONG=srq_pingpong qemu-tests/rig/test-pingpong.sh

  step "guest: xsrq_pingpong -e (XRC, completion channels) between two model HCAs over VFIO"
  PINGPONG=xsrq_pingpong PP_EVENTS=1 qemu-tests/rig/test-pingpong.sh

  step "guest: mcast (one group, receivers on both HCAs) over VFIO"
  PINGPONG=mcast qemu-tests/rig/test-pingpong.sh

  step "guest: dc_pingpong (a DCI and a DCT on an SRQ per side) between two model HCAs over VFIO"
  PINGPONG=dc_pingpong qemu-tests/rig/test-pingpong.sh

  step "guest: the perftest tools ib_write_bw (two QPs) and ib_send_lat between two model HCAs over VFIO"
  PINGPONG=ib_write_bw qemu-tests/rig/test-pingpong.sh
  PINGPONG=ib_send_lat qemu-tests/rig/test-pingpong.sh

  step "guest: the unikernel boots with two model HCAs and no Linux (bring-up, devinfo, RC and UD with data checked, teardown; then on Ethernet ports the packet appliance and its peer)"
  qemu-tests/rig/test-unikernel.sh
  UK_ETH=1 qemu-tests/rig/test-unikernel.sh

  step "guest: the RDMA test's steps on soft-RoCE (rdma-core in the guest, no model)"
  SELFCHECK=rxe qemu-tests/rig/test-mlx5-ib.sh

  step "guest: Linux mlx5_ib and rdma-core 56 (ibv_*_pingpong, perftest) on two model HCAs"
  qemu-tests/rig/test-mlx5-ib.sh

  step "guest: rdma-core's own provider counted under callgrind on a model HCA (the data-path table's anchor; no thresholds)"
  qemu-tests/bench/rdma-core-cost.sh 20

  step "guest: bareverbs over VFIO against rdma-core on mlx5_ib, across the model's fabric"
  qemu-tests/rig/test-interop.sh

  step "guest: rdma-core's user-space VFIO driver (mlx5_vfio) opens the model: PD, MR, close"
  qemu-tests/rig/test-rdma-vfio.sh

  step "guest: Linux mlx5e (Ethernet) on two model HCAs: ping, UDP echoes, a TCP transfer with LSO"
  qemu-tests/rig/test-eth.sh

  step "guest: bareverbs' eth_appliance over VFIO answers Linux mlx5e's ping and UDP across the model's wire"
  APPLIANCE=1 qemu-tests/rig/test-eth.sh
fi

step "all tests passed"
