/* Allocations during stream capture: a graph with a memory node (cudaMallocAsync / cudaFreeAsync
 * captured), instantiated and launched twice; and plain allocations around it. */
#include <cuda_runtime_api.h>

#include "prog_common.h"

int main(void)
{
	cudaGraphExec_t exec;
	cudaStream_t s;
	cudaGraph_t g;
	void *before, *inside = NULL;

	CHECK_CU(cudaMalloc(&before, 1 << 20));
	CHECK_CU(cudaStreamCreate(&s));
	CHECK_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	CHECK_CU(cudaMallocAsync(&inside, 1 << 20, s));
	CHECK_CU(cudaMemsetAsync(inside, 1, 1 << 20, s));
	CHECK_CU(cudaMemcpyAsync(before, inside, 1 << 20, cudaMemcpyDeviceToDevice, s));
	CHECK_CU(cudaFreeAsync(inside, s));
	CHECK_CU(cudaStreamEndCapture(s, &g));
	CHECK_CU(cudaGraphInstantiate(&exec, g, 0));
	for (int i = 0; i < 2; i++)
		CHECK_CU(cudaGraphLaunch(exec, s));
	CHECK_CU(cudaStreamSynchronize(s));
	{
		unsigned char b[4096];

		CHECK_CU(cudaMemcpy(b, before, sizeof(b), cudaMemcpyDeviceToHost));
		for (size_t i = 0; i < sizeof(b); i++)
			if (b[i] != 1)
				FAIL("graph did not run over the shim's memory");
	}
	CHECK_CU(cudaGraphExecDestroy(exec));
	CHECK_CU(cudaGraphDestroy(g));
	CHECK_CU(cudaStreamDestroy(s));
	CHECK_CU(cudaFree(before));
	printf("prog_capture: ok\n");
	return 0;
}
