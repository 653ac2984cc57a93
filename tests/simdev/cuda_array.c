/* CUDA arrays: opaque device memory the shim passes through. simdev charges them like native
 * allocations (rounded to 2 MiB) and offers nothing else (no copies, no textures). */
#include <stdlib.h>

#include "cuda_internal.h"

struct CUarray_st {
	uintptr_t va; /* the native allocation holding it; never shown to the program */
	bool alive;
};

/* Arrays ever made (kept allocated, so stale handles are refused, not dereferenced). */
static struct CUarray_st **arrays;
static size_t narrays, caparrays;

static bool array_known(struct CUarray_st *a)
{
	bool ok = false;
	for (size_t i = 0; i < narrays && !ok; i++)
		ok = arrays[i] == a && a->alive;
	return ok;
}

static size_t element_size(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	default:
		return 4;
	}
}

static CUresult array_create(CUarray *ph, size_t w, size_t h, size_t d, CUarray_format f,
			     unsigned channels)
{
	struct CUctx_st *c;
	CUresult r = sim_current(&c);
	if (r)
		return r;
	if (!ph || !w || (channels != 1 && channels != 2 && channels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	h = h ? h : 1;
	d = d ? d : 1;
	size_t row = w * element_size(f) * channels;
	if (h > SIZE_MAX / row || d > SIZE_MAX / (row * h))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct CUarray_st *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	int oom;
	pthread_mutex_lock(&sim_lock);
	if (narrays == caparrays) {
		size_t cap = caparrays ? caparrays * 2 : 16;
		struct CUarray_st **v = realloc(arrays, cap * sizeof(*v));
		if (v) {
			arrays = v;
			caparrays = cap;
		}
	}
	struct sim_native *n = narrays < caparrays
		? sim_native_device_alloc(c->dev, row * h * d, SIM_NATIVE_DEVICE, &oom) : NULL;
	if (n) {
		n->ctx = c;
		a->va = n->va;
		arrays[narrays++] = a;
	}
	pthread_mutex_unlock(&sim_lock);
	if (!n) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->alive = true;
	*ph = a;
	return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *ph, const CUDA_ARRAY_DESCRIPTOR *desc)
{
	SIM_BEGIN("cuArrayCreate_v2", CUDA_ERROR_OUT_OF_MEMORY);
	if (!desc)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(ph, desc->Width, desc->Height, 1, desc->Format, desc->NumChannels);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *ph, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
	SIM_BEGIN("cuArray3DCreate_v2", CUDA_ERROR_OUT_OF_MEMORY);
	if (!desc)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(ph, desc->Width, desc->Height, desc->Depth, desc->Format,
			    desc->NumChannels);
}

/* Like cuMemFree, it waits for the device's work first. */
SIM_API CUresult cuArrayDestroy(CUarray a)
{
	SIM_BEGIN("cuArrayDestroy", CUDA_ERROR_UNKNOWN);
	CUresult r = sim_require_init();
	if (r)
		return r;
	pthread_mutex_lock(&sim_lock);
	struct sim_native *n = array_known(a) ? sim_native_exact(a->va) : NULL;
	int dev = n ? n->dev : 0;
	if (n)
		a->alive = false;
	pthread_mutex_unlock(&sim_lock);
	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	sim_device_sync(dev);
	pthread_mutex_lock(&sim_lock);
	n = sim_native_exact(a->va);
	if (n)
		sim_native_device_free(n);
	pthread_mutex_unlock(&sim_lock);
	return CUDA_SUCCESS;
}
