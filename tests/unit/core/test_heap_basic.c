/* The allocator's everyday contract: every size class, alignment, contents kept, distinct
 * non-overlapping blocks, lookup of interior pointers, errors for foreign pointers, tags and
 * stream-ordered reuse. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

struct rec {
	vmm_devptr p;
	size_t n;
};

static int by_addr(const void *a, const void *b)
{
	const struct rec *x = a, *y = b;

	return x->p < y->p ? -1 : x->p > y->p;
}

static void assert_disjoint(struct rec *r, size_t n)
{
	qsort(r, n, sizeof(*r), by_addr);
	for (size_t i = 1; i < n; i++)
		cr_assert_leq(r[i - 1].p + (r[i - 1].n ? r[i - 1].n : 1), r[i].p,
			      "allocations 0x%llx (+%zu) and 0x%llx overlap",
			      (unsigned long long)r[i - 1].p, r[i - 1].n, (unsigned long long)r[i].p);
}

Test(heap_basic, every_size_class_aligned_distinct_and_kept)
{
	static struct rec recs[4096];
	struct tctx t;
	vmm_error err;
	size_t n = 0;

	t_simdev_env("4G", NULL, NULL);
	t_open(&t, NULL);
	/* Every 256-byte step up to 8 KiB, then powers of two and their neighbours up to 64 MiB:
	 * every small class, the small/large boundary, and large sizes. */
	for (size_t s = 1; s <= 8192; s += 255)
		recs[n++].n = s;
	for (size_t s = 8192; s <= 64 * MiB; s *= 2) {
		recs[n++].n = s - 1;
		recs[n++].n = s;
		recs[n++].n = s + 1;
		recs[n++].n = s + s / 2;
	}
	recs[n++].n = 0;
	for (size_t i = 0; i < n; i++) {
		vmm_status st = vmm_malloc(t.core, 0, recs[i].n, 0, NULL, &recs[i].p, &err);

		cr_assert_eq(st, VMM_OK, "malloc(%zu): %s", recs[i].n, err.msg);
		cr_assert_eq(recs[i].p % 256, 0, "malloc(%zu) = 0x%llx is not 256-aligned", recs[i].n,
			     (unsigned long long)recs[i].p);
		t_fill(recs[i].p, recs[i].n, recs[i].p);
	}
	for (size_t i = 0; i < n; i++)
		cr_assert(t_check(recs[i].p, recs[i].n, recs[i].p), "contents of malloc(%zu) lost",
			  recs[i].n);
	vmm_stats s = t_stats(&t, 0, NULL);
	size_t sum = 0;

	for (size_t i = 0; i < n; i++)
		sum += recs[i].n;
	cr_assert_eq(s.live_count, n);
	cr_assert_eq(s.live_bytes, sum);
	cr_assert_eq(s.mapped_bytes, t_dev_used(&t, 0), "mapped %llu, driver says %llu",
		     (unsigned long long)s.mapped_bytes, (unsigned long long)t_dev_used(&t, 0));
	assert_disjoint(recs, n);
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(vmm_free(t.core, recs[i].p, &err), VMM_OK, "free: %s", err.msg);
	s = t_stats(&t, 0, NULL);
	cr_assert_eq(s.live_count, 0);
	cr_assert_eq(s.live_bytes, 0);
	cr_assert_eq(s.cached_bytes, s.mapped_bytes);
	t_close(&t);
}

Test(heap_basic, small_allocations_share_pages)
{
	struct tctx t;
	vmm_devptr p[1000];
	vmm_error err;

	t_open(&t, NULL);
	for (int i = 0; i < 1000; i++)
		cr_assert_eq(vmm_malloc(t.core, 0, 256, 0, NULL, &p[i], &err), VMM_OK);
	/* 1000 x 256 bytes fit in one 2 MiB page. */
	cr_assert_leq(t_stats(&t, 0, NULL).mapped_bytes, 2 * MiB);
	cr_assert_leq(t_dev_used(&t, 0), 2 * MiB);
	for (int i = 0; i < 1000; i++)
		vmm_free(t.core, p[i], NULL);
	t_close(&t);
}

Test(heap_basic, requested_alignment)
{
	struct tctx t;
	vmm_error err;
	size_t aligns[] = { 256, 512, 4096, 65536, MiB, 2 * MiB };
	size_t sizes[] = { 1, 300, 5000, 3 * MiB + 5 };
	vmm_devptr p;

	t_open(&t, NULL);
	for (size_t a = 0; a < sizeof(aligns) / sizeof(aligns[0]); a++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			cr_assert_eq(vmm_malloc(t.core, 0, sizes[s], aligns[a], "al", &p, &err),
				     VMM_OK, "%s", err.msg);
			cr_assert_eq(p % aligns[a], 0, "size %zu align %zu got 0x%llx", sizes[s],
				     aligns[a], (unsigned long long)p);
			t_fill(p, sizes[s], 7);
			cr_assert(t_check(p, sizes[s], 7));
		}
	}
	cr_assert_eq(vmm_malloc(t.core, 0, 100, 384, NULL, &p, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_malloc(t.core, 0, 100, 64 * MiB, NULL, &p, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_malloc(t.core, 5, 100, 0, NULL, &p, &err), VMM_E_INVALID);
	cr_assert(strlen(err.msg) > 0);
	t_close(&t);
}

Test(heap_basic, size_zero_is_distinct)
{
	struct tctx t;
	vmm_devptr a, b;
	vmm_alloc_info info;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 0, 0, NULL, &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 0, 0, NULL, &b, NULL), VMM_OK);
	cr_assert_neq(a, b);
	cr_assert(vmm_lookup(t.core, a, &info));
	cr_assert_eq(info.size, 0);
	cr_assert_geq(info.usable, 256);
	t_close(&t);
}

Test(heap_basic, lookup_answers_interior_pointers)
{
	struct tctx t;
	vmm_devptr big, small, mid;
	vmm_alloc_info info;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 10 * MiB + 3, 0, "look", &big, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 1000, 0, NULL, &small, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 300 * KiB, 0, NULL, &mid, NULL), VMM_OK);
	cr_assert(vmm_lookup(t.core, big + 7 * MiB + 13, &info));
	cr_assert_eq(info.base, big);
	cr_assert_eq(info.size, 10 * MiB + 3);
	cr_assert_eq(info.device, 0);
	cr_assert_str_eq(info.tag, "look");
	cr_assert(vmm_lookup(t.core, big + 10 * MiB + 2, &info));
	cr_assert(vmm_lookup(t.core, small + 999, &info));
	cr_assert_eq(info.base, small);
	cr_assert_str_eq(info.tag, VMM_DEFAULT_TAG);
	cr_assert(vmm_lookup(t.core, mid + 200 * KiB, &info));
	cr_assert_eq(info.base, mid);
	cr_assert_not(vmm_lookup(t.core, 0x1000, &info));
	vmm_free(t.core, big, NULL);
	cr_assert_not(vmm_lookup(t.core, big + 5, &info), "a freed allocation is not found");
	t_close(&t);
}

Test(heap_basic, foreign_and_double_free_are_refused)
{
	struct tctx t;
	vmm_devptr p, q;
	vmm_error err;
	int host;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 4096, 0, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, (vmm_devptr)(uintptr_t)&host, &err), VMM_E_NOT_OURS);
	cr_assert_eq(vmm_free(t.core, p + 256, &err), VMM_E_NOT_OURS);
	cr_assert_eq(vmm_free(t.core, q + MiB, &err), VMM_E_NOT_OURS);
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_OK);
	cr_assert_eq(vmm_free(t.core, p, &err), VMM_E_NOT_OURS, "double free");
	cr_assert(strstr(err.msg, "double free") != NULL, "message: %s", err.msg);
	cr_assert_eq(t_stats(&t, 0, NULL).live_count, 1);
	t_close(&t);
}

Test(heap_basic, freed_memory_is_reused_after_a_sync)
{
	struct tctx t;
	vmm_devptr p;
	vmm_stats s;

	t_open(&t, NULL);
	for (int i = 0; i < 200; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 24 * MiB, 0, NULL, &p, NULL), VMM_OK);
		t_fill(p, 24 * MiB, (uint64_t)i);
		cr_assert(t_check(p, 24 * MiB, (uint64_t)i));
		cr_assert_eq(vmm_free(t.core, p, NULL), VMM_OK);
	}
	s = t_stats(&t, 0, NULL);
	/* The freed tensor is reclaimed (a sync) before any new memory is made: the heap holds one
	 * tensor's memory, as cudaMalloc would, never a generation per cycle. */
	cr_assert_eq(s.mapped_bytes, 24 * MiB, "mapped %llu", (unsigned long long)s.mapped_bytes);
	cr_assert_gt(s.syncs, 0);
	cr_assert_eq(s.alloc_calls, 200);
	cr_assert_eq(s.free_calls, 200);
	t_close(&t);
}

Test(heap_basic, quarantined_block_is_not_handed_out_before_a_sync)
{
	struct tctx t;
	vmm_devptr p, q;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &q, NULL), VMM_OK);
	vmm_free(t.core, p, NULL);
	/* 4 MiB wait in quarantine (below 8 MiB) and are smaller than the request: the heap grows
	 * instead. */
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &q, NULL), VMM_OK);
	cr_assert(q >= p + 4 * MiB || q + 8 * MiB <= p);
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 0);
	t_close(&t);
}

Test(heap_basic, stream_ordered_reuse_is_immediate)
{
	struct tctx t;
	vmm_devptr p, q, r;
	vmm_stream s1 = (vmm_stream)0x1111, s2 = (vmm_stream)0x2222;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 3 * MiB, NULL, s1, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free_on_stream(t.core, p, s1, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 3 * MiB - 100, NULL, s1, &q, NULL), VMM_OK);
	cr_assert_eq(q, p, "the same stream reuses at once");
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 0, "without a sync");
	cr_assert_eq(vmm_free_on_stream(t.core, q, s1, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 3 * MiB, NULL, s2, &r, NULL), VMM_OK);
	cr_assert(r != q || t_stats(&t, 0, NULL).syncs > 0,
		  "another stream gets it only after a sync");
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 512, NULL, s1, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free_on_stream(t.core, p, s1, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 500, NULL, s1, &q, NULL), VMM_OK);
	cr_assert_eq(q, p);
	cr_assert_eq(t_stats(&t, 0, NULL).live_count, 2);
	/* The legacy default stream (NULL) is a stream too; a plain free is not stream-ordered. */
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 5 * MiB, NULL, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free_on_stream(t.core, p, NULL, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 5 * MiB, NULL, NULL, &q, NULL), VMM_OK);
	cr_assert_eq(q, p, "reused on the default stream");
	cr_assert_eq(vmm_free(t.core, q, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 5 * MiB, NULL, NULL, &r, NULL), VMM_OK);
	cr_assert(r != q || t_stats(&t, 0, NULL).syncs > 0, "a plain free waits for a sync");
	t_close(&t);
}

/* A block comes back on its stream only to a request that leaves at most 1/16 of it unused:
 * every free of a one-stream program is stream-ordered (the shim's lone-stream ordering), and a
 * looser fit kept the rest of each block idle (the H200 benchmark's peak 1.8 GB higher). */
Test(heap_basic, stream_ordered_reuse_wastes_at_most_a_sixteenth)
{
	struct tctx t;
	vmm_devptr p, q;
	vmm_stream s = (vmm_stream)0x1111;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 16 * MiB, NULL, s, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free_on_stream(t.core, p, s, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 15 * MiB + MiB / 2, NULL, s, &q, NULL),
		     VMM_OK);
	cr_assert_eq(q, p, "15.5 MiB leaves 1/32 unused: the freed block comes back");
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 0, "without a sync");
	cr_assert_eq(vmm_free_on_stream(t.core, q, s, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc_on_stream(t.core, 0, 14 * MiB, NULL, s, &q, NULL), VMM_OK);
	cr_assert(q != p || t_stats(&t, 0, NULL).syncs > 0,
		  "14 MiB would leave 2 MiB of the 16 unused (more than 1/16): not without a sync");
	t_close(&t);
}

Test(heap_basic, tags_are_separate_arenas)
{
	struct tctx t;
	vmm_devptr a, b;
	char names[8][VMM_TAG_MAX];
	char longtag[64];
	vmm_error err;

	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 5 * MiB, 0, "weights", &a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 1000, 0, "kv", &b, NULL), VMM_OK);
	cr_assert_eq(vmm_tags_list(t.core, 0, names, 8), 2);
	cr_assert_eq(t_stats(&t, 0, "weights").live_bytes, 5 * MiB);
	cr_assert_eq(t_stats(&t, 0, "kv").live_bytes, 1000);
	cr_assert_eq(t_stats(&t, 0, "kv").live_count, 1);
	cr_assert_eq(t_stats(&t, 0, NULL).live_bytes, 5 * MiB + 1000);
	cr_assert_eq(t_stats(&t, -1, NULL).live_bytes, 5 * MiB + 1000);
	cr_assert_eq(vmm_devices_used(t.core), 1u);
	memset(longtag, 'x', sizeof(longtag) - 1);
	longtag[63] = 0;
	cr_assert_eq(vmm_malloc(t.core, 0, 10, 0, longtag, &a, &err), VMM_E_INVALID);
	cr_assert_eq(vmm_stats_get(t.core, 9, NULL, &(vmm_stats){ 0 }, &err), VMM_E_INVALID);
	t_close(&t);
}
