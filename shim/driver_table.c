/* The table behind driver_table.h: names, our wrappers, the lazily resolved real functions, and a
 * sorted real -> wrapper map for routing by pointer. */
#include "driver_table.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/real_dlsym.h"

static const char *const names[DRV_COUNT] = {
#define DRIVER_HOOK(name, params, args) [DRV_##name] = #name,
#define DRIVER_GATED(name, params, args, stream, per_thread) DRIVER_HOOK(name, params, args)
#include "driver_list.h"
#undef DRIVER_HOOK
#undef DRIVER_GATED
};

static void *const wrappers[DRV_COUNT] = {
#define DRIVER_HOOK(name, params, args) [DRV_##name] = (void *)name,
#define DRIVER_GATED(name, params, args, stream, per_thread) DRIVER_HOOK(name, params, args)
#include "driver_list.h"
#undef DRIVER_HOOK
#undef DRIVER_GATED
};

struct route {
	uintptr_t real;
	uintptr_t wrapper;
};

/* Resolved once the driver is loaded; published with release/acquire. */
static _Atomic(void *) reals[DRV_COUNT];
static struct route routes[DRV_COUNT];
static size_t nroutes;
static atomic_bool routes_ready;
static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;

/* Names sorted once for the dlsym filter (a binary search per lookup). */
static const char *sorted_names[DRV_COUNT];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void sort_names(void)
{
	memcpy(sorted_names, names, sizeof(names));
	qsort(sorted_names, DRV_COUNT, sizeof(sorted_names[0]), cmp_name);
}

static int cmp_route(const void *a, const void *b)
{
	const struct route *x = a, *y = b;

	return (x->real > y->real) - (x->real < y->real);
}

/* The driver as the program loaded it; never loads it ourselves (loading would run its
 * constructors in programs that do not use CUDA). */
static void *driver_handle(void)
{
	return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
}

/* Resolve every real function and build the routes, once the driver is there. The lookups run
 * without our lock held: a thread inside dlopen (holding the loader's lock) may be calling dlsym,
 * which comes here, while another does this. The first to finish publishes. */
static bool build_routes(void)
{
	struct route local[DRV_COUNT];
	void *found[DRV_COUNT];
	size_t n = 0;
	void *lib;

	if (atomic_load_explicit(&routes_ready, memory_order_acquire))
		return true;
	lib = driver_handle();
	if (!lib)
		return false;
	for (int i = 0; i < DRV_COUNT; i++) {
		found[i] = vmm_real_dlsym(lib, names[i]);
		if (found[i] && found[i] != wrappers[i]) {
			local[n].real = (uintptr_t)found[i];
			local[n].wrapper = (uintptr_t)wrappers[i];
			n++;
		}
	}
	/* The driver stays loaded: drop only our reference. */
	dlclose(lib);
	qsort(local, n, sizeof(local[0]), cmp_route);
	pthread_mutex_lock(&build_lock);
	if (!atomic_load_explicit(&routes_ready, memory_order_relaxed)) {
		for (int i = 0; i < DRV_COUNT; i++)
			atomic_store_explicit(&reals[i], found[i], memory_order_release);
		memcpy(routes, local, n * sizeof(local[0]));
		nroutes = n;
		atomic_store_explicit(&routes_ready, true, memory_order_release);
	}
	pthread_mutex_unlock(&build_lock);
	return true;
}

void *driver_real(enum driver_fn f)
{
	void *p;

	if ((unsigned)f >= DRV_COUNT)
		return NULL;
	p = atomic_load_explicit(&reals[f], memory_order_acquire);
	if (!p && build_routes())
		p = atomic_load_explicit(&reals[f], memory_order_acquire);
	return p;
}

void *driver_wrapper_for(void *real_fn)
{
	struct route key = { .real = (uintptr_t)real_fn };
	struct route *r;

	if (!real_fn || !build_routes())
		return NULL;
	r = bsearch(&key, routes, nroutes, sizeof(routes[0]), cmp_route);
	return r ? (void *)r->wrapper : NULL;
}

bool driver_is_wrapper(void *fn, enum driver_fn *f)
{
	for (int i = 0; i < DRV_COUNT; i++) {
		if (wrappers[i] == fn) {
			if (f)
				*f = (enum driver_fn)i;
			return true;
		}
	}
	return false;
}

bool driver_wraps_name(const char *name)
{
	pthread_once(&names_once, sort_names);
	return bsearch(&name, sorted_names, DRV_COUNT, sizeof(sorted_names[0]), cmp_name) != NULL;
}

const char *driver_name(enum driver_fn f)
{
	return (unsigned)f < DRV_COUNT ? names[f] : "?";
}

void *driver_lookup(const char *name)
{
	void *lib = driver_handle(), *p;

	if (!lib)
		return NULL;
	p = vmm_real_dlsym(lib, name);
	dlclose(lib);
	return p;
}
