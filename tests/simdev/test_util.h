/* Helpers for simdev's own tests. */
#ifndef SIMDEV_TEST_UTIL_H
#define SIMDEV_TEST_UTIL_H

#include <criterion/criterion.h>
#include <cuda.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define GRAN (2 * MiB)

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)

/* cuInit and the primary context of dev made current. */
static inline CUcontext su_ctx(int dev)
{
	CUcontext c;
	CU_OK(cuInit(0));
	CU_OK(cuDevicePrimaryCtxRetain(&c, dev));
	CU_OK(cuCtxSetCurrent(c));
	return c;
}

static inline CUmemAllocationProp su_prop(int dev)
{
	CUmemAllocationProp p = { 0 };
	p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.location.id = dev;
	return p;
}

static inline void su_set_access(CUdeviceptr va, size_t size, int dev, CUmemAccess_flags flags)
{
	CUmemAccessDesc d = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev },
			      .flags = flags };
	CU_OK(cuMemSetAccess(va, size, &d, 1));
}

static inline size_t su_used(void)
{
	size_t free_bytes, total;
	CU_OK(cuMemGetInfo(&free_bytes, &total));
	return total - free_bytes;
}

/* Run fn in a child process; return the signal that killed it (0 if it exited). */
static inline int su_signal_of(void (*fn)(void *), void *arg)
{
	pid_t pid = fork();
	if (pid == 0) {
		/* The default action, not a sanitizer's report: the test wants the signal. */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		fn(arg);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

static inline void su_touch(void *p)
{
	*(volatile char *)p = 1;
}

static inline void su_read(void *p)
{
	(void)*(volatile char *)p;
}

#endif
