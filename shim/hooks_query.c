/* Queries whose answers must agree with the shim:
 * - cuMemGetInfo_v2: free memory includes what the core holds cached and would give back;
 * - cuMemGetAddressRange_v2 and the RANGE_START_ADDR / RANGE_SIZE pointer attributes: the bounds
 *   of the allocation the program asked for, as for cuMemAlloc memory (the driver alone would
 *   answer with the core's mapping);
 * Everything else, and every pointer that is not the core's, is the driver's answer. */
#include "../core/heap.h"
#include "../core/log.h"
#include "hooks_common.h"

static bool ours(CUdeviceptr p, vmm_alloc_info *info)
{
	vmm_core *core = hook_cuda_core();

	return core && p && vmm_lookup(core, (vmm_devptr)p, info);
}

/* The driver answers at once, and so does this: the heap's lock may be held by an allocation
 * waiting for the device (a collective behind it, say), and the heap's figures are then read as
 * that allocation left them (vmm_stats_now, a view). */
CUresult CUDAAPI cuMemGetInfo_v2(size_t *free, size_t *total)
{
	CUresult r = CALL_REAL(cuMemGetInfo_v2, (free, total));
	vmm_core *core = hook_cuda_core();
	vmm_stats st;
	int dev;

	if (r != CUDA_SUCCESS || !free || !core || !hook_current_device(&dev))
		return r;
	vmm_stats_now(core, dev, &st);
	*free += st.cached_bytes;
	if (total && *free > *total)
		*free = *total;
	return r;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	vmm_alloc_info info;

	if (!ours(dptr, &info))
		return CALL_REAL(cuMemGetAddressRange_v2, (pbase, psize, dptr));
	if (pbase)
		*pbase = (CUdeviceptr)info.base;
	if (psize)
		*psize = info.size;
	return CUDA_SUCCESS;
}

/* Put our answer for one attribute into data; false when the driver's stands. */
static bool answer_attribute(CUpointer_attribute a, void *data, const vmm_alloc_info *info)
{
	if (!data)
		return false;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = (CUdeviceptr)info->base;
		return true;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = info->size;
		return true;
	default:
		return false;
	}
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	vmm_alloc_info info;

	if (ours(ptr, &info) && answer_attribute(attribute, data, &info))
		return CUDA_SUCCESS;
	return CALL_REAL(cuPointerGetAttribute, (data, attribute, ptr));
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
					void **data, CUdeviceptr ptr)
{
	CUresult r = CALL_REAL(cuPointerGetAttributes, (numAttributes, attributes, data, ptr));
	vmm_alloc_info info;

	if (r == CUDA_SUCCESS && attributes && data && ours(ptr, &info)) {
		for (unsigned int i = 0; i < numAttributes; i++)
			answer_attribute(attributes[i], data[i], &info);
	}
	return r;
}
