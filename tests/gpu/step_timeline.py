#!/usr/bin/env python3
"""Where one training step of the PyTorch benchmark spent its time, host against GPU.

train.py --mode varlen prints, per step, when the host had queued its forward, loss, backward and
optimizer (STEPAT lines), and at VMMSHIM_LOG=debug the heap logs each request of VMMSHIM_SLOW_LOG (0.05 ms) or more
with the moment it ended (core/heap_fit.c, slow_log), on the same clock (CLOCK_MONOTONIC). A
step whose host queued everything long before the step's end was GPU-bound; one whose host
finished queueing just before it was held up on the host, and the slow requests in between say
by what: their time, syncs (and the time after the last, when the GPU had nothing queued),
pieces given back (before a sync or after) and handles cut.

Usage: step_timeline.py OUT ERR [STEP]   (STEP: a shape such as 16x1872, or "all"; default the
  largest; OUT and ERR a run's stdout and stderr, e.g. bench_train.NO_CACHING+VMMSHIM_LOG=debug.
  shim.0.out and .err from gpu-check-logs.tgz). Every step's line is printed; the slow requests
  of the chosen step's runs (each pass) are listed under it.
"""
import re
import sys

from slow_log_summary import parse  # the one reader of the heap's slow-request lines

STEP = re.compile(r"STEPAT (\d+) (\S+) start ([\d.]+) queued: forward ([\d.]+) loss ([\d.]+) "
                  r"backward ([\d.]+) optimizer ([\d.]+); end ([\d.]+)")


def matches(path, pattern):
    """The groups of each line of path that pattern finds."""
    with open(path, errors="replace") as f:
        return [m.groups() for m in map(pattern.search, f) if m]


def tokens(shape):
    """Batch times length of a shape such as 16x1872."""
    batch, length = shape.split("x")
    return int(batch) * int(length)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    steps = [(int(g[0]), g[1]) + tuple(float(x) for x in g[2:])
             for g in matches(sys.argv[1], STEP)]
    slow = [r for r in parse(sys.argv[2]) if r["end"] is not None]
    if not steps:
        print(f"{sys.argv[1]}: no STEPAT lines (train.py --mode varlen prints them)")
        return 1
    want = sys.argv[3] if len(sys.argv) > 3 else \
        max(steps, key=lambda s: tokens(s[1]))[1]
    for i, name, t0, fwd, loss, bwd, opt, end in steps:
        ms = lambda t: (t - t0) * 1e3  # noqa: E731
        print(f"step {i:2d} {name:8s} {ms(end):6.1f} ms; host queued: forward {ms(fwd):6.1f}, "
              f"loss {ms(loss):6.1f}, backward {ms(bwd):6.1f}, optimizer {ms(opt):6.1f}")
        if want not in (name, "all"):
            continue
        sel = [r for r in slow if t0 <= r["end"] <= end]
        print(f"    {len(sel)} slow requests, {sum(r['ms'] for r in sel):.1f} ms; "
              f"{sum(r['syncs'] for r in sel)} syncs, {sum(r['sync_ms'] for r in sel):.1f} ms in "
              f"them, {sum(r['after_ms'] for r in sel):.1f} ms after")
        for r in sel:
            print(f"      ended {ms(r['end']):7.1f} ms {r['size'] / 2**20:8.1f} MiB "
                  f"{r['ms']:6.2f} ms: {r['syncs']} syncs ({r['sync_ms']:.1f} ms, "
                  f"{r['after_ms']:.1f} after), {r['released']} released, {r['moved']} moved, "
                  f"{r['given_back']} pieces given back ({r['early']} before the sync), "
                  f"{r['shattered']} cut")
    return 0


if __name__ == "__main__":
    sys.exit(main())
