/* Many threads using simdev at once: allocations, VMM mappings, copies and stream work must keep
 * contents and accounting exact. */
#include <pthread.h>
#include <string.h>

#include "test_util.h"

#define THREADS 8
#define ROUNDS 100

static CUcontext ctx;

static void bump(void *arg)
{
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	CUmemAllocationProp p = su_prop(0);
	CUstream s;
	int done = 0;
	if (cuCtxSetCurrent(ctx) || cuStreamCreate(&s, 0))
		return (void *)"setup";
	for (unsigned r = 0; r < ROUNDS; r++) {
		unsigned char buf[4096], back[4096];
		memset(buf, (int)(id * 31 + r), sizeof(buf));
		CUdeviceptr d, va;
		CUmemGenericAllocationHandle h;
		if (cuMemAlloc(&d, 1000 + r) || cuMemcpyHtoDAsync(d, buf, 1000, s) ||
		    cuLaunchHostFunc(s, bump, &done) || cuMemcpyDtoHAsync(back, d, 1000, s) ||
		    cuStreamSynchronize(s) || memcmp(buf, back, 1000) || cuMemFree(d))
			return (void *)"native";
		if (cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0) || cuMemCreate(&h, GRAN, &p, 0) ||
		    cuMemMap(va + GRAN, GRAN, 0, h, 0) || cuMemRelease(h))
			return (void *)"vmm map";
		CUmemAccessDesc a = { .location = p.location,
				      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
		if (cuMemSetAccess(va + GRAN, GRAN, &a, 1) ||
		    cuMemcpyHtoD(va + GRAN + 8, buf, sizeof(buf)) ||
		    memcmp((void *)(va + GRAN + 8), buf, sizeof(buf)) ||
		    cuMemUnmap(va + GRAN, GRAN) || cuMemAddressFree(va, 2 * GRAN))
			return (void *)"vmm use";
	}
	if (cuStreamSynchronize(s) || done != ROUNDS || cuStreamDestroy(s))
		return (void *)"stream";
	return NULL;
}

Test(threads, concurrent_use_keeps_contents_and_accounting)
{
	ctx = su_ctx(0);
	size_t base = su_used();
	pthread_t t[THREADS];
	for (unsigned i = 0; i < THREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i), 0);
	for (unsigned i = 0; i < THREADS; i++) {
		void *err;
		pthread_join(t[i], &err);
		cr_expect_null(err, "thread %u failed at %s", i, err ? (char *)err : "");
	}
	CU_OK(cuCtxSynchronize());
	cr_expect_eq(su_used(), base);
}
