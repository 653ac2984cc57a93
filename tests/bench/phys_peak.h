/* The device's physical memory during a replay, as the driver counts it: simdev's count of what
 * the process holds at every instant (inside a call too: memory created before the old is
 * released, quarantined frees, free space in mapped handles, the shim's own), beside the heap's
 * figures at the worst moment seen between calls. A real driver has no such count: then
 * `known` stays false. */
#ifndef VMM_BENCH_PHYS_PEAK_H
#define VMM_BENCH_PHYS_PEAK_H

#include <stdbool.h>
#include <stdint.h>

#include "heap.h"

struct phys_peak {
	bool known;
	uint64_t peak;          /* the most held at any instant since phys_peak_start */
	uint64_t sampled;       /* the most held between two calls */
	/* at that sampled moment: */
	uint64_t native;        /* what cudaMalloc would hold (the replay's count) */
	uint64_t live_usable;   /* bytes the live allocations take in the heap */
	uint64_t quarantined;   /* freed, waiting for a device sync */
	uint64_t cached;        /* mapped, not live (quarantined included) */
	uint64_t mapped;
};

/* Start counting from what the process holds now. */
void phys_peak_start(struct phys_peak *p);
/* After a malloc or free: the count now, with what native cudaMalloc would hold (the replay
 * knows it) and the heap's figures. */
void phys_peak_sample(struct phys_peak *p, vmm_core *core, int dev, uint64_t native);
/* The peak of every instant, inside calls too. */
void phys_peak_finish(struct phys_peak *p);

/* cudaMalloc's own rounding of an n-byte request: 2 MiB pages for large tensors, 512-byte slots
 * for small ones (the model every replay compares with). */
uint64_t native_size(uint64_t n);

#endif
