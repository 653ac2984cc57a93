// Where the shim's per-launch host time goes: an empty kernel launched back to back through the
// runtime (<<<>>>) and through the driver entry point the runtime hands out
// (cudaGetDriverEntryPointByVersion, i.e. what cuGetProcAddress answers), 500 per batch, median
// over batches. Run natively and under the shim; the difference between the two routes tells the
// wrapper's own cost from the cost of the route the runtime takes when the driver's entries are
// wrapped. Lines: "BENCH launch_<route> <us>".
#include <cuda.h>
#include <vector>
#include "common.h"

__global__ void empty_kernel(void) {}

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, unsigned, CUstream, void **, void **);

int main(int argc, char **argv)
{
	int batches = argc > 1 ? atoi(argv[1]) : 60;
	require_device();
	empty_kernel<<<1, 1>>>();
	CK(cudaDeviceSynchronize());
	cudaFunction_t f;
	CK(cudaGetFuncBySymbol(&f, (const void *)empty_kernel));
	void *p = NULL;
	cudaDriverEntryPointQueryResult q;
	CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &p, 12000, cudaEnableDefault, &q));
	launch_fn drv = (launch_fn)p;
	for (int round = 0; round < 3; round++) {
		std::vector<double> rt, dv;
		for (int b = 0; b < batches; b++) {
			rt.push_back(launch_batch_s(500, [] { empty_kernel<<<1, 1>>>(); }));
			dv.push_back(launch_batch_s(500, [&] {
				drv((CUfunction)f, 1, 1, 1, 1, 1, 1, 0, 0, NULL, NULL);
			}));
		}
		printf("BENCH launch_runtime %.3f us\n", median(rt) * 1e6);
		printf("BENCH launch_driver %.3f us\n", median(dv) * 1e6);
	}
	CK(cudaGetLastError());
	return finish("probe_launch");
}
