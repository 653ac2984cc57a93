/* cuGetProcAddress (4 arguments, the pre-12.0 ABI) and cuGetProcAddress_v2. The real one chooses
 * the entry point for (symbol, cudaVersion, flags), so versions and per-thread stream variants stay
 * the driver's choice; we only swap the pointer it returned for our wrapper of that exact entry
 * point. A request for cuGetProcAddress itself therefore comes back as our wrapper of the ABI the
 * driver picked, and every later lookup through it stays routed. */
#include "driver_table.h"

static void route_pfn(CUresult r, void **pfn)
{
	void *w;

	if (r == CUDA_SUCCESS && pfn && *pfn) {
		w = driver_wrapper_for(*pfn);
		if (w)
			*pfn = w;
	}
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				  cuuint64_t flags)
{
	CUresult r = CALL_REAL(cuGetProcAddress, (symbol, pfn, cudaVersion, flags));

	route_pfn(r, pfn);
	return r;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	CUresult r = CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cudaVersion, flags,
						      symbolStatus));

	route_pfn(r, pfn);
	return r;
}
