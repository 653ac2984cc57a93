/* Programs built with AddressSanitizer or ThreadSanitizer run under the shim: their runtimes call
 * our dlsym (and would intercept __tls_get_addr) while they initialize, before they can serve
 * anything. They run as the README tells users to: ASan with verify_asan_link_order=0, TSan with
 * the shim's suppressions (shim/tsan.supp: TSan cannot see the uninstrumented shim's atomics). Each program must exit 0 with its allocations served by the shim (the driver saw
 * cuMemCreate, not cuMemAlloc). A sanitizer whose runtime the compiler lacks is skipped, saying so
 * (meson puts the built kinds in SANITIZED_PROGS and the reason for the others in
 * SANITIZED_SKIP). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run_util.h"

static void run_sanitized(const char *kind)
{
	const char *built = getenv("SANITIZED_PROGS");
	char name[64], tsan[600], *p;
	struct run *r;

	if (!built || !strstr(built, kind)) {
		const char *why = getenv("SANITIZED_SKIP");

		cr_skip_test("no -fsanitize=%s program: %s", kind, why ? why : "not built");
	}
	snprintf(name, sizeof(name), "prog_%s", kind);
	p = (char *)bin_path(name);
	/* ASan checks that its runtime is the first library; a preloaded one comes before it. The
	 * documented way out: this option, or LD_PRELOAD="libasan.so libvmmshim.so". */
	snprintf(tsan, sizeof(tsan), "TSAN_OPTIONS=suppressions=%s", getenv("VMMSHIM_TSAN_SUPP"));
	r = run_program(shim_path(), (const char *const[]){ p, NULL },
			(const char *const[]){ "ASAN_OPTIONS=verify_asan_link_order=0", tsan, NULL });
	cr_expect_eq(r->status, 0, "%s under the shim: status %d\n%s\n%s", kind, r->status, r->out,
		     r->err);
	cr_expect(strstr(r->out, "ok"), "%s: %s", kind, r->out);
	cr_expect_gt(run_stat(r, "cuMemCreate"), 0, "the shim served the allocations");
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "nothing passed through");
	cr_expect_null(strstr(r->err, "Sanitizer"), "a sanitizer report:\n%s", r->err);
	run_free(r);
}

Test(sanitized, an_asan_program_runs_under_the_shim, .timeout = 60)
{
	run_sanitized("address");
}

Test(sanitized, a_tsan_program_runs_under_the_shim, .timeout = 60)
{
	run_sanitized("thread");
}
