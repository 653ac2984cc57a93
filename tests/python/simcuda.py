"""A tiny CUDA driver client over ctypes, for the Python tests on simdev (tests/simdev): allocate,
write, read and free device memory through libcuda.so.1 the way a CUDA program does, so that the
preloaded shim serves the allocations (its dlsym routes these lookups to its own functions).
On a GPU machine the same calls reach the real driver."""
import ctypes

CUDA_SUCCESS = 0


class CudaError(RuntimeError):
    pass


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):
    """CUmemAllocationProp: pinned device memory on one device."""
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class Device:
    def __init__(self, ordinal=0):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ordinal = ordinal
        self._call("cuInit", 0)
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ordinal)
        self.ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self.ctx), dev)
        self.make_current()

    def _call(self, name, *args):
        rc = getattr(self.lib, name)(*args)
        if rc != CUDA_SUCCESS:
            raise CudaError(f"{name} failed: CUresult {rc}")

    def make_current(self):
        """A thread's first call: the context is per thread."""
        self._call("cuCtxSetCurrent", self.ctx)

    def alloc(self, size):
        ptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(size))
        return ptr.value

    def free(self, ptr):
        self._call("cuMemFree_v2", ctypes.c_uint64(ptr))

    def write(self, ptr, data):
        buf = ctypes.create_string_buffer(bytes(data), len(data))
        self._call("cuMemcpyHtoD_v2", ctypes.c_uint64(ptr), buf, ctypes.c_size_t(len(data)))

    def read(self, ptr, size):
        buf = ctypes.create_string_buffer(size)
        self._call("cuMemcpyDtoH_v2", buf, ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        return buf.raw

    def create_physical(self, size):
        """A physical handle of size bytes (cuMemCreate, a multiple of 2 MiB), not mapped: memory
        the program holds itself, outside the shim's heap (the shim only records it)."""
        prop = _AllocationProp(type=1, location=_Location(type=1, id=self.ordinal))
        handle = ctypes.c_uint64()
        self._call("cuMemCreate", ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop),
                   ctypes.c_ulonglong(0))
        return handle.value

    def release_physical(self, handle):
        self._call("cuMemRelease", ctypes.c_uint64(handle))

    def mem_info(self):
        """(free, total) bytes as the driver answers (through the shim)."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self._call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value
