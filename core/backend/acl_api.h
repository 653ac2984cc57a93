/* The part of the Ascend ACL runtime API that vmmshim uses, declared by us from the documented
 * signatures (CANN acl_base.h / acl_rt.h; docs/research.md, section 4, lists them). The
 * core's acl backend resolves these names with dlsym; simdev's libascendcl.so implements them.
 * Enumerator values follow the documented order; only the ones marked "= n" were given explicitly. */
#ifndef VMM_ACL_API_H
#define VMM_ACL_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef void *aclrtStream;
typedef void *aclrtContext;
typedef void *aclrtDrvMemHandle;

/* Error codes. */
#define ACL_SUCCESS 0
#define ACL_ERROR_NONE 0
#define ACL_ERROR_INVALID_PARAM 100000
#define ACL_ERROR_UNINITIALIZE 100001
#define ACL_ERROR_REPEAT_INITIALIZE 100002
#define ACL_ERROR_RT_PARAM_INVALID 107000
#define ACL_ERROR_RT_INVALID_DEVICEID 107001
#define ACL_ERROR_RT_CONTEXT_NULL 107002
#define ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000
#define ACL_ERROR_RT_MEMORY_ALLOCATION 207001
#define ACL_ERROR_RT_INTERNAL_ERROR 507899

typedef enum aclrtMemMallocPolicy {
	ACL_MEM_MALLOC_HUGE_FIRST = 0,
	ACL_MEM_MALLOC_HUGE_ONLY,
	ACL_MEM_MALLOC_NORMAL_ONLY,
	ACL_MEM_MALLOC_HUGE_FIRST_P2P,
	ACL_MEM_MALLOC_HUGE_ONLY_P2P,
	ACL_MEM_MALLOC_NORMAL_ONLY_P2P,
	ACL_MEM_MALLOC_HUGE1G_ONLY,
	ACL_MEM_MALLOC_HUGE1G_ONLY_P2P,
	ACL_MEM_TYPE_LOW_BAND_WIDTH = 0x0100,
	ACL_MEM_TYPE_HIGH_BAND_WIDTH = 0x1000,
	ACL_MEM_ACCESS_USER_SPACE_READONLY = 0x100000,
} aclrtMemMallocPolicy;

typedef enum aclrtMemcpyKind {
	ACL_MEMCPY_HOST_TO_HOST = 0,
	ACL_MEMCPY_HOST_TO_DEVICE,
	ACL_MEMCPY_DEVICE_TO_HOST,
	ACL_MEMCPY_DEVICE_TO_DEVICE,
	ACL_MEMCPY_DEFAULT,
	ACL_MEMCPY_HOST_TO_BUF_TO_DEVICE,
	ACL_MEMCPY_INNER_DEVICE_TO_DEVICE,
	ACL_MEMCPY_INTER_DEVICE_TO_DEVICE,
} aclrtMemcpyKind;

/* Used by aclrtGetMemInfo and in aclrtPhysicalMemProp.memAttr. */
typedef enum aclrtMemAttr {
	ACL_DDR_MEM = 0,
	ACL_HBM_MEM,
	ACL_DDR_MEM_HUGE,
	ACL_DDR_MEM_NORMAL,
	ACL_HBM_MEM_HUGE,
	ACL_HBM_MEM_NORMAL,
	ACL_DDR_MEM_P2P_HUGE,
	ACL_DDR_MEM_P2P_NORMAL,
	ACL_HBM_MEM_P2P_HUGE,
	ACL_HBM_MEM_P2P_NORMAL,
	ACL_HBM_MEM_HUGE1G,
	ACL_HBM_MEM_P2P_HUGE1G,
} aclrtMemAttr;

typedef enum aclrtMemHandleType {
	ACL_MEM_HANDLE_TYPE_NONE = 0, /* the only supported value */
} aclrtMemHandleType;

typedef enum aclrtMemAllocationType {
	ACL_MEM_ALLOCATION_TYPE_PINNED = 0, /* the only supported value */
} aclrtMemAllocationType;

typedef enum aclrtMemLocationType {
	ACL_MEM_LOCATION_TYPE_HOST = 0, /* documented as reserved, not supported */
	ACL_MEM_LOCATION_TYPE_DEVICE,
	ACL_MEM_LOCATION_TYPE_UNREGISTERED,
} aclrtMemLocationType;

typedef struct aclrtMemLocation {
	uint32_t id;
	aclrtMemLocationType type;
} aclrtMemLocation;

typedef struct aclrtPhysicalMemProp {
	aclrtMemHandleType handleType;
	aclrtMemAllocationType allocationType;
	aclrtMemAttr memAttr;
	aclrtMemLocation location;
	uint64_t reserve;
} aclrtPhysicalMemProp;

typedef enum aclrtMemGranularityOptions {
	ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
	ACL_RT_MEM_ALLOC_GRANULARITY_RECOMMENDED,
} aclrtMemGranularityOptions;

/* Process and device. */
aclError aclInit(const char *configPath);
aclError aclFinalize(void);
aclError aclrtSetDevice(int32_t deviceId);
aclError aclrtGetDevice(int32_t *deviceId);
aclError aclrtResetDevice(int32_t deviceId);
aclError aclrtGetDeviceCount(uint32_t *count);
aclError aclrtSynchronizeDevice(void); /* the current context's streams only */
aclError aclrtSynchronizeStream(aclrtStream stream);
aclError aclrtCreateStream(aclrtStream *stream);
aclError aclrtDestroyStream(aclrtStream stream);

/* Contexts: aclrtSetDevice makes the device's default context current; aclrtCreateContext makes a
 * new one and makes it current; aclrtSetCurrentContext switches (and switches device with it). */
aclError aclrtCreateContext(aclrtContext *context, int32_t deviceId);
aclError aclrtDestroyContext(aclrtContext context);
aclError aclrtSetCurrentContext(aclrtContext context);
aclError aclrtGetCurrentContext(aclrtContext *context);

/* Plain allocation (no implicit synchronization, unlike cudaFree). */
aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocAlign32(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtMallocCached(void **devPtr, size_t size, aclrtMemMallocPolicy policy);
aclError aclrtFree(void *devPtr);
aclError aclrtMallocHost(void **hostPtr, size_t size);
aclError aclrtFreeHost(void *hostPtr);
aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count,
		     aclrtMemcpyKind kind);
aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count,
			  aclrtMemcpyKind kind, aclrtStream stream);
aclError aclrtMemset(void *devPtr, size_t maxCount, int32_t value, size_t count);
aclError aclrtGetMemInfo(aclrtMemAttr attr, size_t *free, size_t *total);

/* Virtual memory management: a handle is mapped whole at offset 0; unmap takes the address only;
 * the owner device has read/write access once mapped (no set-access step). */
aclError aclrtReserveMemAddress(void **virPtr, size_t size, size_t alignment, void *expectPtr,
				uint64_t flags);
aclError aclrtReleaseMemAddress(void *virPtr);
aclError aclrtMallocPhysical(aclrtDrvMemHandle *handle, size_t size,
			     const aclrtPhysicalMemProp *prop, uint64_t flags);
aclError aclrtFreePhysical(aclrtDrvMemHandle handle);
aclError aclrtMapMem(void *virPtr, size_t size, size_t offset, aclrtDrvMemHandle handle,
		     uint64_t flags);
aclError aclrtUnmapMem(void *virPtr);
aclError aclrtMemGetAllocationGranularity(aclrtPhysicalMemProp *prop,
					  aclrtMemGranularityOptions option, size_t *granularity);

#ifdef __cplusplus
}
#endif

#endif /* VMM_ACL_API_H */
