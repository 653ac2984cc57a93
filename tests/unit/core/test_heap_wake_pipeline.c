/* A wake brings handles back in batches whose copies overlap the next batch's creation, mapping
 * and access grant, and a sleep releases each batch while the next one copies out
 * (heap_wake.c, heap_sleep.c). The heap here is fragmented (many small allocations, a third
 * freed, the holes refilled) and large enough for several batches. Each create, map, grant and
 * host-to-device copy of the wake, and each device-to-host copy, unmap and release of the sleep,
 * is made to fail in turn, early, in the middle and last (SIMDEV_FAIL, counted past the calls
 * made before; one child process per case): a failed sleep leaves the heap awake with every byte,
 * a failed wake leaves it asleep with nothing mapped for it and its host copy intact, the next
 * try succeeds, and nothing leaks at exit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "heap_offload.h"

#define MAXA 64

/* AFTER_SETUP tears the heap down; SETUP_ONLY and AFTER_SLEEP exit without (they only count). */
enum stop { AFTER_SETUP, SETUP_ONLY, AFTER_SLEEP, AFTER_ALL };

/* Set in a child that stops without a teardown: its heap is left open on purpose (a teardown's
 * unmaps and releases would count as the sleep's), so LeakSanitizer, which consults this hook
 * at exit in sanitized builds, is told not to report it. */
static int left_open_on_purpose;

int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return left_open_on_purpose;
}

static int say(const char *what)
{
	fprintf(stderr, "wake pipeline: %s\n", what);
	return 1;
}

static int intact(vmm_devptr *p, const size_t *sz, int n)
{
	for (int i = 0; i < n; i++)
		if (p[i] && !t_check(p[i], sz[i], (uint64_t)i + 7))
			return say("contents lost");
	return 0;
}

/* Many small allocations of mixed sizes; a third freed and the holes refilled. */
static int fragment(struct tctx *t, vmm_devptr *p, size_t *sz, int *n)
{
	static const size_t mib[] = { 1, 3, 2, 5, 8, 1, 4 };
	vmm_error err;

	*n = 0;
	for (int i = 0; i < 40; i++, (*n)++) {
		sz[*n] = mib[i % 7] * MiB + (size_t)(i % 3) * 4096;
		if (vmm_malloc(t->core, 0, sz[*n], 0, NULL, &p[*n], &err))
			return say(err.msg);
	}
	for (int i = 1; i < *n; i += 3) {
		vmm_free(t->core, p[i], NULL);
		p[i] = 0;
	}
	for (int i = 0; i < 14; i++, (*n)++) {
		sz[*n] = mib[(i + 3) % 7] * MiB;
		if (vmm_malloc(t->core, 0, sz[*n], 0, NULL, &p[*n], &err))
			return say(err.msg);
	}
	for (int i = 0; i < *n; i++)
		if (p[i])
			t_fill(p[i], sz[i], (uint64_t)i + 7);
	return 0;
}

static int sleep_wake(struct tctx *t, vmm_devptr *p, const size_t *sz, int n);

static int scenario(enum stop stop)
{
	vmm_devptr p[MAXA] = { 0 };
	size_t sz[MAXA];
	struct tctx t;
	vmm_error err;
	int n;

	if (t_try_open(&t, NULL, &err))
		return say(err.msg);
	if (fragment(&t, p, sz, &n))
		return 1;
	left_open_on_purpose = stop == SETUP_ONLY || stop == AFTER_SLEEP;
	if (stop == SETUP_ONLY)
		return 0;
	if (stop == AFTER_SLEEP)
		return vmm_sleep(t.core, NULL, NULL, &err) ? say(err.msg) : 0;
	if (stop != AFTER_SETUP && sleep_wake(&t, p, sz, n))
		return 1;
	for (int i = 0; i < n; i++)
		if (p[i])
			vmm_free(t.core, p[i], NULL);
	vmm_trim(t.core, -1, NULL);
	t_close(&t);
	return 0;
}

/* Sleep, then wake (a second time where the injected failure hit the first). */
static int sleep_wake(struct tctx *t, vmm_devptr *p, const size_t *sz, int n)
{
	vmm_sleep_opts o = { .tag = NULL, .device = -1 };
	vmm_error err;
	vmm_stats s;

	if (vmm_sleep(t->core, &o, NULL, &err)) {
		/* The injected failure: awake, every byte where it was. */
		if (vmm_is_asleep(t->core, 0, NULL))
			return say("a failed sleep left the heap asleep");
		vmm_stats_get(t->core, 0, NULL, &s, NULL);
		if (s.mapped_bytes != t_dev_used(t, 0))
			return say("a failed sleep: mapped bytes differ from the driver's");
		if (intact(p, sz, n))
			return 1;
		if (vmm_sleep(t->core, &o, NULL, &err))
			return say("the sleep after a failed one failed too");
	}
	if (vmm_wake(t->core, &o, NULL, &err)) {
		/* The injected failure: asleep, nothing of it left on the device. */
		if (!vmm_is_asleep(t->core, 0, NULL))
			return say("a failed wake left the heap awake");
		vmm_stats_get(t->core, 0, NULL, &s, NULL);
		if (s.mapped_bytes != t_dev_used(t, 0) || s.mapped_bytes)
			return say("a failed wake left memory mapped");
		if (vmm_wake(t->core, &o, NULL, &err))
			return say("the wake after a failed one failed too");
	}
	if (vmm_is_asleep(t->core, 0, NULL))
		return say("asleep after a wake");
	vmm_stats_get(t->core, 0, NULL, &s, NULL);
	if (s.mapped_bytes != t_dev_used(t, 0))
		return say("mapped bytes differ from the driver's");
	return intact(p, sz, n);
}

#define NCALLS 7
#define NWAKE 4   /* names[0..NWAKE): the wake's calls; the rest: the sleep's */

struct counts {
	long live;
	long calls[NCALLS];
};

static const char *names[NCALLS] = { "cuMemCreate", "cuMemMap", "cuMemSetAccess",
				     "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemUnmap",
				     "cuMemRelease" };

static int run_child(enum stop stop, const char *fail, const char *stats, struct counts *c)
{
	pid_t pid = fork();
	int status;
	char name[96];
	long v;
	FILE *f;

	if (pid == 0) {
		setenv("SIMDEV_MEMORY", "512M", 1);
		setenv("SIMDEV_STATS", stats, 1);
		if (fail)
			setenv("SIMDEV_FAIL", fail, 1);
		else
			unsetenv("SIMDEV_FAIL");
		exit(scenario(stop)); /* exit: simdev writes SIMDEV_STATS from a destructor */
	}
	cr_assert_gt(pid, 0);
	waitpid(pid, &status, 0);
	memset(c, 0, sizeof(*c));
	c->live = -1;
	f = fopen(stats, "r");
	while (f && fscanf(f, "%95s %ld", name, &v) == 2) {
		if (!strcmp(name, "live_bytes"))
			c->live = v;
		/* A base name counts all its variants (_v2, _ptsz), as SIMDEV_FAIL does. */
		for (int k = 0; k < NCALLS; k++)
			if (!strncmp(name, names[k], strlen(names[k])) &&
			    (!name[strlen(names[k])] || name[strlen(names[k])] == '_'))
				c->calls[k] += v;
	}
	if (f)
		fclose(f);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* Fail each of names[first..last)'s calls early, in the middle and last of those between the
 * runs counted in `before` and `after`; every case must recover. Returns the cases run. */
static int fail_each(int first, int last, const struct counts *before, const struct counts *after,
		     const char *stats)
{
	struct counts c;
	int cases = 0;

	for (int k = first; k < last; k++) {
		long made = after->calls[k] - before->calls[k];
		long at[] = { 2, made / 2, made };

		cr_assert_gt(made, 2, "%s: %ld call(s), expected batches", names[k], made);
		for (size_t j = 0; j < sizeof(at) / sizeof(at[0]); j++) {
			char fail[96];
			int rc;

			snprintf(fail, sizeof(fail), "%s:%ld", names[k], before->calls[k] + at[j]);
			rc = run_child(AFTER_ALL, fail, stats, &c);
			cr_expect_eq(rc, 0, "SIMDEV_FAIL=%s: the scenario failed (%d)", fail, rc);
			cr_expect_eq(c.live, 0, "SIMDEV_FAIL=%s: %ld device bytes leaked", fail, c.live);
			cases++;
		}
	}
	return cases;
}

Test(heap_wake_pipeline, every_step_of_a_batched_sleep_can_fail, .timeout = 120)
{
	char stats[] = "/tmp/vmm-sleep-pipeline-XXXXXX";
	struct counts setup, slept;
	int fd = mkstemp(stats);

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(run_child(SETUP_ONLY, NULL, stats, &setup), 0, "the setup runs");
	cr_assert_eq(run_child(AFTER_SLEEP, NULL, stats, &slept), 0, "the sleep passes");
	cr_log_info("%d injected failures checked",
		    fail_each(NWAKE, NCALLS, &setup, &slept, stats));
	unlink(stats);
}

Test(heap_wake_pipeline, every_step_of_a_batched_wake_can_fail, .timeout = 120)
{
	char stats[] = "/tmp/vmm-wake-pipeline-XXXXXX";
	struct counts setup, all;
	int fd = mkstemp(stats);

	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(run_child(AFTER_SETUP, NULL, stats, &setup), 0, "the setup runs");
	cr_assert_eq(run_child(AFTER_ALL, NULL, stats, &all), 0, "the cycle passes without faults");
	cr_assert_eq(all.live, 0);
	/* The wake's calls: all of them past the setup (a sleep makes none of these). */
	cr_log_info("%d injected failures checked", fail_each(0, NWAKE, &setup, &all, stats));
	unlink(stats);
}
