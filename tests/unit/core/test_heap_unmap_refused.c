/* A failure path that unmaps a handle and then releases it must not release one the driver would
 * not unmap (cuMemUnmap failing twice in a row, SIMDEV_FAIL): released under its mapping, its
 * address would point at freed memory, and nothing would ever unmap it again, so the next map
 * there (a wake at the same address) would fail for good. The heap parks it still mapped, shows
 * it as release_pending, and unmaps and releases it at the next give-back, wake or teardown.
 *
 * One allocation of max_handle_bytes is one handle of its own, so the driver calls are counted
 * from a known start: its growth is cuMemCreate/cuMemMap/cuMemSetAccess number 1, and a sleep of
 * it is cuMemUnmap 1 and cuMemRelease 1. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"
#include "heap_offload.h"
#include "vmm_share.h"

#define SIZE (20 * MiB)

static const vmm_sleep_opts all = { .device = -1 };

/* One allocation filled with seed 1; fail: the SIMDEV_FAIL list. */
static vmm_devptr setup(struct tctx *t, const char *fail)
{
	vmm_config cfg;
	vmm_devptr p;
	vmm_error err;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = SIZE;
	t_simdev_env("256M", NULL, fail);
	t_open(t, &cfg);
	cr_assert_eq(vmm_malloc(t->core, 0, SIZE, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	t_fill(p, SIZE, 1);
	cr_assert_eq(t_stats(t, 0, NULL).handles_created, 1, "one handle, as counted above");
	return p;
}

/* The refused handle is kept: pending, and still held by the driver. */
static void expect_kept(struct tctx *t, const char *after)
{
	vmm_stats s = t_stats(t, 0, NULL);

	cr_expect_eq(s.release_pending_bytes, SIZE, "after %s the refused handle is pending", after);
	cr_expect_eq(t_dev_used(t, 0), s.mapped_bytes + SIZE,
		     "after %s the driver still holds it (not released under its mapping)", after);
}

static void expect_given_back(struct tctx *t, const char *by)
{
	vmm_stats s = t_stats(t, 0, NULL);

	cr_expect_eq(s.release_pending_bytes, 0, "%s unmaps and releases the kept handle", by);
	cr_expect_eq(t_dev_used(t, 0), s.mapped_bytes, "after %s the driver holds what is mapped",
		     by);
}

/* The wake's access grant (cuMemSetAccess 2) fails; its unwind's unmap of the new handle is
 * refused twice (cuMemUnmap 2 and 3). */
#define WAKE_UNWIND_REFUSED "cuMemSetAccess:2,cuMemUnmap:2,cuMemUnmap:3"

Test(heap_unmap_refused, a_failed_wake_keeps_a_handle_that_will_not_unmap)
{
	struct tctx t;
	vmm_devptr p = setup(&t, WAKE_UNWIND_REFUSED);
	vmm_error err;

	cr_assert_eq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert_neq(vmm_wake(t.core, &all, NULL, &err), VMM_OK, "the injected grant failure");
	cr_expect(vmm_is_asleep(t.core, 0, NULL), "the failed wake stays asleep");
	expect_kept(&t, "the failed wake");
	cr_assert_eq(vmm_wake(t.core, &all, NULL, &err), VMM_OK,
		     "the next wake maps the same address again: %s", err.msg);
	expect_given_back(&t, "the next wake");
	cr_expect(t_check(p, SIZE, 1), "the contents came back");
	t_fill(p, SIZE, 2);
	cr_expect(t_check(p, SIZE, 2), "and the memory is usable");
	t_close(&t);
}

/* The sleep's release (cuMemRelease 1) fails; mapping the handle back works (cuMemMap 2) but its
 * access grant does not (cuMemSetAccess 2), and the unmap after it is refused twice (cuMemUnmap 2
 * and 3), and once more when the sleep's undo tries again (4). */
#define SLEEP_UNDO_REFUSED \
	"cuMemRelease:1,cuMemSetAccess:2,cuMemUnmap:2,cuMemUnmap:3,cuMemUnmap:4"

Test(heap_unmap_refused, a_failed_sleep_keeps_a_handle_that_will_not_unmap)
{
	struct tctx t;
	vmm_devptr p = setup(&t, SLEEP_UNDO_REFUSED);
	vmm_error err;

	cr_assert_neq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "the injected release failure");
	/* The handle is still mapped at its address: the undo cannot map a new one there. It stays
	 * asleep with its host copy (the partial state) until a wake. */
	cr_expect(vmm_is_asleep(t.core, 0, NULL), "what the undo could not bring back stays asleep");
	expect_kept(&t, "the failed sleep");
	cr_assert_eq(vmm_wake(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "the wake");
	cr_expect(t_check(p, SIZE, 1), "the contents came back from the host copy");
	t_close(&t);
}

/* The same without the last refusal: the sleep's undo unmaps the kept handle first, then brings
 * everything back. */
Test(heap_unmap_refused, a_failed_sleeps_undo_unmaps_the_kept_handle_first)
{
	struct tctx t;
	vmm_devptr p = setup(&t, "cuMemRelease:1,cuMemSetAccess:2,cuMemUnmap:2,cuMemUnmap:3");
	vmm_error err;

	cr_assert_neq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "the injected release failure");
	cr_expect_not(vmm_is_asleep(t.core, 0, NULL), "the undo brought everything back");
	expect_given_back(&t, "the sleep's undo");
	cr_expect(t_check(p, SIZE, 1), "the contents are intact");
	t_close(&t);
}

/* Growth: the new handle's access grant (cuMemSetAccess 2) fails, and its unmap is refused
 * twice (cuMemUnmap 1 and 2). */
Test(heap_unmap_refused, a_failed_growth_keeps_a_handle_that_will_not_unmap)
{
	struct tctx t;
	vmm_devptr p = setup(&t, "cuMemSetAccess:2,cuMemUnmap:1,cuMemUnmap:2"), q;
	vmm_error err;

	cr_assert_neq(vmm_malloc(t.core, 0, SIZE, 0, NULL, &q, &err), VMM_OK, "the grant failure");
	expect_kept(&t, "the failed growth");
	/* Its address is not handed out while it is mapped: a new growth maps elsewhere. */
	cr_assert_eq(vmm_malloc(t.core, 0, SIZE, 0, NULL, &q, &err), VMM_OK, "%s", err.msg);
	t_fill(q, SIZE, 3);
	cr_expect(t_check(q, SIZE, 3));
	cr_expect(t_check(p, SIZE, 1), "the first allocation is untouched");
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "a trim");
	cr_expect(t_check(q, SIZE, 3));
	t_close(&t);
}

/* An exported allocation, freed: once reclaimed (a trim) its handle is unmapped and released;
 * that unmap is refused twice (cuMemUnmap 1 and 2). */
Test(heap_unmap_refused, a_freed_export_keeps_a_handle_that_will_not_unmap)
{
	struct tctx t;
	vmm_devptr p = setup(&t, "cuMemUnmap:1,cuMemUnmap:2"), q;
	vmm_share_info si;
	vmm_error err;
	uint64_t shared, retired;

	cr_assert_eq(vmm_share_export(t.core, p, &si, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	vmm_share_bytes(t.core, 0, &shared, &retired);
	cr_expect_eq(shared, 0, "the export's handle left the heap's records");
	expect_kept(&t, "the release of the freed export");
	/* Its address is not handed out while it is mapped. */
	cr_assert_eq(vmm_malloc(t.core, 0, SIZE, 0, NULL, &q, &err), VMM_OK, "%s", err.msg);
	cr_expect(q + SIZE <= p || q >= p + SIZE, "0x%llx was handed out while still mapped",
		  (unsigned long long)q);
	t_fill(q, SIZE, 4);
	cr_expect(t_check(q, SIZE, 4));
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "the next trim");
	t_close(&t);
}

/* An allocation in several handles gets one of its own (vmm_share_own): the new handle's
 * temporary mapping, used for the copy, will not unmap (cuMemUnmap 1 and 2): the move fails,
 * leaves the allocation as it was, and keeps the new handle mapped there until a trim. */
Test(heap_unmap_refused, a_failed_move_keeps_a_handle_that_will_not_unmap)
{
	const size_t size = 3 * 2 * MiB + 1000, span = 4 * 2 * MiB;
	vmm_share_info si;
	struct tctx t;
	vmm_devptr a;
	vmm_error err;
	bool move;

	t_simdev_env("256M", NULL, "cuMemUnmap:1,cuMemUnmap:2");
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, "own", &a, &err), VMM_OK, "%s", err.msg);
	t_fill(a, size, 5);
	cr_assert_eq(vmm_share_own_plan(t.core, a, &move, &err), VMM_OK, "%s", err.msg);
	cr_assert(move, "it lies in several handles");
	cr_assert_neq(vmm_share_own(t.core, a, &si, &err), VMM_OK, "the refused unmap fails it");
	cr_expect(t_check(a, size, 5), "the allocation is as it was");
	cr_assert_eq(vmm_share_own_plan(t.core, a, &move, &err), VMM_OK, "%s", err.msg);
	cr_expect(move, "it still lies in its old handles");
	cr_expect_eq(t_stats(&t, 0, NULL).release_pending_bytes, span, "the new handle is pending");
	cr_expect_eq(t_dev_used(&t, 0), t_stats(&t, 0, NULL).mapped_bytes + span,
		     "the driver still holds it (not released under its mapping)");
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "a trim");
	cr_assert_eq(vmm_share_own(t.core, a, &si, &err), VMM_OK, "then the move works: %s",
		     err.msg);
	cr_expect(t_check(a, size, 5), "and keeps the bytes");
	t_close(&t);
}

/* The same allocation (4 handles of a granule: cuMemMap 1-4, one grant): the move's copy works
 * (its temporary mapping is cuMemSetAccess 2, cuMemUnmap 1), the old handles unmap (2-5), the new
 * one maps in their place but its grant fails (cuMemSetAccess 3) and its unmap is refused twice
 * (6 and 7). The old handles cannot come back there: the new one, which holds their bytes, stays
 * in their place, and its access is granted on a second try. */
Test(heap_unmap_refused, a_move_that_cannot_undo_keeps_the_new_handle_in_place)
{
	const size_t size = 3 * 2 * MiB + 1000;
	vmm_share_info si;
	struct tctx t;
	vmm_devptr a;
	vmm_error err;
	vmm_stats s;
	bool move;

	t_simdev_env("256M", NULL, "cuMemSetAccess:3,cuMemUnmap:6,cuMemUnmap:7");
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, "own", &a, &err), VMM_OK, "%s", err.msg);
	t_fill(a, size, 6);
	cr_assert_eq(vmm_share_own(t.core, a, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(si.own_handle);
	cr_assert_eq(vmm_share_own_plan(t.core, a, &move, &err), VMM_OK, "%s", err.msg);
	cr_expect_not(move, "the allocation has its handle of its own");
	cr_expect(t_check(a, size, 6), "with its bytes, accessible");
	s = t_stats(&t, 0, NULL);
	cr_expect_eq(s.release_pending_bytes, 0);
	cr_expect_eq(t_dev_used(&t, 0), s.mapped_bytes, "the old handles went, nothing else");
	t_close(&t);
}

/* The child: a failed wake keeps a handle, then the core is torn down. simdev writes its live
 * bytes to SIMDEV_STATS at exit. Exit codes say what went wrong. */
static int teardown_child(void)
{
	vmm_config cfg;
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = SIZE;
	t_simdev_env("256M", NULL, WAKE_UNWIND_REFUSED);
	if (t_try_open(&t, &cfg, &err) || vmm_malloc(t.core, 0, SIZE, 0, NULL, &p, &err) ||
	    vmm_sleep(t.core, &all, NULL, &err))
		return 2;
	if (vmm_wake(t.core, &all, NULL, &err) == VMM_OK)
		return 3; /* the injected failure was not met */
	if (t_stats(&t, 0, NULL).release_pending_bytes != SIZE)
		return 4; /* the refused handle is not kept */
	t_close(&t);
	return 0;
}

Test(heap_unmap_refused, teardown_unmaps_and_releases_a_kept_handle)
{
	long long live;
	int rc = t_run_child(teardown_child, NULL, &live);

	cr_assert(rc < 128, "the child died (signal %d)", rc - 128);
	cr_assert_eq(rc, 0, "the child's check %d failed", rc);
	cr_expect_eq(live, 0, "the driver holds nothing at exit");
}
