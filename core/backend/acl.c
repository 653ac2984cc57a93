/* The Ascend backend: backend.h over libascendcl.so. Differences from CUDA that it hides:
 * aclrtUnmapMem takes an address only and undoes exactly one aclrtMapMem, so the backend keeps a
 * table of its mappings and walks it to unmap a run; the owner gets access without a set-access
 * call; calls run with the thread's device set to the one they concern. aclrtSynchronizeDevice
 * waits for the current context only, so synchronize also visits each context the program created
 * (aclrtCreateContext, listed by the shim: contexts.h). */
#include "backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../sorted_search.h"
#include "acl_api.h"
#include "contexts.h"
#include "driver_lib.h"

#define ACL(name) __typeof__(&name) name
struct acl_api {
	ACL(aclInit);
	ACL(aclrtSetDevice);
	ACL(aclrtGetDevice);
	ACL(aclrtGetDeviceCount);
	ACL(aclrtSynchronizeDevice);
	ACL(aclrtSynchronizeStream);
	ACL(aclrtCreateStream);
	ACL(aclrtDestroyStream);
	ACL(aclrtMallocHost);
	ACL(aclrtFreeHost);
	ACL(aclrtMemcpyAsync);
	ACL(aclrtGetMemInfo);
	ACL(aclrtReserveMemAddress);
	ACL(aclrtReleaseMemAddress);
	ACL(aclrtMallocPhysical);
	ACL(aclrtFreePhysical);
	ACL(aclrtMapMem);
	ACL(aclrtUnmapMem);
	ACL(aclrtMemGetAllocationGranularity);
	/* Optional: runtimes without them have no contexts of the program's to visit. */
	ACL(aclrtGetCurrentContext);
	ACL(aclrtSetCurrentContext);
};
#undef ACL

struct mapping {
	vmm_devptr va;
	size_t size;
};

struct reservation {
	vmm_devptr va;     /* what the heap was given (aligned) */
	void *base;        /* what the driver returned */
};

struct acl_impl {
	void *lib;
	struct acl_api api;
	int ndev;
	pthread_mutex_t lock;  /* guards the two tables */
	struct mapping *maps;  /* sorted by va */
	size_t nmaps, cap_maps, maps_pending; /* pending: slots promised to calls in flight */
	struct reservation *res;
	size_t nres, cap_res, res_pending;
	/* Each device's default context, once the backend holds its one reference to the device
	 * (enter_default). */
	_Atomic(aclrtContext) default_ctx[VMM_MAX_DEVICES];
};

static struct acl_impl *impl_of(vmm_backend *be)
{
	return be->impl;
}

static vmm_status acl_failed(vmm_error *err, aclError rc, const char *what)
{
	if (rc == ACL_ERROR_RT_MEMORY_ALLOCATION)
		return vmm_fail(err, VMM_E_OOM, rc, "%s: out of device memory (ACL error %d)", what,
				rc);
	return vmm_fail(err, VMM_E_DRIVER, rc, "%s failed: ACL error %d", what, rc);
}

/* Makes dev's default context the thread's. aclrtSetDevice counts references to the device, and
 * the device is released only when the program's aclrtResetDevice calls bring that count to 0; so
 * the backend calls it once a device (more only if threads race to the first call) and switches
 * by context afterwards, which counts nothing. Calling it for each call, as it once did, added a
 * reference each time a thread of another device (or a fresh one) called in, and the program's
 * last reset never released the device. */
static aclError enter_default(struct acl_impl *ai, int dev)
{
	aclrtContext c = atomic_load(&ai->default_ctx[dev]);
	aclError rc;

	if (c && ai->api.aclrtSetCurrentContext && ai->api.aclrtSetCurrentContext(c) == ACL_SUCCESS)
		return ACL_SUCCESS;
	/* None yet, or refused (released behind the shim's back): take the reference again. */
	rc = ai->api.aclrtSetDevice(dev);
	if (rc == ACL_SUCCESS && ai->api.aclrtGetCurrentContext &&
	    ai->api.aclrtGetCurrentContext(&c) == ACL_SUCCESS && c)
		atomic_store(&ai->default_ctx[dev], c);
	return rc;
}

/* The thread's device set to dev for one call, then restored: the context it had (a program's
 * own included) when the runtime can say which, else its device's default one. */
struct dev_scope {
	aclrtContext saved;
	int prev;
};

static vmm_status dev_enter(struct acl_impl *ai, int dev, struct dev_scope *s, vmm_error *err)
{
	int32_t cur = -1;
	aclError rc;

	if (dev < 0 || dev >= ai->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no Ascend device %d (the runtime has %d)",
				dev, ai->ndev);
	s->saved = NULL;
	s->prev = -1;
	if (ai->api.aclrtGetDevice(&cur) == ACL_SUCCESS && cur == dev)
		return VMM_OK;
	if (!ai->api.aclrtGetCurrentContext || !ai->api.aclrtSetCurrentContext ||
	    ai->api.aclrtGetCurrentContext(&s->saved) != ACL_SUCCESS)
		s->saved = NULL;
	rc = enter_default(ai, dev);
	if (rc != ACL_SUCCESS)
		return acl_failed(err, rc, "aclrtSetDevice");
	if (!s->saved)
		s->prev = cur;
	return VMM_OK;
}

static void dev_leave(struct acl_impl *ai, struct dev_scope *s)
{
	if (s->saved)
		ai->api.aclrtSetCurrentContext(s->saved);
	else if (s->prev >= 0)
		ai->api.aclrtSetDevice(s->prev);
}

static vmm_status acl_device_count(vmm_backend *be, int *count, vmm_error *err)
{
	(void)err;
	*count = impl_of(be)->ndev;
	return VMM_OK;
}

static void fill_prop(int dev, aclrtPhysicalMemProp *prop)
{
	memset(prop, 0, sizeof(*prop));
	prop->handleType = ACL_MEM_HANDLE_TYPE_NONE;
	prop->allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
	prop->memAttr = ACL_HBM_MEM_HUGE;
	prop->location.id = (uint32_t)dev;
	prop->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
}

static vmm_status acl_granularity(vmm_backend *be, int dev, size_t *bytes, vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	aclrtPhysicalMemProp prop;
	struct dev_scope s;
	vmm_status st = dev_enter(ai, dev, &s, err);
	aclError rc;

	if (st)
		return st;
	fill_prop(dev, &prop);
	rc = ai->api.aclrtMemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM,
						       bytes);
	dev_leave(ai, &s);
	if (rc != ACL_SUCCESS)
		return acl_failed(err, rc, "aclrtMemGetAllocationGranularity");
	if (*bytes == 0 || (*bytes & (*bytes - 1)))
		return vmm_fail(err, VMM_E_DRIVER, 0, "granularity %zu is not a power of two",
				*bytes);
	return VMM_OK;
}

static vmm_status acl_mem_info(vmm_backend *be, int dev, size_t *free_bytes, size_t *total_bytes,
			       vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	struct dev_scope s;
	vmm_status st = dev_enter(ai, dev, &s, err);
	aclError rc;

	if (st)
		return st;
	rc = ai->api.aclrtGetMemInfo(ACL_HBM_MEM, free_bytes, total_bytes);
	dev_leave(ai, &s);
	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtGetMemInfo");
}

static vmm_status acl_current_device(vmm_backend *be, int *dev, vmm_error *err)
{
	int32_t d = 0;

	(void)err;
	if (impl_of(be)->api.aclrtGetDevice(&d) != ACL_SUCCESS)
		d = 0;
	*dev = d;
	return VMM_OK;
}

static bool grow_array(void **arr, size_t *cap, size_t n, size_t elem)
{
	void *p;
	size_t c;

	if (n < *cap)
		return true;
	c = *cap ? *cap * 2 : 16;
	p = realloc(*arr, c * elem);
	if (!p)
		return false;
	*arr = p;
	*cap = c;
	return true;
}

static vmm_status acl_reserve(vmm_backend *be, int dev, size_t size, size_t align, vmm_devptr *va,
			      vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	struct dev_scope s;
	vmm_status st;
	void *p = NULL;
	aclError rc;
	bool ok;

	/* Room for the record is made (and promised) before the driver call, so that the append
	 * after it cannot fail, also when other threads reserve meanwhile. */
	pthread_mutex_lock(&ai->lock);
	ok = grow_array((void **)&ai->res, &ai->cap_res, ai->nres + ai->res_pending,
			sizeof(*ai->res));
	ai->res_pending += ok;
	pthread_mutex_unlock(&ai->lock);
	if (!ok)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a reservation record");
	st = dev_enter(ai, dev, &s, err);
	if (!st) {
		/* The alignment argument must be 0: ask for room to align ourselves. */
		rc = ai->api.aclrtReserveMemAddress(&p, size + (align > 1 ? align : 0), 0, NULL, 0);
		dev_leave(ai, &s);
		if (rc != ACL_SUCCESS)
			st = acl_failed(err, rc, "aclrtReserveMemAddress");
	}
	pthread_mutex_lock(&ai->lock);
	ai->res_pending--;
	if (!st) {
		*va = align > 1 ? ((vmm_devptr)(uintptr_t)p + align - 1) & ~(vmm_devptr)(align - 1) :
				  (vmm_devptr)(uintptr_t)p;
		ai->res[ai->nres].va = *va;
		ai->res[ai->nres++].base = p;
	}
	pthread_mutex_unlock(&ai->lock);
	return st;
}

static vmm_status acl_unreserve(vmm_backend *be, int dev, vmm_devptr va, size_t size,
				vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	void *base = NULL;
	aclError rc;

	(void)dev;
	(void)size;
	pthread_mutex_lock(&ai->lock);
	for (size_t i = 0; i < ai->nres; i++) {
		if (ai->res[i].va == va) {
			base = ai->res[i].base;
			ai->res[i] = ai->res[--ai->nres];
			break;
		}
	}
	pthread_mutex_unlock(&ai->lock);
	if (!base)
		return vmm_fail(err, VMM_E_INVALID, 0, "0x%llx is not a reservation of ours",
				(unsigned long long)va);
	rc = ai->api.aclrtReleaseMemAddress(base);
	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtReleaseMemAddress");
}

static vmm_status acl_create(vmm_backend *be, int dev, size_t size, vmm_phys *handle,
			     vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	aclrtPhysicalMemProp prop;
	aclrtDrvMemHandle h = NULL;
	struct dev_scope s;
	vmm_status st = dev_enter(ai, dev, &s, err);
	aclError rc;

	if (st)
		return st;
	fill_prop(dev, &prop);
	rc = ai->api.aclrtMallocPhysical(&h, size, &prop, 0);
	dev_leave(ai, &s);
	if (rc != ACL_SUCCESS)
		return acl_failed(err, rc, "aclrtMallocPhysical");
	*handle = (vmm_phys)(uintptr_t)h;
	return VMM_OK;
}

static vmm_status acl_release(vmm_backend *be, vmm_phys handle, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtFreePhysical((aclrtDrvMemHandle)(uintptr_t)handle);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtFreePhysical");
}

/* Index of the first mapping at or above va. */
static size_t map_search(struct acl_impl *ai, vmm_devptr va)
{
	return VMM_SORTED_LOWER_BOUND(ai->maps, ai->nmaps, va, va);
}

static vmm_status acl_map(vmm_backend *be, vmm_devptr va, size_t size, vmm_phys handle,
			  vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	aclError rc;
	size_t i;
	bool ok;

	/* As in acl_reserve: the record's room is promised before the driver call. */
	pthread_mutex_lock(&ai->lock);
	ok = grow_array((void **)&ai->maps, &ai->cap_maps, ai->nmaps + ai->maps_pending,
			sizeof(*ai->maps));
	ai->maps_pending += ok;
	pthread_mutex_unlock(&ai->lock);
	if (!ok)
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for a mapping record");
	rc = ai->api.aclrtMapMem((void *)(uintptr_t)va, size, 0,
				 (aclrtDrvMemHandle)(uintptr_t)handle, 0);
	pthread_mutex_lock(&ai->lock);
	ai->maps_pending--;
	if (rc != ACL_SUCCESS) {
		pthread_mutex_unlock(&ai->lock);
		return acl_failed(err, rc, "aclrtMapMem");
	}
	i = map_search(ai, va);
	memmove(&ai->maps[i + 1], &ai->maps[i], (ai->nmaps - i) * sizeof(*ai->maps));
	ai->maps[i].va = va;
	ai->maps[i].size = size;
	ai->nmaps++;
	pthread_mutex_unlock(&ai->lock);
	return VMM_OK;
}

/* One aclrtUnmapMem per mapping in [va, va+size); stops at the first failure (the mappings
 * unmapped so far stay unmapped and are forgotten). */
static vmm_status acl_unmap(vmm_backend *be, vmm_devptr va, size_t size, vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	vmm_devptr cur = va, end = va + size;

	while (cur < end) {
		size_t i, msize;
		aclError rc;

		pthread_mutex_lock(&ai->lock);
		i = map_search(ai, cur);
		if (i == ai->nmaps || ai->maps[i].va != cur) {
			pthread_mutex_unlock(&ai->lock);
			return vmm_fail(err, VMM_E_INVALID, 0,
					"0x%llx does not start a mapping of ours",
					(unsigned long long)cur);
		}
		msize = ai->maps[i].size;
		pthread_mutex_unlock(&ai->lock);
		rc = ai->api.aclrtUnmapMem((void *)(uintptr_t)cur);
		if (rc != ACL_SUCCESS)
			return acl_failed(err, rc, "aclrtUnmapMem");
		pthread_mutex_lock(&ai->lock);
		i = map_search(ai, cur);
		if (i < ai->nmaps && ai->maps[i].va == cur) {
			memmove(&ai->maps[i], &ai->maps[i + 1],
				(ai->nmaps - i - 1) * sizeof(*ai->maps));
			ai->nmaps--;
		}
		pthread_mutex_unlock(&ai->lock);
		cur += msize;
	}
	return VMM_OK;
}

static vmm_status acl_set_access(vmm_backend *be, int dev, vmm_devptr va, size_t size,
				 const int *peers, int npeers, vmm_error *err)
{
	(void)va;
	(void)size;
	if (dev < 0 || dev >= impl_of(be)->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no Ascend device %d", dev);
	/* The owner has access once mapped; peer grants need aclrtMemSetAccess (newer CANN). */
	for (int i = 0; i < npeers; i++)
		if (peers[i] != dev)
			return vmm_fail(err, VMM_E_UNSUPPORTED, 0,
					"peer access to Ascend VMM memory is not supported");
	return VMM_OK;
}

static vmm_status sync_program_context(void *ctx, void *arg, vmm_error *err)
{
	struct acl_impl *ai = arg;
	aclError rc = ai->api.aclrtSetCurrentContext(ctx);

	/* Refused: destroyed through a path the shim did not see, so no work is left on it. */
	if (rc != ACL_SUCCESS)
		return VMM_OK;
	rc = ai->api.aclrtSynchronizeDevice();
	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtSynchronizeDevice");
}

static vmm_status acl_synchronize(vmm_backend *be, int dev, vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	aclrtContext saved = NULL;
	bool visit, have_saved;
	struct dev_scope s;
	vmm_status st;
	aclError rc;

	visit = ai->api.aclrtSetCurrentContext && ai->api.aclrtGetCurrentContext &&
		ctx_list_count(vmm_program_contexts(VMM_CTX_ACL), dev) > 0;
	have_saved = visit && ai->api.aclrtGetCurrentContext(&saved) == ACL_SUCCESS && saved;
	st = dev_enter(ai, dev, &s, err);
	if (st)
		return st;
	rc = ai->api.aclrtSynchronizeDevice();
	st = rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtSynchronizeDevice");
	if (!st && visit) {
		st = ctx_list_each(vmm_program_contexts(VMM_CTX_ACL), dev, sync_program_context, ai, err);
		/* Back to the thread's own context (and its device); a thread that had none gets
		 * dev's default one, never a program's context, which may be destroyed later. */
		if (have_saved) {
			ai->api.aclrtSetCurrentContext(saved);
			return st;
		}
		enter_default(ai, dev);
	}
	dev_leave(ai, &s);
	return st;
}

static vmm_status acl_host_alloc_pinned(vmm_backend *be, size_t size, void **ptr, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtMallocHost(ptr, size);

	if (rc == ACL_ERROR_RT_MEMORY_ALLOCATION)
		return vmm_fail(err, VMM_E_HOST_OOM, rc, "aclrtMallocHost of %zu bytes", size);
	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtMallocHost");
}

static vmm_status acl_host_free_pinned(vmm_backend *be, void *ptr, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtFreeHost(ptr);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtFreeHost");
}

static vmm_status acl_host_register(vmm_backend *be, void *ptr, size_t size, vmm_error *err)
{
	(void)be;
	(void)ptr;
	(void)size;
	return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the ACL API has no host-register call");
}

static vmm_status acl_host_unregister(vmm_backend *be, void *ptr, vmm_error *err)
{
	(void)be;
	(void)ptr;
	return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "the ACL API has no host-register call");
}

static vmm_status acl_stream_create(vmm_backend *be, int dev, vmm_stream *stream, vmm_error *err)
{
	struct acl_impl *ai = impl_of(be);
	aclrtStream str = NULL;
	struct dev_scope s;
	vmm_status st;
	aclError rc;

	/* A stream belongs to the device that is current when it is created. */
	st = dev_enter(ai, dev, &s, err);
	if (st)
		return st;
	rc = ai->api.aclrtCreateStream(&str);
	dev_leave(ai, &s);
	if (rc != ACL_SUCCESS)
		return acl_failed(err, rc, "aclrtCreateStream");
	*stream = str;
	return VMM_OK;
}

static vmm_status acl_stream_destroy(vmm_backend *be, vmm_stream stream, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtDestroyStream(stream);

	/* Teardown is retried once: a transient failure must not leak the stream. */
	if (rc != ACL_SUCCESS)
		rc = impl_of(be)->api.aclrtDestroyStream(stream);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtDestroyStream");
}

static vmm_status acl_stream_synchronize(vmm_backend *be, vmm_stream stream, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtSynchronizeStream(stream);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtSynchronizeStream");
}

static vmm_status acl_copy_d2h_async(vmm_backend *be, void *dst, vmm_devptr src, size_t n,
				     vmm_stream stream, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtMemcpyAsync(dst, n, (const void *)(uintptr_t)src, n,
							ACL_MEMCPY_DEVICE_TO_HOST, stream);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtMemcpyAsync (to host)");
}

static vmm_status acl_copy_h2d_async(vmm_backend *be, vmm_devptr dst, const void *src, size_t n,
				     vmm_stream stream, vmm_error *err)
{
	aclError rc = impl_of(be)->api.aclrtMemcpyAsync((void *)(uintptr_t)dst, n, src, n,
							ACL_MEMCPY_HOST_TO_DEVICE, stream);

	return rc == ACL_SUCCESS ? VMM_OK : acl_failed(err, rc, "aclrtMemcpyAsync (to device)");
}

static void acl_close(vmm_backend *be)
{
	struct acl_impl *ai;

	if (!be)
		return;
	ai = impl_of(be);
	pthread_mutex_destroy(&ai->lock);
	free(ai->maps);
	free(ai->res);
	free(ai);
	free(be);
}

#define SYM(fn, opt) VMM_DRIVER_SYM(struct acl_api, fn, opt)
static const struct vmm_driver_sym acl_syms[] = {
	SYM(aclInit, 0), SYM(aclrtSetDevice, 0), SYM(aclrtGetDevice, 0),
	SYM(aclrtGetDeviceCount, 0), SYM(aclrtSynchronizeDevice, 0), SYM(aclrtSynchronizeStream, 0),
	SYM(aclrtCreateStream, 0), SYM(aclrtDestroyStream, 0), SYM(aclrtMallocHost, 0),
	SYM(aclrtFreeHost, 0), SYM(aclrtMemcpyAsync, 0), SYM(aclrtGetMemInfo, 0),
	SYM(aclrtReserveMemAddress, 0), SYM(aclrtReleaseMemAddress, 0),
	SYM(aclrtMallocPhysical, 0), SYM(aclrtFreePhysical, 0), SYM(aclrtMapMem, 0),
	SYM(aclrtUnmapMem, 0), SYM(aclrtMemGetAllocationGranularity, 0),
	SYM(aclrtGetCurrentContext, 1), SYM(aclrtSetCurrentContext, 1),
};
#undef SYM

vmm_status vmm_backend_acl_open(vmm_backend **out, vmm_error *err)
{
	struct acl_impl *ai;
	vmm_backend *be;
	uint32_t count = 0;
	aclError rc;

	*out = NULL;
	if (vmm_backend_alloc(sizeof(*ai), "the ACL backend", &be, err))
		return VMM_E_HOST_OOM;
	ai = be->impl;
	if (vmm_driver_lib_load("libascendcl.so", acl_syms, sizeof(acl_syms) / sizeof(acl_syms[0]),
				&ai->api, &ai->lib, err))
		goto fail;
	rc = ai->api.aclInit(NULL);
	if (rc != ACL_SUCCESS && rc != ACL_ERROR_REPEAT_INITIALIZE) {
		vmm_fail(err, VMM_E_UNSUPPORTED, rc, "aclInit failed: ACL error %d", rc);
		goto fail;
	}
	rc = ai->api.aclrtGetDeviceCount(&count);
	if (rc != ACL_SUCCESS || count == 0) {
		vmm_fail(err, VMM_E_UNSUPPORTED, rc, "no Ascend device (aclrtGetDeviceCount: %d)", rc);
		goto fail;
	}
	ai->ndev = count > VMM_MAX_DEVICES ? VMM_MAX_DEVICES : (int)count;
	pthread_mutex_init(&ai->lock, NULL);

	be->name = "acl";
	be->parallel_release = false; /* a fresh thread has no device set (aclrtSetDevice) */
	be->device_count = acl_device_count;
	be->granularity = acl_granularity;
	be->mem_info = acl_mem_info;
	be->current_device = acl_current_device;
	be->reserve = acl_reserve;
	be->unreserve = acl_unreserve;
	be->create = acl_create;
	be->release = acl_release;
	be->map = acl_map;
	be->unmap = acl_unmap;
	be->set_access = acl_set_access;
	be->synchronize = acl_synchronize;
	be->host_alloc_pinned = acl_host_alloc_pinned;
	be->host_free_pinned = acl_host_free_pinned;
	be->host_register = acl_host_register;
	be->host_unregister = acl_host_unregister;
	be->stream_create = acl_stream_create;
	be->stream_destroy = acl_stream_destroy;
	be->stream_synchronize = acl_stream_synchronize;
	be->copy_d2h_async = acl_copy_d2h_async;
	be->copy_h2d_async = acl_copy_h2d_async;
	be->close = acl_close;
	*out = be;
	return VMM_OK;
fail:
	free(ai);
	free(be);
	return err ? err->status : VMM_E_UNSUPPORTED;
}
