/* Refilling ahead (heap_refill.h): a request that cuts a freed 64 MiB handle into pieces makes
 * on its own thread only the pieces it lies on; the core's thread makes the rest, which is free
 * memory to the heap meanwhile. What a user would check: the request no longer pays for the
 * rest (simdev's cuMemCreate made slow, so that the difference is 30 pieces against 2), the rest
 * is made all the same and serves the next request, the device never holds more than without
 * refills, and a sleep, a wake or a trim with a refill pending lose nothing, nor does a child
 * forked meanwhile (simdev's memory is host memory, so a child can use what it inherits). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "mono_wait.h"

/* Every cuMemCreate waits this long: a cut of 32 pieces then takes ~1 s on its own. */
#define CREATE_MS 30
#define STRINGIFY(x) #x
#define CREATE_DELAY(ms) "cuMemCreate:" STRINGIFY(ms)

static void open_refill_slow(struct tctx *t, bool refill, const char *delay)
{
	vmm_config cfg;

	vmm_config_defaults(&cfg);
	cfg.refill_ahead = refill;
	cfg.refill_wait_ms = 200; /* the deadline test's; the others never wait that long */
	t_simdev_env("1G", NULL, NULL);
	setenv("SIMDEV_DELAY", delay, 1);
	t_open(t, &cfg);
}

static void open_refill(struct tctx *t, bool refill)
{
	open_refill_slow(t, refill, CREATE_DELAY(CREATE_MS));
}

/* A freed 128 MiB handle, then a 4 MiB request that cuts its first 64 MiB: the request's
 * address; *ms: how long the request took. */
static vmm_devptr cut_for_small(struct tctx *t, double *ms)
{
	vmm_devptr big, small;
	double t0;

	cr_assert_eq(vmm_malloc(t->core, 0, 128 * MiB, 0, NULL, &big, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t->core, big, NULL), VMM_OK);
	t0 = vmm_now_s();
	cr_assert_eq(vmm_malloc(t->core, 0, 4 * MiB, 0, NULL, &small, NULL), VMM_OK);
	*ms = (vmm_now_s() - t0) * 1e3;
	cr_assert_eq(small, big, "the request takes the freed handle's start");
	t_fill(small, 4 * MiB, 7);
	return small;
}

/* Wait (10 s at most) until the heap created n handles in all. */
static bool created_reaches(struct tctx *t, uint64_t n)
{
	for (int i = 0; i < 1000; i++) {
		if (t_stats(t, 0, NULL).handles_created >= n)
			return true;
		nanosleep(&(struct timespec){ 0, 10 * 1000000 }, NULL);
	}
	return false;
}

Test(heap_refill, the_request_makes_only_its_pieces_and_the_rest_follows)
{
	struct tctx t;
	vmm_devptr small, next;
	double ms;

	open_refill(&t, true);
	t_dev_peak_reset();
	small = cut_for_small(&t, &ms);
	/* 2 handles of 64 MiB, then 2 pieces: ~4 creates here, not 34. */
	cr_expect_lt(ms, 16 * CREATE_MS, "the 4 MiB request took %.0f ms", ms);
	/* 1 + 2 + 32: the other 30 pieces made on the core's thread. */
	cr_assert(created_reaches(&t, 1 + 2 + 32), "the rest was never made: %llu handles",
		  (unsigned long long)t_stats(&t, 0, NULL).handles_created);
	cr_assert_eq(t_handles_over(small, 64 * MiB), 32, "the first 64 MiB is pieces");
	cr_assert_eq(t_dev_used(&t, 0), 128 * MiB, "the rest came back as it was");
	/* The next request lies on the rest. */
	cr_assert_eq(vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL), VMM_OK);
	cr_assert_eq(next, small + 4 * MiB);
	t_fill(next, 60 * MiB, 8);
	cr_assert(t_check(small, 4 * MiB, 7) && t_check(next, 60 * MiB, 8));
	cr_assert_leq(t_dev_peak(), 128 * MiB, "never more than the freed handle held");
	t_close(&t);
}

Test(heap_refill, without_it_the_request_makes_every_piece)
{
	struct tctx t;
	double ms;

	/* The same cut without refills: what the test above would measure if they did nothing. */
	open_refill(&t, false);
	cut_for_small(&t, &ms);
	cr_expect_geq(ms, 30 * CREATE_MS, "the 4 MiB request took %.0f ms", ms);
	cr_assert_eq(t_stats(&t, 0, NULL).handles_created, 1 + 2 + 32);
	t_close(&t);
}

Test(heap_refill, a_request_on_the_pending_rest_makes_it_first)
{
	struct tctx t;
	vmm_devptr small, next;
	double ms;

	open_refill(&t, true);
	small = cut_for_small(&t, &ms);
	/* At once, while the core's thread is still making the rest (~0.9 s). */
	cr_assert_eq(vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL), VMM_OK);
	cr_assert_eq(next, small + 4 * MiB, "placed as without refills");
	t_fill(next, 60 * MiB, 9);
	cr_assert(t_check(next, 60 * MiB, 9) && t_check(small, 4 * MiB, 7));
	cr_assert_eq(t_handles_over(small, 64 * MiB), 32);
	cr_assert_eq(t_dev_used(&t, 0), 128 * MiB);
	t_close(&t);
}

Test(heap_refill, sleep_wake_and_trim_with_a_refill_pending_lose_nothing)
{
	struct tctx t;
	vmm_devptr small;
	double ms;

	open_refill(&t, true);
	small = cut_for_small(&t, &ms);
	t_sleep(&t, false);
	t_wake(&t);
	cr_assert(t_check(small, 4 * MiB, 7), "contents after the wake");
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_dev_used(&t, 0), 4 * MiB, "only the allocation's pieces are left");
	cr_assert(t_check(small, 4 * MiB, 7));
	t_close(&t);
}

Test(heap_refill, a_child_forked_with_a_refill_pending_never_gets_unbacked_memory)
{
	struct tctx t;
	vmm_devptr small;
	double ms;
	pid_t pid;
	int status;

	open_refill(&t, true);
	small = cut_for_small(&t, &ms);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		vmm_devptr next;

		vmm_core_after_fork(t.core);
		/* Where the rest was queued the child has no memory: the request must land on
		 * memory it has, or fail, never on the unmade rest. */
		if (vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL) == VMM_OK) {
			if (next >= small + 4 * MiB && next < small + 64 * MiB &&
			    t_handles_over(next, 2 * MiB) == 0)
				_exit(2);
			t_fill(next, 60 * MiB, 10);
			_exit(t_check(next, 60 * MiB, 10) && t_check(small, 4 * MiB, 7) ? 0 : 3);
		}
		_exit(t_check(small, 4 * MiB, 7) ? 0 : 3);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "the child died of signal %d", WTERMSIG(status));
	cr_assert_eq(WEXITSTATUS(status), 0, "the child's check %d failed", WEXITSTATUS(status));
	/* The parent's own refill goes on. */
	cr_assert(created_reaches(&t, 1 + 2 + 32));
	t_close(&t);
}

Test(heap_refill, a_refill_stuck_in_the_driver_is_left_out_and_released_later)
{
	struct tctx t;
	vmm_devptr small, next;
	double ms, t0;

	/* Every map takes 300 ms: the thread's piece in hand outlasts the 200 ms a request waits
	 * for it (refill_wait_ms). */
	open_refill_slow(&t, true, "cuMemMap:300");
	small = cut_for_small(&t, &ms);
	t0 = vmm_now_s();
	cr_assert_eq(vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL), VMM_OK);
	cr_expect_lt(vmm_now_s() - t0, 10.0, "the request waited past its deadlines");
	t_fill(next, 60 * MiB, 11);
	/* The thread lets go of the driver within 0.3 s; what it made goes back then. */
	nanosleep(&(struct timespec){ 1, 0 }, NULL);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert(t_check(next, 60 * MiB, 11) && t_check(small, 4 * MiB, 7));
	cr_assert_eq(t_dev_used(&t, 0), 64 * MiB, "only the two allocations' memory is left: %llu",
		     (unsigned long long)t_dev_used(&t, 0));
	t_close(&t);
}

/* A cut with its rest refilled, then a request on the rest, a free of everything and a trim,
 * with SIMDEV_FAIL set by the parent: every step either works or fails cleanly, what was
 * written stays written, and nothing is left on the device. Exit 0, or the failed check. */
static int refill_under_a_fault(void)
{
	vmm_config cfg;
	struct tctx t;
	vmm_devptr big, small, next = 0;

	vmm_config_defaults(&cfg);
	cfg.refill_ahead = true;
	if (t_try_open(&t, &cfg, NULL))
		return 0; /* the fault hit the opening: nothing was made */
	if (vmm_malloc(t.core, 0, 128 * MiB, 0, NULL, &big, NULL) == VMM_OK)
		vmm_free(t.core, big, NULL);
	if (vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &small, NULL) == VMM_OK)
		t_fill(small, 4 * MiB, 12);
	else
		small = 0;
	if (vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL) == VMM_OK)
		t_fill(next, 60 * MiB, 13);
	else
		next = 0;
	if ((small && !t_check(small, 4 * MiB, 12)) || (next && !t_check(next, 60 * MiB, 13)))
		return 2;
	if (small)
		vmm_free(t.core, small, NULL);
	if (next)
		vmm_free(t.core, next, NULL);
	vmm_trim(t.core, 0, NULL);
	t_close(&t);
	return 0;
}

Test(heap_refill, every_failed_driver_call_leaves_contents_and_no_memory_behind)
{
	static const char *const calls[] = { "cuMemCreate", "cuMemMap", "cuMemSetAccess",
					     "cuMemUnmap", "cuMemRelease" };
	int cases = 0;

	t_simdev_env("1G", NULL, NULL);
	for (size_t c = 0; c < sizeof(calls) / sizeof(*calls); c++) {
		for (int k = 1; k <= 40; k += c ? 3 : 1) {
			char fail[64], memory[] = "SIMDEV_MEMORY=1G";
			const char *env[] = { fail, memory, NULL };
			long long live = -1;
			int rc;

			snprintf(fail, sizeof(fail), "SIMDEV_FAIL=%s:%d", calls[c], k);
			rc = t_run_child(refill_under_a_fault, env, &live);
			cr_assert_eq(rc, 0, "%s: the child ended with %d", fail, rc);
			cr_assert_eq(live, 0, "%s: %lld device bytes left at exit", fail, live);
			cases++;
		}
	}
	cr_assert_geq(cases, 40);
}

/* A request placed on the range the core's thread is making stops it after its piece in hand;
 * here the driver refuses that piece's grant (SIMDEV_DELAY holds the thread in it). The piece
 * leaves the free memory, which splits the free block the request had found: the request must
 * look again, and be placed on memory the heap holds. Exit 0, or the failed check. */
static int request_on_a_refill_whose_grant_fails(void)
{
	vmm_config cfg;
	struct tctx t;
	vmm_devptr big, small, next;

	vmm_config_defaults(&cfg);
	cfg.refill_ahead = true;
	if (t_try_open(&t, &cfg, NULL))
		return 2;
	if (vmm_malloc(t.core, 0, 128 * MiB, 0, NULL, &big, NULL) ||
	    vmm_free(t.core, big, NULL) ||
	    vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &small, NULL))
		return 3;
	t_fill(small, 4 * MiB, 14);
	/* The thread gives way while the program is in the heap, then takes ~1 ms to start its
	 * first piece: 30 ms on, it is inside that piece's grant, which takes 100 ms. */
	nanosleep(&(struct timespec){ 0, 30 * 1000000 }, NULL);
	if (vmm_malloc(t.core, 0, 60 * MiB, 0, NULL, &next, NULL))
		return 4;
	if (!t_mapped(next, 60 * MiB))
		return 5;
	t_fill(next, 60 * MiB, 15);
	if (!t_check(small, 4 * MiB, 14) || !t_check(next, 60 * MiB, 15))
		return 6;
	if (t_stats(&t, 0, NULL).live_bytes != 64 * MiB)
		return 7;
	vmm_free(t.core, small, NULL);
	vmm_free(t.core, next, NULL);
	vmm_trim(t.core, 0, NULL);
	t_close(&t);
	return 0;
}

Test(heap_refill, a_request_on_a_refill_whose_grant_fails_is_placed_on_memory)
{
	/* The 4th grant is the thread's first piece: the growth's and the cut's come before it.
	 * Every grant takes 100 ms, so the request arrives while the thread is in it. */
	const char *env[] = { "SIMDEV_FAIL=cuMemSetAccess:4", "SIMDEV_DELAY=cuMemSetAccess:100",
			      "SIMDEV_MEMORY=1G", NULL };

	for (int round = 0; round < 3; round++) {
		long long live = -1;
		int rc = t_run_child(request_on_a_refill_whose_grant_fails, env, &live);

		cr_assert_eq(rc, 0, "round %d: the child's check %d failed", round, rc);
		cr_assert_eq(live, 0, "round %d: %lld device bytes left at exit", round, live);
	}
}
