/* An allocation given a physical handle of its own (vmm_share_own, for NCCL's user-buffer
 * registration): afterwards one handle holds it from its base, another process that maps that one
 * handle sees its bytes, the neighbours whose bytes moved along keep them, and a sleep and wake
 * keep everything. One that starts inside a granule, or whose handles another process maps
 * already, is refused and left as it was; a failed copy leaves everything as it was. */
#include <criterion/criterion.h>
#include <unistd.h>

#include "heap_offload.h"
#include "helpers.h"
#include "vmm_share.h"

#define GRAN (2 * MiB)
#define NNEIGH 6

/* Map the export, which must be one handle from its offset 0, at a range of its own. */
static vmm_devptr import_one(struct tctx *t, const vmm_share_info *want)
{
	vmm_share_piece pieces[4];
	vmm_share_info info;
	vmm_devptr va;
	vmm_error err;
	vmm_phys h;
	size_t n;
	int dev = 0;

	cr_assert_eq(vmm_share_fds(t->core, want->base, want->id, &info, pieces, 4, &n, NULL, &err),
		     VMM_OK, "%s", err.msg);
	cr_assert_eq(n, 1, "the allocation lies in %zu handles", n);
	cr_assert_eq(pieces[0].handle_offset, 0);
	cr_assert_eq(t->be->reserve(t->be, 0, info.span_size, 0, &va, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t->be->import_fd(t->be, pieces[0].fd, &h, &dev, &err), VMM_OK, "%s", err.msg);
	close(pieces[0].fd);
	cr_assert_eq(t->be->map_at(t->be, va, info.span_size, 0, h, &err), VMM_OK, "%s", err.msg);
	t->be->release(t->be, h, &err);
	cr_assert_eq(t->be->set_access(t->be, 0, va, info.span_size, NULL, 0, &err), VMM_OK);
	return va;
}

/* size bytes in a tag of their own (fresh memory: it starts a granule, and the neighbours made
 * after it share its last one), or a whole number of granules anywhere. */
static void own_and_check(size_t size, const char *tag)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = false };
	vmm_devptr a, n[NNEIGH], view, first = 0;
	vmm_transfer_result res;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	bool move;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	if (!tag) { /* other memory first: whole granules start one wherever they land */
		cr_assert_eq(vmm_malloc(t.core, 0, MiB + 3, 0, NULL, &first, &err), VMM_OK);
	}
	cr_assert_eq(vmm_malloc(t.core, 0, size, 0, tag, &a, &err), VMM_OK);
	cr_assert_eq(a % GRAN, 0, "starts a granule");
	t_fill(a, size, 1);
	for (int i = 0; i < NNEIGH; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 200 * 1024, 0, tag, &n[i], &err), VMM_OK);
		t_fill(n[i], 200 * 1024, 10 + i);
	}
	cr_assert_eq(vmm_share_own_plan(t.core, a + 5, &move, &err), VMM_OK, "%s", err.msg);
	cr_expect(move, "it lies in several pieces");
	cr_assert_eq(vmm_share_own(t.core, a + 5, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(si.own_handle);
	cr_expect_eq(si.base, a);
	cr_expect_eq(si.span, a);
	cr_expect_eq(si.span_size, (size + GRAN - 1) / GRAN * GRAN);
	cr_assert_eq(vmm_share_own_plan(t.core, a, &move, &err), VMM_OK);
	cr_expect(!move, "nothing moves a second time");
	cr_expect(t_check(a, size, 1), "the allocation's bytes moved with it");
	for (int i = 0; i < NNEIGH; i++)
		cr_expect(t_check(n[i], 200 * 1024, 10 + i), "neighbour %d lost its bytes", i);
	view = import_one(&t, &si);
	cr_expect(t_check(view, size, 1), "the other process sees the bytes from offset 0");
	t_fill(view, size, 2);
	cr_expect(t_check(a, size, 2), "and this one sees the other's write");

	cr_assert_eq(vmm_sleep(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_wake(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(a, size, 2), "after sleep and wake");
	for (int i = 0; i < NNEIGH; i++)
		cr_expect(t_check(n[i], 200 * 1024, 10 + i), "neighbour %d after sleep and wake", i);
	cr_expect(t_check(view, size, 2));
	for (int i = 0; i < NNEIGH; i++)
		cr_expect_eq(vmm_free(t.core, n[i], &err), VMM_OK);
	cr_expect_eq(vmm_free(t.core, a, &err), VMM_OK);
	if (first)
		cr_expect_eq(vmm_free(t.core, first, &err), VMM_OK);
	t_close(&t);
}

Test(heap_own, small_buffer_sharing_its_last_granule)
{
	own_and_check(3 * MiB + 4096, "own");
}

Test(heap_own, mid_size_buffer_in_many_pieces)
{
	own_and_check(20 * MiB + 100 * 1024, "own");
}

Test(heap_own, whole_granules_anywhere)
{
	own_and_check(6 * MiB, NULL);
}

Test(heap_own, large_buffer_in_a_handle_and_its_last_granule)
{
	own_and_check(40 * MiB + 4096, "own");
}

/* A large allocation placed after other memory starts inside a granule (it packs with its
 * neighbours) and cannot be retained; granule_start_min (VMMSHIM_GRANULE_START_MIN) starts it
 * at a granule, so that it can. */
static vmm_status retain_large_after_other_memory(size_t granule_start_min, vmm_devptr *a)
{
	vmm_config cfg = { .granule_start_min = granule_start_min };
	vmm_devptr first;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	vmm_status st;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, &cfg);
	cr_assert_eq(vmm_malloc(t.core, 0, MiB + 3, 0, NULL, &first, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, 40 * MiB + 4096, 0, NULL, a, &err), VMM_OK);
	t_fill(*a, 40 * MiB + 4096, 5);
	st = vmm_share_own(t.core, *a, &si, &err);
	if (!st)
		cr_expect(si.own_handle);
	cr_expect(t_check(*a, 40 * MiB + 4096, 5));
	t_close(&t);
	return st;
}

Test(heap_own, large_buffers_start_a_granule_when_asked)
{
	vmm_devptr a;

	cr_expect_eq(retain_large_after_other_memory(0, &a), VMM_E_UNSUPPORTED);
	cr_expect_neq(a % GRAN, 0, "packed after the first allocation");
	cr_expect_eq(retain_large_after_other_memory(32 * MiB, &a), VMM_OK);
	cr_expect_eq(a % GRAN, 0, "starts a granule");
}

Test(heap_own, refused_when_no_handle_can_hold_it)
{
	vmm_devptr odd[8] = { 0 }, legacy;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	bool move;
	int k = -1;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	for (int i = 0; i < 8 && k < 0; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, MiB, 0, NULL, &odd[i], &err), VMM_OK);
		if (odd[i] % GRAN)
			k = i;
	}
	cr_assert_geq(k, 0, "no 1 MiB allocation inside a granule");
	t_fill(odd[k], MiB, 3);
	cr_expect_eq(vmm_share_own_plan(t.core, odd[k], &move, &err), VMM_E_UNSUPPORTED);
	cr_expect_eq(vmm_share_own(t.core, odd[k], &si, &err), VMM_E_UNSUPPORTED);
	cr_expect(t_check(odd[k], MiB, 3));
	cr_expect_eq(vmm_share_list(t.core, &si, 1), 0, "nothing was exported");

	/* Exported through legacy IPC first: its pieces are mapped elsewhere and cannot move. */
	cr_assert_eq(vmm_malloc(t.core, 0, 6 * MiB + 1, 0, NULL, &legacy, &err), VMM_OK);
	cr_assert_eq(vmm_share_export(t.core, legacy, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(!si.own_handle);
	cr_expect_eq(vmm_share_own(t.core, legacy, &si, &err), VMM_E_UNSUPPORTED);
	cr_expect_eq(vmm_share_own(t.core, 0x1000, &si, &err), VMM_E_NOT_OURS);
	t_close(&t);
}

Test(heap_own, failed_copy_leaves_everything_as_it_was)
{
	vmm_devptr a;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;

	t_simdev_env("2G", NULL, "cuMemcpyDtoDAsync:1");
	t_open(&t, NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 10 * MiB + 1, 0, NULL, &a, &err), VMM_OK);
	t_fill(a, 10 * MiB + 1, 4);
	cr_expect_neq(vmm_share_own(t.core, a, &si, &err), VMM_OK, "the copy was made to fail");
	cr_expect(t_check(a, 10 * MiB + 1, 4), "the old handles are back with their bytes");
	cr_expect_eq(vmm_share_list(t.core, &si, 1), 0, "nothing was exported");
	cr_assert_eq(vmm_share_own(t.core, a, &si, &err), VMM_OK, "%s", err.msg);
	cr_expect(si.own_handle);
	cr_expect(t_check(a, 10 * MiB + 1, 4));
	t_close(&t);
}
