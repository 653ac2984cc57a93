/* The program's own VMM handles (PyTorch expandable segments) under the shim on simdev, with an
 * in-process sleep/wake and without: the program checks its bytes, its handle values, exports
 * after a wake, retains and releases, grows and shrinks, and exits non-zero on any difference;
 * from outside, every byte is back on the device at exit. */
#include <criterion/criterion.h>
#include <string.h>

#include "run_util.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define ENV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void expect_ok(const struct run *r)
{
	cr_assert_eq(r->status, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s", r->status, r->out,
		     r->err);
	cr_assert(strstr(r->out, "prog_app_vmm: ok"), "stdout:\n%s\nstderr:\n%s", r->out, r->err);
	cr_expect_eq(run_stat(r, "live_bytes"), 0, "device bytes left at exit\n%s", r->stats);
}

Test(app_vmm, expandable_segments_through_sleep_and_wake)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_app_vmm")),
				    ENV("VMMSHIM_LOG=info"));

	expect_ok(r);
	/* The second sleep leaves the exported piece and the imported mapping of it (20 MiB
	 * each): the import was recorded. */
	cr_expect(strstr(r->err, "41943040 bytes of app handles stay resident"), "%s", r->err);
	/* The shim released and re-created the program's handles: 6 + 4 of them (the exported
	 * one stays), on top of the program's own 9 + 2 cuMemCreate calls. */
	cr_expect_geq(run_stat(r, "cuMemCreate"), 11 + 10, "%s", r->stats);
	cr_expect(!strstr(r->err, "while its memory is asleep"), "an asleep handle reached a hook "
		  "that refuses it:\n%s", r->err);
	run_free(r);
}

Test(app_vmm, expandable_segments_without_sleep)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_app_vmm")),
				    ENV("NOSLEEP=1", "VMMSHIM_LOG=debug"));
	const char *p = r->err;
	int recorded = 0;

	expect_ok(r);
	while ((p = strstr(p, "app VMM: recorded handle")))
		recorded++, p++;
	cr_expect_eq(recorded, 11, "every handle of the program is recorded\n%s", r->err);
	run_free(r);
}

Test(app_vmm, natively_for_comparison)
{
	/* The program's checks hold on the driver alone, so that the runs above test the shim.
	 * Without retains: simdev counts no references, so natively a retain's cuMemRelease
	 * would drop the program's handle (the real driver counts them; the shim does too). */
	struct run *r = run_program(NULL, ARGV(bin_path("prog_app_vmm")),
				    ENV("NOSLEEP=1", "NORETAIN=1"));

	expect_ok(r);
	run_free(r);
}
