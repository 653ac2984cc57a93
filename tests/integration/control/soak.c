/* The randomized soak (issue 8): soak_target's threads allocate, free, copy and check device
 * memory against host mirrors while this driver, from outside, sleeps and wakes the process
 * (whole, per tag, per device), asks its status, kills vmmctl mid-request, cancels, sends
 * malformed requests, and restarts it in epochs with driver faults injected (SIMDEV_FAIL) and
 * now and then kills it mid-sleep. It fails on any mismatch (data lost), any leak (live bytes
 * not back to the long-lived buffers, host copies kept while awake, device memory the shim
 * does not account for), and any wedge (a request not answered within its deadline, a state
 * that stays "changing", a program that does not exit).
 *
 *   soak [--seconds S] [--seed N] [--threads T]
 *
 * The seed picks every choice the driver makes (faults, actions, delays, the threads' work);
 * the interleaving with the threads is the machine's, so a replay with the same seed runs the
 * same schedule, not the same interleaving. On failure it prints the seed and how to replay.
 * Plain C (no Criterion) so that it runs as it is in the ThreadSanitizer pass. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "soak_faults.h"
#include "soak_run.h"

#define BASE_BUFS 4
#define BASE_BYTES (2u << 20)

static struct ctl_out o, bg;
static unsigned rng;
static unsigned long long seed0;
static double seconds = 60, timeout_s;
static int threads = 4;

static struct {
	long epochs, cycles, whole, tagged, device, failed_ops, kills, cancels, malformed,
		statuses, target_kills, faults_armed, faults_fired, ops, copies, kernels,
		thread_errors;
} n;

static struct target *cur;
static bool faults_on;
static char stats_path[320];

static unsigned rnd(unsigned below)
{
	return below ? (unsigned)rand_r(&rng) % below : 0;
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	va_list ap;
	char log[8192];
	const char *kept;

	fprintf(stderr, "soak: FAILED (epoch %ld): ", n.epochs);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (cur) {
		int st = 0;

		if (waitpid(cur->pid, &st, WNOHANG) == cur->pid)
			fprintf(stderr, "soak: the program has ended: %s %d\n",
				WIFSIGNALED(st) ? "signal" : "exit status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
		target_log(cur, log, sizeof(log));
		fprintf(stderr, "soak: the program's log (last part):\n%s\n",
			strlen(log) > 4000 ? log + strlen(log) - 4000 : log);
		kept = soak_keep_log(cur, "program");
		if (kept)
			fprintf(stderr, "soak: its whole log: %s\n", kept);
	}
	fprintf(stderr, "soak: seed %llu; replay: scripts/soak.sh --seed %llu --seconds %g "
		"--threads %d\n", seed0, seed0, seconds, threads);
	harness_cleanup();
	exit(1);
}

static void cmd(const char *c, const char *want)
{
	char reply[256];

	if (target_cmd(cur, c, reply, sizeof(reply), (int)(timeout_s * 1000)))
		fail("the program did not answer '%s'", c);
	if (strncmp(reply, want, strlen(want)))
		fail("'%s' answered '%s', expected '%s'", c, reply, want);
}

/* vmmctl with the soak's deadline; exit 5 (no answer in time) is a wedge. */
static int ctl(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int ctl(const char *fmt, ...)
{
	char args[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	vmmctl_run(&o, cur->run_dir, -1, "--json --timeout %g %s", timeout_s, args);
	if (o.code == 5 || o.seconds > timeout_s + 5)
		fail("'vmmctl %s' was not answered within %g s (%.1f s): %s", args, timeout_s,
		     o.seconds, o.err);
	if (o.code != 0 && o.code != 1)
		fail("'vmmctl %s' exited %d: %s %s", args, o.code, o.out, o.err);
	return o.code;
}

static void state(char *s, size_t cap)
{
	ctl("status %d", (int)cur->pid);
	if (o.code || !json_str(o.out, "\"info\"", "state", s, cap))
		fail("status failed: %s %s", o.out, o.err);
	n.statuses++;
}

/* An operation failed: without injected faults that is a bug, unless it says why it could not
 * run (a tag with no memory yet, a sleep or wake cancelled or given up by its client). */
static void failure_allowed(const char *what)
{
	n.failed_ops++;
	if (faults_on || strstr(o.out, "no tag") || strstr(o.out, "cancel") ||
	    strstr(o.out, "client"))
		return;
	fail("%s failed with no fault injected: %s", what, o.out);
}

/* Whatever happened, the process must end up awake with every byte: wait for a sleep or wake in
 * progress to end, then wake (again, while faults make it fail) what is asleep. */
static void settle(void)
{
	char s[32];
	double end = now_s() + timeout_s;

	for (;;) {
		state(s, sizeof(s));
		if (strcmp(s, "changing"))
			break;
		if (now_s() > end)
			fail("the process stayed 'changing' for %g s", timeout_s);
		usleep(20000);
	}
	for (int tries = 0; strcmp(s, "awake"); tries++) {
		if (tries == 8)
			fail("still '%s' after %d wakes: %s", s, tries, o.out);
		if (ctl("wake %d", (int)cur->pid))
			failure_allowed("wake");
		state(s, sizeof(s));
	}
}

static void cycle_whole(void)
{
	const char *autowake = rnd(4) == 0 ? "--autowake" : "";

	if (ctl("sleep %d %s", (int)cur->pid, autowake)) {
		failure_allowed("sleep");
	} else {
		n.cycles++;
		n.whole++;
		if (rnd(2))
			state((char[32]){ 0 }, 32);
		usleep(rnd(30000));
	}
	if (ctl("wake %d", (int)cur->pid))
		failure_allowed("wake");
	settle();
}

static void cycle_tag(void)
{
	int tag = (int)rnd(3);

	if (ctl("sleep %d --tag t%d", (int)cur->pid, tag)) {
		failure_allowed("tag sleep");
	} else {
		n.cycles++;
		n.tagged++;
		usleep(rnd(30000));
	}
	if (rnd(2) ? ctl("wake %d --tag t%d", (int)cur->pid, tag) : ctl("wake %d", (int)cur->pid))
		failure_allowed("tag wake");
	settle();
}

static void cycle_device(void)
{
	if (ctl("sleep %d --device 0", (int)cur->pid)) {
		failure_allowed("device sleep");
	} else {
		n.cycles++;
		n.device++;
		usleep(rnd(20000));
	}
	if (ctl("wake %d --device 0", (int)cur->pid))
		failure_allowed("device wake");
	settle();
}

/* vmmctl killed (or interrupted) while its sleep or wake runs: the process rolls it back or
 * finishes it, and answers at once either way. */
static void kill_client(void)
{
	pid_t p = vmmctl_spawn(cur->run_dir, "--timeout %g %s %d", timeout_s,
			       rnd(3) ? "sleep" : "wake", (int)cur->pid);

	if (p < 0)
		fail("vmmctl did not start");
	usleep(rnd(40000));
	kill(p, rnd(2) ? SIGKILL : SIGINT);
	vmmctl_wait(p, &bg, (int)(timeout_s * 1000));
	n.kills++;
	settle();
}

/* A sleep and a cancel racing it; the sleep's client sees 0 (it finished first) or 1. */
static void cancel_race(void)
{
	pid_t p = vmmctl_spawn(cur->run_dir, "--timeout %g sleep %d", timeout_s, (int)cur->pid);
	int code;

	if (p < 0)
		fail("vmmctl did not start");
	usleep(rnd(20000));
	ctl("cancel %d", (int)cur->pid);
	code = vmmctl_wait(p, &bg, (int)(timeout_s * 1000) + 5000);
	if (code != 0 && code != 1)
		fail("a sleep raced by a cancel exited %d: %s %s", code, bg.out, bg.err);
	n.cancels++;
	settle();
}

/* Garbage, truncated and oversized requests: each is answered (or dropped) within the server's
 * read deadline, changes nothing, and the server still answers. */
static void malformed(void)
{
	static const char *const starts[] = { "vmmshim/1 sleep", "vmmshim/1 wake tag=\"",
					      "vmmshim/1 status device=", "vmmshim/1 ", "" };
	/* What follows the start is never valid there: a control byte, a stray quote or percent
	 * sign, a second space, DEL (a request that happened to be well formed would run). */
	static const char never[] = { '\x01', '"', '%', ' ', '\x7f' };
	static char req[20000], reply[65536];
	char sock[400], s[32];
	size_t len = 0;
	ssize_t got;
	double t0 = now_s();
	int kind = (int)rnd(3);

	target_socket(cur, sock, sizeof(sock));
	len = (size_t)snprintf(req, sizeof(req), "%s", starts[rnd(5)]);
	req[len++] = never[rnd(sizeof(never))];
	for (size_t extra = kind == 2 ? 9000 + rnd(8000) : rnd(60); extra; extra--)
		req[len++] = kind == 0 ? (char)(rnd(256)) : (char)(' ' + rnd(95));
	if (rnd(2))
		req[len++] = '\n';
	got = raw_request(sock, req, len, rnd(2), 0, reply, sizeof(reply),
			  (int)(timeout_s * 1000));
	if (now_s() - t0 > 2 + 3 * ctl_slow()) /* the server's 2 s read deadline, and load */
		fail("a malformed request took %.1f s to answer or drop", now_s() - t0);
	if (got > 0 && strncmp(reply, "vmmshim/1 error\n", 16))
		fail("a malformed request got '%.200s'", reply);
	n.malformed++;
	state(s, sizeof(s));
	if (strcmp(s, "awake"))
		fail("a malformed request left the process '%s'", s);
}

/* The program's device memory as the shim accounts for it, at rest and awake. Only the
 * long-lived buffers are left: in the heap (live), or, when a fault made the heap fail one of
 * them, passed through to the driver (the shim's fallback), where it is device memory the shim
 * does not manage (unmanaged: simdev charges native memory in 2 MiB, the buffers' size). */
static void no_leak(void)
{
	long long live, backup, unmanaged, passed;

	ctl("status %d", (int)cur->pid);
	live = json_num(o.out, "\"devices\": [", "live");
	backup = json_num(o.out, "\"devices\": [", "host_backup");
	unmanaged = json_num(o.out, "\"devices\": [", "unmanaged");
	passed = json_num(o.out, "\"info\"", "passthrough_allocs");
	if (live < 0 || unmanaged < 0 || live + unmanaged != (long long)BASE_BUFS * BASE_BYTES ||
	    (unmanaged && passed < 1))
		fail("live %lld + unmanaged %lld bytes after every thread freed its memory "
		     "(expected %u): %s", live, unmanaged, BASE_BUFS * BASE_BYTES, o.out);
	if (backup > 0)
		fail("an awake process keeps %lld bytes of host copy: %s", backup, o.out);
	/* Asleep, nothing of the heap stays on the device. */
	if (ctl("sleep %d", (int)cur->pid)) {
		failure_allowed("sleep");
	} else {
		ctl("status %d", (int)cur->pid);
		if (json_num(o.out, "\"info\"", "resident") != 0 ||
		    json_num(o.out, "\"devices\": [", "mapped") != 0 ||
		    json_num(o.out, "\"devices\": [", "host_backup") < live)
			fail("asleep, yet memory stays on the device or the host copy is short: %s",
			     o.out);
	}
	settle();
}

/* How many of the armed faults the driver really hit: SIMDEV_STATS has each exported
 * function's calls, and an entry naming the base counts all its variants (cuMemcpyDtoH:
 * cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds). */
static void count_faults(const char *armed)
{
	char line[256], name[128], entry[128];
	unsigned long long calls;

	for (const char *p = armed; *p;) {
		size_t len = strcspn(p, ",");
		unsigned long long at = 0, sum = 0;
		char *colon;
		FILE *f;

		snprintf(entry, sizeof(entry), "%.*s", (int)len, p);
		p += len + (p[len] == ',');
		colon = strchr(entry, ':');
		if (!colon)
			continue;
		*colon = '\0';
		at = strtoull(colon + 1, NULL, 10);
		f = fopen(stats_path, "r");
		if (!f)
			return;
		while (fgets(line, sizeof(line), f))
			if (sscanf(line, "%127s %llu", name, &calls) == 2 &&
			    !strncmp(name, entry, strlen(entry)) &&
			    (name[strlen(entry)] == '\0' || name[strlen(entry)] == '_'))
				sum += calls;
		fclose(f);
		if (sum >= at)
			n.faults_fired++;
		printf("soak:   %s:%llu %s (%llu calls)\n", entry, at, sum >= at ? "hit" : "missed",
		       sum);
	}
}

static void epoch(double secs)
{
	char armed[256] = "", env_fail[300], env_stats[340], env_mem[] = "SIMDEV_MEMORY=2G";
	char env_timeout[64], reply[256], line[64];
	const char *env[6];
	int e = 0, k = (int)rnd(4); /* faults armed: none in one epoch of four */
	unsigned work_seed = (unsigned)rand_r(&rng);
	double work_end;
	bool killed = false;

	n.epochs++;
	soak_faults_draw(rnd, k, secs, ctl_slow(), armed, sizeof(armed));
	faults_on = k > 0;
	snprintf(stats_path, sizeof(stats_path), "/tmp/vmmshim-soak-%d-%ld.stats", (int)getpid(),
		 n.epochs);
	snprintf(env_fail, sizeof(env_fail), "SIMDEV_FAIL=%s", armed);
	snprintf(env_stats, sizeof(env_stats), "SIMDEV_STATS=%s", stats_path);
	snprintf(env_timeout, sizeof(env_timeout), "VMMSHIM_SLEEP_TIMEOUT=%d",
		 (int)(timeout_s / 2));
	env[e++] = env_mem;
	env[e++] = env_stats;
	env[e++] = env_timeout;
	if (k)
		env[e++] = env_fail;
	env[e] = NULL;
	cur = target_start(env);
	if (!cur)
		fail("the program did not start under the shim (faults '%s')", armed);
	printf("soak: epoch %ld, %.0f s, faults '%s'\n", n.epochs, secs, armed);
	fflush(stdout);
	snprintf(line, sizeof(line), "base %d %u", BASE_BUFS, BASE_BYTES);
	cmd(line, "ok");
	snprintf(line, sizeof(line), "work %d %g %u", threads, secs, work_seed);
	cmd(line, "work started");
	work_end = now_s() + secs;
	while (now_s() < work_end) {
		int r = (int)rnd(100);

		if (r < 30)
			cycle_whole();
		else if (r < 50)
			cycle_tag();
		else if (r < 55)
			cycle_device();
		else if (r < 67)
			kill_client();
		else if (r < 72)
			cancel_race();
		else if (r < 85)
			malformed();
		else
			state((char[32]){ 0 }, 32);
		usleep(rnd(20000));
	}
	settle();
	if (target_read(cur, reply, sizeof(reply), (int)(timeout_s * 1000) + 10000))
		fail("the threads did not finish within %g s of their end", timeout_s + 10);
	{
		long ops, copies, kernels, errors;
		int mismatches, unfreed;

		if (sscanf(reply, "work ops=%ld copies=%ld kernels=%ld mismatches=%d errors=%ld "
			   "unfreed=%d", &ops, &copies, &kernels, &mismatches, &errors,
			   &unfreed) != 6)
			fail("the threads said '%s'", reply);
		if (mismatches)
			fail("%d mismatches: data lost (%s)", mismatches, reply);
		if (errors && !faults_on)
			fail("the threads saw %ld errors with no fault injected", errors);
		if (unfreed)
			fail("%d buffers could not be freed", unfreed);
		n.ops += ops;
		n.copies += copies;
		n.kernels += kernels;
		n.thread_errors += errors;
	}
	cmd("check", "ok");
	no_leak();
	cmd("check", "ok");
	/* One epoch in three ends with the program killed mid-sleep: vmmctl says so (exit 3) and
	 * list does not hang on what is left. */
	if (rnd(3) == 0) {
		pid_t p = vmmctl_spawn(cur->run_dir, "--timeout %g sleep %d", timeout_s,
				       (int)cur->pid);

		usleep(rnd(5000));
		kill(cur->pid, SIGKILL);
		if (p > 0) {
			int code = vmmctl_wait(p, &bg, (int)(timeout_s * 1000) + 5000);

			if (code != 0 && code != 3)
				fail("a sleep whose program was killed exited %d: %s %s", code,
				     bg.out, bg.err);
		}
		vmmctl_run(&o, cur->run_dir, -1, "--json --timeout %g list", timeout_s);
		if (o.code == 5)
			fail("list did not answer after a kill: %s", o.err);
		n.target_kills++;
		killed = true;
		target_kill(cur);
	} else {
		int code = target_stop(cur, (int)(timeout_s * 1000));

		if (code != 0)
			fail("the program did not exit cleanly (%d)", code);
		target_free(cur);
	}
	cur = NULL;
	if (!killed) { /* a killed program writes no statistics */
		n.faults_armed += k;
		count_faults(armed);
	}
	unlink(stats_path);
}

int main(int argc, char **argv)
{
	double start = now_s(), epoch_s;

	struct soak_args a = { .seconds = seconds, .threads = threads };

	if (!soak_args_parse(argc, argv, "soak", 0, &a))
		return 2;
	seconds = a.seconds;
	seed0 = a.seed;
	threads = a.threads;
	rng = (unsigned)(seed0 ^ (seed0 >> 32));
	timeout_s = 15 * ctl_slow();
	/* Epochs of about 12 s of work (each also starts, checks and stops the program). */
	epoch_s = seconds < 30 ? seconds / 2 : 12;
	printf("soak: seed %llu, %g s, %d threads\n", seed0, seconds, threads);
	soak_run_epochs(start, seconds, epoch_s, epoch);
	printf("soak: passed, seed %llu, %.0f s: %ld epochs, %ld sleep/wake cycles (%ld whole, "
	       "%ld per tag, %ld per device), %ld failed sleeps or wakes, %ld clients killed "
	       "mid-request, %ld cancels, %ld malformed requests, %ld status, %ld programs killed "
	       "mid-sleep; faults armed %ld, hit %ld; the threads: %ld operations, %ld copies, "
	       "%ld kernels, %ld errors from faults, 0 mismatches, 0 leaks, 0 wedges\n",
	       seed0, now_s() - start, n.epochs, n.cycles, n.whole, n.tagged, n.device,
	       n.failed_ops, n.kills, n.cancels, n.malformed, n.statuses, n.target_kills,
	       n.faults_armed, n.faults_fired, n.ops, n.copies, n.kernels, n.thread_errors);
	return 0;
}
