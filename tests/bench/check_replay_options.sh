#!/bin/sh
# bench_core --replay takes the core's options last, in any order: --max-handle MIB makes a
# 256 MiB allocation of 64 MiB handles (4 created, against 1 without it), whether it comes
# before or after --sync-ahead; --edge-cut-min decides how a freed handle is cut; --uncut-scan
# whether a request looks for a block it need not cut; the heap's counts line says how many
# handles were cut and how many cuts were avoided.
# Usage: check_replay_options.sh BENCH_CORE
set -u
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
creates='s/.*driver: \([0-9]*\) creates.*/\1/p'
counts='s/.*heap: \([0-9]*\) handles moved, \([0-9]*\) large handles cut (\([0-9]*\) cuts avoided), \([0-9]*\) free.*/\1 \2 \3 \4/p'
expect() { # what the sed script $2 reads in the output, expected, trace, options...
	want=$1 script=$2 trace=$3
	shift 3
	got=$("$bench" --replay "$dir/$trace" "$@" | sed -n "$script")
	if [ "$got" != "$want" ]; then
		printf "FAIL: --replay of %s with '%s': got '%s', expected '%s' (read by %s)\n" \
			"$trace" "$*" "${got:-nothing}" "$want" "$script"
		fail=1
	fi
}
printf 'a 268435456 10\nf 10\n' >"$dir/one.trace"
expect 1 "$creates" one.trace
expect 4 "$creates" one.trace --max-handle 64
expect 4 "$creates" one.trace --max-handle 64 --sync-ahead 16
expect 4 "$creates" one.trace --sync-ahead 16 --max-handle 64
# 100 MiB out of the freed 256 MiB (four 64 MiB handles): the second handle cut at its edge
# (36 + 28 MiB: 4 + 2 creates), or as 32 pieces (4 + 32) below --edge-cut-min.
printf 'a 268435456 10\nf 10\na 104857600 11\nf 11\n' >"$dir/cut.trace"
expect 36 "$creates" cut.trace --max-handle 64
expect 6 "$creates" cut.trace --max-handle 64 --edge-cut-min 1
expect 36 "$creates" cut.trace --max-handle 64 --edge-cut-min 200
expect 6 "$creates" cut.trace --max-handle 64 --edge-cut-min 100 --sync-ahead 16
# The heap's own counts (moved, cut, avoided, given back): one large handle cut, however it is
# cut; none without a cut.
expect "0 1 0 0" "$counts" cut.trace --max-handle 64
expect "0 1 0 0" "$counts" cut.trace --max-handle 64 --edge-cut-min 1
expect "0 0 0 0" "$counts" one.trace
# 40 MiB when a freed 64 MiB handle (the tightest fit) and 90 MiB of freed 2 MiB pieces are free,
# kept apart by a live piece: it takes the pieces and cuts nothing (47 creates in all), unless
# --uncut-scan 0 (the handle cut into 32 pieces: 79).
printf 'a 67108864 1\na 2097152 2\na 31457280 3\na 31457280 4\na 31457280 5\nf 1\nf 3\nf 4\nf 5\na 41943040 6\nf 6\nf 2\n' \
	>"$dir/uncut.trace"
expect "0 0 1 0" "$counts" uncut.trace
expect 47 "$creates" uncut.trace --one-stream
expect "0 1 0 0" "$counts" uncut.trace --uncut-scan 0
expect 79 "$creates" uncut.trace --uncut-scan 0 --sync-ahead 16
[ $fail -eq 0 ] && echo "replay options: ok"
exit $fail
