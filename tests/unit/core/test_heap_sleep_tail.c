/* A large handle comes back from a sleep with its tail as a handle of its own, so that the next
 * sleep releases the large part while the tail copies out (what a user sees as a steady sleep of
 * one large allocation at the link's speed: on the H200 the release of a 1 GiB handle after the
 * last copy was ~5% of the sleep). Contents stay through the cycles. */
#include <criterion/criterion.h>
#include <string.h>

#include "backend/backend.h"
#include "helpers.h"

#define BIG (256 * MiB)  /* the smallest that gets a tail: an eighth, at least 32 MiB */
#define TAIL (32 * MiB)

static void sleep_and_wake(struct tctx *t)
{
	t_sleep(t, false);
	t_wake(t);
}

Test(heap_sleep_tail, a_large_allocation_wakes_with_a_tail_of_its_own)
{
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_handles_over(p, BIG), 1, "a new 256 MiB allocation is one handle");
	t_fill(p, BIG, 41);
	for (int cycle = 0; cycle < 3; cycle++) {
		sleep_and_wake(&t);
		cr_expect_eq(t_handles_over(p, BIG - TAIL), 1, "cycle %d: the large part is not one "
			     "handle", cycle);
		cr_expect_eq(t_handles_over(p + BIG - TAIL, TAIL), 1, "cycle %d: the tail is not one "
			     "handle", cycle);
		cr_expect_eq(t_handles_over(p, BIG), 2, "cycle %d: %zu handles over the allocation",
			     cycle, t_handles_over(p, BIG));
		cr_assert(t_check(p, BIG, 41), "cycle %d: contents changed", cycle);
	}
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_OK, "%s", err.msg);
	t_close(&t);
}

/* The order of the second sleep's driver calls: the release of the large part must come while
 * the tail's copy may still run, that is before the copy streams' last synchronization. */
static vmm_status (*real_create)(vmm_backend *, int, size_t, vmm_phys *, vmm_error *);
static vmm_status (*real_release)(vmm_backend *, vmm_phys, vmm_error *);
static vmm_status (*real_stream_sync)(vmm_backend *, vmm_stream, vmm_error *);
static vmm_phys large_part;
static int events, large_released_at, last_stream_sync_at;

static vmm_status create_noting(vmm_backend *be, int dev, size_t size, vmm_phys *h,
				vmm_error *err)
{
	vmm_status st = real_create(be, dev, size, h, err);

	if (!st && size == BIG - TAIL)
		large_part = *h;
	return st;
}

static vmm_status release_noting(vmm_backend *be, vmm_phys h, vmm_error *err)
{
	if (large_part && h == large_part)
		large_released_at = ++events;
	return real_release(be, h, err);
}

static vmm_status stream_sync_noting(vmm_backend *be, vmm_stream s, vmm_error *err)
{
	vmm_status st = real_stream_sync(be, s, err);

	last_stream_sync_at = ++events;
	return st;
}

Test(heap_sleep_tail, the_large_part_is_released_while_the_tail_copies)
{
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	t_fill(p, BIG, 43);
	real_create = t.be->create;
	real_release = t.be->release;
	real_stream_sync = t.be->stream_synchronize;
	t.be->create = create_noting;
	t.be->release = release_noting;
	t.be->stream_synchronize = stream_sync_noting;
	sleep_and_wake(&t); /* the wake makes the large part and the tail */
	cr_assert_neq(large_part, 0, "the wake made no handle of %llu MiB",
		      (unsigned long long)(BIG - TAIL) / MiB);
	events = large_released_at = last_stream_sync_at = 0;
	t_sleep(&t, false);
	cr_expect_gt(large_released_at, 0, "the large part was not released");
	cr_expect_lt(large_released_at, last_stream_sync_at, "the large part was released after the "
		     "last copy ended (event %d of %d)", large_released_at, last_stream_sync_at);
	t_wake(&t);
	cr_assert(t_check(p, BIG, 43), "contents changed");
	t.be->create = real_create;
	t.be->release = real_release;
	t.be->stream_synchronize = real_stream_sync;
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_OK, "%s", err.msg);
	t_close(&t);
}

/* A discarding sleep keeps no copy to gain from: the handle wakes whole. */
Test(heap_sleep_tail, a_discarding_sleep_keeps_the_handle_whole)
{
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	t_sleep(&t, true);
	t_wake(&t);
	cr_expect_eq(t_handles_over(p, BIG), 1, "%zu handles", t_handles_over(p, BIG));
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_OK, "%s", err.msg);
	t_close(&t);
}
