/* (a) A CUDA runtime program (libcudart.so.13): cudaMalloc of several sizes, copies both ways,
 * cudaMallocAsync/cudaFreeAsync on a stream, cudaFree; every byte checked. */
#include <cuda_runtime_api.h>

#include "prog_common.h"

static const size_t sizes[] = { 1, 256, 4000, 1 << 20, 3 << 20, 64 << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

int main(void)
{
	void *dev[NSIZES], *host, *async = NULL;
	cudaStream_t s;

	host = malloc(64 << 20);
	if (!host)
		FAIL("host memory");
	for (size_t i = 0; i < NSIZES; i++) {
		CHECK_CU(cudaMalloc(&dev[i], sizes[i]));
		pattern_fill(host, sizes[i], (uint32_t)i);
		CHECK_CU(cudaMemcpy(dev[i], host, sizes[i], cudaMemcpyHostToDevice));
	}
	for (size_t i = 0; i < NSIZES; i++) {
		CHECK_CU(cudaMemcpy(host, dev[i], sizes[i], cudaMemcpyDeviceToHost));
		if (pattern_check(host, sizes[i], (uint32_t)i))
			FAIL("buffer %zu (%zu bytes) changed", i, sizes[i]);
	}
	CHECK_CU(cudaStreamCreate(&s));
	CHECK_CU(cudaMallocAsync(&async, 5 << 20, s));
	pattern_fill(host, 5 << 20, 99);
	CHECK_CU(cudaMemcpyAsync(async, host, 5 << 20, cudaMemcpyHostToDevice, s));
	CHECK_CU(cudaStreamSynchronize(s));
	memset(host, 0, 5 << 20);
	CHECK_CU(cudaMemcpy(host, async, 5 << 20, cudaMemcpyDeviceToHost));
	if (pattern_check(host, 5 << 20, 99))
		FAIL("stream-ordered buffer changed");
	CHECK_CU(cudaFreeAsync(async, s));
	CHECK_CU(cudaStreamSynchronize(s));
	CHECK_CU(cudaStreamDestroy(s));
	for (size_t i = 0; i < NSIZES; i++)
		CHECK_CU(cudaFree(dev[i]));
	free(host);
	printf("prog_cudart: ok\n");
	return 0;
}
