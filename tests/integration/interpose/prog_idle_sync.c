/* 64 MiB allocations freed and allocated again, with and without device work between them, as a
 * user's program would: the test counts the driver's synchronizations (SIMDEV_STATS) and the
 * program checks that what it writes to reused memory stays.
 *   prog_idle_sync pairs N        N alloc/free pairs, no device work
 *   prog_idle_sync pairs-work N   the same with a kernel launch between each pair
 *   prog_idle_sync launch-late    a launch still inside the driver (run with SIMDEV_DELAY on
 *                                 cuLaunchKernel) while the heap synchronizes for a reuse; the
 *                                 launch's block is freed after it returns and reused at once */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "prog_common.h"
#include "simdev.h"

#define BIG ((size_t)64 << 20)

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000 }, NULL);
}

static void nothing(void **params)
{
	(void)params;
}

/* Fills its block with 0x77 in 16 slices over 200 ms. */
static void slow_write(void **params)
{
	char *p = (char *)(uintptr_t)*(CUdeviceptr *)params[0];

	for (int i = 0; i < 16; i++) {
		sleep_ms(200 / 16);
		memset(p + (size_t)i * (BIG / 16), 0x77, BIG / 16);
	}
}

static CUcontext ctx;
static CUstream stream;

static int pairs(int n, int work)
{
	CUdeviceptr first = 0;

	for (int i = 0; i < n; i++) {
		CUdeviceptr p;

		CHECK_CU(cuMemAlloc(&p, BIG));
		if (i && p != first)
			FAIL("pair %d: 0x%llx, not the freed 0x%llx", i, (unsigned long long)p,
			     (unsigned long long)first);
		first = p;
		if (work)
			CHECK_CU(cuLaunchKernel(SIMDEV_KERNEL(nothing), 1, 1, 1, 1, 1, 1, 0, stream,
						NULL, NULL));
		CHECK_CU(cuMemFree(p));
	}
	CHECK_CU(cuStreamSynchronize(stream));
	printf("prog_idle_sync: %d pairs%s, same memory each time\n", n, work ? " with work" : "");
	return 0;
}

static CUdeviceptr target;
static void *target_params[1] = { &target };
static atomic_bool launching; /* set just before the launch enters the driver */

static void *late_launch(void *arg)
{
	(void)arg;
	CHECK_CU(cuCtxSetCurrent(ctx));
	atomic_store(&launching, true);
	CHECK_CU(cuLaunchKernel(SIMDEV_KERNEL(slow_write), 1, 1, 1, 1, 1, 1, 0, stream,
				target_params, NULL));
	return NULL;
}

static int launch_late(void)
{
	CUdeviceptr a, b, c;
	pthread_t t;

	CHECK_CU(cuMemAlloc(&target, BIG));
	CHECK_CU(cuMemAlloc(&a, BIG));
	CHECK_CU(cuMemFree(a));
	/* The launch enters the driver (which holds it SIMDEV_DELAY ms) before the reuse below
	 * synchronizes, and queues its kernel after that synchronization. */
	pthread_create(&t, NULL, late_launch, NULL);
	/* Counted from the launch's own call, not the thread's creation: a thread that starts late
	 * on a loaded machine would otherwise launch after the reuse and test nothing. */
	for (int i = 0; i < 10000 && !atomic_load(&launching); i++)
		sleep_ms(1);
	if (!atomic_load(&launching))
		FAIL("the launching thread did not start within 10 s");
	sleep_ms(100);
	CHECK_CU(cuMemAlloc(&b, BIG));
	pthread_join(t, NULL);
	CHECK_CU(cuMemFree(target));
	CHECK_CU(cuMemAlloc(&c, BIG));
	if (c != target)
		FAIL("the freed block 0x%llx was not reused (got 0x%llx)",
		     (unsigned long long)target, (unsigned long long)c);
	pattern_fill((void *)(uintptr_t)c, BIG, 5);
	CHECK_CU(cuStreamSynchronize(stream));
	if (pattern_check((void *)(uintptr_t)c, BIG, 5))
		FAIL("a kernel launched before the free wrote into the memory reused after it");
	CHECK_CU(cuMemFree(b));
	CHECK_CU(cuMemFree(c));
	printf("prog_idle_sync: the late launch was waited for\n");
	return 0;
}

int main(int argc, char **argv)
{
	CUdevice dev;

	if (argc < 2)
		FAIL("usage: prog_idle_sync pairs N | pairs-work N | launch-late");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	if (!strcmp(argv[1], "launch-late"))
		return launch_late();
	if (argc < 3)
		FAIL("pairs wants a count");
	return pairs(atoi(argv[2]), !strcmp(argv[1], "pairs-work"));
}
