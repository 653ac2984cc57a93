/* (g) Inert until needed: preloaded into programs that never touch a device, the shim changes
 * neither their output nor their exit status, writes nothing to stderr and creates nothing (its
 * run folder stays absent). */
#include <criterion/criterion.h>
#include <string.h>

#include "run_util.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void same_as_native(const char *const *argv)
{
	struct run *native = run_program(NULL, argv, NULL);
	struct run *shim = run_program(shim_path(), argv, NULL);

	cr_assert_eq(shim->status, native->status, "%s: status %d, natively %d", argv[0],
		     shim->status, native->status);
	cr_assert_str_eq(shim->out, native->out, "%s: output differs", argv[0]);
	cr_assert_str_eq(shim->err, native->err, "%s: stderr differs:\n%s", argv[0], shim->err);
	cr_assert(!run_dir_exists(shim), "%s: the run folder was created", argv[0]);
	run_free(native);
	run_free(shim);
}

Test(inert, bin_true)
{
	same_as_native(ARGV("/bin/true"));
}

Test(inert, bin_false_keeps_its_status)
{
	same_as_native(ARGV("/bin/false"));
}

Test(inert, bash_echo)
{
	same_as_native(ARGV("/bin/bash", "-c", "echo hi"));
}

Test(inert, python3_print)
{
	same_as_native(ARGV("/usr/bin/python3", "-c", "print(1)"));
}

Test(inert, allocation_without_context_gets_the_drivers_answer)
{
	same_as_native(ARGV(bin_path("prog_noctx")));
}

Test(inert, probing_for_a_driver_finds_none)
{
	same_as_native(ARGV(bin_path("prog_nodriver")));
}
