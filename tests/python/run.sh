#!/bin/sh
# The Python package's tests (pytest, suite 'python'), on simdev, under the shim:
#   run.sh BUILD_DIR [--installed]
# --installed: first `pip install --no-build-isolation --no-index --target` the package from
# python/ into a temporary folder (offline, with Debian's python3-setuptools and python3-wheel)
# and test that copy instead of the source tree.
# The interpreter is $VMMSHIM_PYTHON, else the first of /usr/bin/python3 and python3 that has
# pytest (Debian's python3-pytest, installed by scripts/setup.sh); none: skipped (77).
set -u
build=$(cd "$1" && pwd)
shift
installed=0
if [ "${1:-}" = "--installed" ]; then installed=1; shift; fi
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=""
for p in ${VMMSHIM_PYTHON:-} /usr/bin/python3 python3; do
	if "$p" -c "import pytest" 2>/dev/null; then python=$p; break; fi
done
if [ -z "$python" ]; then
	echo "no python3 with pytest (apt-get install python3-pytest): skipped"
	exit 77
fi
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
pkg=$root/python
if [ $installed = 1 ]; then
	# From a copy: setuptools builds inside the folder it is given (build/, *.egg-info).
	cp -r "$root/python" "$t/src"
	if ! "$python" -m pip install --no-build-isolation --no-index --no-deps --quiet \
		--target "$t/site" "$t/src" >"$t/pip.log" 2>&1; then
		cat "$t/pip.log"
		echo "FAIL: pip install --no-build-isolation ./python"
		exit 1
	fi
	pkg=$t/site
	[ -f "$pkg/vmmshim/torch_memory_saver.py" ] || { echo "FAIL: not installed"; exit 1; }
fi
export PYTHONPATH="$pkg" VMMSHIM_TEST_PACKAGE="$pkg" LD_LIBRARY_PATH="$build/tests/simdev" \
	SIMDEV_MEMORY=512M VMMSHIM_RUN_DIR="$t/run" VMMSHIM_LOG=error PYTHONDONTWRITEBYTECODE=1
export LD_PRELOAD="$build/shim/libvmmshim.so"
cd "$t" && exec "$python" -m pytest -q -p no:cacheprovider --rootdir "$here" "$here" "$@"
