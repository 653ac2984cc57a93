// Probe: does cudaHostRegister's cost depend on the piece size or on how much is registered
// already? Registers 32 GiB of fresh THP memory (16-thread first touch) in pieces of 128 MiB,
// 1 GiB and 4 GiB, printing GB/s of the touch and of the registration, and the slowest call.
#include <sys/mman.h>
#include <thread>
#include <vector>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

static double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int main()
{
	const size_t total = 32ull << 30;
	cudaFree(0);
	for (size_t piece : {128ull << 20, 1ull << 30, 4ull << 30}) {
		char *p = (char *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		madvise(p, total, MADV_HUGEPAGE);
		double t0 = now();
		std::vector<std::thread> th;
		for (int t = 0; t < 16; t++)
			th.emplace_back([=] { for (size_t o = t * (8ull << 20); o < total; o += 16 * (8ull << 20)) memset(p + o, 0, 8ull << 20); });
		for (auto &x : th) x.join();
		double t1 = now(), worst = 0;
		for (size_t o = 0; o < total; o += piece) {
			double a = now();
			cudaError_t e = cudaHostRegister(p + o, piece, cudaHostRegisterDefault);
			double b = now() - a;
			if (e) { printf("register failed %d\n", e); return 1; }
			if (b > worst) worst = b;
		}
		double t2 = now();
		printf("piece %6zu MiB: touch %.1f GB/s, register %.1f GB/s (%zu calls, slowest %.1f ms)\n", piece >> 20,
		       total / (t1 - t0) / 1e9, total / (t2 - t1) / 1e9, total / piece, worst * 1e3);
		for (size_t o = 0; o < total; o += piece) cudaHostUnregister(p + o);
		munmap(p, total);
	}
	return 0;
}
