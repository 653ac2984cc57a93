#!/usr/bin/env python3
"""torch.multiprocessing CUDA-tensor sharing, as RL frameworks pass weights from trainer to
rollout: the parent puts CUDA tensors in a queue, a spawned child (a fresh process, so under the
shim it runs the shim too) opens them (cudaIpcOpenMemHandle), checks and changes them in place,
and the parent sees the change. Prints RESULT lines (the same natively and under the shim).

--x2: across two GPUs instead: the parent makes a tensor on cuda:0; the child copies it to cuda:1
and checks the copy, changes the original in place on cuda:0 through the IPC mapping, and sends
back a tensor it made on cuda:1, which the parent opens and checks.

--group-sleep VMMCTL (under the shim): once the child has written, `VMMCTL sleep PARENT CHILD`
sleeps both as one group, which releases the shared tensors too (the child lets its mapping go,
the parent copies them out); while asleep it prints GROUP lines (vmmctl status of each, the GPU's
used memory before and while asleep); after `VMMCTL wake` the child reads the tensors again through
its re-imported mapping (GROUP child_sees_after) and the parent checks them as usual.

--bench N: instead, N 1 GiB tensors go to the child one at a time. The parent allocates each,
then times its pickling (BENCH ipc_get_ms, the median: torch's cudaIpcGetMemHandle, which under the
shim also queues the export ahead) and sends the bytes; the child times only their unpickling
(BENCH open_1gib_ms, the median: the cudaIpcOpenMemHandle and a synchronize; BENCH
open_unpickle_ms is the unpickling alone), not the wait for the parent's
allocation and pickling, and the parent checks one byte of each. Under the shim the child runs with
VMMSHIM_LOG=info and its stderr in a file, from which the parent takes the shim's phase line of
each open and prints BENCH open_phases_ms NAME=MEDIAN ... (ms)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.reduction import ForkingPickler

import torch
import torch.multiprocessing as mp  # registers torch's reducers with ForkingPickler


def child(q_in, q_out, bench, log_path=None):
    if log_path:  # the shim logs to fd 2: its phase lines go to the parent through this file
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 2)
        os.close(fd)
    torch.cuda.set_device(0)
    if bench:
        times, loads = [], []
        for _ in range(bench):
            data = q_in.get()  # the pickled tensor: waiting for it is not the open
            t0 = time.perf_counter()
            t = ForkingPickler.loads(data)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
            loads.append((t1 - t0) * 1e3)
            t[0] += 1
            torch.cuda.synchronize()
            del t
            q_out.put("done")
        q_out.put((statistics.median(times), statistics.median(loads)))
        return
    weights, small = q_in.get()
    q_out.put(("seen", float(weights.sum().item()), int(small.sum().item())))
    weights.mul_(2).add_(1)   # in place: the parent's memory
    small.add_(7)
    torch.cuda.synchronize()
    q_out.put(("done", float(weights.sum().item()), int(small.sum().item())))
    msg = q_in.get()  # keep our references until the parent has read them
    if msg == "check":  # after a group sleep and wake: read through the mapping again
        q_out.put((float(weights.sum().item()), int(small.sum().item())))
        q_in.get()


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True, timeout=30).stdout
    return int(out.split()[0]) if out.split() else -1


def group_sleep(vmmctl, pids):
    """Sleep the parent and the child as one group, report, wake them."""
    ids = [str(p) for p in pids]
    before = gpu_used_mib()
    sl = subprocess.run([vmmctl, "--timeout", "60", "sleep", *ids], capture_output=True,
                        text=True, timeout=90)
    asleep = gpu_used_mib()
    print(f"GROUP sleep_rc {sl.returncode} used_before_mib {before} used_asleep_mib {asleep}",
          flush=True)
    if sl.returncode:
        print(f"GROUP sleep_error {(sl.stdout + sl.stderr).strip()[-300:]!r}", flush=True)
    for pid in ids:
        st = subprocess.run([vmmctl, "--json", "status", pid], capture_output=True, text=True,
                            timeout=30)
        try:
            j = json.loads(st.stdout)
            d = j["devices"][0]
            print(f"GROUP status {pid} asleep {j['info'].get('asleep', -1)} ipc_shared "
                  f"{d.get('ipc_shared', 0)} ipc_shared_asleep {d.get('ipc_shared_asleep', 0)} "
                  f"ipc_imported {d.get('ipc_imported', 0)}", flush=True)
        except (ValueError, KeyError, IndexError):
            print(f"GROUP status {pid} unreadable {st.stdout[-200:]!r}", flush=True)
    wk = subprocess.run([vmmctl, "--timeout", "60", "wake", *ids], capture_output=True,
                        text=True, timeout=90)
    print(f"GROUP wake_rc {wk.returncode}", flush=True)
    if wk.returncode:
        print(f"GROUP wake_error {(wk.stdout + wk.stderr).strip()[-300:]!r}", flush=True)


def child_x2(q_in, q_out):
    torch.cuda.set_device(1)
    orig = q_in.get()                          # lives on cuda:0, opened through IPC
    copy = orig.to("cuda:1")                   # a peer copy onto the other GPU
    torch.cuda.synchronize(1)
    orig.mul_(3).add_(2)                       # in place, on cuda:0: the parent's memory
    torch.cuda.synchronize(0)
    made = torch.arange(1 << 20, device="cuda:1", dtype=torch.int64) * 5   # 8 MiB on cuda:1
    q_out.put((str(orig.device), str(copy.device), float(copy.double().sum().item()),
               float(orig.double().sum().item()), made))
    q_in.get()  # keep our references until the parent has read them


def main_x2(ctx):
    if torch.cuda.device_count() < 2:
        print(f"SKIP {torch.cuda.device_count()} GPU(s), --x2 needs 2", flush=True)
        return 0
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=child_x2, args=(q_in, q_out))
    p.start()
    torch.manual_seed(0)
    orig = torch.randint(0, 100, (1 << 24,), device="cuda:0").float()     # 64 MiB on cuda:0
    before = float(orig.double().sum().item())
    q_in.put(orig)
    orig_dev, copy_dev, copy_sum, child_orig_sum, made = q_out.get(timeout=120)
    torch.cuda.synchronize(0)
    after = float(orig.double().sum().item())
    made_sum = int(made.sum().item())
    want_made = 5 * ((1 << 20) - 1) * (1 << 20) // 2
    print(f"RESULT x2 child_opened_on {orig_dev} copied_to {copy_dev}", flush=True)
    print(f"RESULT x2 copy_on_gpu1_equals_original {copy_sum == before} {copy_sum:.1f}",
          flush=True)
    print(f"RESULT x2 parent_sees_child_write {after == 3 * before + 2 * (1 << 24)} "
          f"{after:.1f} child {child_orig_sum:.1f}", flush=True)
    print(f"RESULT x2 tensor_from_gpu1 {made.device} {made_sum == want_made} {made_sum}",
          flush=True)
    ok = (copy_sum == before and after == 3 * before + 2 * (1 << 24) and
          after == child_orig_sum and made_sum == want_made and str(made.device) == "cuda:1")
    del made
    q_in.put("bye")
    p.join(60)
    return 0 if ok and p.exitcode == 0 else 1


def phase_medians(text):
    """{phase: median ms} over the shim's 'open_phases_ms name=value ...' lines in text."""
    per = {}
    for line in text.splitlines():
        if " open_phases_ms " not in line:
            continue
        for f in line.split(" open_phases_ms ", 1)[1].split():
            k, _, v = f.partition("=")
            try:
                per.setdefault(k, []).append(float(v))
            except ValueError:
                pass
    return {k: statistics.median(v) for k, v in per.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--x2", action="store_true")
    ap.add_argument("--group-sleep", metavar="VMMCTL")
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    if a.x2:
        sys.exit(main_x2(ctx))
    q_in, q_out = ctx.Queue(), ctx.Queue()
    log_path = None
    if a.bench and "vmmshim" in os.environ.get("LD_PRELOAD", ""):
        fd, log_path = tempfile.mkstemp(prefix="ipc_torch_child_", suffix=".log")
        os.close(fd)
        os.environ["VMMSHIM_LOG"] = "info"  # read by the child's shim when it starts
    p = ctx.Process(target=child, args=(q_in, q_out, a.bench, log_path))
    p.start()
    if a.bench:
        gets = []
        for i in range(a.bench):
            t = torch.zeros(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            data = bytes(ForkingPickler.dumps(t))  # what the queue does: the get is in here
            gets.append((time.perf_counter() - t0) * 1e3)
            q_in.put(data)
            if q_out.get(timeout=120) != "done":
                sys.exit("child failed")
            torch.cuda.synchronize()
            if t[0].item() != 1.0:
                sys.exit(f"tensor {i}: the child's write is not seen")
            del t
        print(f"BENCH ipc_get_ms {statistics.median(gets):.3f}", flush=True)
        opened, unpickled = q_out.get(timeout=60)
        print(f"BENCH open_1gib_ms {opened:.3f}", flush=True)
        # Where the open's time goes outside the shim: the unpickling alone (torch's rebuild,
        # the cudaIpcOpenMemHandle and event handle in it), the rest is the synchronize.
        print(f"BENCH open_unpickle_ms {unpickled:.3f}", flush=True)
        p.join(60)
        if log_path:
            with open(log_path) as f:
                text = f.read()
            os.unlink(log_path)
            sys.stderr.write(text)  # the child's log stays visible where it would have been
            med = phase_medians(text)
            print("BENCH open_phases_ms " + (" ".join(f"{k}={v:.3f}" for k, v in med.items())
                                             or "none"), flush=True)
        sys.exit(p.exitcode or 0)
    torch.manual_seed(0)
    weights = torch.randint(0, 100, (1 << 24,), device="cuda").float()   # 64 MiB
    small = torch.arange(100, device="cuda", dtype=torch.int64)          # 800 bytes
    q_in.put((weights, small))
    seen = q_out.get(timeout=120)
    done = q_out.get(timeout=120)
    torch.cuda.synchronize()
    if a.group_sleep:
        group_sleep(a.group_sleep, [os.getpid(), p.pid])
        q_in.put("check")
        after = q_out.get(timeout=120)
        print(f"GROUP child_sees_after {after[0]:.1f} {after[1]}", flush=True)
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
