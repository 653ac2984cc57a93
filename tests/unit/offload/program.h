/* A pretend program for the app-VMM tests: it calls simdev's libcuda directly (cuMemCreate,
 * cuMemMap, cuMemSetAccess, ...) and reports each successful call to the registry the way the
 * shim does, translating its handle values through the registry. */
#ifndef OFFLOAD_TEST_PROGRAM_H
#define OFFLOAD_TEST_PROGRAM_H

#include <cuda.h>

#include "offload/app_vmm.h"
#include "helpers.h"

struct cu {
	CUresult (*ctx_retain)(CUcontext *, CUdevice);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*retain)(CUmemGenericAllocationHandle *, void *);
	CUresult (*export_fd)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
			      unsigned long long);
	CUresult (*import_fd)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
	int (*check_access)(int dev, const void *p, size_t n);   /* simdev_check_access */
};

extern struct cu cu;

/* Loads the functions and makes device 0's primary context current; checks that the backend has
 * the optional create_with_prop / map_at calls. */
void prog_open(struct tdev *t);
/* cuMemCreate on dev; `exportable` asks for a POSIX fd handle type. Returns the program's value. */
vmm_phys prog_create(vmm_app_registry *reg, size_t size, int dev, int exportable);
vmm_devptr prog_reserve(size_t size);
void prog_map(vmm_app_registry *reg, vmm_devptr va, size_t size, size_t off, vmm_phys app);
/* Grants rw to the devices in rw (others keep theirs) and reports the access after the call, as
 * the shim does. */
void prog_access(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask rw);
/* Revokes (PROT_NONE) the devices in mask and reports the access after the call. */
void prog_revoke(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask mask);
void prog_unmap(vmm_app_registry *reg, vmm_devptr va, size_t size);
/* cuMemRelease and cuMemRetainAllocationHandle as the shim does them (reference counted). */
void prog_release(vmm_app_registry *reg, vmm_phys app);
vmm_phys prog_retain(vmm_app_registry *reg, vmm_devptr va);

#endif
