/* GPU sharing end to end (VMMSHIM_SHARE=1): unmodified ctl_target processes under the shim in one
 * simdev group (SIMDEV_SHARED: one 256 MiB device for all of them) and one control folder. Each
 * phase needs most of the device; an allocation that does not fit sleeps an eligible peer, which
 * wakes by itself at its next device work. Every process checks its data after every switch. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

TestSuite(share, .fini = harness_cleanup);

static struct ctl_out o; /* large: static, one test per process */

/* Under a sanitizer (CTL_SANITIZER: the build's, or thread in the TSan pass) every size is a
 * quarter: the same proportions, at a cost instrumented fills and checks can afford. */
static unsigned scale(void)
{
	const char *s = getenv("CTL_SANITIZER");

	return s && *s ? 4 : 1;
}

/* "alloc N BYTES" with BYTES scaled. */
static const char *alloc_cmd(int n, size_t bytes)
{
	static char cmd[4][64];
	static int k;
	char *c = cmd[k++ % 4];

	snprintf(c, 64, "alloc %d %zu", n, bytes / scale());
	return c;
}
static char dir[64], group[64];

/* A shared control folder and simdev group for this test. */
static void setup_group(void)
{
	snprintf(dir, sizeof(dir), "/tmp/vmmshim-sharetest-XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(group, sizeof(group), "sharetest%ld_%ld", (long)getpid(), (long)time(NULL));
}

static void teardown_group(void)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'; rm -f /dev/shm/simdev-cuda-%u-%s*", dir,
		 (unsigned)getuid(), group); /* the group's name starts the other GPU's too */
	if (system(cmd))
		fprintf(stderr, "could not clean %s\n", dir);
}

/* A sharing ctl_target of simdev group grp (another group is another GPU of the node) with
 * priority prio and the extra settings extra ("K=V K=V", may be NULL). */
static struct target *start_in(const char *grp, int prio, const char *extra)
{
	static char envs[8][12][160];
	static int k;
	char (*e)[160] = envs[k++ % 8], more[160], *save = NULL;
	const char *env[12];
	struct target *t;
	int n = 0;

	snprintf(e[n++], 160, "VMMSHIM_RUN_DIR=%s", dir);
	snprintf(e[n++], 160, "SIMDEV_SHARED=%s", grp);
	snprintf(e[n++], 160, "SIMDEV_MEMORY=%uM", 256 / scale());
	snprintf(e[n++], 160, "VMMSHIM_SHARE=1");
	snprintf(e[n++], 160, "VMMSHIM_PRIORITY=%d", prio);
	snprintf(e[n++], 160, "VMMSHIM_LOG=info");
	/* For the sanitize build (the shim preloaded after an ASan program); ignored otherwise. */
	snprintf(e[n++], 160, "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0:halt_on_error=1");
	snprintf(more, sizeof(more), "%s", extra ? extra : "VMMSHIM_SHARE_IDLE=200ms");
	for (char *kv = strtok_r(more, " ", &save); kv && n < 11; kv = strtok_r(NULL, " ", &save))
		snprintf(e[n++], 160, "%s", kv);
	for (int i = 0; i < n; i++)
		env[i] = e[i];
	env[n] = NULL;
	t = target_start(env);
	cr_assert(t, "ctl_target did not start under the shim");
	return t;
}

/* A sharing ctl_target on the test's GPU (its simdev group). */
static struct target *start(int prio, const char *extra)
{
	return start_in(group, prio, extra);
}

static void cmd_ok(struct target *t, const char *cmd, const char *want)
{
	char reply[256], log[8192];

	cr_assert_eq(target_cmd(t, cmd, reply, sizeof(reply), 60000), 0, "pid %ld: no reply to '%s'",
		     (long)t->pid, cmd);
	if (strncmp(reply, want, strlen(want))) {
		target_log(t, log, sizeof(log));
		cr_assert_fail("pid %ld: '%s' answered '%s', expected '%s...'\nlog:\n%s",
			       (long)t->pid, cmd, reply, want, log);
	}
}

/* vmmctl status --json of t. */
static void status_of(struct target *t)
{
	vmmctl_run(&o, dir, -1, "status --json %ld", (long)t->pid);
	cr_assert_eq(o.code, 0, "vmmctl status: %d\n%s%s", o.code, o.out, o.err);
}

#define PHASE alloc_cmd(6, 25000000) /* 150 MB of the group's 256 MiB */

Test(share, two_processes_alternate_phases_with_data_intact, .timeout = 240)
{
	struct target *a, *b;

	setup_group();
	a = start(0, NULL);
	b = start(0, NULL);
	cmd_ok(a, PHASE, "ok");
	for (int round = 0; round < 3; round++) {
		usleep(300000); /* a turns idle */
		cmd_ok(b, PHASE, "ok");
		cmd_ok(b, "check", "ok");
		status_of(a);
		cr_expect(strstr(o.out, "\"slept_by\": ") && json_num(o.out, NULL, "slept_by") ==
			  b->pid, "a is asleep by b:\n%s", o.out);
		cmd_ok(b, "freeall", "freed 6");
		cmd_ok(a, "check", "ok"); /* wakes a by itself */
		cmd_ok(a, "freeall", "freed 6");
		cmd_ok(a, PHASE, "ok");
		cmd_ok(a, "check", "ok");
	}
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

Test(share, three_processes_take_turns, .timeout = 240)
{
	struct target *t[3];

	setup_group();
	for (int i = 0; i < 3; i++)
		t[i] = start(0, NULL);
	cmd_ok(t[0], PHASE, "ok");
	for (int round = 1; round <= 6; round++) {
		struct target *now = t[round % 3];

		usleep(300000);
		cmd_ok(now, "check", "ok");  /* wakes it if it sleeps, or checks nothing */
		cmd_ok(now, "freeall", "freed");
		cmd_ok(now, PHASE, "ok");
		cmd_ok(now, "check", "ok");
	}
	for (int i = 0; i < 3; i++) {
		usleep(300000);
		cmd_ok(t[i], "check", "ok");
		cr_expect_eq(target_stop(t[i], 10000), 0);
	}
	teardown_group();
}

Test(share, strict_priority_never_sleeps_a_higher_one, .timeout = 240)
{
	struct target *hi, *lo, *top;
	struct timespec t0, t1;

	setup_group();
	hi = start(1, NULL);
	lo = start(0, NULL);
	top = start(2, NULL);
	cmd_ok(hi, PHASE, "ok");
	usleep(300000);
	/* A lower priority gets the driver's out-of-memory error at once. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cmd_ok(lo, alloc_cmd(1, 150000000), "error cudaMalloc");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	cr_expect_lt(t1.tv_sec - t0.tv_sec, 3, "the refusal did not wait for nothing");
	status_of(hi);
	cr_expect(strstr(o.out, "\"state\": \"awake\""), "%s", o.out);
	/* A higher one sleeps it, busy or not. */
	cmd_ok(hi, "check", "ok");
	cmd_ok(top, PHASE, "ok");
	status_of(hi);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), top->pid, "%s", o.out);
	cmd_ok(top, "check", "ok");
	cmd_ok(top, "freeall", "freed");
	cmd_ok(hi, "check", "ok");
	for (int i = 0; i < 3; i++)
		cr_expect_eq(target_stop(i == 0 ? hi : i == 1 ? lo : top, 10000), 0);
	teardown_group();
}

/* Equal priorities: a busy peer is not slept before its time slice ends (the requester waits,
 * bounded), and is once it has (VMMSHIM_SHARE_SLICE=2 for the requester). */
Test(share, equal_priority_waits_for_the_time_slice, .timeout = 150)
{
	struct target *a, *b;
	char reply[256];
	struct timespec t0, t1;
	double waited;

	setup_group();
	a = start(0, "VMMSHIM_SHARE_IDLE=60");
	b = start(0, "VMMSHIM_SHARE_SLICE=4");
	cmd_ok(a, PHASE, "ok");
	/* a keeps submitting (never idle for 60 s) while b asks. */
	cr_assert_eq(target_send(a, "threads 1 8"), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	cmd_ok(b, alloc_cmd(1, 150000000), "ok");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	waited = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	cr_expect_geq(waited, 1.0, "b did not wait for a's time slice (%.1f s)", waited);
	status_of(a);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), b->pid, "%s", o.out);
	cmd_ok(b, "check", "ok");
	cmd_ok(b, "freeall", "freed 1");
	cr_assert_eq(target_read(a, reply, sizeof(reply), 60000), 0, "a's threads did not end");
	cr_expect(!strncmp(reply, "threads ok", 10), "a's threads: %s", reply);
	cmd_ok(a, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

/* How many peers t's shim has slept so far (its log). */
static int sleeps_by(struct target *t)
{
	static char log[1 << 20];
	int n = 0;

	target_log(t, log, sizeof(log));
	for (const char *p = log; (p = strstr(p, "share: slept pid")); p++)
		n++;
	return n;
}

/* How long t has waited for memory in all (0 before its first allocation: no socket yet). */
static long long waited_ms(struct target *t)
{
	vmmctl_run(&o, dir, -1, "status --json %ld", (long)t->pid);
	return o.code == 3 ? 0 : json_num(o.out, NULL, "waited_ms");
}

/* Randomized: four equal-priority processes (short idle and residency), random phases of 30 to
 * 100 MB in a 256 MiB group, some processes killed at any moment and replaced. Steps are spaced
 * so that every other process is idle: an eligible sleeper can always free enough, so no
 * allocation may fail; one that finds enough free memory must neither sleep anyone nor wait; every survivor's data is
 * intact at the end. The seed is printed (CTL_SHARE_SEED repeats a run). */
Test(share, randomized_phases_with_kills, .timeout = 240)
{
	const char *rules = "VMMSHIM_SHARE_RESIDENCY=100ms";
	struct target *t[4];
	unsigned seed = getenv("CTL_SHARE_SEED") ? (unsigned)atoi(getenv("CTL_SHARE_SEED")) :
						    (unsigned)time(NULL);
	char reply[256], cmd[64];
	int kills = 0;

	cr_log_info("seed %u", seed);
	srand(seed);
	setup_group();
	for (int i = 0; i < 4; i++)
		t[i] = start(0, rules);
	for (int step = 0; step < 10; step++) {
		int i = rand() % 4, r = rand() % 10;
		size_t want = (size_t)(30 + rand() % 71) * 1000000;
		size_t used = 0;
		long long waited;
		int slept;

		usleep(450000); /* everyone else idle (VMMSHIM_SHARE_IDLE=200ms) */
		if (r == 0 && kills < 3) {
			int v = (i + 1) % 4;

			kill(t[v]->pid, SIGKILL);
			target_kill(t[v]);
			t[v] = start(0, rules);
			kills++;
			continue;
		}
		cmd_ok(t[i], "check", "ok");
		cmd_ok(t[i], "freeall", "freed");
		cr_assert_eq(target_cmd(t[i], "memused", reply, sizeof(reply), 30000), 0);
		sscanf(reply, "used %zu", &used);
		snprintf(cmd, sizeof(cmd), "%s", alloc_cmd(1, want));
		slept = sleeps_by(t[i]);
		waited = waited_ms(t[i]);
		cmd_ok(t[i], cmd, "ok");
		/* Enough was free (with a 16 MiB margin for rounding): it slept nobody and did not
		 * wait. */
		if (used + want / scale() + (16u << 20) / scale() <= (256u << 20) / scale()) {
			cr_expect_eq(sleeps_by(t[i]), slept, "step %d: %zu bytes with %zu used slept "
				     "a peer", step, want, used);
			cr_expect_eq(waited_ms(t[i]), waited, "step %d: %zu bytes with %zu used "
				     "waited", step, want, used);
		}
		cmd_ok(t[i], "check", "ok");
	}
	for (int i = 0; i < 4; i++) {
		usleep(300000);
		cmd_ok(t[i], "check", "ok");
		cr_expect_eq(target_stop(t[i], 20000), 0);
	}
	cr_log_info("%d processes killed and replaced", kills);
	teardown_group();
}

/* The seconds of t's last "woke by itself" (its wake's own copy time), or 0. */
static double last_wake_seconds(struct target *t)
{
	static char log[1 << 20];
	const char *p, *last = NULL;
	double s = 0;

	target_log(t, log, sizeof(log));
	for (p = log; (p = strstr(p, "woke by itself:")); p++)
		last = p;
	if (last && (p = strstr(last, " in ")))
		sscanf(p, " in %lf", &s);
	return s;
}

/* A new group where a (priority 1) was slept (vmmctl, with autowake) and b (priority 2) took the
 * memory without ever having to make room; a's autowake, sent a check, waits for memory b holds
 * (it may not sleep b). Returns once a's status says it waits; o holds that status. */
static void a_waits_for_b(struct target **a, struct target **b)
{
	setup_group();
	*a = start(1, NULL);
	*b = start(2, NULL);
	cmd_ok(*a, PHASE, "ok");
	vmmctl_run(&o, dir, -1, "sleep %ld --autowake", (long)(*a)->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep a: %s%s", o.out, o.err);
	cmd_ok(*b, PHASE, "ok"); /* fits: b's first allocation, no room made */
	cr_assert_eq(target_send(*a, "check"), 0);
	for (int i = 0; i < 100; i++) {
		status_of(*a);
		if (strstr(o.out, "\"waiting\": true"))
			break;
		usleep(50000);
	}
	cr_assert(strstr(o.out, "\"waiting\": true"), "a does not wait:\n%s", o.out);
}

/* a waits for b's memory (a_waits_for_b). What ends the wait, b's free or b's death, must wake
 * it at once: the time from the free to a's answer, less its wake's own copy, is printed (the
 * "retry latency"), and a's log must name the event that woke it. */
static void waiter_woken_by(bool kill_b)
{
	struct target *a, *b;
	char reply[256], log[1 << 14];
	double t_free, t_done, latency, t_check, woke_ms;

	a_waits_for_b(&a, &b);
	usleep(500000); /* well inside the wait: a sleeps, not between two looks */
	if (kill_b) {
		kill(b->pid, SIGKILL);
		target_kill(b);
	} else {
		cmd_ok(b, "freeall", "freed 6");
	}
	t_free = now_s();
	cr_assert_eq(target_read(a, reply, sizeof(reply), 60000), 0, "a never answered");
	t_done = now_s();
	target_log(a, log, sizeof(log));
	cr_assert(!strncmp(reply, "ok", 2), "a's check: %s\nlog:\n%s", reply, log);
	/* What the answer cost besides the wait: the wake's copy and a check of the data. */
	t_check = now_s();
	cmd_ok(a, "check", "ok");
	t_check = now_s() - t_check;
	latency = t_done - t_free - last_wake_seconds(a) - t_check;
	cr_log_info("retry latency after %s: %.1f ms (wake copy %.1f ms, check %.1f ms)",
		    kill_b ? "the peer's death" : "the peer's free", latency * 1000,
		    last_wake_seconds(a) * 1000, t_check * 1000);
	printf("share wait: retry latency after %s: %.1f ms\n",
	       kill_b ? "the peer's death" : "the peer's free", latency * 1000);
	/* The shim's own measure: from the free's signal to the waiter awake. */
	if (!kill_b && strstr(log, "woken by a free (") &&
	    sscanf(strstr(log, "woken by a free (") + 17, "%lf", &woke_ms) == 1)
		printf("share wait: the waiter woke %.1f ms after the free's signal\n", woke_ms);
	cr_expect(strstr(log, kill_b ? "woken by the exit of pid" : "woken by a free"),
		  "a's wait did not end by the event:\n%s", log);
	cr_expect_eq(target_stop(a, 10000), 0);
	if (!kill_b)
		cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

/* An operator holds a asleep (vmmctl sleep, no autowake) and wakes it later, when b (lower
 * priority) has taken the memory: the wake makes room under the sharing rules, as a's own wake
 * would, by sleeping b. It used to fail at once, "waking needs N bytes", and again at every
 * retry for as long as b held the memory (the sharing soak found it). */
Test(share, a_wake_from_vmmctl_makes_room_under_the_rules, .timeout = 120)
{
	struct target *a, *b;

	setup_group();
	a = start(1, NULL);
	b = start(0, NULL);
	cmd_ok(a, PHASE, "ok");
	vmmctl_run(&o, dir, -1, "sleep %ld", (long)a->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep a: %s%s", o.out, o.err);
	cmd_ok(b, PHASE, "ok"); /* the memory a released */
	vmmctl_run(&o, dir, -1, "--json wake %ld", (long)a->pid);
	cr_expect_eq(o.code, 0, "vmmctl wake a: %s%s", o.out, o.err);
	status_of(b);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), a->pid, "b was slept for a's wake: %s",
		     o.out);
	cmd_ok(a, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0); /* its memory back: b wakes at its check */
	cmd_ok(b, "check", "ok");
	cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

/* The same wake with nobody the rules let it sleep (b has the higher priority): it waits the
 * sharing wait for memory freed, then fails out of memory, saying so; a stays asleep, whole. */
Test(share, a_wake_from_vmmctl_sleeps_no_higher_priority, .timeout = 120)
{
	struct target *a, *b;

	setup_group();
	a = start(0, "VMMSHIM_SHARE_WAIT=2");
	b = start(1, NULL);
	cmd_ok(a, PHASE, "ok");
	vmmctl_run(&o, dir, -1, "sleep %ld", (long)a->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep a: %s%s", o.out, o.err);
	cmd_ok(b, PHASE, "ok");
	vmmctl_run(&o, dir, -1, "--json wake %ld", (long)a->pid);
	cr_expect_eq(o.code, 1, "vmmctl wake a: %s%s", o.out, o.err);
	cr_expect(strstr(o.out, "no sharing process could make room"), "%s", o.out);
	status_of(b);
	cr_expect(strstr(o.out, "\"state\": \"awake\""), "b stays awake: %s", o.out);
	cr_expect_eq(target_stop(b, 10000), 0);
	vmmctl_run(&o, dir, -1, "wake %ld", (long)a->pid); /* room now */
	cr_expect_eq(o.code, 0, "vmmctl wake a after b: %s%s", o.out, o.err);
	cmd_ok(a, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	teardown_group();
}

/* A wake of one tag makes room for that tag's bytes only. a (priority 1) wakes its small tag
 * (30 MB of its 210): b (priority 0, 120 MB) may be slept, c (priority 2) may not, and ~23 MB
 * are free. b's memory and the free memory hold the tag's 30 MB, not a's 210, which the wake
 * used to count: it slept nobody then, since that could not be enough, and failed after the
 * sharing wait. */
Test(share, a_wake_of_one_tag_makes_room_for_that_tag_only, .timeout = 120)
{
	struct target *a, *b, *c;

	setup_group();
	a = start(1, "VMMSHIM_SHARE_WAIT=3");
	b = start(0, NULL);
	c = start(2, NULL);
	cmd_ok(a, "tag small", "rc=0");
	cmd_ok(a, alloc_cmd(1, 30000000), "ok");
	cmd_ok(a, "tag big", "rc=0");
	cmd_ok(a, alloc_cmd(1, 180000000), "ok");
	vmmctl_run(&o, dir, -1, "sleep %ld", (long)a->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep a: %s%s", o.out, o.err);
	cmd_ok(b, alloc_cmd(1, 120000000), "ok");
	cmd_ok(c, alloc_cmd(1, 125000000), "ok"); /* ~23 MB left free */
	vmmctl_run(&o, dir, -1, "--json wake %ld --tag small", (long)a->pid);
	cr_expect_eq(o.code, 0, "vmmctl wake a --tag small: %s%s", o.out, o.err);
	status_of(b);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), a->pid, "b slept for a's tag: %s", o.out);
	status_of(c);
	cr_expect(strstr(o.out, "\"state\": \"awake\""), "c stays awake: %s", o.out);
	cr_expect_eq(target_stop(b, 10000), 0);
	cr_expect_eq(target_stop(c, 10000), 0);
	/* Its big tag is still held asleep: vmmctl wakes it. */
	vmmctl_run(&o, dir, -1, "wake %ld", (long)a->pid);
	cr_expect_eq(o.code, 0, "vmmctl wake a: %s%s", o.out, o.err);
	cmd_ok(a, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	teardown_group();
}

Test(share, a_waiting_wake_is_woken_by_a_peers_free, .timeout = 120)
{
	waiter_woken_by(false);
}

Test(share, a_waiting_wake_is_woken_by_a_peers_death, .timeout = 120)
{
	waiter_woken_by(true);
}

/* A waiter beside a peer that frees all the time: each free signals the waiter, but it must not
 * look (two calls to every peer, a trim of their caches) once per free. a waits for b's memory
 * (a_waits_for_b) while b runs two seconds of allocate-free loops; a's looks over them are
 * counted, and printed. */
Test(share, a_peer_freeing_all_the_time_does_not_drive_the_waiter_round, .timeout = 120)
{
	struct target *a, *b;
	char reply[256];
	long long looks0, looks1;

	a_waits_for_b(&a, &b);
	looks0 = json_num(o.out, NULL, "looks");
	cmd_ok(b, "threads 1 2", "threads ok");
	status_of(a);
	looks1 = json_num(o.out, NULL, "looks");
	cr_log_info("a looked %lld times over b's 2 s of frees", looks1 - looks0);
	printf("share wait: %lld looks over a peer's 2 s of frees\n", looks1 - looks0);
	/* Unthrottled, a looked once per free: hundreds a second. The bound is a look every
	 * ~100 ms once the frees keep coming, with room for the first short gaps. */
	cr_expect_leq(looks1 - looks0, 40, "a looked %lld times in 2 s", looks1 - looks0);
	cr_expect(strstr(o.out, "\"waiting\": true"), "a stopped waiting:\n%s", o.out);
	cmd_ok(b, "freeall", "freed 6");
	cr_assert_eq(target_read(a, reply, sizeof(reply), 60000), 0, "a never answered");
	cr_expect(!strncmp(reply, "ok", 2), "a's check: %s", reply);
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

/* A sharing peer that is stopped (SIGSTOP: its socket still takes connections, nobody answers)
 * costs a round what is left of the wait, not 2 s per call to it: a (VMMSHIM_SHARE_WAIT=1) needs
 * memory that b (higher priority) holds, and its out-of-memory answer comes within about its
 * wait, the GPU's lock held no longer. */
Test(share, a_stopped_peer_does_not_hold_a_round_past_the_wait, .timeout = 120)
{
	struct target *a, *b, *c;
	double t0, took;

	setup_group();
	a = start(0, "VMMSHIM_SHARE_WAIT=1");
	b = start(1, NULL);
	c = start(0, NULL);
	cmd_ok(c, alloc_cmd(1, 10000000), "ok"); /* its socket is there */
	cmd_ok(b, PHASE, "ok");
	cr_assert_eq(kill(c->pid, SIGSTOP), 0);
	t0 = now_s();
	cmd_ok(a, alloc_cmd(1, 150000000), "error cudaMalloc");
	took = now_s() - t0;
	cr_assert_eq(kill(c->pid, SIGCONT), 0);
	cr_log_info("out of memory after %.2f s beside a stopped peer", took);
	printf("share wait: out of memory after %.2f s beside a stopped peer (wait 1 s)\n", took);
	cr_expect_lt(took, 1.8, "the answer took %.2f s for a wait of 1 s", took);
	cmd_ok(b, "check", "ok");
	cmd_ok(c, "check", "ok");
	for (int i = 0; i < 3; i++)
		cr_expect_eq(target_stop(i == 0 ? a : i == 1 ? b : c, 10000), 0);
	teardown_group();
}

/* Processes that do not answer (stopped) are looked at beside the others, not before them: a
 * (priority 1, VMMSHIM_SHARE_WAIT=6) needs memory that b (priority 0) holds, with three stopped
 * processes in the folder. One after another, each took 2 s of the wait before anything was slept
 * (6 s: the whole wait); side by side a's allocation succeeds once the slowest call ends. */
Test(share, stopped_processes_are_looked_at_beside_the_others, .timeout = 120)
{
	struct target *a, *b, *c[3];
	static char log[65536];
	const char *served;
	double t0, took, in_shim = 0;

	setup_group();
	a = start(1, "VMMSHIM_SHARE_WAIT=6");
	b = start(0, NULL);
	for (int i = 0; i < 3; i++) {
		c[i] = start(0, NULL);
		cmd_ok(c[i], alloc_cmd(1, 4000000), "ok"); /* its socket is there */
	}
	cmd_ok(b, PHASE, "ok");
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kill(c[i]->pid, SIGSTOP), 0);
	t0 = now_s();
	cmd_ok(a, alloc_cmd(1, 150000000), "ok");
	took = now_s() - t0;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(kill(c[i]->pid, SIGCONT), 0);
	/* The shim's own figure: the command's time adds the program's fill of the memory, slow
	 * under TSan. */
	target_log(a, log, sizeof(log));
	served = strstr(log, "served after ");
	cr_assert(served && sscanf(served, "served after %lf", &in_shim) == 1, "a's log:\n%s", log);
	cr_log_info("room made after %.2f s (%.2f s in the shim) beside 3 stopped processes", took,
		    in_shim);
	printf("share wait: room made after %.2f s (%.2f s in the shim) beside 3 stopped processes "
	       "(wait 6 s)\n", took, in_shim);
	cr_expect_lt(in_shim, 4.0, "the room came after %.2f s", in_shim);
	cmd_ok(a, "check", "ok");
	cmd_ok(a, "freeall", "freed 1");
	cmd_ok(b, "check", "ok"); /* wakes by itself */
	for (int i = 0; i < 3; i++)
		cmd_ok(c[i], "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_expect_eq(target_stop(b, 10000), 0);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(target_stop(c[i], 10000), 0);
	teardown_group();
}

/* A peer whose allocator waits for its device answers hello busy, without figures: the round
 * must look again soon, not take it for nobody and fail. b (priority 0) waits 3 s for its device
 * inside an allocation; a (priority 1) asks meanwhile for memory b holds: it waits, then sleeps
 * b once b answers, and both keep their data (b's allocation ends once a has gone). */
Test(share, a_peer_busy_at_its_device_is_looked_at_again, .timeout = 120)
{
	struct target *a, *b;
	char reply[256], cmd[32];

	setup_group();
	a = start(1, NULL);
	b = start(0, NULL);
	cmd_ok(b, alloc_cmd(6, 25000000), "ok");
	snprintf(cmd, sizeof(cmd), "busy %d", 3000);
	cmd_ok(b, cmd, "busy launched");
	cmd_ok(b, "freeall", "freed 6");
	/* Its quarantine is what it needs: it waits for the busy work, its heap held. */
	cr_assert_eq(target_send(b, alloc_cmd(1, 140000000)), 0);
	usleep(700000);
	cmd_ok(a, alloc_cmd(1, 140000000), "ok");
	status_of(b);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), a->pid, "%s", o.out);
	cmd_ok(a, "check", "ok");
	/* b's allocation writes its data once it wakes, which it can only once a is gone. */
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_assert_eq(target_read(b, reply, sizeof(reply), 30000), 0, "b's allocation never returned");
	cr_expect(!strncmp(reply, "ok", 2), "b's allocation: %s", reply);
	cmd_ok(b, "check", "ok");
	cr_expect_eq(target_stop(b, 10000), 0);
	teardown_group();
}

/* The race between an allocation's attempt and a sleep: a slept while its attempt, holding the
 * GPU's lock, is between its look at a's state and the gate (the test hook widens that window to
 * 2 s). The attempt must not then wait at the closed gate holding the lock (vmmctl's sleep holds a
 * until a wake: forever): b (higher priority) must still get the lock and make room by sleeping
 * d, within its own 5 s wait. */
Test(share, a_sleep_between_the_check_and_the_gate_does_not_hold_the_lock, .timeout = 120)
{
	struct target *a, *b, *d;
	char reply[256];

	setup_group();
	a = start(0, "VMMSHIM_TEST_SHARE_STALL_MS=2000");
	d = start(0, NULL);
	b = start(1, "VMMSHIM_SHARE_WAIT=5");
	cmd_ok(a, alloc_cmd(1, 100000000), "ok");
	cmd_ok(d, alloc_cmd(1, 100000000), "ok");
	cr_assert_eq(target_send(a, alloc_cmd(1, 200000000)), 0); /* no room: a decides, stalls */
	usleep(700000);
	vmmctl_run(&o, dir, -1, "sleep %ld", (long)a->pid);
	cr_assert_eq(o.code, 0, "vmmctl sleep a: %s%s", o.out, o.err);
	cmd_ok(b, alloc_cmd(1, 200000000), "ok"); /* the lock is free: d is slept for it */
	status_of(d);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), b->pid, "%s", o.out);
	cmd_ok(b, "check", "ok");
	cr_expect_eq(target_stop(b, 10000), 0); /* its memory back to the driver */
	vmmctl_run(&o, dir, -1, "wake %ld", (long)a->pid);
	cr_expect_eq(o.code, 0, "vmmctl wake a: %s%s", o.out, o.err);
	cr_assert_eq(target_read(a, reply, sizeof(reply), 30000), 0, "a's allocation never ended");
	cmd_ok(a, "check", "ok");
	cmd_ok(d, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	cr_expect_eq(target_stop(d, 20000), 0);
	teardown_group();
}

/* The cases of a round's wait for its own device: b holds 100 MB (priority 0), a 60 MB (priority
 * 0, and may not sleep b for 12 s), c has priority 1; a waits for 150 MB on a thread (bgalloc). */
struct own_device_case {
	struct target *a, *b, *c;
};

static void own_device_setup(struct own_device_case *k)
{
	setup_group();
	k->b = start(0, NULL);
	cmd_ok(k->b, alloc_cmd(1, 100000000), "ok");
	k->a = start(0, "VMMSHIM_SHARE_IDLE=60 VMMSHIM_SHARE_SLICE=12");
	k->c = start(1, NULL);
	cmd_ok(k->a, alloc_cmd(1, 60000000), "ok");
}

static void own_device_bgalloc(struct own_device_case *k)
{
	char cmd[64];

	snprintf(cmd, sizeof(cmd), "bgalloc %u", 150000000 / scale());
	cmd_ok(k->a, cmd, "bgalloc started");
}

/* c needs more than is free: its round must sleep b at once, not wait behind a's device. Then
 * a's allocation ends (served, or out of memory as the lower priority) and every byte is kept. */
static void own_device_c_makes_room(struct own_device_case *k, const char *why)
{
	char reply[256];
	/* Behind a's device it would wait out a's 12 s slice; under TSan (CTL_SLOW 4) the sleep of
	 * b alone took 4.7 s on CI, so the bound doubles there but stays well under the slice. */
	double t0 = now_s(), took, bound = ctl_slow() > 1 ? 8.0 : 4.0;

	cmd_ok(k->c, alloc_cmd(1, 150000000), "ok");
	took = now_s() - t0;
	cr_log_info("c's allocation: %.2f s", took);
	cr_expect_lt(took, bound, "c's allocation took %.2f s: %s", took, why);
	status_of(k->b);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), k->c->pid, "%s", o.out);
	cmd_ok(k->c, "check", "ok");
	cr_assert_eq(target_read(k->a, reply, sizeof(reply), 30000), 0,
		     "a's allocation never ended");
	cr_expect(!strncmp(reply, "bgalloc", 7), "a: %s", reply);
	cr_expect_eq(target_stop(k->c, 10000), 0);
	cr_expect_eq(target_stop(k->a, 10000), 0);
	cmd_ok(k->b, "check", "ok");
	cr_expect_eq(target_stop(k->b, 20000), 0);
	teardown_group();
}

/* A sharing process's wait for its own device comes before it takes the GPU's lock: a waits for
 * memory (b may be slept only once its time slice ends), and a free of its own lands in its
 * quarantine while a kernel of 8 s runs. The round that free starts must wait for that kernel,
 * but not while holding the GPU's lock: c (higher priority) then makes room by sleeping b at
 * once instead of waiting ~7 s for a's device. */
Test(share, a_round_waits_for_its_own_device_without_the_lock, .timeout = 120)
{
	struct own_device_case k;

	own_device_setup(&k);
	cmd_ok(k.a, "busy 8000", "busy launched");
	own_device_bgalloc(&k); /* no room: a waits for b's slice */
	usleep(500000);
	cmd_ok(k.a, "freeall", "freed 1"); /* into quarantine: the device is busy */
	usleep(300000);
	own_device_c_makes_room(&k, "it waited for a's device");
}

/* The path of the test GPU's sharing lock: named as its event file, which the first allocation
 * there made (the UUID is simdev's for the group). */
static void gpu_lock_path(char *path, size_t cap)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t n;

	cr_assert(d);
	path[0] = '\0';
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "share-", 6) && (n = strlen(e->d_name)) > 6 &&
		    !strcmp(e->d_name + n - 6, ".event"))
			snprintf(path, cap, "%s/%.*s.lock", dir, (int)(n - 6), e->d_name);
	closedir(d);
	cr_assert(path[0], "no share-*.event in %s", dir);
}

/* Under the GPU's lock a round waits for its own device only briefly. a's round has drained its
 * device and waits for the lock (the test holds it); meanwhile a kernel of 6 s starts on a's
 * device and a frees 60 MB into its quarantine, enough for its allocation. Once the lock is free,
 * a must not wait for that kernel while holding it: c (higher priority) then makes room by
 * sleeping b at once, instead of waiting ~6 s behind a. a's next round waits for its device
 * without the lock. */
Test(share, a_round_holds_the_lock_only_briefly_for_its_own_device, .timeout = 120)
{
	struct own_device_case k;
	char path[512];
	int lock;

	own_device_setup(&k);
	gpu_lock_path(path, sizeof(path));
	lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert(lock >= 0 && !flock(lock, LOCK_EX), "%s: %s", path, strerror(errno));
	own_device_bgalloc(&k); /* no room: a drains its device, then waits for the lock */
	usleep(300000);
	cmd_ok(k.a, "busy 6000", "busy launched");
	cmd_ok(k.a, "freeall", "freed 1"); /* into quarantine: the device is busy */
	close(lock);
	usleep(200000); /* a holds the lock now */
	own_device_c_makes_room(&k, "a held the lock for its device");
}

/* Sockets of the control folder that no process serves: n of them, named for pids no process
 * can have (above the kernel's limit), as processes killed with SIGKILL leave them. */
static void leave_sockets(int n)
{
	for (int i = 0; i < n; i++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM, 0);

		cr_assert(fd >= 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%d.sock", dir, 5000000 + i);
		cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", sa.sun_path);
		close(fd);
	}
}

/* Sockets of n processes that served on them and exited unreaped (zombies: their pids still
 * answer kill(0), their sockets take no connection). Their pids are stored in pids. */
static void leave_zombie_sockets(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++) {
		siginfo_t si;

		pids[i] = fork();
		cr_assert(pids[i] >= 0);
		if (!pids[i]) {
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			int fd = socket(AF_UNIX, SOCK_STREAM, 0);

			snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%d.sock", dir, (int)getpid());
			_exit(fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 4));
		}
		memset(&si, 0, sizeof(si));
		cr_assert_eq(waitid(P_PID, (id_t)pids[i], &si, WEXITED | WNOWAIT), 0);
		cr_assert_eq(si.si_status, 0, "a child could not serve its socket");
	}
}

/* A busy node: the control folder holds the sockets of many killed processes (and of unreaped
 * ones, zombies) and four live sharing processes of another GPU, each with memory there. A round
 * asks the members of its own GPU only (share-UUID.members), so the live peer is found at once
 * (it would get the driver's out-of-memory error instead of sleeping the lower priority when a
 * round read the first 64 of the folder), and no process of the other GPU is asked. */
Test(share, a_round_asks_the_members_of_its_gpu_only, .timeout = 120)
{
	struct target *a, *b, *other[4];
	pid_t zombies[80];
	char other_gpu[80];
	long long looks, looked_at;

	setup_group();
	snprintf(other_gpu, sizeof(other_gpu), "%s_b", group);
	for (int i = 0; i < 4; i++) {
		other[i] = start_in(other_gpu, 0, NULL);
		cmd_ok(other[i], alloc_cmd(1, 30000000), "ok");
	}
	b = start(0, NULL);
	a = start(1, NULL);
	cmd_ok(b, alloc_cmd(1, 150000000), "ok");
	leave_sockets(1000);
	leave_zombie_sockets(zombies, 80);
	cmd_ok(a, alloc_cmd(1, 150000000), "ok");
	status_of(b);
	cr_expect_eq(json_num(o.out, NULL, "slept_by"), a->pid, "%s", o.out);
	status_of(a);
	looks = json_num(o.out, NULL, "looks");
	looked_at = json_num(o.out, NULL, "looked_at");
	cr_expect_geq(looks, 1, "%s", o.out);
	cr_expect_eq(looked_at, looks, "each round asks b only:\n%s", o.out);
	for (int i = 0; i < 80; i++)
		waitpid(zombies[i], NULL, 0);
	cmd_ok(a, "check", "ok");
	cr_expect_eq(target_stop(a, 10000), 0);
	cmd_ok(b, "check", "ok");
	cr_expect_eq(target_stop(b, 20000), 0);
	for (int i = 0; i < 4; i++) {
		status_of(other[i]);
		cr_expect_eq(json_num(o.out, NULL, "slept_by"), 0, "%s", o.out);
		cmd_ok(other[i], "check", "ok");
		cr_expect_eq(target_stop(other[i], 10000), 0);
	}
	teardown_group();
}
