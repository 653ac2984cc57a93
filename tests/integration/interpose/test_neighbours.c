/* (h) A second interposer that uses dlsym(RTLD_NEXT, ...), preloaded before and after the shim:
 * its wrappers reach the next library (the shim's tail-calling dlsym keeps RTLD_NEXT relative to
 * the real caller), the program works, and the core still serves the memory. Plus the binary
 * checks of the library itself: no DT_NEEDED on CUDA or ACL, no constructor, only the interposed
 * names exported, and dlsym's pass-through compiled to a jump. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "run_util.h"

#define ARGV(...) ((const char *const[]){ __VA_ARGS__, NULL })

static struct run *with_other(bool other_first, const char *prog)
{
	char preload[1024];
	const char *other = bin_path("libother.so");

	snprintf(preload, sizeof(preload), "%s:%s", other_first ? other : shim_path(),
		 other_first ? shim_path() : other);
	return run_program(preload, ARGV(bin_path(prog)), NULL);
}

static void check_other(bool other_first)
{
	struct run *r = with_other(other_first, "prog_cudart");

	cr_assert_eq(r->status, 0, "order %s: status %d\n%s\n%s", other_first ? "other:shim" :
		     "shim:other", r->status, r->out, r->err);
	cr_expect(strstr(r->err, "libother: cudaMalloc 6 "), "%s", r->err);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "%s", r->stats);
	cr_expect_gt(run_stat(r, "cuMemCreate"), 0);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	run_free(r);

	r = with_other(other_first, "prog_driver");
	cr_assert_eq(r->status, 0, "%s\n%s", r->out, r->err);
	/* Before us it wraps every cuMemAlloc_v2 (16) and reaches ours; after us ours comes first. */
	cr_expect(strstr(r->err, other_first ? "cuMemAlloc_v2 16" : "cuMemAlloc_v2 0"), "%s",
		  r->err);
	cr_expect_eq(run_stat(r, "cuMemAlloc_v2"), 0, "%s", r->stats);
	cr_expect_eq(run_stat(r, "live_bytes"), 0);
	run_free(r);
}

Test(neighbours, other_interposer_first)
{
	check_other(true);
}

Test(neighbours, other_interposer_second)
{
	check_other(false);
}

/* The output of a shell command. */
static char *sh(const char *fmt, const char *arg)
{
	static char out[1 << 16];
	char cmd[2048];
	size_t n = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), fmt, arg);
	p = popen(cmd, "r");
	cr_assert(p, "popen %s", cmd);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	pclose(p);
	return out;
}

Test(library, no_cuda_or_acl_dependency)
{
	char *d = sh("readelf -d %s", shim_path());

	cr_assert(strstr(d, "NEEDED"), "readelf gave nothing:\n%s", d);
	cr_expect(!strstr(d, "libcuda") && !strstr(d, "libcudart") && !strstr(d, "ascendcl"),
		  "%s", d);
}

Test(library, no_constructors)
{
	/* The only init_array entry may be the compiler's frame_dummy; no .ctors, no user init. */
	char *syms = sh("nm %s | grep -iE ' t (.*_GLOBAL__sub_I|.*constructor)' | wc -l",
			shim_path());

	cr_expect_eq(atoi(syms), 0, "constructor functions found");
	syms = sh("readelf -d %s | grep -E 'INIT_ARRAYSZ' | awk '{print $2}'", shim_path());
	cr_expect_leq(atoi(syms), 8, "init_array has %d bytes (one entry = frame_dummy)",
		      atoi(syms));
	syms = sh("objdump -s -j .init_array %s | awk '/^ [0-9a-f]+ /{print $2 $3; exit}'",
		  shim_path());
	{
		/* That one entry is frame_dummy. */
		char cmd[512];
		unsigned long long a = 0;
		char *s = syms;
		unsigned char b[8];

		for (int i = 0; i < 8 && s[2 * i]; i++)
			sscanf(s + 2 * i, "%2hhx", &b[i]);
		for (int i = 7; i >= 0; i--)
			a = (a << 8) | b[i];
		snprintf(cmd, sizeof(cmd), "nm %%s | grep -i '^0*%llx ' | awk '{print $3}'", a);
		syms = sh(cmd, shim_path());
		cr_expect(strstr(syms, "frame_dummy"), "init_array entry is %s", syms);
	}
}

Test(library, exports_only_interposed_names)
{
	char *bad = sh("nm -D --defined-only %s | awk '{print $3}' | "
		       "grep -vE '^(cu[A-Z]|acl|vmmshim_|dlsym$)' | tr '\\n' ' '", shim_path());

	cr_expect_str_empty(bad, "unexpected exports: %s", bad);
	bad = sh("objdump -T %s | grep -E ' (cuMemAlloc_v2|dlsym)$' | grep -v Base | wc -l",
		 shim_path());
	cr_expect_eq(atoi(bad), 0, "hooks carry a version node");
}

Test(library, dlsym_passes_through_with_a_jump)
{
	char *d = sh("objdump -d --no-show-raw-insn --disassemble=dlsym %s | "
		     "grep -cE 'jmp +\\*%%r'", shim_path());

	cr_expect_geq(atoi(d), 1, "no indirect tail jump in dlsym");
	d = sh("objdump -d --no-show-raw-insn --disassemble=dlsym %s | grep -c 'call.*real_dlsym'",
	       shim_path());
	cr_expect_eq(atoi(d), 1, "dlsym's real lookup is not via vmm_real_dlsym_fn");
}
