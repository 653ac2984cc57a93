/* A sleep turns the small handles inside one allocation into one handle: the wake re-creates
 * fewer handles (what a user sees as a faster sleep/wake of a fragmented heap), contents and
 * addresses are kept, a discarded sleep does the same, the configured largest handle is kept,
 * and the memory of a freed allocation is reused afterwards as before. Runs across allocations:
 * test_heap_wake_join.c. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers.h"
#include "heap_offload.h"

static const vmm_sleep_opts all = { .device = -1 };

static void cycle(struct tctx *t, bool discard, uint64_t *created_by_wake)
{
	vmm_sleep_opts o = all;
	vmm_transfer_result r;
	vmm_error err;
	uint64_t before;

	o.discard = discard;
	cr_assert_eq(vmm_sleep(t->core, &o, &r, &err), VMM_OK, "sleep: %s", err.msg);
	cr_assert_eq(t_dev_used(t, 0), 0);
	before = t_stats(t, 0, NULL).handles_created;
	cr_assert_eq(vmm_wake(t->core, &all, &r, &err), VMM_OK, "wake: %s", err.msg);
	*created_by_wake = t_stats(t, 0, NULL).handles_created - before;
}

Test(heap_coalesce, pieces_of_one_allocation_come_back_as_one_handle)
{
	vmm_devptr a, b, c;
	uint64_t created, before;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* 20 MiB grows in 2 MiB pieces (below the whole-handle size); b and c share edges. */
	cr_assert_eq(vmm_malloc(t.core, 0, 20 * MiB, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 3 * MiB + 5, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 7 * MiB, 0, NULL, &c, NULL), VMM_OK);
	t_fill(a, 20 * MiB, 1);
	t_fill(b, 3 * MiB + 5, 2);
	t_fill(c, 7 * MiB, 3);
	before = t_handles_held(&t, 0);
	cr_assert_geq(before, 15, "a alone is 10 pieces of 2 MiB");
	cycle(&t, false, &created);
	cr_expect_eq(t_handles_held(&t, 0), created);
	/* a's ten pieces are one handle now (joined with its neighbours' too). */
	cr_expect_leq(created, before - 9, "%llu handles re-created of %llu",
		      (unsigned long long)created, (unsigned long long)before);
	cr_expect(t_check(a, 20 * MiB, 1) && t_check(b, 3 * MiB + 5, 2) && t_check(c, 7 * MiB, 3),
		  "contents at the same addresses");
	/* The next cycle re-creates just as many: nothing grows back. */
	cycle(&t, false, &created);
	cr_expect_eq(t_handles_held(&t, 0), created);
	cr_expect(t_check(a, 20 * MiB, 1) && t_check(b, 3 * MiB + 5, 2) && t_check(c, 7 * MiB, 3));
	t_close(&t);
}

Test(heap_coalesce, a_discarded_sleep_coalesces_too)
{
	vmm_devptr a;
	uint64_t created;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 16 * MiB, 0, NULL, &a, NULL), VMM_OK);
	t_fill(a, 16 * MiB, 4);
	/* A cycle with a copy first, so that the pieces hold host backups from before. */
	cycle(&t, false, &created);
	cycle(&t, true, &created);
	cr_expect_eq(created, 1);
	t_fill(a, 16 * MiB, 5);
	cr_expect(t_check(a, 16 * MiB, 5), "the memory is usable after the discarded sleep");
	cycle(&t, false, &created);
	cr_expect(t_check(a, 16 * MiB, 5));
	t_close(&t);
}

Test(heap_coalesce, the_largest_handle_configured_is_kept)
{
	vmm_config cfg;
	vmm_devptr a;
	uint64_t created;
	struct tctx t;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = 4 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	/* Below the whole-handle size: 2 MiB pieces, joined at most two by two. */
	cr_assert_eq(vmm_malloc(t.core, 0, 12 * MiB, 0, NULL, &a, NULL), VMM_OK);
	t_fill(a, 12 * MiB, 6);
	cycle(&t, false, &created);
	cr_expect_geq(created, 3, "12 MiB in handles of at most 4 MiB (%llu)",
		      (unsigned long long)created);
	cr_expect(t_check(a, 12 * MiB, 6));
	t_close(&t);
}

Test(heap_coalesce, freed_memory_of_a_joined_handle_is_reused)
{
	vmm_devptr a, keep, s[6];
	uint64_t created;
	struct tctx t;

	/* A small device: the six requests below fit only in what a held. */
	t_simdev_env("48M", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 24 * MiB, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &keep, NULL), VMM_OK);
	t_fill(keep, 2 * MiB, 7);
	cycle(&t, false, &created);
	cr_assert_eq(vmm_free(t.core, a, NULL), VMM_OK);
	for (int i = 0; i < 6; i++) {
		vmm_error err;

		cr_assert_eq(vmm_malloc(t.core, 0, 5 * MiB, 0, NULL, &s[i], &err), VMM_OK,
			     "request %d: %s", i, err.msg);
		t_fill(s[i], 5 * MiB, 10 + i);
	}
	for (int i = 0; i < 6; i++)
		cr_expect(t_check(s[i], 5 * MiB, 10 + i));
	cr_expect(t_check(keep, 2 * MiB, 7));
	t_close(&t);
}
