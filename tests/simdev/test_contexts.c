/* Contexts of simdev synchronize what the driver's do: cuCtxSynchronize waits for the current
 * context's work only (work on another context of the same device keeps running), a primary
 * context's synchronization also covers the device's green contexts, cuCtxSynchronize_v2 names
 * its context, and cuCtxDestroy waits for the destroyed context's own work. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "simdev.h"
#include "test_util.h"

/* The pre-12.5 export (CUDA 13's cuda.h maps cuCtxCreate to _v4 and declares only that). */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

/* A "kernel" that holds its stream until the test releases it (or 3 s pass), then says done. */
struct gate {
	atomic_bool release, done;
};

static void held_kernel(void *arg)
{
	struct gate *g = arg;
	for (int i = 0; i < 3000 && !atomic_load(&g->release); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	atomic_store(&g->done, true);
}

static void launch_held(CUstream s, struct gate *g)
{
	CU_OK(cuLaunchHostFunc(s, held_kernel, g));
}

Test(contexts, synchronize_waits_for_the_current_context_only)
{
	CUcontext a, b;
	CUstream sa;
	struct gate g = { 0 };

	CU_OK(cuInit(0));
	CU_OK(cuCtxCreate_v2(&a, 0, 0));
	CU_OK(cuStreamCreate(&sa, 0));
	launch_held(sa, &g);
	CU_OK(cuCtxCreate_v2(&b, 0, 0)); /* current now */
	CU_OK(cuCtxSynchronize());
	cr_expect_not(atomic_load(&g.done), "context B's synchronize waited for context A's work");
	CU_OK(cuCtxSynchronize_v2(b));
	cr_expect_not(atomic_load(&g.done));
	atomic_store(&g.release, true);
	CU_OK(cuCtxSynchronize_v2(a));
	cr_expect(atomic_load(&g.done), "cuCtxSynchronize_v2(A) returned before A's work ended");
	CU_OK(cuCtxDestroy_v2(b));
	CU_OK(cuCtxDestroy_v2(a));
}

Test(contexts, each_context_has_its_own_default_stream)
{
	CUcontext a, b;
	struct gate g = { 0 };

	CU_OK(cuInit(0));
	CU_OK(cuCtxCreate_v2(&a, 0, 0));
	launch_held(NULL, &g); /* A's legacy stream */
	CU_OK(cuCtxCreate_v2(&b, 0, 0));
	/* B's legacy stream does not wait for A's. */
	CU_OK(cuStreamSynchronize(NULL));
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	cr_expect_not(atomic_load(&g.done));
	atomic_store(&g.release, true);
	CU_OK(cuCtxPopCurrent_v2(NULL));
	CU_OK(cuStreamSynchronize(NULL)); /* A's again */
	cr_expect(atomic_load(&g.done));
	CU_OK(cuCtxDestroy_v2(a));
	CU_OK(cuCtxDestroy_v2(b));
}

Test(contexts, null_names_the_current_context_and_a_bad_one_is_refused)
{
	CUcontext a;
	struct gate g = { 0 };

	CU_OK(cuInit(0));
	cr_expect_eq(cuCtxSynchronize_v2(NULL), CUDA_ERROR_INVALID_CONTEXT, "no current context");
	CU_OK(cuCtxCreate_v2(&a, 0, 0));
	launch_held(NULL, &g);
	atomic_store(&g.release, true);
	CU_OK(cuCtxSynchronize_v2(NULL));
	cr_expect(atomic_load(&g.done));
	CU_OK(cuCtxDestroy_v2(a));
	cr_expect_eq(cuCtxSynchronize_v2(a), CUDA_ERROR_INVALID_CONTEXT, "destroyed");
	cr_expect_eq(cuCtxSynchronize_v2((CUcontext)&g), CUDA_ERROR_INVALID_CONTEXT, "not one");
}

Test(contexts, destroy_waits_for_its_own_work_only)
{
	CUcontext a, b;
	CUstream sa, sb;
	struct gate ga = { 0 }, gb = { 0 };

	CU_OK(cuInit(0));
	CU_OK(cuCtxCreate_v2(&a, 0, 0));
	CU_OK(cuStreamCreate(&sa, 0));
	launch_held(sa, &ga);
	CU_OK(cuCtxCreate_v2(&b, 0, 0));
	CU_OK(cuStreamCreate(&sb, 0));
	launch_held(sb, &gb);
	atomic_store(&gb.release, true);
	CU_OK(cuCtxDestroy_v2(b));
	cr_expect(atomic_load(&gb.done), "B's work ended before B was destroyed");
	cr_expect_not(atomic_load(&ga.done), "A's work is not B's");
	atomic_store(&ga.release, true);
	CU_OK(cuCtxDestroy_v2(a));
	cr_expect(atomic_load(&ga.done));
}

struct destroyed_use {
	CUcontext ctx;
	atomic_bool current; /* set once ctx is current on the thread */
};

static void *use_destroyed(void *arg)
{
	struct destroyed_use *u = arg;
	CUdevice d;
	CUresult r;

	if (cuCtxSetCurrent(u->ctx) != CUDA_SUCCESS)
		return (void *)(intptr_t)CUDA_ERROR_UNKNOWN;
	atomic_store(&u->current, true);
	/* Wait for the main thread's cuCtxDestroy, then use the context still current here. */
	for (int i = 0; i < 5000; i++) {
		r = cuCtxGetDevice(&d);
		if (r != CUDA_SUCCESS)
			break;
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return (void *)(intptr_t)cuCtxGetDevice(&d);
}

Test(contexts, a_context_destroyed_elsewhere_says_so)
{
	struct destroyed_use u = { 0 };
	pthread_t t;
	void *rc;

	CU_OK(cuInit(0));
	CU_OK(cuCtxCreate_v2(&u.ctx, 0, 0));
	cr_assert_eq(pthread_create(&t, NULL, use_destroyed, &u), 0);
	/* Destroy only once the thread holds the context: under load the thread may start late,
	 * and setting a destroyed context current is a different error. */
	for (int i = 0; i < 10000 && !atomic_load(&u.current); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert(atomic_load(&u.current), "the thread made the context current");
	CU_OK(cuCtxDestroy_v2(u.ctx));
	pthread_join(t, &rc);
	cr_expect_eq((CUresult)(intptr_t)rc, CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

static CUgreenCtx green(CUcontext *as_ctx)
{
	CUdevResource res;
	CUdevResourceDesc desc;
	CUgreenCtx g;

	CU_OK(cuDeviceGetDevResource(0, &res, CU_DEV_RESOURCE_TYPE_SM));
	cr_assert_gt(res.sm.smCount, 0);
	CU_OK(cuDevResourceGenerateDesc(&desc, &res, 1));
	cr_expect_eq(cuGreenCtxCreate(&g, desc, 0, 0), CUDA_ERROR_INVALID_VALUE,
		     "CU_GREEN_CTX_DEFAULT_STREAM is required");
	CU_OK(cuGreenCtxCreate(&g, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM));
	CU_OK(cuCtxFromGreenCtx(as_ctx, g));
	return g;
}

Test(contexts, the_primary_context_synchronizes_green_contexts)
{
	CUcontext prim, gc, other;
	CUgreenCtx g;
	CUstream gs;
	struct gate held = { 0 };

	prim = su_ctx(0);
	g = green(&gc);
	cr_expect_eq(cuGreenCtxStreamCreate(&gs, g, 0, 0), CUDA_ERROR_INVALID_VALUE,
		     "CU_STREAM_NON_BLOCKING is required");
	CU_OK(cuGreenCtxStreamCreate(&gs, g, CU_STREAM_NON_BLOCKING, 0));
	CUcontext owner;
	CU_OK(cuStreamGetCtx(gs, &owner));
	cr_expect_eq(owner, gc);
	launch_held(gs, &held);
	/* Another created context's synchronize does not wait for it... */
	CU_OK(cuCtxCreate_v2(&other, 0, 0));
	CU_OK(cuCtxSynchronize());
	cr_expect_not(atomic_load(&held.done));
	/* ... the primary context's does. */
	atomic_store(&held.release, true);
	CU_OK(cuCtxSynchronize_v2(prim));
	cr_expect(atomic_load(&held.done), "the primary context's synchronize covers green ones");
	CU_OK(cuCtxDestroy_v2(other));
	cr_expect_eq(cuCtxDestroy_v2(gc), CUDA_ERROR_INVALID_CONTEXT, "a green context is not "
		     "destroyed with cuCtxDestroy");
	CU_OK(cuStreamDestroy_v2(gs));
	CU_OK(cuGreenCtxDestroy(g));
	cr_expect_eq(cuCtxFromGreenCtx(&gc, g), CUDA_ERROR_INVALID_CONTEXT);
}

Test(contexts, a_green_context_runs_its_default_stream_when_current)
{
	CUcontext gc;
	CUgreenCtx g;
	struct gate held = { 0 };
	CUcontext cur;

	su_ctx(0);
	g = green(&gc);
	CU_OK(cuCtxPushCurrent_v2(gc));
	CU_OK(cuCtxGetCurrent(&cur));
	cr_expect_eq(cur, gc);
	launch_held(NULL, &held);
	atomic_store(&held.release, true);
	CU_OK(cuCtxSynchronize());
	cr_expect(atomic_load(&held.done));
	CU_OK(cuCtxPopCurrent_v2(NULL));
	CU_OK(cuGreenCtxDestroy(g));
}

/* As the driver (H100, tests/gpu/PROBE.md (j)): a reset of the primary context frees its
 * cuMemAlloc memory and ends its streams, and leaves memory of the virtual-memory API mapped,
 * readable and releasable; its host registrations end; the context stays retained, but is gone
 * until a retain. */
Test(contexts, a_primary_reset_frees_its_allocations_and_keeps_vmm_memory)
{
	const size_t size = 64ul << 20;
	CUcontext ctx, again;
	CUdevice dev;
	CUdeviceptr plain, va;
	CUmemGenericAllocationHandle h;
	CUstream s;
	CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				     .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
	CUmemAccessDesc rw = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	size_t free0, free1, free2, total;
	uint32_t word = 0;
	static char pinned[1 << 16] __attribute__((aligned(4096)));

	CU_OK(cuInit(0));
	CU_OK(cuDeviceGet(&dev, 0));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuMemGetInfo(&free0, &total));
	CU_OK(cuMemCreate(&h, size, &prop, 0));
	CU_OK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CU_OK(cuMemMap(va, size, 0, h, 0));
	CU_OK(cuMemSetAccess(va, size, &rw, 1));
	CU_OK(cuMemsetD32(va, 0x5eed5eed, size / 4));
	CU_OK(cuMemAlloc(&plain, size));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuMemHostRegister(pinned, sizeof(pinned), CU_MEMHOSTREGISTER_PORTABLE));
	CU_OK(cuMemGetInfo(&free1, &total));
	cr_assert_eq(free0 - free1, 2 * size);

	CU_OK(cuDevicePrimaryCtxReset(dev));
	/* Until a retain makes it again, the context is gone though retained and still current:
	 * what needs it fails, and its state is inactive (probe_reset.c on the H100). */
	{
		unsigned flags;
		int active = 1;

		cr_expect_eq(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
		CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
		cr_expect_eq(active, 0, "a reset primary context is still active");
	}
	CU_OK(cuDevicePrimaryCtxRetain(&again, dev));
	cr_expect_eq(again, ctx);
	CU_OK(cuCtxSynchronize());
	CU_OK(cuCtxSetCurrent(again));
	CU_OK(cuMemGetInfo(&free2, &total));
	cr_expect_eq(free2 - free1, size, "the reset gave back %zu bytes, not cuMemAlloc's %zu",
		     free2 - free1, size);
	cr_expect_eq(cuMemFree(plain), CUDA_ERROR_INVALID_VALUE);
	cr_expect_eq(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
	/* The registration went with the context, portable or not. */
	cr_expect_eq(cuMemHostUnregister(pinned), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CU_OK(cuMemcpyDtoH(&word, va + size - 4, 4));
	cr_expect_eq(word, 0x5eed5eedu, "VMM memory lost its bytes in the reset");
	CU_OK(cuMemUnmap(va, size));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemAddressFree(va, size));
	/* The retains from before the reset and after it are both released. */
	CU_OK(cuDevicePrimaryCtxRelease(dev));
	CU_OK(cuDevicePrimaryCtxRelease(dev));
}

/* "Once the reference count reaches zero, the primary context of the device will be destroyed
 * regardless of whether it is current to any thread" (CUDA's documentation; inactive on the
 * H100): its allocations go, and a retain makes it again with the same handle. */
Test(contexts, the_last_release_of_a_primary_context_destroys_it)
{
	CUcontext ctx, again;
	CUdevice dev;
	CUdeviceptr plain;
	unsigned flags;
	int active = -1;

	CU_OK(cuInit(0));
	CU_OK(cuDeviceGet(&dev, 0));
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CU_OK(cuDevicePrimaryCtxRetain(&again, dev));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuMemAlloc(&plain, 1 << 20));
	CU_OK(cuDevicePrimaryCtxRelease(dev));
	CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	cr_expect_eq(active, 1, "a release that is not the last ended the context");
	CU_OK(cuCtxSynchronize());
	CU_OK(cuDevicePrimaryCtxRelease(dev));
	CU_OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	cr_expect_eq(active, 0, "the last release left the context active");
	cr_expect_eq(cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
	CU_OK(cuDevicePrimaryCtxRetain(&again, dev));
	cr_expect_eq(again, ctx);
	CU_OK(cuCtxSynchronize());
	cr_expect_eq(cuMemFree(plain), CUDA_ERROR_INVALID_VALUE, "the allocation outlived it");
	CU_OK(cuDevicePrimaryCtxRelease(dev));
}
