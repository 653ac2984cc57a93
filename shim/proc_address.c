/* cuGetProcAddress (4 arguments, the pre-12.0 ABI) and cuGetProcAddress_v2. The real one chooses
 * the entry point for (symbol, cudaVersion, flags), so versions and per-thread stream variants stay
 * the driver's choice; we only swap the pointer it returned for our wrapper of that exact entry
 * point. A request for cuGetProcAddress itself therefore comes back as our wrapper of the ABI the
 * driver picked, and every later lookup through it stays routed. */
#include <stdio.h>

#include "../core/log.h"
#include "driver_table.h"

/* A name the shim wraps in some form (as asked, or its _v2) whose entry point for this version
 * is not one it wraps: the program's calls through it pass the shim by. Said at debug level, so
 * that a runtime's way to an entry point can be seen (VMMSHIM_LOG=debug). */
static void say_unrouted(const char *symbol, int version)
{
	char v2[128];

	if (!symbol || !vmm_log_enabled(VMM_LOG_DEBUG))
		return;
	snprintf(v2, sizeof(v2), "%s_v2", symbol);
	if (driver_wraps_name(symbol) || driver_wraps_name(v2))
		vmm_log(VMM_LOG_DEBUG, "cuGetProcAddress(%s, %d): an entry point the shim does not "
			"wrap; calls through it pass the shim by", symbol, version);
}

static void route_pfn(CUresult r, const char *symbol, int version, void **pfn)
{
	void *w;

	if (r == CUDA_SUCCESS && pfn && *pfn) {
		w = driver_wrapper_for(*pfn);
		if (w)
			*pfn = w;
		else
			say_unrouted(symbol, version);
	}
}

CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				  cuuint64_t flags)
{
	CUresult r = CALL_REAL(cuGetProcAddress, (symbol, pfn, cudaVersion, flags));

	route_pfn(r, symbol, cudaVersion, pfn);
	return r;
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
	CUresult r = CALL_REAL(cuGetProcAddress_v2, (symbol, pfn, cudaVersion, flags,
						      symbolStatus));

	route_pfn(r, symbol, cudaVersion, pfn);
	return r;
}
