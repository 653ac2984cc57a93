"""pytest fixtures for the vmmshim package on simdev. tests/python/run.sh starts pytest with
LD_PRELOAD=libvmmshim.so and simdev's libcuda.so.1 on LD_LIBRARY_PATH, and the package from
python/ on PYTHONPATH (or installed: VMMSHIM_PYTHON_INSTALLED)."""
import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import simcuda  # noqa: E402
import vmmshim  # noqa: E402

MIB = 1 << 20


def pytest_configure(config):
    want = os.environ.get("VMMSHIM_TEST_PACKAGE")
    if want and not os.path.abspath(vmmshim.__file__).startswith(os.path.abspath(want) + os.sep):
        pytest.exit(f"testing {vmmshim.__file__}, not the package in {want}", returncode=2)
    if not vmmshim.available():
        pytest.exit("the tests run under the shim: tests/python/run.sh BUILD_DIR "
                    "(LD_PRELOAD=libvmmshim.so, simdev on LD_LIBRARY_PATH)", returncode=2)


@pytest.fixture(scope="session")
def dev():
    """simdev's device 0 through libcuda.so.1, its context current on the main thread."""
    return simcuda.Device()


@pytest.fixture(autouse=True)
def awake_and_untagged(dev):
    """Each test starts and ends with the process awake and the thread untagged."""
    dev.make_current()
    yield
    vmmshim.set_tag(None)
    try:
        vmmshim.wake()
    except vmmshim.InvalidError:
        pass  # nothing managed yet


@pytest.fixture
def pattern():
    """pattern(n, seed): n reproducible bytes, different per seed."""
    def make(n, seed=1):
        return random.Random(seed).randbytes(n)
    return make
