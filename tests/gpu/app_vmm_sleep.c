/* The program's own VMM mappings (as PyTorch expandable segments makes them) across an in-process
 * sleep/wake of the shim: grow after wake, export, retain/release, unmap and release everything. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("FAIL %s -> %d line %d\n", #x, r_, __LINE__); return 1; } } while (0)
int main(void)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
		.location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
		.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 }, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUcontext ctx; CUdeviceptr va; size_t g = 2u << 20, seg = 10 * g;
	CUmemGenericAllocationHandle h[8];
	int (*zz)(const char*, int) = (int (*)(const char*, int))dlsym(RTLD_DEFAULT, "vmmshim_sleep");
	int (*ww)(const char*) = (int (*)(const char*))dlsym(RTLD_DEFAULT, "vmmshim_wake");
	const char *(*le)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmmshim_last_error");
	CK(cuInit(0)); CK(cuDevicePrimaryCtxRetain(&ctx, 0)); CK(cuCtxSetCurrent(ctx));
	CUdeviceptr dummy; CK(cuMemAlloc(&dummy, 4096)); /* starts the runtime */
	CK(cuMemAddressReserve(&va, 8 * seg, 0, 0, 0));
	char *buf = malloc(seg);
	for (int i = 0; i < 4; i++) {
		CK(cuMemCreate(&h[i], seg, &prop, 0));
		CK(cuMemMap(va + i * seg, seg, 0, h[i], 0));
		CK(cuMemSetAccess(va + i * seg, seg, &acc, 1));
		memset(buf, 'a' + i, seg); CK(cuMemcpyHtoD(va + i * seg, buf, seg));
	}
	if (!zz) { printf("no api\n"); return 1; }
	if (!getenv("NOSLEEP") && zz(NULL, 0)) { printf("sleep failed %s\n", le()); return 1; }
	if (!getenv("NOSLEEP") && ww(NULL)) { printf("wake failed %s\n", le()); return 1; }
	for (int i = 4; i < 6; i++) {
		CK(cuMemCreate(&h[i], seg, &prop, 0));
		CK(cuMemMap(va + i * seg, seg, 0, h[i], 0));
		CK(cuMemSetAccess(va + i * seg, seg, &acc, 1));
		memset(buf, 'a' + i, seg); CK(cuMemcpyHtoD(va + i * seg, buf, seg));
	}
	for (int i = 0; i < 6; i++) { CK(cuMemcpyDtoH(buf, va + i * seg, seg)); if (buf[0] != 'a' + i || buf[seg-1] != 'a' + i) { printf("data %d bad\n", i); return 1; } }
	{ int fd; CUresult e = cuMemExportToShareableHandle(&fd, h[1], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0); printf("export -> %d\n", e); }
	CUmemGenericAllocationHandle r; CK(cuMemRetainAllocationHandle(&r, (void*)(va + seg))); CK(cuMemRelease(r));
	for (int i = 5; i >= 0; i--) { CK(cuMemUnmap(va + i * seg, seg)); CK(cuMemRelease(h[i])); }
	CK(cuMemAddressFree(va, 8 * seg));
	printf("ok\n"); return 0;
}
