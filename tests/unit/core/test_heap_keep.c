/* Kept exports (vmm_share_keep): the descriptors of an exported allocation are exported once and
 * kept, every later fetch gets duplicates; they are closed when the memory goes (free, a group
 * sleep's release, teardown, a forked child) and never exceed the budget (an eighth of
 * RLIMIT_NOFILE). Descriptors are counted in /proc/self/fd, as a user would. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heap_device.h"
#include "heap_internal.h"
#include "heap_keep.h"
#include "heap_offload.h"
#include "helpers.h"
#include "vmm_share.h"

static int open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	cr_assert(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

/* An exported allocation of size bytes filled with seed. */
static vmm_share_info exported(struct tctx *t, size_t size, uint64_t seed)
{
	vmm_share_info si;
	vmm_devptr a;
	vmm_error err;

	cr_assert_eq(vmm_malloc(t->core, 0, size, 0, NULL, &a, &err), VMM_OK, "%s", err.msg);
	t_fill(a, size, seed);
	cr_assert_eq(vmm_share_export(t->core, a, &si, &err), VMM_OK, "%s", err.msg);
	return si;
}

/* Fetch si's descriptors as an importer would, map them and check seed there: whether they
 * were exported for this fetch. */
static bool fetch_and_check(struct tctx *t, const vmm_share_info *si, uint64_t seed)
{
	bool fresh = true;
	vmm_devptr view = t_import_view(t, si, &fresh);

	cr_expect(t_check(view, si->size, seed), "the fetched descriptors hold the exported bytes");
	t_import_drop(t, si, view);
	return fresh;
}

Test(heap_keep, fetches_after_a_keep_get_duplicates)
{
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	bool kept = false;
	int before;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	si = exported(&t, 8 * MiB + 4096, 1);
	before = open_fds();
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK, "%s", err.msg);
	cr_expect(kept);
	cr_expect_gt(vmm_share_kept_fds(t.core), 0);
	cr_expect_eq(open_fds() - before, (int)vmm_share_kept_fds(t.core),
		     "one open descriptor per kept piece");
	cr_expect_not(fetch_and_check(&t, &si, 1), "the first fetch exported again");
	cr_expect_not(fetch_and_check(&t, &si, 1), "the second fetch exported again");
	cr_expect_eq(open_fds() - before, (int)vmm_share_kept_fds(t.core),
		     "the fetches' duplicates were the caller's to close");
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK);
	cr_expect(kept, "a second keep finds it kept");
	t_close(&t);
	cr_expect_eq(open_fds(), before, "teardown closes the kept descriptors");
}

Test(heap_keep, a_fetch_without_keep_exports_and_keeps)
{
	vmm_share_info si, info;
	struct tctx t;
	vmm_error err;
	size_t n;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	si = exported(&t, 4 * MiB, 2);
	cr_expect_eq(vmm_share_fds(t.core, si.base, si.id, &info, NULL, 0, &n, NULL, &err),
		     VMM_E_INVALID, "no room for the pieces");
	cr_expect_eq(vmm_share_kept_fds(t.core), 0, "a refused fetch keeps nothing");
	cr_expect(fetch_and_check(&t, &si, 2), "nothing was kept: exported for this fetch");
	cr_expect_gt(vmm_share_kept_fds(t.core), 0, "what it exported is kept");
	cr_expect_not(fetch_and_check(&t, &si, 2));
	t_close(&t);
}

Test(heap_keep, free_closes_the_kept_descriptors_and_gives_the_memory_back)
{
	vmm_share_piece pieces[4];
	vmm_share_info si, info;
	struct tctx t;
	vmm_error err;
	uint64_t used;
	size_t n;
	bool kept;
	int before;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	used = t_dev_used(&t, 0);
	si = exported(&t, 64 * MiB, 3);
	before = open_fds();
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK);
	cr_assert(kept);
	cr_assert_eq(vmm_free(t.core, si.base, &err), VMM_OK);
	cr_expect_eq(vmm_share_kept_fds(t.core), 0);
	cr_expect_eq(open_fds(), before, "the free closed the kept descriptors");
	cr_expect_eq(vmm_share_fds(t.core, si.base, si.id, &info, pieces, 4, &n, NULL, &err),
		     VMM_E_NOT_OURS, "a freed allocation's export still opens");
	cr_expect_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_E_NOT_OURS);
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK);
	cr_expect_eq(t_dev_used(&t, 0), used, "the driver got the memory back");
	t_close(&t);
}

Test(heap_keep, the_budget_is_an_eighth_of_the_descriptor_limit)
{
	struct rlimit rl;
	vmm_share_info si[16];
	bool kept[16];
	struct tctx t;
	vmm_error err;
	int nkept = 0, refused = -1;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	rl.rlim_cur = 64; /* a budget of 8 */
	cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	for (int i = 0; i < 16; i++) {
		si[i] = exported(&t, 4 * MiB, 10 + (uint64_t)i);
		cr_assert_eq(vmm_share_keep(t.core, si[i].base, si[i].id, &kept[i], &err), VMM_OK,
			     "%s", err.msg);
		cr_expect_leq(vmm_share_kept_fds(t.core), 8, "the budget was passed");
		nkept += kept[i];
		if (!kept[i] && refused < 0)
			refused = i;
	}
	cr_expect_gt(nkept, 0);
	cr_assert_geq(refused, 0, "all 16 were kept within a budget of 8 descriptors");
	/* Beyond the budget each fetch exports anew, and still works. */
	cr_expect(fetch_and_check(&t, &si[refused], 10 + (uint64_t)refused));
	cr_expect(fetch_and_check(&t, &si[refused], 10 + (uint64_t)refused));
	cr_expect_leq(vmm_share_kept_fds(t.core), 8);
	/* Freeing the kept ones makes room: the next fetch keeps what it exports. */
	for (int i = 0; i < 16; i++)
		if (kept[i])
			cr_assert_eq(vmm_free(t.core, si[i].base, &err), VMM_OK);
	cr_expect_eq(vmm_share_kept_fds(t.core), 0);
	cr_expect(fetch_and_check(&t, &si[refused], 10 + (uint64_t)refused));
	cr_expect_not(fetch_and_check(&t, &si[refused], 10 + (uint64_t)refused),
		      "not kept although there was room");
	t_close(&t);
}

Test(heap_keep, a_group_sleep_that_may_release_closes_them_first)
{
	vmm_sleep_opts all = { .tag = NULL, .device = -1, .discard = false };
	vmm_transfer_result res;
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	uint64_t used;
	bool kept;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	si = exported(&t, 32 * MiB, 4);
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK);
	cr_assert(kept);
	used = t_dev_used(&t, 0);
	vmm_share_release_allow(t.core, true);
	cr_expect_eq(vmm_share_kept_fds(t.core), 0, "allowing the release closed them");
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK);
	cr_expect_not(kept, "kept while a group sleep may release the memory");
	cr_assert_eq(vmm_sleep(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	vmm_share_release_allow(t.core, false);
	cr_expect_leq(t_dev_used(&t, 0) + 32 * MiB, used,
		      "the driver did not get the exported memory back (%llu used, %llu before)",
		      (unsigned long long)t_dev_used(&t, 0), (unsigned long long)used);
	cr_assert_eq(vmm_wake(t.core, &all, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(si.base, 32 * MiB, 4));
	/* Awake: exported and kept again, from the new handles. */
	cr_expect(fetch_and_check(&t, &si, 4));
	cr_expect_not(fetch_and_check(&t, &si, 4));
	t_close(&t);
}

Test(heap_keep, a_forked_child_does_not_hold_them)
{
	vmm_share_info si;
	struct tctx t;
	vmm_error err;
	bool kept;
	int st, kept_fds;
	pid_t pid;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	si = exported(&t, 8 * MiB, 5);
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK);
	cr_assert(kept);
	kept_fds = (int)vmm_share_kept_fds(t.core);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		int before = open_fds();

		vmm_share_keep_after_fork(t.core);
		_exit(before - open_fds() == kept_fds && !vmm_share_kept_fds(t.core) ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child still held kept descriptors");
	cr_expect_eq((int)vmm_share_kept_fds(t.core), kept_fds, "the parent's stay");
	cr_expect_not(fetch_and_check(&t, &si, 5));
	t_close(&t);
}

/* The control server's reading thread asks without waiting: duplicates of kept descriptors at
 * once, or an error that says to ask the way that may wait, with nothing done. */
Test(heap_keep, fetch_now_gives_kept_duplicates_or_nothing)
{
	vmm_share_piece pieces[VMM_SHARE_MAX_PIECES];
	vmm_share_info si, got;
	struct devheap *dh;
	struct tctx t;
	vmm_error err;
	bool kept = false;
	size_t n = 99;
	int before;

	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	si = exported(&t, 8 * MiB + 4096, 3);
	before = open_fds();
	/* Not kept yet: nothing at once (it would have to export). */
	cr_expect_eq(vmm_share_fds_now(t.core, si.base, si.id, &got, pieces, VMM_SHARE_MAX_PIECES,
				       &n, &err), VMM_E_BUSY);
	cr_expect_eq(n, 0);
	cr_expect_eq(open_fds(), before, "nothing was exported");
	cr_assert_eq(vmm_share_keep(t.core, si.base, si.id, &kept, &err), VMM_OK, "%s", err.msg);
	cr_assert(kept);
	before = open_fds();
	/* The heap's lock held elsewhere: nothing, at once. */
	dh = heap_of_ptr(t.core, si.base);
	cr_assert(dh);
	pthread_mutex_lock(&dh->lock);
	cr_expect_eq(vmm_share_fds_now(t.core, si.base, si.id, &got, pieces, VMM_SHARE_MAX_PIECES,
				       &n, &err), VMM_E_BUSY);
	pthread_mutex_unlock(&dh->lock);
	cr_expect_eq(open_fds(), before);
	/* Free to take: one duplicate per kept piece, which hold the exported bytes. */
	cr_assert_eq(vmm_share_fds_now(t.core, si.base, si.id, &got, pieces, VMM_SHARE_MAX_PIECES,
				       &n, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(n, vmm_share_kept_fds(t.core));
	cr_expect_eq(got.base, si.base);
	cr_expect_eq(got.span_size, si.span_size);
	cr_expect_eq(open_fds() - before, (int)n);
	for (size_t i = 0; i < n; i++)
		close(pieces[i].fd);
	cr_expect_not(fetch_and_check(&t, &si, 3), "the kept descriptors were used up");
	/* Another id at that base is no export. */
	cr_expect_eq(vmm_share_fds_now(t.core, si.base, si.id + 1, &got, pieces,
				       VMM_SHARE_MAX_PIECES, &n, &err), VMM_E_NOT_OURS);
	t_close(&t);
}

/* A keep running on another thread: its status, and whether it kept. */
struct keep_run {
	struct tctx *t;
	vmm_share_info si;
	vmm_status st;
	bool kept;
	atomic_bool calling; /* set just before the keep is called */
};

static void *keep_thread(void *arg)
{
	struct keep_run *k = arg;
	vmm_error err;

	vmm_error_clear(&err);
	atomic_store(&k->calling, true);
	k->st = vmm_share_keep(k->t->core, k->si.base, k->si.id, &k->kept, &err);
	return NULL;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The export takes 1 s per piece (SIMDEV_DELAY): meanwhile the program allocates and frees,
 * and frees and trims the very allocation being exported, without waiting for it. The handles
 * stay while the export uses them; the export that lost its allocation keeps nothing, leaves no
 * descriptor open, and releases them as it ends. */
Test(heap_keep, a_free_races_the_export_ahead_without_waiting_for_it)
{
	struct keep_run k = { 0 };
	struct tctx t;
	vmm_error err;
	vmm_devptr other;
	uint64_t used;
	pthread_t thr;
	double t0, alloc_ms, free_ms;
	int before;

	setenv("SIMDEV_DELAY", "cuMemExportToShareableHandle:1000", 1);
	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	used = t_dev_used(&t, 0);
	k.t = &t;
	k.si = exported(&t, 8 * MiB, 7);
	before = open_fds();
	cr_assert_eq(pthread_create(&thr, NULL, keep_thread, &k), 0);
	/* Under load the thread may start late: wait until it calls the keep, then give it 100 ms
	 * to reach the export, well inside the export's 1 s. */
	t_wait_flag(&k.calling, "the keep thread started");
	usleep(100 * 1000);   /* the export is under way */
	t0 = now_ms();
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &other, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_free(t.core, other, &err), VMM_OK, "%s", err.msg);
	alloc_ms = now_ms() - t0;
	t0 = now_ms();
	cr_assert_eq(vmm_free(t.core, k.si.base, &err), VMM_OK, "%s", err.msg);
	/* The trim retires the freed export's blocks: its handles would go, but the export still
	 * uses them. */
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg);
	free_ms = now_ms() - t0;
	cr_expect_gt(t_stats(&t, 0, NULL).shared_bytes, 0, "released under the running export");
	pthread_join(thr, NULL);
	cr_expect_eq(t_stats(&t, 0, NULL).shared_bytes, 0,
		     "the freed export's handles were released once the export ended");
	/* Waiting for the export would take 900 ms at least (the rest of its first piece); half
	 * that leaves room for a loaded machine. */
	cr_expect_lt(alloc_ms, 450, "an allocation waited %.0f ms for the export", alloc_ms);
	cr_expect_lt(free_ms, 450, "the free and trim waited %.0f ms for the export", free_ms);
	cr_expect_eq(k.st, VMM_E_NOT_OURS, "the export lost its allocation: %s",
		     vmm_status_name(k.st));
	cr_expect_not(k.kept);
	cr_expect_eq(vmm_share_kept_fds(t.core), 0);
	cr_expect_eq(open_fds(), before, "the late export's descriptors were closed");
	cr_assert_eq(vmm_trim(t.core, 0, &err), VMM_OK, "%s", err.msg); /* the other's, cached */
	cr_expect_leq(t_dev_used(&t, 0), used, "its memory went back to the driver");
	t_close(&t);
}

/* The same export, left alone: kept as before, its fetches get duplicates. */
Test(heap_keep, an_export_ahead_without_the_lock_still_keeps)
{
	struct keep_run k = { 0 };
	struct tctx t;
	pthread_t thr;

	setenv("SIMDEV_DELAY", "cuMemExportToShareableHandle:100", 1);
	t_simdev_env("2G", NULL, NULL);
	t_open(&t, NULL);
	k.t = &t;
	k.si = exported(&t, 8 * MiB, 8);
	cr_assert_eq(pthread_create(&thr, NULL, keep_thread, &k), 0);
	pthread_join(thr, NULL);
	cr_expect_eq(k.st, VMM_OK, "%s", vmm_status_name(k.st));
	cr_expect(k.kept);
	cr_expect_not(fetch_and_check(&t, &k.si, 8), "a fetch exported again");
	t_close(&t);
}
