/* Shared helpers of the CUDA hooks (hooks_common.h). */
#include "hooks_common.h"

DRIVER_EXTRA_SLOT(cuCtxGetCurrent);
DRIVER_EXTRA_SLOT(cuCtxGetDevice);
DRIVER_EXTRA_SLOT(cuStreamIsCapturing);
DRIVER_EXTRA_SLOT(cuStreamIsCapturing_ptsz);
DRIVER_EXTRA_SLOT(cuStreamGetCtx);
DRIVER_EXTRA_SLOT(cuCtxPushCurrent_v2);
DRIVER_EXTRA_SLOT(cuCtxPopCurrent_v2);

/* cuda.h declares the per-thread form only in per-thread mode. */
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus);

bool hook_current_device(int *dev)
{
	CUcontext ctx = NULL;
	CUdevice d;

	if (!DRIVER_EXTRA(cuCtxGetCurrent) || !DRIVER_EXTRA(cuCtxGetDevice))
		return false;
	if (DRIVER_EXTRA(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx)
		return false;
	if (DRIVER_EXTRA(cuCtxGetDevice)(&d) != CUDA_SUCCESS)
		return false;
	*dev = (int)d;
	return true;
}

bool hook_context_device(CUcontext ctx, int *dev)
{
	CUcontext popped;
	bool ok;

	if (!DRIVER_EXTRA(cuCtxPushCurrent_v2) || !DRIVER_EXTRA(cuCtxPopCurrent_v2) ||
	    DRIVER_EXTRA(cuCtxPushCurrent_v2)(ctx) != CUDA_SUCCESS)
		return false;
	ok = hook_current_device(dev);
	DRIVER_EXTRA(cuCtxPopCurrent_v2)(&popped);
	return ok;
}

bool hook_stream_device(CUstream s, bool ptsz, int *dev)
{
	CUcontext ctx = NULL, cur = NULL;

	(void)ptsz;
	if (!hook_current_device(dev))
		return false;
	if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return true;
	/* A stream of another context: its device (common case: the current one, no switch). */
	if (!DRIVER_EXTRA(cuStreamGetCtx) || DRIVER_EXTRA(cuStreamGetCtx)(s, &ctx) != CUDA_SUCCESS ||
	    !ctx || !DRIVER_EXTRA(cuCtxGetCurrent) ||
	    DRIVER_EXTRA(cuCtxGetCurrent)(&cur) != CUDA_SUCCESS || ctx == cur)
		return true;
	return hook_context_device(ctx, dev);
}

bool hook_stream_capturing(CUstream s, bool ptsz)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult r;

	if (ptsz && DRIVER_EXTRA(cuStreamIsCapturing_ptsz))
		r = DRIVER_EXTRA(cuStreamIsCapturing_ptsz)(s, &st);
	else if (DRIVER_EXTRA(cuStreamIsCapturing))
		r = DRIVER_EXTRA(cuStreamIsCapturing)(hook_stream(s, ptsz), &st);
	else
		return false; /* a driver without capture has no graphs to keep working */
	return r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

CUresult hook_cu_status(vmm_status s, const vmm_error *err)
{
	switch (s) {
	case VMM_OK:
		return CUDA_SUCCESS;
	case VMM_E_OOM:
	case VMM_E_HOST_OOM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case VMM_E_DRIVER:
		return err && err->driver_code ? (CUresult)err->driver_code : CUDA_ERROR_UNKNOWN;
	case VMM_E_UNSUPPORTED:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}
