"""vmmshim from Python: tag what a thread allocates, put tags to sleep and wake them, read the
shim's statistics.

The program must run under the shim (`vmmctl run -- python3 train.py`, or
LD_PRELOAD=/path/to/libvmmshim.so); this package finds the library in the process and never
loads it. Pure Python over ctypes: works with any framework (PyTorch, JAX, CuPy, raw ctypes).

    import vmmshim
    with vmmshim.tag("kv"):                  # this thread's allocations belong to "kv"
        kv = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    vmmshim.sleep("kv", discard=True)        # give the memory back, contents dropped
    vmmshim.wake("kv")                       # the same addresses, memory back
    print(vmmshim.stats("kv").mapped_bytes)

An in-process sleep does not hold the program's device work: the program must not touch a sleeping
tag's memory until it wakes it (a sleep from `vmmctl` does hold the work). Tags are per thread.
A caching allocator above the shim (PyTorch's) may reuse an untagged cached block inside `tag()`;
the torch_memory_saver facade (vmmshim.torch_memory_saver) gives each region its own torch memory
pool to prevent that.
"""
import contextlib
import dataclasses

from . import _native

__version__ = "0.1.0"

__all__ = ["tag", "set_tag", "get_tag", "sleep", "wake", "stats", "Stats", "progress",
           "Progress", "available",
           "VmmshimError", "NotUnderShimError", "InvalidError", "DeviceOutOfMemoryError",
           "HostOutOfMemoryError", "DriverError", "BusyError", "UnsupportedError"]


class VmmshimError(RuntimeError):
    """A call the shim refused or that failed: .code is the shim's result number (None when the
    shim is not loaded), .message the shim's own message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class NotUnderShimError(VmmshimError):
    """libvmmshim.so is not in this process."""


class InvalidError(VmmshimError, ValueError):
    """A bad argument, or no device memory managed by the shim yet."""


class DeviceOutOfMemoryError(VmmshimError, MemoryError):
    """Wake: not enough device memory. The tag stays asleep with its host copy; retry later."""


class HostOutOfMemoryError(VmmshimError, MemoryError):
    """Sleep: no host memory for the copy. Nothing changed."""


class DriverError(VmmshimError):
    """The driver failed a call; the shim rolled back."""


class BusyError(VmmshimError):
    """Device calls in flight did not drain in time, or the process is exiting."""


class UnsupportedError(VmmshimError):
    """Not possible here (e.g. in a forked child)."""


_ERRORS = {
    _native.E_INVALID: InvalidError,
    _native.E_NOT_OURS: InvalidError,
    _native.E_OOM: DeviceOutOfMemoryError,
    _native.E_HOST_OOM: HostOutOfMemoryError,
    _native.E_DRIVER: DriverError,
    _native.E_BUSY: BusyError,
    _native.E_UNSUPPORTED: UnsupportedError,
}


@dataclasses.dataclass(frozen=True)
class Stats:
    """The shim's statistics of a tag (or all) on a device (or all), as vmmshim_stats_t.
    Bytes unless said otherwise."""
    live_bytes: int          # sizes asked for by live allocations
    live_count: int
    mapped_bytes: int        # physical memory mapped (live + cached)
    cached_bytes: int        # mapped but free, kept for reuse
    reserved_bytes: int      # virtual address space reserved
    asleep_bytes: int        # released by sleep, re-created at wake
    host_backup_bytes: int   # host memory holding sleeping contents
    peak_live_bytes: int
    alloc_calls: int
    free_calls: int


@dataclasses.dataclass(frozen=True)
class Progress:
    """The sleep or wake in progress in this process (from any thread, or from vmmctl)."""
    operation: str           # "sleep" or "wake"
    phase: str               # "preparing", "copying" or "rolling_back"
    bytes_done: int          # handed to the copy streams so far
    bytes_total: int         # to copy: an estimate until the copies start; >= bytes_done
    seconds: float           # since it began
    gbps: float              # copy rate so far (10**9 bytes/s); 0 before copying


def available():
    """Whether libvmmshim.so is loaded in this process."""
    return _native.find() is not None


def _lib():
    lib = _native.find()
    if lib is None:
        raise NotUnderShimError(None, _native.NOT_LOADED)
    return lib


def _check(lib, rc, allow_already=False):
    """rc as the API promises: True for done, False for already so; an exception otherwise."""
    if rc == _native.OK:
        return True
    if rc == _native.E_ALREADY and allow_already:
        return False
    message = (lib.vmmshim_last_error() or b"").decode(errors="replace")
    raise _ERRORS.get(rc, VmmshimError)(rc, message or f"vmmshim error {rc}")


def _tag_arg(name, none_ok=True):
    if name is None and none_ok:
        return None
    if not isinstance(name, str):
        raise TypeError(f"a tag is a str, not {type(name).__name__}")
    return name.encode("utf-8")  # the shim says what it refuses, in its own words


def _device_arg(device):
    if device is None:
        return -1
    if isinstance(device, bool) or not isinstance(device, int):
        raise TypeError(f"a device is an int or None, not {type(device).__name__}")
    return device


def set_tag(name):
    """The tag of this thread's next allocations (None or "" = "default"): 1 to 31 printable
    ASCII characters."""
    lib = _lib()
    _check(lib, lib.vmmshim_set_tag(_tag_arg(name) if name else None))


def get_tag():
    """This thread's tag ("default" when none was set)."""
    return _lib().vmmshim_get_tag().decode()


@contextlib.contextmanager
def tag(name):
    """`with vmmshim.tag("kv"):` this thread's allocations inside belong to tag `name`; the
    previous tag comes back at the end (nesting works)."""
    previous = get_tag()
    set_tag(name)
    try:
        yield name
    finally:
        set_tag(previous)


def sleep(tag=None, discard=False, device=None):
    """Give a tag's device memory back to the driver (tag None: every tag, and the program's own
    VMM mappings), on one device or all (device None). Contents are copied to host memory, or
    dropped with discard=True. Addresses stay valid. Returns True, or False when it was asleep
    already (nothing changed)."""
    lib = _lib()
    return _check(lib, lib.vmmshim_sleep_device(_tag_arg(tag), _device_arg(device),
                                                 1 if discard else 0), allow_already=True)


def wake(tag=None, device=None):
    """Re-create a sleeping tag's memory at the same addresses and copy its contents back.
    Returns True, or False when it was awake already. DeviceOutOfMemoryError leaves it asleep
    with its host copy."""
    lib = _lib()
    return _check(lib, lib.vmmshim_wake_device(_tag_arg(tag), _device_arg(device)),
                  allow_already=True)


def stats(tag=None, device=None):
    """Statistics of a tag (None: all) on a device (None: all), as a Stats."""
    lib = _lib()
    out = _native.CStats()
    _check(lib, lib.vmmshim_stats(_tag_arg(tag), _device_arg(device), out))
    return Stats(*(getattr(out, f) for f in _native.STATS_FIELDS))


def progress():
    """The sleep or wake running now, as a Progress, or None when none runs. Poll it from another
    thread (a sleep or wake returns only when it is done)."""
    lib = _lib()
    if not hasattr(lib, "vmmshim_get_progress"):
        raise UnsupportedError(_native.E_UNSUPPORTED,
                               "this libvmmshim.so has no progress API (older than the package)")
    out = _native.CProgress()
    _check(lib, lib.vmmshim_get_progress(out))
    phase = _native.PHASES[out.phase] if 0 <= out.phase < len(_native.PHASES) else "none"
    if phase in ("none", "done"):
        return None
    return Progress("sleep" if out.sleeping else "wake", phase, out.bytes_done, out.bytes_total,
                    out.seconds, out.gbps)
