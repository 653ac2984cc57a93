/* Helpers the CUDA hooks share: the caller's device, stream capture, and the core's answers. */
#ifndef VMMSHIM_HOOKS_COMMON_H
#define VMMSHIM_HOOKS_COMMON_H

#include <stdbool.h>

#include "driver_table.h"
#include "gate.h"
#include "shim_internal.h"

/* The device of the calling thread's current context; false when it has none (the hook then
 * passes the call to the driver, which answers as it would without us). */
bool hook_current_device(int *dev);

/* The device of context ctx. */
bool hook_context_device(CUcontext ctx, int *dev);

/* The device whose memory a stream-ordered allocation on s belongs to: the stream's own device for
 * a created stream, the current context's for the default streams. */
bool hook_stream_device(CUstream s, bool ptsz, int *dev);

/* Is stream s (per-thread default stream when ptsz and s == 0) being captured into a graph?
 * A failed query counts as capturing: the driver then decides. */
bool hook_stream_capturing(CUstream s, bool ptsz);

/* A reset of dev's primary context (hooks_context.c) closes every legacy IPC handle the program
 * opened on dev, as the driver's reset destroys the context's mappings (hooks_ipc.c): the
 * exporter's memory is then held by nobody here. Returns how many imports were closed. */
int hook_ipc_close_device(int dev);

/* After an allocation, out of the gate: a last release of a primary context that was left for
 * later while the allocator waited for its device is looked at now (hooks_context.c). One
 * relaxed load when nothing was left. */
void context_release_after_alloc(void);

/* The stream the core should order on: the per-thread default stream for a _ptsz call on 0. */
static inline CUstream hook_stream(CUstream s, bool ptsz)
{
	return (ptsz && !s) ? CU_STREAM_PER_THREAD : s;
}

/* The runtime's CUDA heap if it exists (never creates it). */
static inline vmm_core *hook_cuda_core(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->side[SHIM_CUDA].core : NULL;
}

/* Translate a core failure into the CUresult a driver would have given. */
CUresult hook_cu_status(vmm_status s, const vmm_error *err);

#endif
