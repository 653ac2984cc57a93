/* simdev's libcudart.so.13: the runtime API subset test programs use. Like the real runtime it
 * reaches the driver only through dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2"), then
 * cuGetProcAddress_v2 for every driver function (both the legacy and the per-thread variant of
 * stream functions), so an LD_PRELOADed shim meets it exactly as it meets the real runtime.
 * A primary context is made current lazily on each thread; errors are remembered per thread for
 * cudaGetLastError. Runtime calls are not counted in SIMDEV_STATS (the driver calls are). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define API __attribute__((visibility("default")))
#define RT_VERSION 13000

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *);

/* Driver functions: name, then whether it has a per-thread variant. */
#define DRIVER(X)                                                                        \
	X(cuInit, 0) X(cuDriverGetVersion, 0) X(cuDeviceGetCount, 0) X(cuDeviceGet, 0)    \
	X(cuDeviceGetAttribute, 0) X(cuDevicePrimaryCtxRetain, 0) X(cuCtxSetCurrent, 0)   \
	X(cuCtxGetCurrent, 0) X(cuCtxGetDevice, 0)                                         \
	X(cuCtxEnablePeerAccess, 0) X(cuCtxDisablePeerAccess, 0)                           \
	X(cuDeviceCanAccessPeer, 0) X(cuMemAlloc, 0) X(cuMemFree, 0) X(cuMemAllocPitch, 0) \
	X(cuMemAllocManaged, 0) X(cuMemGetInfo, 0) X(cuMemAllocHost, 0)                    \
	X(cuMemHostAlloc, 0) X(cuMemFreeHost, 0) X(cuMemHostRegister, 0)                   \
	X(cuMemHostUnregister, 0) X(cuMemAllocAsync, 1) X(cuMemFreeAsync, 1)               \
	X(cuMemcpy, 1) X(cuMemcpyAsync, 1) X(cuMemsetD8, 1) X(cuMemsetD8Async, 1)          \
	X(cuStreamCreate, 0) X(cuStreamDestroy, 0) X(cuStreamSynchronize, 1)              \
	X(cuStreamQuery, 1) X(cuStreamWaitEvent, 1) X(cuEventCreate, 0)                    \
	X(cuEventRecord, 1) X(cuEventQuery, 0) X(cuEventSynchronize, 0)                    \
	X(cuEventElapsedTime, 0) X(cuEventDestroy, 0) X(cuLaunchHostFunc, 1)               \
	X(cuStreamBeginCapture, 1) X(cuStreamEndCapture, 1) X(cuStreamIsCapturing, 1)     \
	X(cuGraphInstantiate, 0) X(cuGraphLaunch, 1) X(cuGraphDestroy, 0)                  \
	X(cuGraphExecDestroy, 0) X(cuPointerGetAttributes, 0) X(cuIpcGetMemHandle, 0)          \
	X(cuIpcOpenMemHandle, 0) X(cuIpcCloseMemHandle, 0)

/* Pointer types come from the cuda.h prototypes (whose macros give the versioned names). */
#define SLOT(name, pt) static __typeof__(&name) d_##name, pt_##name;
DRIVER(SLOT)

/* "cuCtxSynchronize" asked for at 13.0 is the driver's cuCtxSynchronize_v2, which names the
 * context (NULL: the current one). */
static __typeof__(&cuCtxSynchronize_v2) d_cuCtxSynchronize_v2;

static gpa_fn gpa;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static cudaError_t load_error = cudaSuccess;
static __thread cudaError_t last_error = cudaSuccess;
static __thread int cur_device = 0;

static pthread_mutex_t prim_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext primaries[64];
/* Reset by cudaDeviceReset and not retained since: the next call that needs the device retains
 * its primary context again (the driver keeps the handle), as the real runtime does. */
static atomic_bool stale[64];

/* The primary context of dev, retained by the runtime (again after a reset). */
static CUresult primary_of(int dev, CUcontext *c)
{
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&prim_lock);
	if (!primaries[dev] || atomic_load(&stale[dev]))
		r = d_cuDevicePrimaryCtxRetain(&primaries[dev], dev);
	if (!r)
		atomic_store(&stale[dev], false);
	*c = primaries[dev];
	pthread_mutex_unlock(&prim_lock);
	return r;
}

static void load(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
	if (!h || !(gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2"))) {
		load_error = cudaErrorInsufficientDriver;
		return;
	}
	CUdriverProcAddressQueryResult st;
#define RESOLVE(name, pt)                                                                       \
	if (gpa(#name, (void **)&d_##name, RT_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &st) ||     \
	    !d_##name)                                                                          \
		load_error = cudaErrorSymbolNotFound;                                           \
	if (pt)                                                                                 \
		gpa(#name, (void **)&pt_##name, RT_VERSION,                                     \
		    CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st);
	DRIVER(RESOLVE)
	if (gpa("cuCtxSynchronize", (void **)&d_cuCtxSynchronize_v2, RT_VERSION,
		CU_GET_PROC_ADDRESS_DEFAULT, &st) || !d_cuCtxSynchronize_v2)
		load_error = cudaErrorSymbolNotFound;
	if (!load_error && d_cuInit(0))
		load_error = cudaErrorNoDevice;
}

/* Runtime error codes share their numbers with the driver's for everything simdev returns. */
static cudaError_t rt(CUresult r)
{
	cudaError_t e = r == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation
		       : r == CUDA_ERROR_NOT_INITIALIZED ? cudaErrorInitializationError
		       : (cudaError_t)r;
	if (e != cudaSuccess && e != cudaErrorNotReady)
		last_error = e;
	return e;
}

static cudaError_t fail(cudaError_t e)
{
	last_error = e;
	return e;
}

static cudaError_t ensure_loaded(void)
{
	pthread_once(&once, load);
	return load_error ? fail(load_error) : cudaSuccess;
}

/* Make the current device's primary context current on this thread when none is. */
static cudaError_t ensure_ctx(void)
{
	cudaError_t e = ensure_loaded();
	if (e)
		return e;
	CUcontext c = NULL;
	d_cuCtxGetCurrent(&c);
	if (c && !atomic_load(&stale[cur_device]))
		return cudaSuccess;
	CUresult r = primary_of(cur_device, &c);
	if (r)
		return rt(r);
	return rt(d_cuCtxSetCurrent(c));
}

#define CTX()                                 \
	do {                                  \
		cudaError_t e_ = ensure_ctx(); \
		if (e_)                       \
			return e_;            \
	} while (0)

/* ---- device management ---- */

API cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t e = ensure_loaded();
	return e ? e : rt(d_cuDeviceGetCount(count));
}

API cudaError_t cudaSetDevice(int device)
{
	cudaError_t e = ensure_loaded();
	if (e)
		return e;
	int n = 0;
	d_cuDeviceGetCount(&n);
	if (device < 0 || device >= n || device >= 64)
		return fail(cudaErrorInvalidDevice);
	CUcontext c;
	CUresult r = primary_of(device, &c);
	if (r)
		return rt(r);
	cur_device = device;
	return rt(d_cuCtxSetCurrent(c));
}

API cudaError_t cudaGetDevice(int *device)
{
	if (!device)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUdevice d;
	CUresult r = d_cuCtxGetDevice(&d);
	if (!r)
		*device = d;
	return rt(r);
}

API cudaError_t cudaDeviceSynchronize(void)
{
	CTX();
	return rt(d_cuCtxSynchronize_v2(NULL));
}

/* The CUDA 13 runtime resets through the pre-11.0 entry point, cuDevicePrimaryCtxReset (the
 * H100, 5 Dec: a shim that wrapped only _v2 never saw it); so does this one. */
API cudaError_t cudaDeviceReset(void)
{
	CUdriverProcAddressQueryResult st;
	CUresult (*reset)(CUdevice) = NULL;
	CUdevice d;

	CTX();
	CUresult r = d_cuCtxGetDevice(&d);
	if (r)
		return rt(r);
	if (gpa("cuDevicePrimaryCtxReset", (void **)&reset, 7000, CU_GET_PROC_ADDRESS_DEFAULT,
		&st) || !reset)
		return fail(cudaErrorSymbolNotFound);
	r = reset(d);
	if (!r)
		atomic_store(&stale[d], true);
	return rt(r);
}

API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	cudaError_t e = ensure_loaded();
	return e ? e : rt(d_cuDeviceGetAttribute(value, (CUdevice_attribute)attr, device));
}

API cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer)
{
	cudaError_t e = ensure_loaded();
	return e ? e : rt(d_cuDeviceCanAccessPeer(can, device, peer));
}

static CUresult peer_ctx(int peer, CUcontext *c)
{
	int n = 0;
	d_cuDeviceGetCount(&n);
	if (peer < 0 || peer >= n || peer >= 64)
		return CUDA_ERROR_INVALID_DEVICE;
	return primary_of(peer, c);
}

API cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
	CTX();
	CUcontext c;
	CUresult r = peer_ctx(peer, &c);
	return rt(r ? r : d_cuCtxEnablePeerAccess(c, flags));
}

API cudaError_t cudaDeviceDisablePeerAccess(int peer)
{
	CTX();
	CUcontext c;
	CUresult r = peer_ctx(peer, &c);
	return rt(r ? r : d_cuCtxDisablePeerAccess(c));
}

API cudaError_t cudaDriverGetVersion(int *v)
{
	cudaError_t e = ensure_loaded();
	return e ? e : rt(d_cuDriverGetVersion(v));
}

API cudaError_t cudaRuntimeGetVersion(int *v)
{
	if (!v)
		return fail(cudaErrorInvalidValue);
	*v = RT_VERSION;
	return cudaSuccess;
}

/* ---- memory ---- */

API cudaError_t cudaMalloc(void **p, size_t size)
{
	if (!p)
		return fail(cudaErrorInvalidValue);
	CTX();
	if (!size) {
		*p = NULL;
		return cudaSuccess;
	}
	CUdeviceptr d = 0;
	CUresult r = d_cuMemAlloc(&d, size);
	*p = r ? NULL : (void *)(uintptr_t)d;
	return rt(r);
}

API cudaError_t cudaFree(void *p)
{
	CTX();
	return p ? rt(d_cuMemFree((CUdeviceptr)(uintptr_t)p)) : cudaSuccess;
}

API cudaError_t cudaMallocPitch(void **p, size_t *pitch, size_t width, size_t height)
{
	if (!p)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUdeviceptr d = 0;
	CUresult r = d_cuMemAllocPitch(&d, pitch, width, height, 4);
	*p = (void *)(uintptr_t)d;
	return rt(r);
}

API cudaError_t cudaMallocManaged(void **p, size_t size, unsigned int flags)
{
	if (!p)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUdeviceptr d = 0;
	CUresult r = d_cuMemAllocManaged(&d, size, flags ? flags : CU_MEM_ATTACH_GLOBAL);
	*p = (void *)(uintptr_t)d;
	return rt(r);
}

API cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s)
{
	if (!p)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUdeviceptr d = 0;
	CUresult r = d_cuMemAllocAsync(&d, size, s);
	*p = (void *)(uintptr_t)d;
	return rt(r);
}

API cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
	CTX();
	return rt(d_cuMemFreeAsync((CUdeviceptr)(uintptr_t)p, s));
}

API cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
	CTX();
	return rt(d_cuMemGetInfo(free_bytes, total));
}

/* Legacy IPC: the runtime's handle has the driver's 64 bytes. */
_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CUipcMemHandle), "same IPC handle size");

API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *p)
{
	if (!handle)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUipcMemHandle h;
	CUresult r = d_cuIpcGetMemHandle(&h, (CUdeviceptr)(uintptr_t)p);
	if (!r)
		memcpy(handle, &h, sizeof(h));
	return rt(r);
}

API cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t handle, unsigned int flags)
{
	if (!p)
		return fail(cudaErrorInvalidValue);
	CTX();
	CUipcMemHandle h;
	memcpy(&h, &handle, sizeof(h));
	CUdeviceptr d = 0;
	CUresult r = d_cuIpcOpenMemHandle(&d, h, flags);
	*p = r ? NULL : (void *)(uintptr_t)d;
	return rt(r);
}

API cudaError_t cudaIpcCloseMemHandle(void *p)
{
	CTX();
	return rt(d_cuIpcCloseMemHandle((CUdeviceptr)(uintptr_t)p));
}

API cudaError_t cudaMallocHost(void **p, size_t size)
{
	CTX();
	return rt(d_cuMemAllocHost(p, size));
}

API cudaError_t cudaHostAlloc(void **p, size_t size, unsigned int flags)
{
	CTX();
	return rt(d_cuMemHostAlloc(p, size, flags));
}

API cudaError_t cudaFreeHost(void *p)
{
	CTX();
	return rt(d_cuMemFreeHost(p));
}

API cudaError_t cudaHostRegister(void *p, size_t size, unsigned int flags)
{
	CTX();
	return rt(d_cuMemHostRegister(p, size, flags));
}

API cudaError_t cudaHostUnregister(void *p)
{
	CTX();
	return rt(d_cuMemHostUnregister(p));
}

/* With unified addressing the driver tells host from device memory: every kind is cuMemcpy. */
API cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
		return fail(cudaErrorInvalidMemcpyDirection);
	CTX();
	return rt(d_cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n));
}

API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
				cudaStream_t s)
{
	if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
		return fail(cudaErrorInvalidMemcpyDirection);
	CTX();
	return rt(d_cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, s));
}

API cudaError_t cudaMemset(void *p, int value, size_t n)
{
	CTX();
	return rt(d_cuMemsetD8((CUdeviceptr)(uintptr_t)p, (unsigned char)value, n));
}

API cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s)
{
	CTX();
	return rt(d_cuMemsetD8Async((CUdeviceptr)(uintptr_t)p, (unsigned char)value, n, s));
}

API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *ptr)
{
	if (!a)
		return fail(cudaErrorInvalidValue);
	CTX();
	unsigned type = 0;
	int dev = -2, managed = 0;
	CUdeviceptr dptr = 0;
	void *hptr = NULL;
	CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
					CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
					CU_POINTER_ATTRIBUTE_IS_MANAGED,
					CU_POINTER_ATTRIBUTE_DEVICE_POINTER,
					CU_POINTER_ATTRIBUTE_HOST_POINTER };
	void *data[] = { &type, &dev, &managed, &dptr, &hptr };
	CUresult r = d_cuPointerGetAttributes(5, which, data, (CUdeviceptr)(uintptr_t)ptr);
	if (r)
		return rt(r);
	memset(a, 0, sizeof(*a));
	a->type = managed ? cudaMemoryTypeManaged
		  : type == CU_MEMORYTYPE_DEVICE ? cudaMemoryTypeDevice
		  : type == CU_MEMORYTYPE_HOST ? cudaMemoryTypeHost : cudaMemoryTypeUnregistered;
	a->device = type ? dev : -2;
	a->devicePointer = (void *)(uintptr_t)dptr;
	a->hostPointer = a->type == cudaMemoryTypeUnregistered ? (void *)ptr : hptr;
	return cudaSuccess;
}

/* ---- streams, events, host functions, graphs ---- */

API cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	CTX();
	return rt(d_cuStreamCreate(s, 0));
}

API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	CTX();
	return rt(d_cuStreamCreate(s, flags));
}

API cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	CTX();
	return rt(d_cuStreamDestroy(s));
}

API cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	CTX();
	return rt(d_cuStreamSynchronize(s));
}

API cudaError_t cudaStreamQuery(cudaStream_t s)
{
	CTX();
	return rt(d_cuStreamQuery(s));
}

API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags)
{
	CTX();
	return rt(d_cuStreamWaitEvent(s, e, flags));
}

API cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	CTX();
	return rt(d_cuEventCreate(e, 0));
}

API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags)
{
	CTX();
	return rt(d_cuEventCreate(e, flags));
}

API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	CTX();
	return rt(d_cuEventRecord(e, s));
}

API cudaError_t cudaEventQuery(cudaEvent_t e)
{
	CTX();
	return rt(d_cuEventQuery(e));
}

API cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	CTX();
	return rt(d_cuEventSynchronize(e));
}

API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	CTX();
	return rt(d_cuEventElapsedTime(ms, a, b));
}

API cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	CTX();
	return rt(d_cuEventDestroy(e));
}

API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)
{
	CTX();
	return rt(d_cuLaunchHostFunc(s, fn, arg));
}

API cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	CTX();
	return rt(d_cuStreamBeginCapture(s, (CUstreamCaptureMode)mode));
}

API cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	CTX();
	return rt(d_cuStreamEndCapture(s, g));
}

API cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
	CTX();
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult r = d_cuStreamIsCapturing(s, &st);
	if (!r && status)
		*status = (enum cudaStreamCaptureStatus)st;
	return rt(r);
}

API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long flags)
{
	CTX();
	return rt(d_cuGraphInstantiate(x, g, flags));
}

API cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s)
{
	CTX();
	return rt(d_cuGraphLaunch(x, s));
}

API cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	CTX();
	return rt(d_cuGraphDestroy(g));
}

API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x)
{
	CTX();
	return rt(d_cuGraphExecDestroy(x));
}

/* ---- driver entry points and errors ---- */

API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
						 unsigned int version, unsigned long long flags,
						 enum cudaDriverEntryPointQueryResult *status)
{
	cudaError_t e = ensure_loaded();
	if (e)
		return e;
	if (!symbol || !fn)
		return fail(cudaErrorInvalidValue);
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUresult r = gpa(symbol, fn, (int)version, flags, &st);
	if (status)
		*status = (enum cudaDriverEntryPointQueryResult)st;
	return rt(r);
}

API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn, unsigned long long flags,
					enum cudaDriverEntryPointQueryResult *status)
{
	return cudaGetDriverEntryPointByVersion(symbol, fn, RT_VERSION, flags, status);
}

API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;
	last_error = cudaSuccess;
	return e;
}

API cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

struct rt_err {
	cudaError_t code;
	const char *name, *text;
};

#define RTE(c, t) { c, #c, t }
static const struct rt_err rt_errs[] = {
	RTE(cudaSuccess, "no error"),
	RTE(cudaErrorInvalidValue, "invalid argument"),
	RTE(cudaErrorMemoryAllocation, "out of memory"),
	RTE(cudaErrorInitializationError, "initialization error"),
	RTE(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
	RTE(cudaErrorInsufficientDriver,
	    "CUDA driver version is insufficient for CUDA runtime version"),
	RTE(cudaErrorNoDevice, "no CUDA-capable device is detected"),
	RTE(cudaErrorInvalidDevice, "invalid device ordinal"),
	RTE(cudaErrorDeviceUninitialized, "invalid device context"),
	RTE(cudaErrorAlreadyMapped, "resource already mapped"),
	RTE(cudaErrorInvalidResourceHandle, "invalid resource handle"),
	RTE(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
	RTE(cudaErrorSymbolNotFound, "named symbol not found"),
	RTE(cudaErrorNotReady, "device not ready"),
	RTE(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
	RTE(cudaErrorPeerAccessAlreadyEnabled,
	    "peer access is already enabled"),
	RTE(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
	RTE(cudaErrorHostMemoryAlreadyRegistered,
	    "part or all of the requested memory range is already mapped"),
	RTE(cudaErrorHostMemoryNotRegistered,
	    "pointer does not correspond to a registered memory region"),
	RTE(cudaErrorNotSupported, "operation not supported"),
	RTE(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
	RTE(cudaErrorUnknown, "unknown error"),
};

static const struct rt_err *rt_find(cudaError_t e)
{
	for (size_t i = 0; i < sizeof(rt_errs) / sizeof(rt_errs[0]); i++)
		if (rt_errs[i].code == e)
			return &rt_errs[i];
	return NULL;
}

API const char *cudaGetErrorString(cudaError_t e)
{
	const struct rt_err *x = rt_find(e);
	return x ? x->text : "unrecognized error code";
}

API const char *cudaGetErrorName(cudaError_t e)
{
	const struct rt_err *x = rt_find(e);
	return x ? x->name : "cudaErrorUnknown";
}
