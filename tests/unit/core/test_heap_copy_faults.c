/* A synchronize that fails while the sleep's or wake's copies are still running. simdev's
 * injected failure returns at once (SIMDEV_FAIL), and SIMDEV_COPY_DELAY keeps every copy on its
 * stream for a while, so the unwind that follows the failure meets copies in flight: it must not
 * unmap or release device memory, nor free host memory, that they still touch. A failed sleep
 * leaves the heap awake with its contents, a failed wake leaves it asleep and a later wake brings
 * everything back; the program never faults and nothing leaks (memory kept mapped because its
 * copies could not be confirmed finished is given back by the next wake). One child process per
 * case. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "heap_offload.h"

#define N 6
/* Two 2 MiB pieces each: every case meets the same synchronizations as at 8 MiB (72 checked, 8
 * with parked memory) in half the time, which went to first touches of simdev's pages. */
#define SIZE (4 * MiB)
/* The scenario's exit code when it passed and a failed wake had parked memory. */
#define PASSED_PARKED 10

static bool parked;

static int say(const char *what)
{
	fprintf(stderr, "copy-fault scenario: %s\n", what);
	return 1;
}

static int contents_ok(vmm_devptr *p)
{
	for (int i = 0; i < N; i++)
		if (!t_check(p[i], SIZE, (uint64_t)i + 7))
			return say("contents lost");
	return 0;
}

static int scenario(void)
{
	vmm_sleep_opts o = { .tag = NULL, .device = -1 };
	vmm_devptr p[N];
	struct tctx t;
	vmm_error err;

	if (t_try_open(&t, NULL, &err))
		return say("open failed");
	for (int i = 0; i < N; i++) {
		if (vmm_malloc(t.core, 0, SIZE, 0, NULL, &p[i], &err))
			return say("malloc failed");
		t_fill(p[i], SIZE, (uint64_t)i + 7);
	}
	for (int round = 0; round < 2; round++) {
		if (vmm_sleep(t.core, &o, NULL, &err)) {
			if (vmm_is_asleep(t.core, 0, NULL))
				return say("a failed sleep left the heap asleep");
			if (contents_ok(p))
				return 1;
			continue;
		}
		for (int k = 0; vmm_wake(t.core, &o, NULL, &err); k++) {
			if (k == 3 || !vmm_is_asleep(t.core, 0, NULL))
				return say("wake does not recover");
			parked |= t_stats(&t, 0, NULL).release_pending_bytes > 0;
		}
		if (contents_ok(p))
			return 1;
	}
	for (int i = 0; i < N; i++)
		vmm_free(t.core, p[i], NULL);
	vmm_trim(t.core, -1, NULL);
	t_close(&t);
	return parked ? PASSED_PARKED : 0;
}

/* Each synchronize of two sleep/wake cycles fails in turn: alone, with its retry, and with
 * every retry. */
Test(heap_copy_faults, a_failed_synchronize_with_copies_in_flight_loses_nothing, .timeout = 240)
{
	char fail[96] = "SIMDEV_FAIL=";
	const char *env[] = { "SIMDEV_MEMORY=256M", "SIMDEV_COPY_DELAY=5", NULL, NULL };
	int cases = 0, parked_cases = 0;
	long long live;

	cr_assert_eq(t_run_child(scenario, env, &live), 0, "the scenario passes without faults");
	cr_assert_eq(live, 0);
	env[2] = fail;
	for (int k = 1; k <= 24; k++) {
		for (int times = 1; times <= 3; times++) {
			int rc, n = (int)strlen("SIMDEV_FAIL=");

			/* Three in a row: every attempt at one stream fails, the engine is unsettled
			 * and what the wake mapped stays parked until the next wake. */
			for (int i = 0; i < times; i++)
				n += snprintf(fail + n, sizeof(fail) - (size_t)n, "%scuStreamSynchronize:%d",
					      i ? "," : "", k + i);
			rc = t_run_child(scenario, env, &live);
			if (rc == PASSED_PARKED) {
				parked_cases++;
				rc = 0;
			}
			cr_expect_eq(rc, 0, "%s: the scenario failed (%d)", fail, rc);
			cr_expect_eq(live, 0, "%s: %lld device bytes leaked", fail, live);
			cases++;
		}
	}
	cr_expect_gt(parked_cases, 0, "some case left a failed wake's memory parked");
	cr_log_info("%d injected failures checked, %d parked memory", cases, parked_cases);
}
