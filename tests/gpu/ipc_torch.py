#!/usr/bin/env python3
"""torch.multiprocessing CUDA-tensor sharing, as RL frameworks pass weights from trainer to
rollout: the parent puts CUDA tensors in a queue, a spawned child (a fresh process, so under the
shim it runs the shim too) opens them (cudaIpcOpenMemHandle), checks and changes them in place,
and the parent sees the change. Prints RESULT lines (the same natively and under the shim).

--bench N: instead, the child times opening N 1 GiB tensors (BENCH open_1gib_ms, the median of
the unpickling, which is the cudaIpcOpenMemHandle) and the parent checks one byte of each."""
import argparse
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp


def child(q_in, q_out, bench):
    torch.cuda.set_device(0)
    if bench:
        times = []
        for _ in range(bench):
            t0 = time.perf_counter()
            t = q_in.get()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            t[0] += 1
            torch.cuda.synchronize()
            del t
            q_out.put("done")
        q_out.put(statistics.median(times))
        return
    weights, small = q_in.get()
    q_out.put(("seen", float(weights.sum().item()), int(small.sum().item())))
    weights.mul_(2).add_(1)   # in place: the parent's memory
    small.add_(7)
    torch.cuda.synchronize()
    q_out.put(("done", float(weights.sum().item()), int(small.sum().item())))
    q_in.get()  # keep our references until the parent has read them


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", type=int, default=0)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child, args=(q_in, q_out, a.bench))
    p.start()
    if a.bench:
        for i in range(a.bench):
            t = torch.zeros(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
            q_in.put(t)
            if q_out.get(timeout=120) != "done":
                sys.exit("child failed")
            torch.cuda.synchronize()
            if t[0].item() != 1.0:
                sys.exit(f"tensor {i}: the child's write is not seen")
            del t
        print(f"BENCH open_1gib_ms {q_out.get(timeout=60):.3f}", flush=True)
        p.join(60)
        sys.exit(p.exitcode or 0)
    torch.manual_seed(0)
    weights = torch.randint(0, 100, (1 << 24,), device="cuda").float()   # 64 MiB
    small = torch.arange(100, device="cuda", dtype=torch.int64)          # 800 bytes
    q_in.put((weights, small))
    seen = q_out.get(timeout=120)
    done = q_out.get(timeout=120)
    torch.cuda.synchronize()
    print(f"RESULT child_saw {seen[1]:.1f} {seen[2]}", flush=True)
    print(f"RESULT child_wrote {done[1]:.1f} {done[2]}", flush=True)
    print(f"RESULT parent_sees {float(weights.sum().item()):.1f} {int(small.sum().item())}",
          flush=True)
    ok = float(weights.sum().item()) == done[1] and int(small.sum().item()) == done[2]
    print(f"RESULT parent_sees_child_write {ok}", flush=True)
    q_in.put("bye")
    p.join(60)
    sys.exit(0 if ok and p.exitcode == 0 else 1)


if __name__ == "__main__":
    main()
