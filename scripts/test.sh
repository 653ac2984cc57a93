#!/usr/bin/env bash
# The tests: builds into build/ and runs every suite on the simulated device (no GPU needed:
# simdev, unit, integration, install (meson install, pkg-config, man pages), python), then
# the unit suites and the control failure paths (suite 'failure-paths') in build-sanitize/
# with AddressSanitizer and UndefinedBehaviorSanitizer, the threaded control-plane tests in
# build-tsan/ with ThreadSanitizer, then the bounded fuzz run. Exits non-zero if anything fails.
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
test_extra=() # more arguments for run_suites' meson test
# Each phase's line says when it began (seconds since the start), so that a CI log shows where the
# time goes; the total comes last.
start=$SECONDS
phase() { echo "== [$((SECONDS - start)) s] $*"; }
# The last lines of each failed test, printed again just before the summary.
fail_tails=$(mktemp)
trap 'rm -f "$fail_tails"' EXIT
run_suites() { # dir, label, suites... (a suite written -NAME is left out)
  local dir=$1 label=$2; shift 2
  local args=()
  for s in "$@"; do
    if [ "${s#-}" != "$s" ]; then args+=(--no-suite "${s#-}"); else args+=(--suite "$s"); fi
  done
  phase "$label: meson test ${args[*]}"
  if meson test -C "$dir" "${args[@]}" "${test_extra[@]}" --print-errorlogs --num-processes "$jobs"
  then :; else status=1; fi
  summary+=("$(python3 scripts/testlog.py count "$dir/meson-logs/testlog.json" "$label")")
  python3 scripts/testlog.py tails "$dir/meson-logs/testlog.json" >>"$fail_tails"
}

phase "build (gcc, -Werror) into build/"
configure build -Dtests=enabled
ninja -C build -j "$jobs"
# The failure paths (multi-process, the slowest integration tests: a third of this pass) run
# once, in the sanitize pass: the same assertions, with ASan and UBSan watching the shim and the
# program. The heap's fault sweeps (suite 'fault-sweeps') likewise. `meson test -C build` still
# runs both here for whoever wants them unsanitized.
run_suites build plain simdev unit integration install python -failure-paths -fault-sweeps

phase "build with ASan+UBSan into build-sanitize/"
configure build-sanitize -Dtests=enabled -Db_sanitize=address,undefined -Db_lundef=false
ninja -C build-sanitize -j "$jobs"
run_suites build-sanitize sanitize simdev unit failure-paths

# ThreadSanitizer over the threaded paths: the control server (concurrent clients, cancel, clients
# that go), sleep/wake with the gate holding and releasing the program's threads, eight threads
# allocating through the heap during sleep/wake cycles, vmmctl's concurrent list, and the
# randomized soak (threads, faults, killed clients, malformed requests against sleep/wake),
# GPU sharing between processes (waiters, peers' sleeps, the per-GPU lock), and forks while other
# threads change what a forked child closes (core_fork_stress), kernels launched while another
# thread reuses freed memory without a sync (core_idle_sync_stress), and the connections an
# importer keeps to its exporters, used by many threads at once (control_peer_kept_threads).
# Criterion cannot start under TSan, so the test drivers are built without it
# (tests/integration/control) and what they drive is built with it: libvmmshim.so, ctl_target,
# soak_target, simdev and vmmctl; simdev's own threaded test, core_fork_stress and
# core_idle_sync_stress (no Criterion) run as they are. Races are written to
# build-tsan/tsan-reports/ (a target the harness kills still leaves its report) and fail the pass.
phase "build with ThreadSanitizer into build-tsan/"
configure build-tsan -Dtests=enabled -Db_sanitize=thread -Db_lundef=false
tsan_tests=(simdev_race_primary core_fork_stress core_idle_sync_stress core_sync_ahead_stress
  core_refill_stress control_sleep control_cancel control_status
  control_protocol control_trust control_group control_soak control_share control_peer_kept_threads
  control_failures control_share_soak control_reset)
# What the drivers start is named here: ninja builds only the targets it is given, and the
# drivers find these through the environment, not as link dependencies.
ninja -C build-tsan -j "$jobs" tests/simdev/race_primary tests/unit/core/test_core_fork_stress \
  tests/unit/core/test_core_idle_sync_stress \
  $(for t in "${tsan_tests[@]:5}"; do
  echo "tests/integration/control/test_$t"; done) shim/libvmmshim.so tools/vmmctl \
  tests/simdev/libcuda.so.1 tests/simdev/libcudart.so.13 tests/simdev/libascendcl.so \
  tests/integration/control/ctl_target tests/integration/control/acl_target \
  tests/integration/control/soak_target
rm -rf build-tsan/tsan-reports && mkdir -p build-tsan/tsan-reports
declare -A tsan_filter=(
  [simdev_race_primary]=''
  # Forks while threads keep exports and share handles (not Criterion: no filter).
  [core_fork_stress]=''
  # Kernels launched while other threads reuse freed memory, with or without a sync.
  [core_idle_sync_stress]=''
  # The same with the heap's thread syncing ahead beside them (heap_ahead.c).
  [core_sync_ahead_stress]=''
  # And with the refill thread making the cuts' free rests beside them (heap_refill.c).
  [core_refill_stress]=''
  # The threaded ones (the ACL program is left out: simdev's ACL copies are not ordered with
  # the program's, and TSan spends minutes on that one report).
  [control_sleep]='@(sleep/releases_memory*|sleep/eight_threads*|sleep/a_copy_while_asleep*|sleep/a_kernel_while_asleep*|sleep/autowake_on_the_next*|sleep/a_held_tag_sleep*|sleep/a_sleep_that_fails*|sleep/a_forked_child*|sleep/the_programs_own_vmm*)'
  [control_cancel]='*'
  # Many statuses at once while sleeps start (the state held shared while figures are read),
  # hello and a pointer query (a view of the heap without its lock) beside an allocator at its
  # device, a trim during a sleep. Not status's 10 s bound (a timer, no thread of its own: the
  # plain and ASan passes run it).
  [control_status]='@(status/statuses_at_once*|status/vmmctl_status_on*|status/hello*|status/a_trim*|status/a_pointer_query*)'
  [control_protocol]='@(protocol/*|vmmctl/list*)'
  [control_trust]='@(trust/list_is_not_held_up*|trust/escapes*|trust/a_server_that_never*)'
  # vmmctl's concurrent group requests and the servers' undo; not the capacity tests (clean
  # under TSan since simdev's group lock is one it follows, but 55 s more: control_share covers
  # the group), nor the retry test, whose "kernel" polls a flag that a copy writes, by design.
  [control_group]='@(group/a_member*|group/an_undo*|group/a_group_with*|group/a_sleep_makes*)'
  # The randomized soak (not Criterion: no filter), 50 s with its fixed seed.
  [control_soak]=''
  # The sharing soak: three sharing processes sleeping one another, killed and replaced
  # (not Criterion: no filter).
  [control_share_soak]=''
  # GPU sharing (sizes a quarter under TSan, about 60 s, more under load): two processes
  # taking turns, waiters woken by a peer's free or death (inotify, pidfds, the control
  # server), a sleep between an attempt and the gate, a waiter paced beside a peer that frees
  # all the time, a round's looks side by side (share_look.c) beside stopped processes, and a
  # round's drain of its own device beside a peer's trim of it, and its bounded wait under the
  # lock. Simdev's group lock is one TSan follows (sim_group.c).
  [control_share]='@(share/two_processes*|share/a_waiting*|share/a_sleep_between*|share/a_peer_freeing*|share/stopped_processes*|share/a_round_waits*|share/a_round_holds*)'
  # Kept connections to a peer, eight threads at once (not Criterion: no filter).
  [control_peer_kept_threads]=''
  # Four threads held at the gate while autowakes fail: one try a second for all of them.
  [control_failures]='failures/a_failing_autowake*'
  # A last release of the primary context left to a status look that holds the control plane,
  # the check made on the server's thread once the look lets go, or on the allocator's once its
  # wait for the device ends.
  [control_reset]='@(reset/a_last_release_during*|reset/a_release_left*)'
)
tsan_ok=0; tsan_bad=0; tsan_failed=(); tsan_flaky=()
tsan_run() { # test; filter args...
  local t=$1; shift
  CTL_SLOW=4 CTL_SANITIZER=thread TSAN_OPTIONS="log_path=$PWD/build-tsan/tsan-reports/report" \
    meson test -C build-tsan --no-rebuild "$t" --print-errorlogs "$@"
}
# These drivers time processes that TSan slows 5-15x on a 2-core machine that CI may share: a
# test that fails is run once more, and passes only if that run passes, named as flaky in the
# summary with its first failure's last lines. A race report is never forgiven (the reports of
# both runs stay in tsan-reports/ and fail the pass below).
for t in "${tsan_tests[@]}"; do
  phase "tsan: meson test $t ${tsan_filter[$t]}"
  filter=(); [ -n "${tsan_filter[$t]}" ] && filter=(--test-args "--filter ${tsan_filter[$t]}")
  if tsan_run "$t" "${filter[@]}"; then
    tsan_ok=$((tsan_ok + 1)); continue
  fi
  python3 scripts/testlog.py tails build-tsan/meson-logs/testlog.json 25 >>"$fail_tails"
  phase "tsan: $t failed; once more"
  if tsan_run "$t" "${filter[@]}"; then
    tsan_ok=$((tsan_ok + 1)); tsan_flaky+=("$t")
  else
    tsan_bad=$((tsan_bad + 1)); tsan_failed+=("$t"); status=1
    python3 scripts/testlog.py tails build-tsan/meson-logs/testlog.json 25 >>"$fail_tails"
  fi
done
if compgen -G "build-tsan/tsan-reports/report*" >/dev/null; then
  phase "tsan: races found (build-tsan/tsan-reports/):"
  cat build-tsan/tsan-reports/report*
  tsan_bad=$((tsan_bad + 1)); tsan_failed+=("races"); status=1
fi
summary+=("tsan $tsan_ok $tsan_bad 0 ${tsan_failed[*]}")
[ ${#tsan_flaky[@]} -eq 0 ] || echo "== tsan: passed on the second run (flaky): ${tsan_flaky[*]}" >>"$fail_tails"

if command -v clang >/dev/null; then
  phase "fuzz build (clang, libFuzzer) into build-fuzz/"
  CC=clang configure build-fuzz -Dtests=enabled -Dfuzz=true
  # The fuzz target alone: the rest of the tree is built and tested above (a whole clang build
  # took 100 of the suite's 1850 s on two cores).
  ninja -C build-fuzz -j "$jobs" tests/fuzz/fuzz_protocol
  test_extra=(--no-rebuild)
  run_suites build-fuzz fuzz fuzz
  test_extra=()
fi

if [ -s "$fail_tails" ]; then
  phase "what failed (the end of each one's output; the whole of it is above)"
  cat "$fail_tails"
fi
passed=0; failed=0
for line in "${summary[@]}"; do
  read -r label ok bad skip names <<<"$line"
  # The names of what failed come last, where a CI log's tail still shows them.
  echo "   $label: $ok passed, $bad failed, $skip skipped${names:+ (failed: $names)}"
  passed=$((passed + ok)); failed=$((failed + bad))
done
[ "$failed" -eq 0 ] || status=1
echo "tests: $passed passed, $failed failed in $((SECONDS - start)) s"
exit $status
