"""The C API of libvmmshim.so (shim/vmmshim.h) through ctypes, found in the running process.

The shim must already be in the process: preloaded (LD_PRELOAD=libvmmshim.so, or
`vmmctl run -- python3 ...`) or linked. Loading it late with dlopen would be useless: it could
not interpose the allocations the process makes, so this module only looks, and says how to start
the program when it is not there.
"""
import ctypes
import threading

TAG_MAX = 32  # bytes with the terminating NUL (VMMSHIM_TAG_MAX)

# enum vmmshim_result
OK = 0
E_INVALID = 1
E_OOM = 2
E_HOST_OOM = 3
E_NOT_OURS = 4
E_DRIVER = 5
E_ALREADY = 6
E_BUSY = 7
E_UNSUPPORTED = 8

STATS_FIELDS = ("live_bytes", "live_count", "mapped_bytes", "cached_bytes", "reserved_bytes",
                "asleep_bytes", "host_backup_bytes", "peak_live_bytes", "alloc_calls",
                "free_calls")


class CStats(ctypes.Structure):
    """vmmshim_stats_t: ten uint64_t, in this order."""
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]


# enum vmmshim_phase, by number
PHASES = ("none", "preparing", "copying", "rolling_back", "done")


class CProgress(ctypes.Structure):
    """vmmshim_progress_t."""
    _fields_ = [("bytes_done", ctypes.c_uint64), ("bytes_total", ctypes.c_uint64),
                ("seconds", ctypes.c_double), ("gbps", ctypes.c_double),
                ("sleeping", ctypes.c_int), ("phase", ctypes.c_int)]


NOT_LOADED = ("libvmmshim.so is not loaded in this process. Start the program under the shim: "
              "`vmmctl run -- python3 ...`, or LD_PRELOAD=/path/to/libvmmshim.so python3 ... "
              "(loading it after start would not catch the program's allocations)")

_lock = threading.Lock()
_lib = None


def _prototype(lib):
    c_char_p, c_int = ctypes.c_char_p, ctypes.c_int
    for name, restype, argtypes in (
            ("vmmshim_set_tag", c_int, [c_char_p]),
            ("vmmshim_get_tag", c_char_p, []),
            ("vmmshim_sleep_device", c_int, [c_char_p, c_int, c_int]),
            ("vmmshim_wake_device", c_int, [c_char_p, c_int]),
            ("vmmshim_stats", c_int, [c_char_p, c_int, ctypes.POINTER(CStats)]),
            ("vmmshim_last_error", c_char_p, [])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    # Newer than the rest: a shim without it still serves everything else.
    if hasattr(lib, "vmmshim_get_progress"):
        lib.vmmshim_get_progress.restype = c_int
        lib.vmmshim_get_progress.argtypes = [ctypes.POINTER(CProgress)]


def find():
    """The process's libvmmshim.so (a ctypes.CDLL), or None when the shim is not loaded."""
    global _lib
    with _lock:
        if _lib is None:
            try:
                proc = ctypes.CDLL(None)  # the process's global scope: preloaded and linked
            except OSError:
                return None
            if not hasattr(proc, "vmmshim_sleep_device"):
                return None
            _prototype(proc)
            _lib = proc
        return _lib
