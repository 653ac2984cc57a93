#!/usr/bin/env bash
# Legacy CUDA IPC open latency on simdev, both processes under the shim: N allocations of MIB MiB
# opened one at a time by another process (prog_ipc bench, the pattern of
# tests/gpu/ipc_torch.py --bench). Prints the importer's median open in microseconds and the
# medians of the shim's open phases (its info lines; ms) on both sides.
# Usage: scripts/bench-ipc.sh [N [MIB]]   (defaults 200 and 64)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
n=${1:-200}
mib=${2:-64}

if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" "$root" -Dtests=enabled >/dev/null
fi
ninja -C "$build" tests/integration/interpose/prog_ipc shim/libvmmshim.so >/dev/null
run=$(mktemp -d)
log=$(mktemp)
trap 'rm -rf "$run" "$log"' EXIT
chmod 700 "$run"
LD_LIBRARY_PATH="$build/tests/simdev${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	LD_PRELOAD="$build/shim/libvmmshim.so" VMMSHIM_RUN_DIR="$run" VMMSHIM_LOG=info \
	SIMDEV_MEMORY=$(( (mib * 2 + 256) ))M \
	"$build/tests/integration/interpose/prog_ipc" bench "$n" "$mib" 2>"$log"
python3 - "$log" <<'PY'
import statistics, sys

for tag in (" open_phases_ms ", " share_open_phases_ms "):
    per = {}
    for line in open(sys.argv[1]):
        if tag not in line:
            continue
        for f in line.split(tag, 1)[1].split():
            k, _, v = f.partition("=")
            try:
                per.setdefault(k, []).append(float(v))
            except ValueError:
                pass
    side = "importer" if tag == " open_phases_ms " else "exporter"
    print(f"{side} medians (ms): " + (" ".join(f"{k}={statistics.median(v):.4f}"
                                              for k, v in per.items()) or "none"))
PY
