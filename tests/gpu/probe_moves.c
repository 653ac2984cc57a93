/* What moving free 2 MiB pieces costs on the real driver, and what the alternatives cost: the
 * heap serves a large request from scattered free pieces by unmapping each and mapping it into
 * the request's range, one access grant over the range (core/heap_grow.c), and on the H200 the
 * largest requests of the PyTorch benchmark move ~1800 pieces at once. probe_unmap.c already
 * showed that unmap, release and create+map run no faster on several threads and that one unmap
 * may span whole mappings; this one times a move's parts together, the access grant (the largest
 * part) per piece, per run and again, a whole move spread over 2, 4 and 8 threads (the grant on
 * threads is what probe_unmap did not try), and releasing the pieces for one new handle instead.
 *
 * For N pieces (argument, default 512), each phase timed on its own:
 *   - create, map, one access grant over the range; unmap one by one;
 *   - a move (unmap at A, map at B, one grant over B), then the same move spread over 2, 4 and
 *     8 threads, each a slice of the pieces;
 *   - access granted per piece and in runs of 64 against one call; granted again where it is;
 *   - releasing the pieces and making one handle instead; moving one handle of the same size.
 * Prints one line per phase. Results: tests/gpu/PROBE.md.
 *
 * Build: cc -O2 -std=gnu11 -I$CUDA/include probe_moves.c -o probe_moves -lcuda -lpthread
 * Usage: probe_moves [N] */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x)                                                                              \
	do {                                                                                  \
		CUresult r_ = (x);                                                            \
		if (r_) {                                                                     \
			printf("%s: error %d (line %d)\n", #x, r_, __LINE__);                 \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

#define PIECE (2ul << 20)

static CUcontext ctx;
static CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
static CUmemAccessDesc rw = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void map_all(CUdeviceptr va, const CUmemGenericAllocationHandle *h, int n)
{
	for (int i = 0; i < n; i++)
		CHECK(cuMemMap(va + i * PIECE, PIECE, 0, h[i], 0));
}

static void unmap_each(CUdeviceptr va, int n)
{
	for (int i = 0; i < n; i++)
		CHECK(cuMemUnmap(va + i * PIECE, PIECE));
}

/* One thread's slice of a move: pieces [lo, hi) from A to B, then access over its part of B. */
struct slice {
	CUdeviceptr from, to;
	const CUmemGenericAllocationHandle *h;
	int lo, hi;
};

static void *move_slice(void *arg)
{
	struct slice *s = arg;
	int n = s->hi - s->lo;

	CHECK(cuCtxSetCurrent(ctx));
	unmap_each(s->from + s->lo * PIECE, n);
	map_all(s->to + s->lo * PIECE, s->h + s->lo, n);
	CHECK(cuMemSetAccess(s->to + s->lo * PIECE, n * PIECE, &rw, 1));
	return NULL;
}

/* Move all n pieces from `from` to `to` on `threads` threads; returns the wall time in ms. */
static double move_threaded(CUdeviceptr from, CUdeviceptr to, const CUmemGenericAllocationHandle *h,
			    int n, int threads)
{
	pthread_t t[8];
	struct slice s[8];
	double t0 = now_ms();

	for (int i = 0; i < threads; i++) {
		s[i] = (struct slice){ from, to, h, n * i / threads, n * (i + 1) / threads };
		if (pthread_create(&t[i], NULL, move_slice, &s[i])) {
			printf("cannot start a thread\n");
			exit(1);
		}
	}
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	return now_ms() - t0;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 512;
	CUmemGenericAllocationHandle *h, one;
	CUdeviceptr a, b;
	CUdevice dev;
	double t0, t1, t2;

	if (n < 8 || n > 65536) {
		fprintf(stderr, "usage: probe_moves [N], 8 <= N <= 65536\n");
		return 2;
	}
	h = calloc(n, sizeof(*h));
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemAddressReserve(&a, PIECE * n, 0, 0, 0));
	CHECK(cuMemAddressReserve(&b, PIECE * n, 0, 0, 0));

	t0 = now_ms();
	for (int i = 0; i < n; i++)
		CHECK(cuMemCreate(&h[i], PIECE, &prop, 0));
	printf("N=%d pieces of 2 MiB: create one by one %.2f ms\n", n, now_ms() - t0);
	t0 = now_ms();
	map_all(a, h, n);
	t1 = now_ms();
	CHECK(cuMemSetAccess(a, PIECE * n, &rw, 1));
	printf("map one by one %.2f ms; first access grant, one call %.2f ms\n", t1 - t0,
	       now_ms() - t1);
	t0 = now_ms();
	unmap_each(a, n);
	printf("unmap one by one %.2f ms\n", now_ms() - t0);

	map_all(a, h, n);
	CHECK(cuMemSetAccess(a, PIECE * n, &rw, 1));
	t0 = now_ms();
	unmap_each(a, n);
	t1 = now_ms();
	map_all(b, h, n);
	t2 = now_ms();
	CHECK(cuMemSetAccess(b, PIECE * n, &rw, 1));
	printf("move, one thread: unmap %.2f + map %.2f + access %.2f = %.2f ms (%.1f us a piece)\n",
	       t1 - t0, t2 - t1, now_ms() - t2, now_ms() - t0, (now_ms() - t0) * 1e3 / n);
	/* Back and forth between the two ranges, on more threads each time. */
	for (int threads = 2, at_b = 1; threads <= 8; threads *= 2, at_b = !at_b) {
		double ms = move_threaded(at_b ? b : a, at_b ? a : b, h, n, threads);

		printf("move, %d threads: %.2f ms (%.1f us a piece)\n", threads, ms, ms * 1e3 / n);
		if (threads == 8 && at_b) { /* leave them at b for what follows */
			unmap_each(a, n);
			map_all(b, h, n);
		}
	}

	unmap_each(b, n);
	map_all(b, h, n);
	t0 = now_ms();
	for (int i = 0; i < n; i += 64)
		CHECK(cuMemSetAccess(b + i * PIECE, PIECE * (n - i < 64 ? n - i : 64), &rw, 1));
	printf("access in runs of 64 pieces: %.2f ms\n", now_ms() - t0);
	unmap_each(b, n);
	map_all(b, h, n);
	t0 = now_ms();
	for (int i = 0; i < n; i++)
		CHECK(cuMemSetAccess(b + i * PIECE, PIECE, &rw, 1));
	printf("access per piece: %.2f ms\n", now_ms() - t0);
	t0 = now_ms();
	CHECK(cuMemSetAccess(b, PIECE * n, &rw, 1));
	printf("access granted again where it is: %.2f ms\n", now_ms() - t0);

	/* Instead of moving them: release the pieces and make one handle. */
	t0 = now_ms();
	unmap_each(b, n);
	t1 = now_ms();
	for (int i = 0; i < n; i++)
		CHECK(cuMemRelease(h[i]));
	t2 = now_ms();
	CHECK(cuMemCreate(&one, PIECE * n, &prop, 0));
	printf("release instead: unmap %.2f + release %.2f + create one handle %.2f ms", t1 - t0,
	       t2 - t1, now_ms() - t2);
	t0 = now_ms();
	CHECK(cuMemMap(b, PIECE * n, 0, one, 0));
	CHECK(cuMemSetAccess(b, PIECE * n, &rw, 1));
	printf(" + map and access %.2f ms\n", now_ms() - t0);
	t0 = now_ms();
	CHECK(cuMemUnmap(b, PIECE * n));
	CHECK(cuMemMap(a, PIECE * n, 0, one, 0));
	CHECK(cuMemSetAccess(a, PIECE * n, &rw, 1));
	printf("move of one handle of the same size: %.3f ms\n", now_ms() - t0);
	CHECK(cuMemUnmap(a, PIECE * n));
	CHECK(cuMemRelease(one));
	return 0;
}
