// The runtime's allocation paths as an ordinary program uses them. Built three ways by
// gpu-check.sh: nvcc's default (static cudart), -cudart shared, --default-stream per-thread.
// Every result that must not change under the shim is printed on a RESULT line.
#include <cuda.h>
#include <pthread.h>
#include <vector>
#include "common.h"

#define MIB (1ull << 20)
#define GIB (1ull << 30)

// A kernel that keeps writing its buffer for a while: freeing the buffer and allocating again
// must not hand the same memory out while this may still run.
__global__ void slow_writer(uint32_t *p, size_t n, uint32_t v, int rounds)
{
	for (int r = 0; r < rounds; r++)
		for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
		     i += (size_t)gridDim.x * blockDim.x)
			p[i] = v + r;
}

struct thread_arg {
	int id;
	int errors;
};

// Many small allocations from several threads, each checked through a kernel and a copy.
static void *churn(void *a)
{
	struct thread_arg *t = (struct thread_arg *)a;
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	std::vector<void *> live;
	for (int i = 0; i < 400; i++) {
		size_t n = (size_t)256 << (i % 13); // 256 B .. 1 MiB
		void *p = NULL;
		CK(cudaMalloc(&p, n));
		if (!p)
			break;
		fill(p, n, t->id * 1000 + i, s);
		uint32_t first = 0, last = 0;
		CK(cudaMemcpyAsync(&first, p, 4, cudaMemcpyDeviceToHost, s));
		CK(cudaMemcpyAsync(&last, (char *)p + n - 4, 4, cudaMemcpyDeviceToHost, s));
		CK(cudaStreamSynchronize(s));
		if (first != pattern(0, t->id * 1000 + i) ||
		    last != pattern(n / 4 - 1, t->id * 1000 + i))
			t->errors++;
		live.push_back(p);
		if (live.size() > 16) {
			CK(cudaFree(live.front()));
			live.erase(live.begin());
		}
	}
	for (void *p : live)
		CK(cudaFree(p));
	CK(cudaStreamDestroy(s));
	return NULL;
}

int main(void)
{
	cudaStream_t s = 0;
	require_device();
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));

	// 1. Buffers of many sizes, filled and checked.
	const size_t sizes[] = { 256, 4096, MIB + 3, 64 * MIB, GIB, 3 * GIB };
	const int nb = sizeof(sizes) / sizeof(sizes[0]);
	void *buf[nb];
	size_t held = 0;
	for (int i = 0; i < nb; i++) {
		buf[i] = NULL;
		CK(cudaMalloc(&buf[i], sizes[i]));
		EXPECT(((uintptr_t)buf[i] & 255) == 0, "cudaMalloc alignment %p", buf[i]);
		held += sizes[i];
		fill(buf[i], sizes[i] & ~3ull, 100 + i, s);
	}
	CK(cudaDeviceSynchronize());
	for (int i = 0; i < nb; i++) {
		size_t words = sizes[i] / 4;
		unsigned long long got = device_checksum(buf[i], words * 4, s);
		unsigned long long want = i < 4 ? expected_checksum(words, 100 + i, 0) : got;
		EXPECT(got == want, "buffer %d checksum", i);
		printf("RESULT fill size=%zu checksum=%llx\n", sizes[i], got);
	}

	// 2. What the runtime and the driver say about an allocation.
	{
		cudaPointerAttributes a;
		CK(cudaPointerGetAttributes(&a, (char *)buf[4] + 12345));
		printf("RESULT pointer type=%d device=%d\n", (int)a.type, a.device);
		// cuMemGetAddressRange reached the way a library does: through the runtime's
		// driver entry point (cuGetProcAddress underneath).
		typedef CUresult (*range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
		range_fn range = NULL;
		cudaDriverEntryPointQueryResult q;
		CK(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", (void **)&range, 12000,
						    cudaEnableDefault, &q));
		CUdeviceptr base = 0;
		size_t size = 0;
		if (range)
			EXPECT(range(&base, &size, (CUdeviceptr)buf[4] + GIB / 2) == CUDA_SUCCESS,
			       "cuMemGetAddressRange");
		printf("RESULT range base_matches=%d size=%zu\n", base == (CUdeviceptr)buf[4],
		       size);
		size_t fr = 0, tot = 0;
		CK(cudaMemGetInfo(&fr, &tot));
		printf("RESULT meminfo total_ok=%d free_le_total=%d\n",
		       tot > 0 && tot <= prop.totalGlobalMem + 64 * MIB, fr <= tot);
		printf("meminfo free=%zu total=%zu\n", fr, tot);
	}

	// 3. Memset, device-to-device copy, pitched memory.
	{
		CK(cudaMemset(buf[3], 0x5a, 64 * MIB));
		CK(cudaMemcpy(buf[4], buf[3], 64 * MIB, cudaMemcpyDeviceToDevice));
		std::vector<unsigned char> h(64 * MIB);
		CK(cudaMemcpy(h.data(), buf[4], h.size(), cudaMemcpyDeviceToHost));
		size_t bad = 0;
		for (unsigned char c : h)
			bad += c != 0x5a;
		printf("RESULT memset_copy bad_bytes=%zu\n", bad);
		void *pitched = NULL;
		size_t pitch = 0;
		CK(cudaMallocPitch(&pitched, &pitch, 1000, 300));
		EXPECT(pitch >= 1000 && pitch % 128 == 0, "pitch %zu", pitch);
		CK(cudaMemset2D(pitched, pitch, 7, 1000, 300));
		std::vector<unsigned char> row(1000);
		CK(cudaMemcpy(row.data(), (char *)pitched + 299 * pitch, 1000,
			      cudaMemcpyDeviceToHost));
		printf("RESULT pitch valid=%d last_row_ok=%d\n", pitch >= 1000 && pitch % 128 == 0,
		       row[0] == 7 && row[999] == 7);
		printf("pitch=%zu\n", pitch);
		CK(cudaFree(pitched));
	}

	// 4. Stream-ordered allocation.
	{
		cudaStream_t as;
		CK(cudaStreamCreateWithFlags(&as, cudaStreamNonBlocking));
		void *p = NULL;
		CK(cudaMallocAsync(&p, 32 * MIB, as));
		fill(p, 32 * MIB, 77, as);
		unsigned long long c = device_checksum(p, 32 * MIB, as);
		CK(cudaFreeAsync(p, as));
		CK(cudaStreamSynchronize(as));
		printf("RESULT async checksum_ok=%d\n", c == expected_checksum(8 * MIB, 77, 0));
		CK(cudaStreamDestroy(as));
	}

	handshake("alloc_basic", held);

	// 5. Free while a kernel that writes the buffer was just launched, then allocate again:
	// the new allocation must not be overwritten by the old kernel.
	{
		size_t n = 256 * MIB;
		int bad = 0;
		cudaStream_t ns; // not ordered after the default stream
		CK(cudaStreamCreateWithFlags(&ns, cudaStreamNonBlocking));
		for (int r = 0; r < 5; r++) {
			void *a = NULL, *b = NULL;
			CK(cudaMalloc(&a, n));
			slow_writer<<<264, 512>>>((uint32_t *)a, n / 4, 0xdead0000, 200);
			CK(cudaGetLastError());
			CK(cudaFree(a));
			CK(cudaMalloc(&b, n));
			CK(cudaMemsetAsync(b, 0, n, ns));
			CK(cudaDeviceSynchronize());
			std::vector<uint32_t> h(n / 4);
			CK(cudaMemcpy(h.data(), b, n, cudaMemcpyDeviceToHost));
			for (uint32_t v : h)
				bad += v != 0;
			CK(cudaFree(b));
		}
		CK(cudaStreamDestroy(ns));
		printf("RESULT reuse_after_free overwritten_words=%d\n", bad);
	}

	// 6. Many threads allocating at once.
	{
		const int nt = 8;
		pthread_t tid[nt];
		thread_arg arg[nt];
		for (int i = 0; i < nt; i++) {
			arg[i] = { i, 0 };
			pthread_create(&tid[i], NULL, churn, &arg[i]);
		}
		int errors = 0;
		for (int i = 0; i < nt; i++) {
			pthread_join(tid[i], NULL);
			errors += arg[i].errors;
		}
		printf("RESULT threads errors=%d\n", errors);
	}

	// 7. Free and allocate again: contents of the survivors intact.
	CK(cudaFree(buf[4]));
	buf[4] = NULL;
	CK(cudaMalloc(&buf[4], 2 * GIB));
	fill(buf[4], 2 * GIB, 5, s);
	CK(cudaDeviceSynchronize());
	printf("RESULT survivor checksum=%llx\n", device_checksum(buf[5], 3 * GIB, s));
	for (int i = 0; i < nb; i++)
		CK(cudaFree(buf[i]));
	return finish("alloc_basic");
}
