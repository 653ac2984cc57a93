"""How steady the GPU machine's host is: the host time of one small in-place PyTorch op
(x.add_(1) on 1024 floats: the Python dispatch and one launch, ~7 us), measured in fresh
processes pinned to each CPU in turn, then unpinned, over two sweeps (tests/gpu/PROBE.md (g)).
A CPU-bound training step is a few thousand such ops: when this figure moves between processes,
so does the step time, whatever the allocator.
Usage: python3 tests/gpu/probe_host_speed.py [sweeps]"""
import os
import subprocess
import sys
import time

CHILD = r"""
import time, torch
x = torch.zeros(1024, device="cuda")
for _ in range(500):
    x.add_(1)
torch.cuda.synchronize()
ts = []
for _ in range(5):
    t0 = time.perf_counter()
    for _ in range(10000):
        x.add_(1)
    ts.append((time.perf_counter() - t0) / 10000)
    torch.cuda.synchronize()
print("%.3f" % (sorted(ts)[2] * 1e6))
"""


def one(cpus):
    pre = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                       preexec_fn=pre, timeout=120)
    return float(r.stdout.split()[-1]) if r.returncode == 0 and r.stdout.split() else None


def main():
    sweeps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    n = os.cpu_count()
    t0 = time.time()
    for s in range(sweeps):
        pinned = [one({c}) for c in range(n)]
        free = [one(None) for _ in range(4)]
        print(f"sweep {s} at {time.time() - t0:.0f} s: pinned to CPU 0..{n - 1} (us/op): "
              + " ".join("?" if v is None else f"{v:.2f}" for v in pinned), flush=True)
        print(f"sweep {s}: unpinned (us/op): "
              + " ".join("?" if v is None else f"{v:.2f}" for v in free), flush=True)
        ok = [v for v in pinned + free if v is not None]
        if ok:
            print(f"sweep {s}: min {min(ok):.2f} max {max(ok):.2f} ({max(ok) / min(ok):.2f}x)")


if __name__ == "__main__":
    main()
