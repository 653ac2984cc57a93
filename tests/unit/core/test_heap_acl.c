/* The heap over the Ascend backend (simdev's libascendcl.so): the same contract as over CUDA,
 * through aclrtMapMem of whole handles and aclrtUnmapMem one mapping at a time. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "helpers.h"
#include "heap_offload.h"

static void acl_env(const char *memory)
{
	setenv("VMM_TEST_BACKEND", "acl", 1);
	t_simdev_env(memory, NULL, NULL);
}

Test(heap_acl, classes_contents_and_trim)
{
	static vmm_devptr p[300];
	struct tctx t;
	vmm_error err;

	acl_env("1G");
	t_open(&t, NULL);
	cr_assert_str_eq(vmm_core_backend(t.core)->name, "acl");
	for (int i = 0; i < 300; i++) {
		size_t n = (size_t)i * i * 97 + 1;

		cr_assert_eq(vmm_malloc(t.core, 0, n, 0, NULL, &p[i], &err), VMM_OK, "%s", err.msg);
		cr_assert_eq(p[i] % 256, 0);
		t_fill(p[i], n, p[i]);
	}
	for (int i = 0; i < 300; i++)
		cr_assert(t_check(p[i], (size_t)i * i * 97 + 1, p[i]));
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, t_dev_used(&t, 0));
	for (int i = 0; i < 300; i++)
		cr_assert_eq(vmm_free(t.core, p[i], NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	t_close(&t);
}

Test(heap_acl, fragmentation_remaps_whole_handles)
{
	static vmm_devptr p[512];
	struct tctx t;
	vmm_devptr big;
	vmm_error err;

	acl_env("1G");
	t_open(&t, NULL);
	for (int i = 0; i < 512; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &p[i], &err), VMM_OK, "%d: %s",
			     i, err.msg);
		t_fill(p[i], 2 * MiB, (uint64_t)i);
	}
	for (int i = 0; i < 512; i += 2)
		vmm_free(t.core, p[i], NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 512 * MiB, 0, NULL, &big, &err), VMM_OK, "%s", err.msg);
	t_fill(big, 512 * MiB, 7);
	cr_assert(t_check(big, 512 * MiB, 7));
	for (int i = 1; i < 512; i += 2)
		cr_assert(t_check(p[i], 2 * MiB, (uint64_t)i));
	t_close(&t);
}

Test(heap_acl, sleep_and_wake_keep_contents)
{
	vmm_sleep_opts all = { .device = -1 };
	vmm_devptr p[20];
	struct tctx t;
	vmm_error err;

	acl_env("1G");
	t_open(&t, NULL);
	for (int i = 0; i < 20; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, (size_t)(i + 1) * 700 * KiB, 0, NULL, &p[i], NULL),
			     VMM_OK);
		t_fill(p[i], (size_t)(i + 1) * 700 * KiB, p[i]);
	}
	for (int c = 0; c < 3; c++) {
		cr_assert_eq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
		cr_assert_eq(t_dev_used(&t, 0), 0);
		cr_assert_eq(vmm_wake(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
		for (int i = 0; i < 20; i++)
			cr_assert(t_check(p[i], (size_t)(i + 1) * 700 * KiB, p[i]));
	}
	t_close(&t);
}
