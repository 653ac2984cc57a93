#!/usr/bin/env bash
# One round of GPU sharing on a busy node, on simdev: two sharing ctl_targets take turns on one
# simulated GPU (the higher priority's allocation sleeps the lower one) while BYSTANDERS sharing
# processes of a second simulated GPU use the same control folder; prints the median and slowest
# time of that allocation and how many processes its rounds asked
# (tests/integration/control/bench_share_round.c). SHIM_BUILD=DIR runs the shim, vmmctl,
# ctl_target and simdev of another build (an older commit's, to compare) under this build's
# driver. Builds into build/ (or $BUILD_DIR) if needed (tests enabled).
# Usage: scripts/bench-share.sh [BYSTANDERS [ROUNDS]]   (defaults 16 and 10)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
shim_build=${SHIM_BUILD:-$build}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dtests=enabled >/dev/null
fi
ninja -C "$build" tests/integration/control/bench_share_round shim/libvmmshim.so tools/vmmctl \
	tests/integration/control/ctl_target >/dev/null
export LD_LIBRARY_PATH="$shim_build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CTL_SHIM="$shim_build/shim/libvmmshim.so" CTL_VMMCTL="$shim_build/tools/vmmctl"
export CTL_TARGET="$shim_build/tests/integration/control/ctl_target"
exec "$build/tests/integration/control/bench_share_round" "$@"
