// Does memory the heap has just re-created cost the program's kernels? On the H200, cutting freed
// handles at allocation edges (VMMSHIM_EDGE_CUT_MIN) made the PyTorch benchmark's small steps
// 20-35 ms slower while the heap's own calls took less time than with 2 MiB pieces (README,
// "Runs of 2026-12-03 (late afternoon)"); an edge cut re-creates the whole free rest of a handle
// at each cut, so it makes far more bytes of fresh memory per step. probe_churn.cu re-created
// only 2 MiB pieces beside kernels (+0.4%). Two questions, each answered per handle size
// (2 MiB pieces, 64 MiB handles, one 256 MiB handle):
//   first touch  a 256 MiB range freshly created, mapped and granted: the first kernel over it
//                and the second, against the same kernels over a range mapped long ago;
//   volume       one thread keeps a stream busy with KERNELS short kernels on a buffer of its
//                own while the main thread re-creates the 256 MiB range again and again (unmap,
//                release, create, map, grant): the kernels' GPU time against a quiet run, and
//                the MiB re-created per ms.
// A first kernel slower over fresh memory, or kernels slowed by the volume re-created, is the
// cost the replay model does not see. One line per case; medians over ROUNDS.
// Build: nvcc -O2 -arch=sm_90 tests/gpu/probe_fresh.cu -o /tmp/probe_fresh -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>

#include "probe_driver.h"

#define RANGE ((size_t)256 << 20)
#define MAX_HANDLES 128 /* RANGE in 2 MiB pieces */
#define ROUNDS 9
#define KERNELS 3000
#define BUSY_WORDS (16u << 20) /* 64 MiB of floats per busy kernel: ~25 us on an H200 */

__global__ void touch(float *p, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = p[i] * 0.999f + 1.0f;
}

static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[n / 2];
}

/* The range at base, made of RANGE / size handles of `size` bytes. */
struct range {
	CUdeviceptr base;
	size_t size;
	int n;
	CUmemGenericAllocationHandle h[MAX_HANDLES];
};

static void range_make(struct range *r)
{
	r->n = (int)(RANGE / r->size);
	for (int i = 0; i < r->n; i++) {
		CK(cuMemCreate(&r->h[i], r->size, &prop, 0));
		CK(cuMemMap(r->base + i * r->size, r->size, 0, r->h[i], 0));
	}
	CK(cuMemSetAccess(r->base, RANGE, &access_desc, 1));
}

static void range_drop(struct range *r)
{
	CK(cuMemUnmap(r->base, RANGE));
	for (int i = 0; i < r->n; i++)
		CK(cuMemRelease(r->h[i]));
}

/* GPU ms of one touch kernel over the range on stream s. */
static float kernel_ms(CUdeviceptr p, cudaStream_t s)
{
	cudaEvent_t a, b;
	float ms;

	cudaEventCreate(&a);
	cudaEventCreate(&b);
	cudaEventRecord(a, s);
	touch<<<264, 512, 0, s>>>((float *)p, RANGE / sizeof(float));
	cudaEventRecord(b, s);
	cudaEventSynchronize(b);
	cudaEventElapsedTime(&ms, a, b);
	cudaEventDestroy(a);
	cudaEventDestroy(b);
	return ms;
}

static void first_touch(CUdeviceptr base, size_t size, int fresh)
{
	double setup[ROUNDS], first[ROUNDS], second[ROUNDS];
	struct range r;
	cudaStream_t s;

	r.base = base;
	r.size = size;
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	if (!fresh)
		range_make(&r);
	for (int k = 0; k < ROUNDS; k++) {
		double t0 = now_ms();

		if (fresh)
			range_make(&r);
		setup[k] = now_ms() - t0;
		first[k] = kernel_ms(base, s);
		second[k] = kernel_ms(base, s);
		if (fresh)
			range_drop(&r);
	}
	if (!fresh)
		range_drop(&r);
	printf("first touch, %3zu MiB handles, %s: setup %.2f ms, first kernel %.3f ms, second "
	       "%.3f ms\n", size >> 20, fresh ? "fresh " : "reused", fresh ? median(setup, ROUNDS) : 0.0,
	       median(first, ROUNDS), median(second, ROUNDS));
	cudaStreamDestroy(s);
}

struct busy {
	float *buf;
	float gpu_ms;
	std::atomic<bool> done;
};

static void *busy_run(void *arg)
{
	struct busy *b = (struct busy *)arg;
	cudaStream_t s;
	cudaEvent_t e0, e1;

	CK(cuCtxSetCurrent(ctx));
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaEventRecord(e0, s);
	for (int i = 0; i < KERNELS; i++)
		touch<<<264, 512, 0, s>>>(b->buf, BUSY_WORDS);
	cudaEventRecord(e1, s);
	cudaEventSynchronize(e1);
	cudaEventElapsedTime(&b->gpu_ms, e0, e1);
	b->done.store(true);
	cudaStreamDestroy(s);
	return NULL;
}

/* size 0: nothing beside the kernels (the anchor). */
static void volume(CUdeviceptr base, size_t size, float *buf)
{
	double gpu[ROUNDS], rate[ROUNDS];

	for (int k = 0; k < ROUNDS; k++) {
		struct busy b;
		struct range r;
		pthread_t t;
		double t0, mib = 0;

		b.buf = buf;
		b.done.store(false);
		r.base = base;
		r.size = size ? size : RANGE;
		if (size)
			range_make(&r);
		pthread_create(&t, NULL, busy_run, &b);
		t0 = now_ms();
		while (size && !b.done.load()) {
			range_drop(&r);
			range_make(&r);
			mib += RANGE >> 20;
		}
		pthread_join(t, NULL);
		rate[k] = mib / (now_ms() - t0);
		if (size)
			range_drop(&r);
		gpu[k] = b.gpu_ms;
	}
	if (size)
		printf("volume, %3zu MiB handles re-created beside the kernels: kernels %.1f ms, "
		       "%.0f MiB re-created a ms\n", size >> 20, median(gpu, ROUNDS),
		       median(rate, ROUNDS));
	else
		printf("volume, nothing beside the kernels: kernels %.1f ms\n", median(gpu, ROUNDS));
}

int main(void)
{
	static const size_t sizes[] = { (size_t)2 << 20, (size_t)64 << 20, RANGE };
	CUdeviceptr base;
	CUdevice dev;
	size_t gran;
	float *buf;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	gran = probe_device_memory(dev, &prop, &access_desc);
	if (gran != ((size_t)2 << 20)) {
		fprintf(stderr, "granularity %zu, not 2 MiB: the sizes below assume it\n", gran);
		return 1;
	}
	CK(cuMemAddressReserve(&base, RANGE, RANGE, 0, 0));
	if (cudaMalloc(&buf, (size_t)BUSY_WORDS * sizeof(float)) != cudaSuccess)
		return 1;
	cudaMemset(buf, 0, (size_t)BUSY_WORDS * sizeof(float));
	first_touch(base, RANGE, 0);
	for (int i = 0; i < 3; i++)
		first_touch(base, sizes[i], 1);
	first_touch(base, RANGE, 0);
	volume(base, 0, buf);
	for (int i = 0; i < 3; i++)
		volume(base, sizes[i], buf);
	volume(base, 0, buf);
	cudaFree(buf);
	CK(cuMemAddressFree(base, RANGE));
	return 0;
}
