/* Physical memory: trim gives it back, fragmentation never causes an out-of-memory while enough
 * is free, out of memory is reported as such and the heap keeps working, peers get access, and
 * the statistics agree with the driver. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <cuda.h>
#include <string.h>

#include "helpers.h"

Test(heap_memory, trim_returns_memory_to_the_driver)
{
	struct tctx t;
	vmm_devptr p[64];
	uint64_t used0;
	vmm_stats s;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	used0 = t_dev_used(&t, 0);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(vmm_malloc(t.core, 0, (size_t)(i + 1) * 100 * KiB, 0, NULL, &p[i], NULL),
			     VMM_OK);
	cr_assert_gt(t_dev_used(&t, 0), used0 + 64 * 100 * KiB);
	for (int i = 0; i < 64; i++)
		vmm_free(t.core, p[i], NULL);
	cr_assert_gt(t_dev_used(&t, 0), used0, "freed memory stays cached until trim");
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), used0, "trim gives every free handle back");
	s = t_stats(&t, 0, NULL);
	cr_assert_eq(s.mapped_bytes, 0);
	cr_assert_eq(s.cached_bytes, 0);
	cr_assert_eq(s.handles_created, s.handles_released);
	cr_assert_eq(vmm_trim(t.core, -1, NULL), VMM_OK);
	/* The heap still works after a trim. */
	cr_assert_eq(vmm_malloc(t.core, 0, 3 * MiB, 0, NULL, &p[0], NULL), VMM_OK);
	t_fill(p[0], 3 * MiB, 3);
	cr_assert(t_check(p[0], 3 * MiB, 3));
	t_close(&t);
}

Test(heap_memory, trim_keeps_live_allocations)
{
	struct tctx t;
	vmm_devptr keep, tmp[8];

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &tmp[i], NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 5 * MiB, 0, NULL, &keep, NULL), VMM_OK);
	t_fill(keep, 5 * MiB, 42);
	for (int i = 0; i < 8; i++)
		vmm_free(t.core, tmp[i], NULL);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert(t_check(keep, 5 * MiB, 42));
	cr_assert_leq(t_dev_used(&t, 0), 6 * MiB);
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, t_dev_used(&t, 0));
	t_close(&t);
}

Test(heap_memory, fragmentation_does_not_cause_oom)
{
	static vmm_devptr p[512];
	struct tctx t;
	vmm_devptr big;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	for (int i = 0; i < 512; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &p[i], &err), VMM_OK,
			     "allocation %d: %s", i, err.msg);
		t_fill(p[i], 2 * MiB, (uint64_t)i);
	}
	for (int i = 0; i < 512; i += 2)
		cr_assert_eq(vmm_free(t.core, p[i], NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 512 * MiB, 0, NULL, &big, &err), VMM_OK,
		     "512 MiB after fragmentation: %s", err.msg);
	t_fill(big, 512 * MiB, 99);
	cr_assert(t_check(big, 512 * MiB, 99));
	for (int i = 1; i < 512; i += 2)
		cr_assert(t_check(p[i], 2 * MiB, (uint64_t)i), "allocation %d lost its contents", i);
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, t_dev_used(&t, 0));
	t_close(&t);
}

Test(heap_memory, out_of_memory_is_reported_and_the_heap_survives)
{
	struct tctx t;
	vmm_devptr p, q;
	vmm_error err;

	t_simdev_env("64M", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, NULL, &p, &err), VMM_E_OOM);
	cr_assert(strstr(err.msg, "104857600") != NULL, "the message names the bytes: %s", err.msg);
	cr_assert(strstr(err.msg, "free") != NULL, "and what is free: %s", err.msg);
	cr_assert_eq(t_dev_used(&t, 0), 0, "nothing is left behind");
	cr_assert_eq(t_stats(&t, 0, NULL).live_count, 0);
	cr_assert_eq(vmm_malloc(t.core, 0, 32 * MiB, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	t_fill(p, 32 * MiB, 1);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB, 0, NULL, &q, &err), VMM_E_OOM);
	cr_assert(t_check(p, 32 * MiB, 1));
	cr_assert_eq(vmm_free(t.core, p, NULL), VMM_OK);
	t_close(&t);
}

Test(heap_memory, oom_ladder_reuses_quarantined_and_cached_memory)
{
	struct tctx t;
	vmm_devptr a, b, c;
	vmm_error err;

	t_simdev_env("64M", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 32 * MiB, 0, NULL, &a, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 16 * MiB, 0, NULL, &b, &err), VMM_OK);
	t_fill(b, 16 * MiB, 5);
	cr_assert_eq(vmm_free(t.core, a, NULL), VMM_OK);
	/* 40 MiB: only 16 MiB are left in the driver, 32 MiB wait in quarantine. */
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB, 0, NULL, &c, &err), VMM_OK, "%s", err.msg);
	t_fill(c, 40 * MiB, 6);
	cr_assert(t_check(b, 16 * MiB, 5));
	cr_assert(t_check(c, 40 * MiB, 6));
	cr_assert_gt(t_stats(&t, 0, NULL).syncs, 0);
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, t_dev_used(&t, 0));
	t_close(&t);
}

Test(heap_memory, cache_limit_releases_beyond_it)
{
	struct tctx t;
	vmm_config cfg;
	vmm_devptr p[8], q;

	vmm_config_defaults(&cfg);
	cfg.cache_limit = 8 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &p[i], NULL), VMM_OK);
	for (int i = 0; i < 8; i++)
		vmm_free(t.core, p[i], NULL);
	/* The next miss syncs, reclaims, and keeps at most the limit of wholly free handles. */
	cr_assert_eq(vmm_malloc(t.core, 0, 70 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert_leq(t_dev_used(&t, 0), 70 * MiB + 8 * MiB + 2 * MiB);
	t_close(&t);
}

Test(heap_memory, peers_get_access_to_present_and_future_mappings)
{
	struct tctx t;
	vmm_devptr before, after;
	CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 };
	unsigned long long flags = 0;
	void *lib;
	CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr);

	t_simdev_env("1G", "2", NULL);
	t_open(&t, NULL);
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	cr_assert_not_null(lib);
	get_access = (CUresult(*)(unsigned long long *, const CUmemLocation *, CUdeviceptr))
		dlsym(lib, "cuMemGetAccess");
	cr_assert_not_null(get_access);
	cr_assert_eq(vmm_malloc(t.core, 0, 5 * MiB, 0, NULL, &before, NULL), VMM_OK);
	cr_assert_eq(get_access(&flags, &loc, (CUdeviceptr)before), CUDA_SUCCESS);
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
	cr_assert_eq(vmm_set_peer_access(t.core, 0, 1, true, NULL), VMM_OK);
	cr_assert_eq(get_access(&flags, &loc, (CUdeviceptr)before), CUDA_SUCCESS);
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "re-granted on present mappings");
	cr_assert_eq(vmm_malloc(t.core, 0, 50 * MiB, 0, NULL, &after, NULL), VMM_OK);
	cr_assert_eq(get_access(&flags, &loc, (CUdeviceptr)after + 10 * MiB), CUDA_SUCCESS);
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "granted on new mappings");
	cr_assert_eq(vmm_set_peer_access(t.core, 0, 0, true, NULL), VMM_E_INVALID);
	cr_assert_eq(vmm_set_peer_access(t.core, 0, 7, true, NULL), VMM_E_INVALID);
	/* Device 1 has a heap of its own. */
	cr_assert_eq(vmm_malloc(t.core, 1, 5 * MiB, 0, NULL, &after, NULL), VMM_OK);
	cr_assert_eq(vmm_devices_used(t.core), 3u);
	cr_assert_eq(t_stats(&t, 1, NULL).live_bytes, 5 * MiB);
	cr_assert_eq(t_stats(&t, -1, NULL).live_bytes, 60 * MiB);
	t_close(&t);
}

Test(heap_memory, stats_match_the_driver_and_the_requests)
{
	struct tctx t;
	vmm_devptr p[5];
	size_t sizes[5] = { 100, 70000, 3 * MiB, 3 * MiB + 1, 129 * MiB };
	uint64_t sum = 0;
	vmm_stats s;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	for (int i = 0; i < 5; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, sizes[i], 0, "s", &p[i], NULL), VMM_OK);
		sum += sizes[i];
	}
	s = t_stats(&t, 0, "s");
	cr_assert_eq(s.live_bytes, sum);
	cr_assert_eq(s.live_count, 5);
	cr_assert_eq(s.mapped_bytes, t_dev_used(&t, 0));
	cr_assert_geq(s.mapped_bytes - s.cached_bytes, sum);
	cr_assert_eq(s.reserved_bytes, 4 * t_dev_total(&t, 0));
	cr_assert_eq(s.peak_live_bytes, sum);
	cr_assert_eq(s.alloc_calls, 5);
	vmm_free(t.core, p[4], NULL);
	s = t_stats(&t, 0, "s");
	cr_assert_eq(s.live_bytes, sum - sizes[4]);
	cr_assert_eq(s.peak_live_bytes, sum);
	cr_assert_eq(s.free_calls, 1);
	cr_assert_eq(s.handles_created - s.handles_released > 0, 1);
	t_close(&t);
}

Test(heap_memory, large_requests_span_several_handles)
{
	struct tctx t;
	vmm_config cfg;
	vmm_devptr p;
	vmm_stats s;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = 4 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	cr_assert_eq(vmm_malloc(t.core, 0, 21 * MiB, 0, NULL, &p, NULL), VMM_OK);
	t_fill(p, 21 * MiB, 8);
	cr_assert(t_check(p, 21 * MiB, 8));
	s = t_stats(&t, 0, NULL);
	cr_assert_eq(s.handles_created, 6, "22 MiB in handles of at most 4 MiB");
	cr_assert_eq(s.mapped_bytes, 22 * MiB);
	vmm_free(t.core, p, NULL);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	t_close(&t);
}

Test(heap_memory, address_space_is_reserved_again_when_it_runs_out)
{
	struct tctx t;
	vmm_config cfg;
	vmm_devptr p[12];
	vmm_stats s;

	vmm_config_defaults(&cfg);
	cfg.reserve_bytes = 64 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	for (int i = 0; i < 12; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 30 * MiB, 0, NULL, &p[i], NULL), VMM_OK);
		t_fill(p[i], 30 * MiB, (uint64_t)i);
	}
	/* A request larger than a reservation gets one of its own size. */
	vmm_devptr big;
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, NULL, &big, NULL), VMM_OK);
	t_fill(big, 100 * MiB, 77);
	for (int i = 0; i < 12; i++)
		cr_assert(t_check(p[i], 30 * MiB, (uint64_t)i));
	cr_assert(t_check(big, 100 * MiB, 77));
	s = t_stats(&t, 0, NULL);
	cr_assert_gt(s.reserved_bytes, 64 * MiB);
	cr_assert_eq(s.mapped_bytes, t_dev_used(&t, 0));
	t_close(&t);
}

Test(heap_memory, a_refused_reservation_is_retried_smaller)
{
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	t_simdev_env("1G", NULL, "cuMemAddressReserve:1");
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 10 * MiB, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_stats(&t, 0, NULL).reserved_bytes, 2 * t_dev_total(&t, 0),
		     "half of the default 4 x device memory");
	t_fill(p, 10 * MiB, 4);
	cr_assert(t_check(p, 10 * MiB, 4));
	t_close(&t);
}
