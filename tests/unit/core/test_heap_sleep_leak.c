/* A sleep leaves nothing of what it sleeps on the device, also after failed sleeps and wakes.
 * Tag t0 holds a live allocation and a wholly free (cached) handle, the default tag another live
 * allocation; t0 is slept, woken and slept again, then the whole program, then it is woken, with
 * one driver call made to fail in turn (SIMDEV_FAIL, one child process per case). A sleep or wake
 * may fail and roll back; what a user checks must hold: a tag that reads asleep maps nothing, the
 * heap's mapped bytes equal the driver's, a whole sleep that succeeds leaves the device empty, and
 * the wake brings every byte back at its address. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "heap_offload.h"

/* The child's exit status when a fault hit the setup: the sleeps were not tried. */
#define NOT_REACHED 2

static const vmm_sleep_opts tag_t0 = { .tag = "t0", .device = -1 };
static const vmm_sleep_opts everything = { .device = -1 };

static int bad(const char *what, const char *step)
{
	fprintf(stderr, "%s: %s\n", step, what);
	return 1;
}

/* What must hold after every step, whether it succeeded or not. */
static int check(struct tctx *t, const char *step)
{
	uint64_t mapped = t_stats(t, 0, NULL).mapped_bytes, used = t_dev_used(t, 0);

	if (mapped != used) {
		fprintf(stderr, "%s: the heap maps %llu bytes, the driver holds %llu\n", step,
			(unsigned long long)mapped, (unsigned long long)used);
		return 1;
	}
	if (vmm_is_asleep(t->core, 0, "t0") && t_stats(t, 0, "t0").mapped_bytes)
		return bad("tag t0 reads asleep, yet maps memory", step);
	return 0;
}

/* A step that may fail under an injected fault; one-shot faults are gone after two tries. */
static vmm_status step(struct tctx *t, bool sleeping, const vmm_sleep_opts *o, int tries)
{
	vmm_status st = VMM_E_BUSY;
	vmm_error err;

	for (int k = 0; k < tries && st && st != VMM_E_ALREADY; k++)
		st = sleeping ? vmm_sleep(t->core, o, NULL, &err) : vmm_wake(t->core, o, NULL, &err);
	return st == VMM_E_ALREADY ? VMM_OK : st;
}

static int scenario(void)
{
	vmm_config cfg = { .cache_limit = SIZE_MAX };
	vmm_devptr a, b, spare;
	struct tctx t;
	vmm_error err;

	if (t_try_open(&t, &cfg, &err) ||
	    vmm_malloc(t.core, 0, 2 * MiB, 0, "t0", &a, &err) ||
	    vmm_malloc(t.core, 0, 2 * MiB, 0, "t0", &spare, &err) ||
	    vmm_malloc(t.core, 0, 8 * MiB, 0, NULL, &b, &err))
		return NOT_REACHED; /* an injected failure before the sleeps */
	t_fill(a, 2 * MiB, 1);
	t_fill(b, 8 * MiB, 2);
	/* Its handle stays cached, wholly free: the sleep gives it back without a copy. */
	vmm_free(t.core, spare, NULL);
	step(&t, true, &tag_t0, 1);
	if (check(&t, "sleep t0"))
		return 1;
	step(&t, false, &tag_t0, 1);
	if (check(&t, "wake t0"))
		return 1;
	step(&t, true, &tag_t0, 1);
	if (check(&t, "sleep t0 again"))
		return 1;
	if (step(&t, true, &everything, 3))
		return bad("a whole sleep does not succeed", "sleep all");
	if (check(&t, "sleep all"))
		return 1;
	if (t_dev_used(&t, 0))
		return bad("asleep, yet memory stays on the device", "sleep all");
	if (step(&t, false, &everything, 3))
		return bad("the wake does not succeed", "wake all");
	if (check(&t, "wake all"))
		return 1;
	if (!t_check(a, 2 * MiB, 1) || !t_check(b, 8 * MiB, 2))
		return bad("contents lost", "wake all");
	vmm_free(t.core, a, NULL);
	vmm_free(t.core, b, NULL);
	t_close(&t);
	return 0;
}

static int run_child(const char *fail)
{
	pid_t pid = fork();
	int status;

	if (pid == 0) {
		setenv("SIMDEV_MEMORY", "128M", 1);
		if (fail)
			setenv("SIMDEV_FAIL", fail, 1);
		else
			unsetenv("SIMDEV_FAIL");
		_exit(scenario());
	}
	cr_assert_gt(pid, 0);
	waitpid(pid, &status, 0);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

Test(heap_sleep_leak, a_free_handle_that_will_not_unmap_is_not_left_asleep_on_the_device)
{
	/* The first unmap is the free handle's, in the first sleep of t0: once (a retry gets it
	 * back), twice (that sleep fails and t0 stays awake), in the copy of live data too. */
	static const char *fails[] = { NULL, "cuMemUnmap:1", "cuMemUnmap:1,cuMemUnmap:2",
				       "cuMemUnmap:1,cuMemUnmap:2,cuMemUnmap:3" };

	/* The setup unmaps nothing: every case must reach the sleeps. */
	for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++)
		cr_expect_eq(run_child(fails[i]), 0, "SIMDEV_FAIL=%s", fails[i] ? fails[i] : "");
}

Test(heap_sleep_leak, any_call_of_tag_sleeps_and_wakes_may_fail_before_a_whole_sleep,
     .timeout = 120)
{
	enum { CASES = 10 };
	static const char *names[] = { "cuMemUnmap", "cuMemRelease", "cuMemcpyDtoHAsync",
				       "cuMemCreate", "cuMemMap", "cuMemSetAccess" };

	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		int reached = 0;

		for (int k = 1; k <= CASES; k++) {
			char fail[64];
			int rc;

			snprintf(fail, sizeof(fail), "%s:%d", names[n], k);
			rc = run_child(fail);
			reached += rc == 0;
			cr_expect(rc == 0 || rc == NOT_REACHED, "SIMDEV_FAIL=%s: %d", fail, rc);
		}
		/* A fault may hit the setup (its six maps, say), not most of them. */
		cr_expect_geq(reached, 3, "%s: %d of %d cases reached the sleeps", names[n], reached,
			      CASES);
	}
}
