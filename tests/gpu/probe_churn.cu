// What the heap's driver calls cost a program whose kernels are running: the replay model
// (tests/bench/driver_model.c) costs each call on its own, but a policy that released and
// re-created memory more often ran its middle steps 15-45 ms slower on the H200 than the model
// said (docs/h200-runs.md, "2026-12-02 day"). Here one thread keeps a stream full of short
// memory-bound kernels on a buffer of their own while another churns 2 MiB VMM pieces that the
// kernels never touch, in four ways:
//   none     nothing (the anchor)
//   grant    cuMemSetAccess again over mapped pieces (already granted)
//   move     unmap a piece and map it at another address, one grant over the new range
//   recreate unmap and release a piece, create a new one, map it and grant it
// For each: the kernels' GPU time (events around the whole batch), the launching thread's CPU
// time, and the churn's calls per ms. A slower batch under churn is what the model misses.
// Build: nvcc -O2 -arch=sm_90 tests/gpu/probe_churn.cu -o /tmp/probe_churn -lcuda -lpthread
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe_driver.h"

#define PIECES 256
#define KERNELS 3000
#define WORDS (16u << 20) /* 64 MiB of floats per kernel: ~25 us on an H200 */

__global__ void touch(float *p, unsigned n)
{
	for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = p[i] * 0.999f + 1.0f;
}

enum churn_kind { NONE, GRANT, MOVE, RECREATE };
static const char *names[] = { "none", "grant", "move", "recreate" };

static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;
static size_t gran;

struct churn {
	enum churn_kind kind;
	CUdeviceptr base; /* 2 * PIECES granules reserved: the pieces sit in one half */
	CUmemGenericAllocationHandle h[PIECES];
	volatile int stop;
	long calls;
	double ms;
};

static void map_all(struct churn *c, CUdeviceptr at)
{
	for (int i = 0; i < PIECES; i++)
		CK(cuMemMap(at + i * gran, gran, 0, c->h[i], 0));
	CK(cuMemSetAccess(at, PIECES * gran, &access_desc, 1));
}

/* Whole passes over the pieces (stop is looked at between passes only), so that every piece is
 * at the same address between two cases; a move pass takes them to the other half. */
static void *churn_main(void *arg)
{
	struct churn *c = (struct churn *)arg;
	int half = 0;
	double t0 = now_ms();

	CK(cuCtxSetCurrent(ctx));
	while (!c->stop && c->kind != NONE) {
		CUdeviceptr from = c->base + half * PIECES * gran;
		CUdeviceptr to = c->base + (1 - half) * PIECES * gran;

		for (int i = 0; i < PIECES; i++) {
			if (c->kind == GRANT) {
				CK(cuMemSetAccess(from + i * gran, gran, &access_desc, 1));
				c->calls++;
				continue;
			}
			CK(cuMemUnmap(from + i * gran, gran));
			if (c->kind == RECREATE) {
				CK(cuMemRelease(c->h[i]));
				CK(cuMemCreate(&c->h[i], gran, &prop, 0));
			}
			CK(cuMemMap(to + i * gran, gran, 0, c->h[i], 0));
			CK(cuMemSetAccess(to + i * gran, gran, &access_desc, 1));
			c->calls += c->kind == RECREATE ? 5 : 3;
		}
		if (c->kind != GRANT)
			half = 1 - half;
	}
	c->ms = now_ms() - t0;
	if (half) { /* back to the first half for the next case (not timed) */
		for (int i = 0; i < PIECES; i++) {
			CK(cuMemUnmap(c->base + (PIECES + i) * gran, gran));
			CK(cuMemMap(c->base + i * gran, gran, 0, c->h[i], 0));
		}
		CK(cuMemSetAccess(c->base, PIECES * gran, &access_desc, 1));
	}
	return NULL;
}

static void run(enum churn_kind kind, struct churn *c, float *buf, cudaStream_t s)
{
	cudaEvent_t e0, e1;
	pthread_t th;
	float gpu_ms = 0;
	double t0, launch_ms;

	c->kind = kind;
	c->stop = 0;
	c->calls = 0;
	cudaEventCreate(&e0);
	cudaEventCreate(&e1);
	cudaStreamSynchronize(s);
	pthread_create(&th, NULL, churn_main, c);
	t0 = now_ms();
	cudaEventRecord(e0, s);
	for (int k = 0; k < KERNELS; k++)
		touch<<<264, 512, 0, s>>>(buf, WORDS);
	cudaEventRecord(e1, s);
	launch_ms = now_ms() - t0;
	cudaEventSynchronize(e1);
	c->stop = 1;
	pthread_join(th, NULL);
	cudaEventElapsedTime(&gpu_ms, e0, e1);
	printf("%-9s kernels: GPU %.1f ms (%.2f us each), launches %.1f ms CPU; churn %ld calls in "
	       "%.1f ms (%.1f us a call)\n", names[kind], gpu_ms, gpu_ms * 1e3 / KERNELS, launch_ms,
	       c->calls, c->ms, c->calls ? c->ms * 1e3 / c->calls : 0.0);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
}

int main(void)
{
	struct churn *c = (struct churn *)calloc(1, sizeof(*c));
	cudaStream_t s;
	float *buf;

	cudaSetDevice(0);
	cudaFree(0);
	CK(cuCtxGetCurrent(&ctx));
	gran = probe_device_memory(0, &prop, &access_desc);
	CK(cuMemAddressReserve(&c->base, 2 * PIECES * gran, 0, 0, 0));
	for (int i = 0; i < PIECES; i++)
		CK(cuMemCreate(&c->h[i], gran, &prop, 0));
	map_all(c, c->base);
	cudaMalloc(&buf, WORDS * sizeof(float));
	cudaMemset(buf, 0, WORDS * sizeof(float));
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	printf("probe_churn: %d kernels of %u MiB each beside %d pieces of %zu MiB\n", KERNELS,
	       (unsigned)(WORDS * sizeof(float) >> 20), PIECES, gran >> 20);
	/* Twice each, none first and last, so that drift shows. */
	for (int round = 0; round < 2; round++)
		for (int k = NONE; k <= RECREATE; k++)
			run((enum churn_kind)k, c, buf, s);
	run(NONE, c, buf, s);
	return 0;
}
