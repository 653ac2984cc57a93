/* Two simulated devices (run with SIMDEV_DEVICES=2): access rights per device on VMM mappings,
 * peer access for native memory, checked by copies and by kernels. */
#include <string.h>

#include "simdev.h"
#include "test_util.h"

static CUresult check_in_kernel;

static void probe(void **params)
{
	void *p = *(void **)params[0];
	check_in_kernel = simdev_check_access(simdev_current_device(), p, 64);
}

Test(multi, vmm_access_is_per_device)
{
	CUcontext c0 = su_ctx(0), c1;
	int n = 0;
	CU_OK(cuDeviceGetCount(&n));
	cr_assert_eq(n, 2);
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemAddressReserve(&va, GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h, GRAN, &p, 0));
	CU_OK(cuMemMap(va, GRAN, 0, h, 0));
	su_set_access(va, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	char buf[64] = "device zero";
	CU_OK(cuMemcpyHtoD(va, buf, sizeof(buf)));

	CU_OK(cuCtxSetCurrent(c1));
	cr_expect_eq(cuMemcpyDtoH(buf, va, sizeof(buf)), CUDA_ERROR_ILLEGAL_ADDRESS,
		     "device 1 has no access yet");
	CUstream s1;
	CU_OK(cuStreamCreate(&s1, 0));
	void *vp = (void *)va;
	void *params[] = { &vp };
	CU_OK(cuLaunchKernel(SIMDEV_KERNEL(probe), 1, 1, 1, 1, 1, 1, 0, s1, params, NULL));
	CU_OK(cuStreamSynchronize(s1));
	cr_expect_eq(check_in_kernel, CUDA_ERROR_ILLEGAL_ADDRESS);

	/* Grant device 1 access with two descriptors in one call. */
	CUmemAccessDesc d[2] = {
		{ .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
		  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE },
		{ .location = { CU_MEM_LOCATION_TYPE_DEVICE, 1 },
		  .flags = CU_MEM_ACCESS_FLAGS_PROT_READ },
	};
	CU_OK(cuMemSetAccess(va, GRAN, d, 2));
	memset(buf, 0, sizeof(buf));
	CU_OK(cuMemcpyDtoH(buf, va, sizeof(buf)));
	cr_expect_str_eq(buf, "device zero");
	cr_expect_eq(cuMemcpyHtoD(va, buf, sizeof(buf)), CUDA_ERROR_ILLEGAL_ADDRESS, "read only");
	unsigned long long flags;
	CUmemLocation loc1 = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
	CU_OK(cuMemGetAccess(&flags, &loc1, va));
	cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READ);
	(void)c0;
}

Test(multi, native_memory_needs_peer_access)
{
	CUcontext c0 = su_ctx(0), c1;
	CUdeviceptr d0;
	CU_OK(cuMemAlloc(&d0, 4096));
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	CU_OK(cuCtxSetCurrent(c1));
	CUdeviceptr d1;
	CU_OK(cuMemAlloc(&d1, 4096));
	int ordinal = -1;
	CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d1));
	cr_expect_eq(ordinal, 1);
	int can = 0;
	CU_OK(cuDeviceCanAccessPeer(&can, 1, 0));
	cr_expect_eq(can, 1);
	cr_expect_eq(cuMemcpyDtoD(d1, d0, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
	CU_OK(cuCtxEnablePeerAccess(c0, 0));
	cr_expect_eq(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
	CU_OK(cuMemcpyDtoD(d1, d0, 4096));
	CU_OK(cuCtxDisablePeerAccess(c0));
	cr_expect_eq(cuMemcpyDtoD(d1, d0, 4096), CUDA_ERROR_ILLEGAL_ADDRESS);
	size_t f, t;
	CU_OK(cuMemGetInfo(&f, &t));
	cr_expect_eq(t - f, GRAN, "device 1 counts its own memory only");
}
