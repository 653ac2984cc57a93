/* ctx_target: an ordinary driver-API program that works on contexts it creates itself
 * (cuCtxCreate), never on the primary context, as some applications and libraries do. The context
 * tests run it under the shim and sleep it from outside with vmmctl while its "kernels" (simdev
 * kernels: host functions on the stream's worker, see simdev.h) still write device memory.
 * Commands on stdin, one reply line each:
 *
 *   kernel MS        on context A: fill buffer 0 (8 MiB) with 0xAB in 64 slices over MS
 *                    milliseconds on a stream of A; answers "launched" at once
 *   kernel2 MS       the same on a new context B (cuCtxCreate_v4), filling buffer 1 with 0xCD
 *   destroy          cuCtxDestroy(B) (which waits for B's work) -> "destroyed RC"
 *   wait             cuStreamSynchronize on A's stream -> "done faults N" (N: slices the device
 *                    could not touch, as a GPU faults)
 *   check            copy back each buffer a kernel filled -> "intact", or "corrupt buffer I at
 *                    OFFSET", or "faults I N" when the kernel could not touch N slices
 *   reset            cuDevicePrimaryCtxReset of device 0 (another library's cudaDeviceReset):
 *                    A's buffers are not the primary context's and stay -> "reset RC"
 *   quit             exit 0 */
#include <cuda.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "simdev.h"

/* The pre-12.5 export, as programs built with older headers call it. */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define BUF_BYTES (8u << 20)
#define SLICES 64

struct writer {
	CUdeviceptr buf;
	unsigned char value;
	int ms;
	atomic_int faults;
	bool launched;
	struct writer *self;
	void *params[1];
};

static struct writer writers[2];
static CUcontext ctx_a, ctx_b;
static CUstream stream_a, stream_b;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void slow_fill(void **params)
{
	struct writer *w = *(struct writer **)params[0];
	size_t slice = BUF_BYTES / SLICES;
	struct timespec pause = { 0, (long)w->ms * 1000000 / SLICES };

	for (int i = 0; i < SLICES; i++) {
		char *p = (char *)(uintptr_t)w->buf + (size_t)i * slice;

		nanosleep(&pause, NULL);
		if (simdev_check_access(simdev_current_device(), p, slice)) {
			atomic_fetch_add(&w->faults, 1);
			continue;
		}
		memset(p, w->value, slice);
	}
}

static int launch(CUcontext ctx, CUstream s, struct writer *w, int ms)
{
	CUcontext popped;
	CUresult r;

	w->ms = ms;
	w->self = w;
	w->params[0] = &w->self;
	if (cuCtxPushCurrent_v2(ctx))
		return -1;
	r = cuLaunchKernel(SIMDEV_KERNEL(slow_fill), 1, 1, 1, 1, 1, 1, 0, s, w->params, NULL);
	cuCtxPopCurrent_v2(&popped);
	w->launched = r == CUDA_SUCCESS;
	return r == CUDA_SUCCESS ? 0 : -1;
}

static void cmd_kernel2(int ms)
{
	CUcontext popped;

	if (cuCtxCreate_v4(&ctx_b, NULL, 0, 0) ||
	    cuStreamCreate(&stream_b, CU_STREAM_NON_BLOCKING) ||
	    cuCtxPopCurrent_v2(&popped)) {
		say("error context B");
		return;
	}
	say(launch(ctx_b, stream_b, &writers[1], ms) ? "error launch" : "launched");
}

static void cmd_check(void)
{
	unsigned char *h = malloc(BUF_BYTES);

	for (int b = 0; h && b < 2; b++) {
		if (!writers[b].launched)
			continue;
		if (atomic_load(&writers[b].faults)) {
			say("faults %d %d", b, atomic_load(&writers[b].faults));
			free(h);
			return;
		}
		if (cuMemcpyDtoH_v2(h, writers[b].buf, BUF_BYTES)) {
			say("error copy %d", b);
			free(h);
			return;
		}
		for (size_t i = 0; i < BUF_BYTES; i++)
			if (h[i] != writers[b].value) {
				say("corrupt buffer %d at %zu", b, i);
				free(h);
				return;
			}
	}
	say(h ? "intact" : "error no memory");
	free(h);
}

int main(void)
{
	char line[256];
	CUdevice dev;

	setvbuf(stdout, NULL, _IOLBF, 0);
	writers[0].value = 0xab;
	writers[1].value = 0xcd;
	if (cuInit(0) || cuDeviceGet(&dev, 0) || cuCtxCreate_v2(&ctx_a, 0, dev) ||
	    cuStreamCreate(&stream_a, CU_STREAM_NON_BLOCKING) ||
	    cuMemAlloc_v2(&writers[0].buf, BUF_BYTES) || cuMemAlloc_v2(&writers[1].buf, BUF_BYTES) ||
	    cuMemsetD8_v2(writers[0].buf, 0, BUF_BYTES) ||
	    cuMemsetD8_v2(writers[1].buf, 0, BUF_BYTES)) {
		say("error setup");
		return 1;
	}
	say("ready %ld", (long)getpid());
	while (fgets(line, sizeof(line), stdin)) {
		char a[64] = "", b[64] = "";
		int n = sscanf(line, "%63s %63s", a, b);

		if (n <= 0)
			continue;
		if (!strcmp(a, "kernel") && n == 2)
			say(launch(ctx_a, stream_a, &writers[0], atoi(b)) ? "error launch"
									  : "launched");
		else if (!strcmp(a, "kernel2") && n == 2)
			cmd_kernel2(atoi(b));
		else if (!strcmp(a, "destroy"))
			say("destroyed %d", (int)cuCtxDestroy_v2(ctx_b));
		else if (!strcmp(a, "wait"))
			say("done faults %d", cuStreamSynchronize(stream_a) ? -1
					      : atomic_load(&writers[0].faults));
		else if (!strcmp(a, "check"))
			cmd_check();
		else if (!strcmp(a, "reset"))
			say("reset %d", (int)cuDevicePrimaryCtxReset(dev));
		else if (!strcmp(a, "quit"))
			break;
		else
			say("error unknown command");
	}
	return 0;
}
