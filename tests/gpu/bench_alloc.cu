// Allocation benchmarks, run natively and under the shim by gpucheck.py, which prints them side
// by side. Lines: "BENCH <name> <value> <unit>".
//   pair_<size>: median of cudaMalloc + cudaFree of one size, repeated (served from cache
//                under the shim); async_pair_<size>: cudaMallocAsync + cudaFreeAsync, warm pool
//   grow_64x1g: 64 GiB allocated in 1 GiB cudaMalloc calls (total ms), then freed
//   launch: host time of one empty kernel launch (median over batches of 500, each batch
//           issued back to back and drained untimed): what the shim adds to every launch
// Usage: bench_alloc [grow_GiB]
#include <vector>
#include "common.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

static void pair(size_t size, const char *name, int reps)
{
	std::vector<double> t;
	void *p = NULL;
	CK(cudaMalloc(&p, size)); // warm: the first one may grow the heap
	CK(cudaFree(p));
	for (int i = 0; i < reps; i++) {
		double t0 = now_s();
		CK(cudaMalloc(&p, size));
		CK(cudaFree(p));
		t.push_back(now_s() - t0);
	}
	printf("BENCH pair_%s %.3f us\n", name, median(t) * 1e6);
}

static void async_pair(size_t size, const char *name, int reps)
{
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	cudaMemPool_t pool;
	CK(cudaDeviceGetDefaultMemPool(&pool, 0));
	uint64_t keep = UINT64_MAX;
	CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
	std::vector<double> t;
	void *p = NULL;
	CK(cudaMallocAsync(&p, size, s));
	CK(cudaFreeAsync(p, s));
	CK(cudaStreamSynchronize(s));
	for (int i = 0; i < reps; i++) {
		double t0 = now_s();
		CK(cudaMallocAsync(&p, size, s));
		CK(cudaFreeAsync(p, s));
		t.push_back(now_s() - t0);
	}
	CK(cudaStreamSynchronize(s));
	CK(cudaStreamDestroy(s));
	printf("BENCH async_pair_%s %.3f us\n", name, median(t) * 1e6);
}

__global__ void empty_kernel(void) {}

static void launch(int batches)
{
	std::vector<double> t;
	empty_kernel<<<1, 1>>>(); // the module loads on the first launch
	CK(cudaDeviceSynchronize());
	for (int b = 0; b < batches; b++)
		t.push_back(launch_batch_s(500, [] { empty_kernel<<<1, 1>>>(); }));
	CK(cudaGetLastError());
	printf("BENCH launch %.3f us\n", median(t) * 1e6);
}

int main(int argc, char **argv)
{
	size_t grow = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
	require_device();
	// Growth first, on a fresh heap: what a program pays to get its memory the first time.
	std::vector<void *> v;
	std::vector<double> per;
	double t0 = now_s();
	for (size_t i = 0; i < grow; i++) {
		void *p = NULL;
		double t1 = now_s();
		CK(cudaMalloc(&p, GIB));
		per.push_back(now_s() - t1);
		if (!p)
			break;
		v.push_back(p);
	}
	double total = now_s() - t0;
	// Touch every GiB so that lazily backed memory cannot look cheaper than it is.
	for (void *p : v)
		CK(cudaMemsetAsync(p, 1, GIB, 0));
	CK(cudaDeviceSynchronize());
	double t2 = now_s();
	for (void *p : v)
		CK(cudaFree(p));
	double freed = now_s() - t2;
	printf("BENCH grow_%zux1g %.2f ms\n", grow, total * 1e3);
	printf("BENCH grow_call_median %.1f us\n", median(per) * 1e6);
	printf("BENCH free_%zux1g %.2f ms\n", grow, freed * 1e3);
	pair(256, "256B", 2000);
	pair(MIB, "1MiB", 2000);
	pair(64 * MIB, "64MiB", 500);
	launch(40);
	async_pair(256, "256B", 2000);
	async_pair(MIB, "1MiB", 2000);
	async_pair(64 * MIB, "64MiB", 500);
	return finish("bench_alloc");
}
