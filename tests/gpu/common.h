// Shared by the GPU test programs: error checks that count instead of aborting, the handshake
// with tests/gpu/gpucheck.py, and a device fill/checksum pair whose expected value is known.
//
// Output convention: lines starting "RESULT " must be identical natively and under the shim;
// "HOLD <bytes>" says how many device bytes the program holds at the handshake; everything else
// (timings, addresses) is free-form.
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <vector>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_failures;

#define CK(x)                                                                          \
	do {                                                                           \
		cudaError_t e_ = (x);                                                  \
		if (e_ != cudaSuccess) {                                               \
			printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #x,         \
			       cudaGetErrorString(e_));                                \
			fflush(stdout);                                                \
			g_failures++;                                                  \
		}                                                                      \
	} while (0)

#define EXPECT(cond, ...)                                                              \
	do {                                                                           \
		if (!(cond)) {                                                         \
			printf("ERROR %s:%d expected %s: ", __FILE__, __LINE__, #cond);  \
			printf(__VA_ARGS__);                                           \
			printf("\n");                                                  \
			fflush(stdout);                                                \
			g_failures++;                                                  \
		}                                                                      \
	} while (0)

static inline double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// The median of v (sorted in a copy).
static inline double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

// Host seconds per launch of `per` launches issued back to back; the queue is then drained
// untimed, so that the next batch starts on an idle device.
template <class Launch>
static double launch_batch_s(int per, Launch launch)
{
	double t0 = now_s();
	for (int i = 0; i < per; i++)
		launch();
	double t = (now_s() - t0) / per;
	CK(cudaDeviceSynchronize());
	return t;
}

// Reads one line from stdin into buf, waiting at most timeout_s. Returns 0 on a line, -1 on
// EOF or timeout (the caller then carries on as if told "go": a harness that died must not
// leave the program hanging).
static inline int read_command(char *buf, size_t n, int timeout_s)
{
	struct pollfd p = { 0, POLLIN, 0 };
	if (poll(&p, 1, timeout_s * 1000) <= 0)
		return -1;
	if (!fgets(buf, (int)n, stdin))
		return -1;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

// With GPUCHECK_HANDSHAKE=1: say what is held, then wait for the harness to measure.
static inline void handshake(const char *what, size_t held_bytes)
{
	char line[64];
	if (!getenv("GPUCHECK_HANDSHAKE"))
		return;
	printf("HOLD %zu\nREADY %s\n", held_bytes, what);
	fflush(stdout);
	read_command(line, sizeof(line), 120);
}

__host__ __device__ static inline uint32_t pattern(uint64_t i, uint32_t seed)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
	x ^= x >> 29;
	return (uint32_t)x;
}

__global__ void fill_kernel(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = pattern(i, seed);
}

// Sum of (word ^ index-hash): sensitive to every word and to its position.
__global__ void checksum_kernel(const uint32_t *p, size_t n, unsigned long long *out)
{
	unsigned long long s = 0;
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		s += (unsigned long long)(p[i] ^ (uint32_t)(i * 2654435761u)) * (1 + (i & 7));
	atomicAdd(out, s);
}

// Host-side expected checksum of fill_kernel's output (same formula, on the CPU).
static inline unsigned long long expected_checksum(size_t n, uint32_t seed, uint32_t add)
{
	unsigned long long s = 0;
	for (size_t i = 0; i < n; i++)
		s += (unsigned long long)((pattern(i, seed) + add) ^ (uint32_t)(i * 2654435761u)) *
		     (1 + (i & 7));
	return s;
}

static inline unsigned long long device_checksum(const void *p, size_t bytes, cudaStream_t s)
{
	unsigned long long *d = NULL, h = 0;
	CK(cudaMalloc(&d, sizeof(*d)));
	CK(cudaMemsetAsync(d, 0, sizeof(*d), s));
	checksum_kernel<<<1024, 256, 0, s>>>((const uint32_t *)p, bytes / 4, d);
	CK(cudaGetLastError());
	CK(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
	CK(cudaStreamSynchronize(s));
	CK(cudaFree(d));
	return h;
}

static inline void fill(void *p, size_t bytes, uint32_t seed, cudaStream_t s)
{
	fill_kernel<<<1024, 256, 0, s>>>((uint32_t *)p, bytes / 4, seed);
	CK(cudaGetLastError());
}

// Creates the context, or ends the program at once with one clear line when there is no usable
// device (rather than a cascade of errors).
static inline void require_device(void)
{
	cudaError_t e = cudaFree(0);
	if (e != cudaSuccess) {
		printf("ERROR no usable CUDA device: %s\n", cudaGetErrorString(e));
		exit(1);
	}
}

static inline int finish(const char *name)
{
	printf("RESULT %s failures=%d\n", name, g_failures);
	printf("%s: %s\n", name, g_failures ? "FAILED" : "ok");
	return g_failures ? 1 : 0;
}
