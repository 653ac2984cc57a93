/* cuGetProcAddress(_v2) of simdev: resolution by name, version and flags, like the driver, and
 * pointers that are the exported functions themselves. */
#include <dlfcn.h>

#include "test_util.h"

static void *lib;

static void *exported(const char *name)
{
	if (!lib)
		lib = dlopen("libcuda.so.1", RTLD_NOW);
	cr_assert_not_null(lib);
	void *p = dlsym(lib, name);
	cr_assert_not_null(p, "%s is exported", name);
	return p;
}

static void *resolve(const char *sym, int version, cuuint64_t flags, CUresult want,
		     CUdriverProcAddressQueryResult want_status)
{
	void *fn = (void *)1;
	CUdriverProcAddressQueryResult st = 99;
	cr_assert_eq(cuGetProcAddress_v2(sym, &fn, version, flags, &st), want, "%s@%d", sym,
		     version);
	cr_assert_eq(st, want_status, "%s@%d status %d", sym, version, st);
	return fn;
}

Test(proc, newest_variant_at_or_before_the_version)
{
	cr_expect_eq(resolve("cuMemAlloc", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemAlloc_v2"));
	cr_expect_eq(resolve("cuCtxCreate", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuCtxCreate_v2"));
	cr_expect_eq(resolve("cuCtxCreate", 13000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuCtxCreate_v4"));
	/* 13.0 changed cuCtxSynchronize's ABI: it names the context (cudaTypedefs.h). */
	cr_expect_eq(resolve("cuCtxSynchronize", 12090, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuCtxSynchronize"));
	cr_expect_eq(resolve("cuCtxSynchronize", 13000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuCtxSynchronize_v2"));
	cr_expect_eq(resolve("cuStreamGetCaptureInfo", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuStreamGetCaptureInfo_v2"));
	cr_expect_eq(resolve("cuStreamGetCaptureInfo", 12030, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuStreamGetCaptureInfo_v3"));
	cr_expect_eq(resolve("cuIpcOpenMemHandle", 10000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuIpcOpenMemHandle"));
	cr_expect_eq(resolve("cuIpcOpenMemHandle", 11000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuIpcOpenMemHandle_v2"));
	cr_expect_eq(resolve("cuMemAllocAsync", 11000, 0, CUDA_ERROR_NOT_FOUND,
			     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT), NULL);
}

Test(proc, per_thread_variants)
{
	const cuuint64_t pt = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
	cr_expect_eq(resolve("cuMemAllocAsync", 12000, pt, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemAllocAsync_ptsz"));
	cr_expect_eq(resolve("cuMemAllocAsync", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemAllocAsync"));
	cr_expect_eq(resolve("cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, 0,
			     CU_GET_PROC_ADDRESS_SUCCESS), exported("cuMemAllocAsync"));
	cr_expect_eq(resolve("cuMemcpyHtoD", 12000, pt, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemcpyHtoD_v2_ptds"));
	cr_expect_eq(resolve("cuMemcpyHtoDAsync", 12000, pt, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemcpyHtoDAsync_v2_ptsz"));
	cr_expect_eq(resolve("cuLaunchHostFunc", 12000, pt, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuLaunchHostFunc_ptsz"));
	/* No per-thread form: the plain one. */
	cr_expect_eq(resolve("cuMemAlloc", 12000, pt, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuMemAlloc_v2"));
}

Test(proc, self_lookup_unknown_and_future_versions)
{
	cr_expect_eq(resolve("cuGetProcAddress", 11030, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuGetProcAddress"));
	cr_expect_eq(resolve("cuGetProcAddress", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS),
		     exported("cuGetProcAddress_v2"));
	cr_expect_eq(resolve("cuNoSuchThing", 12000, 0, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND),
		     NULL);
	void *fn;
	cr_expect_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 13010, 0, NULL),
		     CUDA_ERROR_INVALID_VALUE);
	/* The 4-argument CUDA 11.3 ABI. */
	CUresult (*legacy)(const char *, void **, int, cuuint64_t) = exported("cuGetProcAddress");
	cr_expect_eq(legacy("cuMemFree", &fn, 11030, 0), CUDA_SUCCESS);
	cr_expect_eq(fn, exported("cuMemFree_v2"));
	cr_expect_eq(legacy("cuNoSuchThing", &fn, 11030, 0), CUDA_ERROR_NOT_FOUND);
}

Test(proc, resolved_functions_work)
{
	CUresult (*init)(unsigned) = resolve("cuInit", 12000, 0, 0, CU_GET_PROC_ADDRESS_SUCCESS);
	CUresult (*count)(int *) = resolve("cuDeviceGetCount", 12000, 0, 0,
					   CU_GET_PROC_ADDRESS_SUCCESS);
	int n = 0;
	CU_OK(init(0));
	CU_OK(count(&n));
	cr_expect_eq(n, 1);
	const char *s = NULL;
	CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	cr_expect_str_eq(s, "out of memory");
	CU_OK(cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
	cr_expect_str_eq(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
	const void *table = (void *)1;
	CUuuid id = { { 0 } };
	cr_expect_eq(cuGetExportTable(&table, &id), CUDA_ERROR_NOT_SUPPORTED);
	int v = 0;
	CU_OK(cuDriverGetVersion(&v));
	cr_expect_eq(v, 13000);
	int vmm = 0, rdma = 1;
	CU_OK(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	CU_OK(cuDeviceGetAttribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
				   0));
	cr_expect_eq(vmm, 1);
	cr_expect_eq(rdma, 0);
}
