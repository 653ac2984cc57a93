/* Error strings, cuGetProcAddress entry points and cuGetExportTable of simdev's libcuda.so.1. */
#include <stddef.h>

#include "cuda_internal.h"

int sim_proc_lookup(const char *symbol, void **pfn, int version, uint64_t flags, int *status)
	__attribute__((visibility("hidden")));

struct err {
	CUresult code;
	const char *name, *text;
};

#define ERR(c, t) { c, #c, t }
static const struct err errs[] = {
	ERR(CUDA_SUCCESS, "no error"),
	ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
	ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
	ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
	ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
	ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
	ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
	ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
	ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
	ERR(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
	ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
	ERR(CUDA_ERROR_NOT_READY, "device not ready"),
	ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
	ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
	    "peer access is already enabled"),
	ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
	ERR(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
	    "part or all of the requested memory range is already mapped"),
	ERR(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
	    "pointer does not correspond to a registered memory region"),
	ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
	ERR(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
	    "operation not permitted when stream is capturing"),
	ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};

static const struct err *find(CUresult e)
{
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].code == e)
			return &errs[i];
	return NULL;
}

SIM_API CUresult cuGetErrorString(CUresult e, const char **s)
{
	SIM_BEGIN("cuGetErrorString", CUDA_ERROR_UNKNOWN);
	const struct err *x = find(e);
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	*s = x ? x->text : NULL;
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuGetErrorName(CUresult e, const char **s)
{
	SIM_BEGIN("cuGetErrorName", CUDA_ERROR_UNKNOWN);
	const struct err *x = find(e);
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	*s = x ? x->name : NULL;
	return x ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Private tables of the real driver: nothing to offer, so the runtime's callers fall back. */
SIM_API CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	SIM_BEGIN("cuGetExportTable", CUDA_ERROR_UNKNOWN);
	(void)id;
	if (table)
		*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}

#undef cuGetProcAddress
SIM_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				     cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	SIM_BEGIN("cuGetProcAddress_v2", CUDA_ERROR_UNKNOWN);
	int st = 0;
	CUresult r = (CUresult)sim_proc_lookup(symbol, pfn, version, flags, &st);
	if (status)
		*status = (CUdriverProcAddressQueryResult)st;
	return r;
}

/* The CUDA 11.3 ABI: no status out-parameter. */
SIM_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
	SIM_BEGIN("cuGetProcAddress", CUDA_ERROR_UNKNOWN);
	CUresult r = (CUresult)sim_proc_lookup(symbol, pfn, version, flags, NULL);
	return r == CUDA_SUCCESS && pfn && !*pfn ? CUDA_ERROR_NOT_FOUND : r;
}
