/* Sleep and wake of the heap: physical memory goes back to the driver while every address stays
 * reserved, contents come back at the same addresses, discard keeps nothing, "already" changes
 * nothing, a wake without device memory fails cleanly and succeeds later, tags sleep alone, and
 * peers are re-granted at wake. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "helpers.h"
#include "heap_offload.h"

#define N 40

static vmm_devptr p[N];
static size_t n[N];

static void populate(struct tctx *t, const char *tag)
{
	for (int i = 0; i < N; i++) {
		n[i] = i % 4 == 0 ? (size_t)(i + 1) * MiB + 77 : (size_t)(i + 1) * 1000;
		cr_assert_eq(vmm_malloc(t->core, 0, n[i], 0, tag, &p[i], NULL), VMM_OK);
		t_fill(p[i], n[i], p[i] * 3);
	}
}

static void assert_intact(void)
{
	for (int i = 0; i < N; i++)
		cr_assert(t_check(p[i], n[i], p[i] * 3), "allocation %d (0x%llx+%zu) lost", i,
			  (unsigned long long)p[i], n[i]);
}

Test(heap_offload, sleep_releases_and_wake_restores_at_the_same_addresses)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1 };
	vmm_transfer_result r;
	struct tctx t;
	vmm_error err;
	vmm_alloc_info info;
	vmm_stats s;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, NULL);
	for (int cycle = 0; cycle < 5; cycle++) {
		uint64_t mapped = t_stats(&t, 0, NULL).mapped_bytes;

		cr_assert_eq(vmm_sleep(t.core, &all, &r, &err), VMM_OK, "sleep: %s", err.msg);
		cr_assert_eq(t_dev_used(&t, 0), 0, "every physical byte goes back");
		cr_assert_eq(r.bytes_released, mapped);
		cr_assert_gt(r.bytes_copied, 0);
		cr_assert(vmm_is_asleep(t.core, 0, NULL));
		s = t_stats(&t, 0, NULL);
		cr_assert_eq(s.mapped_bytes, 0);
		cr_assert_gt(s.asleep_bytes, 0);
		cr_assert_eq(s.host_backup_bytes, s.asleep_bytes);
		cr_assert_eq(s.live_count, N, "allocations stay allocated");
		cr_assert(vmm_lookup(t.core, p[3] + 1, &info), "addresses stay known");
		cr_assert_eq(vmm_wake(t.core, &all, &r, &err), VMM_OK, "wake: %s", err.msg);
		cr_assert_not(vmm_is_asleep(t.core, 0, NULL));
		s = t_stats(&t, 0, NULL);
		cr_assert_eq(s.asleep_bytes, 0);
		cr_assert_eq(s.host_backup_bytes, 0);
		cr_assert_eq(s.mapped_bytes, t_dev_used(&t, 0));
		assert_intact();
	}
	/* The heap works after waking. */
	vmm_devptr q;
	cr_assert_eq(vmm_malloc(t.core, 0, 5 * MiB, 0, NULL, &q, NULL), VMM_OK);
	vmm_free(t.core, p[0], NULL);
	t_close(&t);
}

Test(heap_offload, free_cached_memory_is_released_without_copy)
{
	vmm_sleep_opts all = { .device = 0 };
	vmm_transfer_result r;
	struct tctx t;
	vmm_devptr big, small;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 200 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, "x", &small, NULL), VMM_OK);
	t_fill(small, 4 * MiB, 1);
	vmm_free(t.core, big, NULL);
	cr_assert_eq(vmm_sleep(t.core, &all, &r, NULL), VMM_OK);
	cr_assert_leq(r.bytes_copied, 4 * MiB, "only live bytes are copied (%llu)",
		      (unsigned long long)r.bytes_copied);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	cr_assert_eq(vmm_wake(t.core, &all, &r, NULL), VMM_OK);
	cr_assert(t_check(small, 4 * MiB, 1));
	cr_assert_leq(t_dev_used(&t, 0), 4 * MiB, "the freed 200 MiB stay with the driver");
	t_close(&t);
}

Test(heap_offload, already_changes_nothing)
{
	vmm_sleep_opts all = { .device = -1 };
	vmm_transfer_result r;
	struct tctx t;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, NULL);
	cr_assert_eq(vmm_wake(t.core, &all, &r, &err), VMM_E_ALREADY);
	cr_assert(r.already);
	assert_intact();
	cr_assert_eq(vmm_sleep(t.core, &all, &r, NULL), VMM_OK);
	cr_assert_eq(vmm_sleep(t.core, &all, &r, &err), VMM_E_ALREADY);
	cr_assert(r.already);
	cr_assert_eq(r.bytes_released, 0);
	cr_assert_eq(vmm_wake(t.core, &all, &r, NULL), VMM_OK);
	assert_intact();
	t_close(&t);
}

Test(heap_offload, discard_keeps_no_contents)
{
	vmm_sleep_opts d = { .device = -1, .discard = true };
	vmm_transfer_result r;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, NULL);
	cr_assert_eq(vmm_sleep(t.core, &d, &r, NULL), VMM_OK);
	cr_assert_eq(r.bytes_copied, 0);
	cr_assert_eq(t_stats(&t, 0, NULL).host_backup_bytes, 0);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	cr_assert_eq(vmm_wake(t.core, &d, &r, NULL), VMM_OK);
	cr_assert_eq(r.bytes_copied, 0);
	/* Memory is back and writable at the same addresses. */
	for (int i = 0; i < N; i++) {
		t_fill(p[i], n[i], 5);
		cr_assert(t_check(p[i], n[i], 5));
	}
	t_close(&t);
}

Test(heap_offload, a_tag_sleeps_alone)
{
	vmm_sleep_opts a = { .tag = "a", .device = -1 };
	struct tctx t;
	vmm_devptr b, c;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, "a");
	cr_assert_eq(vmm_malloc(t.core, 0, 6 * MiB, 0, "b", &b, NULL), VMM_OK);
	t_fill(b, 6 * MiB, 9);
	cr_assert_eq(vmm_sleep(t.core, &a, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert(vmm_is_asleep(t.core, 0, "a"));
	cr_assert_not(vmm_is_asleep(t.core, 0, "b"));
	cr_assert(t_check(b, 6 * MiB, 9), "the other tag is untouched");
	cr_assert_eq(t_stats(&t, 0, "b").mapped_bytes, t_dev_used(&t, 0));
	cr_assert_eq(vmm_malloc(t.core, 0, 10, 0, "a", &c, &err), VMM_E_BUSY);
	cr_assert_eq(vmm_malloc(t.core, 0, 3 * MiB, 0, "b", &c, NULL), VMM_OK);
	cr_assert_eq(vmm_wake(t.core, &a, NULL, &err), VMM_OK, "%s", err.msg);
	assert_intact();
	cr_assert(t_check(b, 6 * MiB, 9));
	t_close(&t);
}

Test(heap_offload, wake_without_memory_fails_then_succeeds)
{
	vmm_sleep_opts a = { .tag = "a", .device = 0 };
	vmm_transfer_result r;
	struct tctx t;
	vmm_devptr hog;
	vmm_error err;

	t_simdev_env("256M", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, "a");
	cr_assert_eq(vmm_sleep(t.core, &a, &r, NULL), VMM_OK);
	/* Someone else takes the memory meanwhile. */
	cr_assert_eq(vmm_malloc(t.core, 0, 200 * MiB, 0, "hog", &hog, &err), VMM_OK, "%s",
		     err.msg);
	cr_assert_eq(vmm_wake(t.core, &a, &r, &err), VMM_E_OOM);
	cr_assert(strstr(err.msg, "needs") && strstr(err.msg, "available"), "message: %s",
		  err.msg);
	cr_assert(vmm_is_asleep(t.core, 0, "a"), "still asleep, host copy intact");
	cr_assert_gt(t_stats(&t, 0, "a").host_backup_bytes, 0);
	vmm_free(t.core, hog, NULL);
	vmm_trim(t.core, 0, NULL);
	cr_assert_eq(vmm_wake(t.core, &a, &r, &err), VMM_OK, "%s", err.msg);
	assert_intact();
	t_close(&t);
}

Test(heap_offload, create_failure_during_wake_rolls_back)
{
	vmm_sleep_opts all = { .device = -1 };
	vmm_devptr q[3];
	struct tctx t;
	vmm_error err;
	vmm_stats s;
	int failures = 0;

	/* Three growths make three creates and maps (allocations of max_handle_bytes get whole
	 * handles); the wake's second create and third map fail, in two separate wakes. */
	vmm_config cfg;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = 20 * MiB;
	t_simdev_env("1G", NULL, "cuMemCreate:5,cuMemMap:6");
	t_open(&t, &cfg);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 20 * MiB, 0, NULL, &q[i], &err), VMM_OK, "%s",
			     err.msg);
		t_fill(q[i], 20 * MiB, (uint64_t)i);
	}
	s = t_stats(&t, 0, NULL);
	cr_assert_eq(s.handles_created, 3);
	cr_assert_eq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
	for (int k = 0; k < 4; k++) {
		if (vmm_wake(t.core, &all, NULL, &err) == VMM_OK)
			break;
		failures++;
		cr_assert(vmm_is_asleep(t.core, 0, NULL), "a failed wake stays asleep");
		cr_assert_eq(t_dev_used(&t, 0), 0, "and holds no device memory");
	}
	cr_assert_eq(failures, 2, "both injected failures were met");
	cr_assert_not(vmm_is_asleep(t.core, 0, NULL));
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, s.mapped_bytes);
	for (int i = 0; i < 3; i++)
		cr_assert(t_check(q[i], 20 * MiB, (uint64_t)i));
	t_close(&t);
}

Test(heap_offload, peers_are_granted_again_at_wake)
{
	vmm_sleep_opts all = { .device = -1 };
	CUmemLocation loc = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1 };
	unsigned long long flags = 0;
	struct tctx t;
	vmm_devptr q;
	CUresult (*get_access)(unsigned long long *, const CUmemLocation *, CUdeviceptr);

	t_simdev_env("1G", "2", NULL);
	t_open(&t, NULL);
	get_access = (CUresult(*)(unsigned long long *, const CUmemLocation *, CUdeviceptr))
		dlsym(dlopen("libcuda.so.1", RTLD_NOW), "cuMemGetAccess");
	cr_assert_not_null(get_access);
	cr_assert_eq(vmm_malloc(t.core, 0, 9 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert_eq(vmm_set_peer_access(t.core, 0, 1, true, NULL), VMM_OK);
	cr_assert_eq(vmm_sleep(t.core, &all, NULL, NULL), VMM_OK);
	cr_assert_eq(vmm_wake(t.core, &all, NULL, NULL), VMM_OK);
	cr_assert_eq(get_access(&flags, &loc, (CUdeviceptr)q + 4 * MiB), CUDA_SUCCESS);
	cr_assert_eq(flags, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
	t_close(&t);
}

Test(heap_offload, provisioned_backup_is_used_by_sleep)
{
	vmm_sleep_opts all = { .device = -1 };
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	populate(&t, NULL);
	cr_assert_eq(vmm_provision_backup(t.core, &all, NULL), VMM_OK);
	cr_assert_eq(vmm_sleep(t.core, &all, NULL, NULL), VMM_OK);
	cr_assert_eq(vmm_wake(t.core, &all, NULL, NULL), VMM_OK);
	assert_intact();
	cr_assert_eq(vmm_sleep(t.core, &(vmm_sleep_opts){ .device = 4 }, NULL, NULL), VMM_E_INVALID);
	t_close(&t);
}

Test(heap_offload, wake_of_several_devices_is_all_or_nothing)
{
	vmm_sleep_opts w = { .tag = "w", .device = -1 };
	vmm_devptr a, b, hog;
	struct tctx t;
	vmm_error err;

	t_simdev_env("256M", "2", NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, "w", &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 1, 100 * MiB, 0, "w", &b, NULL), VMM_OK);
	t_fill(a, 100 * MiB, 1);
	t_fill(b, 100 * MiB, 2);
	cr_assert_eq(vmm_sleep(t.core, &w, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_dev_used(&t, 0) + t_dev_used(&t, 1), 0);
	/* Device 1 fills up meanwhile: waking must not wake device 0 alone. */
	cr_assert_eq(vmm_malloc(t.core, 1, 200 * MiB, 0, "hog", &hog, NULL), VMM_OK);
	cr_assert_eq(vmm_wake(t.core, &w, NULL, &err), VMM_E_OOM);
	cr_assert(strstr(err.msg, "device 1") != NULL, "%s", err.msg);
	cr_assert_eq(t_dev_used(&t, 0), 0, "device 0 stays asleep");
	cr_assert(vmm_is_asleep(t.core, 0, "w"));
	cr_assert(vmm_is_asleep(t.core, 1, "w"));
	vmm_free(t.core, hog, NULL);
	vmm_trim(t.core, 1, NULL);
	cr_assert_eq(vmm_wake(t.core, &w, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert(t_check(a, 100 * MiB, 1));
	cr_assert(t_check(b, 100 * MiB, 2));
	cr_assert_not(vmm_is_asleep(t.core, -1, NULL));
	t_close(&t);
}
