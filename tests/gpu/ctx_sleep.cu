// A kernel writing a 256 MiB buffer with 0xAB for about 2 s on a context the program made itself
// (cuCtxCreate), or on a green context (cuGreenCtxCreate + cuCtxFromGreenCtx), never on the
// primary context. gpucheck.py sleeps the process from outside with vmmctl while the kernel runs,
// then wakes it: the sleep must wait for the kernel, and the buffer must be intact afterwards.
// The native run is the anchor (the same RESULT lines).
// Usage: ctx_sleep created|green [ms]
#include <cuda.h>
#include <vector>
#include "common.h"

#define CU(x)                                                                          \
	do {                                                                           \
		CUresult r_ = (x);                                                     \
		if (r_ != CUDA_SUCCESS) {                                              \
			const char *s_ = NULL;                                         \
			cuGetErrorName(r_, &s_);                                       \
			printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #x,         \
			       s_ ? s_ : "unknown CUresult");                          \
			fflush(stdout);                                                \
			g_failures++;                                                  \
		}                                                                      \
	} while (0)

__device__ static inline unsigned long long global_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Fills p[0..n) in `passes` slices, one slice per ns/passes nanoseconds: the buffer is being
// written for the whole duration. Every thread must be resident (the grid is sized for that).
__global__ void slow_fill(uint32_t *p, size_t n, unsigned long long ns, int passes)
{
	unsigned long long t0 = global_ns();
	size_t slice = n / passes;
	size_t tid = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	size_t stride = (size_t)gridDim.x * blockDim.x;

	for (int k = 0; k < passes; k++) {
		while (global_ns() < t0 + ns * (k + 1) / passes)
			__nanosleep(1000);
		for (size_t i = k * slice + tid; i < (k + 1) * slice; i += stride)
			p[i] = 0xABABABABu;
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "created";
	int ms = argc > 2 ? atoi(argv[2]) : 2000;
	bool green = !strcmp(mode, "green");
	size_t bytes = 256ull << 20, n = bytes / 4;
	CUdevice dev;
	CUcontext ctx = NULL;
	CUgreenCtx gctx = NULL;
	cudaStream_t stream = NULL;
	uint32_t *p = NULL;
	int sms = 0;

	CU(cuInit(0));
	CU(cuDeviceGet(&dev, 0));
	if (green) {
		CUdevResource res;
		CUdevResourceDesc desc;
		CUstream gs = NULL;

		CU(cuDeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM));
		CU(cuDevResourceGenerateDesc(&desc, &res, 1));
		CU(cuGreenCtxCreate(&gctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
		CU(cuCtxFromGreenCtx(&ctx, gctx));
		CU(cuCtxSetCurrent(ctx));
		CU(cuGreenCtxStreamCreate(&gs, gctx, CU_STREAM_NON_BLOCKING, 0));
		stream = (cudaStream_t)gs;
	} else {
		CUctxCreateParams params;

		memset(&params, 0, sizeof(params));
		CU(cuCtxCreate(&ctx, &params, 0, dev)); // current to this thread from here on
		CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	}
	if (g_failures) {
		printf("ERROR no %s context\n", mode);
		return finish("ctx_sleep");
	}
	CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	CK(cudaMalloc(&p, bytes));
	CK(cudaMemsetAsync(p, 0, bytes, stream));
	CK(cudaStreamSynchronize(stream));
	handshake("ctx_sleep", bytes);
	double t0 = now_s();
	slow_fill<<<sms * 4, 256, 0, stream>>>(p, n, (unsigned long long)ms * 1000000ull, 64);
	CK(cudaGetLastError());
	printf("LAUNCHED %s\n", mode);
	fflush(stdout);
	CK(cudaStreamSynchronize(stream));
	printf("KERNEL DONE %.3f s\n", now_s() - t0);
	fflush(stdout);
	std::vector<uint8_t> h(bytes);
	CK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
	size_t bad = 0;
	for (size_t i = 0; i < bytes; i++)
		bad += h[i] != 0xAB;
	printf("RESULT ctx_sleep %s bad_bytes=%zu\n", mode, bad);
	CK(cudaFree(p));
	if (green) {
		CU(cuStreamDestroy((CUstream)stream));
		CU(cuGreenCtxDestroy(gctx));
	} else {
		CK(cudaStreamDestroy(stream));
		CU(cuCtxDestroy(ctx));
	}
	return finish("ctx_sleep");
}
