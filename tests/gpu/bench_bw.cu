// Bandwidth of device memory, run natively (cudaMalloc memory) and under the shim (its VMM
// memory) by gpucheck.py, which prints the two side by side as ratios: a driver once made VMM
// memory slower to copy than cudaMalloc memory, and the shim maps mid-size allocations in 2 MiB
// pieces and large ones in 1 GiB handles, so both layouts are measured.
// Lines: "BENCH <what>_<size>MiB <GB/s>", each the median of 9 timed repetitions after 2 warm-ups:
//   d2d:   cudaMemcpyAsync of the whole buffer to a second one (bytes copied per second)
//   read:  a kernel that reads the whole buffer (16-byte loads, every thread a strided share)
//   write: a kernel that writes the whole buffer
// and "RESULT bw_<size>MiB ok=1" when the copy and the writes left what they should (sampled).
// Usage: bench_bw [MiB...]   (default: 512 2048)
#include <algorithm>
#include <vector>
#include "common.h"

#define MIB (1ull << 20)

__global__ void read_kernel(const uint4 *p, size_t n, uint32_t *out)
{
	uint32_t acc = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = p[i];
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	atomicXor(out, acc);
}

__global__ void write_kernel(uint4 *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = make_uint4(seed, seed, seed, seed);
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

// GB/s of `run` over `bytes`, median of 9 after 2 warm-ups, timed with events.
template <typename F> static double rate(size_t bytes, F run)
{
	cudaEvent_t a, b;
	std::vector<double> gbs;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	for (int i = 0; i < 11; i++) {
		float ms = 0;
		CK(cudaEventRecord(a));
		run();
		CK(cudaEventRecord(b));
		CK(cudaEventSynchronize(b));
		CK(cudaEventElapsedTime(&ms, a, b));
		if (i >= 2 && ms > 0)
			gbs.push_back(bytes / (ms * 1e-3) / 1e9);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	return gbs.empty() ? 0 : median(gbs);
}

// Three 16-byte words of p (first, middle, last) all equal to w?
static bool sampled(const uint4 *p, size_t n4, uint32_t w)
{
	size_t at[3] = { 0, n4 / 2, n4 - 1 };
	for (size_t i : at) {
		uint4 v = make_uint4(0, 0, 0, 0);
		CK(cudaMemcpy(&v, p + i, sizeof(v), cudaMemcpyDeviceToHost));
		if (v.x != w || v.y != w || v.z != w || v.w != w)
			return false;
	}
	return true;
}

static void measure(size_t mib)
{
	size_t bytes = mib * MIB, n4 = bytes / sizeof(uint4);
	uint4 *src = NULL, *dst = NULL;
	uint32_t *out = NULL;
	int sms = 0, ok;

	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaMalloc(&src, bytes));
	CK(cudaMalloc(&dst, bytes));
	CK(cudaMalloc(&out, sizeof(*out)));
	if (!src || !dst || !out) {
		printf("ERROR bench_bw: cannot allocate 2 x %zu MiB\n", mib);
		return;
	}
	dim3 grid(sms * 8), block(256);
	write_kernel<<<grid, block>>>(src, n4, 0x5a5a5a5au);
	double d2d = rate(bytes, [&] {
		CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
	});
	ok = sampled(dst, n4, 0x5a5a5a5au);
	double rd = rate(bytes, [&] { read_kernel<<<grid, block>>>(src, n4, out); });
	double wr = rate(bytes, [&] { write_kernel<<<grid, block>>>(dst, n4, 0x12345678u); });
	ok = ok && sampled(dst, n4, 0x12345678u) && cudaGetLastError() == cudaSuccess;
	printf("BENCH d2d_%zuMiB %.1f GB/s\nBENCH read_%zuMiB %.1f GB/s\n", mib, d2d, mib, rd);
	printf("BENCH write_%zuMiB %.1f GB/s\n", mib, wr);
	printf("RESULT bw_%zuMiB ok=%d\n", mib, ok);
	CK(cudaFree(src));
	CK(cudaFree(dst));
	CK(cudaFree(out));
}

int main(int argc, char **argv)
{
	std::vector<size_t> sizes;
	for (int i = 1; i < argc; i++)
		sizes.push_back(strtoull(argv[i], NULL, 10));
	if (sizes.empty())
		sizes = { 512, 2048 };
	for (size_t s : sizes)
		if (s)
			measure(s);
	printf("RESULT bench_bw failures=%d\n", g_failures);
	return g_failures ? 1 : 0;
}
