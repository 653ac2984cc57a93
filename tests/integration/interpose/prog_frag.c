/* (j) The fragmentation case, through cudaMalloc: on a 1 GiB device, 512 x 2 MiB, free every other
 * one, then 512 MiB in one allocation. Natively the free memory is in 2 MiB holes and the last
 * allocation fails; served from one virtual range it succeeds. Argument "expect-oom" inverts the
 * verdict, to show the native failure. */
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <string.h>

#include "prog_common.h"

#define N 512

int main(int argc, char **argv)
{
	bool expect_oom = argc > 1 && !strcmp(argv[1], "expect-oom");
	static void *p[N];
	void *big = NULL;
	cudaError_t e;

	for (int i = 0; i < N; i++)
		CHECK_CU(cudaMalloc(&p[i], 2 << 20));
	for (int i = 0; i < N; i += 2)
		CHECK_CU(cudaFree(p[i]));
	e = cudaMalloc(&big, (size_t)512 << 20);
	printf("prog_frag: 512 MiB after fragmenting: %s\n", e ? "out of memory" : "ok");
	if (!e) {
		CHECK_CU(cudaMemset(big, 0x5a, (size_t)512 << 20));
		CHECK_CU(cudaFree(big));
	}
	for (int i = 1; i < N; i += 2)
		CHECK_CU(cudaFree(p[i]));
	return (e != cudaSuccess) == expect_oom ? 0 : 1;
}
