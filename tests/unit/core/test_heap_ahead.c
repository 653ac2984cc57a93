/* Syncing ahead (heap_ahead.c): once enough freed memory waits in the quarantine, the core's
 * thread synchronizes the device and makes it free, so that the program's next allocation reuses
 * it without waiting for the device itself; never before the work that may touch it ended, and
 * never while the program captures a stream. Kernels are simdev's slow writers; the submission
 * count is simdev's, as the shim gives the backend its own. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "backend/backend.h"
#include "helpers.h"
#include "mono_wait.h"
#include "simdev.h"
#include "counted_heap.h"
#include "slow_writer.h"

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)
#define BIG (64 * MiB)

static CUstream stream;

/* Syncing ahead at 8 MiB of quarantine (t_simdev_env first); sync_whole as given. */
static void open_ahead_as(struct tctx *t, bool sync_whole)
{
	vmm_config cfg;

	vmm_config_defaults(&cfg);
	cfg.sync_ahead_min = 8 * MiB;
	cfg.sync_whole = sync_whole;
	stream = t_open_counted(t, &cfg);
}

static void open_ahead(struct tctx *t)
{
	open_ahead_as(t, false);
}

static void launch(struct writer *w)
{
	t_launch_writer(stream, w);
}

/* A block of BIG that w writes over w->ms, freed while it does; its address. */
static vmm_devptr freed_while_written(struct tctx *t, struct writer *w)
{
	return t_freed_while_written(t, stream, w, BIG);
}

/* Wait until the core's thread made n syncs ahead (10 s at most). */
static bool ahead_reached(struct tctx *t, uint64_t n)
{
	for (int i = 0; i < 2000; i++) {
		if (t_stats(t, 0, NULL).syncs_ahead >= n)
			return true;
		nanosleep(&(struct timespec){ 0, 5 * 1000000 }, NULL);
	}
	return false;
}

Test(heap_ahead, freed_memory_is_reused_without_the_program_synchronizing)
{
	struct writer w = { .value = 0xab, .ms = 200 };
	vmm_devptr x, y;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	open_ahead(&t);
	x = freed_while_written(&t, &w);
	cr_assert(ahead_reached(&t, 1), "no sync ahead within 10 s");
	cr_expect(atomic_load(&w.done), "the sync ahead ended before the kernel did");
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &y, NULL), VMM_OK);
	cr_expect_eq(y, x, "the freed block is not the one reused");
	cr_expect_eq(t_stats(&t, 0, NULL).syncs, 0, "the program's allocation synchronized");
	t_fill(y, BIG, 5);
	CU_OK(cuStreamSynchronize(stream));
	cr_expect(t_check(y, BIG, 5), "the old kernel wrote into the reused block");
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	t_close(&t);
}

Test(heap_ahead, nothing_below_the_threshold)
{
	struct writer w = { .size = 4 * MiB, .value = 1, .ms = 10 };
	vmm_devptr x;
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	open_ahead(&t);
	cr_assert_eq(vmm_malloc(t.core, 0, 4 * MiB, 0, NULL, &x, NULL), VMM_OK);
	w.ptr = (void *)(uintptr_t)x;
	launch(&w);
	cr_assert_eq(vmm_free(t.core, x, NULL), VMM_OK); /* 4 MiB wait: below 8 */
	CU_OK(cuStreamSynchronize(stream));
	nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL);
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_ahead, 0);
	t_close(&t);
}

/* The backend's synchronize, counted: how often the core's thread asks for one. */
static vmm_status (*real_synchronize)(vmm_backend *, int, vmm_error *);
static atomic_int sync_calls;

static vmm_status counted_synchronize(vmm_backend *be, int dev, vmm_error *err)
{
	atomic_fetch_add(&sync_calls, 1);
	return real_synchronize(be, dev, err);
}

/* Syncing ahead with the backend's synchronize replaced by sync (which calls real_synchronize);
 * a stream for the test to capture. */
static CUstream open_wrapped(struct tctx *t, vmm_status (*sync)(vmm_backend *, int, vmm_error *))
{
	CUstream cs;

	t_simdev_env("1G", NULL, NULL);
	open_ahead(t);
	real_synchronize = t->be->synchronize;
	t->be->synchronize = sync;
	CU_OK(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
	return cs;
}

Test(heap_ahead, no_sync_ahead_while_the_program_captures_a_stream)
{
	struct writer w = { .value = 2, .ms = 20 };
	vmm_devptr x, y;
	CUgraph g = NULL;
	struct tctx t;
	CUstream cs = open_wrapped(&t, counted_synchronize);

	x = t_written_block(&t, stream, &w, BIG);
	vmm_capture_begin(); /* as the shim brackets cuStreamBeginCapture */
	CU_OK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
	cr_assert_eq(vmm_free(t.core, x, NULL), VMM_OK);
	nanosleep(&(struct timespec){ 0, 100 * 1000000 }, NULL);
	CU_OK(cuStreamEndCapture(cs, &g));
	cr_expect_not_null(g, "the sync ahead broke the program's capture");
	vmm_capture_end();
	/* Refused, a sync is not asked for again until the next free: asking again at once
	 * would spin the thread through the whole capture, and succeed just after it. */
	cr_expect_leq(atomic_load(&sync_calls), 1, "the thread asked for %d syncs during the capture",
		      atomic_load(&sync_calls));
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_ahead, 0, "a sync ahead ran during the capture");
	/* Once the capture ended the next free syncs ahead again. The malloc may start one for x
	 * first, which need not cover y's kernel: the count is taken after it. */
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &y, NULL), VMM_OK);
	struct writer wy = { .ptr = (void *)(uintptr_t)y, .size = MiB, .value = 3, .ms = 1 };

	launch(&wy);
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	cr_expect(ahead_reached(&t, 1), "no sync ahead after the capture");
	/* The test's own kernel ends before the heap is closed, as a program's work would
	 * (closing unmaps y under it: simdev's writer then faults, 1 run in ~100 under load). */
	CU_OK(cuStreamSynchronize(stream));
	cr_expect(atomic_load(&wy.done));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy(cs));
	t_close(&t);
}

/* The backend's synchronize, its first call made 50 ms late (counted as above): a sync posted
 * before a capture begins then reaches the backend after, which refuses it. */
static atomic_bool entered;

static vmm_status late_synchronize(vmm_backend *be, int dev, vmm_error *err)
{
	if (!atomic_exchange(&entered, true))
		nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL);
	return counted_synchronize(be, dev, err);
}

/* A sync ahead refused because a capture began after it was posted is not asked for again until
 * a free after the capture (asking again at once spun the core's thread ~10^6 times in 100 ms,
 * taking the heap's lock each time); a free during the capture posts none. */
Test(heap_ahead, a_sync_refused_by_a_capture_is_not_asked_for_again)
{
	struct writer w = { .value = 5, .ms = 20 };
	vmm_devptr y;
	CUgraph g = NULL;
	struct tctx t;
	CUstream cs = open_wrapped(&t, late_synchronize);

	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &y, NULL), VMM_OK);
	t_freed_while_written(&t, stream, &w, BIG); /* posts a sync ahead */
	for (int i = 0; i < 10000 && !atomic_load(&entered); i++)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	cr_assert(atomic_load(&entered), "the sync ahead never reached the backend");
	vmm_capture_begin();
	CU_OK(cuStreamBeginCapture(cs, CU_STREAM_CAPTURE_MODE_RELAXED));
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	nanosleep(&(struct timespec){ 0, 150 * 1000000 }, NULL);
	CU_OK(cuStreamEndCapture(cs, &g));
	vmm_capture_end();
	cr_expect_leq(atomic_load(&sync_calls), 2, "the thread asked for %d syncs",
		      atomic_load(&sync_calls));
	cr_expect_eq(t_stats(&t, 0, NULL).syncs_ahead, 0, "a sync ahead ran during the capture");
	cr_expect_not_null(g, "the sync ahead broke the program's capture");
	CU_OK(cuStreamSynchronize(stream));
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy(cs));
	t_close(&t);
}

Test(heap_ahead, the_core_is_destroyed_while_a_sync_ahead_waits)
{
	struct writer w = { .value = 4, .ms = 300 };
	struct tctx t;

	t_simdev_env("1G", NULL, NULL);
	open_ahead(&t);
	freed_while_written(&t, &w);
	nanosleep(&(struct timespec){ 0, 50 * 1000000 }, NULL);
	/* The thread waits for the 300 ms kernel now; the destroy waits for the thread, which
	 * would otherwise take the lock of a freed heap (a crash here, a report under ASan). */
	t_close(&t);
	CU_OK(cuStreamSynchronize(stream));
	cr_expect(atomic_load(&w.done));
}

/* x and z allocated; x freed while a 600 ms kernel writes it (a sync ahead is posted for it);
 * 200 ms later, once that sync began, z freed while a kernel held by *hold writes it. The
 * next allocation of BIG needs quarantined memory. */
static void free_under_two_kernels(struct tctx *t, struct writer *wx, struct writer *wz,
				   vmm_devptr *x)
{
	vmm_devptr z;

	cr_assert_eq(vmm_malloc(t->core, 0, BIG, 0, NULL, x, NULL), VMM_OK);
	cr_assert_eq(vmm_malloc(t->core, 0, BIG, 0, NULL, &z, NULL), VMM_OK);
	*wx = (struct writer){ .ptr = (void *)(uintptr_t)*x, .size = BIG, .value = 7, .ms = 600 };
	launch(wx);
	cr_assert_eq(vmm_free(t->core, *x, NULL), VMM_OK);
	nanosleep(&(struct timespec){ 0, 200 * 1000000 }, NULL);
	wz->ptr = (void *)(uintptr_t)z;
	wz->size = BIG;
	wz->value = 8;
	wz->ms = 10;
	launch(wz);
	cr_assert_eq(vmm_free(t->core, z, NULL), VMM_OK);
}

Test(heap_ahead, a_reuse_waits_for_the_sync_in_flight_not_for_later_work)
{
	atomic_bool hold = true;
	struct writer wx, wz = { .hold = &hold };
	vmm_devptr x, y;
	struct tctx t;
	vmm_stats s;

	t_simdev_env("1G", NULL, NULL);
	open_ahead(&t);
	free_under_two_kernels(&t, &wx, &wz, &x);
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &y, NULL), VMM_OK);
	/* Returned while z's kernel still runs: the program's queue was not drained. */
	cr_expect(!atomic_load(&wz.done), "the allocation waited for work queued after the sync "
		  "ahead");
	cr_expect(atomic_load(&wx.done), "the block was reused before its kernel ended");
	cr_expect_eq(y, x, "the block the sync ahead freed is not the one reused");
	s = t_stats(&t, 0, NULL);
	cr_expect_eq(s.syncs, 0, "the program's allocation synchronized the device");
	cr_expect_eq(s.syncs_waited, 1);
	t_fill(y, BIG, 9);
	atomic_store(&hold, false);
	CU_OK(cuStreamSynchronize(stream));
	cr_expect(t_check(y, BIG, 9), "a kernel wrote into the reused block");
	cr_expect_eq(atomic_load(&wz.fault), 0, "z was unmapped under its kernel");
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	t_close(&t);
}

static void *release_later(void *arg)
{
	nanosleep(&(struct timespec){ 0, 300 * 1000000 }, NULL);
	atomic_store((atomic_bool *)arg, false);
	return NULL;
}

Test(heap_ahead, sync_whole_drains_the_queue_as_before)
{
	atomic_bool hold = true;
	struct writer wx, wz = { .hold = &hold };
	vmm_devptr x, y;
	struct tctx t;
	pthread_t th;
	vmm_stats s;

	t_simdev_env("1G", NULL, NULL);
	open_ahead_as(&t, true);
	free_under_two_kernels(&t, &wx, &wz, &x);
	cr_assert_eq(pthread_create(&th, NULL, release_later, &hold), 0);
	cr_assert_eq(vmm_malloc(t.core, 0, BIG, 0, NULL, &y, NULL), VMM_OK);
	cr_expect(atomic_load(&wz.done), "the allocation did not wait for the whole queue");
	s = t_stats(&t, 0, NULL);
	cr_expect_eq(s.syncs, 1);
	cr_expect_eq(s.syncs_waited, 0);
	pthread_join(th, NULL);
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	t_close(&t);
}

Test(heap_ahead, a_device_whose_sync_ahead_has_not_begun_syncs_itself)
{
	atomic_bool hold = true;
	struct writer w0 = { .size = BIG, .value = 1, .ms = 10, .hold = &hold };
	struct writer w1 = { .size = BIG, .value = 2, .ms = 10 };
	vmm_devptr x0, x1, y;
	CUcontext c1;
	CUstream s1;
	struct tctx t;
	vmm_stats s;
	double t0;

	t_simdev_env("1G", "2", NULL);
	open_ahead(&t);
	/* Device 0: the thread's sync waits for a held kernel over a freed block. */
	x0 = freed_while_written(&t, &w0);
	(void)x0;
	nanosleep(&(struct timespec){ 0, 100 * 1000000 }, NULL);
	/* Device 1: its sync ahead is posted behind device 0's, and cannot begin. */
	CU_OK(cuDevicePrimaryCtxRetain(&c1, 1));
	CU_OK(cuCtxSetCurrent(c1));
	CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	cr_assert_eq(vmm_malloc(t.core, 1, BIG, 0, NULL, &x1, NULL), VMM_OK);
	w1.ptr = (void *)(uintptr_t)x1;
	t_launch_writer(s1, &w1);
	cr_assert_eq(vmm_free(t.core, x1, NULL), VMM_OK);
	t0 = vmm_now_s();
	cr_assert_eq(vmm_malloc(t.core, 1, BIG, 0, NULL, &y, NULL), VMM_OK);
	/* Waiting for the thread would take until the held kernel's 10 s bound. */
	cr_expect(vmm_now_s() - t0 < 5, "device 1's allocation waited %.1f s for device 0's sync",
		  vmm_now_s() - t0);
	cr_expect(!atomic_load(&w0.done), "device 1's allocation waited for device 0's sync");
	cr_expect(atomic_load(&w1.done), "the block was reused before its kernel ended");
	cr_expect_eq(y, x1);
	s = t_stats(&t, 1, NULL);
	cr_expect_eq(s.syncs, 1, "device 1's allocation did not synchronize it");
	cr_expect_eq(s.syncs_waited, 0);
	atomic_store(&hold, false);
	CU_OK(cuStreamSynchronize(s1));
	CU_OK(cuStreamSynchronize(stream));
	cr_assert_eq(vmm_free(t.core, y, NULL), VMM_OK);
	CU_OK(cuStreamDestroy(s1));
	t_close(&t);
}
