// cudaDeviceReset in an ordinary program, as a test harness between cases does: memory is
// allocated, filled and checked, the device is reset, and the next round allocates as much
// again. Natively the reset frees everything; under the shim the memory is the virtual-memory
// API's, which outlives a reset (PROBE.md (j)), so the shim frees it itself: without that the
// rounds run out of memory. Under the shim each round also sleeps and wakes the process through
// the in-process API (found with dlsym, absent natively), so that a sleep after a reset runs on
// copy streams made after it. RESULT lines must be the same both ways.
#include <dlfcn.h>
#include "common.h"

#define GIB (1ull << 30)

typedef int (*sleep_fn)(const char *, int);
typedef int (*wake_fn)(const char *);

int main(void)
{
	sleep_fn vsleep = (sleep_fn)dlsym(RTLD_DEFAULT, "vmmshim_sleep");
	wake_fn vwake = (wake_fn)dlsym(RTLD_DEFAULT, "vmmshim_wake");
	size_t free0 = 0, total = 0, free_now = 0;
	void *old = NULL;

	CK(cudaSetDevice(0));
	CK(cudaMemGetInfo(&free0, &total));
	// Rounds of 40% of the device: two of them cannot be held at once.
	size_t chunks = (size_t)(free0 * 0.4) / GIB;
	for (int round = 0; round < 4; round++) {
		std::vector<void *> held;
		cudaStream_t s;
		int bad = 0;

		CK(cudaStreamCreate(&s));
		for (size_t i = 0; i < chunks; i++) {
			void *p = NULL;
			cudaError_t e = cudaMalloc(&p, GIB);
			if (e != cudaSuccess) {
				printf("RESULT round %d: allocation %zu of %zu failed: %s\n", round, i,
				       chunks, cudaGetErrorName(e));
				break;
			}
			fill(p, GIB, round * 100 + (uint32_t)i, s);
			held.push_back(p);
		}
		CK(cudaStreamSynchronize(s));
		if (vsleep && vwake) {
			int a = vsleep(NULL, 0), b = vwake(NULL);
			EXPECT(a == 0 && b == 0, "round %d: sleep %d, wake %d", round, a, b);
		}
		for (size_t i = 0; i < held.size(); i++)
			bad += device_checksum(held[i], GIB, s) !=
			       expected_checksum(GIB / 4, round * 100 + (uint32_t)i, 0);
		printf("RESULT round %d: %zu of %zu GiB held, %d corrupt\n", round, held.size(),
		       chunks, bad);
		old = held.empty() ? NULL : held[0];
		CK(cudaDeviceReset());
		CK(cudaSetDevice(0));
		CK(cudaMemGetInfo(&free_now, &total));
		// What the context itself takes comes back with it; a few hundred MiB of slack.
		printf("RESULT round %d: the device's memory back after the reset: %s\n", round,
		       free_now + (512ull << 20) >= free0 ? "yes" : "no");
		printf("free MiB before %zu after round %d's reset %zu\n", free0 >> 20, round,
		       free_now >> 20);
	}
	// A pointer of before the reset is no longer the program's.
	cudaError_t e = cudaFree(old);
	printf("RESULT cudaFree of a pointer from before the reset: %s\n",
	       e == cudaSuccess ? "accepted" : "refused");
	cudaGetLastError();
	printf("failures %d\n", g_failures);
	return g_failures ? 1 : 0;
}
