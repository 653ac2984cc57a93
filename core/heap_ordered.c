/* One-stream reuse (heap.h): while all of the process's device work is in one stream, a freed
 * block needs no quarantine. The shim says when that stops being true; ending then synchronizes
 * every device with a heap, once, so that work issued afterwards on another stream, context or
 * device cannot overlap what earlier users of a reused block still had in flight. */
#include "heap_internal.h"

#include "log.h"

void vmm_ordered_reuse_start(vmm_core *core)
{
	int off = ORDERED_OFF;

	atomic_compare_exchange_strong(&core->ordered, &off, ORDERED_ON);
}

bool vmm_ordered_reuse_on(vmm_core *core)
{
	return atomic_load_explicit(&core->ordered, memory_order_acquire) == ORDERED_ON;
}

/* A free that saw ORDERED_ON made its block reusable before the store below, so the work that
 * used the block was issued before it, and the synchronizations after it wait for that work. */
vmm_status vmm_ordered_reuse_end(vmm_core *core, vmm_error *err)
{
	vmm_status first = VMM_OK;

	if (atomic_exchange(&core->ordered, ORDERED_ENDED) != ORDERED_ON)
		return VMM_OK;
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
