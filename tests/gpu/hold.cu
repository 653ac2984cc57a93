// Holds GiB of device memory (allocated in CHUNK-GiB cudaMalloc calls, filled with a known
// pattern) and obeys commands on stdin, one per line, answering one line each:
//   check    -> "CHECK ok|bad <n>"   contents still what was written (after sleep/wake)
//   refill   -> "REFILL ok|bad"      write and verify again (after a discard sleep)
//   pinned   -> "PINNED <d2h GB/s> <h2d GB/s> <GiB>": a pinned cudaMemcpy of min(GiB, 8) GiB
//               through freshly provisioned pinned memory, the anchor for sleep/wake rates
//   quit     -> exit
// Usage: hold GiB [CHUNK_GiB | small]
// "small": GiB held in many allocations of 2-32 MiB left behind by fragmenting frees (1.25x GiB
// allocated, every third freed, the rest refilled with other sizes): the heap then holds them in
// many small handles, the case a wake must re-create at link speed.
#include <sys/mman.h>
#include <vector>
#include "common.h"

#define GIB (1ull << 30)

static std::vector<void *> chunks;
static std::vector<unsigned long long> sums;
static std::vector<size_t> sizes;   // bytes of each chunk

static int verify(void)
{
	int bad = 0;
	for (size_t i = 0; i < chunks.size(); i++)
		bad += device_checksum(chunks[i], sizes[i], 0) != sums[i];
	return bad;
}

static void write_all(uint32_t seed)
{
	sums.clear();
	for (size_t i = 0; i < chunks.size(); i++)
		fill(chunks[i], sizes[i], seed + (uint32_t)i, 0);
	for (size_t i = 0; i < chunks.size(); i++)
		sums.push_back(device_checksum(chunks[i], sizes[i], 0));
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
			size_t len = n - done < sizes[i] ? n - done : sizes[i];
			CK(cudaMemcpyAsync(h + done, chunks[i], len, cudaMemcpyDeviceToHost, 0));
			done += len;
		}
		CK(cudaDeviceSynchronize());
		double out = n / (now_s() - t0) / 1e9;
		t0 = now_s();
		for (size_t done = 0, i = 0; done < n; i++) {
			size_t len = n - done < sizes[i] ? n - done : sizes[i];
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

static void *alloc_or_die(size_t bytes)
{
	void *p = NULL;
	CK(cudaMalloc(&p, bytes));
	if (!p)
		exit(finish("hold"));
	return p;
}

// Fragmenting allocations: sizes cycle through 2..32 MiB; a third is freed and the hole refilled
// with other sizes until `total` bytes are held.
static void alloc_small(size_t total)
{
	static const size_t mib[] = { 2, 6, 32, 4, 12, 24, 8, 16, 2, 20 };
	const size_t nmib = sizeof(mib) / sizeof(mib[0]);
	size_t held = 0, k = 0;
	while (held < total + total / 4) {
		size_t b = mib[k++ % nmib] << 20;
		chunks.push_back(alloc_or_die(b));
		sizes.push_back(b);
		held += b;
	}
	size_t w = 0;
	for (size_t i = 0; i < chunks.size(); i++) {
		if (i % 3 == 1) {
			CK(cudaFree(chunks[i]));
			held -= sizes[i];
			continue;
		}
		chunks[w] = chunks[i];
		sizes[w++] = sizes[i];
	}
	chunks.resize(w);
	sizes.resize(w);
	for (k = 3; held < total; k++) {
		size_t b = mib[k % nmib] << 20;
		if (b > total - held)
			b = total - held;
		chunks.push_back(alloc_or_die(b));
		sizes.push_back(b);
		held += b;
	}
}

int main(int argc, char **argv)
{
	require_device();
	size_t gib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
	bool small = argc > 2 && !strcmp(argv[2], "small");
	size_t chunk = argc > 2 && !small ? strtoull(argv[2], NULL, 10) : 1;
	if (gib == 0 || chunk == 0 || gib % chunk) {
		fprintf(stderr, "usage: hold GiB [CHUNK_GiB dividing GiB | small]\n");
		return 2;
	}
	double t0 = now_s();
	if (small) {
		alloc_small(gib * GIB);
	} else {
		for (size_t i = 0; i < gib / chunk; i++) {
			chunks.push_back(alloc_or_die(chunk * GIB));
			sizes.push_back(chunk * GIB);
		}
	}
	write_all(1);
	printf("hold: %zu GiB allocated (%zu allocations) and filled in %.2f s\n", gib,
	       chunks.size(), now_s() - t0);
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
