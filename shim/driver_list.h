/* Every CUDA driver entry point the shim wraps, by its exact exported name (with the _v2, _ptsz and
 * _ptds forms the driver exports), its parameters and the arguments to forward. The parameter lists
 * are the CUDA 13.0 cuda.h prototypes. Each user defines DRIVER_HOOK (wrappers written by hand in
 * hooks_*.c and proc_address.c) and/or DRIVER_GATED (wrappers that only pass the submission gate,
 * generated in hooks_submit.c) before including this file.
 *
 * DRIVER_GATED's last two arguments name the stream the work goes to, for lone-stream ordering
 * (lone_stream.h): an expression of the parameters (NULL for the calls that take no stream: they
 * run on the default stream), and whether a NULL stream is the per-thread default stream (the
 * _ptsz/_ptds forms). SUBMIT_STREAM_UNKNOWN where the stream cannot be told from the arguments,
 * and for the stream memory operations that can wait (cuStreamWaitValue*, cuStreamBatchMemOp):
 * such a wait may be for work another stream submits later, which must then not be made to wait
 * for it in turn, so lone mode ends before it is queued.
 *
 * Deliberately absent: the unversioned pre-3.2 entry points (cuMemAlloc, cuMemcpyHtoD, ...: 32-bit
 * size ABI, used by no current runtime) and cuGetExportTable (private, must pass through). */
#ifdef DRIVER_HOOK
DRIVER_HOOK(cuGetProcAddress,
	(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags),
	(symbol, pfn, cudaVersion, flags))
DRIVER_HOOK(cuGetProcAddress_v2,
	(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
	CUdriverProcAddressQueryResult *symbolStatus),
	(symbol, pfn, cudaVersion, flags, symbolStatus))
DRIVER_HOOK(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytesize), (dptr, bytesize))
DRIVER_HOOK(cuMemFree_v2, (CUdeviceptr dptr), (dptr))
DRIVER_HOOK(cuMemAllocPitch_v2,
	(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height, unsigned int
	ElementSizeBytes),
	(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes))
DRIVER_HOOK(cuMemAllocAsync,
	(CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
	(dptr, bytesize, hStream))
DRIVER_HOOK(cuMemAllocAsync_ptsz,
	(CUdeviceptr *dptr, size_t bytesize, CUstream hStream),
	(dptr, bytesize, hStream))
DRIVER_HOOK(cuMemFreeAsync, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))
DRIVER_HOOK(cuMemFreeAsync_ptsz, (CUdeviceptr dptr, CUstream hStream), (dptr, hStream))
DRIVER_HOOK(cuMemAllocFromPoolAsync,
	(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
	(dptr, bytesize, pool, hStream))
DRIVER_HOOK(cuMemAllocFromPoolAsync_ptsz,
	(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream),
	(dptr, bytesize, pool, hStream))
DRIVER_HOOK(cuMemGetInfo_v2, (size_t *free, size_t *total), (free, total))
DRIVER_HOOK(cuMemGetAddressRange_v2,
	(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr),
	(pbase, psize, dptr))
DRIVER_HOOK(cuPointerGetAttribute,
	(void *data, CUpointer_attribute attribute, CUdeviceptr ptr),
	(data, attribute, ptr))
DRIVER_HOOK(cuPointerGetAttributes,
	(unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr),
	(numAttributes, attributes, data, ptr))
DRIVER_HOOK(cuIpcGetMemHandle, (CUipcMemHandle *pHandle, CUdeviceptr dptr), (pHandle, dptr))
DRIVER_HOOK(cuIpcOpenMemHandle,
	(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),
	(pdptr, handle, Flags))
DRIVER_HOOK(cuIpcOpenMemHandle_v2,
	(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags),
	(pdptr, handle, Flags))
DRIVER_HOOK(cuIpcCloseMemHandle, (CUdeviceptr dptr), (dptr))
DRIVER_HOOK(cuMemCreate,
	(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
	unsigned long long flags),
	(handle, size, prop, flags))
DRIVER_HOOK(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))
DRIVER_HOOK(cuMemMap,
	(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned
	long long flags),
	(ptr, size, offset, handle, flags))
DRIVER_HOOK(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))
DRIVER_HOOK(cuMemSetAccess,
	(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count),
	(ptr, size, desc, count))
DRIVER_HOOK(cuMemExportToShareableHandle,
	(void *shareableHandle, CUmemGenericAllocationHandle handle, CUmemAllocationHandleType
	handleType, unsigned long long flags),
	(shareableHandle, handle, handleType, flags))
DRIVER_HOOK(cuMemRetainAllocationHandle,
	(CUmemGenericAllocationHandle *handle, void *addr),
	(handle, addr))
DRIVER_HOOK(cuMemImportFromShareableHandle,
	(CUmemGenericAllocationHandle *handle, void *osHandle, CUmemAllocationHandleType
	shHandleType),
	(handle, osHandle, shHandleType))
DRIVER_HOOK(cuMemGetAllocationPropertiesFromHandle,
	(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle),
	(prop, handle))
DRIVER_HOOK(cuMemAddressReserve,
	(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long
	flags),
	(ptr, size, alignment, addr, flags))
DRIVER_HOOK(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size))
DRIVER_HOOK(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev))
DRIVER_HOOK(cuCtxCreate_v3,
	(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
	CUdevice dev),
	(pctx, paramsArray, numParams, flags, dev))
DRIVER_HOOK(cuCtxCreate_v4,
	(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev),
	(pctx, ctxCreateParams, flags, dev))
DRIVER_HOOK(cuCtxDestroy_v2, (CUcontext ctx), (ctx))
DRIVER_HOOK(cuDevicePrimaryCtxRelease_v2, (CUdevice dev), (dev))
DRIVER_HOOK(cuDevicePrimaryCtxReset_v2, (CUdevice dev), (dev))
/* The pre-11.0 forms, same parameters: a runtime that asks cuGetProcAddress for the old ABI of a
 * reset gets these, and the reset must not pass the shim by. */
DRIVER_HOOK(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev))
DRIVER_HOOK(cuDevicePrimaryCtxReset, (CUdevice dev), (dev))
DRIVER_HOOK(cuStreamDestroy_v2, (CUstream hStream), (hStream))
DRIVER_HOOK(cuCtxEnablePeerAccess,
	(CUcontext peerContext, unsigned int Flags),
	(peerContext, Flags))
DRIVER_HOOK(cuCtxDisablePeerAccess, (CUcontext peerContext), (peerContext))
DRIVER_HOOK(cuMemAllocManaged,
	(CUdeviceptr *dptr, size_t bytesize, unsigned int flags),
	(dptr, bytesize, flags))
DRIVER_HOOK(cuMemAllocHost_v2, (void **pp, size_t bytesize), (pp, bytesize))
DRIVER_HOOK(cuMemHostAlloc, (void **pp, size_t bytesize, unsigned int Flags), (pp, bytesize, Flags))
DRIVER_HOOK(cuArrayCreate_v2,
	(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray),
	(pHandle, pAllocateArray))
DRIVER_HOOK(cuArray3DCreate_v2,
	(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray),
	(pHandle, pAllocateArray))
DRIVER_HOOK(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode), (hStream, mode))
DRIVER_HOOK(cuStreamBeginCapture_v2_ptsz,
	(CUstream hStream, CUstreamCaptureMode mode),
	(hStream, mode))
DRIVER_HOOK(cuStreamBeginCaptureToGraph,
	(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData
	*dependencyData, size_t numDependencies, CUstreamCaptureMode mode),
	(hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
DRIVER_HOOK(cuStreamBeginCaptureToGraph_ptsz,
	(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies, const CUgraphEdgeData
	*dependencyData, size_t numDependencies, CUstreamCaptureMode mode),
	(hStream, hGraph, dependencies, dependencyData, numDependencies, mode))
DRIVER_HOOK(cuStreamEndCapture, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))
DRIVER_HOOK(cuStreamEndCapture_ptsz, (CUstream hStream, CUgraph *phGraph), (hStream, phGraph))
#endif
#ifdef DRIVER_GATED
DRIVER_GATED(cuLaunchKernel,
	(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned
	int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams, void **extra),
	(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
	kernelParams, extra),
	hStream, false)
DRIVER_GATED(cuLaunchKernel_ptsz,
	(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned
	int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams, void **extra),
	(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
	kernelParams, extra),
	hStream, true)
DRIVER_GATED(cuLaunchKernelEx,
	(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
	(config, f, kernelParams, extra),
	config ? config->hStream : SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuLaunchKernelEx_ptsz,
	(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra),
	(config, f, kernelParams, extra),
	config ? config->hStream : SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuLaunchCooperativeKernel,
	(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned
	int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams),
	(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
	kernelParams),
	hStream, false)
DRIVER_GATED(cuLaunchCooperativeKernel_ptsz,
	(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned
	int blockDimX, unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes,
	CUstream hStream, void **kernelParams),
	(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
	kernelParams),
	hStream, true)
DRIVER_GATED(cuLaunchHostFunc,
	(CUstream hStream, CUhostFn fn, void *userData),
	(hStream, fn, userData),
	hStream, false)
DRIVER_GATED(cuLaunchHostFunc_ptsz,
	(CUstream hStream, CUhostFn fn, void *userData),
	(hStream, fn, userData),
	hStream, true)
DRIVER_GATED(cuGraphLaunch, (CUgraphExec hGraph, CUstream hStream), (hGraph, hStream),
	hStream, false)
DRIVER_GATED(cuGraphLaunch_ptsz, (CUgraphExec hGraphExec, CUstream hStream), (hGraphExec, hStream),
	hStream, true)
DRIVER_GATED(cuLaunchCooperativeKernelMultiDevice,
	(CUDA_LAUNCH_PARAMS *launchParamsList, unsigned int numDevices, unsigned int flags),
	(launchParamsList, numDevices, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuLaunch, (CUfunction f), (f),
	NULL, false)
DRIVER_GATED(cuLaunchGrid,
	(CUfunction f, int grid_width, int grid_height),
	(f, grid_width, grid_height),
	NULL, false)
DRIVER_GATED(cuLaunchGridAsync,
	(CUfunction f, int grid_width, int grid_height, CUstream hStream),
	(f, grid_width, grid_height, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy, (CUdeviceptr dst, CUdeviceptr src, size_t ByteCount), (dst, src, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpy_ptds,
	(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount),
	(dst, src, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyAsync,
	(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
	(dst, src, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyAsync_ptsz,
	(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream),
	(dst, src, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyPeer,
	(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
	size_t ByteCount),
	(dstDevice, dstContext, srcDevice, srcContext, ByteCount),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuMemcpyPeer_ptds,
	(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
	size_t ByteCount),
	(dstDevice, dstContext, srcDevice, srcContext, ByteCount),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuMemcpyPeerAsync,
	(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
	size_t ByteCount, CUstream hStream),
	(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyPeerAsync_ptsz,
	(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
	size_t ByteCount, CUstream hStream),
	(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyHtoD_v2,
	(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
	(dstDevice, srcHost, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyHtoD_v2_ptds,
	(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount),
	(dstDevice, srcHost, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyDtoH_v2,
	(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
	(dstHost, srcDevice, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyDtoH_v2_ptds,
	(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount),
	(dstHost, srcDevice, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyDtoD_v2,
	(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
	(dstDevice, srcDevice, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyDtoD_v2_ptds,
	(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount),
	(dstDevice, srcDevice, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyDtoA_v2,
	(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
	(dstArray, dstOffset, srcDevice, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyDtoA_v2_ptds,
	(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount),
	(dstArray, dstOffset, srcDevice, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyAtoD_v2,
	(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstDevice, srcArray, srcOffset, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyAtoD_v2_ptds,
	(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstDevice, srcArray, srcOffset, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyHtoA_v2,
	(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
	(dstArray, dstOffset, srcHost, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyHtoA_v2_ptds,
	(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount),
	(dstArray, dstOffset, srcHost, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyAtoH_v2,
	(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstHost, srcArray, srcOffset, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyAtoH_v2_ptds,
	(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstHost, srcArray, srcOffset, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyAtoA_v2,
	(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstArray, dstOffset, srcArray, srcOffset, ByteCount),
	NULL, false)
DRIVER_GATED(cuMemcpyAtoA_v2_ptds,
	(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset, size_t ByteCount),
	(dstArray, dstOffset, srcArray, srcOffset, ByteCount),
	NULL, true)
DRIVER_GATED(cuMemcpyHtoAAsync_v2,
	(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream
	hStream),
	(dstArray, dstOffset, srcHost, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyHtoAAsync_v2_ptsz,
	(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount, CUstream
	hStream),
	(dstArray, dstOffset, srcHost, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyAtoHAsync_v2,
	(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),
	(dstHost, srcArray, srcOffset, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyAtoHAsync_v2_ptsz,
	(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream),
	(dstHost, srcArray, srcOffset, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyHtoDAsync_v2,
	(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
	(dstDevice, srcHost, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyHtoDAsync_v2_ptsz,
	(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream),
	(dstDevice, srcHost, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyDtoHAsync_v2,
	(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
	(dstHost, srcDevice, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyDtoHAsync_v2_ptsz,
	(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
	(dstHost, srcDevice, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyDtoDAsync_v2,
	(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
	(dstDevice, srcDevice, ByteCount, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyDtoDAsync_v2_ptsz,
	(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream),
	(dstDevice, srcDevice, ByteCount, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpy2D_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy),
	NULL, false)
DRIVER_GATED(cuMemcpy2D_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy),
	NULL, true)
DRIVER_GATED(cuMemcpy2DUnaligned_v2, (const CUDA_MEMCPY2D *pCopy), (pCopy),
	NULL, false)
DRIVER_GATED(cuMemcpy2DUnaligned_v2_ptds, (const CUDA_MEMCPY2D *pCopy), (pCopy),
	NULL, true)
DRIVER_GATED(cuMemcpy3D_v2, (const CUDA_MEMCPY3D *pCopy), (pCopy),
	NULL, false)
DRIVER_GATED(cuMemcpy3D_v2_ptds, (const CUDA_MEMCPY3D *pCopy), (pCopy),
	NULL, true)
DRIVER_GATED(cuMemcpy2DAsync_v2, (const CUDA_MEMCPY2D *pCopy, CUstream hStream), (pCopy, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy2DAsync_v2_ptsz,
	(const CUDA_MEMCPY2D *pCopy, CUstream hStream),
	(pCopy, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D *pCopy, CUstream hStream), (pCopy, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy3DAsync_v2_ptsz,
	(const CUDA_MEMCPY3D *pCopy, CUstream hStream),
	(pCopy, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpy3DPeer, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuMemcpy3DPeer_ptds, (const CUDA_MEMCPY3D_PEER *pCopy), (pCopy),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuMemcpy3DPeerAsync,
	(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),
	(pCopy, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy3DPeerAsync_ptsz,
	(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream),
	(pCopy, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyBatchAsync,
	(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes
	*attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream),
	(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyBatchAsync_ptsz,
	(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes
	*attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream),
	(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpyBatchAsync_v2,
	(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes
	*attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
	(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpyBatchAsync_v2_ptsz,
	(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes
	*attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream),
	(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpy3DBatchAsync,
	(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
	CUstream hStream),
	(numOps, opList, failIdx, flags, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy3DBatchAsync_ptsz,
	(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
	CUstream hStream),
	(numOps, opList, failIdx, flags, hStream),
	hStream, true)
DRIVER_GATED(cuMemcpy3DBatchAsync_v2,
	(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream),
	(numOps, opList, flags, hStream),
	hStream, false)
DRIVER_GATED(cuMemcpy3DBatchAsync_v2_ptsz,
	(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags, CUstream hStream),
	(numOps, opList, flags, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N), (dstDevice, uc, N),
	NULL, false)
DRIVER_GATED(cuMemsetD8_v2_ptds,
	(CUdeviceptr dstDevice, unsigned char uc, size_t N),
	(dstDevice, uc, N),
	NULL, true)
DRIVER_GATED(cuMemsetD8Async,
	(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
	(dstDevice, uc, N, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD8Async_ptsz,
	(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream),
	(dstDevice, uc, N, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD16_v2,
	(CUdeviceptr dstDevice, unsigned short us, size_t N),
	(dstDevice, us, N),
	NULL, false)
DRIVER_GATED(cuMemsetD16_v2_ptds,
	(CUdeviceptr dstDevice, unsigned short us, size_t N),
	(dstDevice, us, N),
	NULL, true)
DRIVER_GATED(cuMemsetD16Async,
	(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
	(dstDevice, us, N, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD16Async_ptsz,
	(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream),
	(dstDevice, us, N, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N), (dstDevice, ui, N),
	NULL, false)
DRIVER_GATED(cuMemsetD32_v2_ptds,
	(CUdeviceptr dstDevice, unsigned int ui, size_t N),
	(dstDevice, ui, N),
	NULL, true)
DRIVER_GATED(cuMemsetD32Async,
	(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
	(dstDevice, ui, N, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD32Async_ptsz,
	(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream),
	(dstDevice, ui, N, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD2D8_v2,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
	(dstDevice, dstPitch, uc, Width, Height),
	NULL, false)
DRIVER_GATED(cuMemsetD2D8_v2_ptds,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height),
	(dstDevice, dstPitch, uc, Width, Height),
	NULL, true)
DRIVER_GATED(cuMemsetD2D8Async,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, uc, Width, Height, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD2D8Async_ptsz,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, uc, Width, Height, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD2D16_v2,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
	(dstDevice, dstPitch, us, Width, Height),
	NULL, false)
DRIVER_GATED(cuMemsetD2D16_v2_ptds,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height),
	(dstDevice, dstPitch, us, Width, Height),
	NULL, true)
DRIVER_GATED(cuMemsetD2D16Async,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, us, Width, Height, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD2D16Async_ptsz,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, us, Width, Height, hStream),
	hStream, true)
DRIVER_GATED(cuMemsetD2D32_v2,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
	(dstDevice, dstPitch, ui, Width, Height),
	NULL, false)
DRIVER_GATED(cuMemsetD2D32_v2_ptds,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height),
	(dstDevice, dstPitch, ui, Width, Height),
	NULL, true)
DRIVER_GATED(cuMemsetD2D32Async,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, ui, Width, Height, hStream),
	hStream, false)
DRIVER_GATED(cuMemsetD2D32Async_ptsz,
	(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width, size_t Height,
	CUstream hStream),
	(dstDevice, dstPitch, ui, Width, Height, hStream),
	hStream, true)
DRIVER_GATED(cuStreamWriteValue32_v2,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, false)
DRIVER_GATED(cuStreamWriteValue32_v2_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, true)
DRIVER_GATED(cuStreamWriteValue64_v2,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, false)
DRIVER_GATED(cuStreamWriteValue64_v2_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, true)
DRIVER_GATED(cuStreamWaitValue32_v2,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamWaitValue32_v2_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuStreamWaitValue64_v2,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamWaitValue64_v2_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuStreamBatchMemOp_v2,
	(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int
	flags),
	(stream, count, paramArray, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamBatchMemOp_v2_ptsz,
	(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, unsigned int
	flags),
	(stream, count, paramArray, flags),
	SUBMIT_STREAM_UNKNOWN, true)
/* The stream memory operations' first ABI (CUDA 8 to 11 headers; the driver still exports it,
 * with the same arguments but the first layout of the batch's parameters), host callbacks and
 * the decompression engine's batches (it writes device memory). */
DRIVER_GATED(cuStreamWriteValue32,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, false)
DRIVER_GATED(cuStreamWriteValue32_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, true)
DRIVER_GATED(cuStreamWriteValue64,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, false)
DRIVER_GATED(cuStreamWriteValue64_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	stream, true)
DRIVER_GATED(cuStreamWaitValue32,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamWaitValue32_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuStreamWaitValue64,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamWaitValue64_ptsz,
	(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags),
	(stream, addr, value, flags),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuStreamBatchMemOp,
	(CUstream stream, unsigned int count, CUstreamBatchMemOpParams_v1 *paramArray,
	unsigned int flags),
	(stream, count, paramArray, flags),
	SUBMIT_STREAM_UNKNOWN, false)
DRIVER_GATED(cuStreamBatchMemOp_ptsz,
	(CUstream stream, unsigned int count, CUstreamBatchMemOpParams_v1 *paramArray,
	unsigned int flags),
	(stream, count, paramArray, flags),
	SUBMIT_STREAM_UNKNOWN, true)
DRIVER_GATED(cuStreamAddCallback,
	(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),
	(hStream, callback, userData, flags),
	hStream, false)
DRIVER_GATED(cuStreamAddCallback_ptsz,
	(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags),
	(hStream, callback, userData, flags),
	hStream, true)
DRIVER_GATED(cuMemBatchDecompressAsync,
	(CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex,
	CUstream stream),
	(paramsArray, count, flags, errorIndex, stream),
	stream, false)
DRIVER_GATED(cuMemBatchDecompressAsync_ptsz,
	(CUmemDecompressParams *paramsArray, size_t count, unsigned int flags, size_t *errorIndex,
	CUstream stream),
	(paramsArray, count, flags, errorIndex, stream),
	stream, true)
#endif
