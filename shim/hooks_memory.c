/* Device allocations served by the core: cuMemAlloc_v2 / cuMemFree_v2, cuMemAllocPitch_v2 and the
 * stream-ordered family (with their _ptsz forms). What the core cannot or must not serve goes to
 * the driver and is counted as passed through:
 * - no current context, or the shim disabled: the driver answers as it would without us;
 * - a stream being captured into a graph: graph memory nodes must stay the driver's;
 * - a custom memory pool (it may carry export or access settings VMM memory would not honour);
 * - a failure of the core (logged), so that the program still gets memory when the driver has it.
 * Frees of pointers the core does not know go to the driver. While the program's work all goes
 * to one stream, cuMemAlloc_v2 and cuMemFree_v2 are ordered on it (lone_stream.h). */
#include <stdint.h>

#include "../core/log.h"
#include "alloc_trace.h"
#include "hooks_common.h"
#include "lifecycle.h"
#include "lone_stream.h"
#include "share/share.h"
#include "submit_count.h"

DRIVER_EXTRA_SLOT(cuDeviceGetAttribute);
DRIVER_EXTRA_SLOT(cuDeviceGetDefaultMemPool);
DRIVER_EXTRA_SLOT(cuDeviceGetMemPool);

/* Pitch granularity of pitched allocations (what the driver reports on current GPUs). */
#define PITCH_ALIGN 512u

/* The end of every allocation hook: out of the gate, then what a release of a primary context
 * left for this allocation's return (hooks_common.h). */
static void alloc_leave(void)
{
	gate_leave();
	context_release_after_alloc();
}

static CUresult pass_alloc(CUresult r, CUdeviceptr *dptr, size_t bytes)
{
	if (r == CUDA_SUCCESS && dptr && *dptr)
		shim_count_passthrough(PASS_DEVICE, bytes);
	return r;
}

/* Should the core serve a device allocation of `bytes`? Fills *rt and *dev when it should. */
static bool want_core(CUdeviceptr *dptr, size_t bytes, shim_runtime **rt, int *dev)
{
	if (!dptr || bytes == 0 || !hook_current_device(dev))
		return false; /* the driver's own error; no runtime is created for it */
	*rt = shim_runtime_cuda();
	return *rt && (*rt)->side[SHIM_CUDA].core;
}

static void log_fallback(const char *fn, size_t bytes, const vmm_error *err)
{
	vmm_log(err->status == VMM_E_OOM ? VMM_LOG_INFO : VMM_LOG_WARN,
		"%s(%zu): the heap could not serve it (%s); asking the driver", fn, bytes,
		err->msg[0] ? err->msg : vmm_status_name(err->status));
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	shim_runtime *rt;
	vmm_devptr p;
	vmm_error err;
	CUresult r;
	int dev;

	gate_enter();
	vmm_error_clear(&err);
	if (want_core(dptr, bytesize, &rt, &dev)) {
		vmm_core *core = rt->side[SHIM_CUDA].core;
		vmm_stream lone = NULL;
		bool ordered = lone_stream_key(&lone), reused = false;

		/* share_malloc: vmm_malloc, and with VMMSHIM_SHARE=1 room made by sleeping
		 * peers. While all work goes to one stream, a block freed in its order may come
		 * back at once (other streams must then wait for its former owner). */
		if (!(ordered ? share_malloc_on_stream(core, dev, bytesize, shim_thread_tag(), lone,
						       &p, &reused, &err) :
				share_malloc(core, dev, bytesize, 0, shim_thread_tag(), &p, &err))) {
			if (reused)
				lone_stream_reused(lone);
			*dptr = (CUdeviceptr)p;
			alloc_trace_malloc(bytesize, p, ordered, (uint64_t)(uintptr_t)lone);
			alloc_leave();
			return CUDA_SUCCESS;
		}
		log_fallback("cuMemAlloc_v2", bytesize, &err);
	}
	r = pass_alloc(CALL_REAL(cuMemAlloc_v2, (dptr, bytesize)), dptr, bytesize);
	alloc_leave();
	return r;
}

/* Free through the core when ptr is one of its allocations; *done false when it is not. Ordered
 * on `order` when on_stream (reusable at once by allocations in that order), else quarantined
 * until a device synchronization. */
static CUresult core_free(CUdeviceptr ptr, bool *done, bool on_stream, vmm_stream order)
{
	vmm_core *core = hook_cuda_core();
	vmm_alloc_info info;
	vmm_error err;
	vmm_status st;

	*done = false;
	if (!core || !ptr)
		return CUDA_SUCCESS;
	vmm_error_clear(&err);
	if (on_stream)
		st = vmm_free_on_stream(core, (vmm_devptr)ptr, order, &err);
	else
		st = vmm_free(core, (vmm_devptr)ptr, &err);
	if (st == VMM_E_NOT_OURS) {
		if (!vmm_lookup(core, (vmm_devptr)ptr, &info))
			return CUDA_SUCCESS; /* not ours at all: the driver's */
		*done = true;          /* inside one of ours but not its start */
		return CUDA_ERROR_INVALID_VALUE;
	}
	*done = true;
	if (st)
		vmm_log(VMM_LOG_WARN, "free of 0x%llx failed: %s", (unsigned long long)ptr,
			err.msg);
	else {
		alloc_trace_free(ptr, on_stream);
		share_note_freed(); /* a sharing process waiting for memory looks again */
	}
	return hook_cu_status(st, &err);
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	vmm_stream lone = NULL;
	bool done, ordered;
	CUresult r;

	gate_enter();
	ordered = lone_stream_key(&lone);
	r = core_free(dptr, &done, ordered, lone);
	if (!done) {
		r = CALL_REAL(cuMemFree_v2, (dptr));
		if (r == CUDA_SUCCESS && dptr)
			shim_count_passthrough(PASS_DEVICE_FREE, 0);
	}
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				    size_t Height, unsigned int ElementSizeBytes)
{
	size_t pitch, bytes;
	shim_runtime *rt;
	vmm_devptr p;
	vmm_error err;
	CUresult r;
	int dev, align = 0;

	gate_enter();
	vmm_error_clear(&err);
	/* Invalid requests go to the driver for its own error code. */
	if (pPitch && WidthInBytes && Height && WidthInBytes <= SIZE_MAX - PITCH_ALIGN &&
	    (ElementSizeBytes == 4 || ElementSizeBytes == 8 || ElementSizeBytes == 16) &&
	    want_core(dptr, 1, &rt, &dev)) {
		if (DRIVER_EXTRA(cuDeviceGetAttribute) &&
		    DRIVER_EXTRA(cuDeviceGetAttribute)(&align,
			    CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, dev) != CUDA_SUCCESS)
			align = 0;
		if (align < (int)PITCH_ALIGN || (align & (align - 1)))
			align = PITCH_ALIGN;
		pitch = (WidthInBytes + (size_t)align - 1) & ~((size_t)align - 1);
		if (Height <= SIZE_MAX / pitch) {
			bytes = pitch * Height;
			if (!share_malloc(rt->side[SHIM_CUDA].core, dev, bytes, (size_t)align,
					  shim_thread_tag(), &p, &err)) {
				*dptr = (CUdeviceptr)p;
				*pPitch = pitch;
				alloc_trace_malloc(bytes, p, false, 0);
				alloc_leave();
				return CUDA_SUCCESS;
			}
			log_fallback("cuMemAllocPitch_v2", bytes, &err);
		}
	}
	r = CALL_REAL(cuMemAllocPitch_v2, (dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
	pass_alloc(r, dptr, r == CUDA_SUCCESS && pPitch ? *pPitch * Height : 0);
	alloc_leave();
	return r;
}

/* Is pool the device's default or current pool (whose memory the core may stand in for)? */
static bool plain_pool(CUmemoryPool pool, int dev)
{
	CUmemoryPool p = NULL;

	if (DRIVER_EXTRA(cuDeviceGetDefaultMemPool) &&
	    DRIVER_EXTRA(cuDeviceGetDefaultMemPool)(&p, dev) == CUDA_SUCCESS && p == pool)
		return true;
	p = NULL;
	return DRIVER_EXTRA(cuDeviceGetMemPool) &&
	       DRIVER_EXTRA(cuDeviceGetMemPool)(&p, dev) == CUDA_SUCCESS && p == pool;
}

/* Serve a stream-ordered allocation from the core when it may; true when it did. */
static bool core_alloc_async(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream s,
			     bool ptsz, const char *fn)
{
	shim_runtime *rt;
	vmm_devptr p;
	vmm_error err;
	int dev;

	if (!want_core(dptr, bytes, &rt, &dev) || hook_stream_capturing(s, ptsz) ||
	    !hook_stream_device(s, ptsz, &dev))
		return false;
	if (pool && !plain_pool(pool, dev))
		return false;
	vmm_error_clear(&err);
	if (share_malloc_on_stream(rt->side[SHIM_CUDA].core, dev, bytes, shim_thread_tag(),
				   hook_stream(s, ptsz), &p, NULL, &err)) {
		log_fallback(fn, bytes, &err);
		return false;
	}
	*dptr = (CUdeviceptr)p;
	alloc_trace_malloc(bytes, p, true, (uint64_t)(uintptr_t)hook_stream(s, ptsz));
	return true;
}

#define ALLOC_ASYNC(name, ptsz)                                                          \
	CUresult CUDAAPI name(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)     \
	{                                                                                \
		CUresult r = CUDA_SUCCESS;                                               \
		gate_enter();                                                            \
		if (!core_alloc_async(dptr, bytesize, NULL, hStream, ptsz, #name))       \
			r = pass_alloc(CALL_REAL(name, (dptr, bytesize, hStream)), dptr,  \
				       bytesize);                                        \
		alloc_leave();                                                           \
		return r;                                                                \
	}

#define ALLOC_FROM_POOL(name, ptsz)                                                      \
	CUresult CUDAAPI name(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,    \
			      CUstream hStream)                                          \
	{                                                                                \
		CUresult r = CUDA_SUCCESS;                                               \
		gate_enter();                                                            \
		if (!pool || !core_alloc_async(dptr, bytesize, pool, hStream, ptsz, #name)) \
			r = pass_alloc(CALL_REAL(name, (dptr, bytesize, pool, hStream)),  \
				       dptr, bytesize);                                  \
		alloc_leave();                                                           \
		return r;                                                                \
	}

/* In a capture the free would belong to the graph; a plain free waits for the next device
 * synchronization before the memory is reused, which is safe whenever the graph runs. It counts
 * as a submission (the graph's free node), so that its memory is never reused on the strength of
 * a synchronization made while that graph was being captured. */
static CUresult core_free_async(CUdeviceptr ptr, bool *done, CUstream s, bool ptsz)
{
	bool captured = hook_cuda_core() && ptr && hook_stream_capturing(s, ptsz);

	if (captured)
		submit_count_note();
	return core_free(ptr, done, !captured, hook_stream(s, ptsz));
}

#define FREE_ASYNC(name, ptsz)                                                           \
	CUresult CUDAAPI name(CUdeviceptr dptr, CUstream hStream)                       \
	{                                                                                \
		bool done;                                                               \
		CUresult r;                                                              \
		gate_enter();                                                            \
		r = core_free_async(dptr, &done, hStream, ptsz);                         \
		if (!done) {                                                             \
			r = CALL_REAL(name, (dptr, hStream));                            \
			if (r == CUDA_SUCCESS && dptr)                                   \
				shim_count_passthrough(PASS_DEVICE_FREE, 0);             \
		}                                                                        \
		gate_leave();                                                            \
		return r;                                                                \
	}

ALLOC_ASYNC(cuMemAllocAsync, false)
ALLOC_ASYNC(cuMemAllocAsync_ptsz, true)
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync, false)
ALLOC_FROM_POOL(cuMemAllocFromPoolAsync_ptsz, true)
FREE_ASYNC(cuMemFreeAsync, false)
FREE_ASYNC(cuMemFreeAsync_ptsz, true)
