/* Unmodified programs under LD_PRELOAD=libvmmshim.so on simdev. Each test shows, from outside the
 * program, that its device memory was served by the shim's core (simdev saw cuMemCreate/cuMemMap
 * and not the program's cuMemAlloc_v2), that its data stayed intact (the program checks every byte
 * and exits non-zero otherwise), and that every byte went back to the device at exit. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "run_util.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ENV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static int count(const char *text, const char *what)
{
	int n = 0;

	for (const char *p = strstr(text, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

static void expect_ok(const struct run *r, const char *marker)
{
	cr_assert_eq(r->status, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s", r->status, r->out,
		     r->err);
	cr_assert(strstr(r->out, marker), "no '%s' in stdout:\n%s", marker, r->out);
}

/* The core served the program: VMM calls at the driver, all memory back at exit. */
static void expect_served(const struct run *r)
{
	cr_assert_gt(run_stat(r, "cuMemCreate"), 0, "no cuMemCreate: not served by the core\n%s",
		     r->stats);
	cr_assert_gt(run_stat(r, "cuMemMap"), 0, "no cuMemMap\n%s", r->stats);
	cr_assert_eq(run_stat(r, "live_bytes"), 0, "device bytes left at exit\n%s", r->stats);
	cr_assert(strstr(r->err, "live at exit: 0 bytes"), "shim's exit report missing:\n%s",
		  r->err);
}

Test(interpose, cudart_program_is_served_by_the_core)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_cudart")), NULL);

	expect_ok(r, "prog_cudart: ok");
	expect_served(r);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "cudaMalloc reached the driver");
	cr_expect_eq(run_stat(r, "cuMemAllocAsync") + run_stat(r, "cuMemAllocAsync_ptsz"), 0,
		     "cudaMallocAsync reached the driver");
	cr_expect(strstr(r->err, "cuda served 7 allocations"), "shim log:\n%s", r->err);
	run_free(r);
}

/* The exit report counts the driver work behind the allocations (an A/B of two heap settings is
 * told apart by it): the handles it says were made are the ones the driver made; those it says
 * were released went back during the run (what the heap still caches goes at its teardown,
 * after the report). */
Test(interpose, the_exit_report_counts_the_handles_the_driver_made)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_cudart")), NULL);
	char want[96];
	const char *at;
	long long released = -1;

	expect_ok(r, "prog_cudart: ok");
	snprintf(want, sizeof(want), "; %lld handles created, ", run_stat(r, "cuMemCreate"));
	at = strstr(r->err, want);
	cr_assert(at, "no \"%s\" in the exit report:\n%s\n%s", want, r->err, r->stats);
	cr_assert_eq(sscanf(at + strlen(want), "%lld released, ", &released), 1, "%s", r->err);
	cr_assert(released >= 0 && released <= run_stat(r, "cuMemRelease"), "%s\n%s", r->err,
		  r->stats);
	cr_expect(strstr(r->err, " device syncs ("), "shim log:\n%s", r->err);
	run_free(r);
}

Test(interpose, cudart_program_without_shim_uses_the_driver)
{
	/* The control: natively the same program calls cuMemAlloc_v2, so the test above can fail. */
	struct run *r = run_program(NULL, ARGV(bin_path("prog_cudart")), NULL);

	expect_ok(r, "prog_cudart: ok");
	cr_expect_gt(run_stat(r, "cuMemAlloc_v2"), 0);
	cr_expect_eq(run_stat(r, "cuMemCreate"), 0);
	run_free(r);
}

Test(interpose, driver_reached_only_through_cuGetProcAddress)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_procaddr")), NULL);

	expect_ok(r, "prog_procaddr: ok");
	expect_served(r);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0);
	cr_expect_eq(run_stat(r, "cuMemAllocAsync_ptsz") + run_stat(r, "cuMemAllocAsync"), 0);
	cr_expect_eq(run_stat(r, "cuMemFreeAsync_ptsz") + run_stat(r, "cuMemFree_v2"), 0);
	run_free(r);
}

Test(interpose, lcuda_program_and_queries)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_driver")), NULL);

	expect_ok(r, "prog_driver: ok");
	expect_served(r);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0);
	cr_expect_eq(run_stat(r, "cuMemAllocPitch_v2"), 0);
	cr_expect_eq(run_stat(r, "cuMemAllocFromPoolAsync"), 0, "default pool not served\n%s",
		     r->stats);
	cr_expect_eq(run_stat(r, "cuMemFreeAsync"), 0);
	/* Legacy IPC on the shim's memory gives a handle (test_ipc.c opens such handles). */
	cr_expect(strstr(r->out, "cuIpcGetMemHandle -> 0"), "%s", r->out);
	run_free(r);
}

/* VMMSHIM_ALLOC_TRACE: every allocation the core served, in order, each freed once, with the
 * size asked for and the address the program got. */
Test(interpose, allocation_trace_records_what_was_served)
{
	char path[] = "/tmp/vmmshim-trace-XXXXXX", env[64], line[128];
	unsigned long long size, ptr, addr[64] = { 0 };
	int fd = mkstemp(path), nalloc = 0, nfree = 0, ok_sizes = 0;
	struct run *r;
	FILE *f;

	cr_assert(fd >= 0);
	close(fd);
	snprintf(env, sizeof(env), "VMMSHIM_ALLOC_TRACE=%s", path);
	r = run_program(shim_path(), ARGV(bin_path("prog_driver")), ENV(env));
	expect_ok(r, "prog_driver: ok");
	f = fopen(path, "r");
	cr_assert(f, "no trace at %s", path);
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "a %llu %llx", &size, &ptr) == 2 ||
		    sscanf(line, "A %llu %llx", &size, &ptr) == 2) {
			/* prog_driver's first sixteen: (i + 1) * 4096 + 100 bytes. */
			if (nalloc < 16 && size == (unsigned long long)(nalloc + 1) * 4096 + 100)
				ok_sizes++;
			cr_assert_lt(nalloc, 64);
			addr[nalloc++] = ptr;
		} else if (sscanf(line, "f %llx", &ptr) == 1 || sscanf(line, "F %llx", &ptr) == 1) {
			int k = 0;

			while (k < nalloc && addr[k] != ptr)
				k++;
			cr_assert_lt(k, nalloc, "free of 0x%llx, never allocated: %s", ptr, line);
			addr[k] = 0; /* freed once */
			nfree++;
		} else {
			cr_assert_fail("a line that is not a trace line: %s", line);
		}
	}
	fclose(f);
	unlink(path);
	cr_expect_eq(ok_sizes, 16, "the first sixteen sizes, in order");
	cr_expect_geq(nalloc, 18, "the plain, pitched and stream-ordered allocations");
	cr_expect_eq(nfree, nalloc, "every allocation freed once");
	run_free(r);
}

Test(interpose, acl_program_is_served_by_the_core)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_acl")), NULL);

	expect_ok(r, "prog_acl: ok");
	cr_expect_eq(run_stat(r, "aclrtCreateContext"), 1, "the context calls reach the runtime");
	cr_expect_eq(run_stat(r, "aclrtDestroyContext"), 1);
	cr_expect_eq(run_stat(r, "aclrtMalloc") + run_stat(r, "aclrtMallocCached"), 0,
		     "aclrtMalloc reached the runtime\n%s", r->stats);
	cr_expect_gt(run_stat(r, "aclrtMallocPhysical"), 0, "%s", r->stats);
	cr_expect_gt(run_stat(r, "aclrtMapMem"), 0);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	cr_expect(strstr(r->err, "acl served 2 allocations"), "%s", r->err);
	run_free(r);
}

Test(interpose, acl_found_with_dlsym_is_served_by_the_core)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_acl"), "dlsym"), NULL);

	expect_ok(r, "prog_acl (dlsym): ok");
	cr_expect_eq(run_stat(r, "aclrtCreateContext"), 1, "the context calls reach the runtime");
	cr_expect_eq(run_stat(r, "aclrtDestroyContext"), 1);
	cr_expect_eq(run_stat(r, "aclrtMallocAlign32"), 0, "%s", r->stats);
	cr_expect_eq(run_stat(r, "aclrtFree"), 0);
	cr_expect_gt(run_stat(r, "aclrtMallocPhysical"), 0);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	run_free(r);
}

Test(interpose, program_using_vmm_itself)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_vmm")),
				    ENV("VMMSHIM_LOG=debug"));

	expect_ok(r, "prog_vmm: ok");
	/* Exactly the program's own calls reached the driver (the core allocated nothing). */
	cr_expect_eq(run_stat(r, "cuMemCreate"), 4, "%s", r->stats);
	cr_expect_eq(run_stat(r, "cuMemMap"), 4);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	/* The registry recorded every handle and mapping, so that sleep can release them. */
	if (strstr(r->err, "VMM calls are not tracked")) {
		run_free(r);
		cr_skip_test("this build has no app-VMM registry (core/offload) yet");
	}
	cr_expect(strstr(r->err, "VMM calls are tracked"), "%s", r->err);
	cr_expect_eq(count(r->err, "app VMM: recorded handle"), 4, "%s", r->err);
	cr_expect_eq(count(r->err, "app VMM: recorded mapping"), 4, "%s", r->err);
	run_free(r);
}

Test(interpose, pointers_from_before_interception_go_to_the_driver)
{
	struct run *r = run_program(NULL, ARGV(bin_path("prog_late"), shim_path()), NULL);

	expect_ok(r, "prog_late: ok");
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 4, "%s", r->stats);
	cr_expect_eq(run_stat(r, "cuMemFree_v2"), 4, "early pointers not freed by the driver");
	cr_expect_gt(run_stat(r, "cuMemCreate"), 0, "the late allocation was not served");
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	run_free(r);
}

/* prog_release (with mode, or none) natively and under the shim: the same lines both ways, the
 * memory of before the release freed natively, and the shim saying the context ended. */
static void release_as_natively(const char *mode, const char *const *env)
{
	struct run *native = run_program(NULL, ARGV(bin_path("prog_release"), mode), env);
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_release"), mode), env);

	expect_ok(native, "prog_release: ok");
	expect_ok(r, "prog_release: ok");
	cr_expect(strstr(native->out, "memory back: yes, the old pointer freed again -> 1"),
		  "natively: %s", native->out);
	cr_expect_str_eq(r->out, native->out, "under the shim:\n%s\nnatively:\n%s\n%s", r->out,
			 native->out, r->err);
	expect_served(r);
	cr_expect(strstr(r->err, "the primary context ended") && !strstr(r->err, "warn"), "%s",
		  r->err);
	run_free(native);
	run_free(r);
}

/* The last release of the primary context destroys it: natively its allocations go, and under
 * the shim, whose memory outlives the context, the shim frees them (and forgets what it made
 * there), so the program sees the same. */
Test(interpose, the_last_release_of_the_primary_context_frees_as_natively)
{
	release_as_natively(NULL, NULL);
}

/* The same when the shim retained the context for a thread of its own first (a sleep and wake
 * from a thread with no context, as the control server's): the program's release is still the
 * last one it makes, so the context ends as natively. The shim's retain used to keep it, with
 * every allocation of the program's, until exit. */
Test(interpose, the_last_release_frees_after_the_shim_retained_the_context_itself)
{
	release_as_natively("slept", NULL);
}

/* A release that leaves the context active while a sleep is in progress (slowed to seconds here)
 * returns at once: it used to wait for the sleep and the wake, up to 30 s, on every release.
 * The program's last release after them still frees as natively. */
Test(interpose, a_release_that_is_not_the_last_does_not_wait_for_a_sleep)
{
	release_as_natively("during", ENV("SIMDEV_DELAY=cuMemcpyDtoHAsync:1500"));
}

/* The program's last release comes while a sleep is in progress: the release leaves the context
 * to the sleep and wake (they use it), and once they are over the context ends as natively, its
 * memory back. It used to stay, allocations and all, until a later release of the program's. */
Test(interpose, a_last_release_during_a_sleep_ends_the_context_after_it)
{
	release_as_natively("last-during", ENV("SIMDEV_DELAY=cuMemcpyDtoHAsync:1500"));
}

Test(interpose, stream_capture_keeps_graph_memory_nodes)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_capture")), NULL);

	expect_ok(r, "prog_capture: ok");
	expect_served(r);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0);
	cr_expect_gt(run_stat(r, "cuMemAllocAsync") + run_stat(r, "cuMemAllocAsync_ptsz"), 0,
		     "the captured allocation did not reach the driver\n%s", r->stats);
	run_free(r);
}

/* A heap synchronization during a capture would break it (H200: tests/gpu/PROBE.md (e)): none
 * is made while one is in progress; the heap takes fresh memory instead, and synchronizes again
 * once the captures ended. */
Test(interpose, allocations_during_a_capture_do_not_break_it)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_capture_sync")), NULL);

	expect_ok(r, "prog_capture_sync: ok");
	expect_served(r);
	cr_expect_gt(run_stat(r, "cuCtxSynchronize_v2"), 0, "no synchronization after the captures\n%s",
		     r->stats);
	run_free(r);
}

Test(interpose, many_threads)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_threads")), NULL);

	expect_ok(r, "prog_threads: ok");
	expect_served(r);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0);
	run_free(r);
}

Test(interpose, fragmentation_on_1g)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_frag")),
				    ENV("SIMDEV_MEMORY=1G"));

	cr_expect_eq(r->status, 0, "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "512 MiB after fragmenting: ok"), "%s", r->out);
	expect_served(r);
	run_free(r);
}

Test(interpose, survives_fork)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_fork")), NULL);

	expect_ok(r, "prog_fork: ok");
	cr_expect(strstr(r->out, "child without cuda: ok"), "%s", r->out);
	cr_expect(strstr(r->out, "child with cuda:"), "%s", r->out);
	run_free(r);
}

Test(interpose, disabled_is_pure_pass_through)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_cudart")),
				    ENV("VMMSHIM_DISABLE=1"));

	expect_ok(r, "prog_cudart: ok");
	cr_expect_gt(run_stat(r, "cuMemAlloc_v2"), 0);
	cr_expect_eq(run_stat(r, "cuMemCreate"), 0);
	cr_expect(!run_dir_exists(r));
	run_free(r);
}

Test(interpose, invalid_settings_get_a_message_and_a_default)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_cudart")),
				    ENV("VMMSHIM_CACHE_LIMIT=lots", "VMMSHIM_AUTOWAKE=maybe"));

	expect_ok(r, "prog_cudart: ok");
	expect_served(r);
	cr_expect(strstr(r->err, "VMMSHIM_CACHE_LIMIT=\"lots\" is not valid"), "%s", r->err);
	cr_expect(strstr(r->err, "VMMSHIM_AUTOWAKE=\"maybe\" is not valid"), "%s", r->err);
	run_free(r);
}

Test(interpose, peer_access_reaches_the_shims_memory)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_peer")),
				    ENV("SIMDEV_DEVICES=2"));

	cr_expect_eq(r->status, 0, "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "before 700, after enabling peer access 0"), "%s", r->out);
	expect_served(r);
	run_free(r);
}

/* Peer access enabled before the first allocation (as cudart programs do) covers the memory
 * allocated after it, on both devices. */
Test(interpose, peer_access_enabled_before_any_allocation)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_peer"), "first"),
				    ENV("SIMDEV_DEVICES=2"));

	cr_expect_eq(r->status, 0, "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "device 1 reaches device 0's memory 0, device 0 reaches device "
			 "1's 0"), "%s", r->out);
	expect_served(r);
	run_free(r);
}

/* One rank of a two-GPU job uses device 1 only: a sleep and wake from a thread without a context
 * must not make a context on device 0 (on a GPU a primary context there held 518 MiB). */
Test(interpose, sleep_makes_no_context_on_an_unused_device)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_onedev")),
				    ENV("SIMDEV_DEVICES=2"));

	cr_expect_eq(r->status, 0, "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "contents kept on device 1"), "%s", r->out);
	cr_expect_gt(run_stat(r, "contexts_on_device_1"), 0, "%s", r->stats);
	cr_expect_eq(run_stat(r, "contexts_on_device_0"), 0,
		     "a context was made on device 0, which the program never used:\n%s", r->stats);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	expect_served(r);
	run_free(r);
}

Test(interpose, peer_access_natively_for_comparison)
{
	struct run *r = run_program(NULL, ARGV(bin_path("prog_peer")), ENV("SIMDEV_DEVICES=2"));

	cr_expect_eq(r->status, 0, "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect_eq(run_stat(r, "cuMemCreate"), 0);
	run_free(r);
}
