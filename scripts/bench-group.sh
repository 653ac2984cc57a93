#!/usr/bin/env bash
# Group sleep/wake of two processes vs single-process sleep/wake of the same bytes, on simdev:
# ctl_target programs under the shim, driven by vmmctl; prints the medians and their ratio, the
# first cycle apart, and the medians of the group's steps from vmmctl --json (find, plan, phases,
# pauses, shares report) (tests/integration/control/bench_group.c). The GPU comparison is the x2 row of
# tests/gpu/gpucheck.py. Builds into build/ (or $BUILD_DIR) if needed (tests enabled).
# Usage: scripts/bench-group.sh [MIB_PER_PROCESS [ROUNDS]]   (defaults 128 and 5)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dtests=enabled >/dev/null
fi
ninja -C "$build" tests/integration/control/bench_group shim/libvmmshim.so tools/vmmctl \
	tests/integration/control/ctl_target >/dev/null
export LD_LIBRARY_PATH="$build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CTL_SHIM="$build/shim/libvmmshim.so" CTL_VMMCTL="$build/tools/vmmctl"
export CTL_TARGET="$build/tests/integration/control/ctl_target"
exec "$build/tests/integration/control/bench_group" "$@"
