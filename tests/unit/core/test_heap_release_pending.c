/* A handle the driver would not take back (cuMemRelease failing twice in a row, SIMDEV_FAIL) is
 * not forgotten: the heap keeps it, shows its bytes as release_pending, and the next give-back of
 * the device (a trim, a sleep, a wake, the teardown) releases it, so the driver's use comes back to what
 * the heap maps. No cuMemRelease happens before the give-back under test: the setup only grows. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "heap_offload.h"

#define FAIL_FIRST_TWO_RELEASES "cuMemRelease:1,cuMemRelease:2"

/* Tag t0: one live allocation and one wholly free (cached) handle; the default tag: another live
 * allocation. Returns t0's cached bytes: what its discard sleep gives back without a copy. */
static uint64_t setup(struct tctx *t, vmm_devptr *a, vmm_devptr *b)
{
	vmm_config cfg = { .cache_limit = SIZE_MAX };
	vmm_devptr spare;
	uint64_t cached;

	t_simdev_env("256M", NULL, FAIL_FIRST_TWO_RELEASES);
	t_open(t, &cfg);
	cr_assert_eq(vmm_malloc(t->core, 0, 2 * MiB, 0, "t0", a, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, 2 * MiB, 0, "t0", &spare, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, 4 * MiB, 0, NULL, b, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t->core, spare, NULL), VMM_OK);
	cached = t_stats(t, 0, "t0").cached_bytes;
	cr_assert_gt(cached, 0, "t0 keeps a wholly free handle");
	cr_assert_eq(t_stats(t, 0, NULL).release_pending_bytes, 0);
	return cached;
}

/* The discard sleep of t0, whose free handle's release fails twice: it succeeds as without the
 * fault, and the refused bytes show as pending while the driver still holds them. */
static uint64_t sleep_t0_with_refusal(struct tctx *t)
{
	static const vmm_sleep_opts t0 = { .tag = "t0", .device = -1, .discard = true };
	uint64_t t0_mapped = t_stats(t, 0, "t0").mapped_bytes;
	vmm_transfer_result res = { 0 };
	vmm_error err;
	vmm_stats s;

	cr_assert_eq(vmm_sleep(t->core, &t0, &res, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(res.bytes_released, t0_mapped, "the sleep reports what it gave up, as before");
	cr_expect(vmm_is_asleep(t->core, 0, "t0"));
	s = t_stats(t, 0, NULL);
	cr_expect_eq(t_dev_used(t, 0), s.mapped_bytes + s.release_pending_bytes,
		     "the driver still holds the refused handle");
	return s.release_pending_bytes;
}

static void expect_given_back(struct tctx *t, const char *by)
{
	vmm_stats s = t_stats(t, 0, NULL);

	cr_expect_eq(s.release_pending_bytes, 0, "%s releases the parked handle", by);
	cr_expect_eq(t_dev_used(t, 0), s.mapped_bytes, "after %s the driver holds what is mapped",
		     by);
}

Test(heap_release_pending, a_trim_releases_what_a_sleep_could_not)
{
	struct tctx t;
	vmm_devptr a, b;
	uint64_t cached = setup(&t, &a, &b);

	cr_expect_eq(sleep_t0_with_refusal(&t), cached);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	expect_given_back(&t, "the trim");
	t_fill(b, 4 * MiB, 7);
	cr_expect(t_check(b, 4 * MiB, 7), "the default tag's memory is still usable");
	vmm_free(t.core, b, NULL);
	t_close(&t);
}

Test(heap_release_pending, the_next_sleep_releases_what_a_sleep_could_not)
{
	static const vmm_sleep_opts rest = { .device = -1, .discard = true };
	struct tctx t;
	vmm_devptr a, b;
	uint64_t cached = setup(&t, &a, &b);
	vmm_error err;

	cr_expect_eq(sleep_t0_with_refusal(&t), cached);
	cr_assert_eq(vmm_sleep(t.core, &rest, NULL, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "the next sleep");
	cr_expect_eq(t_dev_used(&t, 0), 0, "everything asleep, nothing on the device");
	t_close(&t);
}

Test(heap_release_pending, a_wake_releases_what_a_sleep_could_not)
{
	static const vmm_sleep_opts t0 = { .tag = "t0", .device = -1 };
	struct tctx t;
	vmm_devptr a, b;
	uint64_t cached = setup(&t, &a, &b);
	vmm_error err;

	cr_expect_eq(sleep_t0_with_refusal(&t), cached);
	cr_assert_eq(vmm_wake(t.core, &t0, NULL, &err), VMM_OK, "%s", err.msg);
	expect_given_back(&t, "the wake");
	t_fill(a, 2 * MiB, 9);
	cr_expect(t_check(a, 2 * MiB, 9), "t0's allocation is usable after the wake");
	t_close(&t);
}

/* The child: park a handle through a trim, check it shows, tear down. Exit codes say what went
 * wrong; simdev writes its live bytes to SIMDEV_STATS at exit. */
static int teardown_child(void)
{
	struct tctx t;
	vmm_devptr p;
	vmm_error err;
	uint64_t held;

	t_simdev_env("256M", NULL, FAIL_FIRST_TWO_RELEASES);
	if (t_try_open(&t, NULL, &err) || vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &p, &err) ||
	    vmm_free(t.core, p, &err))
		return 2;
	held = t_stats(&t, 0, NULL).mapped_bytes;
	if (!held || vmm_trim(t.core, 0, &err))
		return 2;
	if (t_stats(&t, 0, NULL).release_pending_bytes != held || t_dev_used(&t, 0) != held) {
		fprintf(stderr, "held %llu, pending %llu, the driver holds %llu\n",
			(unsigned long long)held,
			(unsigned long long)t_stats(&t, 0, NULL).release_pending_bytes,
			(unsigned long long)t_dev_used(&t, 0));
		return 3; /* the refused handle is not shown as pending, or not held */
	}
	t_close(&t);
	return 0;
}

Test(heap_release_pending, teardown_releases_a_parked_handle)
{
	long long live;
	int rc = t_run_child(teardown_child, NULL, &live);

	cr_assert(rc < 128, "the child died (signal %d)", rc - 128);
	cr_assert_eq(rc, 0, "the child's check %d failed", rc);
	cr_expect_eq(live, 0, "the driver holds nothing at exit");
}

/* Growth that finds the driver out of memory tries the parked handle again before it fails:
 * the device's whole capacity is usable once the driver takes it back. */
Test(heap_release_pending, an_allocation_short_of_memory_takes_back_a_parked_handle)
{
	vmm_config cfg = { .cache_limit = SIZE_MAX };
	struct tctx t;
	vmm_devptr p, all;
	vmm_error err;
	uint64_t total;

	t_simdev_env("16M", NULL, FAIL_FIRST_TWO_RELEASES);
	t_open(&t, &cfg);
	total = t_dev_total(&t, 0);
	cr_assert_eq(vmm_malloc(t.core, 0, 2 * MiB, 0, NULL, &p, NULL), VMM_OK);
	cr_assert_eq(vmm_free(t.core, p, NULL), VMM_OK);
	cr_assert_eq(vmm_trim(t.core, 0, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).release_pending_bytes, 2 * MiB, "the handle is parked");
	cr_assert_eq(vmm_malloc(t.core, 0, total, 0, NULL, &all, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(t_stats(&t, 0, NULL).release_pending_bytes, 0);
	cr_expect_eq(t_dev_used(&t, 0), total);
	t_fill(all, total, 3);
	cr_expect(t_check(all, total, 3));
	vmm_free(t.core, all, NULL);
	t_close(&t);
}
