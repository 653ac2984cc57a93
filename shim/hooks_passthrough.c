/* Allocations the core does not serve, counted so that `vmmctl status` can say how much of the
 * program's memory is not managed: managed (unified) memory, page-locked host memory, arrays. */
#include "hooks_common.h"

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	CUresult r = CALL_REAL(cuMemAllocManaged, (dptr, bytesize, flags));

	if (r == CUDA_SUCCESS)
		shim_count_passthrough(PASS_MANAGED, bytesize);
	return r;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	CUresult r = CALL_REAL(cuMemAllocHost_v2, (pp, bytesize));

	if (r == CUDA_SUCCESS)
		shim_count_passthrough(PASS_HOST, bytesize);
	return r;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	CUresult r = CALL_REAL(cuMemHostAlloc, (pp, bytesize, Flags));

	if (r == CUDA_SUCCESS)
		shim_count_passthrough(PASS_HOST, bytesize);
	return r;
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	CUresult r = CALL_REAL(cuArrayCreate_v2, (pHandle, pAllocateArray));

	if (r == CUDA_SUCCESS)
		shim_count_passthrough(PASS_ARRAY, 0);
	return r;
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *pHandle,
				    const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	CUresult r = CALL_REAL(cuArray3DCreate_v2, (pHandle, pAllocateArray));

	if (r == CUDA_SUCCESS)
		shim_count_passthrough(PASS_ARRAY, 0);
	return r;
}
