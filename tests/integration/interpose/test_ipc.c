/* Legacy CUDA IPC on the shim's memory between processes that both run under it (prog_ipc.c):
 * PyTorch's pattern, frees and exits in every order while memory is open, and an importer without
 * the shim. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "run_util.h"

#define CUDA_ERROR_INVALID_CONTEXT_NUM 201
#define CUDA_ERROR_INVALID_HANDLE_NUM 400

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static struct run *run_mode(const char *mode)
{
	/* VMMSHIM_WHOLE_HANDLE_MIN: the large buffer is made of 2 MiB pieces, as memory reused
	 * from freed pieces is, so that its descriptors need more than one message. */
	return run_program(shim_path(), ARGV(bin_path("prog_ipc"), mode),
			   (const char *const[]){ "SIMDEV_MEMORY=2G", "VMMSHIM_WHOLE_HANDLE_MIN=1G",
						  NULL });
}

/* The number after "name " in the program's output; -1 when absent. */
static int printed(const struct run *r, const char *name)
{
	const char *p = strstr(r->out, name);
	int v = -1;

	if (p)
		sscanf(p + strlen(name), " %d", &v);
	return v;
}

Test(ipc, torch_pattern_parent_child_parent)
{
	struct run *r = run_mode("torch");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "torch ok"), "%s", r->out);
	/* The shim served the memory (no native allocation, so no driver IPC either). */
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "%s", r->stats);
	cr_expect_eq(run_stat(r, "cuIpcGetMemHandle"), 0, "%s", r->stats);
	cr_expect_gt(run_stat(r, "cuMemExportToShareableHandle"), 0, "%s", r->stats);
	run_free(r);
}

Test(ipc, free_while_open_and_open_after_free)
{
	struct run *r = run_mode("orders");
	char want[64];

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "orders ok"), "%s", r->out);
	cr_expect_eq(printed(r, "open_in_exporter"), CUDA_ERROR_INVALID_CONTEXT_NUM, "%s", r->out);
	/* status names the export and the pid that opened it. */
	snprintf(want, sizeof(want), "opened_by=\"%d\"", printed(r, "importer"));
	cr_expect(strstr(r->out, "STATUS ipc_export dev=0") && strstr(r->out, want), "%s\n%s",
		  want, r->out);
	cr_expect(strstr(r->out, "STATUS ipc exports=1 imports=0"), "%s", r->out);
	cr_expect_eq(printed(r, "open_after_free child"), CUDA_ERROR_INVALID_HANDLE_NUM % 256,
		     "%s", r->out);
	run_free(r);
}

Test(ipc, exporter_killed_while_open)
{
	struct run *r = run_mode("killed");
	char want[64];

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "killed ok"), "%s", r->out);
	cr_expect_eq(printed(r, "open_after_exit"), CUDA_ERROR_INVALID_HANDLE_NUM, "%s", r->out);
	snprintf(want, sizeof(want), "STATUS ipc_import dev=0 exporter=%d ",
		 printed(r, "exporter"));
	cr_expect(strstr(r->out, want), "%s\n%s", want, r->out);
	cr_expect(strstr(r->out, "ipc_imported=6291456"), "the opened bytes are reported\n%s",
		  r->out);
	run_free(r);
}

Test(ipc, large_buffer_in_many_pieces)
{
	struct run *r = run_mode("large");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "large ok"), "%s", r->out);
	/* 136 MiB in 2 MiB pieces: one descriptor each, over two messages. */
	cr_expect_geq(run_stat(r, "cuMemExportToShareableHandle"), 68, "%s", r->stats);
	run_free(r);
}

Test(ipc, retained_handle_of_a_large_allocation_exports_it_whole)
{
	struct run *r = run_mode("retain");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "retain ok"), "%s", r->out);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "the shim served the memory\n%s", r->stats);
	/* The small allocation shares its 2 MiB piece with others and does not start it: no
	 * handle can hold it from its base, so the retain is refused and the log says why. */
	cr_expect_eq(printed(r, "retain_small"), 801, "%s", r->out);
	cr_expect(strstr(r->err, "does not start a"), "%s", r->err);
	run_free(r);
}

Test(ipc, importer_without_shim_gets_driver_error)
{
	struct run *r = run_mode("noshim");
	int rc;

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	rc = printed(r, "open_without_shim");
	/* The driver's own answer to bytes it did not make: an error, never a crash. */
	cr_expect(rc > 0 && rc < 128, "child status %d\n%s", rc, r->out);
	run_free(r);
}
