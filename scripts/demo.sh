#!/usr/bin/env bash
# The demo: builds vmmshim into build/ and shows it at work, on the real GPU when there is one,
# otherwise on the simulated device (tests/simdev).
#   1. the core allocator alone: growth, reuse from cache, the fragmentation case (bench_core);
#   2. an unmodified CUDA program (tests/programs/demo_app) under LD_PRELOAD=libvmmshim.so:
#      what the shim serves (vmmctl list/status), then `vmmctl sleep` (device memory released,
#      the program's reads wait), `vmmctl wake`, and the program's own check that no byte was lost.
#   3. (simdev) GPU sharing: two programs that do not fit side by side, VMMSHIM_SHARE=1, finish.
# Usage: scripts/demo.sh [--simdev] [--mib N]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

force_simdev=0
mib=""
while [ $# -gt 0 ]; do
  case "$1" in
    --simdev) force_simdev=1 ;;
    --mib) mib=$2; shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if [ -f build/build.ninja ]; then meson setup --reconfigure build >/dev/null
else meson setup build >/dev/null; fi
ninja -C build >/dev/null
echo "built: build/shim/libvmmshim.so, build/tools/vmmctl"

if [ $force_simdev = 0 ] && nvidia-smi -L >/dev/null 2>&1; then
  mode="GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
  # The demo program was linked against simdev's libcudart.so.13; the toolkit's has the same soname.
  export LD_LIBRARY_PATH="$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mib=${mib:-8192}
else
  mode="simulated device (tests/simdev: device memory is host memory, 4 GiB)"
  export LD_LIBRARY_PATH="$PWD/build/tests/simdev"
  export SIMDEV_MEMORY=4G
  mib=${mib:-1024}
fi
echo "running on: $mode"
echo

echo "== 1. The core allocator: growth, reuse from cache, fragmentation"
build/tests/bench/bench_core --demo

echo
echo "== 2. An unmodified CUDA program under the shim"
run_dir=$(mktemp -d)
export VMMSHIM_RUN_DIR="$run_dir"
ready="$run_dir/ready"
log="$run_dir/demo_app.log"
echo "\$ LD_PRELOAD=build/shim/libvmmshim.so build/tests/programs/demo_app --mib $mib &"
LD_PRELOAD="$PWD/build/shim/libvmmshim.so" VMMSHIM_LOG=info \
  build/tests/programs/demo_app --mib "$mib" --ready "$ready" >"$log" 2>&1 &
app=$!
trap 'kill $app 2>/dev/null || true; rm -rf "$run_dir"' EXIT
for _ in $(seq 600); do [ -s "$ready" ] && break; kill -0 $app 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$ready" ]; then cat "$log"; echo "demo: the program did not start" >&2; exit 1; fi

vmmctl() { echo "\$ vmmctl $*"; build/tools/vmmctl "$@"; }
vmmctl list
vmmctl status $app
vmmctl sleep $app
vmmctl status $app
echo "(asleep for 2 s: the program's device reads wait at the gate instead of faulting)"
sleep 2
vmmctl wake $app
sleep 1
kill -TERM $app
wait $app && rc=0 || rc=$?
echo
echo "== the program's own output"
cat "$log"
trap - EXIT
rm -rf "$run_dir"
[ $rc = 0 ] && echo "demo: done, the program found all its data intact" || { echo "demo: the program reported a problem" >&2; exit 1; }

# 3. GPU sharing (simdev only: two processes in one SIMDEV_SHARED group of 256 MiB, each needing
# 150 MB, so they cannot be resident side by side; ctl_target is built with the tests).
target=build/tests/integration/control/ctl_target
if [ "$mode" != "${mode#simulated}" ] && [ -x "$target" ]; then
  echo
  echo "== 3. Two programs that do not fit side by side, both with VMMSHIM_SHARE=1"
  share_dir=$(mktemp -d)
  trap 'rm -rf "$share_dir"' EXIT
  export VMMSHIM_RUN_DIR="$share_dir" SIMDEV_MEMORY=256M SIMDEV_SHARED="demo$$" \
    VMMSHIM_SHARE=1 VMMSHIM_SHARE_IDLE=500ms VMMSHIM_LOG=info
  # A fills 150 MB, idles, then checks its data (its next device work wakes it); B arrives
  # while A idles, needs 150 MB, checks and frees. Every line a program answers is shown.
  { echo "alloc 6 25000000"; sleep 4; echo check; echo quit; } |
    LD_PRELOAD="$PWD/build/shim/libvmmshim.so" "$target" 2>"$share_dir/a.log" | sed 's/^/A: /' &
  a=$!
  sleep 1.5
  { echo "alloc 6 25000000"; echo check; echo freeall; echo quit; } |
    LD_PRELOAD="$PWD/build/shim/libvmmshim.so" "$target" 2>"$share_dir/b.log" | sed 's/^/B: /'
  wait $a
  echo "-- what the shims said (info lines about sharing):"
  grep -h "share:" "$share_dir"/a.log "$share_dir"/b.log | grep -v "share: on" || true
  rm -f /dev/shm/simdev-cuda-"$(id -u)"-demo$$* 2>/dev/null || true
  if grep -q corrupt "$share_dir"/*.log; then echo "demo: sharing lost data" >&2; exit 1; fi
  rm -rf "$share_dir"
  trap - EXIT
  echo "demo: both programs finished side by side"
fi
