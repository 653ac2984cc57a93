#!/bin/sh
# vmmctl run on simdev: a program that checks its own data (tests/programs/demo_app) survives
# `--cycle 0.2` with at least five sleep/wake cycles and exit 0; dropping its memory at each sleep
# (--discard default) makes it fail, and vmmctl run exits with its status; exit statuses and
# signals are passed on (a TERM to vmmctl run too, after a wake); bad command lines and a missing library are refused.
# Usage: check_run.sh VMMCTL DEMO_APP   (LD_LIBRARY_PATH names simdev's folder)
set -u
vmmctl=$1
app=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
export VMMSHIM_RUN_DIR="$t/run" SIMDEV_MEMORY=1G
unset LD_PRELOAD VMMSHIM_LIBRARY
failures=0

fail() {
	echo "FAIL: $*"
	failures=$((failures + 1))
}

# expect STATUS LABEL COMMAND...: runs COMMAND, keeps its stderr in $t/err
expect() {
	want=$1
	label=$2
	shift 2
	"$@" >"$t/out" 2>"$t/err"
	got=$?
	if [ "$got" != "$want" ]; then
		fail "$label: exit $got, expected $want"
		sed 's/^/    /' "$t/out" "$t/err" | tail -20
	else
		echo "ok: $label (exit $got)"
	fi
}

field() { # FILE KEY.SUB: a number from the JSON report
	python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)' "$1" "$2"
}

# 1. The program survives the cycles: its own checksums, five cycles at least, bytes copied.
expect 0 "cycle 0.2 with data checked" \
	"$vmmctl" run --cycle 0.2 --seed 7 --report "$t/r.json" -- "$app" --mib 16 --seconds 2.5
if [ -f "$t/r.json" ]; then
	cycles=$(field "$t/r.json" cycles)
	copied=$(field "$t/r.json" sleep.copied)
	[ "$cycles" -ge 5 ] || fail "only $cycles cycles, expected at least 5"
	[ "$copied" -gt 0 ] || fail "the sleeps copied nothing"
	[ "$(field "$t/r.json" failures)" = 0 ] || fail "failed cycles: $(cat "$t/r.json")"
	[ "$(field "$t/r.json" wake.count)" = "$cycles" ] || fail "wakes != cycles"
	grep -q "all data intact" "$t/out" || fail "demo_app did not report its data intact"
	grep -q "^vmmctl run: $cycles sleep/wake cycles" "$t/err" ||
		fail "no report line for $cycles cycles on stderr"
else
	fail "no JSON report written"
fi

# 1b. A program that ends while asleep (its last seconds are CPU work) ends the run at once:
# nothing is left to wake, and that is no failure.
began=$(date +%s)
expect 0 "the program exits while asleep" env VMMSHIM_LOG=info \
	"$vmmctl" run --cycle 0.2 --seed 3 --min-cycles 0 --report "$t/l.json" -- \
	"$app" --mib 8 --seconds 0.5 --exit-asleep 10
took=$(( $(date +%s) - began ))
grep -q "exiting asleep" "$t/out" || fail "the program never saw itself asleep"
grep -q "exit while asleep" "$t/err" || fail "the shim did not see an exit while asleep"
[ "$took" -le 20 ] || fail "exiting asleep held vmmctl run for $took s"
[ "$(field "$t/l.json" failures)" = 0 ] || fail "exiting asleep counted as a failure"

# 2. Dropping the program's memory at each sleep: it sees the loss and fails; so does run.
expect 1 "--discard default: the program's own check fails" \
	"$vmmctl" run --cycle 0.2 --seed 7 --discard default --report "$t/d.json" -- \
	"$app" --mib 8 --seconds 1.5
grep -q "DATA LOST" "$t/out" || fail "demo_app did not see its data lost"
[ "$(field "$t/d.json" exit_status)" = 1 ] || fail "report: exit_status is not 1"

# 3. A TERM sent to vmmctl run reaches the program after a wake: it ends its loop, checks all
# its data (which needs its memory back) and exits 0.
"$vmmctl" run --cycle 0.1 --min-cycles 0 -- "$app" --mib 8 --ready "$t/ready" \
	>"$t/out" 2>"$t/err" &
runner=$!
# Once the program has filled its memory (vmmctl's handlers are set before it starts): a fixed
# pause could end before a loaded machine had started either. 10 s at most, then a few cycles.
for i in $(seq 100); do
	[ -s "$t/ready" ] && break
	sleep 0.1
done
[ -s "$t/ready" ] || fail "TERM to vmmctl run: the program was not ready within 10 s"
sleep 0.5
kill -TERM $runner
wait $runner
got=$?
if [ "$got" = 0 ] && grep -q "all data intact" "$t/out"; then
	echo "ok: TERM to vmmctl run: passed on after a wake, the program ended cleanly"
else
	fail "TERM to vmmctl run: exit $got"
	sed 's/^/    /' "$t/out" "$t/err" | tail -10
fi

# 4. Statuses and signals of the program.
expect 7 "exit status passed on" "$vmmctl" run -- sh -c 'exit 7'
expect 143 "death by SIGTERM is 128+15" "$vmmctl" run -- sh -c 'kill -TERM $$'
expect 0 "the library is preloaded" "$vmmctl" run -- sh -c \
	'case "$LD_PRELOAD" in */libvmmshim.so*) exit 0;; *) exit 9;; esac'
expect 127 "no such program" "$vmmctl" run -- "$t/no-such-program"
expect 126 "not executable" "$vmmctl" run -- /dev/null

# 5. Too few cycles, bad command lines, no library: refused, nothing run.
expect 125 "--cycle on a program with no device memory: 0 cycles" \
	"$vmmctl" run --cycle 0.05 -- sleep 0.3
grep -q "fewer than --min-cycles 1" "$t/err" || fail "no word on too few cycles"
expect 0 "--min-cycles 0 accepts no cycles" "$vmmctl" run --cycle 0.05 --min-cycles 0 -- true
expect 2 "no program" "$vmmctl" run --cycle 1
expect 2 "--discard without --cycle" "$vmmctl" run --discard kv -- true
expect 2 "bad --cycle" "$vmmctl" run --cycle -1 -- true
expect 2 "bad tag" "$vmmctl" run --cycle 1 --discard "" -- true
expect 2 "unknown option" "$vmmctl" run --bogus -- true
VMMSHIM_LIBRARY="$t/nothing.so" expect 125 "VMMSHIM_LIBRARY names no file" \
	"$vmmctl" run -- sh -c 'exit 3'
grep -q "VMMSHIM_LIBRARY" "$t/err" || fail "the missing library is not named"

[ "$failures" = 0 ] && echo "check_run: all passed" && exit 0
echo "check_run: $failures failed"
exit 1
