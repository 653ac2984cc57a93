/* Threads retaining, using and releasing the primary context at once (no Criterion, so that it
 * runs under ThreadSanitizer too: a TSan build reports a race, such as the one there was on
 * primaries[] between cuDevicePrimaryCtxRetain and every call that checks its context, and exits
 * non-zero). Checks that every call succeeds and that the references add up at the end. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>

#define THREADS 4
#define ROUNDS 200

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		CUcontext c;
		CUdeviceptr p;

		if (cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) || cuMemAlloc(&p, 4096) ||
		    cuMemsetD8(p, 1, 4096) || cuMemFree(p) || cuCtxSynchronize() ||
		    cuDevicePrimaryCtxRelease(0))
			return "a call failed";
	}
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	void *err = NULL, *e;
	unsigned flags;
	int active = -1;

	if (cuInit(0))
		return 1;
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, worker, NULL))
			return 1;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], &e);
		err = err ? err : e;
	}
	if (!err && (cuDevicePrimaryCtxGetState(0, &flags, &active) || active))
		err = "the primary context is still retained";
	printf("%s\n", err ? (char *)err : "ok");
	return err ? 1 : 0;
}
