// A cuBLAS program: SGEMM and a bf16 GemmEx on 8192x8192 matrices, checked against a float64
// reference on sampled entries; cuBLAS's own workspace comes through its embedded runtime.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <math.h>
#include <vector>
#include "common.h"

#define CKB(x)                                                                         \
	do {                                                                           \
		cublasStatus_t s_ = (x);                                               \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                     \
			printf("ERROR %s:%d %s: status %d\n", __FILE__, __LINE__, #x,   \
			       (int)s_);                                               \
			g_failures++;                                                  \
		}                                                                      \
	} while (0)

__global__ void init_matrix(float *m, size_t n, uint32_t seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		m[i] = (float)(pattern(i, seed) % 2001) / 1000.0f - 1.0f;
}

__global__ void to_bf16(const float *in, __nv_bfloat16 *out, size_t n)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		out[i] = __float2bfloat16(in[i]);
}

static float host_value(size_t i, uint32_t seed)
{
	return (float)(pattern(i, seed) % 2001) / 1000.0f - 1.0f;
}

// Relative error of sampled entries of C = A*B (column major, n x n) against float64.
static double sampled_error(const std::vector<float> &c, int n)
{
	double num = 0, den = 0;
	for (int k = 0; k < 64; k++) {
		int row = (k * 7919) % n, col = (k * 104729) % n;
		double ref = 0;
		for (int j = 0; j < n; j++)
			ref += (double)host_value((size_t)j * n + row, 1) *
			       host_value((size_t)col * n + j, 2);
		double d = c[(size_t)col * n + row] - ref;
		num += d * d;
		den += ref * ref;
	}
	return sqrt(num / den);
}

static unsigned long long bits_checksum(const std::vector<float> &c)
{
	unsigned long long s = 0;
	for (size_t i = 0; i < c.size(); i++) {
		uint32_t u;
		memcpy(&u, &c[i], 4);
		s = s * 1000003ull + u;
	}
	return s;
}

int main(void)
{
	require_device();
	const int n = 8192;
	size_t nn = (size_t)n * n;
	float *a, *b, *c;
	__nv_bfloat16 *ah, *bh;
	CK(cudaMalloc(&a, nn * 4));
	CK(cudaMalloc(&b, nn * 4));
	CK(cudaMalloc(&c, nn * 4));
	CK(cudaMalloc(&ah, nn * 2));
	CK(cudaMalloc(&bh, nn * 2));
	init_matrix<<<1024, 256>>>(a, nn, 1);
	init_matrix<<<1024, 256>>>(b, nn, 2);
	to_bf16<<<1024, 256>>>(a, ah, nn);
	to_bf16<<<1024, 256>>>(b, bh, nn);
	CK(cudaDeviceSynchronize());
	cublasHandle_t h;
	CKB(cublasCreate(&h));
	const float one = 1.0f, zero = 0.0f;
	std::vector<float> host(nn);

	CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n));
	CK(cudaMemcpy(host.data(), c, nn * 4, cudaMemcpyDeviceToHost));
	double e32 = sampled_error(host, n);
	EXPECT(e32 < 1e-4, "sgemm error %g", e32);
	printf("RESULT sgemm error_ok=%d bits=%llx\n", e32 < 1e-4, bits_checksum(host));
	printf("sgemm rel error %.3g\n", e32);

	handshake("cublas_gemm", nn * 4 * 3 + nn * 2 * 2);

	CKB(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ah, CUDA_R_16BF, n, bh,
			 CUDA_R_16BF, n, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
			 CUBLAS_GEMM_DEFAULT));
	CK(cudaMemcpy(host.data(), c, nn * 4, cudaMemcpyDeviceToHost));
	double e16 = sampled_error(host, n);
	EXPECT(e16 < 1e-2, "bf16 gemm error %g", e16);
	printf("RESULT gemm_bf16 error_ok=%d bits=%llx\n", e16 < 1e-2, bits_checksum(host));
	printf("bf16 gemm rel error %.3g\n", e16);

	CKB(cublasDestroy(h));
	CK(cudaFree(a));
	CK(cudaFree(b));
	CK(cudaFree(c));
	CK(cudaFree(ah));
	CK(cudaFree(bh));
	return finish("cublas_gemm");
}
