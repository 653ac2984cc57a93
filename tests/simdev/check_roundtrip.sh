#!/bin/sh
# Runs the roundtrip program (linked to simdev's libcudart.so.13) with SIMDEV_STATS and checks
# that it printed its line and that the stats file shows the driver calls behind cudaMalloc,
# cudaMemcpy and cudaFree, reached through cuGetProcAddress_v2, with every byte freed.
set -u
prog="$1"
stats=$(mktemp /tmp/simdev-roundtrip-XXXXXX)
trap 'rm -f "$stats"' EXIT
out=$(SIMDEV_STATS="$stats" "$prog") || { echo "roundtrip failed: $out"; exit 1; }
echo "$out"
echo "--- SIMDEV_STATS:"
cat "$stats"
fail=0
expect() {
  grep -qx "$1" "$stats" || { echo "missing line: $1"; fail=1; }
}
case "$out" in *"intact"*) ;; *) echo "no success line"; fail=1 ;; esac
expect 'cuMemAlloc_v2 1'
expect 'cuMemcpy 2'
expect 'cuMemFree_v2 1'
expect 'cuDevicePrimaryCtxRetain 1'
expect 'peak_bytes 4194304'
expect 'live_bytes 0'
grep -q '^cuGetProcAddress_v2 [1-9]' "$stats" || { echo "cuGetProcAddress_v2 not used"; fail=1; }
exit $fail
