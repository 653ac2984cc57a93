#!/usr/bin/env bash
# Group sleep/wake of two processes vs single-process sleep/wake of the same bytes, on simdev:
# ctl_target programs under the shim, driven by vmmctl; prints the medians and their ratio, the
# first cycle apart, and the medians of the group's steps from vmmctl --json (find, plan, phases,
# pauses, shares report) (tests/integration/control/bench_group.c). The GPU comparison is the x2 row of
# tests/gpu/gpucheck.py.
# Usage: scripts/bench-group.sh [MIB_PER_PROCESS [ROUNDS]]   (defaults 128 and 5)
set -euo pipefail
exec "$(dirname "$0")/ctl-bench.sh" bench_group "$@"
