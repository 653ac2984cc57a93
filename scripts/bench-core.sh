#!/usr/bin/env bash
# Benchmark of the core allocator: median ns per malloc/free pair by size, growth cost per GiB,
# peak mapped / peak live bytes on a fragmenting trace and on a replay of NO_CACHING training
# (with device syncs and driver calls per step; on simdev the physical peak of every instant
# beside cudaMalloc's worst), and discard sleeps of 1 GiB handles and of
# 2 MiB pieces, each beside the native driver where that makes sense; driver calls are costed
# at the H200's figures (tests/bench/driver_model.c). Runs on the real GPU when a driver is installed, otherwise on
# simdev (its figures are then indicative only). Builds into build/ (or $BUILD_DIR) if needed.
# Usage: scripts/bench-core.sh [--quick] | --train [STEPS] [--varlen] [--seed N]
#        | --sleep GIB [--pieces | --small] | --replay TRACE | --demo
#        (--train and --replay take the core's options last: --sync-ahead MIB, --max-handle MIB,
#        --edge-cut-min MIB|unlimited, --aligned-cuts, --aligned-cut-max MIB, --give-back-late,
#        --refill-ahead;
#        --replay also --one-stream: plain calls ordered on one stream, as lone-stream ordering,
#        and --realtime GAP_US: each driver call also takes its modelled H200 time, one at a
#        time across threads, with GAP_US of host time before each request, and the time
#        inside the replay's mallocs and frees is printed: what the core's own threads take
#        off the program's, on a machine with a core free for them)
# (--train --varlen replays the H200's PyTorch benchmark instead, --replay a trace recorded with
# VMMSHIM_ALLOC_TRACE, unpacked first when it ends in .gz: simdev then gets 141G)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" >/dev/null
fi
ninja -C "$build" tests/bench/bench_core tests/simdev/libcuda.so.1 >/dev/null

# A compressed trace (the kept ones are) is unpacked to a temporary file first.
if [ "${1:-}" = --replay ] && [[ "${2:-}" == *.gz ]]; then
	unpacked=$(mktemp /tmp/vmmshim-trace.XXXXXX)
	trap 'rm -f "$unpacked"' EXIT
	gzip -dc -- "$2" >"$unpacked"
	set -- --replay "$unpacked" "${@:3}"
fi

if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && nvidia-smi -L >/dev/null 2>&1; then
	echo "running on the real driver"
	"$build/tests/bench/bench_core" "$@"
	exit
fi
echo "no GPU driver found: running on simdev (figures are indicative only)"
default_memory=16G
[ "${1:-}" = --train ] && [[ " $* " == *" --varlen "* ]] && default_memory=141G
[ "${1:-}" = --replay ] && default_memory=141G # a recorded program's whole peak must fit
export SIMDEV_MEMORY=${SIMDEV_MEMORY:-$default_memory}
LD_LIBRARY_PATH="$build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	"$build/tests/bench/bench_core" "$@"
