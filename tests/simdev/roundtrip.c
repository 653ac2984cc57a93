/* A plain CUDA runtime program, compiled against the toolkit's headers and linked to simdev's
 * libcudart.so.13: cudaMalloc, cudaMemcpy both ways, cudaFree, with the data checked. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 20)

static int check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "roundtrip: %s: %s\n", what, cudaGetErrorString(e));
		return 1;
	}
	return 0;
}

int main(void)
{
	unsigned *in = malloc(N * sizeof(*in)), *out = calloc(N, sizeof(*out));
	void *dev = NULL;
	if (!in || !out)
		return 1;
	for (unsigned i = 0; i < N; i++)
		in[i] = i * 2654435761u;
	if (check(cudaMalloc(&dev, N * sizeof(*in)), "cudaMalloc") ||
	    check(cudaMemcpy(dev, in, N * sizeof(*in), cudaMemcpyHostToDevice), "cudaMemcpy H2D") ||
	    check(cudaMemcpy(out, dev, N * sizeof(*in), cudaMemcpyDeviceToHost), "cudaMemcpy D2H") ||
	    check(cudaFree(dev), "cudaFree"))
		return 1;
	for (unsigned i = 0; i < N; i++)
		if (out[i] != in[i]) {
			fprintf(stderr, "roundtrip: word %u differs: %u != %u\n", i, out[i], in[i]);
			return 1;
		}
	printf("roundtrip: %zu bytes to the device and back, intact\n", N * sizeof(*in));
	free(in);
	free(out);
	return 0;
}
