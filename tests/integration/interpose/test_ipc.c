/* Legacy CUDA IPC on the shim's memory between processes that both run under it (prog_ipc.c):
 * PyTorch's pattern, frees and exits in every order while memory is open, and an importer without
 * the shim. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The status device line's ipc_imported after marker in the program's output; -1: absent. */
static long long imported_after(const struct run *r, const char *marker)
{
	const char *p = strstr(r->out, marker);
	long long v = -1;

	p = p ? strstr(p, "ipc_imported=") : NULL;
	if (p)
		sscanf(p + strlen("ipc_imported="), "%lld", &v);
	return v;
}

Test(ipc, a_close_whose_unmap_is_refused_keeps_the_range_until_it_unmaps)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_ipc"), "close-refused"),
				    (const char *const[]){ "SIMDEV_MEMORY=2G", "VMMSHIM_LOG=info",
							   NULL });
	const char *last;

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "close-refused ok"), "%s", r->out);
	/* Still mapped: its range is not handed to the next open, and it is counted. */
	cr_expect_eq(printed(r, "reopen_same_address"), 0, "%s", r->out);
	cr_expect_eq(imported_after(r, "after_refused_close"), 2 * 6291456,
		     "the refused one and the reopened one are both mapped\n%s", r->out);
	cr_expect(strstr(r->err, "would not unmap"), "the refusal is logged\n%s", r->err);
	/* The last close tried again and unmapped both: nothing imported is reported any more
	 * (the device line, with nothing on it, may be left out). */
	cr_expect_leq(imported_after(r, "after_last_close"), 0, "%s", r->out);
	last = strstr(r->out, "after_last_close");
	cr_expect(last && !strstr(last, "STATUS ipc_import"), "%s", r->out);
	cr_expect(strstr(r->err, "is unmapped now"), "%s", r->err);
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

/* After a wake the two buffers lie in one joint handle. The driver maps whole handles only
 * (simdev as well): the importer of one buffer maps that handle whole and finds its buffer at
 * its place in it; the exporter's other buffer is untouched. */
Test(ipc, a_buffer_in_a_handle_joined_at_a_wake_opens)
{
	struct run *r = run_mode("woken");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "woken ok"), "%s", r->out);
	run_free(r);
}

/* prog_ipc MODE ARG with the shim's info log (its phase lines). */
static struct run *run_logged(const char *mode, const char *arg)
{
	return run_program(shim_path(), ARGV(bin_path("prog_ipc"), mode, arg),
			   (const char *const[]){ "SIMDEV_MEMORY=2G", "VMMSHIM_WHOLE_HANDLE_MIN=1G",
						  "VMMSHIM_LOG=info", NULL });
}

static int count_of(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* The exporter's share_open lines that say it exported for that open. */
static int exporter_exports(const char *text)
{
	int n = 0;

	for (const char *p = strstr(text, " share_open_phases_ms "); p;
	     p = strstr(p + 1, " share_open_phases_ms ")) {
		const char *e = strchr(p, '\n'), *x = strstr(p, " exported=1");

		n += x && (!e || x < e);
	}
	return n;
}

Test(ipc, importers_share_one_export_made_at_the_get)
{
	struct run *one = run_logged("share", "1"), *three = run_logged("share", "3");
	long long e1 = run_stat(one, "cuMemExportToShareableHandle");
	long long e3 = run_stat(three, "cuMemExportToShareableHandle");
	int x1 = exporter_exports(one->err), x3 = exporter_exports(three->err);

	cr_assert_eq(one->status, 0, "%s\n%s", one->out, one->err);
	cr_assert_eq(three->status, 0, "%s\n%s", three->out, three->err);
	cr_expect(strstr(three->out, "share ok"), "%s", three->out);
	/* One export per physical piece, made once: three importers cost what one does. An open
	 * that comes while the export ahead runs exports too (and the ahead's descriptors are
	 * closed): that run made a second round, which only such an open explains. */
	cr_expect_gt(e1, 0, "%s", one->stats);
	cr_expect(e3 == e1 || (x3 == 1 && e3 == 2 * e1) || (x1 == 1 && e1 == 2 * e3),
		  "one importer: %lld exports (%d by an open), three: %lld (%d by an open)\n%s",
		  e1, x1, e3, x3, three->stats);
	/* Every open was answered; at most one of them exported (when it came before the
	 * export ahead), the others got duplicates of the kept descriptors. */
	cr_expect_eq(count_of(three->err, " share_open_phases_ms "), 3, "%s", three->err);
	cr_expect_leq(exporter_exports(three->err), 1, "%s", three->err);
	run_free(one);
	run_free(three);
}

Test(ipc, free_after_get_closes_the_kept_descriptors)
{
	struct run *r = run_mode("free-after-get");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	/* The get exported ahead: the exporter holds the descriptors, one per piece. */
	cr_expect_gt(printed(r, "kept_fds"), 0, "%s", r->out);
	cr_expect_leq(printed(r, "child_extra_fds"), 0, "a forked child holds them\n%s", r->out);
	cr_expect_eq(printed(r, "fds_after_free"), 0, "the free leaves no descriptor open\n%s",
		     r->out);
	cr_expect_eq(printed(r, "used_after_free"), 0, "the device memory went back\n%s", r->out);
	cr_expect_eq(run_stat(r, "live_bytes"), 0, "%s", r->stats);
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

/* The value after " key=" in line (up to its end); -1 when absent. */
static double phase(const char *line, const char *end, const char *key)
{
	char pat[48];
	const char *p;
	double v = -1;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(line, pat);
	if (p && p < end)
		sscanf(p + strlen(pat), "%lf", &v);
	return v;
}

/* How many lines of text carry tag, each checked by check (which may assert). */
static int tagged_lines(const char *text, const char *tag,
			void (*check)(const char *line, const char *end))
{
	int n = 0;

	for (const char *p = strstr(text, tag); p; p = strstr(p + 1, tag)) {
		const char *start = p, *end = strchr(p, '\n');

		while (start > text && start[-1] != '\n')
			start--;
		check(start, end ? end : p + strlen(p));
		n++;
	}
	return n;
}

static void check_open_line(const char *line, const char *end)
{
	static const char *const names[] = { "check", "request", "import", "reserve", "map",
					      "access", "fds", "rest", "exporter_fds" };
	double exported = phase(line, end, "exported");
	double total = phase(line, end, "total"), sum = 0;

	cr_expect_geq(total, 0, "%.*s", (int)(end - line), line);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		double v = phase(line, end, names[i]);

		cr_expect_geq(v, 0, "%s missing: %.*s", names[i], (int)(end - line), line);
		if (i < 6)
			sum += v;
	}
	/* The phases are measured one after the other; each value is rounded to 1 us. */
	cr_expect_leq(sum, total + 0.0035, "%.*s", (int)(end - line), line);
	/* The exporter's part happens inside the importer's request. */
	cr_expect_leq(phase(line, end, "exporter_fds"), phase(line, end, "request") + 0.0005,
		      "%.*s", (int)(end - line), line);
	/* Exported for this open, or dups of those kept since the get. */
	cr_expect(exported == 0 || exported == 1, "%.*s", (int)(end - line), line);
}

static void check_share_line(const char *line, const char *end)
{
	double exported = phase(line, end, "exported");

	cr_expect_geq(phase(line, end, "fds"), 0, "%.*s", (int)(end - line), line);
	cr_expect_geq(phase(line, end, "send"), 0, "%.*s", (int)(end - line), line);
	cr_expect(exported == 0 || exported == 1, "%.*s", (int)(end - line), line);
}

Test(ipc, open_logs_where_its_time_went)
{
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_ipc"), "torch"),
				    (const char *const[]){ "SIMDEV_MEMORY=2G",
							   "VMMSHIM_WHOLE_HANDLE_MIN=1G",
							   "VMMSHIM_LOG=info", NULL });

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	/* The child opens two handles and the first again: the reopen asks nobody and maps
	 * nothing, so two lines on each side. */
	cr_expect_eq(tagged_lines(r->err, " open_phases_ms ", check_open_line), 2, "%s", r->err);
	cr_expect_eq(tagged_lines(r->err, " share_open_phases_ms ", check_share_line), 2, "%s",
		     r->err);
	run_free(r);
}

/* The kept_conn field of each open line, in order (up to max); how many lines there are. */
static int kept_conns(const char *text, int *out, int max)
{
	int n = 0;

	for (const char *p = strstr(text, " open_phases_ms "); p;
	     p = strstr(p + 1, " open_phases_ms ")) {
		const char *e = strchr(p, '\n'), *k = strstr(p, " kept_conn=");

		if (n < max)
			out[n] = k && (!e || k < e) ? atoi(k + 11) : -1;
		n++;
	}
	return n;
}

Test(ipc, opens_from_one_exporter_share_a_connection)
{
	/* Each open waits (up to 5 s) for the export ahead (ipc_keep.h), so that it finds the
	 * descriptors kept. Without the wait all six may come first (a CI run saw it on a
	 * loaded machine) and workers answer them all. */
	struct run *r = run_program(shim_path(), ARGV(bin_path("prog_ipc"), "bench", "6", "2", "5000"),
				    (const char *const[]){ "SIMDEV_MEMORY=2G",
							   "VMMSHIM_WHOLE_HANDLE_MIN=1G",
							   "VMMSHIM_LOG=info", NULL });
	int kept[8];

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "bench open_us median="), "%s", r->out);
	cr_assert_eq(kept_conns(r->err, kept, 8), 6, "%s", r->err);
	/* The first open connects; the others go over the connection it kept. */
	cr_expect_eq(kept[0], 0, "%s", r->err);
	for (int i = 1; i < 6; i++)
		cr_expect_eq(kept[i], 1, "open %d\n%s", i + 1, r->err);
	/* The exporter answers an open of descriptors it kept on the socket's own thread (an
	 * export ahead still running at an open leaves it to a worker). */
	cr_expect_eq(count_of(r->err, " share_open_phases_ms "), 6, "%s", r->err);
	cr_expect_geq(count_of(r->err, " at_once=1"), 1, "%s", r->err);
	run_free(r);
}

Test(ipc, an_exporter_that_ended_leaves_no_usable_connection)
{
	struct run *r = run_logged("restart", "");
	int kept[8];

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "restart ok"), "%s", r->out);
	cr_expect_eq(count_of(r->out, "open_after_exit 400"), 2, "%s", r->out);
	cr_expect(strstr(r->err, "has ended"), "%s", r->err);
	/* Per exporter: a new connection, then the kept one; the third exporter's is new. */
	cr_assert_eq(kept_conns(r->err, kept, 8), 5, "%s", r->err);
	cr_expect(kept[0] == 0 && kept[1] == 1 && kept[2] == 0 && kept[3] == 1 && kept[4] == 0,
		  "%s", r->err);
	run_free(r);
}

/* An importer whose shim does not keep connections (one request, then the server closes) is
 * answered as before, also when the reading thread answers at once. */
Test(ipc, a_request_without_keep_is_answered_and_closed)
{
	struct run *r = run_logged("plain-open", "");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "plain_reply ok fds=3 ended=1"), "%s", r->out);
	cr_expect_eq(count_of(r->err, " share_open_phases_ms "), 1, "%s", r->err);
	cr_expect_eq(count_of(r->err, " at_once=1"), 1, "the kept descriptors were not sent at "
		     "once\n%s", r->err);
	run_free(r);
}

Test(ipc, a_forked_child_of_the_exporter_holds_no_connection)
{
	struct run *r = run_mode("fork-kept");

	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	cr_expect(strstr(r->out, "fork-kept ok"), "%s", r->out);
	/* The parent: its listening socket and the importer's kept connection at least. */
	cr_expect_geq(printed(r, "parent_sockets"), 2, "%s", r->out);
	cr_expect_eq(printed(r, "child_sockets"), 0, "%s", r->out);
	run_free(r);
}
