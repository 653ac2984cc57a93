/* The CUDA virtual-memory API of simdev: semantics the core and the shim rely on. */
#include <string.h>

#include "test_util.h"

TestSuite(vmm, .init = NULL);

Test(vmm, granularity_is_2mib)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	size_t g = 0;
	CU_OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	cr_expect_eq(g, GRAN);
	CU_OK(cuMemGetAllocationGranularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	cr_expect_eq(g, GRAN);
}

Test(vmm, reserve_honours_alignment_and_size_rules)
{
	su_ctx(0);
	CUdeviceptr va;
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 64 * MiB, 0, 0));
	cr_expect_eq(va % (64 * MiB), 0);
	cr_expect_eq(cuMemAddressReserve(&va, GRAN + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
}

Test(vmm, map_needs_set_access_then_contents_persist)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h, 2 * GRAN, &p, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, h, 0));
	cr_expect_eq(su_signal_of(su_read, (void *)va), SIGSEGV, "a new mapping has no access");

	unsigned long long flags = 99;
	CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 };
	CU_OK(cuMemGetAccess(&flags, &loc, va));
	cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);

	su_set_access(va, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU_OK(cuMemGetAccess(&flags, &loc, va));
	cr_expect_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	memset((void *)va, 0xab, 2 * GRAN);

	/* The same physical memory mapped elsewhere shows the same bytes. */
	CUdeviceptr va2;
	CU_OK(cuMemAddressReserve(&va2, 2 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va2, 2 * GRAN, 0, h, 0));
	su_set_access(va2, 2 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READ);
	cr_expect_eq(((unsigned char *)va2)[GRAN + 7], 0xab);
	cr_expect_eq(su_signal_of(su_touch, (void *)va2), SIGSEGV, "read-only mapping");
}

Test(vmm, unmap_must_cover_whole_mappings)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va;
	CUmemGenericAllocationHandle h1, h2;
	CU_OK(cuMemAddressReserve(&va, 8 * GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h1, 2 * GRAN, &p, 0));
	CU_OK(cuMemCreate(&h2, 2 * GRAN, &p, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, h1, 0));
	CU_OK(cuMemMap(va + 2 * GRAN, 2 * GRAN, 0, h2, 0));
	su_set_access(va, 4 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	su_touch((void *)(va + 3 * GRAN));

	cr_expect_eq(cuMemUnmap(va, GRAN), CUDA_ERROR_INVALID_VALUE, "half a mapping");
	cr_expect_eq(cuMemUnmap(va + GRAN, 2 * GRAN), CUDA_ERROR_INVALID_VALUE);
	cr_expect_eq(cuMemMap(va + GRAN, 2 * GRAN, 0, h1, 0), CUDA_ERROR_INVALID_VALUE,
		     "overlapping map");
	su_touch((void *)va); /* nothing changed by the failed calls */

	/* Two whole mappings in one call: the H200's driver takes it too (1792 mappings in one
	 * call, tests/gpu/PROBE.md (d)), at the cost of one call per mapping. */
	CU_OK(cuMemUnmap(va, 4 * GRAN));
	cr_expect_eq(su_signal_of(su_read, (void *)va), SIGSEGV, "unmapped is inaccessible");
	cr_expect_eq(su_signal_of(su_read, (void *)(va + 3 * GRAN)), SIGSEGV);
	cr_expect_eq(cuMemUnmap(va, 2 * GRAN), CUDA_ERROR_INVALID_VALUE, "nothing mapped");
	CU_OK(cuMemRelease(h1));
	CU_OK(cuMemRelease(h2));
	CU_OK(cuMemAddressFree(va, 8 * GRAN));
}

/* A mapping covers a whole handle: the H100's driver refuses part of one, at offset 0 or not
 * (CUDA_ERROR_NOT_SUPPORTED; tests/gpu/PROBE.md (k)), though the documentation leaves the
 * offset for later. A shim that mapped part of a handle (an importer of part of a large one)
 * would pass here and fail on the GPU. */
Test(vmm, a_mapping_covers_a_whole_handle)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemAddressReserve(&va, 8 * GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h, 4 * GRAN, &p, 0));
	cr_expect_eq(cuMemMap(va, GRAN, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED, "its first part");
	cr_expect_eq(cuMemMap(va, GRAN, 2 * GRAN, h, 0), CUDA_ERROR_NOT_SUPPORTED, "a part within");
	cr_expect_eq(cuMemMap(va, 2 * GRAN, 2 * GRAN, h, 0), CUDA_ERROR_NOT_SUPPORTED,
		     "its second half");
	cr_expect_eq(cuMemMap(va, 8 * GRAN, 0, h, 0), CUDA_ERROR_INVALID_VALUE, "past its end");
	CU_OK(cuMemMap(va, 4 * GRAN, 0, h, 0));
	CU_OK(cuMemUnmap(va, 4 * GRAN));
	CU_OK(cuMemRelease(h));
	CU_OK(cuMemAddressFree(va, 8 * GRAN));
}

Test(vmm, release_frees_physical_memory_after_last_unmap)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	size_t base = su_used();
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	cr_expect_eq(su_used(), base, "reserving costs no memory");
	CU_OK(cuMemCreate(&h, 4 * GRAN, &p, 0));
	cr_expect_eq(su_used(), base + 4 * GRAN);
	CU_OK(cuMemMap(va, 4 * GRAN, 0, h, 0));
	CU_OK(cuMemRelease(h));
	cr_expect_eq(su_used(), base + 4 * GRAN, "still mapped");
	cr_expect_eq(cuMemRelease(h), CUDA_ERROR_INVALID_VALUE, "released twice");
	cr_expect_eq(cuMemAddressFree(va, 4 * GRAN), CUDA_ERROR_INVALID_VALUE, "still mapped");
	CU_OK(cuMemUnmap(va, 4 * GRAN));
	cr_expect_eq(su_used(), base);
	CU_OK(cuMemAddressFree(va, 4 * GRAN));
}

Test(vmm, capacity_and_out_of_memory, .init = NULL)
{
	setenv("SIMDEV_MEMORY", "64M", 1);
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	size_t free_bytes, total;
	CU_OK(cuMemGetInfo(&free_bytes, &total));
	cr_expect_eq(total, 64 * MiB);
	cr_expect_eq(free_bytes, 64 * MiB);
	CUmemGenericAllocationHandle h[32], extra;
	for (int i = 0; i < 32; i++)
		CU_OK(cuMemCreate(&h[i], GRAN, &p, 0));
	cr_expect_eq(cuMemCreate(&extra, GRAN, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CUdeviceptr d;
	cr_expect_eq(cuMemAlloc(&d, 1), CUDA_ERROR_OUT_OF_MEMORY);
	CU_OK(cuMemGetInfo(&free_bytes, &total));
	cr_expect_eq(free_bytes, 0);
	CU_OK(cuMemRelease(h[5]));
	CU_OK(cuMemAlloc(&d, 100));
	CU_OK(cuMemFree(d));
	for (int i = 0; i < 32; i++)
		if (i != 5)
			CU_OK(cuMemRelease(h[i]));
	CU_OK(cuMemGetInfo(&free_bytes, &total));
	cr_expect_eq(free_bytes, 64 * MiB);
}

Test(vmm, properties_retain_and_export)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	CUdeviceptr va, va2;
	CUmemGenericAllocationHandle h, r, imp;
	CU_OK(cuMemAddressReserve(&va, GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h, GRAN, &p, 0));
	CU_OK(cuMemMap(va, GRAN, 0, h, 0));
	su_set_access(va, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	strcpy((char *)va, "shared bytes");

	CUmemAllocationProp got;
	CU_OK(cuMemGetAllocationPropertiesFromHandle(&got, h));
	cr_expect_eq(got.location.id, 0);
	cr_expect_eq(got.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	CU_OK(cuMemRetainAllocationHandle(&r, (void *)(va + 100)));
	cr_expect_eq(r, h);

	int fd = -1;
	CU_OK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	cr_assert_geq(fd, 0);
	CU_OK(cuMemImportFromShareableHandle(&imp, (void *)(intptr_t)fd,
					     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	CU_OK(cuMemAddressReserve(&va2, GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va2, GRAN, 0, imp, 0));
	su_set_access(va2, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	cr_expect_str_eq((char *)va2, "shared bytes");
	close(fd);

	CUmemAllocationProp plain = su_prop(0);
	CUmemGenericAllocationHandle h2;
	CU_OK(cuMemCreate(&h2, GRAN, &plain, 0));
	cr_expect_eq(cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
		     CUDA_ERROR_INVALID_VALUE, "not requested at create");
}

Test(vmm, ranges_and_attributes_of_mappings)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va, base = 0;
	size_t size = 0;
	CUmemGenericAllocationHandle h1, h2;
	CU_OK(cuMemAddressReserve(&va, 8 * GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h1, 2 * GRAN, &p, 0));
	CU_OK(cuMemCreate(&h2, 4 * GRAN, &p, 0));
	CU_OK(cuMemMap(va, 2 * GRAN, 0, h1, 0));
	CU_OK(cuMemMap(va + 2 * GRAN, 4 * GRAN, 0, h2, 0));
	su_set_access(va, 6 * GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

	CU_OK(cuMemGetAddressRange(&base, &size, va + 3 * GRAN + 5));
	cr_expect_eq(base, va + 2 * GRAN, "the mapping, as on the driver");
	cr_expect_eq(size, 4 * GRAN);
	CUdeviceptr start = 0;
	size_t rsize = 0;
	int ordinal = -1;
	unsigned type = 0;
	CU_OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 7));
	CU_OK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 7));
	CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, va + 7));
	CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + 7));
	cr_expect_eq(start, va);
	cr_expect_eq(rsize, 2 * GRAN);
	cr_expect_eq(ordinal, 0);
	cr_expect_eq(type, CU_MEMORYTYPE_DEVICE);

	CUipcMemHandle ipc;
	cr_expect_eq(cuIpcGetMemHandle(&ipc, va), CUDA_ERROR_INVALID_VALUE, "VMM memory has no IPC");
	cr_expect_eq(cuMemGetAddressRange(&base, &size, va + 7 * GRAN), CUDA_ERROR_NOT_FOUND,
		     "reserved but unmapped");
}

static void copy_into_reserved(void *arg)
{
	CUdeviceptr va = (CUdeviceptr)(uintptr_t)arg;
	char buf[16] = "x";
	CUresult r = cuMemcpyHtoD(va, buf, sizeof(buf));
	_exit(r == CUDA_ERROR_ILLEGAL_ADDRESS ? 0 : 1);
}

Test(vmm, copies_into_unmapped_or_inaccessible_memory_fail)
{
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CU_OK(cuMemAddressReserve(&va, 2 * GRAN, 0, 0, 0));
	CU_OK(cuMemCreate(&h, GRAN, &p, 0));
	CU_OK(cuMemMap(va, GRAN, 0, h, 0));
	char buf[16] = "abc";
	cr_expect_eq(cuMemcpyHtoD(va, buf, sizeof(buf)), CUDA_ERROR_ILLEGAL_ADDRESS, "no access");
	cr_expect_eq(cuMemcpyHtoD(va + GRAN, buf, sizeof(buf)), CUDA_ERROR_ILLEGAL_ADDRESS,
		     "unmapped");
	cr_expect_eq(su_signal_of(copy_into_reserved, (void *)(uintptr_t)(va + GRAN)), 0);
	su_set_access(va, GRAN, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	CU_OK(cuMemcpyHtoD(va, buf, sizeof(buf)));
	cr_expect_eq(cuMemcpyHtoD(va + GRAN - 8, buf, sizeof(buf)), CUDA_ERROR_ILLEGAL_ADDRESS,
		     "runs off the mapping");
	cr_expect_str_eq((char *)va, "abc");
}
