/* NCCL's user-buffer registration (ncclCommRegister) in two processes, with the driver API only:
 * for a 3 MiB and a 20 MiB + 100 KiB buffer, cuMemGetAddressRange, cuMemRetainAllocationHandle
 * at the base, cuMemGetAllocationPropertiesFromHandle, cuMemExportToShareableHandle (a POSIX
 * descriptor); a child (fork + exec) imports the handle, maps the whole buffer from offset 0,
 * checks the parent's bytes and writes its own; the parent checks it sees them and that
 * allocations made after the buffer kept theirs. Natively the buffers are the program's own VMM
 * memory (cuMemCreate + cuMemMap: what NCCL registers natively through handles); under the shim
 * (vmmshim_sleep is found) they are cuMemAlloc'd, so the shim's memory goes through the same
 * calls. Prints "RESULT ..." lines that must match between the two; exit 0 when all held.
 * Build: nvcc -cudart none nccl_register.c -lcuda -ldl */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CK(x)                                                                         \
	do {                                                                          \
		CUresult r_ = (x);                                                    \
		if (r_) {                                                             \
			printf("FAIL %s -> %d (line %d)\n", #x, (int)r_, __LINE__);  \
			fflush(stdout);                                               \
			exit(2);                                                      \
		}                                                                     \
	} while (0)

#define NNEIGH 8
#define NEIGH (192u << 10)

static size_t gran;
static int (*set_tag)(const char *);   /* the shim's, when under it */

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (unsigned char)x;
	}
}

static void put(CUdeviceptr d, size_t n, uint32_t seed)
{
	unsigned char *h = malloc(n);

	fill(h, n, seed);
	CK(cuMemcpyHtoD(d, h, n));
	free(h);
}

static int holds(CUdeviceptr d, size_t n, uint32_t seed)
{
	unsigned char *h = malloc(n), *w = malloc(n);
	int ok;

	CK(cuMemcpyDtoH(h, d, n));
	fill(w, n, seed);
	ok = !memcmp(h, w, n);
	free(h);
	free(w);
	return ok;
}

static void init(void)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	CUcontext ctx;

	CK(cuInit(0));
	CK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CK(cuCtxSetCurrent(ctx));
	CK(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

static size_t rounded(size_t n)
{
	return (n + gran - 1) / gran * gran;
}

static void map_rw(CUdeviceptr va, size_t n)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

	CK(cuMemSetAccess(va, n, &acc, 1));
}

/* The program's own VMM buffer (native), or cuMemAlloc (under the shim). */
static CUdeviceptr alloc(size_t n, int own_vmm)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	CUmemGenericAllocationHandle h;
	CUdeviceptr d;

	if (!own_vmm) {
		CK(cuMemAlloc(&d, n));
		return d;
	}
	CK(cuMemCreate(&h, rounded(n), &p, 0));
	CK(cuMemAddressReserve(&d, rounded(n), 0, 0, 0));
	CK(cuMemMap(d, rounded(n), 0, h, 0));
	CK(cuMemRelease(h));
	map_rw(d, rounded(n));
	return d;
}

static int child(int fd, size_t size, uint32_t seed)
{
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	int ok;

	init();
	CK(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd,
					  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CK(cuMemAddressReserve(&va, rounded(size), 0, 0, 0));
	CK(cuMemMap(va, rounded(size), 0, h, 0));
	map_rw(va, rounded(size));
	ok = holds(va, size, seed);
	put(va, size, seed + 1);
	CK(cuMemUnmap(va, rounded(size)));
	CK(cuMemAddressFree(va, rounded(size)));
	CK(cuMemRelease(h));
	return ok ? 0 : 3;
}

static void one(const char *self, size_t size, uint32_t seed, int own_vmm, const char *tag)
{
	CUdeviceptr buf, neigh[NNEIGH], base;
	CUmemGenericAllocationHandle h;
	CUmemAllocationProp prop;
	char a1[24], a2[24], a3[24];
	int fd = -1, st, ok = 1;
	size_t got;
	pid_t pid;

	/* Under the shim, in a tag of its own: fresh memory, so the buffer starts a granule and
	 * the neighbours share its last one (a size that is not whole granules may otherwise start
	 * inside one, and the shim refuses to retain it). */
	if (set_tag)
		set_tag(tag);
	buf = alloc(size, own_vmm);
	put(buf, size, seed);
	for (int i = 0; i < NNEIGH; i++) {
		neigh[i] = alloc(NEIGH, own_vmm);
		put(neigh[i], NEIGH, seed * 100 + i);
	}
	if (set_tag)
		set_tag(NULL);
	CK(cuMemGetAddressRange(&base, &got, buf + size / 2));
	CK(cuMemRetainAllocationHandle(&h, (void *)base));
	CK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
	CK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	snprintf(a1, sizeof(a1), "%d", fd);
	snprintf(a2, sizeof(a2), "%zu", size);
	snprintf(a3, sizeof(a3), "%u", seed);
	fflush(stdout);
	pid = fork();
	if (!pid) {
		execl(self, self, "child", a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	st = -1;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		st = -1;
	close(fd);
	ok = holds(buf, size, seed + 1);
	for (int i = 0; i < NNEIGH; i++)
		ok &= holds(neigh[i], NEIGH, seed * 100 + i);
	printf("RESULT size=%zu base_is_buffer=%d range_covers=%d props=dev%d/posix%d child=%d "
	       "parent_sees_write_neighbours_intact=%d\n", size, base == buf, got >= size,
	       prop.location.id, !!(prop.requestedHandleTypes &
				    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1, ok);
	CK(cuMemRelease(h));
}

int main(int argc, char **argv)
{
	int under_shim = dlsym(RTLD_DEFAULT, "vmmshim_sleep") != NULL;

	set_tag = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_set_tag");

	if (argc > 4 && !strcmp(argv[1], "child"))
		return child(atoi(argv[2]), strtoull(argv[3], NULL, 10),
			     (uint32_t)strtoul(argv[4], NULL, 10));
	init();
	printf("memory: %s\n", under_shim ? "cuMemAlloc (the shim's)" : "the program's own VMM");
	one(argv[0], 3u << 20, 10, !under_shim, "reg-small");
	one(argv[0], (20u << 20) + (100u << 10), 20, !under_shim, "reg-mid");
	one(argv[0], 6u << 20, 30, !under_shim, NULL); /* whole granules: anywhere */
	return 0;
}
