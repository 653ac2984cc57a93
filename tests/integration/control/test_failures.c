/* Sleep and wake when things go wrong, driven from outside with vmmctl: an undo that fails too
 * (the process stays partly asleep, says so, and a wake completes it), a sleep that cannot drain
 * (it gives up within its deadline), a tag that does not exist, and a program that returns from
 * main while a long sleep runs (exit is bounded and frees nothing still in use). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness_assert.h"

TestSuite(failures, .fini = harness_cleanup);

/* Built with AddressSanitizer (the sanitize pass), the program and the shim are too: ASan then
 * reports a use after free in the log. It must not insist on coming first in the library list
 * (the shim is preloaded before it). */
#if defined(__SANITIZE_ADDRESS__)
#define SAN_ENV "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:halt_on_error=1"
#else
#define SAN_ENV "VMMSHIM_TEST_PLAIN=1"
#endif

static const char *san_only[] = { SAN_ENV, NULL };
static struct ctl_out o; /* large: static, one test per process */

static void status(struct target *t)
{
	vmmctl_run(&o, t->run_dir, -1, "--json status %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "status: exit %d %s", o.code, o.err);
}

static void state_is(struct target *t, const char *want)
{
	char s[32];

	status(t);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)) && !strcmp(s, want),
		  "state %s expected: %s", want, o.out);
}

static void no_sanitizer_report(struct target *t)
{
	static char log[65536];

	target_log(t, log, sizeof(log));
	cr_expect(!strstr(log, "AddressSanitizer") && !strstr(log, "runtime error"), "%s", log);
}

/* vmmctl (or a raw request) on a thread of its own, while the test drives the program. */
struct bg_ctl {
	pthread_t th;
	struct target *t;
	char args[128];
	const char *raw;          /* a raw request line instead of vmmctl */
	struct ctl_out out;       /* vmmctl's exit code and output, or the raw reply in out.out */
	double seconds;
};

static void *bg_main(void *arg)
{
	struct bg_ctl *b = arg;
	double t0 = now_s();
	char sock[400];

	if (b->raw) {
		target_socket(b->t, sock, sizeof(sock));
		b->out.code = raw_request(sock, b->raw, strlen(b->raw), false, 0, b->out.out,
					  sizeof(b->out.out), 60000) > 0 ? 0 : -1;
	} else {
		vmmctl_run(&b->out, b->t->run_dir, -1, "%s", b->args);
	}
	b->seconds = now_s() - t0;
	return NULL;
}

static struct bg_ctl *bg_start(struct target *t, const char *verb, const char *raw)
{
	struct bg_ctl *b = calloc(1, sizeof(*b));

	cr_assert(b);
	b->t = t;
	b->raw = raw;
	snprintf(b->args, sizeof(b->args), "--json %s %d", verb, (int)t->pid);
	cr_assert_eq(pthread_create(&b->th, NULL, bg_main, b), 0);
	return b;
}

static void bg_join(struct bg_ctl *b)
{
	pthread_join(b->th, NULL);
}

/* The number of cuMemCreate calls a fresh program makes for `setup` (learned, not assumed). */
static long long creates_for(const char *setup)
{
	struct target *t = start_under_shim(san_only);
	long long n;

	cmd_ok(t, setup, "ok");
	status(t);
	n = json_num(o.out, "\"devices\": [", "handles_created");
	target_stop(t, 10000);
	target_free(t);
	return n;
}

/* The 5th release of a sleep fails, and then re-creating the released ones fails too: the
 * contents are on the host, so those handles stay asleep with it; the process stays held,
 * reports itself partial, and a wake brings every byte back. */
Test(failures, an_undo_that_fails_leaves_a_partial_state_that_wake_completes, .timeout = 120)
{
	long long h = creates_for("alloc 8 3000000");
	char fail[96], cmd[64], reply[64], s[32];
	long long asleep, resident;

	cr_assert_geq(h, 6, "the setup makes enough handles for a 5th release: %lld", h);
	snprintf(fail, sizeof(fail), "SIMDEV_FAIL=cuMemRelease:5,cuMemCreate:%lld", h + 1);
	const char *env[] = { fail, SAN_ENV, NULL };
	struct target *t = start_under_shim(env);

	cmd_ok(t, "alloc 8 3000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "--json sleep %d", (int)t->pid);
	cr_expect_eq(o.code, 1, "the sleep failed: %d %s", o.code, o.out);
	cr_expect(strstr(o.out, "partially asleep"), "and says the process is partly asleep: %s",
		  o.out);

	state_is(t, "partial");
	asleep = json_num(o.out, "\"devices\": [", "asleep");
	resident = json_num(o.out, "\"devices\": [", "mapped");
	cr_expect_gt(asleep, 0, "%s", o.out);
	cr_expect_gt(resident, 0, "%s", o.out);
	cr_expect_geq(json_num(o.out, "\"devices\": [", "host_backup"), asleep,
		      "what sleeps has its host copy: %s", o.out);
	cr_expect(strstr(o.out, "\"held\": true"), "device work is held: %s", o.out);

	/* The program's device work waits instead of touching released memory. */
	target_send(t, "check");
	cr_expect_neq(target_read(t, reply, sizeof(reply), 500), 0, "a copy ran: '%s'", reply);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "wake completes it: %d %s%s", o.code, o.out, o.err);
	cr_assert_eq(target_read(t, reply, sizeof(reply), 20000), 0, "the check never ran");
	cr_expect_str_eq(reply, "ok 8", "every byte is back");
	state_is(t, "awake");
	cr_expect_eq(json_num(o.out, "\"devices\": [", "asleep"), 0);
	cr_expect(json_str(o.out, "\"info\"", "state", s, sizeof(s)));

	/* And the next cycle works as ever. */
	snprintf(cmd, sizeof(cmd), "sleep %d", (int)t->pid);
	vmmctl_run(&o, t->run_dir, -1, "%s", cmd);
	cr_expect_eq(o.code, 0, "%s", o.err);
	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_expect_eq(o.code, 0, "%s", o.err);
	cmd_ok(t, "check", "ok 8");
	no_sanitizer_report(t);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

/* A kernel that waits for a flag that a copy will write, and the copy is issued after the
 * sleep closed the gate: the device cannot drain. The sleep gives up within its deadline, rolls
 * back and reopens the gate; the copy goes through, the kernel finishes, the program is intact. */
static void cannot_drain(const char *timeout_env, const char *raw)
{
	const char *env[] = { "VMMSHIM_LOG=debug", timeout_env, SAN_ENV, NULL };
	struct target *t = start_under_shim(env);
	struct bg_ctl *b;
	char reply[64];

	cmd_ok(t, "alloc 2 1000000", "ok");
	cmd_ok(t, "spin", "spinning");
	b = bg_start(t, "sleep", raw);
	cr_assert(target_log_has(t, "sleep: device work is held", 20),
		  "the sleep never closed the gate");
	target_send(t, "setflag"); /* waits at the gate: the kernel keeps the device busy */
	bg_join(b);
	cr_expect_eq(b->out.code, raw ? 0 : 1, "the sleep failed: %d %s", b->out.code, b->out.out);
	cr_expect(strstr(b->out.out, raw ? "did%20not%20drain%20within" : "did not drain within"),
		  "and says why: %s", b->out.out);
	cr_expect_lt(b->seconds, 10, "it gave up within its deadline (%.1f s)", b->seconds);
	free(b);
	cr_assert_eq(target_read(t, reply, sizeof(reply), 20000), 0, "the copy never ran");
	cr_expect_str_eq(reply, "flag set");
	cmd_ok(t, "spinwait", "spin ok");
	cmd_ok(t, "check", "ok 2");
	state_is(t, "awake");
	cr_expect(strstr(o.out, "\"held\": false"), "%s", o.out);
	no_sanitizer_report(t);
	cr_expect_eq(target_stop(t, 15000), 0);
	target_free(t);
}

/* The program exits while a kernel of it cannot finish (it waits for a flag nobody writes, as a
 * collective whose peer died waits), with freed memory in quarantine: the exit waits for the
 * device 2 s at most, leaves the memory to the driver and ends. It used to synchronize for the
 * exit's trim until the kernel ended (60 s here; for good on a GPU). */
Test(failures, an_exit_does_not_wait_for_a_device_that_never_finishes, .timeout = 120)
{
	const char *env[] = { "VMMSHIM_LOG=info", SAN_ENV, NULL };
	struct target *t = start_under_shim(env);
	char log[16384];
	double t0, took;

	cmd_ok(t, "alloc 2 1000000", "ok");
	cmd_ok(t, "spin", "spinning");
	cmd_ok(t, "freeall", "freed 2");
	t0 = now_s();
	cr_expect_eq(target_stop(t, 30000), 0, "the program did not exit cleanly");
	took = now_s() - t0;
	cr_log_info("exit beside a kernel that never ends: %.2f s", took);
	cr_expect_lt(took, 6.0 * ctl_slow(), "the exit took %.2f s", took);
	target_log(t, log, sizeof(log));
	cr_expect(strstr(log, "left to the driver"), "%s", log);
	target_free(t);
}

/* A sharing peer asks for a trim while a kernel of the program cannot finish, with freed memory
 * in quarantine: the trim waits for the device as long as the request says (the default 2 s,
 * here 1 s), gives back what is free, and says the quarantine stayed. It used to synchronize
 * on a worker of the control server until the kernel ended (60 s here; for good on a GPU). */
static void trim_beside_a_kernel_that_never_ends(const char *req, double within_s)
{
	struct target *t = start_under_shim(san_only);
	char sock[400], reply[2048];
	double t0, took;
	ssize_t n;

	cmd_ok(t, "alloc 2 1000000", "ok");
	cmd_ok(t, "spin", "spinning");
	cmd_ok(t, "freeall", "freed 2");
	target_socket(t, sock, sizeof(sock));
	t0 = now_s();
	n = raw_request(sock, req, strlen(req), false, 0, reply, sizeof(reply) - 1, 30000);
	took = now_s() - t0;
	cr_assert_gt(n, 0, "no reply to the trim in %.1f s", took);
	reply[n] = 0;
	cr_log_info("trim beside a kernel that never ends: answered in %.2f s", took);
	cr_expect_lt(took, within_s * ctl_slow(), "the trim took %.2f s", took);
	cr_expect(!strncmp(reply, "vmmshim/1 ok\n", 13), "%s", reply);
	cr_expect(strstr(reply, "drained=false") && strstr(reply, "did%20not%20drain"), "%s", reply);
	cmd_ok(t, "check", "ok 0"); /* the program goes on */
	cr_expect_eq(target_stop(t, 30000), 0);
	target_free(t);
}

Test(failures, a_peers_trim_waits_for_the_device_as_long_as_it_asks, .timeout = 120)
{
	trim_beside_a_kernel_that_never_ends("vmmshim/1 trim device=0 timeout_ms=1000\n", 3.0);
}

Test(failures, a_peers_trim_waits_for_the_device_two_seconds_by_default, .timeout = 120)
{
	trim_beside_a_kernel_that_never_ends("vmmshim/1 trim device=0\n", 4.0);
}

Test(failures, a_sleep_that_cannot_drain_gives_up_after_its_timeout, .timeout = 120)
{
	cannot_drain("VMMSHIM_SLEEP_TIMEOUT=2", NULL);
}

Test(failures, a_request_timeout_bounds_the_whole_sleep, .timeout = 120)
{
	cannot_drain("VMMSHIM_SLEEP_TIMEOUT=100", "vmmshim/1 sleep timeout_ms=2500\n");
}

Test(failures, a_tag_that_does_not_exist_is_an_error_and_holds_nothing, .timeout = 60)
{
	struct target *t = start_under_shim(san_only);
	char s[32];

	cmd_ok(t, "alloc 2 1000000", "ok");
	vmmctl_run(&o, t->run_dir, -1, "--json sleep %d --tag nosuchtag", (int)t->pid);
	cr_expect_eq(o.code, 1, "%d %s", o.code, o.out);
	cr_expect(json_str(o.out, "\"error\"", "status", s, sizeof(s)) && !strcmp(s, "invalid"),
		  "%s", o.out);
	cr_expect(strstr(o.out, "no tag"), "%s", o.out);
	state_is(t, "awake");
	cr_expect(strstr(o.out, "\"held\": false"), "nothing is held: %s", o.out);
	cmd_ok(t, "check", "ok 2"); /* answers at once: device work is not held */
	/* The same through the in-process API. */
	cmd_ok(t, "sleeptag nosuchtag", "rc=1");
	cmd_ok(t, "check", "ok 2");
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

/* The program returns from main while a sleep runs whose copy outlasts exit's waits (each
 * device-to-host copy call takes 2.5 s: about 12 s in all), and its exit handlers are slowed too
 * (each address range takes 1 s to free), so that a sleep left running would reach freed state
 * (the app registry, which it sleeps after the heap) before the process ends. Exit must be
 * bounded, and free nothing the sleep still uses: meson sets MALLOC_PERTURB_, so a registry
 * freed under the sleep is garbage that crashes or hangs it (as the code before this test did).
 * An ASan report in the log fails it too, for runs where the shim can be preloaded under ASan. */
Test(failures, exit_during_a_long_sleep_is_bounded_and_safe, .timeout = 120)
{
	const char *env[] = { "VMMSHIM_LOG=debug",
			      "SIMDEV_DELAY=cuMemcpyDtoHAsync:2500,cuMemAddressFree:1000",
			      SAN_ENV, NULL };
	struct target *t = start_under_shim(env);
	struct bg_ctl *b;
	int st = -1;
	double t0;

	cmd_ok(t, "alloc 4 70000000", "ok");
	cmd_ok(t, "appvmm 4194304", "ok");
	b = bg_start(t, "sleep", NULL);
	cr_assert(target_log_has(t, "sleep: device work is held", 20), "the sleep never started");
	t0 = now_s();
	target_send(t, "quit");
	for (int i = 0; i < 300; i++) {
		if (waitpid(t->pid, &st, WNOHANG) == t->pid)
			break;
		usleep(100000);
	}
	cr_assert(st != -1, "the program did not exit within 30 s");
	cr_assert(WIFEXITED(st), "the program died of signal %d", WTERMSIG(st));
	cr_expect_eq(WEXITSTATUS(st), 0, "exit status %d", WEXITSTATUS(st));
	cr_expect_lt(now_s() - t0, 20, "exit took %.1f s", now_s() - t0);
	t->pid = 0; /* reaped */
	bg_join(b);
	cr_expect_neq(b->out.code, 0, "the sleep did not complete: %s", b->out.out);
	free(b);
	no_sanitizer_report(t);
	target_free(t);
}

/* The driver refuses to take back a free handle twice in a row, in a sleep (the program has
 * released nothing before: cuMemRelease calls 1 and 2 are that handle's). The sleep succeeds,
 * `status` shows the bytes as release_pending (and the human view says so), and the next sleep
 * gives them back. */
Test(failures, memory_the_driver_will_not_take_back_shows_and_goes_at_the_next_sleep,
     .timeout = 60)
{
	const char *env[] = { "SIMDEV_FAIL=cuMemRelease:1,cuMemRelease:2", SAN_ENV, NULL };
	struct target *t = start_under_shim(env);
	long long held;

	cmd_ok(t, "alloc 1 1000000", "ok");
	cmd_ok(t, "freeall", "freed 1");
	status(t);
	cr_assert_eq(json_num(o.out, "\"devices\": [", "handles_released"), 0, "%s", o.out);
	held = json_num(o.out, "\"devices\": [", "mapped");
	cr_assert_gt(held, 0, "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "release_pending"), 0, "%s", o.out);

	vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "the sleep succeeds: %s%s", o.out, o.err);
	state_is(t, "asleep");
	cr_expect_eq(json_num(o.out, "\"devices\": [", "release_pending"), held, "%s", o.out);
	cr_expect_eq(json_num(o.out, "\"devices\": [", "mapped"), 0, "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)t->pid);
	cr_expect(strstr(o.out, "the driver would not take them yet"), "%s", o.out);

	vmmctl_run(&o, t->run_dir, -1, "wake %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "%s%s", o.out, o.err);
	vmmctl_run(&o, t->run_dir, -1, "sleep %d", (int)t->pid);
	cr_assert_eq(o.code, 0, "%s%s", o.out, o.err);
	state_is(t, "asleep");
	cr_expect_eq(json_num(o.out, "\"devices\": [", "release_pending"), 0, "%s", o.out);
	vmmctl_run(&o, t->run_dir, -1, "status %d", (int)t->pid);
	cr_expect(!strstr(o.out, "would not take"), "%s", o.out);
	no_sanitizer_report(t);
	cr_expect_eq(target_stop(t, 10000), 0);
	target_free(t);
}

/* How many times t's log says `what`. */
static int log_count(struct target *t, const char *what)
{
	static char log[1 << 20];

	target_log(t, log, sizeof(log));
	return count_in(log, what);
}

/* An autowake that keeps failing is retried once a second, however many threads wait for it:
 * a slept with --autowake, another program (b, one simdev device for both) takes its memory, and
 * four of a's threads meet the closed gate. Each thread used to retry on its own second, so the
 * wakes (and their warnings) came about four times as often. Once b has ended, a wakes and its
 * threads end with their data intact. */
Test(failures, a_failing_autowake_is_retried_once_a_second_for_all_threads, .timeout = 120)
{
	char group[96], mem[] = "SIMDEV_MEMORY=64M", cmd[160], reply[128];
	const char *env[] = { group, mem, SAN_ENV, NULL };
	struct target *a, *b;
	int tries;
	double t0, span;

	snprintf(group, sizeof(group), "SIMDEV_SHARED=autowake%d_%ld", (int)getpid(),
		 (long)time(NULL));
	a = start_under_shim(env);
	cmd_ok(a, "alloc 6 6250000", "ok"); /* small: the target fills and checks every byte */
	vmmctl_run(&o, a->run_dir, -1, "sleep %d --autowake", (int)a->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep: %s%s", o.out, o.err);
	b = start_under_shim(env);
	cmd_ok(b, "alloc 1 50000000", "ok"); /* a's wake cannot have its 37.5 MB back now */
	cr_assert_eq(target_send(a, "threads 4 0.2"), 0);
	cr_assert(target_log_has(a, "autowake failed", 20), "no autowake was tried");
	t0 = now_s();
	usleep(3000000);
	tries = log_count(a, "autowake failed");
	span = now_s() - t0;
	cr_log_info("%d failed autowakes in the first %.1f s with 4 threads waiting", tries, span);
	printf("autowake: %d failed tries over %.1f s, 4 threads waiting\n", tries, span);
	/* One at the start, then one a second (and one more for the edges of the span). */
	cr_expect_leq(tries, (int)span + 2, "%d tries in %.1f s", tries, span);
	cr_expect_eq(target_stop(b, 10000), 0); /* its memory back to the driver (a free keeps it) */
	cr_assert_eq(target_read(a, reply, sizeof(reply), 30000), 0, "a's threads never ended");
	cr_expect(!strncmp(reply, "threads ok", 10), "a's threads: %s", reply);
	cmd_ok(a, "check", "ok");
	no_sanitizer_report(a);
	cr_expect_eq(target_stop(a, 10000), 0);
	target_free(a);
	target_free(b);
	snprintf(cmd, sizeof(cmd), "rm -f /dev/shm/simdev-cuda-%u-%s*", (unsigned)getuid(),
		 group + strlen("SIMDEV_SHARED="));
	if (system(cmd))
		fprintf(stderr, "could not remove %s's device\n", group);
}
