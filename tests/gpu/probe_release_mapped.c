/* Where does a give-back's driver time go, and can part of it move away from the gather? The
 * heap gives a free 2 MiB piece back as unmap + release (~20 + ~16 us, PROBE.md (d)); a large
 * request at the PyTorch benchmark's peak gives ~1500 of them back while the GPU is idle. The
 * driver frees physical memory once a handle is both released and unmapped, in either order. If
 * a release under a live mapping only drops a reference, a piece released right after it is
 * mapped (the handle found again with cuMemRetainAllocationHandle when needed) is later given
 * back with one unmap. This times both orders over the same pieces, alternately, and checks the
 * device's free memory and the bytes at each step. Not a gpu-check row (PROBE.md (l)).
 *
 * nvcc -O2 -cudart none -Xcompiler -std=gnu11 tests/gpu/probe_release_mapped.c -o /tmp/prm -lcuda */
#include "probe_driver.h"

#define MIB (1ull << 20)
#define N 1536 /* pieces: about what the costliest gather gives back */

static CUmemAllocationProp prop;
static CUmemAccessDesc rw;
static CUmemGenericAllocationHandle h[N];
static size_t gran;

static size_t free_mib(void)
{
	size_t f = 0, t = 0;

	CK(cuMemGetInfo(&f, &t));
	return f / MIB;
}

/* Make the N pieces, map them side by side at va and grant the range: what a cut leaves. */
static double make(CUdeviceptr va)
{
	double t0 = now_ms();

	for (int i = 0; i < N; i++)
		CK(cuMemCreate(&h[i], gran, &prop, 0));
	for (int i = 0; i < N; i++)
		CK(cuMemMap(va + i * gran, gran, 0, h[i], 0));
	CK(cuMemSetAccess(va, N * gran, &rw, 1));
	return now_ms() - t0;
}

/* Each piece holds its index's low byte; false on the first piece that does not. */
static int bytes_hold(CUdeviceptr va)
{
	unsigned char b;

	for (int i = 0; i < N; i += 97) {
		CK(cuMemcpyDtoH(&b, va + i * gran + gran / 2, 1));
		if (b != (unsigned char)i)
			return 0;
	}
	return 1;
}

static void fill(CUdeviceptr va)
{
	for (int i = 0; i < N; i++)
		CK(cuMemsetD8(va + i * gran, (unsigned char)i, gran));
	CK(cuCtxSynchronize());
}

/* Unmap every piece: the first half was moved to other, the rest is still at va. */
static void unmap_all(CUdeviceptr va, CUdeviceptr other)
{
	for (int i = 0; i < N / 2; i++)
		CK(cuMemUnmap(other + i * gran, gran));
	for (int i = N / 2; i < N; i++)
		CK(cuMemUnmap(va + i * gran, gran));
}

static double per_piece_us(double ms)
{
	return ms * 1e3 / N;
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr va, other;
	double t0, t_make, t_a, t_b, t_c, t_d;

	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	gran = probe_device_memory(dev, &prop, &rw);
	CK(cuMemAddressReserve(&va, N * gran, 0, 0, 0));
	CK(cuMemAddressReserve(&other, N * gran, 0, 0, 0));
	printf("pieces %d of %zu MiB; free %zu MiB before\n", N, (size_t)(gran / MIB), free_mib());

	for (int round = 0; round < 3; round++) {
		size_t before, mapped, after;

		/* A: today's order, unmap then release. */
		before = free_mib();
		t_make = make(va);
		fill(va);
		mapped = free_mib();
		/* Today's move of half the pieces, for the move below (unmap, map, grant). */
		t0 = now_ms();
		for (int i = 0; i < N / 2; i++) {
			CK(cuMemUnmap(va + i * gran, gran));
			CK(cuMemMap(other + i * gran, gran, 0, h[i], 0));
		}
		CK(cuMemSetAccess(other, (N / 2) * gran, &rw, 1));
		t_c = now_ms() - t0;
		t0 = now_ms();
		unmap_all(va, other);
		t_a = now_ms() - t0;
		t0 = now_ms();
		for (int i = 0; i < N; i++)
			CK(cuMemRelease(h[i]));
		t_b = now_ms() - t0;
		after = free_mib();
		printf("RESULT round %d unmap-then-release: make %.1f us, unmap %.1f us, release %.1f "
		       "us a piece (%.1f); move (unmap, map, grant) %.1f us; free MiB %zu -> %zu -> "
		       "%zu\n", round, per_piece_us(t_make), per_piece_us(t_a), per_piece_us(t_b),
		       per_piece_us(t_a + t_b), t_c * 1e3 / (N / 2), before, mapped, after);

		/* B: release right after the mapping, later only unmap. */
		before = free_mib();
		t_make = make(va);
		t0 = now_ms();
		for (int i = 0; i < N; i++)
			CK(cuMemRelease(h[i]));
		t_a = now_ms() - t0;
		fill(va);
		mapped = free_mib();
		int held = bytes_hold(va);
		/* A move of a released piece: its handle found again from the address, the piece
		 * unmapped and mapped elsewhere, the retained reference dropped. Half the pieces. */
		t0 = now_ms();
		for (int i = 0; i < N / 2; i++) {
			CUmemGenericAllocationHandle r;

			CK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + i * gran)));
			CK(cuMemUnmap(va + i * gran, gran));
			CK(cuMemMap(other + i * gran, gran, 0, r, 0));
			CK(cuMemRelease(r));
		}
		CK(cuMemSetAccess(other, (N / 2) * gran, &rw, 1));
		t_c = now_ms() - t0;
		unsigned char b = 0;
		CK(cuMemcpyDtoH(&b, other + 5 * gran, 1));
		int moved_held = b == 5;
		t0 = now_ms();
		unmap_all(va, other);
		t_d = now_ms() - t0;
		after = free_mib();
		printf("RESULT round %d release-then-unmap: make %.1f us, release while mapped %.1f "
		       "us, unmap (frees) %.1f us a piece (%.1f); move of a released piece (retain, "
		       "unmap, map, release, grant) %.1f us; bytes %s, moved bytes %s; free MiB %zu "
		       "-> %zu -> %zu\n", round, per_piece_us(t_make), per_piece_us(t_a),
		       per_piece_us(t_d), per_piece_us(t_a + t_d), t_c * 1e3 / (N / 2),
		       held ? "held" : "LOST", moved_held ? "held" : "LOST", before, mapped, after);
	}
	CK(cuMemAddressFree(va, N * gran));
	CK(cuMemAddressFree(other, N * gran));
	return 0;
}
