/* The CUDA backend's synchronize drains every context the program made (reported as the shim
 * does, vmm_context_*), not only the primary one: so a sleep, and the heap's reuse of freed
 * memory, wait for "kernels" still running on a cuCtxCreate context. And a context destroyed while
 * the backend synchronizes neither crashes nor fails the synchronization. Runs on simdev, whose
 * cuCtxSynchronize, like the driver's, waits for one context only. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "helpers.h"
#include "simdev.h"
#include "slow_writer.h"

/* The pre-12.5 export (CUDA 13's cuda.h declares only cuCtxCreate_v4). */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)

static void sleep_ms(int ms)
{
	nanosleep(&(struct timespec){ ms / 1000, (long)(ms % 1000) * 1000000 }, NULL);
}

/* A created context on dev, reported as the shim reports it, with a stream; not left current
 * (the control thread that sleeps a program has no context of its own). */
static CUcontext made_context(int dev, CUstream *s)
{
	CUcontext c, popped;

	CU_OK(cuCtxCreate_v2(&c, 0, dev));
	cr_assert_eq(vmm_context_created(VMM_CTX_CUDA, c, dev), 0);
	CU_OK(cuStreamCreate(s, CU_STREAM_NON_BLOCKING));
	CU_OK(cuCtxPopCurrent_v2(&popped));
	return c;
}

/* Launch w on s (its context pushed for the call). */
static void launch(CUcontext c, CUstream s, struct writer *w)
{
	CUcontext popped;

	CU_OK(cuCtxPushCurrent_v2(c));
	CU_OK(cuLaunchKernel(SIMDEV_KERNEL(slow_write), 1, 1, 1, 1, 1, 1, 0, s, writer_params(w),
			     NULL));
	CU_OK(cuCtxPopCurrent_v2(&popped));
}

/* The program's destroy as the shim brackets it. */
static void destroy(CUcontext c)
{
	CUresult r;

	vmm_context_destroy_begin(VMM_CTX_CUDA, c);
	r = cuCtxDestroy_v2(c);
	vmm_context_destroy_end(VMM_CTX_CUDA, c, r == CUDA_SUCCESS);
	cr_assert_eq(r, CUDA_SUCCESS);
}

Test(backend_contexts, synchronize_waits_for_every_created_context)
{
	static char out_a[1 << 20], out_b[1 << 20];
	struct writer a = { .ptr = out_a, .size = sizeof(out_a), .value = 0x5a, .ms = 300 };
	struct writer b = { .ptr = out_b, .size = sizeof(out_b), .value = 0x6b, .ms = 200 };
	CUstream sa, sb;
	struct tctx t;
	vmm_error err = { 0 };

	t_open(&t, NULL);
	CUcontext ca = made_context(0, &sa), cb = made_context(0, &sb);
	launch(ca, sa, &a);
	launch(cb, sb, &b);
	cr_assert_eq(t.be->synchronize(t.be, 0, &err), VMM_OK, "%s", err.msg);
	cr_expect(atomic_load(&a.done) && atomic_load(&b.done),
		  "synchronize returned while kernels on created contexts still ran");
	cr_expect(out_a[sizeof(out_a) - 1] == 0x5a && out_b[sizeof(out_b) - 1] == 0x6b);
	destroy(ca);
	destroy(cb);
	t_close(&t);
}

Test(backend_contexts, another_device_s_contexts_are_not_waited_for)
{
	static char out[1 << 20];
	/* Held until device 0's synchronize returned: a 600 ms kernel alone could end while a loaded
	 * machine keeps this thread off the CPU, and a synchronize that waits for it would then wait
	 * for the hold's 10 s bound and find it done. */
	static atomic_bool hold = true;
	struct writer w = { .ptr = out, .size = sizeof(out), .value = 1, .ms = 600, .hold = &hold };
	CUstream s;
	struct tctx t;

	t_simdev_env(NULL, "2", NULL);
	t_open(&t, NULL);
	CUcontext c = made_context(1, &s);
	launch(c, s, &w);
	cr_assert_eq(t.be->synchronize(t.be, 0, NULL), VMM_OK);
	cr_expect_not(atomic_load(&w.done), "device 0's synchronize waited for device 1");
	atomic_store(&hold, false);
	cr_assert_eq(t.be->synchronize(t.be, 1, NULL), VMM_OK);
	cr_expect(atomic_load(&w.done));
	destroy(c);
	t_close(&t);
}

/* The quarantine's reuse rule: a block freed while a kernel on a created context still writes it
 * is handed out again only after that kernel ended, so it never writes into the new owner's data. */
Test(backend_contexts, reused_memory_is_not_written_by_the_old_owner_s_kernel)
{
	struct writer w = { .size = 64 * MiB, .value = 0xab, .ms = 400 };
	vmm_devptr x, y;
	CUstream s;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	t_open(&t, NULL);
	CUcontext c = made_context(0, &s);
	cr_assert_eq(vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &x, NULL), VMM_OK);
	w.ptr = (void *)(uintptr_t)x;
	launch(c, s, &w);
	cr_assert_eq(vmm_free(t.core, x, NULL), VMM_OK); /* the program frees without waiting */
	/* 64 MiB wait in quarantine and the request misses: the heap synchronizes before it makes
	 * memory (8 MiB or more wait), and reuses. */
	cr_assert_eq(vmm_malloc(t.core, 0, 64 * MiB, 0, NULL, &y, NULL), VMM_OK);
	cr_assert_eq(t_stats(&t, 0, NULL).syncs, 1);
	cr_assert(y < x + 64 * MiB && x < y + 64 * MiB,
		  "the freed block is reused (otherwise this test shows nothing)");
	cr_expect(atomic_load(&w.done), "the block was handed out while its kernel still ran");
	t_fill(y, 64 * MiB, 99);
	CU_OK(cuStreamSynchronize(s));
	cr_expect(t_check(y, 64 * MiB, 99), "the old kernel overwrote the new owner's data");
	cr_expect_eq(atomic_load(&w.fault), 0);
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	destroy(c);
	t_close(&t);
}

struct sync_run {
	vmm_backend *be;
	vmm_status st;
	atomic_bool calling, finished;
	vmm_error err;
};

static void *run_sync(void *arg)
{
	struct sync_run *r = arg;

	atomic_store(&r->calling, true);
	r->st = r->be->synchronize(r->be, 0, &r->err);
	atomic_store(&r->finished, true);
	return NULL;
}

Test(backend_contexts, a_context_destroyed_during_synchronize)
{
	static char out[1 << 20];
	struct writer w = { .ptr = out, .size = sizeof(out), .value = 7, .ms = 300 };
	struct sync_run r = { .be = NULL };
	pthread_t th;
	CUstream s;
	struct tctx t;

	t_open(&t, NULL);
	CUcontext c = made_context(0, &s);
	launch(c, s, &w);
	r.be = t.be;
	cr_assert_eq(pthread_create(&th, NULL, run_sync, &r), 0);
	t_wait_flag(&r.calling, "the synchronizing thread started");
	sleep_ms(50); /* the synchronization is waiting on c now */
	CU_OK(cuStreamDestroy_v2(s));
	destroy(c);
	pthread_join(th, NULL);
	cr_expect_eq(r.st, VMM_OK, "%s", r.err.msg);
	cr_expect(atomic_load(&w.done));
	t_close(&t);
}

Test(backend_contexts, a_synchronization_waits_for_a_destroy_in_progress)
{
	static char out[1 << 20];
	struct writer w = { .ptr = out, .size = sizeof(out), .value = 9, .ms = 100 };
	struct sync_run r = { .be = NULL };
	pthread_t th;
	CUstream s;
	struct tctx t;

	t_open(&t, NULL);
	CUcontext c = made_context(0, &s);
	launch(c, s, &w);
	/* The program is inside cuCtxDestroy (the shim has marked c): a synchronization must not
	 * name c, and must not return before the destroy has ended c's work. */
	vmm_context_destroy_begin(VMM_CTX_CUDA, c);
	r.be = t.be;
	cr_assert_eq(pthread_create(&th, NULL, run_sync, &r), 0);
	t_wait_flag(&r.calling, "the synchronizing thread started");
	sleep_ms(150);
	cr_expect_not(atomic_load(&r.finished), "returned while a destroy was under way");
	CU_OK(cuCtxDestroy_v2(c)); /* waits for the kernel */
	vmm_context_destroy_end(VMM_CTX_CUDA, c, true);
	pthread_join(th, NULL);
	cr_expect_eq(r.st, VMM_OK, "%s", r.err.msg);
	cr_expect(atomic_load(&w.done));
	t_close(&t);
}

Test(backend_contexts, a_context_destroyed_unseen_has_no_work_left)
{
	CUstream s;
	struct tctx t;
	vmm_error err = { 0 };

	t_open(&t, NULL);
	CUcontext c = made_context(0, &s);
	CU_OK(cuCtxDestroy_v2(c)); /* not through the shim */
	cr_expect_eq(t.be->synchronize(t.be, 0, &err), VMM_OK, "%s", err.msg);
	t_close(&t);
}
