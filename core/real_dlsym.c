/* Bootstraps glibc's dlsym with dlvsym, which the shim does not interpose. The public dlsym is
 * never called here: inside libvmmshim.so it would be the shim's own hook. */
#include "real_dlsym.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>

static _Atomic(vmm_dlsym_fn) real_dlsym_cached;

static vmm_dlsym_fn find_real_dlsym(void)
{
	static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17" };
	void *libc;

	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++) {
		void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
		if (p)
			return (vmm_dlsym_fn)p;
	}
	/* RTLD_NEXT finds nothing when libc precedes us; ask libc itself, still through dlvsym. */
	libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	for (size_t i = 0; libc && i < sizeof(versions) / sizeof(versions[0]); i++) {
		void *p = dlvsym(libc, "dlsym", versions[i]);
		if (p)
			return (vmm_dlsym_fn)p;
	}
	return NULL;
}

vmm_dlsym_fn vmm_real_dlsym_fn(void)
{
	vmm_dlsym_fn fn = atomic_load_explicit(&real_dlsym_cached, memory_order_acquire);

	if (!fn) {
		fn = find_real_dlsym();
		atomic_store_explicit(&real_dlsym_cached, fn, memory_order_release);
	}
	return fn;
}
