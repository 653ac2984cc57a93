/* One-stream reuse, seen by a program: memory freed while a slow kernel on the default stream
 * still reads it is allocated again at once (same address), written, and the kernel still reads
 * what was there before the free, because the default stream runs the write after the kernel.
 * `prog_one_stream later-stream` then creates a non-blocking stream and writes the reused memory
 * on it: the shim must have waited for the kernel first, or the kernel reads the new bytes.
 * Prints "same address", "kernel read the old bytes" (or what it read instead).
 * `prog_one_stream resume`: after work on another stream, frees wait again ("another address
 * while paused") until the heap's own sync, after which they are reused at once again ("same
 * address after resuming"). */
#include <cuda.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "prog_common.h"
#include "simdev.h"

#define SIZE (4u << 20)

/* A kernel that takes its time, then copies the first bytes of its buffer to the host. */
static void slow_read(void **params)
{
	const unsigned char *src = *(const unsigned char **)params[0];
	unsigned char *dst = *(unsigned char **)params[1];
	struct timespec t = { 0, 300 * 1000 * 1000 };

	nanosleep(&t, NULL);
	memcpy(dst, src, 64);
}

/* Work on a stream of its own pauses the reuse; a sync of the heap's own resumes it. */
static int pause_and_resume(void)
{
	CUdeviceptr a, b, c, big;
	CUstream s;

	CHECK_CU(cuMemAlloc(&a, SIZE));
	CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_CU(cuMemsetD8Async(a, 0x33, SIZE, s));
	CHECK_CU(cuStreamSynchronize(s));
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemAlloc(&b, SIZE));
	printf("prog_one_stream: %s address while paused\n", b == a ? "same" : "another");
	/* 80 MiB in quarantine, then a request no free block holds: the heap syncs. */
	CHECK_CU(cuMemAlloc(&big, 80u << 20));
	CHECK_CU(cuMemFree(big));
	CHECK_CU(cuMemAlloc(&big, 200u << 20));
	CHECK_CU(cuMemFree(b));
	CHECK_CU(cuMemAlloc(&c, SIZE));
	printf("prog_one_stream: %s address after resuming\n", c == b ? "same" : "another");
	CHECK_CU(cuMemFree(c));
	CHECK_CU(cuMemFree(big));
	CHECK_CU(cuStreamDestroy(s));
	return 0;
}

int main(int argc, char **argv)
{
	bool later_stream = argc > 1 && !strcmp(argv[1], "later-stream");
	unsigned char seen[64], *seen_p = seen;
	CUdeviceptr a, b;
	CUcontext ctx;
	CUdevice dev;
	CUstream s = NULL;
	void *params[2];

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDeviceGet(&dev, 0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK_CU(cuCtxSetCurrent(ctx));
	if (argc > 1 && !strcmp(argv[1], "resume"))
		return pause_and_resume();
	CHECK_CU(cuMemAlloc(&a, SIZE));
	CHECK_CU(cuMemsetD8(a, 0x11, SIZE));
	memset(seen, 0, sizeof(seen));
	params[0] = &a;
	params[1] = &seen_p;
	CHECK_CU(cuLaunchKernel(SIMDEV_KERNEL(slow_read), 1, 1, 1, 1, 1, 1, 0, NULL, params,
				NULL));
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemAlloc(&b, SIZE));
	printf("prog_one_stream: %s address\n", b == a ? "same" : "another");
	if (later_stream) {
		CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
		CHECK_CU(cuMemsetD8Async(b, 0x22, SIZE, s));
		CHECK_CU(cuStreamSynchronize(s));
	} else {
		CHECK_CU(cuMemsetD8Async(b, 0x22, SIZE, NULL));
	}
	CHECK_CU(cuCtxSynchronize());
	if (seen[0] == 0x11 && seen[63] == 0x11)
		printf("prog_one_stream: kernel read the old bytes\n");
	else
		printf("prog_one_stream: kernel read 0x%02x\n", seen[0]);
	if (s)
		CHECK_CU(cuStreamDestroy(s));
	CHECK_CU(cuMemFree(b));
	return 0;
}
