/* The control plane while a sleep runs, and requests whose client has gone: status answers at
 * once instead of queueing behind the sleep; vmmctl cancel, a covering wake, vmmctl killed or
 * timed out all make the sleep roll back; a request that waited while the program was stopped is
 * not run once it resumes; a target that dies mid-request is "no such process" (exit 3).
 *
 * A long sleep is made with ctl_target's `busy MS`: work on a stream that the sleep's drain waits
 * for. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(cancel, .fini = harness_cleanup);

static struct ctl_out o, bg;

/* Start a sleep that takes about ms (its drain waits for the busy work). */
static pid_t long_sleep(struct target *t, int ms, const char *extra)
{
	char cmd[32];
	pid_t p;

	snprintf(cmd, sizeof(cmd), "busy %d", (int)(ms * ctl_slow()));
	cmd_ok(t, cmd, "busy launched");
	p = vmmctl_spawn(t->run_dir, "--json %s sleep %d", extra, (int)t->pid);
	cr_assert_gt(p, 0);
	/* Until the server has started it. */
	for (int i = 0; i < 200; i++) {
		char s[32];

		vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
		if (json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "changing"))
			return p;
		usleep(10000);
	}
	cr_assert_fail("the sleep did not start: %s %s", o.out, o.err);
	return p;
}

/* The process is awake, not held, and its memory intact. */
static void untouched(struct target *t)
{
	char s[32];

	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "%s", o.err);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"),
		  "%s", o.out);
	cr_expect(strstr(o.out, "\"held\": false"), "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0, "%s", o.out);
	cmd_ok(t, "check", "ok 4"); /* answers at once: device work is not held */
}

Test(cancel, status_answers_at_once_while_a_sleep_runs, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	pid_t sl = long_sleep(t, 3000, "");
	char s[32];

	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%s", o.err);
	cr_expect_lt(o.seconds, 1.0 * ctl_slow(), "status waited %.2f s for the sleep", o.seconds);
	cr_expect(json_str(o.out, "\"info\"", "operation", s, sizeof(s)) && !strcmp(s, "sleep"),
		  "%s", o.out);
	cr_expect_geq(json_num(o.out, "\"info\"", "operation_ms"), 0);
	/* list's hello too, and the human form says what is going on. */
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)t->pid);
	cr_expect(strstr(o.out, "a sleep has been running"), "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "--timeout 2 list");
	cr_expect_lt(o.seconds, 1.5 * ctl_slow());
	cr_expect(strstr(o.out, "changing"), "%s", o.out);
	/* The sleep itself completes (its drain need not wait out the busy work now). */
	target_busy_end(t);
	cr_expect_eq(vmmctl_wait(sl, &bg, 30000), 0, "%s %s", bg.out, bg.err);
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "asleep"),
		  "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_expect_eq(o.code, 0);
	cmd_ok(t, "check", "ok 4");
	stop_cleanly(t);
}

/* The program's own wake (vmmshim_wake) while a vmmctl sleep runs waits for it at most
 * VMMSHIM_OP_WAIT, then answers busy: it used to wait as long as the sleep took, and forever for
 * one that hung. The sleep is not disturbed, and a later wake brings everything back. */
Test(cancel, the_programs_own_wake_waits_for_a_sleep_at_most_op_wait, .timeout = 60)
{
	const char *env[] = { "VMMSHIM_OP_WAIT=500ms", NULL };
	struct target *t = start_holding(env, 4, 1000000);
	pid_t sl = long_sleep(t, 4000, "");
	char reply[512];
	double t0 = now_s(), took;

	cr_assert_eq(target_cmd(t, "waketag all", reply, sizeof(reply), 30000), 0);
	took = now_s() - t0;
	cr_expect(strstr(reply, "rc=7 ") && strstr(reply, "in progress"), "%s", reply);
	cr_expect(took >= 0.45 && took < 2.0 * ctl_slow(), "the wake answered after %.2f s", took);
	target_busy_end(t);
	cr_expect_eq(vmmctl_wait(sl, &bg, 30000), 0, "the sleep: %s %s", bg.out, bg.err);
	cmd_ok(t, "waketag all", "rc=0");
	untouched(t);
	stop_cleanly(t);
}

Test(cancel, cancel_rolls_the_sleep_back, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	pid_t sl = long_sleep(t, 2000, "");
	char s[32];

	vmmctl_run(&o, t->run_dir, -1, "--json cancel %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%s %s", o.out, o.err);
	cr_expect(json_str(o.out, "\"cancel\"", "outcome", s, sizeof(s)) &&
		  !strcmp(s, "rolled_back"), "%s", o.out);
	cr_expect(json_str(o.out, "\"cancel\"", "operation", s, sizeof(s)) && !strcmp(s, "sleep"),
		  "%s", o.out);
	/* The sleep's own client is told. */
	cr_expect_eq(vmmctl_wait(sl, &bg, 30000), 1, "%s %s", bg.out, bg.err);
	cr_expect(json_str(bg.out, "\"error\"", "status", s, sizeof(s)) &&
		  !strcmp(s, "cancelled"), "%s", bg.out);
	untouched(t);
	/* Nothing in progress: nothing to cancel, exit 0. */
	vmmctl_run(&o, t->run_dir, -1, "cancel %d", (int)t->pid);
	cr_expect_eq(o.code, 0);
	cr_expect(strstr(o.out, "no sleep or wake in progress"), "%s", o.out);
	stop_cleanly(t);
}

Test(cancel, a_wake_cancels_the_sleep_it_covers, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	pid_t sl = long_sleep(t, 2000, "");

	vmmctl_run(&o, t->run_dir, -1, "--json wake %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%s %s", o.out, o.err);
	cr_expect_eq(vmmctl_wait(sl, &bg, 30000), 1, "the sleep went on: %s", bg.out);
	untouched(t);
	stop_cleanly(t);
}

Test(cancel, a_killed_vmmctl_cancels_its_sleep, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	pid_t sl = long_sleep(t, 2000, "");
	char log[16384];

	kill(sl, SIGINT); /* ^C */
	vmmctl_wait(sl, &bg, 5000);
	target_busy_end(t);
	/* The sleep rolls back once it notices (here: after its drain). */
	for (int i = 0; i < 100; i++) {
		char s[32];

		vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
		if (json_str(o.out, "\"info\"", "state", s, sizeof(s)) && strcmp(s, "changing"))
			break;
		usleep(100000);
	}
	untouched(t);
	target_log(t, log, sizeof(log));
	cr_expect(strstr(log, "rolled back: its client has gone"), "%s", log);
	stop_cleanly(t);
}

Test(cancel, a_sleep_whose_vmmctl_timed_out_rolls_back, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	char cmd[32];

	snprintf(cmd, sizeof(cmd), "busy %d", (int)(2500 * ctl_slow()));
	cmd_ok(t, cmd, "busy launched");
	vmmctl_run(&o, t->run_dir, -1, "--timeout %g sleep %d", ctl_slow(), (int)t->pid);
	/* Either vmmctl's own deadline ends it first (exit 5: it cancels what it asked for), or the
	 * drain's share of that deadline runs out in the process first (exit 1, and why). */
	cr_expect(o.code == 5 || o.code == 1, "%d %s", o.code, o.err);
	cr_expect(o.code == 5 ? strstr(o.err, "cancels") != NULL :
				strstr(o.err, "did not drain") != NULL,
		  "the message says what happens: %s", o.err);
	target_busy_end(t);
	for (int i = 0; i < 100; i++) {
		char s[32];

		vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
		if (json_str(o.out, "\"info\"", "state", s, sizeof(s)) && strcmp(s, "changing"))
			break;
		usleep(100000);
	}
	untouched(t);
	stop_cleanly(t);
}

/* Issue 8, item 6: with the program stopped, the request waits in the socket's queue; vmmctl
 * gives up; when the program resumes, the request must not run. */
Test(cancel, a_request_that_timed_out_while_stopped_never_runs, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	char log[16384];

	cr_assert_eq(kill(t->pid, SIGSTOP), 0);
	vmmctl_run(&o, t->run_dir, -1, "--timeout 2 sleep %d", (int)t->pid);
	cr_expect_eq(o.code, 5, "%d %s", o.code, o.err);
	cr_expect_lt(o.seconds, 4.0 * ctl_slow());
	cr_assert_eq(kill(t->pid, SIGCONT), 0);
	/* Until the resumed program has read the request (a loaded machine may take longer than
	 * any fixed pause): then it has either dropped it or run it. */
	bool dropped = target_log_has(t, "was dropped: its client has gone", 10.0);

	untouched(t);
	target_log(t, log, sizeof(log));
	cr_expect(dropped, "%s", log);
	stop_cleanly(t);
}

Test(cancel, a_target_that_dies_mid_request_is_exit_3, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	pid_t sl = long_sleep(t, 3000, "");

	kill(t->pid, SIGKILL);
	cr_expect_eq(vmmctl_wait(sl, &bg, 10000), 3, "%s %s", bg.out, bg.err);
	cr_expect(strstr(bg.out, "ended before it answered"), "%s", bg.out);
	target_kill(t);
}

/* A sleep the program started itself (the in-process API) is cancelled too; the program gets
 * VMMSHIM_E_BUSY (7) saying it was cancelled. */
Test(cancel, an_in_process_sleep_is_cancelled_too, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 1000000);
	char reply[256], s[32], cmd[32];

	snprintf(cmd, sizeof(cmd), "busy %d", (int)(2000 * ctl_slow()));
	cmd_ok(t, cmd, "busy launched");
	cmd_ok(t, "bgsleep all", "bgsleep started");
	for (int i = 0; i < 100; i++) {
		vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
		if (json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "changing"))
			break;
		usleep(20000);
	}
	cr_expect(json_str(o.out, "\"info\"", "operation", s, sizeof(s)) && !strcmp(s, "unknown"),
		  "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "--json cancel %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%s %s", o.out, o.err);
	cr_expect(json_str(o.out, "\"cancel\"", "outcome", s, sizeof(s)) && !strcmp(s, "ended"),
		  "%s", o.out);
	cr_assert_eq(target_read(t, reply, sizeof(reply), 10000), 0);
	cr_expect(!strncmp(reply, "bgsleep rc=7", 12) && strstr(reply, "cancel"), "%s", reply);
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0, "%s", o.out);
	cmd_ok(t, "check", "ok 4");
	stop_cleanly(t);
}
