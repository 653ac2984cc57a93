/* Replays an allocation trace (VMMSHIM_ALLOC_TRACE's lines: "a SIZE PTR", "f PTR", and the
 * stream-ordered "A SIZE PTR STREAM" / "F PTR", replayed here as plain cuMemAlloc / cuMemFree)
 * with the driver's allocator, so that gpucheck can read the device's peak natively and under the
 * shim for the same sequence of requests, with no framework between: PyTorch's own runs differ
 * in what they load. Prints "REPLAY mallocs N frees N failed N peak_live_bytes N seconds S
 * peak_used_bytes N" (the last -1 where NVML cannot be read).
 *
 * The device's peak is read here, from NVML after every allocation, not by a sampler beside the
 * program: the device's use only grows inside an allocation, so the largest of those readings is
 * the exact peak, where a sampler (its gaps reach 50-100 ms while the driver is busy) saw a
 * native peak of this trace once 3 GiB lower than the next run's. NVML is not interposed by the
 * shim, so both runs read the driver's own figure.
 *
 * Usage: trace_replay TRACE */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nvml_mem.h"

/* The trace's pointer -> (our pointer, size), open addressing. */
struct slot {
	unsigned long long key;
	CUdeviceptr ptr;
	unsigned long long size;
	int state; /* 0 empty, 1 live, 2 freed (a tombstone) */
};

static struct slot *slots;
static size_t mask;

static size_t hash(unsigned long long k)
{
	return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & mask;
}

static struct slot *find(unsigned long long key, int for_insert)
{
	for (size_t i = hash(key);; i = (i + 1) & mask) {
		if (slots[i].state == 0)
			return for_insert ? &slots[i] : NULL;
		if (slots[i].state == 1 && slots[i].key == key)
			return &slots[i];
		if (slots[i].state == 2 && for_insert)
			return &slots[i];
	}
}

static nvml_meminfo_fn nvml_meminfo;
static void *nvml_device;

/* NVML's view of CUDA device dev, matched by PCI bus id (NVML's order can differ). */
static void nvml_open(CUdevice dev)
{
	char bus[32];

	if (!cuDeviceGetPCIBusId(bus, sizeof(bus), dev))
		nvml_meminfo = nvml_mem_open(bus, 0, &nvml_device);
}

/* The device's used bytes now, or 0 when NVML cannot say. */
static unsigned long long device_used(void)
{
	nvml_memory m;

	return nvml_meminfo && nvml_meminfo(nvml_device, &m) == 0 ? m.used : 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	unsigned long long size, key, live = 0, peak = 0, used, peak_used = 0;
	long mallocs = 0, frees = 0, failed = 0;
	char line[256];
	CUcontext ctx;
	CUdevice dev;
	double t0;
	FILE *f;

	if (argc != 2) {
		fprintf(stderr, "usage: trace_replay TRACE\n");
		return 2;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	mask = (1u << 20) - 1; /* ample for the live allocations of one program */
	slots = calloc(mask + 1, sizeof(*slots));
	if (!slots || cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
	    cuCtxSetCurrent(ctx)) {
		fprintf(stderr, "trace_replay: no device or no memory\n");
		return 1;
	}
	nvml_open(dev);
	t0 = now_s();
	while (fgets(line, sizeof(line), f)) {
		if ((line[0] == 'a' || line[0] == 'A') &&
		    sscanf(line + 1, "%llu %llx", &size, &key) == 2) {
			struct slot *s = find(key, 1);
			CUdeviceptr p;

			if (cuMemAlloc(&p, size)) {
				failed++;
				continue;
			}
			*s = (struct slot){ .key = key, .ptr = p, .size = size, .state = 1 };
			mallocs++;
			live += size;
			peak = live > peak ? live : peak;
			used = device_used();
			peak_used = used > peak_used ? used : peak_used;
		} else if ((line[0] == 'f' || line[0] == 'F') && sscanf(line + 1, "%llx", &key) == 1) {
			struct slot *s = find(key, 0);

			if (!s)
				continue;
			cuMemFree(s->ptr);
			live -= s->size;
			s->state = 2;
			frees++;
		}
	}
	printf("REPLAY mallocs %ld frees %ld failed %ld peak_live_bytes %llu seconds %.3f "
	       "peak_used_bytes %lld\n", mallocs, frees, failed, peak, now_s() - t0,
	       nvml_meminfo ? (long long)peak_used : -1ll);
	fclose(f);
	return failed ? 1 : 0;
}
