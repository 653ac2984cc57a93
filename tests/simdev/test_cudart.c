/* simdev's libcudart.so.13: the runtime reaches the driver through cuGetProcAddress_v2 only. */
#include <cuda_runtime_api.h>

/* cudaGetDriverEntryPoint is deprecated in 13.0 but still what many runtimes call. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "test_util.h"

#define RT_OK(call) cr_assert_eq((call), cudaSuccess, "%s failed", #call)

Test(cudart, round_trip_and_memory_info)
{
	size_t free0, total, free1;
	RT_OK(cudaMemGetInfo(&free0, &total));
	cr_expect_eq(total, (size_t)16 << 30);
	void *d;
	RT_OK(cudaMalloc(&d, 5000));
	RT_OK(cudaMemGetInfo(&free1, &total));
	cr_expect_eq(free0 - free1, GRAN);
	char in[5000], out[5000];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (char)(i * 7);
	RT_OK(cudaMemcpy(d, in, sizeof(in), cudaMemcpyHostToDevice));
	RT_OK(cudaMemset(d, 3, 10));
	RT_OK(cudaMemcpy(out, d, sizeof(out), cudaMemcpyDeviceToHost));
	cr_expect_eq(out[9], 3);
	cr_expect_eq(memcmp(out + 10, in + 10, sizeof(in) - 10), 0);
	struct cudaPointerAttributes a;
	RT_OK(cudaPointerGetAttributes(&a, d));
	cr_expect_eq(a.type, cudaMemoryTypeDevice);
	cr_expect_eq(a.device, 0);
	RT_OK(cudaFree(d));
	RT_OK(cudaMemGetInfo(&free1, &total));
	cr_expect_eq(free1, free0);
	int dev = -1;
	RT_OK(cudaGetDevice(&dev));
	cr_expect_eq(dev, 0);
}

Test(cudart, errors_are_remembered)
{
	void *d;
	cr_expect_eq(cudaMalloc(&d, (size_t)32 << 30), cudaErrorMemoryAllocation);
	cr_expect_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
	cr_expect_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
	cr_expect_eq(cudaGetLastError(), cudaSuccess);
	cr_expect_eq(cudaSetDevice(3), cudaErrorInvalidDevice);
	cr_expect_str_eq(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
	cr_expect_str_eq(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
}

static void bump(void *arg)
{
	(*(int *)arg)++;
}

Test(cudart, streams_graphs_and_async_memory)
{
	cudaStream_t s;
	RT_OK(cudaStreamCreate(&s));
	int counter = 0;
	void *d;
	RT_OK(cudaMallocAsync(&d, 1000, s));
	RT_OK(cudaLaunchHostFunc(s, bump, &counter));
	RT_OK(cudaFreeAsync(d, s));
	RT_OK(cudaStreamSynchronize(s));
	cr_expect_eq(counter, 1);

	cudaGraph_t g;
	cudaGraphExec_t x;
	RT_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	RT_OK(cudaLaunchHostFunc(s, bump, &counter));
	RT_OK(cudaStreamEndCapture(s, &g));
	RT_OK(cudaGraphInstantiate(&x, g, 0));
	RT_OK(cudaGraphLaunch(x, s));
	RT_OK(cudaDeviceSynchronize());
	cr_expect_eq(counter, 2);
	RT_OK(cudaGraphExecDestroy(x));
	RT_OK(cudaGraphDestroy(g));

	cudaEvent_t e;
	RT_OK(cudaEventCreate(&e));
	RT_OK(cudaEventRecord(e, s));
	RT_OK(cudaEventSynchronize(e));
	RT_OK(cudaEventDestroy(e));
	void *h;
	RT_OK(cudaMallocHost(&h, 4096));
	RT_OK(cudaFreeHost(h));
	RT_OK(cudaStreamDestroy(s));
}

Test(cudart, driver_entry_points_are_the_drivers)
{
	void *fn = NULL;
	enum cudaDriverEntryPointQueryResult st;
	RT_OK(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &st));
	cr_expect_eq(st, cudaDriverEntryPointSuccess);
	cr_expect_eq(fn, (void *)cuMemAlloc_v2);
	RT_OK(cudaGetDriverEntryPointByVersion("cuMemFreeAsync", &fn, 12000,
					       cudaEnablePerThreadDefaultStream, &st));
	void *ptsz = dlsym(RTLD_DEFAULT, "cuMemFreeAsync_ptsz");
	cr_expect_eq(fn, ptsz);
	RT_OK(cudaGetDriverEntryPoint("cuNoSuchThing", &fn, cudaEnableDefault, &st));
	cr_expect_eq(st, cudaDriverEntryPointSymbolNotFound);
	cr_expect_null(fn);
}

static void *thread_malloc(void *arg)
{
	void *d = NULL;
	cudaError_t e = cudaMalloc(&d, 100);
	if (!e)
		e = cudaMemset(d, 1, 100);
	if (!e)
		e = cudaFree(d);
	*(cudaError_t *)arg = e;
	return NULL;
}

Test(cudart, a_new_thread_gets_the_primary_context_lazily)
{
	cudaError_t e = cudaErrorUnknown;
	pthread_t t;
	cr_assert_eq(pthread_create(&t, NULL, thread_malloc, &e), 0);
	pthread_join(t, NULL);
	cr_expect_eq(e, cudaSuccess);
	CUcontext c = NULL;
	CU_OK(cuInit(0));
	CU_OK(cuCtxGetCurrent(&c));
	cr_expect_null(c, "this thread made no runtime call");
	int n = 0;
	RT_OK(cudaGetDeviceCount(&n));
	cr_expect_eq(n, 1);
}

/* cudaIpc* are the driver's cuIpc* with the runtime's error codes. */
Test(cudart, ipc_handles_through_the_runtime)
{
	void *d;
	RT_OK(cudaMalloc(&d, 4096));
	RT_OK(cudaMemcpy(d, "from the parent", 16, cudaMemcpyHostToDevice));
	cudaIpcMemHandle_t h;
	RT_OK(cudaIpcGetMemHandle(&h, d));
	void *same = NULL;
	cr_expect_eq(cudaIpcOpenMemHandle(&same, h, cudaIpcMemLazyEnablePeerAccess),
		     cudaErrorDeviceUninitialized, "not in the exporting process");
	cr_expect_str_eq(cudaGetErrorString(cudaGetLastError()), "invalid device context");
	void *host = malloc(64);
	cr_expect_eq(cudaIpcGetMemHandle(&h, host), cudaErrorInvalidValue, "not device memory");
	free(host);
	pid_t pid = fork();
	if (pid == 0) {
		void *o;
		char buf[16] = "";
		if (cudaIpcOpenMemHandle(&o, h, cudaIpcMemLazyEnablePeerAccess))
			_exit(2);
		if (cudaMemcpy(buf, o, 16, cudaMemcpyDeviceToHost) || strcmp(buf, "from the parent"))
			_exit(3);
		if (cudaMemcpy(o, "from the child", 15, cudaMemcpyHostToDevice))
			_exit(4);
		_exit(cudaIpcCloseMemHandle(o) == cudaSuccess &&
		      cudaIpcCloseMemHandle(o) == cudaErrorInvalidValue ? 0 : 5);
	}
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	char buf[16] = "";
	RT_OK(cudaMemcpy(buf, d, 15, cudaMemcpyDeviceToHost));
	cr_expect_str_eq(buf, "from the child");
	RT_OK(cudaFree(d));
}
