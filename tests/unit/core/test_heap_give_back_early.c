/* A large request that must wait for a device sync gives the free pieces its growth will give
 * back anyway before that sync, not after it (heap_grow.h, arena_give_back_early): on a GPU the
 * sync drains the program's queue, and driver calls made after it leave the GPU idle. What a
 * user checks: the order of the driver's releases and the sync, that nothing else changes (the
 * memory the device holds at any instant, the data, the accounting), the old order under
 * give_back_late, and no early give-back when the sync may make a block that fits. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include "helpers.h"

#define PAIRS 64

/* The backend's release and synchronize, counted: releases before the first sync of the request
 * being watched, and after it. */
static vmm_status (*real_release)(vmm_backend *, vmm_phys, vmm_error *);
static vmm_status (*real_sync)(vmm_backend *, int, vmm_error *);
static atomic_int released_before, released_after, syncs;

static vmm_status counted_release(vmm_backend *be, vmm_phys h, vmm_error *err)
{
	atomic_fetch_add(atomic_load(&syncs) ? &released_after : &released_before, 1);
	return real_release(be, h, err);
}

static vmm_status counted_sync(vmm_backend *be, int dev, vmm_error *err)
{
	atomic_fetch_add(&syncs, 1);
	return real_sync(be, dev, err);
}

static void watch(struct tctx *t)
{
	atomic_store(&released_before, 0);
	atomic_store(&released_after, 0);
	atomic_store(&syncs, 0);
	real_release = t->be->release;
	real_sync = t->be->synchronize;
	t->be->release = counted_release;
	t->be->synchronize = counted_sync;
}

static void unwatch(struct tctx *t)
{
	t->be->release = real_release;
	t->be->synchronize = real_sync;
}

struct scene {
	struct tctx t;
	vmm_devptr kept[PAIRS];
};

/* `first` bytes allocated first (0: none, else *z). Then 64 free pieces of 4 MiB, idle
 * (reclaimed by a sync), between kept 2 MiB allocations, and a 64 MiB allocation made of 32 of
 * those pieces (given back, one handle), which leaves 192 MiB free in 96 pieces. The device then
 * holds 128 + 192 + 64 = 384 MiB, and `first`. */
static vmm_devptr setup(struct scene *s, const vmm_config *cfg, size_t first, vmm_devptr *z)
{
	vmm_devptr big;

	t_simdev_env("1G", NULL, NULL);
	t_open(&s->t, cfg);
	if (first)
		cr_assert_eq(vmm_malloc(s->t.core, 0, first, 0, NULL, z, NULL), VMM_OK);
	t_scatter(&s->t, PAIRS, s->kept);
	/* 256 MiB in quarantine: this request syncs, then is made of 32 pieces given back. */
	cr_assert_eq(vmm_malloc(s->t.core, 0, 64 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&s->t, 0), 384 * MiB + first, "%llu MiB",
		     (unsigned long long)(t_dev_used(&s->t, 0) / MiB));
	return big;
}

static void check_kept(struct scene *s)
{
	for (int i = 0; i < PAIRS; i++)
		cr_assert(t_check(s->kept[i], 2 * MiB, (unsigned char)(i + 1)), "kept %d intact", i);
	cr_assert_eq(t_stats(&s->t, 0, NULL).mapped_bytes, t_dev_used(&s->t, 0),
		     "the heap's accounting is the driver's");
}

/* 300 MiB with 192 MiB free in pieces and the 64 MiB allocation just freed (in quarantine):
 * not enough without the sync. Returns the new allocation; *early: pieces given back early. */
static vmm_devptr request_after_free(struct scene *s, vmm_devptr big, uint64_t *early)
{
	vmm_devptr p;
	uint64_t before = t_stats(&s->t, 0, NULL).pieces_given_back_early;

	cr_assert_eq(vmm_free(s->t.core, big, NULL), VMM_OK);
	t_dev_peak_reset();
	watch(&s->t);
	cr_assert_eq(vmm_malloc(s->t.core, 0, 300 * MiB, 0, NULL, &p, NULL), VMM_OK);
	unwatch(&s->t);
	cr_assert_eq(atomic_load(&syncs), 1, "the request waited for one sync");
	*early = t_stats(&s->t, 0, NULL).pieces_given_back_early - before;
	/* Whichever the order, the device ends as it would, with the kept pieces and 300 MiB, and
	 * never held more inside the request: memory is given back before any is made. */
	cr_assert_eq(t_dev_used(&s->t, 0), 428 * MiB, "%llu MiB",
		     (unsigned long long)(t_dev_used(&s->t, 0) / MiB));
	cr_assert_leq(t_dev_peak(), 428 * MiB, "peak %llu MiB inside the request",
		      (unsigned long long)(t_dev_peak() / MiB));
	t_fill(p, 300 * MiB, 0x77);
	cr_assert(t_check(p, 300 * MiB, 0x77));
	check_kept(s);
	return p;
}

Test(heap_give_back_early, free_pieces_go_back_before_the_sync_a_large_request_waits_for)
{
	struct scene s;
	vmm_devptr big = setup(&s, NULL, 0, NULL), p;
	uint64_t early;

	p = request_after_free(&s, big, &early);
	cr_assert_eq(atomic_load(&released_before), 96, "the 96 idle pieces went before the sync "
		     "(%d before, %d after)", atomic_load(&released_before),
		     atomic_load(&released_after));
	cr_assert_eq(atomic_load(&released_after), 0, "and nothing after it: the 64 MiB handle "
		     "freed moved, the rest was made new");
	cr_assert_eq(early, 96, "the stats count them");
	cr_assert_eq(t_handles_over(p, 300 * MiB), 2, "the moved 64 MiB handle and one new one");
	cr_assert_eq(vmm_free(s.t.core, p, NULL), VMM_OK);
	check_kept(&s);
	t_close(&s.t);
}

Test(heap_give_back_early, give_back_late_keeps_the_old_order)
{
	vmm_config cfg = { .give_back_late = true };
	struct scene s;
	vmm_devptr big = setup(&s, &cfg, 0, NULL), p;
	uint64_t early;

	p = request_after_free(&s, big, &early);
	cr_assert_eq(atomic_load(&released_before), 0, "%d released before the sync",
		     atomic_load(&released_before));
	cr_assert_eq(atomic_load(&released_after), 96);
	cr_assert_eq(early, 0);
	cr_assert_eq(vmm_free(s.t.core, p, NULL), VMM_OK);
	t_close(&s.t);
}

/* When the sync may make a free block that fits (a quarantined block as large as the request),
 * nothing is given back early: the pieces would have to be made again. */
Test(heap_give_back_early, nothing_goes_early_when_the_sync_may_make_a_block_that_fits)
{
	struct scene s;
	vmm_devptr z, big = setup(&s, NULL, 250 * MiB, &z), p;

	cr_assert_eq(vmm_free(s.t.core, z, NULL), VMM_OK);
	watch(&s.t);
	/* 192 MiB free in pieces is not enough; the 250 MiB in quarantine is, after the sync. */
	cr_assert_eq(vmm_malloc(s.t.core, 0, 240 * MiB, 0, NULL, &p, NULL), VMM_OK);
	unwatch(&s.t);
	cr_assert_eq(atomic_load(&syncs), 1);
	/* After the sync the freed block's one handle is cut where the request ends (it would
	 * share it with the free rest): those releases come after. */
	cr_assert_eq(atomic_load(&released_before), 0, "%d released before the sync",
		     atomic_load(&released_before));
	cr_assert_eq(p, z, "the freed block was reused in place");
	cr_assert_eq(t_stats(&s.t, 0, NULL).pieces_given_back_early, 0);
	t_fill(p, 240 * MiB, 9);
	cr_assert(t_check(p, 240 * MiB, 9));
	check_kept(&s);
	cr_assert_eq(vmm_free(s.t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(s.t.core, p, NULL), VMM_OK);
	t_close(&s.t);
}
