"""Probe: where the device memory of an NCCL job goes, natively and under the shim, and what a
sleep of every rank leaves behind. W ranks (one GPU each) run torch.distributed over NCCL; at each
stage the harness reads nvidia-smi's per-process list (pid, GPU, MiB) and, under the shim, each
rank's `vmmctl status --json`. Under the shim every rank is then slept and woken with vmmctl (one
after the other: the probe measures, it does not need a group sleep) and the ranks all-reduce
again and check their sums.

Usage (harness):  python3 probe_ranks.py --shim LIB --vmmctl BIN --log DIR [--world 2]
A rank (started by the harness): python3 probe_ranks.py --rank R --world W --port P
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
MIB = 1 << 20


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


def smi_apps():
    """{pid: {gpu_index: MiB}} from nvidia-smi's per-process list."""
    idx = {}
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    for line in out.splitlines():
        i, u = [s.strip() for s in line.split(",")]
        idx[u] = int(i)
    apps = {}
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


def gpu_used():
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used",
                          "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    return {int(l.split(",")[0]): int(l.split(",")[1]) for l in out.splitlines() if "," in l}


def run_mode(a, shim, log):
    env = dict(os.environ)
    tag = "shim" if shim else "native"
    rundir = os.path.join(log, f"run-{tag}")
    os.makedirs(rundir, exist_ok=True)
    os.chmod(rundir, 0o700)  # the shim refuses a run folder others can enter
    if shim:
        env.update(LD_PRELOAD=a.shim, VMMSHIM_LOG="info", VMMSHIM_RUN_DIR=rundir)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(a.world):
        err = open(os.path.join(log, f"{tag}-rank{r}.err"), "w")
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank", str(r), "--world", str(a.world),
             "--port", str(port)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=err, text=True, bufsize=1))
    report = {"mode": tag, "stages": {}}

    def wait_stage(name):
        for r, p in enumerate(procs):
            while True:
                line = p.stdout.readline()
                if not line:
                    raise RuntimeError(f"{tag} rank {r} ended before stage {name}")
                print(f"  [{tag} rank {r}] {line.rstrip()}", flush=True)
                if line.startswith("STAGE " + name):
                    break

    def snap(name):
        apps = smi_apps()
        report["stages"][name] = {
            "per_rank": {r: apps.get(p.pid, {}) for r, p in enumerate(procs)},
            "gpu_used_mib": gpu_used()}
        print(f"  {tag} {name}: {json.dumps(report['stages'][name])}", flush=True)

    def vmmctl(*args):
        t = time.time()
        cp = subprocess.run([a.vmmctl, "--json", *args], capture_output=True, text=True,
                            timeout=120, env=dict(env, LD_PRELOAD=""))
        print(f"  vmmctl {' '.join(args)} rc={cp.returncode} {time.time() - t:.2f}s", flush=True)
        try:
            return json.loads(cp.stdout)
        except ValueError:
            return {"rc": cp.returncode, "stdout": cp.stdout, "stderr": cp.stderr}

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
        if shim:
            report["status_awake"] = {r: vmmctl("status", str(p.pid)) for r, p in enumerate(procs)}
            report["sleep"] = {r: vmmctl("sleep", str(p.pid)) for r, p in enumerate(procs)}
            snap("all_asleep")
            report["status_asleep"] = {r: vmmctl("status", str(p.pid)) for r, p in enumerate(procs)}
            report["wake"] = {r: vmmctl("wake", str(p.pid)) for r, p in enumerate(procs)}
            snap("awake_again")
        go()
        for r, p in enumerate(procs):
            out, _ = p.communicate(timeout=120)
            for line in out.splitlines():
                print(f"  [{tag} rank {r}] {line}", flush=True)
            report.setdefault("results", {})[r] = [l for l in out.splitlines()
                                                   if l.startswith("RESULT")]
            report.setdefault("rc", {})[r] = p.returncode
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return report


def harness(a):
    os.makedirs(a.log, exist_ok=True)
    reports = [run_mode(a, False, a.log), run_mode(a, True, a.log)]
    with open(os.path.join(a.log, "probe_ranks.json"), "w") as f:
        json.dump(reports, f, indent=1)
    print("SUMMARY (MiB per rank and GPU, nvidia-smi per-process)")
    for rep in reports:
        for st, v in rep["stages"].items():
            print(f"  {rep['mode']:6} {st:14} {v['per_rank']}  gpu_used={v['gpu_used_mib']}")
        print(f"  {rep['mode']:6} results {rep.get('results')} rc {rep.get('rc')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--port", type=int)
    ap.add_argument("--shim")
    ap.add_argument("--vmmctl")
    ap.add_argument("--log", default="/tmp/probe-ranks")
    a = ap.parse_args()
    if a.rank is not None:
        rank_main(a)
    else:
        harness(a)


if __name__ == "__main__":
    main()
