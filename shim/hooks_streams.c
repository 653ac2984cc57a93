/* Where the program makes a second context or device its own: each ends one-stream reuse
 * (one_stream.h) before the driver call, because work in another context's default stream looks
 * like default-stream work to the submission hooks. Creating a context, and enabling peer
 * access, end it in hooks_context.c and hooks_vmm.c. A created stream does not: libraries make
 * streams they never use (PyTorch does at start), and work on one is seen where it is submitted
 * (hooks_submit.c), which ends the mode before that work reaches the driver. */
#include "hooks_common.h"
#include "one_stream.h"

CUresult CUDAAPI cuGreenCtxCreate(CUgreenCtx *phCtx, CUdevResourceDesc desc, CUdevice dev,
				  unsigned int flags)
{
	one_stream_end("created a green context");
	return CALL_REAL(cuGreenCtxCreate, (phCtx, desc, dev, flags));
}

CUresult CUDAAPI cuCtxFromGreenCtx(CUcontext *pContext, CUgreenCtx hCtx)
{
	one_stream_end("made a context of a green context");
	return CALL_REAL(cuCtxFromGreenCtx, (pContext, hCtx));
}

/* The runtime retains the primary context of each device it uses: a second device has streams
 * of its own, and a copy it runs may read the first device's memory. */
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	one_stream_device_used((int)dev);
	return CALL_REAL(cuDevicePrimaryCtxRetain, (pctx, dev));
}
