/* (i) Many threads allocating, filling, checking and freeing at once. */
#include <cuda.h>
#include <pthread.h>

#include "prog_common.h"

#define THREADS 8
#define ROUNDS 100
#define CHECKED (64 << 10) /* bytes written and checked per buffer */

static CUcontext ctx;

static void *worker(void *arg)
{
	uint32_t id = (uint32_t)(uintptr_t)arg, x = id * 7919 + 1;
	CUdeviceptr live[8] = { 0 };
	size_t sizes[8] = { 0 };
	unsigned char *buf = malloc(CHECKED);

	CHECK_CU(cuCtxSetCurrent(ctx));
	for (int r = 0; r < ROUNDS; r++) {
		int slot = r % 8;

		if (live[slot]) {
			size_t n = sizes[slot] < CHECKED ? sizes[slot] : CHECKED;

			CHECK_CU(cuMemcpyDtoH(buf, live[slot], n));
			if (pattern_check(buf, n, id * 1000 + (uint32_t)slot + (uint32_t)r / 8))
				FAIL("thread %u: buffer changed", id);
			CHECK_CU(cuMemFree(live[slot]));
		}
		x = x * 1103515245 + 12345;
		sizes[slot] = 1 + (x >> 8) % (3u << 20);
		CHECK_CU(cuMemAlloc(&live[slot], sizes[slot]));
		pattern_fill(buf, sizes[slot] < CHECKED ? sizes[slot] : CHECKED,
			     id * 1000 + (uint32_t)slot + (uint32_t)(r + 8) / 8);
		CHECK_CU(cuMemcpyHtoD(live[slot], buf,
				      sizes[slot] < CHECKED ? sizes[slot] : CHECKED));
	}
	for (int i = 0; i < 8; i++)
		CHECK_CU(cuMemFree(live[i]));
	free(buf);
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)i))
			FAIL("pthread_create");
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	CHECK_CU(cuDevicePrimaryCtxRelease(0));
	printf("prog_threads: ok\n");
	return 0;
}
