#!/usr/bin/env python3
"""Stands in for nvidia-smi: the device memory in use is what $FAKE_STATE says (MiB)."""
import os
import sys

if "-L" in sys.argv:
    print("GPU 0: Stand-in GPU (UUID: GPU-0)")
elif "--query-gpu=memory.used" in sys.argv:
    try:
        print(open(os.environ["FAKE_STATE"]).read().strip() or "0")
    except OSError:
        print("0")
else:
    print("name, memory.total [MiB], driver_version\nStand-in GPU, 143771 MiB, 0.0")
