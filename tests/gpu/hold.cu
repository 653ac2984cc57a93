// Holds GiB of device memory (allocated in CHUNK-GiB cudaMalloc calls, filled with a known
// pattern) and obeys commands on stdin, one per line, answering one line each:
//   check    -> "CHECK ok|bad <n>"   contents still what was written (after sleep/wake)
//   refill   -> "REFILL ok|bad"      write and verify again (after a discard sleep)
//   pinned   -> "PINNED <d2h GB/s> <h2d GB/s> <GiB>": a pinned cudaMemcpy of min(GiB, 8) GiB
//               through freshly provisioned pinned memory, the anchor for sleep/wake rates
//   quit     -> exit
// Usage: hold GiB [CHUNK_GiB]
#include <sys/mman.h>
#include <vector>
#include "common.h"

#define GIB (1ull << 30)

static std::vector<void *> chunks;
static std::vector<unsigned long long> sums;
static size_t chunk_bytes;

static int verify(void)
{
	int bad = 0;
	for (size_t i = 0; i < chunks.size(); i++)
		bad += device_checksum(chunks[i], chunk_bytes, 0) != sums[i];
	return bad;
}

static void write_all(uint32_t seed)
{
	sums.clear();
	for (size_t i = 0; i < chunks.size(); i++)
		fill(chunks[i], chunk_bytes, seed + (uint32_t)i, 0);
	for (size_t i = 0; i < chunks.size(); i++)
		sums.push_back(device_checksum(chunks[i], chunk_bytes, 0));
}

static void pinned(size_t gib)
{
	size_t n = (gib < 8 ? gib : 8) * GIB;
	char *h = (char *)mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED) {
		printf("PINNED 0 0 0\n");
		return;
	}
	madvise(h, n, MADV_HUGEPAGE);
	memset(h, 1, n);
	CK(cudaHostRegister(h, n, cudaHostRegisterDefault));
	double best_out = 0, best_in = 0;
	for (int r = 0; r < 3; r++) {
		// Copy n bytes out of (and back into) the held chunks, chunk by chunk.
		double t0 = now_s();
		for (size_t done = 0, i = 0; done < n; i++) {
			size_t len = n - done < chunk_bytes ? n - done : chunk_bytes;
			CK(cudaMemcpyAsync(h + done, chunks[i], len, cudaMemcpyDeviceToHost, 0));
			done += len;
		}
		CK(cudaDeviceSynchronize());
		double out = n / (now_s() - t0) / 1e9;
		t0 = now_s();
		for (size_t done = 0, i = 0; done < n; i++) {
			size_t len = n - done < chunk_bytes ? n - done : chunk_bytes;
			CK(cudaMemcpyAsync(chunks[i], h + done, len, cudaMemcpyHostToDevice, 0));
			done += len;
		}
		CK(cudaDeviceSynchronize());
		double in = n / (now_s() - t0) / 1e9;
		best_out = out > best_out ? out : best_out;
		best_in = in > best_in ? in : best_in;
	}
	CK(cudaHostUnregister(h));
	munmap(h, n);
	printf("PINNED %.2f %.2f %zu\n", best_out, best_in, n / GIB);
}

int main(int argc, char **argv)
{
	require_device();
	size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
	size_t chunk = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
	if (gib == 0 || chunk == 0 || gib % chunk) {
		fprintf(stderr, "usage: hold GiB [CHUNK_GiB dividing GiB]\n");
		return 2;
	}
	chunk_bytes = chunk * GIB;
	double t0 = now_s();
	for (size_t i = 0; i < gib / chunk; i++) {
		void *p = NULL;
		CK(cudaMalloc(&p, chunk_bytes));
		if (!p)
			return finish("hold");
		chunks.push_back(p);
	}
	write_all(1);
	printf("hold: %zu GiB allocated and filled in %.2f s\n", gib, now_s() - t0);
	printf("HOLD %zu\nREADY hold\n", gib * GIB);
	fflush(stdout);
	char cmd[64];
	while (read_command(cmd, sizeof(cmd), 300) == 0) {
		if (!strcmp(cmd, "check")) {
			int bad = verify();
			printf("CHECK %s %d\n", bad ? "bad" : "ok", bad);
		} else if (!strcmp(cmd, "refill")) {
			write_all(99);
			int bad = verify();
			printf("REFILL %s\n", bad || g_failures ? "bad" : "ok");
		} else if (!strcmp(cmd, "pinned")) {
			pinned(gib);
		} else if (!strcmp(cmd, "quit")) {
			break;
		} else {
			printf("UNKNOWN %s\n", cmd);
		}
		fflush(stdout);
	}
	for (void *p : chunks)
		CK(cudaFree(p));
	return finish("hold");
}
