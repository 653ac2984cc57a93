#!/usr/bin/env bash
# A short hash of the sources that build libvmmshim.so and vmmctl (core, shim, tools, meson
# files), read from the files themselves, not from git: gpu-check prints it so that a run can be
# tied to a tree even where the copy's .git lags behind its files. Compare with this script's
# output in a checkout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
{
	cat meson.build meson_options.txt
	find core shim tools -type f \( -name '*.c' -o -name '*.h' -o -name 'meson.build' \) -print0 |
		LC_ALL=C sort -z | xargs -0 cat
} | sha1sum | cut -c1-12
