/* One-stream reuse (heap.h): while all device work in flight is in the default stream, a freed
 * block needs no quarantine. Work on another stream pauses it: the devices are synchronized
 * before that work is issued (so it cannot overlap what a reused block's earlier users had in
 * flight), and frees are quarantined until a synchronization of the heap's own that began after
 * the last such submission was issued, which resumes it. A second context or device, or too
 * many pauses, end it for good. */
#include "heap_internal.h"

#include "log.h"

/* Past this many pauses a program uses other streams routinely: each pause costs a sync. */
#define ORDERED_MAX_PAUSES 32

void vmm_ordered_reuse_start(vmm_core *core)
{
	int off = ORDERED_OFF;

	atomic_compare_exchange_strong(&core->ordered, &off, ORDERED_ON);
}

bool vmm_ordered_reuse_on(vmm_core *core)
{
	return atomic_load_explicit(&core->ordered, memory_order_acquire) == ORDERED_ON;
}

/* Synchronize every device with a heap; the first failure is returned. */
static vmm_status sync_all(vmm_core *core, vmm_error *err)
{
	vmm_status first = VMM_OK;

	for (int d = 0; d < core->ndev; d++) {
		struct devheap *dh = atomic_load_explicit(&core->heaps[d], memory_order_acquire);
		vmm_status st;

		if (!dh)
			continue;
		st = core->be->synchronize(core->be, d, first ? NULL : err);
		if (st && !first)
			first = st;
	}
	return first;
}

/* A free that saw ORDERED_ON made its block reusable before the store below, so the work that
 * used the block was issued before it, and the synchronizations after it wait for that work. */
vmm_status vmm_ordered_reuse_end(vmm_core *core, vmm_error *err)
{
	int was = atomic_exchange(&core->ordered, ORDERED_ENDED);

	return was == ORDERED_ON ? sync_all(core, err) : VMM_OK;
}

vmm_status vmm_ordered_side_begin(vmm_core *core, vmm_error *err)
{
	int on = ORDERED_ON;

	atomic_fetch_add(&core->side_in, 1);
	if (!atomic_compare_exchange_strong(&core->ordered, &on, ORDERED_PAUSED))
		return VMM_OK;
	if (atomic_fetch_add(&core->pauses, 1) + 1 >= ORDERED_MAX_PAUSES) {
		atomic_store(&core->ordered, ORDERED_ENDED);
		vmm_log(VMM_LOG_INFO, "one-stream reuse ends: the program used other streams %d "
			"times", ORDERED_MAX_PAUSES);
	}
	return sync_all(core, err);
}

void vmm_ordered_side_end(vmm_core *core)
{
	atomic_fetch_add(&core->side_out, 1);
}

void heap_ordered_sync_begin(vmm_core *core, uint64_t *mark)
{
	uint64_t in = atomic_load(&core->side_in);

	/* A submission to another stream in progress: this sync may not cover its work. */
	*mark = in == atomic_load(&core->side_out) ? in : UINT64_MAX;
}

void heap_ordered_sync_done(vmm_core *core, uint64_t mark)
{
	int paused = ORDERED_PAUSED;

	if (mark != UINT64_MAX && atomic_load(&core->side_in) == mark)
		atomic_compare_exchange_strong(&core->ordered, &paused, ORDERED_ON);
}
