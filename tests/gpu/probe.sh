#!/bin/bash
# One-shot probe of the GPU machine: what scripts/gpu-check.sh depends on, and the costs in
# probe.cu. Usage: tests/gpu/probe.sh [LOGDIR]   (LOGDIR defaults to $OUT, else /tmp)
here=$(cd "$(dirname "$0")" && pwd)
log=${1:-${OUT:-/tmp}}
mkdir -p "$log"
exec > >(tee "$log/probe.log") 2>&1
sec() { echo; echo "=== $*"; }
sec system; uname -r; nproc; free -m; ulimit -l
for f in enabled defrag; do echo "THP $f: $(cat /sys/kernel/mm/transparent_hugepage/$f)"; done
sec nvidia-smi; timeout 30 nvidia-smi
timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
sec tools; command -v nvcc gcc cc meson ninja python3 timeout setsid cuda-checkpoint pkg-config
timeout 20 nvcc --version | tail -2; gcc --version | head -1
echo "meson $(meson --version 2>&1)  ninja $(ninja --version 2>&1)"
python3 -m pip list 2>/dev/null | grep -iE '^(meson|ninja|torch|nvidia-nccl|nvidia-cublas|nvidia-ml-py) '
ls /usr/local/cuda/lib64 2>/dev/null | grep -E 'cublas|nccl|cudart|checkpoint' | tr '\n' ' '; echo
ls /usr/local/cuda/bin 2>/dev/null | tr '\n' ' '; echo
sec torch
timeout 60 python3 - <<'PY'
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
print("device", torch.cuda.get_device_name(0), "nccl", torch.cuda.nccl.version())
print("torch lib", os.path.dirname(torch.__file__) + "/lib")
free, total = torch.cuda.mem_get_info()
print("mem_get_info free %d MiB total %d MiB" % (free >> 20, total >> 20))
PY
sec meson configure of this tree
rm -rf /tmp/probe-build
timeout 60 meson setup /tmp/probe-build "$here/../.." -Dtests=disabled 2>&1 | tail -5
sec probe.cu
cd /tmp && timeout 90 nvcc -O2 -arch=sm_90 "$here/probe.cu" -o /tmp/probe -lcuda -lpthread &&
	timeout 150 /tmp/probe
echo "probe rc=$?"
