#!/usr/bin/env python3
"""Checks the driver's floors and the import loops the README states.

The import graph is read by the workspace's shared `import-loops` tool (`../shared/tools/`
beside the repository; FLOORS_TOOL names another copy). Floors of `driver/src`, lowest first
(DESIGN.md 3.0): the control floor (command queue, EQ ring, pages, UAR, errors, tables,
health, caps, config, port, trace), the work-queue floor (`wq/`), the device
(`device.rs`, `bringup.rs`, `eq_commands.rs`), the objects (`verbs/`, `eth/`), and above
them the fixtures built from the objects (`testing.rs`, feature `testing`). An import that
points to a higher floor is upward.

Fails when: the driver's largest loop has more than 11 files or any outside `verbs/`; `wq/`
imports anything above it; the driver has more than 15 upward imports; the model's largest
loop has more files than MODEL_MAX_LOOP. Prints what it measured.

usage: qemu-tests/check-floors.py"""
import contextlib
import importlib.machinery
import io
import importlib.util
import os
import sys

MODEL_MAX_LOOP = 0
DRIVER_MAX_LOOP = 11
DRIVER_MAX_UPWARD = 15

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The shared folder sits beside the repository (a CI clone's too); /work/shared on a developer
# machine whose repository lives elsewhere.
places = [os.environ.get('FLOORS_TOOL'),
          os.path.join(top, '..', 'shared', 'tools', 'import-loops'),
          '/work/shared/tools/import-loops']
tool = next((p for p in places if p and os.path.exists(p)), None)
if tool is None:
    sys.exit('check-floors: the import-loops tool is in none of '
             f'{", ".join(p for p in places if p)} (set FLOORS_TOOL)')
loader = importlib.machinery.SourceFileLoader('import_loops', tool)
spec = importlib.util.spec_from_loader('import_loops', loader)
il = importlib.util.module_from_spec(spec)
# The tool prints its own report when loaded: kept out of this one's.
with contextlib.redirect_stdout(io.StringIO()):
    loader.exec_module(il)


def floor(m):
    if m[0] == 'testing':
        return 4
    if m[0] in ('verbs', 'eth'):
        return 3
    if m[0] in ('device', 'bringup', 'eq_commands'):
        return 2
    if m[0] == 'wq':
        return 1
    return 0


def largest_loop(src):
    mods, g = il.graph(src)
    loops = [c for c in il.sccs(g) if len(c) > 1]
    return mods, g, max(loops, key=len) if loops else []


failed = []
mods, g, loop = largest_loop(os.path.join(top, 'driver', 'src'))
names = sorted('/'.join(m) for m in loop)
upward = sorted(('/'.join(a), '/'.join(b)) for a in g for b in g[a] if floor(b) > floor(a))
print(f'driver/src: {len(mods)} files, {sum(len(v) for v in g.values())} imports, '
      f'largest loop {len(loop)} files ({", ".join(names)}), {len(upward)} upward '
      f'({", ".join(a + " -> " + b for a, b in upward)})')
if len(loop) > DRIVER_MAX_LOOP or any(floor(m) != 3 or m[0] != 'verbs' for m in loop):
    failed.append(f'the driver\'s largest loop ({len(loop)} files) is past {DRIVER_MAX_LOOP} '
                  'or reaches outside verbs/')
if len(upward) > DRIVER_MAX_UPWARD:
    failed.append(f'{len(upward)} upward imports in the driver (at most {DRIVER_MAX_UPWARD})')
for a, b in upward:
    if a.startswith('wq/'):
        failed.append(f'the work-queue floor imports {b} ({a})')

mods, g, loop = largest_loop(os.path.join(top, 'qemu-tests', 'src'))
print(f'qemu-tests/src: {len(mods)} files, largest loop {len(loop)} files '
      f'({", ".join(sorted("/".join(m) for m in loop))})')
if len(loop) > MODEL_MAX_LOOP:
    failed.append(f'the model\'s largest loop ({len(loop)} files) is past {MODEL_MAX_LOOP}')

for f in failed:
    print('check-floors: ' + f, file=sys.stderr)
sys.exit(1 if failed else 0)
