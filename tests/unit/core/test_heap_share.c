/* Exported allocations (vmm_share.h): the physical memory another process maps is never handed
 * out again by this heap, stays resident through sleep, and is given back to the driver once all
 * of it is freed; the export's id and base both have to match. The "other process" here is a
 * second mapping of the exported descriptors, which sees the same physical memory. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "heap_offload.h"
#include "offload/transfer.h"
#include "helpers.h"
#include "vmm_share.h"

static bool in_span(const vmm_share_info *si, vmm_devptr p, size_t size)
{
	return p < si->span + si->span_size && p + size > si->span;
}

static void check_never_reused(size_t size)
{
	vmm_devptr a, left, right, view, more[64];
	vmm_share_info si, again;
	struct tctx t;
	vmm_error err;
	uint64_t shared, retired;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, NULL, &left, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, NULL, &a, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, NULL, &right, &err), VMM_OK);
	t_fill(a, size, 1);
	t_fill(left, size, 7);
	cr_assert_eq(vmm_share_export(t.core, a + size / 2, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(si.base, a);
	cr_expect_eq(si.size, size);
	cr_assert_eq(vmm_share_export(t.core, a, &again, &err), VMM_OK);
	cr_expect_eq(again.id, si.id, "the same allocation keeps its export id");
	view = t_import_view(&t, &si, NULL);
	cr_assert(t_check(view, size, 1), "the importer's view shows the exported bytes");

	/* Free it: the importer keeps it; nothing this heap hands out may land on that memory. */
	cr_assert_eq(vmm_free(t.core, a, &err), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK);
	for (int i = 0; i < 64; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, i % 2 ? size : 1 + (size_t)i * 97, 0, NULL,
					&more[i], &err), VMM_OK);
		t_fill(more[i], i % 2 ? size : 1 + (size_t)i * 97, 2);
	}
	cr_expect(t_check(view, size, 1), "the heap reused memory another process maps");
	cr_expect(t_check(left, size, 7), "a neighbour in the shared handle lost its bytes");
	cr_expect_neq(vmm_share_fds(t.core, si.base, si.id, &again, NULL, 0, &(size_t){ 0 }, NULL,
				    &err),
		      VMM_OK, "a freed allocation's export still opens");

	/* Once everything in the shared handles is freed, they go back to the driver: while a
	 * neighbour lives in them (a slab's), they stay. One of a granule or more starts a granule,
	 * so its neighbours may lie outside its span. */
	vmm_share_bytes(t.core, 0, &shared, &retired);
	cr_expect_eq(shared > 0, in_span(&si, left, size) || in_span(&si, right, size),
		     "%llu bytes shared", (unsigned long long)shared);
	for (int i = 0; i < 64; i++)
		vmm_free(t.core, more[i], &err);
	vmm_free(t.core, left, &err);
	vmm_free(t.core, right, &err);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK);
	vmm_share_bytes(t.core, 0, &shared, &retired);
	cr_expect_eq(shared, 0, "shared handles all freed are released (%llu left)",
		     (unsigned long long)shared);
	cr_expect_eq(retired, 0);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 0, "mapped %llu live %llu",
		     (unsigned long long)t_stats(&t, 0, NULL).mapped_bytes,
		     (unsigned long long)t_stats(&t, 0, NULL).live_bytes);
	cr_expect(t_check(view, size, 1), "the importer's view outlives the exporter's release");
	t_close(&t);
}

Test(heap_share, large_allocation_never_reused_while_mapped_elsewhere)
{
	check_never_reused(3 * MiB + 4096);
}

Test(heap_share, small_allocation_in_a_slab_never_reused)
{
	check_never_reused(1000);
}

Test(heap_share, exported_memory_stays_resident_through_sleep)
{
	vmm_devptr a, b;
	vmm_share_info si;
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = false };
	vmm_transfer_result res;
	struct tctx t;
	vmm_error err;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &a, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, "other", &b, &err), VMM_OK);
	t_fill(a, 8 * MiB, 3);
	t_fill(b, 8 * MiB, 4);
	cr_assert_eq(vmm_share_export(t.core, a, &si, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_sleep(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_geq(res.bytes_released, 8 * MiB, "the rest was released");
	cr_expect(t_check(a, 8 * MiB, 3), "exported memory stays mapped while asleep");
	cr_assert_eq(vmm_wake(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(a, 8 * MiB, 3));
	cr_expect(t_check(b, 8 * MiB, 4));
	t_close(&t);
}

Test(heap_share, foreign_and_wrong_ids_refused)
{
	vmm_share_piece pieces[4];
	vmm_share_info si, info;
	vmm_devptr a;
	struct tctx t;
	vmm_error err;
	size_t n;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, MiB, 0, NULL, &a, &err), VMM_OK);
	cr_expect_eq(vmm_share_export(t.core, 0x1000, &si, &err), VMM_E_NOT_OURS);
	cr_assert_eq(vmm_share_export(t.core, a, &si, &err), VMM_OK);
	cr_expect_eq(vmm_share_fds(t.core, a, si.id + 1, &info, pieces, 4, &n, NULL, &err),
		     VMM_E_NOT_OURS);
	cr_expect_eq(vmm_share_fds(t.core, a + 256, si.id, &info, pieces, 4, &n, NULL, &err),
		     VMM_E_NOT_OURS);
	cr_expect_eq(vmm_share_list(t.core, &info, 1), 1);
	cr_expect_eq(info.id, si.id);
	vmm_free(t.core, a, &err);
	cr_expect_eq(vmm_share_list(t.core, &info, 1), 0);
	t_close(&t);
}

/* A group sleep whose members have all let the memory go (vmm_share_release_allow): the shared
 * handles are copied out and released like the rest, an export cannot be fetched while asleep,
 * and at wake the memory is back at its address with its bytes and exports again. A handle the
 * program retained (vmm_share_own) is never released: the program holds its value. */
Test(heap_share, a_group_sleep_may_release_exported_memory)
{
	vmm_devptr a, b, r, view;
	vmm_share_info si, sr;
	vmm_share_piece pieces[VMM_SHARE_MAX_PIECES];
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = false };
	vmm_transfer_result res;
	struct tctx t;
	vmm_error err;
	size_t n;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &a, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 8 * MiB, 0, "other", &b, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 32 * MiB, 0, "kept", &r, &err), VMM_OK);
	t_fill(a, 8 * MiB, 3);
	t_fill(b, 8 * MiB, 4);
	t_fill(r, 32 * MiB, 5);
	cr_assert_eq(vmm_share_export(t.core, a, &si, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_share_own(t.core, r, &sr, &err), VMM_OK, "%s", err.msg);
	/* The importer wrote through its view, then let it go. */
	view = t_import_view(&t, &si, NULL);
	t_fill(view, 8 * MiB, 6);
	cr_assert_eq(t.be->unmap(t.be, si.span + (view - si.base), si.span_size, &err), VMM_OK);
	t.be->unreserve(t.be, 0, si.span + (view - si.base), si.span_size, &err);

	vmm_share_release_allow(t.core, true);
	cr_assert_eq(vmm_sleep(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	vmm_share_release_allow(t.core, false);
	cr_expect_geq(res.bytes_released, 16 * MiB, "the exported memory was released too");
	cr_expect_geq(vmm_share_asleep_bytes(t.core, 0), 8 * MiB);
	cr_expect_lt(vmm_share_asleep_bytes(t.core, 0), 32 * MiB, "the retained handle stayed");
	cr_expect(t_check(r, 32 * MiB, 5), "the retained handle stays mapped");
	cr_expect_eq(vmm_share_fds(t.core, si.base, si.id, &si, pieces, VMM_SHARE_MAX_PIECES, &n,
				   NULL, &err), VMM_E_BUSY, "no descriptor of released memory");
	cr_assert_eq(vmm_wake(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(vmm_share_asleep_bytes(t.core, 0), 0);
	cr_expect(t_check(a, 8 * MiB, 6), "the importer's write came back");
	cr_expect(t_check(b, 8 * MiB, 4));
	/* Shared again: a new import sees the same memory as the exporter. */
	view = t_import_view(&t, &si, NULL);
	t_fill(view, 8 * MiB, 7);
	cr_expect(t_check(a, 8 * MiB, 7));
	t_close(&t);
}

/* A program that allocates only on streams (under the shim: every program with one stream) gets
 * a freed export's memory back at its next allocation, as one that calls vmm_malloc does, not at
 * the next trim. */
Test(heap_share, a_stream_ordered_allocation_releases_a_freed_export)
{
	vmm_devptr a, b;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	uint64_t shared, retired;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc_ordered(t.core, 0, 32 * MiB, NULL, NULL, &a, NULL, &err), VMM_OK);
	cr_assert_eq(vmm_share_export(t.core, a, &si, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_free(t.core, a, &err), VMM_OK);
	/* past its quarantine */
	cr_assert_eq(vmm_reclaim_within(t.core, 0, &(vmm_limits){ .deadline = 0 }, &err), VMM_OK);
	vmm_share_bytes(t.core, 0, &shared, &retired);
	cr_expect_eq(retired, 32 * MiB, "the freed export is retired");
	cr_assert_eq(vmm_malloc_ordered(t.core, 0, 2 * MiB, NULL, NULL, &b, NULL, &err), VMM_OK);
	vmm_share_bytes(t.core, 0, &shared, &retired);
	cr_expect_eq(shared, 0, "%llu bytes still shared", (unsigned long long)shared);
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, 2 * MiB, "mapped %llu",
		     (unsigned long long)t_stats(&t, 0, NULL).mapped_bytes);
	t_close(&t);
}
