/* simdev's libascendcl.so: the ACL runtime subset vmmshim needs, over the same memfd device
 * memory as libcuda.so.1 (its own copy: own devices, counters and stats). All work is done at
 * once on the calling thread, so streams are tokens and synchronization has nothing to wait for.
 * Contexts as documented: aclrtSetDevice makes the device's default context current and counts
 * one reference to the device, aclrtResetDevice gives one back and, at the last, releases the
 * default context (aclrtSetCurrentContext then refuses it until aclrtSetDevice makes it again),
 * aclrtCreateContext makes a new one (current at once), aclrtSetCurrentContext switches context and
 * device; aclrtSynchronizeDevice concerns the current context (each counts its synchronizations,
 * which tests read with simdev_acl_context_syncs).
 * VMM constraints follow the CANN docs: a physical handle is mapped whole, at offset 0, once;
 * aclrtUnmapMem takes the address only; the owner device has access as soon as it is mapped. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../core/backend/acl_api.h"
#include "sim_internal.h"

#define API __attribute__((visibility("default")))
#define HUGE1G ((size_t)1 << 30)

const char sim_lib_name[] = "acl";

static atomic_int initialized;
static __thread int cur_device = -1;

struct sim_acl_ctx {
	int dev;      /* created contexts (a default one is known by its place in default_ctx) */
	bool alive;
	atomic_ulong syncs;
};

/* The default context of each device, and every context ever created (kept: stale handles are
 * refused, not dereferenced blindly). */
static struct sim_acl_ctx default_ctx[SIM_MAX_DEVICES];
static atomic_bool default_made[SIM_MAX_DEVICES]; /* the device's default context exists */
static atomic_int device_refs[SIM_MAX_DEVICES];   /* aclrtSetDevice less aclrtResetDevice calls */
static struct sim_acl_ctx **contexts;
static size_t ncontexts, capcontexts;
static __thread struct sim_acl_ctx *cur_ctx;

#define OOM ACL_ERROR_RT_MEMORY_ALLOCATION
#define INTERNAL ACL_ERROR_RT_INTERNAL_ERROR

static aclError need_device(int *dev)
{
	if (cur_device < 0)
		return ACL_ERROR_RT_CONTEXT_NULL;
	*dev = cur_device;
	return ACL_SUCCESS;
}

API aclError aclInit(const char *config)
{
	SIM_BEGIN("aclInit", INTERNAL);
	(void)config;
	return atomic_exchange(&initialized, 1) ? ACL_ERROR_REPEAT_INITIALIZE : ACL_SUCCESS;
}

API aclError aclFinalize(void)
{
	SIM_BEGIN("aclFinalize", INTERNAL);
	return atomic_exchange(&initialized, 0) ? ACL_SUCCESS : ACL_ERROR_UNINITIALIZE;
}

API aclError aclrtGetDeviceCount(uint32_t *count)
{
	SIM_BEGIN("aclrtGetDeviceCount", INTERNAL);
	if (!count)
		return ACL_ERROR_INVALID_PARAM;
	*count = (uint32_t)sim_device_count();
	return ACL_SUCCESS;
}

API aclError aclrtSetDevice(int32_t id)
{
	SIM_BEGIN("aclrtSetDevice", INTERNAL);
	if (id < 0 || id >= sim_device_count())
		return ACL_ERROR_RT_INVALID_DEVICEID;
	cur_device = id;
	cur_ctx = &default_ctx[id];
	atomic_fetch_add(&device_refs[id], 1);
	if (!atomic_exchange(&default_made[id], true))
		sim_note_context(id);
	return ACL_SUCCESS;
}

API aclError aclrtGetDevice(int32_t *id)
{
	SIM_BEGIN("aclrtGetDevice", INTERNAL);
	int dev;
	if (!id)
		return ACL_ERROR_INVALID_PARAM;
	aclError e = need_device(&dev);
	if (!e)
		*id = dev;
	return e;
}

API aclError aclrtResetDevice(int32_t id)
{
	SIM_BEGIN("aclrtResetDevice", INTERNAL);
	if (id < 0 || id >= sim_device_count())
		return ACL_ERROR_RT_INVALID_DEVICEID;
	int refs = atomic_load(&device_refs[id]);
	while (refs > 0 && !atomic_compare_exchange_weak(&device_refs[id], &refs, refs - 1))
		;
	if (refs == 1) /* the last reference: the default context goes */
		atomic_store(&default_made[id], false);
	if (cur_device == id) {
		cur_device = -1;
		cur_ctx = NULL;
	}
	return ACL_SUCCESS;
}

/* Tests: the references aclrtSetDevice holds on a device. */
API int simdev_acl_device_refs(int dev)
{
	return dev >= 0 && dev < SIM_MAX_DEVICES ? atomic_load(&device_refs[dev]) : -1;
}

/* A live context made by aclrtCreateContext (caller holds sim_lock). */
static bool ctx_known(const struct sim_acl_ctx *c)
{
	for (size_t i = 0; i < ncontexts; i++)
		if (contexts[i] == c)
			return c->alive;
	return false;
}

API aclError aclrtCreateContext(aclrtContext *context, int32_t id)
{
	SIM_BEGIN("aclrtCreateContext", OOM);
	if (!context)
		return ACL_ERROR_INVALID_PARAM;
	if (id < 0 || id >= sim_device_count())
		return ACL_ERROR_RT_INVALID_DEVICEID;
	struct sim_acl_ctx *c = calloc(1, sizeof(*c));
	if (!c)
		return OOM;
	c->dev = id;
	c->alive = true;
	pthread_mutex_lock(&sim_lock);
	if (ncontexts == capcontexts) {
		size_t cap = capcontexts ? capcontexts * 2 : 16;
		struct sim_acl_ctx **v = realloc(contexts, cap * sizeof(*v));
		if (v) {
			contexts = v;
			capcontexts = cap;
		}
	}
	bool ok = ncontexts < capcontexts;
	if (ok)
		contexts[ncontexts++] = c;
	pthread_mutex_unlock(&sim_lock);
	if (!ok) {
		free(c);
		return OOM;
	}
	sim_note_context(id);
	cur_ctx = c;
	cur_device = id;
	*context = c;
	return ACL_SUCCESS;
}

API aclError aclrtDestroyContext(aclrtContext context)
{
	SIM_BEGIN("aclrtDestroyContext", INTERNAL);
	struct sim_acl_ctx *c = context;
	pthread_mutex_lock(&sim_lock);
	bool ok = ctx_known(c); /* a default context is not one: it cannot be destroyed */
	if (ok)
		c->alive = false;
	pthread_mutex_unlock(&sim_lock);
	if (!ok)
		return ACL_ERROR_INVALID_PARAM;
	if (cur_ctx == c) {
		cur_ctx = NULL;
		cur_device = -1;
	}
	return ACL_SUCCESS;
}

API aclError aclrtSetCurrentContext(aclrtContext context)
{
	SIM_BEGIN("aclrtSetCurrentContext", INTERNAL);
	struct sim_acl_ctx *c = context;
	int dev = -1;
	for (int d = 0; d < sim_device_count(); d++)
		if (c == &default_ctx[d] && atomic_load(&default_made[d]))
			dev = d; /* a released default context is refused, as a destroyed one */
	if (dev < 0) {
		pthread_mutex_lock(&sim_lock);
		if (ctx_known(c))
			dev = c->dev;
		pthread_mutex_unlock(&sim_lock);
	}
	if (dev < 0)
		return ACL_ERROR_INVALID_PARAM;
	cur_ctx = c;
	cur_device = dev; /* the context's device becomes the thread's */
	return ACL_SUCCESS;
}

API aclError aclrtGetCurrentContext(aclrtContext *context)
{
	SIM_BEGIN("aclrtGetCurrentContext", INTERNAL);
	if (!context)
		return ACL_ERROR_INVALID_PARAM;
	if (!cur_ctx)
		return ACL_ERROR_RT_CONTEXT_NULL;
	*context = cur_ctx;
	return ACL_SUCCESS;
}

/* Tests: how often a context (NULL: device dev's default one) was synchronized. */
API unsigned long simdev_acl_context_syncs(void *context, int dev)
{
	struct sim_acl_ctx *c = context ? context : &default_ctx[dev];
	return atomic_load(&c->syncs);
}

API aclError aclrtSynchronizeDevice(void)
{
	SIM_BEGIN("aclrtSynchronizeDevice", INTERNAL);
	int dev;
	aclError e = need_device(&dev);
	if (!e && cur_ctx)
		atomic_fetch_add(&cur_ctx->syncs, 1);
	return e;
}

API aclError aclrtSynchronizeStream(aclrtStream stream)
{
	SIM_BEGIN("aclrtSynchronizeStream", INTERNAL);
	(void)stream;
	return ACL_SUCCESS;
}

/* Streams are tokens (work runs at once); the live ones are listed so bad handles are refused. */
static void **streams;
static size_t nstreams, capstreams;

API aclError aclrtCreateStream(aclrtStream *stream)
{
	SIM_BEGIN("aclrtCreateStream", INTERNAL);
	int dev;
	aclError e = need_device(&dev);
	if (e)
		return e;
	if (!stream)
		return ACL_ERROR_INVALID_PARAM;
	void *token = malloc(1);
	pthread_mutex_lock(&sim_lock);
	if (token && nstreams == capstreams) {
		size_t cap = capstreams ? capstreams * 2 : 16;
		void **v = realloc(streams, cap * sizeof(*v));
		if (v) {
			streams = v;
			capstreams = cap;
		}
	}
	bool ok = token && nstreams < capstreams;
	if (ok)
		streams[nstreams++] = token;
	pthread_mutex_unlock(&sim_lock);
	if (!ok) {
		free(token);
		return OOM;
	}
	*stream = token;
	return ACL_SUCCESS;
}

API aclError aclrtDestroyStream(aclrtStream stream)
{
	SIM_BEGIN("aclrtDestroyStream", INTERNAL);
	bool found = false;
	pthread_mutex_lock(&sim_lock);
	for (size_t i = 0; i < nstreams && !found; i++)
		if (streams[i] == stream) {
			streams[i] = streams[--nstreams];
			found = true;
		}
	pthread_mutex_unlock(&sim_lock);
	if (!found)
		return ACL_ERROR_INVALID_PARAM;
	free(stream);
	return ACL_SUCCESS;
}

/* ---- plain allocation: the size padded as documented (up to 32, plus 32) ---- */

static aclError dev_malloc(void **p, size_t size)
{
	int dev, oom;
	aclError e = need_device(&dev);
	if (e)
		return e;
	if (!p || !size || size > SIZE_MAX - 64)
		return ACL_ERROR_INVALID_PARAM;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_device_alloc(dev, sim_round_up(size, 32) + 32,
						       SIM_NATIVE_DEVICE, &oom);
	if (n)
		*p = (void *)n->va;
	pthread_mutex_unlock(&sim_lock);
	return n ? ACL_SUCCESS : OOM;
}

API aclError aclrtMalloc(void **p, size_t size, aclrtMemMallocPolicy policy)
{
	SIM_BEGIN("aclrtMalloc", OOM);
	(void)policy;
	return dev_malloc(p, size);
}

API aclError aclrtMallocAlign32(void **p, size_t size, aclrtMemMallocPolicy policy)
{
	SIM_BEGIN("aclrtMallocAlign32", OOM);
	(void)policy;
	return dev_malloc(p, size);
}

API aclError aclrtMallocCached(void **p, size_t size, aclrtMemMallocPolicy policy)
{
	SIM_BEGIN("aclrtMallocCached", OOM);
	(void)policy;
	return dev_malloc(p, size);
}

/* Frees at once: no implicit synchronization, as documented. */
API aclError aclrtFree(void *p)
{
	SIM_BEGIN("aclrtFree", INTERNAL);
	if (!p)
		return ACL_ERROR_INVALID_PARAM;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	bool ok = n && n->kind == SIM_NATIVE_DEVICE;
	if (ok)
		sim_native_device_free(n);
	pthread_mutex_unlock(&sim_lock);
	return ok ? ACL_SUCCESS : ACL_ERROR_INVALID_PARAM;
}

API aclError aclrtMallocHost(void **p, size_t size)
{
	SIM_BEGIN("aclrtMallocHost", OOM);
	if (!p || !size)
		return ACL_ERROR_INVALID_PARAM;
	void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return OOM;
	struct sim_native tmpl = { .va = (uintptr_t)m, .size = size, .span = size,
				   .kind = SIM_NATIVE_HOST, .dev = cur_device };
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_add(&tmpl);
	pthread_mutex_unlock(&sim_lock);
	if (!n) {
		munmap(m, size);
		return OOM;
	}
	*p = m;
	return ACL_SUCCESS;
}

API aclError aclrtFreeHost(void *p)
{
	SIM_BEGIN("aclrtFreeHost", INTERNAL);
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	bool ok = n && n->kind == SIM_NATIVE_HOST;
	size_t size = ok ? n->size : 0;
	if (ok)
		sim_native_remove(n);
	pthread_mutex_unlock(&sim_lock);
	if (!ok)
		return ACL_ERROR_INVALID_PARAM;
	munmap(p, size);
	return ACL_SUCCESS;
}

/* ---- copies ---- */

static aclError access_ok(const void *p, size_t n, bool write)
{
	pthread_mutex_lock(&sim_lock);
	int a = sim_access(cur_device, (uintptr_t)p, n, write);
	pthread_mutex_unlock(&sim_lock);
	return a < 0 ? ACL_ERROR_INVALID_PARAM : ACL_SUCCESS;
}

static aclError copy(void *dst, size_t max, const void *src, size_t count, aclrtMemcpyKind kind)
{
	int dev;
	aclError e = need_device(&dev);
	if (e)
		return e;
	if (!dst || !src || count > max || kind > ACL_MEMCPY_INTER_DEVICE_TO_DEVICE)
		return ACL_ERROR_INVALID_PARAM;
	if (!count)
		return ACL_SUCCESS;
	e = access_ok(dst, count, true);
	if (!e)
		e = access_ok(src, count, false);
	if (!e)
		memmove(dst, src, count);
	return e;
}

API aclError aclrtMemcpy(void *dst, size_t max, const void *src, size_t count, aclrtMemcpyKind kind)
{
	SIM_BEGIN("aclrtMemcpy", INTERNAL);
	return copy(dst, max, src, count, kind);
}

API aclError aclrtMemcpyAsync(void *dst, size_t max, const void *src, size_t count,
			      aclrtMemcpyKind kind, aclrtStream stream)
{
	SIM_BEGIN("aclrtMemcpyAsync", INTERNAL);
	(void)stream;
	return copy(dst, max, src, count, kind);
}

API aclError aclrtMemset(void *p, size_t max, int32_t value, size_t count)
{
	SIM_BEGIN("aclrtMemset", INTERNAL);
	int dev;
	aclError e = need_device(&dev);
	if (e)
		return e;
	if (!p || count > max)
		return ACL_ERROR_INVALID_PARAM;
	e = count ? access_ok(p, count, true) : ACL_SUCCESS;
	if (!e && count)
		memset(p, value, count);
	return e;
}

API aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free_bytes, size_t *total)
{
	SIM_BEGIN("aclrtGetMemInfo", INTERNAL);
	int dev;
	aclError e = need_device(&dev);
	if (e)
		return e;
	if (!free_bytes || !total || attr > ACL_HBM_MEM_P2P_HUGE1G)
		return ACL_ERROR_INVALID_PARAM;
	size_t used;
	if (!sim_used(dev, &used))
		return INTERNAL; /* a SIMDEV_SHARED group that did not answer in time */
	*total = sim_config()->memory;
	*free_bytes = used < *total ? *total - used : 0;
	return ACL_SUCCESS;
}

/* ---- virtual memory ---- */

static size_t granularity_of(aclrtMemAttr attr)
{
	return attr == ACL_HBM_MEM_HUGE1G || attr == ACL_HBM_MEM_P2P_HUGE1G ? HUGE1G
									 : SIM_GRANULARITY;
}

API aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
					      aclrtMemGranularityOptions option, size_t *gran)
{
	SIM_BEGIN("aclrtMemGetAllocationGranularity", INTERNAL);
	if (!prop || !gran || option > ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return ACL_ERROR_INVALID_PARAM;
	*gran = granularity_of(prop->memAttr);
	return ACL_SUCCESS;
}

API aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
				   uint64_t flags)
{
	SIM_BEGIN("aclrtReserveMemAddress", OOM);
	/* alignment is reserved (must be 0); flags is the page-type flag (0 or 1). */
	if (!virPtr || !size || size % SIM_GRANULARITY || alignment || flags > 1)
		return ACL_ERROR_INVALID_PARAM;
	pthread_mutex_lock(&sim_lock);
	void *va = sim_va_reserve(size, SIM_GRANULARITY, (uintptr_t)expectPtr);
	if (va && sim_reservation_add((uintptr_t)va, size)) {
		munmap(va, size);
		va = NULL;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!va)
		return OOM;
	*virPtr = va;
	return ACL_SUCCESS;
}

API aclError aclrtReleaseMemAddress(void *virPtr)
{
	SIM_BEGIN("aclrtReleaseMemAddress", INTERNAL);
	aclError e = ACL_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	struct sim_reservation *r = sim_reservation_exact((uintptr_t)virPtr);
	if (!r || sim_reservation_has_mappings(r)) /* unmap first, as documented */
		e = ACL_ERROR_INVALID_PARAM;
	else
		sim_reservation_remove(r);
	pthread_mutex_unlock(&sim_lock);
	return e;
}

API aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
				const aclrtPhysicalMemProp *prop, uint64_t flags)
{
	SIM_BEGIN("aclrtMallocPhysical", OOM);
	if (!handle || !prop || flags || !size || prop->handleType != ACL_MEM_HANDLE_TYPE_NONE ||
	    prop->allocationType != ACL_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != ACL_MEM_LOCATION_TYPE_DEVICE ||
	    prop->memAttr > ACL_HBM_MEM_P2P_HUGE1G || size % granularity_of(prop->memAttr))
		return ACL_ERROR_INVALID_PARAM;
	if ((int)prop->location.id >= sim_device_count())
		return ACL_ERROR_RT_INVALID_DEVICEID;
	int oom;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_create((int)prop->location.id, size, &oom);
	if (p)
		*handle = (aclrtDrvMemHandle)p;
	pthread_mutex_unlock(&sim_lock);
	return p ? ACL_SUCCESS : OOM;
}

API aclError aclrtFreePhysical(aclrtDrvMemHandle handle)
{
	SIM_BEGIN("aclrtFreePhysical", INTERNAL);
	aclError e = ACL_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup((uint64_t)(uintptr_t)handle);
	if (!p || p->maps) /* unmap first, as documented */
		e = ACL_ERROR_INVALID_PARAM;
	else
		sim_phys_release(p);
	pthread_mutex_unlock(&sim_lock);
	return e;
}

/* Whether a reservation already holds mappings of another device (not allowed). */
static bool mixes_devices(struct sim_reservation *r, int dev)
{
	for (size_t i = 0; i < sim_mapping_count(); i++) {
		struct sim_mapping *m = sim_mapping_get(i);
		if (m->va >= r->va && m->va < r->va + r->size && m->phys->dev != dev)
			return true;
	}
	return false;
}

API aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
			 uint64_t flags)
{
	SIM_BEGIN("aclrtMapMem", INTERNAL);
	uintptr_t va = (uintptr_t)virPtr;
	if (!virPtr || offset || flags || va % SIM_GRANULARITY)
		return ACL_ERROR_INVALID_PARAM;
	aclError e = ACL_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	struct sim_phys *p = sim_phys_lookup((uint64_t)(uintptr_t)handle);
	struct sim_reservation *r = p ? sim_reservation_find(va, size) : NULL;
	struct sim_mapping *m = NULL;
	if (!p || size != p->size || p->maps || !r || sim_mapping_overlaps(va, size) ||
	    mixes_devices(r, p->dev))
		e = ACL_ERROR_INVALID_PARAM;
	else if (!(m = sim_mapping_add(va, size, 0, p)))
		e = OOM;
	if (m) {
		m->access[p->dev] = 3; /* the owner may read and write at once */
		if (sim_mapping_protect(m))
			e = INTERNAL;
	}
	pthread_mutex_unlock(&sim_lock);
	return e;
}

API aclError aclrtUnmapMem(void *virPtr)
{
	SIM_BEGIN("aclrtUnmapMem", INTERNAL);
	aclError e = ACL_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	struct sim_mapping *m = sim_mapping_at((uintptr_t)virPtr);
	if (!m || m->va != (uintptr_t)virPtr) {
		e = ACL_ERROR_INVALID_PARAM;
	} else {
		sim_va_unmap_to_reservation(m->va, m->size);
		sim_mapping_remove(m);
	}
	pthread_mutex_unlock(&sim_lock);
	return e;
}
