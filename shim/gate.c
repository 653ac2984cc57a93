/* The submission gate (gate.h). Open, entering costs one atomic add and one load: a thread first
 * counts itself in, then looks at `closed`; the closer first sets `closed`, then looks at the
 * count. Both use sequentially consistent operations, so one of them always sees the other.
 * Nested entries by one thread (a hook reached from inside another) count once, so that a closer
 * never waits for a thread that is waiting for it. */
#include "gate.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

static atomic_int inflight;         /* threads inside the gate */
static atomic_bool closed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reopened = PTHREAD_COND_INITIALIZER;
static pthread_cond_t drained = PTHREAD_COND_INITIALIZER;
static bool autowake;
static void (*wake_fn)(void);
static bool wake_running;

static _Thread_local int depth;     /* this thread's nesting inside the gate */
static atomic_bool track;           /* remember when device work was last submitted */
static atomic_llong last_entry_ms;  /* CLOCK_MONOTONIC_COARSE */

static void note_entry(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	atomic_store_explicit(&last_entry_ms, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
			      memory_order_relaxed);
}

void gate_track_entries(bool on)
{
	if (on)
		note_entry();
	atomic_store(&track, on);
}

long long gate_idle_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 -
	       atomic_load_explicit(&last_entry_ms, memory_order_relaxed);
}

#define STOP_POLL_MS 50             /* how often a closing wait asks whether to stop */

/* Calls that met the gate closed and waited (each counted once): for metrics. */
static atomic_ullong held_calls;

static void deadline_in(struct timespec *ts, long ms)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void leave_count(void)
{
	if (atomic_fetch_sub(&inflight, 1) <= 2 && atomic_load(&closed)) {
		pthread_mutex_lock(&lock);
		pthread_cond_broadcast(&drained);
		pthread_mutex_unlock(&lock);
	}
}

/* Closed: wait until it opens. With autowake, the first waiter asks for a wake (outside the lock:
 * the wake opens the gate itself) and retries every second while the wake fails. */
static void wait_open(void)
{
	struct timespec ts;

	pthread_mutex_lock(&lock);
	while (atomic_load(&closed)) {
		if (autowake && wake_fn && !wake_running) {
			void (*fn)(void) = wake_fn;

			wake_running = true;
			pthread_mutex_unlock(&lock);
			fn();
			pthread_mutex_lock(&lock);
			wake_running = false;
			if (!atomic_load(&closed))
				break;
			deadline_in(&ts, 1000);
			pthread_cond_timedwait(&reopened, &lock, &ts);
			continue;
		}
		if (autowake) {
			deadline_in(&ts, 1000);
			pthread_cond_timedwait(&reopened, &lock, &ts);
		} else {
			pthread_cond_wait(&reopened, &lock);
		}
	}
	pthread_mutex_unlock(&lock);
}

void gate_enter(void)
{
	bool counted = false;

	if (atomic_load_explicit(&track, memory_order_relaxed))
		note_entry();
	if (depth > 0) {
		depth++;
		return;
	}
	for (;;) {
		atomic_fetch_add(&inflight, 1);
		if (!atomic_load(&closed)) {
			depth = 1; /* only once inside: a waiter is not inside */
			return;
		}
		leave_count();
		if (!counted)
			atomic_fetch_add(&held_calls, 1);
		counted = true;
		wait_open();
	}
}

bool gate_try_enter(void)
{
	if (atomic_load_explicit(&track, memory_order_relaxed))
		note_entry();
	if (depth > 0) {
		depth++;
		return true;
	}
	atomic_fetch_add(&inflight, 1);
	if (!atomic_load(&closed)) {
		depth = 1;
		return true;
	}
	leave_count();
	return false;
}

unsigned long long gate_held_calls(void)
{
	return atomic_load(&held_calls);
}

void gate_leave(void)
{
	if (depth <= 0)
		return; /* unbalanced leave: ignore rather than corrupt the count */
	if (--depth > 0)
		return;
	leave_count();
}

/* Reopen after a close that gave up (lock held). */
static void reopen_locked(void)
{
	atomic_store(&closed, false);
	pthread_cond_broadcast(&reopened);
}

vmm_status gate_close_within(int timeout_ms, bool (*stop)(void *arg), void *arg, vmm_error *err)
{
	int self = depth > 0 ? 1 : 0;
	struct timespec end, slice;
	bool stopped = false;
	int rc = 0;

	pthread_mutex_lock(&lock);
	if (atomic_load(&closed)) {
		pthread_mutex_unlock(&lock);
		return vmm_fail(err, VMM_E_BUSY, 0, "the submission gate is already closed");
	}
	atomic_store(&closed, true);
	if (timeout_ms >= 0)
		deadline_in(&end, timeout_ms);
	while (atomic_load(&inflight) > self && rc != ETIMEDOUT && !stopped) {
		if (!stop) {
			if (timeout_ms >= 0)
				rc = pthread_cond_timedwait(&drained, &lock, &end);
			else
				pthread_cond_wait(&drained, &lock);
			continue;
		}
		/* Wait in short slices, asking stop() between them. */
		deadline_in(&slice, STOP_POLL_MS);
		if (timeout_ms >= 0 && before(&end, &slice))
			slice = end;
		pthread_cond_timedwait(&drained, &lock, &slice);
		if (timeout_ms >= 0 && !before(&slice, &end) && atomic_load(&inflight) > self) {
			rc = ETIMEDOUT;
			break;
		}
		pthread_mutex_unlock(&lock);
		stopped = stop(arg);
		pthread_mutex_lock(&lock);
	}
	if (atomic_load(&inflight) > self) {
		int busy = atomic_load(&inflight) - self;

		reopen_locked();
		pthread_mutex_unlock(&lock);
		if (stopped)
			return vmm_fail(err, VMM_E_BUSY, 0, "cancelled while %d thread(s) were still "
					"inside a device call; gate reopened", busy);
		return vmm_fail(err, VMM_E_BUSY, 0,
				"%d thread(s) still inside a device call after %d ms; gate reopened",
				busy, timeout_ms);
	}
	pthread_mutex_unlock(&lock);
	return VMM_OK;
}

vmm_status gate_close(int timeout_ms, vmm_error *err)
{
	return gate_close_within(timeout_ms, NULL, NULL, err);
}

void gate_open(void)
{
	pthread_mutex_lock(&lock);
	atomic_store(&closed, false);
	pthread_cond_broadcast(&reopened);
	pthread_mutex_unlock(&lock);
}

bool gate_is_closed(void)
{
	return atomic_load(&closed);
}

void gate_set_autowake(bool on, void (*fn)(void))
{
	pthread_mutex_lock(&lock);
	autowake = on;
	wake_fn = fn;
	pthread_cond_broadcast(&reopened);
	pthread_mutex_unlock(&lock);
}

void gate_reset_after_fork(void)
{
	/* The child has one thread: nobody else is inside, and no sleep is in progress here. */
	pthread_mutex_init(&lock, NULL);
	pthread_cond_init(&reopened, NULL);
	pthread_cond_init(&drained, NULL);
	atomic_store(&inflight, depth > 0 ? 1 : 0);
	atomic_store(&closed, false);
	wake_running = false;
}
