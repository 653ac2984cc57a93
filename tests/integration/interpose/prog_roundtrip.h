/* A copy's round trip through device memory for the driver-API test programs. Apart from
 * prog_common.h because it needs cuda.h, which the runtime and ACL programs do not include. */
#ifndef PROG_ROUNDTRIP_H
#define PROG_ROUNDTRIP_H

#include <cuda.h>

#include "prog_common.h"

/* Copies seed's pattern from buf to dptr and back into buf (cleared between): 0 when the n
 * bytes came back as written. */
static inline int roundtrip(CUdeviceptr dptr, void *buf, size_t n, uint32_t seed)
{
	pattern_fill(buf, n, seed);
	CHECK_CU(cuMemcpyHtoD(dptr, buf, n));
	memset(buf, 0, n);
	CHECK_CU(cuMemcpyDtoH(buf, dptr, n));
	return pattern_check(buf, n, seed);
}

#endif
