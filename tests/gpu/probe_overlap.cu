// Do the heap's driver calls on a thread of its own hold up the program's launches?
// A PyTorch step spends most of its host time in Python between launches. If the driver lets
// another thread unmap, release, create, map and grant 2 MiB pieces meanwhile, a heap could
// gather a large request's pieces ahead of it, off the program's thread (docs/design.md: the one
// direction for issue 12's largest step that is not yet tried). If the driver serializes those
// calls with the launches, the program pays for them wherever they run.
// The program: launches of a short kernel, each after GAP us of host work (a stand-in for
// Python). The heap: give back N mapped 2 MiB pieces (unmap + release), then make them again
// (create + map + one grant per piece), as a gather and a cut do. Each alone, then both at once;
// printed: their times, and the launches' slowest calls.
// Build: nvcc -O2 -arch=sm_90 tests/gpu/probe_overlap.cu -o /tmp/probe_overlap -lcuda -lpthread
// Run:   /tmp/probe_overlap [PIECES (2000)] [LAUNCHES (20000)] [GAP_US (15)]
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "probe_driver.h"

#define PIECE ((size_t)2 << 20)

__global__ void tick(int *p)
{
	if (p)
		atomicAdd(p, 1);
}

static CUcontext ctx;
static CUdevice dev;
static CUdeviceptr base;
static CUmemGenericAllocationHandle *pieces;
static int npieces, nlaunch;
static double gap_us;

static void map_piece(int i)
{
	CUmemAllocationProp prop;
	CUmemAccessDesc acc;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = (int)dev;
	memset(&acc, 0, sizeof(acc));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(cuMemCreate(&pieces[i], PIECE, &prop, 0));
	CK(cuMemMap(base + i * PIECE, PIECE, 0, pieces[i], 0));
	CK(cuMemSetAccess(base + i * PIECE, PIECE, &acc, 1));
}

static void unmap_piece(int i)
{
	CK(cuMemUnmap(base + i * PIECE, PIECE));
	CK(cuMemRelease(pieces[i]));
}

struct churn {
	double give_ms, make_ms;
	volatile int *go;
};

// The heap's side: every piece given back, then every piece made again.
static void *churn_thread(void *arg)
{
	struct churn *c = (struct churn *)arg;
	double t;

	CK(cuCtxSetCurrent(ctx));
	while (c->go && !*c->go)
		;
	t = now_ms();
	for (int i = 0; i < npieces; i++)
		unmap_piece(i);
	c->give_ms = now_ms() - t;
	t = now_ms();
	for (int i = 0; i < npieces; i++)
		map_piece(i);
	c->make_ms = now_ms() - t;
	return NULL;
}

struct launches {
	double total_ms, slowest_us, over_100us;
};

// The program's side: GAP us of host work, then a launch, nlaunch times.
static void program(cudaStream_t s, struct launches *out, volatile int *go)
{
	double t0, worst = 0;
	int slow = 0;

	if (go)
		*go = 1;
	t0 = now_ms();
	for (int i = 0; i < nlaunch; i++) {
		double spin_end = now_ms() + gap_us / 1e3, a, b;

		while (now_ms() < spin_end)
			;
		a = now_ms();
		tick<<<1, 1, 0, s>>>(NULL);
		b = now_ms();
		if ((b - a) * 1e3 > worst)
			worst = (b - a) * 1e3;
		slow += (b - a) * 1e3 > 100;
	}
	CK(cuStreamSynchronize(s));
	out->total_ms = now_ms() - t0;
	out->slowest_us = worst;
	out->over_100us = slow;
}

int main(int argc, char **argv)
{
	struct launches alone, both;
	struct churn c_alone = { 0, 0, NULL }, c_both = { 0, 0, NULL };
	volatile int go = 0;
	cudaStream_t s;
	pthread_t th;

	npieces = argc > 1 ? atoi(argv[1]) : 2000;
	nlaunch = argc > 2 ? atoi(argv[2]) : 20000;
	gap_us = argc > 3 ? atof(argv[3]) : 15;
	pieces = (CUmemGenericAllocationHandle *)calloc(npieces, sizeof(*pieces));
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	cudaSetDevice(0);
	cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
	CK(cuMemAddressReserve(&base, npieces * PIECE, 0, 0, 0));
	for (int i = 0; i < npieces; i++)
		map_piece(i);
	program(s, &alone, NULL); // warm-up
	program(s, &alone, NULL);
	churn_thread(&c_alone);
	c_both.go = &go;
	pthread_create(&th, NULL, churn_thread, &c_both);
	program(s, &both, &go);
	pthread_join(th, NULL);
	printf("%d pieces of 2 MiB, %d launches after %.0f us of host work each\n", npieces,
	       nlaunch, gap_us);
	printf("program alone:       %8.1f ms; slowest launch %6.0f us, %4.0f over 100 us\n",
	       alone.total_ms, alone.slowest_us, alone.over_100us);
	printf("heap alone:          give back %6.1f ms (%.1f us a piece), make %6.1f ms (%.1f us)\n",
	       c_alone.give_ms, c_alone.give_ms * 1e3 / npieces, c_alone.make_ms,
	       c_alone.make_ms * 1e3 / npieces);
	printf("both at once:        program %8.1f ms (+%.1f); heap give back %6.1f, make %6.1f ms;"
	       " slowest launch %6.0f us, %4.0f over 100 us\n",
	       both.total_ms, both.total_ms - alone.total_ms, c_both.give_ms, c_both.make_ms,
	       both.slowest_us, both.over_100us);
	printf("the program paid %.0f%% of the heap's calls' time\n",
	       100.0 * (both.total_ms - alone.total_ms) / (c_alone.give_ms + c_alone.make_ms));
	// For gpucheck (bench overlap).
	printf("BENCH program_ms %.2f\nBENCH program_both_ms %.2f\nBENCH heap_ms %.2f\n"
	       "BENCH heap_both_ms %.2f\nBENCH slowest_launch_both_us %.0f\n"
	       "BENCH give_back_us %.1f\nBENCH make_us %.1f\n", alone.total_ms,
	       both.total_ms, c_alone.give_ms + c_alone.make_ms, c_both.give_ms + c_both.make_ms,
	       both.slowest_us, c_alone.give_ms * 1e3 / npieces, c_alone.make_ms * 1e3 / npieces);
	for (int i = 0; i < npieces; i++)
		unmap_piece(i);
	CK(cuMemAddressFree(base, npieces * PIECE));
	return 0;
}
