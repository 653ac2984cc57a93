/* Peer access: memory allocated on device 0 becomes reachable from device 1 once device 1's context
 * enables peer access to device 0's (cuCtxEnablePeerAccess), as with native cuMemAlloc memory. A
 * simdev "kernel" on a device-1 stream checks the access the way a GPU would fault.
 * `prog_peer first`: peer access is enabled before anything is allocated (what a cudart program
 * does at start: on two H200s the shim missed it, and a peer kernel read faulted). */
#include <cuda.h>
#include <string.h>

#include "prog_common.h"
#include "simdev.h"

static void probe(void **params)
{
	CUdeviceptr p = *(CUdeviceptr *)params[0];
	int *result = *(int **)params[1];

	*result = simdev_check_access(simdev_current_device(), (void *)(uintptr_t)p, 4096);
}

static int access_from(CUcontext ctx, CUdeviceptr p)
{
	int result = -1, *rp = &result;
	void *params[2] = { &p, &rp };
	CUstream s;

	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuStreamCreate(&s, 0));
	CHECK_CU(cuLaunchKernel(SIMDEV_KERNEL(probe), 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU(cuStreamDestroy(s));
	return result;
}

/* Both ways enabled first, then memory on each device, each reached from the other. */
static int enabled_first(CUcontext c0, CUcontext c1)
{
	CUdeviceptr p0, p1;
	int a10, a01;

	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuCtxEnablePeerAccess(c1, 0));
	CHECK_CU(cuCtxSetCurrent(c1));
	CHECK_CU(cuCtxEnablePeerAccess(c0, 0));
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuMemAlloc(&p0, 64 << 20));
	CHECK_CU(cuCtxSetCurrent(c1));
	CHECK_CU(cuMemAlloc(&p1, 64 << 20));
	a10 = access_from(c1, p0);
	a01 = access_from(c0, p1);
	printf("prog_peer: enabled first: device 1 reaches device 0's memory %d, device 0 reaches "
	       "device 1's %d\n", a10, a01);
	CHECK_CU(cuMemFree(p1));
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuMemFree(p0));
	return a10 == 0 && a01 == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	CUcontext c0, c1;
	CUdeviceptr p;
	int before, after;

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&c0, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&c1, 1));
	if (argc > 1 && !strcmp(argv[1], "first"))
		return enabled_first(c0, c1);
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuMemAlloc(&p, 1 << 20));
	before = access_from(c1, p);
	/* A stream-ordered allocation on a device-1 stream belongs to device 1, whatever context is
	 * current when it is made. */
	{
		CUdeviceptr q;
		CUstream s1;

		CHECK_CU(cuCtxSetCurrent(c1));
		CHECK_CU(cuStreamCreate(&s1, 0));
		CHECK_CU(cuCtxSetCurrent(c0));
		CHECK_CU(cuMemAllocAsync(&q, 1 << 20, s1));
		CHECK_CU(cuStreamSynchronize(s1));
		if (access_from(c1, q) != 0)
			FAIL("an allocation on a device-1 stream is not device 1's");
		CHECK_CU(cuCtxSetCurrent(c0));
		CHECK_CU(cuMemFreeAsync(q, s1));
		CHECK_CU(cuStreamSynchronize(s1));
		CHECK_CU(cuCtxSetCurrent(c1));
		CHECK_CU(cuStreamDestroy(s1));
	}
	CHECK_CU(cuCtxSetCurrent(c1));
	CHECK_CU(cuCtxEnablePeerAccess(c0, 0));
	after = access_from(c1, p);
	if (access_from(c0, p) != 0)
		FAIL("the owner lost access");
	printf("prog_peer: device 1 access before %d, after enabling peer access %d\n", before,
	       after);
	CHECK_CU(cuCtxSetCurrent(c1));
	CHECK_CU(cuCtxDisablePeerAccess(c0));
	CHECK_CU(cuCtxSetCurrent(c0));
	CHECK_CU(cuMemFree(p));
	CHECK_CU(cuDevicePrimaryCtxRelease(1));
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
	return before != 0 && after == 0 ? 0 : 1;
}
