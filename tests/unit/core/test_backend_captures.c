/* The CUDA backend never synchronizes while the program captures a stream (a synchronization
 * would break the capture, as on the H200 and on simdev), and a capture's begin waits for the
 * synchronizations in progress. The shim brackets each capture with vmm_capture_begin/end as
 * these tests do. */
#include <criterion/criterion.h>
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "helpers.h"

#define CU_OK(call) cr_assert_eq((call), CUDA_SUCCESS, "%s failed", #call)

Test(backend_captures, no_synchronization_while_a_stream_is_captured)
{
	struct tctx t;
	vmm_error err = { 0 };
	CUstream s;
	CUgraph g = NULL;
	CUcontext ctx;

	t_open(&t, NULL);
	CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CU_OK(cuCtxSetCurrent(ctx));
	CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	vmm_capture_begin();
	CU_OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
	cr_expect_eq(t.be->synchronize(t.be, 0, &err), VMM_E_BUSY,
		     "the backend synchronized during a capture");
	cr_expect(strstr(err.msg, "capturing") != NULL, "unclear refusal: %s", err.msg);
	CU_OK(cuStreamEndCapture(s, &g));
	cr_expect_not_null(g, "the capture was broken");
	vmm_capture_end();
	cr_expect_eq(t.be->synchronize(t.be, 0, NULL), VMM_OK, "no synchronization after the capture");
	CU_OK(cuGraphDestroy(g));
	CU_OK(cuStreamDestroy(s));
	CU_OK(cuCtxSetCurrent(NULL));
	CU_OK(cuDevicePrimaryCtxRelease(0));
	t_close(&t);
}

static atomic_bool sync_ended;

static void *sync_for_a_while(void *arg)
{
	atomic_bool *started = arg;

	cr_assert(vmm_sync_begin());
	atomic_store(started, true);
	nanosleep(&(struct timespec){ 0, 200 * 1000000 }, NULL);
	atomic_store(&sync_ended, true);
	vmm_sync_end();
	return NULL;
}

Test(backend_captures, a_capture_begins_after_the_synchronization_in_progress)
{
	atomic_bool started = false;
	pthread_t th;

	atomic_store(&sync_ended, false);
	cr_assert_eq(pthread_create(&th, NULL, sync_for_a_while, &started), 0);
	t_wait_flag(&started, "the synchronization to start");
	vmm_capture_begin();
	cr_expect(atomic_load(&sync_ended), "a capture began during a synchronization");
	cr_expect_not(vmm_sync_begin(), "a synchronization began during a capture");
	vmm_capture_end();
	pthread_join(th, NULL);
	cr_expect(vmm_sync_begin(), "no synchronization after the capture ended");
	vmm_sync_end();
}

Test(backend_captures, an_end_without_a_begin_changes_nothing)
{
	vmm_capture_end();
	vmm_capture_begin();
	vmm_capture_end();
	cr_expect(vmm_sync_begin(), "an unmatched end left a capture counted");
	vmm_sync_end();
	vmm_capture_begin();
	vmm_capture_begin();
	vmm_capture_end();
	cr_expect_not(vmm_sync_begin(), "two captures, one ended: one is still in progress");
	vmm_capture_end();
	cr_expect(vmm_sync_begin());
	vmm_sync_end();
}
