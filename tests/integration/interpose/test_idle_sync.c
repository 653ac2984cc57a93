/* Under the shim, a program's 64 MiB malloc/free pairs reuse the same memory with one device
 * synchronization in all when it submits no work between them (the driver's count of
 * cuCtxSynchronize, SIMDEV_STATS), one per pair when it launches between them, and a launch
 * still inside the driver while the heap synchronizes is waited for before its memory is
 * reused (the program checks what it wrote there). */
#include <criterion/criterion.h>

#include "run_served.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ENV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static long long syncs(const struct run *r)
{
	return run_stat(r, "cuCtxSynchronize") + run_stat(r, "cuCtxSynchronize_v2");
}

/* Without the shim's thread that syncs ahead: it may sync beside the program's one sync, at
 * the same moment (two in all, now and then), which says nothing about the rule tested here. */
Test(idle_sync, pairs_without_work_synchronize_once)
{
	struct run *r = run_served(ARGV(bin_path("prog_idle_sync"), "pairs", "50"),
				   ENV("VMMSHIM_SYNC_AHEAD=0"));

	cr_expect_leq(syncs(r), 1, "%lld synchronizations for 50 idle pairs\n%s", syncs(r),
		      r->stats);
	run_free(r);
}

/* The quarantine's rule, so without lone-stream ordering (all the program's work goes to one
 * stream: test_lone_stream.c covers that). */
Test(idle_sync, pairs_with_work_synchronize_each_time)
{
	struct run *r = run_served(ARGV(bin_path("prog_idle_sync"), "pairs-work", "50"),
				   ENV("VMMSHIM_LONE_STREAM=0"));

	cr_expect_geq(syncs(r), 49, "%lld synchronizations for 50 pairs with a launch each\n%s",
		      syncs(r), r->stats);
	run_free(r);
}

/* The launch is counted when the driver returns it, after the heap's synchronization read the
 * count: counted on entry, the reuse after it would skip and the kernel would overwrite it.
 * Without lone-stream ordering: the program writes the reused block from the host, which only
 * simdev allows (a GPU program writes it with work on its stream, ordered after the kernel). */
Test(idle_sync, a_launch_inside_the_driver_is_not_taken_as_drained)
{
	struct run *r = run_served(ARGV(bin_path("prog_idle_sync"), "launch-late"),
				   ENV("SIMDEV_DELAY=cuLaunchKernel:400", "VMMSHIM_LONE_STREAM=0"));

	cr_expect(strstr(r->out, "was waited for"), "%s", r->out);
	run_free(r);
}
