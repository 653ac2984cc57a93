/* demo_app: an ordinary CUDA runtime program that knows nothing of vmmshim. It fills device
 * buffers of mixed sizes with random data, then keeps reading them back and checking them until
 * it is told to stop (SIGTERM/SIGINT, or --seconds). scripts/demo.sh runs it under the shim and
 * sleeps and wakes it from outside with vmmctl; the program's checks show nothing was lost.
 *
 * Usage: demo_app [--mib TOTAL] [--seconds S] [--ready FILE]
 *   --ready FILE: written (with the pid) once every buffer is filled, so a driver script knows
 *                 when to act. Prints one line per event; exit status 0 only if all data was intact. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include "vmmshim.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_BUFFERS 64

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ull;
	return h;
}

/* xorshift64: fast enough to fill gigabytes, and different in every run. */
static void fill_random(unsigned char *p, size_t n, uint64_t *state)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t x = *state;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		*state = x;
		memcpy(p + i, &x, n - i < 8 ? n - i : 8);
	}
}

static double now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "demo_app: %s failed: %s\n", what, cudaGetErrorString(e));
		return -1;
	}
	return 0;
}

/* CPU work only, until the shim says this process is asleep and the sleep has ended (or
 * `seconds` pass): the program then ends asleep, as one whose last phase needs no device does. */
static void wait_until_asleep(double seconds)
{
	typedef int (*stats_fn)(const char *, int, vmmshim_stats_t *);
	typedef int (*progress_fn)(vmmshim_progress_t *);
	stats_fn stats = (stats_fn)dlsym(RTLD_DEFAULT, "vmmshim_stats");
	progress_fn progress = (progress_fn)dlsym(RTLD_DEFAULT, "vmmshim_get_progress");
	vmmshim_stats_t st;
	vmmshim_progress_t pr;
	double start = now_seconds();

	while (now_seconds() - start < seconds) {
		if (stats && progress && !stats(NULL, -1, &st) && st.asleep_bytes &&
		    !progress(&pr) && pr.phase == VMMSHIM_PHASE_NONE) {
			printf("demo_app: exiting asleep\n");
			return;
		}
		usleep(5000);
	}
	printf("demo_app: never asleep in %.1f s\n", seconds);
}

int main(int argc, char **argv)
{
	size_t total_mib = 512, sizes[MAX_BUFFERS];
	double seconds = 0, exit_asleep = 0;
	const char *ready_file = NULL;
	void *bufs[MAX_BUFFERS];
	uint64_t sums[MAX_BUFFERS];
	unsigned char *host;
	size_t biggest = 0, used = 0;
	unsigned seed = (unsigned)getpid();
	uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)seed;
	int n = 0, bad = 0;
	long rounds = 0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			total_mib = strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--ready") && i + 1 < argc)
			ready_file = argv[++i];
		else if (!strcmp(argv[i], "--exit-asleep") && i + 1 < argc)
			exit_asleep = atof(argv[++i]);
		else {
			fprintf(stderr, "usage: %s [--mib TOTAL] [--seconds S] [--ready FILE] "
				"[--exit-asleep S]\n", argv[0]);
			return 2;
		}
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);

	/* Mixed sizes: many small, some medium, a few large, as a real program has. */
	srand(seed);
	while (n < MAX_BUFFERS && used < total_mib << 20) {
		size_t left = (total_mib << 20) - used, sz;
		int kind = rand() % 8;

		sz = kind < 4 ? 256u + (size_t)(rand() % 65536) :
		     kind < 7 ? ((size_t)1 << 20) + (size_t)(rand() % (8 << 20)) : left / 2 + 1;
		if (sz > left)
			sz = left;
		sizes[n++] = sz;
		used += sz;
		if (sz > biggest)
			biggest = sz;
	}
	host = malloc(biggest);
	if (!host)
		return 1;
	for (int i = 0; i < n; i++) {
		fill_random(host, sizes[i], &state);
		sums[i] = fnv1a(host, sizes[i]);
		if (check(cudaMalloc(&bufs[i], sizes[i]), "cudaMalloc") ||
		    check(cudaMemcpy(bufs[i], host, sizes[i], cudaMemcpyHostToDevice), "cudaMemcpy H2D"))
			return 1;
	}
	printf("demo_app[%d]: %d device buffers, %.1f MiB, filled with random data\n", (int)getpid(), n,
	       used / 1048576.0);
	fflush(stdout);
	if (ready_file) {
		FILE *f = fopen(ready_file, "w");
		if (f) {
			fprintf(f, "%d\n", (int)getpid());
			fclose(f);
		}
	}

	double start = now_seconds();
	while (!stop_requested && (seconds <= 0 || now_seconds() - start < seconds)) {
		int i = (int)(rounds % n);
		double t0 = now_seconds(), waited;

		if (check(cudaMemcpy(host, bufs[i], sizes[i], cudaMemcpyDeviceToHost), "cudaMemcpy D2H"))
			return 1;
		waited = now_seconds() - t0;
		if (fnv1a(host, sizes[i]) != sums[i]) {
			printf("demo_app: buffer %d CORRUPTED\n", i);
			bad++;
		}
		if (waited > 0.5)
			printf("demo_app: a read of buffer %d waited %.1f s (the process was asleep)\n", i, waited);
		fflush(stdout);
		rounds++;
		usleep(20000);
	}

	for (int i = 0; i < n; i++) {
		if (check(cudaMemcpy(host, bufs[i], sizes[i], cudaMemcpyDeviceToHost), "cudaMemcpy D2H"))
			return 1;
		if (fnv1a(host, sizes[i]) != sums[i])
			bad++;
		/* --exit-asleep keeps the memory: the program ends holding it, as many do. */
		if (exit_asleep <= 0 && check(cudaFree(bufs[i]), "cudaFree"))
			return 1;
	}
	free(host);
	printf("demo_app: %ld reads, final check of all %d buffers: %s\n", rounds, n,
	       bad ? "DATA LOST" : "all data intact");
	fflush(stdout);
	if (exit_asleep > 0)
		wait_until_asleep(exit_asleep);
	return bad ? 1 : 0;
}
