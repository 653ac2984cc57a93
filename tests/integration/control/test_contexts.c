/* A sleep waits for work on every context of the program, not only the primary one: ctx_target
 * (a driver-API program on contexts it creates itself) runs a "kernel" that writes device memory
 * for a while, vmmctl sleeps it from outside meanwhile, and after wake the kernel's output is all
 * there. Also with a second context destroyed by the program while the sleep runs. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(contexts, .fini = harness_cleanup);

static struct ctl_out o, o_bg; /* large: static */

static void ctl_ok(struct ctl_out *out, struct target *t, const char *verb)
{
	vmmctl_run(out, t->run_dir, -1, "%s %d", verb, (int)t->pid);
	cr_assert_eq(out->code, 0, "vmmctl %s: exit %d\n%s%s", verb, out->code, out->out,
		     out->err);
}

Test(contexts, a_sleep_waits_for_a_kernel_on_a_created_context, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	double t0;

	cmd_ok_within(t, "kernel 1500", "launched", 5000);
	t0 = now_s();
	ctl_ok(&o, t, "sleep");
	cr_expect_geq(now_s() - t0, 1.0, "the sleep returned before the kernel could have ended");
	ctl_ok(&o, t, "wake");
	cmd_ok_within(t, "wait", "done faults 0", 10000);
	cmd_ok_within(t, "check", "intact", 10000);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

struct bg_sleep {
	struct target *t;
	int code;
};

static void *sleep_in_background(void *arg)
{
	struct bg_sleep *b = arg;

	b->code = vmmctl_run(&o_bg, b->t->run_dir, -1, "sleep %d", (int)b->t->pid);
	return NULL;
}

/* Whether t's state turned "changing" (a sleep under way) within 10 s. */
static bool sleep_started(struct target *t)
{
	char s[32];

	for (double end = now_s() + 10; now_s() < end; usleep(10000)) {
		vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
		if (json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "changing"))
			return true;
	}
	return false;
}

Test(contexts, a_context_destroyed_during_a_sleep, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	struct bg_sleep b = { .t = t, .code = -1 };
	pthread_t th;

	cmd_ok_within(t, "kernel 1000", "launched", 5000);
	cmd_ok_within(t, "kernel2 1500", "launched", 5000);
	cr_assert_eq(pthread_create(&th, NULL, sleep_in_background, &b), 0);
	/* Destroy only once the sleep has begun (it then drains the contexts for the 1.5 s kernel):
	 * a fixed pause could end before a loaded machine even started vmmctl. */
	cr_assert(sleep_started(t), "the sleep did not start: %s %s", o.out, o.err);
	/* The program destroys B while the sleep runs: the driver's destroy waits for B's kernel,
	 * and the sleep neither crashes nor fails on it. */
	cmd_ok_within(t, "destroy", "destroyed 0", 20000);
	pthread_join(th, NULL);
	cr_assert_eq(b.code, 0, "vmmctl sleep: exit %d\n%s%s", b.code, o_bg.out, o_bg.err);
	ctl_ok(&o, t, "wake");
	cmd_ok_within(t, "wait", "done faults 0", 10000);
	cmd_ok_within(t, "check", "intact", 10000);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

/* A reset of the primary context leaves what the program allocated in contexts of its own, as
 * natively: the shim cannot tell which context an allocation came from, so it frees nothing
 * while the program has one (a free here would lose context A's data). */
Test(contexts, a_primary_reset_keeps_a_created_contexts_memory, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);

	cmd_ok_within(t, "kernel 50", "launched", 5000);
	cmd_ok_within(t, "wait", "done faults 0", 10000);
	cmd_ok_within(t, "reset", "reset 0", 10000);
	cmd_ok_within(t, "check", "intact", 10000);
	ctl_ok(&o, t, "sleep");
	ctl_ok(&o, t, "wake");
	cmd_ok_within(t, "check", "intact", 10000);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}
