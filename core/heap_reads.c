/* Bounded reads of the heaps' figures (heap.h, heap_reads.h). The program's thread holds a
 * heap's lock while it waits for the device in its allocator (heap_reclaim, ahead_wait), which
 * lasts as long as the device's queued work: a collective waiting for a process that sleeps, say.
 * The control server reads the figures for hello and status, and sharing peers ask for those at
 * every look; waiting there held one of the server's workers per request, and sixteen made it
 * answer busy to everything, cancel included. Within bounded reads a read polls the lock until
 * the thread's deadline and leaves that heap out past it when its holder waits for the device
 * (a lock only busy with the program's allocations is waited for a little longer); the caller
 * then says the heap is busy instead of giving figures. */
#include "heap_reads.h"

#include <time.h>

#include "heap_internal.h"
#include "mono_wait.h"

#define POLL_US 200
/* How much longer than its deadline a read waits for a lock held by anything else than a wait
 * for the device (a busy program's allocations and frees): a bound all the same. */
#define HOT_GRACE_MS 2000

static _Thread_local struct {
	bool on, missed;
	long long deadline_ms;
} bounded;

void vmm_bounded_reads_begin(int wait_ms)
{
	bounded.on = true;
	bounded.missed = false;
	bounded.deadline_ms = vmm_now_ms() + wait_ms;
}

bool vmm_bounded_reads_end(void)
{
	bool complete = !bounded.missed;

	bounded.on = false;
	bounded.missed = false;
	return complete;
}

bool heap_lock_read(struct devheap *dh)
{
	if (!bounded.on) {
		pthread_mutex_lock(&dh->lock);
		return true;
	}
	while (pthread_mutex_trylock(&dh->lock)) {
		long long now = vmm_now_ms();

		/* Past the deadline only a wait for the device counts as busy: a lock that the
		 * program's threads keep taking and letting go is had within the grace. */
		if (now >= bounded.deadline_ms + HOT_GRACE_MS ||
		    (now >= bounded.deadline_ms &&
		     atomic_load_explicit(&dh->lock_wait_since_ms, memory_order_relaxed))) {
			bounded.missed = true;
			return false;
		}
		nanosleep(&(struct timespec){ 0, POLL_US * 1000 }, NULL);
	}
	return true;
}

void heap_lock_wait_begin(struct devheap *dh, double t0_s)
{
	/* 0 means none: a clock that started at 0 is read as 1 ms. */
	long long ms = (long long)(t0_s * 1000);

	atomic_store_explicit(&dh->lock_wait_since_ms, ms ? ms : 1, memory_order_relaxed);
}

void heap_lock_wait_end(struct devheap *dh)
{
	atomic_store_explicit(&dh->lock_wait_since_ms, 0, memory_order_relaxed);
}

long long vmm_lock_wait_ms(vmm_core *core)
{
	long long now = vmm_now_ms(), most = 0;

	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = atomic_load_explicit(&core->heaps[d], memory_order_acquire);
		long long since;

		if (!dh)
			continue;
		since = atomic_load_explicit(&dh->lock_wait_since_ms, memory_order_relaxed);
		if (since && now - since > most)
			most = now - since;
	}
	return most;
}
