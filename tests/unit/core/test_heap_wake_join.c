/* Many small adjacent allocations come back from a sleep in a few large handles (what a user sees
 * as a fast discard sleep and wake of a fragmented heap): few handles after the wake, contents
 * and addresses kept, every byte given back by a discard sleep, freed memory reused in place and
 * given back once the handle is all free, no handle above its cap, exported allocations keep
 * handles of their own, and one in a joined handle can still get a handle of its own (the joined
 * one is cut around it; a failed cut changes nothing). */
#include <criterion/criterion.h>

#include "heap_offload.h"
#include "helpers.h"
#include "vmm_share.h"

#define NSMALL 96
#define SMALL (3 * MiB + 4096)  /* shares a 2 MiB piece with each neighbour */

static const vmm_sleep_opts all = { .device = -1 };

static void sleep_all(struct tctx *t, bool discard)
{
	vmm_sleep_opts o = all;
	vmm_transfer_result r;
	vmm_error err;

	o.discard = discard;
	cr_assert_eq(vmm_sleep(t->core, &o, &r, &err), VMM_OK, "sleep: %s", err.msg);
}

static void wake_all(struct tctx *t)
{
	vmm_transfer_result r;
	vmm_error err;

	cr_assert_eq(vmm_wake(t->core, &all, &r, &err), VMM_OK, "wake: %s", err.msg);
}

static void alloc_small(struct tctx *t, vmm_devptr *p, int n, uint64_t seed)
{
	for (int i = 0; i < n; i++) {
		vmm_error err;

		cr_assert_eq(vmm_malloc(t->core, 0, SMALL, 0, NULL, &p[i], &err), VMM_OK,
			     "allocation %d: %s", i, err.msg);
		t_fill(p[i], SMALL, seed + (uint64_t)i);
	}
}

static bool all_intact(vmm_devptr *p, int n, uint64_t seed)
{
	for (int i = 0; i < n; i++)
		if (p[i] && !t_check(p[i], SMALL, seed + (uint64_t)i))
			return false;
	return true;
}

Test(heap_wake_join, small_allocations_wake_in_a_few_handles_with_their_contents)
{
	vmm_devptr p[NSMALL];
	uint64_t before;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL, 100);
	before = t_handles_held(&t, 0);
	cr_assert_geq(before, NSMALL, "each allocation lies in its own pieces (%llu handles)",
		      (unsigned long long)before);
	for (int cycle = 0; cycle < 2; cycle++) {
		sleep_all(&t, false);
		cr_assert_eq(t_dev_used(&t, 0), 0, "asleep, nothing is held on the device");
		wake_all(&t);
		/* ~290 MiB of adjacent allocations: a handle of at most 1 GiB holds them. */
		cr_expect_leq(t_handles_held(&t, 0), 2, "cycle %d: %llu handles after the wake (%llu "
			      "before the first sleep)", cycle, (unsigned long long)t_handles_held(&t, 0),
			      (unsigned long long)before);
		cr_expect(all_intact(p, NSMALL, 100), "cycle %d: contents at the same addresses",
			  cycle);
	}
	t_close(&t);
}

Test(heap_wake_join, a_discard_sleep_releases_every_byte_and_the_wake_is_usable)
{
	vmm_devptr p[NSMALL];
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL, 200);
	for (int cycle = 0; cycle < 3; cycle++) {
		sleep_all(&t, true);
		cr_expect_eq(t_dev_used(&t, 0), 0, "cycle %d: %llu bytes still held", cycle,
			     (unsigned long long)t_dev_used(&t, 0));
		cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 0);
		wake_all(&t);
		cr_expect_leq(t_handles_held(&t, 0), 2, "cycle %d: %llu handles", cycle,
			      (unsigned long long)t_handles_held(&t, 0));
		for (int i = 0; i < NSMALL; i++)
			t_fill(p[i], SMALL, 300 + (uint64_t)(cycle * NSMALL + i));
		for (int i = 0; i < NSMALL; i++)
			cr_assert(t_check(p[i], SMALL, 300 + (uint64_t)(cycle * NSMALL + i)),
				  "cycle %d: allocation %d is not usable", cycle, i);
	}
	t_close(&t);
}

Test(heap_wake_join, memory_freed_in_a_joined_handle_is_reused_then_given_back)
{
	vmm_devptr p[NSMALL], q[NSMALL / 2];
	uint64_t mapped;
	struct tctx t;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL, 400);
	sleep_all(&t, true);
	wake_all(&t);
	for (int i = 0; i < NSMALL; i++)
		t_fill(p[i], SMALL, 400 + (uint64_t)i);
	mapped = t_stats(&t, 0, NULL).mapped_bytes;
	/* Every other one freed: the same requests again fit in what they freed. */
	for (int i = 1; i < NSMALL; i += 2) {
		cr_assert_eq(vmm_free(t.core, p[i], &err), VMM_OK, "%s", err.msg);
		p[i] = 0;
	}
	alloc_small(&t, q, NSMALL / 2, 900);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, mapped, "no new memory: %llu mapped, "
		     "%llu before", (unsigned long long)t_stats(&t, 0, NULL).mapped_bytes,
		     (unsigned long long)mapped);
	cr_expect(all_intact(p, NSMALL, 400), "the allocations kept keep their contents");
	cr_expect(all_intact(q, NSMALL / 2, 900));
	/* Everything freed: the handle is all free, and a trim gives every byte back. */
	for (int i = 0; i < NSMALL; i++)
		if (p[i])
			cr_assert_eq(vmm_free(t.core, p[i], &err), VMM_OK, "%s", err.msg);
	for (int i = 0; i < NSMALL / 2; i++)
		cr_assert_eq(vmm_free(t.core, q[i], &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(t_dev_used(&t, 0), 0, "%llu bytes held after the trim",
		     (unsigned long long)t_dev_used(&t, 0));
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 0);
	t_close(&t);
}

Test(heap_wake_join, a_freed_joined_handle_serves_another_tag)
{
	vmm_devptr p[NSMALL], big;
	struct tctx t;
	vmm_error err;

	/* The device holds the small allocations once, with little room to spare. */
	t_simdev_env("320M", NULL, NULL);
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL, 500);
	sleep_all(&t, true);
	wake_all(&t);
	for (int i = 0; i < NSMALL; i++)
		cr_assert_eq(vmm_free(t.core, p[i], &err), VMM_OK, "%s", err.msg);
	/* All of it free: it moves to another tag's request rather than stay stuck. */
	cr_assert_eq(vmm_malloc(t.core, 0, 256 * MiB, 0, "other", &big, &err), VMM_OK, "%s",
		     err.msg);
	t_fill(big, 256 * MiB, 501);
	cr_expect(t_check(big, 256 * MiB, 501));
	t_close(&t);
}

Test(heap_wake_join, no_joined_handle_exceeds_the_configured_largest)
{
	vmm_devptr p[NSMALL];
	vmm_config cfg;
	struct tctx t;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = 16 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	alloc_small(&t, p, NSMALL, 600);
	sleep_all(&t, false);
	wake_all(&t);
	/* ~290 MiB in handles of at most 16 MiB: at least 19. */
	cr_expect_geq(t_handles_held(&t, 0), 19, "%llu handles", (unsigned long long)t_handles_held(&t, 0));
	cr_expect_leq(t_handles_held(&t, 0), 24, "%llu handles", (unsigned long long)t_handles_held(&t, 0));
	cr_expect(all_intact(p, NSMALL, 600));
	t_close(&t);
}

Test(heap_wake_join, an_exported_allocation_keeps_its_handles)
{
	vmm_devptr p[NSMALL];
	vmm_share_info before, after;
	uint64_t sb, sa, rb;
	struct tctx t;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL, 700);
	cr_assert_eq(vmm_share_export(t.core, p[NSMALL / 2], &before, &err), VMM_OK, "%s",
		     err.msg);
	vmm_share_bytes(t.core, 0, &sb, &rb);
	sleep_all(&t, false);
	wake_all(&t);
	vmm_share_bytes(t.core, 0, &sa, &rb);
	cr_expect_eq(sa, sb, "the shared handles are the same bytes (%llu, %llu before)",
		     (unsigned long long)sa, (unsigned long long)sb);
	cr_assert_eq(vmm_share_export(t.core, p[NSMALL / 2], &after, &err), VMM_OK, "%s",
		     err.msg);
	cr_expect_eq(after.span, before.span);
	cr_expect_eq(after.span_size, before.span_size);
	/* The others joined around it: on each side a few handles. */
	cr_expect_leq(t_handles_held(&t, 0), 2 + sb / (2 * MiB), "%llu handles",
		      (unsigned long long)t_handles_held(&t, 0));
	cr_expect(all_intact(p, NSMALL, 700));
	t_close(&t);
}

Test(heap_wake_join, an_allocation_in_a_joined_handle_can_get_a_handle_of_its_own)
{
	vmm_devptr p[NSMALL], seg;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* Whole granules start one (as PyTorch's segments do), between small allocations. */
	alloc_small(&t, p, NSMALL / 2, 800);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &seg, &err), VMM_OK);
	t_fill(seg, 4 * MiB, 799);
	alloc_small(&t, p + NSMALL / 2, NSMALL / 2, 800 + NSMALL / 2);
	sleep_all(&t, false);
	wake_all(&t);
	cr_assert_leq(t_handles_held(&t, 0), 2, "it lies in a joined handle");
	cr_assert_eq(vmm_share_own(t.core, seg, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(si.own_handle);
	cr_expect_eq(si.span, seg);
	cr_expect_eq(si.span_size, 4 * MiB);
	cr_expect(t_check(seg, 4 * MiB, 799), "its bytes moved with it");
	cr_expect(all_intact(p, NSMALL, 800), "every other allocation keeps its bytes");
	sleep_all(&t, false);
	wake_all(&t);
	cr_expect(t_check(seg, 4 * MiB, 799) && all_intact(p, NSMALL, 800),
		  "and after another cycle");
	t_close(&t);
}

Test(heap_wake_join, a_failed_cut_leaves_everything_as_it_was)
{
	vmm_devptr p[NSMALL], seg;
	vmm_share_info si;
	uint64_t used;
	struct tctx t;
	vmm_error err;

	/* The cut's second copy (the allocation's own part, after the part before it) fails. */
	t_simdev_env("1G", NULL, "cuMemcpyDtoDAsync:2");
	t_open(&t, NULL);
	alloc_small(&t, p, NSMALL / 2, 1000);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &seg, &err), VMM_OK);
	t_fill(seg, 4 * MiB, 999);
	alloc_small(&t, p + NSMALL / 2, NSMALL / 2, 1000 + NSMALL / 2);
	sleep_all(&t, false);
	wake_all(&t);
	cr_assert_leq(t_handles_held(&t, 0), 2, "it lies in a joined handle");
	used = t_dev_used(&t, 0);
	cr_expect_neq(vmm_share_own(t.core, seg, &si, &err), VMM_OK, "the copy was made to fail");
	cr_expect_eq(t_dev_used(&t, 0), used, "the new handles went back");
	cr_expect(t_check(seg, 4 * MiB, 999) && all_intact(p, NSMALL, 1000),
		  "the old handle is back with its bytes");
	cr_expect_eq(vmm_share_list(t.core, &si, 1), 0, "nothing was exported");
	cr_assert_eq(vmm_share_own(t.core, seg, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(seg, 4 * MiB, 999) && all_intact(p, NSMALL, 1000));
	t_close(&t);
}
