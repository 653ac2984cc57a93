"""The vmmshim package on simdev, as a user would check it: tags, sleep/wake with the data
checked, statistics, errors carrying the shim's message, and the error outside the shim."""
import dataclasses
import inspect
import os
import re
import subprocess
import sys
import threading

import pytest

import simcuda
import vmmshim

MIB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_version_is_the_projects():
    with open(os.path.join(ROOT, "meson.build")) as f:
        want = re.search(r"version\s*:\s*'([^']+)'", f.read()).group(1)
    assert vmmshim.__version__ == want


def test_the_stats_fields_are_the_headers():
    """Python lists vmmshim_stats_t's fields again (_native.py, the Stats class): they must match
    shim/vmmshim.h name for name, in order."""
    with open(os.path.join(ROOT, "shim", "vmmshim.h")) as f:
        body = re.search(r"typedef struct vmmshim_stats_t \{(.*?)\} vmmshim_stats_t;", f.read(),
                         re.S).group(1)
    want = tuple(re.findall(r"uint64_t\s+(\w+);", body))
    assert len(want) == 10
    assert vmmshim._native.STATS_FIELDS == want
    assert tuple(f.name for f in dataclasses.fields(vmmshim.Stats)) == want


def test_allocations_inside_tag_belong_to_it(dev):
    before = vmmshim.stats("kv").live_bytes
    with vmmshim.tag("kv") as name:
        assert name == "kv" and vmmshim.get_tag() == "kv"
        p = dev.alloc(3 * MIB)
    assert vmmshim.get_tag() == "default"
    assert vmmshim.stats("kv").live_bytes == before + 3 * MIB
    q = dev.alloc(1 * MIB)  # outside: default
    assert vmmshim.stats("kv").live_bytes == before + 3 * MIB
    dev.free(p)
    dev.free(q)
    assert vmmshim.stats("kv").live_bytes == before


def test_tags_nest_and_restore_on_error():
    with vmmshim.tag("outer"):
        with pytest.raises(KeyError):
            with vmmshim.tag("inner"):
                assert vmmshim.get_tag() == "inner"
                raise KeyError("boom")
        assert vmmshim.get_tag() == "outer"
    assert vmmshim.get_tag() == "default"


def test_a_tag_belongs_to_its_thread(dev):
    seen = {}

    def worker():
        dev.make_current()
        with vmmshim.tag("thread-t1"):
            seen["tag"] = vmmshim.get_tag()
            seen["ptr"] = dev.alloc(2 * MIB)

    with vmmshim.tag("main"):
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert vmmshim.get_tag() == "main"
    assert seen["tag"] == "thread-t1"
    assert vmmshim.stats("thread-t1").live_bytes == 2 * MIB
    assert vmmshim.stats("main").live_bytes == 0
    dev.free(seen["ptr"])


def test_sleep_and_wake_keep_the_data_at_the_same_address(dev, pattern):
    data = pattern(5 * MIB + 123, seed=3)
    with vmmshim.tag("weights"):
        p = dev.alloc(len(data))
    dev.write(p, data)
    free_awake = dev.mem_info()[0]

    assert vmmshim.sleep("weights") is True
    s = vmmshim.stats("weights")
    assert s.asleep_bytes >= len(data) and s.host_backup_bytes >= len(data)
    assert s.mapped_bytes == 0
    assert dev.mem_info()[0] >= free_awake + len(data) - 2 * MIB  # given back to the driver
    assert vmmshim.sleep("weights") is False  # already asleep: nothing changed

    assert vmmshim.wake("weights") is True
    assert vmmshim.wake("weights") is False
    assert vmmshim.stats("weights").asleep_bytes == 0
    assert dev.read(p, len(data)) == data
    dev.free(p)


def test_discard_drops_the_contents_and_the_memory_is_usable_after_wake(dev, pattern):
    with vmmshim.tag("scratch"):
        p = dev.alloc(4 * MIB)
    dev.write(p, pattern(4 * MIB, seed=5))
    assert vmmshim.sleep("scratch", discard=True)
    assert vmmshim.stats("scratch").host_backup_bytes == 0
    assert vmmshim.wake("scratch")
    fresh = pattern(4 * MIB, seed=6)
    dev.write(p, fresh)
    assert dev.read(p, len(fresh)) == fresh
    dev.free(p)


def test_sleep_of_everything_keeps_every_tag(dev, pattern):
    a, b = pattern(MIB, seed=7), pattern(2 * MIB, seed=8)
    with vmmshim.tag("a"):
        pa = dev.alloc(len(a))
    pb = dev.alloc(len(b))
    dev.write(pa, a)
    dev.write(pb, b)
    assert vmmshim.sleep()
    assert vmmshim.stats().mapped_bytes == 0
    assert vmmshim.wake()
    assert dev.read(pa, len(a)) == a and dev.read(pb, len(b)) == b
    dev.free(pa)
    dev.free(pb)


def test_stats_is_a_dataclass_of_ints(dev):
    with vmmshim.tag("counted"):
        p = dev.alloc(MIB)
    s = vmmshim.stats("counted", device=0)
    assert isinstance(s, vmmshim.Stats)
    assert [f.name for f in __import__("dataclasses").fields(s)] == [
        "live_bytes", "live_count", "mapped_bytes", "cached_bytes", "reserved_bytes",
        "asleep_bytes", "host_backup_bytes", "peak_live_bytes", "alloc_calls", "free_calls"]
    assert all(isinstance(v, int) for v in vars(s).values())
    assert s.live_bytes == MIB and s.live_count == 1 and s.mapped_bytes >= MIB
    assert vmmshim.stats("counted") == s  # device 0 is every device here
    assert vmmshim.stats("never-used").live_bytes == 0
    with pytest.raises(AttributeError):
        s.live_bytes = 0  # frozen
    dev.free(p)


def test_errors_carry_the_shims_message():
    with pytest.raises(vmmshim.InvalidError) as e:
        vmmshim.set_tag("bad\ttag")
    assert e.value.code == 1 and "printable ASCII" in e.value.message
    assert str(e.value) == e.value.message
    assert vmmshim.get_tag() == "default"  # a refused tag changes nothing
    with pytest.raises(vmmshim.InvalidError, match="1 to 31"):
        vmmshim.sleep("x" * 40)
    with pytest.raises(vmmshim.InvalidError, match="device"):
        vmmshim.stats(device=99)
    with pytest.raises(ValueError):  # InvalidError is a ValueError too
        vmmshim.wake("")
    with pytest.raises(TypeError):
        vmmshim.sleep(tag=b"bytes")
    with pytest.raises(TypeError):
        vmmshim.wake(device="0")


def test_a_wake_without_device_memory_stays_asleep_and_says_why(dev, pattern):
    data = pattern(16 * MIB, seed=9)
    with vmmshim.tag("big"):
        p = dev.alloc(len(data))
    dev.write(p, data)
    assert vmmshim.sleep("big")
    # Another holder takes the device's memory (handles of the program's own, not the shim's
    # heap) until the driver has none left, then gives back 8 MiB: less than the wake needs.
    filler = []

    def fill():
        while True:
            try:
                filler.append(dev.create_physical(8 * MIB))
            except simcuda.CudaError:
                break
    hog = []
    try:
        fill()
        assert len(filler) > 8, "the device was not filled"
        # A wake first gives back the shim's own cache (earlier tests leave some): take it with
        # allocations of another tag, so that only the 8 MiB given back below is free.
        with vmmshim.tag("hog"):
            while True:
                try:
                    hog.append(dev.alloc(2 * MIB))
                except simcuda.CudaError:
                    break
        dev.release_physical(filler.pop())
        with pytest.raises(vmmshim.DeviceOutOfMemoryError) as e:
            vmmshim.wake("big")
        assert isinstance(e.value, MemoryError) and e.value.code == 2
        assert str(len(data)) in e.value.message and "available" in e.value.message
        assert vmmshim.stats("big").asleep_bytes >= len(data)  # still asleep, copy kept
    finally:
        for h in filler:
            dev.release_physical(h)
        for q in hog:
            dev.free(q)
    assert vmmshim.wake("big")
    assert dev.read(p, len(data)) == data
    dev.free(p)


def _python(code, preload, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    if not preload:
        env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60)


def test_outside_the_shim_every_call_says_how_to_start_the_program():
    r = _python("import vmmshim\n"
                "print(vmmshim.available())\n"
                "for call in (vmmshim.sleep, vmmshim.wake, vmmshim.stats, vmmshim.get_tag):\n"
                "    try:\n"
                "        call()\n"
                "    except vmmshim.NotUnderShimError as e:\n"
                "        print(type(e).__name__, e.code, e)\n", preload=False)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "False" and len(lines) == 5
    for line in lines[1:]:
        assert line.startswith("NotUnderShimError None libvmmshim.so is not loaded")
        assert "vmmctl run" in line and "LD_PRELOAD" in line


def test_before_any_device_memory_a_sleep_says_so():
    r = _python("import vmmshim\n"
                "try:\n"
                "    vmmshim.sleep()\n"
                "except vmmshim.InvalidError as e:\n"
                "    print(e)\n", preload=True)
    assert r.returncode == 0, r.stderr
    assert "no device memory is managed by vmmshim" in r.stdout


def test_sleep_and_wake_signatures_are_the_documented_ones():
    assert str(inspect.signature(vmmshim.sleep)) == "(tag=None, discard=False, device=None)"
    assert str(inspect.signature(vmmshim.wake)) == "(tag=None, device=None)"
    assert str(inspect.signature(vmmshim.stats)) == "(tag=None, device=None)"


def test_progress_is_none_when_nothing_runs(dev, pattern):
    assert vmmshim.progress() is None
    p = dev.alloc(4 << 20)
    with vmmshim.tag("idle"):
        q = dev.alloc(4 << 20)
    assert vmmshim.sleep("idle") and vmmshim.progress() is None
    assert vmmshim.wake("idle") and vmmshim.progress() is None
    dev.free(p)
    dev.free(q)


def test_progress_is_seen_from_another_thread_during_a_sleep():
    """A slowed sleep (simdev delays each device-to-host copy call) polled from a thread."""
    r = _python("import sys, threading, time\n"
                "sys.path.insert(0, %r)\n"
                "import simcuda, vmmshim\n"
                "dev = simcuda.Device()\n"
                "with vmmshim.tag('slow'):\n"
                "    ptrs = [dev.alloc(4 << 20) for _ in range(4)]\n"
                "seen, done = [], threading.Event()\n"
                "def poll():\n"
                "    while not done.is_set():\n"
                "        p = vmmshim.progress()\n"
                "        if p and p.phase == 'copying':\n"
                "            seen.append(p)\n"
                "        time.sleep(0.005)\n"
                "t = threading.Thread(target=poll)\n"
                "t.start()\n"
                "vmmshim.sleep('slow')\n"
                "done.set()\n"
                "t.join()\n"
                "print(len(seen), seen[-1] if seen else None)\n"
                "assert seen and all(0 <= p.bytes_done <= p.bytes_total for p in seen)\n"
                "assert any(p.bytes_done > 0 for p in seen) and seen[0].operation == 'sleep'\n"
                "assert vmmshim.progress() is None\n" % os.path.dirname(os.path.abspath(__file__)),
                # 250 ms a copy: the polling thread must be scheduled within the sleep even
                # on a loaded machine (at 30 ms it could miss the whole sleep).
                preload=True, extra_env={"SIMDEV_DELAY": "cuMemcpyDtoHAsync:250"})
    assert r.returncode == 0, r.stdout + r.stderr
