#!/usr/bin/env python3
"""An unmodified PyTorch program for the GPU-sharing row of the H200 matrix: it holds one large
tensor and alternates compute phases with idle pauses (the RL pattern: a trainer and a rollout
engine taking turns). Each phase's checksum is printed as a RESULT line, so that a run beside
another sharing process can be compared with a run alone; timings are printed apart (PHASE).

Usage: share_phases.py --gib 40 --phases 4 --iters 20 --idle-s 6 --seed 1 [--start-delay S]
"""
import argparse
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--gib", type=int, default=40)
ap.add_argument("--phases", type=int, default=4)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--idle-s", type=float, default=6.0)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--start-delay", type=float, default=0.0)
a = ap.parse_args()

time.sleep(a.start_delay)
torch.manual_seed(a.seed)
x = torch.empty((a.gib << 30) // 4, dtype=torch.float32, device="cuda")
x.uniform_(-1.0, 1.0)
torch.cuda.synchronize()
print(f"READY {a.gib} GiB", flush=True)
for ph in range(a.phases):
    t0 = time.time()
    for _ in range(a.iters):
        x.mul_(0.999).add_(0.001 * (ph + 1))
    # In float64, a slice at a time: a float64 sum of the whole tensor would first make a
    # float64 copy of it (80 GiB for 40).
    s = sum(torch.sum(x[i:i + (64 << 20)], dtype=torch.float64).item()
            for i in range(0, x.numel(), 64 << 20))
    print(f"RESULT phase {ph} sum {s:.10e}", flush=True)
    print(f"PHASE {ph} compute_s {time.time() - t0:.3f}", flush=True)
    if ph + 1 < a.phases:
        time.sleep(a.idle_s)
