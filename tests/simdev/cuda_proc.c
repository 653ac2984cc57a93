/* cuGetProcAddress(_v2) of simdev's libcuda.so.1: a table from base name to the exported
 * variants and the CUDA version that introduced each (with its per-thread _ptsz/_ptds twin).
 * The pointers are the exported functions' own addresses; with -Bsymbolic-functions they stay
 * simdev's even when a preloaded library exports the same names.
 * cuda.h is not included: its macros rename these functions, and only addresses are needed. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sim_internal.h"

int sim_proc_lookup(const char *symbol, void **pfn, int version, uint64_t flags, int *status)
	__attribute__((visibility("hidden")));

enum { SUCCESS = 0, INVALID_VALUE = 1, NOT_FOUND = 500 };
enum { SYM_SUCCESS = 0, SYM_NOT_FOUND = 1, SYM_VERSION_NOT_SUFFICIENT = 2 };
#define PER_THREAD_FLAG 2u

#define SIM_PROCS(E) \
	E("cuStreamAddCallback", cuStreamAddCallback, 5000, cuStreamAddCallback_ptsz) \
	E("cuStreamGetPriority", cuStreamGetPriority, 5050, cuStreamGetPriority) \
	E("cuCtxGetStreamPriorityRange", cuCtxGetStreamPriorityRange, 5050, \
	  cuCtxGetStreamPriorityRange) \
	E("cuArrayCreate", cuArrayCreate_v2, 3020, cuArrayCreate_v2) \
	E("cuArray3DCreate", cuArray3DCreate_v2, 3020, cuArray3DCreate_v2) \
	E("cuArrayDestroy", cuArrayDestroy, 2000, cuArrayDestroy) \
	E("cuCtxCreate", cuCtxCreate_v2, 3020, cuCtxCreate_v2) \
	E("cuCtxCreate", cuCtxCreate_v4, 12050, cuCtxCreate_v4) \
	E("cuCtxDestroy", cuCtxDestroy_v2, 4000, cuCtxDestroy_v2) \
	E("cuCtxDisablePeerAccess", cuCtxDisablePeerAccess, 4000, cuCtxDisablePeerAccess) \
	E("cuCtxEnablePeerAccess", cuCtxEnablePeerAccess, 4000, cuCtxEnablePeerAccess) \
	E("cuCtxGetApiVersion", cuCtxGetApiVersion, 3020, cuCtxGetApiVersion) \
	E("cuCtxGetCurrent", cuCtxGetCurrent, 4000, cuCtxGetCurrent) \
	E("cuCtxGetDevice", cuCtxGetDevice, 2000, cuCtxGetDevice) \
	E("cuCtxGetFlags", cuCtxGetFlags, 7000, cuCtxGetFlags) \
	E("cuCtxGetId", cuCtxGetId, 12000, cuCtxGetId) \
	E("cuCtxPopCurrent", cuCtxPopCurrent_v2, 4000, cuCtxPopCurrent_v2) \
	E("cuCtxPushCurrent", cuCtxPushCurrent_v2, 4000, cuCtxPushCurrent_v2) \
	E("cuCtxSetCurrent", cuCtxSetCurrent, 4000, cuCtxSetCurrent) \
	E("cuCtxSynchronize", cuCtxSynchronize, 2000, cuCtxSynchronize) \
	E("cuCtxSynchronize", cuCtxSynchronize_v2, 13000, cuCtxSynchronize_v2) \
	E("cuCtxFromGreenCtx", cuCtxFromGreenCtx, 12040, cuCtxFromGreenCtx) \
	E("cuDeviceGetDevResource", cuDeviceGetDevResource, 12040, cuDeviceGetDevResource) \
	E("cuDevResourceGenerateDesc", cuDevResourceGenerateDesc, 12040, \
	  cuDevResourceGenerateDesc) \
	E("cuGreenCtxCreate", cuGreenCtxCreate, 12040, cuGreenCtxCreate) \
	E("cuGreenCtxDestroy", cuGreenCtxDestroy, 12040, cuGreenCtxDestroy) \
	E("cuGreenCtxStreamCreate", cuGreenCtxStreamCreate, 12050, cuGreenCtxStreamCreate) \
	E("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer, 4000, cuDeviceCanAccessPeer) \
	E("cuDeviceGet", cuDeviceGet, 2000, cuDeviceGet) \
	E("cuDeviceGetAttribute", cuDeviceGetAttribute, 2000, cuDeviceGetAttribute) \
	E("cuDeviceGetCount", cuDeviceGetCount, 2000, cuDeviceGetCount) \
	E("cuDeviceGetDefaultMemPool", cuDeviceGetDefaultMemPool, 11020, \
	  cuDeviceGetDefaultMemPool) \
	E("cuDeviceGetMemPool", cuDeviceGetMemPool, 11020, cuDeviceGetMemPool) \
	E("cuDeviceGetName", cuDeviceGetName, 2000, cuDeviceGetName) \
	E("cuDeviceGetUuid", cuDeviceGetUuid_v2, 11040, cuDeviceGetUuid_v2) \
	E("cuDevicePrimaryCtxGetState", cuDevicePrimaryCtxGetState, 7000, \
	  cuDevicePrimaryCtxGetState) \
	E("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease, 7000, cuDevicePrimaryCtxRelease) \
	E("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2, 11000, \
	  cuDevicePrimaryCtxRelease_v2) \
	E("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset, 7000, cuDevicePrimaryCtxReset) \
	E("cuDevicePrimaryCtxReset", cuDevicePrimaryCtxReset_v2, 11000, \
	  cuDevicePrimaryCtxReset_v2) \
	E("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain) \
	E("cuDevicePrimaryCtxSetFlags", cuDevicePrimaryCtxSetFlags_v2, 11000, \
	  cuDevicePrimaryCtxSetFlags_v2) \
	E("cuDeviceTotalMem", cuDeviceTotalMem_v2, 3020, cuDeviceTotalMem_v2) \
	E("cuDriverGetVersion", cuDriverGetVersion, 2020, cuDriverGetVersion) \
	E("cuEventCreate", cuEventCreate, 2000, cuEventCreate) \
	E("cuEventDestroy", cuEventDestroy_v2, 4000, cuEventDestroy_v2) \
	E("cuEventElapsedTime", cuEventElapsedTime, 2000, cuEventElapsedTime) \
	E("cuEventElapsedTime", cuEventElapsedTime_v2, 12080, cuEventElapsedTime_v2) \
	E("cuEventQuery", cuEventQuery, 2000, cuEventQuery) \
	E("cuEventRecord", cuEventRecord, 2000, cuEventRecord_ptsz) \
	E("cuEventRecordWithFlags", cuEventRecordWithFlags, 11010, cuEventRecordWithFlags) \
	E("cuEventSynchronize", cuEventSynchronize, 2000, cuEventSynchronize) \
	E("cuGraphDestroy", cuGraphDestroy, 10000, cuGraphDestroy) \
	E("cuGraphExecDestroy", cuGraphExecDestroy, 10000, cuGraphExecDestroy) \
	E("cuGraphInstantiateWithFlags", cuGraphInstantiateWithFlags, 11040, \
	  cuGraphInstantiateWithFlags) \
	E("cuGraphInstantiate", cuGraphInstantiateWithFlags, 12000, cuGraphInstantiateWithFlags) \
	E("cuGraphLaunch", cuGraphLaunch, 10000, cuGraphLaunch_ptsz) \
	E("cuInit", cuInit, 2000, cuInit) \
	E("cuIpcCloseMemHandle", cuIpcCloseMemHandle, 4010, cuIpcCloseMemHandle) \
	E("cuIpcGetMemHandle", cuIpcGetMemHandle, 4010, cuIpcGetMemHandle) \
	E("cuIpcOpenMemHandle", cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle) \
	E("cuIpcOpenMemHandle", cuIpcOpenMemHandle_v2, 11000, cuIpcOpenMemHandle_v2) \
	E("cuLaunchHostFunc", cuLaunchHostFunc, 10000, cuLaunchHostFunc_ptsz) \
	E("cuLaunchKernel", cuLaunchKernel, 4000, cuLaunchKernel_ptsz) \
	E("cuMemAddressFree", cuMemAddressFree, 10020, cuMemAddressFree) \
	E("cuMemAddressReserve", cuMemAddressReserve, 10020, cuMemAddressReserve) \
	E("cuMemAllocAsync", cuMemAllocAsync, 11020, cuMemAllocAsync_ptsz) \
	E("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync_ptsz) \
	E("cuMemAllocHost", cuMemAllocHost_v2, 3020, cuMemAllocHost_v2) \
	E("cuMemAllocManaged", cuMemAllocManaged, 6000, cuMemAllocManaged) \
	E("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, cuMemAllocPitch_v2) \
	E("cuMemAlloc", cuMemAlloc_v2, 3020, cuMemAlloc_v2) \
	E("cuMemCreate", cuMemCreate, 10020, cuMemCreate) \
	E("cuMemExportToShareableHandle", cuMemExportToShareableHandle, 10020, \
	  cuMemExportToShareableHandle) \
	E("cuMemFreeAsync", cuMemFreeAsync, 11020, cuMemFreeAsync_ptsz) \
	E("cuMemFreeHost", cuMemFreeHost, 2000, cuMemFreeHost) \
	E("cuMemFree", cuMemFree_v2, 3020, cuMemFree_v2) \
	E("cuMemGetAccess", cuMemGetAccess, 10020, cuMemGetAccess) \
	E("cuMemGetAddressRange", cuMemGetAddressRange_v2, 3020, cuMemGetAddressRange_v2) \
	E("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity, 10020, \
	  cuMemGetAllocationGranularity) \
	E("cuMemGetAllocationPropertiesFromHandle", cuMemGetAllocationPropertiesFromHandle, 10020, \
	  cuMemGetAllocationPropertiesFromHandle) \
	E("cuMemGetInfo", cuMemGetInfo_v2, 3020, cuMemGetInfo_v2) \
	E("cuMemHostAlloc", cuMemHostAlloc, 2020, cuMemHostAlloc) \
	E("cuMemHostGetDevicePointer", cuMemHostGetDevicePointer_v2, 3020, \
	  cuMemHostGetDevicePointer_v2) \
	E("cuMemHostRegister", cuMemHostRegister_v2, 6050, cuMemHostRegister_v2) \
	E("cuMemHostUnregister", cuMemHostUnregister, 4000, cuMemHostUnregister) \
	E("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle, 10020, \
	  cuMemImportFromShareableHandle) \
	E("cuMemMap", cuMemMap, 10020, cuMemMap) \
	E("cuMemPoolTrimTo", cuMemPoolTrimTo, 11020, cuMemPoolTrimTo) \
	E("cuMemRelease", cuMemRelease, 10020, cuMemRelease) \
	E("cuMemRetainAllocationHandle", cuMemRetainAllocationHandle, 10020, \
	  cuMemRetainAllocationHandle) \
	E("cuMemSetAccess", cuMemSetAccess, 10020, cuMemSetAccess) \
	E("cuMemUnmap", cuMemUnmap, 10020, cuMemUnmap) \
	E("cuMemcpy", cuMemcpy, 4000, cuMemcpy_ptds) \
	E("cuMemcpyAsync", cuMemcpyAsync, 4000, cuMemcpyAsync_ptsz) \
	E("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2, 3020, cuMemcpyDtoDAsync_v2_ptsz) \
	E("cuMemcpyDtoD", cuMemcpyDtoD_v2, 3020, cuMemcpyDtoD_v2_ptds) \
	E("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2, 3020, cuMemcpyDtoHAsync_v2_ptsz) \
	E("cuMemcpyDtoH", cuMemcpyDtoH_v2, 3020, cuMemcpyDtoH_v2_ptds) \
	E("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2, 3020, cuMemcpyHtoDAsync_v2_ptsz) \
	E("cuMemcpyHtoD", cuMemcpyHtoD_v2, 3020, cuMemcpyHtoD_v2_ptds) \
	E("cuMemcpyPeer", cuMemcpyPeer, 4000, cuMemcpyPeer) \
	E("cuMemcpyPeerAsync", cuMemcpyPeerAsync, 4000, cuMemcpyPeerAsync) \
	E("cuMemsetD16Async", cuMemsetD16Async, 3020, cuMemsetD16Async_ptsz) \
	E("cuMemsetD16", cuMemsetD16_v2, 3020, cuMemsetD16_v2_ptds) \
	E("cuMemsetD32Async", cuMemsetD32Async, 3020, cuMemsetD32Async_ptsz) \
	E("cuMemsetD32", cuMemsetD32_v2, 3020, cuMemsetD32_v2_ptds) \
	E("cuMemsetD8Async", cuMemsetD8Async, 3020, cuMemsetD8Async_ptsz) \
	E("cuMemsetD8", cuMemsetD8_v2, 3020, cuMemsetD8_v2_ptds) \
	E("cuPointerGetAttribute", cuPointerGetAttribute, 4000, cuPointerGetAttribute) \
	E("cuPointerGetAttributes", cuPointerGetAttributes, 7000, cuPointerGetAttributes) \
	E("cuStreamBeginCapture", cuStreamBeginCapture_v2, 10010, cuStreamBeginCapture_v2_ptsz) \
	E("cuStreamCreate", cuStreamCreate, 2000, cuStreamCreate) \
	E("cuStreamCreateWithPriority", cuStreamCreateWithPriority, 5050, \
	  cuStreamCreateWithPriority) \
	E("cuStreamDestroy", cuStreamDestroy_v2, 4000, cuStreamDestroy_v2) \
	E("cuStreamEndCapture", cuStreamEndCapture, 10000, cuStreamEndCapture_ptsz) \
	E("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v2, 11030, \
	  cuStreamGetCaptureInfo_v2_ptsz) \
	E("cuStreamGetCaptureInfo", cuStreamGetCaptureInfo_v3, 12030, \
	  cuStreamGetCaptureInfo_v3_ptsz) \
	E("cuStreamGetCtx", cuStreamGetCtx, 9020, cuStreamGetCtx_ptsz) \
	E("cuStreamGetFlags", cuStreamGetFlags, 2000, cuStreamGetFlags) \
	E("cuStreamGetId", cuStreamGetId, 12000, cuStreamGetId) \
	E("cuStreamIsCapturing", cuStreamIsCapturing, 10000, cuStreamIsCapturing_ptsz) \
	E("cuStreamQuery", cuStreamQuery, 2000, cuStreamQuery_ptsz) \
	E("cuStreamSynchronize", cuStreamSynchronize, 2000, cuStreamSynchronize_ptsz) \
	E("cuStreamWaitEvent", cuStreamWaitEvent, 3020, cuStreamWaitEvent_ptsz) \
	E("cuGetProcAddress", cuGetProcAddress, 11030, cuGetProcAddress) \
	E("cuGetProcAddress", cuGetProcAddress_v2, 12000, cuGetProcAddress_v2) \
	E("cuGetErrorString", cuGetErrorString, 6000, cuGetErrorString) \
	E("cuGetErrorName", cuGetErrorName, 6000, cuGetErrorName) \
	E("cuGetExportTable", cuGetExportTable, 3000, cuGetExportTable) \

#define DECLARE(base, fn, ver, ptfn) extern void fn(void); extern void ptfn(void);
#pragma GCC visibility push(default)
SIM_PROCS(DECLARE)
#pragma GCC visibility pop

struct proc {
	const char *base;
	int version;
	void *fn, *ptfn;
};

#define ROW(base, fn, ver, ptfn) { base, ver, (void *)fn, (void *)ptfn },
static const struct proc procs[] = { SIM_PROCS(ROW) };

int sim_proc_lookup(const char *symbol, void **pfn, int version, uint64_t flags, int *status)
{
	if (!symbol || !pfn)
		return INVALID_VALUE;
	*pfn = NULL;
	if (version > 13000) {
		if (status)
			*status = SYM_NOT_FOUND;
		return INVALID_VALUE;
	}
	const struct proc *best = NULL;
	bool known = false;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].base, symbol))
			continue;
		known = true;
		if (procs[i].version <= version && (!best || procs[i].version > best->version))
			best = &procs[i];
	}
	if (!best) {
		if (status)
			*status = known ? SYM_VERSION_NOT_SUFFICIENT : SYM_NOT_FOUND;
		return known ? NOT_FOUND : SUCCESS;
	}
	*pfn = (flags & PER_THREAD_FLAG) ? best->ptfn : best->fn;
	if (status)
		*status = SYM_SUCCESS;
	return SUCCESS;
}
