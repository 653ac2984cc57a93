#!/usr/bin/env python3
"""Stands in for vmmctl: status answers in vmmctl's JSON layout; sleep stops the process
(SIGSTOP) and drops the stand-in device memory to the unmanaged 500 MiB; wake undoes both."""
import json
import os
import signal
import sys

state = os.environ["FAKE_STATE"]
cmd, pid = sys.argv[1], int(sys.argv[2])
if cmd == "status":
    print(json.dumps({"status": "ok", "info": {"pid": pid, "managed": 4 << 30, "resident": 4 << 30},
                      "devices": [{"dev": 0, "mapped": 4 << 30, "unmanaged": 500 << 20}],
                      "tags": []}))
elif cmd in ("sleep", "wake"):
    os.kill(pid, signal.SIGSTOP if cmd == "sleep" else signal.SIGCONT)
    with open(state, "w") as f:
        f.write("500" if cmd == "sleep" else str(4096 + 500))
    print(json.dumps({"status": "ok", "result": {"released": 4 << 30, "seconds": 0.05}}))
