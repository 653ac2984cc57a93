#!/bin/sh
# bench_core --replay takes the core's options last, in any order: --max-handle MIB makes a
# 256 MiB allocation of 64 MiB handles (4 created, against 1 without it), whether it comes
# before or after --sync-ahead; --edge-cut-min decides how a freed handle is cut; the heap's
# counts line says how many handles were cut.
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
# 100 MiB out of the freed 256 MiB (four 64 MiB handles): the second handle cut at its edge
# (36 + 28 MiB: 4 + 2 creates), or as 32 pieces (4 + 32) below --edge-cut-min.
printf 'a 268435456 10\nf 10\na 104857600 11\nf 11\n' >"$dir/cut.trace"
cut() { # creates expected, options...
	want=$1
	shift
	got=$("$bench" --replay "$dir/cut.trace" --max-handle 64 "$@" |
		sed -n 's/.*driver: \([0-9]*\) creates.*/\1/p')
	if [ "$got" != "$want" ]; then
		echo "FAIL: --replay of a cut with '$*': ${got:-no} creates, expected $want"
		fail=1
	fi
}
cut 36
cut 6 --edge-cut-min 1
cut 36 --edge-cut-min 200
cut 6 --edge-cut-min 100 --sync-ahead 16
# The heap's own counts: one large handle cut, however it is cut; none without a cut.
counts() { # expected "moved cut given-back", trace, options...
	want=$1 trace=$2
	shift 2
	got=$("$bench" --replay "$dir/$trace" "$@" |
		sed -n 's/.*heap: \([0-9]*\) handles moved, \([0-9]*\) large handles cut, \([0-9]*\) free.*/\1 \2 \3/p')
	if [ "$got" != "$want" ]; then
		echo "FAIL: --replay of $trace with '$*': heap counts '${got:-none}', expected '$want'"
		fail=1
	fi
}
counts "0 1 0" cut.trace --max-handle 64
counts "0 1 0" cut.trace --max-handle 64 --edge-cut-min 1
counts "0 0 0" one.trace
[ $fail -eq 0 ] && echo "replay options: ok"
exit $fail
