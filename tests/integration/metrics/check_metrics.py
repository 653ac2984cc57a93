#!/usr/bin/env python3
"""vmmctl metrics, list --json, --watch and the sleep progress line against ctl_target running
under the shim on simdev: awake, mid-transfer (device-to-host copies slowed with SIMDEV_DELAY)
and asleep. Every metrics text is parsed with prometheus_client's parser (Debian's
python3-prometheus-client; scripts/setup.sh installs it for CI); without it this test is skipped
(exit 77) with a message saying so.

usage: check_metrics.py VMMCTL LIBVMMSHIM CTL_TARGET"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("python3-prometheus-client is not installed (apt-get install "
          "python3-prometheus-client, or scripts/setup.sh): skipped")
    sys.exit(77)

VMMCTL, SHIM, TARGET = sys.argv[1:4]
BUF = 8 << 20         # four 2 MiB handles on simdev: one copy call each
NBUF = 4              # 32 MiB under tag kv: 16 copy calls of 300 ms (a window that a
                      # vmmctl started on a loaded machine still sees)
run_dir = tempfile.mkdtemp(prefix="vmmshim-metrics-")
os.chmod(run_dir, 0o700)
env = dict(os.environ, VMMSHIM_RUN_DIR=run_dir)
# A sanitized build preloads a sanitized shim ahead of the program's own runtime.
env["ASAN_OPTIONS"] = "detect_leaks=0:halt_on_error=1:verify_asan_link_order=0"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def start_target(**more):
    tenv = dict(env, LD_PRELOAD=SHIM, SIMDEV_MEMORY="2G", VMMSHIM_LOG="warn",
                SIMDEV_DELAY="cuMemcpyDtoHAsync:300")
    tenv.update(more)
    p = subprocess.Popen([TARGET], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=tenv,
                         text=True, bufsize=1)
    return p


def reply(p, timeout=30, what="a command"):
    r, _, _ = select.select([p.stdout], [], [], timeout)
    if not r:
        fail("ctl_target did not answer %s within %d s" % (what, timeout))
    return p.stdout.readline().strip()


def cmd(p, line, want):
    p.stdin.write(line + "\n")
    p.stdin.flush()
    got = reply(p, what=repr(line))
    if not got.startswith(want):
        fail("ctl_target answered %r to %r, expected %r" % (got, line, want))
    return got


def vmmctl(*args, check=True, timeout=60):
    r = subprocess.run([VMMCTL, *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        fail("vmmctl %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
    return r


def parse(text):
    """The families by name, each sample as (labels, value); the format's rules we rely on
    checked on top of the parser's: one HELP and TYPE per family, families not split."""
    fams = {}
    for fam in text_string_to_metric_families(text):
        if fam.name in fams:
            fail("family %s split in two" % fam.name)
        fams[fam.name] = fam
    seen = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            if name in seen:
                fail("TYPE of %s given twice" % name)
            seen.append(name)
    if not text.endswith("\n"):
        fail("metrics text does not end with a newline")
    return fams


def samples(fams, family, pid, **labels):
    """Values of family's samples for pid (and labels)."""
    # prometheus_client strips _total from a counter family's name, not from its samples.
    fam = fams.get(family) or fams.get(family[:-6] if family.endswith("_total") else None)
    if not fam:
        return []
    out = []
    for s in fam.samples:
        if s.labels.get("pid") != str(pid):
            continue
        if all(s.labels.get(k) == v for k, v in labels.items()):
            out.append(s.value)
    return out


def one(fams, family, pid, **labels):
    v = samples(fams, family, pid, **labels)
    if len(v) != 1:
        fail("%d samples of %s for pid %d %s, expected one" % (len(v), family, pid, labels))
    return v[0]


def state(fams, pid):
    fam = fams.get("vmmshim_process_info")
    for s in fam.samples if fam else []:
        if s.labels.get("pid") == str(pid):
            return s.labels["state"]
    fail("no vmmshim_process_info for pid %d" % pid)


target = start_target()
try:
    line = reply(target)
    if not line.startswith("ready"):
        fail("ctl_target did not start under the shim: %r" % line)
    pid = target.pid
    cmd(target, "tag kv", "rc=0")
    cmd(target, "alloc %d %d" % (NBUF, BUF), "ok")

    # Awake.
    fams = parse(vmmctl("metrics").stdout)
    if state(fams, pid) != "awake":
        fail("awake process in state %s" % state(fams, pid))
    if one(fams, "vmmshim_tag_live_bytes", pid, tag="kv", device="0") != NBUF * BUF:
        fail("tag kv live bytes %s, expected %d" % (
            one(fams, "vmmshim_tag_live_bytes", pid, tag="kv"), NBUF * BUF))
    if one(fams, "vmmshim_sleeps_total", pid) != 0:
        fail("sleeps counted before any sleep")
    if one(fams, "vmmshim_device_asleep_bytes", pid, device="0") != 0:
        fail("asleep bytes while awake")

    # Mid-transfer: a slow sleep from vmmctl, with its progress lines (not a terminal).
    sleeper = subprocess.Popen([VMMCTL, "sleep", str(pid), "--tag", "kv", "--progress"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    mid = None
    deadline = time.time() + 30
    while time.time() < deadline and sleeper.poll() is None:
        fams = parse(vmmctl("metrics").stdout)
        done = samples(fams, "vmmshim_progress_bytes_done", pid)
        if done and done[0] > 0:
            mid = fams
            break
        time.sleep(0.05)
    if not mid:
        fail("never saw the sleep mid-transfer in the metrics")
    if state(mid, pid) != "changing":
        fail("mid-transfer state %s" % state(mid, pid))
    done = one(mid, "vmmshim_progress_bytes_done", pid, operation="sleep", phase="copying")
    total = one(mid, "vmmshim_progress_bytes_total", pid, operation="sleep")
    if not 0 < done <= total or total < NBUF * BUF:
        fail("mid-transfer: %d done of %d, expected some of at least %d" % (done, total,
                                                                         NBUF * BUF))
    if samples(mid, "vmmshim_tag_live_bytes", pid):
        fail("memory figures shown while they change")
    st = json.loads(vmmctl("--json", "status", str(pid)).stdout)
    if st.get("progress", {}).get("operation") != "sleep":
        fail("status --json during the sleep has no progress: %s" % st)
    out, err = sleeper.communicate(timeout=60)
    if sleeper.returncode != 0:
        fail("vmmctl sleep: exit %d: %s" % (sleeper.returncode, err))
    if "sleep: copying" not in err or "GB/s" not in err:
        fail("no progress line on stderr with --progress: %r" % err)

    # Asleep.
    fams = parse(vmmctl("metrics").stdout)
    if state(fams, pid) != "asleep":
        fail("asleep process in state %s" % state(fams, pid))
    if one(fams, "vmmshim_sleeps_total", pid) != 1:
        fail("sleeps_total %s after one sleep" % one(fams, "vmmshim_sleeps_total", pid))
    if one(fams, "vmmshim_copied_bytes_total", pid, direction="out") < NBUF * BUF:
        fail("copied out %s, expected at least %d" % (
            one(fams, "vmmshim_copied_bytes_total", pid, direction="out"), NBUF * BUF))
    if one(fams, "vmmshim_tag_asleep_bytes", pid, tag="kv") < NBUF * BUF:
        fail("tag kv asleep bytes too small")
    if one(fams, "vmmshim_transition_seconds_total", pid, operation="sleep") <= 0:
        fail("no seconds counted for the sleep")
    if samples(fams, "vmmshim_progress_bytes_done", pid):
        fail("progress shown with no sleep running")

    # A held device call is counted.
    target.stdin.write("touch\n")  # answered after the wake, below
    target.stdin.flush()
    # Until the program has reached its call (late on a loaded machine), 10 s at most.
    deadline = time.time() + 10
    while True:
        fams = parse(vmmctl("metrics").stdout)
        if one(fams, "vmmshim_held_calls_total", pid) >= 1 or time.time() > deadline:
            break
        time.sleep(0.05)
    if one(fams, "vmmshim_held_calls_total", pid) < 1:
        fail("a device call held by the sleep was not counted")

    # --output: written whole, readable, nothing left beside it; a bad folder changes nothing.
    prom = os.path.join(run_dir, "vmmshim.prom")
    vmmctl("metrics", "--output", prom)
    with open(prom) as f:
        if state(parse(f.read()), pid) != "asleep":
            fail("--output file disagrees")
    if oct(os.stat(prom).st_mode & 0o777) != "0o644":
        fail("--output file mode %o" % (os.stat(prom).st_mode & 0o777))
    if [n for n in os.listdir(run_dir) if ".tmp." in n]:
        fail("temporary file left: %s" % os.listdir(run_dir))
    r = vmmctl("metrics", "--output", os.path.join(run_dir, "nope", "x.prom"), check=False)
    if r.returncode != 1 or "cannot" not in r.stderr:
        fail("--output into a missing folder: exit %d %r" % (r.returncode, r.stderr))

    # --label: on every sample (pids repeat across containers); a label of ours is refused.
    fams = parse(vmmctl("metrics", "--label", "pod=trainer-0", "--label", 'note=a"b').stdout)
    for fam in fams.values():
        for smp in fam.samples:
            if smp.labels.get("pod") != "trainer-0" or smp.labels.get("note") != 'a"b':
                fail("sample without the --label labels: %s" % (smp,))
    r = vmmctl("metrics", "--label", "pid=1", check=False)
    if r.returncode != 2 or "--label" not in r.stderr:
        fail("--label pid=1 accepted: exit %d" % r.returncode)

    # list --json --watch: one document per refresh, then exit 0.
    r = vmmctl("list", "--json", "--watch", "--interval", "0.2", "--count", "2")
    docs = [json.loads(l) for l in r.stdout.splitlines()]
    if len(docs) != 2 or not any(p["pid"] == pid for p in docs[1]["processes"]):
        fail("list --json --watch --count 2 gave %r" % r.stdout)
    # SIGINT ends a watch cleanly.
    w = subprocess.Popen([VMMCTL, "metrics", "--watch", "--interval", "0.2"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # Its first output says it is watching (its handler is set before): a fixed pause could
    # end before a loaded machine has even started it, and SIGINT would then kill it.
    w.stdout.readline()
    time.sleep(0.3)
    w.send_signal(signal.SIGINT)
    try:
        w.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        w.kill()
        fail("metrics --watch did not end on SIGINT")
    if w.returncode != 0:
        fail("metrics --watch ended with %d on SIGINT" % w.returncode)
    # A reader that goes away ends it too (SIGPIPE ignored, write fails, exit 0).
    w = subprocess.Popen([VMMCTL, "list", "--watch", "--interval", "0.2"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w.stdout.readline()
    w.stdout.close()
    try:
        w.wait(timeout=10)
    except subprocess.TimeoutExpired:
        w.kill()
        fail("list --watch did not end when its reader went away")
    if w.returncode != 0:
        fail("list --watch ended with %d when its reader went away" % w.returncode)

    # Wake: the held call goes through, the data is intact, the wake is counted.
    vmmctl("wake", str(pid), "--tag", "kv")
    if reply(target) != "touched ok":
        fail("the held call did not complete after wake")
    cmd(target, "check", "ok")
    fams = parse(vmmctl("metrics").stdout)
    if state(fams, pid) != "awake" or one(fams, "vmmshim_wakes_total", pid) != 1:
        fail("after wake: state %s, wakes %s" % (state(fams, pid),
                                                 one(fams, "vmmshim_wakes_total", pid)))
    if one(fams, "vmmshim_copied_bytes_total", pid, direction="in") < NBUF * BUF:
        fail("copied in too small after wake")
    # GPU sharing: a higher priority's allocation sleeps a lower one on a GPU too small for
    # both; the sharing families show it, and a process without sharing has none of them.
    if samples(fams, "vmmshim_share_priority", pid):
        fail("sharing figures for a process without VMMSHIM_SHARE")
    cmd(target, "quit", "")
    target.wait(timeout=20)
    group = "metrics%d" % os.getpid()
    sharers = []
    try:
        for prio in (0, 1):
            sharers.append(start_target(SIMDEV_SHARED=group, SIMDEV_MEMORY="256M",
                                        VMMSHIM_SHARE="1", VMMSHIM_PRIORITY=str(prio),
                                        VMMSHIM_SHARE_IDLE="200ms"))
            if not reply(sharers[-1]).startswith("ready"):
                fail("a sharing ctl_target did not start")
        low, high = sharers
        cmd(low, "alloc 1 150000000", "ok")
        cmd(high, "alloc 1 150000000", "ok")
        fams = parse(vmmctl("metrics").stdout)
        if one(fams, "vmmshim_share_slept_by_peers_total", low.pid) != 1:
            fail("the slept process's slept_by_peers_total is %s" %
                 one(fams, "vmmshim_share_slept_by_peers_total", low.pid))
        if one(fams, "vmmshim_share_looks_total", high.pid) < 1:
            fail("no round counted for the process that made room")
        # Each round asked the GPU's one other member (the low priority), nobody else.
        if one(fams, "vmmshim_share_looked_at_total", high.pid) != \
                one(fams, "vmmshim_share_looks_total", high.pid):
            fail("rounds %s asked %s processes" %
                 (one(fams, "vmmshim_share_looks_total", high.pid),
                  one(fams, "vmmshim_share_looked_at_total", high.pid)))
        text = vmmctl("status", str(low.pid)).stdout
        if "sleeps by peers 1" not in text:
            fail("status of the slept process does not count the sleep: %r" % text)
        if one(fams, "vmmshim_share_priority", high.pid) != 1:
            fail("priority %s" % one(fams, "vmmshim_share_priority", high.pid))
        if one(fams, "vmmshim_share_waiting", high.pid) != 0:
            fail("a process that got its memory still shown waiting")
        if one(fams, "vmmshim_share_wait_seconds_total", high.pid) < 0:
            fail("negative wait seconds")
        cmd(high, "check", "ok")
        cmd(high, "quit", "")
        cmd(low, "check", "ok")  # woken by its own work, the memory back
        cmd(low, "quit", "")
    finally:
        for p in sharers:
            if p.poll() is None:
                p.kill()
            p.wait()
        for n in os.listdir("/dev/shm"):
            if n.startswith("simdev-cuda-%d-%s" % (os.getuid(), group)):
                os.unlink(os.path.join("/dev/shm", n))
    print("metrics ok")
finally:
    if target.poll() is None:
        target.kill()
        target.wait()
    for n in os.listdir(run_dir):
        os.unlink(os.path.join(run_dir, n))
    os.rmdir(run_dir)
