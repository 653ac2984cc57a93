/* (f) Pointers allocated before interception: the program allocates with the driver while the
 * shim is not loaded, then loads it (as a late dlopen of a tool library would) and frees those
 * pointers, and new ones, through the shim's exported functions. */
#include <cuda.h>
#include <dlfcn.h>

#include "prog_common.h"

typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);

int main(int argc, char **argv)
{
	CUdeviceptr early[4], late;
	unsigned char buf[4096];
	alloc_fn shim_alloc;
	free_fn shim_free;
	CUcontext ctx;
	void *shim;

	if (argc < 2)
		FAIL("usage: prog_late PATH-TO-libvmmshim.so");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	for (int i = 0; i < 4; i++) {
		CHECK_CU(cuMemAlloc(&early[i], 3 << 20));
		pattern_fill(buf, sizeof(buf), (uint32_t)i);
		CHECK_CU(cuMemcpyHtoD(early[i], buf, sizeof(buf)));
	}
	shim = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
	if (!shim)
		FAIL("dlopen shim: %s", dlerror());
	shim_alloc = (alloc_fn)dlsym(shim, "cuMemAlloc_v2");
	shim_free = (free_fn)dlsym(shim, "cuMemFree_v2");
	if (!shim_alloc || !shim_free)
		FAIL("shim lacks its exports");
	CHECK_CU(shim_alloc(&late, 1 << 20));
	for (int i = 0; i < 4; i++) {
		CHECK_CU(cuMemcpyDtoH(buf, early[i], sizeof(buf)));
		if (pattern_check(buf, sizeof(buf), (uint32_t)i))
			FAIL("early allocation %d changed", i);
		CHECK_CU(shim_free(early[i]));
	}
	CHECK_CU(shim_free(late));
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
	printf("prog_late: ok\n");
	return 0;
}
