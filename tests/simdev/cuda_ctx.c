/* Init, devices and contexts of simdev's libcuda.so.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

const char sim_lib_name[] = "cuda";

static atomic_int initialized;
static struct CUctx_st primaries[SIM_MAX_DEVICES];
static atomic_ullong ctx_ids;

/* The calling thread's context stack (cuCtxPush/Pop); the top is the current context. */
#define CTX_STACK 32
static __thread struct CUctx_st *ctx_stack[CTX_STACK];
static __thread int ctx_depth;

/* Every context ever made (never freed, so stale handles are detected). */
static struct CUctx_st **all_ctx;
static size_t nctx, capctx;

CUresult sim_require_init(void)
{
	return atomic_load(&initialized) ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

struct CUctx_st *sim_current_ctx(void)
{
	return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

CUresult sim_current(struct CUctx_st **ctx)
{
	CUresult r = sim_require_init();
	if (r)
		return r;
	*ctx = sim_current_ctx();
	if (!*ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Destroyed while current here (cuCtxDestroy on another thread), or a primary context
	 * reset and not retained since. */
	if (!atomic_load(&(*ctx)->alive) || atomic_load(&(*ctx)->reset))
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	return CUDA_SUCCESS;
}

bool sim_ctx_valid(struct CUctx_st *ctx)
{
	bool ok = false;
	pthread_mutex_lock(&sim_lock);
	for (size_t i = 0; i < nctx && !ok; i++)
		ok = all_ctx[i] == ctx && ctx->alive && !atomic_load(&ctx->reset);
	pthread_mutex_unlock(&sim_lock);
	return ok;
}

static int ctx_register(struct CUctx_st *ctx)
{
	if (nctx == capctx) {
		size_t cap = capctx ? capctx * 2 : 16;
		struct CUctx_st **v = realloc(all_ctx, cap * sizeof(*v));
		if (!v)
			return -1;
		all_ctx = v;
		capctx = cap;
	}
	all_ctx[nctx++] = ctx;
	return 0;
}

/* Give ctx an id and its default stream and list it (caller holds sim_lock). */
static CUresult ctx_init_locked(struct CUctx_st *c)
{
	c->id = atomic_fetch_add(&ctx_ids, 1) + 1;
	if (!c->legacy)
		c->legacy = sim_stream_new(c, 0, 0, true);
	if (!c->legacy || ctx_register(c))
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_store(&c->alive, true);
	sim_note_context(c->dev);
	return CUDA_SUCCESS;
}

CUresult sim_ctx_init(struct CUctx_st *c)
{
	pthread_mutex_lock(&sim_lock);
	CUresult r = ctx_init_locked(c);
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* Make the primary context of dev usable (its legacy stream exists); caller holds sim_lock.
 * Once made it stays alive (simdev never tears a primary context down). */
static CUresult primary_ready(int dev)
{
	struct CUctx_st *c = &primaries[dev];
	if (atomic_load(&c->alive))
		return CUDA_SUCCESS;
	c->dev = dev;
	c->primary = true;
	return ctx_init_locked(c);
}

struct CUctx_st *sim_primary_ctx(int dev)
{
	return &primaries[dev];
}

/* A primary context's end (a reset, the last release) and a retain that makes it again happen
 * one at a time: the driver never hands out a context it is tearing down. */
static pthread_mutex_t life_lock = PTHREAD_MUTEX_INITIALIZER;

CUresult sim_primary_retain(int dev, struct CUctx_st **out)
{
	pthread_mutex_lock(&life_lock);
	pthread_mutex_lock(&sim_lock);
	CUresult r = primary_ready(dev);
	if (!r) {
		primaries[dev].retains++;
		atomic_store(&primaries[dev].reset, false); /* made again: the same handle */
		*out = &primaries[dev];
	}
	pthread_mutex_unlock(&sim_lock);
	pthread_mutex_unlock(&life_lock);
	return r;
}

/* What the driver does when a primary context ends (H100, tests/gpu/PROBE.md (j)): its work is
 * waited for, its own allocations (cuMemAlloc) are freed, its streams, host registrations and
 * host allocations end; memory of the virtual-memory API, which no context owns, stays mapped
 * and readable. The handle stays, gone until a retain makes it again (caller holds life_lock). */
static void primary_end(int dev)
{
	if (!atomic_load(&primaries[dev].alive))
		return;
	sim_ctx_sync(&primaries[dev]);
	sim_streams_end(&primaries[dev]);
	sim_natives_end(&primaries[dev]);
	atomic_store(&primaries[dev].reset, true);
}

void sim_primary_release(int dev)
{
	pthread_mutex_lock(&sim_lock);
	if (primaries[dev].retains > 0)
		primaries[dev].retains--;
	pthread_mutex_unlock(&sim_lock);
}

static CUresult check_dev(CUdevice dev)
{
	CUresult r = sim_require_init();
	if (r)
		return r;
	return dev >= 0 && dev < sim_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuInit(unsigned int flags)
{
	SIM_BEGIN("cuInit", CUDA_ERROR_UNKNOWN);
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	atomic_store(&initialized, 1);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDriverGetVersion(int *version)
{
	SIM_BEGIN("cuDriverGetVersion", CUDA_ERROR_UNKNOWN);
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetCount(int *count)
{
	SIM_BEGIN("cuDeviceGetCount", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = sim_device_count();
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	SIM_BEGIN("cuDeviceGet", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(ordinal);
	if (r)
		return r;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	SIM_BEGIN("cuDeviceGetName", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "simdev %d", dev);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	SIM_BEGIN("cuDeviceGetUuid_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	memset(uuid, 0, sizeof(*uuid));
	memcpy(uuid->bytes, "simdev", 6);
	/* Processes of one SIMDEV_SHARED group share one device, as processes share a GPU: the same
	 * UUID there, another in each other group (two groups are two GPUs of a node). */
	if (sim_config()->shared) {
		uint64_t h = 1469598103934665603ULL; /* FNV-1a of the group's name */

		for (const char *p = sim_config()->shared; *p; p++)
			h = (h ^ (unsigned char)*p) * 1099511628211ULL;
		memcpy(uuid->bytes + 6, &h, 8);
	}
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	SIM_BEGIN("cuDeviceTotalMem_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = sim_config()->memory;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	SIM_BEGIN("cuDeviceGetAttribute", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
		*pi = 1;
		break;
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_INTEGRATED:
	case CU_DEVICE_ATTRIBUTE_TCC_DRIVER:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*pi = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*pi = 4;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
		*pi = 1024;
		break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		*pi = 32;
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		*pi = dev + 1;
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
	case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
		*pi = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
		*pi = 512;
		break;
	default:
		*pi = 0;
		break;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	SIM_BEGIN("cuDeviceCanAccessPeer", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (!r)
		r = check_dev(peer);
	if (r)
		return r;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	*can = dev != peer;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	SIM_BEGIN("cuDevicePrimaryCtxRetain", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c;
	r = sim_primary_retain(dev, &c);
	if (!r)
		*pctx = c;
	return r;
}

SIM_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	SIM_BEGIN("cuDevicePrimaryCtxRelease_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	bool last = false;

	pthread_mutex_lock(&life_lock);
	pthread_mutex_lock(&sim_lock);
	if (primaries[dev].retains > 0)
		last = --primaries[dev].retains == 0;
	else
		r = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&sim_lock);
	/* "Once the reference count reaches zero, the primary context of the device will be
	 * destroyed regardless of whether it is current to any thread" (CUDA's documentation;
	 * inactive afterwards on the H100). */
	if (last)
		primary_end(dev);
	pthread_mutex_unlock(&life_lock);
	return r;
}

/* The pre-11.0 forms of release and reset (the driver still exports them, and cuGetProcAddress
 * gives them for versions before 11.0): the same as the _v2 ones here. */
#undef cuDevicePrimaryCtxRelease
SIM_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

SIM_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	SIM_BEGIN("cuDevicePrimaryCtxGetState", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	*flags = primaries[dev].flags;
	*active = primaries[dev].retains > 0 && !atomic_load(&primaries[dev].reset);
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	SIM_BEGIN("cuDevicePrimaryCtxSetFlags_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	primaries[dev].flags = flags;
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	SIM_BEGIN("cuDevicePrimaryCtxReset_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = check_dev(dev);
	if (r)
		return r;
	/* "Resetting the primary context does not release it" (CUDA's documentation): the retains
	 * stay, and a later release is still accepted; it is gone until retained again, even with
	 * retains held (the H100). */
	pthread_mutex_lock(&life_lock);
	primary_end(dev);
	pthread_mutex_unlock(&life_lock);
	return CUDA_SUCCESS;
}

#undef cuDevicePrimaryCtxReset
SIM_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult r = check_dev(dev);
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUctx_st *c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->dev = dev;
	c->flags = flags;
	if (sim_ctx_init(c))
		return CUDA_ERROR_OUT_OF_MEMORY; /* c is not freed: its default stream may name it */
	if (ctx_depth == CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	SIM_BEGIN("cuCtxCreate_v2", CUDA_ERROR_OUT_OF_MEMORY);
	return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
				CUdevice dev)
{
	SIM_BEGIN("cuCtxCreate_v4", CUDA_ERROR_OUT_OF_MEMORY);
	(void)params;
	return ctx_create(pctx, flags, dev);
}

SIM_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	SIM_BEGIN("cuCtxDestroy_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ctx || !sim_ctx_valid(ctx) || ctx->primary || ctx->green)
		return CUDA_ERROR_INVALID_CONTEXT;
	sim_ctx_sync(ctx); /* its own work only: other contexts keep running */
	pthread_mutex_lock(&sim_lock);
	atomic_store(&ctx->alive, false); /* kept allocated: stale handles stay detectable */
	pthread_mutex_unlock(&sim_lock);
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] == ctx) {
			memmove(&ctx_stack[i], &ctx_stack[i + 1],
				(size_t)(ctx_depth - i - 1) * sizeof(ctx_stack[0]));
			ctx_depth--;
			i--;
		}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	SIM_BEGIN("cuCtxGetCurrent", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = sim_current_ctx();
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
	SIM_BEGIN("cuCtxSetCurrent", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth)
		ctx_stack[ctx_depth - 1] = ctx;
	else
		ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	SIM_BEGIN("cuCtxPushCurrent_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ctx || !sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	SIM_BEGIN("cuCtxPopCurrent_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ctx_depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct CUctx_st *c = ctx_stack[--ctx_depth];
	if (pctx)
		*pctx = c;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetDevice(CUdevice *device)
{
	SIM_BEGIN("cuCtxGetDevice", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = c->dev;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetFlags(unsigned int *flags)
{
	SIM_BEGIN("cuCtxGetFlags", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = c->flags;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetId(CUcontext ctx, unsigned long long *id)
{
	SIM_BEGIN("cuCtxGetId", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!ctx)
		ctx = sim_current_ctx();
	if (!ctx || !sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = ctx->id;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	SIM_BEGIN("cuCtxGetApiVersion", CUDA_ERROR_UNKNOWN);
	(void)ctx;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 12010;
	return CUDA_SUCCESS;
}

/* cuCtxSynchronize: the context's own work (its streams; for a primary context also the green
 * contexts made on its device, as cuda.h documents), not the rest of the device. While a stream
 * of the context is being captured it fails and breaks that capture, from any thread and in any
 * capture mode (the H200, driver 580: tests/gpu/probe_bgsync.cu). */
static CUresult ctx_synchronize(struct CUctx_st *c)
{
	if (sim_ctx_invalidate_captures(c))
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	return sim_ctx_sync(c);
}

SIM_API CUresult cuCtxSynchronize(void)
{
	SIM_BEGIN("cuCtxSynchronize", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	return r ? r : ctx_synchronize(c);
}

/* CUDA 13.0: the same for a named context (NULL: the current one), current to this thread or
 * not. */
SIM_API CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	SIM_BEGIN("cuCtxSynchronize_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = ctx ? sim_require_init() : sim_current(&ctx);
	if (r)
		return r;
	if (!sim_ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_synchronize(ctx);
}

/* Peer access: the current context's device may then touch the peer context's native memory. */
SIM_API CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	SIM_BEGIN("cuCtxEnablePeerAccess", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!peer || !sim_ctx_valid(peer))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (peer->dev == c->dev)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sim_lock);
	if (sim_peer_enabled[c->dev][peer->dev])
		r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	else
		sim_peer_enabled[c->dev][peer->dev] = true;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

SIM_API CUresult cuCtxDisablePeerAccess(CUcontext peer)
{
	SIM_BEGIN("cuCtxDisablePeerAccess", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!peer || !sim_ctx_valid(peer))
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&sim_lock);
	if (!sim_peer_enabled[c->dev][peer->dev])
		r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	else
		sim_peer_enabled[c->dev][peer->dev] = false;
	pthread_mutex_unlock(&sim_lock);
	return r;
}
