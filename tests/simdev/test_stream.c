/* Work in stream order on simdev: host functions, kernels, events, the legacy stream,
 * stream-ordered allocation and capture into graphs. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "simdev.h"
#include "test_util.h"

/* Per-thread-stream exports; cuda.h declares them only for per-thread builds. */
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
				      CUstream h);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream h);
CUresult cuStreamSynchronize_ptsz(CUstream h);
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx);
CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *arg);

struct trace {
	pthread_mutex_t lock;
	int order[64];
	int n;
};

struct step {
	struct trace *t;
	int id;
	int sleep_ms;
};

static void record(void *arg)
{
	struct step *s = arg;
	if (s->sleep_ms) {
		struct timespec ts = { 0, s->sleep_ms * 1000000L };
		nanosleep(&ts, NULL);
	}
	pthread_mutex_lock(&s->t->lock);
	s->t->order[s->t->n++] = s->id;
	pthread_mutex_unlock(&s->t->lock);
}

Test(stream, host_functions_run_in_order_asynchronously)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	struct trace t = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct step steps[8];
	for (int i = 0; i < 8; i++) {
		steps[i] = (struct step){ &t, i, i == 0 ? 50 : 0 };
		CU_OK(cuLaunchHostFunc(s, record, &steps[i]));
	}
	cr_expect_eq(cuStreamQuery(s), CUDA_ERROR_NOT_READY, "the first one sleeps");
	CU_OK(cuStreamSynchronize(s));
	CU_OK(cuStreamQuery(s));
	cr_assert_eq(t.n, 8);
	for (int i = 0; i < 8; i++)
		cr_expect_eq(t.order[i], i);
}

Test(stream, legacy_stream_waits_for_blocking_streams)
{
	su_ctx(0);
	CUstream a, nb;
	CU_OK(cuStreamCreate(&a, 0));
	CU_OK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
	struct trace t = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct step slow = { &t, 1, 60 }, after = { &t, 2, 0 }, nbslow = { &t, 3, 150 };
	CU_OK(cuLaunchHostFunc(nb, record, &nbslow));
	CU_OK(cuLaunchHostFunc(a, record, &slow));
	CU_OK(cuLaunchHostFunc(NULL, record, &after)); /* legacy: after a's work, not nb's */
	CU_OK(cuStreamSynchronize(CU_STREAM_LEGACY));
	cr_assert_eq(t.n, 2);
	cr_expect_eq(t.order[0], 1);
	cr_expect_eq(t.order[1], 2);
	CU_OK(cuCtxSynchronize());
	cr_expect_eq(t.n, 3, "cuCtxSynchronize drains every stream");
}

static void add_one(void **params)
{
	int *p = *(int **)params[0];
	int n = *(int *)params[1];
	cr_assert_eq(simdev_check_access(simdev_current_device(), p, n * sizeof(int)), 0);
	for (int i = 0; i < n; i++)
		p[i] += 1;
}

Test(stream, kernels_and_async_copies_keep_order)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	enum { N = 1000 };
	static int in[N], out[N];
	for (int i = 0; i < N; i++)
		in[i] = i;
	CUdeviceptr d;
	CU_OK(cuMemAlloc(&d, sizeof(in)));
	int *dp = (int *)d, n = N;
	void *params[] = { &dp, &n };
	CU_OK(cuMemcpyHtoDAsync(d, in, sizeof(in), s));
	CU_OK(cuLaunchKernel(SIMDEV_KERNEL(add_one), 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	CU_OK(cuLaunchKernel(SIMDEV_KERNEL(add_one), 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	CU_OK(cuMemcpyDtoHAsync(out, d, sizeof(out), s));
	CU_OK(cuStreamSynchronize(s));
	for (int i = 0; i < N; i++)
		cr_assert_eq(out[i], i + 2);
	cr_expect_eq(simdev_current_device(), -1, "not a worker thread");
	CU_OK(cuMemFree(d));
}

Test(stream, events_order_streams_and_time_work)
{
	su_ctx(0);
	CUstream a, b;
	CUevent start, done;
	CU_OK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CU_OK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
	CU_OK(cuEventCreate(&start, 0));
	CU_OK(cuEventCreate(&done, 0));
	CU_OK(cuEventQuery(done)); /* never recorded: complete */
	struct trace t = { .lock = PTHREAD_MUTEX_INITIALIZER };
	struct step slow = { &t, 1, 40 }, later = { &t, 2, 0 };
	CU_OK(cuEventRecord(start, a));
	CU_OK(cuLaunchHostFunc(a, record, &slow));
	CU_OK(cuEventRecord(done, a));
	CU_OK(cuStreamWaitEvent(b, done, 0));
	CU_OK(cuLaunchHostFunc(b, record, &later));
	CU_OK(cuStreamSynchronize(b));
	cr_assert_eq(t.n, 2);
	cr_expect_eq(t.order[0], 1);
	CU_OK(cuEventSynchronize(done));
	float ms = 0;
	CU_OK(cuEventElapsedTime(&ms, start, done));
	cr_expect(ms >= 30 && ms < 5000, "elapsed %f ms", ms);
	CU_OK(cuEventDestroy(start));
	cr_expect_eq(cuEventQuery(start), CUDA_ERROR_INVALID_HANDLE);
}

struct gate {
	atomic_int open;
};

static void wait_gate(void *arg)
{
	struct gate *g = arg;
	while (!atomic_load(&g->open)) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
}

Test(stream, free_async_takes_effect_in_stream_order)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	size_t base = su_used();
	CUdeviceptr d;
	CU_OK(cuMemAllocAsync(&d, 3 * MiB, s));
	cr_expect_eq(su_used(), base + 2 * GRAN);
	CUmemoryPool pool, got = NULL;
	CU_OK(cuDeviceGetDefaultMemPool(&pool, 0));
	CU_OK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, d));
	cr_expect_eq(got, pool);
	struct gate g = { 0 };
	CU_OK(cuLaunchHostFunc(s, wait_gate, &g));
	CU_OK(cuMemFreeAsync(d, s));
	cr_expect_eq(cuMemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE, "already queued");
	cr_expect_eq(su_used(), base + 2 * GRAN, "the stream has not reached the free");
	atomic_store(&g.open, 1);
	CU_OK(cuStreamSynchronize(s));
	cr_expect_eq(su_used(), base);
	CU_OK(cuMemPoolTrimTo(pool, 0));
	int not_a_pool;
	cr_expect_eq(cuMemPoolTrimTo((CUmemoryPool)(void *)&not_a_pool, 0), CUDA_ERROR_INVALID_VALUE);
	CUdeviceptr e;
	CU_OK(cuMemAllocFromPoolAsync_ptsz(&e, 100, pool, NULL));
	CU_OK(cuMemFreeAsync_ptsz(e, NULL));
	CU_OK(cuStreamSynchronize_ptsz(NULL));
	cr_expect_eq(su_used(), base);
}

static void bump(void *arg)
{
	(*(int *)arg)++;
}

Test(stream, capture_records_and_graph_replays)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	int counter = 0;
	CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CUstreamCaptureStatus st;
	CU_OK(cuStreamIsCapturing(s, &st));
	cr_expect_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
	CUdeviceptr d;
	CU_OK(cuMemAllocAsync(&d, 4096, s));
	memset((void *)d, 0, 4096); /* simdev: memory allocated in a capture exists at once */
	CU_OK(cuLaunchHostFunc(s, bump, &counter));
	CU_OK(cuMemsetD8Async(d, 9, 4096, s));
	CU_OK(cuMemFreeAsync(d, s));
	CUgraph g;
	CU_OK(cuStreamEndCapture(s, &g));
	cr_expect_eq(counter, 0, "captured work does not run");
	cr_expect_eq(((unsigned char *)d)[0], 0);
	CUgraphExec x;
	CU_OK(cuGraphInstantiate(&x, g, 0));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuGraphLaunch(x, s));
	CU_OK(cuStreamSynchronize(s));
	cr_expect_eq(counter, 2);
	cr_expect_eq(((unsigned char *)d)[4095], 9);
	size_t before = su_used();
	CU_OK(cuGraphExecDestroy(x));
	CU_OK(cuGraphDestroy(g));
	cr_expect_eq(su_used(), before - GRAN, "the graph's memory goes with the graph");
	cr_expect_eq(cuGraphExecDestroy(x), CUDA_ERROR_INVALID_VALUE, "destroyed twice");
	cr_expect_eq(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_VALUE);
	cr_expect_eq(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
	cr_expect_eq(cuStreamBeginCapture(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_GLOBAL),
		     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
}

static void *sync_context(void *arg)
{
	CU_OK(cuCtxSetCurrent((CUcontext)arg));
	return (void *)(intptr_t)cuCtxSynchronize();
}

/* As on the H200 (tests/gpu/probe_bgsync.cu): a context synchronization while one of its streams
 * is captured fails and breaks the capture, made on another thread as on the capturing one. */
Test(stream, context_sync_during_capture_breaks_it)
{
	su_ctx(0);
	CUcontext ctx;
	CU_OK(cuCtxGetCurrent(&ctx));
	CUstream s;
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	int counter = 0;
	for (int other_thread = 0; other_thread < 2; other_thread++) {
		CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
		CU_OK(cuLaunchHostFunc(s, bump, &counter));
		void *rc;
		pthread_t t;
		if (other_thread) {
			cr_assert_eq(pthread_create(&t, NULL, sync_context, ctx), 0);
			pthread_join(t, &rc);
		} else {
			rc = sync_context(ctx);
		}
		cr_expect_eq((CUresult)(intptr_t)rc, CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
		CUstreamCaptureStatus st;
		CU_OK(cuStreamIsCapturing(s, &st));
		cr_expect_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
		cr_expect_eq(cuLaunchHostFunc(s, bump, &counter), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
		CUgraph g = (CUgraph)1;
		cr_expect_eq(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
		cr_expect_null(g, "a broken capture gives no graph");
		CU_OK(cuStreamIsCapturing(s, &st));
		cr_expect_eq(st, CU_STREAM_CAPTURE_STATUS_NONE, "the capture is over");
	}
	CU_OK(cuCtxSynchronize());
	cr_expect_eq(counter, 0, "captured work never runs");
	CU_OK(cuStreamDestroy(s));
}

Test(stream, per_thread_default_stream_is_per_thread)
{
	su_ctx(0);
	CUcontext c1, c2;
	CU_OK(cuStreamGetCtx_ptsz(NULL, &c1));
	CU_OK(cuStreamGetCtx(CU_STREAM_PER_THREAD, &c2));
	cr_expect_eq(c1, c2);
	int counter = 0;
	CU_OK(cuLaunchHostFunc_ptsz(NULL, bump, &counter));
	CU_OK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
	cr_expect_eq(counter, 1);
	CUstream bogus = (CUstream)(uintptr_t)0x1234;
	cr_expect_eq(cuStreamSynchronize(bogus), CUDA_ERROR_INVALID_HANDLE);
}

static void fork_child_uses_stream(void *arg)
{
	CUstream s = arg;
	int counter = 0;
	if (cuLaunchHostFunc(s, bump, &counter) || cuStreamSynchronize(s) || counter != 1)
		_exit(1);
	CUdeviceptr d;
	char buf[8] = "child";
	if (cuMemAlloc(&d, 8) || cuMemcpyHtoD(d, buf, 8) || cuMemFree(d))
		_exit(2);
	_exit(0);
}

Test(stream, a_forked_child_gets_fresh_workers)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	int counter = 0;
	CU_OK(cuLaunchHostFunc(s, bump, &counter));
	CU_OK(cuStreamSynchronize(s));
	pid_t pid = fork();
	if (pid == 0)
		fork_child_uses_stream(s);
	int status;
	waitpid(pid, &status, 0);
	cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	CU_OK(cuLaunchHostFunc(s, bump, &counter));
	CU_OK(cuStreamSynchronize(s));
	cr_expect_eq(counter, 2);
}

static int thread_count(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	if (f)
		fclose(f);
	return n;
}

Test(stream, destroyed_streams_finish_their_work_and_release_their_thread)
{
	su_ctx(0);
	int before = thread_count(), counter = 0;
	for (int i = 0; i < 50; i++) {
		CUstream s;
		CU_OK(cuStreamCreate(&s, 0));
		CU_OK(cuLaunchHostFunc(s, bump, &counter));
		CU_OK(cuStreamDestroy(s));
		cr_expect_eq(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
	}
	CU_OK(cuCtxSynchronize());
	cr_expect_eq(counter, 50, "queued work still runs");
	for (int k = 0; k < 100 && thread_count() > before; k++) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	cr_expect_leq(thread_count(), before, "%d threads, %d before", thread_count(), before);
}

struct slow_write {
	int *dst;
	int value;
};

static void slow_write(void *arg)
{
	struct slow_write *w = arg;
	struct timespec ts = { 0, 50000000 };
	nanosleep(&ts, NULL);
	*w->dst = w->value;
}

Test(stream, synchronous_copies_wait_for_queued_work)
{
	su_ctx(0);
	CUstream s;
	CU_OK(cuStreamCreate(&s, 0));
	CUdeviceptr d;
	CU_OK(cuMemAlloc(&d, sizeof(int)));
	CU_OK(cuMemsetD32(d, 0, 1));
	struct slow_write w = { (int *)d, 42 };
	CU_OK(cuLaunchHostFunc(s, slow_write, &w)); /* a blocking stream: the copy waits for it */
	int out = 0;
	CU_OK(cuMemcpyDtoH(&out, d, sizeof(out)));
	cr_expect_eq(out, 42);
	struct slow_write w2 = { (int *)d, 7 };
	CU_OK(cuLaunchHostFunc(NULL, slow_write, &w2));
	CU_OK(cuMemcpyDtoH(&out, d, sizeof(out)));
	cr_expect_eq(out, 7, "and for the legacy stream's work");
	CU_OK(cuMemFree(d));
}

static void callback(CUstream s, CUresult status, void *arg)
{
	(void)s;
	if (status == CUDA_SUCCESS)
		(*(int *)arg)++;
}

Test(stream, callbacks_and_priorities)
{
	su_ctx(0);
	int least = 1, greatest = 1, prio = 1, counter = 0;
	CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
	cr_expect_leq(greatest, least);
	CUstream s;
	CU_OK(cuStreamCreateWithPriority(&s, 0, greatest));
	CU_OK(cuStreamGetPriority(s, &prio));
	cr_expect_eq(prio, greatest);
	CU_OK(cuStreamAddCallback(s, callback, &counter, 0));
	CU_OK(cuStreamSynchronize(s));
	cr_expect_eq(counter, 1);
}
