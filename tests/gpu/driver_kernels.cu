// Kernels for driver_api.cu, built into a fatbin (nvcc -fatbin) and loaded with cuModuleLoad,
// so that driver_api needs no CUDA runtime at all.
#include <stdint.h>

extern "C" __global__ void fill_words(uint32_t *p, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = (uint32_t)(i * 2654435761u) ^ seed;
}

extern "C" __global__ void add_words(uint32_t *dst, const uint32_t *a, const uint32_t *b, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		dst[i] = a[i] + b[i];
}
