/* Sleep of many handles in two address runs (one unmap call per run, releases side by side on
 * several threads): every unmap, release, map, create and access call of a sleep/wake cycle is
 * made to fail in turn (SIMDEV_FAIL, one child process per case). A failed sleep leaves the heap
 * awake with its contents; a failed wake leaves it asleep and a later wake brings everything
 * back; the heap's mapped bytes always equal the driver's; nothing leaks at exit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "heap_offload.h"

#define N 8

static int fail_msg(const char *what)
{
	fprintf(stderr, "sleep scenario: %s\n", what);
	return 1;
}

static int consistent(struct tctx *t, vmm_devptr *p, bool contents)
{
	vmm_stats s;

	vmm_stats_get(t->core, 0, NULL, &s, NULL);
	if (s.mapped_bytes != t_dev_used(t, 0)) {
		fprintf(stderr, "mapped %llu, driver %llu\n", (unsigned long long)s.mapped_bytes,
			(unsigned long long)t_dev_used(t, 0));
		return 1;
	}
	for (int i = 0; contents && i < N; i++)
		if (p[i] && !t_check(p[i], 4 * MiB, (uint64_t)i))
			return fail_msg("contents lost");
	return 0;
}

static int cycle(struct tctx *t, vmm_devptr *p, bool discard)
{
	vmm_sleep_opts o = { .tag = NULL, .device = -1, .discard = discard };
	vmm_error err;

	if (vmm_sleep(t->core, &o, NULL, &err)) {
		if (vmm_is_asleep(t->core, 0, NULL))
			return fail_msg("a failed sleep left the heap asleep");
		/* A failed discard sleep may lose what it released already: nothing else. */
		return consistent(t, p, !discard);
	}
	if (!vmm_is_asleep(t->core, 0, NULL))
		return fail_msg("asleep after a sleep");
	for (int k = 0; vmm_wake(t->core, &o, NULL, &err); k++)
		if (k == 2 || !vmm_is_asleep(t->core, 0, NULL))
			return fail_msg("wake does not recover");
	return consistent(t, p, !discard);
}

static int scenario(void)
{
	vmm_devptr p[N] = { 0 };
	struct tctx t;
	vmm_error err;

	if (t_try_open(&t, NULL, &err))
		return 0;
	for (int i = 0; i < N; i++) {
		if (vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &p[i], &err)) {
			p[i] = 0;
			continue; /* an injected failure; fewer handles */
		}
		t_fill(p[i], 4 * MiB, (uint64_t)i);
	}
	/* A hole in the address space: the live handles form two runs. */
	if (p[3]) {
		vmm_free(t.core, p[3], NULL);
		p[3] = 0;
		vmm_trim(t.core, 0, NULL);
	}
	if (consistent(&t, p, true) || cycle(&t, p, false) || cycle(&t, p, true))
		return 1;
	for (int i = 0; i < N; i++)
		if (p[i])
			vmm_free(t.core, p[i], NULL);
	vmm_trim(t.core, -1, NULL);
	if (consistent(&t, p, false))
		return 1;
	t_close(&t);
	return 0;
}

/* The timeout only guards against a hang: about 1 min under ASan, 2 min on a loaded 2-core
 * machine. */
Test(heap_sleep_faults, every_call_of_a_many_handle_sleep_can_fail, .timeout = 300)
{
	static const char *names[] = { "cuMemUnmap", "cuMemRelease", "cuMemMap", "cuMemCreate",
				       "cuMemSetAccess", "cuCtxSynchronize" };
	char fail[96];
	const char *env[] = { "SIMDEV_MEMORY=256M", NULL, NULL };
	int cases = 0;
	long long live;

	cr_assert_eq(t_run_child(scenario, env, &live), 0, "the scenario passes without faults");
	cr_assert_eq(live, 0);
	env[1] = fail;
	for (size_t n = 0; n < sizeof(names) / sizeof(names[0]); n++) {
		for (int k = 1; k <= 16; k++) {
			int rc;

			snprintf(fail, sizeof(fail), "SIMDEV_FAIL=%s:%d", names[n], k);
			rc = t_run_child(scenario, env, &live);
			cr_expect_eq(rc, 0, "%s: the scenario failed (%d)", fail, rc);
			cr_expect_eq(live, 0, "%s: %lld device bytes leaked", fail, live);
			cases++;
		}
	}
	cr_log_info("%d injected failures checked", cases);
}
