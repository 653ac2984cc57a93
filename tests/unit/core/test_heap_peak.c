/* How close the heap's mapped memory stays to its live memory, and its physical peak to what the
 * driver's cudaMalloc would hold: a miss reclaims the quarantine once 256 MiB wait there, and
 * before any new memory is made; small allocations of every size share granules; wholly free
 * handles move to where a request needs them (before any new memory is created, a larger one
 * rather than new memory), and memory created for mid-size requests comes in pieces that can
 * move one by one. And, under all of it, the reuse rule: no freed byte is handed out again
 * before a synchronization that began after its free. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"

Test(heap_peak, a_miss_reclaims_the_quarantine_once_256_mib_wait)
{
	struct tctx t;
	vmm_devptr p[8], q;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_malloc(t.core, 0, 32 * MiB, 0, NULL, &p[i], NULL), VMM_OK);
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_free(t.core, p[i], NULL), VMM_OK);
	/* 256 MiB wait, 262 are asked for: one sync, and only the missing 6 MiB are new. */
	cr_assert_eq(vmm_malloc(t.core, 0, 262 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 1);
	cr_assert_leq(t_dev_used(&t, 0), 264 * MiB, "used %llu",
		      (unsigned long long)t_dev_used(&t, 0));
	t_fill(q, 262 * MiB, 7);
	cr_assert(t_check(q, 262 * MiB, 7));
	t_close(&t);
}

Test(heap_peak, less_than_64_mib_in_quarantine_is_reclaimed_before_memory_is_made)
{
	struct tctx t;
	vmm_devptr p, q;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB, 0, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, p, NULL), VMM_OK);
	t_dev_peak_reset();
	/* No free memory is mapped: rather than make 40 MiB more while 40 wait, one sync. */
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 1);
	cr_assert_eq(t_dev_peak(), 40 * MiB, "peak %llu MiB",
		     (unsigned long long)(t_dev_peak() / MiB));
	t_fill(q, 40 * MiB, 4);
	cr_assert(t_check(q, 40 * MiB, 4));
	t_close(&t);
}

Test(heap_peak, a_larger_idle_handle_is_given_back_rather_than_memory_added)
{
	struct tctx t;
	vmm_devptr big, small, q;

	t_simdev_env("4G", NULL, NULL);
	t_open(&t, NULL);
	/* 1 GiB in one handle on tag "x", freed and reclaimed (the next miss syncs). */
	cr_assert_eq(vmm_malloc(t.core, 0, GiB, 0, "x", &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 1);
	/* Tag "y" has nothing: the idle handle is given back (it cannot be cut, and moving it
	 * whole would leave 924 MiB of it stuck behind the 100 MiB), and y's memory is made of it. */
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, "y", &q, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_released, 1);
	cr_assert_eq(t_dev_used(&t, 0), 100 * MiB);
	t_fill(q, 100 * MiB, 3);
	cr_assert_eq(vmm_malloc(t.core, 0, 500 * MiB, 0, "y", &small, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 600 * MiB);
	cr_assert_eq(t_stats(&t, 0, NULL).peak_mapped_bytes, GiB, "never more than the 1 GiB");
	cr_assert(t_check(q, 100 * MiB, 3));
	t_close(&t);
}

Test(heap_peak, pieces_of_a_freed_request_move_past_a_small_allocation)
{
	struct tctx t;
	vmm_devptr a, s, c;
	vmm_stats st;

	t_simdev_env("4G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 512 * MiB, 0, "x", &a, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, a, NULL), VMM_OK);
	/* A small allocation lands in the freed range (after the sync its miss makes) and pins
	 * the piece under it; the other pieces stay wholly free. */
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, "x", &s, NULL), VMM_OK);
	cr_assert(s >= a && s < a + 512 * MiB, "reused the freed range");
	/* Another tag needs 448 MiB: the seven free pieces move there; nothing new is created. */
	cr_assert_eq(vmm_malloc(t.core, 0, 448 * MiB, 0, "y", &c, NULL), VMM_OK);
	st = t_stats(&t, 0, NULL);
	cr_assert_eq(t_dev_used(&t, 0), 512 * MiB, "used %llu MiB",
		     (unsigned long long)(t_dev_used(&t, 0) / MiB));
	cr_assert_eq(st.peak_mapped_bytes, 512 * MiB);
	t_fill(s, 8 * MiB, 1);
	t_fill(c, 448 * MiB, 2);
	cr_assert(t_check(s, 8 * MiB, 1));
	cr_assert(t_check(c, 448 * MiB, 2));
	t_close(&t);
}

static int by_address(const void *a, const void *b)
{
	vmm_devptr x = *(const vmm_devptr *)a, y = *(const vmm_devptr *)b;

	return x < y ? -1 : x > y;
}

Test(heap_peak, a_small_request_fills_the_lowest_hole_so_higher_granules_empty_out)
{
	struct tctx t;
	vmm_devptr x[3], y[3], c;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* Three granules, each 1.5 MiB + 0.5 MiB, in address order. */
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 3 * MiB / 2, 0, NULL, &x[i], NULL), VMM_OK);
		cr_assert_eq(vmm_malloc(t.core, 0, MiB / 2, 0, NULL, &y[i], NULL), VMM_OK);
		cr_assert_eq(y[i], x[i] + 3 * MiB / 2, "the pair shares a granule");
	}
	qsort(x, 3, sizeof(x[0]), by_address);
	for (int i = 0; i < 3; i++)
		y[i] = x[i] + 3 * MiB / 2;
	cr_assert_eq(t_dev_used(&t, 0), 6 * MiB);
	/* A 1.5 MiB hole low, a 0.5 MiB one high; both reusable after the trim's sync. */
	cr_assert_eq(vmm_free(t.core, x[0], NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, y[2], NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	/* A tight fit would take the high hole and pin the top granule; the low one leaves the
	 * top granule to empty out wholly when its other allocation goes. */
	cr_assert_eq(vmm_malloc(t.core, 0, MiB / 2, 0, NULL, &c, NULL), VMM_OK);
	cr_assert(c >= x[0] && c < x[0] + 2 * MiB, "0x%llx is not in the lowest granule",
		  (unsigned long long)c);
	t_fill(c, MiB / 2, 3);
	cr_assert_eq(vmm_free(t.core, x[2], NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 4 * MiB, "used %llu KiB",
		     (unsigned long long)(t_dev_used(&t, 0) / KiB));
	cr_assert(t_check(c, MiB / 2, 3));
	t_close(&t);
}

#define BIG (41 * MiB + 256 * KiB)

Test(heap_peak, large_allocations_pack_end_to_end_where_cudamalloc_rounds_each)
{
	struct tctx t;
	vmm_devptr x[4], s;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* Four of 41.25 MiB: cudaMalloc holds 4 x 42 MiB; packed end to end they take 165 MiB, in
	 * 83 granules. */
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &x[i], NULL), VMM_OK);
		t_fill(x[i], BIG, 10 + i);
	}
	cr_assert_eq(t_dev_used(&t, 0), 166 * MiB, "used %llu MiB",
		     (unsigned long long)(t_dev_used(&t, 0) / MiB));
	/* Each growth is one handle for the granules the allocation fills and a piece for the one
	 * it ends in (that one is shared): no large handle is made and then cut. */
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 8, "%llu handles",
		     (unsigned long long)t_stats(&t, 0, NULL).handles_created);
	for (int i = 1; i < 4; i++)
		cr_assert(x[i] % (2 * MiB), "the allocation at 0x%llx starts inside a granule",
			  (unsigned long long)x[i]);
	/* A small allocation in the last one's tail... */
	cr_assert_eq(vmm_malloc(t.core, 0, 512 * KiB, 0, NULL, &s, NULL), VMM_OK);
	cr_assert(s >= x[3] + BIG && s < x[3] + BIG + MiB, "0x%llx is not in the tail",
		  (unsigned long long)s);
	t_fill(s, 512 * KiB, 20);
	cr_assert_eq(t_dev_used(&t, 0), 166 * MiB);
	for (int i = 0; i < 4; i++)
		cr_assert(t_check(x[i], BIG, 10 + i));
	/* ...shares no large handle with it: once the large ones are freed, all of their memory
	 * but the small one's granule can be given back. */
	for (int i = 0; i < 4; i++)
		cr_assert_eq(vmm_free(t.core, x[i], NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 2 * MiB, "used %llu MiB",
		     (unsigned long long)(t_dev_used(&t, 0) / MiB));
	cr_assert(t_check(s, 512 * KiB, 20));
	t_close(&t);
}

#undef BIG

Test(heap_peak, free_space_around_a_live_allocation_moves_to_a_larger_request)
{
	struct tctx t;
	vmm_devptr a, x1, y, x2, c;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* 128 MiB, freed and reused (after the sync the next miss makes) by 60 MiB, 8 MiB that
	 * stay and 56 MiB; the 60 and 56 MiB are freed: 116 MiB free, none of it in one piece. */
	cr_assert_eq(vmm_malloc(t.core, 0, 128 * MiB, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &x1, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &y, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 56 * MiB, 0, NULL, &x2, NULL), VMM_OK);
	cr_assert(y > a && y < a + 128 * MiB, "the 8 MiB sit inside the freed range");
	t_fill(y, 8 * MiB, 5);
	cr_assert_eq(vmm_free(t.core, x1, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, x2, NULL), VMM_OK);
	/* 100 MiB: the free memory on both sides of the live 8 MiB moves to it (whatever handle
	 * it came in): nothing new is needed. */
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, NULL, &c, NULL), VMM_OK);
	t_fill(c, 100 * MiB, 6);
	cr_assert_eq(t_stats(&t, 0, NULL).peak_mapped_bytes, 128 * MiB, "peak %llu MiB",
		     (unsigned long long)(t_stats(&t, 0, NULL).peak_mapped_bytes / MiB));
	cr_assert_eq(t_dev_used(&t, 0), t_stats(&t, 0, NULL).mapped_bytes);
	cr_assert(t_check(y, 8 * MiB, 5));
	cr_assert(t_check(c, 100 * MiB, 6));
	t_close(&t);
}

Test(heap_peak, a_large_handle_is_re_created_as_pieces_before_a_smaller_request_shares_it)
{
	struct tctx t;
	vmm_devptr big, q, r;
	vmm_stats s;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, GiB, 0, "x", &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	/* 100 MiB on the same tag reuse the freed range (after a sync): the 1 GiB handle would be
	 * shared by it and free memory, so it is re-created as pieces first. */
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, "x", &q, NULL), VMM_OK);
	cr_assert(q >= big && q < big + GiB, "reused the freed range");
	s = t_stats(&t, 0, NULL);
	/* The 1 GiB handle as 64 MiB handles, then the one the 100 MiB end inside as pieces. */
	cr_assert_eq(s.handles_released, 2);
	cr_assert_eq(t_dev_used(&t, 0), GiB);
	t_fill(q, 100 * MiB, 1);
	/* The free pieces serve another tag: no new memory. */
	cr_assert_eq(vmm_malloc(t.core, 0, 900 * MiB, 0, "y", &r, NULL), VMM_OK);
	t_fill(r, 900 * MiB, 2);
	cr_assert_eq(t_dev_used(&t, 0), GiB);
	cr_assert_eq(t_stats(&t, 0, NULL).peak_mapped_bytes, GiB);
	cr_assert(t_check(q, 100 * MiB, 1));
	cr_assert(t_check(r, 900 * MiB, 2));
	t_close(&t);
}

Test(heap_peak, a_same_size_block_is_reused_after_a_sync_rather_than_a_large_range_cut)
{
	struct tctx t;
	vmm_devptr big, prev = 0, p, seen[128];
	uint64_t syncs0;
	int reused = 0;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	/* A large free range: 512 MiB allocated and freed, reclaimed by the next miss. */
	cr_assert_eq(vmm_malloc(t.core, 0, 512 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &prev, NULL), VMM_OK);
	syncs0 = t_stats(&t, 0, NULL).syncs;
	/* A layer loop: each 4 MiB tensor is freed once the next one exists. */
	for (int i = 0; i < 128; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &p, NULL), VMM_OK);
		for (int k = 0; k < i; k++)
			reused += seen[k] == p;
		seen[i] = prev;
		cr_assert_eq(vmm_free(t.core, prev, NULL), VMM_OK);
		prev = p;
	}
	/* After 256 MiB cut from the range, a freed 4 MiB block is taken back (one sync), and so
	 * on: the range is not cut into 4 MiB pieces all along, for a sync per 16 tensors at most. */
	cr_assert_gt(reused, 0);
	cr_assert_gt(t_stats(&t, 0, NULL).syncs, syncs0);
	cr_assert_leq(t_stats(&t, 0, NULL).syncs - syncs0, 128 / 16, "%llu syncs",
		      (unsigned long long)(t_stats(&t, 0, NULL).syncs - syncs0));
	cr_assert_eq(t_stats(&t, 0, NULL).mapped_bytes, 512 * MiB, "nothing new was mapped");
	t_close(&t);
}

/* What the driver's cudaMalloc holds for the same live allocations: above 1 MiB each in 2 MiB
 * pages of its own, the smaller ones packed (512-byte slots) into shared 2 MiB pages. */
struct native {
	uint64_t pages, small, peak;
};

static uint64_t native_now(const struct native *n)
{
	return n->pages + (n->small + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
}

static void native_alloc(struct native *n, size_t size)
{
	if (size > MiB)
		n->pages += (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
	else
		n->small += (size + 511) / 512 * 512;
	if (native_now(n) > n->peak)
		n->peak = native_now(n);
}

static void native_free(struct native *n, size_t size)
{
	if (size > MiB)
		n->pages -= (size + 2 * MiB - 1) / (2 * MiB) * (2 * MiB);
	else
		n->small -= (size + 511) / 512 * 512;
}

static vmm_devptr alloc_both(struct tctx *t, struct native *n, size_t size, uint64_t seed)
{
	vmm_devptr p;

	cr_assert_eq(vmm_malloc(t->core, 0, size, 0, NULL, &p, NULL), VMM_OK, "%zu bytes", size);
	native_alloc(n, size);
	t_fill(p, size, seed);
	return p;
}

static void free_both(struct tctx *t, struct native *n, vmm_devptr p, size_t size)
{
	cr_assert_eq(vmm_free(t->core, p, NULL), VMM_OK);
	native_free(n, size);
}

Test(heap_peak, small_allocations_of_many_sizes_take_no_more_than_the_drivers_pages)
{
	struct native n = { 0 };
	vmm_devptr p[9][4];
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	t_dev_peak_reset();
	/* 256 B to 64 KiB, four of each size: about 0.5 MiB that the driver packs in one page. */
	for (int k = 0; k < 9; k++)
		for (int i = 0; i < 4; i++)
			p[k][i] = alloc_both(&t, &n, (size_t)256 << k, (uint64_t)(k * 4 + i));
	cr_assert_leq(t_dev_peak(), n.peak, "physical peak %llu KiB, the driver's %llu KiB",
		      (unsigned long long)(t_dev_peak() / KiB), (unsigned long long)(n.peak / KiB));
	for (int k = 0; k < 9; k++)
		for (int i = 0; i < 4; i++)
			cr_assert(t_check(p[k][i], (size_t)256 << k, (uint64_t)(k * 4 + i)));
	t_close(&t);
}

/* Training's order: small parameters first, then per step activations (odd sizes above 1 MiB,
 * small statistics saved beside them), the optimizer's small states made at the first step
 * while the activations live, the activations freed, small gradients, then one large
 * temporary. The small tensors made among the activations must not keep the granules they land
 * in from moving to the large one. */
Test(heap_peak, a_training_steps_small_tensors_share_pages_as_the_drivers_do)
{
	enum { NP = 12, NA = 20 };
	static const size_t small[6] = { 4 * KiB, 12 * KiB, 16 * KiB, 256, 40 * KiB, 8 * KiB };
	vmm_devptr par[NP], st[2 * NP], act[NA], sv[NA], gr[NP], big;
	struct native n = { 0 };
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	t_dev_peak_reset();
	for (int i = 0; i < NP; i++)
		par[i] = alloc_both(&t, &n, small[i % 6], (uint64_t)i);
	for (int step = 0; step < 4; step++) {
		for (int l = 0; l < NA; l++) {
			act[l] = alloc_both(&t, &n, 3 * MiB + (size_t)(l % 5) * 192 * KiB, 100 + l);
			sv[l] = alloc_both(&t, &n, small[l % 6], 200 + l);
		}
		for (int i = 0; step == 0 && i < 2 * NP; i++)
			st[i] = alloc_both(&t, &n, small[(i / 2) % 6], 300 + i);
		for (int l = NA - 1; l >= 0; l--) {
			free_both(&t, &n, sv[l], small[l % 6]);
			free_both(&t, &n, act[l], 3 * MiB + (size_t)(l % 5) * 192 * KiB);
		}
		for (int i = 0; i < NP; i++)
			gr[i] = alloc_both(&t, &n, small[i % 6], 400 + i);
		big = alloc_both(&t, &n, 56 * MiB, 500);
		free_both(&t, &n, big, 56 * MiB);
		for (int i = 0; i < NP; i++)
			free_both(&t, &n, gr[i], small[i % 6]);
	}
	cr_assert_leq(t_dev_peak(), n.peak, "physical peak %llu KiB, the driver's %llu KiB",
		      (unsigned long long)(t_dev_peak() / KiB), (unsigned long long)(n.peak / KiB));
	for (int i = 0; i < NP; i++)
		cr_assert(t_check(par[i], small[i % 6], (uint64_t)i));
	for (int i = 0; i < 2 * NP; i++)
		cr_assert(t_check(st[i], small[(i / 2) % 6], 300 + (uint64_t)i));
	t_close(&t);
}

/* Random churn: every allocation is checked against every range freed since the last sync. */
struct freed {
	vmm_devptr p;
	size_t n;
	uint64_t syncs;
};

static uint64_t next(uint64_t *r)
{
	*r = *r * 6364136223846793005ull + 1442695040888963407ull;
	return *r >> 33;
}

static size_t random_size(uint64_t *r)
{
	uint64_t k = next(r) % 100;

	if (k < 50)
		return 1 + next(r) % (64 * KiB);
	if (k < 90)
		return 64 * KiB + next(r) % (8 * MiB);
	return 8 * MiB + next(r) % (120 * MiB);
}

Test(heap_peak, nothing_freed_is_reused_before_a_sync_that_follows_the_free, .timeout = 120)
{
	static struct { vmm_devptr p; size_t n; } live[256];
	static struct freed fr[20000];
	uint64_t rng = 0x5EED, syncs = 0, reused_after_sync = 0;
	size_t nlive = 0, nfr = 0, live_bytes = 0;
	struct tctx t;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	for (int op = 0; op < 12000; op++) {
		bool do_free = nlive && (nlive == 256 || live_bytes > GiB || next(&rng) % 2);

		if (do_free) {
			size_t i = next(&rng) % nlive;

			cr_assert_eq(vmm_free(t.core, live[i].p, NULL), VMM_OK);
			cr_assert_lt(nfr, 20000);
			fr[nfr++] = (struct freed){ live[i].p, live[i].n, syncs };
			live_bytes -= live[i].n;
			live[i] = live[--nlive];
			continue;
		}
		size_t n = random_size(&rng);
		vmm_devptr p;

		cr_assert_eq(vmm_malloc(t.core, 0, n, 0, NULL, &p, NULL), VMM_OK, "op %d", op);
		syncs = t_stats(&t, 0, NULL).syncs;
		for (size_t k = 0; k < nfr; k++) {
			bool overlap = p < fr[k].p + fr[k].n && fr[k].p < p + n;

			if (!overlap)
				continue;
			cr_assert_gt(syncs, fr[k].syncs,
				     "op %d: [%#llx, +%zu) handed out again without a sync since "
				     "its free", op, (unsigned long long)fr[k].p, fr[k].n);
			reused_after_sync++;
		}
		/* Ranges freed before the latest sync are reusable: stop tracking them. */
		size_t kept = 0;

		for (size_t k = 0; k < nfr; k++)
			if (fr[k].syncs == syncs)
				fr[kept++] = fr[k];
		nfr = kept;
		live[nlive].p = p;
		live[nlive++].n = n;
		live_bytes += n;
	}
	cr_assert_gt(syncs, 0, "the churn made the heap sync");
	cr_assert_gt(reused_after_sync, 0, "and reuse memory after it");
	t_close(&t);
}
