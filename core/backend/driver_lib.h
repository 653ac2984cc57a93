/* What every backend's open function does first (cuda.c, acl.c): allocate the backend and its
 * state, open the driver library and resolve its functions into the backend's table of function
 * pointers, with glibc's own dlsym (real_dlsym.h), never through the shim's exported hooks. */
#ifndef VMM_DRIVER_LIB_H
#define VMM_DRIVER_LIB_H

#include <stdbool.h>
#include <stddef.h>

#include "../vmm_error.h"
#include "backend.h"

/* One function of a backend's table: its exported name and where its pointer goes. */
struct vmm_driver_sym {
	const char *name;
	size_t offset;   /* in the backend's table of function pointers */
	bool optional;   /* may be missing (left NULL): the backend checks before each use */
};
/* An entry for member fn of the table type `table`. */
#define VMM_DRIVER_SYM(table, fn, opt) { #fn, offsetof(table, fn), opt }

/* A zeroed vmm_backend and a zeroed state of impl_size bytes in (*be)->impl; VMM_E_HOST_OOM
 * (naming `what`, e.g. "the CUDA backend") with nothing allocated when host memory is out. Freed
 * with free() on both. */
vmm_status vmm_backend_alloc(size_t impl_size, const char *what, vmm_backend **be,
			     vmm_error *err);

/* dlopen soname (RTLD_NOW | RTLD_LOCAL) into *lib and fill `table` from syms. VMM_E_UNSUPPORTED
 * with a message when the library cannot be loaded or lacks a function that is not optional. A
 * library once opened is never closed, also on failure: unloading a driver under a running
 * program is never safe (other libraries of the program use it too). */
vmm_status vmm_driver_lib_load(const char *soname, const struct vmm_driver_sym *syms, size_t n,
			       void *table, void **lib, vmm_error *err);

#endif
