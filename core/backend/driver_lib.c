/* The first steps of every backend's open (driver_lib.h). */
#include "driver_lib.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../real_dlsym.h"

vmm_status vmm_backend_alloc(size_t impl_size, const char *what, vmm_backend **be,
			     vmm_error *err)
{
	void *impl = calloc(1, impl_size);

	*be = calloc(1, sizeof(**be));
	if (!impl || !*be) {
		free(impl);
		free(*be);
		*be = NULL;
		return vmm_fail(err, VMM_E_HOST_OOM, 0, "no host memory for %s", what);
	}
	(*be)->impl = impl;
	return VMM_OK;
}

vmm_status vmm_driver_lib_load(const char *soname, const struct vmm_driver_sym *syms, size_t n,
			       void *table, void **lib, vmm_error *err)
{
	vmm_dlsym_fn real_dlsym = vmm_real_dlsym_fn();

	*lib = NULL;
	if (!real_dlsym)
		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "glibc's dlsym could not be found");
	*lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	if (!*lib) {
		const char *why = dlerror();

		return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "%s cannot be loaded: %s", soname,
				why ? why : "not found");
	}
	for (size_t i = 0; i < n; i++) {
		void *p = real_dlsym(*lib, syms[i].name);

		if (!p && !syms[i].optional)
			return vmm_fail(err, VMM_E_UNSUPPORTED, 0, "%s lacks %s", soname,
					syms[i].name);
		/* A data pointer into a function-pointer slot: memcpy, as POSIX dlsym intends. */
		memcpy((char *)table + syms[i].offset, &p, sizeof(p));
	}
	return VMM_OK;
}
