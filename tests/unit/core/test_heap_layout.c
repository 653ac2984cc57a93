/* The physical layout behind an allocation, as the driver sees it: how many physical handles
 * back its address range. Copy engines lose bandwidth on memory made of many handles (README,
 * the heap), so a large allocation made of new memory must be one handle (or as few as the
 * handle limit allows), also after a sleep and wake; and its large handle must cost no peak
 * memory once freed and reused by smaller requests. */
#include <criterion/criterion.h>

#include "helpers.h"
#include "heap_offload.h"

Test(heap_layout, a_large_allocation_of_new_memory_is_one_handle)
{
	struct tctx t;
	vmm_devptr big, mid;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 300 * MiB + 4096, 0, NULL, &big, NULL), VMM_OK);
	/* One handle for its whole granules; the last one, which it shares with whatever comes
	 * after it, is a piece of its own. */
	cr_assert_eq(t_handles_over(big, 300 * MiB), 1);
	cr_assert_eq(t_handles_over(big, 300 * MiB + 4096), 2);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 2);
	/* Below 32 MiB: 2 MiB pieces, which move on their own once freed. */
	cr_assert_eq(vmm_malloc(t.core, 0, 20 * MiB, 0, NULL, &mid, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(mid, 20 * MiB), 10);
	cr_assert_eq(t_dev_used(&t, 0), 302 * MiB + 20 * MiB, "exactly the granules asked for");
	t_close(&t);
}

Test(heap_layout, the_handle_limit_is_kept)
{
	struct tctx t;
	vmm_config cfg;
	vmm_devptr p;

	vmm_config_defaults(&cfg);
	cfg.max_handle_bytes = 64 * MiB;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	cr_assert_eq(vmm_malloc(t.core, 0, 200 * MiB, 0, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(p, 200 * MiB), 4, "64 + 64 + 64 + 8 MiB");
	t_close(&t);
}

Test(heap_layout, a_large_handle_freed_costs_no_peak_when_smaller_requests_reuse_it)
{
	struct tctx t;
	vmm_devptr big, a, b, c;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 256 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	/* Three requests that together fit in what was freed, one of them small (the first finds
	 * 256 MiB in quarantine and synchronizes to reuse it). */
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 6 * MiB, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 150 * MiB, 0, NULL, &c, NULL), VMM_OK);
	t_fill(a, 100 * MiB, 1);
	t_fill(b, 6 * MiB, 2);
	t_fill(c, 150 * MiB, 3);
	cr_assert_leq(t_dev_used(&t, 0), 256 * MiB, "the freed handle's memory served them all");
	cr_assert(t_check(a, 100 * MiB, 1) && t_check(b, 6 * MiB, 2) && t_check(c, 150 * MiB, 3));
	t_close(&t);
}

Test(heap_layout, a_freed_large_handle_is_cut_only_where_it_is_shared)
{
	struct tctx t;
	vmm_devptr big, small;
	vmm_stats s;

	t_simdev_env("3G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 2560 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(big, 2560 * MiB), 1);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB, 0, NULL, &small, NULL), VMM_OK);
	t_fill(small, 40 * MiB, 5);
	s = t_stats(&t, 0, NULL);
	/* 40 handles of 64 MiB, then the first of them in 2 MiB pieces: not 1280 pieces. */
	cr_assert_eq(s.handles_created, 1 + 40 + 32, "%llu", (unsigned long long)s.handles_created);
	cr_assert_eq(t_handles_over(small, 64 * MiB), 32, "the rest of the first 64 MiB is pieces");
	cr_assert_eq(t_handles_over(small + 64 * MiB, 2496 * MiB), 39, "the rest stays 64 MiB handles");
	cr_assert_eq(t_handles_over(small, 40 * MiB), 20);
	cr_assert_eq(t_dev_used(&t, 0), 2560 * MiB, "nothing was added");
	cr_assert(t_check(small, 40 * MiB, 5));
	t_close(&t);
}

/* A freed 64 MiB handle (the tightest fit for 40 MiB) and 90 MiB of freed 2 MiB pieces, kept
 * apart by a live piece; everything on one stream, so reusable without a sync. */
static void free_a_handle_and_pieces(struct tctx *t, vmm_stream s, vmm_devptr *handle,
				     vmm_devptr *pieces)
{
	vmm_devptr sep, more[2];

	cr_assert_eq(vmm_malloc_on_stream(t->core, 0, 64 * MiB, NULL, s, handle, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t->core, 0, 2 * MiB, NULL, s, &sep, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t->core, 0, 30 * MiB, NULL, s, pieces, NULL), VMM_OK);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(vmm_malloc_on_stream(t->core, 0, 30 * MiB, NULL, s, &more[i], NULL),
			     VMM_OK);
	cr_assert_eq(t_handles_over(*handle, 64 * MiB), 1);
	cr_assert_eq(t_handles_over(*pieces, 90 * MiB), 45);
	cr_assert_eq(vmm_free_on_stream(t->core, *handle, s, NULL), VMM_OK);
	cr_assert_eq(vmm_free_on_stream(t->core, *pieces, s, NULL), VMM_OK);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(vmm_free_on_stream(t->core, more[i], s, NULL), VMM_OK);
}

Test(heap_layout, a_request_takes_free_pieces_rather_than_cut_a_tighter_free_handle)
{
	struct tctx t;
	vmm_stream s = (vmm_stream)0x1111;
	vmm_devptr handle, pieces, p;
	vmm_stats st;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	free_a_handle_and_pieces(&t, s, &handle, &pieces);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 40 * MiB, NULL, s, &p, NULL), VMM_OK);
	t_fill(p, 40 * MiB, 7);
	st = t_stats(&t, 0, NULL);
	cr_assert(p >= pieces && p + 40 * MiB <= pieces + 90 * MiB, "placed on the pieces");
	cr_assert_eq(st.handles_cut, 0);
	cr_assert_eq(st.cuts_avoided, 1);
	cr_assert_eq(t_handles_over(handle, 64 * MiB), 1, "the free handle stays whole");
	cr_assert_eq(t_dev_used(&t, 0), 64 * MiB + 2 * MiB + 90 * MiB, "nothing was added");
	cr_assert(t_check(p, 40 * MiB, 7));
	t_close(&t);
}

Test(heap_layout, with_no_uncut_scan_the_tighter_free_handle_is_cut)
{
	struct tctx t;
	vmm_config cfg;
	vmm_stream s = (vmm_stream)0x1111;
	vmm_devptr handle, pieces, p;
	vmm_stats st;

	vmm_config_defaults(&cfg);
	cfg.uncut_scan = 0;
	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	free_a_handle_and_pieces(&t, s, &handle, &pieces);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 40 * MiB, NULL, s, &p, NULL), VMM_OK);
	st = t_stats(&t, 0, NULL);
	cr_assert_eq(p, handle, "the tightest fit");
	cr_assert_eq(st.handles_cut, 1);
	cr_assert_eq(st.cuts_avoided, 0);
	cr_assert_eq(t_handles_over(handle, 64 * MiB), 32, "cut into pieces");
	t_close(&t);
}

Test(heap_layout, an_edge_inside_a_granule_gets_a_piece_of_its_own)
{
	vmm_config cfg = { .edge_cut_min = 1 };
	struct tctx t;
	vmm_devptr big, a, b;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	cr_assert_eq(vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(big, 64 * MiB), 1);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB + 4096, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(a, big, "the freed range is reused");
	/* 40 MiB, the granule the allocation ends in, then 22 MiB. */
	cr_assert_eq(t_handles_over(a, 40 * MiB), 1);
	cr_assert_eq(t_handles_over(a, 40 * MiB + 4096), 2);
	cr_assert_eq(t_handles_over(a, 64 * MiB), 3);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 1 + 3);
	/* The next allocation starts in the shared granule and ends at a granule's edge: one cut
	 * of the 22 MiB, none of the granule. */
	cr_assert_eq(vmm_malloc(t.core, 0, 10 * MiB - 4096, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_eq(b, a + 40 * MiB + 4096);
	cr_assert_eq(t_handles_over(b, 10 * MiB - 4096), 2, "the granule, then 8 MiB");
	cr_assert_eq(t_handles_over(a, 64 * MiB), 4, "the 14 MiB left stay one handle");
	t_fill(a, 40 * MiB + 4096, 3);
	t_fill(b, 10 * MiB - 4096, 4);
	cr_assert(t_check(a, 40 * MiB + 4096, 3) && t_check(b, 10 * MiB - 4096, 4));
	cr_assert_eq(t_dev_used(&t, 0), 64 * MiB, "nothing was added");
	t_close(&t);
}

/* VMMSHIM_ALIGNED_CUTS: a freed 64 MiB handle that an allocation shares is re-created as
 * power-of-two handles aligned within it, a piece where the edge falls inside a granule; a later
 * allocation cuts only the one such handle it shares. */
Test(heap_layout, aligned_cuts_make_few_handles_and_recut_only_the_one_shared)
{
	vmm_config cfg = { .aligned_cuts = true };
	struct tctx t;
	vmm_devptr big, a, b;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	cr_assert_eq(vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB + 4096, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(a, big, "the freed range is reused");
	/* In granules: 16 + 4 for the allocation, its last granule a piece, then 1 + 2 + 8. */
	cr_assert_eq(t_handles_over(a, 32 * MiB), 1);
	cr_assert_eq(t_handles_over(a, 40 * MiB), 2);
	cr_assert_eq(t_handles_over(a, 40 * MiB + 4096), 3);
	cr_assert_eq(t_handles_over(a, 64 * MiB), 6, "6 handles, not 32 pieces");
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 1 + 6);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_cut, 1);
	/* The next one starts in the shared piece and ends at granule 25, inside the free 8-granule
	 * handle [24, 32): only that one is cut, into 1 + 1 + 2 + 4. */
	cr_assert_eq(vmm_malloc(t.core, 0, 10 * MiB - 4096, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_eq(b, a + 40 * MiB + 4096);
	cr_assert_eq(t_handles_over(b, 10 * MiB - 4096), 4, "the piece, 1, 2, then 1 granule");
	cr_assert_eq(t_handles_over(a, 64 * MiB), 9);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 1 + 6 + 4);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_cut, 2, "one cut per shared handle");
	cr_assert_eq(t_stats(&t, 0, NULL).handles_moved, 0, "everything was reused in place");
	t_fill(a, 40 * MiB + 4096, 3);
	t_fill(b, 10 * MiB - 4096, 4);
	cr_assert(t_check(a, 40 * MiB + 4096, 3) && t_check(b, 10 * MiB - 4096, 4));
	cr_assert_eq(t_dev_used(&t, 0), 64 * MiB, "nothing was added");
	t_close(&t);
}

/* VMMSHIM_ALIGNED_CUT_MAX=4M: a freed 64 MiB handle (*big, a live 2 MiB *wall right after it)
 * that an allocation *a of 40 MiB + 4 KiB shares is cut into handles of at most 4 MiB. */
static void capped_cut(struct tctx *t, vmm_devptr *big, vmm_devptr *wall, vmm_devptr *a)
{
	vmm_config cfg = { .aligned_cuts = true, .aligned_cut_max = 4 * MiB };

	t_simdev_env("1G", NULL, NULL);
	t_open(t, &cfg);
	cr_assert_eq(vmm_malloc(t->core, 0, 64 * MiB, 0, NULL, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, 2 * MiB, 0, NULL, wall, NULL), VMM_OK);
	cr_assert_eq(*wall, *big + 64 * MiB, "nothing can grow the freed range in place");
	cr_assert_eq(vmm_free(t->core, *big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, 40 * MiB + 4096, 0, NULL, a, NULL), VMM_OK);
	cr_assert_eq(*a, *big, "the freed range is reused");
	/* In granules: ten handles of 2 for the allocation, its last granule a piece, then 1 and
	 * five of 2. */
	cr_assert_eq(t_handles_over(*a, 40 * MiB), 10);
	cr_assert_eq(t_handles_over(*a, 40 * MiB + 4096), 11);
	cr_assert_eq(t_handles_over(*a, 64 * MiB), 17, "17 handles, not 32 pieces");
	cr_assert_eq(t_stats(t, 0, NULL).handles_cut, 1);
}

/* A large request gives the capped cut's free handles back to the driver, as it does 2 MiB
 * pieces, rather than move each. */
Test(heap_layout, capped_aligned_cuts_make_small_handles_a_large_request_gives_back)
{
	struct tctx t;
	vmm_devptr big, wall, a, large;
	vmm_stats before;

	capped_cut(&t, &big, &wall, &a);
	t_fill(a, 40 * MiB + 4096, 5);
	cr_assert(t_check(a, 40 * MiB + 4096, 5));
	cr_assert_eq(vmm_free(t.core, a, NULL), VMM_OK);
	/* 96 MiB fits nowhere: the 17 free handles go back and it is made as one handle. */
	before = t_stats(&t, 0, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 96 * MiB, 0, NULL, &large, NULL), VMM_OK);
	cr_assert_eq(t_handles_over(large, 96 * MiB), 1);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_moved, before.handles_moved, "none moved");
	cr_assert_eq(t_stats(&t, 0, NULL).handles_released - before.handles_released, 17);
	cr_assert_eq(t_dev_used(&t, 0), 98 * MiB, "%llu MiB held: the 64 MiB went back first",
		     (unsigned long long)(t_dev_used(&t, 0) / MiB));
	t_fill(large, 96 * MiB, 6);
	cr_assert(t_check(large, 96 * MiB, 6));
	t_close(&t);
}

/* An allocation that leaves less than a granule free in a capped cut's 4 MiB handle does not
 * cut it (that free part strands no more than a piece would); one that leaves a whole granule
 * free does. */
Test(heap_layout, a_capped_handle_is_cut_only_for_a_whole_free_granule)
{
	struct tctx t;
	vmm_devptr big, wall, a, b, c;

	capped_cut(&t, &big, &wall, &a);
	/* From a's end to 47 MiB: the 4 MiB handle [44, 48) MiB keeps 1 MiB free, uncut. */
	cr_assert_eq(vmm_malloc(t.core, 0, 7 * MiB - 4096, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_eq(b, a + 40 * MiB + 4096, "packed after a");
	cr_assert_eq(t_stats(&t, 0, NULL).handles_cut, 1, "no second cut");
	cr_assert_eq(t_handles_over(a, 64 * MiB), 17);
	/* From 47 MiB to 49 MiB + 4 KiB: the handle [48, 52) would keep 3 MiB less 4 KiB free, so
	 * it is cut in two. */
	cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB + 4096, 0, NULL, &c, NULL), VMM_OK);
	cr_assert_eq(c, a + 47 * MiB, "packed after b (at %+lld MiB)",
		     (long long)(c - a) / (long long)MiB);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_cut, 2);
	cr_assert_eq(t_handles_over(a, 64 * MiB), 18);
	t_fill(a, 40 * MiB + 4096, 1);
	t_fill(b, 7 * MiB - 4096, 2);
	t_fill(c, 2 * MiB + 4096, 3);
	cr_assert(t_check(a, 40 * MiB + 4096, 1) && t_check(b, 7 * MiB - 4096, 2) &&
		  t_check(c, 2 * MiB + 4096, 3));
	cr_assert_eq(t_dev_used(&t, 0), 66 * MiB, "nothing was added");
	t_close(&t);
}

/* Below VMMSHIM_EDGE_CUT_MIN (edge_cut_min) an allocation that would share a freed handle gets
 * it as 2 MiB pieces, as the heap did before it cut at edges. */
Test(heap_layout, below_edge_cut_min_a_shared_handle_becomes_pieces)
{
	vmm_config cfg = { .edge_cut_min = 32 * MiB };
	struct tctx t;
	vmm_devptr big, small, large;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, &cfg);
	/* A request of 32 MiB or more: cut at its edge. */
	cr_assert_eq(vmm_malloc(t.core, 0, 128 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 100 * MiB, 0, NULL, &large, NULL), VMM_OK);
	cr_assert_eq(large, big);
	cr_assert_eq(t_handles_over(large, 128 * MiB), 3, "64, 36 and 28 MiB");
	/* A smaller one: the 28 MiB left become pieces. */
	cr_assert_eq(vmm_malloc(t.core, 0, 6 * MiB, 0, NULL, &small, NULL), VMM_OK);
	cr_assert_eq(small, large + 100 * MiB);
	cr_assert_eq(t_handles_over(small, 28 * MiB), 14);
	t_close(&t);
}

Test(heap_layout, a_large_allocation_stays_one_handle_through_sleep_and_wake)
{
	vmm_sleep_opts all = { .device = -1 };
	struct tctx t;
	vmm_devptr p;
	vmm_error err;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 200 * MiB, 0, NULL, &p, NULL), VMM_OK);
	t_fill(p, 200 * MiB, 9);
	cr_assert_eq(vmm_sleep(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	cr_assert_eq(vmm_wake(t.core, &all, NULL, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t_handles_over(p, 200 * MiB), 1);
	cr_assert(t_check(p, 200 * MiB, 9));
	t_close(&t);
}
