/* cudaDeviceReset (cuDevicePrimaryCtxReset) of an unmodified program under the shim. The driver
 * frees the context's allocations; the shim's memory is made with the virtual-memory API, which
 * outlives a reset (tests/gpu/PROBE.md (j)), so the shim frees the program's allocations itself;
 * and the streams and staging buffers it made in that context for sleep and wake went with it,
 * so a later sleep makes new ones. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(reset, .fini = harness_cleanup);

#define MIB (1024 * 1024)

static struct ctl_out o; /* large: static, one test per process */

static long long live_bytes(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "status: exit %d %s", o.code, o.err);
	return json_num(o.out, "\"devices\": [", "live");
}

static void sleep_wake(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "sleep: exit %d\n%s%s", o.code, o.out, o.err);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "wake: exit %d\n%s%s", o.code, o.out, o.err);
}

/* The shim's log has no line of a failure after a reset: the heap gives its memory back without
 * a synchronization (the reset ended the context's work, and a synchronization now would name
 * the reset context: CONTEXT_IS_DESTROYED, as on the H100). */
static void expect_clean_log(struct target *t)
{
	static char log[65536];

	target_log(t, log, sizeof(log));
	cr_expect(!strstr(log, "warn") && !strstr(log, "error"), "the shim warned:\n%s", log);
}

/* Four buffers of 8 MiB, a reset by cmd, then new allocations that work (and a sleep and wake
 * of them): the old pointers are gone, a cudaFree of them afterwards is refused, as natively. */
static void reset_frees_everything(const char *cmd)
{
	struct target *t = start_holding(NULL, 4, 8 * MIB);

	cr_assert_eq(live_bytes(t), 32 * MIB);
	cmd_ok(t, cmd, "reset 0 freed 0");
	cr_expect_eq(live_bytes(t), 0, "the reset left the program's memory allocated: %s", o.out);
	cmd_ok(t, "alloc 2 8000000", "ok");
	cmd_ok(t, "check", "ok");
	cr_expect_eq(live_bytes(t), 16000000);
	sleep_wake(t);
	cmd_ok(t, "check", "ok");
	expect_clean_log(t);
	stop_cleanly(t);
}

/* cudaDeviceReset, which goes through the pre-11.0 entry point (tests/gpu/PROBE.md (j)). */
Test(reset, frees_the_programs_memory_as_the_driver_does, .timeout = 60)
{
	reset_frees_everything("reset");
}

/* A driver-API program resets through cuDevicePrimaryCtxReset_v2 and retains the context
 * again. */
Test(reset, a_reset_through_the_v2_entry_point_frees_as_much, .timeout = 60)
{
	reset_frees_everything("reset v2");
}

/* Lines of trace starting with c. */
static int trace_lines(const char *path, char c)
{
	FILE *f = fopen(path, "r");
	char line[128];
	int n = 0;

	cr_assert(f, "no trace at %s", path);
	while (fgets(line, sizeof(line), f))
		n += line[0] == c;
	fclose(f);
	return n;
}

/* VMMSHIM_ALLOC_TRACE records the frees a reset makes: a replay of the trace then ends with
 * nothing live, as the program did. */
Test(reset, the_allocation_trace_records_what_a_reset_freed, .timeout = 60)
{
	char trace[96], env_trace[128];
	struct target *t;

	snprintf(trace, sizeof(trace), "/tmp/vmmshim-reset-trace-%ld", (long)getpid());
	snprintf(env_trace, sizeof(env_trace), "VMMSHIM_ALLOC_TRACE=%s", trace);
	t = start_holding((const char *const[]){ env_trace, NULL }, 4, 8 * MIB);
	cmd_ok(t, "reset", "reset 0 freed 0");
	cmd_ok(t, "alloc 2 8000000", "ok");
	cmd_ok(t, "freeall", "freed 2");
	stop_cleanly(t);
	/* Plain or stream-ordered (the shim orders a lone stream's frees on it): six in all. */
	cr_expect_eq(trace_lines(trace, 'a') + trace_lines(trace, 'A'), 6);
	cr_expect_eq(trace_lines(trace, 'f') + trace_lines(trace, 'F'), 6,
		     "the reset's 4 frees and the program's 2");
	unlink(trace);
}

Test(reset, a_sleep_after_a_reset_keeps_every_byte, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 8 * MIB);

	/* The first cycle makes the copy streams, in the context the reset then destroys. */
	sleep_wake(t);
	cmd_ok(t, "check", "ok");
	cmd_ok(t, "reset", "reset 0");
	cmd_ok(t, "alloc 4 8000000", "ok");
	sleep_wake(t);
	cmd_ok(t, "check", "ok");
	sleep_wake(t);
	cmd_ok(t, "check", "ok");
	/* The first cycle's host backups were pinned in the reset context: pinned again by the
	 * next cycle (else copies run at pageable speed), so the exit unregisters them cleanly. */
	cr_expect_eq(target_stop(t, 10000), 0, "the program did not exit cleanly");
	expect_clean_log(t);
	target_free(t);
}

/* A reset while a sleep holds the program: the held allocations are freed with their host copies,
 * and a wake then gives the program back a device where it allocates anew. (The target's frees
 * of its old pointers after the reset wait at the gate until that wake, as every free does.) */
Test(reset, a_reset_while_asleep_frees_the_held_memory, .timeout = 60)
{
	struct target *t = start_holding(NULL, 4, 8 * MIB);
	char reply[128];
	long long live = -1;

	vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "sleep: exit %d\n%s%s", o.code, o.out, o.err);
	cr_assert_eq(target_send(t, "reset"), 0);
	for (double end = now_s() + 10; now_s() < end && live != 0; usleep(20000))
		live = live_bytes(t);
	cr_expect_eq(live, 0, "the reset left the sleeping memory allocated: %s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "wake: exit %d\n%s%s", o.code, o.out, o.err);
	cr_assert_eq(target_read(t, reply, sizeof(reply), CMD_TIMEOUT_MS), 0, "no reply to reset");
	cr_expect_str_eq(reply, "reset 0 freed 0");
	cmd_ok(t, "alloc 2 8000000", "ok");
	cmd_ok(t, "check", "ok");
	sleep_wake(t);
	cmd_ok(t, "check", "ok");
	stop_cleanly(t);
}

static char log[65536];

/* The program holds 4 MB and has retained its primary context once (the runtime's retain), the
 * shim once more for the control server's thread (a sleep and wake); then its allocator waits for
 * busy_ms of device work with its heap held (37.5 MB freed under it), `vmmctl status` waits for
 * that heap's figures, holding the control plane, and the program lets its retain go: its last.
 * The release must not wait for the status (natively none waits). Returns the status's pid. */
static pid_t last_release_during_a_status(struct target *t, int busy_ms)
{
	char cmd[32], reply[128];
	int rc = -1, ms = -1;
	pid_t status;

	cmd_ok(t, "alloc 1 4000000", "ok"); /* live across the release */
	cmd_ok(t, "alloc 6 6250000", "ok");
	sleep_wake(t); /* the shim retains the context for the server's thread */
	snprintf(cmd, sizeof(cmd), "busy %d", busy_ms);
	cmd_ok(t, cmd, "busy launched");
	cmd_ok(t, "freelast 6", "freed 6");
	cmd_ok(t, "bgalloc 50000000", "bgalloc started"); /* waits for the busy work */
	usleep((useconds_t)(300000 * ctl_slow()));
	status = vmmctl_spawn(t->run_dir, "--timeout 60 status %d", (int)t->pid);
	cr_assert_gt(status, 0);
	/* Once the server has the request, it holds the control plane and waits for the figures. */
	cr_assert(target_log_has(t, "control: status from pid", 10 * ctl_slow()),
		  "the status never came");
	usleep(100000);
	cr_assert_eq(target_cmd(t, "release 0", reply, sizeof(reply), CMD_TIMEOUT_MS), 0);
	cr_assert_eq(sscanf(reply, "release %d took %d ms", &rc, &ms), 2, "%s", reply);
	cr_expect_eq(rc, 0, "%s", reply);
	cr_expect_lt(ms, 1000 * ctl_slow(), "the release waited for the status: %s", reply);
	target_log(t, log, sizeof(log));
	cr_expect(strstr(log, "status look in progress"), "the release was not left to the "
		  "status look (the case this test is for):\n%s", log);
	return status;
}

static void expect_the_allocation_returned(struct target *t)
{
	char reply[128];

	cr_assert_eq(target_read(t, reply, sizeof(reply), 30000), 0, "the allocation never returned");
	cr_expect_str_eq(reply, "bgalloc ok");
}

/* The context has ended (within 10 s) as natively, the program's memory freed. */
static void expect_the_context_ended(struct target *t)
{
	char reply[128];
	int active = -1;

	for (double end = now_s() + 10; now_s() < end && active != 0; usleep(20000)) {
		cr_assert_eq(target_cmd(t, "primary 0", reply, sizeof(reply), CMD_TIMEOUT_MS), 0);
		cr_assert_eq(sscanf(reply, "primary 0 active %d", &active), 1, "%s", reply);
	}
	target_log(t, log, sizeof(log));
	cr_expect_eq(active, 0, "the context outlived the program's last release:\n%s", log);
	cr_expect_eq(live_bytes(t), 0, "the program's memory outlived its context: %s", o.out);
}

/* Lone-stream ordering would have the releases below wait for the busy work first. */
#define RELEASE_ENV { "SIMDEV_MEMORY=64M", "VMMSHIM_LOG=debug", "VMMSHIM_LONE_STREAM=0", NULL }

/* The program's last release of its primary context comes while `vmmctl status` holds the control
 * plane (3 s of busy work, shorter than status's 10 s bound for figures, sanitizers or not). Once
 * the status has answered, the context must have ended as natively, the program's memory freed.
 * It used to stay, allocations and all, until a sleep or wake came. */
Test(reset, a_last_release_during_a_status_look_ends_the_context_after_it, .timeout = 120)
{
	const char *env[] = RELEASE_ENV;
	struct target *t = start_under_shim(env);
	pid_t status;

	status = last_release_during_a_status(t, (int)(3000 * (ctl_slow() < 2 ? ctl_slow() : 2)));
	cr_expect_eq(vmmctl_wait(status, &o, 60000), 0, "status: %s%s", o.out, o.err);
	expect_the_allocation_returned(t);
	expect_the_context_ended(t);
	stop_cleanly(t);
}

/* The same while the allocator waits for longer than status's bound: the status gives up after
 * 10 s as always and answers busy, without ending the context then (that would wait for the
 * allocator too, on one of the server's threads); the allocation's return ends it, with no other
 * look at the process (it used to wait for the next sleep, wake or status: none may come). */
Test(reset, a_release_left_to_a_status_that_gives_up_ends_once_the_allocator_returns,
     .timeout = 120)
{
	const char *env[] = RELEASE_ENV;
	struct target *t = start_under_shim(env);
	double t0, took;
	pid_t status;

	status = last_release_during_a_status(t, (int)(12000 + 3000 * ctl_slow()));
	t0 = now_s(); /* the status began before */
	cr_expect_neq(vmmctl_wait(status, &o, 60000), 0, "status answered: %s", o.out);
	took = now_s() - t0;
	cr_expect(strstr(o.err, "allocator has held its heap for over"), "%s%s", o.out, o.err);
	cr_expect_lt(took, 10 + ctl_slow(), "the status answered %.2f s after the release: it "
		     "waited for the allocator", took);
	expect_the_allocation_returned(t);
	expect_the_context_ended(t);
	stop_cleanly(t);
}
