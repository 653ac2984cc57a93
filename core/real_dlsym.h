/* The real dlsym, never the shim's exported one. core/ is linked into libvmmshim.so, which
 * exports its own `dlsym`; a plain call to dlsym from inside the library would bind to that hook.
 * Every lookup core/ and shim/ make for themselves goes through vmm_real_dlsym(). */
#ifndef VMM_REAL_DLSYM_H
#define VMM_REAL_DLSYM_H

typedef void *(*vmm_dlsym_fn)(void *handle, const char *name);

/* glibc's dlsym, found with dlvsym (GLIBC_2.34, then the x86-64 and aarch64 compat versions). */
vmm_dlsym_fn vmm_real_dlsym_fn(void);

static inline void *vmm_real_dlsym(void *handle, const char *name)
{
	return vmm_real_dlsym_fn()(handle, name);
}

#endif
