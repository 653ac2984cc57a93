/* NCCL's user-buffer registration on the shim's memory (prog_retain.c): a retained handle holds
 * the allocation from its offset 0, another process maps it and shares the bytes both ways, the
 * neighbours that moved along keep theirs, and a sleep and wake afterwards keep everything. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "run_util.h"

#define CUDA_ERROR_NOT_SUPPORTED_NUM 801

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* The number after "name " in the program's output; -1 when absent. */
static long printed(const char *out, const char *name)
{
	const char *p = strstr(out, name);
	long v = -1;

	if (p)
		sscanf(p + strlen(name), " %ld", &v);
	return v;
}

Test(retain, nccl_registration_of_small_and_mid_buffers)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_retain")),
				    (const char *const[]){ "SIMDEV_MEMORY=1G", NULL });
	char key[64];

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "retain ok"), "%s", r->out);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "the shim served the memory\n%s", r->stats);
	/* Both buffers lay in several 2 MiB pieces: their bytes were moved on the device. */
	cr_expect_geq(run_stat(r, "cuMemcpyDtoDAsync_v2"), 2, "%s", r->stats);
	/* Some neighbours shared the buffers' last granules, so their bytes moved too. */
	snprintf(key, sizeof(key), "registered %u in_edge", 3u << 20);
	cr_expect_gt(printed(r->out, key), 0, "%s", r->out);
	snprintf(key, sizeof(key), "registered %u in_edge", (20u << 20) + (100u << 10));
	cr_expect_gt(printed(r->out, key), 0, "%s", r->out);
	/* A buffer that starts inside a granule cannot be held by one handle from its base. */
	cr_expect_eq(printed(r->out, "unaligned_rc"), CUDA_ERROR_NOT_SUPPORTED_NUM, "%s", r->out);
	run_free(r);
}
