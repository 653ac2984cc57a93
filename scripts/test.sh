#!/usr/bin/env bash
# The tests: builds into build/ and runs every suite on the simulated device (no GPU needed:
# simdev, unit, integration, install (meson install, pkg-config, man pages), python), then
# the unit suites again in build-sanitize/ with AddressSanitizer and UndefinedBehaviorSanitizer,
# then the bounded fuzz run. Exits non-zero if anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VMMSHIM_SETUP_TESTS=1 source scripts/setup.sh

jobs=$(nproc 2>/dev/null || echo 2)
configure() { # dir, options...
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ]; then meson setup --reconfigure "$dir" "$@" >/dev/null
  else meson setup "$dir" "$@" >/dev/null; fi
}
status=0
summary=()
run_suites() { # dir, label, suites...
  local dir=$1 label=$2; shift 2
  local args=()
  for s in "$@"; do args+=(--suite "$s"); done
  echo "== $label: meson test ${args[*]}"
  if meson test -C "$dir" "${args[@]}" --print-errorlogs --num-processes "$jobs"; then :; else status=1; fi
  summary+=("$(python3 - "$dir/meson-logs/testlog.json" "$label" <<'PY'
import json, sys
ok = bad = skip = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): ok += 1
    elif r == "SKIP": skip += 1
    else: bad += 1
print(f"{sys.argv[2]} {ok} {bad} {skip}")
PY
)")
}

echo "== build (gcc, -Werror) into build/"
configure build -Dtests=enabled
ninja -C build -j "$jobs"
run_suites build plain simdev unit integration install python

echo "== build with ASan+UBSan into build-sanitize/"
configure build-sanitize -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-sanitize -j "$jobs"
run_suites build-sanitize sanitize simdev unit

if command -v clang >/dev/null; then
  echo "== fuzz build (clang, libFuzzer) into build-fuzz/"
  CC=clang configure build-fuzz -Dtests=enabled -Dfuzz=true
  ninja -C build-fuzz -j "$jobs"
  run_suites build-fuzz fuzz fuzz
fi

passed=0; failed=0
for line in "${summary[@]}"; do
  read -r label ok bad skip <<<"$line"
  echo "   $label: $ok passed, $bad failed, $skip skipped"
  passed=$((passed + ok)); failed=$((failed + bad))
done
[ "$failed" -eq 0 ] || status=1
echo "tests: $passed passed, $failed failed"
exit $status
