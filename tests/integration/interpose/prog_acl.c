/* (d) An Ascend program linked to libascendcl.so: in a context of its own (aclrtCreateContext),
 * aclrtMalloc, aclrtMallocCached, copies both ways, aclrtFree, aclrtDestroyContext. With the
 * argument "dlsym" it instead finds aclrtMallocAlign32, aclrtFree and the context calls with
 * dlopen + dlsym, as torch_npu does. */
#include <dlfcn.h>
#include <stdbool.h>
#include <string.h>

#include "backend/acl_api.h"
#include "prog_common.h"

typedef aclError (*malloc_fn)(void **, size_t, aclrtMemMallocPolicy);
typedef aclError (*free_fn)(void *);
typedef aclError (*ctx_create_fn)(aclrtContext *, int32_t);
typedef aclError (*ctx_destroy_fn)(aclrtContext);

static void roundtrip(void *dev, size_t n, uint32_t seed)
{
	unsigned char *h = malloc(n);

	pattern_fill(h, n, seed);
	CHECK_CU(aclrtMemcpy(dev, n, h, n, ACL_MEMCPY_HOST_TO_DEVICE));
	memset(h, 0, n);
	CHECK_CU(aclrtMemcpy(h, n, dev, n, ACL_MEMCPY_DEVICE_TO_HOST));
	if (pattern_check(h, n, seed))
		FAIL("contents changed (%zu bytes)", n);
	free(h);
}

int main(int argc, char **argv)
{
	bool by_dlsym = argc > 1 && !strcmp(argv[1], "dlsym");
	malloc_fn m = aclrtMalloc, m2 = aclrtMallocCached;
	free_fn f = aclrtFree;
	ctx_create_fn cc = aclrtCreateContext;
	ctx_destroy_fn cd = aclrtDestroyContext;
	aclrtContext ctx;
	void *a, *b;

	CHECK_CU(aclInit(NULL));
	CHECK_CU(aclrtSetDevice(0));
	if (by_dlsym) {
		void *lib = dlopen("libascendcl.so", RTLD_NOW | RTLD_LOCAL);

		if (!lib)
			FAIL("dlopen: %s", dlerror());
		m = m2 = (malloc_fn)dlsym(lib, "aclrtMallocAlign32");
		f = (free_fn)dlsym(lib, "aclrtFree");
		cc = (ctx_create_fn)dlsym(lib, "aclrtCreateContext");
		cd = (ctx_destroy_fn)dlsym(lib, "aclrtDestroyContext");
		if (!m || !f || !cc || !cd)
			FAIL("dlsym: %s", dlerror());
	}
	CHECK_CU(cc(&ctx, 0));
	CHECK_CU(m(&a, 3 << 20, ACL_MEM_MALLOC_HUGE_FIRST));
	CHECK_CU(m2(&b, 1000, ACL_MEM_MALLOC_NORMAL_ONLY));
	if (((uintptr_t)a & 31) || ((uintptr_t)b & 31))
		FAIL("unaligned");
	roundtrip(a, 3 << 20, 1);
	roundtrip(b, 1000, 2);
	CHECK_CU(f(a));
	CHECK_CU(f(b));
	CHECK_CU(cd(ctx));
	CHECK_CU(aclrtResetDevice(0));
	CHECK_CU(aclFinalize());
	printf("prog_acl%s: ok\n", by_dlsym ? " (dlsym)" : "");
	return 0;
}
