/* NCCL's user-buffer registration on cudaMalloc'd (shim) memory: for a small (3 MiB) and a
 * mid-size (20 MiB + 100 KiB) buffer, each in fresh memory (a tag of its own), and a 6 MiB one
 * (whole granules, as PyTorch's segments) among other memory, cuMemGetAddressRange, cuMemRetainAllocationHandle at the
 * base, its properties, the handle exported as a descriptor; a child imports it, maps the whole
 * range from the handle's offset 0, checks the parent's bytes and writes; the parent sees the
 * write. Small allocations made right after each buffer (some share its last 2 MiB) keep their
 * bytes; a second retain gives the same memory; a sleep and wake afterwards keep everything.
 * A 1 MiB allocation (it starts inside a granule) is refused: "unaligned_rc N" is printed.
 * Modes: (none) the parent; "child FD SIZE SEED" the importer. */
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "prog_device_pattern.h"

#define GRAN (2ull << 20)
#define NNEIGH 8
#define NEIGH (192u << 10)

static int (*shim_sleep)(const char *, int);
static int (*shim_wake)(const char *);

static void driver_init(void)
{
	CUcontext ctx;

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
}

struct buf {
	CUdeviceptr p;
	size_t size;
	uint32_t seed;          /* of the buffer's bytes now */
	uint32_t nseed;         /* of its neighbours' */
	CUdeviceptr neigh[NNEIGH];
};

static int (*shim_set_tag)(const char *);

/* In a tag of its own (fresh memory: it starts a granule, and the neighbours made after it share
 * its last one). */
static void make(struct buf *b, size_t size, uint32_t seed, const char *tag)
{
	if (shim_set_tag(tag))
		FAIL("vmmshim_set_tag");
	b->size = size;
	b->seed = seed;
	b->nseed = seed * 100;
	CHECK_CU(cuMemAlloc(&b->p, size));
	put_pattern(b->p, size, seed);
	for (int i = 0; i < NNEIGH; i++) {
		CHECK_CU(cuMemAlloc(&b->neigh[i], NEIGH));
		put_pattern(b->neigh[i], NEIGH, b->nseed + i);
	}
	shim_set_tag(NULL);
}

/* How many neighbours share the buffer's last granule (their bytes move along with it). */
static int in_edge(const struct buf *b)
{
	CUdeviceptr last = (b->p + b->size - 1) & ~(CUdeviceptr)(GRAN - 1);
	int n = 0;

	for (int i = 0; i < NNEIGH; i++)
		n += b->neigh[i] >= last && b->neigh[i] < last + GRAN;
	return n;
}

static void check(const struct buf *b, uint32_t seed, const char *when)
{
	if (!has_pattern(b->p, b->size, seed))
		FAIL("%s: the %zu-byte buffer lost its bytes", when, b->size);
	for (int i = 0; i < NNEIGH; i++)
		if (!has_pattern(b->neigh[i], NEIGH, b->nseed + i))
			FAIL("%s: neighbour %d of the %zu-byte buffer lost its bytes", when, i,
			     b->size);
}

/* NCCL's sequence on an address inside b; the child maps the handle and writes seed+1. */
static void register_and_share(const char *self, struct buf *b)
{
	CUmemGenericAllocationHandle h, h2;
	CUmemAllocationProp prop;
	CUdeviceptr base;
	size_t size;
	char a1[32], a2[32], a3[32];
	int fd = -1, st;
	pid_t pid;

	CHECK_CU(cuMemGetAddressRange(&base, &size, b->p + b->size / 2));
	if (base != b->p || size != b->size)
		FAIL("address range 0x%llx+%zu, allocated 0x%llx+%zu", (unsigned long long)base,
		     size, (unsigned long long)b->p, b->size);
	CHECK_CU(cuMemRetainAllocationHandle(&h, (void *)base));
	if (base != b->p)
		FAIL("the buffer moved");
	CHECK_CU(cuMemGetAllocationPropertiesFromHandle(&prop, h));
	if (prop.type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != 0 ||
	    !(prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		FAIL("properties of the retained handle: type %d location %d/%d handles %d",
		     (int)prop.type, (int)prop.location.type, prop.location.id,
		     (int)prop.requestedHandleTypes);
	CHECK_CU(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	check(b, b->seed, "after the retain");
	snprintf(a1, sizeof(a1), "%d", fd);
	snprintf(a2, sizeof(a2), "%zu", size);
	snprintf(a3, sizeof(a3), "%u", b->seed);
	pid = fork();
	if (pid < 0)
		FAIL("fork");
	if (!pid) {
		unsetenv("SIMDEV_STATS"); /* the parent's counters are the test's */
		execl(self, self, "child", a1, a2, a3, (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
		FAIL("the importer of the %zu-byte buffer failed", b->size);
	close(fd);
	b->seed++;
	check(b, b->seed, "after the importer's write");
	/* Again: the same memory, nothing moves. */
	CHECK_CU(cuMemRetainAllocationHandle(&h2, (void *)(b->p + 4096)));
	CHECK_CU(cuMemRelease(h2));
	CHECK_CU(cuMemRelease(h));
	printf("registered %zu in_edge %d\n", b->size, in_edge(b));
}

static int child(const char *sfd, const char *ssize, const char *sseed)
{
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	size_t size = strtoull(ssize, NULL, 10), mapped = (size + GRAN - 1) & ~(GRAN - 1);
	uint32_t seed = (uint32_t)strtoul(sseed, NULL, 10);
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;

	driver_init();
	CHECK_CU(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)atoi(sfd),
						CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CHECK_CU(cuMemAddressReserve(&va, mapped, 0, 0, 0));
	CHECK_CU(cuMemMap(va, mapped, 0, h, 0));
	CHECK_CU(cuMemSetAccess(va, mapped, &acc, 1));
	if (!has_pattern(va, size, seed))
		FAIL("the imported handle does not hold the %zu-byte buffer from its offset 0", size);
	put_pattern(va, size, seed + 1);
	CHECK_CU(cuMemUnmap(va, mapped));
	CHECK_CU(cuMemAddressFree(va, mapped));
	CHECK_CU(cuMemRelease(h));
	return 0;
}

int main(int argc, char **argv)
{
	struct buf small, mid, whole;
	CUmemGenericAllocationHandle h;
	CUdeviceptr other, odds[NNEIGH] = { 0 };

	setvbuf(stdout, NULL, _IONBF, 0);
	if (argc > 4 && !strcmp(argv[1], "child"))
		return child(argv[2], argv[3], argv[4]);
	shim_sleep = (int (*)(const char *, int))dlsym(RTLD_DEFAULT, "vmmshim_sleep");
	shim_wake = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_wake");
	shim_set_tag = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_set_tag");
	if (!shim_sleep || !shim_wake || !shim_set_tag)
		FAIL("not running under the shim");
	driver_init();
	CHECK_CU(cuMemAlloc(&other, 5u << 20));
	put_pattern(other, 5u << 20, 7);
	make(&small, 3u << 20, 10, "reg-small");
	make(&mid, (20u << 20) + (100u << 10), 20, "reg-mid");
	make(&whole, 6u << 20, 30, NULL);
	register_and_share(argv[0], &small);
	register_and_share(argv[0], &mid);
	register_and_share(argv[0], &whole);
	/* 1 MiB allocations may start a granule (then they could have one); the first that does
	 * not is the case. */
	for (int i = 0; i < NNEIGH; i++) {
		CHECK_CU(cuMemAlloc(&odds[i], 1u << 20));
		if (odds[i] & (GRAN - 1)) {
			printf("unaligned_rc %d\n",
			       (int)cuMemRetainAllocationHandle(&h, (void *)odds[i]));
			break;
		}
	}
	if (shim_sleep(NULL, 0) || shim_wake(NULL))
		FAIL("sleep/wake after the move failed");
	check(&small, small.seed, "after sleep and wake");
	check(&mid, mid.seed, "after sleep and wake");
	check(&whole, whole.seed, "after sleep and wake");
	if (!has_pattern(other, 5u << 20, 7))
		FAIL("an allocation nobody registered lost its bytes");
	CHECK_CU(cuMemFree(small.p));
	CHECK_CU(cuMemFree(mid.p));
	CHECK_CU(cuMemFree(whole.p));
	for (int i = 0; i < NNEIGH && odds[i]; i++)
		CHECK_CU(cuMemFree(odds[i]));
	CHECK_CU(cuMemFree(other));
	printf("retain ok\n");
	return 0;
}
