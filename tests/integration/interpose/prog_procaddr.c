/* (b) A program that reaches the driver only as a static runtime or a library does: dlopen
 * libcuda.so.1, dlsym cuGetProcAddress_v2, then every function through it, including the
 * per-thread (_ptsz) variants and cuGetProcAddress itself at both ABIs. */
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "prog_common.h"

#undef cuGetProcAddress
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t,
			      CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);

static gpa_v2_fn gpa;

static void *get(const char *sym, int version, cuuint64_t flags)
{
	CUdriverProcAddressQueryResult st;
	void *p = NULL;

	CHECK_CU(gpa(sym, &p, version, flags, &st));
	if (!p || st != CU_GET_PROC_ADDRESS_SUCCESS)
		FAIL("cuGetProcAddress_v2(%s, %d, %llu) found nothing", sym, version,
		     (unsigned long long)flags);
	return p;
}

int main(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	CUresult (*init)(unsigned), (*retain)(CUcontext *, CUdevice), (*setcur)(CUcontext);
	CUresult (*alloc)(CUdeviceptr *, size_t), (*fre)(CUdeviceptr);
	CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
	CUresult (*free_async)(CUdeviceptr, CUstream);
	CUresult (*htod)(CUdeviceptr, const void *, size_t), (*dtoh)(void *, CUdeviceptr, size_t);
	CUresult (*sync)(CUstream);
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
	gpa_v1_fn gpa_v1;
	gpa_v2_fn gpa_again;
	CUdeviceptr d, a, base;
	unsigned char buf[8192];
	CUcontext ctx;
	size_t size;

	if (!lib || !(gpa = (gpa_v2_fn)dlsym(lib, "cuGetProcAddress_v2")))
		FAIL("no driver: %s", dlerror());
	/* As the runtimes do: an empty probe first, then cuGetProcAddress itself at both ABIs. */
	{
		void *p = NULL;
		CUdriverProcAddressQueryResult st;

		gpa("", &p, 0, 0, &st);
	}
	gpa_v1 = (gpa_v1_fn)get("cuGetProcAddress", 11030, 0);
	gpa_again = (gpa_v2_fn)get("cuGetProcAddress", 12000, 0);
	gpa = gpa_again;
	init = get("cuInit", 2000, 0);
	retain = get("cuDevicePrimaryCtxRetain", 7000, 0);
	setcur = get("cuCtxSetCurrent", 4000, 0);
	{
		void *p = NULL;

		CHECK_CU(gpa_v1("cuMemAlloc", &p, 3020, 0));
		alloc = p;
	}
	fre = get("cuMemFree", 3020, 0);
	alloc_async = get("cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	free_async = get("cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	htod = get("cuMemcpyHtoD", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	dtoh = get("cuMemcpyDtoH", 3020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	sync = get("cuStreamSynchronize", 2000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
	range = get("cuMemGetAddressRange", 3020, 0);

	CHECK_CU(init(0));
	CHECK_CU(retain(&ctx, 0));
	CHECK_CU(setcur(ctx));
	CHECK_CU(alloc(&d, sizeof(buf)));
	pattern_fill(buf, sizeof(buf), 7);
	CHECK_CU(htod(d, buf, sizeof(buf)));
	CHECK_CU(alloc_async(&a, 3 << 20, NULL)); /* stream 0 here is the per-thread stream */
	CHECK_CU(htod(a + 4096, buf, sizeof(buf)));
	CHECK_CU(range(&base, &size, a + 4096));
	if (base != a || size != (3 << 20))
		FAIL("cuMemGetAddressRange says [0x%llx, +%zu), want [0x%llx, +%d)",
		     (unsigned long long)base, size, (unsigned long long)a, 3 << 20);
	memset(buf, 0, sizeof(buf));
	CHECK_CU(dtoh(buf, d, sizeof(buf)));
	if (pattern_check(buf, sizeof(buf), 7))
		FAIL("contents changed");
	memset(buf, 0, sizeof(buf));
	CHECK_CU(dtoh(buf, a + 4096, sizeof(buf)));
	if (pattern_check(buf, sizeof(buf), 7))
		FAIL("stream-ordered contents changed");
	CHECK_CU(free_async(a, NULL));
	CHECK_CU(sync(NULL));
	CHECK_CU(fre(d));
	printf("prog_procaddr: ok\n");
	return 0;
}
