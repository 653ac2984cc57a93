/* (e) A program that uses the virtual-memory API itself, as PyTorch's expandable segments and NCCL
 * do: reserve, create, map, set access, use, unmap, release. */
#include "prog_roundtrip.h"

#define CHUNKS 4

int main(void)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUmemAccessDesc access = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h[CHUNKS];
	CUmemAllocationProp back;
	size_t gran, n;
	unsigned char *buf;
	CUdeviceptr va;
	CUcontext ctx;

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	n = gran * CHUNKS;
	CHECK_CU(cuMemAddressReserve(&va, n, 0, 0, 0));
	for (int i = 0; i < CHUNKS; i++) {
		CHECK_CU(cuMemCreate(&h[i], gran, &prop, 0));
		CHECK_CU(cuMemMap(va + i * gran, gran, 0, h[i], 0));
	}
	CHECK_CU(cuMemSetAccess(va, n, &access, 1));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&back, h[1]));
	if (back.location.id != 0 || back.location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		FAIL("properties from handle differ");
	buf = malloc(n);
	if (roundtrip(va, buf, n, 5))
		FAIL("contents changed");
	CHECK_CU(cuMemUnmap(va, n));
	for (int i = 0; i < CHUNKS; i++)
		CHECK_CU(cuMemRelease(h[i]));
	CHECK_CU(cuMemAddressFree(va, n));
	free(buf);
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
	printf("prog_vmm: ok\n");
	return 0;
}
