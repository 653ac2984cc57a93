"""Two NCCL ranks (one GPU each) slept and woken as one group by `vmmctl sleep P0 P1`, natively
beside under the shim (the x2 rows of gpucheck.py). Each rank all-reduces 512 MiB of float64 and
checks the sums before and after the group sleep/wake. Measured per GPU with nvidia-smi's
per-process list: right after the CUDA context (before NCCL), after NCCL, while the group is
asleep and after wake; under the shim also each rank's `vmmctl status` while asleep (the
breakdown: what the shim released, what stays resident because it is shared, what it does not
manage). Then each rank alone is slept and woken (the same bytes, one process at a time), and
the group again, for the group-vs-single benchmark (the group's first cycle also provisions every
rank's host backup, so the comparison uses its second).

With --no-sleep the same two ranks all-reduce natively and under the shim and nothing sleeps
(plain NCCL under the shim, the anchor of the group sleep).

Harness: python3 nccl_group.py --shim LIB --vmmctl BIN --log DIR [--no-sleep]  -> prints one line
         "NCCLGROUP {json}" (gpucheck.py reads it), or "NCCLGROUP_SKIP why"
Rank (started by the harness): python3 nccl_group.py --rank R --world W --port P
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on these machines
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def rank_main(a):
    import torch
    import torch.distributed as dist

    def stage(name):
        print(f"STAGE {name}", flush=True)
        if sys.stdin.readline().strip() != "go":
            sys.exit(3)

    torch.cuda.set_device(a.rank)
    torch.ones(1, device="cuda")
    stage("ctx")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=a.world, device_id=torch.device(f"cuda:{a.rank}"))
    n = 64 << 20  # 512 MiB of float64
    x = torch.full((n,), float(a.rank + 1), dtype=torch.float64, device="cuda")
    dist.all_reduce(x)
    want = a.world * (a.world + 1) / 2
    print(f"RESULT first_sum_ok={int(bool((x == want).all()))}", flush=True)
    torch.cuda.synchronize()
    stage("nccl")
    dist.all_reduce(x)
    print(f"RESULT second_sum_ok={int(bool((x == want * a.world).all()))}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("DONE", flush=True)


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for l in out.splitlines() if l.startswith("GPU "))


def smi_apps():
    """{pid: {gpu_index: MiB}} from nvidia-smi's per-process list."""
    idx, apps = {}, {}
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        if "," in line:
            i, u = [s.strip() for s in line.split(",")]
            idx[u] = int(i)
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        try:
            pid, uuid, mib = [s.strip() for s in line.split(",")]
            apps.setdefault(int(pid), {})[idx.get(uuid, -1)] = int(mib)
        except ValueError:
            pass
    return apps


def run_mode(a, shim):
    env = dict(os.environ)
    tag = ("shim" if shim else "native") + ("-nosleep" if a.no_sleep else "")
    rundir = os.path.join(a.log, f"nccl-group-run-{tag}")
    os.makedirs(rundir, exist_ok=True)
    os.chmod(rundir, 0o700)  # the shim refuses a run folder others can enter
    if shim:
        env.update(LD_PRELOAD=a.shim, VMMSHIM_LOG="info", VMMSHIM_RUN_DIR=rundir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(a.world):
        err = open(os.path.join(a.log, f"nccl-group-{tag}-rank{r}.err"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank", str(r), "--world", str(a.world),
             "--port", str(port)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True, bufsize=1))
    rep = {"mode": tag, "pids": [p.pid for p in procs], "stages": {}, "ctl": {}}
    early = {r: [] for r in range(a.world)}  # RESULT lines read while waiting for a stage

    def wait_stage(name):
        for r, p in enumerate(procs):
            while True:
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{tag} rank {r} ended before stage {name}")
                if line.startswith("RESULT"):
                    early[r].append(line.rstrip("\n"))
                if line.startswith("STAGE " + name):
                    break

    def snap(name):
        apps = smi_apps()
        rep["stages"][name] = {str(r): apps.get(p.pid, {}) for r, p in enumerate(procs)}

    def vmmctl(key, *args):
        t = time.time()
        cp = subprocess.run([a.vmmctl, "--json", "--timeout", "100", *map(str, args)],
                            capture_output=True, text=True, timeout=120,
                            env=dict(env, LD_PRELOAD=""))
        try:
            js = json.loads(cp.stdout)
        except ValueError:
            js = {"stdout": cp.stdout[-300:], "stderr": cp.stderr[-300:]}
        rep["ctl"][key] = {"rc": cp.returncode, "wall": time.time() - t, "json": js}
        return cp.returncode

    def go():
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()

    try:
        wait_stage("ctx")
        snap("after_context")
        go()
        wait_stage("nccl")
        snap("after_nccl")
        if shim and not a.no_sleep:
            pids = [p.pid for p in procs]
            vmmctl("group_sleep", "sleep", *pids)
            snap("asleep")
            for r, pid in enumerate(pids):
                vmmctl(f"status_asleep_{r}", "status", pid)
            vmmctl("group_wake", "wake", *pids)
            snap("awake_again")
            for r, pid in enumerate(pids):  # the same bytes, one process at a time
                vmmctl(f"single_sleep_{r}", "sleep", pid)
                vmmctl(f"single_wake_{r}", "wake", pid)
            # The group again: its first cycle above also touched and pinned every rank's host
            # backup (kept for later cycles), which the single sleeps after it did not pay.
            vmmctl("group_sleep_again", "sleep", *pids)
            vmmctl("group_wake_again", "wake", *pids)
        go()
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=120)
            rep.setdefault("results", {})[str(r)] = early[r] + [
                l for l in out.splitlines() if l.startswith("RESULT")]
            rep.setdefault("rc", {})[str(r)] = p.returncode
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        rep["error"] = str(e)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return rep


def harness(a):
    n = gpu_count()
    if n < a.world:
        print(f"NCCLGROUP_SKIP {n} GPU(s), the row needs {a.world}", flush=True)
        return
    os.makedirs(a.log, exist_ok=True)
    reps = [run_mode(a, False), run_mode(a, True)]
    name = "nccl_group_nosleep.json" if a.no_sleep else "nccl_group.json"
    with open(os.path.join(a.log, name), "w") as f:
        json.dump(reps, f, indent=1)
    print("NCCLGROUP " + json.dumps(reps), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--port", type=int)
    ap.add_argument("--shim")
    ap.add_argument("--vmmctl")
    ap.add_argument("--log", default="/tmp/nccl-group")
    ap.add_argument("--no-sleep", action="store_true",
                    help="all-reduce natively and under the shim, no vmmctl sleep/wake")
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a)
    else:
        harness(a)


if __name__ == "__main__":
    main()
