/* Memory freed while all work goes to one stream, taken again at once, and what other streams
 * then see. A "late" kernel on the first stream S holds its block until the program releases it
 * (or 2 s pass) and then writes 0x11 over it; the program frees that block while the kernel
 * still waits and allocates the same size again.
 *   prog_lone_stream reuse              the next owner writes 0x22 on S: S runs it after the late
 *                                       kernel, so 0x22 stays. Prints whether the block came back
 *                                       at once (while the late kernel still waited).
 *   prog_lone_stream join S T           the next owner writes 0x22 on another stream T, which
 *                                       does not wait for S by itself (S, T: legacy, created
 *                                       (non-blocking) or per-thread). The program releases the
 *                                       late kernel once T's kernel ran or 300 ms passed: 0x22
 *                                       must stay, so T must have waited for S.
 *   prog_lone_stream again              one kernel on a stream of its own first (PyTorch writes
 *                                       once to one at start), then 400 on the legacy stream,
 *                                       which becomes the lone one: then as join legacy created.
 *   prog_lone_stream spin               a kernel on the legacy stream spins (at most 2 s) until a
 *                                       copy on another stream, submitted after it, sets a flag
 *                                       (flag_wait's legal pattern): no block was taken back, so
 *                                       the copy must not wait for the kernel.
 *   prog_lone_stream capture            the next owner's kernel is captured on another stream
 *                                       and the graph launched there: the capture begins only
 *                                       once the late kernel is done (it gives up after 400 ms). */
#include <cuda.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "prog_common.h"
#include "simdev.h"

#define BIG ((size_t)8 << 20)

static atomic_bool release_late, late_done, next_ran;
static int late_wait_ms = 2000;

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000 }, NULL);
}

static void late_write(void **params)
{
	char *p = (char *)(uintptr_t)*(CUdeviceptr *)params[0];

	for (int i = 0; i < late_wait_ms && !atomic_load(&release_late); i++)
		sleep_ms(1);
	memset(p, 0x11, BIG);
	atomic_store(&late_done, true);
}

static void next_write(void **params)
{
	char *p = (char *)(uintptr_t)*(CUdeviceptr *)params[0];

	memset(p, 0x22, BIG);
	atomic_store(&next_ran, true);
}

static CUdeviceptr late_ptr, next_ptr;
static void *late_params[1] = { &late_ptr };
static void *next_params[1] = { &next_ptr };

static CUstream stream_named(const char *name)
{
	CUstream s;

	if (!strcmp(name, "legacy"))
		return CU_STREAM_LEGACY;
	if (!strcmp(name, "per-thread"))
		return CU_STREAM_PER_THREAD;
	if (strcmp(name, "created"))
		FAIL("unknown stream %s (legacy, created, per-thread)", name);
	CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	return s;
}

static void launch(void (*fn)(void **), void **params, CUstream s)
{
	CHECK_CU(cuLaunchKernel(SIMDEV_KERNEL(fn), 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

/* The late kernel on s, its block freed, the same size allocated again: next_ptr. Prints
 * whether the block came back while the late kernel still waited. */
static void free_under_late_kernel(CUstream s)
{
	bool at_once;

	CHECK_CU(cuMemAlloc(&late_ptr, BIG));
	launch(late_write, late_params, s);
	CHECK_CU(cuMemFree(late_ptr));
	CHECK_CU(cuMemAlloc(&next_ptr, BIG));
	at_once = next_ptr == late_ptr && !atomic_load(&late_done);
	printf("prog_lone_stream: the freed block %s\n",
	       at_once ? "came back at once" : "did not come back at once");
}

static void expect_next_owner(const char *how)
{
	const unsigned char *p = (const unsigned char *)(uintptr_t)next_ptr;

	for (size_t i = 0; i < BIG; i++)
		if (p[i] != 0x22)
			FAIL("byte %zu of the new owner's block is 0x%02x, not 0x22: %s", i, p[i],
			     how);
}

static int reuse(void)
{
	CUstream s = stream_named("created");

	free_under_late_kernel(s);
	launch(next_write, next_params, s);
	atomic_store(&release_late, true);
	CHECK_CU(cuStreamSynchronize(s));
	expect_next_owner("the stream ran the new owner's kernel before the old owner's");
	printf("prog_lone_stream: reuse kept the new owner's data\n");
	return 0;
}

static int join_on(CUstream s, CUstream t)
{
	int waited_ms = 0;

	free_under_late_kernel(s);
	launch(next_write, next_params, t);
	while (!atomic_load(&next_ran) && waited_ms < 300) {
		sleep_ms(1);
		waited_ms++;
	}
	printf("prog_lone_stream: the second stream's kernel %s\n",
	       atomic_load(&next_ran) ? "ran before the late kernel was released" :
					"waited for the late kernel");
	atomic_store(&release_late, true);
	CHECK_CU(cuCtxSynchronize());
	expect_next_owner("the second stream ran before the first stream's late kernel");
	printf("prog_lone_stream: join kept the new owner's data\n");
	return 0;
}

static int join(const char *first, const char *second)
{
	CUstream s = stream_named(first);

	return join_on(s, stream_named(second));
}

static void nothing(void **params)
{
	(void)params;
}

static int again(void)
{
	CUstream side = stream_named("created");

	launch(nothing, NULL, side);
	CHECK_CU(cuStreamSynchronize(side));
	/* A first try at the 256th may find the side stream's event not yet done (simdev's stream
	 * threads run late on a busy machine); after the synchronization the next tries see it. */
	for (int i = 0; i < 300; i++)
		launch(nothing, NULL, CU_STREAM_LEGACY);
	CHECK_CU(cuCtxSynchronize());
	for (int i = 0; i < 100; i++)
		launch(nothing, NULL, CU_STREAM_LEGACY);
	return join_on(CU_STREAM_LEGACY, side);
}

static atomic_bool saw_flag;

static void spin_on_flag(void **params)
{
	volatile int *flag = (volatile int *)(uintptr_t)*(CUdeviceptr *)params[0];

	for (int i = 0; i < 2000 && !*flag; i++)
		sleep_ms(1);
	atomic_store(&saw_flag, *flag != 0);
}

static int spin(void)
{
	CUstream t = stream_named("created");
	CUdeviceptr flag;
	void *params[1] = { &flag };
	static const int one = 1;

	CHECK_CU(cuMemAlloc(&flag, sizeof(int)));
	CHECK_CU(cuMemsetD32(flag, 0, 1));
	launch(spin_on_flag, params, CU_STREAM_LEGACY);
	CHECK_CU(cuMemcpyHtoDAsync(flag, &one, sizeof(one), t));
	CHECK_CU(cuCtxSynchronize());
	if (!atomic_load(&saw_flag))
		FAIL("the copy that sets the flag waited for the kernel spinning on it");
	printf("prog_lone_stream: the spinning kernel saw the other stream's flag\n");
	return 0;
}

static int capture(void)
{
	CUstream t = stream_named("created");
	CUgraphExec exec;
	CUgraph g;

	late_wait_ms = 400;
	free_under_late_kernel(CU_STREAM_LEGACY);
	CHECK_CU(cuStreamBeginCapture(t, CU_STREAM_CAPTURE_MODE_GLOBAL));
	if (!atomic_load(&late_done))
		FAIL("the capture began while the first stream's kernel was still queued");
	launch(next_write, next_params, t);
	CHECK_CU(cuStreamEndCapture(t, &g));
	CHECK_CU(cuGraphInstantiate(&exec, g, 0));
	CHECK_CU(cuGraphLaunch(exec, t));
	CHECK_CU(cuStreamSynchronize(t));
	expect_next_owner("the graph's kernel was overwritten");
	printf("prog_lone_stream: the capture began after the first stream's work\n");
	return 0;
}

int main(int argc, char **argv)
{
	CUcontext ctx;

	if (argc < 2)
		FAIL("usage: prog_lone_stream reuse | join S T | again | spin | capture");
	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	if (!strcmp(argv[1], "reuse"))
		return reuse();
	if (!strcmp(argv[1], "capture"))
		return capture();
	if (!strcmp(argv[1], "again"))
		return again();
	if (!strcmp(argv[1], "spin"))
		return spin();
	if (!strcmp(argv[1], "join") && argc == 4)
		return join(argv[2], argv[3]);
	FAIL("usage: prog_lone_stream reuse | join S T | again | spin | capture");
}
