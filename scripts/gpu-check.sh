#!/bin/bash
# The H200 matrix in one call: build libvmmshim.so and vmmctl (meson, -Dtests=disabled: the GPU
# machine has no Criterion), compile the GPU test programs in tests/gpu with nvcc, then run every
# row natively and under the shim, the sleep/wake rows and the benchmarks (tests/gpu/gpucheck.py).
# Prints a short table last; exits non-zero when a correctness row fails (benchmarks never fail).
#
# Usage: scripts/gpu-check.sh [LOGDIR]        LOGDIR defaults to $OUT, else /tmp/gpu-check-logs
# Environment: GPUCHECK_BUDGET_S (default 510: the whole run ends inside 9 minutes),
#   GPUCHECK_ONLY=row,row (parts of row names), GPUCHECK_SKIP=row,row (rows left out: a matrix
#   that outgrows one 10-minute call runs in row groups), GPUCHECK_SKIP_BENCH=1, GPUCHECK_BUILD (build dir),
#   GPUCHECK_TRAIN_ROUNDS (rounds of the PyTorch benchmark, default 5), GPUCHECK_TRAIN_ALLOCS
#   (its allocators, e.g. NO_CACHING,expandable; default all three; NO_CACHING+VAR=VAL adds
#   NO_CACHING under the shim with that setting, an A/B; NAME@native, @shim: one side only,
#   @once: the first round only), GPUCHECK_TRAIN_PASSES
#   (passes over its steps per run, the last timed, default 2), GPUCHECK_TRAIN_MODEL (large,
#   the default: 12 layers d=2048, GPU-bound; small: 8 layers d=1024), GPUCHECK_SMALL_GIB (the
#   small-handles sleep/wake row, default 96), GPUCHECK_SLEEP_SIZES (GiB held by the
#   sleep/wake rows, default 1,16,64), GPUCHECK_SLEEP_LOG (VMMSHIM_LOG of the sleep/wake
#   benchmark's program: debug logs each transition's phases), GPUCHECK_JOBS (parallel compiles, default nproc)
# LOGDIR receives summary.txt, results.json and gpu-check-logs.tgz (every program's output,
# vmmctl's answers, the build log): few files, as the device tool brings back at most 8.
set -u
start=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-/tmp/gpu-check-logs}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/gpu-check.XXXXXX)
logs=$work/logs
mkdir -p "$logs"
build=${GPUCHECK_BUILD:-$work/build}
bin=$work/bin
mkdir -p "$bin"
budget=${GPUCHECK_BUDGET_S:-510}
# Never NVLink multicast on the lent machines, in this script and every program it starts.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

pack() {
	tar czf "$out/gpu-check-logs.tgz" -C "$work" logs 2>/dev/null
}
trap pack EXIT

cuda=$(sh "$root/scripts/find-cuda.sh")
if [ -z "$cuda" ]; then
	echo "gpu-check: no CUDA toolkit found (nvcc, CUDA_HOME, /usr/local/cuda)" |
		tee "$out/summary.txt"
	exit 1
fi
export PATH=$cuda/bin:$PATH

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)
# The commit alone can mislead: a copy of a working tree may carry a .git older than its files.
# The hash of the sources that build the shim and vmmctl says what ran (scripts/source-hash.sh).
echo "gpu-check: $(date -u '+%F %T') UTC on ${gpu:-no GPU}," \
	"commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)," \
	"sources $("$root/scripts/source-hash.sh")"

# 1. The shim and vmmctl. Warnings do not stop this build (CI holds the line on them).
{
	reconf=()
	[ -d "$build/meson-private" ] && reconf=(--reconfigure)
	timeout 120 meson setup "${reconf[@]}" "$build" "$root" -Dtests=disabled -Dwerror=false \
		-Dbuildtype=debugoptimized -Dtoolkit_dir="$cuda" &&
		timeout 240 ninja -C "$build"
} >"$logs/build.log" 2>&1
build_rc=$?
shim=$(find "$build" -name libvmmshim.so -type f 2>/dev/null | head -1)
vmmctl=$(find "$build" -name vmmctl -type f -perm -u+x 2>/dev/null | head -1)
echo "gpu-check: meson/ninja rc=$build_rc; shim=${shim:-MISSING}; vmmctl=${vmmctl:-MISSING}"
[ $build_rc -eq 0 ] || tail -15 "$logs/build.log"

# 2. The test programs, compiled in parallel.
src=$root/tests/gpu
nv="timeout 180 nvcc -O2 -arch=sm_90 -I$src"
# Plain C programs that use only the driver: nvcc finds libcuda's stub for the link.
cc_cuda="timeout 120 nvcc -O2 -cudart none -Xcompiler -std=gnu11,-Wall"
declare -A jobs=(
	[alloc_static]="$nv $src/alloc_basic.cu -o $bin/alloc_static"
	[alloc_shared]="$nv -cudart shared $src/alloc_basic.cu -o $bin/alloc_shared"
	[alloc_ptds]="$nv --default-stream per-thread $src/alloc_basic.cu -o $bin/alloc_ptds"
	[driver_kernels]="$nv -fatbin $src/driver_kernels.cu -o $bin/driver_kernels.fatbin"
	[driver_api]="$cc_cuda $src/driver_api.c -o $bin/driver_api -lcuda"
	[app_vmm_sleep]="$cc_cuda $src/app_vmm_sleep.c -o $bin/app_vmm_sleep -lcuda -ldl"
	[cublas_gemm]="$nv $src/cublas_gemm.cu -o $bin/cublas_gemm -lcublas"
	[device_reset]="$nv $src/device_reset.cu -o $bin/device_reset -ldl"
	# Two of simdev's test programs as they are (tests/integration/interpose): the driver
	# decides on the GPU what simdev decides in CI.
	[primary_release]="$cc_cuda $root/tests/integration/interpose/prog_release.c -o $bin/primary_release -lcuda -ldl -lpthread"
	[prog_ipc]="timeout 120 nvcc -O2 -Xcompiler -std=gnu11 $root/tests/integration/interpose/prog_ipc.c -o $bin/prog_ipc -lcuda -ldl -lpthread"
	[graph]="$nv $src/graph.cu -o $bin/graph"
	[sleep_kernels]="$nv $src/sleep_kernels.cu -o $bin/sleep_kernels"
	[ctx_sleep]="$nv $src/ctx_sleep.cu -o $bin/ctx_sleep -lcuda"
	[flag_wait]="$nv $src/flag_wait.cu -o $bin/flag_wait"
	[hold]="$nv $src/hold.cu -o $bin/hold"
	[peer]="$nv $src/peer.cu -o $bin/peer"
	[bench_alloc]="$nv $src/bench_alloc.cu -o $bin/bench_alloc"
	[bench_bw]="$nv $src/bench_bw.cu -o $bin/bench_bw -lcuda"
	[probe_overlap]="$nv $src/probe_overlap.cu -o $bin/probe_overlap -lcuda -lpthread"
	[ckpt]="$cc_cuda $src/ckpt.c -o $bin/ckpt -lcuda"
	[share_facts]="$cc_cuda $src/share_facts.c -o $bin/share_facts -lcuda"
	[nccl_register]="$cc_cuda $src/nccl_register.c -o $bin/nccl_register -lcuda -ldl"
	[share_kill]="$cc_cuda -I$root/shim/protocol $src/share_kill.c $root/shim/protocol/fd_pass.c -o $bin/share_kill -lcuda -ldl"
	[trace_replay]="$cc_cuda $src/trace_replay.c -o $bin/trace_replay -lcuda -ldl"
	[peak_meter]="timeout 60 cc -O2 -std=gnu11 $src/peak_meter.c -o $bin/peak_meter -ldl -lpthread"
)
max_jobs=${GPUCHECK_JOBS:-$(nproc)}
for j in "${!jobs[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$max_jobs" ]; do wait -n; done
	(eval "${jobs[$j]}" >"$logs/compile-$j.log" 2>&1 ||
		echo "FAILED: ${jobs[$j]}" >>"$logs/compile-$j.log") &
done
wait
for j in "${!jobs[@]}"; do
	if grep -q '^FAILED' "$logs/compile-$j.log"; then
		echo "gpu-check: compiling $j failed:"
		tail -5 "$logs/compile-$j.log"
	fi
done
echo "gpu-check: built in $(( $(date +%s) - start )) s"

# 3. The matrix. Its own deadline keeps the whole run inside the budget.
only=()
[ -n "${GPUCHECK_ONLY:-}" ] && only=(--only "$GPUCHECK_ONLY")
[ -n "${GPUCHECK_SKIP:-}" ] && only+=(--skip "$GPUCHECK_SKIP")
opts=()
[ -n "${GPUCHECK_SKIP_BENCH:-}" ] && opts=(--skip-bench)
[ -n "${GPUCHECK_TRAIN_ROUNDS:-}" ] && opts+=(--train-rounds "$GPUCHECK_TRAIN_ROUNDS")
[ -n "${GPUCHECK_TRAIN_ALLOCS:-}" ] && opts+=(--train-allocs "$GPUCHECK_TRAIN_ALLOCS")
[ -n "${GPUCHECK_TRAIN_PASSES:-}" ] && opts+=(--train-passes "$GPUCHECK_TRAIN_PASSES")
[ -n "${GPUCHECK_TRAIN_MODEL:-}" ] && opts+=(--train-model "$GPUCHECK_TRAIN_MODEL")
[ -n "${GPUCHECK_SMALL_GIB:-}" ] && opts+=(--small-gib "$GPUCHECK_SMALL_GIB")
[ -n "${GPUCHECK_SLEEP_SIZES:-}" ] && opts+=(--sleep-sizes "$GPUCHECK_SLEEP_SIZES")
limit=$(( budget + 30 - ($(date +%s) - start) ))
[ $limit -ge 30 ] || limit=30
GPUCHECK_LOGS=$out/gpu-check-logs.tgz timeout $limit \
	python3 "$src/gpucheck.py" --root "$root" --bin "$bin" --shim "${shim:-}" \
	--vmmctl "${vmmctl:-}" --log "$logs" --deadline $(( start + budget )) "${only[@]}" "${opts[@]}"
rc=$?
cp "$logs/summary.txt" "$logs/results.json" "$out/" 2>/dev/null
echo "gpu-check: finished in $(( $(date +%s) - start )) s, rc=$rc; logs: $out/gpu-check-logs.tgz"
exit $rc
