/* The program's own virtual-memory calls (PyTorch expandable segments, NCCL). They pass through
 * to the driver and, once it succeeded, are recorded in the runtime's registry, so that sleep can
 * release and wake re-create them. Handles are translated: the program keeps the value it was
 * given, the registry knows the real handle behind it after a wake. The program's references
 * (create, import, retain) are counted by the registry; the driver sees only the last release.
 * The core's own VMM calls go through its backend, never through these hooks. Peer access
 * enabled between contexts is extended to the core's heaps, as it would cover cuMemAlloc memory. */
#include <stdatomic.h>

#include "../core/log.h"
#include "../core/vmm_share.h"
#include "hooks_common.h"
#include "lifecycle.h"
#include "share/share.h"

DRIVER_EXTRA_SLOT(cuMemGetAccess);
DRIVER_EXTRA_SLOT(cuDeviceGetCount);

static vmm_app_registry *registry(void)
{
	shim_runtime *rt = shim_runtime_cuda();

	return rt ? rt->side[SHIM_CUDA].app : NULL;
}

static vmm_app_registry *registry_peek(void)
{
	shim_runtime *rt = shim_runtime_peek();

	return rt ? rt->side[SHIM_CUDA].app : NULL;
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

		vmm_log(VMM_LOG_DEBUG,
			"app VMM: recorded handle 0x%llx as 0x%llx (%zu bytes, device %d)",
			(unsigned long long)*handle, (unsigned long long)value, size,
			prop->location.id);
		if (value)
			*handle = (CUmemGenericAllocationHandle)value;
		share_join_gpu(prop->location.id); /* its memory counts in the others' rounds */
	}
	gate_leave();
	return r;
}

/* Only the program's last reference reaches the driver: the driver holds one for all of them
 * (app_vmm.h), and while the handle is asleep it holds none. */
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	vmm_app_registry *reg;
	vmm_phys real = handle;
	CUresult r = CUDA_SUCCESS;

	gate_enter();
	reg = registry_peek();
	switch (reg ? vmm_app_release_ref(reg, (vmm_phys)handle, &real) : VMM_APP_RELEASE_DRIVER) {
	case VMM_APP_RELEASE_COUNTED:
		break;
	case VMM_APP_RELEASE_INVALID:
		r = CUDA_ERROR_INVALID_VALUE;
		break;
	case VMM_APP_RELEASE_DRIVER:
		r = CALL_REAL(cuMemRelease, ((CUmemGenericAllocationHandle)real));
		if (r == CUDA_SUCCESS && reg)
			vmm_app_released(reg, (vmm_phys)handle);
		if (r == CUDA_SUCCESS)
			share_note_freed(); /* back to the driver: a sharing waiter looks again */
		break;
	}
	gate_leave();
	return r;
}

/* A handle value the program holds whose memory is asleep has no real handle: such a call must
 * not reach the driver (with the gate closed while asleep it does not get here; this is for a
 * sleep that left the gate open). */
static bool asleep_handle(CUmemGenericAllocationHandle h, CUmemGenericAllocationHandle real,
			  const char *call)
{
	if (!h || real)
		return false;
	vmm_log(VMM_LOG_WARN, "%s of app handle 0x%llx while its memory is asleep: refused", call,
		(unsigned long long)h);
	return true;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	CUmemGenericAllocationHandle real;
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	real = real_handle(reg, handle);
	if (asleep_handle(handle, real, "cuMemMap")) {
		gate_leave();
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	r = CALL_REAL(cuMemMap, (ptr, size, offset, real, flags));
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
	CUmemGenericAllocationHandle real;
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry_peek();
	real = real_handle(reg, handle);
	if (asleep_handle(handle, real, "cuMemExportToShareableHandle")) {
		gate_leave();
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	r = CALL_REAL(cuMemExportToShareableHandle, (shareableHandle, real, handleType, flags));
	if (r == CUDA_SUCCESS && reg) {
		vmm_app_exported(reg, (vmm_phys)handle);
		/* A duplicate, so that a group sleep can tell who holds this memory (app_vmm.h). */
		if (handleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && shareableHandle)
			vmm_app_share_keep(reg, (vmm_phys)handle, *(int *)shareableHandle);
	}
	gate_leave();
	return r;
}

/* A retain inside the shim's own heap: the handle the driver returns may be exported and mapped
 * by another process from its offset 0 for the whole allocation (NCCL's user-buffer
 * registration), so the allocation first gets a physical handle of its own where it has none (it
 * lies in several 2 MiB pieces): a new one, its bytes copied on the device, mapped at the same
 * address (vmm_share.h). The program's device work is held (the gate) and drained meanwhile, so
 * nothing touches the memory while it moves. The memory is then pinned as for legacy IPC (never
 * slept, moved or reused). An allocation that cannot have a handle from its base (it starts
 * inside a granule: between the slab sizes and 2 MiB) is refused with CUDA_ERROR_NOT_SUPPORTED:
 * any handle would give the other process other bytes than it asks for. */
#define OWN_GATE_MS 10000   /* how long the move waits for submissions in flight */

static CUresult own_heap_memory(void *addr)
{
	vmm_devptr p = (vmm_devptr)(uintptr_t)addr;
	vmm_core *core = hook_cuda_core();
	vmm_alloc_info info;
	vmm_share_info si;
	vmm_error err;
	vmm_status st;
	bool move = false;

	if (!core || !vmm_lookup(core, p, &info))
		return CUDA_SUCCESS; /* not ours: the driver answers */
	vmm_error_clear(&err);
	st = vmm_share_own_plan(core, p, &move, &err);
	if (!st && move) {
		st = gate_close(OWN_GATE_MS, &err);
		if (!st) {
			st = vmm_share_own(core, p, &si, &err);
			gate_open();
		}
	} else if (!st) {
		st = vmm_share_own(core, p, &si, &err);
	}
	if (!st)
		return CUDA_SUCCESS;
	vmm_log(VMM_LOG_WARN, "cuMemRetainAllocationHandle(%p): %s", addr, err.msg);
	switch (st) {
	case VMM_E_UNSUPPORTED:
		return CUDA_ERROR_NOT_SUPPORTED;
	case VMM_E_OOM:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case VMM_E_BUSY:
		return CUDA_ERROR_ILLEGAL_STATE;
	case VMM_E_DRIVER:
		return err.driver_code ? (CUresult)err.driver_code : CUDA_ERROR_UNKNOWN;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* A retain of a tracked mapping is the registry's reference: the driver is asked only when the
 * program had released every reference (app_vmm.h), so that one cuMemRelease of the program's
 * matches one reference, before and after a wake. */
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	vmm_app_registry *reg;
	bool driver_ref = false;
	vmm_phys app = 0;
	CUresult r = CUDA_SUCCESS;

	gate_enter();
	reg = registry_peek();
	if (reg && handle)
		app = vmm_app_retained(reg, (vmm_devptr)(uintptr_t)addr, &driver_ref);
	if (!app && handle)
		r = own_heap_memory(addr);
	if (r == CUDA_SUCCESS && (!app || driver_ref))
		r = CALL_REAL(cuMemRetainAllocationHandle, (handle, addr));
	if (app) {
		if (r == CUDA_SUCCESS)
			*handle = (CUmemGenericAllocationHandle)app;
		else
			vmm_app_released(reg, app);
	} else if (r == CUDA_SUCCESS && reg && handle) {
		*handle = (CUmemGenericAllocationHandle)vmm_app_program_handle(reg,
									      (vmm_phys)*handle);
	}
	gate_leave();
	return r;
}

/* Answered from the recorded properties when the registry has them (the same ones wake created
 * with), so that an asleep handle never reaches the driver. */
CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							CUmemGenericAllocationHandle handle)
{
	vmm_app_registry *reg = registry_peek();
	CUmemGenericAllocationHandle real = real_handle(reg, handle);

	if (reg && prop && !real && handle &&
	    vmm_app_prop_of(reg, (vmm_phys)handle, prop, sizeof(*prop)))
		return CUDA_SUCCESS;
	if (asleep_handle(handle, real, "cuMemGetAllocationPropertiesFromHandle"))
		return CUDA_ERROR_ILLEGAL_STATE;
	return CALL_REAL(cuMemGetAllocationPropertiesFromHandle, (prop, real));
}

/* An imported handle maps another process's memory: recorded so that sleep leaves it (and the
 * bytes mapped from it) resident. Only device memory is ours to track. */
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
						void *osHandle,
						CUmemAllocationHandleType shHandleType)
{
	CUmemAllocationProp prop;
	vmm_app_registry *reg;
	CUresult r;

	gate_enter();
	reg = registry();
	r = CALL_REAL(cuMemImportFromShareableHandle, (handle, osHandle, shHandleType));
	if (r == CUDA_SUCCESS && reg && handle &&
	    CALL_REAL(cuMemGetAllocationPropertiesFromHandle, (&prop, *handle)) == CUDA_SUCCESS &&
	    prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
		vmm_app_imported(reg, (vmm_phys)*handle, prop.location.id);
		*handle = (CUmemGenericAllocationHandle)vmm_app_program_handle(reg,
									      (vmm_phys)*handle);
		if (shHandleType == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
			vmm_app_share_keep(reg, (vmm_phys)*handle, (int)(intptr_t)osHandle);
	}
	gate_leave();
	return r;
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
 * peer's device. The core is made here if it does not exist yet: a program enables peer access
 * before its first allocation as often as after, and the heaps made later must know it (on two
 * H200s a kernel reading the peer's memory faulted). */
static void follow_peer(CUcontext peer, bool enable)
{
	shim_runtime *rt = shim_runtime_cuda();
	vmm_core *core = rt ? rt->side[SHIM_CUDA].core : NULL;
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
