/* The whole-process sleep/wake (core/offload/transition.h) on simdev: an undo that fails too
 * leaves the partial state (truthful figures, nothing lost, a wake completes it) for every
 * release that can fail; a later part's failure undoes exactly what the earlier parts changed;
 * a selection of nothing is an error that changes nothing; cancellation and the drain's deadline
 * roll back. Fault cases run in child processes (simdev reads its environment once). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heap_offload.h"
#include "helpers.h"
#include "log.h"
#include "offload/drain.h"
#include "offload/transition.h"

#define N 8
#define SZ (4 * MiB)

static vmm_offload_parts heap_only(vmm_core *core)
{
	vmm_offload_parts p = { .nheaps = 1 };

	p.heaps[0].name = "cuda heap";
	p.heaps[0].core = core;
	return p;
}

static int why(const char *what)
{
	fprintf(stderr, "transition scenario: %s\n", what);
	return 1;
}

static bool all_intact(vmm_devptr *p)
{
	for (int i = 0; i < N; i++)
		if (!t_check(p[i], SZ, (uint64_t)i + 100))
			return false;
	return true;
}

/* Exit status: 0 partial and recovered, 3 the faults did not hit the sleep, 1 wrong. */
static int partial_scenario(int *handles)
{
	vmm_sleep_opts all = { .device = -1 };
	vmm_selection sel = { .device = -1 };
	vmm_devptr p[N];
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_error err;
	vmm_stats s;
	struct tctx t;

	if (t_try_open(&t, NULL, &err))
		return why("open");
	for (int i = 0; i < N; i++) {
		if (vmm_malloc(t.core, 0, SZ, 0, NULL, &p[i], &err))
			return why("malloc");
		t_fill(p[i], SZ, (uint64_t)i + 100);
	}
	s = t_stats(&t, 0, NULL);
	*handles = (int)s.handles_created;
	parts = heap_only(t.core);
	if (vmm_offload_sleep(&parts, &sel, NULL, &r, &err) == VMM_OK) {
		if (vmm_wake(t.core, &all, NULL, &err) || !all_intact(p))
			return why("an ordinary cycle lost data");
		t_close(&t);
		return 3;
	}
	if (!r.partial_bytes)
		return why("an undo that failed was not reported as partial");
	if (!strstr(err.msg, "partially asleep"))
		return why(err.msg);
	s = t_stats(&t, 0, NULL);
	if (!vmm_is_asleep(t.core, 0, NULL) || s.asleep_bytes != r.partial_bytes ||
	    s.host_backup_bytes < s.asleep_bytes || s.mapped_bytes != t_dev_used(&t, 0) ||
	    !s.mapped_bytes)
		return why("the figures do not tell the truth");
	/* Allocation refuses an arena asleep in part (it would land in released memory). */
	{
		vmm_devptr q;

		if (vmm_malloc(t.core, 0, SZ, 0, NULL, &q, &err) != VMM_E_BUSY)
			return why("allocated in an arena asleep in part");
	}
	if (vmm_offload_wake(&parts, &sel, NULL, &r, &err))
		return why(err.msg);
	s = t_stats(&t, 0, NULL);
	if (vmm_is_asleep(t.core, 0, NULL) || s.asleep_bytes || s.mapped_bytes != t_dev_used(&t, 0))
		return why("the wake did not complete it");
	if (!all_intact(p))
		return why("contents lost");
	/* The next cycle is ordinary. */
	if (vmm_offload_sleep(&parts, &sel, NULL, &r, &err) ||
	    vmm_offload_wake(&parts, &sel, NULL, &r, &err) || !all_intact(p))
		return why("the next cycle failed");
	for (int i = 0; i < N; i++)
		vmm_free(t.core, p[i], NULL);
	t_close(&t);
	return 0;
}

static int run_child(const char *fail, int *handles)
{
	int fd[2], status;
	pid_t pid;

	cr_assert_eq(pipe(fd), 0);
	pid = fork();
	if (pid == 0) {
		int h = 0, rc;

		close(fd[0]);
		setenv("SIMDEV_MEMORY", "512M", 1);
		if (fail)
			setenv("SIMDEV_FAIL", fail, 1);
		rc = partial_scenario(&h);
		if (write(fd[1], &h, sizeof(h)) != sizeof(h))
			rc = 1;
		_exit(rc);
	}
	close(fd[1]);
	*handles = -1;
	if (read(fd[0], handles, sizeof(*handles)) != sizeof(*handles))
		*handles = -1;
	close(fd[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Test(transition, every_release_failing_with_its_undo_leaves_a_partial_state, .timeout = 120)
{
	int handles, rc, partial = 0;
	char fail[96];

	cr_assert_eq(run_child(NULL, &handles), 3, "the scenario runs without faults");
	cr_assert_geq(handles, 2, "several handles to release: %d", handles);
	for (int k = 1; k <= handles; k++) {
		int h;

		/* The k-th release of the sleep fails, then re-creating the released ones fails. */
		snprintf(fail, sizeof(fail), "cuMemRelease:%d,cuMemCreate:%d", k, handles + 1);
		rc = run_child(fail, &h);
		cr_expect(rc == 0 || (rc == 3 && k == 1),
			  "SIMDEV_FAIL=%s: the scenario failed (%d)", fail, rc);
		partial += rc == 0;
	}
	cr_expect_geq(partial, handles - 1, "%d of %d cases reached the partial state", partial,
		      handles);
	cr_log_info("%d of %d release failures left a partial state, all recovered", partial,
		    handles);
}

/* A core on simdev with one buffer of SZ bytes filled from seed. */
static vmm_devptr open_with_buffer(struct tctx *t, uint64_t seed)
{
	vmm_devptr p;
	vmm_error err;

	t_simdev_env("512M", NULL, NULL);
	t_open(t, NULL);
	cr_assert_eq(vmm_malloc(t->core, 0, SZ, 0, NULL, &p, &err), VMM_OK);
	t_fill(p, SZ, seed);
	return p;
}

Test(transition, a_selection_of_nothing_is_an_error_that_changes_nothing)
{
	vmm_selection tag = { .tag = "nosuch", .device = -1 }, dev = { .device = 3 };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_devptr p;
	vmm_error err;
	struct tctx t;

	p = open_with_buffer(&t, 7);
	parts = heap_only(t.core);
	cr_expect_eq(vmm_offload_sleep(&parts, &tag, NULL, &r, &err), VMM_E_INVALID);
	cr_expect(strstr(err.msg, "no tag \"nosuch\""), "%s", err.msg);
	cr_expect_eq(vmm_offload_wake(&parts, &tag, NULL, &r, &err), VMM_E_INVALID);
	cr_expect_eq(vmm_offload_sleep(&parts, &dev, NULL, &r, &err), VMM_E_INVALID);
	cr_expect(strstr(err.msg, "device 3 has no memory"), "%s", err.msg);
	cr_expect_not(vmm_is_asleep(t.core, -1, NULL));
	cr_expect(t_check(p, SZ, 7));
	vmm_free(t.core, p, NULL);
	t_close(&t);
}

static bool always(void *arg)
{
	(void)arg;
	return true;
}

Test(transition, a_cancelled_sleep_rolls_back)
{
	vmm_selection all = { .device = -1 };
	vmm_limits lim = { .cancelled = always };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_devptr p;
	vmm_error err;
	struct tctx t;

	p = open_with_buffer(&t, 9);
	parts = heap_only(t.core);
	cr_expect_eq(vmm_offload_sleep(&parts, &all, &lim, &r, &err), VMM_E_BUSY);
	cr_expect(strstr(err.msg, "cancelled"), "%s", err.msg);
	cr_expect_eq(r.partial_bytes, 0);
	cr_expect_not(vmm_is_asleep(t.core, -1, NULL));
	cr_expect(t_check(p, SZ, 9));
	cr_expect_eq(t_stats(&t, 0, NULL).mapped_bytes, t_dev_used(&t, 0));
	vmm_free(t.core, p, NULL);
	/* The drain it gave up may still run on the helper: the backend must outlive it. */
	cr_assert(vmm_drain_wait_idle(vmm_now_s() + 5));
	t_close(&t);
}

/* Each device sync takes 4 s: a drain bounded at 0.3 s gives up, the heap stays awake, and
 * the sync given up finishes on its own later. (4 s, not less: the checks in between must run
 * before that sync ends, and a loaded machine may hold this thread off the CPU a while.) */
Test(transition, a_drain_past_its_deadline_gives_up_and_rolls_back, .timeout = 60)
{
	vmm_selection all = { .device = -1 };
	vmm_limits quick = { .drain_s = 0.3 }, patient = { .drain_s = 10 };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_devptr p;
	vmm_error err;
	struct tctx t;
	double t0;

	setenv("SIMDEV_DELAY", "cuCtxSynchronize:4000", 1);
	p = open_with_buffer(&t, 11);
	parts = heap_only(t.core);
	t0 = vmm_now_s();
	cr_expect_eq(vmm_offload_sleep(&parts, &all, &quick, &r, &err), VMM_E_BUSY);
	cr_expect_lt(vmm_now_s() - t0, 2.5, "gave up after %.2f s", vmm_now_s() - t0);
	cr_expect(strstr(err.msg, "device 0 did not drain within"), "%s", err.msg);
	cr_expect_not(vmm_is_asleep(t.core, -1, NULL));
	cr_expect(t_check(p, SZ, 11));
	cr_expect_not(vmm_drain_idle(), "the sync given up is still running");
	cr_expect(vmm_drain_wait_idle(vmm_now_s() + 10), "and finishes on its own");
	cr_expect_eq(vmm_offload_sleep(&parts, &all, &patient, &r, &err), VMM_OK, "%s", err.msg);
	cr_expect_eq(vmm_offload_wake(&parts, &all, &patient, &r, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(p, SZ, 11));
	vmm_free(t.core, p, NULL);
	t_close(&t);
}

/* A tag asleep before a whole-process sleep stays asleep when that sleep is undone: the undo
 * brings back what the sleep changed, nothing else. The later part, the program's own mappings,
 * fails: its one handle is not a real one, so its copy cannot be made. */
Test(transition, an_undo_brings_back_only_what_the_operation_changed)
{
	vmm_sleep_opts a = { .tag = "a", .device = -1 };
	vmm_selection all = { .device = -1, .app = true };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_app_registry *reg;
	vmm_devptr pa, pb;
	vmm_error err;
	struct tctx t;

	t_simdev_env("512M", NULL, NULL);
	t_open(&t, NULL);
	cr_assert_eq(vmm_app_registry_create(t.be, &reg, &err), VMM_OK);
	vmm_app_created(reg, (vmm_phys)0xdead000, 2 * MiB, 0, NULL, 0);
	cr_assert_eq(vmm_malloc(t.core, 0, SZ, 0, "a", &pa, &err), VMM_OK);
	cr_assert_eq(vmm_malloc(t.core, 0, SZ, 0, "b", &pb, &err), VMM_OK);
	t_fill(pa, SZ, 1);
	t_fill(pb, SZ, 2);
	cr_assert_eq(vmm_sleep(t.core, &a, NULL, &err), VMM_OK, "%s", err.msg);
	parts = heap_only(t.core);
	parts.app = reg;
	cr_expect_neq(vmm_offload_sleep(&parts, &all, NULL, &r, &err), VMM_OK);
	cr_expect_eq(r.partial_bytes, 0, "%s", err.msg);
	cr_expect(vmm_is_asleep(t.core, 0, "a"), "the tag asleep before stays asleep");
	cr_expect_not(vmm_is_asleep(t.core, 0, "b"), "what the sleep changed is awake again");
	cr_expect(t_check(pb, SZ, 2));
	cr_assert_eq(vmm_wake(t.core, &a, NULL, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(pa, SZ, 1));
	vmm_app_registry_destroy(reg);
	t_close(&t);
}

/* The wake of a tag finds the device's memory in the process's own cache (freed by another tag,
 * maybe still quarantined): it gives that back to the driver and wakes, rather than refusing for
 * lack of device memory that it holds itself. */
Test(transition, a_wake_takes_back_the_memory_of_its_own_cache)
{
	vmm_selection a = { .tag = "a", .device = 0 };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_devptr pa, pb;
	vmm_error err;
	vmm_stats s;
	struct tctx t;

	t_simdev_env("512M", NULL, NULL);
	t_open(&t, NULL);
	parts = heap_only(t.core);
	cr_assert_eq(vmm_malloc(t.core, 0, 160 * MiB, 0, "a", &pa, &err), VMM_OK);
	t_fill(pa, 160 * MiB, 21);
	cr_assert_eq(vmm_offload_sleep(&parts, &a, NULL, &r, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_malloc(t.core, 0, 400 * MiB, 0, "b", &pb, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_free(t.core, pb, &err), VMM_OK);
	s = t_stats(&t, 0, NULL);
	cr_assert_geq(s.cached_bytes, 400 * MiB, "the freed memory is cached, not given back");
	cr_assert_eq(vmm_offload_wake(&parts, &a, NULL, &r, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(pa, 160 * MiB, 21));
	cr_expect_not(vmm_is_asleep(t.core, -1, NULL));
	vmm_free(t.core, pa, NULL);
	t_close(&t);
}

/* The lines a wake refused for want of device memory writes to stderr at level lvl. */
static char *refused_wake_log(struct tctx *t, vmm_log_level lvl, const char *path)
{
	static char buf[4096];
	vmm_selection all = { .device = -1 };
	vmm_offload_parts parts = heap_only(t->core);
	vmm_transfer_result r;
	vmm_error err;

	cr_assert(freopen(path, "w", stderr));
	setvbuf(stderr, NULL, _IONBF, 0);
	vmm_log_set_level(lvl);
	cr_expect_eq(vmm_offload_wake(&parts, &all, NULL, &r, &err), VMM_E_OOM, "%s", err.msg);
	cr_expect_eq(r.partial_bytes, 0);
	vmm_log_set_level(VMM_LOG_OFF);
	return t_read_log(path, buf, sizeof(buf));
}

/* A wake refused for want of device memory, whole and still asleep, is what a sharing process
 * waiting for room meets at every look: at the default level (warn) it writes nothing, at info
 * it says why; the caller gets the error either way. (The share soak counted ~450 such warnings
 * in 120 s of four processes before.) */
Test(transition, a_wake_refused_for_memory_is_not_a_warning)
{
	vmm_selection all = { .device = -1 };
	vmm_transfer_result r;
	vmm_offload_parts parts;
	vmm_devptr p;
	vmm_phys filler;
	vmm_error err;
	char path[] = "/tmp/vmmshim-transition-log-XXXXXX";
	struct tctx t;
	int fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	close(fd);
	t_simdev_env("64M", NULL, NULL);
	t_open(&t, NULL);
	parts = heap_only(t.core);
	cr_assert_eq(vmm_malloc(t.core, 0, 32 * MiB, 0, NULL, &p, &err), VMM_OK, "%s", err.msg);
	t_fill(p, 32 * MiB, 7);
	cr_assert_eq(vmm_offload_sleep(&parts, &all, NULL, &r, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(t.be->create(t.be, 0, 48 * MiB, &filler, &err), VMM_OK, "%s", err.msg);
	cr_expect_null(strstr(refused_wake_log(&t, VMM_LOG_WARN, path), "wake failed"),
		       "a refused wake warns");
	cr_expect_not_null(strstr(refused_wake_log(&t, VMM_LOG_INFO, path), "still asleep"),
			   "at info, the refusal is said");
	cr_assert_eq(t.be->release(t.be, filler, &err), VMM_OK, "%s", err.msg);
	cr_assert_eq(vmm_offload_wake(&parts, &all, NULL, &r, &err), VMM_OK, "%s", err.msg);
	cr_expect(t_check(p, 32 * MiB, 7));
	vmm_free(t.core, p, NULL);
	t_close(&t);
}
