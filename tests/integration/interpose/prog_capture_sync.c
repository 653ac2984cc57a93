/* A stream capture survives the heap's device synchronizations: while one stream is captured
 * (relaxed mode, which lets the program allocate meanwhile), memory is allocated, used, freed and
 * allocated again in a way that makes the heap want a synchronization to reuse the freed bytes,
 * on the capturing thread and on another one. A synchronization then would break the capture
 * (as on the H200); the capture must end with its graph, which replays what it recorded. */
#include <cuda.h>
#include <pthread.h>

#include "prog_common.h"

#define MiB (1ull << 20)

static CUcontext ctx;

/* Free 16 MiB after work was submitted, then ask for more than any free block holds: the heap
 * wants the freed bytes back (a synchronization) before it makes new memory. */
static void *churn(void *arg)
{
	CUdeviceptr a, b;

	(void)arg;
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuMemAlloc(&a, 16 * MiB));
	CHECK_CU(cuMemsetD8(a, 1, 16 * MiB));
	CHECK_CU(cuMemFree(a));
	CHECK_CU(cuMemAlloc(&b, 64 * MiB));
	CHECK_CU(cuMemsetD8(b, 2, 64 * MiB));
	CHECK_CU(cuMemFree(b));
	return NULL;
}

int main(void)
{
	CUdeviceptr out;
	CUstream s;
	unsigned char host[4096];

	CHECK_CU(cuInit(0));
	CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK_CU(cuCtxSetCurrent(ctx));
	CHECK_CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK_CU(cuMemAlloc(&out, sizeof(host)));
	for (int other_thread = 0; other_thread < 2; other_thread++) {
		CUgraph g = NULL;
		CUgraphExec x;
		CUresult r;

		CHECK_CU(cuMemsetD8(out, 0, sizeof(host)));
		CHECK_CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
		CHECK_CU(cuMemsetD8Async(out, (unsigned char)(7 + other_thread), sizeof(host), s));
		if (other_thread) {
			pthread_t t;

			if (pthread_create(&t, NULL, churn, NULL))
				FAIL("pthread_create");
			pthread_join(t, NULL);
		} else {
			churn(NULL);
		}
		r = cuStreamEndCapture(s, &g);
		if (r != CUDA_SUCCESS || !g)
			FAIL("the capture was broken (%s thread allocating): cuStreamEndCapture "
			     "returned %d", other_thread ? "another" : "the capturing", (int)r);
		CHECK_CU(cuGraphInstantiate(&x, g, 0));
		CHECK_CU(cuGraphLaunch(x, s));
		CHECK_CU(cuStreamSynchronize(s));
		CHECK_CU(cuMemcpyDtoH(host, out, sizeof(host)));
		for (size_t i = 0; i < sizeof(host); i++)
			if (host[i] != 7 + other_thread)
				FAIL("the graph did not replay the captured memset");
		CHECK_CU(cuGraphExecDestroy(x));
		CHECK_CU(cuGraphDestroy(g));
	}
	/* Between captures the heap synchronizes again as before. */
	churn(NULL);
	CHECK_CU(cuMemFree(out));
	CHECK_CU(cuStreamDestroy(s));
	printf("prog_capture_sync: ok\n");
	return 0;
}
