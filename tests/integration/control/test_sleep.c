/* Sleep and wake of an unmodified program, driven from outside with vmmctl: memory released and
 * restored byte for byte, discard, tags through the in-process API, the program's own VMM
 * mappings, device work that arrives while asleep, autowake, failures that roll back, and threads
 * working through a sleep/wake loop. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(sleep, .fini = harness_cleanup);

#define MIB (1024 * 1024)

static struct ctl_out o; /* large: static, one test per process */

static void ctl_ok(struct target *t, const char *verb_args)
{
	vmmctl_run(&o, t->run_dir, -1, "--json %s", verb_args);
	cr_assert_eq(o.code, 0, "vmmctl %s: exit %d\n%s%s", verb_args, o.code, o.out, o.err);
}

static void status(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "status: exit %d %s", o.code, o.err);
}

static void finish(struct target *t)
{
	char sock[400];
	struct stat st;

	target_socket(t, sock, sizeof(sock));
	cr_expect_eq(target_stop(t, 10000), 0, "the program did not exit cleanly");
	cr_expect(stat(sock, &st) != 0, "the socket %s was left behind", sock);
	target_free(t);
}

Test(sleep, status_reports_the_memory, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);

	cmd_ok(t, "alloc 8 1000000", "ok");
	status(t);
	cr_expect_eq(json_num(o.out, "\"info\"", "pid"), t->pid);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "live"), 8000000, "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "count"), 8);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "mapped"), 8000000);
	cr_expect_geq(json_num(o.out, "\"info\"", "managed"), 8000000);
	cr_expect_eq(json_num(o.out, "\"tags\"", "live"), 8000000);
	char s[64];
	cr_expect(json_str(o.out, "\"tags\"", "name", s, sizeof(s)) && !strcmp(s, "default"));
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"));
	/* The human form says the same. */
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)t->pid);
	cr_expect_eq(o.code, 0);
	cr_expect(strstr(o.out, "tag default"), "%s", o.out);
	finish(t);
}

Test(sleep, releases_memory_and_restores_every_byte, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	long long live, used_before, unmanaged;
	char s[64], cmd[64];

	cmd_ok(t, "alloc 6 3000000", "ok");
	cmd_ok(t, "alloc 40 1000", "ok");
	status(t);
	live = json_num(o.out, "\"devices\": [", "live");
	used_before = json_num(o.out, "\"devices\": [", "used");
	cr_assert_geq(used_before, live);

	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), live, "%s", o.out);
	cr_expect_geq(json_num(o.out, "\"result\"", "released"), live);
	vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
	cr_expect_eq(o.code, 0);
	cr_expect(strstr(o.out, "already asleep"), "a second sleep says 'already': %s", o.out);

	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "asleep"),
		  "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "mapped"), 0);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "host_backup"), live);
	/* The driver's use drops to what the shim does not manage. */
	unmanaged = json_num(o.out, "\"devices\": [", "unmanaged");
	cr_expect_eq(json_num(o.out, "\"devices\": [", "used"), unmanaged, "%s", o.out);
	cr_expect_lt(json_num(o.out, "\"devices\": [", "used"), used_before - live + 1);

	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), live);
	vmmctl_run(&o, t->run_dir, -1, "--json wake %d", (int)t->pid);
	cr_expect_eq(o.code, 0);
	cr_expect(json_str(o.out, NULL, "status", s, sizeof(s)) && !strcmp(s, "already"));
	cmd_ok(t, "check", "ok 46");
	finish(t);
}

/* A transition's seconds, and the parts of them it reports: the drain waits for work the program
 * had submitted (a 300 ms busy stream), the copies run on a slow copy engine (SIMDEV_COPY_DELAY:
 * 40 ms a copy), and the parts never add up to more than the whole. */
static void expect_parts(const char *verb, double drain_min, double copy_min)
{
	double secs = json_double(o.out, "\"result\"", "seconds");
	double gate = json_double(o.out, "\"result\"", "gate_seconds");
	double drain = json_double(o.out, "\"result\"", "drain_seconds");
	double copy = json_double(o.out, "\"result\"", "copy_seconds");

	cr_expect(gate >= 0 && drain >= drain_min && copy >= copy_min, "%s: %s", verb, o.out);
	cr_expect_leq(gate + drain + copy, secs + 1e-6, "%s: the parts exceed the whole: %s", verb,
		      o.out);
}

Test(sleep, the_result_says_where_the_time_went, .timeout = 60)
{
	const char *env[] = { "SIMDEV_COPY_DELAY=40", NULL };
	struct target *t = start_under_shim(env);
	char cmd[64];

	cmd_ok(t, "alloc 2 3000000", "ok");
	cmd_ok(t, "busy 300", "busy launched");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	expect_parts("sleep", 0.25, 0.035);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	/* A wake holds nothing and drains nothing: its own copies are the work. */
	cr_expect_eq(json_double(o.out, "\"result\"", "gate_seconds"), 0, "%s", o.out);
	cr_expect_eq(json_double(o.out, "\"result\"", "drain_seconds"), 0, "%s", o.out);
	expect_parts("wake", 0, 0.035);
	cmd_ok(t, "check", "ok 2");
	finish(t);
}

Test(sleep, two_hundred_cycles_keep_every_byte, .timeout = 120)
{
	struct target *t = start_under_shim(NULL);
	char arg[64];

	cmd_ok(t, "alloc 4 700000", "ok");
	cmd_ok(t, "alloc 12 5000", "ok");
	cmd_ok(t, "alloc 2 2100000", "ok");
	for (int i = 0; i < 200; i++) {
		snprintf(arg, sizeof(arg), "sleep %d", (int)t->pid);
		vmmctl_run(&o, t->run_dir, -1, "%s", arg);
		cr_assert_eq(o.code, 0, "cycle %d: sleep: %s", i, o.err);
		vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
		cr_assert_eq(o.code, 0, "cycle %d: wake: %s", i, o.err);
		if (i % 25 == 24)
			cmd_ok(t, "check", "ok 18");
	}
	cmd_ok(t, "check", "ok 18");
	finish(t);
}

Test(sleep, discard_copies_nothing, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64];

	cmd_ok(t, "alloc 4 2000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d --discard", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_eq(json_num(o.out, "\"result\"", "copied"), 0, "%s", o.out);
	cr_expect_geq(json_num(o.out, "\"result\"", "released"), 8000000);
	status(t);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "host_backup"), 0);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_eq(json_num(o.out, "\"result\"", "copied"), 0);
	/* The addresses still work: new contents can be written and read back. */
	cmd_ok(t, "rewrite", "ok");
	cmd_ok(t, "check", "ok 4");
	finish(t);
}

Test(sleep, tags_through_the_in_process_api, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[80], reply[256];

	cmd_ok(t, "tag weights", "rc=0");
	cmd_ok(t, "alloc 2 3000000", "ok");
	cmd_ok(t, "tag", "rc=0");
	cmd_ok(t, "alloc 3 1000000", "ok");
	cmd_ok(t, "stats weights", "rc=0 live=6000000");
	cmd_ok(t, "tag this-tag-is-far-too-long-for-vmmshim", "rc=1");

	/* In-process sleep of one tag: the rest stays resident. */
	cmd_ok(t, "sleeptag weights", "rc=0");
	cr_assert_eq(target_cmd(t, "stats weights", reply, sizeof(reply), 10000), 0);
	cr_expect(strstr(reply, "mapped=0 ") && !strstr(reply, "asleep=0"), "%s", reply);
	cmd_ok(t, "sleeptag weights", "rc=6"); /* already */
	snprintf(cmd, sizeof(cmd), "status %d --tag weights", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"tags\"", "asleep"), 6000000, "%s", o.out);
	snprintf(cmd, sizeof(cmd), "status %d --tag default", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_eq(json_num(o.out, "\"tags\"", "asleep"), 0, "%s", o.out);
	cmd_ok(t, "waketag weights", "rc=0");
	cmd_ok(t, "check", "ok 5");

	/* vmmctl can drive one tag too. */
	snprintf(cmd, sizeof(cmd), "sleep %d --tag weights", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), 6000000);
	cr_expect_lt(json_num(o.out, "\"result\"", "copied"), 9000000, "only the tag is copied");
	snprintf(cmd, sizeof(cmd), "wake %d --tag weights", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 5");
	finish(t);
}

Test(sleep, the_programs_own_vmm_mappings_sleep_too, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64];

	cmd_ok(t, "alloc 2 1000000", "ok");
	cmd_ok(t, "appvmm 4194304", "ok");
	status(t);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "app_bytes"), 4194304, "%s", o.out);
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	status(t);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "app_asleep"), 4194304, "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "used"), 0, "all released: %s", o.out);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 3");
	finish(t);
}

/* A device call made while asleep waits, and completes correctly after wake. */
static void touch_waits(const char *what, const char *want)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64], reply[256];

	cmd_ok(t, "alloc 2 1000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	target_send(t, what);
	cr_expect_neq(target_read(t, reply, sizeof(reply), 500), 0,
		      "'%s' completed while asleep: '%s'", what, reply);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_assert_eq(target_read(t, reply, sizeof(reply), 10000), 0, "'%s' never completed", what);
	cr_expect_str_eq(reply, want);
	cmd_ok(t, "check", "ok 2");
	finish(t);
}

Test(sleep, a_copy_while_asleep_waits_for_wake, .timeout = 60)
{
	touch_waits("touch", "touched ok");
}

Test(sleep, a_driver_copy_while_asleep_waits_for_wake, .timeout = 60)
{
	touch_waits("dtouch", "dtouched ok");
}

Test(sleep, a_kernel_while_asleep_waits_for_wake, .timeout = 60)
{
	touch_waits("kernel", "kernel ok");
}

Test(sleep, autowake_on_the_next_device_call, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64], s[32];

	cmd_ok(t, "alloc 3 1000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d --autowake", (int)t->pid);
	ctl_ok(t, cmd);
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "asleep"));
	cr_expect_eq(json_num(o.out, "\"devices\": [", "mapped"), 0);
	cmd_ok(t, "check", "ok 3"); /* wakes it */
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"),
		  "%s", o.out);
	/* Autowake was for that sleep only: the next one holds again. */
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	target_send(t, "check");
	cr_expect_neq(target_read(t, s, sizeof(s), 400), 0, "held without autowake");
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_assert_eq(target_read(t, s, sizeof(s), 10000), 0);
	finish(t);
}

Test(sleep, autowake_from_the_environment, .timeout = 60)
{
	const char *env[] = { "VMMSHIM_AUTOWAKE=1", NULL };
	struct target *t = start_under_shim(env);
	char cmd[64];

	cmd_ok(t, "alloc 3 1000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "kernel", "kernel ok");
	cmd_ok(t, "check", "ok 3");
	finish(t);
}

/* The cuMemCreate calls a fresh program makes for "alloc 4 1000000" (learned, not assumed). */
static long long creates_for_setup(void)
{
	struct target *t = start_under_shim(NULL);
	long long n;

	cmd_ok(t, "alloc 4 1000000", "ok");
	status(t);
	n = json_num(o.out, "\"devices\": [", "handles_created");
	target_stop(t, 10000);
	target_free(t);
	return n;
}

Test(sleep, wake_without_device_memory_fails_then_succeeds, .timeout = 60)
{
	long long h = creates_for_setup();
	char env0[64], cmd[64];

	cr_assert_gt(h, 0, "status reports handles_created");
	/* The first cuMemCreate of the wake fails as if the device were full. */
	snprintf(env0, sizeof(env0), "SIMDEV_FAIL=cuMemCreate:%lld", h + 1);
	const char *env[] = { env0, NULL };
	struct target *t = start_under_shim(env);

	cmd_ok(t, "alloc 4 1000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_expect_eq(o.code, 1, "a failed wake exits 1: %d %s", o.code, o.err);
	cr_expect(strlen(o.err) > 10, "and says why: %s", o.err);
	status(t);
	char s[32];
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "asleep"),
		  "still asleep after the failed wake: %s", o.out);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "host_backup"), 4000000);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 4");
	finish(t);
}

static long long vm_size(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	return proc_kb_bytes(path, "VmSize");
}

Test(sleep, sleep_without_host_memory_is_refused, .timeout = 60)
{
	struct target *t;
	struct rlimit old, low;
	char cmd[64], s[32];

	if (getenv("CTL_SANITIZER"))
		cr_skip_test("a sanitizer's shadow memory does not fit under a small RLIMIT_AS");
	t = start_under_shim(NULL);
	cmd_ok(t, "alloc 8 4000000", "ok");
	/* Leave the program almost no address space for a host backup. */
	cr_assert_eq(prlimit(t->pid, RLIMIT_AS, NULL, &old), 0);
	low.rlim_cur = low.rlim_max = (rlim_t)vm_size(t->pid) + 1 * MIB;
	low.rlim_max = old.rlim_max;
	cr_assert_eq(prlimit(t->pid, RLIMIT_AS, &low, NULL), 0);
	vmmctl_run(&o, t->run_dir, -1, "--json sleep %d", (int)t->pid);
	prlimit(t->pid, RLIMIT_AS, &old, NULL);
	cr_expect_eq(o.code, 1, "refused: %d %s", o.code, o.out);
	cr_expect(json_str(o.out, "\"error\"", "status", s, sizeof(s)) && !strcmp(s, "host_oom"),
		  "%s", o.out);
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"),
		  "nothing changed: %s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0);
	cmd_ok(t, "check", "ok 8");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 8");
	finish(t);
}

Test(sleep, eight_threads_work_through_a_sleep_wake_loop, .timeout = 120)
{
	struct target *t = start_under_shim(NULL);
	char reply[128];
	int cycles = 0;
	double end;

	cmd_ok(t, "alloc 4 1000000", "ok");
	snprintf(reply, sizeof(reply), "threads 8 %d", (int)(4 * ctl_slow()));
	target_send(t, reply);
	end = now_s() + 4.5 * ctl_slow();
	while (now_s() < end) {
		vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
		cr_assert_eq(o.code, 0, "sleep %d: %s", cycles, o.err);
		usleep(20000);
		vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
		cr_assert_eq(o.code, 0, "wake %d: %s", cycles, o.err);
		usleep(20000);
		cycles++;
	}
	cr_assert_eq(target_read(t, reply, sizeof(reply), 30000), 0, "the threads never finished");
	cr_expect(!strncmp(reply, "threads ok", 10), "%s", reply);
	cr_expect_gt(atol(reply + 11), 8, "the threads made progress: %s", reply);
	cr_expect_gt(cycles, 5);
	cmd_ok(t, "check", "ok 4");
	finish(t);
}

Test(sleep, exit_while_asleep_removes_the_socket, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64];

	cmd_ok(t, "alloc 4 1000000", "ok");
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	finish(t); /* exits 0 within 10 s, socket gone */
}

Test(sleep, a_forked_child_does_not_answer_for_the_parent, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);

	cmd_ok(t, "alloc 1 1000000", "ok");
	cmd_ok(t, "fork", "forked 0");
	status(t); /* the parent still answers: the child did not remove its socket */
	cr_expect_eq(json_num(o.out, "\"info\"", "pid"), t->pid);
	finish(t);
}

Test(sleep, one_device_of_two, .timeout = 60)
{
	const char *env[] = { "SIMDEV_DEVICES=2", NULL };
	struct target *t = start_under_shim(env);
	char cmd[64], s[32];
	const char *dev1;

	cmd_ok(t, "alloc 2 1000000", "ok");
	cmd_ok(t, "device 1", "ok");
	cmd_ok(t, "alloc 3 2000000", "ok");
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "devices", s, sizeof(s)) && !strcmp(s, "0,1"),
		  "%s", o.out);
	dev1 = strstr(o.out, "\"dev\": 1");
	cr_assert(dev1, "a record for device 1: %s", o.out);
	cr_expect_eq(json_num(dev1, NULL, "live"), 6000000);

	snprintf(cmd, sizeof(cmd), "sleep %d --device 1", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), 6000000);
	cr_expect_lt(json_num(o.out, "\"result\"", "copied"), 8000000, "device 0 stays");
	status(t);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0, "device 0 awake: %s", o.out);
	cr_expect_gt(json_num(o.out, "\"devices\": [", "mapped"), 0);
	dev1 = strstr(o.out, "\"dev\": 1");
	cr_assert(dev1);
	cr_expect_eq(json_num(dev1, NULL, "mapped"), 0, "device 1 released: %s", o.out);
	cr_expect_eq(json_num(dev1, NULL, "used"), 0);
	snprintf(cmd, sizeof(cmd), "wake %d --device 1", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 5");

	/* Both at once. */
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), 8000000);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 5");
	finish(t);
}

/* A held tag sleep from vmmctl ends with its wake, even while the program keeps another tag
 * asleep on its own. */
Test(sleep, a_held_tag_sleep_ends_with_its_wake, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char cmd[64], reply[64];

	cmd_ok(t, "tag a", "rc=0");
	cmd_ok(t, "alloc 1 1000000", "ok");
	cmd_ok(t, "tag b", "rc=0");
	cmd_ok(t, "alloc 1 1000000", "ok");
	cmd_ok(t, "tag", "rc=0");
	cmd_ok(t, "sleeptag a", "rc=0");
	snprintf(cmd, sizeof(cmd), "sleep %d --tag b", (int)t->pid);
	ctl_ok(t, cmd);
	target_send(t, "checkone 1");
	cr_expect_neq(target_read(t, reply, sizeof(reply), 400), 0, "held while b sleeps");
	snprintf(cmd, sizeof(cmd), "wake %d --tag b", (int)t->pid);
	ctl_ok(t, cmd);
	cr_assert_eq(target_read(t, reply, sizeof(reply), 5000), 0, "still held after b woke");
	cr_expect_str_eq(reply, "ok");
	cmd_ok(t, "checkone 1", "ok");
	cmd_ok(t, "waketag a", "rc=0");
	cmd_ok(t, "check", "ok 2");
	finish(t);
}

/* An Ascend program: the same control, through the ACL side of the shim. */
Test(sleep, an_ascend_program, .timeout = 60)
{
	struct target *t;
	char cmd[64], s[32];

	setenv("CTL_TARGET", getenv("CTL_ACL_TARGET"), 1);
	t = start_under_shim(NULL);
	status(t);
	cr_expect(json_str(o.out, "\"devices\": [", "backend", s, sizeof(s)) && !strcmp(s, "acl"),
		  "%s", o.out);
	cr_expect(json_str(o.out, "\"info\"", "devices", s, sizeof(s)) && !strcmp(s, "acl:0"),
		  "%s", o.out);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "live"), 14700000);
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	cr_expect_geq(json_num(o.out, "\"result\"", "copied"), 14700000, "%s", o.out);
	status(t);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "used"), 0, "released: %s", o.out);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 6");
	finish(t);
}

Test(sleep, a_sleep_that_fails_half_way_rolls_back, .timeout = 60)
{
	/* The second device-to-host copy of the sleep fails (the program's own copies go through
	 * the runtime, which simdev does not count). */
	const char *env[] = { "SIMDEV_FAIL=cuMemcpyDtoHAsync:2", NULL };
	struct target *t = start_under_shim(env);
	char cmd[64], s[32];

	cmd_ok(t, "alloc 6 3000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "--json sleep %d", (int)t->pid);
	cr_expect_eq(o.code, 1, "%d %s", o.code, o.out);
	cr_expect(json_str(o.out, "\"error\"", "status", s, sizeof(s)) && !strcmp(s, "driver"),
		  "%s", o.out);
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"),
		  "rolled back: %s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "used"), 18000000);
	cmd_ok(t, "check", "ok 6"); /* not held: the gate reopened */
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	ctl_ok(t, cmd);
	snprintf(cmd, sizeof(cmd), "wake %d", (int)t->pid);
	ctl_ok(t, cmd);
	cmd_ok(t, "check", "ok 6");
	finish(t);
}

Test(sleep, a_device_without_memory_is_an_error_that_changes_nothing, .timeout = 60)
{
	struct target *t = start_under_shim(NULL);
	char s[32];

	cmd_ok(t, "alloc 2 1000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "--json sleep %d --device 3", (int)t->pid);
	cr_expect_eq(o.code, 1, "%d %s", o.code, o.out);
	cr_expect(strstr(o.out, "device 3"), "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "wake %d --device 3", (int)t->pid);
	cr_expect_eq(o.code, 1, "%d %s", o.code, o.err);
	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, "awake"));
	cr_expect(strstr(o.out, "\"held\": false"), "%s", o.out);
	cmd_ok(t, "check", "ok 2");
	finish(t);
}
