/* (h) Another interposer, written the usual way: it wraps cudaMalloc and cuMemAlloc_v2 and finds
 * the next definition with dlsym(RTLD_NEXT, ...). Preloaded beside the shim, in either order, its
 * wrappers must reach the next library (never themselves) and the program must still work. It
 * reports its counts at exit on stderr. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>

static atomic_int runtime_calls, driver_calls;

cudaError_t cudaMalloc(void **p, size_t n)
{
	static cudaError_t (*next)(void **, size_t);

	if (!next)
		next = (cudaError_t (*)(void **, size_t))dlsym(RTLD_NEXT, "cudaMalloc");
	if (!next || (void *)next == (void *)cudaMalloc)
		return cudaErrorUnknown; /* it found itself: RTLD_NEXT was not relative to us */
	atomic_fetch_add(&runtime_calls, 1);
	return next(p, n);
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	static CUresult (*next)(CUdeviceptr *, size_t);

	if (!next)
		next = (CUresult (*)(CUdeviceptr *, size_t))dlsym(RTLD_NEXT, "cuMemAlloc_v2");
	if (!next || (void *)next == (void *)cuMemAlloc_v2)
		return CUDA_ERROR_UNKNOWN;
	atomic_fetch_add(&driver_calls, 1);
	return next(p, n);
}

__attribute__((destructor)) static void report(void)
{
	fprintf(stderr, "libother: cudaMalloc %d cuMemAlloc_v2 %d\n", atomic_load(&runtime_calls),
		atomic_load(&driver_calls));
}
