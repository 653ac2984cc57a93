// Keeps launching kernels that touch its memory, one per iteration, printing "ITER i" after
// each completes. gpucheck.py sleeps it in the middle: launches must wait (no ITER lines while
// asleep, no fault) and, after wake, the final contents must be exactly right.
// Usage: sleep_kernels [GiB] [iterations]
#include <vector>
#include "common.h"

__global__ void add_one(uint32_t *p, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] += 1;
}

int main(int argc, char **argv)
{
	require_device();
	size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2;
	int iters = argc > 2 ? atoi(argv[2]) : 300;
	size_t n = (gib << 30) / 4;
	uint32_t *p = NULL;
	CK(cudaMalloc(&p, n * 4));
	fill(p, n * 4, 3, 0);
	unsigned long long base = device_checksum(p, n * 4, 0);
	// Spot-check a sample on the host too.
	uint32_t first = 0;
	CK(cudaMemcpy(&first, p, 4, cudaMemcpyDeviceToHost));
	EXPECT(first == pattern(0, 3), "fill");
	handshake("sleep_kernels", n * 4);
	double t0 = now_s();
	for (int i = 0; i < iters; i++) {
		add_one<<<1024, 256>>>(p, n);
		CK(cudaGetLastError());
		CK(cudaDeviceSynchronize());
		printf("ITER %d %.3f\n", i, now_s() - t0);
		fflush(stdout);
		usleep(10000);
	}
	// Every word must be pattern + iters: compare 64 MiB samples at both ends on the host.
	size_t m = 16ull << 20;
	std::vector<uint32_t> h(m);
	size_t bad = 0;
	CK(cudaMemcpy(h.data(), p, m * 4, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < m; i++)
		bad += h[i] != pattern(i, 3) + (uint32_t)iters;
	CK(cudaMemcpy(h.data(), p + n - m, m * 4, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < m; i++)
		bad += h[i] != pattern(n - m + i, 3) + (uint32_t)iters;
	printf("RESULT sleep_kernels bad_words=%zu checksum_changed=%d\n", bad,
	       device_checksum(p, n * 4, 0) != base);
	CK(cudaFree(p));
	return finish("sleep_kernels");
}
