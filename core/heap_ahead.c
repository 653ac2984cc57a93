/* Syncing ahead (heap_ahead.h).
 *
 * A free that leaves sync_ahead_min bytes or more in the quarantine posts a sync for its device
 * (at most one in flight per device): the quarantine's sequence number and the backend's
 * submission count are read then, under the heap's lock. The core's thread synchronizes the
 * device without the lock (on the H200 a synchronization on another thread waits only for the
 * work queued before it, and the program's launches go on meanwhile: tests/gpu/PROBE.md (e)),
 * then, with the lock, makes free every allocation quarantined up to that sequence number: each
 * was freed before the synchronization began, so the work that may touch it was submitted
 * before too, and has ended. The count read before it began becomes the heap's last synced
 * count (heap_records.c's reuse without a sync), when it is newer than the one there.
 *
 * The program's thread never waits for the thread: its rules (heap_fit.c) see only what the
 * quarantine holds when it allocates, and synchronize themselves as before when they must. No
 * sync is posted while the program captures a stream, and one the backend refused (a capture
 * begun after the post) waits for the program's next free. */
#include "heap_ahead.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "heap_reads.h"
#include "heap_records.h"
#include "lib_thread.h"
#include "log.h"
#include "mono_wait.h"

#define STOP_WAIT_MS 5000
/* A safety bound only: the sync waited for covers less work than the program's own would, so
 * past it the program's thread synchronizes itself, as it did before. */
#define AHEAD_WAIT_MS 10000

struct ahead {
	struct vmm_worker w;    /* its lock taken after a devheap's lock, never before; posted: a
				 * device was posted, or stop */
	pthread_cond_t synced;  /* a sync ahead returned (done_gen moved) */
	unsigned pending;       /* bit d: device d has a sync posted */
	/* Per device: the number of the sync posted, of the last one that returned, and whether
	 * that one succeeded. */
	uint64_t posted_gen[VMM_MAX_DEVICES], done_gen[VMM_MAX_DEVICES];
	bool done_ok[VMM_MAX_DEVICES];
};

static void finish(struct devheap *dh, bool synced)
{
	if (synced) {
		heap_synced_upto(dh, dh->ahead_upto, dh->ahead_before);
		if (dh->narenas)
			dh->arenas[0]->st.syncs_ahead++;
	}
	dh->ahead_running = false;
	/* What was freed meanwhile may be enough for the next one. Not after a failure (a capture,
	 * a driver error): posting again at once would spin this thread on the heap's lock for as
	 * long as the cause lasts; the program's next free posts again. */
	if (synced)
		ahead_kick(dh);
}

static void *ahead_main(void *arg)
{
	struct vmm_core *core = arg;
	struct ahead *ah = core->ahead;

	pthread_mutex_lock(&ah->w.lock);
	for (;;) {
		struct devheap *dh;
		vmm_status st;
		uint64_t gen;
		int dev;

		/* Idle until a free posts a device: nothing waits on this thread meanwhile. */
		while (!ah->pending && !ah->w.stop)
			pthread_cond_wait(&ah->w.posted, &ah->w.lock);
		if (ah->w.stop)
			break;
		dev = __builtin_ctz(ah->pending);
		ah->pending &= ~(1u << dev);
		gen = ah->posted_gen[dev];
		pthread_mutex_unlock(&ah->w.lock);
		dh = atomic_load_explicit(&core->heaps[dev], memory_order_acquire);
		st = core->be->synchronize(core->be, dev, NULL);
		/* Said before the heap's lock is taken: a program's thread waiting in ahead_wait
		 * holds it. */
		pthread_mutex_lock(&ah->w.lock);
		ah->done_gen[dev] = gen;
		ah->done_ok[dev] = st == VMM_OK;
		pthread_cond_broadcast(&ah->synced);
		pthread_mutex_unlock(&ah->w.lock);
		pthread_mutex_lock(&dh->lock);
		finish(dh, st == VMM_OK);
		pthread_mutex_unlock(&dh->lock);
		pthread_mutex_lock(&ah->w.lock);
	}
	vmm_worker_exiting(&ah->w);
	pthread_mutex_unlock(&ah->w.lock);
	return NULL;
}

/* The core's thread, started at the first post (dh's lock held, which serializes this per
 * device; the core's init_lock serializes devices). NULL when it cannot be had: the core then
 * stops syncing ahead and keeps its own rules. */
static struct ahead *ahead_get(struct vmm_core *core)
{
	struct ahead *ah;

	ah = atomic_load_explicit(&core->ahead, memory_order_acquire);
	if (ah)
		return ah;
	pthread_mutex_lock(&core->init_lock);
	ah = core->ahead;
	if (ah || core->ahead_failed) {
		pthread_mutex_unlock(&core->init_lock);
		return ah;
	}
	ah = calloc(1, sizeof(*ah));
	if (ah) {
		vmm_cond_init_monotonic(&ah->synced);
		core->ahead = ah; /* before the thread, which reads it */
		if (!vmm_worker_start(&ah->w, ahead_main, core, "vmmshim-ahead")) {
			core->ahead = NULL;
			pthread_cond_destroy(&ah->synced);
			free(ah);
			ah = NULL;
		}
	}
	if (!ah) {
		core->ahead_failed = true;
		vmm_log(VMM_LOG_WARN, "no thread to synchronize ahead: freed memory is reused "
			"after the program's own synchronizations only");
	}
	pthread_mutex_unlock(&core->init_lock);
	return ah;
}

void ahead_kick(struct devheap *dh)
{
	struct vmm_core *core = dh->core;
	vmm_backend *be = core->be;
	struct ahead *ah;

	if (!core->cfg.sync_ahead_min || dh->ahead_running || !be->submitted ||
	    dh->quar_total < core->cfg.sync_ahead_min || heap_reclaim_free(dh) ||
	    vmm_capture_active())
		return;
	ah = ahead_get(core);
	if (!ah)
		return;
	dh->ahead_running = true;
	dh->ahead_taken = false;
	dh->ahead_upto = dh->quar_seq;
	/* Read before the synchronization begins (it begins after this post). */
	dh->ahead_before = be->submitted(be);
	pthread_mutex_lock(&ah->w.lock);
	ah->posted_gen[dh->dev] = ++dh->ahead_gen;
	ah->pending |= 1u << dh->dev;
	pthread_cond_signal(&ah->w.posted);
	pthread_mutex_unlock(&ah->w.lock);
}

bool ahead_wait(struct devheap *dh)
{
	struct ahead *ah = atomic_load_explicit(&dh->core->ahead, memory_order_acquire);
	struct timespec deadline;
	double t0;
	bool ok;

	if (!ah || !dh->ahead_running || dh->ahead_taken || dh->core->cfg.sync_whole)
		return false;
	t0 = vmm_now_s();
	vmm_deadline_ms(&deadline, AHEAD_WAIT_MS);
	pthread_mutex_lock(&ah->w.lock);
	/* Not begun yet (the thread is syncing another device): when it begins it covers all
	 * that the program's own sync would, later. */
	if (ah->pending & (1u << dh->dev)) {
		pthread_mutex_unlock(&ah->w.lock);
		return false;
	}
	heap_lock_wait_begin(dh, t0);
	while (ah->done_gen[dh->dev] < dh->ahead_gen)
		if (pthread_cond_timedwait(&ah->synced, &ah->w.lock, &deadline))
			break;
	heap_lock_wait_end(dh);
	ok = ah->done_gen[dh->dev] >= dh->ahead_gen && ah->done_ok[dh->dev];
	pthread_mutex_unlock(&ah->w.lock);
	/* Timed out or failed (a capture): nothing was drained here, and the caller does not skip
	 * its own sync; one wait per post. */
	dh->ahead_taken = true;
	dh->sync_done_s = vmm_now_s();
	dh->sync_wait_s += dh->sync_done_s - t0;
	if (!ok)
		return false;
	/* What the thread's finish will do once the program's thread lets go of the lock: here
	 * now, so that the request in progress can use it. Doing it twice changes nothing. */
	heap_synced_upto(dh, dh->ahead_upto, dh->ahead_before);
	if (dh->narenas)
		dh->arenas[0]->st.syncs_waited++;
	return true;
}

bool ahead_stop(struct vmm_core *core)
{
	struct ahead *ah = core->ahead;

	if (!ah)
		return true;
	if (!vmm_worker_stop(&ah->w, STOP_WAIT_MS)) {
		vmm_log(VMM_LOG_WARN, "the sync-ahead thread is still waiting for a device after "
			"%d s: the core is left to the end of the process", STOP_WAIT_MS / 1000);
		return false;
	}
	pthread_cond_destroy(&ah->synced);
	free(ah);
	core->ahead = NULL;
	return true;
}

void ahead_after_fork(struct vmm_core *core)
{
	/* The parent's state is the parent's (its lock may have been held at the fork). */
	core->ahead = NULL;
	core->ahead_failed = false;
	for (int d = 0; d < VMM_MAX_DEVICES; d++)
		if (core->heaps[d])
			core->heaps[d]->ahead_running = false;
}
