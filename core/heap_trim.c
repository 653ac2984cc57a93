/* Trimming (heap.h: vmm_trim): a device's cached free memory back to the driver.
 *
 * The quarantine's memory is free only after a device synchronization that began after its
 * frees. A trim makes it without the heap's lock, as the sync-ahead thread makes its own
 * (heap_ahead.c): the quarantine's sequence number and the backend's submission count are read
 * under the lock, the device synchronized without it, and what was quarantined up to that
 * number made free with it again (heap_synced_upto). Under the lock, a sharing peer's trim held
 * the program's own allocations and frees for the whole device queue at each ask, and a waiter
 * asks at every look. A trim between its synchronization and the lock is counted, so that the
 * core's destroy does not free the heap under it. */
#include "heap_trim.h"

#include <stdatomic.h>
#include <time.h>

#include "heap_internal.h"
#include "heap_phys.h"
#include "heap_reads.h"
#include "heap_records.h"
#include "heap_release.h"
#include "heap_share.h"
#include "heap_slab.h"
#include "log.h"
#include "offload/drain.h"

/* A trim may use the core's heaps without their locks until trim_leave. false: the core is
 * being destroyed. The count before the flag here, the flag before the count in trims_stop:
 * one of the two sees the other (sequentially consistent). */
static bool trim_enter(struct vmm_core *core)
{
	atomic_fetch_add(&core->trims_out, 1);
	if (!atomic_load(&core->closing))
		return true;
	atomic_fetch_sub(&core->trims_out, 1);
	return false;
}

static void trim_leave(struct vmm_core *core)
{
	atomic_fetch_sub(&core->trims_out, 1);
}

bool trims_stop(struct vmm_core *core, int wait_ms)
{
	atomic_store(&core->closing, true);
	for (int i = 0; atomic_load(&core->trims_out) > 0; i++) {
		if (i >= wait_ms) {
			vmm_log(VMM_LOG_WARN, "a trim is still waiting for a device after %d s: the "
				"core is left to the end of the process", wait_ms / 1000);
			return false;
		}
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	}
	return true;
}

void trims_after_fork(struct vmm_core *core)
{
	atomic_store(&core->trims_out, 0);
	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = atomic_load(&core->heaps[d]);

		if (dh)
			dh->trim_syncing = false;
	}
}

/* The quarantine made free, with the synchronization it needs made outside dh's lock (held on
 * entry and on return). A failed one (a capture in progress) leaves the quarantine as it was.
 * One trim per device synchronizes at a time: the others give back what is free without
 * waiting, so that a waiter asking again and again while the device's queue is long does not
 * hold one of the control server's workers in the driver per ask. */
static vmm_status reclaim_unlocked(struct devheap *dh, const vmm_limits *lim, vmm_error *err)
{
	struct vmm_core *core = dh->core;
	uint64_t upto, before;
	vmm_status st;

	if (!dh->quar_total || heap_device_idle(dh, &before))
		return heap_reclaim(dh, NULL, err); /* nothing to wait for: no sync */
	if (dh->trim_syncing)
		return VMM_OK;
	dh->trim_syncing = true;
	upto = dh->quar_seq;
	pthread_mutex_unlock(&dh->lock);
	/* Within limits (the exit's), on the drain's helper thread: a device that never finishes
	 * its work leaves the quarantine as it is. */
	st = lim ? vmm_drain(core->be, dh->dev, lim, err) :
		   core->be->synchronize(core->be, dh->dev, err);
	pthread_mutex_lock(&dh->lock);
	dh->trim_syncing = false;
	if (!st)
		heap_synced_upto(dh, upto, before);
	return st;
}

vmm_status vmm_trim(vmm_core *core, int dev, vmm_error *err)
{
	return vmm_trim_within(core, dev, NULL, err);
}

/* The quarantine reclaimed on dev (every device: dev < 0), within lim; with give_back, what is
 * free then goes back to the driver. */
static vmm_status trim_devices(vmm_core *core, int dev, const vmm_limits *lim, bool give_back,
			       vmm_error *err)
{
	vmm_status st = VMM_OK;

	if (dev >= core->ndev)
		return vmm_fail(err, VMM_E_INVALID, 0, "no device %d", dev);
	if (!trim_enter(core))
		return vmm_fail(err, VMM_E_BUSY, 0, "the heap is being torn down");
	for (int d = dev < 0 ? 0 : dev; d < (dev < 0 ? core->ndev : dev + 1); d++) {
		struct devheap *dh = heap_for(core, d, false, NULL);
		vmm_status s;

		/* Within bounded reads (the control server's), a heap whose allocator waits for
		 * its device is left as it is. */
		if (!dh || !heap_lock_read(dh))
			continue;
		/* A failed sync leaves the quarantine alone; what is free still goes back. */
		s = reclaim_unlocked(dh, lim, err);
		if (give_back) {
			for (int i = 0; i < dh->narenas; i++)
				slab_release_empty(dh, dh->arenas[i]);
			heap_release_free_handles(dh, 0);
			share_settle(dh);
		}
		pthread_mutex_unlock(&dh->lock);
		if (s && !st)
			st = s;
	}
	trim_leave(core);
	return st;
}

vmm_status vmm_trim_within(vmm_core *core, int dev, const struct vmm_limits *lim,
			   vmm_error *err)
{
	return trim_devices(core, dev, lim, true, err);
}

vmm_status vmm_reclaim_within(vmm_core *core, int dev, const struct vmm_limits *lim,
			      vmm_error *err)
{
	return trim_devices(core, dev, lim, false, err);
}
