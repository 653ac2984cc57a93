/* What the driver-API probes (probe_churn.cu, probe_fresh.cu, probe_offset.c, probe_reset.c)
 * share: a check that ends the probe at the first failed driver call (a probe's figures mean
 * nothing after one), the clock they time the host with, and device memory's properties. common.h's CK is for the test programs: it counts
 * runtime-API failures and goes on. */
#ifndef VMMSHIM_PROBE_DRIVER_H
#define VMMSHIM_PROBE_DRIVER_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                           \
	do {                                                                                   \
		CUresult r_ = (call);                                                          \
		if (r_ != CUDA_SUCCESS) {                                                      \
			fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call,   \
				(int)r_);                                                      \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

/* Milliseconds on CLOCK_MONOTONIC. */
static inline double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* What the virtual-memory API needs for plain device memory on dev: prop for cuMemCreate and rw,
 * read-write access from dev, for cuMemSetAccess. Returns the minimum granularity. */
static inline size_t probe_device_memory(int dev, CUmemAllocationProp *prop, CUmemAccessDesc *rw)
{
	size_t gran = 0;

	memset(prop, 0, sizeof(*prop));
	prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop->location.id = dev;
	rw->location = prop->location;
	rw->flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	CK(cuMemGetAllocationGranularity(&gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	return gran;
}

#endif
