/* Device drains within limits (drain.h), and the limits check that every part of a sleep or wake
 * makes between its steps (transfer.h).
 *
 * One job slot and one helper thread: a caller posts (backend, device), the helper runs the
 * synchronize and posts the outcome under the job's id. A caller that gives up only stops
 * waiting; the outcome of its job is then overwritten by the next one, unread. */
#include "drain.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "../lib_thread.h"
#include "../mono_wait.h"
#include "offload_internal.h"

#define POLL_S 0.05   /* how often a waiting caller looks at its cancelled() callback */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t posted = PTHREAD_COND_INITIALIZER;   /* for the helper: a job is there */
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER; /* for callers: a job is done */
static pthread_once_t finished_once = PTHREAD_ONCE_INIT;
static bool helper_started, atfork_registered;
static struct {
	vmm_backend *be;
	int dev;
	uint64_t id;        /* 0: the slot is empty */
} job;
static bool running;      /* the helper is inside a synchronize */
static uint64_t last_id, done_id;
static vmm_status done_status;
static vmm_error done_err;

/* Callers wait on `finished` with deadlines: it measures them on CLOCK_MONOTONIC, set up before
 * anyone can wait on it (every path takes the lock through here). */
static void finished_init(void)
{
	vmm_cond_init_monotonic(&finished);
}

static void lock_drain(void)
{
	pthread_once(&finished_once, finished_init);
	pthread_mutex_lock(&lock);
}

vmm_status vmm_limits_check(const vmm_limits *lim, const char *what, vmm_error *err)
{
	if (!lim)
		return VMM_OK;
	if (lim->cancelled && lim->cancelled(lim->arg))
		return vmm_fail(err, VMM_E_BUSY, 0, "cancelled before %s", what);
	if (lim->deadline > 0 && vmm_now_s() >= lim->deadline)
		return vmm_fail(err, VMM_E_BUSY, 0, "not done within the deadline: stopped before %s",
				what);
	return VMM_OK;
}

static void *helper_main(void *arg)
{
	(void)arg;
	lock_drain();
	for (;;) {
		vmm_backend *be;
		vmm_status st;
		vmm_error e;
		uint64_t id;
		int dev;

		while (!job.id)
			pthread_cond_wait(&posted, &lock);
		be = job.be;
		dev = job.dev;
		id = job.id;
		job.id = 0;
		running = true;
		pthread_mutex_unlock(&lock);
		vmm_error_clear(&e);
		st = be->synchronize(be, dev, &e);
		lock_drain();
		running = false;
		done_id = id;
		done_status = st;
		done_err = e;
		pthread_cond_broadcast(&finished);
	}
	return NULL;
}

static void after_fork_in_child(void)
{
	/* The helper is the parent's: the child starts its own when it needs one. */
	pthread_mutex_init(&lock, NULL);
	pthread_cond_init(&posted, NULL);
	vmm_cond_init_monotonic(&finished);
	pthread_once(&finished_once, finished_init); /* done: not again over it later */
	helper_started = running = false;
	job.id = 0;
}

static bool helper_locked(void)
{
	pthread_t th;

	if (helper_started)
		return true;
	if (vmm_thread_create(&th, NULL, helper_main, NULL))
		return false;
	pthread_detach(th);
	pthread_setname_np(th, "vmmshim-drain");
	helper_started = true;
	if (!atfork_registered) {
		atfork_registered = true;
		pthread_atfork(NULL, NULL, after_fork_in_child);
	}
	return true;
}

/* Wait on `finished` for one poll slice at most (lock held). */
static void wait_slice(double until)
{
	double now = vmm_now_s(), slice = until - now < POLL_S ? until - now : POLL_S;
	struct timespec ts;

	if (slice <= 0)
		return;
	vmm_deadline_ms(&ts, (long long)(slice * 1000) + 1);
	pthread_cond_timedwait(&finished, &lock, &ts);
}

/* Should the waiting caller stop (lock held; cancelled() is called without it)? */
static bool must_stop(const vmm_limits *lim, double until)
{
	bool stop;

	if (vmm_now_s() >= until)
		return true;
	if (!lim->cancelled)
		return false;
	pthread_mutex_unlock(&lock);
	stop = lim->cancelled(lim->arg);
	lock_drain();
	return stop;
}

static vmm_status gave_up(const vmm_limits *lim, int dev, double t0, bool earlier, vmm_error *err)
{
	double waited = vmm_now_s() - t0;

	if (lim->cancelled && lim->cancelled(lim->arg))
		return vmm_fail(err, VMM_E_BUSY, 0, "cancelled while waiting for device %d to drain",
				dev);
	if (earlier)
		return vmm_fail(err, VMM_E_BUSY, 0,
				"device %d: an earlier drain that was given up was still running "
				"after %.1f s", dev, waited);
	return vmm_fail(err, VMM_E_BUSY, 0,
			"device %d did not drain within %.1f s: work that waits for a held "
			"submission? (e.g. a kernel waiting for a copy or flag issued after the "
			"sleep began)", dev, waited);
}

vmm_status vmm_drain(vmm_backend *be, int dev, const vmm_limits *lim, vmm_error *err)
{
	double t0 = vmm_now_s(), until = 1e300;
	vmm_status st;
	uint64_t id;

	if (!lim)
		return be->synchronize(be, dev, err);
	if (lim->deadline > 0)
		until = lim->deadline;
	if (lim->drain_s > 0 && t0 + lim->drain_s < until)
		until = t0 + lim->drain_s;
	lock_drain();
	if (!helper_locked()) {
		/* No thread to be had: wait here, unbounded, as a plain synchronize would. */
		pthread_mutex_unlock(&lock);
		return be->synchronize(be, dev, err);
	}
	while (job.id || running) {
		if (must_stop(lim, until)) {
			pthread_mutex_unlock(&lock);
			return gave_up(lim, dev, t0, true, err);
		}
		wait_slice(until);
	}
	id = ++last_id;
	job.be = be;
	job.dev = dev;
	job.id = id;
	pthread_cond_signal(&posted);
	while (done_id != id) {
		if (must_stop(lim, until)) {
			pthread_mutex_unlock(&lock);
			return gave_up(lim, dev, t0, false, err);
		}
		wait_slice(until);
	}
	st = done_status;
	if (st && err)
		*err = done_err;
	pthread_mutex_unlock(&lock);
	return st;
}

bool vmm_drain_idle(void)
{
	bool idle;

	lock_drain();
	idle = !job.id && !running;
	pthread_mutex_unlock(&lock);
	return idle;
}

bool vmm_drain_wait_idle(double until)
{
	bool idle;

	lock_drain();
	while (!(idle = !job.id && !running) && vmm_now_s() < until)
		wait_slice(until);
	pthread_mutex_unlock(&lock);
	return idle;
}
