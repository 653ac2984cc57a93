/* A stand-in for libvmmshim.so in simdev's interposition test: it exports driver names that
 * simdev also exports, and fails them, so a test can tell whose function was called. */
#include <cuda.h>

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
	(void)dptr, (void)size;
	return CUDA_ERROR_NOT_PERMITTED;
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
	(void)free_bytes, (void)total;
	return CUDA_ERROR_NOT_PERMITTED;
}
