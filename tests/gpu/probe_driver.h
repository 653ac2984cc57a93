/* What the driver-API probes (probe_churn.cu, probe_fresh.cu, probe_reset.c) share: a check
 * that ends the probe at the first failed driver call (a probe's figures mean nothing after one),
 * and the clock they time the host with. common.h's CK is for the test programs: it counts
 * runtime-API failures and goes on. */
#ifndef VMMSHIM_PROBE_DRIVER_H
#define VMMSHIM_PROBE_DRIVER_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
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

#endif
