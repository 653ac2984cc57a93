/* simdev's environment knobs: SIMDEV_MEMORY, SIMDEV_FAIL, SIMDEV_DELAY and SIMDEV_STATS (run in children, since
 * the environment is read once, at first use, and the stats are written at exit). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

CUresult cuStreamSynchronize_ptsz(CUstream h);
CUresult cuStreamQuery_ptsz(CUstream h);

static char *slurp(const char *path)
{
	static char buf[8192];
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)); p += n)
		if ((p == text || p[-1] == '\n') && (p[n] == '\n' || !p[n]))
			return true;
	return false;
}

Test(env, fault_injection_fails_the_nth_call_only)
{
	setenv("SIMDEV_FAIL", "cuMemCreate:3,cuMemMap:2,cuMemAlloc:1", 1);
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUmemGenericAllocationHandle h[4];
	size_t base = su_used();
	CU_OK(cuMemCreate(&h[0], GRAN, &p, 0));
	CU_OK(cuMemCreate(&h[1], GRAN, &p, 0));
	cr_expect_eq(cuMemCreate(&h[2], GRAN, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
	cr_expect_eq(su_used(), base + 2 * GRAN, "a failed call changes nothing");
	CU_OK(cuMemCreate(&h[2], GRAN, &p, 0));
	CUdeviceptr va;
	CU_OK(cuMemAddressReserve(&va, 4 * GRAN, 0, 0, 0));
	CU_OK(cuMemMap(va, GRAN, 0, h[0], 0));
	CUresult r = cuMemMap(va + GRAN, GRAN, 0, h[1], 0);
	cr_expect(r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY, "map fails with %d", r);
	CU_OK(cuMemMap(va + GRAN, GRAN, 0, h[1], 0));
	CUdeviceptr d;
	cr_expect_eq(cuMemAlloc(&d, 8), CUDA_ERROR_OUT_OF_MEMORY, "base name matches cuMemAlloc_v2");
	CU_OK(cuMemAlloc(&d, 8));
}

Test(env, one_name_listed_twice_fails_two_calls_in_a_row)
{
	/* Each entry counts the calls on its own: a retry of the failed call fails too. */
	setenv("SIMDEV_FAIL", "cuMemRelease:1,cuMemRelease:2", 1);
	su_ctx(0);
	CUmemAllocationProp p = su_prop(0);
	CUmemGenericAllocationHandle h;
	size_t base = su_used();
	CU_OK(cuMemCreate(&h, GRAN, &p, 0));
	cr_expect_eq(cuMemRelease(h), CUDA_ERROR_UNKNOWN);
	cr_expect_eq(cuMemRelease(h), CUDA_ERROR_UNKNOWN, "the retry fails as well");
	cr_expect_eq(su_used(), base + GRAN, "the failed releases freed nothing");
	CU_OK(cuMemRelease(h));
	cr_expect_eq(su_used(), base, "the third release frees the memory");
}

static void stats_child(const char *path)
{
	setenv("SIMDEV_STATS", path, 1);
	setenv("SIMDEV_MEMORY", "1G", 1);
	CUcontext c;
	CUdeviceptr a, b;
	if (cuInit(0) || cuDevicePrimaryCtxRetain(&c, 0) || cuCtxSetCurrent(c) ||
	    cuMemAlloc(&a, 5 * MiB) || cuMemAlloc(&b, 1) || cuMemFree(a))
		_exit(1);
	exit(0); /* b stays live; the destructor writes the file */
}

Test(env, stats_file_lists_calls_and_bytes)
{
	char path[] = "/tmp/simdev-stats-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	pid_t pid = fork();
	if (pid == 0)
		stats_child(path);
	int status;
	waitpid(pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char *text = slurp(path);
	unlink(path);
	cr_assert_not_null(text);
	cr_expect(has_line(text, "cuMemAlloc_v2 2"), "%s", text);
	cr_expect(has_line(text, "cuMemFree_v2 1"), "%s", text);
	cr_expect(has_line(text, "cuInit 1"), "%s", text);
	cr_expect(has_line(text, "peak_bytes 8388608"), "%s", text);
	cr_expect(has_line(text, "live_bytes 2097152"), "%s", text);
	cr_expect(!strstr(text, "cuMemCreate"), "uncalled functions are not listed");
}

static void bad_env_child(void *arg)
{
	(void)arg;
	int fd = open("/tmp/simdev-env-stderr", O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(fd, 2);
	setenv("SIMDEV_MEMORY", "lots", 1);
	setenv("SIMDEV_DEVICES", "0", 1);
	setenv("SIMDEV_FAIL", "cuMemCreate", 1);
	size_t total = 0;
	int n = 0;
	CUcontext c;
	cuInit(0);
	cuDeviceGetCount(&n);
	cuDevicePrimaryCtxRetain(&c, 0);
	cuCtxSetCurrent(c);
	size_t fr;
	cuMemGetInfo(&fr, &total);
	_exit(total == ((size_t)16 << 30) && n == 1 ? 0 : 1);
}

Test(env, bad_values_get_a_message_and_the_default)
{
	cr_assert_eq(su_signal_of(bad_env_child, NULL), 0);
	int status;
	pid_t pid = fork();
	if (pid == 0)
		bad_env_child(NULL);
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "defaults used");
	char *text = slurp("/tmp/simdev-env-stderr");
	unlink("/tmp/simdev-env-stderr");
	cr_assert_not_null(text);
	cr_expect(strstr(text, "SIMDEV_MEMORY='lots'"), "%s", text);
	cr_expect(strstr(text, "SIMDEV_DEVICES='0'"), "%s", text);
	cr_expect(strstr(text, "SIMDEV_FAIL entry 'cuMemCreate'"), "%s", text);
}

Test(env, memory_sizes_parse_with_suffixes)
{
	setenv("SIMDEV_MEMORY", "1536M", 1);
	su_ctx(0);
	size_t total = 0;
	CU_OK(cuDeviceTotalMem(&total, 0));
	cr_expect_eq(total, (size_t)1536 << 20);
}

Test(env, exported_names_match_exactly_base_names_match_all_variants)
{
	setenv("SIMDEV_FAIL", "cuStreamSynchronize_ptsz:1,cuStreamQuery:2", 1);
	su_ctx(0);
	CU_OK(cuStreamSynchronize(NULL)); /* another exported function: not counted */
	cr_expect_eq(cuStreamSynchronize_ptsz(NULL), CUDA_ERROR_UNKNOWN);
	CU_OK(cuStreamSynchronize_ptsz(NULL));
	CU_OK(cuStreamQuery(NULL));
	cr_expect_eq(cuStreamQuery_ptsz(NULL), CUDA_ERROR_UNKNOWN, "the base name counts both");
}

static double seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

Test(env, a_delay_slows_every_call_of_that_function_only)
{
	/* A delay well above what a loaded machine adds to an undelayed call, so that the bound
	 * below tells them apart without timing the machine. */
	setenv("SIMDEV_DELAY", "cuStreamQuery:1000,bogus", 1);
	su_ctx(0);
	double t0 = seconds();
	CU_OK(cuStreamSynchronize(NULL));
	double t1 = seconds();
	CU_OK(cuStreamQuery(NULL));
	CU_OK(cuStreamQuery_ptsz(NULL)); /* the base name covers every variant */
	double t2 = seconds();
	cr_expect_lt(t1 - t0, 0.5, "another function is not delayed: %.3f s", t1 - t0);
	cr_expect_geq(t2 - t1, 2.0, "two delayed calls took %.3f s", t2 - t1);
}
