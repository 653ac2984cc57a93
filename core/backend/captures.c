/* Stream captures in progress in the process, kept apart from the device synchronizations
 * (backend.h: vmm_capture_*, vmm_sync_*). On the H200 a context synchronization made while any
 * stream of the context is being captured fails and breaks that capture, whichever thread makes
 * it and in whichever capture mode (tests/gpu/PROBE.md (e)). The heap synchronizes to reuse
 * freed memory and a sleep to drain the device, at moments the program does not choose, so a
 * synchronization starts only while no capture is in progress, and a capture begins only once
 * the synchronizations in progress have ended. Captures are counted for the whole process,
 * whatever their context: a capture on one device holds back the others' synchronizations too,
 * which costs growth, never a broken capture. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../log.h"
#include "../mono_wait.h"
#include "backend.h"

/* How long a capture's begin waits for a synchronization in progress. A synchronization waits
 * for the work queued on the device, which a kernel that never ends makes endless: past this the
 * capture begins anyway (and the synchronization, already past the driver's check, is not
 * known to break it). */
#define BEGIN_WAIT_MS 10000

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t syncs_ended;
static pthread_once_t cond_once = PTHREAD_ONCE_INIT;
static atomic_int captures; /* begun and not ended; changed under lock, read without it */
static int syncs;    /* synchronizations in progress */

static void init_cond(void)
{
	vmm_cond_init_monotonic(&syncs_ended);
}

void vmm_capture_begin(void)
{
	struct timespec deadline;

	pthread_once(&cond_once, init_cond);
	pthread_mutex_lock(&lock);
	vmm_deadline_ms(&deadline, BEGIN_WAIT_MS);
	while (syncs > 0)
		if (pthread_cond_timedwait(&syncs_ended, &lock, &deadline) == ETIMEDOUT)
			break;
	if (syncs > 0)
		vmm_log(VMM_LOG_WARN, "a stream capture begins while a device synchronization has "
			"run for over %d s", BEGIN_WAIT_MS / 1000);
	captures++;
	pthread_mutex_unlock(&lock);
}

void vmm_capture_end(void)
{
	pthread_mutex_lock(&lock);
	if (captures > 0)
		captures--;
	pthread_mutex_unlock(&lock);
}

/* Without the lock: it sits on the heap's free path (heap_ahead.c), and a capture that begins
 * just after the read is still refused its synchronizations by vmm_sync_begin. */
bool vmm_capture_active(void)
{
	return atomic_load_explicit(&captures, memory_order_relaxed) > 0;
}

bool vmm_sync_begin(void)
{
	bool ok;

	pthread_once(&cond_once, init_cond);
	pthread_mutex_lock(&lock);
	ok = captures == 0;
	if (ok)
		syncs++;
	pthread_mutex_unlock(&lock);
	return ok;
}

void vmm_sync_end(void)
{
	pthread_mutex_lock(&lock);
	if (--syncs == 0)
		pthread_cond_broadcast(&syncs_ended);
	pthread_mutex_unlock(&lock);
}

void vmm_captures_after_fork(void)
{
	pthread_mutex_init(&lock, NULL);
	vmm_cond_init_monotonic(&syncs_ended);
	captures = 0;
	syncs = 0;
}
