/* A program that uses only device 1 of two, as one rank of a two-GPU job does: memory from
 * cuMemAlloc (the shim's heap) and a mapping of its own (cuMemCreate/cuMemMap), put to sleep and
 * woken from a thread that has no context (as the control server's threads have none). The test
 * then checks in simdev's statistics that no context was made on device 0: on a GPU a primary
 * context there holds about 500 MiB of a device another rank owns. */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

#include "prog_common.h"

#define SIZE ((size_t)4 << 20)

static int (*sleep_fn)(const char *, int);
static int (*wake_fn)(const char *);
static const char *(*why)(void);

static void *sleep_and_wake(void *arg)
{
	CUcontext cur = NULL;

	(void)arg;
	if (cuCtxGetCurrent(&cur) || cur)
		FAIL("a new thread has a current context");
	if (sleep_fn(NULL, 0))
		FAIL("sleep: %s", why());
	if (wake_fn(NULL))
		FAIL("wake: %s", why());
	return NULL;
}

int main(void)
{
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 } };
	CUmemAccessDesc acc = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 },
				.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h;
	CUdeviceptr heap_mem, own_va;
	unsigned char *buf = malloc(SIZE);
	size_t gran = 0;
	CUcontext ctx;
	CUdevice dev;
	pthread_t t;

	sleep_fn = (int (*)(const char *, int))dlsym(RTLD_DEFAULT, "vmmshim_sleep");
	wake_fn = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_wake");
	why = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmmshim_last_error");
	if (!sleep_fn || !wake_fn || !why)
		FAIL("no vmmshim_sleep/vmmshim_wake: not running under the shim");
	if (!buf)
		FAIL("no host memory");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 1));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_CU(cuCtxSetCurrent(ctx));

	CHECK_CU(cuMemAlloc(&heap_mem, SIZE));
	CHECK_CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CHECK_CU(cuMemCreate(&h, SIZE, &prop, 0));
	CHECK_CU(cuMemAddressReserve(&own_va, SIZE, gran, 0, 0));
	CHECK_CU(cuMemMap(own_va, SIZE, 0, h, 0));
	CHECK_CU(cuMemSetAccess(own_va, SIZE, &acc, 1));
	pattern_fill(buf, SIZE, 1);
	CHECK_CU(cuMemcpyHtoD(heap_mem, buf, SIZE));
	pattern_fill(buf, SIZE, 2);
	CHECK_CU(cuMemcpyHtoD(own_va, buf, SIZE));

	if (pthread_create(&t, NULL, sleep_and_wake, NULL) || pthread_join(t, NULL))
		FAIL("no thread");

	CHECK_CU(cuMemcpyDtoH(buf, heap_mem, SIZE));
	if (pattern_check(buf, SIZE, 1))
		FAIL("cuMemAlloc memory changed across sleep and wake");
	CHECK_CU(cuMemcpyDtoH(buf, own_va, SIZE));
	if (pattern_check(buf, SIZE, 2))
		FAIL("the program's own mapping changed across sleep and wake");
	CHECK_CU(cuMemUnmap(own_va, SIZE));
	CHECK_CU(cuMemRelease(h));
	CHECK_CU(cuMemAddressFree(own_va, SIZE));
	CHECK_CU(cuMemFree(heap_mem));
	free(buf);
	printf("contents kept on device 1\n");
	return 0;
}
