/* Probe: what a discard sleep and wake of many 2 MiB handles could cost on the real driver, for
 * the heap's "<= 0.2 s at 128 GiB with --discard" goal. Measures, over N handles mapped side by
 * side in one reservation:
 *  - whether one cuMemUnmap may span several whole mappings (and then really unmaps all of them:
 *    each address can be mapped again), and what it costs against one call per handle;
 *  - cuMemUnmap, cuMemRelease and cuMemCreate+cuMemMap spread over 1, 4 and 8 threads (does
 *    the driver let them run side by side?);
 *  - whether a range that cuts a mapping fails without unmapping anything.
 * Usage: probe_unmap [N]   (default 4096 handles = 8 GiB). Build:
 *   cc -O2 -I/usr/local/cuda/include probe_unmap.c -o probe_unmap -lcuda -lpthread */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MIB ((size_t)1 << 20)
#define CHUNK (2 * MIB)

static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemGenericAllocationHandle *hs;
static CUdeviceptr base;
static size_t n;

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static int ok(CUresult r, const char *what)
{
	if (r == CUDA_SUCCESS)
		return 1;
	const char *s = NULL;

	cuGetErrorName(r, &s);
	printf("  %s: %s\n", what, s ? s : "?");
	return 0;
}

enum op { CREATE_MAP, UNMAP, RELEASE };

struct job {
	enum op op;
	size_t from, to;
	int fails;
};

static void *work(void *arg)
{
	struct job *j = arg;

	cuCtxSetCurrent(ctx);
	for (size_t i = j->from; i < j->to; i++) {
		CUresult r = CUDA_SUCCESS;

		if (j->op == CREATE_MAP) {
			r = cuMemCreate(&hs[i], CHUNK, &prop, 0);
			if (r == CUDA_SUCCESS)
				r = cuMemMap(base + i * CHUNK, CHUNK, 0, hs[i], 0);
		} else if (j->op == UNMAP) {
			r = cuMemUnmap(base + i * CHUNK, CHUNK);
		} else {
			r = cuMemRelease(hs[i]);
		}
		j->fails += r != CUDA_SUCCESS;
	}
	return NULL;
}

/* Runs op over all n handles in nt threads; returns the seconds taken. */
static double run(enum op op, int nt)
{
	pthread_t t[16];
	struct job j[16];
	double t0 = now();
	int fails = 0;

	for (int k = 0; k < nt; k++) {
		j[k] = (struct job){ op, n * k / nt, n * (k + 1) / nt, 0 };
		pthread_create(&t[k], NULL, work, &j[k]);
	}
	for (int k = 0; k < nt; k++) {
		pthread_join(t[k], NULL);
		fails += j[k].fails;
	}
	if (fails)
		printf("  %d call(s) failed\n", fails);
	return now() - t0;
}

static int grant(void)
{
	CUmemAccessDesc a = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

	return ok(cuMemSetAccess(base, n * CHUNK, &a, 1), "cuMemSetAccess");
}

int main(int argc, char **argv)
{
	CUdevice dev;
	double t;

	n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
	if (!ok(cuInit(0), "cuInit") || !ok(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
	    !ok(cuDevicePrimaryCtxRetain(&ctx, dev), "retain") || !ok(cuCtxSetCurrent(ctx), "set"))
		return 1;
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	hs = calloc(n, sizeof(*hs));
	if (!hs || !ok(cuMemAddressReserve(&base, n * CHUNK, 0, 0, 0), "reserve"))
		return 1;
	printf("PROBE_UNMAP %zu handles of 2 MiB (%zu MiB)\n", n, n * CHUNK / MIB);

	/* 1. A range that cuts a mapping: must fail and unmap nothing. */
	t = run(CREATE_MAP, 1);
	printf("create+map 1 thread: %.1f ms (%.2f us each)\n", t * 1e3, t * 1e6 / n);
	grant();
	CUresult r = cuMemUnmap(base, CHUNK + MIB);
	const char *rn = NULL;

	cuGetErrorName(r, &rn);
	printf("unmap of 1.5 mappings: %s; first still mapped: %s\n", rn ? rn : "?",
	       cuMemMap(base, CHUNK, 0, hs[0], 0) == CUDA_SUCCESS ? "NO (it could be mapped again)"
								   : "yes");

	/* 2. One call over two whole mappings, then over all of them. */
	r = cuMemUnmap(base, 2 * CHUNK);
	cuGetErrorName(r, &rn);
	printf("unmap of 2 whole mappings in one call: %s", rn ? rn : "?");
	if (r == CUDA_SUCCESS) {
		int again = cuMemMap(base, CHUNK, 0, hs[0], 0) == CUDA_SUCCESS &&
			    cuMemMap(base + CHUNK, CHUNK, 0, hs[1], 0) == CUDA_SUCCESS;

		printf("; both could be mapped again: %s\n", again ? "yes" : "NO");
		t = now();
		r = cuMemUnmap(base, n * CHUNK);
		t = now() - t;
		cuGetErrorName(r, &rn);
		printf("unmap of all %zu mappings in one call: %s, %.1f ms (%.2f us per handle)\n", n,
		       rn ? rn : "?", t * 1e3, t * 1e6 / n);
		if (r == CUDA_SUCCESS) {
			size_t again_n = 0;

			for (size_t i = 0; i < n; i++)
				again_n += cuMemMap(base + i * CHUNK, CHUNK, 0, hs[i], 0) == CUDA_SUCCESS;
			printf("  mapped again afterwards: %zu of %zu\n", again_n, n);
		}
	} else {
		printf("\n");
	}

	/* 3. Per handle, 1/4/8 threads: unmap, release, create+map. */
	int threads[] = { 1, 4, 8 };

	for (int k = 0; k < 3; k++) {
		int nt = threads[k];
		double tu = run(UNMAP, nt), tr = run(RELEASE, nt), tc = run(CREATE_MAP, nt);

		printf("threads %d: unmap %.1f ms (%.2f us each), release %.1f ms (%.2f), "
		       "create+map %.1f ms (%.2f)\n", nt, tu * 1e3, tu * 1e6 / n, tr * 1e3,
		       tr * 1e6 / n, tc * 1e3, tc * 1e6 / n);
	}
	t = now();
	grant();
	t = now() - t;
	printf("one cuMemSetAccess over all: %.1f ms (%.2f us per handle)\n", t * 1e3, t * 1e6 / n);
	run(UNMAP, 4);
	run(RELEASE, 4);
	cuMemAddressFree(base, n * CHUNK);
	printf("PROBE_UNMAP done\n");
	return 0;
}
