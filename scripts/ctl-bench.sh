#!/usr/bin/env bash
# Runs one of the control plane's benchmark drivers (tests/integration/control/DRIVER.c) on
# simdev: it starts ctl_target programs under the shim and drives them with vmmctl. Builds into
# build/ (or $BUILD_DIR) if needed (tests enabled). SHIM_BUILD=DIR runs the shim, vmmctl,
# ctl_target and simdev of another build (an older commit's, to compare) under this build's
# driver. The bench-*.sh scripts that call it say what each driver prints.
# Usage: scripts/ctl-bench.sh DRIVER [ARGS...]
set -euo pipefail

driver=${1:?usage: scripts/ctl-bench.sh DRIVER [ARGS...]}
shift
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
shim_build=${SHIM_BUILD:-$build}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dtests=enabled >/dev/null
fi
ninja -C "$build" "tests/integration/control/$driver" shim/libvmmshim.so tools/vmmctl \
	tests/integration/control/ctl_target >/dev/null
export LD_LIBRARY_PATH="$shim_build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CTL_SHIM="$shim_build/shim/libvmmshim.so" CTL_VMMCTL="$shim_build/tools/vmmctl"
export CTL_TARGET="$shim_build/tests/integration/control/ctl_target"
exec "$build/tests/integration/control/$driver" "$@"
