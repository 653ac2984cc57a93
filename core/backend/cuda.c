/* The CUDA backend: backend.h over the real libcuda.so.1. Every driver function is resolved by its
 * exported (versioned) name with vmm_real_dlsym, so the shim's own hooks are never called back.
 * Calls that need a context run in the device's primary context (retained once per device), and
 * the thread's context is pushed/popped only when it is absent or on another device.
 * synchronize drains the primary context (which covers green contexts), every context the program
 * created (listed by the shim, contexts.h) and the calling thread's own. */
#include "backend.h"

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "contexts.h"
#include "driver_lib.h"

#define DRV(name) __typeof__(&name) name
struct cuda_api {
	DRV(cuInit);
	DRV(cuGetErrorName);
	DRV(cuDeviceGetCount);
	DRV(cuDeviceGet);
	DRV(cuDeviceGetAttribute);
	DRV(cuDevicePrimaryCtxRetain);
	DRV(cuDevicePrimaryCtxRelease_v2);
	DRV(cuDevicePrimaryCtxGetState); /* optional: release_own_context */
	DRV(cuCtxGetCurrent);
	DRV(cuCtxGetDevice);
	DRV(cuCtxPushCurrent_v2);
	DRV(cuCtxPopCurrent_v2);
	DRV(cuCtxSynchronize);
	DRV(cuCtxSynchronize_v2); /* optional: CUDA 13.0 drivers */
	DRV(cuMemGetInfo_v2);
	DRV(cuMemGetAllocationGranularity);
	DRV(cuMemAddressReserve);
	DRV(cuMemAddressFree);
	DRV(cuMemCreate);
	DRV(cuMemRelease);
	DRV(cuMemMap);
	DRV(cuMemUnmap);
	DRV(cuMemSetAccess);
	/* Optional: only the offload engine needs them. */
	DRV(cuMemAllocHost_v2);
	DRV(cuMemFreeHost);
	DRV(cuMemHostRegister_v2);
	DRV(cuMemHostUnregister);
	DRV(cuStreamCreate);
	DRV(cuStreamDestroy_v2);
	DRV(cuStreamSynchronize);
	DRV(cuMemcpyDtoHAsync_v2);
	DRV(cuMemcpyHtoDAsync_v2);
	DRV(cuStreamGetCtx);
	/* Optional: sharing with other processes, and moving an allocation to a handle of its own. */
	DRV(cuMemExportToShareableHandle);
	DRV(cuMemImportFromShareableHandle);
	DRV(cuMemGetAllocationPropertiesFromHandle);
	DRV(cuMemcpyDtoDAsync_v2);
};
#undef DRV

struct cuda_impl {
	void *lib;
	struct cuda_api api;
	int ndev;
	pthread_mutex_t lock;              /* guards the lazily retained primary contexts */
	CUcontext primary[VMM_MAX_DEVICES];
	int rdma_vmm[VMM_MAX_DEVICES];     /* -1 unknown, 0/1: GPUDirect RDMA flag allowed */
	int posix_fd[VMM_MAX_DEVICES];     /* -1 unknown, 0/1: handles export as POSIX fds */
	/* The first device the program's own threads were seen on (-1: none yet): where calls
	 * from a thread without a context (the control thread) go, so that a process never gains
	 * a context on a device it does not use (device 0 for every rank of a job otherwise). */
	int home_dev;
	_Atomic uint32_t used;             /* devices a call has named: the ones this process uses */
};

static struct cuda_impl *impl_of(vmm_backend *be)
{
	return be->impl;
}

static vmm_status drv_fail(struct cuda_impl *ci, vmm_error *err, CUresult rc, const char *what)
{
	const char *name = NULL;

	if (ci->api.cuGetErrorName)
		ci->api.cuGetErrorName(rc, &name);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return vmm_fail(err, VMM_E_OOM, (int)rc, "%s: out of device memory (%s)", what,
				name ? name : "CUDA_ERROR_OUT_OF_MEMORY");
	return vmm_fail(err, VMM_E_DRIVER, (int)rc, "%s failed: %s (%d)", what,
			name ? name : "unknown CUresult", (int)rc);
}

static vmm_status check_dev(struct cuda_impl *ci, int dev, vmm_error *err)
{
	if (dev < 0 || dev >= ci->ndev || dev >= VMM_MAX_DEVICES)
		return vmm_fail(err, VMM_E_INVALID, 0, "no CUDA device %d (the driver has %d)", dev,
				ci->ndev);
	return VMM_OK;
}

/* The calling thread's context scope: enter makes a context of dev current (the thread's own when
 * it is on dev, else dev's primary one); leave restores what was there. */
struct ctx_scope {
	int pushed;
};

static vmm_status primary_ctx(struct cuda_impl *ci, int dev, CUcontext *out, vmm_error *err)
{
	CUresult rc = CUDA_SUCCESS;
	CUdevice d;

	pthread_mutex_lock(&ci->lock);
	if (!ci->primary[dev]) {
		rc = ci->api.cuDeviceGet(&d, dev);
		if (rc == CUDA_SUCCESS)
			rc = ci->api.cuDevicePrimaryCtxRetain(&ci->primary[dev], d);
		if (rc != CUDA_SUCCESS)
			ci->primary[dev] = NULL;
	}
	*out = ci->primary[dev];
	pthread_mutex_unlock(&ci->lock);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuDevicePrimaryCtxRetain");
	return VMM_OK;
}

static vmm_status ctx_enter(struct cuda_impl *ci, int dev, struct ctx_scope *s, vmm_error *err)
{
	CUcontext cur = NULL, prim;
	CUdevice cur_dev;
	CUresult rc;
	vmm_status st;

	s->pushed = 0;
	if (check_dev(ci, dev, err))
		return VMM_E_INVALID;
	if (!(atomic_load_explicit(&ci->used, memory_order_relaxed) & (1u << dev)))
		atomic_fetch_or_explicit(&ci->used, 1u << dev, memory_order_relaxed);
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
	    ci->api.cuCtxGetDevice(&cur_dev) == CUDA_SUCCESS && (int)cur_dev == dev) {
		int none = -1;

		/* The calling thread's own context is on dev: the program uses it. */
		__atomic_compare_exchange_n(&ci->home_dev, &none, dev, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
		return VMM_OK;
	}
	st = primary_ctx(ci, dev, &prim, err);
	if (st)
		return st;
	rc = ci->api.cuCtxPushCurrent_v2(prim);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuCtxPushCurrent");
	s->pushed = 1;
	return VMM_OK;
}

/* A device this process uses, for calls that name none: the program's own device (home_dev)
 * when its threads were seen on one, else the lowest device an earlier call named (neither needs
 * a driver call), else the device of `handle` (0: none given). Never a guess such as device 0: a
 * primary context made on a device the process does not use holds its memory there (518 MiB on
 * an H200, on the GPU of another rank). -1 when no device is known. */
static int device_in_use(struct cuda_impl *ci, vmm_phys handle)
{
	int home = __atomic_load_n(&ci->home_dev, __ATOMIC_ACQUIRE);
	uint32_t used = atomic_load_explicit(&ci->used, memory_order_relaxed);
	CUmemAllocationProp p;

	if (home >= 0)
		return home;
	if (used)
		return __builtin_ctz(used);
	if (handle && ci->api.cuMemGetAllocationPropertiesFromHandle &&
	    ci->api.cuMemGetAllocationPropertiesFromHandle(
		    &p, (CUmemGenericAllocationHandle)handle) == CUDA_SUCCESS &&
	    p.location.type == CU_MEM_LOCATION_TYPE_DEVICE && p.location.id >= 0 &&
	    p.location.id < ci->ndev)
		return p.location.id;
	return -1;
}

/* For calls that name no device (map, unmap, release): any context will do. When the thread has
 * none (the control server's threads, the host-memory workers), the primary context of a device
 * the process uses (device_in_use) is made current. */
static vmm_status ctx_enter_any(struct cuda_impl *ci, vmm_phys handle, struct ctx_scope *s,
				vmm_error *err)
{
	CUcontext cur = NULL;
	int dev;

	s->pushed = 0;
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur)
		return VMM_OK;
	dev = device_in_use(ci, handle);
	if (dev < 0)
		return vmm_fail(err, VMM_E_DRIVER, 0, "no context is current and no CUDA device of "
				"this process is known yet");
	return ctx_enter(ci, dev, s, err);
}

static void ctx_leave(struct cuda_impl *ci, struct ctx_scope *s)
{
	CUcontext popped;

	if (s->pushed)
		ci->api.cuCtxPopCurrent_v2(&popped);
	s->pushed = 0;
}

/* Async copies: the driver checks them against the calling thread's current context, not the
 * stream's, and refuses a mismatch (CUDA_ERROR_NOT_SUPPORTED on the H200 when another device's
 * context, or none, is current). The stream's own context is made current for the call. */
static vmm_status stream_ctx_enter(struct cuda_impl *ci, CUstream stream, struct ctx_scope *s,
				   vmm_error *err)
{
	CUcontext want = NULL, cur = NULL;
	CUresult rc;

	s->pushed = 0;
	if (!stream || !ci->api.cuStreamGetCtx)
		return ctx_enter_any(ci, 0, s, err);
	rc = ci->api.cuStreamGetCtx(stream, &want);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuStreamGetCtx");
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == want)
		return VMM_OK;
	rc = ci->api.cuCtxPushCurrent_v2(want);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuCtxPushCurrent");
	s->pushed = 1;
	return VMM_OK;
}

static vmm_status cu_device_count(vmm_backend *be, int *count, vmm_error *err)
{
	(void)err;
	*count = impl_of(be)->ndev;
	return VMM_OK;
}

/* A device attribute that is a yes/no, asked once (-1 in *cache: not asked yet; threads that ask
 * at the same time get the same answer). */
static int device_flag(struct cuda_impl *ci, int dev, CUdevice_attribute attr, int *cache)
{
	int v = __atomic_load_n(cache, __ATOMIC_RELAXED);
	CUdevice d;

	if (v >= 0)
		return v;
	v = 0;
	if (ci->api.cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
	    ci->api.cuDeviceGetAttribute(&v, attr, d) != CUDA_SUCCESS)
		v = 0;
	v = v ? 1 : 0;
	__atomic_store_n(cache, v, __ATOMIC_RELAXED);
	return v;
}

/* Every handle the heap makes can be exported as a POSIX file descriptor where the device allows
 * it, so that any allocation can be shared with another process later (legacy IPC, a program
 * exporting the handle behind a pointer). Measured on the H200: cuMemCreate costs the same with
 * and without the request (docs/research.md). */
static bool fd_exportable(struct cuda_impl *ci, int dev)
{
	return ci->api.cuMemExportToShareableHandle &&
	       device_flag(ci, dev, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
			   &ci->posix_fd[dev]);
}

static void fill_prop(struct cuda_impl *ci, int dev, CUmemAllocationProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = dev;
	prop->allocFlags.gpuDirectRDMACapable = (unsigned char)device_flag(
		ci, dev, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
		&ci->rdma_vmm[dev]);
	if (fd_exportable(ci, dev))
		prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static vmm_status cu_granularity(vmm_backend *be, int dev, size_t *bytes, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUmemAllocationProp prop;
	CUresult rc;

	if (check_dev(ci, dev, err))
		return VMM_E_INVALID;
	fill_prop(ci, dev, &prop);
	rc = ci->api.cuMemGetAllocationGranularity(bytes, &prop,
						   CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemGetAllocationGranularity");
	if (*bytes == 0 || (*bytes & (*bytes - 1)))
		return vmm_fail(err, VMM_E_DRIVER, 0, "granularity %zu is not a power of two",
				*bytes);
	return VMM_OK;
}

static vmm_status cu_mem_info(vmm_backend *be, int dev, size_t *free_bytes, size_t *total_bytes,
			      vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st = ctx_enter(ci, dev, &s, err);
	CUresult rc;

	if (st)
		return st;
	rc = ci->api.cuMemGetInfo_v2(free_bytes, total_bytes);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemGetInfo");
}

static vmm_status cu_current_device(vmm_backend *be, int *dev, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUcontext cur = NULL;
	CUdevice d;

	(void)err;
	*dev = 0;
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur &&
	    ci->api.cuCtxGetDevice(&d) == CUDA_SUCCESS)
		*dev = (int)d;
	return VMM_OK;
}

static vmm_status cu_reserve(vmm_backend *be, int dev, size_t size, size_t align, vmm_devptr *va,
			     vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUdeviceptr p = 0;
	struct ctx_scope s;
	vmm_status st = ctx_enter(ci, dev, &s, err);
	CUresult rc;

	if (st)
		return st;
	rc = ci->api.cuMemAddressReserve(&p, size, align, 0, 0);
	ctx_leave(ci, &s);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemAddressReserve");
	*va = (vmm_devptr)p;
	return VMM_OK;
}

static vmm_status cu_unreserve(vmm_backend *be, int dev, vmm_devptr va, size_t size,
			       vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUresult rc;

	(void)dev;
	rc = ci->api.cuMemAddressFree((CUdeviceptr)va, size);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemAddressFree");
}

static vmm_status cu_create(vmm_backend *be, int dev, size_t size, vmm_phys *handle,
			    vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	struct ctx_scope s;
	vmm_status st = ctx_enter(ci, dev, &s, err);
	CUresult rc;

	if (st)
		return st;
	fill_prop(ci, dev, &prop);
	rc = ci->api.cuMemCreate(&h, size, &prop, 0);
	ctx_leave(ci, &s);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemCreate");
	*handle = (vmm_phys)h;
	return VMM_OK;
}

static vmm_status cu_release(vmm_backend *be, vmm_phys handle, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	CUresult rc;

	/* Teardown needs no context; push one only when the driver asks for it, so that
	 * cleanup does not depend on a context switch succeeding. */
	rc = ci->api.cuMemRelease((CUmemGenericAllocationHandle)handle);
	if (rc == CUDA_ERROR_INVALID_CONTEXT && !ctx_enter_any(ci, handle, &s, err)) {
		rc = ci->api.cuMemRelease((CUmemGenericAllocationHandle)handle);
		ctx_leave(ci, &s);
	}
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemRelease");
}

static vmm_status cu_map(vmm_backend *be, vmm_devptr va, size_t size, vmm_phys handle,
			 vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st = ctx_enter_any(ci, handle, &s, err);
	CUresult rc;

	if (st)
		return st;
	rc = ci->api.cuMemMap((CUdeviceptr)va, size, 0, (CUmemGenericAllocationHandle)handle, 0);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemMap");
}

/* A handle of the program's own kind, from its CUmemAllocationProp verbatim (handle types for
 * export, GPUDirect RDMA, compression, ...): wake must give back what the program created. */
static vmm_status cu_create_with_prop(vmm_backend *be, int dev, size_t size, const void *prop,
				      size_t prop_size, vmm_phys *handle, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp p;
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	if (!prop || prop_size != sizeof(p))
		return vmm_fail(err, VMM_E_INVALID, 0,
				"allocation properties of %zu bytes (CUmemAllocationProp has %zu)",
				prop_size, sizeof(p));
	memcpy(&p, prop, sizeof(p));
	if (p.location.type != CU_MEM_LOCATION_TYPE_DEVICE || p.location.id != dev)
		return vmm_fail(err, VMM_E_INVALID, 0,
				"allocation properties name location %d/%d, not device %d",
				(int)p.location.type, p.location.id, dev);
	st = ctx_enter(ci, dev, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemCreate(&h, size, &p, 0);
	ctx_leave(ci, &s);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemCreate");
	*handle = (vmm_phys)h;
	return VMM_OK;
}

/* Part of a handle ([offset, offset + size)) at va, as the program had mapped it. */
static vmm_status cu_map_at(vmm_backend *be, vmm_devptr va, size_t size, size_t offset,
			    vmm_phys handle, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st = ctx_enter_any(ci, handle, &s, err);
	CUresult rc;

	if (st)
		return st;
	rc = ci->api.cuMemMap((CUdeviceptr)va, size, offset, (CUmemGenericAllocationHandle)handle,
			      0);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemMap");
}

static vmm_status cu_unmap(vmm_backend *be, vmm_devptr va, size_t size, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	CUresult rc;

	rc = ci->api.cuMemUnmap((CUdeviceptr)va, size);
	if (rc == CUDA_ERROR_INVALID_CONTEXT && !ctx_enter_any(ci, 0, &s, err)) {
		rc = ci->api.cuMemUnmap((CUdeviceptr)va, size);
		ctx_leave(ci, &s);
	}
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemUnmap");
}

static vmm_status cu_set_access(vmm_backend *be, int dev, vmm_devptr va, size_t size,
				const int *peers, int npeers, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUmemAccessDesc desc[VMM_MAX_DEVICES + 1];
	struct ctx_scope s;
	int n = 0;
	CUresult rc;

	if (check_dev(ci, dev, err))
		return VMM_E_INVALID;
	desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	desc[n].location.id = dev;
	desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (int i = 0; i < npeers && n < VMM_MAX_DEVICES + 1; i++) {
		if (peers[i] == dev)
			continue;
		if (check_dev(ci, peers[i], err))
			return VMM_E_INVALID;
		desc[n].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		desc[n].location.id = peers[i];
		desc[n++].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	}
	if (ctx_enter(ci, dev, &s, err))
		return err ? err->status : VMM_E_DRIVER;
	rc = ci->api.cuMemSetAccess((CUdeviceptr)va, size, desc, (size_t)n);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemSetAccess");
}

/* Wait for one context's work, current to this thread or not: cuCtxSynchronize_v2 names it
 * (CUDA 13.0); older drivers get it pushed for a plain cuCtxSynchronize. */
static CUresult ctx_sync(struct cuda_impl *ci, CUcontext ctx)
{
	CUcontext cur = NULL, popped;
	CUresult rc;

	if (ci->api.cuCtxSynchronize_v2)
		return ci->api.cuCtxSynchronize_v2(ctx);
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx)
		return ci->api.cuCtxSynchronize();
	rc = ci->api.cuCtxPushCurrent_v2(ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	rc = ci->api.cuCtxSynchronize();
	ci->api.cuCtxPopCurrent_v2(&popped);
	return rc;
}

static vmm_status sync_program_context(void *ctx, void *arg, vmm_error *err)
{
	struct cuda_impl *ci = arg;
	CUresult rc = ctx_sync(ci, (CUcontext)ctx);

	/* Destroyed through a path the shim did not see: a destroyed context has no work left. */
	if (rc == CUDA_ERROR_CONTEXT_IS_DESTROYED || rc == CUDA_ERROR_INVALID_CONTEXT)
		return VMM_OK;
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuCtxSynchronize");
}

static vmm_status sync_device(struct cuda_impl *ci, int dev, vmm_error *err)
{
	CUcontext cur = NULL, prim;
	CUdevice cur_dev;
	vmm_status st;
	CUresult rc;

	st = primary_ctx(ci, dev, &prim, err);
	if (st)
		return st;
	/* The primary context; its synchronization also waits for the device's green contexts. */
	rc = ctx_sync(ci, prim);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuCtxSynchronize");
	/* Every context the program created on dev: synchronizing one leaves the others running. */
	st = ctx_list_each(vmm_program_contexts(VMM_CTX_CUDA), dev, sync_program_context, ci, err);
	if (st)
		return st;
	/* The thread's own context, when it is another one on this device that nobody listed (made
	 * before the shim could see it, or a green context's). */
	if (ci->api.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && cur != prim &&
	    ci->api.cuCtxGetDevice(&cur_dev) == CUDA_SUCCESS && (int)cur_dev == dev &&
	    !ctx_list_has(vmm_program_contexts(VMM_CTX_CUDA), cur)) {
		rc = ci->api.cuCtxSynchronize();
		if (rc != CUDA_SUCCESS)
			return drv_fail(ci, err, rc, "cuCtxSynchronize");
	}
	return VMM_OK;
}

/* Never while the program captures a stream: the synchronization would break its capture
 * (captures.c). The caller then does without (the heap takes fresh memory, a sleep fails). */
static vmm_status cu_synchronize(vmm_backend *be, int dev, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	vmm_status st;

	if (check_dev(ci, dev, err))
		return VMM_E_INVALID;
	if (!vmm_sync_begin())
		return vmm_fail(err, VMM_E_BUSY, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
				"device %d not synchronized: the program is capturing a stream, which "
				"a synchronization would break", dev);
	st = sync_device(ci, dev, err);
	vmm_sync_end();
	return st;
}

#define NEED_OPTIONAL(ci, fn, err)                                                        \
	do {                                                                              \
		if (!(ci)->api.fn)                                                        \
			return vmm_fail(err, VMM_E_UNSUPPORTED, 0,                        \
					"the CUDA driver does not export " #fn);          \
	} while (0)

/* Pinned host memory belongs to a context: the thread's own when it has one, else the primary
 * context of a device the process uses (device_in_use; never an unused device's). */
static vmm_status host_ctx_enter(vmm_backend *be, struct ctx_scope *s, vmm_error *err)
{
	return ctx_enter_any(impl_of(be), 0, s, err);
}

static vmm_status cu_host_alloc_pinned(vmm_backend *be, size_t size, void **ptr, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemAllocHost_v2, err);
	st = host_ctx_enter(be, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemAllocHost_v2(ptr, size);
	ctx_leave(ci, &s);
	if (rc == CUDA_ERROR_OUT_OF_MEMORY)
		return vmm_fail(err, VMM_E_HOST_OOM, (int)rc, "cuMemAllocHost of %zu bytes", size);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemAllocHost");
}

static vmm_status cu_host_free_pinned(vmm_backend *be, void *ptr, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemFreeHost, err);
	rc = ci->api.cuMemFreeHost(ptr);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemFreeHost");
}

static vmm_status cu_host_register(vmm_backend *be, void *ptr, size_t size, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemHostRegister_v2, err);
	st = host_ctx_enter(be, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemHostRegister_v2(ptr, size, CU_MEMHOSTREGISTER_PORTABLE);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemHostRegister");
}

static vmm_status cu_host_unregister(vmm_backend *be, void *ptr, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemHostUnregister, err);
	rc = ci->api.cuMemHostUnregister(ptr);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemHostUnregister");
}

static vmm_status cu_stream_create(vmm_backend *be, int dev, vmm_stream *stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	CUstream str = NULL;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuStreamCreate, err);
	st = ctx_enter(ci, dev, &s, err);
	if (st)
		return st;
	rc = ci->api.cuStreamCreate(&str, CU_STREAM_NON_BLOCKING);
	ctx_leave(ci, &s);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuStreamCreate");
	*stream = str;
	return VMM_OK;
}

static vmm_status cu_stream_destroy(vmm_backend *be, vmm_stream stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUresult rc;

	NEED_OPTIONAL(ci, cuStreamDestroy_v2, err);
	rc = ci->api.cuStreamDestroy_v2((CUstream)stream);
	/* Teardown is retried once: a transient failure must not leak the stream. */
	if (rc != CUDA_SUCCESS && rc != CUDA_ERROR_INVALID_HANDLE)
		rc = ci->api.cuStreamDestroy_v2((CUstream)stream);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuStreamDestroy");
}

static vmm_status cu_stream_synchronize(vmm_backend *be, vmm_stream stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUresult rc;

	NEED_OPTIONAL(ci, cuStreamSynchronize, err);
	rc = ci->api.cuStreamSynchronize((CUstream)stream);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuStreamSynchronize");
}

static vmm_status cu_copy_d2h_async(vmm_backend *be, void *dst, vmm_devptr src, size_t n,
				    vmm_stream stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemcpyDtoHAsync_v2, err);
	st = stream_ctx_enter(ci, (CUstream)stream, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemcpyDtoHAsync_v2(dst, (CUdeviceptr)src, n, (CUstream)stream);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemcpyDtoHAsync");
}

static vmm_status cu_copy_h2d_async(vmm_backend *be, vmm_devptr dst, const void *src, size_t n,
				    vmm_stream stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemcpyHtoDAsync_v2, err);
	st = stream_ctx_enter(ci, (CUstream)stream, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemcpyHtoDAsync_v2((CUdeviceptr)dst, src, n, (CUstream)stream);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemcpyHtoDAsync");
}

static bool cu_shareable(vmm_backend *be, int dev)
{
	struct cuda_impl *ci = impl_of(be);

	return dev >= 0 && dev < ci->ndev && fd_exportable(ci, dev);
}

/* Export and import need no context on the drivers we know; one is made current only when the
 * driver asks for it (as for release and unmap). */
static vmm_status cu_export_fd(vmm_backend *be, int dev, vmm_phys handle, int *fd, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	int out = -1;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemExportToShareableHandle, err);
	rc = ci->api.cuMemExportToShareableHandle(&out, (CUmemGenericAllocationHandle)handle,
						  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (rc == CUDA_ERROR_INVALID_CONTEXT && !ctx_enter(ci, dev, &s, err)) {
		rc = ci->api.cuMemExportToShareableHandle(
			&out, (CUmemGenericAllocationHandle)handle,
			CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		ctx_leave(ci, &s);
	}
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemExportToShareableHandle");
	*fd = out;
	return VMM_OK;
}

static vmm_status cu_import_fd(vmm_backend *be, int fd, vmm_phys *handle, int *dev,
			       vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemImportFromShareableHandle, err);
	NEED_OPTIONAL(ci, cuMemGetAllocationPropertiesFromHandle, err);
	rc = ci->api.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
						    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (rc != CUDA_SUCCESS)
		return drv_fail(ci, err, rc, "cuMemImportFromShareableHandle");
	rc = ci->api.cuMemGetAllocationPropertiesFromHandle(&prop, h);
	if (rc != CUDA_SUCCESS || prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    check_dev(ci, prop.location.id, NULL)) {
		ci->api.cuMemRelease(h);
		if (rc != CUDA_SUCCESS)
			return drv_fail(ci, err, rc, "cuMemGetAllocationPropertiesFromHandle");
		return vmm_fail(err, VMM_E_INVALID, 0, "the imported memory is not on a device of "
				"this process");
	}
	*handle = (vmm_phys)h;
	*dev = prop.location.id;
	return VMM_OK;
}

static vmm_status cu_copy_d2d_async(vmm_backend *be, vmm_devptr dst, vmm_devptr src, size_t n,
				    vmm_stream stream, vmm_error *err)
{
	struct cuda_impl *ci = impl_of(be);
	struct ctx_scope s;
	vmm_status st;
	CUresult rc;

	NEED_OPTIONAL(ci, cuMemcpyDtoDAsync_v2, err);
	st = stream_ctx_enter(ci, (CUstream)stream, &s, err);
	if (st)
		return st;
	rc = ci->api.cuMemcpyDtoDAsync_v2((CUdeviceptr)dst, (CUdeviceptr)src, n,
					  (CUstream)stream);
	ctx_leave(ci, &s);
	return rc == CUDA_SUCCESS ? VMM_OK : drv_fail(ci, err, rc, "cuMemcpyDtoDAsync");
}

/* backend.h: let go of the backend's own retain of dev's primary context, and keep it let go
 * only when that ended the context (the program holds none any more). */
static int cu_release_own_context(vmm_backend *be, int dev)
{
	struct cuda_impl *ci = impl_of(be);
	unsigned int flags = 0;
	int active = 1, ended = -1;
	CUdevice d;

	if (dev < 0 || dev >= ci->ndev || dev >= VMM_MAX_DEVICES || !ci->api.cuDevicePrimaryCtxGetState)
		return -1;
	pthread_mutex_lock(&ci->lock);
	if (ci->primary[dev] && ci->api.cuDeviceGet(&d, dev) == CUDA_SUCCESS &&
	    ci->api.cuDevicePrimaryCtxRelease_v2(d) == CUDA_SUCCESS) {
		if (ci->api.cuDevicePrimaryCtxGetState(d, &flags, &active) != CUDA_SUCCESS)
			active = 1; /* unknown: as if the program still held it */
		ended = !active;
		/* Still active: another retain holds it, and it is the same context again. */
		if (!ended && ci->api.cuDevicePrimaryCtxRetain(&ci->primary[dev], d) != CUDA_SUCCESS)
			ci->primary[dev] = NULL; /* retained again when next needed */
		if (ended)
			ci->primary[dev] = NULL;
	}
	pthread_mutex_unlock(&ci->lock);
	return ended < 0 ? -1 : !ended;
}

static void cu_close(vmm_backend *be)
{
	struct cuda_impl *ci;

	if (!be)
		return;
	ci = impl_of(be);
	for (int d = 0; d < VMM_MAX_DEVICES; d++) {
		CUdevice dv;

		if (ci->primary[d] && ci->api.cuDeviceGet(&dv, d) == CUDA_SUCCESS)
			ci->api.cuDevicePrimaryCtxRelease_v2(dv);
	}
	/* libcuda stays loaded: the program (and other libraries) use it too. */
	pthread_mutex_destroy(&ci->lock);
	free(ci);
	free(be);
}

#define SYM(fn, opt) VMM_DRIVER_SYM(struct cuda_api, fn, opt)
static const struct vmm_driver_sym cuda_syms[] = {
	SYM(cuInit, 0), SYM(cuGetErrorName, 1), SYM(cuDeviceGetCount, 0), SYM(cuDeviceGet, 0),
	SYM(cuDeviceGetAttribute, 0), SYM(cuDevicePrimaryCtxRetain, 0),
	SYM(cuDevicePrimaryCtxRelease_v2, 0), SYM(cuDevicePrimaryCtxGetState, 1),
	SYM(cuCtxGetCurrent, 0), SYM(cuCtxGetDevice, 0),
	SYM(cuCtxPushCurrent_v2, 0), SYM(cuCtxPopCurrent_v2, 0), SYM(cuCtxSynchronize, 0),
	SYM(cuCtxSynchronize_v2, 1),
	SYM(cuMemGetInfo_v2, 0), SYM(cuMemGetAllocationGranularity, 0),
	SYM(cuMemAddressReserve, 0), SYM(cuMemAddressFree, 0), SYM(cuMemCreate, 0),
	SYM(cuMemRelease, 0), SYM(cuMemMap, 0), SYM(cuMemUnmap, 0), SYM(cuMemSetAccess, 0),
	SYM(cuMemAllocHost_v2, 1), SYM(cuMemFreeHost, 1), SYM(cuMemHostRegister_v2, 1),
	SYM(cuMemHostUnregister, 1), SYM(cuStreamCreate, 1), SYM(cuStreamDestroy_v2, 1),
	SYM(cuStreamSynchronize, 1), SYM(cuMemcpyDtoHAsync_v2, 1), SYM(cuMemcpyHtoDAsync_v2, 1),
	SYM(cuStreamGetCtx, 1), SYM(cuMemExportToShareableHandle, 1),
	SYM(cuMemImportFromShareableHandle, 1), SYM(cuMemGetAllocationPropertiesFromHandle, 1),
	SYM(cuMemcpyDtoDAsync_v2, 1),
};
#undef SYM

vmm_status vmm_backend_cuda_open(vmm_backend **out, vmm_error *err)
{
	struct cuda_impl *ci;
	vmm_backend *be;
	CUresult rc;

	*out = NULL;
	if (vmm_backend_alloc(sizeof(*ci), "the CUDA backend", &be, err))
		return VMM_E_HOST_OOM;
	ci = be->impl;
	if (vmm_driver_lib_load("libcuda.so.1", cuda_syms, sizeof(cuda_syms) / sizeof(cuda_syms[0]),
				&ci->api, &ci->lib, err))
		goto fail;
	rc = ci->api.cuInit(0);
	if (rc != CUDA_SUCCESS) {
		drv_fail(ci, err, rc, "cuInit");
		if (err)
			err->status = VMM_E_UNSUPPORTED;
		goto fail;
	}
	rc = ci->api.cuDeviceGetCount(&ci->ndev);
	if (rc != CUDA_SUCCESS || ci->ndev <= 0) {
		vmm_fail(err, VMM_E_UNSUPPORTED, (int)rc, "no CUDA device (cuDeviceGetCount: %d)",
			 (int)rc);
		goto fail;
	}
	if (ci->ndev > VMM_MAX_DEVICES)
		ci->ndev = VMM_MAX_DEVICES;
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		ci->rdma_vmm[d] = ci->posix_fd[d] = -1;
	ci->home_dev = -1;
	pthread_mutex_init(&ci->lock, NULL);

	be->name = "cuda";
	be->parallel_release = true; /* a release needs no context: any thread may make it */
	be->device_count = cu_device_count;
	be->granularity = cu_granularity;
	be->mem_info = cu_mem_info;
	be->current_device = cu_current_device;
	be->reserve = cu_reserve;
	be->unreserve = cu_unreserve;
	be->create = cu_create;
	be->release = cu_release;
	be->map = cu_map;
	be->unmap = cu_unmap;
	be->set_access = cu_set_access;
	be->synchronize = cu_synchronize;
	be->host_alloc_pinned = cu_host_alloc_pinned;
	be->host_free_pinned = cu_host_free_pinned;
	be->host_register = cu_host_register;
	be->host_unregister = cu_host_unregister;
	be->stream_create = cu_stream_create;
	be->stream_destroy = cu_stream_destroy;
	be->stream_synchronize = cu_stream_synchronize;
	be->copy_d2h_async = cu_copy_d2h_async;
	be->copy_h2d_async = cu_copy_h2d_async;
	be->close = cu_close;
	be->release_own_context = cu_release_own_context;
	be->create_with_prop = cu_create_with_prop;
	be->map_at = cu_map_at;
	be->shareable = cu_shareable;
	be->export_fd = cu_export_fd;
	be->import_fd = cu_import_fd;
	be->copy_d2d_async = cu_copy_d2d_async;
	*out = be;
	return VMM_OK;
fail:
	/* The library stays loaded (driver_lib.h). */
	free(ci);
	free(be);
	return err ? err->status : VMM_E_UNSUPPORTED;
}
