/* Replays an allocation trace (VMMSHIM_ALLOC_TRACE's lines: "a SIZE PTR", "f PTR", and the
 * stream-ordered "A SIZE PTR STREAM" / "F PTR", replayed here as plain cuMemAlloc / cuMemFree)
 * with the driver's allocator, so that gpucheck can read the device's peak natively and under the
 * shim for the same sequence of requests, with no framework between: PyTorch's own runs differ
 * in what they load. Prints "REPLAY mallocs N frees N failed N peak_live_bytes N seconds S".
 *
 * Usage: trace_replay TRACE */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	unsigned long long size, key, live = 0, peak = 0;
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
	printf("REPLAY mallocs %ld frees %ld failed %ld peak_live_bytes %llu seconds %.3f\n", mallocs,
	       frees, failed, peak, now_s() - t0);
	fclose(f);
	return failed ? 1 : 0;
}
