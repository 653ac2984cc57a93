"""A torch_memory_saver-style program on the vmmshim facade, for the H200 matrix (gpucheck.py runs
it natively and under the shim and compares the RESULT lines).

What torch_memory_saver users write, with one import changed: weights in a region with CPU
backup (kept across pause), a KV cache in a region without (dropped, refilled after resume),
memory outside every region (left alone), pause()/resume() cycles, the data checked each time.
Under the shim it also checks (CHECK lines) what the facade promises:
- each region has its own torch memory pool: a block PyTorch cached outside any region is not
  reused inside one (the KV tensor is a new, tagged segment);
- pause gives the regions' device memory back to the driver, keeps the weights' contents,
  drops the KV cache's, and leaves memory outside regions usable while paused.
Natively (no shim) pause/resume are skipped and the KV cache refilled the same way, so the
RESULT lines must match. Exit 0 when every CHECK passed.

Usage: tms_example.py [--weights-gib 4] [--kv-gib 2] [--cycles 3]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import torch  # noqa: E402

import vmmshim  # noqa: E402
from vmmshim.torch_memory_saver import torch_memory_saver  # noqa: E402  (was: torch_memory_saver)

GIB = 1 << 30
failures = 0


def check(ok, what):
    global failures
    print(f"CHECK {'ok' if ok else 'FAIL'} {what}", flush=True)
    failures += not ok


def digest(t):
    """A bit-exact fingerprint of a tensor's contents."""
    return float(t.double().sum().item()).hex() + "/" + float(
        t.double().square().sum().item()).hex()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights-gib", type=float, default=4)
    ap.add_argument("--kv-gib", type=float, default=2)
    ap.add_argument("--cycles", type=int, default=3)
    a = ap.parse_args()
    shim = vmmshim.available()
    print(f"INFO under the shim: {shim}", flush=True)
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    kv_bytes = int(a.kv_gib * GIB)

    # A block cached by PyTorch outside any region, of the KV cache's size: the trap a thread's
    # tag alone falls into (the cache would hand it to the KV tensor, untagged).
    trap = torch.empty(kv_bytes, dtype=torch.uint8, device=dev)
    del trap

    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        weights = torch.randn(int(a.weights_gib * GIB) // 4, device=dev)
    with torch_memory_saver.region(tag="kv_cache"):
        kv = torch.empty(kv_bytes, dtype=torch.uint8, device=dev)
    outside = torch.randn(GIB // 4, device=dev)
    x = torch.randn(4096, device=dev)
    w_ref = digest(weights)
    o_ref = digest(outside)
    print(f"RESULT weights {w_ref}\nRESULT outside {o_ref}", flush=True)

    if shim:
        kv_live = vmmshim.stats("kv_cache").live_bytes
        check(kv_live >= kv_bytes, f"the KV tensor is a new segment of its region's own pool "
              f"(tag kv_cache holds {kv_live} bytes live, the tensor {kv_bytes})")
        check(vmmshim.stats("weights+cpu").live_bytes >= weights.numel() * 4,
              "the weights are tagged weights+cpu")

    for cycle in range(a.cycles):
        kv.fill_(cycle + 1)
        torch.cuda.synchronize()
        if shim:
            free_before = torch.cuda.mem_get_info()[0]
            torch_memory_saver.pause()
            w, k = vmmshim.stats("weights+cpu"), vmmshim.stats("kv_cache")
            check(w.mapped_bytes == 0 and w.host_backup_bytes >= weights.numel() * 4,
                  f"cycle {cycle}: paused weights released with a host copy")
            check(k.mapped_bytes == 0 and k.host_backup_bytes == 0,
                  f"cycle {cycle}: paused KV cache released, contents dropped")
            freed = torch.cuda.mem_get_info()[0] - free_before
            check(freed >= 0.95 * (weights.numel() * 4 + kv_bytes),
                  f"cycle {cycle}: the driver got {freed / GIB:.2f} GiB back")
            # Memory outside the regions is still there and usable while the regions sleep.
            check(digest(outside) == o_ref, f"cycle {cycle}: memory outside regions intact "
                  "while paused")
            torch_memory_saver.pause()  # twice: harmless
            torch_memory_saver.resume()
        kv.fill_(cycle + 1)  # the KV cache's contents were dropped: refill, as its users do
        print(f"RESULT cycle {cycle} weights {digest(weights)} kv {digest(kv[:1 << 20])} "
              f"y {float((weights[:4096 * 256].view(256, 4096) @ x).double().sum().item()).hex()}",
              flush=True)
        if shim:
            check(digest(weights) == w_ref, f"cycle {cycle}: weights identical after resume")
    print(f"RESULT outside_end {digest(outside)}")
    print("done" if not failures else f"{failures} checks failed", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
