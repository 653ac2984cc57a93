// Two GPUs (the x2 rows of gpucheck.py): cudaMalloc memory on GPU 0 and on GPU 1 (under the shim,
// the shim's memory) reached by the other GPU's kernels through peer access, and held on both
// GPUs while one of them is slept with `vmmctl sleep --device N`.
//
// peer MiB          peer access: each GPU's kernels read and write the other GPU's buffer,
//                   cudaMemcpyPeer both ways, every checksum against the value computed on the
//                   host; RESULT lines; then the handshake (HOLD/READY, GPUCHECK_HANDSHAKE=1).
// peer MiB --hold   holds MiB on each GPU (filled, checksummed), prints "HOLDDEV d bytes" per
//                   GPU, "HOLD total" and "READY", then obeys one command a line:
//   work D   -> a thread runs a kernel on GPU D over GPU D's own buffer and answers
//               "WORK D ok|bad <ms>" when it is done (while the other GPU sleeps, it shows
//               whether GPU D's work runs or is held)
//   check D  -> GPU D's buffer read by a kernel on the other GPU (peer) and on GPU D:
//               "CHECK D ok|bad"
//   quit     -> "RESULT peer_hold ..." and exit
// Exits 0 with "SKIP" when fewer than two GPUs or no peer access (the harness skips earlier).
#include <pthread.h>
#include "common.h"

#define MIB (1ull << 20)

static void *buf[2];
static size_t bytes;
static unsigned long long sums[2];
static int works_ok, works_bad, checks_ok, checks_bad;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

__global__ void add_kernel(uint32_t *p, size_t n, uint32_t add)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] += add;
}

// Checksum of p (on any GPU) computed by a kernel on GPU dev.
static unsigned long long checksum_on(int dev, const void *p, size_t n)
{
	CK(cudaSetDevice(dev));
	return device_checksum(p, n, 0);
}

static void add_on(int dev, void *p, size_t n, uint32_t add)
{
	CK(cudaSetDevice(dev));
	add_kernel<<<1024, 256>>>((uint32_t *)p, n / 4, add);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
}

static void result(const char *what, bool ok)
{
	printf("RESULT peer %s %s\n", what, ok ? "ok" : "BAD");
	fflush(stdout);
	EXPECT(ok, "%s", what);
}

// Kernels on one GPU read and write the other's buffer, then copies between them.
static void peer_access(void)
{
	size_t n = bytes / 4;
	unsigned long long want[2] = { expected_checksum(n, 10, 0), expected_checksum(n, 11, 0) };
	unsigned long long plus1[2] = { expected_checksum(n, 10, 1), expected_checksum(n, 11, 1) };
	for (int d = 0; d < 2; d++) {
		int o = 1 - d;
		char what[64];
		snprintf(what, sizeof(what), "gpu%d_reads_gpu%d", o, d);
		result(what, checksum_on(o, buf[d], bytes) == want[d]);
		add_on(o, buf[d], bytes, 1); // the other GPU writes this one's memory
		snprintf(what, sizeof(what), "gpu%d_wrote_gpu%d_seen_by_gpu%d", o, d, d);
		result(what, checksum_on(d, buf[d], bytes) == plus1[d]);
		add_on(d, buf[d], bytes, (uint32_t)-1); // back to the fill
	}
	for (int d = 0; d < 2; d++) {
		int o = 1 - d;
		void *dst = NULL;
		CK(cudaSetDevice(o));
		CK(cudaMalloc(&dst, bytes));
		CK(cudaMemcpyPeer(dst, o, buf[d], d, bytes));
		CK(cudaDeviceSynchronize());
		char what[64];
		snprintf(what, sizeof(what), "memcpypeer_gpu%d_to_gpu%d", d, o);
		result(what, dst && checksum_on(o, dst, bytes) == want[d]);
		// And back over the original, after changing the copy: the original must change too.
		if (dst) {
			add_on(o, dst, bytes, 1);
			CK(cudaMemcpyPeer(buf[d], d, dst, o, bytes));
			CK(cudaDeviceSynchronize());
			snprintf(what, sizeof(what), "memcpypeer_gpu%d_to_gpu%d", o, d);
			result(what, checksum_on(d, buf[d], bytes) == plus1[d]);
			add_on(d, buf[d], bytes, (uint32_t)-1);
		}
		CK(cudaFree(dst));
	}
}

static void *work(void *arg)
{
	int d = (int)(intptr_t)arg;
	double t0 = now_s();
	bool ok = checksum_on(d, buf[d], bytes) == sums[d];
	pthread_mutex_lock(&out_lock);
	ok ? works_ok++ : works_bad++;
	printf("WORK %d %s %.1f\n", d, ok ? "ok" : "bad", (now_s() - t0) * 1e3);
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
	return NULL;
}

static void check(int d)
{
	bool ok = checksum_on(1 - d, buf[d], bytes) == sums[d] &&
		  checksum_on(d, buf[d], bytes) == sums[d];
	pthread_mutex_lock(&out_lock);
	ok ? checks_ok++ : checks_bad++;
	printf("CHECK %d %s\n", d, ok ? "ok" : "bad");
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

static void hold_loop(void)
{
	for (int d = 0; d < 2; d++) {
		CK(cudaSetDevice(d));
		fill(buf[d], bytes, 20 + d, 0);
		sums[d] = device_checksum(buf[d], bytes, 0);
		printf("HOLDDEV %d %zu\n", d, bytes);
	}
	printf("HOLD %zu\nREADY peer\n", 2 * bytes);
	fflush(stdout);
	pthread_t threads[16];
	int nthreads = 0;
	char cmd[64];
	int d;
	while (read_command(cmd, sizeof(cmd), 300) == 0) {
		if (sscanf(cmd, "work %d", &d) == 1 && (d == 0 || d == 1) && nthreads < 16) {
			if (pthread_create(&threads[nthreads], NULL, work, (void *)(intptr_t)d) == 0)
				nthreads++;
		} else if (sscanf(cmd, "check %d", &d) == 1 && (d == 0 || d == 1)) {
			check(d);
		} else if (!strcmp(cmd, "quit")) {
			break;
		} else {
			pthread_mutex_lock(&out_lock);
			printf("UNKNOWN %s\n", cmd);
			fflush(stdout);
			pthread_mutex_unlock(&out_lock);
		}
	}
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	printf("RESULT peer_hold works_ok=%d works_bad=%d checks_ok=%d checks_bad=%d\n", works_ok,
	       works_bad, checks_ok, checks_bad);
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 64;
	bool hold = argc > 2 && !strcmp(argv[2], "--hold");
	if (mib == 0) {
		fprintf(stderr, "usage: peer MiB [--hold]\n");
		return 2;
	}
	bytes = mib * MIB;
	int n = 0, can01 = 0, can10 = 0;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
		printf("SKIP %d GPU(s), two needed\n", n);
		return 0;
	}
	CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
	CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
	if (!can01 || !can10) {
		printf("SKIP no peer access between GPU 0 and 1 (%d, %d)\n", can01, can10);
		return 0;
	}
	for (int d = 0; d < 2; d++) {
		CK(cudaSetDevice(d));
		CK(cudaDeviceEnablePeerAccess(1 - d, 0));
		CK(cudaMalloc(&buf[d], bytes));
		if (!buf[d])
			return finish("peer");
		if (!hold)
			fill(buf[d], bytes, 10 + d, 0);
	}
	for (int d = 0; d < 2; d++) {
		CK(cudaSetDevice(d));
		CK(cudaDeviceSynchronize());
	}
	if (hold) {
		hold_loop();
	} else {
		peer_access();
		handshake("peer", 2 * bytes);
	}
	for (int d = 0; d < 2; d++) {
		CK(cudaSetDevice(d));
		CK(cudaFree(buf[d]));
	}
	return finish(hold ? "peer_hold" : "peer");
}
