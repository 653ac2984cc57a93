#!/usr/bin/env bash
# One round of GPU sharing on a busy node, on simdev: two sharing ctl_targets take turns on one
# simulated GPU (the higher priority's allocation sleeps the lower one) while BYSTANDERS sharing
# processes of a second simulated GPU use the same control folder; prints the median and slowest
# time of that allocation and how many processes its rounds asked
# (tests/integration/control/bench_share_round.c). SHIM_BUILD=DIR: another build's shim
# (scripts/ctl-bench.sh).
# Usage: scripts/bench-share.sh [BYSTANDERS [ROUNDS]]   (defaults 16 and 10)
set -euo pipefail
exec "$(dirname "$0")/ctl-bench.sh" bench_share_round "$@"
