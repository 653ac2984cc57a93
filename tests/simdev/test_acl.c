/* simdev's libascendcl.so: allocation and the VMM API with CANN's documented constraints. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "../../core/backend/acl_api.h"

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)
#define ACL_OK(call) cr_assert_eq((call), ACL_SUCCESS, "%s failed", #call)

static aclrtPhysicalMemProp prop(int dev)
{
	aclrtPhysicalMemProp p = { 0 };
	p.handleType = ACL_MEM_HANDLE_TYPE_NONE;
	p.allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
	p.memAttr = ACL_HBM_MEM_HUGE;
	p.location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = (uint32_t)dev;
	return p;
}

static size_t used(void)
{
	size_t f, t;
	ACL_OK(aclrtGetMemInfo(ACL_HBM_MEM, &f, &t));
	return t - f;
}

Test(acl, malloc_copy_free)
{
	void *d;
	ACL_OK(aclInit(NULL));
	cr_expect_eq(aclInit(NULL), ACL_ERROR_REPEAT_INITIALIZE);
	cr_expect_eq(aclrtMalloc(&d, 64, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_CONTEXT_NULL,
		     "no device set");
	ACL_OK(aclrtSetDevice(0));
	int32_t dev = -1;
	ACL_OK(aclrtGetDevice(&dev));
	cr_expect_eq(dev, 0);
	size_t base = used();
	ACL_OK(aclrtMalloc(&d, 1000, ACL_MEM_MALLOC_HUGE_FIRST));
	cr_expect_eq(used(), base + GRAN);
	cr_expect_eq((uintptr_t)d % 64, 0);
	char in[1000], out[1000];
	memset(in, 0x5a, sizeof(in));
	ACL_OK(aclrtMemcpy(d, 1000, in, sizeof(in), ACL_MEMCPY_HOST_TO_DEVICE));
	ACL_OK(aclrtMemset(d, 1000, 1, 4));
	ACL_OK(aclrtMemcpy(out, sizeof(out), d, 1000, ACL_MEMCPY_DEVICE_TO_HOST));
	cr_expect_eq(out[3], 1);
	cr_expect_eq(out[4], 0x5a);
	cr_expect_eq(aclrtMemcpy(out, 10, d, 1000, ACL_MEMCPY_DEVICE_TO_HOST),
		     ACL_ERROR_INVALID_PARAM, "count beyond destMax");
	ACL_OK(aclrtFree(d));
	cr_expect_eq(used(), base);
	cr_expect_eq(aclrtFree(d), ACL_ERROR_INVALID_PARAM);
	void *a, *b;
	ACL_OK(aclrtMallocAlign32(&a, 10, ACL_MEM_MALLOC_HUGE_FIRST));
	ACL_OK(aclrtMallocCached(&b, 10, ACL_MEM_MALLOC_HUGE_FIRST));
	ACL_OK(aclrtFree(a));
	ACL_OK(aclrtFree(b));
	ACL_OK(aclrtSynchronizeDevice());
	aclrtStream st;
	ACL_OK(aclrtCreateStream(&st));
	ACL_OK(aclrtMemcpyAsync(out, sizeof(out), in, sizeof(in), ACL_MEMCPY_HOST_TO_HOST, st));
	ACL_OK(aclrtSynchronizeStream(st));
	ACL_OK(aclrtDestroyStream(st));
	cr_expect_eq(aclrtDestroyStream(st), ACL_ERROR_INVALID_PARAM, "destroyed twice");
	ACL_OK(aclFinalize());
}

Test(acl, vmm_constraints)
{
	ACL_OK(aclrtSetDevice(0));
	aclrtPhysicalMemProp p = prop(0);
	size_t g = 0;
	ACL_OK(aclrtMemGetAllocationGranularity(&p, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &g));
	cr_expect_eq(g, GRAN);
	void *va;
	cr_expect_eq(aclrtReserveMemAddress(&va, 8 * GRAN, 4096, NULL, 0), ACL_ERROR_INVALID_PARAM,
		     "alignment is reserved, must be 0");
	ACL_OK(aclrtReserveMemAddress(&va, 8 * GRAN, 0, NULL, 1));
	aclrtDrvMemHandle h, h2;
	size_t base = used();
	ACL_OK(aclrtMallocPhysical(&h, 2 * GRAN, &p, 0));
	cr_expect_eq(used(), base + 2 * GRAN);
	cr_expect_eq(aclrtMallocPhysical(&h2, GRAN, &p, 1), ACL_ERROR_INVALID_PARAM, "flags 0");
	char *c = va;
	cr_expect_eq(aclrtMapMem(c, GRAN, 0, h, 0), ACL_ERROR_INVALID_PARAM, "whole handle only");
	cr_expect_eq(aclrtMapMem(c, 2 * GRAN, GRAN, h, 0), ACL_ERROR_INVALID_PARAM, "offset 0");
	ACL_OK(aclrtMapMem(c + 2 * GRAN, 2 * GRAN, 0, h, 0));
	memset(c + 2 * GRAN, 7, 2 * GRAN); /* the owner has access at once */
	cr_expect_eq(aclrtMapMem(c + 6 * GRAN, 2 * GRAN, 0, h, 0), ACL_ERROR_INVALID_PARAM,
		     "one map per handle");
	cr_expect_eq(aclrtFreePhysical(h), ACL_ERROR_INVALID_PARAM, "unmap first");
	cr_expect_eq(aclrtReleaseMemAddress(va), ACL_ERROR_INVALID_PARAM, "unmap first");
	cr_expect_eq(aclrtUnmapMem(c + 3 * GRAN), ACL_ERROR_INVALID_PARAM, "the start address");
	char back[4];
	ACL_OK(aclrtMemcpy(back, 4, c + 3 * GRAN, 4, ACL_MEMCPY_DEVICE_TO_HOST));
	cr_expect_eq(back[0], 7);
	ACL_OK(aclrtUnmapMem(c + 2 * GRAN));
	cr_expect_eq(aclrtMemcpy(back, 4, c + 3 * GRAN, 4, ACL_MEMCPY_DEVICE_TO_HOST),
		     ACL_ERROR_INVALID_PARAM, "unmapped");
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* not a sanitizer's handler */
		*(volatile char *)(c + 3 * GRAN) = 1;
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "touching unmapped memory faults");
	ACL_OK(aclrtFreePhysical(h));
	cr_expect_eq(used(), base);
	ACL_OK(aclrtReleaseMemAddress(va));
}

Test(acl, out_of_memory_is_207001)
{
	setenv("SIMDEV_MEMORY", "8M", 1);
	ACL_OK(aclrtSetDevice(0));
	aclrtPhysicalMemProp p = prop(0);
	aclrtDrvMemHandle h[4], extra;
	for (int i = 0; i < 4; i++)
		ACL_OK(aclrtMallocPhysical(&h[i], GRAN, &p, 0));
	cr_expect_eq(aclrtMallocPhysical(&extra, GRAN, &p, 0), ACL_ERROR_RT_MEMORY_ALLOCATION);
	void *d;
	cr_expect_eq(aclrtMalloc(&d, 1, ACL_MEM_MALLOC_HUGE_FIRST), 207001);
	for (int i = 0; i < 4; i++)
		ACL_OK(aclrtFreePhysical(h[i]));
}

Test(acl, fault_injection)
{
	setenv("SIMDEV_FAIL", "aclrtMapMem:1,aclrtMalloc:2", 1);
	ACL_OK(aclrtSetDevice(0));
	aclrtPhysicalMemProp p = prop(0);
	aclrtDrvMemHandle h;
	void *va, *d;
	ACL_OK(aclrtReserveMemAddress(&va, GRAN, 0, NULL, 0));
	ACL_OK(aclrtMallocPhysical(&h, GRAN, &p, 0));
	cr_expect_eq(aclrtMapMem(va, GRAN, 0, h, 0), ACL_ERROR_RT_INTERNAL_ERROR);
	ACL_OK(aclrtMapMem(va, GRAN, 0, h, 0));
	ACL_OK(aclrtMalloc(&d, 1, ACL_MEM_MALLOC_HUGE_FIRST));
	cr_expect_eq(aclrtMalloc(&d, 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_ERROR_RT_MEMORY_ALLOCATION);
}

Test(acl, stats_go_to_simdev_acl_stats)
{
	char path[] = "/tmp/simdev-acl-stats-XXXXXX";
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("SIMDEV_ACL_STATS", path, 1);
		setenv("SIMDEV_STATS", "/nonexistent/dir/file", 1);
		void *d;
		if (aclrtSetDevice(0) || aclrtMalloc(&d, 100, ACL_MEM_MALLOC_HUGE_FIRST))
			_exit(1);
		exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	char text[1024] = { 0 };
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f);
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	unlink(path);
	text[n] = 0;
	cr_expect(strstr(text, "aclrtMalloc 1\n"), "%s", text);
	cr_expect(strstr(text, "aclrtSetDevice 1\n"), "%s", text);
	cr_expect(strstr(text, "live_bytes 2097152\n"), "%s", text);
}

unsigned long simdev_acl_context_syncs(void *context, int dev);

/* Contexts as CANN documents them: aclrtSetDevice binds the device's default context, a created
 * context is current at once, aclrtSetCurrentContext switches context and device, the default
 * context cannot be destroyed, and aclrtSynchronizeDevice concerns the current context. */
Test(acl, contexts)
{
	aclrtContext def, a, b, cur;
	int32_t dev;

	setenv("SIMDEV_DEVICES", "2", 1); /* read at the first call */
	cr_expect_eq(aclrtGetCurrentContext(&cur), ACL_ERROR_RT_CONTEXT_NULL, "none yet");
	ACL_OK(aclrtSetDevice(0));
	ACL_OK(aclrtGetCurrentContext(&def));
	ACL_OK(aclrtCreateContext(&a, 0));
	ACL_OK(aclrtGetCurrentContext(&cur));
	cr_expect_eq(cur, a, "a created context is current");
	ACL_OK(aclrtSynchronizeDevice());
	cr_expect_eq(simdev_acl_context_syncs(a, 0), 1);
	cr_expect_eq(simdev_acl_context_syncs(NULL, 0), 0, "the default context was not synchronized");
	ACL_OK(aclrtSetCurrentContext(def));
	ACL_OK(aclrtSynchronizeDevice());
	cr_expect_eq(simdev_acl_context_syncs(NULL, 0), 1);
	cr_expect_eq(aclrtDestroyContext(def), ACL_ERROR_INVALID_PARAM, "the default context stays");
	ACL_OK(aclrtCreateContext(&b, 1));
	ACL_OK(aclrtGetDevice(&dev));
	cr_expect_eq(dev, 1, "creating a context on device 1 moves the thread there");
	ACL_OK(aclrtSetCurrentContext(a));
	ACL_OK(aclrtGetDevice(&dev));
	cr_expect_eq(dev, 0, "and switching back moves it back");
	ACL_OK(aclrtDestroyContext(a));
	cr_expect_eq(aclrtSetCurrentContext(a), ACL_ERROR_INVALID_PARAM, "destroyed");
	cr_expect_eq(aclrtGetCurrentContext(&cur), ACL_ERROR_RT_CONTEXT_NULL,
		     "the destroyed context was current here");
	ACL_OK(aclrtDestroyContext(b));
}

int simdev_acl_device_refs(int dev);

/* aclrtSetDevice counts references to the device and aclrtResetDevice gives one back; the last
 * one releases the default context, which aclrtSetCurrentContext then refuses until
 * aclrtSetDevice makes it again. */
Test(acl, set_and_reset_count_references)
{
	aclrtContext def, cur;

	setenv("SIMDEV_DEVICES", "2", 1);
	ACL_OK(aclrtSetDevice(1));
	ACL_OK(aclrtGetCurrentContext(&def));
	ACL_OK(aclrtSetDevice(1));
	cr_expect_eq(simdev_acl_device_refs(1), 2);
	ACL_OK(aclrtResetDevice(1));
	cr_expect_eq(simdev_acl_device_refs(1), 1);
	ACL_OK(aclrtSetCurrentContext(def)); /* still there: one reference left */
	ACL_OK(aclrtResetDevice(1));
	cr_expect_eq(simdev_acl_device_refs(1), 0);
	cr_expect_eq(aclrtSetCurrentContext(def), ACL_ERROR_INVALID_PARAM, "released with the last");
	ACL_OK(aclrtResetDevice(1)); /* none left: nothing changes */
	cr_expect_eq(simdev_acl_device_refs(1), 0);
	ACL_OK(aclrtSetDevice(1));
	ACL_OK(aclrtGetCurrentContext(&cur));
	cr_expect_eq(cur, def, "made again");
	ACL_OK(aclrtResetDevice(1));
}

/* SIMDEV_SHARED works for the ACL library too (its own group): a forked child joins as a new
 * member, its memory counts for both and comes back when it exits. */
Test(acl, a_shared_group_counts_a_forked_child)
{
	char name[64];
	snprintf(name, sizeof(name), "acl%d", (int)getpid());
	setenv("SIMDEV_SHARED", name, 1);
	setenv("SIMDEV_MEMORY", "64M", 1);
	ACL_OK(aclrtSetDevice(0));
	void *d;
	ACL_OK(aclrtMalloc(&d, 16 << 20, ACL_MEM_MALLOC_HUGE_FIRST));
	size_t parent = used(); /* 16 MiB + 32 bytes of padding: 18 MiB */
	int sv[2];
	cr_assert_eq(pipe(sv), 0);
	pid_t pid = fork();
	if (pid == 0) {
		void *c;
		size_t f, t;
		char ok = 0;
		if (!aclrtMalloc(&c, 8 << 20, ACL_MEM_MALLOC_HUGE_FIRST) &&
		    !aclrtGetMemInfo(ACL_HBM_MEM, &f, &t) && t - f == parent + (10 << 20))
			ok = 1;
		if (write(sv[1], &ok, 1) != 1)
			_exit(2);
		pause(); /* killed with its memory */
		_exit(3);
	}
	char ok = 0;
	cr_assert_eq(read(sv[0], &ok, 1), 1);
	cr_expect_eq(ok, 1, "the child sees both");
	cr_expect_eq(used(), parent + (10 << 20), "the parent sees the child's");
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	cr_expect_eq(used(), parent, "a killed child's memory comes back");
	ACL_OK(aclrtFree(d));
	cr_expect_eq(used(), 0);
}
