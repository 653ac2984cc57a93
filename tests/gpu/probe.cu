// One-shot probe of the H200 machine: the costs that the core and offload engine are designed
// around. (a) cuCtxSynchronize on an idle context; (b) cudaHostRegister of fresh host memory,
// with and without MADV_HUGEPAGE and a parallel first touch; (c) pinned copies of 4 GiB on one
// and on several streams, from cudaMalloc and from VMM (cuMemCreate) memory.
// Build: nvcc -O2 -arch=sm_90 probe.cu -o probe -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define GIB (1ull << 30)
#define MIB (1ull << 20)

static int failures;

#define CK(x)                                                                          \
	do {                                                                           \
		cudaError_t e_ = (x);                                                  \
		if (e_ != cudaSuccess) {                                               \
			printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x,          \
			       cudaGetErrorString(e_));                                \
			failures++;                                                    \
		}                                                                      \
	} while (0)
#define CKD(x)                                                                         \
	do {                                                                           \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = "?";                                          \
			cuGetErrorString(r_, &s_);                                     \
			printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);    \
			failures++;                                                    \
		}                                                                      \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double median(std::vector<double> v)
{
	std::sort(v.begin(), v.end());
	return v[v.size() / 2];
}

static long meminfo_kib(const char *key)
{
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = atol(line + strlen(key) + 1);
	fclose(f);
	return v;
}

static long anon_huge_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "AnonHugePages:", 14))
			v = atol(line + 14);
	fclose(f);
	return v;
}

struct touch_arg {
	char *p;
	size_t n;
};

static void *touch_part(void *a)
{
	struct touch_arg *t = (struct touch_arg *)a;
	for (size_t i = 0; i < t->n; i += 4096)
		t->p[i] = 1;
	return NULL;
}

static void parallel_touch(char *p, size_t n, int threads)
{
	std::vector<pthread_t> tid(threads);
	std::vector<touch_arg> arg(threads);
	size_t part = (n / threads + 2 * MIB - 1) & ~(2 * MIB - 1);
	for (int i = 0; i < threads; i++) {
		size_t off = std::min(n, part * i);
		arg[i].p = p + off;
		arg[i].n = std::min(part, n - off);
		pthread_create(&tid[i], NULL, touch_part, &arg[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
}

// Fresh anonymous memory, 2 MiB aligned so that huge pages can back it.
static char *fresh_map(size_t n)
{
	size_t over = n + 2 * MIB;
	char *p = (char *)mmap(NULL, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);
	if (p == MAP_FAILED)
		return NULL;
	char *a = (char *)(((uintptr_t)p + 2 * MIB - 1) & ~(2 * MIB - 1));
	if (a > p)
		munmap(p, a - p);
	munmap(a + n, (p + over) - (a + n));
	return a;
}

// (b) one variant: returns the registered buffer when keep is set.
static char *host_register_variant(const char *name, size_t n, bool huge, bool touch, int threads,
				   bool keep)
{
	char *p = fresh_map(n);
	if (!p) {
		printf("FAIL mmap %zu\n", n);
		failures++;
		return NULL;
	}
	if (huge && madvise(p, n, MADV_HUGEPAGE))
		printf("  (madvise MADV_HUGEPAGE failed)\n");
	double t0 = now_s(), t_touch = 0;
	if (touch) {
		parallel_touch(p, n, threads);
		t_touch = now_s() - t0;
	}
	long huge_kib = anon_huge_kib();
	double t1 = now_s();
	CK(cudaHostRegister(p, n, cudaHostRegisterDefault));
	double t_reg = now_s() - t1;
	double total = now_s() - t0;
	printf("(b) %-34s %5.1f GiB: touch %7.1f ms (%5.1f GB/s)  register %7.1f ms (%5.1f GB/s)"
	       "  total %5.1f GB/s  AnonHuge %ld MiB\n",
	       name, n / (double)GIB, t_touch * 1e3, touch ? n / t_touch / 1e9 : 0.0, t_reg * 1e3,
	       n / t_reg / 1e9, n / total / 1e9, huge_kib / 1024);
	if (keep)
		return p;
	double t2 = now_s();
	CK(cudaHostUnregister(p));
	printf("    unregister %.1f ms\n", (now_s() - t2) * 1e3);
	munmap(p, n);
	return NULL;
}

// (c) copies of n bytes split into chunks round-robin over nstreams; median GB/s of reps.
static double copy_rate(void *dst, const void *src, size_t n, cudaMemcpyKind kind, int nstreams,
			size_t chunk, int reps)
{
	std::vector<cudaStream_t> s(nstreams);
	for (int i = 0; i < nstreams; i++)
		CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
	std::vector<double> rates;
	for (int r = 0; r < reps; r++) {
		CK(cudaDeviceSynchronize());
		double t0 = now_s();
		int k = 0;
		for (size_t off = 0; off < n; off += chunk, k++) {
			size_t len = std::min(chunk, n - off);
			CK(cudaMemcpyAsync((char *)dst + off, (const char *)src + off, len, kind,
					   s[k % nstreams]));
		}
		CK(cudaDeviceSynchronize());
		rates.push_back(n / (now_s() - t0) / 1e9);
	}
	for (int i = 0; i < nstreams; i++)
		CK(cudaStreamDestroy(s[i]));
	return median(rates);
}

__global__ void fill(unsigned *p, size_t n, unsigned seed)
{
	size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	for (; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = (unsigned)(i * 2654435761u) ^ seed;
}

int main(void)
{
	int threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
	printf("probe: %d cpus, MemTotal %ld MiB, MemAvailable %ld MiB\n", threads,
	       meminfo_kib("MemTotal:") / 1024, meminfo_kib("MemAvailable:") / 1024);

	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	printf("libcuda cuCheckpointProcessLock: %s, cuCheckpointProcessCheckpoint: %s\n",
	       h && dlsym(h, "cuCheckpointProcessLock") ? "exported" : "absent",
	       h && dlsym(h, "cuCheckpointProcessCheckpoint") ? "exported" : "absent");

	double t0 = now_s();
	CK(cudaFree(0));
	printf("context creation (cudaFree(0)): %.1f ms\n", (now_s() - t0) * 1e3);
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	printf("driver API %d, runtime %d\n", drv, rt);

	// (a) idle synchronization costs: what a quiesce or a synchronizing free pays when idle.
	{
		std::vector<double> a, b, c;
		for (int i = 0; i < 100; i++)
			CKD(cuCtxSynchronize());
		for (int i = 0; i < 1000; i++) {
			double s = now_s();
			cuCtxSynchronize();
			a.push_back(now_s() - s);
		}
		for (int i = 0; i < 1000; i++) {
			double s = now_s();
			cudaDeviceSynchronize();
			b.push_back(now_s() - s);
		}
		for (int i = 0; i < 1000; i++) {
			double s = now_s();
			cudaStreamQuery(0);
			c.push_back(now_s() - s);
		}
		printf("(a) idle cuCtxSynchronize median %.2f us (p90 %.2f); cudaDeviceSynchronize "
		       "%.2f us; cudaStreamQuery(0) %.2f us\n",
		       median(a) * 1e6, (std::sort(a.begin(), a.end()), a[900]) * 1e6,
		       median(b) * 1e6, median(c) * 1e6);
	}

	// (b) provisioning pinned host memory.
	size_t n2 = 2 * GIB;
	for (int round = 0; round < 2; round++) {
		printf("(b) round %d (MemTotal %ld MiB)\n", round + 1, meminfo_kib("MemTotal:") / 1024);
		host_register_variant("no madvise, register untouched", n2, false, false, threads,
				      false);
		host_register_variant("no madvise, parallel touch", n2, false, true, threads, false);
		host_register_variant("MADV_HUGEPAGE, register untouched", n2, true, false, threads,
				      false);
		host_register_variant("MADV_HUGEPAGE, parallel touch", n2, true, true, threads,
				      false);
		host_register_variant("MADV_HUGEPAGE, 1-thread touch", n2, true, true, 1, false);
	}
	{
		void *p = NULL;
		double s = now_s();
		CK(cudaHostAlloc(&p, n2, cudaHostAllocDefault));
		double t = now_s() - s;
		printf("(b) cudaHostAlloc 2 GiB: %.1f ms (%.1f GB/s)\n", t * 1e3, n2 / t / 1e9);
		CK(cudaFreeHost(p));
	}

	// (c) pinned copies of 4 GiB.
	size_t n4 = 4 * GIB;
	char *host = host_register_variant("4 GiB backup (huge, touch)", n4, true, true, threads,
					   true);
	void *dev = NULL;
	CK(cudaMalloc(&dev, n4));
	fill<<<1024, 256>>>((unsigned *)dev, n4 / 4, 7);
	CK(cudaDeviceSynchronize());
	if (host && dev) {
		struct {
			int streams;
			size_t chunk;
		} cfg[] = { { 1, n4 }, { 4, GIB }, { 1, 64 * MIB }, { 4, 64 * MIB },
			    { 4, 256 * MIB }, { 8, 64 * MIB } };
		for (auto &c : cfg) {
			double d2h = copy_rate(host, dev, n4, cudaMemcpyDeviceToHost, c.streams,
					       c.chunk, 3);
			double h2d = copy_rate(dev, host, n4, cudaMemcpyHostToDevice, c.streams,
					       c.chunk, 3);
			printf("(c) cudaMalloc 4 GiB, %d stream(s), %4zu MiB chunks: D2H %5.1f GB/s  "
			       "H2D %5.1f GB/s\n",
			       c.streams, (size_t)(c.chunk / MIB), d2h, h2d);
		}
		// Bidirectional: half out, half in at once (a wake overlapping a sleep does not
		// happen, but it bounds a duplex copy engine).
		std::vector<cudaStream_t> s(2);
		CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
		CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
		double ts = now_s();
		CK(cudaMemcpyAsync(host, dev, n4 / 2, cudaMemcpyDeviceToHost, s[0]));
		CK(cudaMemcpyAsync((char *)dev + n4 / 2, host + n4 / 2, n4 / 2,
				   cudaMemcpyHostToDevice, s[1]));
		CK(cudaDeviceSynchronize());
		printf("(c) duplex 2 GiB out + 2 GiB in: %.1f GB/s total\n", n4 / (now_s() - ts) / 1e9);
		CK(cudaStreamDestroy(s[0]));
		CK(cudaStreamDestroy(s[1]));
	}

	// (c') the same copies from VMM memory (one 4 GiB handle), as the shim's memory will be.
	if (host) {
		CUdevice d;
		CKD(cuDeviceGet(&d, 0));
		CUmemAllocationProp prop;
		memset(&prop, 0, sizeof(prop));
		prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop.location.id = 0;
		size_t gran = 0;
		CKD(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		CUdeviceptr va = 0;
		CUmemGenericAllocationHandle hd = 0;
		double s = now_s();
		CKD(cuMemAddressReserve(&va, n4, 0, 0, 0));
		CKD(cuMemCreate(&hd, n4, &prop, 0));
		CKD(cuMemMap(va, n4, 0, hd, 0));
		CUmemAccessDesc acc;
		memset(&acc, 0, sizeof(acc));
		acc.location = prop.location;
		acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
		CKD(cuMemSetAccess(va, n4, &acc, 1));
		printf("(c') VMM 4 GiB one handle (gran %zu KiB): reserve+create+map+access %.2f ms\n",
		       gran / 1024, (now_s() - s) * 1e3);
		fill<<<1024, 256>>>((unsigned *)va, n4 / 4, 9);
		CK(cudaDeviceSynchronize());
		double d1 = copy_rate(host, (void *)va, n4, cudaMemcpyDeviceToHost, 1, n4, 3);
		double h1 = copy_rate((void *)va, host, n4, cudaMemcpyHostToDevice, 1, n4, 3);
		double d4 = copy_rate(host, (void *)va, n4, cudaMemcpyDeviceToHost, 4, 64 * MIB, 3);
		double h4 = copy_rate((void *)va, host, n4, cudaMemcpyHostToDevice, 4, 64 * MIB, 3);
		printf("(c') VMM 4 GiB: 1 stream D2H %.1f H2D %.1f GB/s; 4 streams x 64 MiB D2H %.1f "
		       "H2D %.1f GB/s\n",
		       d1, h1, d4, h4);
		s = now_s();
		CKD(cuMemUnmap(va, n4));
		CKD(cuMemRelease(hd));
		printf("(c') VMM 4 GiB unmap+release %.2f ms\n", (now_s() - s) * 1e3);
		CKD(cuMemAddressFree(va, n4));
	}
	if (host) {
		CK(cudaHostUnregister(host));
		munmap(host, n4);
	}
	CK(cudaFree(dev));

	size_t fr = 0, tot = 0;
	CK(cudaMemGetInfo(&fr, &tot));
	printf("cudaMemGetInfo at end: free %zu MiB of %zu MiB (context and runtime: %zu MiB)\n",
	       (size_t)(fr / MIB), (size_t)(tot / MIB), (size_t)((tot - fr) / MIB));
	printf("probe done: %d failure(s)\n", failures);
	return failures ? 1 : 0;
}
