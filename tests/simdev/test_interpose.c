/* Run with a preloaded library exporting simdev's names (fake_shim.c): like the real driver,
 * simdev's cuGetProcAddress and its handle's dlsym give simdev's own functions, so a runtime
 * that reaches the driver that way bypasses the preload unless it hooks cuGetProcAddress. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "test_util.h"

Test(interpose, driver_pointers_stay_simdevs)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW);
	cr_assert_not_null(lib);
	void *mine = dlsym(lib, "cuMemAlloc_v2");
	void *preloaded = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
	cr_assert_neq(mine, preloaded, "the test needs the fake shim preloaded");
	CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *) =
		(CUresult(*)(const char *, void **, int, cuuint64_t,
			     CUdriverProcAddressQueryResult *))dlsym(lib, "cuGetProcAddress_v2");
	void *fn = NULL;
	CU_OK(gpa("cuMemAlloc", &fn, 12000, 0, NULL));
	cr_expect_eq(fn, mine);

	/* The preloaded name wins for callers that link it directly. */
	su_ctx(0);
	CUdeviceptr d;
	cr_expect_eq(cuMemAlloc(&d, 10), CUDA_ERROR_NOT_PERMITTED);
	/* The runtime resolves through cuGetProcAddress_v2, so it reaches simdev. */
	void *p;
	cr_expect_eq(cudaMalloc(&p, 10), cudaSuccess);
	size_t f, t;
	cr_expect_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
	cr_expect_eq(t - f, GRAN);
	cr_expect_eq(cudaFree(p), cudaSuccess);
}
