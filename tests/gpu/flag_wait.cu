// A kernel that cannot finish until the host writes a flag: it spins on a flag in device memory
// that a cudaMemcpyAsync from another thread sets later, on another stream (a legal pattern).
// gpucheck.py runs it natively (the anchor) and under the shim with `vmmctl sleep` started
// while the kernel spins and the flag's copy issued after the sleep began: the copy waits at the
// shim's gate and the device cannot drain, so the sleep must give up within its deadline, roll
// back and let the copy through; the program then finishes exactly as natively.
// Protocol: prints "SPINNING", waits for a line on stdin (any), then issues the copy.
// Usage: flag_wait [MiB of data checked around it]
#include <pthread.h>
#include <vector>
#include "common.h"

__device__ static unsigned long long globaltimer_ns(void)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

// Thread 0 spins until *flag != 0 (at most 60 s); then, if it saw the flag, every word of data
// gets +1. One block: the copy engine that will write the flag is never starved.
__global__ void wait_flag(const volatile int *flag, int *saw, uint32_t *data, size_t n)
{
	__shared__ int seen;
	if (threadIdx.x == 0) {
		unsigned long long end = globaltimer_ns() + 60ull * 1000000000ull;
		while (!*flag && globaltimer_ns() < end)
			__nanosleep(1000);
		seen = *flag ? 1 : 2;
		*saw = seen;
	}
	__syncthreads();
	if (seen == 1)
		for (size_t i = threadIdx.x; i < n; i += blockDim.x)
			data[i] += 1;
}

struct setter {
	int *flag;
	int *one;        // pinned
	cudaStream_t s;
	cudaError_t rc;
};

static void *set_flag(void *arg)
{
	setter *st = (setter *)arg;
	st->rc = cudaMemcpyAsync(st->flag, st->one, sizeof(int), cudaMemcpyHostToDevice, st->s);
	if (st->rc == cudaSuccess)
		st->rc = cudaStreamSynchronize(st->s);
	return NULL;
}

int main(int argc, char **argv)
{
	require_device();
	size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
	size_t n = (mib << 20) / 4;
	uint32_t *data = NULL;
	int *flag = NULL, *saw = NULL, *one = NULL, saw_h = 0;
	cudaStream_t ks, cs;
	char line[64];

	CK(cudaMalloc(&data, n * 4));
	CK(cudaMalloc(&flag, sizeof(int)));
	CK(cudaMalloc(&saw, sizeof(int)));
	CK(cudaMallocHost(&one, sizeof(int)));
	*one = 1;
	fill(data, n * 4, 7, 0);
	CK(cudaMemset(flag, 0, sizeof(int)));
	CK(cudaMemset(saw, 0, sizeof(int)));
	CK(cudaDeviceSynchronize());
	CK(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
	CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
	wait_flag<<<1, 256, 0, ks>>>(flag, saw, data, n);
	CK(cudaGetLastError());
	double t0 = now_s();
	printf("SPINNING\n");
	fflush(stdout);
	read_command(line, sizeof(line), 120);
	setter st = { flag, one, cs, cudaSuccess };
	pthread_t th;
	pthread_create(&th, NULL, set_flag, &st);
	CK(cudaStreamSynchronize(ks));
	pthread_join(th, NULL);
	CK(st.rc);
	printf("flag copied and kernel done %.3f s after SPINNING\n", now_s() - t0);
	CK(cudaMemcpy(&saw_h, saw, sizeof(int), cudaMemcpyDeviceToHost));
	size_t m = n < (16u << 20) ? n : (16u << 20), bad = 0;
	std::vector<uint32_t> h(m);
	CK(cudaMemcpy(h.data(), data, m * 4, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < m; i++)
		bad += h[i] != pattern(i, 7) + 1u;
	printf("RESULT flag_wait saw_flag=%d bad_words=%zu\n", saw_h, bad);
	CK(cudaStreamDestroy(ks));
	CK(cudaStreamDestroy(cs));
	CK(cudaFreeHost(one));
	CK(cudaFree(saw));
	CK(cudaFree(flag));
	CK(cudaFree(data));
	return finish("flag_wait");
}
