#!/usr/bin/env python3
"""What the unikernel image weighs: its sections, the driver's machine code in it, and the
largest stack frames, read from the prologues.

Usage: measure.py IMAGE [--max-driver-frame BYTES]
  exits 1 when a function of the driver (`bareverbs::`) takes more than BYTES of stack.

A frame is what a function's prologue takes from `rsp` before its first call: its `sub rsp`
immediates, and for frames of a page or more the stack-probe loop (`mov r11, rsp; sub r11, N;
loop: sub rsp, 0x1000; mov [rsp], 0; ...`), counted once as N. Pushes of saved registers are
not counted (at most 7 x 8 bytes). The driver's code is the size of the functions whose names
are in its crates (`bareverbs::`, `bareverbs_firmware_cmd::`, `bareverbs_hal::` but for
`bareverbs_hal::bare_metal`, the platform), generic ones
as instantiated in the image; driver code inlined into the image's own functions counts as
theirs. Needs binutils (`objdump`, `nm`, `size`).
"""
import re
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def frames(image):
    out = run("objdump", "-d", "--no-show-raw-insn", "-M", "intel", "-C", image)
    sizes, fn, total, probe, done = {}, None, 0, False, True
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            if fn is not None:
                sizes[fn] = max(sizes.get(fn, 0), total)
            fn, total, probe, done = m.group(1), 0, False, False
            continue
        if done or fn is None:
            continue
        # The prologue ends at the first call, return or jump other than the probe loop's
        # back edge (a conditional jump).
        if re.search(r"\s(call|ret|jmp)\b", line):
            done = True
            continue
        m = re.search(r"sub\s+r11,0x([0-9a-f]+)", line)
        if m:
            total += int(m.group(1), 16)
            probe = True
            continue
        m = re.search(r"sub\s+rsp,0x([0-9a-f]+)", line)
        if m:
            v = int(m.group(1), 16)
            if not (probe and v == 0x1000):
                total += v
    if fn is not None:
        sizes[fn] = max(sizes.get(fn, 0), total)
    return sizes


def code_by_crate(image):
    crates = ["bareverbs_unikernel", "bareverbs_hal::bare_metal", "bareverbs_firmware_cmd",
              "bareverbs_hal", "bareverbs::"]
    tot = {}
    for line in run("nm", "-C", "-S", "--size-sort", image).splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4 or parts[2].lower() != "t":
            continue
        size, name = int(parts[1], 16), parts[3]
        crate = next((c for c in crates if c in name), "other (core, heapless, spin, log)")
        tot[crate] = tot.get(crate, 0) + size
    return tot


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    image, limit = args[0], None
    if "--max-driver-frame" in args:
        limit = int(args[args.index("--max-driver-frame") + 1])
    print("sections (bytes):")
    for line in run("size", "-A", image).splitlines():
        m = re.match(r"^\.(text|rodata|data|got|bss)\s+(\d+)", line)
        if m:
            print(f"  .{m.group(1):8s} {int(m.group(2)):10d}")
    tot = code_by_crate(image)
    print("machine code by crate (bytes):")
    for c, v in sorted(tot.items(), key=lambda x: -x[1]):
        print(f"  {v:8d}  {c}")
    driver = sum(v for c, v in tot.items()
                 if c in ("bareverbs::", "bareverbs_firmware_cmd", "bareverbs_hal"))
    print(f"  {driver:8d}  the driver (bareverbs, bareverbs_firmware_cmd, bareverbs_hal but its"
          " bare_metal platform)")
    sizes = frames(image)
    print("largest stack frames (bytes):")
    for f, v in sorted(sizes.items(), key=lambda x: -x[1])[:10]:
        print(f"  {v:8d}  {f[:120]}")
    if limit is None:
        return 0
    over = [(f, v) for f, v in sizes.items() if "bareverbs::" in f and v > limit]
    for f, v in over:
        print(f"FAIL: driver frame above {limit} bytes: {v} {f[:120]}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
