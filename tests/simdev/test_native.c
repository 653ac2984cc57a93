/* Native allocations of simdev: cuMemAlloc and friends, accounting and pointer queries. */
#include <string.h>

#include "test_util.h"

Test(native, alloc_is_counted_rounded_to_2mib)
{
	su_ctx(0);
	size_t base = su_used();
	CUdeviceptr a, b;
	CU_OK(cuMemAlloc(&a, 1));
	cr_expect_eq(su_used(), base + GRAN);
	CU_OK(cuMemAlloc(&b, 3 * MiB));
	cr_expect_eq(su_used(), base + 2 * GRAN + GRAN);
	cr_expect_eq(a % 256, 0);
	memset((void *)b, 1, 3 * MiB); /* native memory has full access */
	CU_OK(cuMemFree(a));
	CU_OK(cuMemFree(b));
	cr_expect_eq(su_used(), base);
	cr_expect_eq(cuMemFree(b), CUDA_ERROR_INVALID_VALUE, "double free");
	cr_expect_eq(cuMemAlloc(&a, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(native, needs_init_and_context)
{
	CUdeviceptr a;
	cr_expect_eq(cuMemAlloc(&a, 1), CUDA_ERROR_NOT_INITIALIZED);
	CU_OK(cuInit(0));
	cr_expect_eq(cuMemAlloc(&a, 1), CUDA_ERROR_INVALID_CONTEXT);
}

Test(native, pitch_is_real)
{
	su_ctx(0);
	CUdeviceptr d;
	size_t pitch = 0;
	CU_OK(cuMemAllocPitch(&d, &pitch, 1000, 10, 4));
	cr_expect_eq(pitch, 1024);
	size_t size = 0;
	CU_OK(cuMemGetAddressRange(NULL, &size, d));
	cr_expect_eq(size, 10240);
	CU_OK(cuMemFree(d));
}

Test(native, copies_memsets_and_attributes)
{
	CUcontext c = su_ctx(0);
	CUdeviceptr d;
	CU_OK(cuMemAlloc(&d, 4096));
	CU_OK(cuMemsetD32(d, 0xdeadbeef, 1024));
	unsigned out[1024];
	CU_OK(cuMemcpyDtoH(out, d, sizeof(out)));
	cr_expect_eq(out[1023], 0xdeadbeef);
	CU_OK(cuMemsetD8(d + 1, 7, 2));
	CU_OK(cuMemcpyDtoH(out, d, 4));
	cr_expect_eq(out[0], 0xde0707ef);

	CUdeviceptr start;
	size_t size;
	CUcontext owner;
	unsigned long long id1 = 0, id2 = 0;
	int managed = 1, ipc = 0;
	CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 100));
	CU_OK(cuPointerGetAttribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 100));
	CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, d + 100));
	CU_OK(cuPointerGetAttribute(&id1, CU_POINTER_ATTRIBUTE_BUFFER_ID, d));
	CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, d));
	CU_OK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
	cr_expect_eq(start, d);
	cr_expect_eq(size, 4096);
	cr_expect_eq(owner, c);
	cr_expect_eq(managed, 0);
	cr_expect_eq(ipc, 1);
	CUdeviceptr m;
	CU_OK(cuMemAllocManaged(&m, 10, CU_MEM_ATTACH_GLOBAL));
	CU_OK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
	CU_OK(cuPointerGetAttribute(&id2, CU_POINTER_ATTRIBUTE_BUFFER_ID, m));
	cr_expect_eq(managed, 1);
	cr_expect_neq(id1, id2);

	char host[8];
	cr_expect_eq(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
					   (CUdeviceptr)(uintptr_t)host), CUDA_ERROR_INVALID_VALUE);
	unsigned type = 99;
	CUpointer_attribute a = CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
	void *data = &type;
	CU_OK(cuPointerGetAttributes(1, &a, &data, (CUdeviceptr)(uintptr_t)host));
	cr_expect_eq(type, 0, "unknown pointers read as zero");

	CUipcMemHandle h;
	CU_OK(cuIpcGetMemHandle(&h, d));
	CU_OK(cuMemFree(d));
	CU_OK(cuMemFree(m));
}

Test(native, host_memory_is_not_device_memory)
{
	su_ctx(0);
	size_t base = su_used();
	void *h;
	CU_OK(cuMemAllocHost(&h, 1 << 20));
	cr_expect_eq(su_used(), base);
	unsigned type = 0;
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)h));
	cr_expect_eq(type, CU_MEMORYTYPE_HOST);
	char buf[4096];
	CU_OK(cuMemHostRegister(buf, sizeof(buf), 0));
	cr_expect_eq(cuMemHostRegister(buf, sizeof(buf), 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	CU_OK(cuMemHostUnregister(buf));
	cr_expect_eq(cuMemHostUnregister(buf), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	CU_OK(cuMemFreeHost(h));
	cr_expect_eq(cuMemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
}

static void ipc_child(void *arg)
{
	CUipcMemHandle *h = arg;
	CUdeviceptr d;
	cuInit(0);
	CUcontext c;
	cuDevicePrimaryCtxRetain(&c, 0);
	cuCtxSetCurrent(c);
	if (cuIpcOpenMemHandle(&d, *h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		_exit(2);
	if (strcmp((char *)d, "from the parent"))
		_exit(3);
	strcpy((char *)d, "from the child");
	_exit(cuIpcCloseMemHandle(d) ? 4 : 0);
}

Test(native, ipc_handles_work_across_processes)
{
	su_ctx(0);
	CUdeviceptr d;
	CU_OK(cuMemAlloc(&d, 4096));
	strcpy((char *)d, "from the parent");
	CUipcMemHandle h;
	CU_OK(cuIpcGetMemHandle(&h, d));
	CUdeviceptr same;
	cr_expect_eq(cuIpcOpenMemHandle(&same, h, 0), CUDA_ERROR_INVALID_CONTEXT);
	pid_t pid = fork();
	if (pid == 0)
		ipc_child(&h);
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	cr_expect_str_eq((char *)d, "from the child");
}

Test(native, arrays_are_device_memory)
{
	su_ctx(0);
	size_t base = su_used();
	CUDA_ARRAY_DESCRIPTOR d = { .Width = 1024, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT,
				    .NumChannels = 4 };
	CUarray a;
	CU_OK(cuArrayCreate(&a, &d));
	cr_expect_eq(su_used(), base + 16 * MiB);
	CU_OK(cuArrayDestroy(a));
	cr_expect_eq(su_used(), base);
	cr_expect_eq(cuArrayDestroy(a), CUDA_ERROR_INVALID_HANDLE, "destroyed twice");
	d.NumChannels = 3;
	cr_expect_eq(cuArrayCreate(&a, &d), CUDA_ERROR_INVALID_VALUE);
}
