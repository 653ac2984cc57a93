// CUDA graphs: a stream capture that allocates and frees inside the graph (memory nodes),
// launches kernels and copies into a buffer allocated before capture; instantiated once and
// replayed many times. The accumulated result is known in closed form.
#include <vector>
#include "common.h"

__global__ void add_into(uint32_t *acc, const uint32_t *src, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		acc[i] += src[i];
}

int main(void)
{
	require_device();
	const size_t n = 64ull << 20; // words: 256 MiB buffers
	const int replays = 100;
	uint32_t *acc = NULL;
	CK(cudaMalloc(&acc, n * 4));
	CK(cudaMemset(acc, 0, n * 4));
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	cudaGraph_t g;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	uint32_t *tmp = NULL;
	CK(cudaMallocAsync((void **)&tmp, n * 4, s)); // a graph memory node
	fill_kernel<<<1024, 256, 0, s>>>(tmp, n, 42);
	add_into<<<1024, 256, 0, s>>>(acc, tmp, n);
	CK(cudaFreeAsync(tmp, s));
	CK(cudaStreamEndCapture(s, &g));
	size_t nodes = 0;
	CK(cudaGraphGetNodes(g, NULL, &nodes));
	// Informational: a shim may serve the allocation itself instead of a memory node.
	printf("graph nodes=%zu\n", nodes);
	cudaGraphExec_t ge;
	CK(cudaGraphInstantiate(&ge, g, 0));
	for (int r = 0; r < replays; r++)
		CK(cudaGraphLaunch(ge, s));
	CK(cudaStreamSynchronize(s));
	handshake("graph", n * 4 * 2);
	unsigned long long got = device_checksum(acc, n * 4, s);
	// acc[i] = replays * pattern(i, 42) (mod 2^32): check on the host.
	std::vector<uint32_t> h(n);
	CK(cudaMemcpy(h.data(), acc, n * 4, cudaMemcpyDeviceToHost));
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += h[i] != (uint32_t)(replays * pattern(i, 42));
	printf("RESULT replay bad=%zu checksum=%llx\n", bad, got);

	// A second capture of plain kernels on memory allocated with cudaMalloc, updated in place.
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	fill_kernel<<<1024, 256, 0, s>>>(acc, n, 7);
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaGraphLaunch(ge, s));
	CK(cudaStreamSynchronize(s));
	printf("RESULT refill checksum_ok=%d\n",
	       device_checksum(acc, n * 4, s) == expected_checksum(n, 7, 0));
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaStreamDestroy(s));
	CK(cudaFree(acc));
	return finish("graph");
}
