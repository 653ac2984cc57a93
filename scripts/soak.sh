#!/usr/bin/env bash
# The randomized soak for manual runs (issue 8; CI runs it for 50 s with a fixed seed as the
# meson test control_soak): threads allocate, copy and check device memory on simdev while the
# soak sleeps and wakes the program (whole, per tag, per device), kills vmmctl mid-request,
# cancels, sends malformed requests, injects driver faults and kills the program mid-sleep.
# It fails on a mismatch, a leak or a request not answered within its deadline, and prints the
# seed to replay. Builds into build/ (or $BUILD_DIR; a ThreadSanitizer build works too: its
# time limits stretch with CTL_SLOW, e.g. CTL_SLOW=4; so does an ASan+UBSan one, with the
# ASAN_OPTIONS the meson tests set, since the shim is preloaded after ASan's runtime).
# SOAK_LARGE_PCT=N makes N% of the program's allocations 33-80 MiB, so that large handles are
# cut by smaller ones (with VMMSHIM_REFILL_AHEAD=1, the refill thread is then soaked too).
# --share runs the sharing soak instead (share_soak.c, CI: control_share_soak): P sharing
# processes take turns on one simulated GPU too small for all, sleeping one another, while the
# soak kills and replaces them, sleeps them from outside and lists them; in every other epoch
# they share a buffer through legacy CUDA IPC and one of their own VMM memory (a POSIX
# descriptor, as NCCL's), and the exporter is killed while its group sleeps. B bystanders
# (default 1) share a second simulated GPU in the same control folder: nobody may be slept by a
# process of the other GPU. With --share, SOAK_KEEP_LOGS=1 keeps every program's shim log (killed,
# ended, bystanders') in /tmp/vmmshim-soak-logs-*, to read what a passing run logged.
# Usage: scripts/soak.sh [--seconds S (default 600)] [--seed N (default: random)] [--threads T]
#        scripts/soak.sh --share [--seconds S] [--seed N] [--procs P (default 3)] [--threads T]
#                        [--bystanders B (0 to 4, default 1)]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
soak=test_control_soak
if [ "${1:-}" = --share ]; then
	soak=test_control_share_soak
	shift
fi
args=("$@")
[[ " $* " == *" --seconds "* ]] || args+=(--seconds 600)

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dtests=enabled >/dev/null
fi
ninja -C "$build" "tests/integration/control/$soak" \
	tests/integration/control/soak_target shim/libvmmshim.so tools/vmmctl \
	tests/simdev/libcuda.so.1 tests/simdev/libcudart.so.13 >/dev/null

export LD_LIBRARY_PATH="$build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# As the meson tests set it (tests/integration/control/meson.build); ignored without ASan.
export ASAN_OPTIONS=${ASAN_OPTIONS:-verify_asan_link_order=0:detect_leaks=0:halt_on_error=1}
export CTL_SHIM="$build/shim/libvmmshim.so" CTL_VMMCTL="$build/tools/vmmctl"
export CTL_TARGET="$build/tests/integration/control/soak_target"
exec "$build/tests/integration/control/$soak" "${args[@]}"
