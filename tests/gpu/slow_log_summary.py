#!/usr/bin/env python3
"""Where a program's slow allocations spent their time, from the heap's debug log.

At VMMSHIM_LOG=debug every block request that took VMMSHIM_SLOW_LOG (0.05 ms by default) or more logs one line (core/heap_fit.c,
slow_log): its size, its time, and what it did (device syncs, handles created, released, moved,
given back, before the sync or after, shattered; the time in syncs and after the last). This sorts those lines into kinds, by what the request did that cost the
most driver time, and sums each kind, over the whole log and over its second half (the timed pass
of `train.py --passes 2` is roughly the second half: both passes play the same steps). With
--top N it also lists the N slowest requests in log order. With --costs it fits what one driver
call cost on the machine that ran the log: a request's time as a fixed part plus so much per
handle created (with its map and access grant), released (with its unmap) and moved, by least
squares over the requests that waited for no sync. The same sources run slower on a machine whose
calls cost more: on two H200 machines on 4 Dec, 48 and 68 us a created piece.

Usage: slow_log_summary.py [--top N] [--costs] LOG [LOG...]
  e.g. after GPUCHECK_TRAIN_ALLOCS=...,NO_CACHING+VMMSHIM_LOG=debug, the runs'
  bench_train.NO_CACHING+VMMSHIM_LOG=debug.shim.*.err in gpu-check-logs.tgz
"""
import argparse
import re
import sys

LINE = re.compile(r"block of (\d+) bytes took ([\d.]+) ms(?: \(failed\))?: (\d+) syncs, (\d+) handles "
                  r"created, (\d+) released, (\d+) moved, (\d+) given back for new memory, "
                  r"(?:(\d+) pieces given back for a large request"
                  r"(?: \((\d+) before its sync\))?, )?(\d+) shattered"
                  r"(?:; ([\d.]+) ms in syncs, ([\d.]+) ms after the last"
                  r"(?:; ended at ([\d.]+))?)?")
KINDS = ("shattered", "given back", "moved", "created", "sync only", "other")


def kind(r):
    """The kind of one request: its costliest driver work first."""
    if r["shattered"]:
        return "shattered"
    if r["given_back"]:
        return "given back"
    if r["moved"]:
        return "moved"
    if r["created"]:
        return "created"
    if r["syncs"]:
        return "sync only"
    return "other"


def parse(path):
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.search(line)
            if not m:
                continue
            g = m.groups()
            out.append({"size": int(g[0]), "ms": float(g[1]), "syncs": int(g[2]),
                        "created": int(g[3]), "released": int(g[4]), "moved": int(g[5]),
                        "recycled": int(g[6]), "given_back": int(g[7] or 0),
                        "early": int(g[8] or 0), "shattered": int(g[9]),
                        "sync_ms": float(g[10] or 0), "after_ms": float(g[11] or 0),
                        "end": float(g[12]) if g[12] else None})
    return out


def summary(reqs):
    parts = []
    for k in KINDS:
        sel = [r for r in reqs if kind(r) == k]
        if sel:
            parts.append(f"{k} {sum(r['ms'] for r in sel):.0f} ms in {len(sel)}")
    if not parts:
        return "no slow requests"
    # Newer logs also say how long the requests waited for syncs and took after the last one
    # (the GPU's queue drained: a GPU-bound program waits for all of that).
    waits = sum(r["sync_ms"] for r in reqs)
    after = sum(r["after_ms"] for r in reqs)
    if waits or after:
        parts.append(f"(waiting for syncs {waits:.0f} ms, after them {after:.0f} ms)")
    return "; ".join(parts)


def solve(m, v):
    """x with m x = v (Gauss-Jordan with partial pivoting); None when m is singular."""
    n = len(v)
    a = [row[:] + [v[i]] for i, row in enumerate(m)]
    for i in range(n):
        p = max(range(i, n), key=lambda r: abs(a[r][i]))
        if abs(a[p][i]) < 1e-12:
            return None
        a[i], a[p] = a[p], a[i]
        for r in range(n):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i])]
    return [a[i][n] / a[i][i] for i in range(n)]


COSTS = ("created", "released", "moved")


def call_costs(reqs):
    """The least-squares fit ms = fixed + sum(cost[k] * count[k]) over the requests that waited
    for no sync (a sync's time is the GPU's, not the call's): (fixed, {kind: ms}, requests fitted)
    or None when they cannot tell the costs apart."""
    rows = [([1.0] + [float(r[k]) for k in COSTS], r["ms"]) for r in reqs
            if not r["syncs"] and not r["sync_ms"]]
    n = len(COSTS) + 1
    ata = [[sum(x[i] * x[j] for x, _ in rows) for j in range(n)] for i in range(n)]
    aty = [sum(x[i] * y for x, y in rows) for i in range(n)]
    c = solve(ata, aty) if len(rows) >= n else None
    return None if c is None else (c[0], dict(zip(COSTS, c[1:])), len(rows))


def costs_line(fit):
    """call_costs' answer in words."""
    if fit is None:
        return "too few requests to tell them apart"
    fixed, per, n = fit
    each = " + ".join(f"{v * 1e3:.0f} us a handle {k}" for k, v in per.items())
    return f"{fixed:.3f} ms + {each} ({n} requests without a sync)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--top", type=int, default=0, help="list the N slowest requests")
    ap.add_argument("--costs", action="store_true",
                    help="fit what one driver call cost (created, released, moved)")
    ap.add_argument("logs", nargs="+")
    a = ap.parse_args()
    for path in a.logs:
        reqs = parse(path)
        print(f"{path}: {len(reqs)} slow requests")
        print(f"  all:         {summary(reqs)}")
        print(f"  second half: {summary(reqs[len(reqs) // 2:])}")
        if a.costs:
            print(f"  call costs:  {costs_line(call_costs(reqs))}")
        if a.top:
            top = sorted(range(len(reqs)), key=lambda i: -reqs[i]["ms"])[:a.top]
            for i in sorted(top):
                r = reqs[i]
                print(f"  #{i + 1:<5} {r['size'] / 2**20:9.1f} MiB {r['ms']:7.2f} ms  {kind(r)}: "
                      f"{r['syncs']} syncs, {r['moved']} moved, {r['given_back']} given back "
                      f"({r['early']} before the sync), {r['created']} created, "
                      f"{r['shattered']} shattered; {r['sync_ms']:.1f} ms in syncs, "
                      f"{r['after_ms']:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
