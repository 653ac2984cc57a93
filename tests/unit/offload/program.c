/* The pretend program (program.h). */
#include "program.h"

#include <criterion/criterion.h>
#include <dlfcn.h>
#include <string.h>

struct cu cu;

#define LOAD(field, name)                                                              \
	do {                                                                           \
		*(void **)&cu.field = dlsym(lib, name);                                \
		cr_assert_not_null(cu.field, "simdev's libcuda lacks %s", name);       \
	} while (0)

void prog_open(struct tdev *t)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CUcontext ctx;

	cr_assert_not_null(lib, "libcuda.so.1 is loaded by the backend");
	LOAD(ctx_retain, "cuDevicePrimaryCtxRetain");
	LOAD(ctx_set, "cuCtxSetCurrent");
	LOAD(create, "cuMemCreate");
	LOAD(release, "cuMemRelease");
	LOAD(map, "cuMemMap");
	LOAD(unmap, "cuMemUnmap");
	LOAD(set_access, "cuMemSetAccess");
	LOAD(get_access, "cuMemGetAccess");
	LOAD(reserve, "cuMemAddressReserve");
	LOAD(retain, "cuMemRetainAllocationHandle");
	LOAD(export_fd, "cuMemExportToShareableHandle");
	LOAD(import_fd, "cuMemImportFromShareableHandle");
	LOAD(check_access, "simdev_check_access");
	cr_assert_eq(cu.ctx_retain(&ctx, 0), CUDA_SUCCESS);
	cr_assert_eq(cu.ctx_set(ctx), CUDA_SUCCESS);
	/* The CUDA backend's own: wake must re-create the program's kind and map parts. */
	cr_assert_not_null(t->be->create_with_prop, "the CUDA backend has create_with_prop");
	cr_assert_not_null(t->be->map_at, "the CUDA backend has map_at");
}

vmm_phys prog_create(vmm_app_registry *reg, size_t size, int dev, int exportable)
{
	CUmemAllocationProp p;
	CUmemGenericAllocationHandle h;
	vmm_phys app;

	memset(&p, 0, sizeof(p));
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	if (exportable)
		p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	cr_assert_eq(cu.create(&h, size, &p, 0), CUDA_SUCCESS, "cuMemCreate %zu", size);
	app = vmm_app_created_value(reg, h, size, dev, &p, sizeof(p));
	cr_assert_neq(app, 0);
	return app;
}

vmm_devptr prog_reserve(size_t size)
{
	CUdeviceptr va = 0;

	cr_assert_eq(cu.reserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
	return va;
}

void prog_map(vmm_app_registry *reg, vmm_devptr va, size_t size, size_t off, vmm_phys app)
{
	cr_assert_eq(cu.map(va, size, off, vmm_app_real_handle(reg, app), 0), CUDA_SUCCESS,
		     "cuMemMap");
	vmm_app_mapped(reg, va, size, off, app);
}

static vmm_access_mask access_now(vmm_devptr va)
{
	vmm_access_mask m = 0;

	for (int d = 0; d < 2; d++) {
		CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d };
		unsigned long long f = 0;

		if (cu.get_access(&f, &loc, va) == CUDA_SUCCESS &&
		    f == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			m |= 1u << d;
	}
	return m;
}

static void set_flags(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask mask,
		      CUmemAccess_flags flags)
{
	CUmemAccessDesc d[VMM_MAX_DEVICES];
	size_t n = 0;

	for (int i = 0; i < VMM_MAX_DEVICES; i++) {
		if (!(mask & (1u << i)))
			continue;
		d[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		d[n].location.id = i;
		d[n++].flags = flags;
	}
	cr_assert_eq(cu.set_access(va, size, d, n), CUDA_SUCCESS, "cuMemSetAccess");
	vmm_app_access_set(reg, va, size, access_now(va));
}

void prog_access(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask rw)
{
	set_flags(reg, va, size, rw, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
}

void prog_revoke(vmm_app_registry *reg, vmm_devptr va, size_t size, vmm_access_mask mask)
{
	set_flags(reg, va, size, mask, CU_MEM_ACCESS_FLAGS_PROT_NONE);
}

void prog_unmap(vmm_app_registry *reg, vmm_devptr va, size_t size)
{
	cr_assert_eq(cu.unmap(va, size), CUDA_SUCCESS, "cuMemUnmap");
	vmm_app_unmapped(reg, va, size);
}

/* As the shim's cuMemRelease: only the program's last reference reaches the driver. */
void prog_release(vmm_app_registry *reg, vmm_phys app)
{
	vmm_phys real = 0;

	switch (vmm_app_release_ref(reg, app, &real)) {
	case VMM_APP_RELEASE_DRIVER:
		cr_assert_eq(cu.release(real), CUDA_SUCCESS, "cuMemRelease");
		vmm_app_released(reg, app);
		break;
	case VMM_APP_RELEASE_COUNTED:
		break;
	case VMM_APP_RELEASE_INVALID:
		cr_assert_fail("release of handle %#llx, which holds no reference",
			       (unsigned long long)app);
	}
}

/* As the shim's cuMemRetainAllocationHandle. */
vmm_phys prog_retain(vmm_app_registry *reg, vmm_devptr va)
{
	CUmemGenericAllocationHandle r = 0;
	bool driver_ref = false;
	vmm_phys app = vmm_app_retained(reg, va, &driver_ref);

	if (app && !driver_ref)
		return app;
	cr_assert_eq(cu.retain(&r, (void *)(uintptr_t)va), CUDA_SUCCESS,
		     "cuMemRetainAllocationHandle");
	return app ? app : vmm_app_program_handle(reg, r);
}
