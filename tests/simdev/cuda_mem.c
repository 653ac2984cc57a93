/* Native allocations, host memory, copies, memsets, pointer queries and IPC handles of simdev's
 * libcuda.so.1. Device memory of native allocations is charged rounded up to 2 MiB. */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"
#include "simdev.h"

/* ---- native device memory ---- */

static CUresult native_alloc(CUdeviceptr *dptr, size_t size, enum sim_native_kind kind)
{
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!dptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	int oom;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_device_alloc(c->dev, size, kind, &oom);
	if (n) {
		n->ctx = c;
		*dptr = n->va;
	}
	pthread_mutex_unlock(&sim_lock);
	return n ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	SIM_BEGIN("cuMemAlloc_v2", CUDA_ERROR_OUT_OF_MEMORY);
	return native_alloc(dptr, size, SIM_NATIVE_DEVICE);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
	SIM_BEGIN("cuMemAllocManaged", CUDA_ERROR_OUT_OF_MEMORY);
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return native_alloc(dptr, size, SIM_NATIVE_MANAGED);
}

/* A real pitch: rows padded to 512 bytes, as the texture alignment of the device. */
SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height,
				    unsigned int elem)
{
	SIM_BEGIN("cuMemAllocPitch_v2", CUDA_ERROR_OUT_OF_MEMORY);
	if (!pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = sim_round_up(width, 512);
	if (height > SIZE_MAX / p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = native_alloc(dptr, p * height, SIM_NATIVE_DEVICE);
	if (!r)
		*pitch = p;
	return r;
}

/* Like cuMemFree: waits for the device's work first. */
SIM_API CUresult cuMemFree_v2(CUdeviceptr p)
{
	SIM_BEGIN("cuMemFree_v2", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!p)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	bool ok = n && (n->kind == SIM_NATIVE_DEVICE || n->kind == SIM_NATIVE_MANAGED) &&
		  !n->freeing && !n->ipc && !n->graph;
	int dev = ok ? n->dev : 0;
	if (ok)
		n->freeing = true;
	pthread_mutex_unlock(&sim_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	sim_device_sync(dev);
	pthread_mutex_lock(&sim_lock);
	n = sim_native_exact((uintptr_t)p);
	if (n)
		sim_native_device_free(n);
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

void sim_natives_end(struct CUctx_st *ctx)
{
	pthread_mutex_lock(&sim_lock);
	for (size_t i = sim_native_count(); i-- > 0;) {
		struct sim_native *n = sim_native_get(i);

		if (n->ctx == ctx && !n->ipc && !n->graph && !n->pool &&
		    (n->kind == SIM_NATIVE_DEVICE || n->kind == SIM_NATIVE_MANAGED))
			sim_native_device_free(n);
		/* Host memory registered or allocated in the context is no longer the driver's
		 * (the H100: cuMemHostUnregister then fails NOT_REGISTERED, cuMemFreeHost
		 * INVALID_VALUE, even for CU_MEMHOSTREGISTER_PORTABLE). Its pages stay mapped. */
		else if (n->ctx == ctx &&
			 (n->kind == SIM_NATIVE_REGISTERED || n->kind == SIM_NATIVE_HOST))
			sim_native_remove(n);
	}
	pthread_mutex_unlock(&sim_lock);
}

SIM_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	SIM_BEGIN("cuMemGetInfo_v2", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!free_bytes || !total)
		return CUDA_ERROR_INVALID_VALUE;
	size_t used;
	if (!sim_used(c->dev, &used))
		return CUDA_ERROR_UNKNOWN; /* a SIMDEV_SHARED group that did not answer in time */
	*total = sim_config()->memory;
	*free_bytes = used < *total ? *total - used : 0;
	return CUDA_SUCCESS;
}

/* ---- host memory ---- */

static CUresult host_alloc(void **pp, size_t size)
{
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!pp || !size)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct sim_native tmpl = { .va = (uintptr_t)p, .size = size, .span = size,
				   .kind = SIM_NATIVE_HOST, .dev = c->dev, .ctx = c };
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_add(&tmpl);
	pthread_mutex_unlock(&sim_lock);
	if (!n) {
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t size)
{
	SIM_BEGIN("cuMemAllocHost_v2", CUDA_ERROR_OUT_OF_MEMORY);
	return host_alloc(pp, size);
}

SIM_API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned int flags)
{
	SIM_BEGIN("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY);
	(void)flags;
	return host_alloc(pp, size);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
	SIM_BEGIN("cuMemFreeHost", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	bool ok = n && n->kind == SIM_NATIVE_HOST;
	size_t size = ok ? n->size : 0;
	if (ok)
		sim_native_remove(n);
	pthread_mutex_unlock(&sim_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	munmap(p, size);
	return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
	SIM_BEGIN("cuMemHostRegister_v2", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	(void)flags;
	if (!p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	struct sim_native tmpl = { .va = (uintptr_t)p, .size = size, .span = size,
				   .kind = SIM_NATIVE_REGISTERED, .dev = c->dev, .ctx = c };
	pthread_mutex_lock(&sim_lock);
	if (sim_native_at((uintptr_t)p) || sim_native_at((uintptr_t)p + size - 1))
		r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	else if (!sim_native_add(&tmpl))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
	SIM_BEGIN("cuMemHostUnregister", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact((uintptr_t)p);
	if (n && n->kind == SIM_NATIVE_REGISTERED)
		sim_native_remove(n);
	else
		r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	SIM_BEGIN("cuMemHostGetDevicePointer_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!pdptr || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_at((uintptr_t)p);
	bool ok = n && (n->kind == SIM_NATIVE_HOST || n->kind == SIM_NATIVE_REGISTERED);
	pthread_mutex_unlock(&sim_lock);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* ---- copies and memsets, in stream order ---- */

static CUresult copy(uintptr_t dst, uintptr_t src, size_t n, CUstream h, bool ptsz, bool sync)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!n)
		return CUDA_SUCCESS;
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	r = sim_check(s, (void *)dst, n, true);
	if (!r)
		r = sim_check(s, (void *)src, n, false);
	if (r)
		return r;
	struct sim_op op = { .kind = OP_COPY, .dst = (void *)dst, .src = (const void *)src, .n = n };
	return sync ? sim_enqueue_sync(s, &op) : sim_enqueue(s, &op);
}

#define U(p) ((uintptr_t)(p))

SIM_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpy", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, false, true);
}

SIM_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpy_ptds", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, true, true);
}

SIM_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyAsync", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, false, false);
}

SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyAsync_ptsz", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, true, false);
}

SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	SIM_BEGIN("cuMemcpyHtoD_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, false, true);
}

SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	SIM_BEGIN("cuMemcpyHtoD_v2_ptds", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, true, true);
}

SIM_API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpyDtoH_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, false, true);
}

SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpyDtoH_v2_ptds", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, true, true);
}

SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpyDtoD_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, false, true);
}

SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	SIM_BEGIN("cuMemcpyDtoD_v2_ptds", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, NULL, true, true);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyHtoDAsync_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, false, false);
}

SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyHtoDAsync_v2_ptsz", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, true, false);
}

SIM_API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyDtoHAsync_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, false, false);
}

SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyDtoHAsync_v2_ptsz", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, true, false);
}

SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyDtoDAsync_v2", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, false, false);
}

SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyDtoDAsync_v2_ptsz", CUDA_ERROR_UNKNOWN);
	return copy(U(dst), U(src), n, h, true, false);
}

/* Peer copies run on the current context's stream: its device needs access to both sides. */
SIM_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
			      size_t n)
{
	SIM_BEGIN("cuMemcpyPeer", CUDA_ERROR_UNKNOWN);
	(void)dctx, (void)sctx;
	return copy(U(dst), U(src), n, NULL, false, true);
}

SIM_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
				   CUcontext sctx, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemcpyPeerAsync", CUDA_ERROR_UNKNOWN);
	(void)dctx, (void)sctx;
	return copy(U(dst), U(src), n, h, false, false);
}

static CUresult memset_n(uintptr_t dst, unsigned value, unsigned elem, size_t count, CUstream h,
			 bool ptsz, bool sync)
{
	struct CUstream_st *s;
	CUresult r = sim_stream_resolve(h, ptsz, &s);
	if (r)
		return r;
	if (!count)
		return CUDA_SUCCESS;
	if (!dst || dst % elem || count > SIZE_MAX / elem)
		return CUDA_ERROR_INVALID_VALUE;
	r = sim_check(s, (void *)dst, count * elem, true);
	if (r)
		return r;
	struct sim_op op = { .kind = OP_SET, .dst = (void *)dst, .value = value, .elem = elem,
			     .n = count };
	return sync ? sim_enqueue_sync(s, &op) : sim_enqueue(s, &op);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	SIM_BEGIN("cuMemsetD8_v2", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 1, n, NULL, false, true);
}

SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n)
{
	SIM_BEGIN("cuMemsetD8_v2_ptds", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 1, n, NULL, true, true);
}

SIM_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n)
{
	SIM_BEGIN("cuMemsetD16_v2", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 2, n, NULL, false, true);
}

SIM_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n)
{
	SIM_BEGIN("cuMemsetD16_v2_ptds", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 2, n, NULL, true, true);
}

SIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)
{
	SIM_BEGIN("cuMemsetD32_v2", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 4, n, NULL, false, true);
}

SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n)
{
	SIM_BEGIN("cuMemsetD32_v2_ptds", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 4, n, NULL, true, true);
}

SIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD8Async", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 1, n, h, false, false);
}

SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD8Async_ptsz", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 1, n, h, true, false);
}

SIM_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD16Async", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 2, n, h, false, false);
}

SIM_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD16Async_ptsz", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 2, n, h, true, false);
}

SIM_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD32Async", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 4, n, h, false, false);
}

SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h)
{
	SIM_BEGIN("cuMemsetD32Async_ptsz", CUDA_ERROR_UNKNOWN);
	return memset_n(U(d), v, 4, n, h, true, false);
}

/* ---- pointer queries ---- */

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	SIM_BEGIN("cuMemGetAddressRange_v2", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	struct sim_region reg;
	pthread_mutex_lock(&sim_lock);
	bool found = sim_find(U(dptr), &reg);
	pthread_mutex_unlock(&sim_lock);
	if (!found)
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = reg.base;
	if (psize)
		*psize = reg.size;
	return CUDA_SUCCESS;
}

/* One attribute of ptr (sim_lock held); found says whether simdev knows the pointer. */
static CUresult attribute(void *data, CUpointer_attribute a, uintptr_t ptr, bool *found)
{
	struct sim_region reg;
	*found = sim_find(ptr, &reg);
	const struct sim_native *n = *found ? reg.native : NULL;
	bool host = n && (n->kind == SIM_NATIVE_HOST || n->kind == SIM_NATIVE_REGISTERED);
	struct CUctx_st *cur = sim_current_ctx();
	int cur_dev = cur ? cur->dev : 0;
	if (!*found)
		return CUDA_ERROR_INVALID_VALUE;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = n ? n->ctx : NULL;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && !(n && n->kind == SIM_NATIVE_MANAGED))
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)ptr;
		break;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		*(int *)data = 0;
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = n ? n->id : reg.map->phys->id;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = n && n->kind == SIM_NATIVE_MANAGED;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = reg.dev;
		break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = n && n->kind == SIM_NATIVE_DEVICE && !n->pool && !n->ipc;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = reg.base;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = reg.size;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		break;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = reg.map ? reg.map->phys->handle_types : 0;
		break;
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
		*(int *)data = 0;
		break;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		*(unsigned *)data = reg.map ? reg.map->access[cur_dev]
				    : (n->kind != SIM_NATIVE_DEVICE || n->dev == cur_dev ||
				       sim_peer_enabled[cur_dev][n->dev]) ? 3 : 0;
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(CUmemoryPool *)data = n ? n->pool : NULL;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
		*(size_t *)data = reg.map ? reg.map->size : n->span;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
		*(CUdeviceptr *)data = reg.base;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		*(unsigned long long *)data = n ? n->id : reg.map->phys->id;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr ptr)
{
	SIM_BEGIN("cuPointerGetAttribute", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	bool found;
	pthread_mutex_lock(&sim_lock);
	r = attribute(data, a, U(ptr), &found);
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* Like the driver, unknown pointers are not an error here: their attributes read as zero. */
SIM_API CUresult cuPointerGetAttributes(unsigned int num, CUpointer_attribute *attrs, void **data,
					CUdeviceptr ptr)
{
	SIM_BEGIN("cuPointerGetAttributes", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	for (unsigned i = 0; i < num; i++) {
		bool found;
		unsigned long long zero = 0;
		if (!data[i])
			continue;
		if (attribute(data[i], attrs[i], U(ptr), &found) && !found) {
			size_t len = attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE ||
						 attrs[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
						 attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ||
						 attrs[i] == CU_POINTER_ATTRIBUTE_MAPPED ||
						 attrs[i] == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS
					     ? sizeof(int) : sizeof(zero);
			if (attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
				*(int *)data[i] = -2; /* what the driver reports for host memory */
			else
				memcpy(data[i], &zero, len);
		}
	}
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}

/* ---- legacy IPC: cuMemAlloc memory only, as on the driver ---- */

_Static_assert(sizeof(struct sim_ipc) <= sizeof(((CUipcMemHandle *)0)->reserved),
	       "a legacy IPC handle has 64 bytes");

/* A cuMemAlloc allocation, named by any address inside it (not VMM, stream-ordered, managed or
 * opened memory). */
SIM_API CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	SIM_BEGIN("cuIpcGetMemHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&sim_lock);
	/* The driver takes any address inside the allocation and names the whole allocation. */
	struct sim_native *n = sim_native_at(U(dptr));
	struct sim_ipc h;
	if (!n || n->kind != SIM_NATIVE_DEVICE || n->ipc || n->pool || n->freeing)
		r = CUDA_ERROR_INVALID_VALUE;
	else if (sim_mem_ipc_handle(n->mem, n->size, &h))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (!r) {
		memset(handle, 0, sizeof(*handle));
		memcpy(handle->reserved, &h, sizeof(h));
	}
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* The mapping this process opened from handle h on dev, if any (caller holds sim_lock). */
static struct sim_native *opened(const struct sim_ipc *h, int dev)
{
	for (size_t i = 0; i < sim_native_count(); i++) {
		struct sim_native *n = sim_native_get(i);
		const struct sim_ipc *f = &n->ipc_from;
		if (n->ipc && ((struct CUctx_st *)n->ctx)->dev == dev && f->pid == h->pid &&
		    f->kdev == h->kdev && f->kino == h->kino && f->off == h->off && f->id == h->id)
			return n;
	}
	return NULL;
}

/* Maps another process's allocation. Opening it again in the same context returns the same
 * pointer and counts one more open; another context of the same device may not (the driver
 * allows one context per device and exporting process). */
SIM_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
				       unsigned int flags)
{
	SIM_BEGIN("cuIpcOpenMemHandle_v2", CUDA_ERROR_UNKNOWN);
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	struct sim_ipc h;
	memcpy(&h, handle.reserved, sizeof(h));
	if (!pdptr || (flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) ||
	    memcmp(h.magic, "simdevI", 8))
		return CUDA_ERROR_INVALID_VALUE;
	if (h.pid == getpid())
		return CUDA_ERROR_INVALID_CONTEXT; /* the driver refuses to open its own handles */
	pthread_mutex_lock(&sim_lock);
	/* A handle this process has open maps again without asking the exporter: the driver
	 * succeeds here even after the exporter freed the allocation. */
	struct sim_native *n = opened(&h, c->dev);
	if (n) {
		r = n->ctx != c ? CUDA_ERROR_ALREADY_MAPPED : CUDA_SUCCESS;
		if (!r)
			n->ipc_opens++;
		goto out;
	}
	enum sim_err e;
	struct sim_mem *mem = sim_mem_open_ipc(&h, &e);
	if (!mem) {
		r = e == SIM_E_OOM ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	size_t span = mem->size;
	void *va = sim_va_reserve(span, SIM_GRANULARITY, 0);
	if (va && !sim_mem_map(mem, U(va), span, 0, PROT_READ | PROT_WRITE)) {
		struct sim_native tmpl = { .va = U(va), .size = (size_t)h.size, .span = span,
					   .kind = SIM_NATIVE_DEVICE, .dev = mem->dev, .ctx = c,
					   .mem = mem, .ipc = true, .ipc_opens = 1, .ipc_from = h };
		n = sim_native_add(&tmpl);
	}
	if (!n) {
		if (va)
			munmap(va, span);
		sim_mem_put(mem);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (mem->dev != c->dev && (flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		sim_peer_enabled[c->dev][mem->dev] = true; /* as cuCtxEnablePeerAccess would */
out:
	if (!r)
		*pdptr = n->va;
	pthread_mutex_unlock(&sim_lock);
	return r;
}

/* The same function under its pre-11.0 name, which the library also exports. */
#undef cuIpcOpenMemHandle
SIM_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags)
{
	SIM_BEGIN("cuIpcOpenMemHandle", CUDA_ERROR_UNKNOWN);
	return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

/* One open fewer; the last unmaps. The exporter's allocation is not affected. */
SIM_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	SIM_BEGIN("cuIpcCloseMemHandle", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = sim_native_exact(U(dptr));
	bool ok = n && n->ipc;
	if (ok && --n->ipc_opens == 0)
		sim_native_device_free(n);
	pthread_mutex_unlock(&sim_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- simdev.h ---- */

SIM_API int simdev_check_access(int dev, const void *ptr, size_t size)
{
	pthread_mutex_lock(&sim_lock);
	int a = sim_access(dev, U(ptr), size, true);
	pthread_mutex_unlock(&sim_lock);
	return a < 0 ? CUDA_ERROR_ILLEGAL_ADDRESS : CUDA_SUCCESS;
}

SIM_API int simdev_current_device(void)
{
	return sim_worker_device();
}

SIM_API void simdev_memory_bytes(size_t *live, size_t *peak)
{
	sim_group_bytes(live, peak);
}

SIM_API void simdev_memory_peak_reset(void)
{
	sim_group_peak_reset();
}
