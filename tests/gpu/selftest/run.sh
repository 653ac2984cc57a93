#!/bin/bash
# Checks tests/gpu/gpucheck.py itself, on a machine without a GPU: every GPU program, vmmctl and
# nvidia-smi are replaced by stand-ins (fake_*.py) that speak the same protocols, with one row
# made to hang and one made to differ under the "shim". The stand-in shim is an empty library.
# Beside it, the x2 rows alone with a stand-in nvidia-smi that lists two GPUs (they skip
# themselves with one), and two runs of the train benchmark alone. Passes when every row and
# benchmark comes out as planned. Takes about a minute (two before the runs went side by side).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/bin" "$t/root/tests/gpu" "$t/path" "$t/log"
for n in alloc_static alloc_shared alloc_ptds driver_api cublas_gemm graph sleep_kernels hold \
	bench_alloc bench_bw probe_overlap ckpt app_vmm_sleep ctx_sleep share_facts flag_wait nccl_register share_kill peer \
	trace_replay device_reset primary_release prog_ipc; do
	ln -s "$here/fake_prog.py" "$t/bin/$n"
done
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/train.py"
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/nccl_allreduce.py"
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/tms_example.py"
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/ipc_torch.py"
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/share_phases.py"
ln -s "$here/fake_prog.py" "$t/root/tests/gpu/nccl_group.py"
ln -s "$here/fake_nvidia_smi.py" "$t/path/nvidia-smi"
mkdir -p "$t/root/tests/bench/traces"
printf 'a 4096 0x10\nf 0x10\n' | gzip >"$t/root/tests/bench/traces/h200-varlen-nocaching.trace.gz"
echo 'int vmmshim_selftest_stand_in;' >"$t/s.c"
cc -shared -fPIC "$t/s.c" -o "$t/libvmmshim.so"
export GPUCHECK_NO_NVML=1 PATH=$t/path:$PATH FAKE_HANG=alloc_ptds FAKE_DIFFER=graph
# The runs below wait more than they compute (stand-ins that sleep, a row made to hang): they
# run side by side, each with a stand-in device of its own. run_gpucheck NAME SECONDS ARGS...
# writes $t/logNAME/, $t/outNAME.txt and its exit status in $t/rcNAME.
run_gpucheck() {
	local name=$1 seconds=$2
	shift 2
	mkdir -p "$t/log$name"
	FAKE_STATE=$t/state$name python3 "$here/../gpucheck.py" --root "$t/root" --bin "$t/bin" \
		--shim "$t/libvmmshim.so" --vmmctl "$here/fake_vmmctl.py" --log "$t/log$name" \
		--deadline $(( $(date +%s) + seconds )) --timeout-scale 0.1 "$@" \
		>"$t/out$name.txt" 2>&1 && echo 0 >"$t/rc$name" || echo $? >"$t/rc$name"
}
# The whole matrix as gpu-check runs it, in two halves: the rows (log/), the benchmarks (logb/,
# their results read as the same run's).
matrix=(--train-rounds 2 --sleep-sizes 1,2 --small-gib 1 --ckpt-gib 1 --progress-gib 1)
run_gpucheck "" 300 --skip-bench "${matrix[@]}" &
run_gpucheck b 300 --only "bench " "${matrix[@]}" &
# The x2 rows alone, with two stand-in GPUs (log2/).
FAKE_GPUS=2 run_gpucheck 2 240 --only "(x2)" --skip-bench --x2-hold-gib 1 &
# The train benchmark alone (log3/, log4/): a shim-only variant and a name that is no
# configuration; then one side only (@native, @shim) and the first round only (@once), as an A/B
# of five pairs runs.
run_gpucheck 3 240 --only "bench train" --train-rounds 1 \
	--train-allocs "NO_CACHING,expandable,NO_CACHING+VMMSHIM_SYNC_AHEAD=0,bogus" &
run_gpucheck 4 240 --only "bench train" --train-rounds 2 \
	--train-allocs "expandable@native,NO_CACHING@native@once,NO_CACHING@shim,NO_CACHING+VMMSHIM_SYNC_AHEAD=0,default@later" &
# A budget that is spent before the rows begin (log5/): they say so rather than start under a
# 5 s timeout and fail.
run_gpucheck 5 20 --only "sleep/wake PyTorch train,kernels launched while asleep" --skip-bench &
wait
rc=$(cat "$t/rc") rc2=$(cat "$t/rc2")
tail -40 "$t/out.txt"
grep -E '^gpucheck: (PASS|FAIL|SKIP)' "$t/out2.txt"
GPU_DIR="$here/.." python3 - "$t/log/results.json" "$rc" "$t/log2/results.json" "$rc2" "$t/out.txt" \
	"$t/log3/results.json" "$t/out3.txt" "$t/log4/results.json" "$t/out4.txt" \
	"$t/logb/results.json" "$(cat "$t/rcb")" "$t/log5/results.json" <<'PY'
import json, os, subprocess, sys
r = json.load(open(sys.argv[1]))
r["bench"] = json.load(open(sys.argv[10]))["bench"]  # the benchmarks' half of the run
rows = {x["row"]: x["ok"] for x in r["rows"]}
bench = {b["metric"]: b for b in r["bench"]}
fail_expected = {"--default-stream per-thread", "CUDA graph capture+replay"}
bad = [f"{k}: {'PASS' if v else 'FAIL'}" for k, v in rows.items() if v == (k in fail_expected)]
if len(rows) != 36:
    bad.append(f"{len(rows)} rows, expected 36")
kill_row = next((x["reason"] for x in r["rows"]
                 if x["row"] == "exporter killed while its group sleeps (vmm, 1 GiB)"), "")
if "the importer let go 1024 MiB in 0.050 s (21.5 GB/s" not in kill_row or \
        "group sleep 0.250 s" not in kill_row:
    bad.append(f"the exporter-killed row's note: {kill_row!r}")
reset_wakes = next((x["reason"] for x in r["rows"]
                    if x["row"] == "cudaDeviceReset: wakes after a reset as fast as before"), "")
if not reset_wakes.startswith("wakes 55.0 / 55.0 / 55.0 / 55.0 GB/s"):
    bad.append(f"the reset row's wakes: {reset_wakes!r}")
if any("(x2)" in k for k in rows) or "SKIP the x2 rows" not in open(sys.argv[5]).read():
    bad.append("with one GPU the x2 rows did not skip themselves")
x2 = {x["row"]: x for x in json.load(open(sys.argv[3]))["rows"]}
want_x2 = {"peer access from kernels (x2)", "per-device sleep/wake --device (x2)",
           "IPC across GPUs (x2)", "two-rank NCCL without group sleep (x2)",
           "two-rank NCCL group sleep/wake (x2)", "two-rank NCCL asleep <= ctx+64MiB (x2)"}
if set(x2) != want_x2:
    bad.append(f"x2 rows {sorted(x2)}, expected {sorted(want_x2)}")
bad += [f"{k}: FAIL {v['reason'][:200]}" for k, v in x2.items() if not v["ok"]]
dev = x2.get("per-device sleep/wake --device (x2)", {}).get("reason", "")
for part in ("--device 0: GPU0 1524 -> 500 -> 1524 MiB (context 500), GPU1 1524 -> 1524",
             "GPU1's kernel was held until the wake", "--device 1: GPU1 1524 -> 500"):
    if part not in dev:
        bad.append(f"per-device row does not say {part!r}: {dev[:300]}")
x2_bench = {b["metric"]: b for b in json.load(open(sys.argv[3]))["bench"]}
grp = x2_bench.get("group sleep+wake of 2 NCCL ranks vs one rank at a time (s)", {})
if grp.get("ratio") != "1.00x" or "first group cycle 0.9 s" not in grp.get("note", "") or \
        "group_sleep_again: wall 250 ms, slowest member 190 ms, find 1 plan 2" not in \
        grp.get("note", ""):
    bad.append(f"group benchmark: not the second group cycle against the singles, or no "
               f"steps: {grp}")
if sys.argv[4] != "0":
    bad.append(f"x2 exit status {sys.argv[4]}, expected 0")
if sys.argv[2] != "1":
    bad.append(f"exit status {sys.argv[2]}, expected 1 (a row failed)")
if sys.argv[11] != "0":
    bad.append(f"the benchmarks' exit status {sys.argv[11]}, expected 0 (they never fail)")
if r["rows"] and any(b for b in r["bench"] if b["metric"] in {x["row"] for x in r["rows"]}):
    bad.append("a row ran in the benchmarks' half")
for metric, note in (("malloc+free pair 256B (us)", "met"),
                     ("grow 64 GiB in 1 GiB calls (ms)", "met"),
                     ("IPC open of a 1 GiB tensor (ms)", "met"),
                     ("bandwidth d2d 512MiB (GB/s)", "met (3/3 runs)"),
                     ("bandwidth read 2048MiB (GB/s)", "not met (3/3 runs)"),
                     ("train NO_CACHING shim vs expandable native: ms/step",
                      "not met; median of 2 interleaved pair(s), fewer than 5"),
                     ("trace replay peak (MiB)", "met; runs MiB: shim 4586, 4586, native 4596"),
                     ("discard wake 2 GiB, 2 s after its sleep (ms)", "memory usable after"),
                     ("heap calls on a second thread (after the train rows): time the program "
                      "lost (ms)", "program alone"),
                     ("train NO_CACHING shim vs expandable native: per shape",
                      "medians over 2/2 runs; over 1.10x: 16x1872 150/75 ms (backward queued at 120/20); "
                      "the median shape"),
                     ("train default shim vs native: peak GiB",
                      "met; median of 2 interleaved pair(s), fewer than 5"),
                     ("train default shim vs native: mean ms/step",
                      "met; median of 2 interleaved pair(s), fewer than 5"),
                     ("train NO_CACHING shim vs expandable native: mean ms/step",
                      "met; median of 2 interleaved pair(s), fewer than 5")):
    if not bench.get(metric, {}).get("note", "").startswith(note):
        bad.append(f"benchmark {metric!r}: {bench.get(metric)}")
if "shim phases (ms): total=1.900 request=0.800" not in \
        bench.get("IPC open of a 1 GiB tensor (ms)", {}).get("note", ""):
    bad.append("the IPC open row does not carry the shim's phases")
if "unpickling alone (ms): shim 1.9, native 1.4" not in \
        bench.get("IPC open of a 1 GiB tensor (ms)", {}).get("note", ""):
    bad.append("the IPC open row does not carry the unpickling times")
if "get (ms): shim 0.05, native 0.04" not in \
        bench.get("IPC open of a 1 GiB tensor (ms)", {}).get("note", ""):
    bad.append("the IPC open row does not carry the get times")
if "plain VMM: one handle 1.00x, 64 MiB handles 0.97x, 2 MiB pieces 0.90x" not in \
        bench.get("bandwidth d2d 512MiB (GB/s)", {}).get("note", ""):
    bad.append("bandwidth rows do not carry the plain VMM anchors")
if any(m.startswith("train ") and "+" in m for m in bench):
    bad.append("a shim-only A/B variant ran without GPUCHECK_TRAIN_ALLOCS naming it")
variant = {b["metric"]: b for b in json.load(open(sys.argv[6]))["bench"]}
v = "train NO_CACHING+VMMSHIM_SYNC_AHEAD=0"
for metric in (f"{v} shim: ms/step, peak GiB", f"{v} shim vs NO_CACHING shim: ms/step",
               f"{v} shim vs expandable native: ms/step",
               f"{v} shim vs NO_CACHING shim: mean ms/step",
               f"{v} shim vs expandable native: mean ms/step",
               f"{v} shim vs NO_CACHING native: peak GiB"):
    if metric not in variant:
        bad.append(f"no variant row {metric!r}")
if "the median shape 1.00x" not in variant.get(f"{v} shim vs NO_CACHING shim: per shape",
                                               {}).get("note", ""):
    bad.append("the variant has no per-shape row against its base under the shim")
if f"{v} native: ms/step, peak GiB" in variant:
    bad.append("the shim-only variant ran natively too")
if variant.get(f"{v} shim vs NO_CACHING shim: ms/step", {}).get("ratio") != "1.000x":
    bad.append("the variant is not paired with its base under the shim")
if "'bogus' is not BASE" not in open(sys.argv[7]).read():
    bad.append("a train configuration that is none was not reported")
sides = {b["metric"]: b for b in json.load(open(sys.argv[8]))["bench"]}
if "train expandable shim: ms/step, peak GiB" in sides or \
        "train expandable native: ms/step, peak GiB" not in sides:
    bad.append("expandable@native did not run natively only")
if "medians of 1 run(s)" not in sides.get("train NO_CACHING native: ms/step, peak GiB",
                                           {}).get("note", ""):
    bad.append("NO_CACHING@native@once did not run once")
if "medians of 2 run(s)" not in sides.get("train NO_CACHING shim: ms/step, peak GiB",
                                          {}).get("note", ""):
    bad.append("NO_CACHING@shim did not run in every round")
if "median of 2 interleaved" not in sides.get(
        "train NO_CACHING+VMMSHIM_SYNC_AHEAD=0 shim vs expandable native: ms/step",
        {}).get("note", ""):
    bad.append("the variant is not paired with expandable natively in both rounds")
if "'default@later' is not BASE" not in open(sys.argv[9]).read():
    bad.append("an unknown flag was not reported")
if bench.get("train NO_CACHING shim vs expandable native: ms/step", {}).get("ratio") != "1.100x":
    bad.append("the pairs' ratio of ms/step is not 110/100")
for prefix in ("sleep 1 GiB", "wake 2 GiB", "discard sleep / wake 2 GiB",
               "sleep / wake 1 GiB first cycle, backup provisioned", "driver checkpoint 1 GiB",
               "sleep 1 GiB small handles", "wake 1 GiB small handles",
               "discard sleep / wake 1 GiB small handles"):
    if not any(m.startswith(prefix) for m in bench):
        bad.append(f"no benchmark row {prefix!r}")
if "adds 0.200 us a launch" not in \
        bench.get("empty kernel launch, host time (us)", {}).get("note", ""):
    bad.append("no launch row saying what the shim adds a launch")
ov = bench.get("heap calls on a second thread: time the program lost (ms)", {})
if (ov.get("shim"), ov.get("anchor"), ov.get("ratio")) != ("50", "heap calls 200", "0.25x") or \
        "heap calls beside it 260 ms; slowest launch beside them 900 us; this machine's driver " \
        "alone: 40 us to give a piece back, 60 us to make one" not in ov.get("note", ""):
    bad.append(f"the overlap row does not give the program's loss against the heap's calls: {ov!r}")
sleep_note = next((b["note"] for m, b in bench.items() if m.startswith("sleep 1 GiB GB/s")), "")
if "steady ms: all 50.00 = copy 45.00 + gate 1.00 + drain 2.00 + rest 2.00" not in sleep_note:
    bad.append(f"the sleep row does not split its steady time: {sleep_note!r}")
peak = bench.get("train default native: ms/step, peak GiB", {}).get("shim", "")
if not peak.startswith("100, 4.4"):
    bad.append(f"train default native ms/step and peak: {peak!r}, expected '100, 4.49'")
# The slow-log summary sorts the heap's debug lines by what each request did.
log = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"slow_log_selftest.{os.getpid()}")
with open(log, "w") as f:
    for line in ("vmmshim[1] debug: device 0: a block of 3240960000 bytes took 74.12 ms: 0 syncs, "
                 "1 handles created, 0 released, 1383 moved, 0 given back for new memory, "
                 "0 pieces given back for a large request, 0 shattered",
                 "vmmshim[1] debug: device 0: a block of 414842880 bytes took 21.67 ms: 0 syncs, "
                 "514 handles created, 2 released, 0 moved, 0 given back for new memory, "
                 "2 shattered",
                 "vmmshim[1] debug: device 0: a block of 103710720 bytes took 9.25 ms: 1 syncs, "
                 "0 handles created, 0 released, 0 moved, 0 given back for new memory, "
                 "0 pieces given back for a large request, 0 shattered",
                 "vmmshim[1] debug: device 0: a block of 3833856000 bytes took 40.10 ms: 1 syncs, "
                 "1 handles created, 1700 released, 3 moved, 0 given back for new memory, "
                 "1700 pieces given back for a large request (1600 before its sync), 0 shattered; "
                 "12.50 ms in syncs, 3.20 ms after the last",
                 "vmmshim[1] info: not a slow line"):
        f.write(line + "\n")
summ = subprocess.run([sys.executable, os.path.join(os.environ["GPU_DIR"], "slow_log_summary.py"),
                       "--top", "1", log], capture_output=True, text=True).stdout
os.unlink(log)
for part in ("4 slow requests", "all:         shattered 22 ms in 1; given back 40 ms in 1; "
             "moved 74 ms in 1; sync only 9 ms in 1; (waiting for syncs 12 ms, after them 3 ms)",
             "3090.8 MiB   74.12 ms  moved: 0 syncs, 1383 moved"):
    if part not in summ:
        bad.append(f"slow_log_summary.py does not say {part!r}: {summ!r}")
# --costs recovers the per-call costs the lines were made with, leaving out a request that synced.
with open(log, "w") as f:
    for c, r, m in ((32, 1, 0), (1, 900, 2), (0, 0, 300), (64, 2, 5), (1, 1700, 3), (3, 3, 3)):
        f.write(f"vmmshim[1] debug: device 0: a block of 67108864 bytes took "
                f"{0.05 + 0.06 * c + 0.04 * r + 0.05 * m:.4f} ms: 0 syncs, {c} handles created, "
                f"{r} released, {m} moved, 0 given back for new memory, 0 shattered\n")
    f.write("vmmshim[1] debug: device 0: a block of 67108864 bytes took 500.00 ms: 1 syncs, "
            "1 handles created, 0 released, 0 moved, 0 given back for new memory, 0 shattered\n")
costs = subprocess.run([sys.executable, os.path.join(os.environ["GPU_DIR"], "slow_log_summary.py"),
                        "--costs", log], capture_output=True, text=True).stdout
os.unlink(log)
want = ("call costs:  0.050 ms + 60 us a handle created + 40 us a handle released + 50 us a "
        "handle moved (6 requests without a sync)")
if want not in costs:
    bad.append(f"slow_log_summary.py --costs does not say {want!r}: {costs!r}")
# The step timeline places a step's slow requests between its start and end.
out, err = log + ".out", log + ".err"
with open(out, "w") as f:
    f.write("STEPAT 0 4x128 start 100.0000 queued: forward 100.0100 loss 100.0110 backward "
            "100.0200 optimizer 100.0210; end 100.0500\n"
            "STEPAT 1 16x1872 start 200.0000 queued: forward 200.0600 loss 200.0830 backward "
            "200.2560 optimizer 200.2600; end 200.3620\n")
with open(err, "w") as f:
    f.write("vmmshim[1] debug: device 0: a block of 3833856000 bytes took 91.94 ms: 0 syncs, "
            "1 handles created, 1732 released, 5 moved, 0 given back for new memory, 1732 pieces "
            "given back for a large request (0 before its sync), 0 shattered; 0.00 ms in syncs, "
            "0.00 ms after the last; ended at 200.1783\n")
tl = subprocess.run([sys.executable, os.path.join(os.environ["GPU_DIR"], "step_timeline.py"),
                     out, err], capture_output=True, text=True).stdout
os.unlink(out)
os.unlink(err)
for part in ("step  1 16x1872   362.0 ms; host queued: forward   60.0, loss   83.0, backward  256.0",
             "1 slow requests, 91.9 ms", "ended   178.3 ms   3656.2 MiB  91.94 ms", "1732 pieces "
             "given back (0 before the sync)"):
    if part not in tl:
        bad.append(f"step_timeline.py does not say {part!r}: {tl!r}")
# Rows sized for an H200 take the same share of a smaller GPU (an H100's 81559 MiB).
sys.path.insert(0, os.environ["GPU_DIR"])
import gpucheck  # noqa: E402 - the stand-in nvidia-smi answers (GPUCHECK_NO_NVML)
for total, want in (("143771", (40, 70, 96)), ("81559", (23, 40, 54))):
    os.environ["FAKE_TOTAL_MIB"] = total
    got = tuple(gpucheck.h200_share(g) for g in (40, 70, 96))
    if got != want:
        bad.append(f"{total} MiB: 40, 70, 96 GiB of an H200 became {got}, expected {want}")
starved = {x["row"]: x["reason"] for x in json.load(open(sys.argv[12]))["rows"]}
for row in ("sleep/wake PyTorch train (default)", "sleep/wake PyTorch train (expandable)",
            "kernels launched while asleep"):
    if starved.get(row) != "not run: out of time":
        bad.append(f"with the budget spent, {row!r}: {starved.get(row)!r}")
print("selftest:", "ok" if not bad else "FAILED: " + "; ".join(bad))
sys.exit(1 if bad else 0)
PY
