/* A program that grows one reservation with its own VMM handles, as PyTorch's expandable segments
 * do (20 MiB pieces mapped one after another, cuMemSetAccess per new piece), and goes through an
 * in-process sleep/wake of the shim twice: it grows after the wake, exports a re-created handle
 * and imports it again (mapped twice, it stays resident), retains and releases handles (also
 * while asleep), shrinks (unmap + release of the last pieces) and checks every byte after each
 * step. At the end every byte must be back on the device, which only happens when each final
 * cuMemRelease reached the driver with the right handle.
 * NOSLEEP=1 runs the same steps without the sleeps, NORETAIN=1 without the retains (simdev's
 * driver keeps no reference count: natively a retain's release drops the handle).
 * Prints "prog_app_vmm: ok". */
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include "prog_common.h"

#define PIECE ((size_t)20 << 20)
#define MAX_PIECES 12
/* Device memory the driver may take for itself meanwhile (the shim's copy streams) on a real
 * GPU; simdev takes none. A lost or leaked piece (20 MiB) is well beyond it. */
#define SLACK ((size_t)8 << 20)

static CUmemGenericAllocationHandle h[MAX_PIECES];
static int dropped[MAX_PIECES];  /* released right after mapping (NCCL style): mapped only */
static int npieces;
static CUdeviceptr va, va_imp;
static unsigned char *buf;

static const CUmemAllocationProp prop = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
	.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
};

static size_t dev_free(void)
{
	size_t fr = 0, total = 0;

	CHECK_CU(cuMemGetInfo(&fr, &total));
	return fr;
}

static void grow(int n)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

	for (; npieces < n; npieces++) {
		CUdeviceptr at = va + npieces * PIECE;

		CHECK_CU(cuMemCreate(&h[npieces], PIECE, &prop, 0));
		CHECK_CU(cuMemMap(at, PIECE, 0, h[npieces], 0));
		CHECK_CU(cuMemSetAccess(at, PIECE, &acc, 1));
		pattern_fill(buf, PIECE, 100 + npieces);
		CHECK_CU(cuMemcpyHtoD(at, buf, PIECE));
		dropped[npieces] = npieces % 4 == 3;
		if (dropped[npieces])
			CHECK_CU(cuMemRelease(h[npieces]));
	}
}

static void shrink(int n)
{
	while (npieces > n) {
		npieces--;
		CHECK_CU(cuMemUnmap(va + npieces * PIECE, PIECE));
		if (!dropped[npieces])
			CHECK_CU(cuMemRelease(h[npieces]));
	}
}

static void check_all(const char *when)
{
	for (int i = 0; i < npieces; i++) {
		CHECK_CU(cuMemcpyDtoH(buf, va + i * PIECE, PIECE));
		if (pattern_check(buf, PIECE, 100 + i))
			FAIL("%s: piece %d changed", when, i);
	}
}

/* Piece 1, exported and imported again, seen through the imported mapping. */
static void check_imported(const char *when)
{
	CHECK_CU(cuMemcpyDtoH(buf, va_imp, PIECE));
	if (pattern_check(buf, PIECE, 101))
		FAIL("%s: piece 1 through the imported mapping differs", when);
}

/* cuMemRetainAllocationHandle + cuMemRelease: the program's value comes back, and the release
 * only drops the reference the retain took. */
static void retain_release(int i)
{
	CUmemGenericAllocationHandle r;

	if (getenv("NORETAIN"))
		return;
	CHECK_CU(cuMemRetainAllocationHandle(&r, (void *)(va + i * PIECE + 4096)));
	if (!dropped[i] && r != h[i])
		FAIL("retain of piece %d answered 0x%llx, the program holds 0x%llx", i,
		     (unsigned long long)r, (unsigned long long)h[i]);
	CHECK_CU(cuMemRelease(r));
}

static void sleep_wake(int (*zz)(const char *, int), int (*ww)(const char *),
		       const char *(*why)(void), size_t releasable)
{
	CUmemAllocationProp back;
	size_t before = dev_free(), asleep;

	if (zz(NULL, 0))
		FAIL("sleep: %s", why());
	asleep = dev_free();
	if (asleep + SLACK < before + releasable)
		FAIL("sleep gave back %zu bytes, the program's handles alone are %zu",
		     asleep - before, releasable);
	/* While asleep the handles have no driver handle behind them: these are answered by the
	 * shim, and must not fail. */
	memset(&back, 0, sizeof(back));
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&back, h[0]));
	if (back.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    back.location.id != 0)
		FAIL("properties of an asleep handle differ");
	retain_release(0);
	if (ww(NULL))
		FAIL("wake: %s", why());
	if (dev_free() + SLACK < before || dev_free() > before + SLACK)
		FAIL("after wake %zu bytes free, %zu before the sleep", dev_free(), before);
}

int main(void)
{
	int (*zz)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_DEFAULT,
									   "vmmshim_sleep");
	int (*ww)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_wake");
	const char *(*why)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmmshim_last_error");
	int sleeping = !getenv("NOSLEEP");
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle imp;
	CUmemAllocationProp back;
	size_t free0;
	CUdeviceptr small;
	CUcontext ctx;
	int fd = -1;

	if (sleeping && (!zz || !ww || !why))
		FAIL("no vmmshim_sleep/vmmshim_wake: not running under the shim");
	buf = malloc(PIECE);
	if (!buf)
		FAIL("no host memory");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuMemAlloc(&small, 4096));   /* the program's other memory, served by the core */
	free0 = dev_free();
	CHECK_CU(cuMemAddressReserve(&va, MAX_PIECES * PIECE, 0, 0, 0));

	grow(6);
	retain_release(2);
	check_all("grown to 6");
	if (sleeping)
		sleep_wake(zz, ww, why, 6 * PIECE);
	check_all("after the first wake");

	grow(9);   /* new handles after the wake */
	check_all("grown to 9");
	/* A re-created handle is of the program's kind: it can be exported. */
	CHECK_CU(cuMemExportToShareableHandle(&fd, h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					      0));
	/* ... and imported again (as a peer process would), mapped a second time. */
	CHECK_CU(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CHECK_CU(cuMemAddressReserve(&va_imp, PIECE, 0, 0, 0));
	CHECK_CU(cuMemMap(va_imp, PIECE, 0, imp, 0));
	CHECK_CU(cuMemSetAccess(va_imp, PIECE, &acc, 1));
	check_imported("imported");
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&back, h[4]));
	if (back.requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		FAIL("a handle made after the wake lost its handle type");
	retain_release(1);
	retain_release(7);

	shrink(5);
	check_all("shrunk to 5");
	/* The exported piece 1 stays resident; the other four go. */
	if (sleeping)
		sleep_wake(zz, ww, why, 4 * PIECE);
	check_all("after the second wake");
	check_imported("imported, after the second wake");
	grow(7);
	check_all("grown to 7 again");

	CHECK_CU(cuMemUnmap(va_imp, PIECE));
	CHECK_CU(cuMemRelease(imp));
	CHECK_CU(cuMemAddressFree(va_imp, PIECE));
	shrink(0);
	CHECK_CU(cuMemAddressFree(va, MAX_PIECES * PIECE));
	if (dev_free() + SLACK < free0 || dev_free() > free0 + SLACK)
		FAIL("%zu bytes free at the end, %zu at the start: handles leaked", dev_free(),
		     free0);
	CHECK_CU(cuMemFree(small));
	free(buf);
	printf("prog_app_vmm: ok\n");
	return 0;
}
