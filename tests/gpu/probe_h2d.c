/* Probe: where a wake loses ~10 % against the pinned-copy anchor on the H200 (wake 0.90x at 16
 * and 64 GiB while sleep reaches 0.96x). A wake copies host backup -> VMM memory; the anchor copies
 * cuMemAllocHost memory -> cuMemAlloc memory. This measures each half of that difference:
 *   source: cuMemAllocHost | mmap + MADV_HUGEPAGE + cuMemHostRegister | mmap (4 KiB) + register
 *   target: cuMemAlloc | one VMM handle | 2 MiB VMM handles
 * as one cuMemcpyHtoDAsync of SIZE and in 256 MiB pieces, H2D and D2H, best of 3.
 * Also prints the machine's THP mode and how much of the huge-page buffer got huge pages.
 * Prints "PROBE key=value" lines. Build: nvcc -cudart none probe_h2d.c -lcuda
 * Usage: probe_h2d [GiB]   (default 4) */
#define _GNU_SOURCE
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s -> %d line %d\n", #x, r_, __LINE__); exit(1); } } while (0)
#define PIECE (256ull << 20)

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Best GB/s of 3 copies of size bytes, whole or in PIECE pieces. */
static double rate(CUstream s, CUdeviceptr d, void *h, size_t size, int h2d, int pieces)
{
	double best = 0;

	for (int k = 0; k < 3; k++) {
		double t0 = now_s();

		for (size_t off = 0; off < size; off += pieces ? PIECE : size) {
			size_t n = pieces && size - off > PIECE ? PIECE : size - off;

			if (h2d)
				CK(cuMemcpyHtoDAsync(d + off, (char *)h + off, n, s));
			else
				CK(cuMemcpyDtoHAsync((char *)h + off, d + off, n, s));
		}
		CK(cuStreamSynchronize(s));
		double gbs = size / (now_s() - t0) / 1e9;
		if (gbs > best)
			best = gbs;
	}
	return best;
}

static void *host_mmap(size_t size, int huge)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("FAIL mmap\n");
		exit(1);
	}
	madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	memset(p, 1, size);
	CK(cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE));
	return p;
}

static long anon_huge_kb(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static CUdeviceptr vmm_alloc(size_t size, size_t piece, CUmemGenericAllocationHandle *hs,
			     size_t *nh)
{
	CUmemAllocationProp prop = { 0 };
	CUmemAccessDesc acc = { 0 };
	CUdeviceptr va;

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	CK(cuMemAddressReserve(&va, size, 0, 0, 0));
	*nh = 0;
	for (size_t off = 0; off < size; off += piece) {
		CK(cuMemCreate(&hs[*nh], piece, &prop, 0));
		CK(cuMemMap(va + off, piece, 0, hs[*nh], 0));
		(*nh)++;
	}
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(cuMemSetAccess(va, size, &acc, 1));
	return va;
}

static void vmm_free(CUdeviceptr va, size_t size, size_t piece, CUmemGenericAllocationHandle *hs,
		     size_t nh)
{
	CK(cuMemUnmap(va, size));
	for (size_t i = 0; i < nh; i++)
		CK(cuMemRelease(hs[i]));
	(void)piece;
	CK(cuMemAddressFree(va, size));
}

int main(int argc, char **argv)
{
	size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 4, size = gib << 30;
	const char *src_names[3] = { "allochost", "register_thp", "register_4k" };
	const char *dst_names[3] = { "cumemalloc", "vmm_one", "vmm_2m" };
	CUmemGenericAllocationHandle *hs = malloc((size >> 21) * sizeof(*hs));
	void *src[3];
	CUcontext ctx;
	CUstream s;
	char thp[128] = "?";
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");

	if (f && fgets(thp, sizeof(thp), f))
		thp[strcspn(thp, "\n")] = 0;
	if (f)
		fclose(f);
	printf("PROBE thp_enabled=\"%s\"\n", thp);
	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));
	CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CK(cuMemAllocHost(&src[0], size));
	memset(src[0], 1, size);
	long before = anon_huge_kb();
	src[1] = host_mmap(size, 1);
	printf("PROBE register_thp_anon_huge_mib=%ld of %zu\n",
	       (anon_huge_kb() - before) / 1024, size >> 20);
	src[2] = host_mmap(size, 0);
	for (int di = 0; di < 3; di++) {
		CUdeviceptr d;
		size_t nh = 0, piece = di == 1 ? size : (2u << 20);

		if (di == 0)
			CK(cuMemAlloc(&d, size));
		else
			d = vmm_alloc(size, piece, hs, &nh);
		for (int si = 0; si < 3; si++)
			for (int pieces = 0; pieces < 2; pieces++)
				printf("PROBE %s->%s%s h2d=%.1f d2h=%.1f\n", src_names[si],
				       dst_names[di], pieces ? "_256m" : "",
				       rate(s, d, src[si], size, 1, pieces),
				       rate(s, d, src[si], size, 0, pieces));
		if (di == 0)
			CK(cuMemFree(d));
		else
			vmm_free(d, size, piece, hs, nh);
	}
	printf("PROBE done\n");
	return 0;
}
