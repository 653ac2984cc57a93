/* For Criterion tests of programs the shim must serve: run it under the shim (run_util.h) and
 * assert what every such test needs first, that it exited 0 and got its memory from the shim
 * (the driver saw cuMemCreate). */
#ifndef RUN_SERVED_H
#define RUN_SERVED_H

#include <criterion/criterion.h>

#include "run_util.h"

static inline struct run *run_served(const char *const *argv, const char *const *env)
{
	struct run *r = run_program(shim_path(), argv, env);

	cr_assert_eq(r->status, 0, "exit status %d\nstdout:\n%s\nstderr:\n%s", r->status, r->out,
		     r->err);
	cr_assert_gt(run_stat(r, "cuMemCreate"), 0, "not served by the shim\n%s", r->stats);
	return r;
}

#endif
