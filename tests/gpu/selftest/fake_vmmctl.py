#!/usr/bin/env python3
"""Stands in for vmmctl: status answers in vmmctl's JSON layout; sleep stops the process
(SIGSTOP) and drops the stand-in device memory to the unmanaged 500 MiB; wake undoes both;
sleep/wake --device D also drops/restores GPU D's entry of the per-process list ($FAKE_STATE.apps);
run starts the program "preloaded" (LD_PRELOAD set), writes --report with 3 cycles and exits
with the program's status; sleep --progress prints progress lines for a second while metrics
shows the transfer. A flag_wait process cannot drain: its sleep gives up after 1 s, as the
shim's would."""
import json
import os
import signal
import subprocess
import sys
import time

state = os.environ["FAKE_STATE"]
cmd = sys.argv[1]
if cmd == "run":
    args = sys.argv[2:]
    prog = args[args.index("--") + 1:]
    report = args[args.index("--report") + 1] if "--report" in args else None
    rc = subprocess.call(prog, env=dict(os.environ, LD_PRELOAD="fake-libvmmshim.so"))
    if report:
        with open(report, "w") as f:
            json.dump({"exit_status": rc, "cycles": 3,
                       "sleep": {"count": 3, "copied": 3 << 30, "seconds_median": 0.1},
                       "wake": {"count": 3, "copied": 3 << 30, "seconds_median": 0.08}}, f)
    sys.exit(rc)
if cmd == "metrics":
    # Only what the progress row reads: the transfer in progress, if one runs.
    if os.path.exists(state + ".sleeping"):
        spid = open(state + ".sleeping").read()
        print(f'vmmshim_progress_bytes_done{{pid="{spid}",operation="sleep",phase="copying"}} '
              f'{1 << 29}\nvmmshim_progress_bytes_total{{pid="{spid}",operation="sleep"}} '
              f'{1 << 30}')
    sys.exit(0)
pid = int(sys.argv[2])
if cmd == "status":
    print(json.dumps({"status": "ok", "info": {"pid": pid, "managed": 4 << 30, "resident": 4 << 30},
                      "devices": [{"dev": 0, "mapped": 4 << 30, "unmanaged": 500 << 20}],
                      "tags": []}))
elif cmd == "sleep" and "flag_wait" in open(f"/proc/{pid}/cmdline").read():
    time.sleep(1.0)
    print(json.dumps({"status": "error", "error": {
        "status": "busy", "message": "device 0 did not drain within 1.0 s: work that waits "
        "for a held submission?"}}))
    sys.exit(1)
elif cmd in ("sleep", "wake"):
    if "--device" in sys.argv:  # that GPU's part of the per-process list drops to the context
        d = sys.argv[sys.argv.index("--device") + 1]
        try:
            apps = json.load(open(state + ".apps"))
        except (OSError, ValueError):
            apps = {}
        saved = f"{state}.saved.{pid}.{d}"
        if str(pid) in apps and cmd == "sleep":
            with open(saved, "w") as f:
                f.write(str(apps[str(pid)].get(d, 0)))
            apps[str(pid)][d] = 500
        elif str(pid) in apps and os.path.exists(saved):
            apps[str(pid)][d] = int(open(saved).read())
            os.unlink(saved)
        with open(state + ".apps.tmp", "w") as f:
            json.dump(apps, f)
        os.replace(state + ".apps.tmp", state + ".apps")
    if "--progress" in sys.argv:
        # As vmmctl shows a copy in progress, for a second, then the sleep itself.
        with open(state + ".sleeping", "w") as f:
            f.write(str(pid))
        for done in (256, 512, 768):
            print(f"{cmd}: copying {done}.00 MiB of 1.00 GiB ({done * 100 // 1024}%), "
                  f"10.00 GB/s, 0.1 s left, 1.0 s", file=sys.stderr, flush=True)
            time.sleep(0.4)
        os.unlink(state + ".sleeping")
    os.kill(pid, signal.SIGSTOP if cmd == "sleep" else signal.SIGCONT)
    with open(state, "w") as f:
        f.write("500" if cmd == "sleep" else str(4096 + 500))
    print(json.dumps({"status": "ok", "result": {
        "released": 4 << 30, "seconds": 0.05, "gate_seconds": 0.001 if cmd == "sleep" else 0,
        "drain_seconds": 0.002 if cmd == "sleep" else 0, "copy_seconds": 0.045}}))
