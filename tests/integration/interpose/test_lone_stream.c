/* Lone-stream ordering under the shim (shim/lone_stream.h), as a program sees it: while all its
 * work goes to one stream, a block it frees comes back at once to its next allocation, even
 * though a kernel that uses the block is still queued, and the data the next owner writes stays;
 * a second stream that would not wait for the first by itself (non-blocking, per-thread or the
 * legacy stream beside a non-blocking one) is made to; a capture begins only once the first
 * stream's work is done; a stream that gets all the work after an early one elsewhere becomes
 * the lone one; a stream is never made to wait for a kernel that waits for it (when no block was
 * taken back since). VMMSHIM_LONE_STREAM=0 keeps freed memory until a synchronization. */
#include <criterion/criterion.h>

#include "run_served.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ENV(...) ((const char *const[]){ __VA_ARGS__, NULL })

Test(lone_stream, a_block_freed_under_queued_work_comes_back_at_once)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "reuse"), NULL);

	cr_expect(strstr(r->out, "came back at once"), "%s", r->out);
	cr_expect(strstr(r->out, "kept the new owner's data"), "%s", r->out);
	run_free(r);
}

Test(lone_stream, switched_off_the_block_waits_for_a_synchronization)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "reuse"),
				   ENV("VMMSHIM_LONE_STREAM=0"));

	cr_expect(strstr(r->out, "did not come back at once"), "%s", r->out);
	cr_expect(strstr(r->out, "kept the new owner's data"), "%s", r->out);
	run_free(r);
}

static void expect_join(const char *first, const char *second)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "join", first, second), NULL);

	cr_expect(strstr(r->out, "came back at once"), "%s", r->out);
	cr_expect(strstr(r->out, "waited for the late kernel"), "%s", r->out);
	cr_expect(strstr(r->out, "join kept the new owner's data"), "%s", r->out);
	run_free(r);
}

Test(lone_stream, a_non_blocking_stream_waits_for_the_default_stream)
{
	expect_join("legacy", "created");
}

Test(lone_stream, the_default_stream_waits_for_a_non_blocking_stream)
{
	expect_join("created", "legacy");
}

Test(lone_stream, a_per_thread_stream_waits_for_a_non_blocking_stream)
{
	expect_join("created", "per-thread");
}

/* One early kernel on a side stream (as PyTorch at start), then the default stream has all the
 * work: it becomes the lone stream, and the side stream joins it again. */
Test(lone_stream, the_main_stream_becomes_lone_after_an_early_side_stream)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "again"),
				   ENV("VMMSHIM_LOG=info"));

	cr_expect(strstr(r->err, "episode 2 ends"), "%s", r->err);
	cr_expect(strstr(r->out, "came back at once"), "%s", r->out);
	cr_expect(strstr(r->out, "waited for the late kernel"), "%s", r->out);
	cr_expect(strstr(r->out, "join kept the new owner's data"), "%s", r->out);
	run_free(r);
}

/* flag_wait's pattern: a kernel spins until a later copy on another stream sets a flag. The
 * join waits only for what a block taken back needs (none here), so this is no deadlock. */
Test(lone_stream, a_later_stream_is_not_made_to_wait_for_a_spinning_kernel)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "spin"), NULL);

	cr_expect(strstr(r->out, "saw the other stream's flag"), "%s", r->out);
	run_free(r);
}

Test(lone_stream, a_capture_begins_after_the_lone_streams_work)
{
	struct run *r = run_served(ARGV(bin_path("prog_lone_stream"), "capture"), NULL);

	cr_expect(strstr(r->out, "came back at once"), "%s", r->out);
	cr_expect(strstr(r->out, "capture began after"), "%s", r->out);
	run_free(r);
}
