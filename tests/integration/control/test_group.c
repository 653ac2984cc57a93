/* vmmctl sleep PID PID... / wake PID PID...: a group of processes as one operation, end to end on
 * simdev. The members draw on one device capacity (SIMDEV_SHARED), as processes on one GPU do,
 * so that an awake observer in the same group sees what the driver got back. Checked: the bytes
 * after wake, the memory given back while all sleep, and that a member failing half way (its
 * sleep, its wake, or the undo of the others) leaves every process as it was, with its data. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

TestSuite(group, .fini = harness_cleanup);

/* In the sanitize pass the shim and ctl_target are built with ASan, which must not insist on
 * coming first in the library list (the shim is preloaded before it). The test driver itself is
 * built without sanitizers, so it cannot tell: the setting is always given (ignored without ASan). */
#define SAN_ENV "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:halt_on_error=1"

static struct ctl_out o; /* large: static, one test per process */
static char group_env[96];

static const char *the_group(void)
{
	snprintf(group_env, sizeof(group_env), "SIMDEV_SHARED=vmmgrp-%d", (int)getpid());
	return group_env;
}

/* A member of this test's simdev group (one device capacity, so that an observer sees what the
 * group gives back), with extra settings (may be NULL). */
static struct target *shared_member(const char *extra)
{
	const char *env[] = { the_group(), "SIMDEV_MEMORY=2G", SAN_ENV, extra, NULL };
	struct target *t = target_start(env);

	cr_assert(t, "ctl_target did not start under the shim");
	return t;
}

/* A process of its own device (no simdev group: ThreadSanitizer cannot follow the group's
 * process-shared lock, so the threaded tests use these). */
static struct target *member(const char *extra)
{
	const char *env[] = { "SIMDEV_MEMORY=2G", SAN_ENV, extra, NULL };
	struct target *t = target_start(env);

	cr_assert(t, "ctl_target did not start under the shim");
	return t;
}

static void cmd_ok(struct target *t, const char *cmd, const char *want)
{
	char reply[256];

	cr_assert_eq(target_cmd(t, cmd, reply, sizeof(reply), 30000), 0, "no reply to '%s'", cmd);
	cr_assert(!strncmp(reply, want, strlen(want)), "'%s' answered '%s', expected '%s...'",
		  cmd, reply, want);
}

/* Device memory in use in the group, as an awake member's cudaMemGetInfo says. */
static long long used(struct target *observer)
{
	char reply[128];
	long long u = -1;

	cr_assert_eq(target_cmd(observer, "memused", reply, sizeof(reply), 30000), 0);
	cr_assert_eq(sscanf(reply, "used %lld", &u), 1, "memused: %s", reply);
	return u;
}

static void state_is(struct target *t, const char *want)
{
	char s[32];

	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "status: exit %d %s", o.code, o.err);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, want),
		  "pid %d: state %s expected: %s", (int)t->pid, want, o.out);
}

static long long managed(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "status: exit %d %s", o.code, o.err);
	return json_num(o.out, "\"info\"", "managed");
}

/* "vmmctl [--json] sleep|wake PID PID ..." for ts[0..n). */
static int group(const char *verb, struct target **ts, int n, bool json)
{
	char pids[512] = "";
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(pids + len, sizeof(pids) - len, " %d", (int)ts[i]->pid);
	return vmmctl_run(&o, ts[0]->run_dir, -1, "%s--timeout 60 %s%s", json ? "--json " : "",
			  verb, pids);
}

/* Each member allocates (the heap and a mapping of its own), the group sleeps: the observer
 * sees every managed byte given back; the group wakes: every byte is back. */
static void sleep_and_wake(int n)
{
	struct target *ts[3], *observer = shared_member(NULL);
	long long before, asleep, sum = 0;

	cmd_ok(observer, "alloc 1 1000000", "ok");
	for (int i = 0; i < n; i++) {
		ts[i] = shared_member(NULL);
		cmd_ok(ts[i], "alloc 6 3000000", "ok");
		cmd_ok(ts[i], "appvmm 8388608", "ok");
		sum += managed(ts[i]);
	}
	cr_assert_geq(sum, n * 26000000LL, "status reports what each manages");
	before = used(observer);
	cr_assert_eq(group("sleep", ts, n, true), 0, "group sleep: %s %s", o.out, o.err);
	cr_expect(strstr(o.out, "\"status\": \"ok\""), "%s", o.out);
	asleep = used(observer);
	cr_expect_geq(before - asleep, sum,
		      "the driver got back all %lld managed bytes: %lld in use before, %lld asleep",
		      sum, before, asleep);
	for (int i = 0; i < n; i++)
		state_is(ts[i], "asleep");
	cr_assert_eq(group("wake", ts, n, false), 0, "group wake: %s %s", o.out, o.err);
	cr_expect(strstr(o.out, "group of"), "a group line: %s", o.out);
	for (int i = 0; i < n; i++) {
		state_is(ts[i], "awake");
		cmd_ok(ts[i], "check", "ok 7"); /* six buffers and the mapping */
	}
	cr_expect_geq(used(observer), before, "all of it is back on the device");
	for (int i = 0; i < n; i++)
		target_stop(ts[i], 10000);
	target_stop(observer, 10000);
}

Test(group, two_processes_sleep_and_wake_as_one, .timeout = 120)
{
	sleep_and_wake(2);
}

Test(group, three_processes_sleep_and_wake_as_one, .timeout = 120)
{
	sleep_and_wake(3);
}

/* The second member's sleep fails half way (its second copy to the host): the first, asleep by
 * then or not, is woken again; both end awake with their data, device work not held. */
Test(group, a_member_failing_its_sleep_leaves_every_member_awake, .timeout = 120)
{
	struct target *ts[2] = { member(NULL), member("SIMDEV_FAIL=cuMemcpyDtoHAsync:2") };

	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "alloc 6 3000000", "ok");
	cr_expect_eq(group("sleep", ts, 2, true), 1, "the group sleep fails: %s", o.out);
	cr_expect(strstr(o.out, "\"status\": \"error\""), "%s", o.out);
	cr_expect(strstr(o.out, "\"outcome\": \"undone\""), "the first member was put back: %s",
		  o.out);
	for (int i = 0; i < 2; i++) {
		state_is(ts[i], "awake");
		cmd_ok(ts[i], "check", "ok 6"); /* answers: the gates are open */
	}
	/* And the group still sleeps and wakes once nothing fails. */
	cr_expect_eq(group("sleep", ts, 2, false), 0, "%s %s", o.out, o.err);
	cr_expect_eq(group("wake", ts, 2, false), 0, "%s %s", o.out, o.err);
	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "check", "ok 6");
}

/* How many cuMemCreate calls "alloc 6 3000000" makes in a fresh process. */
static long long creates_for_setup(void)
{
	struct target *t = member(NULL);
	long long n;

	cmd_ok(t, "alloc 6 3000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	n = json_num(o.out, "\"devices\": [", "handles_created");
	target_stop(t, 10000);
	return n;
}

/* The second member cannot re-create its memory at wake: it stays asleep (its own rollback), the
 * first, awake by then or not, is put back to sleep; a later wake brings every byte back. */
Test(group, a_member_failing_its_wake_leaves_every_member_asleep, .timeout = 120)
{
	long long h = creates_for_setup();
	char fail[64];

	cr_assert_gt(h, 0);
	snprintf(fail, sizeof(fail), "SIMDEV_FAIL=cuMemCreate:%lld", h + 1);
	struct target *ts[2] = { member(NULL), member(fail) };

	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "alloc 6 3000000", "ok");
	cr_assert_eq(group("sleep", ts, 2, false), 0, "%s %s", o.out, o.err);
	cr_expect_eq(group("wake", ts, 2, true), 1, "the group wake fails: %s", o.out);
	cr_expect(strstr(o.out, "\"outcome\": \"undone\""), "the first member was put back: %s",
		  o.out);
	for (int i = 0; i < 2; i++)
		state_is(ts[i], "asleep");
	cr_assert_eq(group("wake", ts, 2, false), 0, "%s %s", o.out, o.err);
	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "check", "ok 6");
}

/* The undo itself fails: the first member slept, the second failed its sleep, and waking the
 * first back fails (no device memory for it). The first stays asleep with its host copy and is
 * named; `vmmctl wake` of it completes it; no byte is lost anywhere. */
Test(group, an_undo_that_fails_leaves_the_member_asleep_and_named, .timeout = 120)
{
	long long h = creates_for_setup();
	char fail[64], cmd[64];

	cr_assert_gt(h, 0);
	snprintf(fail, sizeof(fail), "SIMDEV_FAIL=cuMemCreate:%lld", h + 1);
	struct target *ts[2] = { member(fail), member("SIMDEV_FAIL=cuMemcpyDtoHAsync:2") };

	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "alloc 6 3000000", "ok");
	cr_expect_eq(group("sleep", ts, 2, true), 1, "%s", o.out);
	cr_expect(strstr(o.out, "\"outcome\": \"undo_failed\""), "the failed undo is named: %s",
		  o.out);
	state_is(ts[0], "asleep");
	state_is(ts[1], "awake");
	cmd_ok(ts[1], "check", "ok 6");
	snprintf(cmd, sizeof(cmd), "wake %d", (int)ts[0]->pid);
	cr_expect_eq(vmmctl_run(&o, ts[0]->run_dir, -1, "%s", cmd), 0, "%s", o.err);
	cmd_ok(ts[0], "check", "ok 6");
}

/* A collective half launched: member 0 runs a kernel that ends only when its host thread's copy
 * sets a flag, and that copy meets the closed gate. The first attempt cannot drain; the group
 * puts everyone back (the copy goes through, the kernel ends) and the next attempt succeeds,
 * all within the deadline, where a single sleep would wait its whole drain timeout and fail. */
Test(group, a_drain_held_by_a_gated_launch_is_retried_not_deadlocked, .timeout = 120)
{
	/* Member 0 logs at debug level: its log says when its gate is closed. */
	struct target *ts[2] = { member("VMMSHIM_LOG=debug"), member(NULL) };
	static char log[65536];
	char reply[64], pids[64];
	bool closed;
	pid_t ctl;

	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "alloc 2 3000000", "ok");
	cmd_ok(ts[0], "spin", "spinning");
	snprintf(pids, sizeof(pids), "%d %d", (int)ts[0]->pid, (int)ts[1]->pid);
	ctl = vmmctl_spawn(ts[0]->run_dir, "--json --timeout 60 sleep %s", pids);
	cr_assert_gt(ctl, 0);
	/* Once member 0's gate is closed, its host thread copies (and meets it). Seeing the state
	 * "changing" and pausing was not enough: on a loaded machine the copy could still pass
	 * before the gate closed, the kernel end, and the first attempt succeed. */
	closed = target_log_has(ts[0], "sleep: device work is held", 20.0);
	target_log(ts[0], log, sizeof(log));
	cr_assert(closed, "member 0's sleep never closed its gate:\n%s", log);
	cr_assert_eq(target_send(ts[0], "setflag"), 0);
	cr_assert_eq(vmmctl_wait(ctl, &o, 60000), 0, "the group slept: %s %s", o.out, o.err);
	cr_expect_geq(json_num(o.out, NULL, "attempts"), 2, "after a retry: %s", o.out);
	cr_assert_eq(target_read(ts[0], reply, sizeof(reply), 30000), 0);
	cr_expect(!strncmp(reply, "flag set", 8), "%s", reply);
	cmd_ok(ts[0], "spinwait", "spin ok");
	cr_assert_eq(group("wake", ts, 2, false), 0, "%s %s", o.out, o.err);
	for (int i = 0; i < 2; i++)
		cmd_ok(ts[i], "check", "ok 2");
}

/* The member's state as its status says it ("awake", "changing", "asleep", ...). */
static void state_of(struct target *t, char *s, size_t cap)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	if (o.code || !json_str(o.out, "\"info\"", "state", s, cap))
		snprintf(s, cap, "?");
}

/* Members are acted on side by side: one whose copies are slow (every copy to the host waits
 * half a second) does not hold up the others. It comes first in the group; the others are seen
 * asleep while it is still going to sleep (one after another, they would wait behind it). */
Test(group, a_slow_member_does_not_hold_up_the_others, .timeout = 120)
{
	struct target *ts[3] = { member("SIMDEV_DELAY=cuMemcpyDtoHAsync:500"), member(NULL),
				 member(NULL) };
	char s0[32] = "", s1[32], s2[32];
	bool side_by_side = false;
	pid_t ctl;

	for (int i = 0; i < 3; i++)
		cmd_ok(ts[i], "alloc 6 3000000", "ok");
	ctl = vmmctl_spawn(ts[0]->run_dir, "--json --timeout 60 sleep %d %d %d", (int)ts[0]->pid,
			   (int)ts[1]->pid, (int)ts[2]->pid);
	cr_assert_gt(ctl, 0);
	/* Until the slow member is asleep (or the group gave up): at most 60 s. */
	for (int i = 0; i < 6000 && !side_by_side && strcmp(s0, "asleep"); i++) {
		state_of(ts[0], s0, sizeof(s0));
		if (!strcmp(s0, "changing")) {
			state_of(ts[1], s1, sizeof(s1));
			state_of(ts[2], s2, sizeof(s2));
			state_of(ts[0], s0, sizeof(s0));
			side_by_side = !strcmp(s1, "asleep") && !strcmp(s2, "asleep") &&
				       !strcmp(s0, "changing");
		}
		usleep(10000);
	}
	cr_assert_eq(vmmctl_wait(ctl, &o, 60000), 0, "the group slept: %s %s", o.out, o.err);
	cr_expect(side_by_side, "the other members were not asleep while the slow one still "
		  "was going to sleep (last seen: %s, %s, %s)", s0, s1, s2);
	for (int i = 0; i < 3; i++)
		state_is(ts[i], "asleep");
	cr_assert_eq(group("wake", ts, 3, false), 0, "group wake: %s %s", o.out, o.err);
	for (int i = 0; i < 3; i++)
		cmd_ok(ts[i], "check", "ok 6");
}

/* Bad input changes nothing: a pid that is not under the shim, a pid named twice. */
Test(group, a_group_with_a_stranger_changes_nothing, .timeout = 60)
{
	struct target *t = member(NULL);
	pid_t child = fork();

	if (child == 0) {
		pause();
		_exit(0);
	}
	cmd_ok(t, "alloc 2 3000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "sleep %d %d", (int)t->pid, (int)child);
	cr_expect_eq(o.code, 3, "not under the shim: %d %s", o.code, o.err);
	cr_expect(strstr(o.err, "nothing was changed"), "%s", o.err);
	state_is(t, "awake");
	vmmctl_run(&o, t->run_dir, -1, "sleep %d %d", (int)t->pid, (int)t->pid);
	cr_expect_eq(o.code, 2, "named twice: %d %s", o.code, o.err);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	cmd_ok(t, "check", "ok 2");
}

/* A process that uses device 1 only gains no context on device 0 when it is slept and woken
 * from outside (the control thread has no context of its own: the shim uses the program's
 * device, where each rank of a job would otherwise get one on device 0). */
Test(group, a_sleep_makes_no_context_on_a_device_the_program_does_not_use, .timeout = 60)
{
	const char *env[] = { "SIMDEV_DEVICES=2", "CTL_DEVICE=1", SAN_ENV, NULL };
	struct target *t = target_start(env);
	char cmd[64];

	cr_assert(t);
	cmd_ok(t, "alloc 4 3000000", "ok");
	cmd_ok(t, "primary 0", "primary 0 active 0");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	cr_assert_eq(vmmctl_run(&o, t->run_dir, -1, "%s", cmd), 0, "%s", o.err);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	cr_assert_eq(vmmctl_run(&o, t->run_dir, -1, "%s", cmd), 0, "%s", o.err);
	cmd_ok(t, "check", "ok 4");
	cmd_ok(t, "primary 0", "primary 0 active 0");
	cmd_ok(t, "primary 1", "primary 1 active 1");
}
