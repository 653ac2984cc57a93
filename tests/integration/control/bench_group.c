/* bench_group: a group sleep/wake of two processes against a single-process sleep/wake of the
 * same bytes, on simdev (scripts/bench-group.sh runs it; on a GPU the same comparison is the
 * x2 row of tests/gpu/gpucheck.py). What it shows is the group's overhead: two requests at once
 * instead of one, and the second phase; the copies are the same bytes.
 *
 *   bench_group [MIB_PER_PROCESS [ROUNDS]]     (defaults 128 and 5)
 *
 * Prints the median wall time of each (vmmctl started and finished) and their ratio, the first
 * cycle apart (every process's first sleep: host memory touched and pinned then, and kept; a
 * comparison must not give it to one side only), and where
 * the group's time went (vmmctl --json's steps: the parts a single-process sleep does not have). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct ctl_out o;

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), by_value);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static struct target *start_with(long long bytes)
{
	const char *env[] = { "SIMDEV_MEMORY=4G", NULL };
	struct target *t = target_start(env);
	char cmd[64], reply[64];

	if (!t) {
		fprintf(stderr, "bench_group: ctl_target did not start\n");
		exit(1);
	}
	/* 8 MiB buffers, as a program's tensors. */
	snprintf(cmd, sizeof(cmd), "alloc %lld 8388608", bytes / 8388608);
	if (target_cmd(t, cmd, reply, sizeof(reply), 120000) || strncmp(reply, "ok", 2)) {
		fprintf(stderr, "bench_group: %s: %s\n", cmd, reply);
		exit(1);
	}
	return t;
}

/* The steps a group reports, in the order of step_names. */
static const char *const step_names[] = { "find_s", "plan_s", "phases_s", "pauses_s",
					  "report_s" };
#define NSTEPS (int)(sizeof(step_names) / sizeof(step_names[0]))

static double json_seconds(const char *json, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(json, pat);
	return p ? strtod(p + strlen(pat), NULL) : -1;
}

/* vmmctl --json WHAT: its wall time; steps (group only, may be NULL) filled from its output. */
static double timed(const char *run_dir, const char *what, double *steps)
{
	if (vmmctl_run(&o, run_dir, -1, "--json --timeout 300 %s", what)) {
		fprintf(stderr, "bench_group: vmmctl %s: %s %s\n", what, o.out, o.err);
		exit(1);
	}
	for (int k = 0; steps && k < NSTEPS; k++)
		steps[k] = json_seconds(o.out, step_names[k]);
	return o.seconds;
}

int main(int argc, char **argv)
{
	long long mib = argc > 1 ? atoll(argv[1]) : 128;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	double gs[64], gw[64], ss[64], sw[64], sst[NSTEPS][64], wst[NSTEPS][64];
	struct target *a, *b, *one;
	char pair[64], single[32];

	if (mib < 8 || rounds < 1 || rounds > 64) {
		fprintf(stderr, "usage: bench_group [MIB_PER_PROCESS >= 8 [ROUNDS 1..64]]\n");
		return 2;
	}
	a = start_with(mib << 20);
	b = start_with(mib << 20);
	one = start_with(2 * (mib << 20));
	snprintf(pair, sizeof(pair), "%d %d", (int)a->pid, (int)b->pid);
	snprintf(single, sizeof(single), "%d", (int)one->pid);
	for (int r = 0; r < rounds; r++) {
		char cmd[96];

		snprintf(cmd, sizeof(cmd), "sleep %s", pair);
		double st[NSTEPS];

		gs[r] = timed(a->run_dir, cmd, st);
		for (int k = 0; k < NSTEPS; k++)
			sst[k][r] = st[k];
		snprintf(cmd, sizeof(cmd), "wake %s", pair);
		gw[r] = timed(a->run_dir, cmd, st);
		for (int k = 0; k < NSTEPS; k++)
			wst[k][r] = st[k];
		snprintf(cmd, sizeof(cmd), "sleep %s", single);
		ss[r] = timed(one->run_dir, cmd, NULL);
		snprintf(cmd, sizeof(cmd), "wake %s", single);
		sw[r] = timed(one->run_dir, cmd, NULL);
	}
	double first_g = gs[0] + gw[0], first_s = ss[0] + sw[0];
	double g_s = median(gs, rounds), g_w = median(gw, rounds);
	double s_s = median(ss, rounds), s_w = median(sw, rounds);

	printf("bytes: 2 x %lld MiB (group) vs 1 x %lld MiB (single), %d rounds, medians of "
	       "vmmctl wall time\n", mib, 2 * mib, rounds);
	printf("sleep: group %.3f s, single %.3f s, ratio %.2f\n", g_s, s_s, g_s / s_s);
	printf("wake:  group %.3f s, single %.3f s, ratio %.2f\n", g_w, s_w, g_w / s_w);
	printf("cycle: group %.3f s, single %.3f s, ratio %.2f\n", g_s + g_w, s_s + s_w,
	       (g_s + g_w) / (s_s + s_w));
	printf("first cycle: group %.3f s, single %.3f s, ratio %.2f\n", first_g, first_s,
	       first_g / first_s);
	for (int v = 0; v < 2; v++) {
		printf("group %s steps (medians, ms):", v ? "wake " : "sleep");
		for (int k = 0; k < NSTEPS; k++)
			printf(" %.*s %.1f", (int)strlen(step_names[k]) - 2, step_names[k],
			       1000 * median(v ? wst[k] : sst[k], rounds));
		printf("\n");
	}
	target_stop(a, 10000);
	target_stop(b, 10000);
	target_stop(one, 10000);
	target_free(a);
	target_free(b);
	target_free(one);
	return 0;
}
