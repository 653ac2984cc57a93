/* The submission gate (gate.h). Open, entering costs one atomic add and one load: a thread first
 * counts itself in, then looks at `closed`; the closer first sets `closed`, then looks at the
 * count. Both use sequentially consistent operations, so one of them always sees the other.
 * Nested entries by one thread (a hook reached from inside another) count once, so that a closer
 * never waits for a thread that is waiting for it. */
#include "gate.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "../core/mono_wait.h"
#include "gate_who.h"

static atomic_int inflight;         /* threads inside the gate */
static atomic_bool closed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Both measure their deadlines on CLOCK_MONOTONIC (conds_init, before any wait). */
static pthread_cond_t reopened = PTHREAD_COND_INITIALIZER;
static pthread_cond_t drained = PTHREAD_COND_INITIALIZER;
static pthread_once_t conds_once = PTHREAD_ONCE_INIT;
static bool autowake;
static void (*wake_fn)(void);
static bool wake_running;
/* No autowake before this (vmm_now_ms): one try a second after a failed one, for all the
 * waiting threads together. */
#define WAKE_RETRY_MS 1000
static long long wake_retry_ms;

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

static void conds_init(void)
{
	vmm_cond_init_monotonic(&reopened);
	vmm_cond_init_monotonic(&drained);
}

/* Every path that waits on or signals the conditions passes here first (never the open
 * gate_enter): the static initialisers are replaced once, before anyone can wait on them. */
static void lock_gate(void)
{
	pthread_once(&conds_once, conds_init);
	pthread_mutex_lock(&lock);
}

static void leave_count(void)
{
	if (atomic_fetch_sub(&inflight, 1) <= 2 && atomic_load(&closed)) {
		lock_gate();
		pthread_cond_broadcast(&drained);
		pthread_mutex_unlock(&lock);
	}
}

/* Closed: wait until it opens. With autowake, a waiter asks for a wake (outside the lock: the
 * wake opens the gate itself); while wakes fail, one waiter tries again a second after the last
 * failure, and the others wait (each on its own timer, they would all try). */
static void wait_open(void)
{
	struct timespec ts;

	lock_gate();
	while (atomic_load(&closed)) {
		long long wait_ms = WAKE_RETRY_MS;

		if (autowake && wake_fn && !wake_running && vmm_now_ms() >= wake_retry_ms) {
			void (*fn)(void) = wake_fn;

			wake_running = true;
			pthread_mutex_unlock(&lock);
			fn();
			pthread_mutex_lock(&lock);
			wake_running = false;
			if (!atomic_load(&closed))
				break;
			wake_retry_ms = vmm_now_ms() + WAKE_RETRY_MS;
		} else if (autowake && !wake_running && wake_retry_ms - vmm_now_ms() < wait_ms) {
			wait_ms = wake_retry_ms - vmm_now_ms(); /* this thread may be the one */
		}
		if (autowake) {
			vmm_deadline_ms(&ts, wait_ms > 0 ? (int)wait_ms : 1);
			pthread_cond_timedwait(&reopened, &lock, &ts);
		} else {
			pthread_cond_wait(&reopened, &lock);
		}
	}
	pthread_mutex_unlock(&lock);
}

void gate_enter_as(const char *what)
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
			gate_who_set(what);
			return;
		}
		leave_count();
		if (!counted)
			atomic_fetch_add(&held_calls, 1);
		counted = true;
		wait_open();
	}
}

bool gate_try_enter_as(const char *what)
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
		gate_who_set(what);
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
	gate_who_set(NULL);
	leave_count();
}

/* Reopen after a close that gave up (lock held). */
static void reopen_locked(void)
{
	atomic_store(&closed, false);
	pthread_cond_broadcast(&reopened);
}

/* The threads still inside, not counting a closer that is itself inside. Read under the lock;
 * the number a close gives up on is this one, read once (a thread may leave just after). */
static int busy_now(int self)
{
	return atomic_load(&inflight) - self;
}

vmm_status gate_close_within(int timeout_ms, bool (*stop)(void *arg), void *arg, vmm_error *err)
{
	int self = depth > 0 ? 1 : 0, busy;
	struct timespec end, slice, now;
	bool stopped = false, timed_out = false;
	char who[160];

	lock_gate();
	if (atomic_load(&closed)) {
		pthread_mutex_unlock(&lock);
		return vmm_fail(err, VMM_E_BUSY, 0, "the submission gate is already closed");
	}
	atomic_store(&closed, true);
	if (timeout_ms >= 0)
		vmm_deadline_ms(&end, timeout_ms);
	/* Each pass: done when nobody is inside; else give up if stopped or past the deadline; else
	 * wait (in short slices with a stop test, so that it is asked while the wait lasts). */
	while ((busy = busy_now(self)) > 0 && !stopped && !timed_out) {
		if (!stop && timeout_ms < 0) {
			pthread_cond_wait(&drained, &lock);
			continue;
		}
		if (stop) {
			vmm_deadline_ms(&slice, STOP_POLL_MS);
			if (timeout_ms >= 0 && vmm_time_before(&end, &slice))
				slice = end;
		} else {
			slice = end;
		}
		pthread_cond_timedwait(&drained, &lock, &slice);
		clock_gettime(CLOCK_MONOTONIC, &now);
		timed_out = timeout_ms >= 0 && !vmm_time_before(&now, &end);
		if (stop) {
			pthread_mutex_unlock(&lock);
			stopped = stop(arg);
			lock_gate();
		}
	}
	if (busy > 0) {
		gate_who_list(who, sizeof(who));
		reopen_locked();
		pthread_mutex_unlock(&lock);
		if (stopped)
			return vmm_fail(err, VMM_E_BUSY, 0, "cancelled while %d thread(s) were still "
					"inside a device call%s%s%s; gate reopened", busy,
					who[0] ? " (" : "", who, who[0] ? ")" : "");
		return vmm_fail(err, VMM_E_BUSY, 0,
				"%d thread(s) still inside a device call%s%s%s after %d ms; gate "
				"reopened", busy, who[0] ? " (" : "", who, who[0] ? ")" : "",
				timeout_ms);
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
	lock_gate();
	atomic_store(&closed, false);
	wake_retry_ms = 0; /* the next sleep's autowake is tried at once */
	pthread_cond_broadcast(&reopened);
	pthread_mutex_unlock(&lock);
}

bool gate_is_closed(void)
{
	return atomic_load(&closed);
}

void gate_set_autowake(bool on, void (*fn)(void))
{
	lock_gate();
	autowake = on;
	wake_fn = fn;
	pthread_cond_broadcast(&reopened);
	pthread_mutex_unlock(&lock);
}

void gate_reset_after_fork(void)
{
	/* The child has one thread: nobody else is inside, and no sleep is in progress here. */
	pthread_mutex_init(&lock, NULL);
	conds_init();
	pthread_once(&conds_once, conds_init); /* a parent that never waited: not again later */
	gate_who_after_fork();
	atomic_store(&inflight, depth > 0 ? 1 : 0);
	atomic_store(&closed, false);
	wake_running = false;
	wake_retry_ms = 0;
}
