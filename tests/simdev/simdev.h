/* simdev: the simulated CUDA/Ascend device that CI runs on (see tests/simdev/README.md).
 * Test programs include this for the few things a real driver has no API for. */
#ifndef SIMDEV_H
#define SIMDEV_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernels. simdev cannot run GPU code, so a CUfunction passed to cuLaunchKernel(_ptsz) is really
 * a pointer to a host function of this type, cast to CUfunction. It runs on the stream's worker
 * thread in stream order and receives kernelParams as given: the array and what it points to
 * must stay valid until the kernel has run (synchronize before they go out of scope). Grid, block
 * and shared-memory sizes and `extra` are ignored. */
typedef void (*simdev_kernel_fn)(void **kernelParams);

#define SIMDEV_KERNEL(fn) ((CUfunction)(void *)(simdev_kernel_fn)(fn))

/* Whether device `dev` may touch [ptr, ptr+size) of device memory (VMM mappings: the access set
 * with cuMemSetAccess; native allocations: the owner, or peers with peer access enabled).
 * Returns 0 (CUDA_SUCCESS) or 700 (CUDA_ERROR_ILLEGAL_ADDRESS); host memory is always allowed.
 * A kernel calls it with simdev_current_device() to behave like a GPU that faults. */
int simdev_check_access(int dev, const void *ptr, size_t size);

/* Inside a host function or kernel run by a stream worker: the device of that stream; -1 on any
 * other thread. */
int simdev_current_device(void);

/* Physical device memory of this process (all devices; in a SIMDEV_SHARED group, what it holds
 * alone or shared), counted as the driver counts it: a handle from its creation until it is
 * released and no mapping uses it, a native allocation rounded up to 2 MiB. *peak: the most held
 * at any instant (inside a call too) since the process started or the last reset, as
 * SIMDEV_STATS's peak_bytes. A program that may run on the real driver finds these with dlsym. */
void simdev_memory_bytes(size_t *live, size_t *peak);
/* The peak starts again from what is held now. */
void simdev_memory_peak_reset(void);

/* Device work this process has queued or captured so far (kernels, host functions, copies,
 * memsets, event records and waits, stream-ordered frees, each op of a graph launch), counted
 * once it is queued, so that a synchronization that begins afterwards waits for it: the count
 * the shim keeps of the program's submitting calls (vmm_backend.submitted), for tests of the
 * core that run without the shim. Read with acquire order. */
unsigned long long simdev_submissions(void);

#ifdef __cplusplus
}
#endif

#endif /* SIMDEV_H */
