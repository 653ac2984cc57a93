/* Can one physical handle be mapped in parts? cuMemMap's documentation says its offset "currently
 * must be zero". If the driver takes a non-zero offset anyway, the heap could map the free parts
 * of a large handle where a request needs them instead of cutting the handle into 2 MiB pieces
 * first (docs/design.md: the large gathers move ~1700 pieces at ~50 us a mapping). This asks
 * the driver, checks that the bytes are the handle's at that offset, and times mappings of
 * parts against mappings of as many handles of their own. Not a gpu-check row (PROBE.md (k)).
 *
 * nvcc -O2 -cudart none -Xcompiler -std=gnu11 tests/gpu/probe_offset.c -o /tmp/po -lcuda */
#include "probe_driver.h"

#define MIB (1ull << 20)
#define BIG (64 * MIB)
#define PARTS 32 /* 2 MiB parts of a 64 MiB handle */

static const char *name(CUresult r)
{
	const char *s = NULL;

	cuGetErrorName(r, &s);
	return s ? s : "?";
}

static CUmemAllocationProp prop;
static CUmemAccessDesc rw;

static void grant(CUdeviceptr va, size_t n)
{
	CK(cuMemSetAccess(va, n, &rw, 1));
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmemGenericAllocationHandle big, own[PARTS];
	CUdeviceptr whole, parts;
	size_t gran;
	unsigned char byte = 0;
	CUresult r;
	double t0, t1, t2;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	gran = probe_device_memory(dev, &prop, &rw);
	printf("granularity %zu MiB\n", (size_t)(gran / MIB));
	CK(cuMemCreate(&big, BIG, &prop, 0));
	CK(cuMemAddressReserve(&whole, BIG, 0, 0, 0));
	CK(cuMemAddressReserve(&parts, 2 * BIG, 0, 0, 0));
	CK(cuMemMap(whole, BIG, 0, big, 0));
	grant(whole, BIG);
	for (int k = 0; k < PARTS; k++) /* part k of the handle holds the byte k + 1 */
		CK(cuMemsetD8(whole + k * gran, (unsigned char)(k + 1), gran));
	CK(cuCtxSynchronize());

	/* 1. The first part alone (offset 0, a size under the handle's). */
	r = cuMemMap(parts, gran, 0, big, 0);
	printf("RESULT map of the first %zu MiB of a 64 MiB handle: %s\n", (size_t)(gran / MIB),
	       name(r));
	if (r == CUDA_SUCCESS)
		CK(cuMemUnmap(parts, gran));
	/* 2. A part at a non-zero offset. */
	r = cuMemMap(parts, gran, 5 * gran, big, 0);
	printf("RESULT map at offset %zu MiB: %s\n", (size_t)(5 * gran / MIB), name(r));
	if (r != CUDA_SUCCESS) {
		printf("offset mapping refused: nothing more to measure\n");
		return 0;
	}
	grant(parts, gran);
	CK(cuMemcpyDtoH(&byte, parts + 100, 1));
	printf("RESULT the part reads the handle's bytes at that offset: %s (byte %u, want 6)\n",
	       byte == 6 ? "yes" : "no", byte);
	/* A write through the part shows through the whole mapping (one physical memory). */
	CK(cuMemsetD8(parts + 200, 0xab, 1));
	CK(cuCtxSynchronize());
	CK(cuMemcpyDtoH(&byte, whole + 5 * gran + 200, 1));
	printf("RESULT a write through the part shows in the whole mapping: %s\n",
	       byte == 0xab ? "yes" : "no");
	CK(cuMemUnmap(parts, gran));
	/* 3. The whole handle mapped again as its parts in reverse order, one grant over them,
	 * against as many handles of their own mapped and granted the same way. The whole mapping
	 * stays (a handle may be mapped at several addresses). */
	t0 = now_ms();
	for (int k = 0; k < PARTS; k++)
		CK(cuMemMap(parts + k * gran, gran, (PARTS - 1 - k) * gran, big, 0));
	grant(parts, BIG);
	t1 = now_ms();
	CK(cuMemcpyDtoH(&byte, parts + 3 * gran, 1));
	printf("RESULT parts in reverse order read back: %s\n", byte == PARTS - 3 ? "yes" : "no");
	CK(cuMemUnmap(parts, BIG));
	t2 = now_ms();
	printf("BENCH parts of one handle: map+grant %.1f us a part, unmap %.1f us a part\n",
	       (t1 - t0) * 1e3 / PARTS, (t2 - t1) * 1e3 / PARTS);
	for (int k = 0; k < PARTS; k++)
		CK(cuMemCreate(&own[k], gran, &prop, 0));
	t0 = now_ms();
	for (int k = 0; k < PARTS; k++)
		CK(cuMemMap(parts + k * gran, gran, 0, own[k], 0));
	grant(parts, BIG);
	t1 = now_ms();
	CK(cuMemUnmap(parts, BIG));
	t2 = now_ms();
	printf("BENCH handles of their own: map+grant %.1f us a handle, unmap %.1f us a handle\n",
	       (t1 - t0) * 1e3 / PARTS, (t2 - t1) * 1e3 / PARTS);
	/* 4. Large parts: two halves of the handle, swapped (what a gather of whole free runs
	 * would map). */
	t0 = now_ms();
	CK(cuMemMap(parts, BIG / 2, BIG / 2, big, 0));
	CK(cuMemMap(parts + BIG / 2, BIG / 2, 0, big, 0));
	grant(parts, BIG);
	t1 = now_ms();
	CK(cuMemcpyDtoH(&byte, parts, 1));
	printf("RESULT halves swapped read back: %s\n", byte == PARTS / 2 + 1 ? "yes" : "no");
	CK(cuMemUnmap(parts, BIG));
	printf("BENCH two 32 MiB parts: map+grant %.1f us\n", (t1 - t0) * 1e3);
	/* 5. The handle released while a part is still mapped: its memory stays until the last
	 * mapping goes (as for a whole mapping). */
	CK(cuMemMap(parts, gran, 7 * gran, big, 0));
	grant(parts, gran);
	CK(cuMemUnmap(whole, BIG));
	r = cuMemRelease(big);
	CK(cuMemcpyDtoH(&byte, parts, 1));
	printf("RESULT release with a part mapped: %s; the part still reads: %s\n", name(r),
	       byte == 8 ? "yes" : "no");
	CK(cuMemUnmap(parts, gran));
	for (int k = 0; k < PARTS; k++)
		CK(cuMemRelease(own[k]));
	CK(cuMemAddressFree(parts, 2 * BIG));
	CK(cuMemAddressFree(whole, BIG));
	printf("probe_offset: done\n");
	return 0;
}
