/* The program's own virtual-memory calls (PyTorch expandable segments, NCCL). They pass through
 * to the driver and, once it succeeded, are recorded in the runtime's registry, so that sleep can
 * release and wake re-create them. Handles are translated: the program keeps the value it was
 * given, the registry knows the real handle behind it after a wake. The core's own VMM calls go through
 * its backend, never through these hooks. Peer access enabled between contexts is extended to the
 * core's heaps, as it would cover cuMemAlloc memory. */
#include "../core/log.h"
#include "hooks_common.h"

DRIVER_EXTRA_SLOT(cuMemGetAccess);
DRIVER_EXTRA_SLOT(cuDeviceGetCount);

static vmm_app_registry *registry(void)
{
	shim_runtime *rt = shim_runtime_cuda();

	return rt ? rt->cuda_app : NULL;
}

static vmm_app_registry *registry_peek(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->cuda_app : NULL;
}

static CUmemGenericAllocationHandle real_handle(vmm_app_registry *reg,
					       CUmemGenericAllocationHandle h)
{
	return reg ? (CUmemGenericAllocationHandle)vmm_app_real_handle(reg, (vmm_phys)h) : h;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry();
	r = CALL_REAL(cuMemCreate, (handle, size, prop, flags));
	/* Only device memory is ours to sleep; host-NUMA handles (NCCL) stay the program's. */
	if (r == CUDA_SUCCESS && reg && handle && prop &&
	    prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
		/* The program gets the registry's value: after a wake the driver may hand out a
		 * value the program still holds for a re-created handle. */
		vmm_phys value = vmm_app_created_value(reg, (vmm_phys)*handle, size,
						       prop->location.id, prop, sizeof(*prop));

		vmm_log(VMM_LOG_DEBUG, "app VMM: recorded handle 0x%llx as 0x%llx (%zu bytes, device %d)",
			(unsigned long long)*handle, (unsigned long long)value, size,
			prop->location.id);
		if (value)
			*handle = (CUmemGenericAllocationHandle)value;
	}
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemRelease, (real_handle(reg, handle)));
	if (r == CUDA_SUCCESS && reg)
		vmm_app_released(reg, (vmm_phys)handle);
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemMap, (ptr, size, offset, real_handle(reg, handle), flags));
	if (r == CUDA_SUCCESS && reg) {
		vmm_app_mapped(reg, (vmm_devptr)ptr, size, offset, (vmm_phys)handle);
		vmm_log(VMM_LOG_DEBUG, "app VMM: recorded mapping 0x%llx +%zu of handle 0x%llx",
			(unsigned long long)ptr, size, (unsigned long long)handle);
	}
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemUnmap, (ptr, size));
	if (r == CUDA_SUCCESS && reg)
		vmm_app_unmapped(reg, (vmm_devptr)ptr, size);
	gate_leave();
	return r;
}

/* The devices with read/write access to ptr after a cuMemSetAccess, asked of the driver (a call
 * may change some devices and leave the others as they were). */
static vmm_access_mask access_after(CUdeviceptr ptr, const CUmemAccessDesc *desc, size_t count)
{
	vmm_access_mask mask = 0;
	int n = 0;

	if (DRIVER_EXTRA(cuMemGetAccess) && DRIVER_EXTRA(cuDeviceGetCount) &&
	    DRIVER_EXTRA(cuDeviceGetCount)(&n) == CUDA_SUCCESS) {
		for (int d = 0; d < n && d < VMM_MAX_DEVICES; d++) {
			CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d };
			unsigned long long f = 0;

			if (DRIVER_EXTRA(cuMemGetAccess)(&f, &loc, ptr) == CUDA_SUCCESS &&
			    f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
				mask |= (vmm_access_mask)1 << d;
		}
		return mask;
	}
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		    desc[i].location.id >= 0 && desc[i].location.id < VMM_MAX_DEVICES &&
		    desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			mask |= (vmm_access_mask)1 << desc[i].location.id;
	}
	return mask;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemSetAccess, (ptr, size, desc, count));
	if (r == CUDA_SUCCESS && reg && desc)
		vmm_app_access_set(reg, (vmm_devptr)ptr, size, access_after(ptr, desc, count));
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle,
					      CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType handleType,
					      unsigned long long flags)
{
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemExportToShareableHandle,
		      (shareableHandle, real_handle(reg, handle), handleType, flags));
	if (r == CUDA_SUCCESS && reg)
		vmm_app_exported(reg, (vmm_phys)handle);
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CUresult r;

	vmm_app_registry *reg;

	gate_enter();
	reg = registry_peek();
	r = CALL_REAL(cuMemRetainAllocationHandle, (handle, addr));
	if (r == CUDA_SUCCESS && reg && handle)
		*handle = (CUmemGenericAllocationHandle)vmm_app_program_handle(reg, (vmm_phys)*handle);
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							CUmemGenericAllocationHandle handle)
{
	return CALL_REAL(cuMemGetAllocationPropertiesFromHandle,
			 (prop, real_handle(registry_peek(), handle)));
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	CUresult r;

	gate_enter();
	r = CALL_REAL(cuMemAddressReserve, (ptr, size, alignment, addr, flags));
	gate_leave();
	return r;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult r;

	gate_enter();
	r = CALL_REAL(cuMemAddressFree, (ptr, size));
	gate_leave();
	return r;
}

/* The current context gained (or lost) access to peer's memory: so does it to the core's heap on
 * peer's device. */
static void follow_peer(CUcontext peer, bool enable)
{
	vmm_core *core = hook_cuda_core();
	int self, other;
	vmm_error err;

	if (!core || !hook_current_device(&self) || !hook_context_device(peer, &other))
		return;
	vmm_error_clear(&err);
	if (vmm_set_peer_access(core, other, self, enable, &err))
		vmm_log(VMM_LOG_WARN, "peer access %s for device %d on device %d's heap: %s",
			enable ? "grant" : "revoke", self, other, err.msg);
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	CUresult r = CALL_REAL(cuCtxEnablePeerAccess, (peerContext, Flags));

	if (r == CUDA_SUCCESS)
		follow_peer(peerContext, true);
	return r;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peerContext)
{
	CUresult r = CALL_REAL(cuCtxDisablePeerAccess, (peerContext));

	if (r == CUDA_SUCCESS)
		follow_peer(peerContext, false);
	return r;
}
