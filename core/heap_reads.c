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

#include <sched.h>
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

/* The views' handshake with the waiting thread is sequentially consistent on both sides (the
 * flag, then the count; the count, then the flag): a view that sees the wait still on after it
 * counted itself is seen by the end, which waits for it. The flag's store also publishes
 * everything the thread wrote to the heap before its wait. */
void heap_lock_wait_begin(struct devheap *dh, double t0_s)
{
	/* 0 means none: a clock that started at 0 is read as 1 ms. */
	long long ms = (long long)(t0_s * 1000);

	atomic_store(&dh->lock_wait_since_ms, ms ? ms : 1);
}

void heap_lock_wait_end(struct devheap *dh)
{
	atomic_store(&dh->lock_wait_since_ms, 0);
	while (atomic_load(&dh->viewers))
		sched_yield(); /* a lookup's few reads */
}

static bool borrow(struct devheap *dh)
{
	if (!atomic_load(&dh->lock_wait_since_ms))
		return false;
	atomic_fetch_add(&dh->viewers, 1);
	if (atomic_load(&dh->lock_wait_since_ms))
		return true;
	atomic_fetch_sub(&dh->viewers, 1);
	return false;
}

/* How many times a view tries the lock between yields before it sleeps between tries: a lock
 * held for an allocation is let go within microseconds. */
#define VIEW_SPINS 64
#define VIEW_POLL_US 20

enum heap_view heap_view_begin(struct devheap *dh)
{
	for (int i = 0;; i++) {
		if (!pthread_mutex_trylock(&dh->lock))
			return HEAP_VIEW_LOCKED;
		if (borrow(dh))
			return HEAP_VIEW_BORROWED;
		if (i < VIEW_SPINS)
			sched_yield();
		else
			nanosleep(&(struct timespec){ 0, VIEW_POLL_US * 1000 }, NULL);
	}
}

void heap_view_end(struct devheap *dh, enum heap_view how)
{
	if (how == HEAP_VIEW_LOCKED)
		pthread_mutex_unlock(&dh->lock);
	else
		atomic_fetch_sub(&dh->viewers, 1);
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
