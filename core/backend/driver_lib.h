/* Loading a driver library for a backend: open it and resolve its functions into the backend's
 * table of function pointers, with glibc's own dlsym (real_dlsym.h), never through the shim's
 * exported hooks. One loop for every backend (cuda.c, acl.c). */
#ifndef VMM_DRIVER_LIB_H
#define VMM_DRIVER_LIB_H

#include <stdbool.h>
#include <stddef.h>

#include "../vmm_error.h"

/* One function of a backend's table: its exported name and where its pointer goes. */
struct vmm_driver_sym {
	const char *name;
	size_t offset;   /* in the backend's table of function pointers */
	bool optional;   /* may be missing (left NULL): the backend checks before each use */
};
/* An entry for member fn of the table type `table`. */
#define VMM_DRIVER_SYM(table, fn, opt) { #fn, offsetof(table, fn), opt }

/* dlopen soname (RTLD_NOW | RTLD_LOCAL) into *lib and fill `table` from syms. VMM_E_UNSUPPORTED
 * with a message when the library cannot be loaded or lacks a function that is not optional. A
 * library once opened is never closed, also on failure: unloading a driver under a running
 * program is never safe (other libraries of the program use it too). */
vmm_status vmm_driver_lib_load(const char *soname, const struct vmm_driver_sym *syms, size_t n,
			       void *table, void **lib, vmm_error *err);

#endif
