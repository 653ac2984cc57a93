/* Green contexts of simdev's libcuda.so.1 (CUDA 12.4+): a device resource (all of the device's
 * SMs; no partitioning), a descriptor, and green contexts made from it. A green context holds a
 * reference to its device's primary context, has its own default stream and its own streams
 * (cuGreenCtxStreamCreate), and is used through the CUcontext that cuCtxFromGreenCtx returns.
 * Synchronizing the primary context also waits for every green context on the device, as
 * cuda.h documents for cuCtxSynchronize; synchronizing a green context waits for its own work. */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define SIM_SM_COUNT 4 /* CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT */

struct CUdevResourceDesc_st {
	unsigned sms;
};

struct CUgreenCtx_st {
	struct CUctx_st ctx; /* first: the CUcontext of cuCtxFromGreenCtx */
	unsigned sms;
};

static CUresult check_dev(CUdevice dev)
{
	CUresult r = sim_require_init();
	if (r)
		return r;
	return dev >= 0 && dev < sim_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* A live green context (its context is listed and alive). */
static bool green_valid(struct CUgreenCtx_st *g)
{
	return g && sim_ctx_valid(&g->ctx) && g->ctx.green;
}

SIM_API CUresult cuDeviceGetDevResource(CUdevice dev, CUdevResource *res, CUdevResourceType type)
{
	SIM_BEGIN("cuDeviceGetDevResource", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!res || type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_VALUE;
	memset(res, 0, sizeof(*res));
	res->type = CU_DEV_RESOURCE_TYPE_SM;
	res->sm.smCount = SIM_SM_COUNT;
	res->sm.minSmPartitionSize = 2;
	res->sm.smCoscheduledAlignment = 2;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDevResourceGenerateDesc(CUdevResourceDesc *desc, CUdevResource *res,
					   unsigned int n)
{
	SIM_BEGIN("cuDevResourceGenerateDesc", CUDA_ERROR_OUT_OF_MEMORY);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!desc || !res || n != 1 || res->type != CU_DEV_RESOURCE_TYPE_SM ||
	    !res->sm.smCount || res->sm.smCount > SIM_SM_COUNT)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	/* The driver has no call to free a descriptor: it lives as long as the process. */
	struct CUdevResourceDesc_st *d = malloc(sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->sms = res->sm.smCount;
	*desc = d;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxCreate(CUgreenCtx *out, CUdevResourceDesc desc, CUdevice dev,
				  unsigned int flags)
{
	SIM_BEGIN("cuGreenCtxCreate", CUDA_ERROR_OUT_OF_MEMORY);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!out || !desc || flags != CU_GREEN_CTX_DEFAULT_STREAM) /* the flag is required */
		return CUDA_ERROR_INVALID_VALUE;
	struct CUgreenCtx_st *g = calloc(1, sizeof(*g));
	struct CUctx_st *prim;
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = sim_primary_retain(dev, &prim);
	if (r) {
		free(g);
		return r;
	}
	g->sms = desc->sms;
	g->ctx.dev = dev;
	g->ctx.green = true;
	r = sim_ctx_init(&g->ctx);
	if (r) {
		sim_primary_release(dev);
		return r; /* g is not freed: its default stream may name it */
	}
	*out = g;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxDestroy(CUgreenCtx g)
{
	SIM_BEGIN("cuGreenCtxDestroy", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_CONTEXT;
	sim_ctx_sync(&g->ctx);
	pthread_mutex_lock(&sim_lock);
	atomic_store(&g->ctx.alive, false); /* kept allocated: stale handles stay detectable */
	pthread_mutex_unlock(&sim_lock);
	sim_primary_release(g->ctx.dev);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxFromGreenCtx(CUcontext *pctx, CUgreenCtx g)
{
	SIM_BEGIN("cuCtxFromGreenCtx", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_CONTEXT;
	*pctx = &g->ctx;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuGreenCtxStreamCreate(CUstream *ps, CUgreenCtx g, unsigned int flags,
					int priority)
{
	SIM_BEGIN("cuGreenCtxStreamCreate", CUDA_ERROR_OUT_OF_MEMORY);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ps || flags != CU_STREAM_NON_BLOCKING) /* the flag is required */
		return CUDA_ERROR_INVALID_VALUE;
	if (!green_valid(g))
		return CUDA_ERROR_INVALID_CONTEXT;
	struct CUstream_st *s = sim_stream_new(&g->ctx, flags, priority, false);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ps = s;
	return CUDA_SUCCESS;
}
