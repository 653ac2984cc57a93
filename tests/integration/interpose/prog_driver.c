/* (c) A driver-API program linked with -lcuda: cuMemAlloc_v2 / cuMemFree_v2 and the queries that
 * must describe the allocation as the program asked for it. */
#include <cuda.h>

#include "prog_common.h"

int main(void)
{
	CUdeviceptr d[16], base, pitched, start;
	size_t size, pitch, free_b, total_b, rsize, free_start, free_end;
	unsigned char buf[65536];
	CUipcMemHandle ipc;
	CUcontext ctx;
	CUresult r;

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuMemGetInfo(&free_start, &total_b));
	for (int i = 0; i < 16; i++) {
		size_t n = (size_t)(i + 1) * 4096 + 100;

		CHECK_CU(cuMemAlloc(&d[i], n));
		pattern_fill(buf, n > sizeof(buf) ? sizeof(buf) : n, (uint32_t)i);
		CHECK_CU(cuMemcpyHtoD(d[i], buf, n > sizeof(buf) ? sizeof(buf) : n));
	}
	for (int i = 0; i < 16; i++) {
		size_t n = (size_t)(i + 1) * 4096 + 100;

		CHECK_CU(cuMemcpyDtoH(buf, d[i], n > sizeof(buf) ? sizeof(buf) : n));
		if (pattern_check(buf, n > sizeof(buf) ? sizeof(buf) : n, (uint32_t)i))
			FAIL("allocation %d changed", i);
		/* The allocation's own bounds, from any address inside it. */
		CHECK_CU(cuMemGetAddressRange(&base, &size, d[i] + n / 2));
		if (base != d[i] || size != n)
			FAIL("range of %d: [0x%llx,+%zu) want [0x%llx,+%zu)", i,
			     (unsigned long long)base, size, (unsigned long long)d[i], n);
		CHECK_CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
					       d[i] + 1));
		CHECK_CU(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d[i] + 1));
		if (start != d[i] || rsize != n)
			FAIL("pointer attributes of %d disagree", i);
	}
	{
		CUpointer_attribute attrs[2] = { CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
						 CU_POINTER_ATTRIBUTE_RANGE_SIZE };
		void *data[2] = { &start, &rsize };

		CHECK_CU(cuPointerGetAttributes(2, attrs, data, d[3] + 17));
		if (start != d[3] || rsize != 4 * 4096 + 100)
			FAIL("cuPointerGetAttributes disagrees");
	}
	/* A pitched allocation has a real pitch, at least the width, and its rows hold. */
	CHECK_CU(cuMemAllocPitch(&pitched, &pitch, 1000, 33, 4));
	if (pitch < 1000 || pitch % 256)
		FAIL("pitch %zu", pitch);
	CHECK_CU(cuMemsetD8(pitched, 0xab, pitch * 33));
	CHECK_CU(cuMemcpyDtoH(buf, pitched + pitch * 32, 1000));
	for (int i = 0; i < 1000; i++)
		if (buf[i] != 0xab)
			FAIL("pitched row changed");
	/* Stream-ordered allocation from the device's default pool: served like cuMemAllocAsync. */
	{
		CUmemoryPool pool;
		CUdeviceptr q;

		CHECK_CU(cuDeviceGetDefaultMemPool(&pool, 0));
		CHECK_CU(cuMemAllocFromPoolAsync(&q, 1 << 20, pool, NULL));
		pattern_fill(buf, 4096, 77);
		CHECK_CU(cuMemcpyHtoDAsync(q + 8192, buf, 4096, NULL));
		CHECK_CU(cuStreamSynchronize(NULL)); /* buf is reused below */
		memset(buf, 0, 4096);
		CHECK_CU(cuMemcpyDtoHAsync(buf, q + 8192, 4096, NULL));
		CHECK_CU(cuStreamSynchronize(NULL));
		if (pattern_check(buf, 4096, 77))
			FAIL("pool allocation changed");
		CHECK_CU(cuMemFreeAsync(q, NULL));
		CHECK_CU(cuStreamSynchronize(NULL));
	}
	/* NULL out-parameters are tolerated where the driver tolerates them. */
	CHECK_CU(cuMemGetInfo(&free_b, &total_b));
	if (free_b > total_b || !total_b)
		FAIL("cuMemGetInfo: free %zu total %zu", free_b, total_b);
	CHECK_CU(cuMemGetAddressRange(NULL, &size, d[0]));
	/* Freeing the inside of an allocation is an error, as with the driver. */
	if (cuMemFree(d[0] + 256) == CUDA_SUCCESS)
		FAIL("freeing an interior pointer succeeded");
	/* Legacy IPC is refused (or works): never a handle that does not. */
	r = cuIpcGetMemHandle(&ipc, d[1]);
	printf("prog_driver: cuIpcGetMemHandle -> %d\n", (int)r);
	for (int i = 0; i < 16; i++)
		CHECK_CU(cuMemFree(d[i]));
	CHECK_CU(cuMemFree(pitched));
	/* Everything freed: memory kept for reuse still counts as free, as it would natively. */
	CHECK_CU(cuMemGetInfo(&free_end, &total_b));
	if (free_end != free_start)
		FAIL("free memory %zu after freeing everything, %zu at the start", free_end,
		     free_start);
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
	printf("prog_driver: ok\n");
	return 0;
}
