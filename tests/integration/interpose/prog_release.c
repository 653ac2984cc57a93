/* A driver-API program that lets the primary context go and takes it again, as a library that
 * retains it for a phase does (CUDA's documentation: at the last release the context is
 * destroyed, its allocations with it). Prints what it sees, the same lines natively and under the
 * shim: the pointer of before the release is no longer the program's, the device's memory is
 * back, and the context made again works (an allocation, a copy, a sleep-free round trip).
 * `prog_release slept`: before the release, a thread with no context of its own sleeps and wakes
 * the program through the in-process API (absent natively), so that the shim retains the context
 * for itself first. `prog_release during`: first a release that is not the last (the program
 * retained the context twice) while such a sleep and wake runs; it must not wait for them.
 * `prog_release last-during`: the program's last release comes while such a sleep runs; once the
 * sleep and wake are over, the context must have ended as natively (its memory back).
 * PROG_RELEASE_MIB: the size of the allocation made before the release (default 64), so that on
 * a GPU the sleep lasts long enough for the release to come during it.
 * gpu-check runs it on the GPU too, comparing its RESULT line. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <time.h>

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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A release that leaves the context to another retain, made while a sleep and wake runs on a
 * thread of its own (slowed by the test: SIMDEV_DELAY), returns at once, as natively. */
static void release_beside_a_sleep(CUdevice dev, bool last)
{
	CUcontext extra;
	pthread_t th;
	int rc = -1;
	double t0, took;
	const struct timespec settle = { 0, 300 * 1000000L };

	if (!last)
		CHECK_CU(cuDevicePrimaryCtxRetain(&extra, dev));
	if (pthread_create(&th, NULL, sleep_and_wake, &rc))
		FAIL("no thread");
	nanosleep(&settle, NULL); /* the sleep is under way */
	t0 = now_s();
	CHECK_CU(cuDevicePrimaryCtxRelease(dev));
	took = now_s() - t0;
	if (pthread_join(th, NULL) || rc)
		FAIL("the sleep and wake on a thread of its own failed (%d)", rc);
	fprintf(stderr, "prog_release: the release beside a sleep took %.3f s\n", took);
	printf("prog_release: a release that is %s, beside a sleep, returned at once: %s\n",
	       last ? "the last" : "not the last", took < 1.0 ? "yes" : "no");
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
	bool last_during = argc > 1 && !strcmp(argv[1], "last-during");
	const char *mib = getenv("PROG_RELEASE_MIB");
	size_t old_size = mib && atol(mib) > 0 ? (size_t)atol(mib) << 20 : SIZE;

	if (!buf)
		FAIL("no host memory");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&c, dev));
	CHECK_CU(cuCtxSetCurrent(c));
	before = free_now();
	CHECK_CU(cuMemAlloc(&old, old_size));
	CHECK_CU(cuMemsetD8(old, 7, old_size));
	CHECK_CU(cuCtxSynchronize());
	held = before - free_now();
	if (argc > 1 && (!strcmp(argv[1], "during") || last_during))
		release_beside_a_sleep(dev, last_during);
	if (argc > 1 && !strcmp(argv[1], "slept")) {
		pthread_t th;
		int rc = -1;

		if (pthread_create(&th, NULL, sleep_and_wake, &rc) || pthread_join(th, NULL) || rc)
			FAIL("the sleep and wake on a thread of its own failed (%d)", rc);
	}
	if (!last_during)
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
