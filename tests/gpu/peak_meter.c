/* peak_meter: the device's peak used memory while a program runs, sampled as fast as NVML
 * answers (a sample every PERIOD_US, default 100 µs), for the allocator benchmark's "peak"
 * columns. A sampler in Python every 1 ms can miss a native cudaMalloc peak that lasts less
 * than that, while the shim's peak (memory it keeps mapped) lasts: the comparison then favours
 * the driver. This one reports its own resolution (the longest gap between two samples) so a
 * reader can judge what it could have missed.
 *
 * Usage: peak_meter [GPU_INDEX [PERIOD_US]]. Prints "METER ready" once sampling runs, samples
 * until a line or EOF arrives on stdin, then prints
 *   PEAK <bytes> SAMPLES <n> SECONDS <s> MAXGAP_US <us>
 * NVML is loaded at run time (the toolkit ships no nvml.h here); needs only the driver.
 * Build: cc -O2 peak_meter.c -o peak_meter -ldl -lpthread */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "nvml_mem.h"

static nvml_meminfo_fn meminfo;
static void *device;
static long period_us = 100;
static atomic_bool stop;
static unsigned long long peak, samples;
static double max_gap_us, seconds;

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void *sample(void *arg)
{
	struct timespec pause = { 0, period_us * 1000 };
	double start = now_us(), last = start;
	nvml_memory m;

	(void)arg;
	while (!atomic_load(&stop)) {
		if (meminfo(device, &m) == 0) {
			double t = now_us();

			if (m.used > peak)
				peak = m.used;
			if (samples++ && t - last > max_gap_us)
				max_gap_us = t - last;
			last = t;
		}
		if (period_us > 0)
			nanosleep(&pause, NULL);
	}
	seconds = (now_us() - start) / 1e6;
	return NULL;
}

int main(int argc, char **argv)
{
	unsigned index = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
	pthread_t t;
	char line[64];

	if (argc > 2)
		period_us = atol(argv[2]);
	meminfo = nvml_mem_open(NULL, index, &device);
	if (!meminfo) {
		fprintf(stderr, "peak_meter: NVML cannot be loaded or has no device %u\n", index);
		return 1;
	}
	if (pthread_create(&t, NULL, sample, NULL)) {
		fprintf(stderr, "peak_meter: cannot start the sampling thread\n");
		return 1;
	}
	printf("METER ready\n");
	fflush(stdout);
	(void)!fgets(line, sizeof(line), stdin); /* a line or EOF ends the run */
	atomic_store(&stop, true);
	pthread_join(t, NULL);
	printf("PEAK %llu SAMPLES %llu SECONDS %.3f MAXGAP_US %.0f\n", peak, samples, seconds,
	       max_gap_us);
	return 0;
}
