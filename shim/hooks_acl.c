/* Ascend: aclrtMalloc, aclrtMallocAlign32, aclrtMallocCached and aclrtFree served by the core's
 * ACL heap, whether the program links them or finds them with dlopen + dlsym (torch_npu does).
 * No device set on the calling thread, a disabled shim or a failure of the core: the runtime's own
 * function answers. Frees of pointers the core does not know go to the runtime.
 * aclrtCreateContext and aclrtDestroyContext are told to the backend's context list, so that a
 * sleep and the reuse of freed memory wait for those contexts too (aclrtSynchronizeDevice
 * waits for the current context only). */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "../core/backend/acl_api.h"
#include "../core/log.h"
#include "../core/real_dlsym.h"
#include "gate.h"
#include "lifecycle.h"
#include "shim_internal.h"

enum acl_fn { ACL_MALLOC, ACL_MALLOC_ALIGN32, ACL_MALLOC_CACHED, ACL_FREE, ACL_CREATE_CONTEXT,
	      ACL_DESTROY_CONTEXT, ACL_GET_DEVICE, ACL_COUNT };
#define ACL_WRAPPED ACL_GET_DEVICE /* those before it are wrapped; aclrtGetDevice is only used */

static const char *const acl_names[ACL_COUNT] = {
	"aclrtMalloc", "aclrtMallocAlign32", "aclrtMallocCached", "aclrtFree",
	"aclrtCreateContext", "aclrtDestroyContext", "aclrtGetDevice",
};

static void *const acl_wrappers[ACL_WRAPPED] = {
	(void *)aclrtMalloc, (void *)aclrtMallocAlign32, (void *)aclrtMallocCached,
	(void *)aclrtFree, (void *)aclrtCreateContext, (void *)aclrtDestroyContext,
};

static _Atomic(void *) acl_reals[ACL_COUNT];

/* The runtime's function, from libascendcl.so as the program loaded it (never loaded by us). */
static void *acl_real(enum acl_fn f)
{
	void *p = atomic_load_explicit(&acl_reals[f], memory_order_acquire), *lib;

	if (p)
		return p;
	lib = dlopen("libascendcl.so", RTLD_NOW | RTLD_NOLOAD);
	if (!lib)
		return NULL;
	p = vmm_real_dlsym(lib, acl_names[f]);
	dlclose(lib);
	atomic_store_explicit(&acl_reals[f], p, memory_order_release);
	return p;
}

bool shim_acl_wraps_name(const char *name)
{
	for (int i = 0; i < ACL_WRAPPED; i++) {
		if (!strcmp(name, acl_names[i]))
			return true;
	}
	return false;
}

void *shim_acl_wrapper_for(const char *name, void *real_fn)
{
	for (int i = 0; i < ACL_WRAPPED; i++) {
		if (strcmp(name, acl_names[i]))
			continue;
		if (real_fn == acl_wrappers[i])
			return acl_real((enum acl_fn)i) ? real_fn : NULL;
		return real_fn == acl_real((enum acl_fn)i) ? acl_wrappers[i] : real_fn;
	}
	return real_fn;
}

typedef aclError (*acl_malloc_fn)(void **, size_t, aclrtMemMallocPolicy);

static aclError serve(enum acl_fn f, void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
	acl_malloc_fn real = (acl_malloc_fn)acl_real(f);
	aclError (*get_device)(int32_t *) = (aclError (*)(int32_t *))acl_real(ACL_GET_DEVICE);
	shim_runtime *rt;
	int32_t dev;
	vmm_devptr p;
	vmm_error err;
	aclError r;

	gate_enter();
	vmm_error_clear(&err);
	if (devPtr && size && get_device && get_device(&dev) == ACL_SUCCESS &&
	    (rt = shim_runtime_acl()) && rt->side[SHIM_ACL].core) {
		if (!vmm_malloc(rt->side[SHIM_ACL].core, dev, size, 32, shim_thread_tag(), &p, &err)) {
			*devPtr = (void *)(uintptr_t)p;
			gate_leave();
			return ACL_SUCCESS;
		}
		vmm_log(err.status == VMM_E_OOM ? VMM_LOG_INFO : VMM_LOG_WARN,
			"%s(%zu): the heap could not serve it (%s); asking the runtime",
			acl_names[f], size, err.msg);
	}
	r = real ? real(devPtr, size, policy) : ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	if (r == ACL_SUCCESS)
		shim_count_passthrough(PASS_ACL, size);
	gate_leave();
	return r;
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
	return serve(ACL_MALLOC, devPtr, size, policy);
}

aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
	return serve(ACL_MALLOC_ALIGN32, devPtr, size, policy);
}

aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy)
{
	return serve(ACL_MALLOC_CACHED, devPtr, size, policy);
}

aclError aclrtFree(void *devPtr)
{
	aclError (*real)(void *) = (aclError (*)(void *))acl_real(ACL_FREE);
	shim_runtime *rt = shim_runtime_peek();
	vmm_alloc_info info;
	vmm_error err;
	vmm_status st;
	aclError r;

	gate_enter();
	if (rt && rt->side[SHIM_ACL].core && devPtr) {
		vmm_error_clear(&err);
		st = vmm_free(rt->side[SHIM_ACL].core, (vmm_devptr)(uintptr_t)devPtr, &err);
		if (st == VMM_OK) {
			gate_leave();
			return ACL_SUCCESS;
		}
		if (st != VMM_E_NOT_OURS ||
		    vmm_lookup(rt->side[SHIM_ACL].core, (vmm_devptr)(uintptr_t)devPtr, &info)) {
			vmm_log(VMM_LOG_WARN, "aclrtFree(%p): %s", devPtr,
				err.msg[0] ? err.msg : "not the start of an allocation");
			gate_leave();
			return ACL_ERROR_INVALID_PARAM;
		}
	}
	r = real ? real(devPtr) : ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	if (r == ACL_SUCCESS && devPtr)
		shim_count_passthrough(PASS_ACL_FREE, 0);
	gate_leave();
	return r;
}

aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId)
{
	aclError (*real)(aclrtContext *, int32_t) =
		(aclError (*)(aclrtContext *, int32_t))acl_real(ACL_CREATE_CONTEXT);
	aclError r = real ? real(context, deviceId) : ACL_ERROR_RT_FEATURE_NOT_SUPPORT;

	if (r != ACL_SUCCESS || !context || !*context)
		return r;
	if (vmm_context_created(VMM_CTX_ACL, *context, deviceId) == 0)
		return r;
	/* Unlisted, a sleep would not wait for it: refuse it rather than lose its work. */
	vmm_log(VMM_LOG_ERROR, "no host memory to record a new context: its creation is refused");
	aclError (*destroy)(aclrtContext) = (aclError (*)(aclrtContext))acl_real(ACL_DESTROY_CONTEXT);
	if (destroy)
		destroy(*context);
	*context = NULL;
	return ACL_ERROR_RT_MEMORY_ALLOCATION;
}

/* A synchronization in progress on the context finishes first; one that starts meanwhile waits
 * for the destroy instead of naming a context that is going away (contexts.h). */
aclError aclrtDestroyContext(aclrtContext context)
{
	aclError (*real)(aclrtContext) = (aclError (*)(aclrtContext))acl_real(ACL_DESTROY_CONTEXT);
	aclError r;

	vmm_context_destroy_begin(VMM_CTX_ACL, context);
	r = real ? real(context) : ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
	vmm_context_destroy_end(VMM_CTX_ACL, context, r == ACL_SUCCESS);
	return r;
}
