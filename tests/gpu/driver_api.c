/* A program linked with -lcuda that uses only the driver API: cuMemAlloc_v2, cuMemAllocPitch_v2,
 * cuMemAllocAsync / cuMemFreeAsync / cuMemAllocFromPoolAsync, memsets, copies, kernels from a
 * fatbin, and the range queries that must answer for the allocation. Usage: driver_api FATBIN */
#define _GNU_SOURCE
#include <cuda.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CKD(x)                                                                         \
	do {                                                                           \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = "?";                                          \
			cuGetErrorString(r_, &s_);                                     \
			printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);   \
			fflush(stdout);                                                \
			failures++;                                                    \
		}                                                                      \
	} while (0)

#define MIB (1ull << 20)

static void handshake(size_t held)
{
	char line[64];
	struct pollfd p = { 0, POLLIN, 0 };
	if (!getenv("GPUCHECK_HANDSHAKE"))
		return;
	printf("HOLD %zu\nREADY driver_api\n", held);
	fflush(stdout);
	if (poll(&p, 1, 120000) > 0 && fgets(line, sizeof(line), stdin)) {
	}
}

static uint32_t word(size_t i, uint32_t seed)
{
	return (uint32_t)(i * 2654435761u) ^ seed;
}

static void launch(CUfunction f, void **args, CUstream s)
{
	CKD(cuLaunchKernel(f, 1024, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

/* Fills a and b on the device, adds them into c, and checks c on the host. */
static int add_check(CUfunction fill, CUfunction add, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c,
		     size_t n, CUstream s)
{
	uint32_t sa = 11, sb = 0x1234567;
	void *fa[] = { &a, &n, &sa }, *fb[] = { &b, &n, &sb }, *ad[] = { &c, &a, &b, &n };
	launch(fill, fa, s);
	launch(fill, fb, s);
	launch(add, ad, s);
	uint32_t *h = malloc(n * 4);
	int bad = 0;
	CKD(cuMemcpyDtoHAsync(h, c, n * 4, s));
	CKD(cuStreamSynchronize(s));
	for (size_t i = 0; i < n; i++)
		bad += h[i] != word(i, sa) + word(i, sb);
	free(h);
	return bad;
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fill, add;
	CUstream s;
	if (argc < 2) {
		fprintf(stderr, "usage: driver_api FATBIN\n");
		return 2;
	}
	CKD(cuInit(0));
	CKD(cuDeviceGet(&dev, 0));
	CKD(cuDevicePrimaryCtxRetain(&ctx, dev));
	CKD(cuCtxSetCurrent(ctx));
	CKD(cuModuleLoad(&mod, argv[1]));
	CKD(cuModuleGetFunction(&fill, mod, "fill_words"));
	CKD(cuModuleGetFunction(&add, mod, "add_words"));
	CKD(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	if (failures)
		return 1;

	/* cuMemAlloc_v2 of three 1 GiB buffers; c = a + b checked. */
	size_t n = 256 * MIB; /* words */
	CUdeviceptr a = 0, b = 0, c = 0;
	CKD(cuMemAlloc(&a, n * 4));
	CKD(cuMemAlloc(&b, n * 4));
	CKD(cuMemAlloc(&c, n * 4));
	printf("RESULT add_1g bad=%d\n", add_check(fill, add, a, b, c, n, s));

	/* Range queries answer for the allocation, from an interior pointer. */
	CUdeviceptr base = 0;
	size_t size = 0;
	CKD(cuMemGetAddressRange(&base, &size, b + 4 * MIB + 3));
	printf("RESULT range base_ok=%d size=%zu\n", base == b, size);
	CUdeviceptr start = 0;
	size_t rsize = 0;
	CKD(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, b + 100));
	CKD(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, b + 100));
	unsigned mtype = 0;
	CKD(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, b + 100));
	printf("RESULT pointer_attr start_ok=%d size=%zu type=%u\n", start == b, rsize, mtype);
	size_t fr = 0, tot = 0;
	CKD(cuMemGetInfo(&fr, &tot));
	printf("RESULT meminfo free_le_total=%d\n", fr <= tot);

	/* Memset and copies. */
	CKD(cuMemsetD32Async(c, 0xabcdef01u, n, s));
	CKD(cuMemcpyDtoDAsync(a, c, n * 4, s));
	uint32_t tail[4] = { 0 };
	CKD(cuMemcpyDtoHAsync(tail, a + n * 4 - sizeof(tail), sizeof(tail), s));
	CKD(cuStreamSynchronize(s));
	printf("RESULT memset_copy ok=%d\n", tail[0] == 0xabcdef01u && tail[3] == 0xabcdef01u);

	/* Pitched allocation with a real pitch. */
	CUdeviceptr pm = 0;
	size_t pitch = 0;
	CKD(cuMemAllocPitch(&pm, &pitch, 1000, 64, 4));
	CKD(cuMemsetD2D8Async(pm, pitch, 3, 1000, 64, s));
	unsigned char row[1000];
	CKD(cuMemcpyDtoHAsync(row, pm + 63 * pitch, sizeof(row), s));
	CKD(cuStreamSynchronize(s));
	printf("RESULT pitch valid=%d row_ok=%d\n", pitch >= 1000 && pitch % 128 == 0,
	       row[0] == 3 && row[999] == 3);
	printf("pitch=%zu\n", pitch);

	handshake(3 * n * 4 + pitch * 64);

	/* Stream-ordered allocation, default pool and an explicit pool. */
	CUdeviceptr x = 0, y = 0, z = 0;
	size_t m = 16 * MIB;
	CKD(cuMemAllocAsync(&x, m * 4, s));
	CKD(cuMemAllocAsync(&y, m * 4, s));
	CUmemoryPool pool;
	CKD(cuDeviceGetDefaultMemPool(&pool, dev));
	CKD(cuMemAllocFromPoolAsync(&z, m * 4, pool, s));
	printf("RESULT async_add bad=%d\n", add_check(fill, add, x, y, z, m, s));
	CKD(cuMemFreeAsync(x, s));
	CKD(cuMemFreeAsync(y, s));
	CKD(cuMemFreeAsync(z, s));
	CKD(cuStreamSynchronize(s));

	/* Free and allocate again many times. */
	int bad = 0;
	for (int i = 0; i < 200; i++) {
		CUdeviceptr p = 0;
		size_t bytes = (size_t)512 << (i % 16);
		CKD(cuMemAlloc(&p, bytes));
		CKD(cuMemsetD32Async(p, (unsigned)i, bytes / 4, s));
		uint32_t v = 0;
		CKD(cuMemcpyDtoHAsync(&v, p + bytes - 4, 4, s));
		CKD(cuStreamSynchronize(s));
		bad += v != (unsigned)i;
		CKD(cuMemFree(p));
	}
	printf("RESULT churn bad=%d\n", bad);

	CKD(cuMemFree(pm));
	CKD(cuMemFree(a));
	CKD(cuMemFree(b));
	CKD(cuMemFree(c));
	CKD(cuStreamDestroy(s));
	CKD(cuModuleUnload(mod));
	CKD(cuDevicePrimaryCtxRelease(dev));
	printf("RESULT driver_api failures=%d\n", failures);
	printf("driver_api: %s\n", failures ? "FAILED" : "ok");
	return failures ? 1 : 0;
}
