/* A driver-API program that lets the primary context go and takes it again, as a library that
 * retains it for a phase does (CUDA's documentation: at the last release the context is
 * destroyed, its allocations with it). Prints what it sees, the same lines natively and under the
 * shim: the pointer of before the release is no longer the program's, the device's memory is
 * back, and the context made again works (an allocation, a copy, a sleep-free round trip).
 * `prog_release slept`: before the release, a thread with no context of its own sleeps and wakes
 * the program through the in-process API (absent natively), so that the shim retains the context
 * for itself first. gpu-check runs it on the GPU too, comparing its RESULT line. */
#include <dlfcn.h>
#include <pthread.h>

#include "prog_roundtrip.h"

#define SIZE (64ul << 20)

static size_t free_now(void)
{
	size_t f = 0, t = 0;

	CHECK_CU(cuMemGetInfo(&f, &t));
	return f;
}

/* The in-process API's sleep and wake, on this thread (which has no context): what the control
 * server's threads do for `vmmctl sleep`. */
static void *sleep_and_wake(void *arg)
{
	int (*vsleep)(const char *, int) = (int (*)(const char *, int))dlsym(RTLD_DEFAULT,
										"vmmshim_sleep");
	int (*vwake)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "vmmshim_wake");

	*(int *)arg = vsleep && vwake ? vsleep(NULL, 0) || vwake(NULL) : 0;
	return NULL;
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext c, again;
	CUdeviceptr old, fresh;
	unsigned flags;
	int active = -1;
	size_t before, held;
	char *buf = malloc(SIZE);

	if (!buf)
		FAIL("no host memory");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
	CHECK_CU(cuCtxSetCurrent(c));
	before = free_now();
	CHECK_CU(cuMemAlloc(&old, SIZE));
	CHECK_CU(cuMemsetD8(old, 7, SIZE));
	CHECK_CU(cuCtxSynchronize());
	held = before - free_now();
	if (argc > 1 && !strcmp(argv[1], "slept")) {
		pthread_t th;
		int rc = -1;

		if (pthread_create(&th, NULL, sleep_and_wake, &rc) || pthread_join(th, NULL) || rc)
			FAIL("the sleep and wake on a thread of its own failed (%d)", rc);
	}
	CHECK_CU(cuDevicePrimaryCtxRelease(dev));
	/* Not printed: under the shim a retain of its own (made for one of its threads) may keep
	 * the context active, where natively it is not. */
	CHECK_CU(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	printf("prog_release: held %zu MiB\n", held >> 20);

	CHECK_CU(cuDevicePrimaryCtxRetain(&again, dev));
	CHECK_CU(cuCtxSetCurrent(again));
	printf("RESULT prog_release: retained again: %s handle, memory back: %s, the old pointer "
	       "freed again -> %d\n", again == c ? "the same" : "another",
	       free_now() >= before ? "yes" : "no", (int)cuMemFree(old));
	CHECK_CU(cuMemAlloc(&fresh, SIZE));
	if (roundtrip(fresh, buf, SIZE, 3))
		FAIL("the context made again lost a copy");
	CHECK_CU(cuMemFree(fresh));
	CHECK_CU(cuDevicePrimaryCtxRelease(dev));
	free(buf);
	printf("prog_release: ok\n");
	return 0;
}
