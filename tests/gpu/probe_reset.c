/* What a reset of the primary context (cudaDeviceReset, cuDevicePrimaryCtxReset) does to memory
 * made with the virtual-memory API, against cuMemAlloc memory. The shim serves the program's
 * cudaMalloc from VMM handles; natively a reset frees every allocation of the context, so the
 * question is whether the shim's handles, reservations and mappings outlive it (then the memory
 * stays the shim's to free, and its data readable) or go with it (then every block the heap kept
 * would point at nothing). README "Not supported yet" lists the reset; this is the fact it needs.
 *
 * Prints one line per question: the device's free memory before and after, whether the VMM
 * range still reads back what was written, whether cuMemRelease / cuMemUnmap /
 * cuMemAddressFree still accept their handles, whether cuMemAlloc memory is gone; and what the
 * shim's own objects of the primary context become: the context's handle and retain, a stream
 * made before the reset, pinned host memory from cuMemHostAlloc and from cuMemHostRegister.
 *
 * Build: cc -O2 -std=gnu11 -I$CUDA/include probe_reset.c -o probe_reset -lcuda
 * Usage: probe_reset */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "probe_driver.h"

#define SIZE (64ul << 20)

static size_t free_mib(void)
{
	size_t f = 0, t = 0;

	CK(cuMemGetInfo(&f, &t));
	return f >> 20;
}

/* Whether [p, p+SIZE) reads back `v` in every 32-bit word sampled (first, middle, last). */
static const char *reads(CUdeviceptr p, uint32_t v)
{
	uint32_t got[3];
	size_t at[3] = { 0, SIZE / 2, SIZE - 4 };

	for (int i = 0; i < 3; i++) {
		CUresult r = cuMemcpyDtoH(&got[i], p + at[i], 4);

		if (r)
			return r == CUDA_ERROR_ILLEGAL_ADDRESS ? "no (illegal address)" : "no (error)";
		if (got[i] != v)
			return "no (other bytes)";
	}
	return "yes";
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmemGenericAllocationHandle h;
	CUdeviceptr va, plain;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc rw = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	size_t before, made, after;
	CUresult r;
	CUcontext ctx_after, cur;
	CUstream s;
	void *hostalloc, *registered, *dp;
	unsigned int flags;
	int active;
	size_t hsz = 2ul << 20;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	before = free_mib();
	CK(cuMemCreate(&h, SIZE, &prop, 0));
	CK(cuMemAddressReserve(&va, SIZE, 0, 0, 0));
	CK(cuMemMap(va, SIZE, 0, h, 0));
	CK(cuMemSetAccess(va, SIZE, &rw, 1));
	CK(cuMemsetD32(va, 0x5eed5eed, SIZE / 4));
	CK(cuMemAlloc(&plain, SIZE));
	CK(cuMemsetD32(plain, 0x1234abcd, SIZE / 4));
	CK(cuCtxSynchronize());
	made = free_mib();
	printf("reset: free MiB before %zu, with 64 MiB VMM + 64 MiB cuMemAlloc %zu\n", before, made);

	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuMemHostAlloc(&hostalloc, hsz, 0));
	registered = mmap(NULL, hsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CK(cuMemHostRegister(registered, hsz, 0));

	r = cuDevicePrimaryCtxReset(dev);
	printf("reset: cuDevicePrimaryCtxReset -> %d\n", r);
	r = cuCtxGetCurrent(&cur);
	printf("reset: current context after it -> %d, %s\n", r,
	       cur == ctx ? "the same handle" : cur ? "another handle" : "none");
	r = cuDevicePrimaryCtxGetState(dev, &flags, &active);
	printf("reset: primary state -> %d, active %d\n", r, active);
	r = cuCtxSynchronize();
	printf("reset: cuCtxSynchronize with the old handle current -> %d\n", r);
	r = cuStreamSynchronize(s);
	printf("reset: cuStreamSynchronize of a stream made before -> %d\n", r);
	r = cuMemHostGetFlags(&flags, hostalloc);
	printf("reset: cuMemHostGetFlags of cuMemHostAlloc memory -> %d\n", r);
	r = cuMemHostGetDevicePointer((CUdeviceptr *)&dp, registered, 0);
	printf("reset: cuMemHostGetDevicePointer of registered memory -> %d\n", r);
	CK(cuDevicePrimaryCtxRetain(&ctx_after, dev));
	printf("reset: retain after it gives %s\n", ctx_after == ctx ? "the same handle" :
	       "another handle");
	CK(cuCtxSetCurrent(ctx_after));
	r = cuDevicePrimaryCtxGetState(dev, &flags, &active);
	printf("reset: after the retain: state -> %d, active %d\n", r, active);
	printf("reset: cuStreamSynchronize of the old stream after the retain -> %d\n",
	       cuStreamSynchronize(s));
	r = cuMemHostUnregister(registered);
	printf("reset: cuMemHostUnregister after it -> %d", r);
	printf("; cuMemFreeHost -> %d\n", cuMemFreeHost(hostalloc));
	r = cuDevicePrimaryCtxRelease(dev);
	printf("reset: release once -> %d", r);
	r = cuDevicePrimaryCtxRelease(dev);
	printf(", again (the retain from before the reset) -> %d", r);
	r = cuDevicePrimaryCtxGetState(dev, &flags, &active);
	printf(", state -> %d, active %d\n", r, active);
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	after = free_mib();
	printf("reset: free MiB after the reset, new primary context %zu (%+ld against before it)\n",
	       after, (long)after - (long)made);
	printf("reset: VMM range reads what was written: %s\n", reads(va, 0x5eed5eed));
	printf("reset: cuMemAlloc range reads what was written: %s\n", reads(plain, 0x1234abcd));
	r = cuMemsetD32(va, 0x0badf00d, SIZE / 4);
	printf("reset: memset of the VMM range -> %d, sync -> %d, reads it: %s\n", r,
	       cuCtxSynchronize(), reads(va, 0x0badf00d));
	printf("reset: cuMemSetAccess again -> %d\n", cuMemSetAccess(va, SIZE, &rw, 1));
	printf("reset: cuMemUnmap -> %d\n", cuMemUnmap(va, SIZE));
	printf("reset: cuMemRelease -> %d\n", cuMemRelease(h));
	printf("reset: cuMemAddressFree -> %d\n", cuMemAddressFree(va, SIZE));
	printf("reset: cuMemFree of the cuMemAlloc pointer -> %d\n", cuMemFree(plain));
	printf("reset: free MiB at the end %zu\n", free_mib());
	return 0;
}
