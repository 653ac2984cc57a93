/* The heap reuses freed memory without a device synchronization when no device work was
 * submitted since its last one began (heap_records.c), and synchronizes whenever some was: a
 * kernel still writing to a freed block must never reach the allocation that reuses it. The
 * backend's count is simdev's (simdev_submissions), as the shim gives it its own. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "helpers.h"
#include "simdev.h"
#include "counted_heap.h"
#include "slow_writer.h"

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)
#define BIG (64 * MiB)

static CUstream stream;

static void open_counted(struct tctx *t)
{
	stream = t_open_counted(t, NULL);
}

static void launch(struct writer *w)
{
	t_launch_writer(stream, w);
}

static vmm_devptr big(struct tctx *t)
{
	vmm_devptr p;
	vmm_error err;

	cr_assert_eq(vmm_malloc(t->core, 0, BIG, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	return p;
}

static void drop(struct tctx *t, vmm_devptr p)
{
	vmm_error err;

	cr_assert_eq(vmm_free(t->core, p, &err), VMM_OK, "%s", err.msg);
}

/* Twenty 64 MiB pairs with no device work: one synchronization in all (the first reuse), the
 * same memory each time, nothing new made after the first pair. */
Test(idle_sync, pairs_without_work_synchronize_once)
{
	struct tctx t;
	vmm_devptr first = 0;
	uint64_t made = 0;

	open_counted(&t);
	for (int i = 0; i < 20; i++) {
		vmm_devptr p = big(&t);

		if (!i)
			first = p;
		cr_assert_eq(p, first, "pair %d got 0x%llx, not the freed 0x%llx", i,
			     (unsigned long long)p, (unsigned long long)first);
		t_fill(p, BIG, (uint64_t)i);
		cr_assert(t_check(p, BIG, (uint64_t)i));
		drop(&t, p);
		if (!i)
			made = t_stats(&t, 0, NULL).handles_created;
	}
	vmm_stats st = t_stats(&t, 0, NULL);
	cr_expect_eq(st.syncs, 1, "%llu synchronizations for 20 idle pairs",
		     (unsigned long long)st.syncs);
	cr_expect_eq(st.syncs_skipped, 18);
	cr_expect_eq(st.handles_created, made, "memory was made after the first pair");
	t_close(&t);
}

/* Without a count (a backend nobody counts for) every reuse synchronizes, as before. */
Test(idle_sync, pairs_without_a_count_synchronize_each_time)
{
	struct tctx t;

	open_counted(&t);
	t.be->submitted = NULL;
	for (int i = 0; i < 10; i++)
		drop(&t, big(&t));
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 9);
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 0);
	t_close(&t);
}

/* A kernel writes a block, which is freed while the kernel still runs: the next allocation that
 * reuses it synchronizes first, so what its owner writes stays. The reuse after that, with no
 * kernel between, does not. */
Test(idle_sync, a_kernel_before_the_free_is_waited_for)
{
	struct tctx t;

	open_counted(&t);
	drop(&t, big(&t));
	drop(&t, big(&t)); /* the first synchronization: the count is known from here */
	for (int i = 0; i < 4; i++) {
		vmm_devptr p = big(&t), q;
		struct writer w = { .ptr = (void *)(uintptr_t)p, .size = BIG, .value = 0x5a, .ms = 80 };

		launch(&w);
		drop(&t, p);
		/* What status shows while the kernel may still write there. */
		cr_expect_eq(t_stats(&t, 0, NULL).quarantined_bytes, BIG,
			     "the freed block is not counted as waiting for a synchronization");
		q = big(&t);
		cr_assert_eq(q, p, "the freed block was not reused");
		cr_expect_eq(t_stats(&t, 0, NULL).quarantined_bytes, 0);
		t_fill(q, BIG, 7 + (uint64_t)i);
		CU_OK(cuStreamSynchronize(stream));
		cr_assert(atomic_load(&w.done));
		cr_assert(t_check(q, BIG, 7 + (uint64_t)i),
			  "a kernel issued before the free wrote into the memory reused after it");
		drop(&t, q);
	}
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 1 + 4, "one per kernel");
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 4, "none where no kernel ran");
	t_close(&t);
}

/* The backend's synchronize, with a kernel launched just before it begins or just after it
 * drained the device (as another thread's launch lands while the heap synchronizes). */
static vmm_status (*real_sync)(vmm_backend *be, int dev, vmm_error *err);
static struct writer *launch_before, *launch_after;

static vmm_status sync_with_launch(vmm_backend *be, int dev, vmm_error *err)
{
	vmm_status st;

	if (launch_before)
		launch(launch_before);
	launch_before = NULL;
	st = real_sync(be, dev, err);
	if (launch_after)
		launch(launch_after);
	launch_after = NULL;
	return st;
}

static void wrap_sync(struct tctx *t)
{
	real_sync = t->be->synchronize;
	t->be->synchronize = sync_with_launch;
}

/* A kernel launched after the synchronization drained the device but before the heap reclaimed
 * (its count is after the one the heap read first) writes a block that is then freed: the next
 * reuse must synchronize again. Read after the synchronization, the count would already hold
 * the launch, the reuse would skip, and the kernel would write into the new allocation. */
Test(idle_sync, a_launch_during_the_synchronization_is_not_taken_as_drained)
{
	struct tctx t;
	vmm_devptr x, b, c;

	open_counted(&t);
	wrap_sync(&t);
	x = big(&t);
	drop(&t, big(&t));
	struct writer w = { .ptr = (void *)(uintptr_t)x, .size = BIG, .value = 0x6b, .ms = 300 };

	launch_after = &w;
	b = big(&t); /* reuses the freed block: a synchronization, then the launch */
	cr_assert_null(launch_after, "the reuse did not synchronize");
	drop(&t, x);
	c = big(&t);
	cr_assert_eq(c, x, "the freed block was not reused");
	t_fill(c, BIG, 99);
	CU_OK(cuStreamSynchronize(stream));
	cr_assert(t_check(c, BIG, 99),
		  "a kernel launched during the synchronization wrote into the reused memory");
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 2);
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 0);
	drop(&t, b);
	drop(&t, c);
	t_close(&t);
}

/* A kernel launched between the heap's read of the count and its synchronization is drained by
 * it, but the count moved past what the heap read: the next reuse synchronizes (never trusts a
 * count that may hold work the synchronization did not see). */
Test(idle_sync, a_launch_between_the_read_and_the_synchronization_is_counted)
{
	struct tctx t;
	struct writer w = { .size = 4096, .value = 1, .ms = 1 };
	static char target[4096];

	w.ptr = target;
	open_counted(&t);
	wrap_sync(&t);
	drop(&t, big(&t));
	launch_before = &w;
	drop(&t, big(&t));
	cr_assert_null(launch_before, "the reuse did not synchronize");
	drop(&t, big(&t));
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 2);
	drop(&t, big(&t));
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 2, "no work since: no synchronization");
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 1);
	t_close(&t);
}

/* A failed synchronization (as during stream capture) forgets the count: with no work since,
 * the next reuse still synchronizes rather than trust the failed one. */
static vmm_status failing_sync(vmm_backend *be, int dev, vmm_error *err)
{
	(void)be;
	(void)dev;
	return vmm_fail(err, VMM_E_DRIVER, 900, "capture in progress (injected)");
}

Test(idle_sync, a_failed_synchronization_is_not_trusted)
{
	struct tctx t;
	vmm_status (*sync)(vmm_backend *be, int dev, vmm_error *err);

	open_counted(&t);
	drop(&t, big(&t));
	drop(&t, big(&t)); /* one sync: the count is known */
	sync = t.be->synchronize;
	t.be->synchronize = failing_sync;
	drop(&t, big(&t)); /* no work: skipped, never asks the driver */
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 1);
	struct writer w = { .size = 4096, .value = 1, .ms = 1 };
	static char target[4096];

	w.ptr = target;
	launch(&w);
	CU_OK(cuStreamSynchronize(stream));
	drop(&t, big(&t)); /* work since: the sync fails, the heap takes fresh memory */
	t.be->synchronize = sync;
	drop(&t, big(&t)); /* no work since the failure, yet it synchronizes */
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 2);
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_skipped, 1);
	t_close(&t);
}

/* A sleep drains the device only where work may still run: after a synchronization with no
 * submission since, it does not ask the driver (the gate holds new work; the sleep's copy then
 * reads what the program wrote), and after a kernel it does, so the kernel's writes go to the
 * host copy and come back at the wake. The count is the program's alone, as the shim's is:
 * simdev's would also count the sleep's and wake's own copies. */
static int syncs_asked;
static atomic_ullong program_submissions;

static uint64_t program_count(vmm_backend *be)
{
	(void)be;
	return atomic_load(&program_submissions);
}

static vmm_status counting_sync(vmm_backend *be, int dev, vmm_error *err)
{
	syncs_asked++;
	return real_sync(be, dev, err);
}

static void sleep_and_wake(struct tctx *t)
{
	t_sleep(t, false);
	t_wake(t);
}

Test(idle_sync, a_sleep_drains_only_where_work_was_submitted_since_a_synchronization)
{
	struct tctx t;
	vmm_devptr p;

	open_counted(&t);
	t.be->submitted = program_count;
	real_sync = t.be->synchronize;
	t.be->synchronize = counting_sync;
	p = big(&t);
	drop(&t, big(&t));
	t_fill(p, BIG, 3);
	sleep_and_wake(&t); /* the count is not known yet: it drains */
	cr_expect_eq(syncs_asked, 1, "the first sleep asked for %d synchronizations", syncs_asked);
	sleep_and_wake(&t);
	cr_expect_eq(syncs_asked, 1, "a sleep with no work since the last drain drained again");
	cr_assert(t_check(p, BIG, 3), "contents changed across idle sleeps");

	struct writer w = { .ptr = (void *)(uintptr_t)p, .size = BIG, .value = 0x5a, .ms = 80 };

	launch(&w);
	atomic_fetch_add(&program_submissions, 1); /* counted once the driver has it */
	sleep_and_wake(&t);
	cr_expect_eq(syncs_asked, 2, "a sleep after a kernel did not drain");
	cr_assert(atomic_load(&w.done), "the sleep copied while the kernel still ran");
	cr_assert_eq(atomic_load(&w.fault), 0, "the kernel ran into released memory");
	for (size_t i = 0; i < BIG; i += 4096)
		cr_assert_eq(((const unsigned char *)(uintptr_t)p)[i], 0x5a,
			     "byte %zu: the kernel's writes did not survive the sleep", i);
	drop(&t, p);
	t_close(&t);
}
