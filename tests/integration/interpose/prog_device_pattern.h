/* The pattern of prog_common.h written to and checked in device memory through the driver API
 * (for the programs that share memory between processes: each side checks the other's bytes). */
#ifndef PROG_DEVICE_PATTERN_H
#define PROG_DEVICE_PATTERN_H

#include <cuda.h>

#include "prog_common.h"

static inline void put_pattern(CUdeviceptr d, size_t n, uint32_t seed)
{
	void *h = malloc(n);

	pattern_fill(h, n, seed);
	CHECK_CU(cuMemcpyHtoD(d, h, n));
	free(h);
}

/* 1 when d holds the pattern of seed. */
static inline int has_pattern(CUdeviceptr d, size_t n, uint32_t seed)
{
	void *h = malloc(n);
	int ok;

	CHECK_CU(cuMemcpyDtoH(h, d, n));
	ok = !pattern_check(h, n, seed);
	free(h);
	return ok;
}

#endif
