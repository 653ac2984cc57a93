/* bench_share_round: what one round of GPU sharing costs on a busy node, on simdev
 * (scripts/bench-share.sh runs it). Two sharing ctl_targets take turns on one simulated GPU: the
 * higher priority allocates 150 MB while the lower one holds it, so its allocation runs a round
 * that sleeps the lower one. N bystanders share the same control folder from a second simulated
 * GPU, each holding 8 MiB, as the processes of a node's other GPUs do.
 *
 *   bench_share_round [BYSTANDERS [ROUNDS]]     (defaults 16 and 10)
 *
 * Prints the median and the slowest wall time of that allocation (ctl_target's command sent and
 * answered: the peer's sleep and ctl_target's fill of the 150 MB are most of it), and the
 * processes its rounds asked per round (looked_at / looks); then the same for an allocation
 * refused after one round (the holder has the higher priority: nobody may be slept), whose time
 * is the round. BENCH_LOG=info prints the two processes' shim logs at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct ctl_out o;
static char dir[64], group[64];

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void must(struct target *t, const char *cmd, const char *want)
{
	char reply[256];

	if (target_cmd(t, cmd, reply, sizeof(reply), 120000) || strncmp(reply, want, strlen(want))) {
		fprintf(stderr, "bench_share_round: pid %ld: '%s' answered '%s'\n", (long)t->pid, cmd,
			reply);
		exit(1);
	}
}

static struct target *start(const char *grp, const char *memory, int prio)
{
	static char e[7][160];
	const char *env[8];

	snprintf(e[0], 160, "VMMSHIM_RUN_DIR=%s", dir);
	snprintf(e[1], 160, "SIMDEV_SHARED=%s", grp);
	snprintf(e[2], 160, "SIMDEV_MEMORY=%s", memory);
	snprintf(e[3], 160, "VMMSHIM_SHARE=1");
	snprintf(e[4], 160, "VMMSHIM_PRIORITY=%d", prio);
	snprintf(e[5], 160, "VMMSHIM_SHARE_IDLE=200ms");
	snprintf(e[6], 160, "VMMSHIM_LOG=%s", getenv("BENCH_LOG") ? getenv("BENCH_LOG") : "warn");
	for (int i = 0; i < 7; i++)
		env[i] = e[i];
	env[7] = NULL;
	struct target *t = target_start(env);

	if (!t) {
		fprintf(stderr, "bench_share_round: ctl_target did not start\n");
		exit(1);
	}
	return t;
}

int main(int argc, char **argv)
{
	int nby = argc > 1 ? atoi(argv[1]) : 16, rounds = argc > 2 ? atoi(argv[2]) : 10;
	struct target **bys, *lo, *hi;
	char other[80], cmd[256];
	double *ms;
	long long looks, looked;

	if (nby < 0 || nby > 200 || rounds < 1 || rounds > 1000) {
		fprintf(stderr, "usage: bench_share_round [BYSTANDERS (0-200) [ROUNDS (1-1000)]]\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "/tmp/vmmshim-sharebench-XXXXXX");
	if (!mkdtemp(dir))
		return 1;
	snprintf(group, sizeof(group), "sharebench%ld_%ld", (long)getpid(), (long)time(NULL));
	snprintf(other, sizeof(other), "%s_b", group);
	bys = calloc((size_t)nby + 1, sizeof(*bys));
	ms = calloc((size_t)rounds, sizeof(*ms));
	if (!bys || !ms)
		return 1;
	for (int i = 0; i < nby; i++) {
		bys[i] = start(other, "4G", 0);
		must(bys[i], "alloc 1 8388608", "ok");
	}
	lo = start(group, "256M", 0);
	hi = start(group, "256M", 1);
	for (int r = 0; r < rounds; r++) {
		double t0;

		must(lo, "alloc 1 150000000", "ok");
		t0 = now_s();
		must(hi, "alloc 1 150000000", "ok"); /* a round: lo is slept */
		ms[r] = (now_s() - t0) * 1000;
		must(hi, "freeall", "freed 1");
		must(lo, "freeall", "freed 1"); /* lo wakes by itself, then frees */
	}
	vmmctl_run(&o, dir, -1, "--json status %ld", (long)hi->pid);
	looks = json_num(o.out, NULL, "looks");
	looked = json_num(o.out, NULL, "looked_at");
	qsort(ms, (size_t)rounds, sizeof(*ms), by_value);
	printf("bench_share_round: %d bystanders on another GPU, %d rounds: allocation that sleeps "
	       "a peer median %.2f ms, slowest %.2f ms; %lld processes asked in %lld looks "
	       "(%.1f a look)\n", nby, rounds, ms[rounds / 2], ms[rounds - 1], looked, looks,
	       looks > 0 ? (double)looked / (double)looks : 0.0);
	/* Refused: hi holds the GPU, lo (the lower priority) may sleep nobody. */
	must(hi, "alloc 1 150000000", "ok");
	for (int r = 0; r < rounds; r++) {
		double t0 = now_s();

		must(lo, "alloc 1 150000000", "error");
		ms[r] = (now_s() - t0) * 1000;
	}
	qsort(ms, (size_t)rounds, sizeof(*ms), by_value);
	printf("bench_share_round: %d bystanders on another GPU, %d rounds: allocation refused "
	       "after one round median %.2f ms, slowest %.2f ms\n", nby, rounds, ms[rounds / 2],
	       ms[rounds - 1]);
	if (getenv("BENCH_LOG")) {
		static char log[1 << 16];

		target_log(hi, log, sizeof(log));
		fprintf(stderr, "hi's log:\n%s\n", log);
		target_log(lo, log, sizeof(log));
		fprintf(stderr, "lo's log:\n%s\n", log);
	}
	target_stop(lo, 10000);
	target_stop(hi, 10000);
	for (int i = 0; i < nby; i++)
		target_stop(bys[i], 10000);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'; rm -f /dev/shm/simdev-cuda-%u-%s*", dir,
		 (unsigned)getuid(), group);
	if (system(cmd))
		fprintf(stderr, "bench_share_round: could not clean %s\n", dir);
	return 0;
}
