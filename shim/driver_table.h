/* The driver entry points the shim wraps (driver_list.h): their real functions in libcuda.so.1,
 * resolved lazily with the real dlsym, and the map from a real function to our wrapper that
 * dlsym and cuGetProcAddress use to route by pointer. */
#ifndef VMMSHIM_DRIVER_TABLE_H
#define VMMSHIM_DRIVER_TABLE_H

#include <stdbool.h>

/* The shim forwards deprecated entry points too; it does not call them itself. */
#define CUDA_ENABLE_DEPRECATED
#include <cuda.h>

#include "driver_undef.h"

/* Prototypes under the exact exported names (cuda.h declares the _ptsz forms only in per-thread
 * mode and the legacy ABIs only internally). */
#define DRIVER_HOOK(name, params, args) CUresult CUDAAPI name params;
#define DRIVER_GATED(name, params, args, stream, per_thread) DRIVER_HOOK(name, params, args)
#include "driver_list.h"
#undef DRIVER_HOOK
#undef DRIVER_GATED

enum driver_fn {
#define DRIVER_HOOK(name, params, args) DRV_##name,
#define DRIVER_GATED(name, params, args, stream, per_thread) DRIVER_HOOK(name, params, args)
#include "driver_list.h"
#undef DRIVER_HOOK
#undef DRIVER_GATED
	DRV_COUNT
};

/* The real function of entry f in libcuda.so.1 (loading nothing: NULL until the program has loaded
 * the driver, or when this driver lacks it). */
void *driver_real(enum driver_fn f);

/* The real function with its own type, e.g. REAL(cuMemAlloc_v2)(&p, n). */
#define REAL(name) ((__typeof__(&name))driver_real(DRV_##name))

/* Call the real function, or answer CUDA_ERROR_NOT_FOUND when the driver lacks it (only reachable
 * through a lookup of our own export by a program whose driver does not have the symbol). */
#define CALL_REAL(name, args) \
	(REAL(name) ? REAL(name) args : CUDA_ERROR_NOT_FOUND)

/* Our wrapper for a real driver function, or NULL when we do not wrap it. */
void *driver_wrapper_for(void *real_fn);
/* Is fn one of our wrappers? Its index in *f when it is (f may be NULL). */
bool driver_is_wrapper(void *fn, enum driver_fn *f);
/* Is name the exported name of an entry point we wrap? */
bool driver_wraps_name(const char *name);
const char *driver_name(enum driver_fn f);

/* A driver function we do not wrap (cuCtxGetDevice, ...), from the loaded libcuda.so.1; NULL when
 * it is not loaded or lacks it. Uncached: callers keep the answer (DRIVER_EXTRA). */
void *driver_lookup(const char *name);

/* The real `name` (an unwrapped driver function), looked up once per call site. */
#define DRIVER_EXTRA(name) ((__typeof__(&name))driver_extra_cached(&driver_extra_##name, #name))
#define DRIVER_EXTRA_SLOT(name) static void *driver_extra_##name

static inline void *driver_extra_cached(void **slot, const char *name)
{
	void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (!p) {
		p = driver_lookup(name);
		__atomic_store_n(slot, p, __ATOMIC_RELEASE);
	}
	return p;
}

#endif
