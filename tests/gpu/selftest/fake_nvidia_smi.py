#!/usr/bin/env python3
"""Stands in for nvidia-smi: the device memory in use is what $FAKE_STATE says (MiB), its total
$FAKE_TOTAL_MIB (an H200's by default); $FAKE_GPUS GPUs (default 1); the per-process list (pid, GPU, MiB) is $FAKE_STATE.apps, a JSON
{pid: {gpu index: MiB}} that the stand-in programs and vmmctl write."""
import json
import os
import sys

gpus = int(os.environ.get("FAKE_GPUS", "1"))
if "-L" in sys.argv:
    for i in range(gpus):
        print(f"GPU {i}: Stand-in GPU (UUID: GPU-{i})")
elif "--query-gpu=memory.used" in sys.argv:
    try:
        print(open(os.environ["FAKE_STATE"]).read().strip() or "0")
    except OSError:
        print("0")
elif "--query-gpu=memory.total" in sys.argv:
    print(os.environ.get("FAKE_TOTAL_MIB", "143771"))
elif "--query-gpu=index,uuid" in sys.argv:
    for i in range(gpus):
        print(f"{i}, GPU-{i}")
elif "--query-compute-apps=pid,gpu_uuid,used_memory" in sys.argv:
    try:
        apps = json.load(open(os.environ["FAKE_STATE"] + ".apps"))
    except (OSError, ValueError):
        apps = {}
    for pid, per_gpu in apps.items():
        for g, used in per_gpu.items():
            print(f"{pid}, GPU-{g}, {used}")
else:
    print("name, memory.total [MiB], driver_version\nStand-in GPU, 143771 MiB, 0.0")
