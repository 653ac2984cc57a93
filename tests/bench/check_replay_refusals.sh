#!/bin/sh
# bench_core --replay refuses what is not a trace with a message that says why (a compressed
# trace, a file with no allocation line), exits 1, and replays nothing.
# Usage: check_replay_refusals.sh BENCH_CORE
set -u
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
printf 'a 4096 10\nf 10\n' | gzip >"$dir/t.trace.gz"
printf 'hello\nworld\n' >"$dir/not.trace"
check() { # file, words the message must hold
	"$bench" --replay "$1" >"$dir/out" 2>"$dir/err"
	rc=$?
	if [ $rc -ne 1 ] || ! grep -q "$2" "$dir/err" || grep -q "peak live" "$dir/out"; then
		echo "FAIL: $1: rc $rc, stderr: $(cat "$dir/err"), stdout: $(head -3 "$dir/out")"
		fail=1
	fi
}
check "$dir/t.trace.gz" "is compressed"
check "$dir/not.trace" "not a VMMSHIM_ALLOC_TRACE file"
[ $fail -eq 0 ] && echo "replay refusals: ok"
exit $fail
