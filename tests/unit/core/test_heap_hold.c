/* Memory held by its mapping alone (cfg.release_on_map, heap_hold.h): the heap releases its
 * reference to each 2 MiB piece once mapped. What a user checks: a large request gathering
 * free pieces gives them back with unmaps alone and the device holds no more than before; the
 * pieces' bytes survive every path that needs the handle beyond its mapping (a move, a sleep,
 * a sleep that fails and puts them back, an export); nothing is left on the device at the end. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "heap_offload.h"
#include "helpers.h"

#define PAIRS 64

/* The backend's calls, counted (the wrappers go around the backend the core already uses). */
static vmm_status (*real_release)(vmm_backend *, vmm_phys, vmm_error *);
static vmm_status (*real_unmap)(vmm_backend *, vmm_devptr, size_t, vmm_error *);
static vmm_status (*real_retain)(vmm_backend *, vmm_devptr, vmm_phys *, vmm_error *);
static unsigned releases, unmaps, retains;

static vmm_status count_release(vmm_backend *be, vmm_phys h, vmm_error *err)
{
	releases++;
	return real_release(be, h, err);
}

static vmm_status count_unmap(vmm_backend *be, vmm_devptr va, size_t size, vmm_error *err)
{
	unmaps++;
	return real_unmap(be, va, size, err);
}

static vmm_status count_retain(vmm_backend *be, vmm_devptr va, vmm_phys *h, vmm_error *err)
{
	retains++;
	return real_retain(be, va, h, err);
}

/* Open the heap over simdev with release_on_map, its backend's calls counted. */
static void open_held(struct tctx *t, const char *memory, const char *fail)
{
	vmm_config cfg = { .release_on_map = true };

	t_simdev_env(memory, NULL, fail);
	t_open(t, &cfg);
	cr_assert(t->be->retain_at, "the CUDA backend finds cuMemRetainAllocationHandle");
	real_release = t->be->release;
	real_unmap = t->be->unmap;
	real_retain = t->be->retain_at;
	t->be->release = count_release;
	t->be->unmap = count_unmap;
	t->be->retain_at = count_retain;
	releases = unmaps = retains = 0;
}

/* Closed, the device holds nothing of the process's. */
static void close_clean(struct tctx *t)
{
	t_close(t);
	cr_assert_eq(t_dev_live(), 0, "%llu bytes left on the device",
		     (unsigned long long)t_dev_live());
}

Test(heap_hold, a_gather_gives_held_pieces_back_by_unmap_alone)
{
	struct tctx t;
	vmm_devptr kept[PAIRS], big;
	uint64_t released;

	open_held(&t, "512M", NULL);
	t_scatter(&t, PAIRS, kept);
	/* Every piece was released once it was mapped: the 64 kept ones and the 64 freed pairs. */
	cr_assert_eq(releases, 3 * PAIRS, "%u releases", releases);
	cr_assert_eq(t_dev_used(&t, 0), 384 * MiB, "the mappings hold the memory");
	released = t_stats(&t, 0, NULL).handles_released;
	releases = unmaps = 0;
	/* 200 MiB gathers 100 free pieces: each goes back by its unmap. */
	cr_assert_eq(vmm_malloc(t.core, 0, 200 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(releases, 0, "no release for the pieces given back (%u)", releases);
	cr_assert_geq(unmaps, 100);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_released - released, 100, "counted as released");
	cr_assert_eq(t_stats(&t, 0, NULL).pieces_given_back, 100);
	cr_assert_eq(t_dev_used(&t, 0), 384 * MiB, "no more than before: %llu MiB",
		     (unsigned long long)(t_dev_used(&t, 0) / MiB));
	cr_assert_eq(t_handles_over(big, 200 * MiB), 1);
	t_fill(big, 200 * MiB, 0xee);
	for (int i = 0; i < PAIRS; i++)
		cr_assert(t_check(kept[i], 2 * MiB, (unsigned char)(i + 1)), "kept %d intact", i);
	cr_assert(t_check(big, 200 * MiB, 0xee));
	close_clean(&t);
}

Test(heap_hold, a_moved_held_piece_keeps_its_bytes)
{
	struct tctx t;
	vmm_devptr freed[8], kept[8], big, before;

	open_held(&t, "512M", NULL);
	cr_assert_eq(vmm_malloc(t.core, 0, 256 * MiB, 0, NULL, &before, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, before, NULL), VMM_OK);
	for (int i = 0; i < 8; i++) {
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &freed[i], NULL), VMM_OK);
		cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &kept[i], NULL), VMM_OK);
		t_fill(kept[i], 2 * MiB, (unsigned char)(i + 1));
	}
	for (int i = 0; i < 8; i++)
		cr_assert_eq(vmm_free(t.core, freed[i], NULL), VMM_OK);
	retains = 0;
	/* Fewer than 16 scattered pieces: the 240 MiB request moves them (heap_give_back's test). A
	 * held piece is retained before its unmap, so that the unmap does not free it. */
	cr_assert_eq(vmm_malloc(t.core, 0, 240 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(retains, 8, "%u retains", retains);
	cr_assert_eq(t_dev_used(&t, 0), 256 * MiB);
	t_fill(big, 240 * MiB, 3);
	cr_assert(t_check(big, 240 * MiB, 3));
	for (int i = 0; i < 8; i++)
		cr_assert(t_check(kept[i], 2 * MiB, (unsigned char)(i + 1)), "kept %d intact", i);
	cr_assert_eq(vmm_free(t.core, big, NULL), VMM_OK);
	close_clean(&t);
}

/* 32 allocations of 3 MiB (two pieces each, sharing granules), filled with i + 1. */
static void fill_pieces(struct tctx *t, vmm_devptr *p, int n)
{
	for (int i = 0; i < n; i++) {
		cr_assert_eq(vmm_malloc(t->core, 0, 3 * MiB, 0, NULL, &p[i], NULL), VMM_OK);
		t_fill(p[i], 3 * MiB, (unsigned char)(i + 1));
	}
}

Test(heap_hold, held_pieces_sleep_and_wake_with_their_bytes)
{
	struct tctx t;
	vmm_devptr p[32];

	open_held(&t, "512M", NULL);
	fill_pieces(&t, p, 32);
	cr_assert_gt(releases, 0, "pieces were released once mapped");
	t_sleep(&t, false);
	cr_assert_eq(t_dev_used(&t, 0), 0, "asleep, the device holds %llu bytes",
		     (unsigned long long)t_dev_used(&t, 0));
	t_wake(&t);
	for (int i = 0; i < 32; i++)
		cr_assert(t_check(p[i], 3 * MiB, (unsigned char)(i + 1)), "allocation %d intact", i);
	/* And a discarding sleep leaves nothing either. */
	t_sleep(&t, true);
	cr_assert_eq(t_dev_used(&t, 0), 0);
	t_wake(&t);
	close_clean(&t);
}

/* In a child process (t_run_child: simdev reads SIMDEV_FAIL from its environment once): the
 * pieces filled, a sleep that may fail, whatever it left asleep woken, then a whole sleep and
 * wake. 0: every byte as written and nothing parked; 1: a byte lost; 2: no whole cycle in three
 * tries; 3: still asleep after three wakes; 4: a handle left parked. With count_to set, it writes there how many unmaps and releases the setup made and
 * how many its first sleep made. */
static const char *count_to;

static int sleep_scenario(void)
{
	vmm_sleep_opts all = { .device = -1 };
	unsigned set_unmaps, set_releases;
	vmm_transfer_result r;
	struct tctx t;
	vmm_devptr p[32];
	vmm_error err;
	int rc = 0;

	open_held(&t, "512M", NULL);
	fill_pieces(&t, p, 32);
	set_unmaps = unmaps;
	set_releases = releases;
	vmm_sleep(t.core, &all, &r, &err); /* may fail: that is the point */
	if (count_to) {
		FILE *f = fopen(count_to, "w");

		if (!f)
			return 2;
		fprintf(f, "%u %u %u %u\n", set_unmaps, set_releases, unmaps - set_unmaps,
			releases - set_releases);
		fclose(f);
	}
	for (int k = 0; vmm_is_asleep(t.core, 0, NULL); k++) {
		if (k == 3)
			return 3;
		vmm_wake(t.core, &all, &r, &err);
	}
	for (int i = 0; i < 32 && !rc; i++)
		if (!t_check(p[i], 3 * MiB, (unsigned char)(i + 1)))
			rc = 1;
	/* A whole cycle, within three tries (the second failing call may fall in the first). */
	for (int k = 0; !rc && (vmm_sleep(t.core, &all, &r, &err) ||
				vmm_wake(t.core, &all, &r, &err)); k++) {
		if (k == 2)
			rc = 2;
		if (vmm_is_asleep(t.core, 0, NULL))
			vmm_wake(t.core, &all, &r, &err);
	}
	for (int i = 0; i < 32 && !rc; i++)
		if (!t_check(p[i], 3 * MiB, (unsigned char)(i + 1)))
			rc = 1;
	if (!rc && t_stats(&t, 0, NULL).release_pending_bytes)
		rc = 4;
	for (int i = 0; i < 32; i++)
		vmm_free(t.core, p[i], NULL);
	t_close(&t);
	return rc;
}

/* The k-th of n calls is made to fail: the first three, the middle one and the last three (the
 * ~50 releases of a sleep here go in alike batches in between). */
static bool swept(unsigned k, unsigned n)
{
	return k <= 3 || k == n / 2 || k + 3 > n;
}

/* Unmaps and releases of the first sleep fail in turn (with their retries): the sleep gives
 * up and maps what it unmapped back, or goes on where a retry serves. Without the heap's own
 * reference taken back first, the unmap of a held piece would free it under the sleep's undo. */
Test(heap_hold, a_sleep_that_fails_puts_held_pieces_back_intact, .timeout = 240)
{
	const char *calls[] = { "cuMemUnmap", "cuMemRelease" };
	char fail[96] = "SIMDEV_FAIL=", counts[] = "/tmp/vmm-hold-counts-XXXXXX";
	const char *env[] = { "SIMDEV_MEMORY=512M", NULL, NULL };
	unsigned before[2], in_sleep[2];
	long long live;
	FILE *f;
	int fd = mkstemp(counts);

	cr_assert_geq(fd, 0);
	close(fd);
	count_to = counts;
	cr_assert_eq(t_run_child(sleep_scenario, env, &live), 0, "passes without faults");
	cr_assert_eq(live, 0);
	count_to = NULL;
	f = fopen(counts, "r");
	cr_assert(f);
	cr_assert_eq(fscanf(f, "%u %u %u %u", &before[0], &before[1], &in_sleep[0], &in_sleep[1]),
		     4);
	fclose(f);
	unlink(counts);
	cr_assert_gt(in_sleep[0], 0);
	cr_assert_gt(in_sleep[1], 0);
	env[1] = fail;
	for (int c = 0; c < 2; c++) {
		for (unsigned k = 1; k <= in_sleep[c]; k++) {
			int rc;

			if (!swept(k, in_sleep[c]))
				continue;

			snprintf(fail, sizeof(fail), "SIMDEV_FAIL=%s:%u,%s:%u", calls[c],
				 before[c] + k, calls[c], before[c] + k + 1);
			rc = t_run_child(sleep_scenario, env, &live);
			cr_assert_eq(rc, 0, "%s: %s (scenario code %d)", fail,
				     rc == 1 ? "a byte was lost" : "the heap did not recover", rc);
			cr_assert_eq(live, 0, "%s: %lld bytes left on the device", fail, live);
		}
	}
}

Test(heap_hold, an_export_of_held_pieces_shows_their_bytes_elsewhere)
{
	struct tctx t;
	vmm_devptr p[32], view;
	vmm_share_info si;
	vmm_error err;

	open_held(&t, "512M", NULL);
	fill_pieces(&t, p, 32);
	retains = 0;
	cr_assert_eq(vmm_share_export(t.core, p[5], &si, &err), VMM_OK, "%s", err.msg);
	cr_assert_gt(retains, 0, "the exported handles are the heap's again");
	view = t_import_view(&t, &si, NULL);
	cr_assert(t_check(view, 3 * MiB, 6), "the importer sees the exported bytes");
	t_import_drop(&t, &si, view);
	for (int i = 0; i < 32; i++)
		cr_assert_eq(vmm_free(t.core, p[i], NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 0, "%llu bytes left after the trim",
		     (unsigned long long)t_dev_used(&t, 0));
	close_clean(&t);
}
