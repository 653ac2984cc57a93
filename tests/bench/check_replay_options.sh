#!/bin/sh
# bench_core --replay takes the core's options last, in any order: --max-handle MIB makes a
# 256 MiB allocation of 64 MiB handles (4 created, against 1 without it), whether it comes
# before or after --sync-ahead.
# Usage: check_replay_options.sh BENCH_CORE
set -u
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
printf 'a 268435456 10\nf 10\n' >"$dir/one.trace"
check() { # creates expected, options...
	want=$1
	shift
	got=$("$bench" --replay "$dir/one.trace" "$@" | sed -n 's/.*driver: \([0-9]*\) creates.*/\1/p')
	if [ "$got" != "$want" ]; then
		echo "FAIL: --replay with '$*': ${got:-no} creates, expected $want"
		fail=1
	fi
}
check 1
check 4 --max-handle 64
check 4 --max-handle 64 --sync-ahead 16
check 4 --sync-ahead 16 --max-handle 64
[ $fail -eq 0 ] && echo "replay options: ok"
exit $fail
