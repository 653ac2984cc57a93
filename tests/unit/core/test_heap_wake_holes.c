/* A small freed allocation between two live ones (a hole) sleeps with its neighbours, so that the
 * wake re-creates one handle where it would make two (what a user sees as a faster wake of a
 * fragmented heap), while contents and addresses are kept, a discarded sleep still releases
 * everything, the memory of the hole is usable after the wake, and a hole too large, or too large
 * for what sleeps around it, is still given back and stays out of the wake. Every driver call of
 * such a cycle may fail: the heap stays consistent with the driver, contents kept. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "heap_coalesce.h"
#include "heap_offload.h"
#include "helpers.h"

#define SIDE (32 * MiB)   /* each neighbour: 2 * SIDE / 32 = 2 MiB of hole fits the budget */

static const vmm_sleep_opts all = { .device = -1 };

static void sleep_wake(struct tctx *t, bool discard)
{
	vmm_sleep_opts o = all;
	vmm_transfer_result r;
	vmm_error err;

	o.discard = discard;
	cr_assert_eq(vmm_sleep(t->core, &o, &r, &err), VMM_OK, "sleep: %s", err.msg);
	cr_assert_eq(t_dev_used(t, 0), 0, "asleep, nothing is held on the device");
	cr_assert_eq(vmm_wake(t->core, &all, &r, &err), VMM_OK, "wake: %s", err.msg);
}

/* a, a hole of `hole` bytes (allocated, then freed), b: adjacent in address order. */
static void hole_between(struct tctx *t, size_t side, size_t hole, vmm_devptr *a, vmm_devptr *b)
{
	vmm_devptr h;

	cr_assert_eq(vmm_malloc(t->core, 0, side, 0, NULL, a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, hole, 0, NULL, &h, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, side, 0, NULL, b, NULL), VMM_OK);
	cr_assert(h == *a + side && *b == h + hole, "the three lie side by side");
	cr_assert_eq(vmm_free(t->core, h, NULL), VMM_OK);
	t_fill(*a, side, 1);
	t_fill(*b, side, 2);
}

Test(heap_wake_holes, a_small_hole_wakes_in_one_handle_with_its_neighbours)
{
	vmm_devptr a, b, c;
	uint64_t mapped_before;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	hole_between(&t, SIDE, 2 * MiB, &a, &b);
	mapped_before = t_stats(&t, 0, NULL).mapped_bytes;
	for (int cycle = 0; cycle < 2; cycle++) {
		sleep_wake(&t, false);
		cr_expect_eq(t_handles_held(&t, 0), 1, "cycle %d: %llu handles after the wake", cycle,
			     (unsigned long long)t_handles_held(&t, 0));
		cr_expect(t_check(a, SIDE, 1) && t_check(b, SIDE, 2),
			  "cycle %d: contents at the same addresses", cycle);
		cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 2 * SIDE + 2 * MiB,
			     "the hole came back with its neighbours");
		cr_expect_leq(t_dev_used(&t, 0), mapped_before, "no more than before the sleep");
	}
	/* The hole's memory is free in its arena: a request of its size is served there. */
	cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &c, NULL), VMM_OK);
	cr_expect_eq(c, a + SIDE, "the hole is reused in place");
	cr_expect_eq(t_handles_held(&t, 0), 1, "without a new handle");
	t_fill(c, 2 * MiB, 3);
	cr_expect(t_check(c, 2 * MiB, 3) && t_check(a, SIDE, 1) && t_check(b, SIDE, 2));
	t_close(&t);
}

Test(heap_wake_holes, a_discarded_sleep_releases_the_hole_and_the_wake_is_usable)
{
	vmm_devptr a, b;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	hole_between(&t, SIDE, 2 * MiB, &a, &b);
	for (int cycle = 0; cycle < 2; cycle++) {
		sleep_wake(&t, true);
		cr_expect_eq(t_handles_held(&t, 0), 1, "cycle %d: %llu handles", cycle,
			     (unsigned long long)t_handles_held(&t, 0));
		t_fill(a, SIDE, 10 + (uint64_t)cycle);
		t_fill(b, SIDE, 20 + (uint64_t)cycle);
		cr_expect(t_check(a, SIDE, 10 + (uint64_t)cycle) &&
			  t_check(b, SIDE, 20 + (uint64_t)cycle), "cycle %d: memory usable", cycle);
	}
	t_close(&t);
}

Test(heap_wake_holes, a_hole_above_the_limit_is_given_back_and_stays_out)
{
	vmm_devptr a, b;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	hole_between(&t, 8 * HOLE_MAX_BYTES, HOLE_MAX_BYTES + 2 * MiB, &a, &b);
	sleep_wake(&t, false);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 16 * HOLE_MAX_BYTES,
		     "only the live neighbours came back");
	cr_expect_eq(t_handles_held(&t, 0), 2);
	cr_expect(t_check(a, 8 * HOLE_MAX_BYTES, 1) && t_check(b, 8 * HOLE_MAX_BYTES, 2));
	t_close(&t);
}

Test(heap_wake_holes, a_hole_beyond_the_budget_of_its_neighbours_stays_out)
{
	vmm_devptr a, b;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* 2 x 16 MiB live: 1 MiB of hole allowed, the hole is 2 MiB. */
	hole_between(&t, SIDE / 2, 2 * MiB, &a, &b);
	sleep_wake(&t, true);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, SIDE);
	cr_expect_eq(t_handles_held(&t, 0), 2);
	t_close(&t);
}

/* The heap's mapped bytes are the driver's, and a and b hold their contents (when `contents`). */
static int consistent(struct tctx *t, vmm_devptr a, vmm_devptr b, bool contents)
{
	if (t_stats(t, 0, NULL).mapped_bytes != t_dev_used(t, 0)) {
		fprintf(stderr, "hole scenario: mapped %llu, driver %llu\n",
			(unsigned long long)t_stats(t, 0, NULL).mapped_bytes,
			(unsigned long long)t_dev_used(t, 0));
		return 1;
	}
	if (contents && !(t_check(a, SIDE, 1) && t_check(b, SIDE, 2))) {
		fprintf(stderr, "hole scenario: contents lost\n");
		return 1;
	}
	return 0;
}

/* One sleep and wake under an injected failure: a failed sleep leaves the heap awake, a failed
 * wake leaves it asleep and a later one brings it back. */
static int faulty_cycle(struct tctx *t, vmm_devptr a, vmm_devptr b, bool discard)
{
	vmm_sleep_opts o = all;

	o.discard = discard;
	if (vmm_sleep(t->core, &o, NULL, NULL)) {
		if (vmm_is_asleep(t->core, 0, NULL)) {
			fprintf(stderr, "hole scenario: a failed sleep left the heap asleep\n");
			return 1;
		}
		return consistent(t, a, b, !discard);
	}
	for (int k = 0; vmm_wake(t->core, &all, NULL, NULL); k++) {
		if (k == 2 || !vmm_is_asleep(t->core, 0, NULL)) {
			fprintf(stderr, "hole scenario: the wake does not recover\n");
			return 1;
		}
	}
	return consistent(t, a, b, !discard);
}

static int hole_scenario(void)
{
	vmm_devptr a = 0, h = 0, b = 0;
	int rc = 0;
	struct tctx t;

	if (t_try_open(&t, NULL, NULL))
		return 0;
	/* An injected failure here leaves no hole to test: nothing more to check. */
	if (!vmm_malloc(t.core, 0, SIDE, 0, NULL, &a, NULL) &&
	    !vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &h, NULL) &&
	    !vmm_malloc(t.core, 0, SIDE, 0, NULL, &b, NULL) && h == a + SIDE && b == h + 2 * MiB) {
		t_fill(a, SIDE, 1);
		t_fill(b, SIDE, 2);
		vmm_free(t.core, h, NULL);
		h = 0;
		rc = faulty_cycle(&t, a, b, false) || faulty_cycle(&t, a, b, true);
	}
	if (a)
		vmm_free(t.core, a, NULL);
	if (h)
		vmm_free(t.core, h, NULL);
	if (b)
		vmm_free(t.core, b, NULL);
	vmm_trim(t.core, -1, NULL);
	rc = rc || consistent(&t, a, b, false);
	t_close(&t);
	return rc;
}

Test(heap_wake_holes, every_call_of_a_cycle_with_a_hole_can_fail, .timeout = 180)
{
	static const char *names[] = { "cuMemUnmap", "cuMemRelease", "cuMemMap", "cuMemCreate",
				       "cuMemSetAccess" };
	const char *env[] = { "SIMDEV_MEMORY=256M", NULL, NULL };
	char fail[96];
	long long live;

	cr_assert_eq(t_run_child(hole_scenario, env, &live), 0, "the scenario passes without faults");
	cr_assert_eq(live, 0);
	env[1] = fail;
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		for (int k = 1; k <= 8; k++) {
			int rc;

			snprintf(fail, sizeof(fail), "SIMDEV_FAIL=%s:%d", names[n], k);
			rc = t_run_child(hole_scenario, env, &live);
			cr_expect_eq(rc, 0, "%s: the scenario failed (%d)", fail, rc);
			cr_expect_eq(live, 0, "%s: %lld device bytes leaked", fail, live);
		}
	}
}
