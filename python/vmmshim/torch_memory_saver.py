"""A facade with torch_memory_saver's shape, over vmmshim, so that code written for it switches by
changing one import:

    from torch_memory_saver import torch_memory_saver            # before
    from vmmshim.torch_memory_saver import torch_memory_saver    # after

    with torch_memory_saver.region(tag="kv_cache"):              # contents dropped at pause
        kv = torch.empty(...)
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        w = torch.empty(...)                                     # contents kept at pause
    torch_memory_saver.pause()                                   # every region's memory
    torch_memory_saver.resume()

The program runs under the shim (`vmmctl run -- python3 ...`) instead of torch_memory_saver's
preload library. How it maps:
- A region is a vmmshim tag: `tag` for regions without CPU backup, `tag+cpu` for regions with
  it, so that pause() can drop the one and copy the other (vmmctl status shows these names).
- pause(tag) / resume(tag) sleep and wake those tags (None: every tag a region used). Memory
  outside regions is not touched, as in torch_memory_saver.
- With PyTorch imported, each region (tag, backup, device) allocates from its own
  torch.cuda.MemPool, as torch_memory_saver's torch mode does: a thread's tag alone cannot stop
  PyTorch's cache from handing an untagged cached block to a tensor inside a region.
Differences (also in the README): pausing twice or resuming twice is harmless (torch_memory_saver
exits); errors raise vmmshim exceptions with the shim's message; host backups are pinned once
and kept across cycles by the shim (retain_cpu_backup is always on); no disk backup, no
get_cpu_backup, no memory_margin_bytes (accepted and ignored, with a warning); hook_mode has no
effect (the shim intercepts every allocation path). An in-process pause does not hold the
program's device work: do not touch paused memory, as with torch_memory_saver.

Without the shim loaded, `enabled` is False and regions, pause and resume do nothing (one
warning says so), as torch_memory_saver's calls do when its hooks are not active: the same
program runs natively, only without releasing memory.
"""
import contextlib
import sys
import threading
import warnings

import vmmshim

BACKUP_SUFFIX = "+cpu"


def shim_tag(tag, enable_cpu_backup):
    """The vmmshim tag of a region."""
    if not isinstance(tag, str) or not tag:
        raise TypeError("a region's tag is a non-empty str")
    return tag + BACKUP_SUFFIX if enable_cpu_backup else tag


def _torch_cuda():
    """torch.cuda when the program uses PyTorch with CUDA and memory pools, else None. Only a
    torch the program imported itself is used: a region never imports torch."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        if cuda is None or not cuda.is_available():
            return None
    except Exception:  # noqa: BLE001 - a broken CUDA setup: no pools, as without torch
        return None
    if not (hasattr(cuda, "MemPool") and hasattr(cuda, "use_mem_pool")):
        warnings.warn("this PyTorch has no torch.cuda.MemPool: regions share PyTorch's cache, "
                      "so a cached untagged block may be reused inside a region", stacklevel=3)
        return None
    return cuda


class TorchMemorySaver:
    """torch_memory_saver's object, over vmmshim. Use the module's `torch_memory_saver`."""

    def __init__(self):
        self._lock = threading.Lock()
        self._regions = {}   # tms tag -> {enable_cpu_backup, ...} seen
        self._pools = {}     # (shim tag, device) -> torch.cuda.MemPool
        self._hook_mode = "preload"
        self._warned_off = False

    @property
    def enabled(self):
        """Whether pause() can release anything: the shim is loaded in this process."""
        return vmmshim.available()

    def _off(self):
        """True (after one warning) when the shim is not loaded and calls must do nothing."""
        if vmmshim.available():
            return False
        if not self._warned_off:
            self._warned_off = True
            warnings.warn("libvmmshim.so is not loaded: torch_memory_saver regions, pause and "
                          "resume do nothing (run the program under `vmmctl run -- ...`)",
                          stacklevel=4)
        return True

    # -- regions --

    def _pool(self, cuda, key):
        device = cuda.current_device()
        with self._lock:
            pool = self._pools.get((key, device))
            if pool is None:
                pool = self._pools[(key, device)] = cuda.MemPool()
        return pool, device

    @contextlib.contextmanager
    def region(self, tag="default", enable_cpu_backup=False, enable_disk_backup=False,
               cpu_backup_backend=None):
        """Allocations inside belong to this region: dropped at pause, or copied to host memory
        and back with enable_cpu_backup=True."""
        if enable_disk_backup:
            raise NotImplementedError("vmmshim has no disk backup: use enable_cpu_backup=True")
        del cpu_backup_backend  # the shim's pinned, reused backup serves every backend choice
        name = shim_tag(tag, enable_cpu_backup)
        if self._off():
            yield
            return
        with self._lock:
            self._regions.setdefault(tag, set()).add(bool(enable_cpu_backup))
        with contextlib.ExitStack() as stack:
            stack.enter_context(vmmshim.tag(name))
            cuda = _torch_cuda()
            if cuda is not None:
                pool, device = self._pool(cuda, name)
                stack.enter_context(cuda.use_mem_pool(pool, device=device))
            yield

    @contextlib.contextmanager
    def disable(self):
        """Allocations inside belong to no region (and, with PyTorch, to a pool of their own)."""
        if self._off():
            yield
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(vmmshim.tag(None))
            cuda = _torch_cuda()
            if cuda is not None:
                pool, device = self._pool(cuda, None)
                stack.enter_context(cuda.use_mem_pool(pool, device=device))
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global",
                   tag="default", enable_cpu_backup=False):
        """torch.cuda.graph(...) captured inside region(tag). The graph's memory pauses only as
        far as the shim serves it: memory allocated while a stream is captured stays the
        driver's (vmmshim(7))."""
        torch = sys.modules.get("torch")
        if torch is None:
            raise RuntimeError("cuda_graph needs PyTorch (import torch first)")
        with self.region(tag, enable_cpu_backup):
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                yield

    # -- pause / resume --

    def _targets(self, tag):
        with self._lock:
            seen = dict(self._regions)
        if tag is not None:
            seen = {tag: seen.get(tag, set())}
        return [(shim_tag(t, backup), backup) for t, kinds in seen.items()
                for backup in sorted(kinds)]

    def pause(self, tag=None):
        """Release the memory of tag's regions (None: every region): copied to host memory for
        regions with enable_cpu_backup, dropped otherwise. Addresses stay valid."""
        if self._off():
            return
        for name, backup in self._targets(tag):
            vmmshim.sleep(name, discard=not backup)

    def resume(self, tag=None):
        """Bring tag's regions back (None: all) at the same addresses."""
        if self._off():
            return
        for name, _ in self._targets(tag):
            vmmshim.wake(name)

    # -- torch_memory_saver's settings, accepted for compatibility --

    @property
    def hook_mode(self):
        return self._hook_mode

    @hook_mode.setter
    def hook_mode(self, mode):
        if mode not in ("preload", "torch"):
            raise ValueError(f"hook_mode is 'preload' or 'torch', not {mode!r}")
        self._hook_mode = mode  # no effect: the shim intercepts every allocation path

    @property
    def memory_margin_bytes(self):
        return 0

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value):
        warnings.warn("vmmshim ignores memory_margin_bytes: an allocation fails only when the "
                      "device is out of memory", stacklevel=2)

    @property
    def retain_cpu_backup(self):
        return True

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        if not value:
            warnings.warn("vmmshim always keeps its pinned host backups for the next pause",
                          stacklevel=2)

    def get_cpu_backup(self, tensor, zero_copy=False):
        raise NotImplementedError("vmmshim keeps host copies inside the shim; read the tensor "
                                  "after resume()")

    def set_disk_backup_dir(self, path):
        raise NotImplementedError("vmmshim has no disk backup")


torch_memory_saver = TorchMemorySaver()
