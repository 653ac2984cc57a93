/* The exported dlsym. Runtimes find the driver with dlopen + dlsym (cudart, cuBLAS, NCCL and
 * torch_npu never call the driver through the PLT), so dlsym is where their lookups are caught.
 *
 * Names we do not wrap are passed on as a tail call (compiled to a jmp: this file is built with
 * -O2 and without stack protector), so glibc sees the original caller and RTLD_NEXT keeps its
 * meaning for every other interposer. Names we wrap are resolved the way the caller asked (its
 * handle, or RTLD_NEXT relative to the caller), and the function found is routed by pointer: the
 * driver's own function becomes our wrapper, anything else is returned untouched. A thread-local
 * depth makes lookups made while routing (a driver constructor calling dlsym) plain. */
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>

#include "../core/real_dlsym.h"
#include "driver_table.h"
#include "shim_internal.h"

static _Thread_local int dlsym_depth;

static int is_upper(char c)
{
	return c >= 'A' && c <= 'Z';
}

static int is_wrapped_name(const char *name)
{
	if (!name)
		return 0;
	if (name[0] == 'c' && name[1] == 'u' && is_upper(name[2]))
		return driver_wraps_name(name);
	if (name[0] == 'a' && name[1] == 'c' && name[2] == 'l')
		return shim_acl_wraps_name(name);
	return 0;
}

/* dlsym(RTLD_NEXT, name) as glibc would answer it for `caller`: the first object loaded after the
 * caller's that defines name. */
static void *next_after(const void *caller, const char *name)
{
	struct link_map *self = NULL, *l;
	Dl_info info;

	if (!dladdr1(caller, &info, (void **)&self, RTLD_DL_LINKMAP) || !self)
		return vmm_real_dlsym(RTLD_NEXT, name);
	for (l = self->l_next; l; l = l->l_next) {
		struct link_map *owner = NULL;
		void *h, *p;

		if (!l->l_name || !l->l_name[0])
			continue;
		h = dlopen(l->l_name, RTLD_LAZY | RTLD_NOLOAD);
		if (!h)
			continue;
		p = vmm_real_dlsym(h, name);
		dlclose(h);
		if (p && dladdr1(p, &info, (void **)&owner, RTLD_DL_LINKMAP) && owner == l)
			return p;
	}
	return NULL;
}

static void *route(const char *name, void *p)
{
	enum driver_fn f;
	void *w;

	if (name[0] == 'a')
		return shim_acl_wrapper_for(name, p);
	if (driver_is_wrapper(p, &f))
		return driver_real(f) ? p : NULL; /* our export: only if the driver has it too */
	w = driver_wrapper_for(p);
	return w ? w : p;
}

__attribute__((noinline)) static void *lookup_wrapped(void *handle, const char *name,
						      const void *caller)
{
	void *p;

	dlsym_depth++;
	if (handle == RTLD_NEXT)
		p = next_after(caller, name);
	else
		p = vmm_real_dlsym(handle, name);
	if (p)
		p = route(name, p);
	dlsym_depth--;
	return p;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
	if (__builtin_expect(dlsym_depth == 0 && is_wrapped_name(name), 0))
		return lookup_wrapped(handle, name, __builtin_return_address(0));
	return vmm_real_dlsym_fn()(handle, name);
}
