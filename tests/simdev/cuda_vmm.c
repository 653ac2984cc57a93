/* The CUDA virtual-memory API over simdev's memfd device memory (sim_mem.c). */
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"

static bool aligned(size_t v)
{
	return v % SIM_GRANULARITY == 0;
}

static CUresult check_prop(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->location.id < 0 || prop->location.id >= sim_device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	if (prop->requestedHandleTypes &
	    ~(CUmemAllocationHandleType)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	SIM_BEGIN("cuMemGetAllocationGranularity", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
			     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop);
	if (r)
		return r;
	*granularity = SIM_GRANULARITY;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	SIM_BEGIN("cuMemAddressReserve", CUDA_ERROR_OUT_OF_MEMORY);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ptr || !size || !aligned(size) || flags || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (alignment < SIM_GRANULARITY)
		alignment = SIM_GRANULARITY;
	pthread_mutex_lock(&sim_lock);
	void *va = sim_va_reserve(size, alignment, (uintptr_t)addr);
	if (va && sim_reservation_add((uintptr_t)va, size)) {
		munmap(va, size);
		va = NULL;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!va)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ptr = (CUdeviceptr)(uintptr_t)va;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	SIM_BEGIN("cuMemAddressFree", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_reservation *res = sim_reservation_exact((uintptr_t)ptr);
	if (!res || res->size != size)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (sim_reservation_has_mappings(res))
		r = CUDA_ERROR_INVALID_VALUE; /* unmap first, as on the real driver */
	else
		sim_reservation_remove(res);
	pthread_mutex_unlock(&sim_lock);
	return r;
}

SIM_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	SIM_BEGIN("cuMemCreate", CUDA_ERROR_OUT_OF_MEMORY);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!handle || !size || !aligned(size) || flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_prop(prop);
	if (r)
		return r;
	int oom;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_create(prop->location.id, size, &oom);
	if (p) {
		p->handle_types = prop->requestedHandleTypes;
		*handle = sim_phys_handle(p);
	}
	pthread_mutex_unlock(&sim_lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	SIM_BEGIN("cuMemRelease", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup(handle);
	if (p)
		sim_phys_release(p); /* the memory goes once no mapping or other holder uses it */
	pthread_mutex_unlock(&sim_lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	SIM_BEGIN("cuMemMap", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	uintptr_t va = (uintptr_t)ptr;
	if (!size || flags || !aligned(va) || !aligned(size) || !aligned(offset))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup(handle);
	if (!p)
		r = CUDA_ERROR_INVALID_HANDLE;
	else if (offset > p->size || size > p->size - offset)
		r = CUDA_ERROR_INVALID_VALUE;
	else if ((offset || size != p->size) && !sim_config()->partial_map)
		/* The driver maps whole handles only, whatever its documentation allows for later
		 * (tests/gpu/PROBE.md (k): a part at offset 0 or at 10 MiB, on the H100). */
		r = CUDA_ERROR_NOT_SUPPORTED;
	else if (!sim_reservation_find(va, size) || sim_mapping_overlaps(va, size))
		r = CUDA_ERROR_INVALID_VALUE;
	else if (!sim_mapping_add(va, size, offset, p))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* [ptr, ptr+size) must consist of whole mappings: a part of a mapping cannot be unmapped. */
SIM_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	SIM_BEGIN("cuMemUnmap", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	uintptr_t va = (uintptr_t)ptr, end = va + size;
	if (!size || end < va)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	size_t covered = 0;
	for (size_t i = 0; i < sim_mapping_count(); i++) {
		struct sim_mapping *m = sim_mapping_get(i);
		if (m->va < end && va < m->va + m->size) {
			if (m->va < va || m->va + m->size > end)
				r = CUDA_ERROR_INVALID_VALUE;
			covered += m->size;
		}
	}
	if (!r && covered != size)
		r = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; !r && i < sim_mapping_count();) {
		struct sim_mapping *m = sim_mapping_get(i);
		if (m->va < end && va < m->va + m->size) {
			sim_va_unmap_to_reservation(m->va, m->size);
			sim_mapping_remove(m); /* swaps the last one in: look at i again */
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* The range must consist of whole mappings (simdev keeps access per mapping). */
SIM_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	SIM_BEGIN("cuMemSetAccess", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	uintptr_t va = (uintptr_t)ptr, end = va + size;
	if (!size || !desc || !count || end < va)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		     desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE))
			return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].location.id < 0 || desc[i].location.id >= sim_device_count())
			return CUDA_ERROR_INVALID_DEVICE;
	}
	pthread_mutex_lock(&sim_lock);
	size_t covered = 0;
	for (size_t i = 0; i < sim_mapping_count(); i++) {
		struct sim_mapping *m = sim_mapping_get(i);
		if (m->va < end && va < m->va + m->size) {
			if (m->va < va || m->va + m->size > end)
				r = CUDA_ERROR_INVALID_VALUE;
			covered += m->size;
		}
	}
	if (!r && covered != size)
		r = CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; !r && i < sim_mapping_count(); i++) {
		struct sim_mapping *m = sim_mapping_get(i);
		if (!(m->va < end && va < m->va + m->size))
			continue;
		for (size_t d = 0; d < count; d++)
			m->access[desc[d].location.id] = (unsigned char)desc[d].flags;
		if (sim_mapping_protect(m))
			r = CUDA_ERROR_UNKNOWN;
	}
	pthread_mutex_unlock(&sim_lock);
	return r;
}

SIM_API CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location,
				CUdeviceptr ptr)
{
	SIM_BEGIN("cuMemGetAccess", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    location->id < 0 || location->id >= sim_device_count())
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_mapping *m = sim_mapping_at((uintptr_t)ptr);
	if (m)
		*flags = m->access[location->id];
	pthread_mutex_unlock(&sim_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							CUmemGenericAllocationHandle handle)
{
	SIM_BEGIN("cuMemGetAllocationPropertiesFromHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup(handle);
	if (p) {
		*prop = (CUmemAllocationProp){ 0 };
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = p->dev;
		prop->requestedHandleTypes = (CUmemAllocationHandleType)p->handle_types;
	}
	pthread_mutex_unlock(&sim_lock);
	return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Returns the handle mapped at addr ("the same handle value used to map the memory", any address
 * of the mapping) and counts a reference that a cuMemRelease must pair. */
SIM_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	SIM_BEGIN("cuMemRetainAllocationHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_mapping *m = sim_mapping_at((uintptr_t)addr);
	if (m) {
		sim_phys_retain(m->phys);
		*handle = sim_phys_handle(m->phys);
	}
	pthread_mutex_unlock(&sim_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult from_err(enum sim_err e)
{
	return e == SIM_OK ? CUDA_SUCCESS
	       : e == SIM_E_OOM ? CUDA_ERROR_OUT_OF_MEMORY
	       : e == SIM_E_UNSUPPORTED ? CUDA_ERROR_NOT_SUPPORTED
	       : e == SIM_E_HANDLE ? CUDA_ERROR_INVALID_HANDLE
			: CUDA_ERROR_INVALID_VALUE;
}

/* A new file descriptor each call, owned by the caller; the memory lives while it is open. */
SIM_API CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType type,
					      unsigned long long flags)
{
	SIM_BEGIN("cuMemExportToShareableHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!shareable || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup(handle);
	if (!p) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (!(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		r = CUDA_ERROR_INVALID_VALUE; /* not requested at cuMemCreate */
	} else {
		enum sim_err e;
		int fd = sim_mem_export(p->mem, &e);
		if (fd >= 0)
			*(int *)shareable = fd;
		r = from_err(e);
	}
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* A new handle each call (even in the exporting process, as on the driver), to the same memory:
 * counted once, on its creator's device. */
SIM_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *os,
						CUmemAllocationHandleType type)
{
	SIM_BEGIN("cuMemImportFromShareableHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = (int)(intptr_t)os;
	enum sim_err e;
	pthread_mutex_lock(&sim_lock);
	struct sim_mem *m = sim_mem_import_fd(fd, &e);
	struct sim_phys *p = m ? sim_phys_of(m, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) : NULL;
	if (p) {
		*handle = sim_phys_handle(p);
	} else if (m) {
		sim_mem_put(m);
		e = SIM_E_OOM;
	}
	pthread_mutex_unlock(&sim_lock);
	return from_err(e);
}
