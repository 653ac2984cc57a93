/* Where the program makes a second stream, context or device its own: each ends one-stream reuse
 * (one_stream.h) before the driver call, so that no work can reach the new stream before the
 * device sync that ending makes. Creating a context, and enabling peer access, end it in
 * hooks_context.c and hooks_vmm.c. */
#include "hooks_common.h"
#include "one_stream.h"

CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	one_stream_end("created a stream");
	return CALL_REAL(cuStreamCreate, (phStream, Flags));
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	one_stream_end("created a stream");
	return CALL_REAL(cuStreamCreateWithPriority, (phStream, flags, priority));
}

CUresult CUDAAPI cuGreenCtxStreamCreate(CUstream *phStream, CUgreenCtx greenCtx,
					unsigned int flags, int priority)
{
	one_stream_end("created a green context's stream");
	return CALL_REAL(cuGreenCtxStreamCreate, (phStream, greenCtx, flags, priority));
}

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
